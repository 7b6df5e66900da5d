"""reconcilers.slurm.decide: jobs Slurm would not start yet, the bridge's holds against an
administrator's, the safety net that gives capacity back, and lost nodes.

Each of these once wasted or deadlocked shared quota, or overrode somebody's intent: a dependent job
holding the quota its own dependency needed, a ``--begin`` an hour ahead holding quota for the hour,
an administrator's ``scontrol hold`` released on admission, a slurmd pod deleted under a running job
with nothing noticed.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bridge.admission import JobSetState, WorkloadState, WorkloadView
from bridge.api.slurm_job import JobState, SlurmJob
from bridge.api.slurm_node import NodeState
from bridge.api.slurm_reservation import SlurmReservation
from reconcilers.slurm import (
    COMMENT_PREFIX,
    WAIT_FOR_DEPENDENCY,
    WAIT_FOR_RESERVATION,
    CommentBudget,
    DownNodes,
    Hold,
    MarkHeld,
    Phase,
    PinAndRelease,
    PodsView,
    RequeueHold,
    ResumeNodes,
    WriteComment,
    decide,
    waiting_comment,
)
from reconcilers.slurm_waiting import (
    RETRY_AFTER_GIVE_BACK,
    BridgeHold,
    blocked_reason,
    dependency_state,
    not_starting_reason,
    reservation_reason,
)
from tests.fixtures.slurm_decisions import (
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

T0 = datetime(2026, 12, 2, 1, 0, 0, tzinfo=UTC)
NOW = T0.timestamp()
AN_ADMINS_HOLD = {"state_reason": "JobHeldAdmin", "admin_comment": ""}


# --- not bridged until Slurm would start it -------------------------------------------------------


def test_a_job_waiting_for_its_dependency_gets_no_jobset_and_says_why() -> None:
    """The deadlock of a dependent job holding the quota its dependency needs cannot happen: it never
    asks Kueue for any while the dependency is unmet."""
    dependent = job(state_reason="JobHeldUser", admin_comment="", dependency="afterok:41(unfulfilled)")
    d = decide(observe(dependent, now=NOW, dependees={41: RUNNING_41}))
    assert kinds(d) == ["write_comment"]
    (comment,) = d.actions
    assert isinstance(comment, WriteComment)
    assert comment.text == waiting_comment(
        "it waits for its dependency (afterok:41(unfulfilled)); bridged once Slurm could start it"
    )
    assert comment.text.startswith(COMMENT_PREFIX)
    assert d.needs_confirmation  # its user may have written a comment since the poll
    assert d.phase is Phase.WAITING
    # 41's change reconciles it (the job source's dependents index); a dependee outside the bridged
    # partitions is not polled for changes, hence a look now and then.
    assert d.requeue_after == WAIT_FOR_DEPENDENCY
    # Said once: nothing more to do while the comment is there.
    said = dependent.model_copy(update={"comment": comment.text})
    assert decide(observe(said, now=NOW, dependees={41: RUNNING_41})).actions == ()
    # Met: Slurm leaves the text of a held job as it was, so the bridge reads job 41 itself.
    done = RUNNING_41.model_copy(update={"state": JobState.COMPLETED})
    assert kinds(decide(observe(said, now=NOW, dependees={41: done}))) == ["create_jobset", "clear_comment"]


RUNNING_41 = SlurmJob(job_id=41, state=JobState.RUNNING, start_time=T0)


def test_a_failed_dependency_is_named_as_never_satisfiable() -> None:
    reason = blocked_reason(job(dependency="afterok:41(failed)"), now=NOW)
    assert reason is not None
    assert "can never be satisfied" in reason
    failed_41 = RUNNING_41.model_copy(update={"state": JobState.FAILED})
    reason = blocked_reason(job(dependency="afterok:41(unfulfilled)"), now=NOW, dependees={41: failed_41})
    assert reason is not None
    assert "can never be satisfied" in reason


@pytest.mark.parametrize(
    ("dependency", "dependee", "verdict"),
    [
        ("afterok:41(unfulfilled)", {"state": JobState.RUNNING}, "waits"),
        ("afterok:41(unfulfilled)", {"state": JobState.COMPLETED}, "met"),
        (
            "afterok:41(unfulfilled)",
            {"state": JobState.COMPLETED, "state_flags": frozenset({"COMPLETING"})},
            "waits",
        ),
        ("afterok:41(unfulfilled)", {"state": JobState.CANCELLED}, "failed"),
        ("afternotok:41(unfulfilled)", {"state": JobState.FAILED}, "met"),
        ("afternotok:41(unfulfilled)", {"state": JobState.COMPLETED}, "failed"),
        ("afterany:41(unfulfilled)", {"state": JobState.TIMEOUT}, "met"),
        ("after:41(unfulfilled)", {"state": JobState.PENDING}, "waits"),
        ("after:41(unfulfilled)", {"state": JobState.RUNNING}, "met"),
        ("after:41+5(unfulfilled)", {"state": JobState.RUNNING}, "waits"),  # 5 minutes after its start
        ("afterok:41(unfulfilled),afterok:42(unfulfilled)", {"state": JobState.COMPLETED}, "waits"),
        ("afterok:41(unfulfilled)?afterok:42(unfulfilled)", {"state": JobState.COMPLETED}, "met"),
        ("afterok:41(unfulfilled)", None, "met"),  # gone from slurmctld: Slurm lifts it too
        ("singleton(unfulfilled)", {"state": JobState.RUNNING}, "met"),  # Slurm decides once released
    ],
)
def test_dependencies_are_read_as_slurm_reads_them(
    dependency: str, dependee: dict[str, object] | None, verdict: str
) -> None:
    dependees: dict[int, SlurmJob | None] = {
        41: None if dependee is None else RUNNING_41.model_copy(update=dependee),
        42: SlurmJob(job_id=42, state=JobState.PENDING),
    }
    assert dependency_state(job(dependency=dependency), dependees, now=NOW + 60) == verdict


def test_a_users_own_comment_is_kept_while_the_job_waits() -> None:
    d = decide(
        observe(
            job(dependency="afterany:41(unfulfilled)", comment="my run"), now=NOW, dependees={41: RUNNING_41}
        )
    )
    assert d.actions == ()
    assert d.phase is Phase.WAITING


def test_a_begin_time_ahead_keeps_the_job_unbridged_until_then() -> None:
    later = job(eligible_time=T0 + timedelta(hours=1))
    d = decide(observe(later, now=NOW))
    assert kinds(d) == ["write_comment"]
    assert "may not start before 2026-12-02T02:00:00Z (--begin)" in d.why
    assert d.requeue_after is not None
    assert 1.0 <= d.requeue_after <= 60.0  # no event marks the time: the bridge looks again itself
    at_begin = (T0 + timedelta(hours=1, seconds=1)).timestamp()
    assert kinds(decide(observe(later, now=at_begin))) == ["create_jobset"]


def test_slurms_own_requeue_delay_is_not_a_users_begin_time() -> None:
    """A requeue resets the submit time and puts the begin 121 s later: that job is on its way back,
    and the release sets the begin time to now."""
    requeued = job(restart_count=1, submit_time=T0, eligible_time=T0 + timedelta(seconds=121))
    assert blocked_reason(requeued, now=NOW + 5) is None
    users = requeued.model_copy(update={"eligible_time": T0 + timedelta(hours=3)})
    assert blocked_reason(users, now=NOW + 5) is not None


def test_a_bridged_job_that_gains_a_dependency_gives_its_capacity_back() -> None:
    """``scontrol update jobid=X dependency=...`` after its JobSet was made, or a bridge upgrade: the
    JobSet goes (confirmed on a fresh read), and with it the quota."""
    d = decide(
        observe(
            job(dependency="afterok:41(unfulfilled)"), js=jobset(), wl=workload(WorkloadState.ADMITTED),
            nodes=IDLE, pods=PodsView(active=2, running=2, present=2), now=NOW, dependees={41: RUNNING_41},
        )
    )  # fmt: skip
    assert "delete_jobset" in kinds(d)
    assert "pin_and_release" not in kinds(d)
    assert d.needs_confirmation
    assert d.phase is Phase.WAITING


# --- an administrator's hold is respected ------------------------------------------------------------


def test_an_administrators_hold_is_not_bridged() -> None:
    d = decide(observe(job(**AN_ADMINS_HOLD), now=NOW))
    assert kinds(d) == ["write_comment"]
    assert "held by an administrator" in d.why
    assert d.phase is Phase.WAITING


def test_a_bridged_job_held_by_an_administrator_gives_its_quota_back_and_is_never_marked() -> None:
    d = decide(observe(job(**AN_ADMINS_HOLD), js=jobset(), wl=workload(WorkloadState.ADMITTED), nodes=IDLE))
    assert "pin_and_release" not in kinds(d)
    assert "delete_jobset" in kinds(d)
    assert not any(isinstance(a, MarkHeld) for a in d.actions)


def test_an_older_bridges_jobset_vouches_for_its_unmarked_admin_hold() -> None:
    """JobSets made before holds were marked: the unmarked admin hold is the bridge's conversion."""
    o = observe(
        job(**AN_ADMINS_HOLD), js=jobset(state=JobSetState.ACTIVE), wl=workload(WorkloadState.ADMITTED),
        nodes=IDLE, jobset_marks_holds=False,
    )  # fmt: skip
    assert kinds(decide(o)) == ["pin_and_release"]
    # And once that JobSet goes (here: it ended before the job ran), the hold is marked first.
    ended = observe(job(**AN_ADMINS_HOLD), js=jobset(state=JobSetState.FAILED), jobset_marks_holds=False)
    assert kinds(decide(ended))[0] == "mark_held"


