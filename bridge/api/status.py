"""WorkloadMixing status as pure functions: what the spec refers to, what is wrong, which conditions.

Why here and not in the reconciler: the mixing reconciler (reconcilers/mixing.py) should only do
I/O. It asks :func:`references` what to look up, reads those objects from the cache, hands what it
found to :func:`check_references` as an :class:`Inventory`, adds problems only I/O can find (a
slurmrestd that does not answer), and writes what :func:`build_status` returns. Every decision,
which reason wins, when ``lastTransitionTime`` moves, is here, and unit-tested without a cluster.

Semantics of the two conditions:

- ``Ready``: True when this generation's spec is usable: every LocalQueue, WorkloadPriorityClass,
  Topology level and Secret key it names exists. False (reason of the first blocking problem)
  otherwise; the bridges then keep running the last good generation, if there is one.
- ``Degraded``: True when the bridges run, but not as configured: a non-blocking problem
  (slurmrestd unreachable, a selector that selects no RayCluster) or, while ``Ready`` is False, an
  older generation still in use (``LastGoodConfigurationInUse``). False (``AsExpected``) otherwise.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final, Literal

from pydantic import ValidationError

from bridge.api.mixing import (
    Condition,
    MappingTarget,
    SourceCounts,
    SourceStatus,
    TopologyConstraint,
    WorkloadMixingSpec,
    WorkloadMixingStatus,
)

__all__ = [
    "DEGRADED",
    "READY",
    "Inventory",
    "Problem",
    "Reason",
    "Reference",
    "build_status",
    "check_references",
    "compute_conditions",
    "references",
    "validation_problems",
]

READY: Final = "Ready"
DEGRADED: Final = "Degraded"

#: Problems listed in a condition message; the rest are counted.
MAX_LISTED_PROBLEMS: Final = 5


class Reason(enum.StrEnum):
    """Condition reasons (CamelCase, as metav1.Condition requires)."""

    AS_EXPECTED = "AsExpected"
    CONFIGURATION_VALID = "ConfigurationValid"
    INVALID_SPEC = "InvalidSpec"
    LOCAL_QUEUE_NOT_FOUND = "LocalQueueNotFound"
    PRIORITY_CLASS_NOT_FOUND = "PriorityClassNotFound"
    TOPOLOGY_LEVEL_NOT_FOUND = "TopologyLevelNotFound"
    SECRET_NOT_FOUND = "SecretNotFound"  # noqa: S105 (reasons, not secrets)
    SECRET_KEY_NOT_FOUND = "SecretKeyNotFound"  # noqa: S105
    SECRET_UNREADABLE = "SecretUnreadable"  # noqa: S105
    SLURM_UNREACHABLE = "SlurmUnreachable"
    SLURM_AUTH_FAILED = "SlurmAuthenticationFailed"
    NO_RAY_CLUSTERS_SELECTED = "NoRayClustersSelected"
    RAY_START_TIMEOUT_TOO_SHORT = "RayStartTimeoutTooShort"
    LAST_GOOD_CONFIGURATION_IN_USE = "LastGoodConfigurationInUse"


@dataclass(frozen=True, kw_only=True)
class Problem:
    """Something wrong with the configuration or with what it refers to."""

    field: str
    """Path of the spec field at fault, e.g. ``spec.slurm.mapping.rules[0].target.localQueue``."""
    reason: Reason
    message: str
    blocking: bool = True
    """Blocking problems make ``Ready`` False; the others make ``Degraded`` True."""

    def describe(self) -> str:
        return f"{self.field}: {self.message}"


RefKind = Literal["LocalQueue", "WorkloadPriorityClass", "TopologyLevel", "SecretKey"]


@dataclass(frozen=True, kw_only=True)
class Reference:
    """An object the spec names. ``namespace`` is None for cluster-scoped kinds; ``key`` is the node
    label for a TopologyLevel and the data key for a SecretKey."""

    kind: RefKind
    name: str
    field: str
    namespace: str | None = None
    key: str | None = None


@dataclass(frozen=True, kw_only=True)
class Inventory:
    """What exists, as the reconciler read it from the cache.

    ``secrets`` maps (namespace, name) to the keys of the Secret's data; a Secret in
    ``unreadable_secrets`` exists but could not be read (RBAC).
    """

    local_queues: frozenset[tuple[str, str]] = frozenset()
    priority_classes: frozenset[str] = frozenset()
    topology_levels: frozenset[str] = frozenset()
    secrets: Mapping[tuple[str, str], frozenset[str]] = field(default_factory=dict)
    unreadable_secrets: frozenset[tuple[str, str]] = frozenset()


def _target_refs(target: MappingTarget, *, path: str, home_namespace: str | None) -> list[Reference]:
    refs: list[Reference] = []
    namespace = target.local_queue.namespace or home_namespace
    if namespace is not None:
        refs.append(
            Reference(
                kind="LocalQueue",
                namespace=namespace,
                name=target.local_queue.name,
                field=f"{path}.localQueue",
            )
        )
    if target.priority_class is not None:
        refs.append(
            Reference(kind="WorkloadPriorityClass", name=target.priority_class, field=f"{path}.priorityClass")
        )
    return refs


def _topology_refs(constraint: TopologyConstraint, *, path: str) -> Reference:
    which = "required" if constraint.required is not None else "preferred"
    return Reference(
        kind="TopologyLevel", name=constraint.level, key=constraint.level, field=f"{path}.{which}"
    )


def references(spec: WorkloadMixingSpec) -> list[Reference]:
    """Every object the spec names, in spec order, each with the path of the field naming it.

    Ray targets without a namespace name a LocalQueue in each RayJob's own namespace: those are not
    known until RayJobs appear, so they are not listed (the Ray bridge reports them per RayJob).
    """
    refs: list[Reference] = []
    if spec.slurm is not None:
        slurm = spec.slurm
        home = spec.shared.job_set_namespace
        secret = slurm.auth.token_secret_ref
        refs.append(
            Reference(
                kind="SecretKey",
                namespace=secret.namespace,
                name=secret.name,
                key=secret.key,
                field="spec.slurm.auth.tokenSecretRef",
            )
        )
        for i, rule in enumerate(slurm.mapping.rules):
            refs += _target_refs(
                rule.target, path=f"spec.slurm.mapping.rules[{i}].target", home_namespace=home
            )
        refs += _target_refs(slurm.mapping.default, path="spec.slurm.mapping.default", home_namespace=home)
        for i, entry in enumerate(slurm.topology.partitions):
            refs.append(_topology_refs(entry, path=f"spec.slurm.topology.partitions[{i}]"))
        if slurm.topology.switches is not None:
            refs.append(_topology_refs(slurm.topology.switches, path="spec.slurm.topology.switches"))
    if spec.ray is not None:
        for i, ray_rule in enumerate(spec.ray.mapping.rules):
            refs += _target_refs(
                ray_rule.target, path=f"spec.ray.mapping.rules[{i}].target", home_namespace=None
            )
        refs += _target_refs(spec.ray.mapping.default, path="spec.ray.mapping.default", home_namespace=None)
    return refs


def _fault(ref: Reference, inventory: Inventory) -> tuple[Reason, str] | None:
    """Why ``ref`` is missing from the inventory (reason and message), or None when it is there."""
    if ref.kind == "LocalQueue":
        assert ref.namespace is not None
        if (ref.namespace, ref.name) not in inventory.local_queues:
            return Reason.LOCAL_QUEUE_NOT_FOUND, f"LocalQueue {ref.namespace}/{ref.name} not found"
    elif ref.kind == "WorkloadPriorityClass":
        if ref.name not in inventory.priority_classes:
            return Reason.PRIORITY_CLASS_NOT_FOUND, f"WorkloadPriorityClass {ref.name} not found"
    elif ref.kind == "TopologyLevel":
        if ref.name not in inventory.topology_levels:
            return (
                Reason.TOPOLOGY_LEVEL_NOT_FOUND,
                f"no Kueue Topology has a level with node label {ref.name}",
            )
    else:
        assert ref.namespace is not None
        secret = (ref.namespace, ref.name)
        if secret in inventory.unreadable_secrets:
            return Reason.SECRET_UNREADABLE, f"Secret {ref.namespace}/{ref.name} cannot be read by the bridge"
        if secret not in inventory.secrets:
            return Reason.SECRET_NOT_FOUND, f"Secret {ref.namespace}/{ref.name} not found"
        if ref.key not in inventory.secrets[secret]:
            return Reason.SECRET_KEY_NOT_FOUND, f"Secret {ref.namespace}/{ref.name} has no key {ref.key}"
    return None


def check_references(spec: WorkloadMixingSpec, *, inventory: Inventory) -> list[Problem]:
    """Blocking problems for each referenced object missing from the inventory, in spec order;
    an object named several times is reported once, at its first mention."""
    problems: list[Problem] = []
    seen: set[tuple[str, str | None, str, str | None]] = set()
    for ref in references(spec):
        identity = (ref.kind, ref.namespace, ref.name, ref.key)
        if identity in seen:
            continue
        seen.add(identity)
        fault = _fault(ref, inventory)
        if fault is not None:
            problems.append(Problem(field=ref.field, reason=fault[0], message=fault[1]))
    return problems


def _summary(problems: Sequence[Problem]) -> str:
    listed = "; ".join(p.describe() for p in problems[:MAX_LISTED_PROBLEMS])
    rest = len(problems) - MAX_LISTED_PROBLEMS
    return listed + (f"; and {rest} more" if rest > 0 else "")


_Verdict = tuple[Literal["True", "False"], Reason, str]
"""A condition's status, reason and message."""


