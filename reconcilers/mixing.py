"""The WorkloadMixing reconciler: checks the configuration against the cluster, reports it in status,
and hands the last good configuration to the bridges.

Why it exists: the API server's schema and CEL rules catch a malformed WorkloadMixing, but not one
that names a LocalQueue nobody created. This reconciler is where such semantic errors are found and
explained (``Ready=False`` with a reason that names the object, an Event), and where the bridges'
configuration is decided: a spec is published to :class:`bridge.mixing_config.MixingConfigs` only
when it is valid and everything it names exists, so a bad edit never reaches a running bridge
(``Degraded=True``, ``LastGoodConfigurationInUse``, while the previous generation keeps running).

It is level-based and cheap: a reconcile reads the WorkloadMixing, the Kueue objects it names and
the key names of its JWT Secret from caches, and sends the API server nothing unless the status
changes. A LocalQueue, WorkloadPriorityClass or Topology that appears or disappears (or a Topology
whose levels change), and a named Secret that appears, disappears or gains or loses a key, requeues
the WorkloadMixings that name it, found through an index over the WorkloadMixing cache.

The Secret is watched one Secret at a time (:class:`WatchedSecretKeys`): a watch in its namespace
with ``fieldSelector=metadata.name=<name>``, started when some WorkloadMixing comes to name it and
stopped when none does any more, whose cache keeps the key names only (the values are dropped
before anything is stored or handed to a handler; a list's items are held whole until the list
completes, and the watch never logs a raw line). RBAC can grant exactly that (``get``, ``list``,
``watch`` with ``resourceNames: [<name>]`` in a Role of that namespace): a list or watch restricted
to one name by a ``metadata.name`` field selector is authorised against ``resourceNames``. A namespace- or
cluster-wide Secret watch would need every Secret there and cache their contents; a GET per reconcile
(the first design) cost a request each time anything queued a reconcile. Until a Secret's watch has
listed, when RBAC forbids watching it, or while its watch is failing (RBAC revoked later, API server
unreachable), the Secret is read with a GET, as before; when the watch first lists, the WorkloadMixings
naming the Secret are requeued, so a Secret deleted between the GET and the list is noticed.

Only changes that can alter the outcome queue a reconcile (:class:`FilteredSource`): a WorkloadMixing
update whose ``generation`` (and uid, deletion) is unchanged is a status or metadata write - mostly
this controller's own - and a LocalQueue or WorkloadPriorityClass update is only Kueue rewriting its
status (pending counts, usage); only their existence is checked. A Secret update matters only when its
key names change (a rotated token does not). Without these filters every such write cost a reconcile:
Kueue rewrites a LocalQueue's status for each Workload that comes or goes.

Status is written only when it differs from what is stored, and Events are recorded only when a
condition actually changes. A write that would change nothing but the counts the bridges report
(``status.sources``) is spaced out by :class:`CountsWriteLimiter`: at most one per ``counts_interval``
seconds (default 5) per WorkloadMixing, made when the interval is over with the counts of that moment
(the latest counts win; the ones in between are never written). So a 1,000-job catch-up, whose counts
change with every job, writes the status a few times, not a thousand. Conditions are written at once.
A periodic recheck (``recheck_after``) refreshes counts from providers that do not announce changes
and restores a status someone else overwrote; it reads only caches.

Every decision (which conditions, whether to write, whether to publish, which Events) is the pure
function :func:`decide`, built on bridge/api/status.py; the class around it only does I/O.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

import structlog
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from bridge.api.mixing import (
    API_VERSION,
    KIND,
    Condition,
    SourceCounts,
    SourceStatus,
    WorkloadMixingSpec,
    WorkloadMixingStatus,
)
from bridge.api.status import (
    DEGRADED,
    READY,
    Inventory,
    Problem,
    Reference,
    build_status,
    check_references,
    compute_conditions,
    references,
    source_status,
    validation_problems,
)
from bridge.mixing_config import CountsBoard, CountsProvider, MixingConfigs, SourceName, ZeroCounts
from bridge.runtime.cache import Store
from bridge.runtime.client import Client
from bridge.runtime.controller import Controller, Mapper, Request, Result
from bridge.runtime.discovery import Resource
from bridge.runtime.errors import Conflict, Forbidden, NotFound, Unauthorized
from bridge.runtime.events import EventRecorder, EventType
from bridge.runtime.handlers import EventHandler, Object, Source
from bridge.runtime.informer import Dispatcher, Informer, SharedInformerFactory
from bridge.runtime.metrics import REGISTRY
from bridge.runtime.reflector import ReflectorSettings

__all__ = [
    "CONTROLLER_NAME",
    "FIELD_MANAGER",
    "KUEUE_API_VERSION",
    "LEVELS_INDEX",
    "REFERENCES_INDEX",
    "ClientSecretKeys",
    "CountsWriteLimiter",
    "Decision",
    "EventSink",
    "FilteredSource",
    "MixingController",
    "MixingReconciler",
    "PlannedEvent",
    "SecretKeys",
    "SecretWatch",
    "StatusWriter",
    "WatchedSecretKeys",
    "decide",
    "keys_changed",
    "reference_index_keys",
    "referencing_mapper",
    "secret_key_names",
    "secret_keys_changed",
    "setup_mixing_controller",
    "spec_changed",
    "topology_levels",
    "watch_sources",
]

log = structlog.get_logger(__name__)

CONTROLLER_NAME: Final = "workloadmixing"
FIELD_MANAGER: Final = "k8s-bridge-mixing"
KUEUE_API_VERSION: Final = "kueue.x-k8s.io/v1beta2"

REFERENCES_INDEX: Final = "mixing.references"
"""Index of the WorkloadMixing cache: the watched objects each names (see :func:`reference_index_keys`)."""
LEVELS_INDEX: Final = "topology.levels"
"""Index of the Topology cache: the node label of each level."""

DEFAULT_RECHECK_AFTER: Final = 60.0
DEFAULT_COUNTS_INTERVAL: Final = 5.0
"""Seconds between two status writes that change only the counts (:class:`CountsWriteLimiter`)."""

_ACTION: Final = "ValidateConfiguration"
_KEY_NAMES: Final = "keyNames"
"""Where :func:`secret_key_names` puts a Secret's data key names."""


