"""Work queue throughput: add/get/done with a trivial reconcile, beside baselines in the same run.

Prints keys/s for the ``WorkQueue`` (synchronous core, async workers with and without one await, and
a whole ``Controller`` with a reconciler that does nothing), for ``asyncio.Queue`` and for a minimal
dedup queue (a set and a deque) doing the same work, and the ratios. No timed assertions: figures on
a shared machine vary; the ratios are what to compare. Run: ``tox -e bench -- -k queue`` or
``pytest tests/bench/test_queue_bench.py -s``.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections import deque
from collections.abc import Awaitable, Callable

import structlog
from prometheus_client import CollectorRegistry

from bridge.runtime.controller import Controller, Request, Result
from bridge.runtime.queue import WorkQueue

N = 200_000
REPEATS = 3


def best_rate(run: Callable[[], float]) -> float:
    """Keys/s of the best of ``REPEATS`` runs (the least disturbed by other load)."""
    return max(run() for _ in range(REPEATS))


def timed(fn: Callable[[], None]) -> float:
    gc.collect()
    start = time.perf_counter()
    fn()
    return N / (time.perf_counter() - start)


async def atimed(fn: Callable[[], Awaitable[None]]) -> float:
    gc.collect()
    start = time.perf_counter()
    await fn()
    return N / (time.perf_counter() - start)


def keys() -> list[Request]:
    return [Request("ns", f"obj-{i}") for i in range(N)]


def sync_workqueue() -> float:
    ks = keys()

    def run() -> None:
        q: WorkQueue[Request] = WorkQueue(name="bench", registry=CollectorRegistry())
        for k in ks:
            q.add(k)
        get, done = q.get_nowait, q.done
        for _ in range(N):
            done(get())

    return timed(run)


def sync_minimal_dedup() -> float:
    ks = keys()

    def run() -> None:
        dirty: set[Request] = set()
        processing: set[Request] = set()
        fifo: deque[Request] = deque()
        for k in ks:
            if k not in dirty:
                dirty.add(k)
                fifo.append(k)
        for _ in range(N):
            k = fifo.popleft()
            dirty.discard(k)
            processing.add(k)
            processing.discard(k)

    return timed(run)


async def async_workqueue(*, one_await: bool) -> float:
    ks = keys()

    async def run() -> None:
        q: WorkQueue[Request] = WorkQueue(name="bench", registry=CollectorRegistry())

        async def worker() -> None:
            while (k := await q.get()) is not None:
                if one_await:
                    await asyncio.sleep(0)
                q.done(k)

        async with asyncio.TaskGroup() as tg:
            tg.create_task(worker())
            for k in ks:
                q.add(k)
            q.shutdown()

    return await atimed(run)


async def async_queue_baseline(*, one_await: bool) -> float:
    ks = keys()

    async def run() -> None:
        q: asyncio.Queue[Request | None] = asyncio.Queue()

        async def worker() -> None:
            while await q.get() is not None:
                if one_await:
                    await asyncio.sleep(0)
                q.task_done()

        async with asyncio.TaskGroup() as tg:
            tg.create_task(worker())
            for k in ks:
                q.put_nowait(k)
            q.put_nowait(None)

    return await atimed(run)


class Nothing:
    async def reconcile(self, request: Request) -> Result:
        return Result()


class Listing:
    """A source that has synced and holds nothing: keys are added to the queue directly."""

    def add_handler(self, handler: object) -> None:
        return None

    def has_synced(self) -> bool:
        return True


async def controller_trivial_reconcile() -> float:
    ks = keys()

    async def run() -> None:
        controller = Controller(name="bench", reconciler=Nothing(), registry=CollectorRegistry())
        controller.watch(Listing())
        for k in ks:
            controller.queue.add(k)
        task = asyncio.create_task(controller.run())
        while len(controller.queue) or controller.queue.stats().unfinished_work_seconds:
            await asyncio.sleep(0.01)
        controller.stop()
        await task

    return await atimed(run)


async def test_queue_throughput() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))  # no info lines
    try:
        sync_wq = best_rate(sync_workqueue)
        sync_min = best_rate(sync_minimal_dedup)
        rows = [
            ("WorkQueue add/get_nowait/done (no await)", sync_wq, "minimal set+deque dedup", sync_min),
        ]
        for one_await in (False, True):
            wq = max([await async_workqueue(one_await=one_await) for _ in range(REPEATS)])
            base = max([await async_queue_baseline(one_await=one_await) for _ in range(REPEATS)])
            label = "one await" if one_await else "no await"
            rows.append((f"WorkQueue, async worker, {label}", wq, f"asyncio.Queue, {label}", base))
        ctl = max([await controller_trivial_reconcile() for _ in range(REPEATS)])
        rows.append(
            ("Controller, trivial reconcile (metrics, ids, logs ctx)", ctl, "WorkQueue async", rows[1][1])
        )
    finally:
        structlog.reset_defaults()
    print(f"\nqueue throughput, {N} distinct keys, best of {REPEATS} (keys/s)")
    for name, rate, base_name, base in rows:
        print(f"  {name:58s} {rate:>12,.0f}   vs {base_name:28s} {base:>12,.0f}   ratio {rate / base:.2f}")
    assert all(rate > 0 for _, rate, _, _ in rows)
