"""RayJob in a shared RayCluster + WorkloadMixing -> the suspended JobSet of the job's own Ray workers.

Why a pure function: a RayJob in a shared cluster has no quota of its own (Kueue skips RayJobs with
a ``clusterSelector``), so the bridge gives it dedicated workers that Kueue admits like any other
workload. What those workers are (how many, how large, which image, which resource they advertise
to Ray) is decided here from the RayJob, the RayCluster and the configuration alone: no I/O, no
clock, no randomness. The reconciler can re-translate on every pass, ``explain`` can show what
would be created, and hostile input can be fuzzed without a cluster. The admission webhook
(:mod:`bridge.ray.gate`) uses the same readers (:func:`requested_workers`, :func:`worker_resources`,
:func:`target_queue`, :func:`parse_entrypoint_resources`), so a RayJob it lets through translates.

The gate: the webhook puts a per-job Ray custom resource ``<resourcePrefix><token>`` into the
RayJob's ``spec.entrypointResources`` at creation, so Ray keeps the entrypoint PENDING until a node
advertises that resource. The JobSet's workers are those nodes: ``ray start --resources={gate: 1}``.

The rules, in short:

- One replicated job ``ray-worker``: ``replicas: 1``, ``parallelism = completions = N`` (Indexed),
  so Kueue's podSet count is exactly N; ``restartPolicy: Never``, ``backoffLimit: 0`` and JobSet
  ``maxRestarts: 0``: a lost Ray worker fails the job on it anyway, and ``ray start --block`` never
  exits 0 (SIGTERM drains and exits 1), so the reconciler deletes the JobSet when the RayJob ends.
- The pod template is the RayCluster's worker group (``spec.ray.workerTemplate.workerGroup``, else
  the first one). A cluster without worker groups (a head-only cluster whose workers all come from
  the bridge, the natural shape for this bridge) lends its head group's template, with a note; a
  named group that does not exist is refused (``NoWorkerGroup``).
- Nothing of KubeRay's stays on the pod: no ``ray.io/*`` label or annotation (KubeRay treats any pod
  labelled ``ray.io/cluster`` as its own and deletes it), no ``RAY_CLOUD_INSTANCE_ID`` (the Ray
  autoscaler would adopt the node), no ``args``. The Ray container is the one named ``ray-worker``
  (``ray-head`` for a head template), else the first (KubeRay's own rule: container 0).
- Each pod requests and limits exactly the worker resources (annotation
  ``bridge.k8s-bridge.io/ray-worker-resources``, else ``workerDefaults.resources``); ``cpu`` and
  ``memory`` are required, or a pod without limits would escape the quota Kueue charged. Ray is told
  the same: ``--num-cpus`` (rounded down), ``--memory`` (bytes), ``--num-gpus`` (``nvidia.com/gpu``).
- Kueue labels: queue and priority from the annotations ``queue-name`` / ``priority-class``, else
  the mapping. (Kueue's own ``kueue.x-k8s.io/queue-name`` cannot be put on the RayJob: through
  Kueue v0.14 its RayJob webhook rejects a queue-labelled RayJob with a ``clusterSelector``
  ("a kueue managed job should not use an existing cluster"); since v0.15 it accepts it, but its
  defaulting webhook still sets ``spec.suspend: true`` on any queue-labelled RayJob, which KubeRay
  rejects together with a ``clusterSelector``.) ``max-exec-time-seconds`` from the RayJob's
  ``activeDeadlineSeconds``, which counts the queue wait too, so it is an upper bound.
- The JobSet goes to the mapping target's namespace (omitted: the RayJob's). The owner reference to
  the RayJob exists only in the same namespace, and is not a controller reference: Kueue treats a
  JobSet whose controller is a kind it integrates (RayJob) as that job's child and would not queue it.
- A template from the RayCluster that would run in another namespace than the cluster's (a mapping
  with a target namespace) may not name namespaced objects (Secrets, ConfigMaps, claims, pull
  secrets): those would resolve in the target namespace, with the RayCluster author's choice of
  name. Its ``serviceAccountName`` is dropped there (the override's, or the namespace default).

Strings that land in an argv are ``$``-escaped (``$$``), so the kubelet's ``$(VAR)`` expansion
cannot turn a configured ``rayStartArgs`` entry or a cluster's status into something else; env
values from the RayCluster template and from ``workerTemplate.env`` are copied as written, with the
Kubernetes meaning their authors gave them (the same as in KubeRay's own pods). Label values from
the RayCluster's template are sanitized, and RayJobs that cannot be served get an
:class:`Untranslatable` with a machine-readable code, never an exception or a partial manifest.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from bridge.admission import JOBSET_API_VERSION, JOBSET_KIND, MAX_EXEC_TIME_LABEL
from bridge.api.mixing import QueueTarget, RaySpec, WorkloadMixingSpec, resolve_ray_mapping

__all__ = [
    "ANNOTATION_GATE",
    "ANNOTATION_GATED_BY",
    "ANNOTATION_PRIORITY_CLASS",
    "ANNOTATION_QUEUE_NAME",
    "ANNOTATION_RAY_CLUSTER",
    "ANNOTATION_RAY_JOB",
    "ANNOTATION_WORKERS",
    "ANNOTATION_WORKER_RESOURCES",
    "CLUSTER_LABEL",
    "DEFAULT_GCS_PORT",
    "FINALIZER",
    "GATE_LABEL",
    "GPU_RESOURCE",
    "LABEL_MANAGED_BY",
    "LABEL_RAY_JOB_UID",
    "MANAGED_BY",
    "MAX_ENTRYPOINT_RESOURCES_BYTES",
    "MAX_JOBSET_NAME_LENGTH",
    "MAX_WORKER_RESOURCES_BYTES",
    "RAY_CONTAINER_NAMES",
    "REPLICATED_JOB",
    "TOKEN_LENGTH",
    "RefusedError",
    "Translation",
    "Untranslatable",
    "UntranslatableCode",
    "WorkerSize",
    "check_entrypoint",
    "escape_dollars",
    "gate_of",
    "gate_resource",
    "gate_token",
    "head_service_name",
    "jobset_name",
    "jobset_selector",
    "parse_entrypoint_resources",
    "requested_workers",
    "target_queue",
    "translate",
    "worker_resources",
    "worker_size",
]

#: The bridge's own label/annotation prefix (WorkloadMixing refuses shared labels under it).
_PREFIX: Final = "bridge.k8s-bridge.io/"
#: On the RayJob, by the webhook: the per-job Ray resource; also on the JobSet and its pods.
ANNOTATION_GATE: Final = _PREFIX + "ray-gate"
#: On the RayJob, by the webhook: the WorkloadMixing whose bridge gated it.
ANNOTATION_GATED_BY: Final = _PREFIX + "ray-gated-by"
#: On the RayJob, by the webhook: removed by the bridge once the pending Ray job is cancelled and the
#: workers are gone, so a gated RayJob cannot vanish with its Ray job still waiting.
FINALIZER: Final = _PREFIX + "ray-gate"
#: On the RayJob, by its user (all optional).
ANNOTATION_WORKERS: Final = _PREFIX + "ray-workers"
ANNOTATION_WORKER_RESOURCES: Final = _PREFIX + "ray-worker-resources"
ANNOTATION_QUEUE_NAME: Final = _PREFIX + "queue-name"
ANNOTATION_PRIORITY_CLASS: Final = _PREFIX + "priority-class"
#: On the JobSet and its pod templates.
LABEL_RAY_JOB_UID: Final = _PREFIX + "ray-job-uid"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "k8s-bridge"
ANNOTATION_RAY_JOB: Final = _PREFIX + "ray-job"
ANNOTATION_RAY_CLUSTER: Final = _PREFIX + "ray-cluster"

#: The one key of a RayJob's ``spec.clusterSelector`` that KubeRay reads.
CLUSTER_LABEL: Final = "ray.io/cluster"
#: The one replicated job; also the name of the Kueue podSet.
REPLICATED_JOB: Final = "ray-worker"
GATE_LABEL: Final = "k8s-bridge.io/ray-gate"
"""Ray node label of every worker of a job (value: its gate): tasks confine themselves to the job's
workers with ``label_selector={GATE_LABEL: gate}`` (Ray has no job-wide default placement)."""
DEFAULT_GCS_PORT: Final = 6379
GPU_RESOURCE: Final = "nvidia.com/gpu"
TOKEN_LENGTH: Final = 12
#: The container taken as the Ray container of a worker / head template, when present.
RAY_CONTAINER_NAMES: Final = ("ray-worker", "ray-head")
MAX_ENTRYPOINT_RESOURCES_BYTES: Final = 4096
MAX_WORKER_RESOURCES_BYTES: Final = 4096

_RAY_PREFIX: Final = "ray.io/"
_RESERVED_PREFIXES: Final = ("kueue.x-k8s.io/", _PREFIX, "jobset.sigs.k8s.io/", _RAY_PREFIX)
_CLOUD_INSTANCE_ENV: Final = "RAY_CLOUD_INSTANCE_ID"
_MAX_WORKERS_HARD: Final = 4096  # RayLimits.max_workers_per_job's own upper bound
#: JobSet validates that ``<jobset>-<rjob>-<job idx>-<pod idx>-<5 random>`` is a DNS-1035 label.
MAX_JOBSET_NAME_LENGTH: Final = (
    63 - len(f"-{REPLICATED_JOB}-0-") - len(str(_MAX_WORKERS_HARD - 1)) - len("-abcde")
)
_INT32_MAX: Final = 2**31 - 1
_MAX_RESOURCE_KEYS: Final = 16
_MAX_CPU: Final = Decimal(1024)
_MAX_MEMORY: Final = Decimal(4 * 2**40)  # 4 TiB
_MAX_STORAGE: Final = Decimal(2**50)  # 1 PiB
_MAX_COUNT: Final = Decimal(1024)  # extended resources (GPUs, NICs, ...)

_DNS_LABEL: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_1035: Final = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_KEY: Final = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_LABEL_VALUE: Final = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_UID: Final = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?$")
_WORKER_COUNT: Final = re.compile(r"^[0-9]{1,32}$")
_NATIVE_RESOURCES: Final = frozenset({"cpu", "memory", "ephemeral-storage"})


# --- results -----------------------------------------------------------------------------------


class UntranslatableCode(enum.StrEnum):
    """Why a RayJob cannot be served; CamelCase so it can be an Event reason as is."""

    INVALID_CONFIG = "InvalidConfig"
    INVALID_RAYJOB = "InvalidRayJob"
    NO_CLUSTER_SELECTOR = "NoClusterSelector"
    CLUSTER_MISMATCH = "ClusterMismatch"
    INVALID_CLUSTER = "InvalidRayCluster"
    GATE_MISSING = "GateMissing"
    GATED_BY_OTHER = "GatedByOtherMixing"
    INVALID_ENTRYPOINT_RESOURCES = "InvalidEntrypointResources"
    ENTRYPOINT_TOO_LARGE = "EntrypointTooLarge"
    INVALID_WORKER_COUNT = "InvalidWorkerCount"
    TOO_MANY_WORKERS = "TooManyWorkers"
    INVALID_WORKER_RESOURCES = "InvalidWorkerResources"
    WORKER_TOO_LARGE = "WorkerTooLarge"
    INVALID_QUEUE = "InvalidQueue"
    NO_WORKER_GROUP = "NoWorkerGroup"
    NO_RAY_CONTAINER = "NoRayContainer"
    CROSS_NAMESPACE_REFERENCE = "CrossNamespaceReference"


class RefusedError(ValueError):
    """What the readers below raise for input that cannot be served: a code and one human sentence
    (ASCII, no RayJob-controlled text unescaped) that says what to change."""

    def __init__(self, code: UntranslatableCode, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


@dataclass(frozen=True, kw_only=True)
class Untranslatable:
    """A RayJob the bridge will not serve: it stays gated (PENDING in Ray); ``reason`` goes into an
    Event on it."""

    namespace: str
    name: str
    code: UntranslatableCode
    reason: str

    def __str__(self) -> str:
        return f"RayJob {self.namespace}/{self.name} cannot be bridged ({self.code}): {self.reason}"


@dataclass(frozen=True, kw_only=True)
class WorkerSize:
    """What each worker tells Ray it has, from the resources Kubernetes reserves for its pod."""

    num_cpus: int
    memory_bytes: int | None
    num_gpus: int | None


@dataclass(frozen=True, kw_only=True)
class Translation:
    """A servable RayJob: the JobSet to create and the facts the reconciler acts on."""

    name: str
    namespace: str
    """The JobSet's (and its LocalQueue's) namespace."""
    manifest: dict[str, Any]
    gate: str
    """The Ray resource that gates the entrypoint and that every worker advertises once."""
    rayjob: str
    """``<namespace>/<name>`` of the RayJob."""
    ray_cluster: str
    workers: int
    resources: dict[str, str]
    """Each worker pod's requests (and limits)."""
    size: WorkerSize
    queue: QueueTarget
    head_address: str
    """``<host>:<gcs port>`` the workers join."""
    worker_group: str | None
    """The RayCluster worker group whose template was used; None for the head group's."""
    notes: tuple[str, ...] = field(default=())
    """Why each choice was made, one line each (for ``explain``)."""