# --- indexes and mappers ---------------------------------------------------------------------------


def _index_key(kind: str, name: str, namespace: str | None = None) -> str:
    return f"{kind}:{namespace}/{name}" if namespace else f"{kind}:{name}"


def _reference_key(ref: Reference) -> str | None:
    if ref.kind == "LocalQueue":
        return _index_key("LocalQueue", ref.name, ref.namespace)
    if ref.kind == "WorkloadPriorityClass":
        return _index_key("WorkloadPriorityClass", ref.name)
    if ref.kind == "TopologyLevel":
        return _index_key("TopologyLevel", ref.name)
    if ref.kind == "SecretKey" and ref.namespace is not None:
        return _index_key("Secret", ref.name, ref.namespace)
    return None


def reference_index_keys(obj: Object) -> list[str]:
    """Index function over WorkloadMixings: one key per watched object the spec names.

    An invalid spec names nothing (it cannot be read); it is requeued by its own changes only.
    """
    try:
        spec = WorkloadMixingSpec.model_validate(obj.get("spec"))
    except ValidationError:
        return []
    return sorted({key for ref in references(spec) if (key := _reference_key(ref)) is not None})


def topology_levels(obj: Object) -> list[str]:
    """Index function over Kueue Topologies: the node label of each level."""
    levels = (obj.get("spec") or {}).get("levels") or ()
    return sorted({str(level["nodeLabel"]) for level in levels if level.get("nodeLabel")})


def referencing_mapper(mixings: Store, keys: Callable[[Object], Sequence[str]]) -> Mapper:
    """Map a changed Kueue object to the WorkloadMixings whose spec names it, via :data:`REFERENCES_INDEX`."""

    def mapper(obj: Object) -> list[Request]:
        names = {name for key in keys(obj) for name in mixings.index_keys(REFERENCES_INDEX, key)}
        return [Request("", name) for name in sorted(names)]

    return mapper


def _local_queue_keys(obj: Object) -> list[str]:
    meta = obj.get("metadata") or {}
    return [_index_key("LocalQueue", meta.get("name", ""), meta.get("namespace", ""))]


def _priority_class_keys(obj: Object) -> list[str]:
    return [_index_key("WorkloadPriorityClass", (obj.get("metadata") or {}).get("name", ""))]


def _topology_keys(obj: Object) -> list[str]:
    return [_index_key("TopologyLevel", label) for label in topology_levels(obj)]


def _secret_keys(obj: Object) -> list[str]:
    meta = obj.get("metadata") or {}
    return [_index_key("Secret", meta.get("name", ""), meta.get("namespace", ""))]


_SECRET_PREFIX: Final = "Secret:"  # noqa: S105 (an index key prefix, not a secret)


