"""The Slurm bridge end to end, on both Slurm versions: jobs Slurm would not start take no quota, an
administrator's hold is respected, a lost node sends its job back to Kueue, and every reason reaches
the Slurm user.

The stack is ``tests/e2e/conftest.py``'s: quota for exactly two 1-CPU slurmd pods, runner nodes that
really run each slurmd, the real Kueue and JobSet. Each scenario once deadlocked or wasted that quota,
overrode someone's intent or left a job stuck (issue 10).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from bridge.admission import WorkloadState
from bridge.api.slurm_job import JobState, SlurmJob
from bridge.api.slurm_node import SlurmNode
from bridge.sandbox.e2e import BridgeProcess, E2EStack
from bridge.sandbox.slurm import SANDBOX_LICENSE
from bridge.slurmrest import SlurmClient
from tests.fixtures.e2e import (
    TASKS_SCRIPT,
    bridge_ready,
    eventually,
    finished,
    jobset,
    jobset_of_job,
    on_its_own_nodes,
    running_pods,
    scancel,
    stack_summary,
    wait_job,
    workload_state_of,
)
from translators.slurm import is_own_node_name, job_selector, jobset_name

pytestmark = pytest.mark.slurm

JOB_TIMEOUT = 150.0
CLEANUP_TIMEOUT = 60.0


def one_node(stack: E2EStack, *options: str, name: str, script: str = TASKS_SCRIPT) -> int:
    cluster = stack.slurm
    return cluster.sbatch(
        "-N1", "--ntasks-per-node=1", "--mem=400", f"--job-name={name}",
        f"--output={cluster.jobs_dir}/job-%j.out", "--open-mode=append", *options, script=script,
    )  # fmt: skip


def two_nodes(stack: E2EStack, *options: str, name: str, script: str = TASKS_SCRIPT) -> int:
    return one_node(stack, "-N2", *options, name=name, script=script)


async def started_bridge(stack: E2EStack, *args: str) -> BridgeProcess:
    bridge = stack.bridge(*args).start()
    await eventually(lambda: bridge_ready(bridge), timeout=60, what="the bridge to serve /metrics")
    return bridge


async def wait_gone(stack: E2EStack, job_id: int, *, bridge: BridgeProcess) -> None:
    selector = job_selector(stack.cluster_name, job_id)

    def gone() -> bool:
        return (
            jobset_of_job(stack, job_id) is None
            and not stack.pods(labelSelector=selector)
            and not any(is_own_node_name(job_id, n) for n in stack.slurm_nodes())
        )

    await eventually(
        gone, timeout=CLEANUP_TIMEOUT, what=f"job {job_id}'s JobSet, pods and nodes to go",
        describe=lambda: stack_summary(stack, bridge=bridge),
    )  # fmt: skip


def no_jobset(stack: E2EStack, job_id: int) -> bool:
    return jobset_of_job(stack, job_id) is None


def events(stack: E2EStack, *, reason: str) -> list[dict[str, Any]]:
    path = f"/apis/events.k8s.io/v1/namespaces/{stack.settings.namespace}/events"
    return [e for e in stack.list_items(path) if e.get("reason") == reason]


def comment_says(text: str) -> Callable[[SlurmJob], bool]:
    return lambda job: text in job.comment


def slurmctld_up(stack: E2EStack) -> bool:
    return "is UP" in stack.slurm.scontrol("ping", check=False)


def quiet_log(bridge: BridgeProcess) -> None:
    """Nothing expected shows up as a warning, an error or a traceback: in particular not Slurm's 2015
    (an update that landed), which is logged at debug level only."""
    loud = []
    for line in bridge.log_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        quiet_about = entry.get("event", "").startswith("watch failed")  # the API server's idle watches
        if entry.get("level") in ("warning", "error", "critical") and not quiet_about:
            loud.append(line[:300])
    assert not loud, "\n".join(loud)


async def _kept_node(slurm: SlurmClient, name: str) -> SlurmNode | None:
    node = await slurm.get_node(name)
    return node if node.is_drained_or_draining else None


# --- 1, 2 and 6 ---------------------------------------------------------------------------------


async def test_jobs_slurm_would_not_start_take_no_quota_and_an_administrators_hold_stands(
    e2e: E2EStack, slurm_client: SlurmClient
) -> None:
    """Quota for two 1-CPU pods, one taken by a running job. A (-N2) waits for the whole quota; B
    depends on A; C may not begin for an hour; D is held by an administrator. Before, B was bridged,
    admitted onto the free CPU, released and sat PENDING (Dependency) holding it, so A never got its
    two: a deadlock. C held a CPU for the hour; D was released on admission."""
    cluster = e2e.slurm
    # The holder keeps its CPU until the test lets it go (a file it waits for), so that A's wait in
    # Kueue, and its place in line, are seen however slowly the comments come (one a minute per job).
    release = cluster.jobs_dir / "release-holder"
    holder = one_node(
        e2e, name="holder", script=TASKS_SCRIPT + f"while [ ! -e {release} ]; do sleep 1; done\n"
    )
    c = one_node(e2e, "--begin=now+3600", name="in-an-hour")
    d = one_node(e2e, name="held-by-admin")
    # As root: an administrator's hold, before any bridge saw the job. scontrol reports the 2015 that
    # slurmctld adds to an update that landed (the bridge partition has no node yet): checked below.
    cluster.scontrol("hold", str(d), check=False)
    assert (await slurm_client.get_job(d)).held_by == "admin"
    bridge = await started_bridge(e2e)
    a = b = 0
    try:
        running = await wait_job(
            slurm_client, holder, until=lambda j: j.is_running, timeout=JOB_TIMEOUT, what="to run",
            stack=e2e, bridge=bridge,
        )  # fmt: skip
        # Its node is kept for it while it runs (drained: DRAINED, never IDLE, once the job ends).
        (holder_node,) = running.nodes
        kept = await eventually(
            lambda: _kept_node(slurm_client, holder_node),
            timeout=30,
            what=f"{holder_node} to be kept for the holder",
        )
        assert kept.reason == f"k8s-bridge: kept for job {holder} until it ends", kept
        a = two_nodes(e2e, name="needs-both")
        b = one_node(e2e, f"--dependency=afterok:{a}", name="after-a")
        for job_id, says in ((b, "waits for its dependency"), (c, "may not start before"),
                             (d, "held by an administrator")):  # fmt: skip
            waiting = await wait_job(
                slurm_client, job_id, until=comment_says(says), timeout=30,
                what=f"to say '{says}' in its comment", stack=e2e, bridge=bridge,
            )  # fmt: skip
            assert waiting.comment.startswith("k8s-bridge: waiting: "), waiting.comment
            assert waiting.hold
            assert no_jobset(e2e, job_id)
        # A waits in Kueue for the CPU the holder has, and says so where its user looks (squeue %k).
        # Its first comment may say that Kueue has not tried it yet; the next one (at most a minute
        # later, the budget's pace for a shown comment) says why it cannot be admitted.
        queued = await wait_job(
            slurm_client, a, until=comment_says("insufficient unused quota"),
            timeout=150, what="to say why it waits in Kueue", stack=e2e, bridge=bridge,
        )  # fmt: skip
        assert queued.comment.startswith("k8s-bridge: queued in Kueue"), queued.comment
        # and where it stands in line, from Kueue's visibility API: first (B, C and D take no place)
        placed = await wait_job(
            slurm_client, a, until=comment_says("(1st in its ClusterQueue)"), timeout=150,
            what="to say where it stands in its ClusterQueue", stack=e2e, bridge=bridge,
        )  # fmt: skip
        assert placed.comment.startswith("k8s-bridge: queued in Kueue (1st in its ClusterQueue): "), (
            placed.comment
        )
        assert workload_state_of(e2e, jobset_name(e2e.cluster_name, a)) != WorkloadState.ADMITTED
        cluster.host_path(release).touch()

        done_a = await wait_job(
            slurm_client, a, until=finished, timeout=2 * JOB_TIMEOUT, what="to run once the holder is done",
            stack=e2e, bridge=bridge,
        )  # fmt: skip
        assert done_a.state == JobState.COMPLETED, done_a
        assert not done_a.comment.startswith("k8s-bridge:"), done_a.comment  # cleared by the release
        done_b = await wait_job(
            slurm_client,
            b,
            until=finished,
            timeout=JOB_TIMEOUT,
            what="to run after A",
            stack=e2e,
            bridge=bridge,
        )
        assert done_b.state == JobState.COMPLETED, done_b
        assert done_b.start_time is not None
        assert done_a.end_time is not None
        assert done_b.start_time >= done_a.end_time
        for job_id in (c, d):
            left = await slurm_client.get_job(job_id)
            assert left.is_pending, left
            assert left.hold, left
            assert no_jobset(e2e, job_id)

        # Released by the administrator, D is the bridge's like any other job: held, then bridged.
        # Released once B is cleaned up: B ends as soon as it starts, before the bridge sees it run
        # and drains its node, and until its cleanup a poll later that node is IDLE, where Slurm
        # would start D at once (ADR 0003: the window that remains).
        await eventually(lambda: no_jobset(e2e, b), timeout=60, what=f"job {b}'s JobSet and nodes to go")
        cluster.scontrol("release", str(d), check=False)  # 2015 too, and it lands
        await wait_job(
            slurm_client, d, until=lambda j: not no_jobset(e2e, d), timeout=30,
            what="to get its JobSet once released",
            stack=e2e, bridge=bridge,
        )  # fmt: skip
        bridged = await slurm_client.get_job(d)  # held again by the bridge, or already released by it
        assert bridged.hold or set(bridged.required_nodes) == {f"b{d}-0"}, bridged
        assert bridge.alive(), bridge.log_tail()
        quiet_log(bridge)
    finally:
        for job_id in (holder, a, b, c, d):
            if job_id:
                scancel(e2e, job_id)
    for job_id in (holder, a, b, c, d):
        await wait_gone(e2e, job_id, bridge=bridge)


async def test_a_job_in_a_reservation_not_yet_active_takes_no_quota_until_it_starts(
    e2e: E2EStack, slurm_client: SlurmClient
) -> None:
    """A reservation of licenses only (ANY_NODES: its jobs may use any nodes) starting in a day, and a
    job submitted into it. Before, the job was bridged, admitted and released at once, then sat
    PENDING (Reason=Reservation) with its pod and quota for the day. Now it waits unbridged, says why,
    and once an administrator moves the reservation's start to now it is bridged and runs on the
    bridge's nodes."""
    cluster = e2e.slurm
    name = "soon"
    cluster.scontrol(
        "create", "reservation", f"ReservationName={name}", "StartTime=now+1day", "Duration=60",
        f"Licenses={SANDBOX_LICENSE}:1", "Flags=ANY_NODES", f"Users={cluster.user}",
    )  # fmt: skip
    bridge = await started_bridge(e2e)
    job_id = 0
    try:
        job_id = one_node(e2e, f"--reservation={name}", name="in-a-reservation")
        says = f"its reservation {name} starts at"
        waiting = await wait_job(
            slurm_client, job_id, until=comment_says(says), timeout=30,
            what=f"to say '{says}' in its comment", stack=e2e, bridge=bridge,
        )  # fmt: skip
        assert waiting.hold, waiting
        assert no_jobset(e2e, job_id)
        cluster.scontrol("update", f"ReservationName={name}", "StartTime=now")
        done = await wait_job(
            slurm_client, job_id, until=finished, timeout=JOB_TIMEOUT,
            what="to run once its reservation is active", stack=e2e, bridge=bridge,
        )  # fmt: skip
        assert done.state == JobState.COMPLETED, done
        assert done.nodes == (f"b{job_id}-0",), done
        assert bridge.alive(), bridge.log_tail()
        quiet_log(bridge)
    finally:
        if job_id:
            scancel(e2e, job_id)
        cluster.scontrol("delete", f"ReservationName={name}", check=False)
    await wait_gone(e2e, job_id, bridge=bridge)