# --- small helpers -----------------------------------------------------------------------------


def _short_hash(text: str, length: int) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:length]


def _show(text: object, limit: int = 48) -> str:
    # RayJob-controlled text inside a reason: escaped (ascii) and cut, so a reason stays one clean line.
    value = text if isinstance(text, str) else repr(text)
    cut = value if len(value) <= limit else value[:limit] + "..."
    return ascii(cut)


def _label_value(text: str) -> str:
    """Any string as a valid label value: characters outside ``[A-Za-z0-9_.-]`` become ``_``, cut to
    63, non-alphanumeric ends trimmed."""
    value = re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)


def escape_dollars(text: str) -> str:
    """``text`` made literal for a container's command, args or env value: the kubelet expands
    ``$(VAR)`` there and turns ``$$`` into ``$``."""
    return text.replace("$", "$$")


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(obj.get("metadata"))


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(_metadata(obj).get("annotations"))


def _annotation(obj: Mapping[str, Any], key: str) -> str | None:
    value = _annotations(obj).get(key)
    return value if isinstance(value, str) else None


# --- names -------------------------------------------------------------------------------------


def gate_token(request_uid: str) -> str:
    """The per-job token from an AdmissionReview request uid: its hex digits, lowercase, dashes
    dropped, the first 12 (a UUID's random part). A uid that is not hex (never from an API server)
    is hashed instead, so the token is always 12 lowercase hex characters."""
    cleaned = request_uid.lower().replace("-", "")
    if re.fullmatch(r"[0-9a-f]{12,64}", cleaned):
        return cleaned[:TOKEN_LENGTH]
    return _short_hash(request_uid, TOKEN_LENGTH)


