"""The runtime's Prometheus metrics, under the names controller-runtime and client-go use.

Existing dashboards and alerts for Go operators query ``controller_runtime_reconcile_total``,
``workqueue_depth`` and friends; emitting the same names and labels makes them work unchanged.

Everything is registered on ``REGISTRY``, a registry the project owns (not prometheus_client's global
default), so two test cases can each build a fresh registry and never clash. The work queue is on the
hot path, so its figures are kept as plain integers and light histograms inside each queue and only
turned into metric families when someone scrapes (``WorkQueueCollector``); the controller's figures
change once per reconcile and use ordinary prometheus_client metrics.
"""

from __future__ import annotations

import weakref
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, cast

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

_go_float = cast(Callable[[float], str], floatToGoString)  # how Prometheus spells an "le" bound

__all__ = [
    "RECONCILE_TIME_BUCKETS",
    "REGISTRY",
    "WORKQUEUE_DURATION_BUCKETS",
    "LightHistogram",
    "QueueStats",
    "RestClientMetrics",
    "RuntimeMetrics",
    "WebhookMetrics",
    "WorkQueueCollector",
    "gauge_by_label",
    "rest_client_metrics",
    "runtime_metrics",
    "webhook_metrics",
]

REGISTRY = CollectorRegistry(auto_describe=True)
"""The project's registry: served on ``/metrics``; the process, platform and GC collectors included."""
for _collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
    REGISTRY.register(_collector)

WORKQUEUE_DURATION_BUCKETS: tuple[float, ...] = tuple(10.0**e for e in range(-8, 4))
"""client-go's ``ExponentialBuckets(10e-9, 10, 12)``: 10 ns .. 1000 s."""

RECONCILE_TIME_BUCKETS: tuple[float, ...] = (
    *(0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9),
    *(1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0),
    *(15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0),
)
"""controller-runtime's buckets for ``controller_runtime_reconcile_time_seconds``."""


class LightHistogram:
    """A histogram for one series that costs a bisect and two additions per observation."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self.total = 0.0

    def observe(self, value: float) -> None:
        # bisect_left finds the first bound >= value: Prometheus buckets are "less or equal".
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def cumulative(self) -> list[tuple[str, float]]:
        """Buckets as Prometheus exposes them: ``(le, count of observations <= le)``, +Inf last."""
        out: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            out.append((_go_float(bound), float(running)))
        return out


@dataclass(frozen=True, slots=True)
class QueueStats:
    """What one work queue reports at scrape time."""

    name: str
    controller: str
    depth: int
    adds: int
    retries: int
    queue_duration: LightHistogram
    work_duration: LightHistogram
    unfinished_work_seconds: float
    longest_running_processor_seconds: float


class QueueStatsSource(Protocol):
    """A queue whose figures a ``WorkQueueCollector`` can read."""

    @property
    def shutting_down(self) -> bool: ...

    def stats(self) -> QueueStats: ...


class WorkQueueCollector(Collector):
    """Turns the live queues' counters into client-go's ``workqueue_*`` families when scraped.

    Queues are held weakly: a queue that is garbage stops being reported; one that is shut down is
    still reported until another of its name replaces it. Two running queues may not share a name on
    one registry (their series would collide), as controller-runtime refuses two controllers of one
    name.
    """

    def __init__(self) -> None:
        self._queues: weakref.WeakValueDictionary[str, QueueStatsSource] = weakref.WeakValueDictionary()

    def register(self, name: str, queue: QueueStatsSource) -> None:
        existing = self._queues.get(name)
        if existing is not None and not existing.shutting_down:
            raise ValueError(f"a work queue named {name!r} is already registered on this registry")
        self._queues[name] = queue

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        labels = ["name", "controller"]
        depth = GaugeMetricFamily("workqueue_depth", "Current depth of workqueue", labels=labels)
        adds = CounterMetricFamily(
            "workqueue_adds", "Total number of adds handled by workqueue", labels=labels
        )
        retries = CounterMetricFamily(
            "workqueue_retries", "Total number of retries handled by workqueue", labels=labels
        )
        queue_duration = HistogramMetricFamily(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            labels=labels,
        )
        work_duration = HistogramMetricFamily(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes.",
            labels=labels,
        )
        unfinished = GaugeMetricFamily(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been observed by "
            "work_duration. Large values indicate stuck threads. One can deduce the number of stuck "
            "threads by observing the rate at which this increases.",
            labels=labels,
        )
        longest = GaugeMetricFamily(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running.",
            labels=labels,
        )
        for queue in list(self._queues.values()):
            s = queue.stats()
            values = [s.name, s.controller]
            depth.add_metric(values, s.depth)
            adds.add_metric(values, s.adds)
            retries.add_metric(values, s.retries)
            queue_duration.add_metric(values, s.queue_duration.cumulative(), s.queue_duration.total)
            work_duration.add_metric(values, s.work_duration.cumulative(), s.work_duration.total)
            unfinished.add_metric(values, s.unfinished_work_seconds)
            longest.add_metric(values, s.longest_running_processor_seconds)
        yield from (depth, adds, retries, queue_duration, work_duration, unfinished, longest)


class RuntimeMetrics:
    """Every metric family of the runtime on one registry; get it with ``runtime_metrics(registry)``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.workqueues = WorkQueueCollector()
        registry.register(self.workqueues)
        self.reconcile_total = Counter(
            "controller_runtime_reconcile_total",
            "Total number of reconciliations per controller",
            ["controller", "result"],
            registry=registry,
        )
        self.reconcile_errors_total = Counter(
            "controller_runtime_reconcile_errors_total",
            "Total number of reconciliation errors per controller",
            ["controller"],
            registry=registry,
        )
        self.terminal_reconcile_errors_total = Counter(
            "controller_runtime_terminal_reconcile_errors_total",
            "Total number of terminal reconciliation errors per controller",
            ["controller"],
            registry=registry,
        )
        self.reconcile_time_seconds = Histogram(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            ["controller"],
            buckets=RECONCILE_TIME_BUCKETS,
            registry=registry,
        )
        self.max_concurrent_reconciles = Gauge(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            ["controller"],
            registry=registry,
        )
        self.active_workers = Gauge(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            ["controller"],
            registry=registry,
        )
        self.leader_election_master_status = Gauge(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, "
            "1 indicates master. 'name' is the string used to identify the lease. Please make sure to "
            "group by name.",
            ["name"],
            registry=registry,
        )


