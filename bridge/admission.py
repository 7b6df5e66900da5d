"""The shared admission library: where a bridged JobSet stands with Kueue, read from plain objects.

Why one module for both bridges: the Slurm and the Ray bridge ask Kueue the same questions about
the JobSet they created ("is it admitted?", "was it evicted, so the external job must go back to
waiting?", "where may its pods go?") and must answer them the same way. The answers come from
Kueue's Workload (v1beta2, as of Kueue v0.17) and JobSet's status, and the subtle parts live here
once:

- ``QuotaReserved=True`` is *not* admission: with admission checks (ProvisioningRequest for the
  cluster autoscaler, MultiKueue) a Workload reserves quota long before it may run. Only
  ``Admitted=True`` is.
- ``Evicted=True`` outranks ``Admitted=True``: right after a preemption both are true until the
  JobSet is suspended again, and a bridge must stop handing the workload capacity at once.
  Kueue resets ``Evicted`` and ``Preempted`` to False on the next quota reservation.
- A JobSet whose ``spec.managedBy`` is MultiKueue's runs in a worker cluster: its pods are not
  observable here, only its mirrored status (:attr:`JobSetView.runs_elsewhere`).
- The Workload is found by the label ``kueue.x-k8s.io/job-uid=<JobSet uid>``, never by guessing
  its hashed name.

Everything is a pure function of dicts as the API server returns them (the runtime's cache holds
exactly that), except :func:`find_workload`, which takes any client with a ``list`` coroutine
(a :class:`ObjectLister`), so this module depends on nothing in ``bridge.runtime``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

__all__ = [
    "FOREGROUND_DELETION",
    "JOBSET_API_VERSION",
    "JOBSET_CONTROLLER",
    "JOBSET_KIND",
    "JOB_UID_LABEL",
    "MAX_EXEC_TIME_LABEL",
    "PRIORITY_CLASS_LABEL",
    "QUEUE_NAME_LABEL",
    "WORKLOAD_API_VERSION",
    "WORKLOAD_KIND",
    "AdmissionCheck",
    "Condition",
    "JobSetState",
    "JobSetView",
    "ObjectLister",
    "PodPlacement",
    "PodSetAdmission",
    "TopologyDomain",
    "WorkloadState",
    "WorkloadView",
    "admitted_placement",
    "admitted_podsets",
    "condition",
    "describe_jobset",
    "describe_workload",
    "find_workload",
    "is_condition_true",
    "jobset_state",
    "select_workload",
    "topology_domains",
    "workload_selector",
    "workload_state",
]

WORKLOAD_API_VERSION: Final = "kueue.x-k8s.io/v1beta2"
WORKLOAD_KIND: Final = "Workload"
JOBSET_API_VERSION: Final = "jobset.x-k8s.io/v1alpha2"
JOBSET_KIND: Final = "JobSet"
JOBSET_CONTROLLER: Final = "jobset.x-k8s.io/jobset-controller"
"""JobSet's own controller, the ``spec.managedBy`` that means "run here" (as does none)."""
FOREGROUND_DELETION: Final = "foregroundDeletion"
"""The garbage collector's finalizer on an object deleted in the foreground (until its dependents go)."""

JOB_UID_LABEL: Final = "kueue.x-k8s.io/job-uid"
QUEUE_NAME_LABEL: Final = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL: Final = "kueue.x-k8s.io/priority-class"
MAX_EXEC_TIME_LABEL: Final = "kueue.x-k8s.io/max-exec-time-seconds"

# Workload condition types and reasons (kueue apis/kueue/v1beta2/workload_types.go).
_ADMITTED: Final = "Admitted"
_QUOTA_RESERVED: Final = "QuotaReserved"
_FINISHED: Final = "Finished"
_EVICTED: Final = "Evicted"
_PREEMPTED: Final = "Preempted"
_DEACTIVATION_TARGET: Final = "DeactivationTarget"
_REASON_PREEMPTED: Final = "Preempted"
_REASON_DEACTIVATED: Final = "Deactivated"
_REASON_SUCCEEDED: Final = "Succeeded"

Object = dict[str, Any]


