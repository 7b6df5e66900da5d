"""reconcilers.slurm.decide: the state table, crash-recovery states, the guard, hostile input.

Every test builds an observation by hand (no I/O) and checks the actions in order. The
property test at the end walks the whole state space and checks the invariants that keep a job
from running on the wrong nodes or being lost.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.admission import JobSetState, JobSetView, WorkloadState, WorkloadView
from bridge.api.slurm_job import JobState, SlurmJob
from bridge.api.slurm_node import NodeState, SlurmNode
from bridge.slurmrest.versions import adapter_for
from reconcilers.slurm import (
    COMMENT_PREFIX,
    KEPT_FOR_JOB,
    AddFinalizer,
    ClearComment,
    ConvertHold,
    CreateJobSet,
    Decision,
    DeleteChildJobs,
    DeleteJobSet,
    DeleteNodes,
    DeletePods,
    DownNodes,
    DrainNodes,
    Hold,
    Observed,
    Phase,
    PinAndRelease,
    PodsView,
    RemoveFinalizer,
    ReportUnservable,
    RequeueHold,
    ResumeNodes,
    decide,
    node_job_id,
    unservable_comment,
)
from reconcilers.slurm_waiting import BridgeHold
from tests.fixtures.slurm_decisions import (
    FEATURE,
    IDLE,
    NAMES,
    job,
    jobset,
    kinds,
    node,
    observe,
    released,
    running,
    workload,
)
from translators.slurm import (
    FINALIZER,
    LABEL_JOB_ID,
    LABEL_RUN,
    SHAPE_PREFIX,
    Translation,
    shape_fingerprint,
)

SLURM_DATA = Path(__file__).parents[1] / "slurm" / "data"


# --- row 1: held, no JobSet -> create it suspended, or explain why not --------------------------


def test_held_job_without_jobset_gets_a_suspended_jobset_with_the_finalizer() -> None:
    d = decide(observe(job()))
    assert kinds(d) == ["create_jobset"]
    (create,) = d.actions
    assert isinstance(create, CreateJobSet)
    manifest = create.manifest
    assert manifest["metadata"]["name"] == "slurm-hpc-42"
    assert manifest["spec"]["suspend"] is True
    assert FINALIZER in manifest["metadata"]["finalizers"]
    assert d.phase is Phase.QUEUED


def test_user_hold_is_turned_into_the_bridges_admin_hold_once_its_jobset_exists() -> None:
    """Never before: a conversion that landed beside a failed create would leave an admin hold without
    a JobSet and without the bridge's mark, which is an administrator's hold to the bridge."""
    user_held = job(state_reason="JobHeldUser", admin_comment="")
    assert kinds(decide(observe(user_held))) == ["create_jobset"]
    d = decide(observe(user_held, js=jobset(), wl=workload(WorkloadState.PENDING)))
    assert kinds(d) == ["convert_hold"]
    convert = d.actions[0]
    assert isinstance(convert, ConvertHold)
    assert isinstance(convert, Hold)  # executed as a hold
    assert convert.best_effort
    assert convert.admin_comment == BridgeHold().text()  # marked: an admin hold of the bridge's


def test_creating_the_jobset_and_converting_the_hold_run_at_once_without_a_fresh_read() -> None:
    """The bulk of a burst of held jobs: both actions are independent and harmless on a job the
    cache shows a poll behind (reconcilers/slurm.py's docstring goes through every case), so the
    reconciler neither reads the job again nor waits for one before the other."""
    d = decide(observe(job(state_reason="JobHeldUser")))
    assert d.concurrent
    assert not d.needs_confirmation
    assert not decide(observe(job())).needs_confirmation


def test_a_reason_written_earlier_is_cleared_once_the_job_is_servable() -> None:
    d = decide(observe(job(comment=COMMENT_PREFIX + "held: too many nodes")))
    assert kinds(d) == ["create_jobset", "clear_comment"]
    # Confirmed first: the user may have written their own comment since the last poll.
    assert d.needs_confirmation


def test_a_users_own_comment_is_never_cleared() -> None:
    assert kinds(decide(observe(job(comment="my experiment")))) == ["create_jobset"]


def test_unservable_job_stays_held_with_the_reason_in_its_comment() -> None:
    d = decide(observe(job(node_count=100000)))
    assert kinds(d) == ["report_unservable"]
    (report,) = d.actions
    assert isinstance(report, ReportUnservable)
    assert report.code == "TooManyNodes"
    assert report.comment.startswith(COMMENT_PREFIX)
    assert d.phase is Phase.UNSERVABLE


def test_unservable_reason_is_written_only_when_it_differs() -> None:
    first = decide(observe(job(node_count=100000)))
    (report,) = first.actions
    assert isinstance(report, ReportUnservable)
    again = decide(observe(job(node_count=100000, comment=report.comment)))
    assert again.actions == ()
    assert again.phase is Phase.UNSERVABLE


def test_no_new_jobset_beyond_max_bridged_jobs() -> None:
    d = decide(observe(job(), bridged_jobs=1000, max_bridged_jobs=1000))
    assert d.actions == ()
    assert d.requeue_after
    assert d.phase is Phase.HELD
    assert kinds(decide(observe(job(), bridged_jobs=999, max_bridged_jobs=1000))) == ["create_jobset"]


def test_held_job_outside_bridged_partitions_is_not_ours() -> None:
    d = decide(observe(job(partition="debug")))
    assert d.actions == ()
    assert d.phase is None


# --- row 2: JobSet not admitted -> nothing ------------------------------------------------------


@pytest.mark.parametrize("state", [None, WorkloadState.PENDING, WorkloadState.QUOTA_RESERVED])
def test_not_admitted_means_nothing_to_do(state: WorkloadState | None) -> None:
    wl = workload(state) if state is not None else None
    d = decide(observe(job(), js=jobset(), wl=wl, nodes=IDLE))
    assert d.actions == ()
    assert d.phase is Phase.QUEUED


def test_a_jobset_without_the_finalizer_gets_it_back() -> None:
    d = decide(observe(job(), js=jobset(), wl=workload(WorkloadState.PENDING), has_finalizer=False))
    assert d.actions == (AddFinalizer(),)


# --- row 3: admitted and all nodes registered idle -> pin and release in one call ----------------


def test_admitted_with_all_nodes_idle_pins_and_releases() -> None:
    d = decide(
        observe(job(), js=jobset(state=JobSetState.ACTIVE), wl=workload(WorkloadState.ADMITTED), nodes=IDLE)
    )
    assert d.actions == (
        PinAndRelease(nodes=NAMES, constraints=FEATURE, begin_now=False, clear_admin_comment=True),
    )
    assert d.phase is Phase.RELEASING


def test_the_release_keeps_the_jobs_own_features_in_the_constraint() -> None:
    nodes = tuple(node(n, features=("k8sbridge", FEATURE, "ib")) for n in NAMES)
    d = decide(observe(job(features="ib"), js=jobset(), wl=workload(WorkloadState.ADMITTED), nodes=nodes))
    (pin,) = d.actions
    assert isinstance(pin, PinAndRelease)
    assert pin.constraints == f"{FEATURE}&ib"


REQUEUED_AT = datetime(2026, 12, 2, 1, 0, 0, tzinfo=UTC)
NOW = REQUEUED_AT.timestamp()


def requeued(**fields: Any) -> SlurmJob:
    """Job 42 requeued at REQUEUED_AT: Slurm reset its submit time and put its begin 121 s later."""
    base: dict[str, Any] = {
        "restart_count": 1,
        "submit_time": REQUEUED_AT,
        "eligible_time": REQUEUED_AT + timedelta(seconds=121),
    }
    return job(**(base | fields))


SOON_AFTER = (REQUEUED_AT + timedelta(seconds=20)).timestamp()


def test_a_requeued_job_is_released_with_begin_time_now() -> None:
    d = decide(
        observe(requeued(), js=jobset(), wl=workload(WorkloadState.ADMITTED), nodes=IDLE, now=SOON_AFTER)
    )
    (pin,) = d.actions
    assert isinstance(pin, PinAndRelease)
    assert pin.begin_now


def test_the_release_never_moves_a_begin_time_its_user_set() -> None:
    """A user's --begin that Slurm kept over the requeue (it lay ahead) is not Slurm's delay: such a job
    is not bridged at all while it lies ahead; once it has passed there is nothing to move."""
    users = requeued(eligible_time=REQUEUED_AT + timedelta(hours=2))
    d = decide(observe(users, js=jobset(), wl=workload(WorkloadState.ADMITTED), nodes=IDLE, now=SOON_AFTER))
    assert not any(isinstance(a, PinAndRelease) for a in d.actions)
    assert kinds(d)[-1] == "delete_jobset" or "remove_finalizer" in kinds(d)
    passed = (REQUEUED_AT + timedelta(seconds=200)).timestamp()
    d = decide(observe(requeued(), js=jobset(), wl=workload(WorkloadState.ADMITTED), nodes=IDLE, now=passed))
    (pin,) = d.actions
    assert isinstance(pin, PinAndRelease)
    assert not pin.begin_now
    never_requeued = job(submit_time=REQUEUED_AT, eligible_time=REQUEUED_AT + timedelta(seconds=60))
    d = decide(
        observe(never_requeued, js=jobset(), wl=workload(WorkloadState.ADMITTED), nodes=IDLE, now=SOON_AFTER)
    )
    assert not any(isinstance(a, PinAndRelease) for a in d.actions)


@pytest.mark.parametrize(
    "nodes",
    [
        (),
        (node("b42-0"),),
        (node("b42-0"), node("b42-1", state=NodeState.ALLOCATED)),
        (node("b42-0"), node("b42-1", flags=frozenset({"DYNAMIC_NORM", "DRAIN"}))),
        (node("b42-0"), node("b42-1", flags=frozenset({"DYNAMIC_NORM", "NOT_RESPONDING"}))),
        (node("b42-0"), node("b42-1", features=("k8sbridge",))),
    ],
    ids=["none", "one of two", "one busy", "one draining", "one not responding", "one without feature"],
)
def test_admitted_but_nodes_not_all_ready_waits_and_looks_again(nodes: tuple[SlurmNode, ...]) -> None:
    d = decide(observe(job(), js=jobset(), wl=workload(WorkloadState.ADMITTED), nodes=nodes))
    assert d.actions == ()
    assert d.phase is Phase.ADMITTED
    assert d.requeue_after is not None
    assert 0 < d.requeue_after <= 2


# --- row 4: running -> nothing -------------------------------------------------------------------


def test_running_on_its_admitted_nodes_needs_nothing() -> None:
    d = decide(observe(running(), js=jobset(state=JobSetState.ACTIVE), wl=workload(WorkloadState.ADMITTED)))
    assert d.actions == ()
    assert d.phase is Phase.RUNNING


def test_running_while_the_workload_is_not_in_the_cache_yet_waits() -> None:
    assert decide(observe(running(), js=jobset())).actions == ()


# --- row 5: evicted / preempted -> back to held before Slurm requeues it onto dead nodes ---------


@pytest.mark.parametrize(
    "state", [WorkloadState.PREEMPTED, WorkloadState.EVICTED, WorkloadState.PENDING, WorkloadState.FINISHED]
)
def test_running_job_whose_workload_lost_admission_is_requeue_held(state: WorkloadState) -> None:
    d = decide(observe(running(), js=jobset(state=JobSetState.ACTIVE), wl=workload(state, "Preempted")))
    assert kinds(d) == ["requeue_hold"]
    assert d.phase is Phase.EVICTED
    assert d.requeue_after


@pytest.mark.parametrize("state", [WorkloadState.PREEMPTED, WorkloadState.EVICTED])
def test_released_but_not_started_job_is_held_again_on_eviction(state: WorkloadState) -> None:
    d = decide(observe(released(), js=jobset(), wl=workload(state), nodes=IDLE))
    assert kinds(d) == ["hold"]
    assert d.phase is Phase.EVICTED


def test_requeue_in_progress_is_waited_for() -> None:
    d = decide(observe(job(hold=False, state_flags=frozenset({"COMPLETING"})), js=jobset(),
                       wl=workload(WorkloadState.PREEMPTED)))  # fmt: skip
    assert d.actions == ()
    assert d.requeue_after


def v0038_job(name: str) -> SlurmJob:
    """A real 22.05 REST response (tests/unit/slurm/data), parsed as the bridge parses it, as job 42."""
    body = json.loads((SLURM_DATA / name).read_text(encoding="utf-8"))
    (parsed,) = adapter_for("v0.0.38").parse_jobs(body).jobs
    return parsed.model_copy(
        update={"job_id": 42, "nodes": NAMES, "required_nodes": NAMES, "features": FEATURE}
    )


@pytest.mark.parametrize(
    "wl", [workload(WorkloadState.PREEMPTED, "Preempted"), workload(WorkloadState.ADMITTED)]
)
def test_requeue_hold_under_way_on_slurm_2205_keeps_the_jobset(wl: WorkloadView) -> None:
    """22.05 shows a requeue-hold in progress as plain COMPLETING: waited for, never cleaned up (the
    JobSet keeps its place in Kueue's queue and is resumed when re-admitted)."""
    requeuing = v0038_job("rest-v0.0.38-requeuehold-completing.json")
    d = decide(observe(requeuing, js=jobset(state=JobSetState.ACTIVE), wl=wl, nodes=IDLE,
                       pods=PodsView(active=2, running=2, active_nodes=frozenset(NAMES))))  # fmt: skip
    assert d.actions == ()
    assert d.requeue_after
    assert d.phase is Phase.EVICTED
    held = v0038_job("rest-v0.0.38-requeuehold-pending.json")
    d = decide(observe(held, js=jobset(), wl=workload(WorkloadState.PREEMPTED), nodes=IDLE,
                       pods=PodsView(active=2, running=2, active_nodes=frozenset(NAMES))))  # fmt: skip
    # the pin goes first, and the hold carries the bridge's mark (it becomes an admin hold)
    assert d.actions == (
        Hold(reason="its pinned nodes are going away", unpin=NAMES, admin_comment=BridgeHold().text()),
    )
    assert d.phase is Phase.EVICTED
    unpinned = held.model_copy(update={"required_nodes": ()})
    d = decide(observe(unpinned, js=jobset(), wl=workload(WorkloadState.PREEMPTED), nodes=IDLE,
                       pods=PodsView(active=2, running=2, active_nodes=frozenset(NAMES))))  # fmt: skip
    assert d.actions == ()
    assert d.phase is Phase.EVICTED


# --- a held job keeps no pin to nodes that are going or gone --------------------------------------


@pytest.mark.parametrize(
    ("js", "wl", "nodes"),
    [
        (jobset(), workload(WorkloadState.PREEMPTED), ()),  # requeue-held, nodes already deleted
        (jobset(), workload(WorkloadState.EVICTED), IDLE),  # requeue-held, nodes still there
        (jobset(deleting=True), workload(WorkloadState.ADMITTED), IDLE),  # JobSet deleted: before cleanup
        (jobset(state=JobSetState.FAILED), workload(WorkloadState.FINISHED), IDLE),  # JobSet ended
        (None, None, ()),  # JobSet gone: before a new one
    ],
    ids=["preempted, nodes gone", "evicted", "JobSet deleting", "JobSet ended", "no JobSet"],
)
def test_a_held_job_pinned_to_its_own_nodes_is_unpinned_before_they_go(
    js: JobSetView | None, wl: WorkloadView | None, nodes: tuple[SlurmNode, ...]
) -> None:
    """A requeue-hold keeps the release's pin; slurmctld fails a pending job pinned to deleted nodes
    at its next reconfigure (NODE_FAIL), so the pin goes before (or once) its nodes do."""
    pinned = job(restart_count=1, required_nodes=NAMES, features=FEATURE)
    d = decide(observe(pinned, js=js, wl=wl, nodes=nodes))
    assert d.actions == (Hold(reason="its pinned nodes are going away", unpin=NAMES),)
    assert d.needs_confirmation


def test_a_pin_to_an_earlier_runs_nodes_is_cleared_even_after_the_job_was_resized() -> None:
    """A crash cut the requeue's unpin short and the JobSet went; the user then gave the held job a
    third node. Its pin to the first run's two nodes is still the bridge's, cleared before a new
    JobSet: a pending job pinned to deleted nodes fails at slurmctld's next reconfigure."""
    resized = job(node_count=3, cpus=3, restart_count=1, required_nodes=NAMES, features=FEATURE)
    d = decide(observe(resized))
    assert d.actions == (Hold(reason="its pinned nodes are going away", unpin=NAMES),)


def test_a_readmitted_pinned_job_keeps_its_pin_for_the_release() -> None:
    pinned = job(restart_count=1, required_nodes=NAMES, features=FEATURE)
    waiting = decide(
        observe(pinned, js=jobset(state=JobSetState.ACTIVE), wl=workload(WorkloadState.ADMITTED))
    )
    assert waiting.actions == ()
    assert waiting.phase is Phase.ADMITTED


def test_a_users_own_nodelist_is_never_unpinned() -> None:
    users = job(required_nodes=("n1", "n2"))
    d = decide(observe(users, js=jobset(), wl=workload(WorkloadState.EVICTED)))
    assert not any(isinstance(a, Hold) for a in d.actions)


def test_job_cancelled_while_running_on_slurm_2205_keeps_its_nodes_until_it_has_completed() -> None:
    """The cleanup starts (drain, the JobSet goes) while the job is COMPLETING, but no node of it is
    deleted before it has completed: slurmctld 22.05.8 crashed when a node of a completing job was
    deleted and another of its nodes set DOWN afterwards. A node whose slurmd is gone is set DOWN,
    which lets Slurm finish the job."""
    ending = v0038_job("rest-v0.0.38-scancel-completing.json")
    assert ending.is_finished
    assert ending.is_completing
    both = PodsView(active=2, running=2, present=2, active_nodes=frozenset(NAMES))
    d = decide(observe(ending, js=jobset(state=JobSetState.ACTIVE), wl=workload(WorkloadState.ADMITTED),
                       nodes=IDLE, pods=both))  # fmt: skip
    assert kinds(d) == ["drain_nodes", "delete_jobset"]
    assert d.requeue_after
    silent = (node("b42-0"), node("b42-1", flags=frozenset({"DYNAMIC_NORM", "COMPLETING", "NOT_RESPONDING"})))
    d = decide(observe(ending, js=jobset(state=JobSetState.ACTIVE, deleting=True),
                       wl=workload(WorkloadState.ADMITTED), nodes=silent, pods=both))  # fmt: skip
    assert kinds(d) == ["drain_nodes", "down_nodes"]
    down = d.actions[1]
    assert isinstance(down, DownNodes)
    assert down.names == ("b42-1",)
    done = ending.model_copy(update={"state_flags": frozenset()})
    d = decide(observe(done, js=jobset(deleting=True), nodes=IDLE))
    assert kinds(d) == ["drain_nodes", "delete_nodes", "remove_finalizer"]


def test_held_again_after_preemption_stale_nodes_go_once_the_pods_are_gone() -> None:
    down = tuple(node(n, state=NodeState.DOWN) for n in NAMES)
    d = decide(observe(job(restart_count=1), js=jobset(), wl=workload(WorkloadState.PREEMPTED), nodes=down))
    assert d.actions == (DeleteNodes(names=NAMES),)
    assert d.phase is Phase.EVICTED
    with_pods = observe(
        job(restart_count=1), js=jobset(), wl=workload(WorkloadState.PREEMPTED), nodes=down,
        pods=PodsView(active=2, running=2),
    )  # fmt: skip
    assert decide(with_pods).actions == ()


def test_readmitted_after_preemption_is_pinned_and_released_again_with_begin_time() -> None:
    again = requeued(required_nodes=NAMES, features=FEATURE)
    d = decide(
        observe(
            again, js=jobset(state=JobSetState.ACTIVE), wl=workload(WorkloadState.ADMITTED), nodes=IDLE,
            now=SOON_AFTER,
        )
    )  # fmt: skip
    assert d.actions == (
        PinAndRelease(nodes=NAMES, constraints=FEATURE, begin_now=True, clear_admin_comment=True),
    )


# --- row 6: finished / cancelled / vanished -> drain, delete JobSet, delete nodes, finalizer -----


@pytest.mark.parametrize("state", [JobState.COMPLETED, JobState.CANCELLED, JobState.FAILED, JobState.TIMEOUT])
def test_finished_job_is_cleaned_up_in_order(state: JobState) -> None:
    d = decide(observe(running(state=state), js=jobset(state=JobSetState.ACTIVE),
                       wl=workload(WorkloadState.ADMITTED), nodes=IDLE))  # fmt: skip
    assert kinds(d) == ["drain_nodes", "delete_jobset", "delete_nodes", "remove_finalizer"]
    assert d.actions[0] == DrainNodes(names=NAMES, reason=d.actions[0].reason)  # type: ignore[attr-defined]
    assert d.actions[2] == DeleteNodes(names=NAMES)
    assert d.phase is Phase.FINISHING


@pytest.mark.parametrize(
    "wl", [None, workload(WorkloadState.PENDING), workload(WorkloadState.QUOTA_RESERVED)]
)
def test_cancelled_before_admission_deletes_the_jobset_without_node_calls(wl: WorkloadView | None) -> None:
    """A JobSet that never left suspension had no pod, so no node of it can exist: no delete of the
    recorded names (one ``scontrol delete`` each on 22.05, on every look until the GC is done)."""
    cancelled = job(state=JobState.CANCELLED, hold=False)
    d = decide(observe(cancelled, js=jobset(), wl=wl))
    assert kinds(d) == ["delete_jobset", "remove_finalizer"]
    # No pod to wait for: not in the foreground (the garbage collector's retries kept hundreds of
    # such JobSets for many minutes).
    assert d.actions[0] == DeleteJobSet(foreground=False)
    # ... and while the garbage collector finishes the foreground deletion: nothing at all.
    assert decide(observe(cancelled, js=jobset(deleting=True), wl=wl, has_finalizer=False)).actions == ()


@pytest.mark.parametrize(
    ("js", "wl", "pods"),
    [
        (jobset(state=JobSetState.ACTIVE), workload(WorkloadState.ADMITTED), PodsView()),
        (jobset(state=JobSetState.ACTIVE), None, PodsView()),
        (jobset(), workload(WorkloadState.PREEMPTED), PodsView()),
        (jobset(), workload(WorkloadState.EVICTED), PodsView()),
        (jobset(), workload(WorkloadState.FINISHED), PodsView()),
        (jobset(), workload(WorkloadState.PENDING), PodsView(present=1)),
        (jobset(), None, PodsView(active=1)),
        (jobset(state=JobSetState.FAILED), workload(WorkloadState.PENDING), PodsView(present=2)),
    ],
    ids=["admitted", "active, no workload", "preempted", "evicted", "finished", "terminating pod",
         "active pod", "failed pods"],
)  # fmt: skip
def test_recorded_nodes_are_deleted_whenever_one_could_exist_unseen(
    js: JobSetView, wl: WorkloadView | None, pods: PodsView
) -> None:
    """A node registered after the last node poll is not in the observation: while a pod of the JobSet
    may have run, the names recorded on it are deleted before the finalizer goes."""
    d = decide(observe(running(state=JobState.CANCELLED), js=js, wl=wl, pods=pods))
    assert DeleteNodes(names=NAMES) in d.actions
    assert DeleteJobSet(foreground=True) in d.actions  # kept until its pods are gone
    assert kinds(d)[-2:] == ["delete_nodes", "remove_finalizer"]
    # Still so once the finalizer is off, while the GC deletes the pods.
    gc = decide(observe(None, js=replace(js, deleting=True), wl=wl, pods=pods, has_finalizer=False))
    assert gc.actions == (DeleteNodes(names=NAMES),)


def test_nodes_the_node_source_has_seen_are_always_deleted() -> None:
    down = tuple(node(n, state=NodeState.DOWN) for n in NAMES)
    d = decide(observe(job(state=JobState.CANCELLED, hold=False), js=jobset(), nodes=down))
    assert kinds(d) == ["delete_jobset", "delete_nodes", "remove_finalizer"]
    assert d.actions[1] == DeleteNodes(names=NAMES, down_already=NAMES)  # never DOWN twice


def test_vanished_job_with_jobset_present_is_treated_as_finished() -> None:
    d = decide(
        observe(None, js=jobset(state=JobSetState.ACTIVE), wl=workload(WorkloadState.ADMITTED), nodes=IDLE)
    )
    assert kinds(d) == ["drain_nodes", "delete_jobset", "delete_nodes", "remove_finalizer"]


def test_crash_after_jobset_delete_resumes_with_nodes_and_finalizer() -> None:
    drained = tuple(node(n, flags=frozenset({"DYNAMIC_NORM", "DRAIN"})) for n in NAMES)
    d = decide(observe(None, js=jobset(deleting=True), nodes=drained))
    assert kinds(d) == ["delete_nodes", "remove_finalizer"]


def test_crash_after_node_delete_only_the_finalizer_is_left() -> None:
    was_running = jobset(state=JobSetState.ACTIVE, deleting=True)
    d = decide(observe(None, js=was_running))
    assert kinds(d) == ["delete_nodes", "remove_finalizer"]  # recorded names: deleting a gone node is a no-op
    assert decide(observe(None, js=was_running, has_finalizer=False)).actions == (DeleteNodes(names=NAMES),)


def test_a_job_missing_from_the_cache_is_confirmed_before_its_cleanup() -> None:
    d = decide(observe(None, js=jobset(state=JobSetState.ACTIVE), wl=workload(WorkloadState.ADMITTED)))
    assert d.needs_confirmation
    assert not d.concurrent  # the finalizer goes last, after the nodes
    ended = decide(observe(running(state=JobState.COMPLETED), js=jobset(state=JobSetState.ACTIVE)))
    assert kinds(ended) == ["delete_jobset", "delete_nodes", "remove_finalizer"]
    assert not ended.needs_confirmation  # an end state in the cache is final
    assert not decide(observe(None)).needs_confirmation  # nothing to do: nothing to confirm


def test_leftover_nodes_of_a_finished_job_without_jobset_are_deleted() -> None:
    d = decide(observe(running(state=JobState.COMPLETED), nodes=IDLE))
    assert kinds(d) == ["drain_nodes", "delete_nodes"]


def test_finished_and_clean_forgets_the_job() -> None:
    d = decide(observe(running(state=JobState.COMPLETED)))
    assert d.actions == ()
    assert d.phase is None


# --- row 7: JobSet gone (or going) under a still-held job -> clean, then create again ------------


def test_jobset_deleted_by_someone_while_held_releases_its_nodes_and_finalizer() -> None:
    d = decide(observe(job(), js=jobset(deleting=True), wl=workload(WorkloadState.ADMITTED), nodes=IDLE))
    assert kinds(d) == ["drain_nodes", "delete_nodes", "remove_finalizer"]
    assert "delete_jobset" not in kinds(d)
    # ... and once it is gone, the held job gets a new one
    assert kinds(decide(observe(job()))) == ["create_jobset"]


def test_jobset_deleted_under_a_running_job_takes_the_job_back_first() -> None:
    d = decide(observe(running(), js=jobset(deleting=True), wl=workload(WorkloadState.ADMITTED), nodes=IDLE))
    assert kinds(d) == ["requeue_hold"]


def test_jobset_deleted_under_a_released_job_holds_it_first() -> None:
    d = decide(observe(released(), js=jobset(deleting=True), wl=workload(WorkloadState.ADMITTED), nodes=IDLE))
    assert kinds(d) == ["hold"]


def test_jobset_that_ended_before_the_job_ran_is_replaced() -> None:
    d = decide(observe(job(), js=jobset(state=JobSetState.FAILED), wl=workload(WorkloadState.FINISHED)))
    assert kinds(d) == ["delete_jobset", "delete_nodes", "remove_finalizer"]


# --- row 16: held, changed by its user since its JobSet was made -> replaced ----------------------

MADE_FOR = shape_fingerprint(job())
"""The shape recorded on job 42's JobSet (``jobset()``, nodes ``NAMES``): two nodes, 1000 MB."""
CLEANUP = ["drain_nodes", "delete_jobset", "delete_nodes", "remove_finalizer"]


def test_a_job_grown_while_admitted_has_its_jobset_replaced_instead_of_waiting_forever() -> None:
    """Kueue admitted two pods; the job now wants three: no pod would ever register b42-2."""
    grown = job(node_count=3, cpus=3)
    o = observe(grown, js=jobset(state=JobSetState.ACTIVE), wl=workload(WorkloadState.ADMITTED), nodes=IDLE,
                pods=PodsView(active=2, running=2), jobset_shape=MADE_FOR)  # fmt: skip
    d = decide(o)
    assert kinds(d) == CLEANUP
    assert d.actions[2] == DeleteNodes(names=NAMES)
    assert d.phase is Phase.QUEUED
    assert d.needs_confirmation
    assert not d.concurrent


def test_a_job_shrunk_while_admitted_is_not_released_onto_the_old_shape() -> None:
    """Without the replacement it would be pinned to b42-0, a node sized by Kueue for another job."""
    shrunk = job(node_count=1, cpus=1)
    d = decide(
        observe(shrunk, js=jobset(), wl=workload(WorkloadState.ADMITTED), nodes=IDLE, jobset_shape=MADE_FOR)
    )
    assert "pin_and_release" not in kinds(d)
    assert kinds(d) == CLEANUP
    assert d.needs_confirmation


@pytest.mark.parametrize(
    "changed",
    [
        {"node_count": 3},
        {"memory_per_node_mb": 4000},
        {"features": "ib"},
        {"time_limit_minutes": 30},
        {"account": "physics"},
    ],
    ids=",".join,
)
def test_a_job_changed_while_queued_has_its_jobset_replaced(changed: dict[str, Any]) -> None:
    """Not admitted yet: the JobSet never left suspension, so no node call (row 1's rule)."""
    d = decide(
        observe(job(**changed), js=jobset(), wl=workload(WorkloadState.PENDING), jobset_shape=MADE_FOR)
    )
    assert kinds(d) == ["delete_jobset", "remove_finalizer"]
    assert d.phase is Phase.QUEUED
    assert d.needs_confirmation


def test_a_job_changed_while_evicted_has_its_jobset_replaced() -> None:
    d = decide(observe(job(node_count=3, restart_count=1), js=jobset(), wl=workload(WorkloadState.EVICTED),
                       jobset_shape=MADE_FOR))  # fmt: skip
    assert kinds(d) == ["delete_jobset", "delete_nodes", "remove_finalizer"]
    assert d.needs_confirmation


@pytest.mark.parametrize(
    "wl", [workload(WorkloadState.PREEMPTED), workload(WorkloadState.ADMITTED)], ids=["evicted", "admitted"]
)
def test_a_requeue_held_job_changed_by_its_user_loses_the_old_pin_before_its_jobset(wl: WorkloadView) -> None:
    """Released, preempted (a requeue-hold keeps the pin), then grown by its user: still pinned to
    b42-0 and b42-1, which the new shape's names do not match. The pin goes first, as before any
    removal of the nodes it names; then the JobSet is replaced."""
    pinned = job(node_count=3, cpus=3, restart_count=1, required_nodes=NAMES, features=FEATURE)
    d = decide(observe(pinned, js=jobset(), wl=wl, nodes=IDLE, jobset_shape=MADE_FOR))
    (hold,) = d.actions
    assert isinstance(hold, Hold)
    assert hold.unpin == NAMES
    assert d.needs_confirmation
    unpinned = pinned.model_copy(update={"required_nodes": ()})
    d = decide(observe(unpinned, js=jobset(), wl=wl, nodes=IDLE, jobset_shape=MADE_FOR))
    assert kinds(d) == CLEANUP


def test_once_the_old_jobset_is_gone_the_job_gets_one_of_its_new_shape() -> None:
    grown = job(node_count=3, cpus=3)
    # While the garbage collector deletes it: row 4, nothing deleted twice.
    going = decide(observe(grown, js=jobset(deleting=True), has_finalizer=False, jobset_shape=MADE_FOR))
    assert "delete_jobset" not in kinds(going)
    (create,) = decide(observe(grown)).actions
    assert isinstance(create, CreateJobSet)
    assert create.manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] == 3
    assert create.manifest["metadata"]["annotations"]["bridge.k8s-bridge.io/slurm-job-shape"] != MADE_FOR


def test_a_job_changed_into_one_that_cannot_be_served_is_told_why_once_its_jobset_is_gone() -> None:
    huge = job(node_count=100000)
    assert kinds(
        decide(observe(huge, js=jobset(), wl=workload(WorkloadState.PENDING), jobset_shape=MADE_FOR))
    ) == [
        "delete_jobset",
        "remove_finalizer",
    ]
    assert kinds(decide(observe(huge))) == ["report_unservable"]


def test_a_job_moved_out_of_the_bridged_partitions_is_let_go() -> None:
    moved = job(partition="debug")
    d = decide(observe(moved, js=jobset(), wl=workload(WorkloadState.PENDING), jobset_shape=MADE_FOR))
    assert kinds(d) == ["delete_jobset", "remove_finalizer"]
    assert decide(observe(moved)).actions == ()


@pytest.mark.parametrize(
    "recorded",
    ["", "v0-0123456789abcdef", "something else"],
    ids=["older bridge", "other version", "foreign"],
)
def test_a_jobset_without_a_record_of_this_version_is_never_replaced(recorded: str) -> None:
    grown = job(node_count=3, cpus=3)
    o = observe(grown, js=jobset(), wl=workload(WorkloadState.ADMITTED), nodes=IDLE, jobset_shape=recorded)
    d = decide(o)
    assert d.actions == ()
    assert d.phase is Phase.ADMITTED  # as before the record existed: waiting for its nodes


def test_the_bridges_own_release_and_requeue_hold_do_not_replace_the_jobset() -> None:
    """Pinned by the release, then requeue-held (pin kept, restarted): still the JobSet's job."""
    again = requeued(required_nodes=NAMES, features=FEATURE, comment=COMMENT_PREFIX + "x")
    assert shape_fingerprint(again) == MADE_FOR
    d = decide(
        observe(
            again, js=jobset(), wl=workload(WorkloadState.ADMITTED), nodes=IDLE, jobset_shape=MADE_FOR,
            now=SOON_AFTER,
        )
    )  # fmt: skip
    assert d.actions == (
        PinAndRelease(
            nodes=NAMES, constraints=FEATURE, begin_now=True, clear_comment=True, clear_admin_comment=True
        ),
    )


@pytest.mark.parametrize(
    "o",
    [
        observe(released(node_count=3), js=jobset(), wl=workload(WorkloadState.ADMITTED), nodes=IDLE),
        observe(
            released(memory_per_node_mb=4000), js=jobset(), wl=workload(WorkloadState.ADMITTED), nodes=IDLE
        ),
        observe(
            running(memory_per_node_mb=4000),
            js=jobset(state=JobSetState.ACTIVE),
            wl=workload(WorkloadState.ADMITTED),
            nodes=IDLE,
        ),
        observe(
            job(node_count=3, hold=False, state_flags=frozenset({"COMPLETING"})),
            js=jobset(),
            wl=workload(WorkloadState.PREEMPTED),
        ),
    ],
    ids=["released, other node count", "released, other size", "running", "being requeued"],
)
def test_only_a_held_job_has_its_jobset_replaced(o: Observed) -> None:
    """A released or running job is the guard's and Slurm's (rows 5 to 11), whatever its shape now."""
    d = decide(replace(o, jobset_shape=MADE_FOR))
    assert "delete_jobset" not in kinds(d)
    assert d == decide(o)


# --- crash recovery -----------------------------------------------------------------------------


def test_jobset_exists_but_job_already_running() -> None:
    """Nothing is pinned or released again; the nodes are only kept for the job (below)."""
    d = decide(
        observe(
            running(), js=jobset(state=JobSetState.ACTIVE), wl=workload(WorkloadState.ADMITTED), nodes=IDLE
        )
    )
    assert kinds(d) == ["drain_nodes"]


# --- a running job's nodes are kept for it (ADR 0003) ------------------------------------------

KEPT = f"{KEPT_FOR_JOB}42 until it ends"
ALLOCATED = (node("b42-0", state=NodeState.ALLOCATED), node("b42-1", state=NodeState.ALLOCATED))
KEPT_NODES = tuple(
    node(n.name, state=n.state, flags=n.state_flags | {"DRAIN"}, reason=KEPT) for n in ALLOCATED
)


def admitted(the_job: SlurmJob, *, nodes: tuple[SlurmNode, ...], **extra: Any) -> Observed:
    """Job 42 with its active JobSet, admitted."""
    return observe(
        the_job,
        js=jobset(state=JobSetState.ACTIVE),
        wl=workload(WorkloadState.ADMITTED),
        nodes=nodes,
        **extra,
    )


def test_a_running_jobs_nodes_are_drained_so_that_no_other_job_takes_them_when_it_ends() -> None:
    d = decide(observe(running(), js=jobset(state=JobSetState.ACTIVE), wl=workload(WorkloadState.ADMITTED),
                       nodes=ALLOCATED))  # fmt: skip
    assert d.actions == (DrainNodes(names=("b42-0", "b42-1"), reason=KEPT),)
    assert d.phase is Phase.RUNNING


def test_a_running_jobs_nodes_are_drained_once() -> None:
    assert decide(admitted(running(), nodes=KEPT_NODES)).actions == ()
    one_shown_drained = (KEPT_NODES[0], ALLOCATED[1])
    d = decide(admitted(running(), nodes=one_shown_drained))
    assert d.actions == (DrainNodes(names=("b42-1",), reason=KEPT),)
    # drained by this process, the node source a poll behind: not drained again
    d = decide(admitted(running(), nodes=one_shown_drained, nodes_drained=frozenset({"b42-1"})))
    assert d.actions == ()


def test_the_cleanup_of_an_ended_job_deletes_its_kept_nodes_without_draining_them_again() -> None:
    ended = job(state=JobState.COMPLETED, hold=False, nodes=NAMES)
    idle_kept = tuple(node(n.name, flags=n.state_flags, reason=KEPT) for n in KEPT_NODES)
    d = decide(observe(ended, js=jobset(state=JobSetState.COMPLETED), wl=workload(WorkloadState.FINISHED),
                       nodes=idle_kept))  # fmt: skip
    assert "drain_nodes" not in kinds(d)
    assert "delete_nodes" in kinds(d)


def test_a_job_slurm_requeued_onto_its_kept_nodes_gets_them_back() -> None:
    """An administrator's ``scontrol requeue`` of a running bridged job: pending, unheld, still pinned
    to its nodes, which the bridge drained while it ran. Resumed, not given back to Kueue."""
    requeued = released(state_reason="ReqNodeNotAvail")
    drained = tuple(node(n.name, flags=n.state_flags, reason=KEPT) for n in KEPT_NODES)
    d = decide(observe(requeued, js=jobset(state=JobSetState.ACTIVE), wl=workload(WorkloadState.ADMITTED),
                       nodes=drained))  # fmt: skip
    assert d.actions == (ResumeNodes(names=("b42-0", "b42-1")),)
    assert d.phase is Phase.RELEASING
    # A view of the job older than the nodes' (a list begun before it started): it runs on them.
    assert decide(admitted(requeued, nodes=KEPT_NODES)).actions == ()
    # Put back with Slurm's requeue delay: not startable now, given back; the nodes stay drained.
    delayed = released(state_reason="BeginTime")
    d = decide(admitted(delayed, nodes=drained))
    assert kinds(d) == ["hold"]
    assert d.phase is Phase.EVICTED


def test_a_job_whose_workload_is_preempted_while_it_runs_is_requeue_held_without_a_drain_first() -> None:
    """Row 8: the requeue-hold is the one thing to do before Slurm requeues it onto dead nodes."""
    d = decide(observe(running(), js=jobset(state=JobSetState.ACTIVE), wl=workload(WorkloadState.PREEMPTED),
                       nodes=ALLOCATED))  # fmt: skip
    assert kinds(d) == ["requeue_hold"]


def test_an_admitted_jobs_nodes_kept_from_its_last_run_are_resumed_and_another_drain_stands() -> None:
    """The same JobSet admitted again registers the same node names; slurmctld keeps the drain."""
    drained = tuple(node(n.name, flags=n.state_flags, reason=KEPT) for n in KEPT_NODES)
    d = decide(admitted(job(), nodes=drained))
    assert d.actions == (ResumeNodes(names=("b42-0", "b42-1")),)
    by_someone = tuple(n.model_copy(update={"reason": "hardware check"}) for n in drained)
    d = decide(admitted(job(), nodes=by_someone))
    assert "resume_nodes" not in kinds(d)
    assert "pin_and_release" not in kinds(d)


def test_nodes_registered_but_job_already_released() -> None:
    d = decide(
        observe(
            released(), js=jobset(state=JobSetState.ACTIVE), wl=workload(WorkloadState.ADMITTED), nodes=IDLE
        )
    )
    assert d.actions == ()
    assert d.phase is Phase.RELEASING


def test_pin_is_never_repeated_on_an_unheld_job() -> None:
    for state in WorkloadState:
        d = decide(observe(released(), js=jobset(), wl=workload(state), nodes=IDLE))
        assert "pin_and_release" not in kinds(d)


# --- the guard (docs/adr/0003-slurm-node-guard.md) -----------------------------------------------


def test_unheld_job_in_a_bridged_partition_is_held_within_one_poll() -> None:
    d = decide(observe(job(job_id=7, hold=False, state_reason="Priority")))
    assert kinds(d) == ["hold"]
    assert d.needs_confirmation  # the job may be the bridge's own release, a poll behind


@pytest.mark.parametrize(
    "o",
    [
        observe(job(), js=jobset(), wl=workload(WorkloadState.ADMITTED), nodes=IDLE),  # pin and release
        observe(running(), js=jobset(), wl=workload(WorkloadState.PREEMPTED)),  # requeue-hold
        observe(released(), js=jobset(), wl=workload(WorkloadState.EVICTED)),  # hold
        observe(released(), js=jobset(deleting=True)),  # hold
        observe(job(node_count=100000)),  # report unservable
        observe(job(), js=jobset(deleting=True), wl=workload(WorkloadState.ADMITTED), nodes=IDLE),
        observe(job(), js=jobset(state=JobSetState.FAILED), wl=workload(WorkloadState.FINISHED), nodes=IDLE),
        observe(job(), js=jobset(), wl=workload(WorkloadState.PREEMPTED), nodes=IDLE),
    ],
    ids=[
        "pin",
        "requeue-hold",
        "evicted hold",
        "deleted hold",
        "unservable",
        "nodes of a held job whose JobSet goes",
        "nodes of a JobSet that ended",
        "stale nodes after eviction",
    ],
)
def test_every_other_slurm_write_and_every_node_removal_of_a_live_job_is_confirmed(o: Observed) -> None:
    d = decide(o)
    assert d.actions
    assert d.needs_confirmation
    assert not d.concurrent


def test_user_released_job_with_jobset_not_admitted_is_held_again() -> None:
    d = decide(
        observe(job(hold=False, state_reason="Priority"), js=jobset(), wl=workload(WorkloadState.PENDING))
    )
    assert kinds(d) == ["hold"]


def test_launch_failure_requeue_unheld_but_pinned_without_admission_is_held() -> None:
    requeued = released(restart_count=1)
    assert kinds(decide(observe(requeued, js=jobset(), wl=workload(WorkloadState.EVICTED)))) == ["hold"]


def test_released_job_pinned_to_other_nodes_is_held() -> None:
    foreign = job(hold=False, required_nodes=("b7-0", "b7-1"), features="bridge-job-7")
    d = decide(observe(foreign, js=jobset(), wl=workload(WorkloadState.ADMITTED), nodes=IDLE))
    assert "hold" in kinds(d)


def hold_of(d: Decision) -> Hold:
    (hold,) = [a for a in d.actions if type(a) is Hold]
    return hold


@pytest.mark.parametrize(
    "o",
    [
        observe(released(), js=jobset(), wl=workload(WorkloadState.PREEMPTED)),  # row 11, evicted
        observe(released(), js=jobset(), wl=workload(WorkloadState.PENDING)),  # row 11, not admitted
        observe(released(), js=jobset(deleting=True), wl=workload(WorkloadState.ADMITTED)),  # row 3
        observe(released()),  # row 11, its JobSet gone (nodes deleted meanwhile)
        observe(job(hold=False, required_nodes=NAMES, features=f"{FEATURE}&ib")),  # and the user's -C
    ],
    ids=["evicted", "not admitted", "jobset deleted", "no jobset", "with user features"],
)
def test_holding_the_bridges_own_release_clears_its_pin_in_the_same_update(o: Observed) -> None:
    # Slurm 24.11 refuses every update of a job whose required nodes were deleted (2018), and a
    # reconfigure fails it: the pin goes with the hold, before the bridge deletes those nodes.
    assert hold_of(decide(o)).unpin == NAMES


@pytest.mark.parametrize(
    "pinned",
    [
        job(hold=False, state_reason="Priority", required_nodes=("c1", "c2")),  # the user's own -w
        job(hold=False, state_reason="Priority", required_nodes=("b7-0", "b7-1"), features="bridge-job-7"),
        job(hold=False, state_reason="Priority", required_nodes=NAMES),  # its names, not the feature
        job(hold=False, state_reason="Priority", required_nodes=NAMES[:1], features=FEATURE),  # a part
        job(hold=False, state_reason="Priority"),  # not pinned at all
    ],
    ids=["user -w", "another job's pin", "names without feature", "some of its names", "unpinned"],
)
def test_a_guard_hold_keeps_any_node_list_the_bridge_did_not_pin(pinned: SlurmJob) -> None:
    for o in (observe(pinned), observe(pinned, js=jobset(), wl=workload(WorkloadState.EVICTED))):
        assert hold_of(decide(o)).unpin == ()


def test_foreign_job_running_in_a_bridged_partition_is_requeue_held() -> None:
    thief = SlurmJob(job_id=7, partition="bridge", state=JobState.RUNNING, node_count=1, nodes=("b42-0",))
    assert kinds(decide(observe(thief))) == ["requeue_hold"]


def test_job_running_on_nodes_of_another_job_is_requeue_held() -> None:
    d = decide(observe(running(nodes=("b42-0", "b9-0")), js=jobset(), wl=workload(WorkloadState.ADMITTED)))
    assert kinds(d) == ["requeue_hold"]


def test_unheld_job_outside_bridged_partitions_is_left_alone() -> None:
    assert decide(observe(job(partition="debug", hold=False))).actions == ()
    assert decide(observe(running(partition="debug"))).actions == ()


# --- hostile input: a clear reason on the job, never a JobSet -------------------------------------

HOSTILE = [
    "a'b\"c",
    "$(rm -rf /)",
    "`id`",
    "x\ny",
    "ünï©ødé",
    "a;b|c&&d",
    "${HOME}",
    "\x00\x1b[31m",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_features_are_refused_with_a_clean_reason(text: str) -> None:
    d = decide(observe(job(features=text)))
    assert kinds(d) == ["report_unservable"]
    (report,) = d.actions
    assert isinstance(report, ReportUnservable)
    assert report.comment.isascii()
    assert report.comment.isprintable()
    assert "\n" not in report.comment
    assert len(report.comment) <= 480  # the job's text is quoted (escaped, cut), never interpreted


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_names_and_comments_never_reach_an_argument(text: str) -> None:
    d = decide(observe(job(name=text, comment=text, account="acct", user_name=text)))
    assert kinds(d) == ["create_jobset"]
    (create,) = d.actions
    assert isinstance(create, CreateJobSet)
    pod = create.manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    for container in pod["containers"]:
        argv = [*container["command"], *container["args"]]
        assert not any(text in arg for arg in argv)
        assert [a for a in argv if "$(" in a] == ["$(K8S_BRIDGE_NODE_NAME)"]
    for value in create.manifest["metadata"]["annotations"].values():
        assert "$" not in value
        assert value.isascii()


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"node_count": 0}, "NoNodes"),
        ({"node_count": 100000}, "TooManyNodes"),
        ({"memory_per_node_mb": 10 * 1024 * 1024}, "NodeTooLarge"),
        ({"cpus": 200000, "node_count": 1}, "NodeTooLarge"),
        ({"array_job_id": 41, "array_task_id": 1}, "JobArray"),
        ({"het_job_id": 42, "het_job_offset": 0}, "HeterogeneousJob"),
    ],
)
def test_absurd_requests_get_a_reason_and_no_jobset(fields: dict[str, Any], code: str) -> None:
    d = decide(observe(job(**fields)))
    assert kinds(d) == ["report_unservable"]
    (report,) = d.actions
    assert isinstance(report, ReportUnservable)
    assert report.code == code
    assert report.comment.startswith(COMMENT_PREFIX + "held: ")


