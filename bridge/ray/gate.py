"""The mutating webhook's decision for a RayJob: pass it, gate it, or deny it with what to change.

Why at admission: a RayJob in a shared RayCluster cannot be suspended (KubeRay rejects ``suspend``
with a ``clusterSelector``), and KubeRay submits it as soon as it exists. The only hold that works
is on the Ray side and has to be in place before the first submission: a per-job custom resource in
``spec.entrypointResources`` that only the bridge's workers advertise, so Ray keeps the entrypoint
PENDING until Kueue has admitted those workers. Everything else the bridge will need later (worker
count and size, LocalQueue) is checked here too, so a RayJob is never gated for a JobSet that cannot
exist: it is denied with a message that says what to change instead.

Why pure: the decision is a function of the AdmissionReview request, the configuration and what the
caller looked up (the RayCluster, whether it is selected, whether a LocalQueue exists). No I/O, no
clock, no randomness: the gate's token comes from the request uid, so a reinvoked webhook computes
the same patch. The reading rules are shared with :mod:`translators.ray`, so a RayJob let through
here translates there.

The rules, in order:

- pass untouched: not a CREATE, not a ``ray.io`` RayJob, no ``spec.clusterSelector[ray.io/cluster]``,
  no Ray configuration, ``submissionMode: SidecarMode`` (KubeRay rejects it with a selector), the
  cluster not selected by ``spec.ray.clusterSelector``;
- pass with a warning: the named RayCluster does not exist (the RayJob would run ungated, outside
  Kueue's quota, once the cluster appears);
- deny: malformed or too many workers, malformed worker resources, a bad queue or priority
  annotation, an ``entrypointResources`` that is not a JSON object of non-negative numbers of at
  most 4 KiB, a key under the bridge's resource prefix the bridge did not put there, an entrypoint
  larger than one worker, a target LocalQueue that does not exist;
- gate: merge ``{<gate>: 1}`` into ``entrypointResources`` (the user's keys kept), annotate the
  gate and the WorkloadMixing, add the finalizer. A RayJob re-created from a saved manifest
  carries its predecessor's gate (annotation and key): that key is replaced by the new gate.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from bridge.api.mixing import RaySpec
from bridge.runtime.webhook import AdmissionResponse
from translators.ray import (
    ANNOTATION_GATE,
    ANNOTATION_GATED_BY,
    ANNOTATION_PRIORITY_CLASS,
    ANNOTATION_QUEUE_NAME,
    CLUSTER_LABEL,
    FINALIZER,
    RefusedError,
    UntranslatableCode,
    check_entrypoint,
    gate_resource,
    parse_entrypoint_resources,
    requested_workers,
    target_queue,
    worker_resources,
    worker_size,
)

__all__ = ["GateDecision", "GateKind", "review_rayjob"]

_RAY_GROUP: Final = "ray.io"
_RAYJOB_KIND: Final = "RayJob"
_SIDECAR_MODE: Final = "SidecarMode"


class GateKind(enum.StrEnum):
    """What the webhook answers."""

    PASS = "pass"  # noqa: S105 (a decision, not a password)
    """Allowed, unchanged (perhaps with warnings)."""
    GATE = "gate"
    """Allowed with the gate patch."""
    DENY = "deny"
    """Refused; ``message`` says what to change."""


@dataclass(frozen=True, kw_only=True)
class GateDecision:
    """The webhook's answer for one RayJob admission request."""

    kind: GateKind
    why: str
    """One line for the log: the rule that decided."""
    patch: tuple[dict[str, Any], ...] = ()
    """RFC 6902 operations (``kind`` gate only)."""
    message: str | None = None
    """For a deny: what is wrong and what to change."""
    warnings: tuple[str, ...] = ()
    gate: str | None = None
    """The Ray resource the RayJob is gated with (``kind`` gate only)."""
    code: UntranslatableCode | None = None
    """For a deny: the machine-readable reason."""

    def response(self) -> AdmissionResponse:
        """The :class:`AdmissionResponse` the webhook server sends."""
        if self.kind is GateKind.DENY:
            return AdmissionResponse(allowed=False, message=self.message, code=403, warnings=self.warnings)
        patch = [dict(op) for op in self.patch] if self.kind is GateKind.GATE else None
        return AdmissionResponse.allow(patch=patch, warnings=self.warnings)


def _show(text: object, limit: int = 64) -> str:
    # Request-controlled text in a message, warning or log line: ASCII-escaped, cut, one line.
    value = text if isinstance(text, str) else repr(text)
    cut = value if len(value) <= limit else value[:limit] + "..."
    return ascii(cut)


def _pointer(key: str) -> str:
    """A JSON-pointer segment (RFC 6901): ``~`` as ``~0``, ``/`` as ``~1``."""
    return key.replace("~", "~0").replace("/", "~1")


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _passed(why: str, *warnings: str) -> GateDecision:
    return GateDecision(kind=GateKind.PASS, why=f"pass: {why}", warnings=warnings)