# --- conditions --------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Condition:
    """A metav1.Condition, read."""

    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = None
    observed_generation: int | None = None

    @property
    def is_true(self) -> bool:
        return self.status == "True"


def condition(obj: Mapping[str, Any], type_: str) -> Condition | None:
    """The condition ``type_`` of ``obj.status.conditions``, or None."""
    for raw in (obj.get("status") or {}).get("conditions") or ():
        if isinstance(raw, Mapping) and raw.get("type") == type_:
            generation = raw.get("observedGeneration")
            return Condition(
                type=type_,
                status=str(raw.get("status", "Unknown")),
                reason=str(raw.get("reason") or ""),
                message=str(raw.get("message") or ""),
                last_transition_time=raw.get("lastTransitionTime"),
                observed_generation=generation if isinstance(generation, int) else None,
            )
    return None


def is_condition_true(obj: Mapping[str, Any], type_: str) -> bool:
    found = condition(obj, type_)
    return found is not None and found.is_true


# --- Workload ----------------------------------------------------------------------------------


class WorkloadState(enum.StrEnum):
    """Where a Workload stands, as a bridge must act on it (highest precedence last)."""

    PENDING = "Pending"
    """Waiting in its queue: no quota, or quota lost after an eviction and requeued."""
    QUOTA_RESERVED = "QuotaReserved"
    """Quota reserved, admission checks not all Ready yet: NOT admitted, do not start anything."""
    ADMITTED = "Admitted"
    """Admitted: Kueue unsuspends the JobSet; the external job may be given its capacity."""
    EVICTED = "Evicted"
    """Evicted for another reason than preemption (PodsReadyTimeout, AdmissionCheck, stopped queue,
    deactivation, max execution time): take the capacity back."""
    PREEMPTED = "Preempted"
    """Evicted by preemption: take the capacity back; Kueue admits the same JobSet again later."""
    FINISHED = "Finished"
    """The JobSet completed or failed; nothing more will be admitted."""


@dataclass(frozen=True, kw_only=True)
class AdmissionCheck:
    """One entry of ``status.admissionChecks``."""

    name: str
    state: str
    """Pending, Ready, Retry or Rejected."""
    message: str = ""


@dataclass(frozen=True, kw_only=True)
class TopologyDomain:
    """A topology domain of a TAS assignment: node-label values per level, and how many pods go there."""

    values: Mapping[str, str]
    count: int


@dataclass(frozen=True, kw_only=True)
class PodSetAdmission:
    """One entry of ``status.admission.podSetAssignments``."""

    name: str
    count: int | None
    """Pods admitted (None on Workloads older than the field: use the podSet's count)."""
    flavors: Mapping[str, str]
    """Resource name -> ResourceFlavor."""
    resource_usage: Mapping[str, str]
    topology: tuple[TopologyDomain, ...] = ()


@dataclass(frozen=True, kw_only=True)
class WorkloadView:
    """The facts of a Workload a bridge acts on."""

    name: str
    namespace: str
    uid: str
    state: WorkloadState
    reason: str
    """Reason of the condition that decided the state ("" when pending without conditions)."""
    message: str
    active: bool
    cluster_queue: str | None
    podsets: tuple[PodSetAdmission, ...] = ()
    admission_checks: tuple[AdmissionCheck, ...] = ()
    succeeded: bool | None = None
    """For FINISHED: whether the job succeeded; otherwise None."""
    requeue_count: int = 0


def workload_state(workload: Mapping[str, Any]) -> WorkloadState:
    """The state of a Workload from its conditions (and ``spec.active``)."""
    return _state(workload)[0]


