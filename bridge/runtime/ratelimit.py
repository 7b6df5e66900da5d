"""How long a key waits before it is retried: client-go's rate limiters, same arithmetic.

A failing reconcile must back off per key (one broken object must not spin a worker), while the
controller as a whole must not flood the API server when many keys fail at once. client-go solves
both with two limiters combined by taking the longer wait; ``default_controller_rate_limiter`` is
that combination with client-go's figures (5 ms doubling up to 1000 s per key; 10 qps, burst 100
overall). All limiters take an injectable monotonic ``clock`` so that tests need no sleeping.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable
from typing import Protocol

__all__ = [
    "BucketRateLimiter",
    "Clock",
    "ItemExponentialFailureRateLimiter",
    "MaxOfRateLimiter",
    "RateLimiter",
    "default_controller_rate_limiter",
]

Clock = Callable[[], float]
"""Seconds on a monotonic clock (``time.monotonic`` unless a test injects its own)."""


class RateLimiter(Protocol):
    """Decides the delay before a key is retried; remembers failures until ``forget``."""

    def when(self, key: Hashable) -> float:
        """Record one more failure of ``key`` and return how many seconds to wait before retrying it."""
        ...

    def forget(self, key: Hashable) -> None:
        """Clear what is remembered about ``key`` (it succeeded, or it is gone)."""
        ...

    def retries(self, key: Hashable) -> int:
        """How many times ``key`` has failed since it was last forgotten."""
        ...


class ItemExponentialFailureRateLimiter:
    """Per key: ``base * 2**failures``, capped at ``maximum`` (client-go: 5 ms .. 1000 s)."""

    __slots__ = ("_base", "_failures", "_maximum")

    def __init__(self, *, base: float = 0.005, maximum: float = 1000.0) -> None:
        if base <= 0 or maximum < base:
            raise ValueError(f"need 0 < base <= maximum, got base={base} maximum={maximum}")
        self._base = base
        self._maximum = maximum
        self._failures: dict[Hashable, int] = {}

    def when(self, key: Hashable) -> float:
        exponent = self._failures.get(key, 0)
        self._failures[key] = exponent + 1
        # ldexp(base, e) == base * 2**e; capping e keeps it finite however long a key keeps failing.
        return min(self._maximum, math.ldexp(self._base, min(exponent, 1023)))

    def forget(self, key: Hashable) -> None:
        self._failures.pop(key, None)

    def retries(self, key: Hashable) -> int:
        return self._failures.get(key, 0)


class BucketRateLimiter:
    """One token bucket shared by all keys (golang.org/x/time/rate as client-go uses it).

    The bucket holds up to ``burst`` tokens and refills at ``qps``; each ``when`` takes a token,
    going into debt when none is left, and the debt divided by ``qps`` is the wait. Failures of
    individual keys are not tracked.
    """

    __slots__ = ("_burst", "_clock", "_last", "_qps", "_tokens")

    def __init__(self, *, qps: float = 10.0, burst: int = 100, clock: Clock = time.monotonic) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"need qps > 0 and burst >= 1, got qps={qps} burst={burst}")
        self._qps = qps
        self._burst = float(burst)
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()

    def when(self, key: Hashable) -> float:
        now = self._clock()
        elapsed = max(0.0, now - self._last)
        self._last = now
        self._tokens = min(self._burst, self._tokens + elapsed * self._qps) - 1.0
        if self._tokens >= 0.0:
            return 0.0
        return -self._tokens / self._qps

    def forget(self, key: Hashable) -> None:
        return None

    def retries(self, key: Hashable) -> int:
        return 0


class MaxOfRateLimiter:
    """The longest wait of several limiters; every limiter sees every call (as in client-go)."""

    __slots__ = ("_limiters",)

    def __init__(self, *limiters: RateLimiter) -> None:
        if not limiters:
            raise ValueError("MaxOfRateLimiter needs at least one limiter")
        self._limiters = limiters

    def when(self, key: Hashable) -> float:
        return max([limiter.when(key) for limiter in self._limiters])

    def forget(self, key: Hashable) -> None:
        for limiter in self._limiters:
            limiter.forget(key)

    def retries(self, key: Hashable) -> int:
        return max(limiter.retries(key) for limiter in self._limiters)


def default_controller_rate_limiter(*, clock: Clock = time.monotonic) -> MaxOfRateLimiter:
    """client-go's ``DefaultTypedControllerRateLimiter``: per-key 5 ms..1000 s, max with 10 qps/burst 100."""
    return MaxOfRateLimiter(
        ItemExponentialFailureRateLimiter(base=0.005, maximum=1000.0),
        BucketRateLimiter(qps=10.0, burst=100, clock=clock),
    )