def test_unservable_comment_is_one_bounded_ascii_line() -> None:
    comment = unservable_comment("x\n" * 1000 + "ü")
    assert comment.isascii()
    assert "\n" not in comment
    assert len(comment) <= 480


def test_node_job_id_reads_the_feature_then_the_dynamic_name() -> None:
    assert node_job_id(node("b42-0")) == 42
    assert node_job_id(node("b7-3", features=("k8sbridge",))) == 7
    assert node_job_id(node("b7-3", features=(), flags=frozenset())) is None  # a static node named b7-3
    assert node_job_id(node("c1", features=("gpu",))) is None


# --- the whole state space: invariants ----------------------------------------------------------

JOB_STATES = st.sampled_from(
    [
        None,
        job(),
        job(state_reason="JobHeldUser"),
        job(node_count=100000),
        released(),
        released(restart_count=1),
        job(hold=False, state_reason="Priority"),
        job(hold=False, state_flags=frozenset({"COMPLETING"})),
        running(),
        running(nodes=("b9-0",)),
        running(state=JobState.COMPLETED),
        job(state=JobState.CANCELLED, hold=False),
        job(dependency="afterok:41(unfulfilled)"),
        job(state_reason="JobHeldAdmin", admin_comment=""),  # an administrator's hold
        job(admin_comment=BridgeHold(retry_after=int(NOW) + 3600, reason="AssocGrpCpuLimit").text()),
        released(state_reason="AssocGrpCpuLimit"),
        released(state_reason="Dependency"),
    ]
)
PODS = st.sampled_from(
    [
        PodsView(),
        PodsView(active=2, running=2, present=2),
        PodsView(active=1, running=1, present=2, lost=("slurm-hpc-42-slurmd-0-1-x: Succeeded",)),
        PodsView(active=1, running=1, present=2, lost=("slurm-hpc-42-slurmd-0-0-x: being deleted",)),
    ]
)
JOBSETS = st.sampled_from(
    [
        None,
        jobset(),
        jobset(state=JobSetState.ACTIVE),
        jobset(deleting=True),
        jobset(state=JobSetState.FAILED),
        jobset(managed_by="kueue.x-k8s.io/multikueue"),
        jobset(state=JobSetState.ACTIVE, managed_by="kueue.x-k8s.io/multikueue"),
    ]
)
WORKLOADS = st.sampled_from([None, *(workload(s) for s in WorkloadState)])
NOT_RESPONDING = (node("b42-0"), node("b42-1", flags=frozenset({"DYNAMIC_NORM", "NOT_RESPONDING"})))
NODES = st.sampled_from(
    [
        (),
        IDLE,
        IDLE[:1],
        (node("b42-0"), node("b42-1", state=NodeState.ALLOCATED)),
        NOT_RESPONDING,
        KEPT_NODES,
        tuple(node(n.name, flags=n.state_flags, reason=KEPT) for n in KEPT_NODES),  # the job ended
        (node("b42-0", flags=frozenset({"DYNAMIC_NORM", "DRAIN"}), reason="hardware check"), IDLE[1]),
    ]
)


