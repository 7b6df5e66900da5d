"""Where each waiting Workload stands in its queue, from Kueue's visibility API, as a source of change.

A Slurm user waiting on Kueue sees why in the job's comment (``squeue -o %k``); where the job
stands in line is the other half of what they want to know. Kueue serves it through an aggregated
API, ``visibility.kueue.x-k8s.io``, per LocalQueue (``pendingworkloads``): one read answers for every
waiting Workload of that queue.

Places move without any event on the Workload that moved (a Workload ahead was admitted), so they
are polled: :class:`QueuePositionSource` reads the pending list of every LocalQueue the bridge's
JobSets use every :data:`MAX_AGE` seconds and delivers, like an informer, only the Workloads whose
place *as shown* changed. A deep queue then costs one read per LocalQueue per poll and a reconcile
per job whose text moved, not a look at every queued job on a timer.

Every admission ahead would move every job in line by one place, and each change would be one more
reconcile and write to slurmctld per job. :func:`position_text` therefore shows the exact place only
near the head of the queue and its order of magnitude further back (11th-100th, 101st-1000th): each
admission moves one job across each boundary, so every boundary is a change in every job's wait,
and the source compares those texts, not the numbers.

A cluster may not serve the API (the feature gate off, the APIService missing, no RBAC to read it):
it is then asked again only after :data:`RETRY_UNSERVED` seconds, and the comments carry no place.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, NamedTuple

import aiohttp
import msgspec
import orjson
import structlog

from bridge.runtime.client import Client
from bridge.runtime.errors import ApiError
from bridge.runtime.handlers import Object
from bridge.runtime.sources import PolledSource

__all__ = [
    "MAX_AGE",
    "MISSING_AGE",
    "RETRY_UNSERVED",
    "VISIBILITY_API",
    "QueuePosition",
    "QueuePositionSource",
    "decode_pending",
    "parse_pending",
    "position_text",
]

log = structlog.get_logger(__name__)

VISIBILITY_API = "visibility.kueue.x-k8s.io/v1beta2"
MAX_AGE = 10.0
"""Seconds between two reads of the pending lists."""
MISSING_AGE = 1.0
"""Least seconds between two reads: a newcomer asks for one sooner, at most this often."""
READ_TIMEOUT = 5.0
"""Seconds one read may take."""
PAGE_LIMIT = 1000
"""Kueue's ``pendingworkloads`` answers with at most this many (its default ``limit``)."""
FORGET_ASKED = 600.0
"""Seconds after which a newcomer's lookup is forgotten (it bounds what is kept)."""
RETRY_UNSERVED = 300.0
"""Seconds before a cluster that did not serve the visibility API is asked again."""
EXACT_UP_TO = 10
"""Places shown exactly (1st .. 10th); further back, the range the place falls in."""
_RANGES = (100, 1000)
"""The ends of the ranges shown beyond :data:`EXACT_UP_TO`: decades, the fewest that still say how
far back a job is."""


class QueuePosition(NamedTuple):
    """A pending Workload's place, counted from 0 as Kueue does (a tuple: a deep queue's summary
    makes a thousand of them per read)."""

    in_cluster_queue: int
    in_local_queue: int


BEYOND_THE_LIST = QueuePosition(in_cluster_queue=PAGE_LIMIT, in_local_queue=PAGE_LIMIT)
"""Where a Workload missing from a full list stands: Kueue lists the first :data:`PAGE_LIMIT` only."""


def position_text(position: QueuePosition) -> str:
    """``"3rd in its ClusterQueue"``, ``"11th-100th in its ClusterQueue"``: one place or a range."""
    return _place_text(position.in_cluster_queue + 1)


@functools.lru_cache(maxsize=4096)
def _place_text(place: int) -> str:
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


class _Meta(msgspec.Struct):
    name: str | None = None


class _Pending(msgspec.Struct):
    metadata: _Meta | None = None
    positionInClusterQueue: int | None = None  # noqa: N815 - Kueue's field name
    positionInLocalQueue: int | None = None  # noqa: N815 - Kueue's field name


class _Summary(msgspec.Struct):
    items: list[_Pending] | None = None


_SUMMARY = msgspec.json.Decoder(_Summary)


def decode_pending(body: bytes) -> dict[str, QueuePosition]:
    """:func:`parse_pending` of the answer's bytes, decoded straight into the three fields read
    (each item's other fields are skipped, not built): a deep queue's summary is a thousand items.
    An answer of another shape (an odd item) goes through :func:`parse_pending`, which skips what it
    cannot read. Raises ``ValueError`` when the body is not JSON."""
    try:
        summary = _SUMMARY.decode(body)
    except msgspec.ValidationError:
        return parse_pending(orjson.loads(body))
    positions: dict[str, QueuePosition] = {}
    for item in summary.items or ():
        name = item.metadata.name if item.metadata is not None else None
        in_cq, in_lq = item.positionInClusterQueue, item.positionInLocalQueue
        if name is not None and in_cq is not None and in_lq is not None:
            positions[name] = QueuePosition(in_cluster_queue=in_cq, in_local_queue=in_lq)
    return positions


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


def place_object(*, namespace: str, local_queue: str, workload: str, position: QueuePosition) -> Object:
    """What the source stores for one pending Workload: its name and the text of its place only, so
    an update is delivered exactly when the text shown changes."""
    return {
        "metadata": {"namespace": namespace, "name": workload},
        "localQueue": local_queue,
        "place": position_text(position),
    }


