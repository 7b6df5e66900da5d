"""WorkloadMixing: the one configuration surface of k8s-bridge, as pydantic models.

Why pydantic models and not a hand-written CRD: the models are the single source of the resource.
The CRD's OpenAPI schema (``charts/k8s-bridge/crds/workloadmixing.yaml``) and the field reference
(``docs/custom-resource.md``) are generated from them by :mod:`bridge.api.crdgen`, so the API server,
the docs and the bridges that read the resource cannot disagree. Everything a field promises lives
next to it: its description (which *is* the documentation), its bounds and pattern (enforced by
pydantic here and by the API server there) and, for rules that span fields, the CEL expression the
API server evaluates (``x-kubernetes-validations``), mirrored by a pydantic validator where that is
cheap, so a bad resource is refused the same way in a unit test and in a cluster.

The resource is cluster-scoped (docs/adr/0002-workloadmixing-scope.md): it refers to cluster-scoped
Kueue objects (WorkloadPriorityClass, Topology) and to LocalQueues and RayClusters in many namespaces.

Besides the models, this module holds the pure functions that answer "where does this job go":
:func:`resolve_slurm_mapping`, :func:`resolve_ray_mapping`, :func:`resolve_slurm_topology` and
:func:`resolve_gres`. Translators call them; they do no I/O.
"""

from __future__ import annotations

import functools
import re
import urllib.parse
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Final, Literal, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

__all__ = [
    "API_VERSION",
    "GROUP",
    "KIND",
    "PLURAL",
    "SUPPORTED_REST_VERSIONS",
    "VERSION",
    "Condition",
    "LabelSelector",
    "LabelSelectorRequirement",
    "LocalQueueRef",
    "MappingError",
    "MappingTarget",
    "PartitionTopology",
    "PodOverrides",
    "QueueTarget",
    "RayLimits",
    "RayMapping",
    "RayNamespaceRule",
    "RaySpec",
    "RayWorkerDefaults",
    "RayWorkerTemplate",
    "SecretKeyRef",
    "SharedSpec",
    "SlurmAuth",
    "SlurmLimits",
    "SlurmMapping",
    "SlurmMappingRule",
    "SlurmMatch",
    "SlurmSpec",
    "SlurmTopology",
    "SlurmdPodTemplate",
    "SourceCounts",
    "SourceStatus",
    "TopologyConstraint",
    "WorkloadMixing",
    "WorkloadMixingSpec",
    "WorkloadMixingStatus",
    "glob_match",
    "resolve_gres",
    "resolve_ray_mapping",
    "resolve_slurm_mapping",
    "resolve_slurm_topology",
]

GROUP: Final = "bridge.k8s-bridge.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = "bridge.k8s-bridge.io/v1alpha1"
KIND: Final = "WorkloadMixing"
PLURAL: Final = "workloadmixings"

#: The slurmrestd OpenAPI plugin versions the bridge's client speaks. v0.0.39 is absent on purpose:
#: it shipped only with Slurm 23.02 and was dropped by 23.11; no supported Slurm serves it alone.
SUPPORTED_REST_VERSIONS: Final = ("v0.0.38", "v0.0.40", "v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45")

SlurmRestVersion = Literal[
    "auto", "v0.0.38", "v0.0.40", "v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"
]

# --- string shapes, written once -------------------------------------------------------------------
# Patterns are RE2/ECMA-compatible (the API server's dialect) and also valid for pydantic's engine.

DNS_LABEL_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
QUALIFIED_NAME_PATTERN: Final = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"  # optional DNS-subdomain prefix
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
LABEL_VALUE_PATTERN: Final = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
SLURM_NAME_PATTERN: Final = r"^[A-Za-z0-9_.+-]+$"
SLURM_GLOB_PATTERN: Final = r"^[A-Za-z0-9_.+*-]+$"
NAMESPACE_GLOB_PATTERN: Final = r"^[a-z0-9*-]+$"
SECRET_KEY_PATTERN: Final = r"^[-._a-zA-Z0-9]+$"  # noqa: S105 (a pattern, not a secret)
GRES_KEY_PATTERN: Final = r"^[A-Za-z0-9_]+(:[A-Za-z0-9_.-]+)?$"
QUANTITY_PATTERN: Final = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"  # the number
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"  # suffix
)
HOST_PORT_PATTERN: Final = r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?)(:[0-9]{1,5})?$"

#: Label and annotation prefixes the bridge and Kueue own; propagated metadata may not use them.
RESERVED_PREFIXES: Final = ("kueue.x-k8s.io/", "bridge.k8s-bridge.io/", "jobset.sigs.k8s.io/")

