"""Prometheus metrics of the Ray bridge, on the runtime's registry, in the Slurm side's style.

Names are prefixed ``k8s_bridge_ray_``. Phases, ungated RayJobs and webhook decisions are read when
scraped (a collector over live state), never kept as gauges that a crashed reconcile could leave
stale; the histograms and counters follow ``k8s_bridge_slurm_*`` (same buckets, same labels).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from bridge.runtime.metrics import REGISTRY, gauge_by_label
from bridge.slurm.metrics import LATENCY_BUCKETS

__all__ = ["PHASES", "RayMetrics", "ray_metrics"]

PHASES: tuple[str, ...] = ("held", "queued", "admitted", "running", "finishing")
"""Every phase a gated RayJob can be in (each exported, also at 0)."""


class _LiveCollector(Collector):
    def __init__(self) -> None:
        self.phases: Callable[[], Mapping[str, int]] | None = None
        self.ungated: Callable[[], int] | None = None
        self.webhook: Callable[[], Mapping[str, int]] | None = None

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        yield gauge_by_label(
            "k8s_bridge_ray_jobs",
            "Gated RayJobs by phase, as last reconciled",
            label="phase",
            known=PHASES,
            counts=self.phases() if self.phases is not None else {},
        )
        yield GaugeMetricFamily(
            "k8s_bridge_ray_ungated_rayjobs",
            "RayJobs running in a bridged shared RayCluster without the gate (created while the webhook "
            "was not serving): outside Kueue's quota",
            value=self.ungated() if self.ungated is not None else 0,
        )
        reviews = CounterMetricFamily(
            "k8s_bridge_ray_webhook_reviews",
            "RayJob CREATE reviews by decision (pass, gate, deny)",
            labels=["decision"],
        )
        for decision, count in sorted((self.webhook() if self.webhook is not None else {}).items()):
            reviews.add_metric([decision], count)
        yield reviews


class RayMetrics:
    """The Ray bridge's metric families on one registry (get it with :func:`ray_metrics`)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.live = _LiveCollector()
        registry.register(self.live)
        self.queued_to_admitted = Histogram(
            "k8s_bridge_ray_queued_to_admitted_seconds",
            "From the worker JobSet's creation to its Kueue admission, as observed by the bridge",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.admitted_to_running = Histogram(
            "k8s_bridge_ray_admitted_to_running_seconds",
            "From Kueue admission to the Ray job RUNNING (workers joined, entrypoint started)",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.actions = Counter(
            "k8s_bridge_ray_actions_total",
            "Actions the Ray reconciler executed, by action and result",
            ["action", "result"],
            registry=registry,
        )

    def observe_latency(self, name: str, seconds: float) -> None:
        """The reconciler's ``on_latency`` hook: ``queued_to_admitted`` or ``admitted_to_running``."""
        histogram = {
            "queued_to_admitted": self.queued_to_admitted,
            "admitted_to_running": self.admitted_to_running,
        }
        histogram[name].observe(seconds)


_BY_REGISTRY: weakref.WeakKeyDictionary[CollectorRegistry, RayMetrics] = weakref.WeakKeyDictionary()


def ray_metrics(registry: CollectorRegistry = REGISTRY) -> RayMetrics:
    """The Ray bridge's metrics on ``registry``, created and registered on first use."""
    metrics = _BY_REGISTRY.get(registry)
    if metrics is None:
        metrics = _BY_REGISTRY[registry] = RayMetrics(registry)
    return metrics
