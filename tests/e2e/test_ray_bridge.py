"""The Ray bridge end to end, on the real stack: KubeRay operator, Kueue, JobSet, a shared Ray head and
the bridge's Ray workers as real processes, the gate webhook called by the API server.

The last test scrapes both bridges with a real Prometheus while a Slurm job and a RayJob go through
them, and runs every dashboard query and every alert and recording rule against what it stored.

One Slurm version (22.05, the host's): the Ray side does not depend on it, and the pool is shared with
the Slurm bridge's ClusterQueue (2 CPU: quota for one 2-worker RayJob). Every test is checked for
leaks by the ``e2e`` fixture (the pool's) and by :meth:`RayPool.leaks` (RayJobs, JobSets, pods, Ray
nodes other than the head, jobs left pending or running in the head).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.admission import WorkloadState, condition, describe_workload
from bridge.sandbox.e2e import KUEUE, BridgeProcess, E2EStack
from bridge.sandbox.processes import StackError
from bridge.sandbox.prometheus import PrometheusServer
from bridge.sandbox.ray_e2e import RayPool
from bridge.sandbox.slurm import SlurmCluster
from bridge.slurmrest import SlurmClient
from tests.dashboard_queries import RULES_FILE
from tests.fixtures.e2e import eventually, finished, wait_job
from tests.fixtures.observability import (
    catalogue_problems,
    label_value_problems,
    panel_problems,
    rule_problems,
)
from tests.fixtures.slurm import started_cluster

pytestmark = pytest.mark.ray

TIMEOUT = 240.0
GATE_ANNOTATION = "bridge.k8s-bridge.io/ray-gate"
# The driver: joins the cluster, says where it ran (the Ray node's IP) and what it was given.
DRIVER = (
    'python -c "import ray, time; ray.init(); time.sleep({sleep}); '
    "print('RAN-ON', ray.util.get_node_ip_address(), flush=True)\""
)


@pytest.fixture(scope="module")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """The pool's Slurm side, 22.05 only for this module (see the module docstring)."""
    yield from started_cluster(SlurmCluster(version="22.05"))


@pytest.fixture(scope="module")
def ray_pool(e2e_stack: E2EStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayPool]:
    pool = RayPool(e2e_stack, workdir=tmp_path_factory.mktemp("ray-pool"))
    try:
        pool.start()
    except StackError as failed:
        pytest.fail(f"the Ray pool did not start: {failed}", pytrace=False)
    try:
        yield pool
    finally:
        pool.stop()


@pytest.fixture
def ray(e2e: E2EStack, ray_pool: RayPool) -> Iterator[RayPool]:
    """The module's Ray pool, checked for Ray-side leaks after the test (and the pool's by ``e2e``)."""
    yield ray_pool
    deadline = time.monotonic() + 90
    leaks = ray_pool.leaks()
    while leaks and time.monotonic() < deadline:
        time.sleep(1.0)
        leaks = ray_pool.leaks()
    for name in [
        j["metadata"]["name"]
        for j in ray_pool.pool.list_items(f"/apis/ray.io/v1/namespaces/{ray_pool.namespace}/rayjobs")
    ]:
        ray_pool.delete_rayjob(name)
    assert not leaks, "left behind after the test:\n  " + "\n  ".join(leaks)


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _quota_reserved_at(workload: dict[str, Any]) -> float:
    """When Kueue reserved the Workload's quota (its QuotaReserved condition), in epoch seconds."""
    reserved = condition(workload, "QuotaReserved")
    assert reserved is not None, f"no QuotaReserved condition: {workload.get('status')}"
    assert reserved.is_true, reserved
    assert reserved.last_transition_time, reserved
    return dt.datetime.fromisoformat(reserved.last_transition_time).timestamp()


def _status(ray: RayPool, name: str) -> dict[str, Any]:
    return (ray.get_rayjob(name) or {}).get("status") or {}