def gate_resource(*, prefix: str, request_uid: str) -> str:
    """The Ray resource that gates the RayJob created by this admission request."""
    return prefix + gate_token(request_uid)


def _is_gate_key(key: str, prefix: str) -> bool:
    return (
        key.startswith(prefix) and re.fullmatch(f"[0-9a-f]{{{TOKEN_LENGTH}}}", key[len(prefix) :]) is not None
    )


def jobset_name(*, namespace: str, name: str, uid: str) -> str:
    """The JobSet of a RayJob: ``ray-<name, cleaned and cut>-<hash>``, a DNS-1035 label short enough
    for JobSet's generated Job and pod names (:data:`MAX_JOBSET_NAME_LENGTH`).

    Total over any strings and deterministic. The hash covers namespace, name and uid: RayJobs of
    the same name in two namespaces can share a target namespace, and a RayJob re-created under
    the same name must not meet its predecessor's JobSet, which may still be terminating.
    """
    digest = _short_hash(f"{namespace}/{name}/{uid}", 10)
    cleaned = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    room = MAX_JOBSET_NAME_LENGTH - len("ray-") - len(digest) - 1
    head = cleaned[:room].strip("-")
    return f"ray-{head}-{digest}" if head else f"ray-{digest}"


def jobset_selector(uid: str) -> str:
    """Label selector of the JobSet and worker pods of the RayJob with ``uid``."""
    return f"{LABEL_RAY_JOB_UID}={_label_value(uid)}"


# --- the readers the webhook shares --------------------------------------------------------------


def parse_entrypoint_resources(raw: object) -> dict[str, int | float]:
    """A RayJob's ``spec.entrypointResources`` (a JSON string) as a dict; absent or empty: ``{}``.

    Refused (``InvalidEntrypointResources``): not a string, over
    :data:`MAX_ENTRYPOINT_RESOURCES_BYTES`, not JSON, not an object, or a value that is not a finite
    non-negative number.
    """
    code = UntranslatableCode.INVALID_ENTRYPOINT_RESOURCES
    if raw is None or raw == "":
        return {}
    if not isinstance(raw, str):
        raise RefusedError(code, "spec.entrypointResources must be a JSON string")
    if len(raw.encode("utf-8", "surrogatepass")) > MAX_ENTRYPOINT_RESOURCES_BYTES:
        raise RefusedError(
            code,
            f"spec.entrypointResources is larger than {MAX_ENTRYPOINT_RESOURCES_BYTES} bytes; "
            "ask for fewer resources",
        )
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise RefusedError(
            code, 'spec.entrypointResources is not JSON; write it as {"name": amount, ...}'
        ) from exc
    if not isinstance(value, dict):
        raise RefusedError(code, 'spec.entrypointResources must be a JSON object {"name": amount, ...}')
    out: dict[str, int | float] = {}
    for key, amount in value.items():
        if (
            isinstance(amount, bool)
            or not isinstance(amount, int | float)
            or not math.isfinite(amount)
            or amount < 0
        ):
            raise RefusedError(
                code,
                f"spec.entrypointResources[{_show(key)}] must be a non-negative number, not {_show(amount)}",
            )
        if not key:
            raise RefusedError(code, "spec.entrypointResources has an empty resource name")
        out[key] = amount
    return out