Namespace = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN)]
ObjectName = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)]
# LocalQueue and WorkloadPriorityClass names also travel as label values: 63 characters at most.
LabelSafeName = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_SUBDOMAIN_PATTERN)]
QualifiedName = Annotated[str, Field(min_length=1, max_length=316, pattern=QUALIFIED_NAME_PATTERN)]
LabelValue = Annotated[str, Field(max_length=63, pattern=LABEL_VALUE_PATTERN)]
SlurmName = Annotated[str, Field(min_length=1, max_length=64, pattern=SLURM_NAME_PATTERN)]
SlurmGlob = Annotated[str, Field(min_length=1, max_length=64, pattern=SLURM_GLOB_PATTERN)]
NamespaceGlob = Annotated[str, Field(min_length=1, max_length=63, pattern=NAMESPACE_GLOB_PATTERN)]
Arg = Annotated[str, Field(max_length=4096)]


def _key(pattern: str, max_length: int, message: str) -> Any:
    # Map keys: pydantic checks them here; crdgen turns the pattern into a CEL rule with this message.
    return Field(
        min_length=1, max_length=max_length, pattern=pattern, json_schema_extra={"x-key-message": message}
    )


LabelKey = Annotated[str, _key(QUALIFIED_NAME_PATTERN, 316, "keys must be label keys ([prefix/]name)")]
ResourceKey = Annotated[str, _key(QUALIFIED_NAME_PATTERN, 316, "keys must be resource names")]
GresKey = Annotated[str, _key(GRES_KEY_PATTERN, 128, "keys must be a GRES name or name:type")]


def _quantity_to_str(value: object) -> object:
    # The API server hands integers back as integers (``cpu: 2``); the model keeps the string form.
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


#: A Kubernetes resource quantity (``2``, ``500m``, ``4Gi``); an integer is accepted and kept as a string.
Quantity = Annotated[
    str,
    Field(max_length=64, pattern=QUANTITY_PATTERN, json_schema_extra={"x-k8s-quantity": True}),
    BeforeValidator(_quantity_to_str),
]