def review_rayjob(
    *,
    request: Mapping[str, Any],
    mixing_name: str,
    ray: RaySpec | None,
    raycluster: Mapping[str, Any] | None,
    cluster_selected: bool,
    local_queue_exists: Callable[[str, str], bool],
) -> GateDecision:
    """Decide one AdmissionReview ``request`` for the WorkloadMixing ``mixing_name``.

    ``raycluster`` is the RayCluster that the RayJob's ``clusterSelector`` names, in the RayJob's
    namespace (None: not found); ``cluster_selected`` whether ``spec.ray.clusterSelector`` matches
    its labels; ``local_queue_exists(namespace, name)`` answers from the caller's cache. All three
    are looked up by the caller, only for a RayJob that names a cluster.
    """
    if request.get("operation") != "CREATE":
        return _passed("not a CREATE")
    kind = _mapping(request.get("kind"))
    if kind.get("group") != _RAY_GROUP or kind.get("kind") != _RAYJOB_KIND:
        return _passed("not a RayJob")
    obj = _mapping(request.get("object"))
    spec = _mapping(obj.get("spec"))
    cluster = _mapping(spec.get("clusterSelector")).get(CLUSTER_LABEL)
    if not isinstance(cluster, str) or not cluster:
        return _passed(f"no spec.clusterSelector[{CLUSTER_LABEL}]: not in a shared cluster")
    if ray is None:
        return _passed("the WorkloadMixing bridges no Ray")
    if spec.get("submissionMode") == _SIDECAR_MODE:
        return _passed("SidecarMode (KubeRay rejects it with a clusterSelector)")

    meta = _mapping(obj.get("metadata"))
    namespace = request.get("namespace") or meta.get("namespace")
    namespace = namespace if isinstance(namespace, str) else ""
    name = meta.get("name") or request.get("name")
    if not name and isinstance(meta.get("generateName"), str):
        name = f"{meta['generateName']}*"
    shown = f"{_show(namespace)}/{_show(name or '')}"
    if raycluster is None:
        return _passed(
            f"RayCluster {_show(cluster)} not found",
            f"k8s-bridge: RayCluster {_show(cluster)} does not exist in namespace {_show(namespace)}: "
            "this RayJob is not gated and will run outside Kueue's quota",
        )
    if not cluster_selected:
        return _passed(f"RayCluster {_show(cluster)} is not selected by WorkloadMixing {_show(mixing_name)}")

    def deny(code: UntranslatableCode, reason: str) -> GateDecision:
        return GateDecision(
            kind=GateKind.DENY,
            why=f"deny {shown} ({code}): {reason}",
            message=(
                f"RayJob {shown} runs in RayCluster {_show(cluster)}, whose jobs k8s-bridge queues in Kueue "
                f"(WorkloadMixing {_show(mixing_name)}): {reason}"
            ),
            code=code,
        )

    # The readers want the namespace on the object; a CREATE may carry it only in the request.
    view = {**obj, "metadata": {**meta, "namespace": namespace}}
    try:
        workers = requested_workers(view, ray=ray)
        resources = worker_resources(view, ray=ray)
        queue = target_queue(view, ray=ray)
        entry = parse_entrypoint_resources(spec.get("entrypointResources"))
        check_entrypoint(view, size=worker_size(resources))
    except RefusedError as refusal:
        return deny(refusal.code, refusal.reason)

    gate = gate_resource(prefix=ray.resource_prefix, request_uid=str(request.get("uid", "")))
    old_gate = _mapping(meta.get("annotations")).get(ANNOTATION_GATE)
    warnings: list[str] = []
    kept: dict[str, int | float] = {}
    for key, amount in entry.items():
        if not key.startswith(ray.resource_prefix):
            kept[key] = amount
        elif key == old_gate and key != gate:
            warnings.append(f"k8s-bridge: replaced the gate {key} of a saved manifest with {gate}")
        elif key != gate:
            return deny(
                UntranslatableCode.INVALID_ENTRYPOINT_RESOURCES,
                f"spec.entrypointResources uses {_show(key)}, under the prefix {ray.resource_prefix!r} that "
                "the bridge reserves for its gates: rename that resource",
            )
    if not local_queue_exists(queue.namespace, queue.local_queue):
        return deny(
            UntranslatableCode.INVALID_QUEUE,
            f"LocalQueue {queue.local_queue} does not exist in namespace {queue.namespace}: create it, "
            f"or set annotation {ANNOTATION_QUEUE_NAME} to an existing LocalQueue of that namespace",
        )
    if kept:
        warnings.append(
            "k8s-bridge: the bridged workers advertise only the gate; the entrypoint also asks for "
            f"{_show(', '.join(sorted(kept)))}, which it gets only where a worker offers it"
        )
    merged = {**kept, gate: 1}
    patch: list[dict[str, Any]] = [
        {
            "op": "add",
            "path": "/spec/entrypointResources",
            "value": json.dumps(merged, separators=(",", ":"), ensure_ascii=True),
        }
    ]
    ours = {ANNOTATION_GATE: gate, ANNOTATION_GATED_BY: mixing_name}
    if isinstance(meta.get("annotations"), Mapping):
        patch += [
            {"op": "add", "path": f"/metadata/annotations/{_pointer(k)}", "value": v} for k, v in ours.items()
        ]
    else:
        patch.append({"op": "add", "path": "/metadata/annotations", "value": ours})
    finalizers = meta.get("finalizers")
    if not isinstance(finalizers, list):
        patch.append({"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]})
    elif FINALIZER not in finalizers:
        patch.append({"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER})
    queue_text = f"{queue.namespace}/{queue.local_queue}"
    if queue.priority_class:
        queue_text += f" priority {queue.priority_class}"
    overridden = [
        k
        for k in (ANNOTATION_QUEUE_NAME, ANNOTATION_PRIORITY_CLASS)
        if k in _mapping(meta.get("annotations"))
    ]
    return GateDecision(
        kind=GateKind.GATE,
        why=(
            f"gate {shown} with {gate}: {workers} worker(s), queue {queue_text}"
            + (" (annotations)" if overridden else "")
        ),
        patch=tuple(patch),
        warnings=tuple(warnings),
        gate=gate,
    )
