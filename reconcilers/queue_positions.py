"""Where a waiting Workload stands in its queue, from Kueue's visibility API (on-demand).

A Slurm user waiting on Kueue sees why in the job's comment (``squeue -o %k``); where the job
stands in line is the other half of what they want to know. Kueue serves it through an aggregated
API, ``visibility.kueue.x-k8s.io``, per LocalQueue (``pendingworkloads``): one read answers for every
waiting job of that queue, so it is read at most once per :data:`MAX_AGE` seconds per LocalQueue.
A cluster may not serve it (the feature gate off, the APIService missing, no RBAC to read it): then
it is asked again only after :data:`RETRY_UNSERVED` seconds, and the comments carry no position.

A position changes each time a Workload ahead is admitted, and every change would be one more
write to slurmctld for every job in line. :func:`position_text` therefore shows the exact place
only near the head of the queue and ranges further back, so a job's text changes a few times over
its whole wait.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import structlog

from bridge.runtime.client import Client
from bridge.runtime.errors import ApiError

__all__ = ["MAX_AGE", "RETRY_UNSERVED", "VISIBILITY_API", "QueuePosition", "QueuePositions", "position_text"]

log = structlog.get_logger(__name__)

VISIBILITY_API = "visibility.kueue.x-k8s.io/v1beta2"
MAX_AGE = 10.0
"""Seconds one LocalQueue's pending list is used for before it is read again."""
MISSING_AGE = 1.0
"""Seconds after which a list that lacks the Workload asked for is read again (it may be new)."""
READ_TIMEOUT = 5.0
"""Seconds one read may take: it is made inside a reconcile, and a queue position is optional."""
PAGE_LIMIT = 1000
"""Kueue's ``pendingworkloads`` answers with at most this many (its default ``limit``)."""
RETRY_UNSERVED = 300.0
"""Seconds before a cluster that did not serve the visibility API is asked again."""
EXACT_UP_TO = 10
"""Places shown exactly (1st .. 10th); further back, the range the place falls in."""
_RANGES = (20, 50, 100, 200, 500, 1000)


@dataclass(frozen=True, kw_only=True)
class QueuePosition:
    """A pending Workload's place, counted from 0 as Kueue does."""

    in_cluster_queue: int
    in_local_queue: int


def position_text(position: QueuePosition) -> str:
    """``"3rd in its ClusterQueue"``, ``"21st-50th in its ClusterQueue"``: one place or a range."""
    place = position.in_cluster_queue + 1
    if place <= EXACT_UP_TO:
        return f"{_ordinal(place)} in its ClusterQueue"
    low = EXACT_UP_TO
    for high in _RANGES:
        if place <= high:
            return f"{_ordinal(low + 1)}-{_ordinal(high)} in its ClusterQueue"
        low = high
    return f"beyond the {_ordinal(_RANGES[-1])} in its ClusterQueue"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def parse_pending(summary: Mapping[str, Any]) -> dict[str, QueuePosition]:
    """A ``PendingWorkloadsSummary``: each Workload's name to its position."""
    positions: dict[str, QueuePosition] = {}
    for item in summary.get("items") or ():
        if not isinstance(item, Mapping):
            continue
        name = (item.get("metadata") or {}).get("name")
        in_cq, in_lq = item.get("positionInClusterQueue"), item.get("positionInLocalQueue")
        if isinstance(name, str) and isinstance(in_cq, int) and isinstance(in_lq, int):
            positions[name] = QueuePosition(in_cluster_queue=in_cq, in_local_queue=in_lq)
    return positions


class QueuePositions:
    """The pending Workloads of each LocalQueue, read from Kueue at most every ``max_age`` seconds."""

    def __init__(
        self,
        *,
        client: Client,
        max_age: float = MAX_AGE,
        retry_unserved: float = RETRY_UNSERVED,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._max_age = max_age
        self._retry_unserved = retry_unserved
        self._clock = clock
        self._read: dict[tuple[str, str], tuple[float, dict[str, QueuePosition]]] = {}
        self._failed: set[tuple[str, str]] = set()
        """Queues whose last read failed: read again after ``max_age``, not sooner for a newcomer."""
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._unserved_until = 0.0

    async def position(self, *, namespace: str, local_queue: str, workload: str) -> QueuePosition | None:
        """The Workload's position; None when it is not pending there, or nobody can tell."""
        key = (namespace, local_queue)
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            now = self._clock()
            cached = self._read.get(key)
            if cached is not None and workload not in cached[1] and len(cached[1]) >= PAGE_LIMIT:
                # Kueue lists the first PAGE_LIMIT only: one missing from a full list stands further back.
                return QueuePosition(in_cluster_queue=PAGE_LIMIT, in_local_queue=PAGE_LIMIT)
            # A Workload not in the list may have joined the queue since it was read: read again,
            # but at most once per MISSING_AGE seconds.
            stale = (
                cached is not None
                and key not in self._failed
                and workload not in cached[1]
                and now - cached[0] >= MISSING_AGE
            )
            if cached is None or stale or now - cached[0] >= self._max_age:
                if now < self._unserved_until:
                    return None
                positions = await self._fetch(namespace, local_queue)
                if positions is None:  # this read failed: the last one stands, tried again later
                    self._failed.add(key)
                    self._read[key] = (self._clock(), cached[1] if cached is not None else {})
                    return cached[1].get(workload) if cached is not None else None
                self._failed.discard(key)
                cached = (self._clock(), positions)
                self._read[key] = cached
                if workload not in positions and len(positions) >= PAGE_LIMIT:
                    return QueuePosition(in_cluster_queue=PAGE_LIMIT, in_local_queue=PAGE_LIMIT)
            return cached[1].get(workload)

    async def _fetch(self, namespace: str, local_queue: str) -> dict[str, QueuePosition] | None:
        """One LocalQueue's pending Workloads; None when they could not be read. The cluster not
        serving the API at all (its group unknown, unavailable or forbidden) stops all reads for
        ``retry_unserved``; any other failure is this queue's, for this read only."""
        try:
            async with asyncio.timeout(READ_TIMEOUT):
                await self._client.resource(VISIBILITY_API, "localqueues")
        except (ApiError, aiohttp.ClientError, TimeoutError) as exc:
            self._unserved_until = self._clock() + self._retry_unserved
            self._read.clear()
            log.info(
                "Kueue's visibility API is not served here: comments show no queue position",
                error=str(exc),
                retry_in=self._retry_unserved,
            )
            return None
        try:
            async with asyncio.timeout(READ_TIMEOUT):
                summary = await self._client.get(
                    VISIBILITY_API,
                    "localqueues",
                    local_queue,
                    namespace=namespace,
                    subresource="pendingworkloads",
                )
        except (ApiError, aiohttp.ClientError, TimeoutError) as exc:
            if isinstance(exc, ApiError) and exc.status in (403, 503):
                self._unserved_until = self._clock() + self._retry_unserved
                self._read.clear()
            log.info(
                "cannot read a LocalQueue's pending Workloads",
                namespace=namespace,
                local_queue=local_queue,
                error=str(exc),
            )
            return None
        return parse_pending(summary)