#: A piece of a pod spec kept as an untyped object (typed fully by the API server when the pod is made).
PassthroughObject = Annotated[
    dict[str, Any],
    Field(json_schema_extra={"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
]


def _unique(values: list[str], *, what: str) -> None:
    # Mirrors x-kubernetes-list-type set/map: the API server refuses duplicates.
    duplicates = sorted({v for v in values if values.count(v) > 1})
    if duplicates:
        raise ValueError(f"duplicate {what}: {duplicates}")


def _cel(rule: str, message: str, *, field_path: str | None = None, reason: str | None = None) -> JsonDict:
    entry: JsonDict = {"rule": rule, "message": message}
    if field_path is not None:
        entry["fieldPath"] = field_path
    if reason is not None:
        entry["reason"] = reason
    return entry


class _Model(BaseModel):
    """Base of every model: camelCase on the wire, snake_case in Python, unknown fields refused."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="forbid",
        frozen=True,
    )


class _Passthrough(BaseModel):
    """A Kubernetes object the bridge copies into pod specs: a few fields typed, the rest kept as is."""

    model_config = ConfigDict(extra="allow", frozen=True)


# --- shared pieces ---------------------------------------------------------------------------------


class LocalQueueRef(_Model):
    """A Kueue LocalQueue."""

    namespace: Namespace | None = Field(
        default=None,
        description=(
            "Namespace of the LocalQueue, which is also where the bridged JobSet is created (a Kueue "
            "workload must live in its LocalQueue's namespace). Omitted: the workload's home namespace, "
            "i.e. `spec.shared.jobSetNamespace` for Slurm jobs and the RayJob's own namespace for Ray."
        ),
    )
    name: LabelSafeName = Field(
        description="Name of the LocalQueue (set as label `kueue.x-k8s.io/queue-name`)."
    )


class MappingTarget(_Model):
    """Where a matched job is queued in Kueue."""

    local_queue: LocalQueueRef = Field(description="The LocalQueue the job's JobSet is submitted to.")
    priority_class: LabelSafeName | None = Field(
        default=None,
        description=(
            "Name of a Kueue WorkloadPriorityClass (cluster-scoped), set as label "
            "`kueue.x-k8s.io/priority-class`. Omitted: no label, so Kueue's default priority applies."
        ),
    )


class TopologyConstraint(_Model):
    """A Kueue topology-aware-scheduling request for all pods of one job."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "has(self.required) != has(self.preferred)",
                    "exactly one of required or preferred must be set",
                )
            ]
        }
    )

    required: QualifiedName | None = Field(
        default=None,
        description=(
            "Node label of a level of a Kueue Topology (e.g. `example.com/rack`): all pods of the job "
            "must land in one domain of that level, or the job is not admitted. Written as annotation "
            "`kueue.x-k8s.io/podset-required-topology`. Exclusive with `preferred`."
        ),
    )
    preferred: QualifiedName | None = Field(
        default=None,
        description=(
            "Node label of a level of a Kueue Topology: Kueue tries to place all pods in one domain of "
            "that level and spreads them over the fewest domains when it cannot. Written as annotation "
            "`kueue.x-k8s.io/podset-preferred-topology`. Exclusive with `required`."
        ),
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        if (self.required is None) == (self.preferred is None):
            raise ValueError("exactly one of required or preferred must be set")
        return self

    @property
    def level(self) -> str:
        """The topology level's node label, whichever of the two is set."""
        level = self.required if self.required is not None else self.preferred
        assert level is not None  # guaranteed by the validator
        return level

    def annotations(self) -> dict[str, str]:
        """The pod-template annotation Kueue reads for this constraint."""
        if self.required is not None:
            return {"kueue.x-k8s.io/podset-required-topology": self.required}
        return {"kueue.x-k8s.io/podset-preferred-topology": self.level}


class SecretKeyRef(_Model):
    """One key of a Kubernetes Secret."""

    namespace: Namespace = Field(description="Namespace of the Secret (the resource is cluster-scoped).")
    name: ObjectName = Field(description="Name of the Secret.")
    key: str = Field(
        default="token",
        min_length=1,
        max_length=253,
        pattern=SECRET_KEY_PATTERN,
        description="Key in the Secret's data holding the value.",
    )


class LabelSelectorRequirement(_Model):
    """One requirement of a label selector (as in metav1.LabelSelectorRequirement)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "self.operator in ['In', 'NotIn'] ? (has(self.values) && size(self.values) > 0) "
                    ": (!has(self.values) || size(self.values) == 0)",
                    "values must be non-empty for In and NotIn, and empty for Exists and DoesNotExist",
                    field_path=".values",
                )
            ]
        }
    )

    key: QualifiedName = Field(description="The label key the requirement applies to.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(
        description="How the label's value relates to `values`."
    )
    values: list[LabelValue] = Field(
        default_factory=list,
        max_length=64,
        description="Values for `In` and `NotIn`; empty for `Exists` and `DoesNotExist`.",
    )

    @model_validator(mode="after")
    def _values_match_operator(self) -> Self:
        if (self.operator in ("In", "NotIn")) != bool(self.values):
            raise ValueError(
                "values must be non-empty for In and NotIn, and empty for Exists and DoesNotExist"
            )
        return self

    def matches(self, labels: dict[str, str]) -> bool:
        """Whether a set of labels satisfies this requirement (Kubernetes semantics)."""
        if self.operator == "Exists":
            return self.key in labels
        if self.operator == "DoesNotExist":
            return self.key not in labels
        if self.operator == "In":
            return labels.get(self.key) in self.values
        return self.key not in labels or labels[self.key] not in self.values


class LabelSelector(_Model):
    """A Kubernetes label selector; all terms must hold. Empty selects everything."""

    match_labels: dict[LabelKey, LabelValue] = Field(
        default_factory=dict,
        json_schema_extra={"maxProperties": 32},
        description="Labels that must be present with exactly these values.",
    )
    match_expressions: list[LabelSelectorRequirement] = Field(
        default_factory=list, max_length=32, description="Set-based requirements."
    )

    def matches(self, labels: dict[str, str]) -> bool:
        """Whether a set of labels is selected (Kubernetes semantics: every term must hold)."""
        return all(labels.get(k) == v for k, v in self.match_labels.items()) and all(
            r.matches(labels) for r in self.match_expressions
        )


class Volume(_Passthrough):
    """A pod volume (core/v1 Volume), copied as is."""

    name: Annotated[
        str, Field(min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN, description="Volume name.")
    ]


class VolumeMount(_Passthrough):
    """A container volume mount (core/v1 VolumeMount), copied as is."""

    name: Annotated[str, Field(min_length=1, max_length=63, description="Name of the volume to mount.")]
    mount_path: Annotated[
        str, Field(alias="mountPath", min_length=1, max_length=4096, description="Path in the container.")
    ]


class EnvVar(_Passthrough):
    """A container environment variable (core/v1 EnvVar), copied as is."""

    name: Annotated[str, Field(min_length=1, max_length=256, description="Variable name.")]


class PodOverrides(_Model):
    """Pod-spec pieces the bridge merges into every pod it creates for a job."""

    node_selector: dict[LabelKey, LabelValue] = Field(
        default_factory=dict,
        json_schema_extra={"maxProperties": 32},
        description=(
            "Node labels the pods must match, merged with those Kueue adds from the admitted ResourceFlavor."
        ),
    )
    tolerations: list[PassthroughObject] = Field(
        default_factory=list, max_length=32, description="Pod tolerations (core/v1 Toleration), copied as is."
    )
    volumes: list[Volume] = Field(
        default_factory=list, max_length=32, description="Extra pod volumes (core/v1 Volume), copied as is."
    )
    volume_mounts: list[VolumeMount] = Field(
        default_factory=list,
        max_length=32,
        description="Mounts of `volumes` into the main container (core/v1 VolumeMount), copied as is.",
    )
    env: list[EnvVar] = Field(
        default_factory=list,
        max_length=64,
        description="Extra environment of the main container (core/v1 EnvVar), copied as is.",
    )
    service_account_name: ObjectName | None = Field(
        default=None, description="ServiceAccount the pods run as. Omitted: the namespace's default."
    )
    security_context: PassthroughObject | None = Field(
        default=None,
        description="Security context of the main container (core/v1 SecurityContext), copied as is.",
    )
    pod_security_context: PassthroughObject | None = Field(
        default=None, description="Pod-level security context (core/v1 PodSecurityContext), copied as is."
    )
    priority_class_name: ObjectName | None = Field(
        default=None,
        description=(
            "Kubernetes PriorityClass of the pods (pod scheduling and node-pressure eviction); "
            "unrelated to Kueue's WorkloadPriorityClass."
        ),
    )


# --- Slurm -----------------------------------------------------------------------------------------


class SlurmAuth(_Model):
    """How the bridge authenticates to slurmrestd: a JWT of the SlurmUser (or an operator)."""

    token_secret_ref: SecretKeyRef = Field(
        description=(
            "Secret key holding the JWT (`scontrol token username=<user> lifespan=<s>`). Read live: a "
            "rotated token is picked up without a restart."
        )
    )
    user_name: str = Field(
        default="slurm",
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_.][A-Za-z0-9_.-]*$",
        description=(
            "User the token belongs to, sent as `X-SLURM-USER-NAME`. It must be SlurmUser (or an "
            "operator) to hold, pin and release other users' jobs."
        ),
    )


class SlurmMatch(_Model):
    """Which jobs a rule applies to. Each list is a set of glob patterns; empty matches every job."""

    partitions: list[SlurmGlob] = Field(
        default_factory=list, max_length=64, description="Patterns for the job's partition."
    )
    accounts: list[SlurmGlob] = Field(
        default_factory=list, max_length=64, description="Patterns for the job's account."
    )
    qos: list[SlurmGlob] = Field(
        default_factory=list,
        max_length=64,
        description="Patterns for the job's QoS (empty on sites without slurmdbd: only `*` matches it then).",
    )

    def matches(self, *, partition: str | None, account: str | None, qos: str | None) -> bool:
        """Whether a job with these attributes matches: every non-empty list has a matching pattern."""
        return all(
            not patterns or any(glob_match(p, value or "") for p in patterns)
            for patterns, value in ((self.partitions, partition), (self.accounts, account), (self.qos, qos))
        )


class SlurmMappingRule(_Model):
    """A mapping rule: jobs that match go to the target."""

    name: Annotated[str, Field(max_length=63, pattern=DNS_LABEL_PATTERN)] | None = Field(
        default=None, description="Optional name, used in events and `explain` output."
    )
    match: SlurmMatch = Field(
        default_factory=SlurmMatch, description="Which jobs this rule applies to. Empty: every job."
    )
    target: MappingTarget = Field(description="Where matching jobs are queued.")


class SlurmMapping(_Model):
    """Partition / account / QoS -> LocalQueue and WorkloadPriorityClass.

    Rules are tried in order and the first whose `match` holds wins; a job no rule matches uses
    `default`. Patterns are case-sensitive globs where `*` matches any run of characters (also none)
    and every other character matches itself. A job attribute Slurm leaves empty (QoS without
    slurmdbd) is matched as the empty string, so only a `*` pattern or an empty list matches it.
    """

    rules: list[SlurmMappingRule] = Field(
        default_factory=list, max_length=64, description="Rules, tried in order; the first match wins."
    )
    default: MappingTarget = Field(description="Target of jobs that match no rule.")


class PartitionTopology(TopologyConstraint):
    """Topology constraint for all jobs of one partition."""

    partition: SlurmName = Field(description="A bridged partition (one of `spec.slurm.partitions`).")


class SlurmTopology(_Model):
    """How Slurm jobs ask Kueue for topology-aware placement.

    A job that asks for one leaf switch (`--switches=1`, with or without a timeout) gets `switches`;
    otherwise its partition's entry in `partitions` applies; otherwise there is no constraint.
    Requests for more than one switch add no constraint (Kueue cannot express "at most N domains").
    """

    partitions: list[PartitionTopology] = Field(
        default_factory=list,
        max_length=64,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["partition"]},
        description="Per-partition constraint, applied to every job of that partition.",
    )

    @field_validator("partitions")
    @classmethod
    def _unique_partitions(cls, value: list[PartitionTopology]) -> list[PartitionTopology]:
        _unique([entry.partition for entry in value], what="topology partitions")
        return value

    switches: TopologyConstraint | None = Field(
        default=None,
        description=(
            "Constraint for jobs submitted with `--switches=1`. `preferred` is closest to Slurm's own "
            "`--switches=1@<max-time>` (run spread when the wait would be long); `required` waits."
        ),
    )


class SlurmdPodTemplate(PodOverrides):
    """The pod the bridge starts for each Slurm node of a job; slurmd in it joins Slurm as a dynamic node."""

    image: str = Field(
        min_length=1,
        max_length=512,
        description="Container image with slurmd, munge and the site's Slurm config.",
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = Field(
        default=None, description="Image pull policy. Omitted: Kubernetes' default for the image tag."
    )
    command: list[Arg] = Field(
        default_factory=lambda: ["slurmd"],
        min_length=1,
        max_length=16,
        description=(
            "Program and wrapper arguments that start slurmd (an argv list, never a shell). The bridge "
            "appends its own arguments: `-D -Z -N <node> --conf-server <confServer> --conf <node conf>`, "
            "and runs the whole under a fixed `/bin/sh -c` entry script that exits 143 when the pod is "
            "stopped (slurmd exits 0 on SIGTERM)."
        ),
    )
    extra_args: list[Arg] = Field(
        default_factory=list,
        max_length=32,
        description="Arguments appended after the bridge's own slurmd arguments.",
    )
    overhead: dict[ResourceKey, Quantity] = Field(
        default_factory=dict,
        json_schema_extra={
            "maxProperties": 16,
        },
        description=(
            "Resources added to each pod's request on top of the job's per-node request, for slurmd, "
            "munge and the pod's own processes (e.g. `{cpu: 100m, memory: 256Mi}`). Slurm is told the "
            "job's size only, so jobs never see the overhead."
        ),
    )


class SlurmLimits(_Model):
    """Bounds that keep one job or a burst of jobs from flooding the cluster."""

    max_nodes_per_job: int = Field(
        default=16,
        ge=1,
        le=4096,
        description="Jobs asking for more nodes stay held with a reason in their comment.",
    )
    max_bridged_jobs: int = Field(
        default=1000,
        ge=1,
        le=100000,
        description=(
            "Most jobs bridged at once (JobSets existing); further held jobs wait, in Slurm priority order."
        ),
    )


class SlurmSpec(_Model):
    """The Slurm bridge: which slurmctld, which partitions, and how their jobs become JobSets."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "!has(self.topology) || !has(self.topology.partitions) || "
                    "self.topology.partitions.all(t, t.partition in self.partitions)",
                    "every topology partition must be one of spec.slurm.partitions",
                    field_path=".topology.partitions",
                )
            ]
        }
    )

    url: str = Field(
        min_length=1,
        max_length=2048,
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHost() != ''",
                    "must be an http:// or https:// URL with a host",
                )
            ]
        },
        description="Base URL of slurmrestd, e.g. `http://slurmrestd.slurm:6820` (no version path).",
    )
    rest_version: SlurmRestVersion = Field(
        default="auto",
        description=(
            "slurmrestd OpenAPI version to speak. `auto`: the newest supported one the server serves, "
            "found at start and after a reconnect."
        ),
    )
    auth: SlurmAuth = Field(description="JWT authentication to slurmrestd.")
    cluster_name: str = Field(
        min_length=1,
        max_length=40,
        pattern=r"^[a-z0-9]([-a-z0-9_]*[a-z0-9])?$",
        description=(
            "Slurm's `ClusterName`. Part of every JobSet name and label, so several Slurm clusters can "
            "be bridged into one Kubernetes cluster."
        ),
    )
    conf_server: str = Field(
        max_length=260,
        pattern=HOST_PORT_PATTERN,
        description=(
            "slurmctld address for `slurmd --conf-server` (`host` or `host:port`, default port 6817)."
        ),
    )
    partitions: list[SlurmName] = Field(
        min_length=1,
        max_length=64,
        json_schema_extra={"x-kubernetes-list-type": "set"},
        description=(
            "Partitions whose jobs are bridged. Each must contain only bridge nodes (a Nodeset with "
            "`nodeFeature`) and only held jobs, or other jobs take the fresh nodes."
        ),
    )
    node_feature: str = Field(
        default="k8sbridge",
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="Feature every bridge node registers with; the bridged partitions' Nodeset selects it.",
    )
    mapping: SlurmMapping = Field(
        description=(
            "Which LocalQueue and priority a job gets: the first rule whose `match` holds, else `default`."
        )
    )
    pod_template: SlurmdPodTemplate = Field(description="The slurmd pod, one per Slurm node of a job.")
    gres: dict[GresKey, QualifiedName] = Field(
        default_factory=lambda: {"gpu": "nvidia.com/gpu"},
        json_schema_extra={
            "maxProperties": 32,
        },
        description=(
            "GRES -> Kubernetes extended resource. A key is a GRES name (`gpu`) or name and type "
            "(`gpu:a100`); the typed key wins over the plain one. Jobs asking for an unmapped GRES stay "
            "held with a reason."
        ),
    )
    topology: SlurmTopology = Field(
        default_factory=SlurmTopology,
        description=(
            "Topology-aware placement requests sent to Kueue. A job asking for one leaf switch "
            "(`--switches=1`) gets `switches`; otherwise its partition's entry applies; otherwise none."
        ),
    )
    poll_interval_seconds: float = Field(
        default=2.0,
        ge=0.2,
        le=300,
        description=(
            "How often the job list is polled (`update_time`-conditional, so idle polls are cheap); with a"
            " deep queue less often (at most 500 listed jobs a second). A job whose Slurm node changed, or"
            " that the bridge wrote, is read alone in between."
        ),
    )
    limits: SlurmLimits = Field(default_factory=SlurmLimits, description="Per-job and global bounds.")

    @field_validator("partitions")
    @classmethod
    def _unique_partitions(cls, value: list[str]) -> list[str]:
        _unique(value, what="partitions")
        return value

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parsed = urllib.parse.urlsplit(value)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError("must be an http:// or https:// URL with a host")
        return value

    @model_validator(mode="after")
    def _topology_partitions_bridged(self) -> Self:
        unknown = [t.partition for t in self.topology.partitions if t.partition not in self.partitions]
        if unknown:
            raise ValueError(f"every topology partition must be one of spec.slurm.partitions: {unknown}")
        return self