def test_every_hold_the_bridge_makes_carries_its_mark() -> None:
    guard = decide(observe(job(hold=False, state_reason="Priority", admin_comment="")))
    (hold,) = guard.actions
    assert isinstance(hold, Hold)
    assert BridgeHold.parse(hold.admin_comment or "") == BridgeHold()
    user_held = job(state_reason="JobHeldUser", admin_comment="")
    (convert,) = decide(observe(user_held, js=jobset(), wl=workload(WorkloadState.PENDING))).actions
    assert isinstance(convert, Hold)
    assert convert.admin_comment == BridgeHold().text()


def test_the_release_clears_the_bridges_comment_and_mark() -> None:
    """So that a later ``scontrol hold`` of the running or released job is seen as an administrator's."""
    waited = job(comment=COMMENT_PREFIX + "queued", admin_comment=BridgeHold().text())
    d = decide(observe(waited, js=jobset(), wl=workload(WorkloadState.ADMITTED), nodes=IDLE))
    (pin,) = d.actions
    assert isinstance(pin, PinAndRelease)
    assert pin.clear_comment
    assert pin.clear_admin_comment
    (pin,) = decide(
        observe(job(comment="mine"), js=jobset(), wl=workload(WorkloadState.ADMITTED), nodes=IDLE)
    ).actions
    assert isinstance(pin, PinAndRelease)
    assert not pin.clear_comment


