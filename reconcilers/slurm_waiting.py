"""Why Slurm would not start a job now, and the bridge's own record of the holds it makes.

The bridge asks Kueue for capacity only for a job that Slurm would start once it has its nodes: a
job with an unmet dependency or a begin time in the future would hold quota (and slurmd pods) while
it waits for something that is not capacity, and a dependent job holding the quota its own dependency
needs deadlocks the pool. A held job hides most of that (its reason is ``JobHeldUser``), so the job's
own fields are read: ``dependency`` (Slurm removes fulfilled entries, so any text left is unmet or
failed) and ``eligible_time`` (``--begin``). For what nobody foresaw there is a level-based safety
net: a job the bridge released that Slurm still keeps pending for a reason other than waiting for
its turn is given back (held again, its JobSet removed) with that reason written, and tried again
after :data:`RETRY_AFTER_GIVE_BACK` seconds.

The record lives in the job's admin comment, which only administrators (the bridge's SlurmUser
token among them) can write: a user cannot forge it to have an administrator's hold released.
``k8s-bridge: held`` marks a hold the bridge made; a job an administrator held by hand carries no
such mark and is not bridged until it is released (docs/controller.md, "Holds").

Pure functions of a :class:`~bridge.api.slurm_job.SlurmJob` and the time: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from bridge.api.slurm_job import JobState, SlurmJob
from bridge.api.slurm_reservation import SlurmReservation

__all__ = [
    "ADMIN_COMMENT_PREFIX",
    "RETRY_AFTER_GIVE_BACK",
    "TRANSIENT_REASONS",
    "BridgeHold",
    "Dependency",
    "begin_time_is_slurms_requeue_delay",
    "blocked_reason",
    "dependency_ids",
    "dependency_state",
    "is_a_persons_admin_hold",
    "marked_by_the_bridge",
    "not_starting_reason",
    "parse_dependencies",
    "reservation_reason",
    "retry_after_give_back",
    "when",
]

ADMIN_COMMENT_PREFIX = "k8s-bridge: held"
"""Every admin comment the bridge writes starts with this; only such comments are ever replaced."""

RETRY_AFTER_GIVE_BACK = 300
"""Seconds a job given back (Slurm kept it pending once released) waits before it is bridged again."""

REQUEUE_DELAY_MAX = 1202
"""The longest begin-time delay Slurm sets itself when it requeues a job: ``now + cred_expire + 1``
(``batch_requeue_fini`` in slurmctld's job_mgr.c, 22.05 and 24.11; ``cred_expire`` is 120 s by
default, and 1,200 s was the compiled default before it became a parameter). A requeued job whose
begin time lies at most this far after its submit time (which the requeue resets to its own moment)
waits on Slurm's delay, not on its user's ``--begin``."""

TRANSIENT_REASONS = frozenset(
    {
        "None",  # released, not yet looked at by the scheduler
        "Priority",
        "Resources",
        "Cleaning",  # the previous run of a requeued job is still being cleaned up
        "Prolog",
        "Configuring",
        "ReqNodeNotAvail",  # its own nodes: what happens to them is the lost-node rule's business
        "NodeDown",
        "JobHeldUser",
        "JobHeldAdmin",
    }
)
"""Reasons a released, pinned job may show while Slurm is about to start it (or while its nodes are
being dealt with); any other reason on a released job is one Slurm will not get past by itself soon."""


@dataclass(frozen=True, kw_only=True)
class BridgeHold:
    """What the bridge recorded in a job's admin comment."""

    retry_after: int | None = None
    """Epoch seconds: given back, bridged again from then on (None: an ordinary hold)."""
    reason: str = ""
    """Why it was given back (Slurm's reason), for the log and ``explain``."""

    def text(self) -> str:
        """The admin comment."""
        if self.retry_after is None:
            return ADMIN_COMMENT_PREFIX
        return f"{ADMIN_COMMENT_PREFIX}; retry-after={self.retry_after}; reason={_one_word(self.reason)}"

    @classmethod
    def parse(cls, admin_comment: str) -> BridgeHold | None:
        """The record, or None when the admin comment is not the bridge's."""
        if not admin_comment.startswith(ADMIN_COMMENT_PREFIX):
            return None
        retry_after: int | None = None
        reason = ""
        for part in admin_comment[len(ADMIN_COMMENT_PREFIX) :].split(";"):
            key, _, value = part.strip().partition("=")
            if key == "retry-after" and value.isdigit() and len(value) <= 12:
                retry_after = int(value)
            elif key == "reason":
                reason = value
        return cls(retry_after=retry_after, reason=reason)


