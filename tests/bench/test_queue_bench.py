"""Work queue throughput: add/get/done with a trivial reconcile, beside baselines in the same run.

Prints keys/s for the ``WorkQueue`` (synchronous core, async workers with and without one await, and
a whole ``Controller`` with a reconciler that does nothing), for ``asyncio.Queue`` and for a minimal
dedup queue (a set and a deque) doing the same work, and the ratios; and the cost of priorities: a
restart's shape (every key at ``LOW_PRIORITY``, one in a hundred upgraded by a live event) beside
the same keys at the default priority. No timed assertions: figures on
a shared machine vary; the ratios are what to compare. Run: ``tox -e bench -- -k queue`` or
``pytest tests/bench/test_queue_bench.py -s``.

``test_queue_beside_client_go`` builds ``tests/bench/go/workqueue`` (client-go's work queue at the
version of ``versions.toml``'s Kubernetes, from the Go module cache or proxy; the binary is cached
under ``~/.cache/k8s-bridge/bench/`` by a hash of its sources and the Go version), runs it, then the
same shapes of work on our ``WorkQueue``, and prints both with the ratio. Go runs with GOMAXPROCS=1
(one core, like the event loop) and with the default (every core).
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import json
import os
import shutil
import subprocess
import time
import tomllib
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import structlog
from prometheus_client import CollectorRegistry

from bridge.runtime.controller import Controller, Request, Result
from bridge.runtime.queue import LOW_PRIORITY, WorkQueue

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


def sync_workqueue_restart_backlog() -> float:
    """An initial list: N keys at ``LOW_PRIORITY``, every 100th upgraded by a live add; drain all."""
    ks = keys()
    live = ks[::100]

    def run() -> None:
        q: WorkQueue[Request] = WorkQueue(name="bench", registry=CollectorRegistry())
        add = q.add
        for k in ks:
            add(k, LOW_PRIORITY)
        for k in live:
            add(k)
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
        backlog = best_rate(sync_workqueue_restart_backlog)
        for one_await in (False, True):
            wq = max([await async_workqueue(one_await=one_await) for _ in range(REPEATS)])
            base = max([await async_queue_baseline(one_await=one_await) for _ in range(REPEATS)])
            label = "one await" if one_await else "no await"
            rows.append((f"WorkQueue, async worker, {label}", wq, f"asyncio.Queue, {label}", base))
        ctl = max([await controller_trivial_reconcile() for _ in range(REPEATS)])
        rows.append(
            ("Controller, trivial reconcile (metrics, ids, logs ctx)", ctl, "WorkQueue async", rows[1][1])
        )
        rows.append(("WorkQueue, N low + 1% upgraded (no await)", backlog, "WorkQueue, all at 0", sync_wq))
    finally:
        structlog.reset_defaults()
    print(f"\nqueue throughput, {N} distinct keys, best of {REPEATS} (keys/s)")
    for name, rate, base_name, base in rows:
        print(f"  {name:58s} {rate:>12,.0f}   vs {base_name:28s} {base:>12,.0f}   ratio {rate / base:.2f}")
    assert all(rate > 0 for _, rate, _, _ in rows)


# -- beside client-go ----------------------------------------------------------------------------

GO_SOURCE = Path(__file__).parent / "go" / "workqueue"
VERSIONS = Path(__file__).parents[2] / "bridge" / "sandbox" / "versions.toml"
BENCH_CACHE = Path.home() / ".cache" / "k8s-bridge" / "bench"


def go_binary() -> str:
    found = shutil.which("go") or "/usr/local/go/bin/go"
    if not Path(found).is_file():
        pytest.fail("the Go toolchain is needed to build client-go's work queue benchmark", pytrace=False)
    return found


def client_go_version() -> str:
    """``v0.<minor>.<patch>``: the client-go release of the Kubernetes version the stack runs."""
    kubernetes = str(tomllib.loads(VERSIONS.read_text())["kubernetes"]["version"])  # v1.36.3
    return "v0." + kubernetes.split(".", 1)[1]


def build_go_workqueue() -> Path:
    """Build (once per source and toolchain: cached by hash) and return the benchmark binary."""
    go = go_binary()
    required = f"k8s.io/client-go {client_go_version()}"
    if required not in (GO_SOURCE / "go.mod").read_text():
        pytest.fail(f"{GO_SOURCE / 'go.mod'} must require {required} (versions.toml)", pytrace=False)
    toolchain = subprocess.run([go, "version"], check=True, capture_output=True, text=True).stdout
    digest = hashlib.sha256(toolchain.encode())
    for name in ("go.mod", "go.sum", "main.go"):
        digest.update((GO_SOURCE / name).read_bytes())
    binary = BENCH_CACHE / f"workqueue-{digest.hexdigest()[:16]}"
    if not binary.exists():
        BENCH_CACHE.mkdir(parents=True, exist_ok=True)
        partial = binary.with_suffix(".partial")
        env = {**os.environ, "GOFLAGS": "-buildvcs=false"}
        built = subprocess.run(
            [go, "build", "-o", str(partial), "."],
            cwd=GO_SOURCE,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if built.returncode != 0:
            pytest.fail(f"building {GO_SOURCE} failed:\n{built.stderr[-3000:]}", pytrace=False)
        partial.replace(binary)
    return binary


def run_go_workqueue(binary: Path, *, gomaxprocs: int | None) -> dict[str, dict[str, Any]]:
    env = dict(os.environ)
    if gomaxprocs is not None:
        env["GOMAXPROCS"] = str(gomaxprocs)
    else:
        env.pop("GOMAXPROCS", None)
    done = subprocess.run(
        [str(binary), "-n", str(N), "-repeats", str(REPEATS)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    return {row["mode"]: row for row in rows}


def sync_workqueue_one_at_a_time() -> float:
    """client-go's BenchmarkQueue shape: a fresh queue, then 100 x (add, get, done) of one key each."""
    ks = [f"key-{i}" for i in range(100)]
    rounds = N // 100

    def run() -> None:
        registry = CollectorRegistry()
        for _ in range(rounds):
            q: WorkQueue[str] = WorkQueue(registry=registry)
            add, get, done = q.add, q.get_nowait, q.done
            for k in ks:
                add(k)
                done(get())

    return timed(run)