# --- the safety net: a released job Slurm keeps pending gives its capacity back --------------------


@pytest.mark.parametrize(
    "reason", ["AssocGrpCpuLimit", "QOSMaxJobsPerUserLimit", "Reservation", "Dependency"]
)
def test_a_released_job_slurm_will_not_start_is_held_again_with_the_reason(reason: str) -> None:
    d = decide(
        observe(released(state_reason=reason), js=jobset(state=JobSetState.ACTIVE),
                wl=workload(WorkloadState.ADMITTED), nodes=IDLE, now=NOW)
    )  # fmt: skip
    (hold,) = d.actions
    assert isinstance(hold, Hold)
    assert hold.unpin == NAMES  # its nodes go next
    assert hold.event == "GivenBack"
    record = BridgeHold.parse(hold.admin_comment or "")
    assert record == BridgeHold(retry_after=int(NOW) + RETRY_AFTER_GIVE_BACK, reason=reason)
    assert hold.comment is not None
    assert f"Reason={reason}" in hold.comment
    assert d.needs_confirmation


@pytest.mark.parametrize("reason", ["None", "Priority", "Resources", "Prolog", "ReqNodeNotAvail"])
def test_a_released_job_about_to_start_is_left_to_slurm(reason: str) -> None:
    assert not_starting_reason(released(state_reason=reason)) is None
    d = decide(observe(released(state_reason=reason), js=jobset(state=JobSetState.ACTIVE),
                       wl=workload(WorkloadState.ADMITTED), nodes=IDLE, now=NOW))  # fmt: skip
    assert d.actions == ()
    assert d.phase is Phase.RELEASING


def test_a_job_given_back_loses_its_jobset_then_waits_for_its_retry_time() -> None:
    given_back = job(admin_comment=BridgeHold(retry_after=int(NOW) + 300, reason="AssocGrpCpuLimit").text())
    with_jobset = decide(
        observe(given_back, js=jobset(state=JobSetState.ACTIVE), wl=workload(WorkloadState.ADMITTED),
                nodes=IDLE, pods=PodsView(active=2, running=2, present=2), now=NOW)
    )  # fmt: skip
    assert kinds(with_jobset)[:2] == ["drain_nodes", "delete_jobset"]
    without = decide(observe(given_back, now=NOW + 10))
    assert without.phase is Phase.WAITING
    assert "Reason=AssocGrpCpuLimit" in without.why
    assert without.requeue_after == 60.0
    assert kinds(decide(observe(given_back, now=NOW + 301))) == ["create_jobset"]


