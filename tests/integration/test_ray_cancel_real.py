"""The Ray bridge's cancel of a gated job, against a real Ray head (the pinned ``ray`` package).

Why it needs real Ray: the claim is about Ray's own scheduler and JobManager. A job gated on a
resource no node has stays PENDING, ``ray job stop`` leaves it pending (and it would run the day the
resource appears), and killing its supervisor actor, which is what the bridge's canceller job does,
fails it for good: a worker that joins with the resource afterwards runs nothing. A fake would
prove none of that.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import time

import pytest

from bridge.ray.dashboard import CANCEL_ENV, DirectTransport, RayDashboard, canceller_submission_id
from bridge.sandbox.ray import RayHead

pytestmark = pytest.mark.ray

NAMESPACE, CLUSTER = "team-a", "shared"
TIMEOUT = 90.0


def _dashboard(head: RayHead) -> RayDashboard:
    return RayDashboard(DirectTransport(lambda namespace, cluster: head.dashboard_url))


async def _status_becomes(head: RayHead, job_id: str, wanted: set[str], *, timeout: float = TIMEOUT) -> str:
    deadline = time.monotonic() + timeout
    status = ""
    while time.monotonic() < deadline:
        status = await asyncio.to_thread(head.job_status, job_id)
        if status in wanted:
            return status
        await asyncio.sleep(0.5)
    raise AssertionError(f"job {job_id} still {status}, not {wanted}, after {timeout} s")


async def test_cancel_fails_a_pending_job_for_good_where_stop_does_not(ray_head: RayHead) -> None:
    gate = "k8s-bridge-cancel1"
    job_id = await asyncio.to_thread(ray_head.submit, "echo ran", entrypoint_resources={gate: 1})
    dashboard = _dashboard(ray_head)
    await asyncio.to_thread(ray_head.stop_job, job_id)
    await asyncio.sleep(3)
    assert await asyncio.to_thread(ray_head.job_status, job_id) == "PENDING"  # stop did not cancel it
    assert not await dashboard.job_finished(namespace=NAMESPACE, cluster=CLUSTER, job_id=job_id)

    await dashboard.cancel_pending(namespace=NAMESPACE, cluster=CLUSTER, job_id=job_id)
    await dashboard.cancel_pending(namespace=NAMESPACE, cluster=CLUSTER, job_id=job_id)  # idempotent
    assert await _status_becomes(ray_head, job_id, {"FAILED", "STOPPED", "SUCCEEDED"}) == "FAILED"
    assert await dashboard.job_finished(namespace=NAMESPACE, cluster=CLUSTER, job_id=job_id)
    cancellers = [
        job for job in await dashboard.list_jobs(namespace=NAMESPACE, cluster=CLUSTER)
        if job.get("submission_id") == canceller_submission_id(job_id)
    ]  # fmt: skip
    assert len(cancellers) == 1
    (canceller,) = cancellers
    assert canceller["runtime_env"]["env_vars"] == {CANCEL_ENV: job_id}
    assert job_id not in canceller["entrypoint"]  # the id travels in the environment only

    # A worker with the gate joins: the cancelled job must not run after all.
    worker = await asyncio.to_thread(ray_head.add_worker, {gate: 1})
    try:
        await asyncio.sleep(5)
        assert await asyncio.to_thread(ray_head.job_status, job_id) == "FAILED"
        assert "ran" not in await asyncio.to_thread(ray_head.job_logs, job_id)
    finally:
        await asyncio.to_thread(ray_head.remove_worker, worker)


async def test_an_unknown_job_counts_as_finished(ray_head: RayHead) -> None:
    dashboard = _dashboard(ray_head)
    assert await dashboard.job_finished(namespace=NAMESPACE, cluster=CLUSTER, job_id="never-submitted")
    await dashboard.cancel_pending(namespace=NAMESPACE, cluster=CLUSTER, job_id="never-submitted")
    names = {
        job.get("submission_id") for job in await dashboard.list_jobs(namespace=NAMESPACE, cluster=CLUSTER)
    }
    assert canceller_submission_id("never-submitted") not in names


# Runs as the job's driver: half of the tasks confined by the gate label, half not; prints where each ran.
SPILL_DRIVER = """
import json, os, ray
ray.init()
gate = os.environ["GATE"]
here = lambda: ray.get_runtime_context().get_node_id()
confined = ray.remote(num_cpus=1, label_selector={"k8s-bridge.io/ray-gate": gate})(here)
free = ray.remote(num_cpus=1)(here)
print("NODES", json.dumps({
    "confined": ray.get([confined.remote() for _ in range(6)]),
    "free": ray.get([free.remote() for _ in range(6)]),
}), flush=True)
"""


async def test_tasks_that_select_the_gate_label_stay_on_the_jobs_workers(ray_head: RayHead) -> None:
    """The strongest confinement Ray offers: the bridge labels its workers with the gate."""
    gate = "k8s-bridge-spill1"
    own = await asyncio.to_thread(
        ray_head.add_worker, {gate: 1}, num_cpus=2, labels={"k8s-bridge.io/ray-gate": gate}
    )
    other = await asyncio.to_thread(ray_head.add_worker, {"k8s-bridge-other": 1}, num_cpus=2)
    try:
        job_id = await asyncio.to_thread(
            ray_head.submit,
            "python -c " + shlex.quote(SPILL_DRIVER),
            entrypoint_resources={gate: 1},
            runtime_env={"env_vars": {"GATE": gate}},
        )
        assert await _status_becomes(ray_head, job_id, {"SUCCEEDED", "FAILED"}) == "SUCCEEDED"
        logs = await asyncio.to_thread(ray_head.job_logs, job_id)
        (line,) = [x for x in logs.splitlines() if x.startswith("NODES ")]
        placed = json.loads(line.removeprefix("NODES "))
        ids_by_ip = {n["node_ip"]: n["node_id"] for n in await asyncio.to_thread(ray_head.nodes)}
        own_id = ids_by_ip[own.address]
        assert set(placed["confined"]) == {own_id}
        assert ids_by_ip[other.address] != own_id
    finally:
        await asyncio.to_thread(ray_head.remove_worker, own)
        await asyncio.to_thread(ray_head.remove_worker, other)