def gate_of(rayjob: Mapping[str, Any], prefix: str) -> str | None:
    """The RayJob's gate: the one ``<prefix><token>`` key of ``spec.entrypointResources`` (what Ray
    actually waits for), when the webhook's ``ray-gate`` annotation names the same key and its
    amount fits on one worker (0 < amount <= 1). None otherwise: not gated, or tampered with."""
    try:
        resources = parse_entrypoint_resources(_mapping(rayjob.get("spec")).get("entrypointResources"))
    except RefusedError:
        return None
    keys = [k for k in resources if k.startswith(prefix)]
    if len(keys) != 1 or not _is_gate_key(keys[0], prefix):
        return None
    (key,) = keys
    if not 0 < resources[key] <= 1 or _annotation(rayjob, ANNOTATION_GATE) != key:
        return None
    return key


def requested_workers(rayjob: Mapping[str, Any], *, ray: RaySpec) -> int:
    """The worker count: annotation ``ray-workers`` (decimal digits, 1 .. ``limits.maxWorkersPerJob``),
    else ``workerDefaults.workers``. Raises :class:`RefusedError`."""
    limit = ray.limits.max_workers_per_job
    raw = _annotations(rayjob).get(ANNOTATION_WORKERS)
    if raw is None:
        return ray.worker_defaults.workers
    hint = f"set it to a whole number from 1 to {limit}"
    if not isinstance(raw, str) or not _WORKER_COUNT.fullmatch(raw.strip()):
        raise RefusedError(
            UntranslatableCode.INVALID_WORKER_COUNT,
            f"annotation {ANNOTATION_WORKERS} is {_show(raw)}: {hint}",
        )
    count = int(raw.strip())
    if count < 1:
        raise RefusedError(
            UntranslatableCode.INVALID_WORKER_COUNT, f"annotation {ANNOTATION_WORKERS} is {count}: {hint}"
        )
    if count > limit:
        raise RefusedError(
            UntranslatableCode.TOO_MANY_WORKERS,
            f"annotation {ANNOTATION_WORKERS} asks for {count} workers; at most {limit} per job are "
            f"bridged (spec.ray.limits.maxWorkersPerJob): {hint}",
        )
    return count


def worker_resources(rayjob: Mapping[str, Any], *, ray: RaySpec) -> dict[str, str]:
    """Each worker pod's requests (== limits), canonical quantities by resource name: annotation
    ``ray-worker-resources`` (a JSON object of resource name -> quantity), else
    ``workerDefaults.resources``. ``cpu`` and ``memory`` must be there and above zero. Raises
    :class:`RefusedError`."""
    raw = _annotations(rayjob).get(ANNOTATION_WORKER_RESOURCES)
    if raw is None:
        return _resources(
            ray.worker_defaults.resources, source="spec.ray.workerDefaults.resources", config=True
        )
    source = f"annotation {ANNOTATION_WORKER_RESOURCES}"
    code = UntranslatableCode.INVALID_WORKER_RESOURCES
    example = '{"cpu": "2", "memory": "8Gi"}'
    if not isinstance(raw, str):
        raise RefusedError(code, f"{source} must be a JSON object like {example}")
    if len(raw.encode("utf-8", "surrogatepass")) > MAX_WORKER_RESOURCES_BYTES:
        raise RefusedError(code, f"{source} is larger than {MAX_WORKER_RESOURCES_BYTES} bytes")
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise RefusedError(code, f"{source} is not JSON; write it like {example}") from exc
    if not isinstance(value, dict):
        raise RefusedError(code, f"{source} must be a JSON object like {example}")
    return _resources(value, source=source, config=False)


def target_queue(rayjob: Mapping[str, Any], *, ray: RaySpec) -> QueueTarget:
    """Where the RayJob's JobSet is queued: the mapping for its namespace, with the LocalQueue and
    the WorkloadPriorityClass replaced by the annotations ``queue-name`` / ``priority-class`` when
    set (the namespace stays the mapping's). Raises :class:`RefusedError`."""
    namespace = _metadata(rayjob).get("namespace")
    if not isinstance(namespace, str) or not _DNS_LABEL.fullmatch(namespace) or len(namespace) > 63:
        raise RefusedError(UntranslatableCode.INVALID_RAYJOB, "the RayJob has no valid metadata.namespace")
    queue = resolve_ray_mapping(WorkloadMixingSpec.model_construct(ray=ray), namespace=namespace)
    local_queue = _queue_annotation(rayjob, ANNOTATION_QUEUE_NAME) or queue.local_queue
    priority = _queue_annotation(rayjob, ANNOTATION_PRIORITY_CLASS) or queue.priority_class
    return dataclasses.replace(queue, local_queue=local_queue, priority_class=priority)


def _queue_annotation(rayjob: Mapping[str, Any], key: str) -> str | None:
    value = _annotations(rayjob).get(key)
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > 63 or not _DNS_SUBDOMAIN.fullmatch(value):
        raise RefusedError(
            UntranslatableCode.INVALID_QUEUE,
            f"annotation {key} is {_show(value)}: set it to a Kueue object name "
            "(lower case, digits, '-' and '.', at most 63 characters) or remove it",
        )
    return value


# --- quantities --------------------------------------------------------------------------------

_BINARY: Final = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL: Final = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
}
_QUANTITY: Final = re.compile(
    r"^(\+?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]{1,3})?$"
)


def _quantity(text: str) -> Decimal:
    """A non-negative Kubernetes quantity's value; ValueError for anything else (signs, spaces, NaN,
    exponents beyond three digits)."""
    match = _QUANTITY.fullmatch(text)
    if match is None or len(text) > 64:
        raise ValueError(text)
    number, suffix = Decimal(match.group(1)), match.group(2) or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number * _DECIMAL[suffix]
    return number.scaleb(int(suffix[1:]))


def _memory_like(resource: str) -> bool:
    return resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-")


def _format_quantity(resource: str, value: Decimal) -> str:
    if resource == "cpu":
        millis = math.ceil(value * 1000)
        return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"
    whole = math.ceil(value)
    if _memory_like(resource) and whole:
        for suffix in ("Pi", "Ti", "Gi", "Mi", "Ki"):
            if whole % _BINARY[suffix] == 0:
                return f"{whole // _BINARY[suffix]}{suffix}"
    return str(whole)