def _named_secrets(mixings: Store) -> set[tuple[str, str]]:
    """(namespace, name) of every Secret some cached WorkloadMixing names, from :data:`REFERENCES_INDEX`."""
    named: set[tuple[str, str]] = set()
    for value in mixings.index_values(REFERENCES_INDEX):
        if value.startswith(_SECRET_PREFIX):
            namespace, _, name = value[len(_SECRET_PREFIX) :].partition("/")
            named.add((namespace, name))
    return named


# --- which updates matter ------------------------------------------------------------------------

UpdateFilter = Callable[[Object, Object], bool]
"""``relevant(old, new)``: whether an update can change what a reconcile decides."""


def spec_changed(old: Object, new: Object) -> bool:
    """A WorkloadMixing update that can change the decision: new generation, another uid, a deletion.

    Status and metadata writes (the controller's own status PUTs above all) keep the generation; the
    status is re-derived from the cache on the next reconcile anyway, and the periodic recheck
    restores a status someone else overwrote.
    """
    old_meta, new_meta = old.get("metadata") or {}, new.get("metadata") or {}
    return any(
        old_meta.get(field) != new_meta.get(field) for field in ("generation", "uid", "deletionTimestamp")
    )


def secret_keys_changed(old: Object, new: Object) -> bool:
    """A Secret update matters only when its key names change (a rotated value does not)."""
    return bool(old.get(_KEY_NAMES) != new.get(_KEY_NAMES))


def keys_changed(keys: Callable[[Object], Sequence[str]]) -> UpdateFilter:
    """An update of a referenced Kueue object matters only when the keys it is indexed under change.

    A LocalQueue's or WorkloadPriorityClass's keys are its name: the reconciler checks only that it
    exists, so no update of one matters (Kueue updates LocalQueue status for every Workload that comes
    or goes). A Topology's keys are its levels.
    """

    def relevant(old: Object, new: Object) -> bool:
        return sorted(keys(old)) != sorted(keys(new))

    return relevant


class _FilteredHandler:
    def __init__(self, handler: EventHandler, relevant: UpdateFilter) -> None:
        self._handler = handler
        self._relevant = relevant

    def on_add(self, obj: Object, *, is_initial_list: bool) -> None:
        self._handler.on_add(obj, is_initial_list=is_initial_list)

    def on_update(self, old: Object, new: Object) -> None:
        if self._relevant(old, new):
            self._handler.on_update(old, new)

    def on_delete(self, obj: Object) -> None:
        self._handler.on_delete(obj)


class FilteredSource:
    """``source`` with its updates passed on only when ``relevant(old, new)``; adds and deletes always.

    The predicate of controller-runtime (``GenerationChangedPredicate`` and the like), as a wrapper.
    """

    def __init__(self, source: Source, relevant: UpdateFilter) -> None:
        self._source = source
        self._relevant = relevant

    def add_handler(self, handler: EventHandler) -> None:
        self._source.add_handler(_FilteredHandler(handler, self._relevant))

    def has_synced(self) -> bool:
        return self._source.has_synced()


# --- the pure part ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class PlannedEvent:
    """An Event to record on the WorkloadMixing once its new status is written."""

    type: EventType
    reason: str
    note: str


@dataclass(frozen=True, kw_only=True)
class Decision:
    """What one reconcile does, decided without I/O."""

    status: WorkloadMixingStatus
    write_status: bool
    """False when ``status`` equals what is stored: nothing to write, no Events."""
    publish: bool
    """True when this generation is usable: it becomes the bridges' configuration."""
    events: tuple[PlannedEvent, ...]
    counts_only: bool = False
    """True when the write would change the counts (``status.sources``) and nothing else: such a
    write may wait (:class:`CountsWriteLimiter`); any other is made at once."""


def _find(conditions: Sequence[Condition], type_: str) -> Condition | None:
    return next((c for c in conditions if c.type == type_), None)


def _plan_events(previous: Sequence[Condition], current: Sequence[Condition]) -> tuple[PlannedEvent, ...]:
    events: list[PlannedEvent] = []
    old_ready, new_ready = _find(previous, READY), _find(current, READY)
    if new_ready is not None:
        changed = old_ready is None or (old_ready.status, old_ready.reason, old_ready.message) != (
            new_ready.status,
            new_ready.reason,
            new_ready.message,
        )
        if new_ready.status == "False" and changed:
            # A new or different set of blocking problems (a missing reference, an invalid spec).
            events.append(PlannedEvent(type="Warning", reason=new_ready.reason, note=new_ready.message))
        elif new_ready.status == "True" and (old_ready is None or old_ready.status != "True"):
            events.append(PlannedEvent(type="Normal", reason=new_ready.reason, note=new_ready.message))
    old_degraded, new_degraded = _find(previous, DEGRADED), _find(current, DEGRADED)
    if (
        new_degraded is not None
        and new_degraded.status == "True"
        and (
            old_degraded is None
            or (old_degraded.status, old_degraded.reason) != (new_degraded.status, new_degraded.reason)
        )
    ):
        events.append(PlannedEvent(type="Warning", reason=new_degraded.reason, note=new_degraded.message))
    return tuple(events)


