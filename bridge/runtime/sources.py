"""Sources of change that are not Kubernetes watches: lists polled from another system.

slurmrestd has no watch; it answers "what are the jobs now" (and "nothing changed since
``update_time``"). :class:`PolledSource` turns such a list into the events an informer delivers: each
poll result is diffed by key against the store, deletes first, then adds and updates (only for
objects that changed). A reconciler watching it cannot tell it from an informer. A poll that read a
few objects alone (the jobs the bridge has just written) returns them as :class:`Changed`: only
those are compared and stored, so such a poll costs what it read, not the size of the store.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Final

import structlog

from bridge.runtime.backoff import Backoff, BackoffSettings
from bridge.runtime.cache import IndexFunc, KeyFunc, Store, Transform
from bridge.runtime.handlers import Object
from bridge.runtime.informer import Dispatcher

__all__ = ["NOT_MODIFIED", "Changed", "NotModified", "PolledSource"]

log = structlog.get_logger(__name__)


class NotModified:
    """Returned by ``poll`` when nothing changed since the last poll (no diff is computed)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NOT_MODIFIED"


NOT_MODIFIED: Final = NotModified()


class Changed:
    """Returned by ``poll`` when only ``objects`` may have changed (added or updated) and every other
    stored object stands: they alone are compared and stored. Never a deletion: a poll that saw an
    object go returns the complete list."""

    __slots__ = ("objects",)

    def __init__(self, objects: list[Object]) -> None:
        self.objects = objects

    def __repr__(self) -> str:
        return f"Changed({len(self.objects)} objects)"


Poll = Callable[[], Awaitable[list[Object] | NotModified | Changed]]


class PolledSource(Dispatcher):
    """Calls ``poll()`` every ``interval`` seconds (or at once on :meth:`trigger`) and diffs the result."""

    def __init__(
        self,
        *,
        name: str,
        poll: Poll,
        key: KeyFunc,
        interval: float,
        transform: Transform | None = None,
        indexers: dict[str, IndexFunc] | None = None,
        backoff: BackoffSettings | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(Store(key_func=key, transform=transform, indexers=indexers), name=name)
        self._poll = poll
        self.interval = interval
        self._backoff = Backoff(backoff, sleep=sleep, rng=rng)
        self._sleep = sleep
        self._wake = asyncio.Event()
        self.polls = 0
        self.failures = 0

    def trigger(self) -> None:
        """Poll now (the running loop wakes from its wait)."""
        self._wake.set()

    async def poll_once(self) -> None:
        """One poll and diff; errors propagate (``run`` backs off on them)."""
        self.polls += 1
        result = await self._poll()
        if isinstance(result, list):
            self.apply(result)
            return
        if not self.has_synced():
            raise RuntimeError(f"{self.name}: poll() said {result!r} before any list")
        if isinstance(result, Changed):
            self.apply_changed(result.objects)

    def apply_changed(self, objects: list[Object]) -> None:
        """Store ``objects`` (the current state of their keys; the others stand) and deliver the adds
        and updates among them."""
        store = self.store
        for obj in objects:
            old, new = store.put(obj)
            self._deliver(old, new, initial=False)

    def apply(self, objects: list[Object]) -> None:
        """Diff ``objects`` (the complete current list) against the store and deliver the changes."""
        store = self.store
        initial = not self.has_synced()
        vanished, changes = store.replace(objects)
        handlers = self._handlers
        for obj in vanished:
            for handler in handlers:
                self._call(handler.on_delete, obj)
        for old, new in changes:
            self._deliver(old, new, initial=initial)
        self._synced.set()

    def _deliver(self, old: Object | None, new: Object, *, initial: bool) -> None:
        """An add, or an update when ``new`` differs from ``old``; nothing for an equal object."""
        if old is None:
            for handler in self._handlers:
                self._call(handler.on_add, new, is_initial_list=initial)
        elif old is not new and old != new:
            for handler in self._handlers:
                self._call(handler.on_update, old, new)

    async def run(self) -> None:
        """Poll until cancelled; a failing poll backs off (0.8 s doubling to 30 s by default)."""
        while True:
            self._wake.clear()
            try:
                await self.poll_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.failures += 1
                delay = self._backoff.next_delay()
                self._log.warning(
                    "poll failed, backing off", error=f"{type(exc).__name__}: {exc}", delay=delay
                )
                await self._wait(delay)
                continue
            await self._wait(self.delay_after_poll())

    def delay_after_poll(self) -> float:
        """Seconds to wait after a successful poll (``interval``; a subclass may shorten it)."""
        return self.interval

    async def _wait(self, delay: float) -> None:
        """Sleep ``delay`` seconds unless :meth:`trigger` wakes us first."""
        sleeper = asyncio.ensure_future(self._sleep(delay))
        waker = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait((sleeper, waker), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sleeper, waker):
                task.cancel()
            await asyncio.gather(sleeper, waker, return_exceptions=True)