# --- Ray -------------------------------------------------------------------------------------------


class RayNamespaceRule(_Model):
    """A mapping rule for RayJobs by their namespace."""

    namespaces: list[NamespaceGlob] = Field(
        min_length=1,
        max_length=64,
        description="Glob patterns for the RayJob's namespace (`*` matches any run of characters).",
    )
    target: MappingTarget = Field(
        description="Where matching RayJobs' worker JobSets are queued (namespace omitted: the RayJob's)."
    )


class RayMapping(_Model):
    """RayJob namespace -> LocalQueue and WorkloadPriorityClass; first match wins, else `default`."""

    rules: list[RayNamespaceRule] = Field(
        default_factory=list, max_length=64, description="Rules, tried in order; the first match wins."
    )
    default: MappingTarget = Field(description="Target of RayJobs that match no rule.")


class RayWorkerTemplate(PodOverrides):
    """Overrides for the bridge's Ray worker pods, applied over the shared RayCluster's worker group."""

    image: str | None = Field(
        default=None,
        min_length=1,
        max_length=512,
        description="Worker image. Omitted: the RayCluster's worker group image (Ray versions must match).",
    )
    worker_group: Annotated[str, Field(min_length=1, max_length=63)] | None = Field(
        default=None,
        description="Worker group of the RayCluster whose pod template is the base. Omitted: the first one.",
    )
    ray_start_args: list[Arg] = Field(
        default_factory=list, max_length=32, description="Extra arguments for `ray start` on each worker."
    )