# --- 3 and 4 ------------------------------------------------------------------------------------


async def test_a_slurmd_pod_deleted_under_a_running_job_sends_it_back_to_kueue_and_it_runs_again(
    e2e: E2EStack, slurm_client: SlurmClient
) -> None:
    """A node failure or an eviction, as Kubernetes shows it. Before, slurmd's exit 0 on SIGTERM made
    that index Succeeded, no replacement came, the Workload stayed Admitted, and the job stayed
    RUNNING with no batch step until cancelled by hand."""
    bridge = await started_bridge(e2e)
    job_id = two_nodes(e2e, name="loses-a-node", script=TASKS_SCRIPT + "sleep 30\n")
    name = jobset_name(e2e.cluster_name, job_id)
    await wait_job(
        slurm_client, job_id, until=lambda j: j.is_running, timeout=JOB_TIMEOUT, what="to run",
        stack=e2e, bridge=bridge,
    )  # fmt: skip
    first_uid = (jobset(e2e, name) or {})["metadata"]["uid"]
    selector = job_selector(e2e.cluster_name, job_id)
    pods = running_pods(e2e, selector=selector)
    assert len(pods) == 2
    victim = pods[1]["metadata"]["name"]
    e2e.client.delete(f"/api/v1/namespaces/{e2e.settings.namespace}/pods/{victim}")

    def requeued(job: SlurmJob) -> bool:
        return job.restart_count >= 1 and job.is_pending and job.hold

    await wait_job(
        slurm_client, job_id, until=requeued, timeout=60, what="to go back to the queue, held",
        stack=e2e, bridge=bridge,
    )  # fmt: skip
    notes = [e.get("note", "") for e in events(e2e, reason="RequeueHeld")]
    assert any(f"Slurm job {job_id}" in n and "lost 1 slurmd pod" in n for n in notes), notes

    def replaced() -> bool:
        current = jobset_of_job(e2e, job_id)
        return current is not None and current["metadata"]["uid"] != first_uid

    await eventually(
        replaced, timeout=90, what="a new JobSet for Kueue to decide on",
        describe=lambda: stack_summary(e2e, bridge=bridge),
    )  # fmt: skip
    done = await wait_job(
        slurm_client, job_id, until=finished, timeout=2 * JOB_TIMEOUT, what="to run again and complete",
        stack=e2e, bridge=bridge,
    )  # fmt: skip
    assert done.state == JobState.COMPLETED, done
    assert on_its_own_nodes(done, 2), done  # on two nodes, not one
    # the new JobSet's: of a later run, so that nothing sent to the first run's nodes reached them
    assert all(n.startswith(f"b{job_id}r") for n in done.nodes), done
    assert slurmctld_up(e2e)
    await wait_gone(e2e, job_id, bridge=bridge)
    assert bridge.alive(), bridge.log_tail()


