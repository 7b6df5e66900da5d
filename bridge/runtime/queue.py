"""The controller's work queue: client-go's ``workqueue`` semantics with controller-runtime's priorities.

Why a queue of keys and not of events: reconciliation is level-based, so a burst of changes to one
object needs one reconcile, not one per change. The queue guarantees, as client-go's does:

- dedup: a key that is already waiting is not added twice (``dirty`` set);
- exclusion: a key handed out by ``get`` is not handed out again until ``done`` (``processing``);
  one added meanwhile is only marked dirty, and ``done`` queues it again, so no change is lost;
- delays: ``add_after`` keeps a heap; when a key is already waiting, the earlier time wins;
- batching: ``add_batched`` delays a key that is not queued yet, so that the burst of changes one
  action sets off is one reconcile (client-go's users do it with ``AddAfter``, as the EndpointSlice
  controller's ``--endpointslice-updates-batch-period``);
- rate limiting: ``add_rate_limited`` waits as long as the rate limiter says; ``forget`` resets it;
- shutdown: adds are ignored, queued keys are still handed out, then ``get`` returns ``None``;
  ``shutdown_with_drain`` also waits until every key handed out is ``done``.

Priorities, as controller-runtime's priority queue (v0.20+, the default since v0.23) has them: every
add takes a ``priority`` (an int, default 0; higher is handed out first). Why: after a restart the
informers' initial lists enqueue every object at once, and a real change made meanwhile would wait
behind thousands of "nothing changed" keys. The controller's handlers add initial-list and resync
events at ``LOW_PRIORITY`` (-100), so live events overtake that backlog. The rules:

- the highest priority with a ready key goes first; within one priority, keys go in the order they
  became ready (an add, a delay falling due, ``done`` re-queueing a key dirtied while processing);
- a key added again while it waits keeps the higher of the two priorities: upgraded, never
  downgraded. An upgraded key joins the back of its new priority's line (controller-runtime keeps
  its original place in time; both hand out every key of the higher priority first);
- a delayed key carries its priority too: ``add_after`` of a key already delayed keeps the earlier
  time and the higher priority. A delayed key that falls due becomes ready at its due time: every
  operation first moves what has fallen due into the lines, so a retry that fell due before an add
  is ahead of it;
- a key dirtied while being processed is re-queued by ``done`` at the highest priority it was added
  with meanwhile; ``get_with_priority`` tells the priority a key was handed out with, which the
  controller uses for its requeues (as controller-runtime does).

The client-go layers (plain, delaying, rate limiting) are one class here: on one event loop there are
no locks to separate, and every indirection costs on the hot path. Each priority has its own FIFO
line (a deque; in practice 0 and, while a backlog waits, -100), so adding and taking stay O(1); while
only line 0 exists, ``get`` takes it directly, as client-go's single FIFO. An upgrade leaves the
key's old entry behind in the lower line, counted as stale and skipped when it surfaces, instead of
an O(n) removal; lines other than 0 are dropped once drained. Delays need no task of their own:
the queue owns at most one timer handle on the loop, armed for the earliest delayed key only while
some ``get`` is waiting, and due keys are also promoted whenever the queue is used (``len`` and
``stats``, hence ``workqueue_depth``, included). Metrics are
plain counters read at scrape time (see ``bridge.runtime.metrics``).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from bisect import bisect_left
from collections import deque
from collections.abc import Hashable
from typing import Final, Generic, TypeVar

from prometheus_client import CollectorRegistry

from bridge.runtime.metrics import (
    REGISTRY,
    WORKQUEUE_DURATION_BUCKETS,
    LightHistogram,
    QueueStats,
    runtime_metrics,
)
from bridge.runtime.ratelimit import Clock, RateLimiter, default_controller_rate_limiter

__all__ = ["LOW_PRIORITY", "WorkQueue"]

K = TypeVar("K", bound=Hashable)

LOW_PRIORITY: Final = -100
"""controller-runtime's ``handler.LowPriority``: initial-list adds and unchanged (resync) updates."""