# --- a lost node is a preemption ------------------------------------------------------------------

LOST = PodsView(active=1, running=1, present=2, lost=("slurm-hpc-42-slurmd-0-1-abcde: Succeeded",))


def test_a_running_job_that_loses_a_slurmd_pod_is_requeue_held_and_its_jobset_replaced() -> None:
    d = decide(
        observe(running(), js=jobset(state=JobSetState.ACTIVE), wl=workload(WorkloadState.ADMITTED),
                nodes=IDLE, pods=LOST)
    )  # fmt: skip
    assert kinds(d) == ["requeue_hold", "delete_jobset"]
    requeue = d.actions[0]
    assert isinstance(requeue, RequeueHold)
    assert "lost 1 slurmd pod(s) (slurm-hpc-42-slurmd-0-1-abcde: Succeeded)" in requeue.reason
    assert d.needs_confirmation
    assert d.phase is Phase.EVICTED


def test_a_released_job_that_loses_a_slurmd_pod_is_held_and_its_jobset_replaced() -> None:
    d = decide(
        observe(released(), js=jobset(state=JobSetState.ACTIVE), wl=workload(WorkloadState.ADMITTED),
                nodes=IDLE, pods=LOST)
    )  # fmt: skip
    assert kinds(d) == ["hold", "delete_jobset"]
    hold = d.actions[0]
    assert isinstance(hold, Hold)
    assert hold.unpin == NAMES
    assert hold.event == "NodeLost"


def test_an_admitted_job_whose_slurmd_pod_ended_before_the_release_gets_a_new_jobset() -> None:
    """The JobSet's Job counts that index done and will not bring it back: waiting would be forever."""
    d = decide(observe(job(), js=jobset(state=JobSetState.ACTIVE), wl=workload(WorkloadState.ADMITTED),
                       nodes=IDLE[:1], pods=LOST))  # fmt: skip
    assert kinds(d) == ["delete_jobset"]


def test_pods_going_because_kueue_takes_the_capacity_back_are_no_lost_node() -> None:
    """Kueue suspends the JobSet first, and the Workload says so: that is the preemption rows' case."""
    suspended = decide(observe(running(), js=jobset(), wl=workload(WorkloadState.ADMITTED), pods=LOST))
    assert "delete_jobset" not in kinds(suspended)
    preempted = decide(
        observe(
            running(), js=jobset(state=JobSetState.ACTIVE), wl=workload(WorkloadState.PREEMPTED), pods=LOST
        )
    )
    assert kinds(preempted) == ["requeue_hold"]


def test_once_replaced_the_lost_job_runs_again_only_through_kueue() -> None:
    """After the requeue-hold the old JobSet is deleting; the job, held again, loses its nodes, and a
    new JobSet is made once the old one is gone."""
    requeued = job(state_reason="JobHeldUser", required_nodes=NAMES, features="bridge-job-42")
    going = decide(observe(requeued, js=jobset(state=JobSetState.ACTIVE, deleting=True), nodes=IDLE))
    assert isinstance(going.actions[0], Hold)  # unpinned before its nodes go
    gone = decide(observe(requeued.model_copy(update={"required_nodes": ()}), now=NOW))
    assert kinds(gone) == ["create_jobset"]


def test_a_slurm_job_stuck_pending_without_reason_stays_in_slurms_hands() -> None:
    assert not_starting_reason(SlurmJob(job_id=1, state_reason="")) is None


# --- while the job waits in Kueue, its comment says why --------------------------------------------


def pending(message: str, reason: str = "Pending") -> WorkloadView:
    return replace(workload(WorkloadState.PENDING, reason), message=message)


def test_a_queued_job_says_in_its_comment_what_kueue_says() -> None:
    wl = pending(
        "couldn't assign flavors to pod set slurmd: "
        "insufficient unused quota for cpu in flavor default, 1 more needed"
    )
    d = decide(observe(job(), js=jobset(), wl=wl))
    (comment,) = d.actions
    assert isinstance(comment, WriteComment)
    assert comment.text == (
        "k8s-bridge: queued in Kueue: Pending: couldn't assign flavors to pod set slurmd: "
        "insufficient unused quota for cpu in flavor default"
    )  # no number: it changes with every admission, and each change would be a write per job
    assert comment.event == ""
    assert d.needs_confirmation
    same = decide(
        observe(
            job(comment=comment.text),
            js=jobset(),
            wl=replace(wl, message=wl.message.replace("1 more", "2 more")),
        )
    )
    assert same.actions == ()


