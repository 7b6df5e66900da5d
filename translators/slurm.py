"""Slurm job + WorkloadMixing -> the suspended, Kueue-labelled JobSet that gives the job its nodes.

Why a pure function: this is where a user's request turns into capacity that Kueue charges against
the shared quota and into arguments that a program runs with. Keeping it free of I/O (nothing from
``bridge.runtime``, no clock, no randomness) makes every decision reproducible from the job and the
configuration alone, so the reconciler can re-translate on every pass (level-based), ``explain``
can show exactly what would be created, and the rules can be fuzzed without a cluster.

The rules, in short (docs/controller.md, "Translation", has the full table and the reasons):

- One slurmd pod per Slurm node: one replicated job ``slurmd`` with ``replicas: 1`` and
  ``parallelism = completions = N`` (Indexed), so Kueue's podSet count is exactly N.
- Each pod's slurmd registers as the dynamic node ``b<job id>-<completion index>``; the name
  reaches slurmd through Kubernetes' own ``$(VAR)`` expansion of an env var that a ``fieldRef``
  fills from the pod's completion-index annotation. No shell anywhere.
- The node is sized for the job (CPUs, RealMemory in MB, Gres) and carries the partition's
  Nodeset feature, the job's own feature ``bridge-job-<id>`` and the job's ``-C`` features; the pod
  requests that size plus the configured overhead (requests == limits).
- Kueue labels: queue and priority from the mapping rules, ``max-exec-time-seconds`` from the time
  limit plus a grace; topology annotations from the partition or ``--switches=1``.
- The JobSet records a fingerprint of what of the job shaped it (:func:`shape_fingerprint`), so the
  reconciler can tell a held job its user changed since from one the bridge's own writes changed.
- Jobs that cannot be served get an :class:`Untranslatable` with a human reason and a
  machine-readable code, never an exception and never a partial manifest.

Everything the job controls (name, user, account, partition, features, GRES names) is validated or
sanitized before it reaches a label, an annotation or an argument: a Slurm feature goes into
slurmd's ``--conf`` string, which slurmd parses itself, and any ``$(...)`` in an argument would be
expanded by the kubelet.
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from bridge.api.mixing import (
    QueueTarget,
    SlurmSpec,
    TopologyConstraint,
    WorkloadMixingSpec,
    resolve_gres,
    resolve_slurm_mapping,
    resolve_slurm_topology,
)
from bridge.api.slurm_job import Gres, SlurmJob

__all__ = [
    "ANNOTATION_ACCOUNT",
    "ANNOTATION_FEATURE",
    "ANNOTATION_HOLDS_MARKED",
    "ANNOTATION_JOB_NAME",
    "ANNOTATION_NODES",
    "ANNOTATION_SHAPE",
    "ANNOTATION_USER",
    "DEFAULT_OPTIONS",
    "ENV_NODE_INDEX",
    "ENV_NODE_NAME",
    "FINALIZER",
    "JOBSET_API_VERSION",
    "JOBSET_KIND",
    "JOB_FEATURE_PREFIX",
    "LABEL_CLUSTER",
    "LABEL_JOB_ID",
    "LABEL_MANAGED_BY",
    "LABEL_PARTITION",
    "LABEL_RUN",
    "MAX_JOBSET_NAME_LENGTH",
    "NODE_NAME_PREFIX",
    "REPLICATED_JOB",
    "SHAPE_PREFIX",
    "SLURMD_ENTRY",
    "SLURMD_ENTRY_NAME",
    "NodeShape",
    "Translation",
    "TranslationOptions",
    "Untranslatable",
    "UntranslatableCode",
    "is_own_node_name",
    "job_feature",
    "job_selector",
    "jobset_name",
    "node_name",
    "node_name_job_id",
    "node_names",
    "shape_fingerprint",
    "translate",
]

JOBSET_API_VERSION: Final = "jobset.x-k8s.io/v1alpha2"
JOBSET_KIND: Final = "JobSet"

#: The bridge's own label/annotation prefix. WorkloadMixing refuses shared labels under it, so a
#: site's labels can neither forge nor override the ones below.
_PREFIX: Final = "bridge.k8s-bridge.io/"
LABEL_CLUSTER: Final = _PREFIX + "slurm-cluster"
LABEL_JOB_ID: Final = _PREFIX + "slurm-job-id"
LABEL_PARTITION: Final = _PREFIX + "slurm-partition"
#: On the slurmd pods: the run of the job their JobSet was made for (Slurm's restart count then),
#: which their node names carry (:func:`node_name`).
LABEL_RUN: Final = _PREFIX + "slurm-run"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
ANNOTATION_JOB_NAME: Final = _PREFIX + "slurm-job-name"
ANNOTATION_USER: Final = _PREFIX + "slurm-user"
ANNOTATION_ACCOUNT: Final = _PREFIX + "slurm-account"
ANNOTATION_NODES: Final = _PREFIX + "slurm-nodes"
ANNOTATION_FEATURE: Final = _PREFIX + "slurm-feature"
#: The job's :func:`shape_fingerprint` when its JobSet was made: the reconciler replaces a held job's
#: JobSet whose value differs from the job's current one (the user changed the job since).
ANNOTATION_SHAPE: Final = _PREFIX + "slurm-job-shape"
#: Present on the JobSets of a bridge that marks its holds of the job in its admin comment: an admin
#: hold without that mark is then an administrator's. A JobSet without it (an older bridge) vouches for
#: its job's unmarked admin hold as the bridge's own.
ANNOTATION_HOLDS_MARKED: Final = _PREFIX + "slurm-holds-marked"
#: Starts every :func:`shape_fingerprint`; a new definition of the fingerprint gets a new prefix, and
#: a recorded value with another prefix (or none) is never compared, so that a bridge upgrade does
#: not replace every queued JobSet.
SHAPE_PREFIX: Final = "v1-"
#: On every bridged JobSet from its creation: the reconciler removes it only once the job's Slurm
#: nodes are deleted, so a JobSet deleted by hand cannot leak nodes.
FINALIZER: Final = _PREFIX + "slurm-nodes"

_KUEUE_QUEUE: Final = "kueue.x-k8s.io/queue-name"
_KUEUE_MAX_EXEC: Final = "kueue.x-k8s.io/max-exec-time-seconds"
_COMPLETION_INDEX_ANNOTATION: Final = "batch.kubernetes.io/job-completion-index"

#: The one replicated job; also the name of the Kueue podSet.
REPLICATED_JOB: Final = "slurmd"
NODE_NAME_PREFIX: Final = "b"
JOB_FEATURE_PREFIX: Final = "bridge-job-"
ENV_NODE_INDEX: Final = "K8S_BRIDGE_NODE_INDEX"
ENV_NODE_NAME: Final = "K8S_BRIDGE_NODE_NAME"
#: Env names a configured pod template may not set: the bridge's own, and SLURM_JWT (with it in its
#: environment slurmd loads only auth/jwt and every job launch fails; reference/slurm.md).
_RESERVED_ENV: Final = frozenset({ENV_NODE_INDEX, ENV_NODE_NAME, "SLURM_JWT"})

_MAX_NODES_HARD: Final = 4096  # SlurmLimits.max_nodes_per_job's own upper bound
#: JobSet validates that ``<jobset>-<rjob>-<job idx>-<pod idx>-<5 random>`` is a DNS-1035 label.
MAX_JOBSET_NAME_LENGTH: Final = (
    63 - len(f"-{REPLICATED_JOB}-0-") - len(str(_MAX_NODES_HARD - 1)) - len("-abcde")
)

_FEATURE_RE: Final = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_GRES_PART_RE: Final = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_MAX_FEATURES: Final = 32
_INT32_MAX: Final = 2**31 - 1


# --- results -----------------------------------------------------------------------------------


class UntranslatableCode(enum.StrEnum):
    """Why a job cannot be served; CamelCase so it can be an Event reason as is."""

    NO_NODES = "NoNodes"
    TOO_MANY_NODES = "TooManyNodes"
    NODE_TOO_LARGE = "NodeTooLarge"
    INCONSISTENT_REQUEST = "InconsistentRequest"
    UNMAPPED_GRES = "UnmappedGres"
    UNSUPPORTED_GRES = "UnsupportedGres"
    UNSUPPORTED_FEATURES = "UnsupportedFeatures"
    REQUIRED_NODES = "RequiredNodes"
    HETEROGENEOUS_JOB = "HeterogeneousJob"
    JOB_ARRAY = "JobArray"
    UNKNOWN_PARTITION = "UnknownPartition"
    INVALID_CONFIG = "InvalidConfig"


@dataclass(frozen=True, kw_only=True)
class Untranslatable:
    """A job the bridge will not serve: it stays held and ``reason`` goes into its Slurm comment."""

    job_id: int
    code: UntranslatableCode
    reason: str
    """One human sentence, ASCII, no job-controlled text unescaped."""

    def __str__(self) -> str:
        return f"job {self.job_id} cannot be bridged ({self.code}): {self.reason}"


@dataclass(frozen=True, kw_only=True)
class NodeShape:
    """What each of the job's dynamic Slurm nodes offers (and its pod asks Kubernetes for)."""

    cpus: int
    memory_mb: int
    gres: tuple[tuple[str, str | None, int], ...]
    """(name, type, count) per node, as slurmd's ``Gres=`` wants them."""
    features: tuple[str, ...]
    """All node features: the partition Nodeset's, the job's own, then the job's ``-C`` ones."""

    def conf(self) -> str:
        """The ``slurmd --conf`` value: one argv element, only characters validated here."""
        parts = [f"CPUs={self.cpus}", f"RealMemory={self.memory_mb}"]
        if self.gres:
            parts.append("Gres=" + ",".join(f"{n}:{t}:{c}" if t else f"{n}:{c}" for n, t, c in self.gres))
        parts.append("Feature=" + ",".join(self.features))
        return " ".join(parts)


