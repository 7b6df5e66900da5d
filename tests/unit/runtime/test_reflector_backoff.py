"""The reflector's reconnect backoff: 0.8 s doubling to 30 s with jitter, reset after 2 min of health."""

from __future__ import annotations

import random

from bridge.runtime.backoff import Backoff, BackoffSettings


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_delays_double_with_jitter_up_to_the_cap() -> None:
    clock = Clock()
    backoff = Backoff(clock=clock, rng=random.Random(1))
    bases = [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0]
    for base in bases:
        delay = backoff.next_delay()
        assert base <= delay <= min(2 * base, 30.0)
        clock.now += delay


def test_no_jitter_is_exact() -> None:
    backoff = Backoff(BackoffSettings(jitter=0.0), clock=Clock())
    assert [backoff.next_delay() for _ in range(4)] == [0.8, 1.6, 3.2, 6.4]


def test_resets_after_two_healthy_minutes() -> None:
    clock = Clock()
    backoff = Backoff(BackoffSettings(jitter=0.0), clock=clock)
    for _ in range(5):
        backoff.next_delay()
    clock.now += 119.0
    assert backoff.next_delay() == 25.6  # not healthy for long enough: keeps growing
    clock.now += 121.0
    assert backoff.next_delay() == 0.8