class RayWorkerDefaults(_Model):
    """Size of a RayJob's dedicated workers when the RayJob does not say."""

    workers: int = Field(default=1, ge=1, le=1024, description="Number of worker pods per RayJob.")
    resources: dict[ResourceKey, Quantity] = Field(
        default_factory=lambda: {"cpu": "1", "memory": "4Gi"},
        json_schema_extra={
            "maxProperties": 16,
        },
        description="Requests (and limits) of each worker pod; these are what Kueue admits against quota.",
    )


class RayLimits(_Model):
    """Bounds for the Ray bridge."""

    max_workers_per_job: int = Field(
        default=64,
        ge=1,
        le=4096,
        description="RayJobs asking for more workers are not bridged (an Event says why).",
    )
    max_bridged_jobs: int = Field(
        default=1000, ge=1, le=100000, description="Most RayJobs bridged at once (worker JobSets existing)."
    )


class RaySpec(_Model):
    """The Ray bridge: which shared RayClusters, and how their RayJobs get dedicated workers."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "!has(self.workerDefaults) || !has(self.limits) || "
                    "self.workerDefaults.workers <= self.limits.maxWorkersPerJob",
                    "workerDefaults.workers must not exceed limits.maxWorkersPerJob",
                    field_path=".workerDefaults.workers",
                )
            ]
        }
    )

    cluster_selector: LabelSelector = Field(
        description=(
            "RayClusters (in any namespace) whose selector RayJobs (`spec.clusterSelector`) are bridged. "
            "An empty selector selects every RayCluster."
        )
    )
    resource_prefix: str = Field(
        default="k8s-bridge-",
        min_length=1,
        max_length=32,
        pattern=r"^[A-Za-z][A-Za-z0-9_-]*$",
        description=(
            "Prefix of the per-job Ray custom resource that gates a RayJob's entrypoint; the bridge's "
            "workers advertise `<prefix><job id>`. Must not collide with Ray's own resource names."
        ),
    )
    worker_template: RayWorkerTemplate = Field(
        default_factory=RayWorkerTemplate, description="Overrides for the bridge's worker pods."
    )
    worker_defaults: RayWorkerDefaults = Field(
        default_factory=RayWorkerDefaults, description="Worker count and size when a RayJob does not say."
    )
    mapping: RayMapping = Field(
        description=(
            "Which LocalQueue and priority a RayJob's workers get, by the RayJob's namespace: the first "
            "matching rule, else `default`."
        )
    )
    limits: RayLimits = Field(default_factory=RayLimits, description="Per-job and global bounds.")

    @model_validator(mode="after")
    def _defaults_within_limits(self) -> Self:
        if self.worker_defaults.workers > self.limits.max_workers_per_job:
            raise ValueError("workerDefaults.workers must not exceed limits.maxWorkersPerJob")
        return self


# --- the resource ----------------------------------------------------------------------------------

_RESERVED_CEL = " || ".join(f"k.startsWith('{p}')" for p in RESERVED_PREFIXES)


def _metadata_map(what: str) -> Any:
    return Field(
        default_factory=dict,
        json_schema_extra={
            "maxProperties": 64,
            "x-kubernetes-validations": [
                _cel(
                    f"self.all(k, !({_RESERVED_CEL}))",
                    f"{what} must not use the reserved prefixes " + ", ".join(RESERVED_PREFIXES),
                )
            ],
        },
        description=(
            f"{what.capitalize()} added to every bridged JobSet and its pod templates. The prefixes "
            + ", ".join(f"`{p}`" for p in RESERVED_PREFIXES)
            + " are the bridge's and Kueue's own."
        ),
    )


class SharedSpec(_Model):
    """Settings both bridges share."""

    job_set_namespace: Namespace = Field(
        default="k8s-bridge",
        description=(
            "Home namespace of bridged Slurm jobs: their JobSets go here unless their LocalQueue "
            "reference names another namespace."
        ),
    )
    labels: dict[LabelKey, LabelValue] = _metadata_map("labels")
    annotations: dict[LabelKey, Annotated[str, Field(max_length=4096)]] = _metadata_map("annotations")

    @model_validator(mode="after")
    def _no_reserved_prefixes(self) -> Self:
        for what, keys in (("labels", self.labels), ("annotations", self.annotations)):
            bad = [k for k in keys if k.startswith(RESERVED_PREFIXES)]
            if bad:
                raise ValueError(f"{what} must not use the reserved prefixes: {bad}")
        return self


class WorkloadMixingSpec(_Model):
    """Desired configuration: at least one of `slurm` and `ray`."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel("has(self.slurm) || has(self.ray)", "at least one of spec.slurm or spec.ray must be set")
            ]
        }
    )

    slurm: SlurmSpec | None = Field(
        default=None, description="The Slurm bridge. Omitted: Slurm is not bridged."
    )
    ray: RaySpec | None = Field(default=None, description="The Ray bridge. Omitted: Ray is not bridged.")
    shared: SharedSpec = Field(default_factory=SharedSpec, description="Settings both bridges share.")

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if self.slurm is None and self.ray is None:
            raise ValueError("at least one of spec.slurm or spec.ray must be set")
        return self