def _state(workload: Mapping[str, Any]) -> tuple[WorkloadState, Condition | None]:
    finished = condition(workload, _FINISHED)
    if finished is not None and finished.is_true:
        return WorkloadState.FINISHED, finished
    evicted = condition(workload, _EVICTED)
    preempted = condition(workload, _PREEMPTED)
    if evicted is not None and evicted.is_true:
        if evicted.reason == _REASON_PREEMPTED:
            return (
                WorkloadState.PREEMPTED,
                preempted if preempted is not None and preempted.is_true else evicted,
            )
        return WorkloadState.EVICTED, evicted
    if preempted is not None and preempted.is_true:
        return WorkloadState.PREEMPTED, preempted
    # Kueue marks a workload to deactivate (e.g. max execution time) before it evicts it, and a
    # workload with spec.active=false is about to be evicted: either way, capacity goes away.
    target = condition(workload, _DEACTIVATION_TARGET)
    if target is not None and target.is_true:
        return WorkloadState.EVICTED, target
    if (workload.get("spec") or {}).get("active") is False:
        return WorkloadState.EVICTED, Condition(type=_EVICTED, status="True", reason=_REASON_DEACTIVATED)
    admitted = condition(workload, _ADMITTED)
    if admitted is not None and admitted.is_true:
        return WorkloadState.ADMITTED, admitted
    reserved = condition(workload, _QUOTA_RESERVED)
    if reserved is not None and reserved.is_true:
        return WorkloadState.QUOTA_RESERVED, reserved
    return WorkloadState.PENDING, reserved


def describe_workload(workload: Mapping[str, Any]) -> WorkloadView:
    """Everything a bridge reads from a Workload, in one typed view."""
    state, deciding = _state(workload)
    metadata = workload.get("metadata") or {}
    status = workload.get("status") or {}
    admission = status.get("admission") or {}
    checks = tuple(
        AdmissionCheck(
            name=str(c.get("name", "")), state=str(c.get("state", "")), message=str(c.get("message") or "")
        )
        for c in status.get("admissionChecks") or ()
        if isinstance(c, Mapping)
    )
    succeeded = None
    if state is WorkloadState.FINISHED and deciding is not None:
        succeeded = deciding.reason == _REASON_SUCCEEDED
    requeue = (status.get("requeueState") or {}).get("count")
    return WorkloadView(
        name=str(metadata.get("name", "")),
        namespace=str(metadata.get("namespace", "")),
        uid=str(metadata.get("uid", "")),
        state=state,
        reason=deciding.reason if deciding is not None else "",
        message=deciding.message if deciding is not None else "",
        active=(workload.get("spec") or {}).get("active") is not False,
        cluster_queue=admission.get("clusterQueue") or None,
        podsets=admitted_podsets(workload),
        admission_checks=checks,
        succeeded=succeeded,
        requeue_count=requeue if isinstance(requeue, int) else 0,
    )


def admitted_podsets(workload: Mapping[str, Any]) -> tuple[PodSetAdmission, ...]:
    """The podSet assignments of ``status.admission`` (empty when not admitted or reserved)."""
    admission = (workload.get("status") or {}).get("admission") or {}
    out = []
    for raw in admission.get("podSetAssignments") or ():
        if not isinstance(raw, Mapping):
            continue
        count = raw.get("count")
        assignment = raw.get("topologyAssignment")
        out.append(
            PodSetAdmission(
                name=str(raw.get("name", "")),
                count=count if isinstance(count, int) else None,
                flavors={str(k): str(v) for k, v in (raw.get("flavors") or {}).items()},
                resource_usage={str(k): str(v) for k, v in (raw.get("resourceUsage") or {}).items()},
                topology=topology_domains(assignment) if isinstance(assignment, Mapping) else (),
            )
        )
    return tuple(out)


def topology_domains(assignment: Mapping[str, Any]) -> tuple[TopologyDomain, ...]:
    """Decode a v1beta2 ``topologyAssignment`` (levels + slices with prefix/suffix/roots/universal
    values and universal/individual pod counts) into one entry per domain, in order."""
    levels = [str(level) for level in assignment.get("levels") or ()]
    out: list[TopologyDomain] = []
    for raw in assignment.get("slices") or ():
        if not isinstance(raw, Mapping):
            continue
        domains = int(raw.get("domainCount") or 0)
        per_level = [_level_values(v, domains) for v in raw.get("valuesPerLevel") or ()]
        counts = _pod_counts(raw.get("podCounts") or {}, domains)
        for i in range(domains):
            values = {level: per_level[j][i] for j, level in enumerate(levels) if j < len(per_level)}
            out.append(TopologyDomain(values=values, count=counts[i]))
    return tuple(out)