def _describe(ray: RayPool, bridge: BridgeProcess | None = None) -> str:
    lines = []
    for job in ray.pool.list_items(f"/apis/ray.io/v1/namespaces/{ray.namespace}/rayjobs"):
        status = job.get("status") or {}
        lines.append(
            f"RayJob {job['metadata']['name']}: {status.get('jobDeploymentStatus')} "
            f"{status.get('jobStatus')} "
            f"gate={job['metadata'].get('annotations', {}).get(GATE_ANNOTATION)}"
        )
    for js in ray.jobsets():
        lines.append(f"JobSet {js['metadata']['name']} suspend={js['spec'].get('suspend')}")
    for pod in ray.pods():
        lines.append(f"Pod {pod['metadata']['name']} {pod.get('status', {}).get('phase')}")
    for wl in [*ray.workloads(), *ray.pool.workloads()]:
        view = describe_workload(wl)
        owners = ",".join(ref.get("name", "") for ref in wl["metadata"].get("ownerReferences") or ())
        pod_counts = [p.get("count") for p in wl.get("spec", {}).get("podSets") or ()]
        lines.append(
            f"Workload {wl['metadata']['name']} of {owners}: {view.state} {view.message} "
            f"(priority {wl.get('spec', {}).get('priority')}, pod counts {pod_counts})"
        )
    queue = ray.pool.client.get(f"{KUEUE}/clusterqueues/{ray.pool.settings.cluster_queue}")
    usage = (queue.get("status") or {}).get("flavorsReservation")
    lines.append(f"ClusterQueue {ray.pool.settings.cluster_queue}: reserved {usage}")
    if bridge is not None:
        lines.append("bridge log:\n" + bridge.log_tail(40))
    return "\n".join(lines)


async def _job_status_is(ray: RayPool, name: str, wanted: set[str], bridge: BridgeProcess) -> dict[str, Any]:
    status: dict[str, Any] = await eventually(
        lambda: s if (s := _status(ray, name)).get("jobStatus") in wanted else None,
        timeout=TIMEOUT,
        what=f"RayJob {name} to reach {sorted(wanted)}",
        describe=lambda: _describe(ray, bridge),
    )
    return status


def _ran_on(ray: RayPool, status: dict[str, Any]) -> str:
    """The IP of the Ray node the job's driver ran on (Ray's job details and node table, which keeps
    dead nodes: the worker may be gone by now, and its logs with it)."""
    job = ray.ray_job(str(status["jobId"])) or {}
    by_id = {str(node.get("node_id")): str(node.get("node_ip")) for node in ray.ray_nodes()}
    return by_id[str(job.get("driver_node_id"))]


def _worker_ips(ray: RayPool, rayjob_uid: str) -> set[str]:
    pods = ray.pods(labelSelector=f"bridge.k8s-bridge.io/ray-job-uid={rayjob_uid}")
    return {str(p.get("status", {}).get("podIP")) for p in pods if p.get("status", {}).get("podIP")}


async def test_two_rayjobs_quota_for_one_the_second_waits_then_runs_on_its_own_workers(ray: RayPool) -> None:
    bridge = ray.bridge().start()
    ray.wait_gate_serving(bridge)
    first, second = _name("first"), _name("second")
    created = ray.create_rayjob(ray.rayjob(first, entrypoint=DRIVER.format(sleep=15), workers=2))
    assert created["metadata"]["annotations"].get(GATE_ANNOTATION), "the webhook did not gate the RayJob"
    await _job_status_is(ray, first, {"RUNNING", "SUCCEEDED"}, bridge)
    first_uid = created["metadata"]["uid"]
    first_workers = _worker_ips(ray, first_uid)
    assert len(first_workers) == 2

    later = ray.create_rayjob(ray.rayjob(second, entrypoint=DRIVER.format(sleep=0), workers=1))
    await _job_status_is(ray, second, {"PENDING"}, bridge)
    # While the first holds the quota, the second stays PENDING in Ray with its JobSet not admitted.
    while _status(ray, first).get("jobStatus") == "RUNNING":
        assert _status(ray, second).get("jobStatus") == "PENDING"
        await asyncio.sleep(1.0)
    done = await _job_status_is(ray, first, {"SUCCEEDED", "FAILED"}, bridge)
    assert done["jobStatus"] == "SUCCEEDED"
    assert _ran_on(ray, done) in first_workers

    second_done = await _job_status_is(ray, second, {"SUCCEEDED", "FAILED"}, bridge)
    assert second_done["jobStatus"] == "SUCCEEDED"
    node = _ran_on(ray, second_done)
    assert node not in first_workers
    assert node != ray.raycluster.get("status", {}).get("head", {}).get("podIP")
    for name in (first, second):
        ray.delete_rayjob(name)
    await eventually(lambda: not ray.jobsets(), timeout=TIMEOUT, what="the worker JobSets deleted",
                     describe=lambda: _describe(ray, bridge))  # fmt: skip
    assert later["metadata"]["annotations"].get(GATE_ANNOTATION)


