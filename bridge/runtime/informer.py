"""Informers: a reflector feeding a store and the event handlers of every interested controller.

One informer per (resource, namespace, label selector, field selector), shared through
:class:`SharedInformerFactory`, so ten controllers that read Pods cost one watch and one copy of each
Pod. The informer is the reflector's :class:`~bridge.runtime.reflector.Sink`: it applies each event
to the store, then tells the handlers; a relist is diffed against the store so that objects which
vanished meanwhile are delivered as deletes (with their last known state) before the adds and
updates. A periodic resync replays every object as an update (controller-runtime: 10 h +-10%).

Tasks: ``run()`` owns the reflector and the resync loop and returns only when cancelled (or after
``stop()``); the manager (or a test) owns ``run()``.
"""

from __future__ import annotations

import asyncio
import random
import weakref
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import astuple, fields
from typing import Any

import structlog
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from bridge.runtime.cache import IndexFunc, Store, Transform, default_transform
from bridge.runtime.client import Client
from bridge.runtime.discovery import Resource
from bridge.runtime.handlers import EventHandler, Object
from bridge.runtime.metrics import REGISTRY
from bridge.runtime.reflector import Reflector, ReflectorSettings, ReflectorStats

__all__ = [
    "DEFAULT_RESYNC_PERIOD",
    "Dispatcher",
    "Informer",
    "InformerCollector",
    "SharedInformerFactory",
    "informer_collector",
]

log = structlog.get_logger(__name__)

DEFAULT_RESYNC_PERIOD = 10 * 3600.0
"""controller-runtime's default: replay the cache as updates every 10 hours (+-10% jitter)."""