def _level_values(raw: Mapping[str, Any], domains: int) -> list[str]:
    if raw.get("universal") is not None:
        return [str(raw["universal"])] * domains
    individual = raw.get("individual") or {}
    prefix, suffix = str(individual.get("prefix") or ""), str(individual.get("suffix") or "")
    roots = [f"{prefix}{root}{suffix}" for root in individual.get("roots") or ()]
    return roots + [""] * (domains - len(roots))


def _pod_counts(raw: Mapping[str, Any], domains: int) -> list[int]:
    if raw.get("universal") is not None:
        return [int(raw["universal"])] * domains
    counts = [int(c) for c in raw.get("individual") or ()]
    return counts + [0] * (domains - len(counts))


@dataclass(frozen=True, kw_only=True)
class PodPlacement:
    """Where an admitted podSet's pods may go: what Kueue merges into the JobSet's pod template."""

    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    flavors: tuple[str, ...] = ()


def admitted_placement(
    workload: Mapping[str, Any], flavors: Mapping[str, Mapping[str, Any]], *, podset: str
) -> PodPlacement | None:
    """Node labels and tolerations of the ResourceFlavors assigned to ``podset``, plus those that
    admission checks added (``podSetUpdates``). ``flavors`` maps flavor name -> ResourceFlavor object.

    None when the podSet is not admitted. A flavor missing from ``flavors`` contributes nothing
    (the caller's cache may lag; Kueue itself refuses to admit onto a missing flavor).
    """
    assignment = next((p for p in admitted_podsets(workload) if p.name == podset), None)
    if assignment is None:
        return None
    names = tuple(dict.fromkeys(sorted(assignment.flavors.values())))
    selector: dict[str, str] = {}
    tolerations: list[Mapping[str, Any]] = []
    for name in names:
        spec = (flavors.get(name) or {}).get("spec") or {}
        selector.update({str(k): str(v) for k, v in (spec.get("nodeLabels") or {}).items()})
        tolerations.extend(t for t in spec.get("tolerations") or () if t not in tolerations)
    for check in (workload.get("status") or {}).get("admissionChecks") or ():
        for update in check.get("podSetUpdates") or ():
            if update.get("name") == podset:
                selector.update({str(k): str(v) for k, v in (update.get("nodeSelector") or {}).items()})
                tolerations.extend(t for t in update.get("tolerations") or () if t not in tolerations)
    return PodPlacement(node_selector=selector, tolerations=tuple(tolerations), flavors=names)


# --- finding the Workload of a JobSet ------------------------------------------------------------


def workload_selector(jobset_uid: str) -> str:
    """The label selector of the Workloads Kueue made for the JobSet with this uid."""
    return f"{JOB_UID_LABEL}={jobset_uid}"


def _owned_by(workload: Mapping[str, Any], uid: str) -> bool:
    refs = (workload.get("metadata") or {}).get("ownerReferences") or ()
    return not refs or any(r.get("uid") == uid for r in refs if isinstance(r, Mapping))


def select_workload(workloads: Iterable[Mapping[str, Any]], *, jobset_uid: str) -> Object | None:
    """The Workload of a JobSet among ``workloads`` (a list or a cache's contents), or None.

    Matches the job-uid label (and, when present, an ownerReference to the JobSet). Should there be
    several (a stale one being deleted beside its successor), one not being deleted and not
    finished wins, then the newest; ties are broken by name, so the answer is deterministic.
    """
    matching = [
        dict(w)
        for w in workloads
        if ((w.get("metadata") or {}).get("labels") or {}).get(JOB_UID_LABEL) == jobset_uid
        and _owned_by(w, jobset_uid)
    ]
    if not matching:
        return None

    def rank(w: Object) -> tuple[bool, bool, str, str]:
        metadata = w.get("metadata") or {}
        return (
            "deletionTimestamp" not in metadata,
            workload_state(w) is not WorkloadState.FINISHED,
            str(metadata.get("creationTimestamp") or ""),
            str(metadata.get("name") or ""),
        )

    return max(matching, key=rank)