def _resource_name_ok(name: str) -> bool:
    if name in _NATIVE_RESOURCES:
        return True
    if name.startswith("hugepages-"):
        try:
            _quantity(name[len("hugepages-") :])
        except (ValueError, InvalidOperation):
            return False
        return True
    prefix, _, rest = name.partition("/")
    return (
        bool(rest)
        and len(prefix) <= 253
        and len(rest) <= 63
        and _DNS_SUBDOMAIN.fullmatch(prefix) is not None
        and _LABEL_KEY.fullmatch(name) is not None
        and not prefix.endswith("kubernetes.io")
    )


def _bound(resource: str) -> tuple[Decimal, str]:
    if resource == "cpu":
        return _MAX_CPU, str(_MAX_CPU)
    if resource == "memory" or resource.startswith("hugepages-"):
        return _MAX_MEMORY, "4Ti"
    if resource == "ephemeral-storage":
        return _MAX_STORAGE, "1Pi"
    return _MAX_COUNT, str(_MAX_COUNT)


def _resources(value: Mapping[Any, Any], *, source: str, config: bool) -> dict[str, str]:
    bad_code = UntranslatableCode.INVALID_CONFIG if config else UntranslatableCode.INVALID_WORKER_RESOURCES
    large_code = UntranslatableCode.INVALID_CONFIG if config else UntranslatableCode.WORKER_TOO_LARGE
    if len(value) > _MAX_RESOURCE_KEYS:
        raise RefusedError(bad_code, f"{source} names {len(value)} resources; at most {_MAX_RESOURCE_KEYS}")
    out: dict[str, str] = {}
    for name, raw in value.items():
        if not isinstance(name, str) or not _resource_name_ok(name):
            raise RefusedError(
                bad_code,
                f"{source} names {_show(name)}, which is not a Kubernetes resource name "
                "(cpu, memory, ephemeral-storage, hugepages-<size> or <domain>/<name>)",
            )
        text = str(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) else raw
        try:
            if not isinstance(text, str):
                raise ValueError(text)
            amount = _quantity(text)
        except (ValueError, InvalidOperation) as exc:
            raise RefusedError(
                bad_code,
                f"{source}[{name}] is {_show(raw)}, not a non-negative quantity (like 2, 500m, 8Gi)",
            ) from exc
        bound, shown = _bound(name)
        if amount > bound:
            raise RefusedError(
                large_code, f"{source}[{name}] is {_show(raw)}; at most {shown} per worker is bridged"
            )
        if name not in _NATIVE_RESOURCES and not _memory_like(name) and amount != amount.to_integral_value():
            raise RefusedError(bad_code, f"{source}[{name}] must be a whole number (an extended resource)")
        out[name] = _format_quantity(name, amount)
    for required in ("cpu", "memory"):
        if required not in out or _quantity(out[required]) <= 0:
            raise RefusedError(
                bad_code,
                f"{source} must give each worker some {required} (requests and limits): a pod without "
                "them is not held to the quota Kueue charges",
            )
    return dict(sorted(out.items()))


def worker_size(resources: Mapping[str, str]) -> WorkerSize:
    """What a worker with ``resources`` (as :func:`worker_resources` returns them) tells Ray."""
    cpu = resources.get("cpu")
    memory = resources.get("memory")
    gpus = resources.get(GPU_RESOURCE)
    return WorkerSize(
        num_cpus=max(math.floor(_quantity(cpu)), 0) if cpu is not None else 0,
        memory_bytes=math.ceil(_quantity(memory)) if memory is not None else None,
        num_gpus=math.floor(_quantity(gpus)) if gpus is not None else None,
    )


def check_entrypoint(rayjob: Mapping[str, Any], *, size: WorkerSize) -> None:
    """Refuse (``EntrypointTooLarge``) a RayJob whose entrypoint asks for more CPUs or GPUs than one
    worker has: the gate puts the entrypoint on a bridge worker, so it would never start while its
    workers hold their quota."""
    spec = _mapping(rayjob.get("spec"))
    for field_name, have, resource in (
        ("entrypointNumCpus", size.num_cpus, "cpu"),
        ("entrypointNumGpus", size.num_gpus or 0, GPU_RESOURCE),
    ):
        wanted = spec.get(field_name)
        if wanted is None:
            continue
        if isinstance(wanted, bool) or not isinstance(wanted, int | float) or not math.isfinite(wanted):
            raise RefusedError(UntranslatableCode.INVALID_RAYJOB, f"spec.{field_name} is not a number")
        if wanted > have:
            raise RefusedError(
                UntranslatableCode.ENTRYPOINT_TOO_LARGE,
                f"spec.{field_name} is {wanted:g} but each bridged worker has {have}: raise {resource} in "
                f"annotation {ANNOTATION_WORKER_RESOURCES} or lower spec.{field_name}",
            )


# --- the translation ---------------------------------------------------------------------------


def translate(
    *,
    rayjob: Mapping[str, Any],
    raycluster: Mapping[str, Any],
    spec: WorkloadMixingSpec,
    mixing_name: str,
    cluster_domain: str = "cluster.local",
) -> Translation | Untranslatable:
    """The JobSet of dedicated Ray workers that serves ``rayjob`` in ``raycluster``, or why there is none.

    ``raycluster`` is the cluster the RayJob's selector names (looked up by the caller). Whether the
    RayJob is running, finished or already bridged is not this function's question: it answers
    "what would serve this RayJob", the same way every time.
    """
    meta = _metadata(rayjob)
    namespace, name = meta.get("namespace"), meta.get("name")
    shown_ns = namespace if isinstance(namespace, str) else ""
    shown_name = name if isinstance(name, str) else ""
    try:
        return _translate(
            rayjob=rayjob,
            raycluster=raycluster,
            spec=spec,
            mixing_name=mixing_name,
            cluster_domain=cluster_domain,
        )
    except RefusedError as refusal:
        return Untranslatable(
            namespace=_label_value(shown_ns),
            name=_label_value(shown_name),
            code=refusal.code,
            reason=refusal.reason,
        )


