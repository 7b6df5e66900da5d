"""Prometheus metrics of the Slurm bridge, on the runtime's registry.

Why here and not in the reconciler: the figures come from three places (the slurmrestd client's
request observer, the reconciler's decisions, the node source's store) and an operator reads them
together on one dashboard. They are created once per registry (:func:`slurm_metrics`), so a test
can build a fresh ``CollectorRegistry`` and read exact values, and the program uses ``REGISTRY``.

Names are prefixed ``k8s_bridge_slurm_``. Phases and node counts are read when scraped (a collector
over live state), never kept as gauges that a crashed reconcile could leave stale.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from bridge.runtime.metrics import REGISTRY, gauge_by_label

__all__ = ["LATENCY_BUCKETS", "PHASES", "SlurmMetrics", "slurm_metrics"]

PHASES: tuple[str, ...] = (
    "held",
    "unservable",
    "queued",
    "admitted",
    "releasing",
    "running",
    "evicted",
    "finishing",
)
"""Every phase a bridged job can be in (each exported, also at 0)."""

LATENCY_BUCKETS: tuple[float, ...] = (
    *(0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 30.0, 60.0),
    *(120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0),
)
"""From well under a second (release) to a day (a job waiting for quota)."""

REST_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class _LiveCollector(Collector):
    """Reads phases and node counts from callables when scraped."""

    def __init__(self) -> None:
        self.phases: Callable[[], Mapping[str, int]] | None = None
        self.nodes: Callable[[], Mapping[str, int]] | None = None

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        yield gauge_by_label(
            "k8s_bridge_slurm_jobs",
            "Bridged Slurm jobs by phase, as last reconciled",
            label="phase",
            known=PHASES,
            counts=self.phases() if self.phases is not None else {},
        )
        nodes = GaugeMetricFamily(
            "k8s_bridge_slurm_nodes_registered",
            "Dynamic Slurm nodes of bridged jobs registered in slurmctld, by base state",
            labels=["state"],
        )
        for state, count in sorted((self.nodes() if self.nodes is not None else {}).items()):
            nodes.add_metric([state], count)
        yield nodes


class SlurmMetrics:
    """The Slurm bridge's metric families on one registry (get it with :func:`slurm_metrics`)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.live = _LiveCollector()
        registry.register(self.live)
        self.held_to_admitted = Histogram(
            "k8s_bridge_slurm_held_to_admitted_seconds",
            "From the bridged job's JobSet creation to its Kueue admission, as observed by the bridge",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.admitted_to_running = Histogram(
            "k8s_bridge_slurm_admitted_to_running_seconds",
            "From Kueue admission to the Slurm job RUNNING, as observed by the bridge",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.rest_duration = Histogram(
            "k8s_bridge_slurmrestd_request_duration_seconds",
            "slurmrestd requests by method, path template and HTTP status ('none': no answer)",
            ["method", "path", "code"],
            buckets=REST_BUCKETS,
            registry=registry,
        )
        self.rest_errors = Counter(
            "k8s_bridge_slurmrestd_request_errors_total",
            "slurmrestd requests that got no answer or an HTTP error status",
            ["method", "path", "code"],
            registry=registry,
        )
        self.actions = Counter(
            "k8s_bridge_slurm_actions_total",
            "Actions the Slurm reconciler executed, by action and result",
            ["action", "result"],
            registry=registry,
        )

    def observe_request(self, method: str, path: str, status: int | None, seconds: float) -> None:
        """The slurmrestd client's ``observer`` hook."""
        code = "none" if status is None else str(status)
        self.rest_duration.labels(method, path, code).observe(seconds)
        if status is None or status >= 400:
            self.rest_errors.labels(method, path, code).inc()


_BY_REGISTRY: weakref.WeakKeyDictionary[CollectorRegistry, SlurmMetrics] = weakref.WeakKeyDictionary()


def slurm_metrics(registry: CollectorRegistry = REGISTRY) -> SlurmMetrics:
    """The Slurm bridge's metrics on ``registry``, created and registered on first use."""
    metrics = _BY_REGISTRY.get(registry)
    if metrics is None:
        metrics = _BY_REGISTRY[registry] = SlurmMetrics(registry)
    return metrics