class ObjectLister(Protocol):
    """What :func:`find_workload` needs from a client (``bridge.runtime.Client`` fits)."""

    async def list(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> Sequence[dict[str, Any]]: ...


async def find_workload(client: ObjectLister, *, jobset: Mapping[str, Any]) -> Object | None:
    """The Workload of ``jobset``, listed from the API server by the job-uid label; None when Kueue
    has not made it yet (or the JobSet has no uid, i.e. was never created)."""
    metadata = jobset.get("metadata") or {}
    uid = metadata.get("uid")
    if not uid:
        return None
    items = await client.list(
        WORKLOAD_API_VERSION,
        WORKLOAD_KIND,
        namespace=metadata.get("namespace"),
        label_selector=workload_selector(str(uid)),
    )
    return select_workload(items, jobset_uid=str(uid))


# --- JobSet ------------------------------------------------------------------------------------


class JobSetState(enum.StrEnum):
    """Where a JobSet stands (JobSet conditions Completed, Failed; ``spec.suspend``)."""

    SUSPENDED = "Suspended"
    ACTIVE = "Active"
    COMPLETED = "Completed"
    FAILED = "Failed"


@dataclass(frozen=True, kw_only=True)
class JobSetView:
    """The facts of a JobSet a bridge acts on."""

    name: str
    namespace: str
    uid: str
    state: JobSetState
    suspended: bool
    deleting: bool
    restarts: int
    terminal_state: str
    ready: int
    """Child Jobs whose pods are all ready (``replicatedJobsStatus[].ready`` summed)."""
    reason: str = ""
    message: str = ""
    waits_for_dependents: bool = False
    """Being deleted in the foreground: the garbage collector's ``foregroundDeletion`` finalizer keeps
    it until its dependents (Jobs, pods, Kueue's Workload) are gone."""
    managed_by: str = ""
    """``spec.managedBy``: empty (or JobSet's own controller) when this cluster's JobSet controller
    runs it; Kueue's MultiKueue when a worker cluster does, and only its status is mirrored here."""

    @property
    def runs_elsewhere(self) -> bool:
        """Its Jobs and pods live in another cluster (MultiKueue): none of them is observable here."""
        return self.managed_by not in ("", JOBSET_CONTROLLER)


def jobset_state(jobset: Mapping[str, Any]) -> JobSetState:
    """Completed or Failed (terminal, from conditions or ``status.terminalState``), else Suspended
    while ``spec.suspend`` is true, else Active."""
    status = jobset.get("status") or {}
    terminal = str(status.get("terminalState") or "")
    if is_condition_true(jobset, "Failed") or terminal == "Failed":
        return JobSetState.FAILED
    if is_condition_true(jobset, "Completed") or terminal == "Completed":
        return JobSetState.COMPLETED
    if (jobset.get("spec") or {}).get("suspend") is True:
        return JobSetState.SUSPENDED
    return JobSetState.ACTIVE


def describe_jobset(jobset: Mapping[str, Any]) -> JobSetView:
    metadata = jobset.get("metadata") or {}
    status = jobset.get("status") or {}
    state = jobset_state(jobset)
    deciding = (
        condition(jobset, state.value) if state in (JobSetState.FAILED, JobSetState.COMPLETED) else None
    )
    ready = sum(
        int(r.get("ready") or 0) for r in status.get("replicatedJobsStatus") or () if isinstance(r, Mapping)
    )
    return JobSetView(
        name=str(metadata.get("name", "")),
        namespace=str(metadata.get("namespace", "")),
        uid=str(metadata.get("uid", "")),
        state=state,
        suspended=(jobset.get("spec") or {}).get("suspend") is True,
        deleting="deletionTimestamp" in metadata,
        restarts=int(status.get("restarts") or 0),
        terminal_state=str(status.get("terminalState") or ""),
        ready=ready,
        reason=deciding.reason if deciding is not None else "",
        message=deciding.message if deciding is not None else "",
        managed_by=str((jobset.get("spec") or {}).get("managedBy") or ""),
        waits_for_dependents=FOREGROUND_DELETION in (metadata.get("finalizers") or ()),
    )