@settings(max_examples=400, deadline=None)
@given(
    the_job=JOB_STATES,
    js=JOBSETS,
    wl=WORKLOADS,
    nodes=NODES,
    finalizer=st.booleans(),
    pods=PODS,
    recorded=st.sampled_from(["", MADE_FOR, shape_fingerprint(job(node_count=3))]),
    marks_holds=st.booleans(),
)
def test_invariants_over_the_state_space(
    the_job: SlurmJob | None,
    js: JobSetView | None,
    wl: WorkloadView | None,
    nodes: tuple[SlurmNode, ...],
    finalizer: bool,
    pods: PodsView,
    recorded: str,
    marks_holds: bool,
) -> None:
    active_pods = pods.active
    o = observe(the_job, js=js, wl=wl if js is not None else None, nodes=nodes, has_finalizer=finalizer,
                pods=pods, jobset_shape=recorded if js is not None else "", now=NOW,
                jobset_marks_holds=marks_holds)  # fmt: skip
    d = decide(o)
    assert d == decide(o), "decide is a pure function"
    if d != decide(replace(o, jobset_shape="")):
        # The recorded shape matters only for a held job whose JobSet was made for another shape of
        # it (row 16), and then only to replace that JobSet, on a fresh read.
        assert the_job is not None
        assert the_job.hold
        assert the_job.is_pending
        assert js is not None
        assert recorded.startswith(SHAPE_PREFIX)
        assert recorded != shape_fingerprint(the_job)
        # Its JobSet goes, or first the pin the release left, which names that JobSet's nodes.
        assert "delete_jobset" in kinds(d) or kinds(d) == ["hold"]
        assert d.needs_confirmation
    names = kinds(d)
    if "pin_and_release" in names:
        # Only a held, pending job, admitted, onto all of its own nodes registered idle with its feature.
        assert the_job is not None
        assert the_job.hold
        assert the_job.is_pending
        assert js is not None
        assert not js.deleting
        assert wl is not None
        assert wl.state is WorkloadState.ADMITTED
        assert {n.name for n in nodes if n.is_idle_and_usable and n.has_feature(FEATURE)} >= set(NAMES)
    if "create_jobset" in names:
        assert js is None
        assert the_job is not None
        assert the_job.hold
        assert isinstance(o.translation, Translation)
    if the_job is not None and not the_job.is_finished:
        # A live job's JobSet is never deleted unless it ended before the job ran, was made for
        # another shape of the job, which is still held (row 16), lost a slurmd pod while admitted,
        # or Slurm would not start the held job now (its capacity goes back to Kueue).
        if "delete_jobset" in names:
            assert js is not None
            assert (
                js.state in (JobSetState.FAILED, JobSetState.COMPLETED)
                or (wl is not None and wl.state is WorkloadState.FINISHED)
                or (the_job.hold and the_job.is_pending and recorded not in ("", shape_fingerprint(the_job)))
                or (
                    (nodes == NOT_RESPONDING if js.runs_elsewhere else bool(pods.lost))
                    and not js.suspended
                    and wl is not None
                    and wl.state is WorkloadState.ADMITTED
                )
                or (the_job.hold and (bool(the_job.dependency) or "retry-after" in the_job.admin_comment))
                or (the_job.held_by == "admin" and not the_job.admin_comment)  # an administrator's
            )
        # A job Slurm would not start is never bridged, and never released.
        persons_hold = (
            the_job.held_by == "admin" and not the_job.admin_comment and (js is None or marks_holds)
        )
        if the_job.dependency or "retry-after" in the_job.admin_comment or persons_hold:
            assert "create_jobset" not in names
            assert "pin_and_release" not in names
        # An unmarked admin hold that an older bridge's JobSet vouches for loses that JobSet only once
        # marked as the bridge's; under a JobSet of this bridge it is an administrator's, never marked.
        if the_job.held_by == "admin" and not the_job.admin_comment and js is not None:
            if not marks_holds and "remove_finalizer" in names:
                assert names[0] in ("mark_held", "hold")
            if marks_holds:
                assert "mark_held" not in names
                assert not any(isinstance(a, Hold) and a.admin_comment for a in d.actions)
        # The finalizer goes only once the job cannot be running on those nodes.
        if "remove_finalizer" in names:
            assert not the_job.is_running
    if "remove_finalizer" in names:
        assert names[-1] == "remove_finalizer"
        assert not any(isinstance(a, (Hold, RequeueHold, PinAndRelease)) for a in d.actions)
        assert not d.concurrent
        # No node may leak: a node registered after the last node poll exists only if a pod of the
        # JobSet may have run, and then every recorded name is deleted before the finalizer goes.
        assert js is not None
        if (
            active_pods
            or not js.suspended
            or (wl is not None and wl.state not in (WorkloadState.PENDING, WorkloadState.QUOTA_RESERVED))
        ):
            deleted = {n for a in d.actions if isinstance(a, DeleteNodes) for n in a.names}
            assert deleted >= set(NAMES)
    # The nodes kept for a running job: drained only while it runs, only those it runs on; resumed
    # only for a job that does not run, only its own drained by the bridge; never released onto.
    for action in d.actions:
        if isinstance(action, DrainNodes) and action.reason.startswith(KEPT_FOR_JOB):
            assert the_job is not None
            assert the_job.is_running
            assert set(action.names) <= set(the_job.nodes)
        if isinstance(action, ResumeNodes):
            assert the_job is not None
            assert not the_job.is_running
            shown = {n.name: n for n in nodes}
            assert all(shown[name].reason.startswith(COMMENT_PREFIX) for name in action.names)
    if "pin_and_release" in names:
        assert not any(n.is_drained_or_draining for n in nodes)
    if d.concurrent:
        # Only independent actions run at once: the JobSet's creation and what goes with it.
        assert set(names) <= {"create_jobset", "clear_comment"}
    if any(isinstance(a, (PinAndRelease, RequeueHold, ReportUnservable)) for a in d.actions):
        assert d.needs_confirmation
    if any(type(a) is Hold for a in d.actions):
        assert d.needs_confirmation  # a guard hold; the hold conversion (ConvertHold) is not confirmed
    if the_job is None and d.actions:
        assert d.needs_confirmation
    if the_job is not None and not the_job.is_finished and {"drain_nodes", "delete_nodes"} & set(names):
        # The cached job may be a poll behind the bridge's own release: the nodes of a live job go
        # only on a decision taken again on a fresh read. Not the nodes a running job is kept on:
        # a cache that shows it running is never ahead of Slurm, and a job Slurm put back onto its
        # nodes gets them back (row 10).
        kept_only = the_job.is_running and all(
            isinstance(a, DrainNodes) and a.reason.startswith(KEPT_FOR_JOB)
            for a in d.actions
            if a.kind in ("drain_nodes", "delete_nodes")
        )
        assert d.needs_confirmation or kept_only
    if "clear_comment" in names:
        assert the_job is not None
        assert the_job.comment.startswith(COMMENT_PREFIX)
    assert not ({"create_jobset", "delete_jobset"} <= set(names))
    _ = (ClearComment, DeleteJobSet, RemoveFinalizer)