async def test_a_job_cancelled_while_its_lost_node_is_replaced_is_cleaned_up_and_slurmctld_stays_up(
    e2e: E2EStack, slurm_client: SlurmClient
) -> None:
    """A pod of a running job deleted, then the job cancelled by its user while the bridge puts it back
    in the queue: what once crashed slurmctld 22.05.8 and left the job COMPLETING with its JobSet
    stuck. Nothing may stay COMPLETING, nothing may leak, slurmctld stays up. (A cancel that lands in
    the milliseconds between the bridge's fresh read and its requeue-hold is undone by Slurm, which
    requeues finished batch jobs too: docs/controller.md, "A lost node".)"""
    bridge = await started_bridge(e2e)
    job_id = two_nodes(e2e, name="cancelled-lost", script=TASKS_SCRIPT + "sleep 300\n")
    await wait_job(
        slurm_client, job_id, until=lambda j: j.is_running, timeout=JOB_TIMEOUT, what="to run",
        stack=e2e, bridge=bridge,
    )  # fmt: skip
    selector = job_selector(e2e.cluster_name, job_id)
    victim = running_pods(e2e, selector=selector)[0]["metadata"]["name"]
    e2e.client.delete(f"/api/v1/namespaces/{e2e.settings.namespace}/pods/{victim}")
    await wait_job(
        slurm_client, job_id, until=lambda j: j.restart_count >= 1, timeout=60, what="to be requeued",
        stack=e2e, bridge=bridge,
    )  # fmt: skip
    scancel(e2e, job_id)
    deadline = time.monotonic() + CLEANUP_TIMEOUT
    while time.monotonic() < deadline and not finished(await slurm_client.get_job(job_id)):
        assert slurmctld_up(e2e), stack_summary(e2e, bridge=bridge)
        time.sleep(1.0)
    ended = await slurm_client.get_job(job_id)
    assert finished(ended), ended
    assert ended.state == JobState.CANCELLED, ended
    await wait_gone(e2e, job_id, bridge=bridge)
    assert slurmctld_up(e2e)
    assert bridge.alive(), bridge.log_tail()


