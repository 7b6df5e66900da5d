"""The Ray bridge's reconciler: one gated RayJob in a shared RayCluster, observed whole, moved one step.

Level-based like the Slurm reconciler. Each reconcile observes everything about one RayJob: the
RayJob (from an informer), the shared RayCluster it names, the JobSet of dedicated workers made for
it (by the label ``bridge.k8s-bridge.io/ray-job-uid``), the Workload Kueue made for that JobSet (by
``kueue.x-k8s.io/job-uid``) and, only while a gated RayJob is being deleted, the job as Ray's head
reports it. Nothing else is remembered between reconciles, so a crash anywhere is recovered by
observing again.

The gate is set at creation by the webhook (bridge/ray/gate.py): the RayJob's entrypoint needs one
unit of the per-job Ray resource ``<prefix><token>``, which only the bridge's workers advertise. So
Ray keeps the job PENDING until Kueue admits the JobSet and its workers join; nothing here releases
anything. What this reconciler does is make the capacity, take it back, and make sure that nothing
is left when the RayJob ends or goes: no JobSet, no worker, no pending demand in the head.

:func:`decide` is pure (every row of docs/ray-bridge-reference.md's state table is a unit test);
:class:`RayReconciler` gathers the observation and executes the actions, each safe to repeat
(deterministic names, creates ignore AlreadyExists, deletes ignore NotFound, the cancel submits a
job with a deterministic submission id).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import enum
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Final, Literal, Protocol

import structlog

from bridge.admission import (
    JOB_UID_LABEL,
    JOBSET_API_VERSION,
    JOBSET_KIND,
    JobSetState,
    JobSetView,
    WorkloadState,
    WorkloadView,
    describe_jobset,
    describe_workload,
    select_workload,
)
from bridge.api.mixing import RaySpec, WorkloadMixingSpec
from bridge.runtime.cache import Store
from bridge.runtime.client import Client
from bridge.runtime.controller import Request, Result
from bridge.runtime.errors import AlreadyExists, ApiError, Conflict, NotFound
from bridge.runtime.events import EventRecorder
from bridge.runtime.handlers import Object
from translators.ray import (
    ANNOTATION_RAY_CLUSTER,
    ANNOTATION_RAY_JOB,
    FINALIZER,
    LABEL_RAY_JOB_UID,
    Translation,
    Untranslatable,
    gate_of,
    translate,
)

__all__ = [
    "ANNOTATION_RAY_JOB_ID",
    "FIELD_MANAGER",
    "INDEX_JOB_UID",
    "INDEX_RAYCLUSTER",
    "INDEX_RAYJOB_KEY",
    "INDEX_RAYJOB_UID",
    "START_TIMEOUT_DEFAULT",
    "Action",
    "AnnotateJobSet",
    "CancelInRay",
    "CreateJobSet",
    "Decision",
    "DeleteJobSet",
    "Emit",
    "Observed",
    "Phase",
    "RayJobStatus",
    "RayJobView",
    "RayReconciler",
    "RemoveFinalizer",
    "cluster_start_timeout",
    "decide",
    "jobset_rayjob_keys",
    "jobset_rayjob_name_keys",
    "jobset_request",
    "rayjob_cluster_keys",
    "workload_uid_keys",
]

log = structlog.get_logger(__name__)

FIELD_MANAGER: Final = "k8s-bridge-ray"
ANNOTATION_RAY_JOB_ID: Final = "bridge.k8s-bridge.io/ray-job-id"
"""On the JobSet: the Ray job id (submission id) of its RayJob, once KubeRay has given it one."""
INDEX_RAYJOB_UID: Final = "ray-job-uid"
"""Index of the JobSet cache: the RayJob uid of the bridge's label."""
INDEX_RAYJOB_KEY: Final = "ray-job"
"""Index of the JobSet cache: ``<namespace>/<name>`` of the RayJob (the bridge's annotation), to find
the JobSet of a RayJob that is gone."""
INDEX_JOB_UID: Final = "job-uid"
"""Index of the Workload cache: the JobSet uid of Kueue's ``job-uid`` label."""
INDEX_RAYCLUSTER: Final = "ray-cluster"
"""Index of the RayJob cache: ``<namespace>/<cluster>`` of the RayCluster its selector names."""