class Condition(_Model):
    """A status condition, in the shape of metav1.Condition."""

    type: str = Field(
        min_length=1,
        max_length=316,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
        description="Condition type: `Ready` or `Degraded`.",
    )
    status: Literal["True", "False", "Unknown"] = Field(description="Status of the condition.")
    observed_generation: int | None = Field(
        default=None, ge=0, description="`metadata.generation` the condition was computed from."
    )
    last_transition_time: datetime = Field(description="When `status` last changed.")
    reason: str = Field(
        min_length=1,
        max_length=1024,
        pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        description="Machine-readable CamelCase reason.",
    )
    message: str = Field(default="", max_length=32768, description="Human-readable detail.")


class SourceCounts(_Model):
    """Live counts of one source's jobs, by where they are in the bridge's lifecycle."""

    held: int = Field(
        default=0, ge=0, description="Held in the external system, no JobSet yet (or not servable)."
    )
    queued: int = Field(default=0, ge=0, description="JobSet exists, waiting for Kueue's admission.")
    admitted: int = Field(
        default=0, ge=0, description="Admitted by Kueue, workers starting, job not released yet."
    )
    running: int = Field(default=0, ge=0, description="Released and running on its dedicated workers.")


class SourceStatus(_Model):
    """Counts per source; a source that is not configured is omitted."""

    slurm: SourceCounts | None = Field(default=None, description="Slurm jobs in bridged partitions.")
    ray: SourceCounts | None = Field(default=None, description="RayJobs in selected shared RayClusters.")