def _one_word(text: str) -> str:
    return "".join(ch if ch.isascii() and (ch.isalnum() or ch in "_.-") else "_" for ch in text)[:64]


def when(epoch: float) -> str:
    """An instant as the comments show it (UTC, to the second)."""
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def begin_time_is_slurms_requeue_delay(job: SlurmJob) -> bool:
    """The job's begin time is the delay Slurm put on a requeue, not one its user set (see
    :data:`REQUEUE_DELAY_MAX`). Slurm keeps a user's begin time that is still ahead at the requeue."""
    if job.restart_count <= 0 or job.eligible_time is None or job.submit_time is None:
        return False
    delay = (job.eligible_time - job.submit_time).total_seconds()
    return 0 < delay <= REQUEUE_DELAY_MAX


@dataclass(frozen=True)
class Dependency:
    """One entry of a job's dependency list as Slurm prints it: ``afterok:12(unfulfilled)``,
    ``after:12+5(unfulfilled)`` (5 minutes after it started), ``singleton(unfulfilled)``."""

    kind: str
    job_id: int | None
    minutes: int = 0
    state: str = ""


_ENTRY = re.compile(
    r"^(?P<kind>[a-z]+)(?::(?P<id>[0-9]{1,12})(?:_(?:[0-9]+|\*))?(?:\+(?P<minutes>[0-9]{1,9}))?)?"
    r"(?:\((?P<state>[a-z]+)\))?$"
)


def parse_dependencies(text: str) -> tuple[tuple[Dependency, ...], bool]:
    """The entries of ``text`` and whether any one of them suffices (``?``-separated) rather than all
    (``,``). Entries Slurm would not print are left out (the safety net has the last word)."""
    any_of = "?" in text
    entries = []
    for raw in re.split(r"[,?]", text):
        match = _ENTRY.match(raw.strip())
        if match is None:
            continue
        entries.append(
            Dependency(
                kind=match["kind"],
                job_id=int(match["id"]) if match["id"] else None,
                minutes=int(match["minutes"] or 0),
                state=match["state"] or "",
            )
        )
    return tuple(entries), any_of


def dependency_ids(job: SlurmJob) -> tuple[int, ...]:
    """The jobs ``job`` depends on (to look up, and to reconcile ``job`` again when they change)."""
    entries, _ = parse_dependencies(job.dependency)
    return tuple(dict.fromkeys(e.job_id for e in entries if e.job_id is not None))


Verdict = Literal["met", "waits", "failed"]


def _verdict(entry: Dependency, dependee: SlurmJob | None, *, now: float) -> Verdict:
    """Slurm's own rule (``_test_job_dependency_common`` in job_scheduler.c, 22.05 and 24.11), read
    from the dependee as the bridge sees it. Slurm does not test the dependencies of a held job (its
    ``job_independent`` returns before), so the text of a held job stays ``(unfulfilled)``: the bridge
    has to read the dependees itself."""
    if entry.state == "failed":
        return "failed"
    if entry.job_id is None or entry.kind == "singleton":
        return "met"  # Slurm decides once released (the safety net gives the capacity back if not)
    if dependee is None:
        return "met"  # gone from slurmctld: Slurm lifts the dependency too
    ended = dependee.is_finished and not dependee.is_completing
    if entry.kind == "after":
        if dependee.is_pending:
            return "waits"
        started = dependee.start_time.timestamp() if dependee.start_time is not None else now
        return "met" if now - started >= entry.minutes * 60 else "waits"
    if not ended:
        return "waits"
    if entry.kind == "afterok":
        return "met" if dependee.state is JobState.COMPLETED else "failed"
    if entry.kind == "afternotok":
        return "failed" if dependee.state is JobState.COMPLETED else "met"
    return "met"  # afterany, aftercorr, afterburstbuffer: it has ended