def _identity(rayjob: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = _metadata(rayjob)
    namespace, name, uid = meta.get("namespace"), meta.get("name"), meta.get("uid")
    if not isinstance(namespace, str) or len(namespace) > 63 or not _DNS_LABEL.fullmatch(namespace):
        raise RefusedError(UntranslatableCode.INVALID_RAYJOB, "the RayJob has no valid metadata.namespace")
    if not isinstance(name, str) or len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        raise RefusedError(UntranslatableCode.INVALID_RAYJOB, "the RayJob has no valid metadata.name")
    if not isinstance(uid, str) or len(uid) > 63 or not _UID.fullmatch(uid):
        raise RefusedError(UntranslatableCode.INVALID_RAYJOB, "the RayJob has no valid metadata.uid")
    return namespace, name, uid


def _cluster(rayjob: Mapping[str, Any], raycluster: Mapping[str, Any], *, namespace: str) -> str:
    selector = _mapping(rayjob.get("spec")).get("clusterSelector")
    wanted = _mapping(selector).get(CLUSTER_LABEL)
    if not isinstance(wanted, str) or not wanted:
        raise RefusedError(
            UntranslatableCode.NO_CLUSTER_SELECTOR,
            f"the RayJob has no spec.clusterSelector[{CLUSTER_LABEL}]: "
            "only RayJobs in a shared cluster are bridged",
        )
    meta = _metadata(raycluster)
    cluster, cluster_ns = meta.get("name"), meta.get("namespace")
    if cluster != wanted or cluster_ns != namespace:
        raise RefusedError(
            UntranslatableCode.CLUSTER_MISMATCH,
            f"the RayJob selects RayCluster {_show(wanted)} in its namespace, "
            f"not {_show(cluster_ns)}/{_show(cluster)}",
        )
    if len(wanted) > 253 or not _DNS_SUBDOMAIN.fullmatch(wanted):
        raise RefusedError(
            UntranslatableCode.INVALID_CLUSTER, f"RayCluster name {_show(wanted)} is not valid"
        )
    return wanted


def head_service_name(raycluster: Mapping[str, Any] | None, *, cluster: str) -> str:
    """The RayCluster's head Service: ``status.head.serviceName``, else KubeRay's default name."""
    status_head = _mapping(_mapping((raycluster or {}).get("status")).get("head"))
    service = status_head.get("serviceName")
    return f"{cluster}-head-svc" if service is None or service == "" else str(service)


def _head_address(raycluster: Mapping[str, Any], *, cluster: str, namespace: str, domain: str) -> str:
    service = head_service_name(raycluster, cluster=cluster)
    if not isinstance(service, str) or len(service) > 63 or not _DNS_1035.fullmatch(service):
        raise RefusedError(
            UntranslatableCode.INVALID_CLUSTER,
            f"the head service name {_show(service)} of the RayCluster is not a DNS label; "
            "wait for status.head.serviceName",
        )
    head_group = _mapping(_mapping(raycluster.get("spec")).get("headGroupSpec"))
    raw_port = _mapping(head_group.get("rayStartParams")).get("port")
    port = DEFAULT_GCS_PORT
    if raw_port is not None:
        text = str(raw_port) if isinstance(raw_port, int) and not isinstance(raw_port, bool) else raw_port
        if not isinstance(text, str) or not re.fullmatch(r"[0-9]{1,5}", text) or not 0 < int(text) < 65536:
            raise RefusedError(
                UntranslatableCode.INVALID_CLUSTER,
                f"headGroupSpec.rayStartParams.port of the RayCluster is {_show(raw_port)}, not a port",
            )
        port = int(text)
    return f"{service}.{namespace}.svc.{domain}:{port}"


def _worker_template(
    raycluster: Mapping[str, Any], *, wanted: str | None, notes: list[str]
) -> tuple[Mapping[str, Any], str | None]:
    spec = _mapping(raycluster.get("spec"))
    groups_raw = spec.get("workerGroupSpecs")
    groups = [g for g in groups_raw if isinstance(g, Mapping)] if isinstance(groups_raw, list) else []
    names = [g.get("groupName") for g in groups]
    if wanted is not None:
        for group in groups:
            if group.get("groupName") == wanted:
                notes.append(f"worker group {wanted}: spec.ray.workerTemplate.workerGroup")
                return _mapping(group.get("template")), wanted
        raise RefusedError(
            UntranslatableCode.NO_WORKER_GROUP,
            f"the RayCluster has no worker group {_show(wanted)} (spec.ray.workerTemplate.workerGroup); "
            f"it has {_show(','.join(str(n) for n in names)) if names else 'none'}",
        )
    if groups:
        group_name = groups[0].get("groupName")
        shown = group_name if isinstance(group_name, str) else ""
        notes.append(f"worker group {_show(shown)}: the cluster's first")
        return _mapping(groups[0].get("template")), shown
    head = _mapping(spec.get("headGroupSpec"))
    if not head:
        raise RefusedError(
            UntranslatableCode.NO_WORKER_GROUP, "the RayCluster has neither worker groups nor a head group"
        )
    notes.append("no worker group in the cluster: the head group's pod template is the workers' base")
    return _mapping(head.get("template")), None


def _ray_container(containers: list[dict[str, Any]]) -> int:
    for index, container in enumerate(containers):
        if container.get("name") in RAY_CONTAINER_NAMES:
            return index
    return 0


def _clean_metadata(values: object, *, label_values: bool) -> dict[str, str]:
    """Template labels or annotations without KubeRay's, Kueue's, JobSet's and the bridge's own keys;
    invalid keys dropped; label values sanitized."""
    out: dict[str, str] = {}
    for key, value in _mapping(values).items():
        if not isinstance(key, str) or len(key) > 316 or not _LABEL_KEY.fullmatch(key):
            continue
        if key.startswith(_RESERVED_PREFIXES) or not isinstance(value, str):
            continue
        bad_label = label_values and (len(value) > 63 or not _LABEL_VALUE.fullmatch(value))
        out[key] = _label_value(value) if bad_label else value
    return out


#: Keys under which a pod spec names an object of its own namespace.
_NAMESPACED_REFERENCES: Final = frozenset(
    {
        "secretKeyRef",
        "configMapKeyRef",
        "secretRef",
        "configMapRef",
        "secret",
        "configMap",
        "persistentVolumeClaim",
        "imagePullSecrets",
        "resourceClaims",
        "nodePublishSecretRef",
        "nodeStageSecretRef",
        "controllerPublishSecretRef",
        "controllerExpandSecretRef",
    }
)


def _references(value: object, path: str = "") -> Iterable[str]:
    if isinstance(value, Mapping):
        for key, item in value.items():
            if key in _NAMESPACED_REFERENCES and item:
                yield f"{path}.{key}".lstrip(".")
            else:
                yield from _references(item, f"{path}.{key}")
    elif isinstance(value, list):
        for item in value:
            yield from _references(item, f"{path}[]")


def _merge_named(base: list[Any], extra: Iterable[dict[str, Any]]) -> list[Any]:
    """``base`` with ``extra`` entries replacing those of the same ``name`` and appended otherwise."""
    extra = list(extra)
    names = {e["name"] for e in extra}
    return [b for b in base if not (isinstance(b, Mapping) and b.get("name") in names)] + extra


def _translate(
    *,
    rayjob: Mapping[str, Any],
    raycluster: Mapping[str, Any],
    spec: WorkloadMixingSpec,
    mixing_name: str,
    cluster_domain: str,
) -> Translation:
    ray = spec.ray
    if ray is None:
        raise RefusedError(UntranslatableCode.INVALID_CONFIG, "the WorkloadMixing has no spec.ray section")
    if len(cluster_domain) > 253 or not _DNS_SUBDOMAIN.fullmatch(cluster_domain):
        raise RefusedError(
            UntranslatableCode.INVALID_CONFIG, f"cluster domain {_show(cluster_domain)} is not valid"
        )
    namespace, name, uid = _identity(rayjob)
    notes: list[str] = []
    cluster = _cluster(rayjob, raycluster, namespace=namespace)

    gated_by = _annotation(rayjob, ANNOTATION_GATED_BY)
    if gated_by is not None and gated_by != mixing_name:
        raise RefusedError(
            UntranslatableCode.GATED_BY_OTHER,
            f"the RayJob was gated by WorkloadMixing {_show(gated_by)}, not {_show(mixing_name)}",
        )
    gate = gate_of(rayjob, ray.resource_prefix)
    if gate is None:
        raise RefusedError(
            UntranslatableCode.GATE_MISSING,
            f"the RayJob carries no bridge gate (annotation {ANNOTATION_GATE} matching one "
            f"{ray.resource_prefix}<token> key of spec.entrypointResources); "
            "re-create it so the webhook gates it",
        )
    notes.append(f"gate {gate}: the entrypoint waits for a node advertising it")

    workers = requested_workers(rayjob, ray=ray)
    resources = worker_resources(rayjob, ray=ray)
    size = worker_size(resources)
    check_entrypoint(rayjob, size=size)
    notes.append(
        f"{workers} worker(s) of {', '.join(f'{k}={v}' for k, v in resources.items())}"
        + (" (annotation)" if ANNOTATION_WORKERS in _annotations(rayjob) else " (workerDefaults)")
    )
    queue = target_queue(rayjob, ray=ray)
    notes.append(
        f"queue {queue.namespace}/{queue.local_queue}"
        + (f", priority class {queue.priority_class}" if queue.priority_class else "")
        + (f" (rule {queue.rule})" if queue.rule is not None else " (default)")
    )
    head_address = _head_address(raycluster, cluster=cluster, namespace=namespace, domain=cluster_domain)
    template, group = _worker_template(raycluster, wanted=ray.worker_template.worker_group, notes=notes)

    max_exec: int | None = None
    deadline = _mapping(rayjob.get("spec")).get("activeDeadlineSeconds")
    if isinstance(deadline, int) and not isinstance(deadline, bool) and 0 < deadline <= _INT32_MAX:
        max_exec = deadline
        notes.append(f"max-exec-time {deadline}s: the RayJob's activeDeadlineSeconds")

    pod = _pod_template(
        template,
        ray=ray,
        spec=spec,
        gate=gate,
        head_address=head_address,
        resources=resources,
        size=size,
        head=group is None,
        cross_namespace=queue.namespace != namespace,
        identity=_identity_labels(uid),
        annotations={
            ANNOTATION_RAY_JOB: f"{namespace}/{name}",
            ANNOTATION_RAY_CLUSTER: cluster,
            ANNOTATION_GATE: gate,
        },
        notes=notes,
    )
    jobset = jobset_name(namespace=namespace, name=name, uid=uid)
    identity = _identity_labels(uid)
    labels = {**_ray_free(spec.shared.labels), **identity, **queue.labels()}
    if max_exec is not None:
        labels[MAX_EXEC_TIME_LABEL] = str(max_exec)
    metadata: dict[str, Any] = {
        "name": jobset,
        "namespace": queue.namespace,
        "labels": labels,
        "annotations": {
            **spec.shared.annotations,
            ANNOTATION_RAY_JOB: f"{namespace}/{name}",
            ANNOTATION_RAY_CLUSTER: cluster,
            ANNOTATION_GATE: gate,
        },
    }
    if queue.namespace == namespace:
        api_version = rayjob.get("apiVersion")
        metadata["ownerReferences"] = [
            {
                "apiVersion": api_version if isinstance(api_version, str) and api_version else "ray.io/v1",
                "kind": "RayJob",
                "name": name,
                "uid": uid,
                # Not a controller: Kueue would take the JobSet for the child of a RayJob it manages.
                "controller": False,
                "blockOwnerDeletion": False,
            }
        ]
    else:
        notes.append(f"no owner reference: the JobSet lives in {queue.namespace}, the RayJob in {namespace}")
    manifest = {
        "apiVersion": JOBSET_API_VERSION,
        "kind": JOBSET_KIND,
        "metadata": metadata,
        "spec": {
            "suspend": True,
            # JobSet's webhook defaults, written out: the bridge must not depend on the webhook.
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "successPolicy": {"operator": "All"},
            "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
            "failurePolicy": {"maxRestarts": 0},
            "replicatedJobs": [
                {
                    "name": REPLICATED_JOB,
                    "replicas": 1,
                    "template": {
                        "metadata": {"labels": dict(identity)},
                        "spec": {
                            "parallelism": workers,
                            "completions": workers,
                            "completionMode": "Indexed",
                            "backoffLimit": 0,
                            "template": pod,
                        },
                    },
                }
            ],
        },
    }
    return Translation(
        name=jobset,
        namespace=queue.namespace,
        manifest=manifest,
        gate=gate,
        rayjob=f"{namespace}/{name}",
        ray_cluster=cluster,
        workers=workers,
        resources=resources,
        size=size,
        queue=queue,
        head_address=head_address,
        worker_group=group,
        notes=tuple(notes),
    )


def _identity_labels(uid: str) -> dict[str, str]:
    return {LABEL_RAY_JOB_UID: _label_value(uid), LABEL_MANAGED_BY: MANAGED_BY}


def _ray_free(values: Mapping[str, str]) -> dict[str, str]:
    # Shared labels may use any prefix but the bridge's and Kueue's: ray.io/ ones would let KubeRay adopt.
    return {k: v for k, v in values.items() if not k.startswith(_RAY_PREFIX)}


def _pod_template(
    template: Mapping[str, Any],
    *,
    ray: RaySpec,
    spec: WorkloadMixingSpec,
    gate: str,
    head_address: str,
    resources: dict[str, str],
    size: WorkerSize,
    head: bool,
    cross_namespace: bool,
    identity: dict[str, str],
    annotations: dict[str, str],
    notes: list[str],
) -> dict[str, Any]:
    overrides = ray.worker_template
    source = copy.deepcopy(dict(_mapping(template.get("spec"))))
    raw_containers = source.get("containers")
    containers = (
        [dict(c) for c in raw_containers if isinstance(c, Mapping)]
        if isinstance(raw_containers, list)
        else []
    )
    if not containers:
        raise RefusedError(
            UntranslatableCode.NO_RAY_CONTAINER,
            f"the RayCluster's {'head' if head else 'worker'} group template has no container",
        )
    if cross_namespace:
        source.pop("serviceAccountName", None)
        source.pop("serviceAccount", None)
        found = sorted(set(_references(source)))
        if found:
            raise RefusedError(
                UntranslatableCode.CROSS_NAMESPACE_REFERENCE,
                "the RayCluster's pod template names objects of its namespace "
                f"({_show(', '.join(found), 96)}) but the workers are queued in another one: "
                "map this namespace to a LocalQueue in it, or remove those references",
            )
    # Scheduling pins and identities that belong to KubeRay's pods, not to JobSet's.
    for key in ("nodeName", "hostname", "subdomain", "restartPolicy"):
        source.pop(key, None)
    index = _ray_container(containers)
    main = containers[index]
    notes.append(f"Ray container {_show(main.get('name', ''))}")

    argv = [
        "ray",
        "start",
        f"--address={head_address}",
        "--resources=" + json.dumps({gate: 1}, separators=(",", ":")),
        f"--num-cpus={size.num_cpus}",
    ]
    if size.memory_bytes is not None:
        argv.append(f"--memory={size.memory_bytes}")
    if size.num_gpus is not None:
        argv.append(f"--num-gpus={size.num_gpus}")
    argv.append("--labels=" + json.dumps({GATE_LABEL: gate}, separators=(",", ":")))
    argv += ["--block", *overrides.ray_start_args]
    main["command"] = [escape_dollars(a) for a in argv]
    main.pop("args", None)
    if overrides.image is not None:
        main["image"] = overrides.image
    env = main.get("env")
    kept_env = [
        e
        for e in (env if isinstance(env, list) else [])
        if not (isinstance(e, Mapping) and e.get("name") == _CLOUD_INSTANCE_ENV)
    ]
    configured = [e.model_dump(mode="json", by_alias=True, exclude_none=True) for e in overrides.env]
    configured = [e for e in configured if e["name"] != _CLOUD_INSTANCE_ENV]
    main["env"] = _merge_named(kept_env, configured)
    if not main["env"]:
        del main["env"]
    main["resources"] = {"requests": dict(resources), "limits": dict(resources)}
    if overrides.volume_mounts:
        mounts = main.get("volumeMounts")
        main["volumeMounts"] = _merge_named(
            mounts if isinstance(mounts, list) else [],
            (m.model_dump(mode="json", by_alias=True, exclude_none=True) for m in overrides.volume_mounts),
        )
    if overrides.security_context is not None:
        main["securityContext"] = dict(overrides.security_context)
    containers[index] = main
    source["containers"] = containers

    source["restartPolicy"] = "Never"
    if overrides.node_selector:
        selector = source.get("nodeSelector")
        source["nodeSelector"] = {**_mapping(selector), **overrides.node_selector}
    if overrides.tolerations:
        tolerations = source.get("tolerations")
        source["tolerations"] = [
            *(tolerations if isinstance(tolerations, list) else []),
            *map(dict, overrides.tolerations),
        ]
    if overrides.volumes:
        volumes = source.get("volumes")
        source["volumes"] = _merge_named(
            volumes if isinstance(volumes, list) else [],
            (v.model_dump(mode="json", by_alias=True, exclude_none=True) for v in overrides.volumes),
        )
    if overrides.service_account_name is not None:
        source["serviceAccountName"] = overrides.service_account_name
    if overrides.pod_security_context is not None:
        source["securityContext"] = dict(overrides.pod_security_context)
    if overrides.priority_class_name is not None:
        source["priorityClassName"] = overrides.priority_class_name

    meta = _mapping(template.get("metadata"))
    labels = {
        **_clean_metadata(meta.get("labels"), label_values=True),
        **_ray_free(spec.shared.labels),
        **identity,
    }
    pod_annotations = {
        **_clean_metadata(meta.get("annotations"), label_values=False),
        **spec.shared.annotations,
        **annotations,
    }
    return {"metadata": {"labels": labels, "annotations": pod_annotations}, "spec": source}