PINNED_JOBS = st.sampled_from(
    [
        released(),
        job(hold=False, state_reason="Priority", required_nodes=("c1", "c2")),
        job(hold=False, state_reason="Priority", required_nodes=NAMES),
        job(hold=False, state_reason="Priority", required_nodes=NAMES[:1], features=FEATURE),
        job(hold=False, state_reason="Priority", required_nodes=("b7-0", "b7-1"), features="bridge-job-7"),
        job(state_reason="JobHeldUser", required_nodes=NAMES, features=FEATURE),
    ]
)


@settings(max_examples=300, deadline=None)
@given(the_job=st.one_of(JOB_STATES, PINNED_JOBS), js=JOBSETS, wl=WORKLOADS, nodes=NODES)
def test_only_the_bridges_own_pin_is_ever_cleared(
    the_job: SlurmJob | None, js: JobSetView | None, wl: WorkloadView | None, nodes: tuple[SlurmNode, ...]
) -> None:
    d = decide(observe(the_job, js=js, wl=wl if js is not None else None, nodes=nodes))
    for action in d.actions:
        if isinstance(action, Hold) and action.unpin:
            assert the_job is not None
            assert type(action) is Hold  # never the hold conversion of a held job
            assert set(action.unpin) == set(NAMES)
            assert the_job.is_pinned_to(NAMES, FEATURE)