class WorkQueue(Generic[K]):
    """A dedup, delaying, rate-limited priority queue of hashable keys (``None`` is not a valid key).

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
        "_handed",
        "_heap",
        "_levels",
        "_limiter",
        "_line0",
        "_lines",
        "_loop",
        "_n_stale",
        "_name",
        "_plain",
        "_priority",
        "_processing",
        "_queue_duration",
        "_retries",
        "_seq",
        "_shutting_down",
        "_stale",
        "_timer",
        "_timer_at",
        "_waiting",
        "_waiting_priority",
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
        # Ready keys: one FIFO line per priority; ``_levels`` lists them highest priority first.
        self._line0: deque[K] = deque()
        self._lines: dict[int, deque[K]] = {0: self._line0}
        self._levels: list[tuple[int, deque[K]]] = [(0, self._line0)]
        self._plain = True  # only line 0 exists and nothing is stale: ``get`` takes the fast path
        # Entries left behind in a lower line by an upgrade: priority -> key -> how many; skipped.
        self._stale: dict[int, dict[K, int]] = {}
        self._n_stale = 0
        self._dirty: dict[K, float] = {}  # key -> when it was added (for the queue duration)
        self._priority: dict[K, int] = {}  # dirty key -> its priority, only when not 0
        self._processing: dict[K, float] = {}  # key -> when a worker got it
        self._handed: dict[K, int] = {}  # key processing -> the priority it was handed out with, if not 0
        self._heap: list[tuple[float, int, K]] = []  # (due, tie-breaker, key)
        self._waiting: dict[K, tuple[float, int, K]] = {}  # delayed key -> its live heap entry
        self._waiting_priority: dict[K, int] = {}  # delayed key -> its priority, when not 0
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
        """Keys ready to be handed out now (not the delayed ones, not those being processed).

        Delayed keys that have fallen due count: they are moved into their lines first, as every
        other operation does, so the depth does not wait for the next add, get, done or timer.
        """
        heap = self._heap
        if heap:
            now = self._clock()
            if heap[0][0] <= now:
                self._promote(now)
        return sum([len(line) for _, line in self._levels]) - self._n_stale

    # -- adding ---------------------------------------------------------------------------------

    def add(self, key: K, priority: int = 0) -> None:
        """Queue ``key`` unless it is already waiting; if it is being processed, queue it on ``done``.

        A key already waiting (or dirty while processing) with a lower priority is upgraded to
        ``priority``; one with a higher priority keeps it. (``priority`` is not keyword-only, unlike
        the other options: a keyword-only default costs a dict lookup on every call of this hot path.)
        """
        if self._shutting_down:
            return
        now = self._clock()
        heap = self._heap
        if heap and heap[0][0] <= now:
            self._promote(now)
        dirty = self._dirty
        if key in dirty:
            if (priority > 0 or self._priority) and priority > self._priority.get(key, 0):
                self._upgrade(key, priority)
            return
        if priority:
            self._ready(key, priority, now)
            return
        dirty[key] = now
        self._adds += 1
        if key in self._processing:
            return
        self._line0.append(key)
        if self._getters:
            self._wake(1)

    def add_after(self, key: K, delay: float, *, priority: int = 0) -> None:
        """Add ``key`` once ``delay`` seconds have passed.

        If it is already delayed, the earlier time and the higher priority win.
        """
        if self._shutting_down:
            return
        self._retries += 1  # client-go counts every delayed add as a retry
        if delay <= 0:
            self.add(key, priority=priority)
            return
        self._delay(key, self._clock() + delay, priority)

    def add_batched(self, key: K, period: float) -> None:
        """Add ``key`` (priority 0) ``period`` seconds from now, unless it is queued already.

        A key already queued, or dirtied while it is processed, will be handed out with whatever
        changes until then: nothing to add, but one queued below priority 0 (an initial list's
        backlog) is raised to 0, as ``add`` would. Else the changes that follow within ``period``
        (the other objects one action touches) are all seen by one reconcile. A key delayed
        already (a requeue) keeps the earlier of the two times, as with ``add_after``: the
        reconcile then returns its own requeue again. Not a retry: unlike ``add_after`` it is not
        counted in ``workqueue_retries_total``.
        """
        if self._shutting_down:
            return
        now = self._clock()
        heap = self._heap
        if heap and heap[0][0] <= now:
            self._promote(now)
        if key in self._dirty:
            if self._priority.get(key, 0) < 0:
                self._upgrade(key, 0)  # a live change overtakes a backlog, as with ``add``
            return
        if period <= 0:
            self.add(key)
            return
        self._delay(key, now + period, 0)

    def _delay(self, key: K, due: float, priority: int) -> None:
        """Hold ``key`` until ``due``; a key already delayed keeps the earlier time, higher priority."""
        known = self._waiting.get(key)
        if known is not None:
            known_priority = self._waiting_priority.get(key, 0)
            if known[0] <= due:
                if priority > known_priority:
                    self._waiting_priority[key] = priority
                return
            priority = max(priority, known_priority)
        # The superseded entry stays in the heap and is skipped when it surfaces.
        entry = self._waiting[key] = (due, next(self._seq), key)
        heapq.heappush(self._heap, entry)
        if priority:
            self._waiting_priority[key] = priority
        elif known is not None:
            self._waiting_priority.pop(key, None)
        if self._getters:
            self._arm_timer()

    def add_rate_limited(self, key: K, *, priority: int = 0) -> None:
        """Add ``key`` after the delay the rate limiter gives for one more failure of it."""
        if self._shutting_down:
            return
        self.add_after(key, self._limiter.when(key), priority=priority)

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
        if self._plain:  # only priority 0 queued: one FIFO, as client-go's
            line = self._line0
            if not line:
                raise asyncio.QueueEmpty
            key = line.popleft()
        else:
            key = self._pop()
        waited = now - self._dirty.pop(key)
        histogram = self._queue_duration  # LightHistogram.observe, inlined: this is the hot path
        histogram.counts[bisect_left(histogram.bounds, waited)] += 1
        histogram.total += waited
        self._processing[key] = now
        return key

    def get_nowait_with_priority(self) -> tuple[K, int]:
        """``get_nowait``, and the priority the key is handed out with."""
        key = self.get_nowait()
        return key, self._handed.get(key, 0)

    async def get(self) -> K | None:
        """Wait for the next ready key; ``None`` once the queue is shut down and has nothing queued."""
        while True:
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
                if waiter.done() and not waiter.cancelled() and (len(self) or self._shutting_down):
                    self._wake(1)
                raise

    async def get_with_priority(self) -> tuple[K, int] | None:
        """``get``, and the priority the key is handed out with (``None`` as ``get``)."""
        key = await self.get()
        if key is None:
            return None
        return key, self._handed.get(key, 0)

    def done(self, key: K) -> None:
        """Finish processing ``key``; if it was added meanwhile, queue it again now (at its priority)."""
        processing = self._processing
        started = processing.pop(key, None)
        if started is None:
            return
        now = self._clock()
        heap = self._heap
        if heap and heap[0][0] <= now:
            processing[key] = started  # promoted while still processing: ``key`` only becomes dirty
            self._promote(now)
            del processing[key]
        worked = now - started
        histogram = self._work_duration
        histogram.counts[bisect_left(histogram.bounds, worked)] += 1
        histogram.total += worked
        if self._handed:
            self._handed.pop(key, None)
        if key in self._dirty:
            priority = self._priority.get(key, 0) if self._priority else 0
            if priority:
                self._line(priority).append(key)
            else:
                self._line0.append(key)
            if self._getters:
                self._wake(1)
        if not processing and self._drain_waiters:
            for waiter in self._drain_waiters:
                if not waiter.done():
                    waiter.set_result(None)
            self._drain_waiters.clear()

    # -- stopping -------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Ignore further adds, drop delayed keys; ``get`` hands out what is queued, then ``None``.

        Delayed keys already due are queued first, as client-go's delaying queue would have done.
        """
        if not self._shutting_down:
            heap = self._heap
            if heap:
                now = self._clock()
                if heap[0][0] <= now:
                    self._promote(now)
            self._shutting_down = True
            heap.clear()
            self._waiting.clear()
            self._waiting_priority.clear()
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
        """The figures behind the ``workqueue_*`` metrics, as of now (delayed keys due count as queued)."""
        depth = len(self)  # promotes the delayed keys that have fallen due
        now = self._clock()
        started = self._processing.values()
        return QueueStats(
            name=self._name,
            controller=self._controller,
            depth=depth,
            adds=self._adds,
            retries=self._retries,
            queue_duration=self._queue_duration,
            work_duration=self._work_duration,
            unfinished_work_seconds=sum(now - t for t in started),
            longest_running_processor_seconds=(now - min(started)) if started else 0.0,
        )

    # -- internals ------------------------------------------------------------------------------

    def _line(self, priority: int) -> deque[K]:
        """The FIFO line of ``priority``, created in its place among the levels when missing."""
        line = self._lines.get(priority)
        if line is None:
            line = self._lines[priority] = deque()
            levels = self._levels
            at = 0
            while at < len(levels) and levels[at][0] > priority:
                at += 1
            levels.insert(at, (priority, line))
            self._plain = False
        return line

    def _upgrade(self, key: K, priority: int) -> None:
        """Raise the priority of dirty ``key``; a queued key moves to the back of its new line."""
        known = self._priority
        old = known.get(key, 0)
        if priority:
            known[key] = priority
        else:
            del known[key]
        if key in self._processing:
            return  # dirty while processing: ``done`` queues it at its new priority
        skip = self._stale.setdefault(old, {})
        skip[key] = skip.get(key, 0) + 1
        self._n_stale += 1
        self._plain = False
        self._line(priority).append(key)

    def _pop(self) -> K:
        """Take the first live key of the highest line; ``QueueEmpty`` if there is none.

        Skips the entries left behind by upgrades: an upgrade leaves one only when it moves the key's
        live entry, so a key's stale entries in a line are all older than its live entry there, and
        the first ones met are the stale ones. Lines other than 0 left empty are dropped, so that a
        drained backlog brings the queue back to its single-FIFO fast path.
        """
        stale = self._stale
        drained = False  # a line other than 0 emptied by skipping stale entries
        for priority, line in self._levels:
            if not line:
                continue
            skip = stale.get(priority) if stale else None
            while line:
                key = line.popleft()
                if skip is not None:
                    left = skip.get(key)
                    if left is not None:  # left behind by an upgrade: the key waits higher up
                        self._n_stale -= 1
                        if left > 1:
                            skip[key] = left - 1
                        else:
                            del skip[key]
                            if not skip:
                                del stale[priority]
                                skip = None
                        continue
                if priority:
                    del self._priority[key]
                    self._handed[key] = priority
                if drained or (priority and not line):
                    self._drop_empty_lines()
                elif not self._n_stale and len(self._levels) == 1:
                    self._plain = True
                return key
            drained = drained or priority != 0  # it held only stale entries
        self._drop_empty_lines()
        raise asyncio.QueueEmpty

    def _drop_empty_lines(self) -> None:
        levels = [(priority, line) for priority, line in self._levels if line or not priority]
        self._levels = levels
        self._lines = dict(levels)
        self._plain = len(levels) == 1 and not self._n_stale

    def _ready(self, key: K, priority: int, now: float) -> None:
        """``add`` without the shutdown check and without promoting (used by ``_promote``)."""
        dirty = self._dirty
        if key in dirty:
            if priority > self._priority.get(key, 0):
                self._upgrade(key, priority)
            return
        dirty[key] = now
        self._adds += 1
        if priority:
            self._priority[key] = priority
        if key in self._processing:
            return
        self._line(priority).append(key)
        if self._getters:
            self._wake(1)

    def _promote(self, now: float) -> None:
        """Move every delayed key that is due into its line, earliest due first."""
        heap = self._heap
        waiting = self._waiting
        waiting_priority = self._waiting_priority
        while heap and heap[0][0] <= now:
            entry = heapq.heappop(heap)
            key = entry[2]
            if waiting.get(key) is entry:  # else superseded by an earlier add_after, or already due
                del waiting[key]
                priority = waiting_priority.pop(key, 0) if waiting_priority else 0
                self._ready(key, priority, now)

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