class Dispatcher:
    """A store plus the handlers told about its changes; shared by informers and polled sources."""

    def __init__(self, store: Store, *, name: str) -> None:
        self.store = store
        self.name = name
        self._handlers: list[EventHandler] = []
        self._synced = asyncio.Event()
        self._log = log.bind(source=name)

    def add_handler(self, handler: EventHandler) -> None:
        """Register ``handler``; it first receives ``on_add`` for every object already stored."""
        self._handlers.append(handler)
        for obj in self.store.list():
            self._call(handler.on_add, obj, is_initial_list=True)

    def has_synced(self) -> bool:
        return self._synced.is_set()

    async def wait_for_sync(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        """Wait until the first full list has been delivered; False on timeout."""
        try:
            async with asyncio.timeout(timeout):
                await self._synced.wait()
        except TimeoutError:
            return False
        return True

    # --- changes ----------------------------------------------------------------------------------

    def upsert(self, obj: Object) -> None:
        old, new = self.store.put(obj)
        if old is None:
            initial = not self._synced.is_set()
            for handler in self._handlers:
                self._call(handler.on_add, new, is_initial_list=initial)
        else:
            for handler in self._handlers:
                self._call(handler.on_update, old, new)

    def delete(self, obj: Object) -> None:
        store = self.store
        if store.transform is not None:
            obj = store.transform(obj)
        old = store.pop(store.key_of(obj))
        # A delete of an object never seen still tells the handlers (the object as the server sent it).
        last = obj if old is None else old
        for handler in self._handlers:
            self._call(handler.on_delete, last)

    def replace(self, objects: list[Object]) -> None:
        vanished, changes = self.store.replace(objects)
        initial = not self._synced.is_set()
        handlers = self._handlers
        for obj in vanished:
            for handler in handlers:
                self._call(handler.on_delete, obj)
        for old, new in changes:
            for handler in handlers:
                if old is None:
                    self._call(handler.on_add, new, is_initial_list=initial)
                else:
                    self._call(handler.on_update, old, new)
        self._synced.set()

    def resync(self) -> None:
        for obj in self.store.list():
            for handler in self._handlers:
                self._call(handler.on_update, obj, obj)

    def _call(self, method: Callable[..., None], *args: Any, **kwargs: Any) -> None:
        try:
            method(*args, **kwargs)
        except Exception:
            self._log.exception("event handler failed", handler=repr(method))


class InformerCollector(Collector):
    """``reflector_*_total`` counters and ``informer_cache_objects`` per informer, read when scraped.

    The reflector counts in plain integers (the decode loop must not pay for metric objects);
    informers are held weakly and summed by name.
    """

    def __init__(self) -> None:
        self._informers: weakref.WeakSet[Informer] = weakref.WeakSet()

    def add(self, informer: Informer) -> None:
        self._informers.add(informer)

    def discard(self, informer: Informer) -> None:
        self._informers.discard(informer)

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        counters = {
            f.name: CounterMetricFamily(
                f"reflector_{f.name}", f"Reflector {f.name.replace('_', ' ')}", labels=["name"]
            )
            for f in fields(ReflectorStats)
        }
        objects = GaugeMetricFamily(
            "informer_cache_objects", "Objects in the informer's store", labels=["name"]
        )
        totals: dict[str, list[int]] = {}
        sizes: dict[str, int] = {}
        for informer in list(self._informers):
            values: list[int] = list(astuple(informer.reflector.stats))
            current = totals.setdefault(informer.name, [0] * len(values))
            totals[informer.name] = [a + b for a, b in zip(current, values, strict=True)]
            sizes[informer.name] = sizes.get(informer.name, 0) + len(informer.store)
        for name, values in totals.items():
            for family, value in zip(counters.values(), values, strict=True):
                family.add_metric([name], value)
            objects.add_metric([name], sizes[name])
        yield from counters.values()
        yield objects


_COLLECTORS: weakref.WeakKeyDictionary[CollectorRegistry, InformerCollector] = weakref.WeakKeyDictionary()


def informer_collector(registry: CollectorRegistry) -> InformerCollector:
    """The informers' collector on ``registry``, registered on first use."""
    collector = _COLLECTORS.get(registry)
    if collector is None:
        collector = _COLLECTORS[registry] = InformerCollector()
        registry.register(collector)
    return collector


class Informer(Dispatcher):
    """Watches one resource (optionally one namespace, selectors) into a store; a ``Source``."""

    def __init__(
        self,
        client: Client,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Transform | None = default_transform,
        indexers: dict[str, IndexFunc] | None = None,
        resync_period: float | None = DEFAULT_RESYNC_PERIOD,
        settings: ReflectorSettings | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
        registry: CollectorRegistry | None = REGISTRY,
        metrics_while_running: bool = False,
    ) -> None:
        """``metrics_while_running``: export this informer's figures only while :meth:`run` runs
        (informers made on demand, perhaps never run, e.g. on a standby replica); by default from
        construction on."""
        self.resource = resource
        self.reflector = Reflector(
            client,
            resource,
            self,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            settings=settings,
            sleep=sleep,
            rng=rng,
        )
        super().__init__(Store(transform=transform, indexers=indexers), name=self.reflector.name)
        self._resync_period = resync_period
        self._sleep = sleep
        self._rng = rng if rng is not None else random.Random()  # noqa: S311 - jitter, not secrets
        self._stop = asyncio.Event()
        self._metrics: InformerCollector | None = None
        if registry is not None:
            if metrics_while_running:
                self._metrics = informer_collector(registry)
            else:
                informer_collector(registry).add(self)

    @property
    def failing(self) -> bool:
        """Whether the reflector's last list or watch failed (:attr:`Reflector.failing`)."""
        return self.reflector.failing

    # Sink (called by the reflector)
    def on_event(self, event_type: str, obj: Object) -> None:
        if event_type == "DELETED":
            self.delete(obj)
        else:
            self.upsert(obj)

    def on_replace(self, objects: list[Object]) -> None:
        self.replace(objects)

    async def run(self) -> None:
        """Run the reflector (and resync) until cancelled or :meth:`stop`."""
        if self._metrics is not None:
            self._metrics.add(self)
        try:
            async with asyncio.TaskGroup() as tg:
                tasks = [tg.create_task(self.reflector.run(), name=f"reflector {self.name}")]
                if self._resync_period:
                    tasks.append(tg.create_task(self._resync_loop(), name=f"resync {self.name}"))
                await self._stop.wait()
                for task in tasks:
                    task.cancel()
        finally:
            if self._metrics is not None:
                self._metrics.discard(self)
            self._stop.clear()

    def stop(self) -> None:
        self._stop.set()

    async def _resync_loop(self) -> None:
        assert self._resync_period
        while True:
            await self._sleep(self._resync_period * self._rng.uniform(0.9, 1.1))
            if self.has_synced():
                self.resync()


def _then(first: Transform | None, second: Transform | None) -> Transform | None:
    """``second`` applied to what ``first`` gives (either may be None)."""
    if first is None or second is None:
        return first or second

    def both(obj: Object) -> Object:
        return second(first(obj))

    return both


class SharedInformerFactory:
    """One informer per (resource, namespace, selectors), created on request, run by :meth:`run`.

    Informers requested after :meth:`run` started are started at once, under the same owner.
    """

    def __init__(
        self,
        client: Client,
        *,
        transform: Transform | None = default_transform,
        resync_period: float | None = DEFAULT_RESYNC_PERIOD,
        settings: ReflectorSettings | None = None,
    ) -> None:
        self._client = client
        self._transform = transform
        self._resync_period = resync_period
        self._settings = settings
        self._informers: dict[tuple[str, str, str, str, str, Transform | None], Informer] = {}
        self._group: asyncio.TaskGroup | None = None
        self._stop = asyncio.Event()

    async def informer(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        indexers: dict[str, IndexFunc] | None = None,
        view: Transform | None = None,
    ) -> Informer:
        """The shared informer for this resource and scope (resolved through discovery).

        ``view``: what of each object the cache keeps, applied after the factory's transform (as
        client-go's ``SetTransform``): a program that reads a few fields of many large objects keeps
        just those. An informer is shared only among callers asking for the same ``view``."""
        resource = await self._client.resource(api_version, kind)
        return self.informer_for(
            resource,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            indexers=indexers,
            view=view,
        )

    def informer_for(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        indexers: dict[str, IndexFunc] | None = None,
        view: Transform | None = None,
    ) -> Informer:
        key = (
            resource.api_version,
            resource.plural,
            namespace or "",
            label_selector or "",
            field_selector or "",
            view,
        )
        informer = self._informers.get(key)
        if informer is None:
            informer = Informer(
                self._client,
                resource,
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                transform=_then(self._transform, view),
                resync_period=self._resync_period,
                settings=self._settings,
            )
            self._informers[key] = informer
            if self._group is not None:
                self._group.create_task(informer.run(), name=f"informer {informer.name}")
        for name, func in (indexers or {}).items():
            if name not in informer.store.indexer_names:
                informer.store.add_indexer(name, func)
        return informer

    @property
    def informers(self) -> list[Informer]:
        return list(self._informers.values())

    def has_synced(self) -> bool:
        return all(i.has_synced() for i in self._informers.values())

    async def wait_for_sync(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        """Wait until every informer created so far has synced; False on timeout."""
        try:
            async with asyncio.timeout(timeout):
                for informer in list(self._informers.values()):
                    await informer.wait_for_sync()
        except TimeoutError:
            return False
        return True

    async def run(self) -> None:
        """Run every informer (including ones created later) until cancelled or :meth:`stop`."""
        if self._group is not None:
            raise RuntimeError("SharedInformerFactory.run() is already running")
        try:
            async with asyncio.TaskGroup() as tg:
                self._group = tg
                for informer in self._informers.values():
                    tg.create_task(informer.run(), name=f"informer {informer.name}")
                await self._stop.wait()
                for informer in self._informers.values():
                    informer.stop()
        finally:
            self._group = None
            self._stop.clear()

    def stop(self) -> None:
        self._stop.set()