START_TIMEOUT_DEFAULT: Final = 900.0
"""Ray's ``RAY_JOB_START_TIMEOUT_SECONDS`` when the head's environment does not set it."""
START_TIMEOUT_WARN_FRACTION: Final = 0.8
"""A gated job that has waited this share of its head's start timeout gets a warning Event."""
START_TIMEOUT_NEAR: Final = "StartTimeoutNear"
START_TIMEOUT: Final = "StartTimeout"
UNGATED: Final = "Ungated"
WORKERS_FAILED: Final = "WorkersFailed"
WORKERS_LOST: Final = "WorkersLost"
"""Reason of the Event on a RayJob that runs in a bridged cluster without the gate."""
WAIT_FOR_CANCEL: Final = 2.0
"""Seconds between looks while a pending Ray job is being cancelled."""
WAIT_FOR_SLOT: Final = 10.0
"""Seconds between looks while ``limits.maxBridgedJobs`` JobSets exist."""

_RAY_TERMINAL: Final = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
_DEPLOYMENT_TERMINAL: Final = frozenset({"Complete", "Failed"})
_START_TIMEOUT_ENV: Final = "RAY_JOB_START_TIMEOUT_SECONDS"
_START_TIMEOUT_MARK: Final = "JOB_SUPERVISOR_ACTOR_START_TIMEOUT"
_CLUSTER_KEY: Final = "ray.io/cluster"


class Phase(enum.StrEnum):
    """Where a gated RayJob stands; a metric label and the source of the WorkloadMixing counts."""

    HELD = "held"
    """Gated, no JobSet: not translatable (an Event says why), or waiting for a slot."""
    QUEUED = "queued"
    """Its JobSet waits for Kueue's admission (also after an eviction)."""
    ADMITTED = "admitted"
    """Admitted: workers starting and joining; the Ray job still PENDING."""
    RUNNING = "running"
    """The Ray job runs on its workers."""
    FINISHING = "finishing"
    """Ended or deleted: its JobSet and pending demand are being removed."""


# --- views -------------------------------------------------------------------------------------


class RayJobStatus(enum.StrEnum):
    """``status.jobStatus`` of a RayJob (Ray's own job status), "" before KubeRay submitted."""

    NONE = ""
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    STOPPED = "STOPPED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"

    @classmethod
    def parse(cls, text: object) -> RayJobStatus:
        try:
            return cls(str(text or ""))
        except ValueError:
            return cls.NONE


@dataclass(frozen=True, kw_only=True)
class RayJobView:
    """The facts of a RayJob the bridge acts on."""

    namespace: str
    name: str
    uid: str
    cluster: str | None
    """The RayCluster ``spec.clusterSelector['ray.io/cluster']`` names (None: not a selector RayJob)."""
    gate: str | None
    """The bridge's resource in ``spec.entrypointResources`` (None: not gated)."""
    job_id: str
    """Ray's submission id (``status.jobId``, else ``spec.jobId``), "" before it is known."""
    job_status: RayJobStatus
    deployment_status: str
    message: str
    deleting: bool
    has_finalizer: bool
    created: float | None
    """``metadata.creationTimestamp`` as seconds since the epoch."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def finished(self) -> bool:
        """Ray reports the job ended, or KubeRay gave up on it."""
        return self.job_status.value in _RAY_TERMINAL or self.deployment_status in _DEPLOYMENT_TERMINAL

    @property
    def start_timed_out(self) -> bool:
        return self.job_status is RayJobStatus.FAILED and _START_TIMEOUT_MARK in self.message

    @classmethod
    def of(cls, rayjob: Mapping[str, Any], *, prefix: str) -> RayJobView:
        meta = rayjob.get("metadata") or {}
        spec = rayjob.get("spec") or {}
        status = rayjob.get("status") or {}
        selector = spec.get("clusterSelector") or {}
        cluster = selector.get(_CLUSTER_KEY) if isinstance(selector, Mapping) else None
        return cls(
            namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
            uid=str(meta.get("uid") or ""),
            cluster=str(cluster) if cluster else None,
            gate=gate_of(rayjob, prefix),
            job_id=str(status.get("jobId") or spec.get("jobId") or ""),
            job_status=RayJobStatus.parse(status.get("jobStatus")),
            deployment_status=str(status.get("jobDeploymentStatus") or ""),
            message=str(status.get("message") or ""),
            deleting=bool(meta.get("deletionTimestamp")),
            has_finalizer=FINALIZER in (meta.get("finalizers") or ()),
            created=_timestamp(meta.get("creationTimestamp")),
        )


def _timestamp(text: object) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def cluster_start_timeout(raycluster: Mapping[str, Any] | None) -> float:
    """The head's ``RAY_JOB_START_TIMEOUT_SECONDS`` (a pending job fails after it), from its template."""
    if raycluster is None:
        return START_TIMEOUT_DEFAULT
    template = ((raycluster.get("spec") or {}).get("headGroupSpec") or {}).get("template") or {}
    for container in (template.get("spec") or {}).get("containers") or ():
        for env in container.get("env") or ():
            if env.get("name") == _START_TIMEOUT_ENV:
                try:
                    return float(env.get("value") or START_TIMEOUT_DEFAULT)
                except ValueError:
                    return START_TIMEOUT_DEFAULT
    return START_TIMEOUT_DEFAULT


