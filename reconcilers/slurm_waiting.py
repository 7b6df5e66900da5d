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

from dataclasses import dataclass
from datetime import UTC, datetime

from bridge.api.slurm_job import SlurmJob

__all__ = [
    "ADMIN_COMMENT_PREFIX",
    "RETRY_AFTER_GIVE_BACK",
    "TRANSIENT_REASONS",
    "BridgeHold",
    "begin_time_is_slurms_requeue_delay",
    "blocked_reason",
    "is_a_persons_admin_hold",
    "not_starting_reason",
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


def blocked_reason(job: SlurmJob, *, now: float) -> str | None:
    """Why Slurm would not start this job now even with its nodes up; None when it would.

    A requeued job's begin time that is Slurm's own delay is not a reason: the release sets it to now.
    """
    if job.dependency:
        if "(failed)" in job.dependency:
            return f"its dependency can never be satisfied ({ascii(job.dependency)[1:-1][:120]})"
        return f"it waits for its dependency ({ascii(job.dependency)[1:-1][:120]})"
    begin = job.eligible_time
    if begin is not None and begin.timestamp() > now and not begin_time_is_slurms_requeue_delay(job):
        return f"it may not start before {when(begin.timestamp())} (--begin)"
    return None


def not_starting_reason(job: SlurmJob) -> str | None:
    """For a released job that Slurm keeps pending: its reason when that is not Slurm about to start
    it (:data:`TRANSIENT_REASONS`); None otherwise."""
    reason = job.state_reason or "None"
    return None if reason in TRANSIENT_REASONS else reason


def is_a_persons_admin_hold(job: SlurmJob) -> bool:
    """Held as administrator, and not by the bridge (no mark of its own in the admin comment)."""
    return job.held_by == "admin" and BridgeHold.parse(job.admin_comment) is None


def retry_after_give_back(job: SlurmJob, *, now: float) -> int | None:
    """Epoch seconds until which a job the bridge gave back stays unbridged; None when not waiting."""
    record = BridgeHold.parse(job.admin_comment)
    if record is None or record.retry_after is None or record.retry_after <= now:
        return None
    return record.retry_after
