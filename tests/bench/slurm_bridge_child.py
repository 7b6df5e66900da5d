"""``python -m bridge.slurm`` with every HTTP request it sends counted, for the Slurm bridge benchmark.

Why a wrapper and not the API server's metrics: ``apiserver_request_total`` has no client label, so
its deltas mix the bridge's calls with Kueue's, the JobSet controller's and the garbage collector's
(the benchmark prints that total too, as the whole system's cost per job). The bridge itself has no
client-side request metric, so this wrapper counts at the one place every request passes: aiohttp's
``ClientSession._request`` (the bridge's Kubernetes session and its slurmrestd client both use
aiohttp); see ``http_counting.py``. Each request is counted once when it is sent; a watch counts as
one request however long it stays open.

The counter ``k8s_bridge_bench_http_requests_total{target, verb, resource}`` is registered on the
bridge's own registry, so it is served on ``--metrics-bind-address`` beside the bridge's metrics:
``target`` is ``kube`` (paths under ``/api`` and ``/apis``) or ``slurm``; ``verb`` is the HTTP method,
with ``LIST`` and ``WATCH`` told apart from ``GET`` as the API server does; ``resource`` is the
Kubernetes resource (``jobsets``, ``events``, ``jobsets/status``) or the slurmrestd path with ids
replaced by ``{id}``.

It also counts the Slurm jobs the slurmrestd client builds from a job list or read
(``k8s_bridge_bench_slurm_jobs_parsed_total``, at ``RestAdapter.parse_job``): with a deep queue, the
jobs parsed per poll tell whether a poll costs in proportion to the queue or to what changed.

With ``K8S_BRIDGE_BENCH_PROFILE=<dir>`` the bridge runs under cProfile, dumped per phase (see
``bench_profile.py``); with ``K8S_BRIDGE_BENCH_TRACEMALLOC=<dir>`` it writes memory snapshots there
(see ``memory_snapshots.py``).

Usage: ``python slurm_bridge_child.py <the arguments of python -m bridge.slurm>``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from prometheus_client import Counter

from bridge.api.slurm_job import SlurmJob
from bridge.runtime.controller import Controller, Mapper, Request, own_key
from bridge.runtime.metrics import REGISTRY
from bridge.slurm.program import main
from bridge.slurmrest.versions import RestAdapter
from tests.bench.bench_profile import PROFILE_DIR, PhaseProfiler
from tests.bench.http_counting import install
from tests.bench.memory_snapshots import TRACEMALLOC_DIR, start_snapshots

PARSED = Counter(
    "k8s_bridge_bench_slurm_jobs_parsed_total",
    "Slurm jobs the slurmrestd client parsed, counted by the benchmark's wrapper",
    registry=REGISTRY,
)

EVENTS = Counter(
    "k8s_bridge_bench_events_total",
    "Events a controller's watched source delivered, and the requests they mapped to, by source",
    ["controller", "source", "counted"],
    registry=REGISTRY,
)

_parse_job = RestAdapter.parse_job
_watch = Controller.watch


def _counted_watch(self: Controller, source: Any, *, map_to: Mapper = own_key, **options: Any) -> None:
    """``Controller.watch`` whose mapper counts what each source makes the controller reconcile."""
    name = str(getattr(source, "name", type(source).__name__))
    events = EVENTS.labels(self.name, name, "events")
    requests = EVENTS.labels(self.name, name, "requests")

    def counted(obj: Any) -> list[Request]:
        mapped = list(map_to(obj))
        events.inc()
        requests.inc(len(mapped))
        return mapped

    _watch(self, source, map_to=counted, **options)


def _counted_parse_job(self: RestAdapter, raw: Any) -> SlurmJob:
    PARSED.inc()
    return _parse_job(self, raw)


if __name__ == "__main__":
    install()
    if TRACEMALLOC_DIR:
        start_snapshots(Path(TRACEMALLOC_DIR))
    if PROFILE_DIR:
        PhaseProfiler(Path(PROFILE_DIR)).start()
    RestAdapter.parse_job = _counted_parse_job  # type: ignore[method-assign]
    Controller.watch = _counted_watch  # type: ignore[method-assign]
    sys.exit(main(sys.argv[1:]))