# --- actions -----------------------------------------------------------------------------------


class Action:
    """One step the reconciler executes; ``kind`` labels metrics and logs."""

    kind: ClassVar[str] = "action"


@dataclass(frozen=True, kw_only=True)
class CreateJobSet(Action):
    kind: ClassVar[str] = "create_jobset"
    manifest: Mapping[str, Any]


@dataclass(frozen=True, kw_only=True)
class DeleteJobSet(Action):
    kind: ClassVar[str] = "delete_jobset"
    namespace: str
    name: str


@dataclass(frozen=True, kw_only=True)
class CancelInRay(Action):
    """Fail the pending Ray job in its head (``ray job stop`` does not cancel a pending job)."""

    kind: ClassVar[str] = "cancel_in_ray"
    namespace: str
    cluster: str
    job_id: str


@dataclass(frozen=True, kw_only=True)
class AnnotateJobSet(Action):
    """Record the Ray job id on the JobSet, so an orphaned JobSet still names the job to cancel."""

    kind: ClassVar[str] = "annotate_jobset"
    namespace: str
    name: str
    job_id: str


@dataclass(frozen=True, kw_only=True)
class RemoveFinalizer(Action):
    kind: ClassVar[str] = "remove_finalizer"


@dataclass(frozen=True, kw_only=True)
class Emit(Action):
    """An Event on the RayJob, recorded once per RayJob and ``reason`` (repeats are dropped)."""

    kind: ClassVar[str] = "event"
    type: Literal["Normal", "Warning"]
    reason: str
    note: str


@dataclass(frozen=True, kw_only=True)
class Decision:
    """What to do now (in order, stopping at the first failure), when to look again, the phase."""

    actions: tuple[Action, ...] = ()
    requeue_after: float | None = None
    phase: Phase | None = None
    """None: nothing of this RayJob is left to track."""
    why: str = ""


# --- observation -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Observed:
    """Everything :func:`decide` may use about one RayJob."""

    key: str
    rayjob: RayJobView | None
    raw_rayjob: Mapping[str, Any] | None = None
    ray: RaySpec | None
    """The live configuration's Ray part (None: no configuration, or Ray not bridged)."""
    cluster_selected: bool = False
    """The RayCluster the RayJob names exists and ``spec.ray.clusterSelector`` selects it."""
    start_timeout: float = START_TIMEOUT_DEFAULT
    jobset: JobSetView | None = None
    jobset_cluster: str | None = None
    jobset_job_id: str = ""
    """The Ray job id recorded on the JobSet (:data:`ANNOTATION_RAY_JOB_ID`): an orphan's job to cancel."""
    jobset_created: float | None = None
    workload: WorkloadView | None = None
    translation: Translation | Untranslatable | None = None
    """What the RayJob translates to (only computed when a JobSet is to be made)."""
    bridged_jobs: int = 0
    """JobSets of this bridge that exist now (``limits.maxBridgedJobs``)."""
    ray_job_finished: bool | None = None
    """Ray's own answer while a gated RayJob is deleted: has the job ended there (None: not asked)."""
    now: float = 0.0


def _delete(o: Observed) -> tuple[Action, ...]:
    """Delete the JobSet (foreground: its Jobs and pods go before it does), unless it is going already.

    A JobSet being deleted is as good as gone for the RayJob: its deletion completes on its own (the
    garbage collector removes its pods, then it), whatever becomes of the RayJob.
    """
    if o.jobset is None or o.jobset.deleting:
        return ()
    return (DeleteJobSet(namespace=o.jobset.namespace, name=o.jobset.name),)


def decide(o: Observed) -> Decision:
    """The state table (docs/ray-bridge-reference.md, "State table"): rows are tried in order."""
    job = o.rayjob
    if job is None:
        return _decide_gone(o)
    if job.gate is None:
        return _decide_ungated(o, job)
    if job.deleting:
        return _decide_deleting(o, job)
    if job.finished:
        return _decide_finished(o, job)
    if o.jobset is None:
        return _decide_unbridged(o, job)
    return _decide_bridged(o, job, o.jobset)