@pytest.mark.parametrize(
    ("pods", "again"),
    [(PodsView(), True), (PodsView(present=1), False), (PodsView(active=1, present=1), False)],
    ids=["no pod left", "a terminating pod", "an active pod"],
)
def test_a_foreground_deletion_with_no_pod_left_is_ended_in_the_background(
    pods: PodsView, again: bool
) -> None:
    """An admitted job's JobSet deleted in the foreground waits for Kueue's Workload, which Kueue
    finalizes only once the JobSet is gone: once none of its pods is left the bridge deletes it again
    in the background (the collector's finalizer goes), not before."""
    js = replace(jobset(state=JobSetState.ACTIVE), deleting=True, waits_for_dependents=True)
    d = decide(observe(None, js=js, wl=workload(WorkloadState.ADMITTED), pods=pods, has_finalizer=False))
    assert (DeleteJobSet(foreground=False) in d.actions) is again
    assert DeleteJobSet(foreground=True) not in d.actions


def test_a_foreground_deletion_whose_pods_run_deletes_their_jobs_in_the_background() -> None:
    """Pods Kueue started in the freed quota before the bridge deleted their JobSet (a mass cancel)
    wait on the collector's backed-off retries of the JobSet; their Jobs deleted in the background,
    they go at once as orphans. Jobs already being deleted are left alone."""
    js = replace(jobset(state=JobSetState.ACTIVE), deleting=True, waits_for_dependents=True)
    wl = workload(WorkloadState.ADMITTED)
    pods = PodsView(active=1, present=1, running=1)
    d = decide(
        observe(None, js=js, wl=wl, pods=pods, child_jobs_to_delete=("js-slurmd-0",), has_finalizer=False)
    )
    assert DeleteChildJobs(names=("js-slurmd-0",)) in d.actions
    none_left = decide(observe(None, js=js, wl=wl, pods=pods, has_finalizer=False))
    assert not any(isinstance(a, DeleteChildJobs) for a in none_left.actions)
    not_foreground = replace(js, waits_for_dependents=False)
    d = decide(observe(None, js=not_foreground, wl=wl, pods=pods, child_jobs_to_delete=("js-slurmd-0",),
                       has_finalizer=False))  # fmt: skip
    assert not any(isinstance(a, DeleteChildJobs) for a in d.actions)


