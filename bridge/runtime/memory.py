"""Give the memory the allocator holds free back to the system now and then (glibc's ``malloc_trim``).

A bridge with a deep queue caches thousands of objects and replaces a few of them every second. The
blocks those replacements free are reused by Python, but glibc keeps the pages they leave free
between live blocks inside its heaps and returns only what is free at the top of a heap, so the
resident size climbs towards the largest the process ever was and stays there. ``malloc_trim(0)``
hands every whole free page back (``madvise``), as Dask's workers do on demand ("trim memory"). It
takes a few milliseconds; once a minute is plenty. On a C library without it (musl) it is not done.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
from collections.abc import Awaitable, Callable

import structlog

__all__ = ["MemoryTrimmer", "libc_malloc_trim"]

log = structlog.get_logger(__name__)

Trim = Callable[[], int]


def libc_malloc_trim() -> Trim | None:
    """glibc's ``malloc_trim(0)`` as a function, or None where the C library has none."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        function = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int

    def trim() -> int:
        return int(function(0))

    return trim


class MemoryTrimmer:
    """Runs ``trim`` every ``interval`` seconds until cancelled (a manager's runnable)."""

    def __init__(
        self,
        *,
        interval: float,
        trim: Trim,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"a memory trim interval must be positive, got {interval}")
        self._interval = interval
        self._trim = trim
        self._sleep = sleep
        self.trims = 0

    async def run(self) -> None:
        while True:
            await self._sleep(self._interval)
            released = self._trim()
            self.trims += 1
            log.debug("allocator's free memory handed back", released=bool(released))