@dataclass(frozen=True, kw_only=True)
class Translation:
    """A servable job: the JobSet to create and the facts the reconciler pins and checks with."""

    job_id: int
    name: str
    namespace: str
    manifest: dict[str, Any]
    node_names: tuple[str, ...]
    """The Slurm node names the pods register as, in completion-index order."""
    feature: str
    """The per-job node feature (``bridge-job-<id>``)."""
    constraints: str
    """What to pin the job's ``constraints`` to on release: the job feature AND-ed with the job's
    own ``-C`` features, so a requeue-held job translates to the same JobSet again."""
    node: NodeShape
    requests: dict[str, str]
    """Each pod's requests (and limits): the node's size plus the configured overhead."""
    queue: QueueTarget
    partition: str
    """The bridged partition the job was matched in."""
    topology: TopologyConstraint | None
    max_exec_time_seconds: int | None
    shape: str = ""
    """The job's :func:`shape_fingerprint`, recorded on the JobSet (``ANNOTATION_SHAPE``)."""
    notes: tuple[str, ...] = field(default=())
    """Why each choice was made, one line each (for ``explain``)."""


@dataclass(frozen=True, kw_only=True)
class TranslationOptions:
    """Bounds and defaults that WorkloadMixing does not (yet) carry.

    The bounds exist so that an absurd request (``--mem=10T``, ``-c 100000``) gets a clear reason on
    the job instead of a JobSet that no ClusterQueue can ever admit.
    """

    max_cpus_per_node: int = 1024
    max_memory_mb_per_node: int = 4 * 1024 * 1024  # 4 TiB
    max_gres_per_node: int = 1024
    """Per GRES name:type (GPU, MPS shares, ...)."""
    default_memory_mb_per_cpu: int = 1024
    """Memory per CPU of a job that asks for none (``--mem=0`` or no memory option at all)."""
    exec_time_grace_seconds: int = 300
    """Added to the job's time limit for ``max-exec-time-seconds``: Kueue counts from admission,
    Slurm from the job's start; the pods must start and register in between."""
    backoff_limit: int = 3
    """Restarts of a crashing slurmd (in place: same pod, same node name) before the JobSet fails."""