def decide(
    *,
    generation: int,
    spec: WorkloadMixingSpec | None,
    problems: Sequence[Problem],
    previous: WorkloadMixingStatus | None,
    last_good_generation: int | None,
    last_good_spec: WorkloadMixingSpec | None,
    counts: Mapping[SourceName, SourceCounts | None],
    now: dt.datetime,
) -> Decision:
    """The status to store, whether to write it and publish the spec, and the Events to record.

    ``spec`` is None when the stored spec does not validate (``problems`` then say why). Counts are
    shown for the sources of the spec being reported on; for an unreadable spec, for those of the
    configuration still in use.
    """
    publish = spec is not None and not any(p.blocking for p in problems)
    if spec is not None:
        status = build_status(
            spec=spec,
            generation=generation,
            problems=problems,
            previous=previous,
            now=now,
            counts=counts,
            last_good_generation=last_good_generation,
        )
    else:
        shown = last_good_spec
        status = WorkloadMixingStatus(
            observed_generation=generation,
            conditions=compute_conditions(
                generation=generation,
                problems=problems,
                previous=previous.conditions if previous is not None else (),
                now=now,
                last_good_generation=last_good_generation,
            ),
            sources=source_status(shown, counts),
        )
    write = previous is None or status != previous
    events = (
        _plan_events(previous.conditions if previous is not None else (), status.conditions) if write else ()
    )
    counts_only = (
        write and previous is not None and status.model_copy(update={"sources": previous.sources}) == previous
    )
    return Decision(
        status=status, write_status=write, publish=publish, events=events, counts_only=counts_only
    )


# --- the I/O part ----------------------------------------------------------------------------------


class SecretKeys(Protocol):
    """The data keys of a Secret: None when it does not exist; Forbidden/Unauthorized when unreadable."""

    async def __call__(self, namespace: str, name: str) -> frozenset[str] | None: ...


class StatusWriter(Protocol):
    async def update_status(self, obj: Object, *, field_manager: str | None = None) -> Object: ...


class EventSink(Protocol):
    async def event(
        self,
        regarding: Object,
        *,
        type: EventType,
        reason: str,
        note: str,
        action: str,
        related: Object | None = None,
    ) -> Object | None: ...


class ClientSecretKeys:
    """Reads a Secret with a GET and keeps only its key names: its values are never kept or logged."""

    def __init__(self, client: Client) -> None:
        self._client = client

    async def __call__(self, namespace: str, name: str) -> frozenset[str] | None:
        try:
            secret = await self._client.get("v1", "Secret", name, namespace=namespace)
        except NotFound:
            return None
        keys = frozenset((secret.get("data") or {}).keys())
        del secret  # drop the value as early as possible
        return keys


def secret_key_names(obj: Object) -> Object:
    """What a Secret watch keeps of a Secret: who it is and the names of its data keys, never a value.

    The transform of :class:`WatchedSecretKeys`' informers, applied before anything is stored or
    handed to a handler.
    """
    meta = obj.get("metadata") or {}
    return {
        "metadata": {
            key: meta[key] for key in ("name", "namespace", "uid", "resourceVersion") if key in meta
        },
        _KEY_NAMES: sorted((obj.get("data") or {}).keys()),
    }


class SecretWatch(Protocol):
    """A watch of one Secret (an :class:`~bridge.runtime.informer.Informer`, or a test double)."""

    store: Store

    @property
    def failing(self) -> bool:
        """Its last list or watch failed (RBAC revoked, API server unreachable): its cache may be stale."""
        ...

    def add_handler(self, handler: EventHandler) -> None: ...

    def has_synced(self) -> bool: ...

    async def wait_for_sync(self, timeout: float | None = None) -> bool: ...  # noqa: ASYNC109

    async def run(self) -> None: ...

    def stop(self) -> None: ...


