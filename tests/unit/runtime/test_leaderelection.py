"""Leader election against a fake Lease store: acquire, renew, expiry on the local clock, takeover,
optimistic concurrency, loss and release."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from bridge.runtime.handlers import Object
from bridge.runtime.leaderelection import (
    LeaderElectionConfig,
    LeaderElectionLostError,
    LeaderElector,
)
from tests.fixtures.lease import FakeClock, FakeLeaseStore


@pytest.fixture
def store() -> FakeLeaseStore:
    return FakeLeaseStore()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def elector(
    store: FakeLeaseStore,
    identity: str,
    *,
    clock: Callable[[], float] | None = None,
    registry: CollectorRegistry | None = None,
    wall: datetime | None = None,
    **timing: float,
) -> LeaderElector:
    config = LeaderElectionConfig(name="bridge", namespace="ns", identity=identity, **timing)
    kwargs: dict[str, Any] = {}
    if clock is not None:
        kwargs["clock"] = clock
    if wall is not None:
        kwargs["wall_clock"] = lambda: wall
    return LeaderElector(config=config, client=store, registry=registry or CollectorRegistry(), **kwargs)


async def test_first_candidate_creates_the_lease(store: FakeLeaseStore, registry: CollectorRegistry) -> None:
    a = elector(store, "a", registry=registry)
    assert a.holder is None
    assert await a.try_acquire_or_renew()
    assert a.is_leader
    spec = store.spec()
    assert spec["holderIdentity"] == "a"
    assert spec["leaseDurationSeconds"] == 15
    assert spec["leaseTransitions"] == 0
    assert spec["renewTime"].endswith("Z")
    await a.acquire()
    assert registry.get_sample_value("leader_election_master_status", {"name": "bridge"}) == 1


async def test_renewal_keeps_acquire_time_and_moves_renew_time(
    store: FakeLeaseStore, clock: FakeClock
) -> None:
    a = elector(store, "a", clock=clock, wall=datetime(2030, 1, 1, tzinfo=UTC))
    assert await a.try_acquire_or_renew()
    acquired = store.spec()["acquireTime"]
    a._wall_clock = lambda: datetime(2030, 1, 1, 0, 0, 5, tzinfo=UTC)
    clock.now += 2
    assert await a.try_acquire_or_renew()
    assert store.spec()["acquireTime"] == acquired
    assert store.spec()["renewTime"] == "2030-01-01T00:00:05.000000Z"
    assert store.spec()["leaseTransitions"] == 0


async def test_others_wait_for_expiry_judged_on_their_own_clock(
    store: FakeLeaseStore, clock: FakeClock
) -> None:
    # The leader's wall clock is decades behind: written times must not make its lease look expired.
    a = elector(store, "a", clock=clock, wall=datetime(2000, 1, 1, tzinfo=UTC))
    b = elector(store, "b", clock=clock)
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()  # b first sees the record now (t=100)
    assert b.holder == "a"
    clock.now += 14.9
    assert not await b.try_acquire_or_renew()
    clock.now += 0.2  # 15.1 s after b saw the record change
    assert await b.try_acquire_or_renew()
    assert b.is_leader
    assert store.spec()["holderIdentity"] == "b"
    assert store.spec()["leaseTransitions"] == 1
    # The old leader finds out: its optimistic update conflicts, and the lease is validly b's.
    assert not await a.try_acquire_or_renew()
    assert not a.is_leader
    assert a.holder == "b"


async def test_each_renewal_restarts_the_others_expiry_clock(store: FakeLeaseStore, clock: FakeClock) -> None:
    a = elector(store, "a", clock=clock)
    b = elector(store, "b", clock=clock)
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    for _ in range(10):  # 100 s of renewals every 10 s
        clock.now += 10
        assert await a.try_acquire_or_renew()
        assert not await b.try_acquire_or_renew()
    assert store.spec()["holderIdentity"] == "a"


async def test_a_lost_race_is_a_conflict_not_a_win(store: FakeLeaseStore, clock: FakeClock) -> None:
    a = elector(store, "a", clock=clock)
    b = elector(store, "b", clock=clock)
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    clock.now += 16  # expired for b

    def someone_else_writes() -> None:
        store.before_update = None
        store.leases["ns", "bridge"]["metadata"]["resourceVersion"] = "999"

    store.before_update = someone_else_writes
    assert not await b.try_acquire_or_renew()
    assert not b.is_leader


async def test_create_race_lost_is_not_leading(store: FakeLeaseStore) -> None:
    a = elector(store, "a")
    b = elector(store, "b")
    original_get = store.get

    async def get_then_someone_creates(*args: Any, **kwargs: Any) -> Object:
        try:
            return await original_get(*args, **kwargs)
        finally:
            store.get = original_get  # type: ignore[method-assign]
            if not store.leases:
                await a.try_acquire_or_renew()

    store.get = get_then_someone_creates  # type: ignore[method-assign]
    assert not await b.try_acquire_or_renew()
    assert store.spec()["holderIdentity"] == "a"


async def test_api_failure_is_not_leading(store: FakeLeaseStore) -> None:
    a = elector(store, "a")
    store.failing = True
    assert not await a.try_acquire_or_renew()
    assert not a.is_leader


async def test_release_lets_another_take_over_at_once(store: FakeLeaseStore, clock: FakeClock) -> None:
    a = elector(store, "a", clock=clock)
    b = elector(store, "b", clock=clock)
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    assert await a.release()
    assert not a.is_leader
    spec = store.spec()
    assert spec["holderIdentity"] == ""
    assert spec["leaseDurationSeconds"] == 1
    assert await b.try_acquire_or_renew()  # no clock advance needed
    assert store.spec()["leaseTransitions"] == 1


async def test_release_by_a_non_leader_writes_nothing(store: FakeLeaseStore) -> None:
    a = elector(store, "a")
    b = elector(store, "b")
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    updates = store.updates
    assert await b.release()
    assert store.updates == updates
    assert store.spec()["holderIdentity"] == "a"


def fast(store: FakeLeaseStore, identity: str, *, registry: CollectorRegistry | None = None) -> LeaderElector:
    """Sub-second timing for tests of the loops: lease 0.6 s, renew deadline 0.3 s, retry 0.05 s."""
    return elector(
        store, identity, registry=registry, lease_duration=0.6, renew_deadline=0.3, retry_period=0.05
    )


async def test_acquire_waits_until_the_lease_is_released(store: FakeLeaseStore) -> None:
    a = fast(store, "a")
    b = fast(store, "b")
    await a.acquire()
    waiting = asyncio.create_task(b.acquire())
    await asyncio.sleep(0.2)
    assert not waiting.done()
    await a.release()
    await asyncio.wait_for(waiting, 2)
    assert b.is_leader


async def test_hold_renews_until_cancelled(store: FakeLeaseStore) -> None:
    a = fast(store, "a")
    await a.acquire()
    holding = asyncio.create_task(a.hold())
    await asyncio.sleep(0.35)
    assert store.updates >= 3
    holding.cancel()
    with pytest.raises(asyncio.CancelledError):
        await holding
    assert a.is_leader


async def test_hold_raises_when_renewal_misses_the_deadline(
    store: FakeLeaseStore, registry: CollectorRegistry
) -> None:
    a = fast(store, "a", registry=registry)
    await a.acquire()
    holding = asyncio.create_task(a.hold())
    await asyncio.sleep(0.1)
    store.failing = True
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(LeaderElectionLostError):
        await asyncio.wait_for(holding, 2)
    assert loop.time() - started < 0.3 + 0.05 + 0.1  # the renew deadline after the next retry, plus slack
    assert registry.get_sample_value("leader_election_master_status", {"name": "bridge"}) == 0


async def test_hold_raises_when_another_took_the_lease(store: FakeLeaseStore) -> None:
    a = fast(store, "a")
    await a.acquire()
    holding = asyncio.create_task(a.hold())
    await asyncio.sleep(0.06)
    lease = store.leases["ns", "bridge"]
    lease["spec"]["holderIdentity"] = "intruder"
    lease["metadata"]["resourceVersion"] = "intruder-1"
    with pytest.raises(LeaderElectionLostError):
        await asyncio.wait_for(holding, 2)
    assert not a.is_leader


@pytest.mark.parametrize(
    "timing",
    [
        {"lease_duration": 10, "renew_deadline": 10, "retry_period": 2},
        {"lease_duration": 15, "renew_deadline": 2.4, "retry_period": 2},
        {"lease_duration": 15, "renew_deadline": 10, "retry_period": 0},
    ],
)
def test_timing_is_validated(timing: dict[str, float]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011
        LeaderElectionConfig(name="bridge", namespace="ns", identity="a", **timing)


def test_defaults_are_client_go_s() -> None:
    config = LeaderElectionConfig(name="bridge", namespace="ns")
    assert (config.lease_duration, config.renew_deadline, config.retry_period) == (15.0, 10.0, 2.0)
    assert "_" in config.identity
    assert LeaderElectionConfig(name="bridge", namespace="ns").identity != config.identity