class WorkloadMixingStatus(_Model):
    """Observed state, written by the mixing reconciler (see bridge.api.status)."""

    observed_generation: int | None = Field(
        default=None, ge=0, description="`metadata.generation` this status describes."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        max_length=16,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
        description=(
            "`Ready`: everything the spec refers to exists and the bridges run this generation. "
            "`Degraded`: the bridges run, but impaired (an unreachable slurmrestd, an older generation "
            "still in use because this one is invalid, ...)."
        ),
    )
    sources: SourceStatus = Field(default_factory=SourceStatus, description="Live counts per source.")

    @field_validator("conditions")
    @classmethod
    def _unique_types(cls, value: list[Condition]) -> list[Condition]:
        _unique([c.type for c in value], what="condition types")
        return value


class WorkloadMixing(_Model):
    """How Slurm jobs and RayJobs in shared RayClusters are bridged into Kueue."""

    api_version: Literal["bridge.k8s-bridge.io/v1alpha1"] = Field(default=API_VERSION, alias="apiVersion")
    kind: Literal["WorkloadMixing"] = Field(default=KIND)
    metadata: dict[str, Any] = Field(default_factory=dict, description="Standard object metadata.")
    spec: WorkloadMixingSpec = Field(description="Desired configuration.")
    status: WorkloadMixingStatus | None = Field(default=None, description="Observed state.")

    def dump(self) -> dict[str, Any]:
        """The resource as the API server takes it: camelCase, defaults written out, no nulls."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


# --- mapping resolution (pure) ---------------------------------------------------------------------


class MappingError(ValueError):
    """The spec has no section for the source asked about."""


@dataclass(frozen=True, kw_only=True)
class QueueTarget:
    """A resolved mapping: where one job's JobSet goes and under which labels."""

    namespace: str
    """Namespace of the LocalQueue and of the JobSet."""
    local_queue: str
    """LocalQueue name."""
    priority_class: str | None
    """WorkloadPriorityClass name, or None for Kueue's default priority."""
    rule: int | None
    """Index of the rule that matched, or None when the default applied."""

    def labels(self) -> dict[str, str]:
        """The Kueue labels to put on the JobSet."""
        labels = {"kueue.x-k8s.io/queue-name": self.local_queue}
        if self.priority_class is not None:
            labels["kueue.x-k8s.io/priority-class"] = self.priority_class
        return labels