class WatchedSecretKeys:
    """The key names of each Secret a WorkloadMixing names, kept by a watch of that one Secret.

    Three roles, all on the event loop:

    - an event handler on the WorkloadMixing informer: after each change it compares the Secrets
      the cached WorkloadMixings name (:data:`REFERENCES_INDEX`) with the ones watched, and starts or
      stops watches to match (``watch(namespace, name)`` makes one);
    - :class:`SecretKeys` for the reconciler: from the watch's cache once it has listed and while
      it is not failing, otherwise (not listed yet, forbidden by RBAC, RBAC revoked later, API
      server unreachable) from ``fallback``, a GET, so an unreadable Secret is reported as such;
    - a controller source: the watched Secrets' changes (handlers follow watches as they come and go).
      ``has_synced`` is always True: a watch RBAC forbids never lists, and must not keep the
      controller from starting; the fallback answers meanwhile. When a watch first lists, its
      handlers get an ``on_add`` (not an initial-list one: normal priority) of the Secret as listed,
      or of a stub naming it when there is none, so the WorkloadMixings judged against a GET are
      judged again against the list (a Secret deleted between the two sends no event otherwise).

    ``run`` runs the watches (those started later too) until ``stop``. Once ``stop`` is called,
    watches are only recorded, not started (a later ``run`` starts them).
    """

    def __init__(
        self,
        *,
        mixings: Store,
        watch: Callable[[str, str], SecretWatch],
        fallback: SecretKeys,
    ) -> None:
        if REFERENCES_INDEX not in mixings.indexer_names:
            raise ValueError(f"the WorkloadMixing store needs the {REFERENCES_INDEX!r} index")
        self._mixings = mixings
        self._new_watch = watch
        self._fallback = fallback
        self._watches: dict[tuple[str, str], SecretWatch] = {}
        self._handlers: list[EventHandler] = []
        self._group: asyncio.TaskGroup | None = None
        self._running: dict[tuple[str, str], SecretWatch] = {}
        """The watches started by the current ``run``: those it stops."""
        self._stop = asyncio.Event()

    @classmethod
    def for_client(
        cls,
        client: Client,
        secrets: Resource,
        *,
        mixings: Store,
        registry: CollectorRegistry | None = REGISTRY,
    ) -> WatchedSecretKeys:
        """Informers on ``client`` (``secrets``: the v1 Secret resource), falling back to a GET."""

        def watch(namespace: str, name: str) -> Informer:
            return Informer(
                client,
                secrets,
                namespace=namespace,
                field_selector=f"metadata.name={name}",
                transform=secret_key_names,
                resync_period=None,
                settings=ReflectorSettings(log_undecodable_lines=False),
                registry=registry,
                # Made on every replica (the WorkloadMixing informer runs everywhere), run on the
                # leader only: exported while running, so standbys show no stuck series.
                metrics_while_running=True,
            )

        return cls(mixings=mixings, watch=watch, fallback=ClientSecretKeys(client))

    @property
    def watched(self) -> list[tuple[str, str]]:
        """(namespace, name) of the Secrets watched (or to be, once ``run`` starts)."""
        return sorted(self._watches)

    def watch_of(self, namespace: str, name: str) -> SecretWatch | None:
        """The watch of that Secret, if some WorkloadMixing names it (started or not)."""
        return self._watches.get((namespace, name))

    def has_listed(self, namespace: str, name: str) -> bool:
        """Whether the Secret is watched, its watch has listed and is not failing: reads of it then
        come from the watch's cache and send no request."""
        watch = self._watches.get((namespace, name))
        return watch is not None and watch.has_synced() and not watch.failing

    def refresh(self) -> None:
        """Watch exactly the Secrets the cached WorkloadMixings name."""
        named = _named_secrets(self._mixings)
        for key in sorted(self._watches.keys() - named):
            self._watches.pop(key).stop()
            log.info("stopped watching a Secret no WorkloadMixing names", secret="/".join(key))
        for key in sorted(named - self._watches.keys()):
            watch = self._watches[key] = self._new_watch(*key)
            for handler in self._handlers:
                watch.add_handler(handler)
            if self._group is not None and not self._stop.is_set():
                self._start(self._group, key, watch)
            log.info("watching a Secret a WorkloadMixing names", secret="/".join(key))

    def _start(self, group: asyncio.TaskGroup, key: tuple[str, str], watch: SecretWatch) -> None:
        self._running[key] = watch
        group.create_task(self._run_watch(key, watch), name=f"secret watch {'/'.join(key)}")

    async def _run_watch(self, key: tuple[str, str], watch: SecretWatch) -> None:
        try:
            async with asyncio.TaskGroup() as tg:
                listed = None if watch.has_synced() else tg.create_task(self._announce_list(key, watch))
                await watch.run()
                if listed is not None:
                    listed.cancel()
        finally:
            if self._running.get(key) is watch:
                del self._running[key]

    async def _announce_list(self, key: tuple[str, str], watch: SecretWatch) -> None:
        """Once ``watch`` has listed, requeue the WorkloadMixings naming its Secret (see the class)."""
        await watch.wait_for_sync()
        namespace, name = key
        obj = watch.store.get(f"{namespace}/{name}") or {"metadata": {"namespace": namespace, "name": name}}
        for handler in list(self._handlers):
            try:
                handler.on_add(obj, is_initial_list=False)
            except Exception:
                log.exception("event handler failed", secret="/".join(key))

    # EventHandler, on the WorkloadMixing informer
    def on_add(self, obj: Object, *, is_initial_list: bool) -> None:
        self.refresh()

    def on_update(self, old: Object, new: Object) -> None:
        self.refresh()

    def on_delete(self, obj: Object) -> None:
        self.refresh()

    # SecretKeys
    async def __call__(self, namespace: str, name: str) -> frozenset[str] | None:
        if not self.has_listed(namespace, name):
            return await self._fallback(namespace, name)
        obj = self._watches[namespace, name].store.get(f"{namespace}/{name}")
        return None if obj is None else frozenset(obj.get(_KEY_NAMES) or ())

    # Source
    def add_handler(self, handler: EventHandler) -> None:
        self._handlers.append(handler)
        for watch in self._watches.values():
            watch.add_handler(handler)

    def has_synced(self) -> bool:
        return True

    # Runnable
    async def run(self) -> None:
        """Run every watch, including those started later, until :meth:`stop` (or cancelled)."""
        if self._group is not None:
            raise RuntimeError("WatchedSecretKeys.run() is already running")
        try:
            async with asyncio.TaskGroup() as tg:
                self._group = tg
                if not self._stop.is_set():
                    for key, watch in list(self._watches.items()):
                        self._start(tg, key, watch)
                await self._stop.wait()
                # From here on refresh() only records: nothing is started in a group being left.
                self._group = None
                for watch in list(self._running.values()):
                    watch.stop()
        finally:
            self._group = None
            self._running.clear()
            self._stop.clear()

    def stop(self) -> None:
        """End ``run``; from now until it has returned, new watches are recorded, not started."""
        self._stop.set()