async def test_slurmctld_killed_as_a_job_loses_a_node_the_job_still_runs_once_and_nothing_sticks(
    e2e: E2EStack, slurm_client: SlurmClient
) -> None:
    """slurmctld crashes (SIGKILL) right after a slurmd pod of a running job is deleted, and comes back
    from its saved state 5 s later. Before, a job in this spot stayed COMPLETING with its JobSet stuck
    deleting (finalizer and nodes kept) until cancelled by hand: its requeue waited on a node whose
    slurmd was gone. Now the job goes back to the queue, runs again on two new pods and completes."""
    bridge = await started_bridge(e2e)
    job_id = two_nodes(e2e, name="ctld-crash", script=TASKS_SCRIPT + "sleep 30\n")
    await wait_job(
        slurm_client, job_id, until=lambda j: j.is_running, timeout=JOB_TIMEOUT, what="to run",
        stack=e2e, bridge=bridge,
    )  # fmt: skip
    # slurmctld saves its state a moment after a change; what it had not saved, a crash loses (the
    # job itself, even): that is Slurm's to keep, not the bridge's, so the crash comes once it has.
    time.sleep(5.0)
    selector = job_selector(e2e.cluster_name, job_id)
    victim = running_pods(e2e, selector=selector)[0]["metadata"]["name"]
    e2e.client.delete(f"/api/v1/namespaces/{e2e.settings.namespace}/pods/{victim}")
    e2e.slurm.kill_slurmctld()
    time.sleep(5.0)
    e2e.slurm.restart_slurmctld()
    done = await wait_job(
        slurm_client, job_id, until=finished, timeout=3 * JOB_TIMEOUT, what="to run again and complete",
        stack=e2e, bridge=bridge,
    )  # fmt: skip
    assert done.state == JobState.COMPLETED, done
    assert done.restart_count >= 1, done
    assert on_its_own_nodes(done, 2), done
    await wait_gone(e2e, job_id, bridge=bridge)
    assert slurmctld_up(e2e)
    assert bridge.alive(), bridge.log_tail()