async def test_a_rayjob_deleted_while_gated_is_cancelled_in_ray_and_its_jobset_goes(ray: RayPool) -> None:
    bridge = ray.bridge().start()
    ray.wait_gate_serving(bridge)
    name = _name("never")
    # Three 1-CPU workers cannot fit the 2-CPU quota: Kueue never admits them.
    ray.create_rayjob(ray.rayjob(name, entrypoint=DRIVER.format(sleep=0), workers=3))
    status = await _job_status_is(ray, name, {"PENDING"}, bridge)
    await eventually(lambda: len(ray.jobsets()) == 1, timeout=TIMEOUT, what="the worker JobSet",
                     describe=lambda: _describe(ray, bridge))  # fmt: skip
    submission = str(status["jobId"])
    ray.delete_rayjob(name)
    await eventually(lambda: ray.get_rayjob(name) is None, timeout=TIMEOUT, what="the RayJob let go",
                     describe=lambda: _describe(ray, bridge))  # fmt: skip
    job = ray.ray_job(submission)
    assert job is not None
    assert job["status"] == "FAILED", job  # cancelled: nothing left pending in the head's demand
    await eventually(lambda: not ray.jobsets(), timeout=TIMEOUT, what="the JobSet deleted")


async def test_a_rayjob_created_while_the_webhook_is_down_is_reported_not_silent(ray: RayPool) -> None:
    name = _name("ungated")
    # No bridge runs: the API server cannot reach the webhook and, as the chart sets it, ignores it.
    created = ray.create_rayjob(ray.rayjob(name, entrypoint=DRIVER.format(sleep=20)))
    assert GATE_ANNOTATION not in (created["metadata"].get("annotations") or {})
    bridge = ray.bridge().start()
    await eventually(
        lambda: bridge.metric("k8s_bridge_ray_ungated_rayjobs") == 1,
        timeout=TIMEOUT, what="the ungated RayJob counted", describe=lambda: _describe(ray, bridge),
    )  # fmt: skip
    events = await eventually(
        lambda: [e for e in ray.events(involved=name) if e.get("reason") == "Ungated"],
        timeout=TIMEOUT, what="an Ungated Event on the RayJob",
    )  # fmt: skip
    assert "webhook" in events[0]["message"]
    assert not ray.jobsets()  # an ungated job gets no workers: it is outside Kueue's quota
    await _job_status_is(ray, name, {"SUCCEEDED", "FAILED"}, bridge)
    ray.delete_rayjob(name)


async def test_the_bridge_killed_at_each_step_the_job_runs_exactly_once(ray: RayPool) -> None:
    bridge = ray.bridge().start()
    ray.wait_gate_serving(bridge)
    name = _name("crash")
    created = ray.create_rayjob(ray.rayjob(name, entrypoint=DRIVER.format(sleep=10), workers=1))
    bridge.kill()  # before it made the JobSet (or just after)
    bridge.start()
    await eventually(lambda: len(ray.jobsets()) == 1, timeout=TIMEOUT, what="the worker JobSet",
                     describe=lambda: _describe(ray, bridge))  # fmt: skip
    bridge.kill()  # queued or admitted
    bridge.start()
    await _job_status_is(ray, name, {"RUNNING", "SUCCEEDED"}, bridge)
    bridge.kill()  # running
    bridge.start()
    done = await _job_status_is(ray, name, {"SUCCEEDED", "FAILED"}, bridge)
    assert done["jobStatus"] == "SUCCEEDED"
    assert len(ray.jobsets()) <= 1
    mine = [j for j in ray.ray_jobs() if str(j.get("submission_id") or "").startswith(name)]
    assert [j.get("status") for j in mine] == ["SUCCEEDED"]
    assert created["metadata"]["annotations"].get(GATE_ANNOTATION)
    ray.delete_rayjob(name)
    await eventually(
        lambda: ray.get_rayjob(name) is None and not ray.jobsets(),
        timeout=TIMEOUT, what="the RayJob and its JobSet gone", describe=lambda: _describe(ray, bridge),
    )  # fmt: skip