async def test_queue_beside_client_go() -> None:
    binary = await asyncio.to_thread(build_go_workqueue)
    go_one = await asyncio.to_thread(run_go_workqueue, binary, gomaxprocs=1)
    go_all = await asyncio.to_thread(run_go_workqueue, binary, gomaxprocs=None)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
    try:
        ours = {
            "clientgo-benchmarkqueue": best_rate(sync_workqueue_one_at_a_time),
            "add-all-then-get-done": best_rate(sync_workqueue),
            "worker": max([await async_workqueue(one_await=False) for _ in range(REPEATS)]),
            "worker-ratelimited": max([await controller_trivial_reconcile() for _ in range(REPEATS)]),
        }
    finally:
        structlog.reset_defaults()
    ours_label = {
        "clientgo-benchmarkqueue": "WorkQueue: fresh queue, 100 x add/get/done",
        "add-all-then-get-done": "WorkQueue: add N, then get_nowait/done N",
        "worker": "WorkQueue: async worker (no await)",
        "worker-ratelimited": "Controller: trivial reconcile",
    }
    cores = go_all["worker"]["gomaxprocs"]
    print(f"\nwork queue beside client-go {client_go_version()} ({binary.name}), keys/s, best of {REPEATS}")
    go_cores = f"Go, {cores} cores"
    print(f"  {'mode':26s} {'ours (Python)':>14s} {'Go, 1 core':>14s} {go_cores:>14s}  ours/Go(1)")
    for mode, rate in ours.items():
        one, every = go_one[mode]["keys_per_s"], go_all[mode]["keys_per_s"]
        row = f"{rate:>14,.0f} {one:>14,.0f} {every:>14,.0f}  {rate / one:9.2f}"
        print(f"  {mode:26s} {row}   {ours_label[mode]}")
    assert all(rate > 0 for rate in ours.values())
