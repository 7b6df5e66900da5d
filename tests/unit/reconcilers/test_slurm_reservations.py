"""The reservation listing the Slurm reconciler reads for jobs that ask for a reservation."""

from __future__ import annotations

import asyncio

from bridge.api.slurm_reservation import SlurmReservation
from bridge.slurmrest.errors import SlurmUnavailable
from reconcilers.slurm_reservations import ReservationCache


class Lister:
    """slurmctld's reservations, counted; ``fail`` makes the next listings raise."""

    def __init__(self) -> None:
        self.calls = 0
        self.fail = False
        self.reservations: tuple[SlurmReservation, ...] = (SlurmReservation(name="r1"),)

    async def __call__(self) -> tuple[SlurmReservation, ...]:
        self.calls += 1
        await asyncio.sleep(0)
        if self.fail:
            raise SlurmUnavailable("connection refused")
        return self.reservations


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_a_listing_is_shared_until_it_is_max_age_old() -> None:
    lister, clock = Lister(), Clock()
    cache = ReservationCache(list_reservations=lister, max_age=10.0, clock=clock)
    first = await asyncio.gather(*(cache.get() for _ in range(20)))
    assert lister.calls == 1  # twenty reconciles at once: one read
    assert all(listed is not None and set(listed) == {"r1"} for listed in first)
    clock.now += 9.9
    await cache.get()
    assert lister.calls == 1
    lister.reservations = ()
    clock.now += 0.2
    listed = await cache.get()
    assert lister.calls == 2
    assert listed == {}


async def test_slurmrestd_down_keeps_the_last_listing_and_none_before_any() -> None:
    lister, clock = Lister(), Clock()
    cache = ReservationCache(list_reservations=lister, clock=clock)
    lister.fail = True
    assert await cache.get() is None
    assert await cache.get() is None
    assert lister.calls == 1  # a failure stands for max_age too: not one call per reconcile
    lister.fail = False
    clock.now += 10.0
    assert await cache.get() is not None
    lister.fail = True
    clock.now += 60.0
    listed = await cache.get()
    assert listed is not None
    assert set(listed) == {"r1"}