async def test_one_pool_a_slurm_job_preempts_the_ray_workers_and_nothing_leaks(
    ray: RayPool, slurm_client: SlurmClient
) -> None:
    """A plain Job and a Ray job (both at the Ray side's low priority) fill the pool in Kueue's order;
    a Slurm job at the Slurm side's higher priority takes the Ray job's workers; the running Ray job
    then fails (Ray cannot move it), the bridge says so, and nothing is left."""
    pool = ray.pool
    ray_bridge = ray.bridge().start()
    ray.wait_gate_serving(ray_bridge)
    slurm_bridge = pool.bridge().start()
    jobs_path = f"/apis/batch/v1/namespaces/{pool.settings.namespace}/jobs"
    # The plain Job runs until the test deletes it: were it to end first, the Slurm job would take its
    # quota and nothing would be preempted, however long the Ray job took to start.
    plain = pool.batch_job("plain", command=["sleep", "3600"], cpu="1", priority=ray.priority)
    pool.client.create(jobs_path, plain)
    name = _name("preempted")
    try:
        # Kueue's order: the plain Job is admitted first, so the Ray job's Workload is the newer of the two
        # at the same priority, the one Kueue preempts first. Kueue compares the times the quota was
        # reserved as the QuotaReserved condition stores them, to the second, and breaks a tie by UID:
        # the Ray job is sent once the clock has left the plain Job's second.
        plain_workload = await eventually(
            lambda: next(
                (
                    wl
                    for wl in pool.workloads()
                    if describe_workload(wl).state is WorkloadState.ADMITTED
                    and any(ref.get("name") == "plain" for ref in wl["metadata"].get("ownerReferences") or ())
                ),
                None,
            ),
            timeout=TIMEOUT, what="the plain Job admitted",
        )  # fmt: skip
        plain_reserved = _quota_reserved_at(plain_workload)
        await asyncio.sleep(max(0.0, plain_reserved + 1.0 - time.time()))
        created = ray.create_rayjob(ray.rayjob(name, entrypoint=DRIVER.format(sleep=300), workers=1))
        await _job_status_is(ray, name, {"RUNNING"}, ray_bridge)
        (ray_workload,) = [
            wl
            for wl in ray.workloads()
            if any(
                ref.get("name", "").startswith(f"ray-{name}-") for ref in wl["metadata"]["ownerReferences"]
            )
        ]
        assert _quota_reserved_at(ray_workload) > plain_reserved, "both quotas reserved in the same second"

        cluster = pool.slurm
        job_id = cluster.sbatch(
            "-N1", "--ntasks-per-node=1", "--mem=400", "--job-name=urgent-hpc",
            f"--output={cluster.jobs_dir}/job-%j.out", script="#!/bin/sh\nsrun hostname\n",
        )  # fmt: skip
        failed = await _job_status_is(ray, name, {"FAILED", "SUCCEEDED", "STOPPED"}, ray_bridge)
        assert failed["jobStatus"] == "FAILED"
        events = await eventually(
            lambda: [e for e in ray.events(involved=name) if e.get("reason") == "WorkersPreempted"],
            timeout=TIMEOUT, what="a WorkersPreempted Event", describe=lambda: _describe(ray, ray_bridge),
        )  # fmt: skip
        assert "Kueue" in events[0]["message"]
        done = await wait_job(
            slurm_client,
            job_id,
            until=finished,
            timeout=TIMEOUT,
            what="to finish",
            stack=pool,
            bridge=slurm_bridge,
        )
        assert done.state == "COMPLETED", done
        await eventually(lambda: not ray.jobsets(), timeout=TIMEOUT, what="the Ray worker JobSet deleted",
                         describe=lambda: _describe(ray, ray_bridge))  # fmt: skip
        assert created["metadata"]["annotations"].get(GATE_ANNOTATION)
    finally:
        ray.delete_rayjob(name)
        pool.client.delete(f"{jobs_path}/plain")