def test_a_job_no_topology_domain_can_hold_says_so_without_the_count_that_moves() -> None:
    """Kueue's TAS message says how many pods fit now; that changes as other jobs come and go."""
    wl = pending(
        'couldn\'t assign flavors to pod set slurmd: topology "racks" allows to fit only 2 out of 3 pod(s)'
    )
    (comment,) = decide(observe(job(), js=jobset(), wl=wl)).actions
    assert isinstance(comment, WriteComment)
    assert comment.text == (
        "k8s-bridge: queued in Kueue: Pending: couldn't assign flavors to pod set slurmd: "
        'topology "racks" allows to fit only some of 3 pod(s)'
    )
    assert comment.event == ""  # it may fit once other jobs end
    fewer = replace(wl, message=wl.message.replace("only 2 out", "only 1 out"))
    assert decide(observe(job(comment=comment.text), js=jobset(), wl=fewer)).actions == ()


def test_a_workload_kueue_can_never_admit_gets_its_reason_and_an_event() -> None:
    wl = pending("couldn't assign flavors to pod set slurmd: resource memory unavailable in ClusterQueue")
    (comment,) = decide(observe(job(), js=jobset(), wl=wl)).actions
    assert isinstance(comment, WriteComment)
    assert comment.event == "Inadmissible"
    missing = pending("LocalQueue hpc doesn't exist", reason="Inadmissible")
    (comment,) = decide(observe(job(), js=jobset(), wl=missing)).actions
    assert isinstance(comment, WriteComment)
    assert comment.event == "Inadmissible"


def test_the_queued_comment_is_written_at_a_bounded_rate_and_never_over_a_users() -> None:
    wl = pending("insufficient unused quota for cpu in flavor default, 1 more needed")
    later = decide(observe(job(), js=jobset(), wl=wl, comment_due=False, comment_retry=12.0))
    assert later.actions == ()
    assert later.requeue_after == 12.0  # looked at again when it may be written
    assert decide(observe(job(comment="mine"), js=jobset(), wl=wl)).actions == ()


def test_a_queued_job_whose_comment_already_says_it_is_not_looked_at_again_on_a_timer() -> None:
    wl = pending("insufficient unused quota for cpu in flavor default, 1 more needed")
    (written,) = decide(observe(job(), js=jobset(), wl=wl)).actions
    assert isinstance(written, WriteComment)
    # Written a moment ago (the budget holds this job's next comment back) and shown by Slurm: the
    # next event of the job has nothing to write, so nothing to come back for.
    shown = decide(
        observe(job(comment=written.text), js=jobset(), wl=wl, comment_due=False, comment_retry=60.0)
    )
    assert shown.actions == ()
    assert shown.requeue_after is None
    # The user's own comment is never overwritten, so it is not waited on either.
    theirs = decide(observe(job(comment="mine"), js=jobset(), wl=wl, comment_due=False, comment_retry=60.0))
    assert theirs.requeue_after is None


def test_the_comment_budget_bounds_each_job_and_all_of_them() -> None:
    now = [0.0]
    budget = CommentBudget(per_job=60, rate=2, burst=2, reserve=0, clock=lambda: now[0])
    assert budget.wait("a") == 0
    budget.spend("a")
    assert budget.wait("a") == 60  # once a minute per job
    assert budget.wait("b") == 0
    budget.spend("b")
    assert budget.wait("c") == pytest.approx(0.5)  # the burst is spent: two a second for all
    now[0] = 0.5
    assert budget.wait("c") == 0
    now[0] = 61
    assert budget.wait("a") == 0


def test_first_comments_go_before_updates_of_shown_ones() -> None:
    """Places moving in a deep queue can use the whole rate: part of the burst is kept for jobs that
    show no comment of the bridge's yet."""
    now = [0.0]
    budget = CommentBudget(per_job=60, rate=5, burst=20, reserve=10, clock=lambda: now[0])
    for i in range(10):  # updates of shown comments take the burst down to the reserve
        assert budget.wait(f"moved-{i}") == 0
        budget.spend(f"moved-{i}")
    assert budget.wait("moved-10") == pytest.approx(0.2), "an update waits for a token above the reserve"
    for i in range(10):  # first comments may take the reserve
        assert budget.wait(f"new-{i}", first=True) == 0
        budget.spend(f"new-{i}")
    assert budget.wait("new-10", first=True) == pytest.approx(0.2)
    now[0] = 0.2
    assert budget.wait("new-10", first=True) == 0
    assert budget.wait("moved-10") > 0, "while first comments take each token, updates wait"