class WebhookMetrics:
    """controller-runtime's admission webhook families; only a program that serves a webhook has them
    (get them with ``webhook_metrics(registry)``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.webhook_requests_total = Counter(
            "controller_runtime_webhook_requests_total",
            "Total number of admission requests by HTTP status code.",
            ["webhook", "code"],
            registry=registry,
        )
        self.webhook_latency_seconds = Histogram(
            "controller_runtime_webhook_latency_seconds",
            "Histogram of the latency of processing admission requests",
            ["webhook"],
            registry=registry,
        )
        self.webhook_requests_in_flight = Gauge(
            "controller_runtime_webhook_requests_in_flight",
            "Current number of admission requests being served.",
            ["webhook"],
            registry=registry,
        )


_BY_REGISTRY: weakref.WeakKeyDictionary[CollectorRegistry, RuntimeMetrics] = weakref.WeakKeyDictionary()


def runtime_metrics(registry: CollectorRegistry = REGISTRY) -> RuntimeMetrics:
    """The runtime's metrics on ``registry``, created and registered on first use."""
    metrics = _BY_REGISTRY.get(registry)
    if metrics is None:
        metrics = _BY_REGISTRY[registry] = RuntimeMetrics(registry)
    return metrics


def gauge_by_label(
    name: str, documentation: str, *, label: str, known: Sequence[str], counts: Mapping[str, int]
) -> GaugeMetricFamily:
    """A gauge of ``counts`` by one label: every ``known`` value exported (0 when absent), then the
    others sorted, so a dashboard sees each series from the start instead of gaps."""
    family = GaugeMetricFamily(name, documentation, labels=[label])
    rest = dict(counts)
    for value in known:
        family.add_metric([value], rest.pop(value, 0))
    for value, count in sorted(rest.items()):
        family.add_metric([value], count)
    return family


_WEBHOOK_BY_REGISTRY: weakref.WeakKeyDictionary[CollectorRegistry, WebhookMetrics] = (
    weakref.WeakKeyDictionary()
)


def webhook_metrics(registry: CollectorRegistry = REGISTRY) -> WebhookMetrics:
    """The webhook server's metrics on ``registry``, created and registered on first use."""
    metrics = _WEBHOOK_BY_REGISTRY.get(registry)
    if metrics is None:
        metrics = _WEBHOOK_BY_REGISTRY[registry] = WebhookMetrics(registry)
    return metrics


REST_CLIENT_DURATION_BUCKETS: tuple[float, ...] = (
    0.005,
    0.025,
    0.1,
    0.25,
    0.5,
    1.0,
    2.0,
    4.0,
    8.0,
    15.0,
    30.0,
    60.0,
)
"""client-go's buckets for ``rest_client_request_duration_seconds``."""


class RestClientMetrics:
    """client-go's ``rest_client_*`` families: every request to the API server, by status code.

    ``host`` is the API server's host:port (one per session); ``code`` the HTTP status, or
    ``<error>`` when no answer came (as client-go counts). Watches count when their headers arrive.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests_total = Counter(
            "rest_client_requests_total",
            "Number of HTTP requests, partitioned by status code, method, and host.",
            ["code", "method", "host"],
            registry=registry,
        )
        self.request_duration_seconds = Histogram(
            "rest_client_request_duration_seconds",
            "Request latency in seconds. Broken down by verb, and host.",
            ["verb", "host"],
            buckets=REST_CLIENT_DURATION_BUCKETS,
            registry=registry,
        )

    def observe(self, *, method: str, host: str, code: str, seconds: float) -> None:
        self.requests_total.labels(code, method, host).inc()
        self.request_duration_seconds.labels(method, host).observe(seconds)


_REST_BY_REGISTRY: weakref.WeakKeyDictionary[CollectorRegistry, RestClientMetrics] = (
    weakref.WeakKeyDictionary()
)


def rest_client_metrics(registry: CollectorRegistry = REGISTRY) -> RestClientMetrics:
    """The API client's metrics on ``registry``, created and registered on first use."""
    metrics = _REST_BY_REGISTRY.get(registry)
    if metrics is None:
        metrics = _REST_BY_REGISTRY[registry] = RestClientMetrics(registry)
    return metrics