def _decide_gone(o: Observed) -> Decision:
    """The RayJob is gone (its finalizer removed by hand): its JobSet is an orphan."""
    if o.jobset is None:
        return Decision(why="no RayJob, no JobSet: nothing to do")
    actions: list[Action] = [*_delete(o)]
    if o.jobset_cluster and o.jobset_job_id:
        actions.insert(
            0, CancelInRay(namespace=o.jobset.namespace, cluster=o.jobset_cluster, job_id=o.jobset_job_id)
        )
    return Decision(
        actions=tuple(actions),
        phase=Phase.FINISHING,
        why="the RayJob is gone: cancel its demand, delete the JobSet",
    )


def _decide_ungated(o: Observed, job: RayJobView) -> Decision:
    actions: list[Action] = [*_delete(o)]
    if job.has_finalizer and (o.jobset is None or o.jobset.deleting):
        actions.append(RemoveFinalizer())
    if o.cluster_selected and not job.finished and not job.deleting:
        actions.insert(
            0,
            Emit(
                type="Warning",
                reason=UNGATED,
                note=f"RayJob runs in the shared RayCluster {job.cluster} without Kueue's admission: it "
                "was created while the ray-bridge webhook was not serving; delete and re-create it "
                "to queue it",
            ),
        )
    return Decision(actions=tuple(actions), why="not gated by the bridge")


def _decide_deleting(o: Observed, job: RayJobView) -> Decision:
    """Being deleted: no pending demand may stay in the head, no worker may stay; then let it go."""
    if not job.has_finalizer:
        return Decision(actions=_delete(o), why="being deleted, not ours to hold")
    pending_in_ray = not job.finished and o.ray_job_finished is not True and bool(job.job_id) and job.cluster
    if pending_in_ray:
        assert job.cluster is not None
        return Decision(
            actions=(
                CancelInRay(namespace=job.namespace, cluster=job.cluster, job_id=job.job_id),
                *_delete(o),
            ),
            requeue_after=WAIT_FOR_CANCEL,
            phase=Phase.FINISHING,
            why="deleted while its Ray job has not ended: cancel it in Ray, delete the workers",
        )
    if o.jobset is not None and not o.jobset.deleting:
        return Decision(
            actions=_delete(o),
            requeue_after=WAIT_FOR_CANCEL,
            phase=Phase.FINISHING,
            why="deleted: its JobSet goes first",
        )
    return Decision(actions=(RemoveFinalizer(),), why="deleted, nothing left: release the RayJob")


def _decide_finished(o: Observed, job: RayJobView) -> Decision:
    actions: list[Action] = []
    if job.start_timed_out:
        actions.append(
            Emit(
                type="Warning",
                reason=START_TIMEOUT,
                note=f"Ray failed the job after it waited longer than the head's {_START_TIMEOUT_ENV} "
                f"({o.start_timeout:.0f} s) for its workers; raise it on RayCluster {job.cluster} above "
                "the longest queue wait",
            )
        )
    actions.extend(_delete(o))
    if (o.jobset is None or o.jobset.deleting) and job.has_finalizer:
        actions.append(RemoveFinalizer())
    return Decision(
        actions=tuple(actions),
        phase=Phase.FINISHING if o.jobset is not None and not o.jobset.deleting else None,
        why=f"the Ray job ended ({job.job_status or job.deployment_status}): workers go",
    )


def _decide_unbridged(o: Observed, job: RayJobView) -> Decision:
    if o.ray is None:
        return Decision(phase=Phase.HELD, why="no live configuration: wait")
    result = o.translation
    if result is None:
        return Decision(phase=Phase.HELD, why="not translated")
    if isinstance(result, Untranslatable):
        return Decision(
            actions=(Emit(type="Warning", reason="CannotBridge", note=f"{result.reason} ({result.code})"),),
            phase=Phase.HELD,
            why=f"cannot be bridged: {result.reason}",
        )
    if o.bridged_jobs >= o.ray.limits.max_bridged_jobs:
        return Decision(
            requeue_after=WAIT_FOR_SLOT,
            phase=Phase.HELD,
            why=f"limits.maxBridgedJobs ({o.ray.limits.max_bridged_jobs}) JobSets exist: wait for a slot",
        )
    manifest = result.manifest
    if job.job_id:
        meta = manifest.get("metadata") or {}
        annotations = {**(meta.get("annotations") or {}), ANNOTATION_RAY_JOB_ID: job.job_id}
        manifest = {**manifest, "metadata": {**meta, "annotations": annotations}}
    return Decision(
        actions=(CreateJobSet(manifest=manifest),),
        phase=Phase.QUEUED,
        why=f"gated: JobSet {result.namespace}/{result.name} of {result.workers} worker(s) for Kueue",
    )