def test_jobs_refused_a_comment_look_again_spread_over_the_backlog() -> None:
    """A thousand queued jobs whose comments are due and a budget of five writes a second: each looks
    again when its turn can come (about 200 s), not every second (a thousand reconciles a second)."""
    now = [0.0]
    budget = CommentBudget(per_job=60, rate=5, burst=1, clock=lambda: now[0])
    budget.spend("first")
    retries = []
    for i in range(1000):
        retries.append(budget.retry(f"job-{i}", budget.wait(f"job-{i}")))
        budget.held_back(f"job-{i}")
    assert retries[0] == 1.0  # alone in the backlog: the old minimum
    assert retries[-1] == pytest.approx(200.0)
    assert budget.retry("job-999", 0.2) == pytest.approx(200.0)  # asking again is not a new place
    budget.spend("job-0")
    budget.forget("job-1")
    budget.not_held_back("job-4")
    assert budget.retry("job-2", 0.2) == pytest.approx(997 / 5)
    now[0] = 1000.0  # those that stopped asking leave the backlog
    budget.held_back("job-3")
    assert budget.retry("job-3", 0.0) == 1.0


def test_only_jobs_that_want_a_comment_take_a_place_in_the_backlog() -> None:
    """Asking when one may write is no place in line: jobs whose comment is already shown (commented
    within the minute, so each of their events is refused by the per-job bound) would otherwise fill
    the backlog and push the real retries of the jobs that wait for their first comment far out."""
    now = [0.0]
    budget = CommentBudget(per_job=60, rate=5, burst=1, clock=lambda: now[0])
    for i in range(500):  # commented in turn, five a second
        now[0] = i * 0.2
        budget.spend(f"shown-{i}")
    now[0] = 100.2
    for i in range(500):  # the last 300 were commented within the minute: each look is refused
        budget.retry(f"shown-{i}", budget.wait(f"shown-{i}"))
    assert budget.retry("new", 0.1) == 1.0


def test_a_queued_job_whose_comment_is_held_back_says_so_in_its_decision() -> None:
    wl = pending("insufficient unused quota for cpu in flavor default, 1 more needed")
    held = decide(observe(job(), js=jobset(), wl=wl, comment_due=False, comment_retry=12.0))
    assert held.comment_held_back
    assert held.requeue_after == 12.0
    (written,) = decide(observe(job(), js=jobset(), wl=wl)).actions
    assert isinstance(written, WriteComment)
    shown = decide(
        observe(job(comment=written.text), js=jobset(), wl=wl, comment_due=False, comment_retry=9.0)
    )
    assert not shown.comment_held_back
    theirs = decide(observe(job(comment="mine"), js=jobset(), wl=wl, comment_due=False, comment_retry=9.0))
    assert not theirs.comment_held_back
    assert not decide(observe(job(), js=jobset(), wl=wl)).comment_held_back  # written now, not held


def test_a_requeue_waiting_on_a_silent_node_sets_it_down() -> None:
    """Its pods went with the lost-node replacement: slurmctld would wait SlurmdTimeout otherwise."""
    requeuing = job(state_flags=frozenset({"COMPLETING"}), state_reason="JobHeldUser")
    silent = (node("b42-0"), node("b42-1", flags=frozenset({"DYNAMIC_NORM", "NOT_RESPONDING"})))
    both = PodsView(active=2, running=2, present=2, active_nodes=frozenset(NAMES))
    d = decide(
        observe(requeuing, js=jobset(state=JobSetState.ACTIVE, deleting=True), nodes=silent, pods=both)
    )
    (down,) = d.actions
    assert isinstance(down, DownNodes)
    assert down.names == ("b42-1",)
    assert d.requeue_after
    # Without its pod, a node is silent before slurmctld notices (a minute or more).
    one = PodsView(active=1, running=1, present=1, active_nodes=frozenset({"b42-0"}))
    d = decide(observe(requeuing, js=jobset(state=JobSetState.ACTIVE, deleting=True), nodes=IDLE, pods=one))
    (down,) = d.actions
    assert isinstance(down, DownNodes)
    assert down.names == ("b42-1",)


