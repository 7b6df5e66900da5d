"""The metrics registry and the probe server, over a real local aiohttp server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import prometheus_client
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from bridge.runtime.metrics import REGISTRY, LightHistogram, runtime_metrics
from bridge.runtime.probes import ProbeServer
from bridge.runtime.queue import WorkQueue


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
async def server(registry: CollectorRegistry) -> AsyncIterator[ProbeServer]:
    probes = ProbeServer(host="127.0.0.1", port=0, registry=registry)
    await probes.start()
    try:
        yield probes
    finally:
        await probes.stop()


async def fetch(server: ProbeServer, path: str) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{server.port}{path}") as response,
    ):
        return response.status, await response.text()


def test_light_histogram_buckets_are_less_or_equal() -> None:
    h = LightHistogram([0.1, 1.0])
    for v in (0.05, 0.1, 0.5, 1.0, 5.0):
        h.observe(v)
    assert h.cumulative() == [("0.1", 2.0), ("1.0", 4.0), ("+Inf", 5.0)]
    assert h.total == pytest.approx(6.65)


def test_project_registry_is_not_the_global_default() -> None:
    assert REGISTRY is not prometheus_client.REGISTRY
    assert runtime_metrics() is runtime_metrics(REGISTRY)


async def test_workqueue_metrics_carry_client_go_names(registry: CollectorRegistry) -> None:
    clock_now = [10.0]
    queue: WorkQueue[str] = WorkQueue(name="jobs", registry=registry, clock=lambda: clock_now[0])
    queue.add("a")
    queue.add("b")
    queue.add("a")
    clock_now[0] += 0.5
    queue.get_nowait()
    queue.add_after("c", 1.0)
    clock_now[0] += 2.0

    def value(metric: str) -> float | None:
        return registry.get_sample_value(metric, {"name": "jobs", "controller": "jobs"})

    assert value("workqueue_depth") == 2, "b, and c: due now though nothing used the queue since"
    assert value("workqueue_adds_total") == 3
    assert value("workqueue_retries_total") == 1
    assert value("workqueue_queue_duration_seconds_count") == 1
    assert value("workqueue_queue_duration_seconds_sum") == pytest.approx(0.5)
    assert value("workqueue_unfinished_work_seconds") == pytest.approx(2.0)
    assert value("workqueue_longest_running_processor_seconds") == pytest.approx(2.0)
    queue.done("a")
    assert value("workqueue_work_duration_seconds_count") == 1
    assert value("workqueue_unfinished_work_seconds") == 0
    text = generate_latest(registry).decode()
    assert 'workqueue_queue_duration_seconds_bucket{controller="jobs",le="1.0",name="jobs"} 1.0' in text


def test_unnamed_queues_report_nothing_and_names_are_unique(registry: CollectorRegistry) -> None:
    WorkQueue[str](registry=registry)
    assert registry.get_sample_value("workqueue_depth", {"name": "", "controller": ""}) is None
    first: WorkQueue[str] = WorkQueue(name="q", registry=registry)
    with pytest.raises(ValueError, match="'q'"):
        WorkQueue[str](name="q", registry=registry)
    first.shutdown()
    WorkQueue[str](name="q", registry=registry)  # a shut-down queue's name may be reused


async def test_healthz_and_readyz(server: ProbeServer) -> None:
    assert await fetch(server, "/healthz") == (200, "ok")
    assert await fetch(server, "/readyz") == (200, "ok")
    synced = False
    server.add_readyz_check("caches", lambda: synced)
    status, text = await fetch(server, "/readyz")
    assert status == 500
    assert "[-]caches failed" in text
    assert "[+]ping ok" in text
    synced = True
    assert await fetch(server, "/readyz") == (200, "ok")
    status, text = await fetch(server, "/readyz?verbose")
    assert status == 200
    assert "[+]caches ok" in text
    assert "readyz check passed" in text


async def test_async_and_raising_checks(server: ProbeServer) -> None:
    async def reachable() -> bool:
        await asyncio.sleep(0)
        return True

    def broken() -> bool:
        raise RuntimeError("boom")

    server.add_healthz_check("api", reachable)
    assert (await fetch(server, "/healthz"))[0] == 200
    server.add_healthz_check("broken", broken)
    status, text = await fetch(server, "/healthz")
    assert status == 500
    assert "[-]broken failed" in text
    assert "[+]api ok" in text


async def test_metrics_endpoint_serves_the_registry(server: ProbeServer, registry: CollectorRegistry) -> None:
    queue: WorkQueue[str] = WorkQueue(name="served", registry=registry)  # held: queues are weakly reported
    queue.add("x")
    runtime_metrics(registry).reconcile_total.labels("c", "success").inc()
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{server.port}/metrics") as response,
    ):
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = await response.text()
    assert 'workqueue_depth{controller="served",name="served"} 1.0' in text
    assert 'controller_runtime_reconcile_total{controller="c",result="success"} 1.0' in text


async def test_run_serves_until_cancelled(registry: CollectorRegistry) -> None:
    probes = ProbeServer(host="127.0.0.1", port=0, registry=registry)
    task = asyncio.create_task(probes.run())
    for _ in range(100):
        try:
            port = probes.port
            break
        except RuntimeError:
            await asyncio.sleep(0.01)
    assert (await fetch(probes, "/healthz"))[0] == 200
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    with pytest.raises(aiohttp.ClientConnectionError):
        async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/healthz"):
            pass