DEFAULT_OPTIONS: Final = TranslationOptions()


# --- names -------------------------------------------------------------------------------------


def _short_hash(text: str, length: int = 6) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:length]


def jobset_name(cluster: str, job_id: int, *, run: int = 0) -> str:
    """The JobSet of a Slurm job: ``slurm-<cluster>-<job id>``, with ``-r<run>`` for a later run (see
    :func:`node_name`), a DNS-1035 label short enough for JobSet's generated Job and pod names.

    A later run's JobSet never shares the name of the one before: a copy of that one still in a
    MultiKueue worker that could not be told (lost while the job was requeued) is not taken for the
    new one's, which MultiKueue would otherwise adopt in its place.

    Total over any ``cluster`` string and deterministic. When the cluster name had to be changed
    (upper case, ``_``, anything outside ``[a-z0-9-]``) or shortened, a hash of the original is
    inserted, so two clusters never share a name: ``slurm-<cluster, cleaned and cut>-<hash>-<id>``.
    """
    tail = f"-{job_id}" + (f"-r{run}" if run else "")
    cleaned = re.sub(r"[^a-z0-9-]+", "-", cluster.lower()).strip("-")
    cleaned = re.sub(r"-{2,}", "-", cleaned)
    simple = f"slurm-{cleaned}{tail}" if cleaned else ""
    if cleaned and cleaned == cluster and len(simple) <= MAX_JOBSET_NAME_LENGTH:
        return simple
    digest = _short_hash(cluster)
    room = MAX_JOBSET_NAME_LENGTH - len("slurm-") - len(digest) - len(tail) - 1
    head = cleaned[: max(room, 0)].strip("-")
    return f"slurm-{head}-{digest}{tail}" if head else f"slurm-{digest}{tail}"


def node_name(job_id: int, index: int | str, *, run: int = 0) -> str:
    """The Slurm node name of the job's pod with completion index ``index`` (or the reference to
    the index that the pod's environment expands): ``b<id>-<index>`` in the job's first run,
    ``b<id>r<run>-<index>`` in a later one (``run``: Slurm's restart count when the JobSet was made).

    A requeued job's new nodes never take the names of the previous run's: slurmctld keeps sending
    what it had for those (the previous run's termination) until a node of that name answers, and a
    new slurmd of the same name would take it for the new run's and refuse to launch it."""
    return f"{NODE_NAME_PREFIX}{job_id}" + (f"r{run}" if run else "") + f"-{index}"


def node_names(job: SlurmJob) -> list[str]:
    """The Slurm node names a JobSet made for the job now registers, in index order (empty without
    a node count)."""
    count = job.node_count or 0
    if count > _MAX_NODES_HARD:
        return []
    return [node_name(job.job_id, i, run=job.restart_count) for i in range(count)]


_NODE_NAME: Final = re.compile(
    rf"^{re.escape(NODE_NAME_PREFIX)}([0-9]{{1,12}})(?:r[0-9]{{1,9}})?-[0-9]{{1,6}}$"
)


def node_name_job_id(name: str) -> int | None:
    """The job whose node ``name`` is, by its form alone (:func:`node_name`, any run); None if it has
    not that form."""
    match = _NODE_NAME.match(name)
    return int(match.group(1)) if match is not None else None


def is_own_node_name(job_id: int, name: str) -> bool:
    """``name`` is a node name of the job, of any of its runs (:func:`node_name`)."""
    return node_name_job_id(name) == job_id


def job_feature(job_id: int) -> str:
    """The node feature only this job's nodes carry, and that the job is pinned to."""
    return f"{JOB_FEATURE_PREFIX}{job_id}"