def test_pods_view_names_the_nodes_of_its_active_pods() -> None:
    def pod(index: int, **extra: object) -> dict[str, object]:
        labels = {
            "bridge.k8s-bridge.io/slurm-job-id": "42",
            "batch.kubernetes.io/job-completion-index": str(index),
        }
        return {"metadata": {"name": f"p{index}", "labels": labels, **extra}, "status": {"phase": "Running"}}

    view = PodsView.of([pod(0), pod(1, deletionTimestamp="2026-01-01T00:00:00Z")])
    assert view.active_nodes == frozenset({"b42-0"})
    assert view.lost == ("p1: being deleted",)


def test_a_slurmd_pod_gone_from_the_cache_is_still_a_lost_node_by_its_jobs_completed_index() -> None:
    """The pod went while the bridge could not act (slurmctld down, a restart): only the JobSet's Job
    remembers it, as a completed index it will never run again."""
    one = PodsView(active=1, running=1, present=1, active_nodes=frozenset({"b42-1"}))
    d = decide(observe(job(), js=jobset(state=JobSetState.ACTIVE), wl=workload(WorkloadState.ADMITTED),
                       nodes=IDLE, pods=one, completed_indexes="0"))  # fmt: skip
    assert kinds(d) == ["delete_jobset"]
    assert "index 0 ended" in d.why
    run = decide(observe(running(), js=jobset(state=JobSetState.ACTIVE), wl=workload(WorkloadState.ADMITTED),
                         nodes=IDLE, pods=one, completed_indexes="0"))  # fmt: skip
    assert kinds(run) == ["requeue_hold", "delete_jobset"]


# --- pods in a MultiKueue worker cluster ----------------------------------------------------------

REMOTE = "kueue.x-k8s.io/multikueue"


def test_nodes_of_pods_in_a_worker_cluster_are_not_silent_for_want_of_local_pods() -> None:
    """MultiKueue runs the JobSet's pods in a worker cluster: none is in this cluster's cache, and a
    requeue must not set the job's live nodes DOWN for that."""
    requeuing = job(state_flags=frozenset({"COMPLETING"}), state_reason="JobHeldUser")
    remote = jobset(state=JobSetState.ACTIVE, deleting=True, managed_by=REMOTE)
    assert decide(observe(requeuing, js=remote, nodes=IDLE)).actions == ()
    silent = (node("b42-0"), node("b42-1", flags=frozenset({"DYNAMIC_NORM", "NOT_RESPONDING"})))
    (down,) = decide(observe(requeuing, js=remote, nodes=silent)).actions
    assert isinstance(down, DownNodes)
    assert down.names == ("b42-1",)


def test_a_running_job_whose_remote_node_stops_responding_is_a_lost_node() -> None:
    remote = jobset(state=JobSetState.ACTIVE, managed_by=REMOTE)
    admitted = workload(WorkloadState.ADMITTED)
    assert kinds(decide(observe(running(), js=remote, wl=admitted, nodes=IDLE))) == ["drain_nodes"]
    silent = (node("b42-0"), node("b42-1", flags=frozenset({"DYNAMIC_NORM", "NOT_RESPONDING"})))
    d = decide(observe(running(), js=remote, wl=admitted, nodes=silent))
    assert kinds(d) == ["requeue_hold", "delete_jobset"]
    requeue = d.actions[0]
    assert isinstance(requeue, RequeueHold)
    assert "b42-1: not responding" in requeue.reason


def test_stale_nodes_of_an_evicted_remote_jobset_go_once_kueue_has_suspended_it() -> None:
    """No remote pod is seen here: the suspension (Kueue's first step of taking it back) is the sign
    that they are going."""
    evicted = workload(WorkloadState.EVICTED)
    still_running = jobset(state=JobSetState.ACTIVE, managed_by=REMOTE)
    assert decide(observe(job(restart_count=1), js=still_running, wl=evicted, nodes=IDLE)).actions == ()
    suspended = jobset(managed_by=REMOTE)
    d = decide(observe(job(restart_count=1), js=suspended, wl=evicted, nodes=IDLE))
    assert kinds(d) == ["delete_nodes"]


