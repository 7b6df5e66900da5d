"""The controller's work queue: client-go's ``workqueue`` semantics on one asyncio event loop.

Why a queue of keys and not of events: reconciliation is level-based, so a burst of changes to one
object needs one reconcile, not one per change. The queue guarantees, as client-go's does:

- dedup: a key that is already waiting is not added twice (``dirty`` set);
- exclusion: a key handed out by ``get`` is not handed out again until ``done`` (``processing``);
  one added meanwhile is only marked dirty, and ``done`` queues it again, so no change is lost;
- delays: ``add_after`` keeps a heap; when a key is already waiting, the earlier time wins;
- rate limiting: ``add_rate_limited`` waits as long as the rate limiter says; ``forget`` resets it;
- shutdown: adds are ignored, queued keys are still handed out, then ``get`` returns ``None``;
  ``shutdown_with_drain`` also waits until every key handed out is ``done``.

The client-go layers (plain, delaying, rate limiting) are one class here: on one event loop there are
no locks to separate, and every indirection costs on the hot path. Delays need no task of their own:
the queue owns at most one timer handle on the loop, armed for the earliest delayed key only while
some ``get`` is waiting, and due keys are also promoted whenever ``get`` looks. Metrics are plain
counters read at scrape time (see ``bridge.runtime.metrics``).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from bisect import bisect_left
from collections import deque
from collections.abc import Hashable
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry

from bridge.runtime.metrics import (
    REGISTRY,
    WORKQUEUE_DURATION_BUCKETS,
    LightHistogram,
    QueueStats,
    runtime_metrics,
)
from bridge.runtime.ratelimit import Clock, RateLimiter, default_controller_rate_limiter

__all__ = ["WorkQueue"]

K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    """A dedup, delaying, rate-limited FIFO of hashable keys (``None`` is not a valid key).

    ``name`` labels the ``workqueue_*`` metrics (``controller`` defaults to it); an empty name reports
    no metrics, as in client-go. ``clock`` must be monotonic seconds; ``rate_limiter`` defaults to
    client-go's controller limiter on the same clock.
    """

    __slots__ = (
        "__weakref__",
        "_adds",
        "_clock",
        "_controller",
        "_dirty",
        "_drain_waiters",
        "_getters",
        "_heap",
        "_limiter",
        "_loop",
        "_name",
        "_processing",
        "_queue",
        "_queue_duration",
        "_retries",
        "_seq",
        "_shutting_down",
        "_timer",
        "_timer_at",
        "_waiting",
        "_work_duration",
    )

    def __init__(
        self,
        *,
        name: str = "",
        controller: str | None = None,
        rate_limiter: RateLimiter | None = None,
        clock: Clock = time.monotonic,
        registry: CollectorRegistry | None = REGISTRY,
    ) -> None:
        self._name = name
        self._controller = name if controller is None else controller
        self._clock = clock
        self._limiter = (
            rate_limiter if rate_limiter is not None else default_controller_rate_limiter(clock=clock)
        )
        self._queue: deque[K] = deque()
        self._dirty: dict[K, float] = {}  # key -> when it was added (for the queue duration)
        self._processing: dict[K, float] = {}  # key -> when a worker got it
        self._heap: list[tuple[float, int, K]] = []  # (due, tie-breaker, key)
        self._waiting: dict[K, tuple[float, int, K]] = {}  # delayed key -> its live heap entry
        self._seq = itertools.count()
        self._getters: deque[asyncio.Future[None]] = deque()
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._shutting_down = False
        self._adds = 0
        self._retries = 0
        self._queue_duration = LightHistogram(WORKQUEUE_DURATION_BUCKETS)
        self._work_duration = LightHistogram(WORKQUEUE_DURATION_BUCKETS)
        if name and registry is not None:
            runtime_metrics(registry).workqueues.register(name, self)

    @property
    def name(self) -> str:
        return self._name

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    def __len__(self) -> int:
        """Keys ready to be handed out now (not the delayed ones, not those being processed)."""
        return len(self._queue)

    # -- adding ---------------------------------------------------------------------------------

    def add(self, key: K) -> None:
        """Queue ``key`` unless it is already waiting; if it is being processed, queue it on ``done``."""
        if self._shutting_down:
            return
        dirty = self._dirty
        if key in dirty:
            return
        dirty[key] = self._clock()
        self._adds += 1
        if key in self._processing:
            return
        self._queue.append(key)
        if self._getters:
            self._wake(1)

    def add_after(self, key: K, delay: float) -> None:
        """Add ``key`` once ``delay`` seconds have passed; if it is already waiting, the earlier time wins."""
        if self._shutting_down:
            return
        self._retries += 1  # client-go counts every delayed add as a retry
        if delay <= 0:
            self.add(key)
            return
        due = self._clock() + delay
        known = self._waiting.get(key)
        if known is not None and known[0] <= due:
            return
        # The superseded entry stays in the heap and is skipped when it surfaces.
        entry = self._waiting[key] = (due, next(self._seq), key)
        heapq.heappush(self._heap, entry)
        if self._getters:
            self._arm_timer()

    def add_rate_limited(self, key: K) -> None:
        """Add ``key`` after the delay the rate limiter gives for one more failure of it."""
        if self._shutting_down:
            return
        self.add_after(key, self._limiter.when(key))

    def forget(self, key: K) -> None:
        """Reset the rate limiter's memory of ``key`` (call ``done`` as well)."""
        self._limiter.forget(key)

    def num_requeues(self, key: K) -> int:
        """How many rate-limited adds ``key`` has had since it was last forgotten."""
        return self._limiter.retries(key)

    # -- taking ---------------------------------------------------------------------------------

    def get_nowait(self) -> K:
        """Hand out the next ready key and mark it processing; ``asyncio.QueueEmpty`` if there is none."""
        now = self._clock()
        heap = self._heap
        if heap and heap[0][0] <= now:
            self._promote(now)
        if not self._queue:
            raise asyncio.QueueEmpty
        key = self._queue.popleft()
        waited = now - self._dirty.pop(key)
        histogram = self._queue_duration  # LightHistogram.observe, inlined: this is the hot path
        histogram.counts[bisect_left(histogram.bounds, waited)] += 1
        histogram.total += waited
        self._processing[key] = now
        return key

    async def get(self) -> K | None:
        """Wait for the next ready key; ``None`` once the queue is shut down and has nothing queued."""
        while True:
            if self._queue or self._heap:
                try:
                    return self.get_nowait()
                except asyncio.QueueEmpty:
                    pass
            if self._shutting_down:
                return None
            loop = self._loop
            if loop is None:
                loop = self._loop = asyncio.get_running_loop()
            waiter: asyncio.Future[None] = loop.create_future()
            self._getters.append(waiter)
            if self._heap:
                self._arm_timer()
            try:
                await waiter
            except asyncio.CancelledError:
                # Woken and then cancelled before running: pass the wake-up on to another getter.
                if waiter.done() and not waiter.cancelled() and (self._queue or self._shutting_down):
                    self._wake(1)
                raise

    def done(self, key: K) -> None:
        """Finish processing ``key``; if it was added meanwhile, queue it again now."""
        started = self._processing.pop(key, None)
        if started is None:
            return
        worked = self._clock() - started
        histogram = self._work_duration
        histogram.counts[bisect_left(histogram.bounds, worked)] += 1
        histogram.total += worked
        if key in self._dirty:
            self._queue.append(key)
            if self._getters:
                self._wake(1)
        if not self._processing and self._drain_waiters:
            for waiter in self._drain_waiters:
                if not waiter.done():
                    waiter.set_result(None)
            self._drain_waiters.clear()

    # -- stopping -------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Ignore further adds, drop delayed keys; ``get`` hands out what is queued, then ``None``."""
        if not self._shutting_down:
            self._shutting_down = True
            self._heap.clear()
            self._waiting.clear()
            self._cancel_timer()
        self._wake(len(self._getters))

    async def shutdown_with_drain(self) -> None:
        """``shutdown``, then wait until every key handed out has been marked ``done``."""
        self.shutdown()
        while self._processing:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._drain_waiters.append(waiter)
            await waiter

    # -- metrics --------------------------------------------------------------------------------

    def stats(self) -> QueueStats:
        """The figures behind the ``workqueue_*`` metrics, as of now."""
        now = self._clock()
        started = self._processing.values()
        return QueueStats(
            name=self._name,
            controller=self._controller,
            depth=len(self._queue),
            adds=self._adds,
            retries=self._retries,
            queue_duration=self._queue_duration,
            work_duration=self._work_duration,
            unfinished_work_seconds=sum(now - t for t in started),
            longest_running_processor_seconds=(now - min(started)) if started else 0.0,
        )

    # -- internals ------------------------------------------------------------------------------

    def _promote(self, now: float) -> None:
        """Move every delayed key that is due into the queue."""
        heap = self._heap
        waiting = self._waiting
        while heap and heap[0][0] <= now:
            entry = heapq.heappop(heap)
            key = entry[2]
            if waiting.get(key) is entry:  # else superseded by an earlier add_after, or already due
                del waiting[key]
                self.add(key)

    def _wake(self, n: int) -> None:
        getters = self._getters
        while n > 0 and getters:
            waiter = getters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                n -= 1

    def _arm_timer(self) -> None:
        """Make sure a timer fires when the earliest delayed key is due (one handle, re-armed)."""
        due = self._heap[0][0]
        if self._timer is not None:
            if self._timer_at <= due:
                return
            self._timer.cancel()
        loop = self._loop if self._loop is not None else asyncio.get_running_loop()
        self._timer_at = due
        self._timer = loop.call_later(max(0.0, due - self._clock()), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._promote(self._clock())  # each promoted key wakes one getter
        if self._getters and self._heap:
            self._arm_timer()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
