"""The gate webhook: RayJob CREATE reviewed against the live configuration and the caches.

Why a mutating webhook and not the controller: a RayJob with a ``clusterSelector`` cannot be
suspended, and KubeRay submits it to the shared head as soon as it sees it. The gate (the per-job
resource in ``entrypointResources``) must therefore be in the object before anything else reads it,
which only admission can do. The decision itself is the pure :func:`bridge.ray.gate.review_rayjob`;
this module looks up what it needs (the RayCluster the selector names, whether the configuration
selects it, whether the target LocalQueue exists) from the bridge's informer caches, so a review
costs no API request.

Failure policy (docs/ray-bridge-reference.md, "The webhook"): the chart registers it with
``failurePolicy: Ignore`` and a namespace selector, so that a bridge that is down never blocks
RayJobs cluster-wide; a RayJob created while it is down runs ungated, and the controller reports it
(an Event ``Ungated`` and the ``k8s_bridge_ray_ungated_rayjobs`` metric), never silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Protocol

import structlog

from bridge.api.mixing import WorkloadMixingSpec
from bridge.runtime.cache import Store
from bridge.runtime.handlers import Object
from bridge.runtime.webhook import AdmissionResponse

from .gate import GateKind, review_rayjob

__all__ = ["GATE_PATH", "GateWebhook"]

log = structlog.get_logger(__name__)

GATE_PATH: Final = "/mutate-ray-io-v1-rayjob"
_CLUSTER_KEY: Final = "ray.io/cluster"


class _Config(Protocol):
    @property
    def spec(self) -> WorkloadMixingSpec | None: ...


class GateWebhook:
    """The handler of :data:`GATE_PATH`: one AdmissionReview ``request`` in, one response out."""

    def __init__(self, *, config: _Config, mixing_name: str, rayclusters: Store, local_queues: Store) -> None:
        self._config = config
        self._mixing_name = mixing_name
        self._rayclusters = rayclusters
        self._local_queues = local_queues
        self.decisions: dict[str, int] = {}
        """How many reviews ended in each kind of decision (a metric reads it)."""

    async def review(self, request: Object) -> AdmissionResponse:
        spec = self._config.spec
        ray = spec.ray if spec is not None else None
        raycluster = self._cluster_of(request)
        selected = (
            raycluster is not None
            and ray is not None
            and ray.cluster_selector.matches(dict(((raycluster.get("metadata") or {}).get("labels")) or {}))
        )
        decision = review_rayjob(
            request=request,
            mixing_name=self._mixing_name,
            ray=ray,
            raycluster=raycluster,
            cluster_selected=selected,
            local_queue_exists=lambda namespace, name: (
                self._local_queues.get(f"{namespace}/{name}") is not None
            ),
        )
        self.decisions[decision.kind.value] = self.decisions.get(decision.kind.value, 0) + 1
        if decision.kind is not GateKind.PASS:
            log.info("RayJob reviewed", why=decision.why, uid=request.get("uid"))
        return decision.response()

    def _cluster_of(self, request: Mapping[str, Any]) -> Object | None:
        obj = request.get("object") or {}
        selector = (obj.get("spec") or {}).get("clusterSelector") or {}
        cluster = selector.get(_CLUSTER_KEY) if isinstance(selector, Mapping) else None
        namespace = request.get("namespace") or (obj.get("metadata") or {}).get("namespace")
        if not isinstance(cluster, str) or not isinstance(namespace, str):
            return None
        return self._rayclusters.get(f"{namespace}/{cluster}")
