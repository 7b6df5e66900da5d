"""The allocator's free memory handed back on a timer (``bridge.runtime.memory``)."""

from __future__ import annotations

import asyncio

import pytest

from bridge.program.settings import ProgramSettings
from bridge.runtime.memory import MemoryTrimmer, libc_malloc_trim
from bridge.slurm.program import parse_args


def test_glibc_trim_is_found_and_callable_here() -> None:
    trim = libc_malloc_trim()
    assert trim is not None, "this machine's C library is glibc"
    assert trim() in (0, 1)


async def test_the_trimmer_trims_once_per_interval_until_cancelled() -> None:
    slept: list[float] = []
    trims: list[int] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) > 3:
            raise asyncio.CancelledError
        await asyncio.sleep(0)

    def trim() -> int:
        trims.append(1)
        return 1

    trimmer = MemoryTrimmer(interval=60.0, trim=trim, sleep=sleep)
    with pytest.raises(asyncio.CancelledError):
        await trimmer.run()
    assert slept == [60.0] * 4
    assert len(trims) == trimmer.trims == 3


def test_an_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        MemoryTrimmer(interval=0, trim=lambda: 0)


def test_the_trim_interval_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    _, s, _ = parse_args(["--config", "site"])
    assert s.memory_trim_interval == ProgramSettings.memory_trim_interval == 60.0
    _, s, _ = parse_args(["--config", "site", "--memory-trim-interval", "0"])
    assert s.memory_trim_interval == 0.0
    monkeypatch.setenv("K8S_BRIDGE_MEMORY_TRIM_INTERVAL", "5")
    _, s, _ = parse_args(["--config", "site"])
    assert s.memory_trim_interval == 5.0