def _condition(
    type_: str, verdict: _Verdict, *, generation: int, previous: Mapping[str, Condition], now: datetime
) -> Condition:
    status, reason, message = verdict
    old = previous.get(type_)
    # Kubernetes convention: lastTransitionTime moves only when status changes.
    since = old.last_transition_time if old is not None and old.status == status else now
    return Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message[:32768],
        observed_generation=generation,
        last_transition_time=since,
    )


def compute_conditions(
    *,
    generation: int,
    problems: Iterable[Problem],
    previous: Sequence[Condition],
    now: datetime,
    last_good_generation: int | None = None,
) -> list[Condition]:
    """``Ready`` and ``Degraded`` for a generation, given its problems.

    ``previous`` are the conditions currently in status: a condition whose status is unchanged
    keeps its ``lastTransitionTime``. ``last_good_generation`` is the newest generation the bridges
    accepted and run; when it differs from ``generation`` while this one is blocked, Degraded says so.
    The first blocking problem gives Ready's reason; the first non-blocking one gives Degraded's.
    """
    problems = list(problems)
    blocking = [p for p in problems if p.blocking]
    impairing = [p for p in problems if not p.blocking]
    ready: _Verdict
    degraded: _Verdict
    if blocking:
        ready = ("False", blocking[0].reason, _summary(blocking))
    else:
        ready = ("True", Reason.CONFIGURATION_VALID, "every object the spec refers to exists")
    if impairing:
        degraded = ("True", impairing[0].reason, _summary(impairing))
    elif blocking and last_good_generation is not None and last_good_generation != generation:
        degraded = (
            "True",
            Reason.LAST_GOOD_CONFIGURATION_IN_USE,
            f"generation {generation} is not usable; "
            f"the bridges keep running generation {last_good_generation}",
        )
    else:
        degraded = ("False", Reason.AS_EXPECTED, "")
    old = {c.type: c for c in previous}
    return [
        _condition(READY, ready, generation=generation, previous=old, now=now),
        _condition(DEGRADED, degraded, generation=generation, previous=old, now=now),
    ]


