"""The work queue on a real event loop: waking getters, delays, shutdown, priorities, concurrent workers.

The full semantics are checked against a model in ``test_queue_stateful.py``; these are examples.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from bridge.runtime.queue import LOW_PRIORITY, WorkQueue
from bridge.runtime.ratelimit import ItemExponentialFailureRateLimiter


class FakeClock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


async def test_get_waits_for_an_add() -> None:
    queue: WorkQueue[str] = WorkQueue()
    getter = asyncio.create_task(queue.get())
    await asyncio.sleep(0.01)
    assert not getter.done()
    queue.add("a")
    assert await asyncio.wait_for(getter, 1) == "a"


async def test_dedup_and_dirty_while_processing() -> None:
    queue: WorkQueue[str] = WorkQueue()
    for _ in range(3):
        queue.add("a")
    assert len(queue) == 1
    assert await queue.get() == "a"
    queue.add("a")  # while processing: only marked dirty
    queue.add("a")
    assert len(queue) == 0
    waiter = asyncio.create_task(queue.get())
    await asyncio.sleep(0.01)
    assert not waiter.done(), "a key being processed is not handed out again"
    queue.done("a")
    assert await asyncio.wait_for(waiter, 1) == "a"
    queue.done("a")
    assert len(queue) == 0


async def test_add_after_wakes_a_waiting_getter_and_earliest_wins() -> None:
    queue: WorkQueue[str] = WorkQueue()
    getter = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    queue.add_after("a", 30.0)
    queue.add_after("a", 0.02)  # earlier: wins
    queue.add_after("a", 10.0)  # later: ignored
    loop = asyncio.get_running_loop()
    start = loop.time()
    assert await asyncio.wait_for(getter, 2) == "a"
    assert 0.015 <= loop.time() - start < 1.0
    queue.done("a")
    # The superseded entries do not fire again.
    assert queue.stats().depth == 0


async def test_delayed_keys_come_out_in_due_order() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("late", 0.06)
    queue.add_after("early", 0.02)
    queue.add_after("middle", 0.04)
    got = [await asyncio.wait_for(queue.get(), 2) for _ in range(3)]
    assert got == ["early", "middle", "late"]


async def test_rate_limited_add_backs_off_and_forget_resets() -> None:
    queue: WorkQueue[str] = WorkQueue(rate_limiter=ItemExponentialFailureRateLimiter(base=0.01))
    loop = asyncio.get_running_loop()
    gaps = []
    for _ in range(3):
        start = loop.time()
        queue.add_rate_limited("a")
        assert await asyncio.wait_for(queue.get(), 2) == "a"
        queue.done("a")
        gaps.append(loop.time() - start)
    assert queue.num_requeues("a") == 3
    assert gaps[0] >= 0.009
    assert gaps[1] >= 0.019
    assert gaps[2] >= 0.039
    queue.forget("a")
    assert queue.num_requeues("a") == 0


async def test_shutdown_hands_out_queued_keys_then_none() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    queue.add("b")
    queue.add_after("delayed", 0.01)
    queue.shutdown()
    queue.add("c")  # ignored
    queue.add_after("d", 0.0)  # ignored
    queue.add_rate_limited("e")  # ignored
    assert await queue.get() == "a"
    assert await queue.get() == "b"
    await asyncio.sleep(0.02)
    assert await queue.get() is None, "delayed keys are dropped on shutdown"
    assert queue.shutting_down


async def test_shutdown_wakes_every_waiting_getter() -> None:
    queue: WorkQueue[str] = WorkQueue()
    getters = [asyncio.create_task(queue.get()) for _ in range(3)]
    await asyncio.sleep(0.01)
    queue.shutdown()
    assert await asyncio.wait_for(asyncio.gather(*getters), 1) == [None, None, None]


async def test_done_after_shutdown_still_requeues_a_dirty_key() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    assert await queue.get() == "a"
    queue.add("a")
    queue.shutdown()
    queue.done("a")
    assert await queue.get() == "a"
    queue.done("a")
    assert await queue.get() is None


async def test_shutdown_with_drain_waits_for_keys_in_flight() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    queue.add("b")
    first = await queue.get()
    second = await queue.get()
    drained = asyncio.create_task(queue.shutdown_with_drain())
    await asyncio.sleep(0.01)
    assert not drained.done()
    queue.done(first)  # type: ignore[arg-type]
    await asyncio.sleep(0.01)
    assert not drained.done()
    queue.done(second)  # type: ignore[arg-type]
    await asyncio.wait_for(drained, 1)


async def test_shutdown_with_drain_returns_at_once_when_idle() -> None:
    queue: WorkQueue[str] = WorkQueue()
    await asyncio.wait_for(queue.shutdown_with_drain(), 1)


async def test_a_cancelled_woken_getter_passes_the_key_on() -> None:
    queue: WorkQueue[str] = WorkQueue()
    first = asyncio.create_task(queue.get())
    second = asyncio.create_task(queue.get())
    await asyncio.sleep(0.01)
    queue.add("a")  # wakes `first`...
    first.cancel()  # ...which is cancelled before it runs
    assert await asyncio.wait_for(second, 1) == "a"
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_concurrent_workers_never_share_a_key_and_lose_nothing() -> None:
    """Eight workers, random adds (and priorities) during processing: per key no overlap, and the
    last add is seen."""
    rng = random.Random(7)
    queue: WorkQueue[int] = WorkQueue()
    in_flight: set[int] = set()
    version = dict.fromkeys(range(20), 0)  # bumped by each "event"
    seen: dict[int, int] = {}
    overlaps = 0

    async def worker() -> None:
        nonlocal overlaps
        while (key := await queue.get()) is not None:
            if key in in_flight:
                overlaps += 1
            in_flight.add(key)
            observed = version[key]
            await asyncio.sleep(rng.random() * 0.002)
            seen[key] = observed
            in_flight.discard(key)
            queue.done(key)

    async def producer() -> None:
        for _ in range(2000):
            key = rng.randrange(20)
            version[key] += 1
            queue.add(key, priority=rng.choice((LOW_PRIORITY, 0, 0, 5)))
            if rng.random() < 0.3:
                await asyncio.sleep(0)

    async with asyncio.TaskGroup() as tg:
        workers = [tg.create_task(worker()) for _ in range(8)]
        await producer()
        await queue.shutdown_with_drain()
        while len(queue):
            await asyncio.sleep(0.005)
        await queue.shutdown_with_drain()
    assert all(w.done() for w in workers)
    assert overlaps == 0
    # Level-based: the last reconcile of each key saw its final state.
    touched = {k for k, v in version.items() if v}
    assert {k: seen[k] for k in touched} == {k: version[k] for k in touched}


async def test_higher_priority_first_fifo_within_upgrade_never_downgrade() -> None:
    queue: WorkQueue[str] = WorkQueue()
    for key in ("old-1", "old-2", "old-3"):
        queue.add(key, priority=LOW_PRIORITY)  # an initial list
    queue.add("live")
    queue.add("old-3")  # a live event for a key of the backlog: upgraded, to the back of its line
    queue.add("live", priority=LOW_PRIORITY)  # never downgraded
    queue.add("urgent", priority=10)
    assert len(queue) == 5
    got = [queue.get_nowait_with_priority() for _ in range(5)]
    assert got == [
        ("urgent", 10),
        ("live", 0),
        ("old-3", 0),
        ("old-1", LOW_PRIORITY),
        ("old-2", LOW_PRIORITY),
    ]
    with pytest.raises(asyncio.QueueEmpty):
        queue.get_nowait()


async def test_dirtied_while_processing_comes_back_at_its_highest_priority() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a", priority=LOW_PRIORITY)
    queue.add("b", priority=LOW_PRIORITY)
    assert await queue.get_with_priority() == ("a", LOW_PRIORITY)
    queue.add("a", priority=LOW_PRIORITY)  # a resync while a is reconciled...
    queue.add("a")  # ...and a real change: the higher priority wins
    queue.done("a")
    assert await queue.get_with_priority() == ("a", 0)
    queue.done("a")
    assert await queue.get_with_priority() == ("b", LOW_PRIORITY)


def test_a_delayed_key_keeps_its_earliest_time_and_highest_priority() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add("backlog", priority=LOW_PRIORITY)
    queue.add_after("retry", 1.0, priority=LOW_PRIORITY)
    queue.add_after("retry", 30.0, priority=5)  # later: the time stays, the priority rises
    queue.add_after("retry", 60.0, priority=LOW_PRIORITY)  # neither changes
    assert queue.get_nowait_with_priority() == ("backlog", LOW_PRIORITY)  # the retry is not due yet
    with pytest.raises(asyncio.QueueEmpty):
        queue.get_nowait()
    clock.now += 1.0
    assert queue.get_nowait_with_priority() == ("retry", 5)
    queue.done("retry")
    queue.done("backlog")
    clock.now += 100.0
    assert len(queue) == 0, "the superseded delays do not fire again"


def test_depth_counts_delayed_keys_once_due_without_another_operation() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add_after("a", 1.0)
    queue.add_after("b", 2.0, priority=LOW_PRIORITY)
    assert queue.stats().depth == 0
    assert len(queue) == 0
    clock.now += 1.0  # nothing else touches the queue: no add, get, done or timer
    assert queue.stats().depth == 1
    clock.now += 1.0
    assert len(queue) == 2
    assert queue.stats().depth == 2
    assert queue.get_nowait_with_priority() == ("a", 0)
    assert queue.get_nowait_with_priority() == ("b", LOW_PRIORITY)


async def test_a_waiting_getter_gets_a_key_added_at_any_priority() -> None:
    queue: WorkQueue[str] = WorkQueue()
    getter = asyncio.create_task(queue.get_with_priority())
    await asyncio.sleep(0.01)
    queue.add("a", priority=LOW_PRIORITY)
    assert await asyncio.wait_for(getter, 1) == ("a", LOW_PRIORITY)
    queue.shutdown()
    assert await queue.get_with_priority() is None


def test_entries_left_behind_by_upgrades_are_skipped() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a", priority=LOW_PRIORITY)
    queue.add("a")  # upgraded: an entry stays behind in the low line
    assert queue.get_nowait_with_priority() == ("a", 0)
    queue.done("a")
    queue.add("a", priority=LOW_PRIORITY)
    queue.add("a")  # a second one, behind the first
    queue.add("b", priority=LOW_PRIORITY)
    assert len(queue) == 2
    assert queue.get_nowait_with_priority() == ("a", 0)
    assert queue.get_nowait_with_priority() == ("b", LOW_PRIORITY)
    with pytest.raises(asyncio.QueueEmpty):
        queue.get_nowait()
    assert len(queue) == 0


def test_an_entry_left_behind_in_line_zero_is_skipped() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("y")
    queue.add("x")
    queue.add("x", priority=7)
    assert queue.get_nowait_with_priority() == ("x", 7)
    assert queue.get_nowait_with_priority() == ("y", 0)
    with pytest.raises(asyncio.QueueEmpty):
        queue.get_nowait()  # not x again: it is being processed
    queue.done("x")
    queue.done("y")
    queue.add("z")
    assert queue.get_nowait_with_priority() == ("z", 0)


def test_a_batched_burst_is_handed_out_once_after_the_period() -> None:
    """``add_batched``: the changes that follow one within the period are one key handed out."""
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add_batched("a", 0.125)
    clock.now += 0.0625
    queue.add_batched("a", 0.125)  # within the period: the first time stays
    with pytest.raises(asyncio.QueueEmpty):
        queue.get_nowait()
    clock.now += 0.0625
    assert queue.get_nowait() == "a"
    queue.done("a")
    clock.now += 1.0
    assert len(queue) == 0, "the burst was one hand-out"
    assert queue.stats().retries == 0, "batching is not retrying"


def test_a_batched_key_already_queued_is_not_delayed_again() -> None:
    """A key queued (or dirtied while processed) sees every change made until it is handed out."""
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add("a")
    queue.add_batched("a", 0.125)
    assert queue.get_nowait() == "a"
    queue.done("a")
    clock.now += 1.0
    assert len(queue) == 0, "no second hand-out of a key that was queued when batched"
    # Processing and not dirty: the reconcile in flight may have missed the change, so it is delayed.
    queue.add("b")
    assert queue.get_nowait() == "b"
    queue.add_batched("b", 0.125)
    queue.done("b")
    assert len(queue) == 0
    clock.now += 0.125
    assert queue.get_nowait() == "b"


def test_a_batched_key_keeps_an_earlier_retry() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add_after("a", 0.02)
    queue.add_batched("a", 0.125)
    clock.now += 0.02
    assert queue.get_nowait() == "a"


def test_a_batched_live_change_lifts_a_key_out_of_the_backlog() -> None:
    """A key queued at ``LOW_PRIORITY`` (an initial list) that a live event batches goes before the
    rest of the backlog, as with ``add``."""
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    for key in ("a", "b", "c"):
        queue.add(key, priority=LOW_PRIORITY)
    queue.add_batched("c", 0.125)
    assert queue.get_nowait_with_priority() == ("c", 0)
    assert queue.get_nowait_with_priority() == ("a", LOW_PRIORITY)
