"""Every HTTP request a bridge process sends, counted, for the bridge benchmarks' child processes.

Why a wrapper and not the API server's metrics: ``apiserver_request_total`` has no client label, so
its deltas mix the bridge's calls with Kueue's, the JobSet controller's and the garbage collector's
(the benchmarks print that total too, as the whole system's cost per job). The bridges have no
client-side request metric, so :func:`install` counts at the one place every request passes:
aiohttp's ``ClientSession._request`` (the bridges' Kubernetes session, the Slurm bridge's slurmrestd
client and the Ray bridge's service-proxy calls all use aiohttp). Each request is counted once when
it is sent; a watch counts as one request however long it stays open.

New TCP connections are counted too (``k8s_bridge_bench_http_connections_total{target}``, at
aiohttp's ``TCPConnector._create_connection``): requests per connection says whether keep-alive
holds, and a connection per request is churn that costs both ends.

The counter ``k8s_bridge_bench_http_requests_total{target, verb, resource}`` is registered on the
bridges' own registry, so it is served on ``--metrics-bind-address`` beside the bridge's metrics:
``target`` is ``kube`` (paths under ``/api`` and ``/apis``) or ``slurm``; ``verb`` is the HTTP method,
with ``LIST`` and ``WATCH`` told apart from ``GET`` as the API server does; ``resource`` is the
Kubernetes resource (``jobsets``, ``events``, ``jobsets/status``, ``services/proxy``) or the slurmrestd
path with ids replaced by ``{id}``.
"""

from __future__ import annotations

import re
from typing import Any

import aiohttp
from prometheus_client import Counter
from yarl import URL

from bridge.runtime.metrics import REGISTRY

REQUESTS = Counter(
    "k8s_bridge_bench_http_requests_total",
    "HTTP requests the bridge sent, counted by the benchmark's wrapper",
    ["target", "verb", "resource"],
    registry=REGISTRY,
)

CONNECTIONS = Counter(
    "k8s_bridge_bench_http_connections_total",
    "TCP connections the bridge opened, counted by the benchmark's wrapper",
    ["target"],
    registry=REGISTRY,
)

_ID = re.compile(r"^(?:\d+|b\d+-\d+)$")


def classify(method: str, url: URL) -> tuple[str, str, str]:
    """(target, verb, resource) of one request."""
    parts = [p for p in url.path.split("/") if p]
    if not parts or parts[0] not in ("api", "apis"):
        resource = "/".join("{id}" if _ID.match(p) else p for p in parts[2:]) or url.path
        return "slurm", method.upper(), resource
    # /api/v1/... or /apis/<group>/<version>/...; then optional namespaces/<ns>/, resource, name, sub.
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) != 2:
        rest = rest[2:]
    resource = rest[0] if rest else "(discovery)"
    named = len(rest) >= 2
    if len(rest) >= 3:
        resource += "/" + rest[2]
    verb = method.upper()
    if verb == "GET" and not named and rest:
        verb = "WATCH" if url.query.get("watch") in ("true", "1") else "LIST"
    return "kube", verb, resource


_original = aiohttp.ClientSession._request


async def _counted(
    self: aiohttp.ClientSession, method: str, str_or_url: Any, *args: Any, **kwargs: Any
) -> Any:
    try:
        url = URL(str(str_or_url))
        params = kwargs.get("params")
        if params:
            url = url.update_query(params)
        REQUESTS.labels(*classify(method, url)).inc()
    except Exception:  # counting must never break the bridge
        REQUESTS.labels("unknown", method.upper(), "unknown").inc()
    return await _original(self, method, str_or_url, *args, **kwargs)


_original_connect = aiohttp.TCPConnector._create_connection


async def _connect_counted(self: aiohttp.TCPConnector, req: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        CONNECTIONS.labels(classify(str(req.method), URL(str(req.url)))[0]).inc()
    except Exception:  # counting must never break the bridge
        CONNECTIONS.labels("unknown").inc()
    return await _original_connect(self, req, *args, **kwargs)


def install() -> None:
    """Count every request and every new connection of every aiohttp session of this process."""
    aiohttp.ClientSession._request = _counted  # type: ignore[method-assign]
    aiohttp.TCPConnector._create_connection = _connect_counted  # type: ignore[method-assign]