def build_status(
    *,
    spec: WorkloadMixingSpec,
    generation: int,
    problems: Iterable[Problem],
    previous: WorkloadMixingStatus | None,
    now: datetime,
    counts: Mapping[str, SourceCounts | None] | None = None,
    last_good_generation: int | None = None,
) -> WorkloadMixingStatus:
    """The full status to write: conditions, observedGeneration and counts for configured sources.

    A configured source without counts yet reports zeros; an unconfigured one is omitted.
    """
    return WorkloadMixingStatus(
        observed_generation=generation,
        conditions=compute_conditions(
            generation=generation,
            problems=problems,
            previous=previous.conditions if previous is not None else (),
            now=now,
            last_good_generation=last_good_generation,
        ),
        sources=source_status(spec, counts or {}),
    )


def configured_sources(spec: WorkloadMixingSpec) -> list[str]:
    """The sources ``spec`` configures: the sections of the spec that :class:`SourceStatus` counts."""
    return [name for name in SourceStatus.model_fields if getattr(spec, name, None) is not None]


def source_status(spec: WorkloadMixingSpec | None, counts: Mapping[str, SourceCounts | None]) -> SourceStatus:
    """Counts of the sources ``spec`` configures (zeros until a bridge reports); None: no sources."""
    if spec is None:
        return SourceStatus()
    return SourceStatus.model_validate(
        {name: counts.get(name) or SourceCounts() for name in configured_sources(spec)}
    )


def validation_problems(error: ValidationError, *, root: str = "") -> list[Problem]:
    """Blocking ``InvalidSpec`` problems from a pydantic validation error of the resource or its spec.

    The API server refuses most invalid resources already (the CRD schema is generated from the same
    models); this covers objects stored under an older schema and rules only pydantic checks.
    ``root`` prefixes the paths (``"spec"`` when validating a spec alone).
    """
    problems = []
    for entry in error.errors():
        path = root
        for part in entry["loc"]:
            if isinstance(part, int):
                path += f"[{part}]"
            else:
                path += f".{part}" if path else str(part)
        problems.append(Problem(field=path or "<root>", reason=Reason.INVALID_SPEC, message=entry["msg"]))
    return problems