def _decide_bridged(o: Observed, job: RayJobView, jobset: JobSetView) -> Decision:
    if jobset.deleting:
        return Decision(phase=Phase.QUEUED, why="its JobSet is being deleted: wait, then make it again")
    if jobset.state is JobSetState.FAILED:
        return _workers_failed(o, job, jobset)
    decision = _decide_capacity(o, job)
    if job.job_id and o.jobset_job_id != job.job_id:
        record = AnnotateJobSet(namespace=jobset.namespace, name=jobset.name, job_id=job.job_id)
        return replace(decision, actions=(record, *decision.actions))
    return decision


def _workers_failed(o: Observed, job: RayJobView, jobset: JobSetView) -> Decision:
    """A worker pod failed (a node lost, ``ray start`` could not join): the JobSet has failed for good."""
    if job.job_status is RayJobStatus.RUNNING:
        return Decision(
            actions=(
                Emit(
                    type="Warning",
                    reason=WORKERS_LOST,
                    note=f"a dedicated worker failed ({jobset.terminal_state or 'JobSet Failed'}); the "
                    "running Ray job fails with it; its workers go when it ends",
                ),
            ),
            phase=Phase.RUNNING,
            why="workers failed under a running job: Ray fails it",
        )
    return Decision(
        actions=(
            Emit(
                type="Warning",
                reason=WORKERS_FAILED,
                note="a dedicated worker failed before the job started; its JobSet is made again and "
                "queued in Kueue anew",
            ),
            DeleteJobSet(namespace=jobset.namespace, name=jobset.name),
        ),
        phase=Phase.QUEUED,
        why="workers failed before the job started: make the JobSet again",
    )


def _decide_capacity(o: Observed, job: RayJobView) -> Decision:
    wl = o.workload
    running = job.job_status is RayJobStatus.RUNNING
    if wl is not None and wl.state in (WorkloadState.EVICTED, WorkloadState.PREEMPTED):
        if running:
            return Decision(
                actions=(
                    Emit(
                        type="Warning",
                        reason="WorkersPreempted",
                        note=f"Kueue took the dedicated workers back ({wl.state}: {wl.reason}); Ray "
                        "cannot move a running job, so it fails on them; the RayJob's own retries, if "
                        "any, queue again",
                    ),
                ),
                phase=Phase.QUEUED,
                why="evicted while running: the Ray job loses its workers",
            )
        return Decision(
            phase=Phase.QUEUED, why="evicted before it started: stays pending in Ray until re-admitted"
        )
    if wl is not None and wl.state is WorkloadState.ADMITTED:
        if running:
            return Decision(phase=Phase.RUNNING, why="admitted, running on its workers")
        return Decision(phase=Phase.ADMITTED, why="admitted: workers join, then Ray starts the entrypoint")
    return _queued(o, job)


def _queued(o: Observed, job: RayJobView) -> Decision:
    waited = o.now - o.jobset_created if o.jobset_created is not None else 0.0
    warn_at = START_TIMEOUT_WARN_FRACTION * o.start_timeout
    if waited >= warn_at:
        return Decision(
            actions=(
                Emit(
                    type="Warning",
                    reason=START_TIMEOUT_NEAR,
                    note=f"waited {waited:.0f} s for Kueue; Ray fails a job pending longer than the head's "
                    f"{_START_TIMEOUT_ENV} ({o.start_timeout:.0f} s): raise it on RayCluster {job.cluster}",
                ),
            ),
            phase=Phase.QUEUED,
            why="queued close to the head's start timeout",
        )
    return Decision(requeue_after=max(1.0, warn_at - waited), phase=Phase.QUEUED, why="queued: Kueue decides")


# --- indexes -----------------------------------------------------------------------------------


def jobset_rayjob_keys(obj: Object) -> list[str]:
    """Index function over JobSets: the RayJob uid of the bridge's label."""
    uid = ((obj.get("metadata") or {}).get("labels") or {}).get(LABEL_RAY_JOB_UID)
    return [str(uid)] if uid else []