class CountsWriteLimiter:
    """Spaces out the status writes that change only the counts: one per ``interval`` s per name.

    Level-based, nothing is queued: :meth:`delay` says how long a counts-only write of ``name`` must
    wait; the reconciler then asks to be called again after that long, and writes whatever the counts
    are at that moment. Every write of the status (any kind) is reported with :meth:`wrote`.
    ``clock`` is monotonic seconds (injected by tests).
    """

    def __init__(self, interval: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        if interval < 0:
            raise ValueError(f"interval must be >= 0, got {interval}")
        self.interval = interval
        self._clock = clock
        self._last: dict[str, float] = {}

    def delay(self, name: str) -> float:
        """Seconds until a counts-only write of ``name`` may be made; 0.0 when it may be made now."""
        last = self._last.get(name)
        if last is None:
            return 0.0
        return max(0.0, last + self.interval - self._clock())

    def wrote(self, name: str) -> None:
        """The status of ``name`` was just written."""
        self._last[name] = self._clock()

    def forget(self, name: str) -> None:
        """``name`` is gone."""
        self._last.pop(name, None)


def _utc_now() -> dt.datetime:
    # metav1.Time has second precision: kubectl and other clients compare at that precision.
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


class MixingReconciler:
    """Reconciles one WorkloadMixing per request; see the module docstring."""

    def __init__(
        self,
        *,
        mixings: Store,
        local_queues: Store,
        priority_classes: Store,
        topologies: Store,
        secret_keys: SecretKeys,
        writer: StatusWriter,
        recorder: EventSink,
        configs: MixingConfigs,
        counts: CountsProvider | None = None,
        recheck_after: float | None = DEFAULT_RECHECK_AFTER,
        counts_interval: float = DEFAULT_COUNTS_INTERVAL,
        now: Callable[[], dt.datetime] = _utc_now,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if LEVELS_INDEX not in topologies.indexer_names:
            raise ValueError(f"the Topology store needs the {LEVELS_INDEX!r} index (topology_levels)")
        self._mixings = mixings
        self._local_queues = local_queues
        self._priority_classes = priority_classes
        self._topologies = topologies
        self._secret_keys = secret_keys
        self._writer = writer
        self._recorder = recorder
        self._configs = configs
        self._counts: CountsProvider = counts if counts is not None else ZeroCounts()
        self._recheck = Result(requeue_after=recheck_after)
        self._limiter = CountsWriteLimiter(counts_interval, clock=clock)
        self._now = now

    async def reconcile(self, request: Request) -> Result:
        name = request.name
        live = self._configs.get(name)
        obj = self._mixings.get(name)
        if obj is None:
            self._limiter.forget(name)
            if live.withdraw():
                log.info("WorkloadMixing deleted: configuration withdrawn")
            return Result()
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        generation = int(meta.get("generation") or 0)
        if live.current is not None and live.current.uid != uid:
            live.withdraw()  # deleted and re-created under the same name: the old one is not "last good"
        spec: WorkloadMixingSpec | None
        try:
            spec = WorkloadMixingSpec.model_validate(obj.get("spec"))
        except ValidationError as error:
            spec, problems = None, validation_problems(error, root="spec")
        else:
            problems = check_references(spec, inventory=await self._inventory(spec))
            problems += self._counts.problems(name)
        in_use = live.current
        decision = decide(
            generation=generation,
            spec=spec,
            problems=problems,
            previous=_stored_status(obj),
            last_good_generation=in_use.generation if in_use is not None else None,
            last_good_spec=in_use.spec if in_use is not None else None,
            counts={source: self._counts.counts(name, source) for source in SourceStatus.model_fields},
            now=self._now(),
        )
        if decision.publish:
            assert spec is not None
            live.publish(uid=uid, generation=generation, spec=spec)
        if not decision.write_status:
            return self._recheck
        if decision.counts_only and (wait := self._limiter.delay(name)) > 0:
            # Only the counts changed, and the last write is recent: write the counts of that moment
            # once the interval is over (counts changing meanwhile queue us, and land here again).
            return Result(requeue_after=wait)
        body = {**obj, "status": decision.status.model_dump(mode="json", by_alias=True, exclude_none=True)}
        try:
            await self._writer.update_status(body, field_manager=FIELD_MANAGER)
        except Conflict:
            # The cache is behind the server: the newer object is on its way and queues us again.
            log.debug("status write conflicted; waiting for the newer object")
            return Result(requeue_after=1.0)
        except NotFound:
            return Result()  # deleted meanwhile: its delete event withdraws the configuration
        self._limiter.wrote(name)
        ready = _find(decision.status.conditions, READY)
        log.info(
            "status updated",
            generation=generation,
            ready=ready.status if ready else None,
            reason=ready.reason if ready else None,
        )
        for event in decision.events:
            await self._recorder.event(
                obj, type=event.type, reason=event.reason, note=event.note, action=_ACTION
            )
        return self._recheck

    async def _inventory(self, spec: WorkloadMixingSpec) -> Inventory:
        """What exists of what ``spec`` names: only those objects are looked up."""
        refs = references(spec)
        local_queues = {
            (ref.namespace, ref.name)
            for ref in refs
            if ref.kind == "LocalQueue"
            and ref.namespace is not None
            and f"{ref.namespace}/{ref.name}" in self._local_queues
        }
        priority_classes = {
            ref.name
            for ref in refs
            if ref.kind == "WorkloadPriorityClass" and ref.name in self._priority_classes
        }
        levels = {
            ref.name
            for ref in refs
            if ref.kind == "TopologyLevel" and self._topologies.index_keys(LEVELS_INDEX, ref.name)
        }
        secrets: dict[tuple[str, str], frozenset[str]] = {}
        unreadable: set[tuple[str, str]] = set()
        for ref in refs:
            if ref.kind != "SecretKey" or ref.namespace is None:
                continue
            key = (ref.namespace, ref.name)
            if key in secrets or key in unreadable:
                continue
            try:
                keys = await self._secret_keys(ref.namespace, ref.name)
            except (Forbidden, Unauthorized):
                unreadable.add(key)
                continue
            if keys is not None:
                secrets[key] = keys
        return Inventory(
            local_queues=frozenset(local_queues),
            priority_classes=frozenset(priority_classes),
            topology_levels=frozenset(levels),
            secrets=secrets,
            unreadable_secrets=frozenset(unreadable),
        )


def _stored_status(obj: Object) -> WorkloadMixingStatus | None:
    raw = obj.get("status")
    if not raw:
        return None
    try:
        return WorkloadMixingStatus.model_validate(raw)
    except ValidationError:
        return None  # written by something else, or an older schema: ours replaces it


# --- wiring ----------------------------------------------------------------------------------------


class MixingController(Controller):
    """The WorkloadMixing controller, which runs its Secret watches while it runs.

    The watches serve only this controller's reconciles, so they live as long as its ``run``: on the
    leader only, started with it and stopped once its workers have finished.
    """

    def __init__(
        self,
        *,
        name: str,
        reconciler: MixingReconciler,
        secrets: WatchedSecretKeys,
        registry: CollectorRegistry = REGISTRY,
    ) -> None:
        super().__init__(name=name, reconciler=reconciler, registry=registry)
        self.secrets = secrets

    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self.secrets.run(), name=f"controller {self.name} secret watches")
                try:
                    await super().run()
                finally:
                    self.secrets.stop()
        except BaseExceptionGroup as group:
            # Raise what the controller raised (e.g. CacheSyncTimeoutError), not a group around it.
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise


async def setup_mixing_controller(
    *,
    client: Client,
    factory: SharedInformerFactory,
    configs: MixingConfigs,
    recorder: EventRecorder,
    counts: CountsProvider | None = None,
    recheck_after: float | None = DEFAULT_RECHECK_AFTER,
    counts_interval: float = DEFAULT_COUNTS_INTERVAL,
    registry: CollectorRegistry = REGISTRY,
    name: str | None = None,
) -> MixingController:
    """The WorkloadMixing controller, its informers registered with ``factory`` (cluster-wide).

    ``name``: the one WorkloadMixing this controller checks and writes the status of (the bridge's
    ``--config``), watched by a ``metadata.name`` field selector; None: every WorkloadMixing. A bridge
    passes its own: two bridges in one cluster (both run by the chart) each have their own
    WorkloadMixing, and each one's status is written only by the bridge that runs it (otherwise
    each would write the other's with its own counts, Events and conditions, in turn).

    The caller runs ``factory.run()`` and ``controller.run()`` (a Manager does both); the watches of
    the named Secrets run inside ``controller.run()``. A :class:`~bridge.mixing_config.CountsBoard`
    given as ``counts`` is also watched, so a bridge reporting new counts queues the WorkloadMixing
    at once (its status is then written at most every ``counts_interval`` seconds).
    """
    mixings = await factory.informer(
        API_VERSION,
        KIND,
        field_selector=f"metadata.name={name}" if name is not None else None,
        indexers={REFERENCES_INDEX: reference_index_keys},
    )
    local_queues = await factory.informer(KUEUE_API_VERSION, "LocalQueue")
    priority_classes = await factory.informer(KUEUE_API_VERSION, "WorkloadPriorityClass")
    topologies = await factory.informer(
        KUEUE_API_VERSION, "Topology", indexers={LEVELS_INDEX: topology_levels}
    )
    secrets = WatchedSecretKeys.for_client(
        client, await client.resource("v1", "Secret"), mixings=mixings.store, registry=registry
    )
    mixings.add_handler(secrets)
    reconciler = MixingReconciler(
        mixings=mixings.store,
        local_queues=local_queues.store,
        priority_classes=priority_classes.store,
        topologies=topologies.store,
        secret_keys=secrets,
        writer=client,
        recorder=recorder,
        configs=configs,
        counts=counts,
        recheck_after=recheck_after,
        counts_interval=counts_interval,
    )
    controller = MixingController(
        name=CONTROLLER_NAME, reconciler=reconciler, secrets=secrets, registry=registry
    )
    watch_sources(
        controller,
        mixings=mixings,
        local_queues=local_queues,
        priority_classes=priority_classes,
        topologies=topologies,
        secrets=secrets,
        counts=counts,
    )
    return controller


def watch_sources(
    controller: Controller,
    *,
    mixings: Dispatcher,
    local_queues: Source,
    priority_classes: Source,
    topologies: Source,
    secrets: Source | None = None,
    counts: CountsProvider | None = None,
) -> None:
    """Have ``controller`` watch the sources, each filtered to the updates that can change a decision."""
    controller.watch(FilteredSource(mixings, spec_changed))
    for source, keys in (
        (local_queues, _local_queue_keys),
        (priority_classes, _priority_class_keys),
        (topologies, _topology_keys),
    ):
        controller.watch(
            FilteredSource(source, keys_changed(keys)), map_to=referencing_mapper(mixings.store, keys)
        )
    if secrets is not None:
        controller.watch(
            FilteredSource(secrets, secret_keys_changed),
            map_to=referencing_mapper(mixings.store, _secret_keys),
        )
    if isinstance(counts, CountsBoard):
        controller.watch(counts)