def _label_value(text: str) -> str:
    """Any string as a valid label value: characters outside ``[A-Za-z0-9_.-]`` become ``_``, cut to
    63, non-alphanumeric ends trimmed. For information only (not unique)."""
    value = re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)


def _annotation_text(text: str, limit: int = 256) -> str:
    """A job-controlled string made inert for an annotation: printable ASCII without quotes, ``$``,
    backslashes or backquotes (each replaced by ``_``), cut to ``limit``."""
    return re.sub(r"[^A-Za-z0-9_.,:@+=/ -]", "_", text[:limit])


def job_selector(cluster: str, job_id: int) -> str:
    """Label selector of the JobSet and pods of one Slurm job."""
    return f"{LABEL_CLUSTER}={_label_value(cluster)},{LABEL_JOB_ID}={job_id}"


def _show(text: str, limit: int = 48) -> str:
    # Job-controlled text inside a reason: escaped (ascii) and cut, so a reason stays one clean line.
    cut = text if len(text) <= limit else text[:limit] + "..."
    return ascii(cut)


# --- the job's shape ---------------------------------------------------------------------------


def _gres_key(entries: Iterable[Gres]) -> list[list[Any]]:
    return sorted([g.name, g.type or "", g.count] for g in entries)


def shape_fingerprint(job: SlurmJob) -> str:
    """A digest of what of ``job`` shapes its JobSet: equal for the same request, different when its
    user changes one of them (``scontrol update``), recorded on the JobSet (``ANNOTATION_SHAPE``).

    Why the job and not the manifest: a JobSet is replaced when its job changed, and only then. A new
    bridge version or a WorkloadMixing change (image, overhead, mapping rules) changes manifests, not
    jobs; replacing every queued JobSet for it would put them all at the back of Kueue's queue.

    In it, each as the translation reads it: the partitions (as a set: Slurm puts the one a job ran
    in first, and a requeue-hold keeps that order), account and QoS (mapping rule, queue, priority),
    the minimum node count (the pods), the CPUs per node and ``--cpus-per-gpu``, the three memory
    options, the GRES per node, job, task (with the tasks per node it multiplies) and socket, the
    ``-C`` features (as a set, without the job's own ``bridge-job-<id>``, which the release adds),
    the required nodes other than the job's own (the release pins those) and the excluded ones
    (both decide whether the job can be served), ``--switches`` (topology) and the time limit
    (``max-exec-time-seconds``).

    Left out: the job id (the JobSet's identity), name, user and comment (informational annotations,
    or free text), the hold, priority, state and restart count (the bridge's and Slurm's own
    changes), the maximum node count (only the minimum is served), ``--exclusive``,
    ``--contiguous`` and ``--prefer`` (nothing is served differently for them), and whether it is
    an array or heterogeneous job (fixed at submission, and refused anyway).
    """
    own_feature = job_feature(job.job_id)
    tasks_per_node: int | None = None
    if job.gres_per_task:
        count = max(job.node_count or 1, 1)
        tasks_per_node = job.tasks_per_node or (_per_node(job.tasks, nodes=count) if job.tasks else 1)
    shape: dict[str, Any] = {
        "partitions": sorted(set(job.partitions)),
        "account": job.account,
        "qos": job.qos,
        "nodes": job.node_count,
        "cpus_per_node": job.cpus_per_node,
        "cpus_per_gpu": job.cpus_per_gpu,
        "memory_mb": [job.memory_per_node_mb, job.memory_per_cpu_mb, job.memory_per_gpu_mb],
        "gres": {
            "node": _gres_key(job.gres_per_node),
            "job": _gres_key(job.gres_per_job),
            "task": _gres_key(job.gres_per_task),
            "socket": _gres_key(job.gres_per_socket),
            "tasks_per_node": tasks_per_node,
        },
        "features": sorted({w.strip() for w in job.features.split("&")} - {"", own_feature}),
        "required_nodes": sorted({n for n in job.required_nodes if not is_own_node_name(job.job_id, n)}),
        "excluded_nodes": sorted(set(job.excluded_nodes)),
        "switches": job.switches,
        "time_limit_minutes": job.time_limit_minutes,
    }
    text = json.dumps(shape, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return SHAPE_PREFIX + _short_hash(text, 16)


# --- quantities --------------------------------------------------------------------------------

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1)}
_DECIMAL |= {"k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12)}
_DECIMAL |= {"P": Decimal(10**15), "E": Decimal(10**18)}
_QUANTITY_RE: Final = re.compile(
    r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$"
)


def _quantity(text: str) -> Decimal:
    """A Kubernetes quantity's value (WorkloadMixing already validated its shape)."""
    match = _QUANTITY_RE.match(text.strip())
    if match is None:
        raise ValueError(f"not a quantity: {text!r}")
    number, suffix = Decimal(match.group(1)), match.group(2) or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number * _DECIMAL[suffix]
    return number * (Decimal(10) ** int(suffix[1:]))


def _format_quantity(resource: str, value: Decimal) -> str:
    if resource == "cpu":
        millis = math.ceil(value * 1000)
        return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        whole = math.ceil(value)
        return f"{whole // 2**20}Mi" if whole % 2**20 == 0 else str(whole)
    if value == value.to_integral_value():
        return str(int(value))
    millis = math.ceil(value * 1000)
    return f"{millis}m"


# --- the translation ---------------------------------------------------------------------------


class _RefusedError(Exception):
    """Raised inside the translation, turned into an Untranslatable at its edge."""

    def __init__(self, code: UntranslatableCode, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def translate(
    job: SlurmJob,
    spec: WorkloadMixingSpec,
    *,
    cluster: str | None = None,
    options: TranslationOptions = DEFAULT_OPTIONS,
) -> Translation | Untranslatable:
    """The JobSet that serves ``job``, or why there is none.

    ``cluster`` defaults to ``spec.slurm.clusterName``. Whether the job is held, pending or already
    bridged is not this function's question: it answers "what would serve this job", the same way
    every time, and the reconciler compares that with what exists.
    """
    try:
        return _translate(job, spec, cluster=cluster, options=options)
    except _RefusedError as refusal:
        return Untranslatable(job_id=job.job_id, code=refusal.code, reason=refusal.reason)


def _translate(
    job: SlurmJob, spec: WorkloadMixingSpec, *, cluster: str | None, options: TranslationOptions
) -> Translation:
    slurm = spec.slurm
    if slurm is None:
        raise _RefusedError(UntranslatableCode.INVALID_CONFIG, "the WorkloadMixing has no spec.slurm section")
    cluster_name = slurm.cluster_name if cluster is None else cluster
    notes: list[str] = []

    # Shapes the bridge does not serve at all, before anything is computed from them.
    if job.is_het:
        raise _RefusedError(
            UntranslatableCode.HETEROGENEOUS_JOB,
            "heterogeneous jobs are not bridged: their components would need separate JobSets that Kueue "
            "admits independently, while Slurm must start them together",
        )
    if job.is_array:
        raise _RefusedError(
            UntranslatableCode.JOB_ARRAY,
            "job arrays are not bridged: releasing a held array releases all its tasks onto one job's "
            "nodes; submit the tasks as separate jobs",
        )
    partition = _partition(job, slurm)
    notes.append(f"partition {partition}: bridged")

    count = job.node_count
    if not count or count < 1:
        raise _RefusedError(UntranslatableCode.NO_NODES, "the job asks for 0 nodes")
    limit = slurm.limits.max_nodes_per_job
    if count > limit:
        raise _RefusedError(
            UntranslatableCode.TOO_MANY_NODES,
            f"the job asks for {count} nodes; at most {limit} per job are bridged (spec.slurm.limits)",
        )
    notes.append(
        f"{count} node(s): one slurmd pod each"
        + (f" (the minimum of -N {count}-{job.max_nodes})" if job.max_nodes and job.max_nodes > count else "")
    )
    run = job.restart_count
    names = tuple(node_name(job.job_id, i, run=run) for i in range(count))
    _check_required_nodes(job, names)

    feature = job_feature(job.job_id)
    user_features = _user_features(job)
    features = _unique([slurm.node_feature, feature, *user_features])
    if user_features:
        notes.append("-C features advertised by the job's nodes: " + ",".join(user_features))
    gres, resources = _gres(job, spec, count=count, options=options)
    cpus = _cpus(job, gres=gres, options=options)
    memory_mb, memory_note = _memory(job, cpus=cpus, gres=gres, options=options)
    notes.append(f"{cpus} CPU(s) and {memory_mb} MB per node ({memory_note})")
    node = NodeShape(cpus=cpus, memory_mb=memory_mb, gres=gres, features=features)
    if job.exclusive or job.exclusive_user:
        notes.append("--exclusive: met by construction, the nodes exist for this job alone")

    requests = _requests(
        cpus=cpus, memory_mb=memory_mb, extended=resources, overhead=slurm.pod_template.overhead
    )
    queue = resolve_slurm_mapping(spec, partition=partition, account=job.account or None, qos=job.qos or None)
    notes.append(
        f"queue {queue.namespace}/{queue.local_queue}"
        + (f", priority class {queue.priority_class}" if queue.priority_class else "")
        + (f" (rule {queue.rule})" if queue.rule is not None else " (default)")
    )
    topology = resolve_slurm_topology(spec, partition=partition, switches=job.switches)
    if topology is not None:
        notes.append(f"topology {'required' if topology.required else 'preferred'}: {topology.level}")
    max_exec = _max_exec_time(job, options=options)
    if max_exec is not None:
        notes.append(f"max-exec-time {max_exec}s: time limit {job.time_limit_minutes} min + grace")

    name = jobset_name(cluster_name, job.job_id, run=run)
    shape = shape_fingerprint(job)
    manifest = _manifest(
        job=job,
        spec=spec,
        slurm=slurm,
        name=name,
        cluster=cluster_name,
        partition=partition,
        queue=queue,
        topology=topology,
        max_exec=max_exec,
        node=node,
        names=names,
        feature=feature,
        requests=requests,
        shape=shape,
        options=options,
    )
    return Translation(
        job_id=job.job_id,
        name=name,
        namespace=queue.namespace,
        manifest=manifest,
        node_names=names,
        feature=feature,
        constraints="&".join([feature, *user_features]),
        node=node,
        requests=requests,
        queue=queue,
        partition=partition,
        topology=topology,
        max_exec_time_seconds=max_exec,
        shape=shape,
        notes=tuple(notes),
    )


def _unique(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(values))


def _partition(job: SlurmJob, slurm: SlurmSpec) -> str:
    # A pending job may name several partitions; the first bridged one (in the job's order) decides
    # its mapping. Pinned to bridge nodes, it can only run there.
    for partition in job.partitions:
        if partition in slurm.partitions:
            return partition
    raise _RefusedError(
        UntranslatableCode.UNKNOWN_PARTITION,
        f"partition {_show(job.partition)} is not bridged (bridged: {', '.join(slurm.partitions)})",
    )


def _check_required_nodes(job: SlurmJob, names: tuple[str, ...]) -> None:
    # The bridge's own pin survives a requeue-hold (required nodes kept, of this run or an earlier
    # one): those are fine. Nodes the user asked for (-w) cannot be honoured, and excluding the job's
    # own nodes (-x) cannot be run.
    foreign = [n for n in job.required_nodes if n not in names and not is_own_node_name(job.job_id, n)]
    if foreign:
        raise _RefusedError(
            UntranslatableCode.REQUIRED_NODES,
            f"the job requires specific nodes ({_show(','.join(foreign))}); bridged jobs run on nodes "
            "created for them",
        )
    excluded = [n for n in job.excluded_nodes if n in names]
    if excluded:
        raise _RefusedError(
            UntranslatableCode.REQUIRED_NODES,
            f"the job excludes its own bridge nodes ({_show(','.join(excluded))})",
        )


def _user_features(job: SlurmJob) -> tuple[str, ...]:
    """The job's ``-C`` as plain features: only an AND-list of ``[A-Za-z0-9_.-]`` words is served.

    The words go into slurmd's ``--conf`` (parsed by slurmd) and the pin constraint, so nothing else
    may pass. ``bridge-job-<id>`` of this job is the bridge's own pin, kept by a requeue-hold: it is
    dropped here (it is added anyway); another job's feature would make these nodes look like that
    job's nodes, so it is refused.
    """
    text = job.features.strip()
    if not text:
        return ()
    words = [w.strip() for w in text.split("&")]
    bad = [w for w in words if not _FEATURE_RE.fullmatch(w)]
    if bad:
        raise _RefusedError(
            UntranslatableCode.UNSUPPORTED_FEATURES,
            f"constraint {_show(text)} is not an AND-list (a&b) of plain features [A-Za-z0-9_.-]; "
            "OR, counts, brackets and NOT cannot be served by nodes made for one job",
        )
    own = job_feature(job.job_id)
    foreign = [w for w in words if w.startswith(JOB_FEATURE_PREFIX) and w != own]
    if foreign:
        raise _RefusedError(
            UntranslatableCode.UNSUPPORTED_FEATURES,
            f"feature {_show(foreign[0])} is reserved for the bridge's per-job features",
        )
    result = _unique(w for w in words if w != own)
    if len(result) > _MAX_FEATURES:
        raise _RefusedError(
            UntranslatableCode.UNSUPPORTED_FEATURES,
            f"the job asks for {len(result)} features; at most {_MAX_FEATURES} are served",
        )
    return result


def _per_node(count: int, *, nodes: int) -> int:
    return -(-count // nodes)


def _gres(
    job: SlurmJob, spec: WorkloadMixingSpec, *, count: int, options: TranslationOptions
) -> tuple[tuple[tuple[str, str | None, int], ...], dict[str, int]]:
    """GRES per node ((name, type, count), sorted) and the Kubernetes resources they map to."""
    if job.gres_per_socket:
        raise _RefusedError(
            UntranslatableCode.UNSUPPORTED_GRES,
            "GRES per socket (--gpus-per-socket) cannot be served: bridge nodes declare no socket layout",
        )
    tasks_per_node = job.tasks_per_node or (_per_node(job.tasks, nodes=count) if job.tasks else 1)
    wanted: dict[tuple[str, str | None], int] = {}

    def need(entries: Iterable[Gres], per_node: Callable[[int], int]) -> None:
        for g in entries:
            key = (g.name, g.type)
            wanted[key] = max(wanted.get(key, 0), per_node(g.count))

    need(job.gres_per_node, lambda c: c)
    need(job.gres_per_job, lambda c: _per_node(c, nodes=count))
    need(job.gres_per_task, lambda c: c * tasks_per_node)

    resources: dict[str, int] = {}
    out: list[tuple[str, str | None, int]] = []
    for (name, gres_type), per_node in sorted(wanted.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        if per_node <= 0:
            continue
        if not _GRES_PART_RE.fullmatch(name) or (
            gres_type is not None and not _GRES_PART_RE.fullmatch(gres_type)
        ):
            raise _RefusedError(
                UntranslatableCode.UNSUPPORTED_GRES, f"GRES {_show(name)} has an unusable name"
            )
        label = f"{name}:{gres_type}" if gres_type else name
        if per_node > options.max_gres_per_node:
            raise _RefusedError(
                UntranslatableCode.NODE_TOO_LARGE,
                f"the job asks for {per_node} {label} per node; "
                f"at most {options.max_gres_per_node} are served",
            )
        resource = resolve_gres(spec, name=name, gres_type=gres_type)
        if resource is None:
            raise _RefusedError(
                UntranslatableCode.UNMAPPED_GRES,
                f"GRES {label} has no Kubernetes resource (spec.slurm.gres maps: "
                f"{', '.join(sorted(spec.slurm.gres)) if spec.slurm else ''})",
            )
        resources[resource] = resources.get(resource, 0) + per_node
        out.append((name, gres_type, per_node))
    return tuple(out), resources


def _gpus(gres: tuple[tuple[str, str | None, int], ...]) -> int:
    return sum(c for n, _, c in gres if n == "gpu")


def _cpus(
    job: SlurmJob, *, gres: tuple[tuple[str, str | None, int], ...], options: TranslationOptions
) -> int:
    cpus = job.cpus_per_node or 1
    if job.cpus_per_gpu:
        cpus = max(cpus, job.cpus_per_gpu * _gpus(gres))
    if cpus > options.max_cpus_per_node:
        raise _RefusedError(
            UntranslatableCode.NODE_TOO_LARGE,
            f"the job asks for {cpus} CPUs per node; at most {options.max_cpus_per_node} are served",
        )
    return cpus


def _memory(
    job: SlurmJob, *, cpus: int, gres: tuple[tuple[str, str | None, int], ...], options: TranslationOptions
) -> tuple[int, str]:
    if job.memory_per_node_mb is not None:
        memory, note = job.memory_per_node_mb, "--mem"
    elif job.memory_per_cpu_mb is not None:
        memory, note = job.memory_per_cpu_mb * cpus, f"--mem-per-cpu={job.memory_per_cpu_mb} x {cpus}"
    elif job.memory_per_gpu_mb is not None:
        gpus = _gpus(gres)
        if not gpus:
            raise _RefusedError(
                UntranslatableCode.INCONSISTENT_REQUEST, "the job asks for memory per GPU but for no GPUs"
            )
        memory, note = job.memory_per_gpu_mb * gpus, f"--mem-per-gpu={job.memory_per_gpu_mb} x {gpus}"
    else:
        memory = options.default_memory_mb_per_cpu * cpus
        note = (
            f"no memory size (--mem=0 or none): {options.default_memory_mb_per_cpu} MB x {cpus} CPUs, "
            "all of it the job's"
        )
    if memory > options.max_memory_mb_per_node:
        raise _RefusedError(
            UntranslatableCode.NODE_TOO_LARGE,
            f"the job asks for {memory} MB of memory per node; at most {options.max_memory_mb_per_node} MB "
            "are served",
        )
    return max(memory, 1), note


def _requests(
    *, cpus: int, memory_mb: int, extended: Mapping[str, int], overhead: Mapping[str, str]
) -> dict[str, str]:
    values: dict[str, Decimal] = {"cpu": Decimal(cpus), "memory": Decimal(memory_mb) * 2**20}
    for resource, amount in extended.items():
        values[resource] = values.get(resource, Decimal(0)) + amount
    for resource, quantity in overhead.items():
        try:
            extra = _quantity(quantity)
        except (ValueError, InvalidOperation) as exc:
            raise _RefusedError(
                UntranslatableCode.INVALID_CONFIG,
                f"spec.slurm.podTemplate.overhead.{resource} is not a quantity",
            ) from exc
        values[resource] = values.get(resource, Decimal(0)) + extra
    return {resource: _format_quantity(resource, value) for resource, value in sorted(values.items())}


def _max_exec_time(job: SlurmJob, *, options: TranslationOptions) -> int | None:
    # Slurm's 0 and INFINITE both mean "no limit" (sbatch -t 0 imposes none).
    seconds = job.time_limit_seconds
    if not seconds or seconds < 0:
        return None
    total = seconds + options.exec_time_grace_seconds
    return total if total <= _INT32_MAX else None


# --- the manifest ------------------------------------------------------------------------------


SLURMD_ENTRY: Final = (
    'trap \'kill -TERM "$child" 2>/dev/null; wait "$child"; exit 143\' TERM INT\n'
    '"$@" &\n'
    "child=$!\n"
    'wait "$child"\n'
)
"""The slurmd container's ``/bin/sh -c`` script: runs the configured command and slurmd's arguments
(``"$@"``: every argument one word, never parsed by the shell) and, when the pod is stopped, passes
the signal on and exits 143. slurmd itself exits 0 on SIGTERM, which made a Job count a lost node's
index as Succeeded; a node stopped under its job is not a success. slurmd's own exit status is kept
otherwise (a slurmd ended by Slurm, such as after its node was deleted, has done its work). The text
is fixed: no job field is in it, and it holds no ``$(`` or ``$$`` that Kubernetes would expand."""
SLURMD_ENTRY_NAME: Final = "k8s-bridge-slurmd"
"""``$0`` of :data:`SLURMD_ENTRY` (what ``ps`` shows for the shell)."""


def _env(slurm: SlurmSpec, *, job_id: int, run: int) -> list[dict[str, Any]]:
    configured = [e.model_dump(mode="json", by_alias=True, exclude_none=True) for e in slurm.pod_template.env]
    clashing = sorted({e["name"] for e in configured} & _RESERVED_ENV)
    if clashing:
        raise _RefusedError(
            UntranslatableCode.INVALID_CONFIG,
            f"spec.slurm.podTemplate.env sets {', '.join(clashing)}, which the bridge reserves",
        )
    own: list[dict[str, Any]] = [
        {
            "name": ENV_NODE_INDEX,
            "valueFrom": {
                "fieldRef": {"fieldPath": f"metadata.annotations['{_COMPLETION_INDEX_ANNOTATION}']"}
            },
        },
        # Kubernetes expands $(VAR) of earlier variables in values, command and args: no shell.
        {"name": ENV_NODE_NAME, "value": node_name(job_id, f"$({ENV_NODE_INDEX})", run=run)},
    ]
    return own + configured


def _manifest(
    *,
    job: SlurmJob,
    spec: WorkloadMixingSpec,
    slurm: SlurmSpec,
    name: str,
    cluster: str,
    partition: str,
    queue: QueueTarget,
    topology: TopologyConstraint | None,
    max_exec: int | None,
    node: NodeShape,
    names: tuple[str, ...],
    feature: str,
    requests: dict[str, str],
    shape: str,
    options: TranslationOptions,
) -> dict[str, Any]:
    template = slurm.pod_template
    shared = spec.shared
    identity = {
        LABEL_CLUSTER: _label_value(cluster),
        LABEL_JOB_ID: str(job.job_id),
        LABEL_MANAGED_BY: "k8s-bridge",
    }
    run_label = {LABEL_RUN: str(job.restart_count)} if job.restart_count else {}
    labels = {**shared.labels, **identity, LABEL_PARTITION: _label_value(partition), **queue.labels()}
    if max_exec is not None:
        labels[_KUEUE_MAX_EXEC] = str(max_exec)
    annotations = {
        **shared.annotations,
        ANNOTATION_JOB_NAME: _annotation_text(job.name),
        ANNOTATION_USER: _annotation_text(job.user_name, 64),
        ANNOTATION_ACCOUNT: _annotation_text(job.account, 64),
        ANNOTATION_FEATURE: feature,
        ANNOTATION_NODES: ",".join(names),
        ANNOTATION_SHAPE: shape,
        ANNOTATION_HOLDS_MARKED: "true",
    }
    pod_annotations = dict(shared.annotations)
    if topology is not None:
        pod_annotations.update(topology.annotations())

    args = [
        "-D",
        "-Z",
        "-N",
        f"$({ENV_NODE_NAME})",
        "--conf-server",
        slurm.conf_server,
        "--conf",
        node.conf(),
        *template.extra_args,
    ]
    container: dict[str, Any] = {
        "name": "slurmd",
        "image": template.image,
        "command": ["/bin/sh", "-c", SLURMD_ENTRY, SLURMD_ENTRY_NAME, *template.command],
        "args": args,
        "env": _env(slurm, job_id=job.job_id, run=job.restart_count),
        "resources": {"requests": dict(requests), "limits": dict(requests)},
    }
    if template.image_pull_policy is not None:
        container["imagePullPolicy"] = template.image_pull_policy
    if template.volume_mounts:
        container["volumeMounts"] = [
            m.model_dump(mode="json", by_alias=True, exclude_none=True) for m in template.volume_mounts
        ]
    if template.security_context is not None:
        container["securityContext"] = dict(template.security_context)

    pod_spec: dict[str, Any] = {"restartPolicy": "OnFailure", "containers": [container]}
    if template.node_selector:
        pod_spec["nodeSelector"] = dict(template.node_selector)
    if template.tolerations:
        pod_spec["tolerations"] = [dict(t) for t in template.tolerations]
    if template.volumes:
        pod_spec["volumes"] = [
            v.model_dump(mode="json", by_alias=True, exclude_none=True) for v in template.volumes
        ]
    if template.service_account_name is not None:
        pod_spec["serviceAccountName"] = template.service_account_name
    if template.pod_security_context is not None:
        pod_spec["securityContext"] = dict(template.pod_security_context)
    if template.priority_class_name is not None:
        pod_spec["priorityClassName"] = template.priority_class_name

    pod_metadata: dict[str, Any] = {"labels": {**shared.labels, **identity, **run_label}}
    if pod_annotations:
        pod_metadata["annotations"] = pod_annotations
    count = len(names)
    return {
        "apiVersion": JOBSET_API_VERSION,
        "kind": JOBSET_KIND,
        "metadata": {
            "name": name,
            "namespace": queue.namespace,
            "labels": labels,
            "annotations": annotations,
            "finalizers": [FINALIZER],
        },
        "spec": {
            "suspend": True,
            # JobSet's webhook defaults, written out: the bridge must not depend on the webhook.
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "successPolicy": {"operator": "All"},
            "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
            # A failed slurmd pod is not replaced by a new JobSet generation: the job's nodes are
            # its identity; the reconciler decides (requeue-hold) when the JobSet fails.
            "failurePolicy": {"maxRestarts": 0},
            "replicatedJobs": [
                {
                    "name": REPLICATED_JOB,
                    "replicas": 1,
                    "template": {
                        "metadata": {"labels": dict(identity)},
                        "spec": {
                            "parallelism": count,
                            "completions": count,
                            "completionMode": "Indexed",
                            "backoffLimit": options.backoff_limit,
                            "template": {"metadata": pod_metadata, "spec": pod_spec},
                        },
                    },
                }
            ],
        },
    }