def test_orphaned_pods_of_a_foreground_deletion_are_deleted_once_no_job_of_it_is_left_to_remake_them() -> (
    None
):
    js = replace(jobset(state=JobSetState.ACTIVE), deleting=True, waits_for_dependents=True)
    wl = workload(WorkloadState.ADMITTED)
    pods = PodsView(active=1, present=2, running=1, undeleted=("js-0",))
    d = decide(observe(None, js=js, wl=wl, pods=pods, has_finalizer=False))
    assert DeletePods(names=("js-0",)) in d.actions
    deleted_already = decide(
        observe(None, js=js, wl=wl, pods=pods, has_finalizer=False, pods_deleted={"js-0"})
    )
    assert not any(isinstance(a, DeletePods) for a in deleted_already.actions)
    with_job = decide(observe(None, js=js, wl=wl, pods=pods, child_jobs_to_delete=("js-slurmd-0",),
                              has_finalizer=False))  # fmt: skip
    assert not any(isinstance(a, DeletePods) for a in with_job.actions)
    going = decide(observe(None, js=js, wl=wl, pods=replace(pods, undeleted=()), has_finalizer=False))
    assert not any(isinstance(a, DeletePods) for a in going.actions)
    background = replace(js, waits_for_dependents=False)
    d = decide(observe(None, js=background, wl=wl, pods=pods, has_finalizer=False))
    assert not any(isinstance(a, DeletePods) for a in d.actions)