def jobset_rayjob_name_keys(obj: Object) -> list[str]:
    """Index function over JobSets: ``<namespace>/<name>`` of their RayJob."""
    ref = ((obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_RAY_JOB)
    return [str(ref)] if ref else []


def workload_uid_keys(obj: Object) -> list[str]:
    uid = ((obj.get("metadata") or {}).get("labels") or {}).get(JOB_UID_LABEL)
    return [str(uid)] if uid else []


def rayjob_cluster_keys(obj: Object) -> list[str]:
    """Index function over RayJobs: ``<namespace>/<cluster>`` of the RayCluster their selector names."""
    meta = obj.get("metadata") or {}
    selector = (obj.get("spec") or {}).get("clusterSelector") or {}
    cluster = selector.get(_CLUSTER_KEY) if isinstance(selector, Mapping) else None
    return [f"{meta.get('namespace')}/{cluster}"] if cluster else []


def jobset_request(obj: Object) -> list[Request]:
    """A JobSet's RayJob, from the bridge's annotation."""
    ref = ((obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_RAY_JOB)
    if not ref or "/" not in ref:
        return []
    namespace, _, name = str(ref).partition("/")
    return [Request(namespace, name)]


# --- the reconciler ----------------------------------------------------------------------------

_LATENCIES: Final[Mapping[tuple[Phase | None, Phase | None], str]] = {
    (Phase.QUEUED, Phase.ADMITTED): "queued_to_admitted",
    (Phase.QUEUED, Phase.RUNNING): "queued_to_admitted",
    (Phase.ADMITTED, Phase.RUNNING): "admitted_to_running",
}
"""Phase changes whose time the ``on_latency`` hook is told (the histograms of the same names)."""


class RayJobs(Protocol):
    """What the reconciler asks of Ray's head (bridge/ray/dashboard.py)."""

    async def job_finished(self, *, namespace: str, cluster: str, job_id: str) -> bool:
        """Has the job ended in Ray (or does Ray not know it)?"""
        ...

    async def cancel_pending(self, *, namespace: str, cluster: str, job_id: str) -> None:
        """Fail the job if it is still pending (idempotent)."""
        ...


class MixingConfig(Protocol):
    @property
    def spec(self) -> WorkloadMixingSpec | None: ...


@dataclass(kw_only=True)
class _Memory:
    """What the reconciler keeps only to avoid repeating itself (never to decide)."""

    emitted: set[tuple[str, str]] = field(default_factory=set)
    phases: dict[str, Phase] = field(default_factory=dict)
    since: dict[str, float] = field(default_factory=dict)
    """When each RayJob entered its current phase (monotonic), for the latency histograms."""
    ungated: set[str] = field(default_factory=set)
    """RayJobs last seen running ungated in a bridged cluster (the metric of the same name)."""
    short_timeouts: dict[str, tuple[float, str]] = field(default_factory=dict)
    """``<namespace>/<cluster>`` -> (its head's start timeout, what showed it too short)."""


class RayReconciler:
    """Gathers an :class:`Observed` for a ``<namespace>/<rayjob>`` request, decides, executes."""

    def __init__(
        self,
        *,
        client: Client,
        ray_jobs: RayJobs,
        config: MixingConfig,
        mixing_name: str,
        rayjobs: Store,
        rayclusters: Store,
        jobsets: Store,
        workloads: Store,
        recorder: EventRecorder | None = None,
        on_phases: Callable[[Mapping[str, int]], None] | None = None,
        on_action: Callable[[str, str], None] | None = None,
        on_latency: Callable[[str, float], None] | None = None,
        on_short_timeouts: Callable[[Mapping[str, str]], None] | None = None,
        cluster_domain: str = "cluster.local",
        wall_clock: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._ray_jobs = ray_jobs
        self._config = config
        self._mixing_name = mixing_name
        self.rayjobs = rayjobs
        self.rayclusters = rayclusters
        self.jobsets = jobsets
        self.workloads = workloads
        self._recorder = recorder
        self._on_phases = on_phases
        self._on_action = on_action
        self._on_latency = on_latency
        self._on_short_timeouts = on_short_timeouts
        self._cluster_domain = cluster_domain
        self._wall_clock = wall_clock
        self._clock = clock
        self._memory = _Memory()

    @property
    def phases(self) -> Mapping[str, Phase]:
        return self._memory.phases

    def ungated_count(self) -> int:
        return len(self._memory.ungated)

    def phase_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for phase in list(self._memory.phases.values()):
            counts[phase.value] = counts.get(phase.value, 0) + 1
        return counts

    # --- observe ----------------------------------------------------------------------------------

    def observe(self, namespace: str, name: str) -> Observed:
        """The RayJob ``namespace/name`` and what belongs to it, from the caches (no Ray call)."""
        spec = self._config.spec
        ray = spec.ray if spec is not None else None
        key = f"{namespace}/{name}"
        raw = self.rayjobs.get(key)
        prefix = ray.resource_prefix if ray is not None else "k8s-bridge-"
        job = RayJobView.of(raw, prefix=prefix) if raw is not None else None
        raw_js = self._jobset_of(key, job)
        jobset = describe_jobset(raw_js) if raw_js is not None else None
        js_annotations = ((raw_js or {}).get("metadata") or {}).get("annotations") or {}
        workload = None
        if jobset is not None:
            raw_wl = select_workload(
                self.workloads.by_index(INDEX_JOB_UID, jobset.uid), jobset_uid=jobset.uid
            )
            workload = describe_workload(raw_wl) if raw_wl is not None else None
        cluster_obj = self.rayclusters.get(f"{namespace}/{job.cluster}") if job and job.cluster else None
        observed = Observed(
            key=key,
            rayjob=job,
            raw_rayjob=raw,
            ray=ray,
            cluster_selected=cluster_obj is not None and ray is not None and _selects(ray, cluster_obj),
            start_timeout=cluster_start_timeout(cluster_obj),
            jobset=jobset,
            jobset_cluster=js_annotations.get(ANNOTATION_RAY_CLUSTER),
            jobset_job_id=str(js_annotations.get(ANNOTATION_RAY_JOB_ID) or ""),
            jobset_created=_timestamp(((raw_js or {}).get("metadata") or {}).get("creationTimestamp")),
            workload=workload,
            now=self._wall_clock(),
        )
        if (
            job is not None
            and spec is not None
            and raw is not None
            and cluster_obj is not None
            and job.gate is not None
            and jobset is None
            and not job.deleting
            and not job.finished
        ):
            observed = replace(
                observed,
                translation=translate(
                    rayjob=raw,
                    raycluster=cluster_obj,
                    spec=spec,
                    mixing_name=self._mixing_name,
                    cluster_domain=self._cluster_domain,
                ),
                # Only a RayJob about to get a JobSet needs the count (a walk of the index's keys).
                bridged_jobs=len(self.jobsets.index_values(INDEX_RAYJOB_UID)),
            )
        return observed

    def _jobset_of(self, key: str, job: RayJobView | None) -> Object | None:
        if job is not None:
            for obj in self.jobsets.by_index(INDEX_RAYJOB_UID, job.uid):
                return obj
            return None
        for obj in self.jobsets.by_index(INDEX_RAYJOB_KEY, key):
            return obj
        return None

    # --- reconcile --------------------------------------------------------------------------------

    async def reconcile(self, request: Request) -> Result:
        observed = self.observe(request.namespace, request.name)
        job = observed.rayjob
        if (
            job is not None
            and job.deleting
            and job.has_finalizer
            and job.cluster
            and job.job_id
            and not job.finished
        ):
            finished = await self._ray_jobs.job_finished(
                namespace=job.namespace, cluster=job.cluster, job_id=job.job_id
            )
            observed = replace(observed, ray_job_finished=finished)
        decision = decide(observed)
        log.debug(
            "ray decision", key=observed.key, why=decision.why, actions=[a.kind for a in decision.actions]
        )
        self._track(observed.key, decision.phase)
        if any(isinstance(a, Emit) and a.reason == UNGATED for a in decision.actions):
            self._memory.ungated.add(observed.key)
        else:
            self._memory.ungated.discard(observed.key)
        self._note_start_timeout(observed, decision)
        for action in decision.actions:
            try:
                await self._handlers[type(action)](self, observed, action)
            except Exception:
                self._count(action, "error")
                raise
            self._count(action, "success")
        return Result(requeue_after=decision.requeue_after)

    def _note_start_timeout(self, o: Observed, decision: Decision) -> None:
        """Remember a head whose start timeout a queue wait reached; forget it once it is raised."""
        job = o.rayjob
        if job is None or job.cluster is None:
            return
        cluster = f"{job.namespace}/{job.cluster}"
        known = self._memory.short_timeouts.get(cluster)
        changed = False
        if known is not None and known[0] != o.start_timeout:
            del self._memory.short_timeouts[cluster]
            changed = True
        for action in decision.actions:
            warned = isinstance(action, Emit) and action.reason in (START_TIMEOUT_NEAR, START_TIMEOUT)
            if warned and cluster not in self._memory.short_timeouts:
                assert isinstance(action, Emit)
                self._memory.short_timeouts[cluster] = (o.start_timeout, f"RayJob {job.key}: {action.note}")
                changed = True
        if changed and self._on_short_timeouts is not None:
            self._on_short_timeouts({c: why for c, (_, why) in sorted(self._memory.short_timeouts.items())})

    def _count(self, action: Action, result: str) -> None:
        if self._on_action is not None:
            self._on_action(action.kind, result)

    def _track(self, key: str, phase: Phase | None) -> None:
        before = self._memory.phases.get(key)
        if phase is None:
            self._memory.phases.pop(key, None)
            self._memory.since.pop(key, None)
        else:
            self._memory.phases[key] = phase
        if before == phase:
            return
        now = self._clock()
        since = self._memory.since.get(key)
        latency = _LATENCIES.get((before, phase))
        if latency is not None and since is not None and self._on_latency is not None:
            self._on_latency(latency, now - since)
        if phase in (Phase.QUEUED, Phase.ADMITTED):
            self._memory.since[key] = now
        if self._on_phases is not None:
            self._on_phases(self.phase_counts())

    # --- actions ----------------------------------------------------------------------------------

    async def _create_jobset(self, o: Observed, action: CreateJobSet) -> None:
        with contextlib.suppress(AlreadyExists):
            await self._client.create(dict(action.manifest), field_manager=FIELD_MANAGER)

    async def _delete_jobset(self, o: Observed, action: DeleteJobSet) -> None:
        await self._client.delete(
            JOBSET_API_VERSION,
            JOBSET_KIND,
            action.name,
            namespace=action.namespace,
            propagation_policy="Foreground",
            missing_ok=True,
        )

    async def _cancel_in_ray(self, o: Observed, action: CancelInRay) -> None:
        await self._ray_jobs.cancel_pending(
            namespace=action.namespace, cluster=action.cluster, job_id=action.job_id
        )

    async def _annotate_jobset(self, o: Observed, action: AnnotateJobSet) -> None:
        with contextlib.suppress(NotFound):
            await self._client.patch(
                JOBSET_API_VERSION, JOBSET_KIND, action.name,
                {"metadata": {"annotations": {ANNOTATION_RAY_JOB_ID: action.job_id}}},
                namespace=action.namespace, field_manager=FIELD_MANAGER,
            )  # fmt: skip

    async def _remove_finalizer(self, o: Observed, action: RemoveFinalizer) -> None:
        raw = o.raw_rayjob
        if raw is None:
            return
        meta = raw.get("metadata") or {}
        finalizers = [f for f in meta.get("finalizers") or () if f != FINALIZER]
        patch: list[Object] = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": meta.get("resourceVersion")},
            {"op": "replace", "path": "/metadata/finalizers", "value": finalizers},
        ]
        # NotFound: gone already; Conflict: changed since the read, the next reconcile sees the new one.
        with contextlib.suppress(NotFound, Conflict):
            await self._client.patch(
                "ray.io/v1", "RayJob", str(meta.get("name")), patch,
                namespace=str(meta.get("namespace")), patch_type="json",
            )  # fmt: skip

    async def _emit(self, o: Observed, action: Emit) -> None:
        job = o.rayjob
        if job is None or self._recorder is None or o.raw_rayjob is None:
            return
        once = (job.uid, action.reason)
        if once in self._memory.emitted:
            return
        self._memory.emitted.add(once)
        try:
            await self._recorder.event(
                dict(o.raw_rayjob), type=action.type, reason=action.reason, note=action.note, action="Bridge"
            )
        except ApiError as exc:
            log.warning("event not recorded", key=o.key, reason=action.reason, error=str(exc))

    _handlers: ClassVar[Mapping[type[Action], Callable[[RayReconciler, Observed, Any], Awaitable[None]]]] = {
        CreateJobSet: _create_jobset,
        DeleteJobSet: _delete_jobset,
        CancelInRay: _cancel_in_ray,
        AnnotateJobSet: _annotate_jobset,
        RemoveFinalizer: _remove_finalizer,
        Emit: _emit,
    }


def _selects(ray: RaySpec, raycluster: Mapping[str, Any]) -> bool:
    labels = (raycluster.get("metadata") or {}).get("labels") or {}
    return ray.cluster_selector.matches(labels)
