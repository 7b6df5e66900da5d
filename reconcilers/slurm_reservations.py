"""slurmctld's advanced reservations, for the jobs that ask for one (``--reservation``).

A reservation changes without its jobs changing, and the job list does not say what a reservation
allows: whether a job may start now on bridge nodes is read from the reservation itself
(:func:`reconcilers.slurm_waiting.reservation_reason`). Few jobs ask for one, and slurmctld holds
few reservations, so the whole list is read, only when such a job is reconciled, and at most once
per :data:`MAX_AGE` seconds however many of them there are. Slurm purges a reservation when it
ends: a name missing from the list is a reservation that does not exist (any more).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType

import structlog

from bridge.api.slurm_reservation import SlurmReservation
from bridge.slurmrest.errors import SlurmError

__all__ = ["MAX_AGE", "ReservationCache"]

log = structlog.get_logger(__name__)

MAX_AGE = 10.0
"""Seconds a listing (or a failure to list) is used for before slurmctld is asked again."""
READ_TIMEOUT = 5.0
"""Seconds the listing may take: it is made inside a reconcile."""


class ReservationCache:
    """The last listing of slurmctld's reservations by name, read again once it is older than
    ``max_age``; one read at a time, shared by every reconcile waiting for it."""

    def __init__(
        self,
        *,
        list_reservations: Callable[[], Awaitable[tuple[SlurmReservation, ...]]],
        max_age: float = MAX_AGE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._list = list_reservations
        self._max_age = max_age
        self._clock = clock
        self._listed: Mapping[str, SlurmReservation] | None = None
        self._listed_at = 0.0
        self._lock = asyncio.Lock()

    async def get(self) -> Mapping[str, SlurmReservation] | None:
        """The reservations by name; the last listing when slurmctld cannot be read now, None when
        none was ever read (a reservation is then not a reason to wait: Slurm's own pending reason
        still gives the capacity back once released)."""
        async with self._lock:
            if self._listed_at and self._clock() - self._listed_at < self._max_age:
                return self._listed
            try:
                async with asyncio.timeout(READ_TIMEOUT):
                    listed = await self._list()
            except (SlurmError, TimeoutError) as exc:
                # Tried again after max_age, not by every reconcile meanwhile.
                self._listed_at = self._clock()
                log.warning("cannot list Slurm reservations; using the last listing", error=str(exc))
                return self._listed
            self._listed = MappingProxyType({r.name: r for r in listed})
            self._listed_at = self._clock()
            return self._listed