def test_pods_view_names_the_pods_not_being_deleted() -> None:
    def pod(name: str, *, deleting: bool = False, phase: str = "Running") -> dict[str, object]:
        meta: dict[str, object] = {"name": name}
        if deleting:
            meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        return {"metadata": meta, "status": {"phase": phase}}

    view = PodsView.of([pod("b"), pod("a", phase="Failed"), pod("c", deleting=True)])
    assert view.undeleted == ("a", "b")


def test_pods_view_knows_the_node_name_of_each_run() -> None:
    """A pod of a later run registers ``b<id>r<run>-<index>`` (its JobSet was made after a requeue)."""

    def pod(index: int, **run: str) -> dict[str, object]:
        labels = {LABEL_JOB_ID: "42", "batch.kubernetes.io/job-completion-index": str(index)}
        return {"metadata": {"name": f"p{index}", "labels": labels | run}, "status": {"phase": "Running"}}

    assert PodsView.of([pod(0), pod(1)]).active_nodes == frozenset(NAMES)
    later = PodsView.of([pod(0, **{LABEL_RUN: "2"}), pod(1, **{LABEL_RUN: "2"})])
    assert later.active_nodes == frozenset({"b42r2-0", "b42r2-1"})


# --- nodes deleted already are not deleted again before the node source has listed since ----------


