"""The live WorkloadMixing configuration the bridges run on, and the counts they report back.

Why a holder between the mixing reconciler and the bridges, instead of each bridge reading the
resource from its own cache: a bridge must never run on a configuration that refers to objects that
do not exist. The reconciler (reconcilers/mixing.py) is the only one that checks a spec against the
cluster, so it is the one that decides what the bridges run on: it publishes a spec here only once
that spec is valid and every object it names exists. A later spec that is invalid is not published,
and the bridges keep running the **last good** one, as the status's ``Degraded`` condition
(``LastGoodConfigurationInUse``) tells the operator. Bridges pick up a new configuration without a
restart: they either read :attr:`LiveConfig.current` when they need it (each poll, each reconcile),
wait for :meth:`LiveConfig.wait_for_change`, or :meth:`LiveConfig.subscribe` a callback.

The other direction: bridges know how many of their jobs are held, queued, admitted and running;
the reconciler writes that into the WorkloadMixing's status. :class:`CountsBoard` is where bridges
put those counts; it is also a controller source (``add_handler``/``has_synced``), so a change of the
counts queues a reconcile of that WorkloadMixing at once instead of waiting for a periodic recheck.
Bridges may report on every job's phase change: the reconciler, not the board, decides how often the
status is written (``CountsWriteLimiter`` in reconcilers/mixing.py: at most every few seconds, the
latest counts winning), and a reconcile costs no API request unless it writes.

Everything here lives on one event loop and is not thread-safe; callbacks run synchronously in the
caller's task and must not block.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import structlog

from bridge.api.mixing import SourceCounts, WorkloadMixingSpec
from bridge.api.status import Problem
from bridge.runtime.handlers import EventHandler, Object

__all__ = [
    "ConfigSnapshot",
    "CountsBoard",
    "CountsProvider",
    "LiveConfig",
    "MixingConfigs",
    "SourceName",
    "Subscriber",
    "ZeroCounts",
]

log = structlog.get_logger(__name__)

SourceName = str
"""A bridge's source: the section of the WorkloadMixing spec it serves (``slurm``, ``ray``)."""


@dataclass(frozen=True, kw_only=True)
class ConfigSnapshot:
    """One accepted configuration: a WorkloadMixing generation whose every reference resolved."""

    name: str
    """Name of the WorkloadMixing."""
    uid: str
    """UID of the WorkloadMixing: a deleted and re-created resource of the same name is another one."""
    generation: int
    """``metadata.generation`` of the accepted spec."""
    spec: WorkloadMixingSpec
    version: int
    """Increases by one with each change of :attr:`LiveConfig.current` (also a withdrawal)."""


Subscriber = Callable[["ConfigSnapshot | None"], None]
"""Called with the new current configuration (None: withdrawn) after each change."""


class LiveConfig:
    """The last good configuration of one WorkloadMixing, with change notification.

    ``current`` is None until a first good configuration is published, and again after the
    WorkloadMixing is deleted (:meth:`withdraw`): bridges then bridge no new jobs.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._current: ConfigSnapshot | None = None
        self._version = 0
        self._subscribers: list[Subscriber] = []
        self._changed = asyncio.Event()

    @property
    def current(self) -> ConfigSnapshot | None:
        """The configuration to run on now (the last good one), or None."""
        return self._current

    @property
    def version(self) -> int:
        """0 before any change; increases with each change of :attr:`current`."""
        return self._version

    def publish(self, *, uid: str, generation: int, spec: WorkloadMixingSpec) -> bool:
        """Make ``spec`` (generation ``generation`` of the resource ``uid``) the current configuration.

        Returns False, notifying nobody, when it is already current (same resource, generation and
        spec): the reconciler publishes on every successful reconcile and that must not wake bridges.
        """
        old = self._current
        if old is not None and (old.uid, old.generation, old.spec) == (uid, generation, spec):
            return False
        self._set(
            ConfigSnapshot(
                name=self.name, uid=uid, generation=generation, spec=spec, version=self._version + 1
            )
        )
        return True

    def withdraw(self) -> bool:
        """Forget the configuration (the resource is gone); False when there was none."""
        if self._current is None:
            return False
        self._set(None)
        return True

    def last_good_generation(self, *, uid: str) -> int | None:
        """The generation in use for resource ``uid``, or None when none of its generations is."""
        current = self._current
        return current.generation if current is not None and current.uid == uid else None

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call ``callback`` after each change; returns the function that unsubscribes it."""
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            if callback in self._subscribers:
                self._subscribers.remove(callback)

        return unsubscribe

    async def wait_for_change(self, *, after: int) -> ConfigSnapshot | None:
        """Wait until :attr:`version` exceeds ``after``; return the current configuration then.

        A bridge loop: ``seen = cfg.version`` ... ``snapshot = await cfg.wait_for_change(after=seen)``;
        changes made while it was busy are not lost, since the version tells it one happened.
        """
        while self._version <= after:
            await self._changed.wait()
        return self._current

    def _set(self, snapshot: ConfigSnapshot | None) -> None:
        self._current = snapshot
        self._version += 1
        # Wake every waiter, then arm a fresh event for the next change.
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        log.info(
            "live configuration changed",
            mixing=self.name,
            generation=snapshot.generation if snapshot is not None else None,
            version=self._version,
        )
        for callback in list(self._subscribers):
            try:
                callback(snapshot)
            except Exception:
                # One bridge's bug must not keep the others from learning about the change.
                log.exception("configuration subscriber failed", mixing=self.name)