@functools.lru_cache(maxsize=1024)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")), re.DOTALL)


def glob_match(pattern: str, value: str) -> bool:
    """Whether ``value`` matches ``pattern``: ``*`` matches any run of characters (also none), every
    other character only itself, case-sensitively, over the whole value."""
    return _glob_regex(pattern).fullmatch(value) is not None


def _target(target: MappingTarget, *, home_namespace: str, rule: int | None) -> QueueTarget:
    return QueueTarget(
        namespace=target.local_queue.namespace or home_namespace,
        local_queue=target.local_queue.name,
        priority_class=target.priority_class,
        rule=rule,
    )


def resolve_slurm_mapping(
    spec: WorkloadMixingSpec, /, *, partition: str, account: str | None, qos: str | None
) -> QueueTarget:
    """The queue target of a Slurm job.

    Rules of ``spec.slurm.mapping`` are tried in order; the first whose every non-empty pattern list
    has a pattern matching the job's attribute wins (see :func:`glob_match`). ``None`` and ``""``
    are the same: an absent attribute, matched only by ``*`` or by an empty list. No rule matching:
    the default. A target without a namespace resolves to ``spec.shared.jobSetNamespace``.
    Whether the partition is bridged at all is not this function's question.

    Raises MappingError when the spec has no Slurm section.
    """
    if spec.slurm is None:
        raise MappingError("spec.slurm is not set")
    home = spec.shared.job_set_namespace
    for index, rule in enumerate(spec.slurm.mapping.rules):
        if rule.match.matches(partition=partition, account=account, qos=qos):
            return _target(rule.target, home_namespace=home, rule=index)
    return _target(spec.slurm.mapping.default, home_namespace=home, rule=None)


def resolve_ray_mapping(spec: WorkloadMixingSpec, /, *, namespace: str) -> QueueTarget:
    """The queue target of a RayJob in ``namespace``.

    Rules of ``spec.ray.mapping`` are tried in order; the first with a namespace pattern matching
    wins, else the default. A target without a namespace resolves to the RayJob's own namespace
    (the per-team LocalQueue pattern). Raises MappingError when the spec has no Ray section.
    """
    if spec.ray is None:
        raise MappingError("spec.ray is not set")
    for index, rule in enumerate(spec.ray.mapping.rules):
        if any(glob_match(p, namespace) for p in rule.namespaces):
            return _target(rule.target, home_namespace=namespace, rule=index)
    return _target(spec.ray.mapping.default, home_namespace=namespace, rule=None)


def resolve_slurm_topology(
    spec: WorkloadMixingSpec, /, *, partition: str, switches: int | None
) -> TopologyConstraint | None:
    """The topology constraint of a Slurm job, or None.

    ``switches`` is the job's requested leaf-switch count (``--switches``; None or 0 when not asked).
    Exactly one switch with ``topology.switches`` configured: that constraint. Otherwise the
    partition's entry in ``topology.partitions``, if any. More than one switch adds no constraint.
    Raises MappingError when the spec has no Slurm section.
    """
    if spec.slurm is None:
        raise MappingError("spec.slurm is not set")
    topology = spec.slurm.topology
    if switches == 1 and topology.switches is not None:
        return topology.switches
    for entry in topology.partitions:
        if entry.partition == partition:
            return TopologyConstraint(required=entry.required, preferred=entry.preferred)
    return None


def resolve_gres(spec: WorkloadMixingSpec, /, *, name: str, gres_type: str | None) -> str | None:
    """The Kubernetes resource name for a GRES (``gpu``, type ``a100``), or None when unmapped.

    ``name:type`` wins over ``name``; a typed request falls back to the plain name's mapping.
    Raises MappingError when the spec has no Slurm section.
    """
    if spec.slurm is None:
        raise MappingError("spec.slurm is not set")
    gres = spec.slurm.gres
    if gres_type and f"{name}:{gres_type}" in gres:
        return gres[f"{name}:{gres_type}"]
    return gres.get(name)
