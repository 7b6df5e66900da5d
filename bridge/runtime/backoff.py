"""Backoff between attempts to reach something that keeps failing (an API server, slurmrestd).

client-go's reflector backs off 800 ms doubling to 30 s with jitter, and forgets the failures once
the connection has been healthy for 2 minutes, so a storm of disconnects slows reconnection down
while a single hiccup after hours of health costs under two seconds. The clock, random source and
sleep are injectable so tests run without waiting.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

__all__ = ["Backoff", "BackoffSettings"]


@dataclass(frozen=True, slots=True, kw_only=True)
class BackoffSettings:
    initial: float = 0.8
    maximum: float = 30.0
    factor: float = 2.0
    jitter: float = 1.0
    """Each delay is ``d + random() * jitter * d`` (client-go's ``wait.Jitter``), at most ``maximum``."""
    reset_after: float = 120.0
    """No failure for this long: start again from ``initial``."""


class Backoff:
    """Successive delays for one failing loop."""

    def __init__(
        self,
        settings: BackoffSettings | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings if settings is not None else BackoffSettings()
        self._clock = clock
        self._sleep = sleep
        self._rng = rng if rng is not None else random.Random()  # noqa: S311 - jitter, not secrets
        self._next = self.settings.initial
        self._last: float | None = None

    def next_delay(self) -> float:
        """The delay before the next attempt (and advance the sequence)."""
        s = self.settings
        now = self._clock()
        if self._last is not None and now - self._last > s.reset_after:
            self._next = s.initial
        self._last = now
        base = self._next
        self._next = min(base * s.factor, s.maximum)
        return min(base + self._rng.random() * s.jitter * base, s.maximum)

    async def wait(self) -> float:
        delay = self.next_delay()
        await self._sleep(delay)
        return delay
