"""The Slurm bridge's reconciler: one bridged Slurm job, observed whole, moved one step.

Level-based, as in the design's state table (docs/controller.md, "State table"). Each reconcile
observes everything about one job: the Slurm job (from the polled job source), its JobSet (from an
informer, by the job's labels), the Workload Kueue made for it (by ``kueue.x-k8s.io/job-uid``), the
JobSet's pods, and the dynamic Slurm nodes made for it (from the polled node source). Nothing else
is remembered between reconciles, so a crash anywhere is recovered by observing again.

Why split in two: :func:`decide` is a pure function from an :class:`Observed` to a
:class:`Decision` (actions + when to look again + the job's phase). Every row of the table, every
crash-recovery state and every hostile input is a unit test of that function, with no event loop
and no fakes. :class:`SlurmReconciler` only gathers the observation and executes the actions.

Why every action is safe to repeat: names are deterministic (the JobSet of a job, the nodes of a
JobSet), creates ignore AlreadyExists, deletes ignore NotFound/InvalidNodeName, and finalizers are
patched with the resourceVersion read.

Which decisions are confirmed first (``Action.needs_confirmation``, ``Decision.needs_confirmation``):
the cached job may lag a poll behind slurmctld (and behind the bridge's own last write), so a
decision that could do harm on a stale job is taken again on a fresh read (``GET /job/<id>``) before
anything runs: pin-and-release (a job is pinned and released only while it is still held),
requeue-hold, the guard's holds, the unservable report (no duplicate Event after our own comment)
and clearing a comment (a user may have written their own since the poll), the cleanup of a job
missing from the cache (it may not be in the cache yet), and every removal of a live job's nodes
(rows 4, 15, 16 and 18: a cache a poll behind the bridge's own release still shows the job held, and
its nodes would be deleted under a job Slurm is starting), which includes replacing the JobSet of a
job changed by its user (row 16: the cache may also be a poll behind the read the JobSet was made
from, and show the job as it was before the change). The decision that creates a JobSet for a
held job is not confirmed: it is the bulk of the work and everything in it is harmless on a stale
view, because the JobSet cache (not the job) says there is no JobSet, and whatever the job became
since the poll, a reconcile after the next poll finds the JobSet and does what the fresh job calls
for:

- still user-held (the usual case): the same decision a fresh read would give;
- already admin-held: holding it again is a no-op;
- released by its user: the hold conversion holds it (row 11, the guard, would do exactly that);
  the bridge cannot have released it, as it releases only jobs whose JobSet exists;
- running (the guard was bypassed): Slurm refuses the hold or zeroes the running job's priority,
  both harmless; a following reconcile requeue-holds it (it runs on nodes not its own, or without
  admission once Kueue has made the Workload), as a fresh read would have done at once;
- completing or requeued: holding it now is what rows 9 and 11 end with;
- finished or purged: the hold finds it gone (logged); the suspended JobSet, never admitted yet, is
  deleted after the next poll by row 1 (one create and one delete spent);
- changed by its user (e.g. more nodes): the JobSet follows the job as last polled and records
  that shape (``ANNOTATION_SHAPE``); once a poll shows the change, row 16 replaces it (confirmed on
  a fresh read, while the job is still held), exactly as for a change made after the JobSet.

Independent actions run at once (``Decision.concurrent``: creating the JobSet and clearing an old
comment); every other decision runs in order and stops at the first failure, which cleanup relies on
(drain, delete the JobSet, delete the nodes, and only then remove the finalizer).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Protocol

import structlog

from bridge.admission import (
    FOREGROUND_DELETION,
    JOB_UID_LABEL,
    QUEUE_NAME_LABEL,
    JobSetState,
    JobSetView,
    WorkloadState,
    WorkloadView,
    describe_jobset,
    describe_workload,
    select_workload,
)
from bridge.api.mixing import WorkloadMixingSpec
from bridge.api.slurm_job import SlurmJob
from bridge.api.slurm_node import NodeState, SlurmNode
from bridge.api.slurm_reservation import SlurmReservation
from bridge.runtime.cache import Store
from bridge.runtime.client import Client
from bridge.runtime.controller import Request, Result
from bridge.runtime.errors import AlreadyExists, NotFound
from bridge.runtime.events import EventRecorder
from bridge.runtime.finalizers import add_finalizer, has_finalizer, remove_finalizer
from bridge.runtime.handlers import Object
from bridge.slurm.metrics import SlurmMetrics
from bridge.slurm.source import job_key, node_of
from bridge.slurmrest.errors import (
    InvalidFeature,
    InvalidJobId,
    InvalidNodeName,
    JobAlreadyDone,
    SlurmAPIError,
    SlurmAuthError,
    SlurmUnavailable,
)
from reconcilers.queue_positions import MISSING_AGE, QueuePositionSource
from reconcilers.slurm_expectations import NodeListings, NodeWrites, Remembered
from reconcilers.slurm_fresh_reads import FreshReads
from reconcilers.slurm_reservations import ReservationCache
from reconcilers.slurm_waiting import (
    RETRY_AFTER_GIVE_BACK,
    BridgeHold,
    begin_time_is_slurms_requeue_delay,
    blocked_reason,
    dependency_ids,
    is_a_persons_admin_hold,
    marked_by_the_bridge,
    not_starting_reason,
    retry_after_give_back,
    when,
)
from translators.slurm import (
    ANNOTATION_FEATURE,
    ANNOTATION_HOLDS_MARKED,
    ANNOTATION_NODES,
    ANNOTATION_SHAPE,
    DEFAULT_OPTIONS,
    FINALIZER,
    JOB_FEATURE_PREFIX,
    JOBSET_API_VERSION,
    JOBSET_KIND,
    LABEL_CLUSTER,
    LABEL_JOB_ID,
    LABEL_RUN,
    SHAPE_PREFIX,
    Translation,
    TranslationOptions,
    Untranslatable,
    is_own_node_name,
    job_feature,
    node_name,
    node_name_job_id,
    node_names,
    shape_fingerprint,
    translate,
)

__all__ = [
    "COMMENT_PREFIX",
    "FIELD_MANAGER",
    "INDEX_DEPENDS_ON",
    "INDEX_JOB",
    "INDEX_JOB_UID",
    "KEPT_FOR_JOB",
    "RELEASE_PRIORITY",
    "Action",
    "AddFinalizer",
    "ClearComment",
    "CommentBudget",
    "ConvertHold",
    "CreateJobSet",
    "Decision",
    "DeleteChildJobs",
    "DeleteJobSet",
    "DeleteNodes",
    "DeletePods",
    "DownNodes",
    "DrainNodes",
    "Hold",
    "MarkHeld",
    "MixingConfig",
    "Observed",
    "Phase",
    "PinAndRelease",
    "PodsView",
    "RemoveFinalizer",
    "ReportUnservable",
    "RequeueHold",
    "ResumeNodes",
    "SlurmActions",
    "SlurmObserver",
    "SlurmReconciler",
    "WriteComment",
    "decide",
    "dependency_keys",
    "jobset_job_keys",
    "node_job_id",
    "node_job_keys",
    "pod_job_keys",
    "pod_node_name",
    "request_for_key",
    "unservable_comment",
    "waiting_comment",
    "workload_uid_keys",
]

log = structlog.get_logger(__name__)

FIELD_MANAGER = "k8s-bridge-slurm"
COMMENT_PREFIX = "k8s-bridge: "
"""Every comment the bridge writes on a job starts with this; only such comments are ever cleared."""
KEPT_FOR_JOB = f"{COMMENT_PREFIX}kept for job "
"""How the reason of a node the bridge drained while its job runs on it begins."""
_COMMENT_MAX = 480

INDEX_JOB = "slurm-job"
"""Informer/store index: ``<cluster>/<job id>`` of a JobSet or pod (labels); job id of a node."""
INDEX_JOB_UID = "job-uid"
"""Workload index: the JobSet uid in ``kueue.x-k8s.io/job-uid``."""
INDEX_LOCAL_QUEUE = "local-queue"
"""JobSet index: ``<namespace>/<LocalQueue>`` of the queue a JobSet is submitted to."""

WAIT_FOR_NODES = 1.0
"""Seconds between looks while admitted and waiting for the job's nodes (the node source also
triggers a reconcile when they change; this is the safety net)."""
RELEASE_PRIORITY = 10
"""Work-queue priority of a node event of a job admitted and waiting for its nodes
(:meth:`SlurmReconciler.release_priority`): its reconcile may be the release, which would otherwise
wait behind the ordinary reconciles queued at 0 (cleanups of ending jobs, creations)."""
WAIT_FOR_SLURM = 1.0
"""Seconds between looks while Slurm carries out a requeue-hold (COMPLETING -> PENDING held)."""
WAIT_FOR_COLLECTION = 10.0
"""Seconds between looks while a deleted JobSet's Jobs are not collected yet, before a new JobSet of
the job is made (their deletion reconciles the job too)."""
WAIT_FOR_BEGIN = 60.0
"""Longest wait between looks at a job that is not bridged until a time (its begin time, a retry)."""
WAIT_FOR_DEPENDENCY = 30.0
"""Seconds between looks at a job waiting for a dependency on a job outside the bridged partitions."""
WAIT_FOR_RESERVATION = 15.0
"""Seconds between looks at a job waiting for its reservation: a reservation changes (starts, is
updated or deleted) without its jobs changing."""
WAIT_FOR_PLACE = MISSING_AGE + 0.5
"""Seconds before looking again at a job new in Kueue's queue whose place is being read: its first
comment then names the place, rather than a second write adding it."""
TRANSLATIONS_KEPT = 512
"""Translations the observer keeps for jobs it may look at again (:meth:`SlurmObserver._translate`)."""
WAIT_FOR_SLOT = 10.0
"""Seconds between looks while ``limits.maxBridgedJobs`` JobSets exist."""
SLURM_RETRY = 5.0
"""Seconds before retrying when slurmrestd is unreachable (the job source's recovery replays all
jobs sooner)."""


class Phase(enum.StrEnum):
    """Where a bridged job stands; a metric label and a log field."""

    HELD = "held"
    UNSERVABLE = "unservable"
    WAITING = "waiting"
    """Held and not bridged: Slurm would not start it yet (dependency, begin time, an
    administrator's hold, a give-back's retry time)."""
    QUEUED = "queued"
    ADMITTED = "admitted"
    RELEASING = "releasing"
    RUNNING = "running"
    EVICTED = "evicted"
    FINISHING = "finishing"


# --- actions -----------------------------------------------------------------------------------


class Action:
    """One step the reconciler executes; ``kind`` labels metrics and logs."""

    kind: ClassVar[str] = "action"
    slurm_write: ClassVar[bool] = False
    """Writes to the Slurm job: the job source reads the job again at once afterwards (unless
    ``poll_after`` is False), so the next reconcile sees the effect."""
    poll_after: ClassVar[bool] = True
    """After a Slurm write, read the job again at once rather than wait for the next list."""
    node_write: ClassVar[bool] = False
    """Changes Slurm nodes: the node source polls at once afterwards (when the reconciler has its
    trigger), so the next reconcile sees them gone or DOWN."""
    needs_confirmation: ClassVar[bool] = False
    """Could do harm if decided on a job the cache shows a poll behind: a decision containing it is
    taken again on a fresh read of the job (``GET /job/<id>``) before anything of it runs."""


@dataclass(frozen=True, kw_only=True)
class CreateJobSet(Action):
    kind: ClassVar[str] = "create_jobset"
    manifest: Mapping[str, Any]


@dataclass(frozen=True, kw_only=True)
class AddFinalizer(Action):
    kind: ClassVar[str] = "add_finalizer"


@dataclass(frozen=True, kw_only=True)
class RemoveFinalizer(Action):
    kind: ClassVar[str] = "remove_finalizer"
    answered: bool = False
    """The JobSet at hand is the API server's answer to this reconcile's own delete (its current
    resourceVersion): the finalizer is removed without reading the JobSet again. Set by the
    reconciler, never by ``decide``; otherwise the JobSet is read first (the cache's may be stale)."""


@dataclass(frozen=True, kw_only=True)
class DeleteJobSet(Action):
    """Delete the job's JobSet: in the foreground while a pod of it may exist, else in the background.

    Foreground keeps the JobSet (and the node names recorded on it) until the garbage collector has
    deleted its Jobs and pods, so every look meanwhile still knows which nodes could exist. A JobSet
    that never left suspension had no pod (``_unseen_nodes_could_exist`` is false), so nothing needs
    that wait: with background propagation it is gone as soon as the bridge's finalizer is, and the
    collector deletes its suspended Jobs afterwards. A foreground deletion waits on the collector's
    rate-limited retries of the owner (an exponential per-object backoff in kube-controller-manager),
    which for a burst of hundreds of cancelled queued jobs kept their JobSets for many minutes.

    Once no pod of a JobSet deleted in the foreground is left, the bridge deletes it again in the
    background, which takes the collector's ``foregroundDeletion`` finalizer off: what else it waits
    for is Kueue's Workload (owned by the JobSet, ``blockOwnerDeletion``), and Kueue 0.17 finalizes
    that Workload only once its owner is gone, so neither would ever go (admitted jobs' JobSets
    after a mass cancel, kept past every wait). Its Jobs and the Workload are then collected as
    orphans of a deleted owner."""

    kind: ClassVar[str] = "delete_jobset"
    foreground: bool = True


@dataclass(frozen=True, kw_only=True)
class DeleteChildJobs(Action):
    """Delete the Jobs of a JobSet deleted in the foreground, in the background: their pods then go
    as orphans at once. The collector reaches a foreground deletion's Jobs only through its
    exponentially backed-off retries of the JobSet: after a mass cancel, pods that Kueue started in
    the freed quota before the bridge deleted their JobSets ran on for minutes. A Job the collector
    has reached meanwhile is itself deleted in the foreground and waits the same way for its pods;
    deleted again in the background, the API server drops its ``foregroundDeletion`` finalizer and
    the Job goes at once (seen on the local stack: 13 such pods still running 100 s after a mass
    cancel)."""

    kind: ClassVar[str] = "delete_child_jobs"
    names: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class DeletePods(Action):
    """Delete the pods of a JobSet deleted in the foreground whose Jobs are gone or going at once.

    Such pods are orphans that only the garbage collector deletes, and after a mass cancel its queue
    holds every deleted JobSet, Job and Workload: on the local stack 11 slurmd pods of cancelled jobs
    still ran 200 s after the cancel, and their JobSets with them. The bridge deletes them itself,
    as the collector would: the kubelet then stops them within their grace period. Never while a
    Job of the JobSet is not being deleted (it would make the pods again)."""

    kind: ClassVar[str] = "delete_pods"
    names: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class DrainNodes(Action):
    """Drain nodes (a running job's, to keep them for it; an ended job's, before they are deleted).
    No node poll at once: nothing waits on seeing the drain, and ``Observed.nodes_drained`` keeps it
    from being made again meanwhile."""

    kind: ClassVar[str] = "drain_nodes"
    names: tuple[str, ...]
    reason: str


@dataclass(frozen=True, kw_only=True)
class DownNodes(Action):
    """Set nodes DOWN whose slurmd will never answer again, so that Slurm finishes their job."""

    kind: ClassVar[str] = "down_nodes"
    node_write: ClassVar[bool] = True
    names: tuple[str, ...]
    reason: str


@dataclass(frozen=True, kw_only=True)
class ResumeNodes(Action):
    """Resume nodes the bridge set DOWN, or drained while the job ran, in an earlier run of the job:
    a live slurmd's node is IDLE at once, a new slurmd's at its registration (slurmctld keeps a DOWN
    or a drain set by hand across a slurmd's return)."""

    kind: ClassVar[str] = "resume_nodes"
    node_write: ClassVar[bool] = True
    names: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class DeleteNodes(Action):
    """Delete the job's dynamic nodes (each set DOWN first when Slurm says it is busy)."""

    kind: ClassVar[str] = "delete_nodes"
    node_write: ClassVar[bool] = True
    names: tuple[str, ...]
    down_already: tuple[str, ...] = ()
    """Nodes the node source shows DOWN: never set DOWN again. On slurmctld 22.05.8 a second DOWN
    of a node whose job is still completing on it crashed slurmctld (docs/slurm-stack-notes.md)."""


@dataclass(frozen=True, kw_only=True)
class Hold(Action):
    """Hold a pending job (an admin hold: the bridge's token is SlurmUser's).

    Holding the bridge's own release (rows 3 and 11) always clears its pin in the same update
    (``unpin``), not only as a retry after a refusal: it costs no extra call, and a pin kept on a held
    job goes stale once its nodes are deleted next (its JobSet going, or its pods after an eviction),
    after which Slurm 24.11 refuses every update of the job with 2018 (a later hold, a comment) and
    both 22.05 and 24.11 fail it NODE_FAIL at the next ``scontrol reconfigure``. Unpinning as a retry
    after 2018 would not help either: 24.11 refuses the update before it reads the body, so when the
    nodes are already gone the client lends their names FUTURE placeholders for the update
    (``SlurmClient.hold_job``). The constraint (the job's feature) stays, so a job released by
    mistake still runs only on nodes made for it, and the release (``PinAndRelease``) pins again.
    A user's own node list (``-w``) is never cleared.
    """

    kind: ClassVar[str] = "hold"
    slurm_write: ClassVar[bool] = True
    needs_confirmation: ClassVar[bool] = True
    reason: str
    best_effort: bool = False
    """A refusal is logged, not retried (24.11 refuses to hold a job its user already holds)."""
    unpin: tuple[str, ...] = ()
    """The job's own bridge node names when it is pinned to exactly them and its feature (the
    bridge's release, ``SlurmJob.is_pinned_to``): cleared with the hold. Empty for any other job."""
    admin_comment: str | None = None
    """The bridge's mark (``BridgeHold``), written with the hold; None: left as it is."""
    comment: str | None = None
    """The reason for the job's user, written with the hold; None: left as it is."""
    event: str = ""
    """The reason of a Warning Event on the JobSet once held (``reason`` is its note); "": none."""


@dataclass(frozen=True, kw_only=True)
class ConvertHold(Hold):
    """Turn sbatch's user hold into the bridge's marked admin hold, once the job's JobSet exists.

    Never beside the JobSet's creation: a conversion that landed next to a failed create would leave
    an admin hold without a JobSet, which only its mark tells from an administrator's. Best effort,
    and not confirmed on a fresh read: holding is what the bridge wants for any bridged job that
    Kueue has not admitted, whatever state the cached job lags behind (module docstring)."""

    kind: ClassVar[str] = "convert_hold"
    needs_confirmation: ClassVar[bool] = False
    poll_after: ClassVar[bool] = False
    """Nothing waits on seeing the admin hold, and in a burst of held jobs a poll after each
    conversion keeps slurmctld and slurmrestd listing every job back to back."""
    best_effort: bool = True


@dataclass(frozen=True, kw_only=True)
class RequeueHold(Action):
    """Put a running job back in the queue, held (before Slurm requeues it onto dead nodes)."""

    kind: ClassVar[str] = "requeue_hold"
    slurm_write: ClassVar[bool] = True
    needs_confirmation: ClassVar[bool] = True
    reason: str


@dataclass(frozen=True, kw_only=True)
class PinAndRelease(Action):
    """Pin to exactly ``nodes`` and ``constraints`` and release, in one REST call."""

    kind: ClassVar[str] = "pin_and_release"
    slurm_write: ClassVar[bool] = True
    needs_confirmation: ClassVar[bool] = True
    nodes: tuple[str, ...]
    constraints: str
    begin_now: bool
    """Set ``begin_time`` to now: a requeued job would otherwise wait ~2 min (reason BeginTime).
    Only over Slurm's own requeue delay, never over a begin time its user set."""
    clear_comment: bool = False
    """The job's comment is the bridge's (why it waited): cleared in the same call."""
    clear_admin_comment: bool = False
    """The admin comment is the bridge's mark: cleared, so that a later hold by an administrator is
    not taken for the bridge's."""


@dataclass(frozen=True, kw_only=True)
class ReportUnservable(Action):
    """Write why the job stays held into its comment, and a Warning Event on the WorkloadMixing."""

    kind: ClassVar[str] = "report_unservable"
    slurm_write: ClassVar[bool] = True
    needs_confirmation: ClassVar[bool] = True
    code: str
    reason: str
    comment: str


@dataclass(frozen=True, kw_only=True)
class ClearComment(Action):
    """Remove a reason the bridge wrote earlier (the job has become servable)."""

    kind: ClassVar[str] = "clear_comment"
    slurm_write: ClassVar[bool] = True
    needs_confirmation: ClassVar[bool] = True


@dataclass(frozen=True, kw_only=True)
class WriteComment(Action):
    """Say in the job's comment why it waits (only over an empty comment or the bridge's own)."""

    kind: ClassVar[str] = "write_comment"
    slurm_write: ClassVar[bool] = True
    needs_confirmation: ClassVar[bool] = True
    """The user may have written a comment of their own since the poll."""
    poll_after: ClassVar[bool] = True
    """Read back at once, although nothing else waits on seeing it: a look at the job before the
    job source shows the comment would find it missing, take it for a comment the budget holds back
    (``CommentBudget``: once a minute per job) and put the job in the backlog that spaces every
    queued job's first comment (a soak without the read: 790 s for 1,000 first comments, against
    300 to 670 s in the runs with it; docs/controller.md, "seventh round")."""
    text: str
    event: str = ""
    """The reason of a Warning Event on the JobSet (the text is its note); "": none."""


@dataclass(frozen=True, kw_only=True)
class MarkHeld(Action):
    """Record in the admin comment that the bridge holds the job, before its JobSet goes: without a
    JobSet, only the mark tells the bridge's hold from an administrator's."""

    kind: ClassVar[str] = "mark_held"
    slurm_write: ClassVar[bool] = True
    poll_after: ClassVar[bool] = False
    admin_comment: str


@dataclass(frozen=True, kw_only=True)
class Decision:
    """What to do now, when to look again (None: only on a change), and the job's phase."""

    actions: tuple[Action, ...] = ()
    """Run one after another in this order, stopping at the first failure (cleanup depends on it:
    the finalizer goes only after the nodes), unless ``concurrent``."""
    concurrent: bool = False
    """The actions are independent (none needs another's effect, any order is right): they run at
    once, one task each, all awaited; a failure does not cancel the others, and the first failure in
    ``actions`` order is raised once all have finished."""
    confirm: bool = False
    """Confirm on a fresh read of the job even if no action asks for it: the job is missing from the
    cache ("vanished" must be true before its JobSet and nodes are cleaned up), or the nodes of a job
    the cache shows held are removed (it may have been released since the poll)."""
    requeue_after: float | None = None
    phase: Phase | None = None
    """None: nothing of this job is left to track (finished and cleaned up, or not ours)."""
    why: str = ""
    comment_held_back: bool = False
    """A comment the job does not show yet is held back by the budget (``Observed.comment_due``
    false): the job takes a place in the budget's backlog of refused jobs."""

    @property
    def needs_confirmation(self) -> bool:
        """Take this decision again on a fresh read of the job before running it."""
        return bool(self.actions) and (self.confirm or any(a.needs_confirmation for a in self.actions))


# --- observation -------------------------------------------------------------------------------


_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


def pod_node_name(pod: Mapping[str, Any]) -> str | None:
    """The Slurm node a slurmd pod runs (``b<job id>[r<run>]-<completion index>``), from its labels;
    None for a pod without them."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    job_id, index, run = labels.get(LABEL_JOB_ID), labels.get(_COMPLETION_INDEX), labels.get(LABEL_RUN, "0")
    if job_id is not None and job_id.isdigit() and index is not None and run.isdigit():
        return node_name(int(job_id), index, run=int(run))
    return None


@dataclass(frozen=True, kw_only=True)
class PodsView:
    """The JobSet's pods, counted."""

    active: int = 0
    """Pods not finished and not being deleted."""
    running: int = 0
    present: int = 0
    """Every pod in the cache, finished and terminating ones too (a terminating slurmd still runs)."""
    lost: tuple[str, ...] = ()
    """Pods that ended (Succeeded, Failed) or are being deleted, each as ``name: what``: a slurmd
    that stops while its job lives is a lost node (slurmd exits 0 on SIGTERM, so Succeeded too)."""
    active_nodes: frozenset[str] = frozenset()
    """The Slurm node names (``b<job id>[r<run>]-<completion index>``) whose slurmd pod is active."""
    undeleted: tuple[str, ...] = ()
    """Names of the pods not being deleted (finished ones too)."""

    @classmethod
    def of(cls, pods: Iterable[Mapping[str, Any]]) -> PodsView:
        active = running = present = 0
        lost: list[str] = []
        undeleted: list[str] = []
        active_nodes: set[str] = set()
        for pod in pods:
            present += 1
            metadata = pod.get("metadata") or {}
            phase = (pod.get("status") or {}).get("phase")
            if "deletionTimestamp" not in metadata:
                undeleted.append(str(metadata.get("name", "")))
            if "deletionTimestamp" in metadata or phase in ("Succeeded", "Failed"):
                what = "being deleted" if "deletionTimestamp" in metadata else str(phase)
                lost.append(f"{metadata.get('name', '?')}: {what}")
                continue
            active += 1
            running += phase == "Running"
            if (name := pod_node_name(pod)) is not None:
                active_nodes.add(name)
        return cls(
            active=active,
            running=running,
            present=present,
            lost=tuple(sorted(lost)),
            active_nodes=frozenset(active_nodes),
            undeleted=tuple(sorted(undeleted)),
        )


@dataclass(frozen=True, kw_only=True)
class Observed:
    """Everything one reconcile knows about one job."""

    job_id: int
    job: SlurmJob | None
    """None: not (or no longer) known to slurmctld, i.e. finished and purged after MinJobAge."""
    partitions: frozenset[str]
    """The bridged partitions of the live configuration."""
    translation: Translation | Untranslatable | None = None
    """What would serve the job (None when the job is gone)."""
    jobset: JobSetView | None = None
    has_finalizer: bool = False
    jobset_nodes: tuple[str, ...] = ()
    """The node names recorded on the JobSet (annotation), for when the job cannot be translated."""
    jobset_feature: str = ""
    jobset_shape: str = ""
    """The job's shape recorded on the JobSet when it was made (``ANNOTATION_SHAPE``; "" on a JobSet
    of an older bridge), compared with the job's own now."""
    jobset_marks_holds: bool = True
    """The JobSet was made by a bridge that marks its holds (``ANNOTATION_HOLDS_MARKED``): an unmarked
    admin hold of its job is an administrator's. False on an older bridge's JobSet."""
    workload: WorkloadView | None = None
    nodes: tuple[SlurmNode, ...] = ()
    """The dynamic nodes registered for this job (feature ``bridge-job-<id>``, else a name
    ``b<id>[r<run>]-<i>``)."""
    pods: PodsView = field(default_factory=PodsView)
    completed_indexes: str = ""
    """``status.completedIndexes`` of the JobSet's Job: slurmd pods that ended with 0 (a slurmd that
    Slurm itself stopped, or one of an older bridge, whose slurmd exited 0 on SIGTERM), which the Job
    never replaces. Kept by the Job after the pod itself is gone."""
    child_jobs_to_delete: tuple[str, ...] = ()
    """Names of the JobSet's own Jobs that are not going at once: not being deleted (the collector
    has not come round to them), or being deleted in the foreground (waiting on the collector to
    delete their pods)."""
    stale_child_jobs: int = 0
    """Jobs of the job's key that no current JobSet owns: a deleted JobSet's, not collected yet. JobSet
    adopts child Jobs by the owner's name, so a JobSet made again under that name before they go
    would take them (their old shape) for its own."""
    failed_pods: int = 0
    """``status.failed`` of the JobSet's Job: slurmd pods that failed or were deleted before they ended
    (a crash restarts in place and is not counted). The Job replaces such a pod under the same node
    name, so after the replacement this count is all that is left of the loss."""
    bridged_jobs: int = 0
    """JobSets of this cluster that exist (for ``limits.maxBridgedJobs``)."""
    max_bridged_jobs: int | None = None
    now: float = 0.0
    """Wall-clock seconds (epoch): begin times and give-back retries are compared with it."""
    dependees: Mapping[int, SlurmJob | None] | None = None
    """The jobs this job depends on, as last polled (None: gone from slurmctld); None when it depends
    on none, or nobody looked."""
    queue_place: str | None = None
    """Where the pending Workload stands in its ClusterQueue, as shown ("3rd in its ClusterQueue";
    Kueue's visibility API), when served."""
    queue_place_pending: bool = False
    """The Workload is new in its queue and its place is being read (within a second or so)."""
    reservations: Mapping[str, SlurmReservation] | None = None
    """slurmctld's reservations by name, as last listed, for a job that asks for one; None when it
    asks for none, or nobody could look."""
    hold_converted: bool = False
    """This process turned the job's user hold into the bridge's admin hold already; the job source
    may show it a poll later (the conversion does not poll at once), and converting again on each
    event of the queued job would be one write to slurmctld each."""
    nodes_deleted: frozenset[str] = frozenset()
    """Nodes of this job this process deleted and not to delete again (``slurm_expectations``): shown
    ones until a whole list begun after the deletion still shows them, recorded names the store does
    not show for good. Deleting them on each event of a job being cleaned up would be one call each
    (an ``scontrol delete`` subprocess on 22.05)."""
    nodes_drained: frozenset[str] = frozenset()
    """Nodes of this job this process drained, shown undrained by no whole list begun since: not
    drained again (``slurm_expectations``; an ``scontrol update`` subprocess each on 22.05)."""
    child_jobs_deleted: frozenset[str] = frozenset()
    """Of ``child_jobs_to_delete``, those this process deleted already (``slurm_expectations``)."""
    pods_deleted: frozenset[str] = frozenset()
    """Of ``pods.undeleted``, those this process deleted already (``slurm_expectations``): the
    informer shows their deletion a moment later; not deleted again meanwhile."""
    finalizer_removed: bool = False
    """This process removed the bridge's finalizer from the JobSet the informer still shows with it
    (``slurm_expectations``): not removed again."""
    comment_due: bool = True
    """A comment saying why the job waits in Kueue may be written now (the reconciler bounds how
    often, per job and in all)."""
    comment_retry: float | None = None
    """When not ``comment_due``: seconds until it may be."""


def _one_line(text: str) -> str:
    """One printable ASCII line of at most the comment's length."""
    return " ".join("".join(ch if ch.isprintable() and ch.isascii() else " " for ch in text).split())[
        :_COMMENT_MAX
    ]


def _completed_indexes(jobs: Iterable[Mapping[str, Any]]) -> str:
    """The ``completedIndexes`` of the JobSet's Jobs (one Job: ``replicas: 1``), "" when none."""
    done = [str((j.get("status") or {}).get("completedIndexes") or "") for j in jobs]
    return ",".join(d for d in done if d)


def _not_going_at_once(job: Mapping[str, Any]) -> bool:
    """A Job not being deleted, or being deleted in the foreground (it waits for the collector)."""
    meta = job["metadata"]
    return "deletionTimestamp" not in meta or FOREGROUND_DELETION in (meta.get("finalizers") or ())


def _owned_by(obj: Mapping[str, Any], uid: str) -> bool:
    owners = (obj.get("metadata") or {}).get("ownerReferences") or []
    return bool(uid) and any(isinstance(o, Mapping) and o.get("uid") == uid for o in owners)


def _failed_pods(jobs: Iterable[Mapping[str, Any]]) -> int:
    """The ``failed`` count of the JobSet's Jobs (one Job: ``replicas: 1``)."""
    total = 0
    for j in jobs:
        failed = (j.get("status") or {}).get("failed")
        total += failed if isinstance(failed, int) and failed > 0 else 0
    return total


def unservable_comment(reason: str) -> str:
    """The comment the bridge writes on a job it cannot serve: one ASCII line."""
    return _one_line(COMMENT_PREFIX + "held: " + reason)


def _node_names(o: Observed) -> tuple[str, ...]:
    """The names of the job's nodes: those a JobSet made now would register, unless its JobSet was
    made for an earlier run (kept through a requeue: Kueue preempted it and admits it again), whose
    pods register that run's names, recorded on it."""
    made = o.jobset_nodes if o.jobset is not None else ()
    if isinstance(o.translation, Translation):
        now = o.translation.node_names
        if made and now and _name_stem(made[0]) != _name_stem(now[0]):
            return made
        return now
    if made:
        return made
    return tuple(node_names(o.job)) if o.job is not None else ()


def _name_stem(node_name: str) -> str:
    return node_name.rpartition("-")[0]  # b42r1 of b42r1-0: the job and its run


def _own_pin(o: Observed, job: SlurmJob, own: tuple[str, ...]) -> tuple[str, ...]:
    """The bridge's own pin (its release), which a hold clears (``Hold.unpin``); a user's own -w
    stays. Its nodes are all the job's own (``own``), or nodes of one earlier run when a requeue's
    unpin was cut short (a crash) before that run's JobSet went (however many: the user may have
    resized the held job since)."""
    feature = _feature(o)
    if own and job.is_pinned_to(own, feature):
        return own
    pinned = job.required_nodes
    stems = {_name_stem(n) for n in pinned}
    earlier_run = (
        len(stems) == 1
        and (not own or stems != {_name_stem(own[0])})
        and all(is_own_node_name(job.job_id, n) for n in pinned)
    )
    return pinned if pinned and earlier_run and job.is_pinned_to(pinned, feature) else ()


def _feature(o: Observed) -> str:
    if isinstance(o.translation, Translation):
        return o.translation.feature
    return o.jobset_feature or job_feature(o.job_id)


def _constraints(o: Observed) -> str:
    if isinstance(o.translation, Translation):
        return o.translation.constraints
    return _feature(o)


def _in_bridged_partition(job: SlurmJob, partitions: Collection[str]) -> bool:
    return any(p in partitions for p in job.partitions)


def _nodes_ready(o: Observed) -> tuple[bool, str]:
    names = _node_names(o)
    if not names:
        return False, "the job's node names are unknown"
    feature = _feature(o)
    by_name = {n.name: n for n in o.nodes}
    missing = [n for n in names if n not in by_name]
    if missing:
        return False, f"{len(names) - len(missing)}/{len(names)} nodes registered"
    unusable = [n for n in names if not (by_name[n].is_idle_and_usable and by_name[n].has_feature(feature))]
    if unusable:
        return False, f"nodes not idle with feature {feature}: {', '.join(unusable[:8])}"
    return True, f"all {len(names)} nodes registered idle with {feature}"


def _left_down_by_the_bridge(o: Observed) -> tuple[str, ...]:
    """The job's nodes the bridge left unusable in an earlier run: DOWN with its own reason (set so
    that the run could end), or kept for the job (``_keep_for_the_job``) and not usable by it now."""
    own = set(_node_names(o))
    return tuple(
        n.name
        for n in o.nodes
        if (n.state is NodeState.DOWN and n.reason.startswith(COMMENT_PREFIX))
        or (n.name in own and _kept_by_the_bridge(n))
    )


def _kept_by_the_bridge(node: SlurmNode) -> bool:
    """Drained by the bridge while its job ran on it (``_keep_for_the_job``), and no job on it now.
    A node still allocated (DRAINING) means the job runs there, whatever an older view of the job
    says (a list begun before the job started, stored after): not resumed."""
    return (
        node.state is NodeState.IDLE and node.is_drained_or_draining and node.reason.startswith(KEPT_FOR_JOB)
    )


def _keep_for_the_job(o: Observed, job: SlurmJob) -> tuple[Action, ...]:
    """Drain the nodes a job runs on while it runs (row 7).

    A drained node stays its job's until the job ends and then is DRAINED, never IDLE: no other job
    takes it between the job's end and the bridge's cleanup, a poll later (an administrator's
    release, a submission no hold caught: ADR 0003). The job itself is not touched. The drain costs
    nothing more: the cleanup drains no node drained already."""
    names = tuple(
        n.name
        for n in o.nodes
        if n.name in job.nodes
        and not n.is_drained_or_draining
        and n.state is not NodeState.DOWN
        and n.name not in o.nodes_drained
    )
    if not names:
        return ()
    return (DrainNodes(names=names, reason=f"{KEPT_FOR_JOB}{job.job_id} until it ends"),)


def _changed_since_jobset(o: Observed, job: SlurmJob) -> bool:
    """Its user changed the job since its JobSet was made (``scontrol update``: nodes, size,
    features, partition, time limit...): the JobSet records another shape than the job's now.

    Only a record of the current fingerprint's version is compared: a JobSet of an older bridge (no
    record) or of another fingerprint definition is kept as it is, never replaced."""
    recorded = o.jobset_shape
    if not recorded.startswith(SHAPE_PREFIX):
        return False
    made = o.translation  # made from this very job, with its fingerprint: not computed again
    shape = made.shape if isinstance(made, Translation) and made.shape else shape_fingerprint(job)
    return recorded != shape


def _unseen_nodes_could_exist(o: Observed) -> bool:
    """Could a node recorded on the JobSet exist in slurmctld without the node source having seen it?

    Only a slurmd in one of the JobSet's pods registers such a node, and the node source sees it at
    its next poll (``--node-poll-interval``). So a node can exist unseen only if a pod ran very
    recently: one is still in the cache (finished and terminating ones count), or the JobSet is not
    suspended (its pods may be starting and not in the cache yet), or the Workload got past quota
    reservation (admitted, or evicted, preempted or finished afterwards: Kueue keeps an eviction
    until the next reservation). None of that holds for a JobSet that was never admitted, which is
    what a burst of cancelled held jobs leaves: there, deleting the recorded names would be one
    useless call each (an ``scontrol delete`` subprocess on 22.05) on every look until the garbage
    collector is done."""
    js, wl = o.jobset, o.workload
    if js is None:
        return False
    if max(o.pods.present, o.pods.active) > 0 or not js.suspended:
        return True
    return wl is not None and wl.state not in (WorkloadState.PENDING, WorkloadState.QUOTA_RESERVED)


def _cleanup(
    o: Observed, *, why: str, delete_jobset: bool = True, phase: Phase | None, confirm: bool = False
) -> Decision:
    """Drain the nodes, delete the JobSet, delete the nodes, then drop the finalizer (in order)."""
    actions: list[Action] = []
    live = [
        n
        for n in o.nodes
        if not n.is_drained_or_draining and n.state is not NodeState.DOWN and n.name not in o.nodes_drained
    ]
    if live:
        actions.append(DrainNodes(names=tuple(n.name for n in live), reason=f"k8s-bridge: {why}"))
    js = o.jobset
    pods_possible = _unseen_nodes_could_exist(o)
    if js is not None and delete_jobset and not js.deleting:
        actions.append(DeleteJobSet(foreground=pods_possible))
    elif js is not None and delete_jobset and js.waits_for_dependents:
        if not o.pods.present:
            actions.append(DeleteJobSet(foreground=False))  # its pods are gone: the wait is over
        elif child_jobs := tuple(n for n in o.child_jobs_to_delete if n not in o.child_jobs_deleted):
            actions.append(DeleteChildJobs(names=child_jobs))
        elif undeleted := tuple(n for n in o.pods.undeleted if n not in o.pods_deleted):
            actions.append(DeletePods(names=undeleted))
    # The nodes the node source has seen, and the names recorded on the JobSet whenever one of them
    # could exist unseen (registered after the last node poll): those must not leak when the
    # finalizer goes. A node that registers after this pass is seen at the next node poll, which
    # reconciles the job again (row 1 deletes it, JobSet or not).
    if o.job is not None and o.job.is_completing and o.nodes:
        # No node of a job still completing is deleted: slurmctld 22.05.8 crashed (segfault) when a
        # node of a completing job was deleted and another of its nodes was set DOWN afterwards
        # (docs/slurm-stack-notes.md). Nodes that will never answer are set DOWN, which lets Slurm
        # finish the job; the nodes go once it has.
        silent = _silent_nodes(o)
        if silent:
            actions.append(DownNodes(names=silent, reason=f"k8s-bridge: {why}; its slurmd is gone"))
        return Decision(
            actions=tuple(actions),
            confirm=confirm,
            requeue_after=WAIT_FOR_SLURM,
            phase=phase or Phase.FINISHING,
            why=f"{why}: cleaning up once Slurm has finished completing it",
        )
    recorded = o.jobset_nodes if pods_possible else ()
    names = _not_deleted_yet(o, [*(n.name for n in o.nodes), *recorded])
    if names:
        down = tuple(n.name for n in o.nodes if n.state is NodeState.DOWN)
        actions.append(DeleteNodes(names=names, down_already=down))
    if js is not None and o.has_finalizer and not o.finalizer_removed:
        actions.append(RemoveFinalizer())
    if not actions:
        return Decision(phase=phase, why=f"{why}; nothing left to clean up")
    return Decision(
        actions=tuple(actions), confirm=confirm, phase=phase or Phase.FINISHING, why=f"{why}: cleaning up"
    )


def _not_deleted_yet(o: Observed, names: Iterable[str]) -> tuple[str, ...]:
    """``names`` once each, in order, less those deleted already (``Observed.nodes_deleted``)."""
    return tuple(n for n in dict.fromkeys(names) if n not in o.nodes_deleted)


def _is_jobset(answer: object) -> bool:
    """A JobSet (not a ``Status``), still there and with a resourceVersion: what a delete answers
    while finalizers keep the object."""
    if not isinstance(answer, Mapping) or answer.get("kind") != JOBSET_KIND:
        return False
    meta = answer.get("metadata")
    return isinstance(meta, Mapping) and bool(meta.get("resourceVersion")) and "deletionTimestamp" in meta


def _unpin(o: Observed, names: tuple[str, ...], *, phase: Phase, mark: bool = True) -> Decision:
    """A held job still pinned to its own nodes (a requeue-hold keeps the pin) whose nodes are going
    or gone: clear the pin first (``Hold.unpin``; the release pins again). slurmctld fails a pending
    job pinned to deleted nodes at its next reconfigure (NODE_FAIL, held or not, 22.05 and 24.11),
    and 24.11 refuses every update of such a job; so the pin goes before the nodes do. The hold
    carries the bridge's mark, as its JobSet may go next."""
    job = o.job
    admin_comment = _mark(job) if job is not None and mark else None
    return Decision(
        actions=(Hold(reason="its pinned nodes are going away", unpin=names, admin_comment=admin_comment),),
        phase=phase,
        why="held and still pinned to its own nodes, which are going or gone: unpin first",
    )


def _mark(job: SlurmJob) -> str | None:
    """The admin comment that marks the bridge's hold, or None when the job carries it already."""
    return None if marked_by_the_bridge(job) else BridgeHold().text()


def _marked_first(o: Observed, decision: Decision) -> Decision:
    """``decision`` removes the JobSet of a job that stays held. This bridge marks every admin hold it
    makes, but an older bridge did not, and its JobSet (``jobset_marks_holds`` false) vouched for the
    hold: the mark goes first, or without its JobSet the hold would look like an administrator's."""
    job = o.job
    if (
        job is None
        or job.held_by != "admin"
        or marked_by_the_bridge(job)
        or o.jobset is None
        or o.jobset_marks_holds
        or not decision.actions
    ):
        return decision
    return replace(decision, actions=(MarkHeld(admin_comment=BridgeHold().text()), *decision.actions))


def _polite_comment(job: SlurmJob, text: str) -> tuple[Action, ...]:
    """Write ``text`` as the job's comment unless it is there already or the comment is its user's."""
    if job.comment == text or (job.comment and not job.comment.startswith(COMMENT_PREFIX)):
        return ()
    return (WriteComment(text=text),)


def _queue_text(wl: WorkloadView | None, place: str | None = None) -> str | None:
    """What Kueue says of a Workload that waits, for the job's comment; None when it says nothing and
    its place is not known. A Workload deep in a busy queue may wait a long time before Kueue's
    scheduler first tries it (no condition at all): its place is then all there is to say.

    Numbers are dropped ("1 more needed"; how many pods topology-aware scheduling could place now,
    "allows to fit only 2 out of 3 pod(s)" -> "allows to fit only some of 3 pod(s)"): they change as
    other jobs are admitted, and each change would be one more write to slurmctld for every job in the
    queue. The place, where Kueue serves it, is shown exactly near the head only
    (:func:`reconcilers.queue_positions.position_text`), for the same reason."""
    if wl is None or not (wl.reason or wl.message or place):
        return None
    where = f" ({place})" if place is not None else ""
    if not (wl.reason or wl.message):
        return _one_line(
            f"{COMMENT_PREFIX}queued in Kueue{where}: Pending: not tried by Kueue's scheduler yet"
        )
    message = re.sub(r",? *[0-9.]+[A-Za-z]* more needed", "", wl.message)
    message = re.sub(r"allows to fit only \d+ out of (\d+)", r"allows to fit only some of \1", message)
    return _one_line(f"{COMMENT_PREFIX}queued in Kueue{where}: {wl.reason or 'Pending'}: {message}")


def _comment_held_back(o: Observed, job: SlurmJob, text: str | None) -> bool:
    """The budget holds back ``text``, a comment the job waiting in Kueue does not show yet (one it
    already shows, or its user's own, is not waited on)."""
    if o.comment_due or o.queue_place_pending or text is None:
        return False
    return bool(_polite_comment(job, text))


def _look_again_while_queued(o: Observed, *, held_back: bool) -> float | None:
    """When to look again at a job waiting in Kueue: once its place is read, if it is being read;
    once its comment may be written, if the budget holds back a comment it does not show yet; else
    on the next change (its place moving is one: the place source delivers it)."""
    if o.queue_place_pending:
        return WAIT_FOR_PLACE
    return o.comment_retry if held_back else None


def never_admissible(wl: WorkloadView) -> bool:
    """Kueue will not admit the Workload as things are: its queues are missing or inactive, or its
    ClusterQueue does not cover a resource it asks for (e.g. ``memory``)."""
    return wl.reason == "Inadmissible" or "unavailable in ClusterQueue" in wl.message


def _queued_comment(o: Observed, job: SlurmJob, text: str | None) -> tuple[Action, ...]:
    """While Kueue keeps the job waiting, its comment says why (``squeue -o %k``; ``text``, from
    :func:`_queue_text`): over an empty comment or the bridge's own only, at a bounded rate
    (``Observed.comment_due``), with a Warning Event when the Workload can never be admitted as
    things are."""
    if text is None or o.queue_place_pending or not o.comment_due or not _polite_comment(job, text):
        return ()
    assert o.workload is not None
    event = "Inadmissible" if never_admissible(o.workload) else ""
    return (WriteComment(text=text, event=event),)


def waiting_comment(reason: str) -> str:
    """The comment on a job the bridge does not bridge yet: one ASCII line."""
    return _one_line(COMMENT_PREFIX + "waiting: " + reason)


def decide(o: Observed) -> Decision:
    """The state table (docs/controller.md). Pure: same observation, same decision."""
    job = o.job
    # Finished, cancelled, or purged from slurmctld: drain, delete the JobSet, delete the nodes.
    if job is None or job.is_finished:
        why = "the job vanished from slurmctld" if job is None else f"the job ended ({job.state})"
        # A job missing from the cache may just not be in it yet: confirmed on a fresh read first.
        return _cleanup(o, why=why, phase=None, confirm=job is None)
    own = _node_names(o)
    own_pin = _own_pin(o, job, own)
    js = o.jobset
    if js is not None and js.deleting:
        return _decide_jobset_deleting(o, job, own_pin)
    if job.is_running:
        return _decide_running(o, job, set(own))
    # Pending from here on (a requeue-hold passes through COMPLETING first).
    if job.is_completing:
        return _wait_for_the_requeue(o)
    if not job.hold:
        return _decide_released(o, job, own_pin)
    # Held and pending.
    on_its_way_back = (
        js is not None
        and o.workload is not None
        and o.workload.state is WorkloadState.ADMITTED
        and js.state not in (JobSetState.COMPLETED, JobSetState.FAILED)
    )
    if own_pin and not on_its_way_back:
        phase = Phase.HELD if js is None else Phase.EVICTED
        return _unpin(o, own_pin, phase=phase, mark=not _held_by_a_person(o, job))
    if js is None:
        return _decide_unbridged(o, job)
    return _decide_bridged(o, job)


def _pods_elsewhere(o: Observed) -> bool:
    """The JobSet runs in a MultiKueue worker cluster: its pods are not in this cluster's cache, so
    their absence here says nothing, and only slurmctld can tell a lost node."""
    return o.jobset is not None and o.jobset.runs_elsewhere


def _not_responding(o: Observed) -> tuple[str, ...]:
    return tuple(
        n.name for n in o.nodes if n.state is not NodeState.DOWN and "NOT_RESPONDING" in n.state_flags
    )


def _silent_nodes(o: Observed) -> tuple[str, ...]:
    """The job's nodes, not DOWN yet, that will never answer again: slurmctld says so
    (NOT_RESPONDING), or no active slurmd pod stands behind them (deleted, ended). slurmctld notices
    a silent node only after its message timeouts, a minute or more. For pods in another cluster,
    only slurmctld's word counts."""
    if _pods_elsewhere(o):
        return _not_responding(o)
    return tuple(
        n.name
        for n in o.nodes
        if n.state is not NodeState.DOWN
        and ("NOT_RESPONDING" in n.state_flags or n.name not in o.pods.active_nodes)
    )


def _pods_may_run(o: Observed) -> bool:
    """A slurmd pod of the JobSet may still run: one is active in the cache, or, for pods in another
    cluster, the JobSet is not suspended yet (Kueue suspends it before it takes the remote one back)."""
    if _pods_elsewhere(o):
        return o.jobset is not None and not o.jobset.suspended
    return o.pods.active > 0


def _wait_for_the_requeue(o: Observed) -> Decision:
    """A requeue under way (COMPLETING, then PENDING held): Slurm finishes it once every node of the
    job has answered. A node whose slurmd is gone (a lost node, its pods deleted with the JobSet)
    never will: it is set DOWN, or the job stays COMPLETING until SlurmdTimeout (300 s by default)."""
    silent = _silent_nodes(o)
    actions: tuple[Action, ...] = (
        (DownNodes(names=silent, reason="k8s-bridge: its slurmd is gone; the job is requeued"),)
        if silent
        else ()
    )
    return Decision(
        actions=actions, requeue_after=WAIT_FOR_SLURM, phase=Phase.EVICTED, why="waiting for the requeue"
    )


def _decide_jobset_deleting(o: Observed, job: SlurmJob, own_pin: tuple[str, ...]) -> Decision:
    """The JobSet is being deleted by someone while the job lives: take the capacity back first,
    then clean up; once it is gone, a held job gets a new one (``_decide_unbridged``)."""
    if job.is_running:
        return Decision(
            actions=(RequeueHold(reason="its JobSet is being deleted"),),
            requeue_after=WAIT_FOR_SLURM,
            phase=Phase.EVICTED,
            why="JobSet deleted under a running job: requeue-hold",
        )
    if job.is_completing:
        return _wait_for_the_requeue(o)
    if not job.hold:
        return Decision(
            actions=(Hold(reason="its JobSet is being deleted", unpin=own_pin, admin_comment=_mark(job)),),
            phase=Phase.EVICTED,
            why="JobSet deleted under a released job: hold",
        )
    if own_pin:
        return _unpin(o, own_pin, phase=Phase.HELD)
    # Confirmed: a cache a poll behind the bridge's own release still shows the job held, and
    # deleting its nodes then would pull them from under a job Slurm is starting.
    return _marked_first(
        o,
        _cleanup(
            o, why="JobSet deleted while the job is held", delete_jobset=False, phase=Phase.HELD, confirm=True
        ),
    )


def _lost_pods(o: Observed) -> tuple[str, ...]:
    """The slurmd pods of an admitted, running JobSet that ended or are going: lost nodes. Also those
    gone from the cache already (a bridge restart, slurmrestd down meanwhile) that the JobSet's Job
    counts as completed: it never replaces them. Not while Kueue takes the capacity back (it suspends
    the JobSet first, and the Workload says so)."""
    js, wl = o.jobset, o.workload
    if js is None or js.suspended or wl is None or wl.state is not WorkloadState.ADMITTED:
        return ()
    if js.runs_elsewhere:
        # The worker cluster's pods and Jobs are not seen here; slurmctld marks a node whose slurmd
        # stopped answering (its pod gone, the worker cluster lost) after its message timeouts.
        return tuple(f"{name}: not responding" for name in _not_responding(o))
    done = (f"index {o.completed_indexes} ended",) if o.completed_indexes else ()
    failed = (f"{o.failed_pods} failed",) if o.failed_pods else ()
    return (*o.pods.lost, *done, *failed)


def _lost_node_event(lost: tuple[str, ...]) -> str:
    return f"lost {len(lost)} slurmd pod(s) ({'; '.join(lost[:4])}): the job goes back to the queue, held"


def _decide_running(o: Observed, job: SlurmJob, own: set[str]) -> Decision:
    js, wl = o.jobset, o.workload
    if js is None:
        if not _in_bridged_partition(job, o.partitions):
            return Decision(why="running outside bridged partitions, no JobSet: not ours")
        return Decision(
            actions=(RequeueHold(reason="running in a bridged partition without capacity from Kueue"),),
            requeue_after=WAIT_FOR_SLURM,
            phase=Phase.EVICTED,
            why="job running in a bridged partition without a JobSet (guard): requeue-hold",
        )
    if job.nodes and not set(job.nodes) <= own:
        return Decision(
            actions=(RequeueHold(reason="running on nodes that are not its own"),),
            requeue_after=WAIT_FOR_SLURM,
            phase=Phase.EVICTED,
            why="job running on other nodes than its own (guard): requeue-hold",
        )
    lost = _lost_pods(o)
    if lost:
        # A lost node is a preemption: back to the queue held (not lost, not run on fewer nodes), and
        # the JobSet goes, so that Kueue decides again on a new one (the JobSet's Job counts a slurmd
        # stopped by SIGTERM as a success and would make no replacement).
        return Decision(
            actions=(RequeueHold(reason=_lost_node_event(lost)), DeleteJobSet()),
            requeue_after=WAIT_FOR_SLURM,
            phase=Phase.EVICTED,
            why=f"running, but {_lost_node_event(lost)}",
        )
    actions: tuple[Action, ...] = () if o.has_finalizer else (AddFinalizer(),)
    if wl is None or (wl.state is WorkloadState.ADMITTED and js.state is not JobSetState.FAILED):
        why = "running; Workload not seen yet" if wl is None else "running on its admitted nodes"
        return Decision(actions=(*actions, *_keep_for_the_job(o, job)), phase=Phase.RUNNING, why=why)
    return Decision(
        actions=(*actions, RequeueHold(reason=f"its Workload is {wl.state} ({wl.reason or 'no reason'})")),
        requeue_after=WAIT_FOR_SLURM,
        phase=Phase.EVICTED,
        why=f"Workload {wl.state} while the job runs: requeue-hold before Slurm requeues it",
    )


def _decide_released(o: Observed, job: SlurmJob, own_pin: tuple[str, ...]) -> Decision:
    """Pending and not held: the bridge's own release (Slurm starts it), or the guard holds it."""
    js, wl = o.jobset, o.workload
    released_by_bridge = (
        js is not None and wl is not None and wl.state is WorkloadState.ADMITTED and bool(own_pin)
    )
    if released_by_bridge:
        lost = _lost_pods(o)
        if lost:
            return Decision(
                actions=(
                    Hold(
                        reason=_lost_node_event(lost),
                        unpin=own_pin,
                        admin_comment=_mark(job),
                        event="NodeLost",
                    ),
                    DeleteJobSet(),
                ),
                phase=Phase.EVICTED,
                why=f"released, but {_lost_node_event(lost)}",
            )
        stuck = not_starting_reason(job)
        kept = tuple(n.name for n in o.nodes if n.name in own_pin and _kept_by_the_bridge(n))
        if kept and stuck is None:
            # Put back by Slurm onto nodes the bridge drained while it ran, and Slurm would start it
            # but for them: they are its own, and it runs on them again. Put back with Slurm's
            # requeue delay (BeginTime), it is given back below like any job Slurm would not start.
            return Decision(
                actions=(ResumeNodes(names=kept),),
                requeue_after=WAIT_FOR_NODES,
                phase=Phase.RELEASING,
                why=f"released onto its nodes, {len(kept)} kept drained from its last run: resume them",
            )
        if stuck is not None:
            # The safety net: Slurm keeps the released job pending for a reason other than its turn
            # (a limit, a reservation, a dependency it gained): the capacity goes back to Kueue, and
            # the job is bridged again after RETRY_AFTER_GIVE_BACK (or once its reason is gone).
            retry = int(o.now) + RETRY_AFTER_GIVE_BACK
            text = waiting_comment(
                f"Slurm did not start it on its nodes (Reason={_one_line(stuck)[:60]}); the bridge gave "
                f"its capacity back and tries again after {when(retry)}"
            )
            comment = text if not job.comment or job.comment.startswith(COMMENT_PREFIX) else None
            return Decision(
                actions=(
                    Hold(
                        reason=f"Slurm keeps it pending (Reason={stuck})",
                        unpin=own_pin,
                        admin_comment=BridgeHold(retry_after=retry, reason=stuck).text(),
                        comment=comment,
                        event="GivenBack",
                    ),
                ),
                phase=Phase.EVICTED,
                why=f"released, but Slurm keeps it pending (Reason={stuck}): give the capacity back",
            )
        return Decision(phase=Phase.RELEASING, why="released onto its nodes; Slurm starts it")
    if js is None and not _in_bridged_partition(job, o.partitions):
        return Decision(why="pending outside bridged partitions, no JobSet: not ours")
    return Decision(
        actions=(
            Hold(
                reason="pending unheld in a bridged partition without admitted capacity",
                unpin=own_pin,
                admin_comment=_mark(job),
            ),
        ),
        phase=Phase.HELD if js is None else Phase.EVICTED,
        why="pending and not held, not released by the bridge (guard): hold",
    )


def _decide_unbridged(o: Observed, job: SlurmJob) -> Decision:
    """Held, no JobSet: bridge it, unless it cannot be served or Slurm would not start it yet."""
    if not _in_bridged_partition(job, o.partitions):
        return Decision(why="held outside bridged partitions, no JobSet: not ours")
    t = o.translation
    if not isinstance(t, Translation):
        if t is None:
            return Decision(phase=Phase.HELD, why="no translation")
        comment = unservable_comment(t.reason)
        if job.comment == comment:
            return Decision(phase=Phase.UNSERVABLE, why=f"cannot be served ({t.code}); reason on the job")
        return Decision(
            actions=(ReportUnservable(code=str(t.code), reason=t.reason, comment=comment),),
            phase=Phase.UNSERVABLE,
            why=f"cannot be served ({t.code}): {t.reason}",
        )
    waiting = _waiting_reason(o, job)
    if waiting is not None:
        reason, look_again = waiting
        return Decision(
            actions=_polite_comment(job, waiting_comment(reason)),
            requeue_after=look_again,
            phase=Phase.WAITING,
            why=f"not bridged: {reason}",
        )
    if o.stale_child_jobs:
        # Their deletion reconciles the job (the Job informer); the look again is a safety net.
        return Decision(
            requeue_after=WAIT_FOR_COLLECTION,
            phase=Phase.HELD,
            why=f"{o.stale_child_jobs} Job(s) of its previous JobSet not collected yet: no new one before",
        )
    if o.max_bridged_jobs is not None and o.bridged_jobs >= o.max_bridged_jobs:
        return Decision(
            requeue_after=WAIT_FOR_SLOT,
            phase=Phase.HELD,
            why=f"{o.bridged_jobs} JobSets exist, the limit is {o.max_bridged_jobs}: waiting",
        )
    # Independent of one another, so at once; not confirmed unless a comment is cleared (the module
    # docstring goes through every state the cached job may lag behind). The user hold becomes the
    # bridge's admin hold once the JobSet exists (_decide_bridged), never before: an admin hold
    # without a JobSet and without the bridge's mark is an administrator's.
    create: list[Action] = [CreateJobSet(manifest=t.manifest)]
    if job.comment.startswith(COMMENT_PREFIX):
        create.append(ClearComment())
    return Decision(
        actions=tuple(create), concurrent=True, phase=Phase.QUEUED, why=f"creating JobSet {t.name}"
    )


def _held_by_a_person(o: Observed, job: SlurmJob) -> bool:
    """An administrator's hold, not the bridge's: an admin hold without the bridge's mark, unless a
    JobSet of an older bridge (which made its holds unmarked) vouches for it."""
    return is_a_persons_admin_hold(job) and (o.jobset is None or o.jobset_marks_holds)


def _waiting_reason(o: Observed, job: SlurmJob) -> tuple[str, float | None] | None:
    """Why a servable held job is not bridged now, and when to look again (None: on a change)."""
    if _held_by_a_person(o, job):
        return "held by an administrator; bridged once released", None
    blocked = blocked_reason(job, now=o.now, dependees=o.dependees, reservations=o.reservations)
    if blocked is not None:
        begin = job.eligible_time.timestamp() if job.eligible_time is not None else 0.0
        look_again = max(1.0, min(begin - o.now, WAIT_FOR_BEGIN)) if begin > o.now else None
        if job.reservation and o.reservations is not None:
            # A reservation changes (starts, is updated or deleted) without its jobs changing.
            look_again = min(look_again or WAIT_FOR_RESERVATION, WAIT_FOR_RESERVATION)
        if job.dependency and look_again is None:
            # A dependee in the bridged partitions reconciles this job when it changes (the job
            # source's dependents index); one elsewhere is not polled: look again now and then.
            look_again = WAIT_FOR_DEPENDENCY
        return f"{blocked}; bridged once Slurm could start it", look_again
    retry = retry_after_give_back(job, now=o.now)
    if retry is not None:
        record = BridgeHold.parse(job.admin_comment) or BridgeHold()
        why = (
            f"Slurm did not start it once released (Reason={record.reason or '?'}); "
            f"bridged again after {when(retry)}"
        )
        return why, max(1.0, min(retry - o.now, WAIT_FOR_BEGIN))
    return None


def _give_back(o: Observed, job: SlurmJob, *, why: str, phase: Phase, mark: bool = True) -> Decision:
    """The JobSet of a job that stays held goes (confirmed on a fresh read): a pin still naming the
    JobSet's nodes first (a requeue-hold keeps it, and a changed shape's names no longer match it),
    then as row 1; with ``mark``, an older bridge's unmarked admin hold gets the mark before it."""
    if o.jobset_nodes and job.is_pinned_to(set(o.jobset_nodes), _feature(o)):
        return _unpin(o, o.jobset_nodes, phase=phase, mark=mark)
    decision = _cleanup(o, why=why, phase=phase, confirm=True)
    return _marked_first(o, decision) if mark else decision


def _decide_bridged(o: Observed, job: SlurmJob) -> Decision:
    """Held, with its JobSet: Kueue decides; once admitted and the nodes are up, pin and release."""
    js, wl = o.jobset, o.workload
    assert js is not None
    pre: tuple[Action, ...] = () if o.has_finalizer else (AddFinalizer(),)
    if js.state in (JobSetState.COMPLETED, JobSetState.FAILED) or (
        wl is not None and wl.state is WorkloadState.FINISHED
    ):
        return _give_back(o, job, why=f"the JobSet ended ({js.state}) before the job ran", phase=Phase.QUEUED)
    if _changed_since_jobset(o, job):
        # Kueue would admit, and the release pin to, a shape the job no longer has (grown, it
        # would wait for nodes no pod registers; shrunk, run on nodes sized for another request):
        # cleaned up like an ended JobSet, then the job's JobSet is made anew, or the reason why there
        # is none written. Only ever for a held job (a released or running one is decided above), and
        # confirmed: the cache may be a poll behind the read the JobSet was made from, or behind the
        # bridge's own release.
        return _give_back(o, job, why="the job was changed since its JobSet was made", phase=Phase.QUEUED)
    if _held_by_a_person(o, job):
        # An administrator held it (``scontrol hold``) after it was bridged: the bridge does not
        # override that hold, so its capacity goes back to Kueue; it is bridged again once released.
        return _give_back(o, job, why="held by an administrator", phase=Phase.WAITING, mark=False)
    waiting = _waiting_reason(o, job)
    if waiting is not None:
        # Bridged, but Slurm would not start it now (a dependency or begin time set since, or given
        # back by the safety net): the capacity goes back to Kueue until that is over.
        reason, _ = waiting
        return _give_back(o, job, why=f"not startable ({reason})", phase=Phase.WAITING)
    if wl is None or wl.state in (WorkloadState.PENDING, WorkloadState.QUOTA_RESERVED):
        state = "not made yet" if wl is None else wl.state
        convert: tuple[Action, ...] = ()
        if job.held_by == "user" and not o.hold_converted:
            # sbatch's user hold becomes the bridge's admin hold, which the job's user cannot release:
            # best effort (row 11, the guard, still catches a user's release). Not in the later rows:
            # a requeue-hold (also a user hold) is released again soon, or waits for Kueue here.
            convert = (
                ConvertHold(reason="user hold turned into the bridge's admin hold", admin_comment=_mark(job)),
            )
        text = _queue_text(o.workload, o.queue_place)
        told = _queued_comment(o, job, text)
        held_back = _comment_held_back(o, job, text)
        return Decision(
            actions=(*pre, *convert, *told),
            phase=Phase.QUEUED,
            requeue_after=_look_again_while_queued(o, held_back=held_back),
            why=f"waiting for Kueue (Workload {state})",
            comment_held_back=held_back,
        )
    if wl.state in (WorkloadState.EVICTED, WorkloadState.PREEMPTED):
        # Stale nodes of the evicted pods go once the pods are gone; re-admission registers them anew.
        stale = _not_deleted_yet(o, (n.name for n in o.nodes))
        if stale and not _pods_may_run(o):
            return Decision(
                actions=(*pre, DeleteNodes(names=stale)),
                confirm=True,
                phase=Phase.EVICTED,
                why=f"Workload {wl.state}, job held: deleting the stale nodes",
            )
        return Decision(actions=pre, phase=Phase.EVICTED, why=f"Workload {wl.state}, job held: waiting")
    # Admitted.
    lost = _lost_pods(o)
    if lost:
        # A slurmd pod that ended before the release will not come back (its Job counts it done):
        # the JobSet goes, and Kueue decides again on a new one.
        return Decision(
            actions=(*pre, DeleteJobSet()),
            phase=Phase.EVICTED,
            why=f"admitted, but {_lost_node_event(lost)}",
        )
    left_down = _left_down_by_the_bridge(o)
    if left_down:
        # A requeue slower than Kueue (remote nodes are known lost only by slurmctld's timeouts) ends
        # after the Workload is admitted again: the new pods' slurmd register nodes that are still
        # the DOWN ones the requeue needed, and would never become IDLE.
        return Decision(
            actions=(*pre, ResumeNodes(names=left_down)),
            requeue_after=WAIT_FOR_NODES,
            phase=Phase.ADMITTED,
            why=f"admitted, resuming {len(left_down)} node(s) the bridge left DOWN or drained before",
        )
    ready, detail = _nodes_ready(o)
    if not ready:
        return Decision(
            actions=pre,
            requeue_after=WAIT_FOR_NODES,
            phase=Phase.ADMITTED,
            why=f"admitted, waiting for nodes ({detail}; {o.pods.running} pods running)",
        )
    return Decision(
        actions=(
            *pre,
            PinAndRelease(
                nodes=_node_names(o),
                constraints=_constraints(o),
                begin_now=begin_time_is_slurms_requeue_delay(job)
                and job.eligible_time is not None
                and job.eligible_time.timestamp() > o.now,
                clear_comment=job.comment.startswith(COMMENT_PREFIX),
                clear_admin_comment=marked_by_the_bridge(job),
            ),
        ),
        phase=Phase.RELEASING,
        why=f"admitted and {detail}: pin and release",
    )


# --- indexes and mappers -----------------------------------------------------------------------


def node_job_id(node: SlurmNode) -> int | None:
    """The job a bridge node was made for: its ``bridge-job-<id>`` feature, else its dynamic name."""
    for feature in (*node.features, *node.active_features):
        if feature.startswith(JOB_FEATURE_PREFIX):
            rest = feature[len(JOB_FEATURE_PREFIX) :]
            if rest.isdigit() and len(rest) <= 12:
                return int(rest)
    return node_name_job_id(node.name) if node.is_dynamic else None


def _by_name(node: SlurmNode) -> tuple[int, str]:
    return (len(node.name), node.name)  # b42-2 before b42-10


def _labels_key(obj: Object) -> str | None:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    cluster, job_id = labels.get(LABEL_CLUSTER), labels.get(LABEL_JOB_ID)
    if not cluster or not job_id or not str(job_id).isdigit():
        return None
    return job_key(str(cluster), int(job_id))


def jobset_job_keys(obj: Object) -> list[str]:
    """Index of JobSets: ``<cluster>/<job id>`` from the bridge's labels."""
    key = _labels_key(obj)
    return [key] if key is not None else []


pod_job_keys = jobset_job_keys
"""Index of pods: the same labels are on every slurmd pod."""


def jobset_queue_keys(obj: Object) -> list[str]:
    """Index of JobSets: ``<namespace>/<LocalQueue>`` from Kueue's queue-name label."""
    meta = obj.get("metadata") or {}
    queue = (meta.get("labels") or {}).get(QUEUE_NAME_LABEL)
    return [f"{meta.get('namespace')}/{queue}"] if queue and _labels_key(obj) is not None else []


def workload_uid_keys(obj: Object) -> list[str]:
    uid = ((obj.get("metadata") or {}).get("labels") or {}).get(JOB_UID_LABEL)
    return [str(uid)] if uid else []


def node_job_keys(obj: Object) -> list[str]:
    """Index of the node source: the job id (as a string) a node belongs to."""
    job_id = node_job_id(node_of(obj))
    return [str(job_id)] if job_id is not None else []


INDEX_DEPENDS_ON = "depends-on"
"""Job source index: the ids (as strings) of the jobs a job depends on."""


def dependency_keys(obj: Object) -> list[str]:
    """Index of the job source: the jobs this job depends on, so that their changes reconcile it."""
    job = obj.get("job")
    if not isinstance(job, SlurmJob) or not job.dependency:
        return []
    return [str(i) for i in dependency_ids(job)]


def request_for_key(key: str) -> Request:
    cluster, _, job_id = key.rpartition("/")
    return Request(cluster, job_id)


# --- the reconciler ----------------------------------------------------------------------------


class SlurmActions(Protocol):
    """The Slurm operations the reconciler needs (:class:`bridge.slurm.SlurmClient` fits)."""

    async def get_job(self, job_id: int) -> SlurmJob: ...

    async def hold_job(
        self,
        job_id: int,
        *,
        unpin: Sequence[str] = (),
        comment: str | None = None,
        admin_comment: str | None = None,
    ) -> None: ...

    async def set_admin_comment(self, job_id: int, admin_comment: str) -> None: ...

    async def requeue_hold(self, job_id: int) -> None: ...

    async def set_comment(self, job_id: int, comment: str) -> None: ...

    async def pin_and_release(
        self,
        job_id: int,
        *,
        nodes: Sequence[str],
        constraints: str,
        begin_time: int | None = None,
        comment: str | None = None,
        admin_comment: str | None = None,
        released: Callable[[], Awaitable[None]] | None = None,
    ) -> None: ...

    async def drain_node(self, name: str, *, reason: str) -> None: ...

    async def down_node(self, name: str, *, reason: str) -> None: ...

    async def resume_node(self, name: str) -> None: ...

    async def delete_node(self, name: str, *, down_if_busy: bool = True, reason: str = ...) -> None: ...


class MixingConfig(Protocol):
    """The live WorkloadMixing (the mixing controller's holder, or the program's own adapter)."""

    @property
    def spec(self) -> WorkloadMixingSpec | None: ...

    @property
    def object(self) -> Object | None:
        """The resource as last read (for Events about it)."""
        ...


class JobSource(Protocol):
    """What the reconciler needs of :class:`bridge.slurm.source.SlurmJobSource`."""

    def job(self, job_id: int) -> SlurmJob | None: ...

    def any_job(self, job_id: int) -> SlurmJob | None:
        """Any job of the last poll, in whatever partition (None: not in slurmctld)."""
        ...

    def refresh(self, job_id: int) -> None:
        """The bridge wrote this job: read it again at once (alone, not the whole list)."""
        ...


class CommentBudget:
    """How often the bridge may write a job's "why it waits" comment: once a ``per_job`` seconds for
    one job, and ``rate`` a second for all of them (``burst`` at once). A queue of thousands of jobs
    then costs slurmctld a few writes a second, not one per job per change. In memory only: a restart
    writes comments a little sooner, nothing else.

    A job's first comment goes before another's update: ``reserve`` of the burst is kept for jobs
    that show no comment of the bridge's yet (``first``), so that in a deep, busy queue, where the
    places moving can use the whole rate, a new job is not left without a word for many minutes."""

    def __init__(
        self,
        *,
        per_job: float = 60.0,
        rate: float = 5.0,
        burst: float = 20.0,
        reserve: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._per_job = per_job
        self._rate = rate
        self._burst = burst
        self._reserve = min(reserve, max(0.0, burst - 1))
        self._clock = clock
        self._tokens = burst
        self._at = clock()
        self._last: dict[str, float] = {}
        self._waiting: dict[str, float] = {}
        """Jobs refused a comment, when last refused: the backlog :meth:`retry` spreads."""
        self._pruned = self._at

    def _refill(self) -> float:
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
        self._at = now
        return now

    def wait(self, key: str, *, first: bool = False) -> float:
        """Seconds until a comment of ``key`` may be written (0: now); ``first``: the job shows none
        of the bridge's yet, and may take the tokens kept for first comments."""
        now = self._refill()
        per_job = self._last.get(key, -self._per_job) + self._per_job - now
        needed = 1.0 if first else 1.0 + self._reserve
        overall = 0.0 if self._tokens >= needed else (needed - self._tokens) / self._rate
        return max(0.0, per_job, overall)

    def retry(self, key: str, wait: float) -> float:
        """When ``key``, refused now (``wait``: what :meth:`wait` said), should look again: at least a
        second from now, and not before its turn in the backlog of refused jobs (its own place in it,
        or the next one). Asking takes no place: :meth:`held_back` does, once the comment is wanted.

        Each refused job retrying once a second would reconcile the whole backlog every second (a
        deep queue whose places moved: a thousand reconciles a second for five writes, and the
        bridge's CPU in proportion to the queue); spread over ``backlog / rate`` seconds, the looks
        at refused jobs come about as often as the budget can write."""
        backlog = len(self._waiting) + (key not in self._waiting)
        return max(1.0, wait, backlog / self._rate)

    def held_back(self, key: str) -> None:
        """``key`` wants a comment the budget refused: it joins the backlog :meth:`retry` spreads
        (jobs that only ask while their comment is already shown, or is their user's, do not)."""
        now = self._clock()
        waiting = self._waiting
        waiting[key] = now
        if now - self._pruned >= 1.0:  # jobs that stopped asking (admitted, gone) leave the backlog
            horizon = 2 * len(waiting) / self._rate + self._per_job
            for old in [k for k, at in waiting.items() if now - at > horizon]:
                del waiting[old]
            self._pruned = now

    def not_held_back(self, key: str) -> None:
        """``key`` wants no comment now: it leaves the backlog."""
        self._waiting.pop(key, None)

    def spend(self, key: str) -> None:
        self._waiting.pop(key, None)
        self._last[key] = self._refill()
        self._tokens -= 1
        if len(self._last) > 65536:  # forget the oldest half: jobs long gone
            for old in sorted(self._last, key=self._last.__getitem__)[: len(self._last) // 2]:
                del self._last[old]

    def forget(self, key: str) -> None:
        self._last.pop(key, None)
        self._waiting.pop(key, None)


class JobsWithJobSets:
    """The ids of a Slurm cluster's jobs that have a JobSet, from the JobSet index (the informer may
    hold other clusters' too): made again only when a job gains its first JobSet or loses its last
    (``Store.values_generation``), not at every JobSet update nor at every look. The job source
    filters by it at every poll; ``maxBridgedJobs`` counts it at every reconcile."""

    def __init__(self, jobsets: Store) -> None:
        self._jobsets = jobsets
        self._made: tuple[tuple[int, str], frozenset[str], frozenset[int]] | None = None
        """(values generation and cluster, the index keys, the job ids) of the last look."""

    def ids(self, cluster: str) -> frozenset[int]:
        at = (self._jobsets.values_generation(INDEX_JOB), cluster)
        made = self._made
        if made is not None and made[0] == at:
            return made[2]
        prefix = f"{cluster}/"
        keys = frozenset(self._jobsets.index_values(INDEX_JOB))
        if made is not None and made[0][1] == cluster:
            # A few jobs gained or lost a JobSet since: only their keys are read again.
            gained, lost = keys - made[1], made[1] - keys
            ids = made[2].difference(_job_ids(lost, prefix)).union(_job_ids(gained, prefix))
        else:
            ids = frozenset(_job_ids(keys, prefix))
        self._made = (at, keys, ids)
        return ids


def _job_ids(keys: Iterable[str], prefix: str) -> Iterator[int]:
    """The job ids of the index keys ``<cluster>/<job id>`` that start with ``prefix``."""
    return (int(k[len(prefix) :]) for k in keys if k.startswith(prefix))


_Made = tuple[SlurmJob, WorkloadMixingSpec, "Translation | Untranslatable"]
"""A kept translation: the job and configuration it was made from, and what it gave."""


class SlurmObserver:
    """Gathers the :class:`Observed` of one job from the caches: the reconciler's eyes, and
    ``explain``'s, so that the two can never disagree on what they see."""

    def __init__(
        self,
        *,
        config: MixingConfig,
        jobsets: Store,
        workloads: Store,
        pods: Store,
        nodes: Store,
        child_jobs: Store | None = None,
        options: TranslationOptions = DEFAULT_OPTIONS,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._config = config
        self.jobsets = jobsets
        self.workloads = workloads
        self.pods = pods
        self.nodes = nodes
        self.child_jobs = child_jobs if child_jobs is not None else Store(indexers={INDEX_JOB: pod_job_keys})
        self._with_jobsets = JobsWithJobSets(jobsets)
        self._translations: OrderedDict[int, _Made] = OrderedDict()
        self._options = options
        self._wall_clock = wall_clock

    @classmethod
    def with_empty_stores(cls, *, config: MixingConfig) -> SlurmObserver:
        """An observer over empty stores with the indexes :meth:`observe` reads, for a caller that
        fills them itself (``explain``): ``observer.jobsets.put(...)``."""
        return cls(
            config=config,
            jobsets=Store(indexers={INDEX_JOB: jobset_job_keys}),
            workloads=Store(indexers={INDEX_JOB_UID: workload_uid_keys}),
            pods=Store(indexers={INDEX_JOB: pod_job_keys}),
            nodes=Store(indexers={INDEX_JOB: node_job_keys}),
            child_jobs=Store(indexers={INDEX_JOB: pod_job_keys}),
        )

    def cluster(self) -> str:
        spec = self._config.spec
        return spec.slurm.cluster_name if spec is not None and spec.slurm is not None else ""

    def _jobset_of(self, key: str) -> Object | None:
        found = self.jobsets.by_index(INDEX_JOB, key)
        if not found:
            return None
        return min(found, key=lambda o: ("deletionTimestamp" in o["metadata"], o["metadata"].get("name", "")))

    def observe(
        self,
        job_id: int,
        job: SlurmJob | None,
        *,
        dependees: Mapping[int, SlurmJob | None] | None = None,
        reservations: Mapping[str, SlurmReservation] | None = None,
    ) -> tuple[Observed, Object | None]:
        """The observation for one job (``job`` as read from the source or fresh from Slurm), with the
        jobs it depends on as the caller found them."""
        spec = self._config.spec
        slurm = spec.slurm if spec is not None else None
        cluster = self.cluster()
        key = job_key(cluster, job_id)
        translation: Translation | Untranslatable | None = None
        if job is not None and spec is not None and not job.is_finished:
            translation = self._translate(job, spec)
        else:
            self._translations.pop(job_id, None)
        raw_js = self._jobset_of(key)
        view = describe_jobset(raw_js) if raw_js is not None else None
        # Only this JobSet's Jobs: those of a deleted predecessor may linger until collected.
        all_child_jobs = self.child_jobs.by_index(INDEX_JOB, key)
        child_jobs = [j for j in all_child_jobs if view is not None and _owned_by(j, view.uid)]
        workload = None
        jobset_nodes: tuple[str, ...] = ()
        feature = shape = ""
        marks_holds = True
        if raw_js is not None and view is not None:
            if view.uid:
                raw_wl = select_workload(
                    self.workloads.by_index(INDEX_JOB_UID, view.uid), jobset_uid=view.uid
                )
                workload = describe_workload(raw_wl) if raw_wl is not None else None
            annotations = raw_js["metadata"].get("annotations") or {}
            jobset_nodes = tuple(n for n in str(annotations.get(ANNOTATION_NODES, "")).split(",") if n)
            feature = str(annotations.get(ANNOTATION_FEATURE, ""))
            shape = str(annotations.get(ANNOTATION_SHAPE, ""))
            marks_holds = ANNOTATION_HOLDS_MARKED in annotations
        observed = Observed(
            job_id=job_id,
            job=job,
            partitions=frozenset(slurm.partitions) if slurm is not None else frozenset(),
            translation=translation,
            jobset=view,
            has_finalizer=raw_js is not None and has_finalizer(raw_js, FINALIZER),
            jobset_nodes=jobset_nodes,
            jobset_feature=feature,
            jobset_shape=shape,
            jobset_marks_holds=marks_holds,
            workload=workload,
            nodes=tuple(
                sorted((node_of(o) for o in self.nodes.by_index(INDEX_JOB, str(job_id))), key=_by_name)
            ),
            pods=PodsView.of(self.pods.by_index(INDEX_JOB, key)),
            completed_indexes=_completed_indexes(child_jobs),
            failed_pods=_failed_pods(child_jobs),
            stale_child_jobs=len(all_child_jobs) - len(child_jobs),
            child_jobs_to_delete=tuple(
                str(j["metadata"].get("name", "")) for j in child_jobs if _not_going_at_once(j)
            ),
            bridged_jobs=self._bridged_jobs(cluster)
            if slurm is not None and slurm.limits.max_bridged_jobs
            else 0,
            max_bridged_jobs=slurm.limits.max_bridged_jobs if slurm is not None else None,
            now=self._wall_clock(),
            dependees=dependees,
            reservations=reservations if job is not None and job.reservation else None,
        )
        return observed, raw_js

    def _translate(self, job: SlurmJob, spec: WorkloadMixingSpec) -> Translation | Untranslatable:
        """``translate(job, spec)``, kept while the job and the configuration are the very objects it
        was made from: both are immutable, and the job source hands out the same ``SlurmJob`` for as
        long as slurmctld reports the job unchanged, so a job that waits is translated once, not at
        every look (a tenth of a deep queue's reconciling, profiled). The last ``TRANSLATIONS_KEPT``
        only: a translation holds its JobSet manifest, and the jobs looked at again and again are
        few (the head of the queue, the admitted ones)."""
        kept = self._translations
        made = kept.get(job.job_id)
        if made is not None and made[0] is job and made[1] is spec:
            kept.move_to_end(job.job_id)
            return made[2]
        translation = translate(job, spec, options=self._options)
        kept[job.job_id] = (job, spec, translation)
        kept.move_to_end(job.job_id)
        if len(kept) > TRANSLATIONS_KEPT:
            kept.popitem(last=False)
        return translation

    def _bridged_jobs(self, cluster: str) -> int:
        """Jobs of this Slurm cluster that have a JobSet (:class:`JobsWithJobSets`)."""
        return len(self._with_jobsets.ids(cluster))


class SlurmReconciler:
    """Gathers an :class:`Observed` for a ``<cluster>/<job id>`` request, decides, executes."""

    def __init__(
        self,
        *,
        client: Client,
        slurm: SlurmActions,
        config: MixingConfig,
        jobs: JobSource,
        jobsets: Store,
        workloads: Store,
        pods: Store,
        nodes: Store,
        metrics: SlurmMetrics,
        child_jobs: Store | None = None,
        reservations: ReservationCache | None = None,
        queue_positions: QueuePositionSource | None = None,
        nodes_trigger: Callable[[], None] | None = None,
        node_listings: NodeListings | None = None,
        recorder: EventRecorder | None = None,
        on_phases: Callable[[Mapping[str, int]], None] | None = None,
        options: TranslationOptions = DEFAULT_OPTIONS,
        wall_clock: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._slurm = slurm
        self._config = config
        self._jobs = jobs
        self._reservations = reservations
        self._queue_positions = queue_positions
        self.observer = SlurmObserver(
            config=config,
            jobsets=jobsets,
            workloads=workloads,
            pods=pods,
            nodes=nodes,
            child_jobs=child_jobs,
            options=options,
            wall_clock=wall_clock,
        )
        self._metrics = metrics
        self._nodes_trigger = nodes_trigger
        self._deletions = NodeWrites(node_listings) if node_listings is not None else None
        """The nodes deleted until the node source has listed whole since; None: not remembered
        (every look deletes what it sees)."""
        self._drains = NodeWrites(node_listings) if node_listings is not None else None
        """The nodes drained, likewise."""
        self._fresh_reads = FreshReads()
        """Jobs read fresh for a confirmation that the job source's cache has not caught up with: a
        decision taken on a fresh read is not followed by one taken on the older cache."""
        self._removed_finalizers = Remembered()
        """JobSet uids whose finalizer this process removed."""
        self._deleted_pods = Remembered()
        """``<namespace>/<name>`` of the pods this process deleted."""
        self._deleted_child_jobs = Remembered()
        """``<JobSet uid>/<name>`` of the JobSets' Jobs this process deleted (a JobSet made again
        under the same name makes its Job under the same name too)."""
        self._recorder = recorder
        self._on_phases = on_phases
        self._wall_clock = wall_clock
        self._clock = clock
        self._comments = CommentBudget(clock=clock)
        self._converted: set[str] = set()
        self.phases: dict[str, Phase] = {}
        """Each tracked job's phase as last reconciled (change it through ``_set_phase`` only)."""
        self._counts: dict[Phase, int] = {}
        self.waiting_for_nodes: set[str] = set()
        """The keys of jobs in phase ``admitted`` (admitted, waiting for their nodes): what the node
        source's timing asks about several times a second, without a look at every tracked job."""
        self._queued_at: dict[str, float] = {}
        self._admitted_at: dict[str, float] = {}
        self._running_seen: set[str] = set()
        metrics.live.phases = self.phase_counts

    def phase_counts(self) -> dict[str, int]:
        """Tracked jobs per phase: kept as phases change, so a report is not a count of every job
        (it runs at every change of any job's phase)."""
        return {phase.value: count for phase, count in self._counts.items() if count}

    def _set_phase(self, key: str, phase: Phase | None) -> None:
        before = self.phases.pop(key, None) if phase is None else self.phases.get(key)
        if before is phase:
            return
        if before is not None:
            self._counts[before] -= 1
        if phase is not None:
            self.phases[key] = phase
            self._counts[phase] = self._counts.get(phase, 0) + 1
        if phase is Phase.ADMITTED:
            self.waiting_for_nodes.add(key)
        else:
            self.waiting_for_nodes.discard(key)

    def release_priority(self, request: Request) -> int:
        """The queue priority of a live event's request (``Controller.watch(priority_of=...)``).

        ``RELEASE_PRIORITY`` for a job whose tracked phase is ``admitted`` (admitted, waiting for its
        nodes): the next reconcile may be its release, and every moment it waits behind ordinary
        reconciles (cleanups of ending jobs hold workers for up to a second) is added to the job's
        start; 0 for every other request. One dict lookup: it runs on the source's path.
        """
        waiting = self.phases.get(f"{request.namespace}/{request.name}") is Phase.ADMITTED
        return RELEASE_PRIORITY if waiting else 0

    # --- observe ----------------------------------------------------------------------------------

    def cluster(self) -> str:
        return self.observer.cluster()

    def observe(
        self,
        job_id: int,
        job: SlurmJob | None,
        *,
        reservations: Mapping[str, SlurmReservation] | None = None,
    ) -> tuple[Observed, Object | None]:
        """The observer's, with the jobs it depends on from the job source's last poll, plus whether a
        comment may be written now (``CommentBudget``)."""
        dependees = (
            {i: self._jobs.any_job(i) for i in dependency_ids(job)}
            if job is not None and job.dependency
            else None
        )
        observed, raw_js = self.observer.observe(job_id, job, dependees=dependees, reservations=reservations)
        key = job_key(self.cluster(), job_id)
        if job is not None and job.held_by != "user":
            self._converted.discard(key)
        if key in self._converted:
            observed = replace(observed, hold_converted=True)
        observed = self._with_expectations(observed, raw_js)
        wait = self._comments.wait(key, first=job is None or not job.comment.startswith(COMMENT_PREFIX))
        if wait > 0:
            observed = replace(observed, comment_due=False, comment_retry=self._comments.retry(key, wait))
        return observed, raw_js

    def _with_expectations(self, observed: Observed, raw_js: Object | None) -> Observed:
        """What this process wrote and the caches do not show yet (``slurm_expectations``), so that
        the decision does not write it again."""
        shown = {n.name for n in observed.nodes}
        deleted = drained = frozenset[str]()
        if self._deletions is not None and self._drains is not None:
            deleted = self._deletions.done_already(shown=shown, recorded=observed.jobset_nodes)
            drained = self._drains.done_already(shown=shown)
        namespace = raw_js["metadata"].get("namespace") if raw_js is not None else None
        pods = frozenset(n for n in observed.pods.undeleted if f"{namespace}/{n}" in self._deleted_pods)
        js_uid = observed.jobset.uid if observed.jobset is not None else ""
        jobs = frozenset(
            n for n in observed.child_jobs_to_delete if f"{js_uid}/{n}" in self._deleted_child_jobs
        )
        removed = bool(js_uid) and js_uid in self._removed_finalizers
        if not (deleted or drained or pods or jobs or removed):
            return observed
        return replace(
            observed,
            nodes_deleted=deleted,
            nodes_drained=drained,
            pods_deleted=pods,
            child_jobs_deleted=jobs,
            finalizer_removed=removed and observed.has_finalizer,
        )

    async def _reservations_for(self, job: SlurmJob | None) -> Mapping[str, SlurmReservation] | None:
        """slurmctld's reservations when ``job`` asks for one (read at most every few seconds)."""
        if job is None or not job.reservation or job.is_finished or self._reservations is None:
            return None
        return await self._reservations.get()

    def _with_queue_place(self, observed: Observed, raw_js: Object | None) -> Observed:
        """``observed`` with its Workload's place in line, while the Workload waits for quota."""
        wl = observed.workload
        if (
            self._queue_positions is None
            or raw_js is None
            or wl is None
            or wl.state is not WorkloadState.PENDING
        ):
            return observed
        queue = ((raw_js.get("metadata") or {}).get("labels") or {}).get(QUEUE_NAME_LABEL)
        if not queue:
            return observed
        where = {"namespace": wl.namespace, "local_queue": str(queue), "workload": wl.name}
        place = self._queue_positions.place(**where)
        if place is not None:
            return replace(observed, queue_place=place)
        if self._queue_positions.looking_up(**where):
            return replace(observed, queue_place_pending=True)
        return observed

    async def _fresh_job(self, job_id: int) -> SlurmJob | None:
        try:
            return await self._slurm.get_job(job_id)
        except InvalidJobId:
            return None

    # --- reconcile --------------------------------------------------------------------------------

    async def reconcile(self, request: Request) -> Result:
        cluster = self.cluster()
        if not cluster or request.namespace != cluster or not request.name.isdigit():
            return Result()
        job_id = int(request.name)
        key = job_key(cluster, job_id)
        cached = self._jobs.job(job_id)
        job = self._fresh_reads.newest(job_id, cached)
        observed, raw_js = self.observe(job_id, job, reservations=await self._reservations_for(job))
        observed = self._with_queue_place(observed, raw_js)
        decision = decide(observed)
        try:
            if decision.needs_confirmation:
                # The cached job may be a poll behind (our own last write included), or missing
                # because the cache does not hold it yet (right after a restart, the job list can
                # be taken before the configuration arrives): decide again on a fresh read.
                fresh = await self._fresh_job(job_id)
                self._fresh_reads.read(job_id, cached=cached, fresh=fresh)
                observed, raw_js = self.observe(
                    job_id, fresh, reservations=await self._reservations_for(fresh)
                )
                observed = self._with_queue_place(observed, raw_js)
                decision = decide(observed)
            self._track(key, decision)
            if decision.comment_held_back:
                self._comments.held_back(key)
            else:
                self._comments.not_held_back(key)
            if decision.actions:
                log.info(
                    "reconciling",
                    job_id=job_id,
                    phase=decision.phase,
                    why=decision.why,
                    actions=[a.kind for a in decision.actions],
                )
            else:
                log.debug("nothing to do", job_id=job_id, phase=decision.phase, why=decision.why)
            if decision.concurrent and len(decision.actions) > 1:
                await self._execute_concurrently(observed, raw_js, decision.actions)
            else:
                answered = False
                for action in decision.actions:
                    if answered and isinstance(action, RemoveFinalizer):
                        action = replace(action, answered=True)  # noqa: PLW2901 - the one to run
                    answer = await self._execute(observed, raw_js, action)
                    if answer is not None:  # the delete's answer: the JobSet as it is now
                        raw_js, answered = answer, True
        except (SlurmUnavailable, SlurmAuthError) as exc:
            log.warning("slurmrestd unusable; retrying later", job_id=job_id, error=str(exc))
            return Result(requeue_after=SLURM_RETRY)
        if decision.phase is Phase.ADMITTED and decision.requeue_after is not None:
            # The look again while waiting for nodes runs at 0, not at the RELEASE_PRIORITY a node
            # event may have handed this reconcile out with (it would stick to every look until the
            # release): the release comes from the node source's event, which carries that priority
            # itself, and a high line full of once-a-second looks of every job whose pods are still
            # starting would put the releases behind them.
            return Result(requeue_after=decision.requeue_after, priority=0)
        return Result(requeue_after=decision.requeue_after)

    def _track(self, key: str, decision: Decision) -> None:
        before = self.phases.get(key)
        self._track_phase(key, decision.phase)
        if self._on_phases is not None and self.phases.get(key) != before:
            self._on_phases(self.phase_counts())

    def _track_phase(self, key: str, phase: Phase | None) -> None:
        now = self._clock()
        if phase is None:
            self._comments.forget(key)
            self._converted.discard(key)
            self._set_phase(key, None)
            self._queued_at.pop(key, None)
            self._admitted_at.pop(key, None)
            self._running_seen.discard(key)
            return
        self._set_phase(key, phase)
        if phase in (Phase.QUEUED, Phase.EVICTED):
            self._queued_at.setdefault(key, now)
            self._admitted_at.pop(key, None)
            self._running_seen.discard(key)
        elif phase in (Phase.ADMITTED, Phase.RELEASING, Phase.RUNNING) and key not in self._admitted_at:
            self._admitted_at[key] = now
            queued = self._queued_at.pop(key, None)
            if queued is not None:
                self._metrics.held_to_admitted.observe(now - queued)
        if phase is Phase.RUNNING and key not in self._running_seen:
            self._running_seen.add(key)
            admitted = self._admitted_at.get(key)
            if admitted is not None:
                self._metrics.admitted_to_running.observe(now - admitted)

    async def _execute_concurrently(
        self, o: Observed, raw_js: Object | None, actions: Sequence[Action]
    ) -> None:
        """Run independent actions at once: one task each in a TaskGroup, so every task is owned and
        awaited (cancelling the reconcile cancels them all). A failure does not cancel the others
        (each action is idempotent, and one finished is one less to redo); the first failure in
        ``actions`` order is raised afterwards, the others are logged."""
        failures: list[tuple[int, Exception]] = []

        async def run(index: int, action: Action) -> None:
            try:
                await self._execute(o, raw_js, action)
            except Exception as exc:  # kept, and raised below once the others have finished
                failures.append((index, exc))

        async with asyncio.TaskGroup() as group:
            for index, action in enumerate(actions):
                group.create_task(run(index, action), name=f"slurm job {o.job_id}: {action.kind}")
        if failures:
            failures.sort(key=lambda failure: failure[0])
            for index, exc in failures[1:]:
                log.warning("action failed", job_id=o.job_id, action=actions[index].kind, error=repr(exc))
            raise failures[0][1]

    async def _execute(self, o: Observed, raw_js: Object | None, action: Action) -> Object | None:
        """Run one action; the JobSet as the API server answered a delete of it, else None."""
        try:
            answer = await self._run(o, raw_js, action)
        except Exception:
            self._metrics.actions.labels(action.kind, "error").inc()
            raise
        self._metrics.actions.labels(action.kind, "ok").inc()
        if action.slurm_write and action.poll_after:
            self._jobs.refresh(o.job_id)  # see the effect now: this job read again, not every job
        if action.node_write and self._nodes_trigger is not None:
            # The node source would show the deleted nodes until its next poll, and every event of the
            # job meanwhile would delete them again (an scontrol call each on 22.05).
            self._nodes_trigger()
        return answer

    async def _run(self, o: Observed, raw_js: Object | None, action: Action) -> Object | None:
        handler = self._handlers.get(type(action))
        if handler is None:  # pragma: no cover - every action class has a handler
            raise TypeError(f"unknown action {action!r}")
        answer = await handler(o, raw_js, action)
        return answer if isinstance(action, DeleteJobSet) and _is_jobset(answer) else None

    @property
    def _handlers(self) -> Mapping[type[Action], Callable[[Observed, Object | None, Any], Awaitable[Any]]]:
        return {
            CreateJobSet: self._create_jobset,
            AddFinalizer: self._add_finalizer,
            RemoveFinalizer: self._remove_finalizer,
            DeleteChildJobs: self._delete_child_jobs,
            DeletePods: self._delete_pods,
            DeleteJobSet: self._delete_jobset,
            DrainNodes: self._drain_nodes,
            DownNodes: self._down_nodes,
            ResumeNodes: self._resume_nodes,
            DeleteNodes: self._delete_nodes,
            Hold: self._hold,
            ConvertHold: self._hold,
            RequeueHold: self._requeue_hold,
            PinAndRelease: self._pin_and_release,
            ReportUnservable: self._report_unservable,
            ClearComment: self._clear_comment,
            WriteComment: self._write_comment,
            MarkHeld: self._mark_held,
        }

    async def _create_jobset(self, o: Observed, raw_js: Object | None, action: CreateJobSet) -> None:
        try:
            await self._client.create(dict(action.manifest), field_manager=FIELD_MANAGER)
        except AlreadyExists:
            log.debug("JobSet already exists", job_id=o.job_id)

    async def _add_finalizer(self, o: Observed, raw_js: Object | None, action: AddFinalizer) -> None:
        if raw_js is not None:
            await add_finalizer(self._client, raw_js, FINALIZER, field_manager=FIELD_MANAGER)
            self._removed_finalizers.discard(str(raw_js["metadata"].get("uid", "")))

    async def _remove_finalizer(self, o: Observed, raw_js: Object | None, action: RemoveFinalizer) -> None:
        if raw_js is None:
            return
        meta = raw_js["metadata"]
        try:
            # The delete's answer carries the resourceVersion the delete made; without it, read again
            # (the cache may be behind). A change in between is a Conflict, and the requeue reads.
            fresh = raw_js if action.answered else await self._client.get(
                JOBSET_API_VERSION, JOBSET_KIND, meta["name"], namespace=meta.get("namespace")
            )  # fmt: skip
            await remove_finalizer(self._client, fresh, FINALIZER, field_manager=FIELD_MANAGER)
        except NotFound:
            pass
        self._removed_finalizers.add(str(meta.get("uid", "")))

    async def _delete_jobset(self, o: Observed, raw_js: Object | None, action: DeleteJobSet) -> Object | None:
        """The API server's answer: the JobSet with its deletionTimestamp (it keeps the bridge's
        finalizer), which saves the finalizer's removal a read."""
        if raw_js is None:
            return None
        meta = raw_js["metadata"]
        return await self._client.delete(
            JOBSET_API_VERSION,
            JOBSET_KIND,
            meta["name"],
            namespace=meta.get("namespace"),
            propagation_policy="Foreground" if action.foreground else "Background",
            missing_ok=True,
        )

    async def _delete_pods(self, o: Observed, raw_js: Object | None, action: DeletePods) -> None:
        namespace = raw_js["metadata"].get("namespace") if raw_js is not None else None
        for name in action.names:
            await self._client.delete("v1", "Pod", name, namespace=namespace, missing_ok=True)
            self._deleted_pods.add(f"{namespace}/{name}")

    async def _delete_child_jobs(self, o: Observed, raw_js: Object | None, action: DeleteChildJobs) -> None:
        namespace = raw_js["metadata"].get("namespace") if raw_js is not None else None
        for name in action.names:
            await self._client.delete(
                "batch/v1", "Job", name, namespace=namespace, propagation_policy="Background", missing_ok=True
            )
            if raw_js is not None:
                self._deleted_child_jobs.add(f"{raw_js['metadata'].get('uid', '')}/{name}")

    async def _drain_nodes(self, o: Observed, raw_js: Object | None, action: DrainNodes) -> None:
        for name in action.names:
            with contextlib.suppress(InvalidNodeName):
                await self._slurm.drain_node(name, reason=action.reason)
            if self._drains is not None:
                self._drains.made(name)

    async def _down_nodes(self, o: Observed, raw_js: Object | None, action: DownNodes) -> None:
        for name in action.names:
            with contextlib.suppress(InvalidNodeName):
                await self._slurm.down_node(name, reason=action.reason)

    async def _resume_nodes(self, o: Observed, raw_js: Object | None, action: ResumeNodes) -> None:
        for name in action.names:
            with contextlib.suppress(InvalidNodeName):
                await self._slurm.resume_node(name)

    async def _delete_nodes(self, o: Observed, raw_js: Object | None, action: DeleteNodes) -> None:
        for name in action.names:
            with contextlib.suppress(InvalidNodeName):
                await self._slurm.delete_node(
                    name,
                    down_if_busy=name not in action.down_already,
                    reason=f"k8s-bridge: job {o.job_id} done",
                )
            if self._deletions is not None:
                self._deletions.made(name)

    async def _hold(self, o: Observed, raw_js: Object | None, action: Hold) -> None:
        try:
            await self._slurm.hold_job(
                o.job_id, unpin=action.unpin, comment=action.comment, admin_comment=action.admin_comment
            )
        except (InvalidJobId, JobAlreadyDone):
            log.info("job ended before it could be held", job_id=o.job_id)
            return
        except SlurmAPIError as exc:
            if not action.best_effort:
                raise
            log.warning(
                "Slurm refused the hold; the job stays held as it is", job_id=o.job_id, error=str(exc)
            )
        if isinstance(action, ConvertHold):  # done, or refused: not tried again on every event
            self._converted.add(job_key(self.cluster(), o.job_id))
            return
        if action.event and raw_js is not None:
            await self._event(raw_js, "Warning", action.event, f"Slurm job {o.job_id}: {action.reason}")

    async def _requeue_hold(self, o: Observed, raw_js: Object | None, action: RequeueHold) -> None:
        try:
            await self._slurm.requeue_hold(o.job_id)
        except (InvalidJobId, JobAlreadyDone):
            log.info("job ended before it could be requeued", job_id=o.job_id)
        if raw_js is not None:
            await self._event(raw_js, "Warning", "RequeueHeld", f"Slurm job {o.job_id}: {action.reason}")

    async def _pin_and_release(self, o: Observed, raw_js: Object | None, action: PinAndRelease) -> None:
        begin = int(self._wall_clock()) if action.begin_now else None

        async def released() -> None:
            # The Event says when the job was released: right after the update, before the v0.0.38
            # admin comment clear by scontrol that follows it (a subprocess, not part of the release).
            if raw_js is not None:
                note = f"Slurm job {o.job_id} pinned to {','.join(action.nodes)} and released"
                await self._event(raw_js, "Normal", "Released", note)

        try:
            await self._slurm.pin_and_release(
                o.job_id,
                nodes=action.nodes,
                constraints=action.constraints,
                begin_time=begin,
                comment="" if action.clear_comment else None,
                admin_comment="" if action.clear_admin_comment else None,
                released=released,
            )
        except (InvalidJobId, JobAlreadyDone):
            # Cancelled as it was released (a mass cancel): before the update, or before the admin
            # comment clear that follows it on v0.0.38. Expected; the next poll shows the end, which
            # cleans up.
            log.info("job ended as it was released", job_id=o.job_id)
        except (InvalidNodeName, InvalidFeature) as exc:
            # The node source saw nodes slurmctld has just lost: look again soon.
            raise SlurmAPIError(f"pinning job {o.job_id}: {exc}") from exc

    async def _set_comment(self, o: Observed, text: str) -> bool:
        """Write the job's comment; False when the job ended since the poll (cancelled in the meantime:
        an expected outcome, not a failure, and the next poll shows the end, which cleans up)."""
        try:
            await self._slurm.set_comment(o.job_id, text)
        except (InvalidJobId, JobAlreadyDone):
            log.info("job ended before its comment could be written", job_id=o.job_id)
            return False
        return True

    async def _report_unservable(self, o: Observed, raw_js: Object | None, action: ReportUnservable) -> None:
        if not await self._set_comment(o, action.comment):
            return
        mixing = self._config.object
        if mixing is not None:
            await self._event(mixing, "Warning", action.code, f"Slurm job {o.job_id}: {action.reason}")

    async def _clear_comment(self, o: Observed, raw_js: Object | None, action: ClearComment) -> None:
        await self._set_comment(o, "")

    async def _write_comment(self, o: Observed, raw_js: Object | None, action: WriteComment) -> None:
        self._comments.spend(job_key(self.cluster(), o.job_id))
        if await self._set_comment(o, action.text) and action.event and raw_js is not None:
            await self._event(raw_js, "Warning", action.event, f"Slurm job {o.job_id}: {action.text}")

    async def _mark_held(self, o: Observed, raw_js: Object | None, action: MarkHeld) -> None:
        try:
            await self._slurm.set_admin_comment(o.job_id, action.admin_comment)
        except (InvalidJobId, JobAlreadyDone):
            log.info("job ended before its hold could be marked", job_id=o.job_id)

    async def _event(self, regarding: Object, type_: str, reason: str, note: str) -> None:
        if self._recorder is None:
            return
        await self._recorder.event(
            regarding,
            type="Warning" if type_ == "Warning" else "Normal",
            reason=reason,
            note=note,
            action=reason,
        )
