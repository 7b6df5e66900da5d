"""The manager: owned tasks, leader-election gating, shutdown order and timeout, lease loss, signals."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from prometheus_client import CollectorRegistry

from bridge.runtime.controller import Controller, Request, Result
from bridge.runtime.handlers import EventHandler
from bridge.runtime.leaderelection import LeaderElectionConfig, LeaderElectionLostError, LeaderElector
from bridge.runtime.manager import Manager, ShutdownTimeoutError
from bridge.runtime.probes import ProbeServer
from tests.fixtures.lease import FakeLeaseStore


class Recorder:
    def __init__(self) -> None:
        self.events: list[str] = []


class Part:
    """A cache, webhook or server stand-in: runs until cancelled, records start and stop."""

    def __init__(self, name: str, recorder: Recorder, *, synced: bool = True) -> None:
        self.name = name
        self.recorder = recorder
        self.synced = synced
        self.handlers: list[EventHandler] = []

    async def run(self) -> None:
        self.recorder.events.append(f"start {self.name}")
        try:
            await asyncio.get_running_loop().create_future()
        finally:
            self.recorder.events.append(f"stop {self.name}")

    def has_synced(self) -> bool:
        return self.synced

    def add_handler(self, handler: EventHandler) -> None:
        self.handlers.append(handler)
        handler.on_add({"metadata": {"name": "a", "namespace": "ns"}}, is_initial_list=True)


class SlowReconciler:
    def __init__(self, recorder: Recorder, seconds: float) -> None:
        self.recorder = recorder
        self.seconds = seconds
        self.started = asyncio.Event()

    async def reconcile(self, request: Request) -> Result:
        self.started.set()
        self.recorder.events.append("reconcile start")
        try:
            await asyncio.sleep(self.seconds)
        finally:
            self.recorder.events.append("reconcile end")
        return Result()


def setup(
    recorder: Recorder, *, seconds: float = 0.05, **options: object
) -> tuple[Manager, SlowReconciler, Part]:
    registry = CollectorRegistry()
    manager = Manager(handle_signals=False, **options)  # type: ignore[arg-type]
    cache = Part("cache", recorder)
    reconciler = SlowReconciler(recorder, seconds)
    controller = Controller(name="c", reconciler=reconciler, registry=registry)
    controller.watch(cache)
    manager.add_cache(cache)
    manager.add_controller(controller)
    manager.add_webhook(Part("webhook", recorder))
    manager.add_server(Part("server", recorder))
    return manager, reconciler, cache


async def test_clean_stop_in_controller_runtime_order() -> None:
    recorder = Recorder()
    manager, reconciler, _ = setup(recorder, seconds=0.1)
    task = asyncio.create_task(manager.run())
    await asyncio.wait_for(reconciler.started.wait(), 2)
    manager.stop()
    await asyncio.wait_for(task, 2)
    stops = [e for e in recorder.events if e.startswith("stop") or e == "reconcile end"]
    assert stops == ["reconcile end", "stop cache", "stop webhook", "stop server"]


async def test_graceful_timeout_cancels_and_reports() -> None:
    recorder = Recorder()
    manager, reconciler, _ = setup(recorder, seconds=30, graceful_shutdown_timeout=0.2)
    task = asyncio.create_task(manager.run())
    await asyncio.wait_for(reconciler.started.wait(), 2)
    manager.stop()
    with pytest.raises(ShutdownTimeoutError, match="controller c"):
        await asyncio.wait_for(task, 2)
    assert "reconcile end" in recorder.events
    assert recorder.events[-1] == "stop server"


async def test_a_failing_part_stops_everything_and_is_raised() -> None:
    recorder = Recorder()
    manager, _, _ = setup(recorder)

    class Broken:
        async def run(self) -> None:
            await asyncio.sleep(0.05)
            raise RuntimeError("cache broke")

    manager.add_cache(Broken())
    with pytest.raises(RuntimeError, match="cache broke"):
        await asyncio.wait_for(manager.run(), 2)
    assert {"stop cache", "stop webhook", "stop server"} <= set(recorder.events)


async def test_readyz_follows_cache_sync() -> None:
    recorder = Recorder()
    probes = ProbeServer(host="127.0.0.1", port=0, registry=CollectorRegistry())
    manager = Manager(handle_signals=False, probes=probes)
    cache = Part("cache", recorder, synced=False)
    manager.add_cache(cache)
    assert not manager.caches_synced()
    cache.synced = True
    assert manager.caches_synced()


def lease_elector(store: FakeLeaseStore, identity: str) -> LeaderElector:
    config = LeaderElectionConfig(
        name="bridge",
        namespace="ns",
        identity=identity,
        lease_duration=0.6,
        renew_deadline=0.3,
        retry_period=0.05,
    )
    return LeaderElector(config=config, client=store, registry=CollectorRegistry())


async def test_controllers_wait_for_the_lease_and_release_it_on_stop() -> None:
    store = FakeLeaseStore()
    other = lease_elector(store, "other")
    await other.acquire()
    recorder = Recorder()
    manager, reconciler, _ = setup(recorder, leader_election=lease_elector(store, "me"))
    task = asyncio.create_task(manager.run())
    await asyncio.sleep(0.2)
    assert "start cache" in recorder.events, "caches run without the lease"
    assert not reconciler.started.is_set(), "controllers wait for the lease"
    await other.release()
    await asyncio.wait_for(reconciler.started.wait(), 2)
    assert store.spec()["holderIdentity"] == "me"
    manager.stop()
    await asyncio.wait_for(task, 2)
    assert store.spec()["holderIdentity"] == "", "released on a clean stop"


async def test_stop_while_waiting_for_the_lease() -> None:
    store = FakeLeaseStore()
    other = lease_elector(store, "other")
    await other.acquire()
    recorder = Recorder()
    manager, reconciler, _ = setup(recorder, leader_election=lease_elector(store, "me"))
    task = asyncio.create_task(manager.run())
    await asyncio.sleep(0.1)
    manager.stop()
    await asyncio.wait_for(task, 2)
    assert not reconciler.started.is_set()
    assert store.spec()["holderIdentity"] == "other"


async def test_losing_the_lease_ends_the_manager() -> None:
    store = FakeLeaseStore()
    recorder = Recorder()
    manager, reconciler, _ = setup(recorder, seconds=30, leader_election=lease_elector(store, "me"))
    task = asyncio.create_task(manager.run())
    await asyncio.wait_for(reconciler.started.wait(), 2)
    store.failing = True
    with pytest.raises(LeaderElectionLostError):
        await asyncio.wait_for(task, 2)
    assert "reconcile end" in recorder.events, "the reconcile in flight was cancelled"


async def test_sigterm_starts_a_graceful_shutdown() -> None:
    recorder = Recorder()
    manager = Manager(handle_signals=True)
    manager.add_cache(Part("cache", recorder))
    task = asyncio.create_task(manager.run())
    await asyncio.sleep(0.05)
    os.kill(os.getpid(), signal.SIGTERM)
    await asyncio.wait_for(task, 2)
    assert recorder.events == ["start cache", "stop cache"]


async def test_a_second_stop_cancels_at_once() -> None:
    recorder = Recorder()
    manager, reconciler, _ = setup(recorder, seconds=30, graceful_shutdown_timeout=60)
    task = asyncio.create_task(manager.run())
    await asyncio.wait_for(reconciler.started.wait(), 2)
    manager.stop()
    await asyncio.sleep(0.05)
    manager.stop()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 2)
    assert "reconcile end" in recorder.events