def test_stale_nodes_deleted_already_are_waited_for_not_deleted_again() -> None:
    evicted = observe(job(), js=jobset(), wl=workload(WorkloadState.PREEMPTED), nodes=IDLE)
    assert kinds(decide(evicted)) == ["delete_nodes"]
    d = decide(replace(evicted, nodes_deleted=frozenset(NAMES)))
    assert d.actions == ()
    assert d.phase is Phase.EVICTED
    one_left = decide(replace(evicted, nodes_deleted=frozenset(NAMES[:1])))
    assert one_left.actions == (DeleteNodes(names=NAMES[1:]),)


def test_a_cleanup_drains_only_nodes_not_drained_already_and_drops_the_finalizer_once() -> None:
    ending = running(state=JobState.CANCELLED, state_flags=frozenset({"COMPLETING"}))
    o = observe(ending, js=jobset(state=JobSetState.ACTIVE), wl=workload(WorkloadState.ADMITTED), nodes=IDLE)
    assert decide(o).actions[0] == DrainNodes(names=NAMES, reason="k8s-bridge: the job ended (CANCELLED)")
    d = decide(replace(o, nodes_drained=frozenset(NAMES[:1])))
    assert d.actions[0] == DrainNodes(names=NAMES[1:], reason="k8s-bridge: the job ended (CANCELLED)")
    assert "drain_nodes" not in kinds(decide(replace(o, nodes_drained=frozenset(NAMES))))
    done = observe(running(state=JobState.COMPLETED), js=jobset(deleting=True), nodes=())
    assert kinds(decide(done)) == ["remove_finalizer"]
    assert decide(replace(done, finalizer_removed=True)).actions == ()


def test_a_cleanup_skips_nodes_deleted_already_and_still_drops_the_finalizer() -> None:
    finished = workload(WorkloadState.FINISHED)
    ended = observe(job(state=JobState.COMPLETED), js=jobset(deleting=True), wl=finished, nodes=IDLE)
    assert "delete_nodes" in kinds(decide(ended))
    d = decide(replace(ended, nodes_deleted=frozenset(NAMES)))
    assert "delete_nodes" not in kinds(d)
    assert "remove_finalizer" in kinds(d)
