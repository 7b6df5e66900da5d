"""The limiters' arithmetic, against client-go's figures, on a fake clock."""

from __future__ import annotations

import pytest

from bridge.runtime.ratelimit import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    default_controller_rate_limiter,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_exponential_doubles_from_5ms_per_key() -> None:
    limiter = ItemExponentialFailureRateLimiter()
    assert [limiter.when("a") for _ in range(5)] == pytest.approx([0.005, 0.01, 0.02, 0.04, 0.08])
    assert limiter.when("b") == pytest.approx(0.005)  # per key
    assert limiter.retries("a") == 5
    assert limiter.retries("b") == 1


def test_exponential_caps_at_1000s_and_never_overflows() -> None:
    limiter = ItemExponentialFailureRateLimiter()
    delays = [limiter.when("a") for _ in range(3000)]
    # 0.005 * 2**17 = 655.36 is the last below the cap; 2**18 would be 1310.72.
    assert delays[17] == pytest.approx(655.36)
    assert delays[18] == 1000.0
    assert delays[-1] == 1000.0


def test_exponential_forget_resets() -> None:
    limiter = ItemExponentialFailureRateLimiter()
    for _ in range(4):
        limiter.when("a")
    limiter.forget("a")
    assert limiter.retries("a") == 0
    assert limiter.when("a") == pytest.approx(0.005)


def test_bucket_allows_burst_then_spaces_at_qps() -> None:
    clock = FakeClock()
    limiter = BucketRateLimiter(qps=10, burst=100, clock=clock)
    assert [limiter.when(i) for i in range(100)] == [0.0] * 100
    assert limiter.when("x") == pytest.approx(0.1)
    assert limiter.when("y") == pytest.approx(0.2)
    # Half a second refills five tokens: the debt of two is paid, three are left.
    clock.now += 0.5
    assert [limiter.when(i) for i in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.when("z") == pytest.approx(0.1)


def test_bucket_refill_is_capped_at_burst() -> None:
    clock = FakeClock()
    limiter = BucketRateLimiter(qps=10, burst=5, clock=clock)
    clock.now += 3600
    assert [limiter.when(i) for i in range(5)] == [0.0] * 5
    assert limiter.when("over") == pytest.approx(0.1)


def test_bucket_tracks_no_keys() -> None:
    limiter = BucketRateLimiter(clock=FakeClock())
    limiter.when("a")
    limiter.forget("a")
    assert limiter.retries("a") == 0


def test_max_of_takes_the_longest_and_consults_all() -> None:
    clock = FakeClock()
    limiter = default_controller_rate_limiter(clock=clock)
    assert limiter.when("a") == pytest.approx(0.005)
    assert limiter.when("a") == pytest.approx(0.01)
    for i in range(98):  # 100 tokens taken in all
        limiter.when(i)
    # The per-key wait of a new key is 5 ms, the bucket's 0.1 s: the bucket wins.
    assert limiter.when("b") == pytest.approx(0.1)
    assert limiter.retries("a") == 2
    limiter.forget("a")
    assert limiter.retries("a") == 0


def test_max_of_retries_is_the_largest() -> None:
    a = ItemExponentialFailureRateLimiter()
    b = ItemExponentialFailureRateLimiter()
    limiter = MaxOfRateLimiter(a, b)
    b.when("k")
    b.when("k")
    limiter.when("k")
    assert limiter.retries("k") == 3


@pytest.mark.parametrize(
    "make",
    [
        lambda: ItemExponentialFailureRateLimiter(base=0),
        lambda: ItemExponentialFailureRateLimiter(base=2, maximum=1),
        lambda: BucketRateLimiter(qps=0),
        lambda: BucketRateLimiter(burst=0),
        MaxOfRateLimiter,
    ],
)
def test_bad_arguments_are_refused(make: object) -> None:
    with pytest.raises(ValueError):  # noqa: PT011
        make()  # type: ignore[operator]