class QueuePositionSource(PolledSource):
    """The pending Workloads of the LocalQueues ``queues()`` names, keyed ``namespace/workload``.

    Never fails a poll (a controller waits for its sources to sync): a LocalQueue whose read failed
    keeps its last places until a read succeeds, and a cluster that does not serve the API has no
    places at all.
    """

    def __init__(
        self,
        *,
        client: Client,
        queues: Callable[[], Iterable[tuple[str, str]]],
        interval: float = MAX_AGE,
        min_interval: float = MISSING_AGE,
        retry_unserved: float = RETRY_UNSERVED,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        super().__init__(
            name="queue-positions", poll=self._read_all, key=_key, interval=interval, sleep=sleep
        )
        self._client = client
        self._queues = queues
        self._min_interval = min_interval
        self._retry_unserved = retry_unserved
        self._clock = clock
        self._pause = sleep
        self._unserved_until = float("-inf")
        self._full: set[tuple[str, str]] = set()
        """LocalQueues whose last list was a full page: a Workload missing there stands beyond it."""
        self._started_at = float("-inf")
        self._answered_at = float("-inf")
        """When the last poll that answered began (every queue read, or the API found unserved)."""
        self._asked: dict[tuple[str, str], float] = {}

    def place(self, *, namespace: str, local_queue: str, workload: str) -> str | None:
        """The text of the Workload's place; None when it is not known to be pending there."""
        obj = self.store.get(f"{namespace}/{workload}")
        if obj is not None and obj.get("localQueue") == local_queue:
            return str(obj["place"])
        if (namespace, local_queue) in self._full:
            return position_text(BEYOND_THE_LIST)
        return None

    def looking_up(self, *, namespace: str, local_queue: str, workload: str) -> bool:
        """True while a newcomer's place is being read: no poll has answered since it was first
        asked for (one is due within :data:`MISSING_AGE`). False once one has, whatever it said,
        and while the cluster does not serve the API."""
        if self.place(namespace=namespace, local_queue=local_queue, workload=workload) is not None:
            return False
        if self._clock() < self._unserved_until:
            return False
        key = (namespace, workload)
        asked = self._asked.get(key)
        if asked is None:
            self._asked[key] = self._clock()
            self.trigger()
            return True
        return self._answered_at <= asked

    async def _read_all(self) -> list[Object]:
        wait = self._started_at + self._min_interval - self._clock()
        if wait > 0:
            await self._pause(wait)
        started = self._started_at = self._clock()
        if started < self._unserved_until:
            return []
        queues = sorted(set(self._queues()))
        objects: list[Object] = []
        if queues and not await self._served():
            self._full.clear()
            self._answered(started)
            return []
        answered = True
        for namespace, local_queue in queues:
            positions = await self._read(namespace, local_queue)
            if positions is None:
                answered = False
                if self._clock() < self._unserved_until:
                    self._full.clear()
                    self._answered(started)
                    return []
                objects.extend(o for o in self.store.list() if _queue_of(o) == (namespace, local_queue))
                continue
            if len(positions) >= PAGE_LIMIT:
                self._full.add((namespace, local_queue))
            else:
                self._full.discard((namespace, local_queue))
            placed = self._placed
            objects.extend(
                placed(namespace, local_queue, name, position) for name, position in positions.items()
            )
        self._full.intersection_update(queues)
        if answered:
            self._answered(started)
        return objects

    def _placed(self, namespace: str, local_queue: str, workload: str, position: QueuePosition) -> Object:
        """The stored object when the Workload's place reads the same as stored (the store then has
        nothing to compare nor index again), else a new :func:`place_object`."""
        stored = self.store.get(f"{namespace}/{workload}")
        if (
            stored is not None
            and stored["place"] == position_text(position)
            and stored.get("localQueue") == local_queue
        ):
            return stored
        return place_object(
            namespace=namespace, local_queue=local_queue, workload=workload, position=position
        )

    def _answered(self, started: float) -> None:
        self._answered_at = started
        # A newcomer answered stays known as answered (no second lookup while it waits), for a
        # while: one that still waits then may cost one more early read.
        forget_before = started - FORGET_ASKED
        if any(at < forget_before for at in self._asked.values()):
            self._asked = {key: at for key, at in self._asked.items() if at >= forget_before}

    async def _served(self) -> bool:
        """Whether the cluster serves the API; if not, no read for ``retry_unserved`` seconds."""
        try:
            async with asyncio.timeout(READ_TIMEOUT):
                await self._client.resource(VISIBILITY_API, "localqueues")
        except (ApiError, aiohttp.ClientError, TimeoutError) as exc:
            self._unserved(exc)
            return False
        return True

    def _unserved(self, exc: BaseException) -> None:
        self._unserved_until = self._clock() + self._retry_unserved
        log.info(
            "Kueue's visibility API is not served here: comments show no queue position",
            error=str(exc),
            retry_in=self._retry_unserved,
        )

    async def _read(self, namespace: str, local_queue: str) -> dict[str, QueuePosition] | None:
        """One LocalQueue's pending Workloads; None when they could not be read. Forbidden or
        unavailable is the cluster's (no read for ``retry_unserved``); any other failure is this
        queue's, for this read only."""
        try:
            async with asyncio.timeout(READ_TIMEOUT):
                return await self._client.get_decoded(
                    VISIBILITY_API,
                    "localqueues",
                    local_queue,
                    decode=decode_pending,
                    namespace=namespace,
                    subresource="pendingworkloads",
                )
        except (ApiError, aiohttp.ClientError, TimeoutError, ValueError) as exc:
            if isinstance(exc, ApiError) and exc.status in (403, 503):
                self._unserved(exc)
                return None
            log.info(
                "cannot read a LocalQueue's pending Workloads",
                namespace=namespace,
                local_queue=local_queue,
                error=str(exc),
            )
            return None


def _key(obj: Object) -> str:
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}"


def _queue_of(obj: Object) -> tuple[str, str]:
    return (str(obj["metadata"]["namespace"]), str(obj.get("localQueue")))