class MixingConfigs:
    """One :class:`LiveConfig` per WorkloadMixing name, created on first request.

    The reconciler publishes into it; each bridge asks for the one named on its command line.
    """

    def __init__(self) -> None:
        self._configs: dict[str, LiveConfig] = {}

    def get(self, name: str) -> LiveConfig:
        config = self._configs.get(name)
        if config is None:
            config = self._configs[name] = LiveConfig(name)
        return config

    def names(self) -> list[str]:
        return sorted(self._configs)


class CountsProvider(Protocol):
    """Where the reconciler reads live counts (a bridge, a :class:`CountsBoard`, a test double)."""

    def counts(self, mixing: str, source: SourceName) -> SourceCounts | None:
        """Counts of ``source``'s jobs bridged under ``mixing``, or None when unknown (zeros in status)."""
        ...

    def problems(self, mixing: str) -> list[Problem]:
        """What the bridges found wrong while running on ``mixing`` (``Degraded``), every source's."""
        ...


class ZeroCounts:
    """The default provider: no bridge reports, so every configured source shows zeros."""

    def counts(self, mixing: str, source: SourceName) -> SourceCounts | None:
        return None

    def problems(self, mixing: str) -> list[Problem]:
        return []


_SOURCE_OBJECT_KIND = "WorkloadMixingCounts"


class CountsBoard:
    """Counts the bridges set and the reconciler reads; a source of reconcile requests on change.

    Bridges call :meth:`set` whenever their counts change (cheap: nothing happens if they did not).
    As a controller source, each change enqueues the WorkloadMixing it is about.
    """

    def __init__(self) -> None:
        self._counts: dict[tuple[str, SourceName], SourceCounts] = {}
        self._problems: dict[tuple[str, SourceName], tuple[Problem, ...]] = {}
        self._handlers: list[EventHandler] = []
        self._versions = itertools.count(1)

    def counts(self, mixing: str, source: SourceName) -> SourceCounts | None:
        return self._counts.get((mixing, source))

    def set(self, mixing: str, source: SourceName, counts: SourceCounts) -> None:
        """Record ``source``'s counts under ``mixing``; tells the handlers only when they changed."""
        key = (mixing, source)
        if self._counts.get(key) == counts:
            return
        self._counts[key] = counts
        obj = self._object(mixing)
        for handler in self._handlers:
            handler.on_update(obj, obj)

    def problems(self, mixing: str) -> list[Problem]:
        return [p for (m, _), found in sorted(self._problems.items()) if m == mixing for p in found]

    def set_problems(self, mixing: str, source: SourceName, problems: tuple[Problem, ...]) -> None:
        """Record what ``source`` finds wrong while running (non-blocking problems: ``Degraded``)."""
        key = (mixing, source)
        if self._problems.get(key, ()) == problems:
            return
        if problems:
            self._problems[key] = problems
        else:
            self._problems.pop(key, None)
        obj = self._object(mixing)
        for handler in self._handlers:
            handler.on_update(obj, obj)

    def clear(self, mixing: str, source: SourceName) -> None:
        """Forget ``source``'s counts under ``mixing`` (the bridge stopped): status shows zeros."""
        if self._counts.pop((mixing, source), None) is not None:
            obj = self._object(mixing)
            for handler in self._handlers:
                handler.on_update(obj, obj)

    # Source protocol (bridge.runtime.handlers.Source)
    def add_handler(self, handler: EventHandler) -> None:
        self._handlers.append(handler)
        for mixing in sorted({m for m, _ in self._counts}):
            handler.on_add(self._object(mixing), is_initial_list=True)

    def has_synced(self) -> bool:
        return True

    def _object(self, mixing: str) -> Object:
        # The shape the controller's default mapper (own_key) reads: a cluster-scoped name.
        return {"kind": _SOURCE_OBJECT_KIND, "metadata": {"name": mixing}, "version": next(self._versions)}