def dependency_state(job: SlurmJob, dependees: Mapping[int, SlurmJob | None], *, now: float) -> Verdict:
    """Whether the job's dependencies are met, can never be, or are still waited for."""
    entries, any_of = parse_dependencies(job.dependency)
    verdicts = [
        _verdict(e, dependees.get(e.job_id) if e.job_id is not None else None, now=now) for e in entries
    ]
    if not verdicts:
        return "met"
    if any_of:
        if "met" in verdicts:
            return "met"
        return "failed" if all(v == "failed" for v in verdicts) else "waits"
    if "failed" in verdicts:
        return "failed"
    return "met" if all(v == "met" for v in verdicts) else "waits"


def blocked_reason(
    job: SlurmJob,
    *,
    now: float,
    dependees: Mapping[int, SlurmJob | None] | None = None,
    reservations: Mapping[str, SlurmReservation] | None = None,
) -> str | None:
    """Why Slurm would not start this job now even with its nodes up; None when it would.

    ``dependees``: the jobs it depends on as last seen (None: gone from slurmctld); without them
    (None) the dependency text alone decides, which Slurm does not update while the job is held.
    ``reservations``: slurmctld's reservations by name, as last listed (None: nobody looked, and a
    job's reservation is then not a reason).
    A requeued job's begin time that is Slurm's own delay is not a reason: the release sets it to now.
    """
    if job.reservation and reservations is not None:
        # `--reservation=a,b`: the job may run in any one of them; it waits only when none serves.
        names = [name for name in job.reservation.split(",") if name]
        reasons = [reservation_reason(name, reservations.get(name), now=now) for name in names]
        if reasons and all(reason is not None for reason in reasons):
            return "; ".join(reason for reason in reasons if reason is not None)
    if job.dependency:
        shown = ascii(job.dependency)[1:-1][:120]
        verdict = (
            dependency_state(job, dependees, now=now)
            if dependees is not None
            else ("failed" if "(failed)" in job.dependency else "waits")
        )
        if verdict == "failed":
            return f"its dependency can never be satisfied ({shown})"
        if verdict == "waits":
            return f"it waits for its dependency ({shown})"
    begin = job.eligible_time
    if begin is not None and begin.timestamp() > now and not begin_time_is_slurms_requeue_delay(job):
        return f"it may not start before {when(begin.timestamp())} (--begin)"
    return None


def reservation_reason(name: str, reservation: SlurmReservation | None, *, now: float) -> str | None:
    """Why the job's reservation ``name`` keeps it from starting on bridge nodes; None when it does not.

    Slurm starts such a job only while the reservation is active, and only on its nodes when it
    reserves nodes or cores (unless it is FLEX): the bridge's nodes, made for the job once Kueue
    admits it, are in no reservation."""
    shown = ascii(name)[1:-1][:64]
    if reservation is None:
        return f"its reservation {shown} does not exist"
    if reservation.start_time is not None and reservation.start_time.timestamp() > now:
        return f"its reservation {shown} starts at {when(reservation.start_time.timestamp())}"
    if reservation.end_time is not None and reservation.end_time.timestamp() <= now:
        return f"its reservation {shown} has ended"
    if reservation.holds_nodes:
        return (
            f"its reservation {shown} holds nodes of its own, and bridged jobs run on nodes created for "
            "them (a FLEX reservation, or one of licenses only, can be used)"
        )
    return None


def not_starting_reason(job: SlurmJob) -> str | None:
    """For a released job that Slurm keeps pending: its reason when that is not Slurm about to start
    it (:data:`TRANSIENT_REASONS`); None otherwise."""
    reason = job.state_reason or "None"
    return None if reason in TRANSIENT_REASONS else reason


def marked_by_the_bridge(job: SlurmJob) -> bool:
    """The job's admin comment carries the bridge's mark (its hold, or its give-back record)."""
    return BridgeHold.parse(job.admin_comment) is not None


def is_a_persons_admin_hold(job: SlurmJob) -> bool:
    """Held as administrator, and not by the bridge (no mark of its own in the admin comment)."""
    return job.held_by == "admin" and not marked_by_the_bridge(job)


def retry_after_give_back(job: SlurmJob, *, now: float) -> int | None:
    """Epoch seconds until which a job the bridge gave back stays unbridged; None when not waiting."""
    record = BridgeHold.parse(job.admin_comment)
    if record is None or record.retry_after is None or record.retry_after <= now:
        return None
    return record.retry_after