async def test_a_real_prometheus_scraping_both_bridges_answers_every_panel_and_rule(
    ray: RayPool, slurm_client: SlurmClient, tmp_path: Path
) -> None:
    """One Slurm job and one RayJob through the bridges (both leader-elected), scraped every second;
    then: every exported series is documented and every documented family was exported, no label value
    names a job, every panel query returns numbers over the run, and every rule loads, evaluates and
    reads series (with the labels and exact label values it matches) that were stored."""
    pool = ray.pool
    slurm_bridge = pool.bridge("--leader-elect").start()
    ray_bridge = ray.bridge("--leader-elect").start()
    ray.wait_gate_serving(ray_bridge)
    prometheus = PrometheusServer(
        group=pool.group,
        workdir=tmp_path / "prometheus",
        targets={"slurm": slurm_bridge.metrics_port, "ray": ray_bridge.metrics_port},
        rule_files=[RULES_FILE],
    ).start()
    since = time.time()
    name = _name("observed")
    try:
        await eventually(lambda: prometheus.targets_up() == {"slurm": "up", "ray": "up"},
                         timeout=TIMEOUT, what="both bridges scraped")  # fmt: skip
        cluster = pool.slurm
        job_id = cluster.sbatch(
            "-N1", "--ntasks-per-node=1", "--mem=400", "--job-name=observed",
            # Long enough for the bridge to see it RUNNING (the release latency is observed then).
            f"--output={cluster.jobs_dir}/job-%j.out", script="#!/bin/sh\nsrun sleep 8\n",
        )  # fmt: skip
        done = await wait_job(slurm_client, job_id, until=finished, timeout=TIMEOUT, what="to finish",
                              stack=pool, bridge=slurm_bridge)  # fmt: skip
        assert done.state == "COMPLETED", done
        # Long enough for the bridge to see it RUNNING (a 1 s driver can end between two of its looks,
        # and admitted -> running is then never observed).
        created = ray.create_rayjob(ray.rayjob(name, entrypoint=DRIVER.format(sleep=8), workers=1))
        assert created["metadata"]["annotations"].get(GATE_ANNOTATION)
        finished_ray = await _job_status_is(ray, name, {"SUCCEEDED", "FAILED"}, ray_bridge)
        assert finished_ray["jobStatus"] == "SUCCEEDED"
        # Both releases scraped, and the SLO rules evaluated over them.
        for stored in (
            'k8s_bridge_slurm_admitted_to_running_seconds_count{bridge="slurm"} > 0',
            'k8s_bridge_ray_admitted_to_running_seconds_count{bridge="ray"} > 0',
            'k8s_bridge:slo_errors:ratio_rate5m{slo="slurm_release"} >= 0',
            'k8s_bridge:slo_errors:ratio_rate5m{slo="ray_release"} >= 0',
        ):
            await eventually(lambda q=stored: prometheus.query(q), timeout=TIMEOUT, what=stored)  # type: ignore[misc]
        end = time.time()

        jobsets = {js["metadata"]["name"] for js in ray.jobsets()}
        identities = {name, str(created["metadata"]["uid"]), *jobsets}
        problems = [
            *catalogue_problems(prometheus, bridge="slurm", since=since),
            *catalogue_problems(prometheus, bridge="ray", since=since),
            *label_value_problems(prometheus, since=since, identities=identities),
            *panel_problems(prometheus, start=since, end=end),
            *rule_problems(prometheus, since=since),
        ]
        alerts = prometheus.api("alerts")["alerts"]
        active = sorted({f"{a['labels']['alertname']} {a['state']}" for a in alerts})
        print("alerts pending or firing at the end of the run:", active or "none")
        assert problems == [], "\n".join(problems)
    finally:
        prometheus.stop()
        ray.delete_rayjob(name)
    await eventually(lambda: not ray.jobsets(), timeout=TIMEOUT, what="the worker JobSet deleted",
                     describe=lambda: _describe(ray, ray_bridge))  # fmt: skip