def test_nodes_the_bridge_set_down_in_a_requeue_are_resumed_once_the_job_is_admitted_again() -> None:
    """A requeue that ended after Kueue admitted the job again (remote nodes are known lost only by
    slurmctld's timeouts): the new pods' slurmd register nodes still DOWN, which never become IDLE
    by themselves; a DOWN set by someone else stands."""
    requeued = job(restart_count=1, state_reason="JobHeldUser")
    remote = jobset(state=JobSetState.ACTIVE, managed_by=REMOTE)
    admitted = workload(WorkloadState.ADMITTED)
    left = node("b42-1", state=NodeState.DOWN).model_copy(
        update={"reason": "k8s-bridge: its slurmd is gone; the job is requeued"}
    )
    d = decide(observe(requeued, js=remote, wl=admitted, nodes=(node("b42-0"), left)))
    (resume,) = d.actions
    assert isinstance(resume, ResumeNodes)
    assert resume.names == ("b42-1",)
    assert d.requeue_after is not None
    by_admin = left.model_copy(update={"reason": "bad DIMM"})
    d = decide(observe(requeued, js=remote, wl=admitted, nodes=(node("b42-0"), by_admin)))
    assert kinds(d) == []
    assert "waiting for nodes" in d.why
    ready = decide(observe(requeued, js=remote, wl=admitted, nodes=IDLE))
    assert kinds(ready) == ["pin_and_release"]


def test_a_jobset_managed_by_jobsets_own_controller_runs_here() -> None:
    assert not jobset(managed_by="jobset.x-k8s.io/jobset-controller").runs_elsewhere
    assert not jobset().runs_elsewhere
    assert jobset(managed_by=REMOTE).runs_elsewhere


# --- reservations ----------------------------------------------------------------------------------


def reservation(name: str = "r1", **fields: Any) -> SlurmReservation:
    base: dict[str, Any] = {
        "name": name,
        "start_time": T0 - timedelta(minutes=5),
        "end_time": T0 + timedelta(hours=1),
        "flags": frozenset({"ANY_NODES"}),
        "licenses": "demo:1",
    }
    base.update(fields)
    return SlurmReservation(**base)


@pytest.mark.parametrize(
    ("listed", "reason"),
    [
        ({}, "its reservation r1 does not exist"),
        (
            {"r1": reservation(start_time=T0 + timedelta(hours=2))},
            "its reservation r1 starts at 2026-12-02T03:00:00Z",
        ),
        ({"r1": reservation(end_time=T0 - timedelta(seconds=1))}, "its reservation r1 has ended"),
        (
            {"r1": reservation(node_count=2, flags=frozenset({"SPEC_NODES"}))},
            "its reservation r1 holds nodes of its own",
        ),
        ({"r1": reservation(core_count=4, flags=frozenset())}, "its reservation r1 holds nodes of its own"),
    ],
)
def test_a_job_whose_reservation_keeps_it_from_bridge_nodes_gets_no_jobset_and_says_why(
    listed: dict[str, SlurmReservation], reason: str
) -> None:
    asks = job(reservation="r1")
    d = decide(observe(asks, now=NOW, reservations=listed))
    assert kinds(d) == ["write_comment"]
    assert reason in d.why
    # a reservation changes without its job changing: the bridge looks again itself
    assert d.requeue_after is not None
    assert 1.0 <= d.requeue_after <= WAIT_FOR_RESERVATION


@pytest.mark.parametrize(
    "usable",
    [
        reservation(),  # licenses only, active
        reservation(node_count=1, core_count=1, flags=frozenset({"FLEX", "SPEC_NODES"})),
    ],
)
def test_a_job_in_an_active_reservation_that_lets_it_use_other_nodes_is_bridged(
    usable: SlurmReservation,
) -> None:
    d = decide(observe(job(reservation="r1"), now=NOW, reservations={"r1": usable}))
    assert kinds(d) == ["create_jobset"]


def test_a_reservation_nobody_could_list_is_no_reason_to_wait() -> None:
    """slurmrestd did not answer the listing: the job is bridged, and Slurm's own pending reason
    gives the capacity back once released, if the reservation does keep it (the safety net)."""
    assert kinds(decide(observe(job(reservation="r1"), now=NOW, reservations=None))) == ["create_jobset"]
    assert blocked_reason(job(reservation="r1"), now=NOW) is None


def test_a_reservation_name_is_shown_escaped() -> None:
    assert reservation_reason("r\n1", None, now=NOW) == "its reservation r\\n1 does not exist"


def test_a_job_in_several_reservations_waits_only_while_none_serves_it() -> None:
    """sbatch takes a comma-separated list: Slurm runs the job in whichever one can."""
    later = reservation("r2", start_time=T0 + timedelta(hours=2))
    both = job(reservation="r1,r2")
    assert kinds(decide(observe(both, now=NOW, reservations={"r1": reservation(), "r2": later}))) == [
        "create_jobset"
    ]
    d = decide(observe(both, now=NOW, reservations={"r2": later}))
    assert kinds(d) == ["write_comment"]
    assert "its reservation r1 does not exist; its reservation r2 starts at" in d.why
