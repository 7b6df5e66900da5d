"""A controller: watched sources feed keys into a work queue; N workers reconcile them.

The contract, as in controller-runtime, is level-based: a ``Request`` carries only a key
(namespace, name), never the event that caused it. The reconciler reads the current state of the
world (the cache, the API, Slurm), makes it converge one step, and returns a ``Result``. So a burst
of changes costs one reconcile, a missed event is healed by the next one, and a crash is recovered
by reading the world again.

Result handling follows controller-runtime's order: an exception -> requeue with the rate limiter's
backoff (a ``TerminalError`` is logged and counted but not retried); ``Result(requeue_after=s)`` ->
forget the failures, reconcile again in ``s`` seconds; otherwise forget. Each reconcile runs with a
fresh ``reconcile_id`` (and the controller and key) bound into structlog's context variables, so
every log line it writes carries them.

Priorities, as controller-runtime's ``handler.WithLowPriorityWhenUnchanged`` on its priority queue:
the handler a controller registers on each source adds a request at ``LOW_PRIORITY`` when nothing
changed (an add from the source's initial list, an update whose resourceVersion did not change: a
resync or a relist), else at 0. So after a restart a real change is reconciled before the backlog of
initial adds. A watch may also rank its live events: ``priority_of`` gives the priority of each
request a live (changed) add, update or delete maps to, as a controller-runtime handler chooses the
priority it passes to ``AddWithOpts``; so a reconcile that is urgent for a reason only the program
knows (a job whose nodes have just come up) overtakes a backlog of ordinary live events. A requeue
(error, ``requeue_after``) keeps the priority the request was handed out with, unless the result
names another (``Result(priority=...)``).
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import structlog
from prometheus_client import CollectorRegistry

from bridge.runtime.handlers import Object, Source
from bridge.runtime.metrics import REGISTRY, runtime_metrics
from bridge.runtime.queue import LOW_PRIORITY, WorkQueue
from bridge.runtime.ratelimit import RateLimiter

__all__ = [
    "CacheSyncTimeoutError",
    "Controller",
    "Mapper",
    "PriorityOf",
    "Reconciler",
    "Request",
    "Result",
    "TerminalError",
    "UpdateMatters",
    "label_mapper",
    "own_key",
    "owner_mapper",
]

log = structlog.get_logger(__name__)

_SYNC_POLL_INTERVAL = 0.1  # client-go's WaitForCacheSync polls every 100 ms


class Request(NamedTuple):
    """The key of one object to reconcile; ``namespace`` is ``""`` for cluster-scoped objects.

    A named tuple: immutable, hashable and compared in C, which keeps the work queue fast.
    """

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @classmethod
    def of(cls, obj: Object) -> Request:
        """The request for ``obj`` itself, from its ``metadata``."""
        meta = obj.get("metadata") or {}
        return cls(meta.get("namespace") or "", meta.get("name") or "")


@dataclass(frozen=True, slots=True)
class Result:
    """What a reconcile asks for: nothing more (the default), or to run again after some seconds.

    ``priority`` is the queue priority of that requeue; ``None`` (the default) keeps the priority the
    request was handed out with, as controller-runtime's ``Result.Priority``.
    """

    requeue_after: float | None = None
    priority: int | None = None


class TerminalError(Exception):
    """The reconcile failed in a way retrying cannot fix: logged and counted, never requeued.

    Raise it ``from`` the underlying error. A later change to the object still queues it again.
    """


class CacheSyncTimeoutError(TimeoutError):
    """The watched sources did not finish their first list within the controller's timeout."""


class Reconciler(Protocol):
    """Drives the world one step toward the state the object at ``request`` asks for."""

    async def reconcile(self, request: Request) -> Result: ...


Mapper = Callable[[Object], Iterable[Request]]
"""Maps a changed object to the requests it affects (its own key, its owner's, ...)."""

PriorityOf = Callable[[Request], int]
"""The queue priority of a request a live event maps to (higher first; 0 is the default)."""

UpdateMatters = Callable[[Object, Object], bool]
"""Whether an update (old, new) changes anything the reconciler reads: controller-runtime's update
predicate. Adds and deletes always pass."""


def own_key(obj: Object) -> tuple[Request, ...]:
    """The object's own key: the default mapping."""
    return (Request.of(obj),)


def owner_mapper(
    *, kind: str, group: str = "", controller_only: bool = True, cluster_scoped: bool = False
) -> Mapper:
    """Map an object to its owners of ``kind`` in API ``group`` (``""`` is the core group).

    With ``controller_only`` (the default) only the owner reference marked ``controller: true``
    counts, as controller-runtime's ``EnqueueRequestForOwner(..., OnlyControllerOwner())``.
    """

    def mapper(obj: Object) -> tuple[Request, ...]:
        meta = obj.get("metadata") or {}
        namespace = "" if cluster_scoped else meta.get("namespace") or ""
        out = []
        for ref in meta.get("ownerReferences") or ():
            if controller_only and not ref.get("controller"):
                continue
            api_version = ref.get("apiVersion") or ""
            ref_group = api_version.rpartition("/")[0]
            if ref.get("kind") == kind and ref_group == group and ref.get("name"):
                out.append(Request(namespace, ref["name"]))
        return tuple(out)

    return mapper


def label_mapper(label: str, *, namespace: str | None = None) -> Mapper:
    """Map an object to the request named by the value of its label ``label``.

    The request is in the object's namespace unless ``namespace`` is given (``""``: cluster-scoped).
    Objects without the label map to nothing.
    """

    def mapper(obj: Object) -> tuple[Request, ...]:
        meta = obj.get("metadata") or {}
        value = (meta.get("labels") or {}).get(label)
        if not value:
            return ()
        return (Request(meta.get("namespace") or "" if namespace is None else namespace, value),)

    return mapper


def _resource_version(obj: Object) -> str | None:
    meta = obj.get("metadata")
    return meta.get("resourceVersion") if meta else None


def _is_unchanged(old: Object, new: Object) -> bool:
    """An update that changed nothing: both sides carry the same, non-empty resourceVersion.

    What a resync or a relist delivers for an object that did not change. controller-runtime compares
    the resourceVersions alone; here an object without one (a polled Slurm job, a synthetic object)
    never counts as unchanged, since its sources deliver only real changes as updates.
    """
    version = _resource_version(old)
    return bool(version) and version == _resource_version(new)


class _Enqueuer:
    """The event handler a controller registers on each watched source.

    With ``low_priority_when_unchanged`` (controller-runtime's ``WithLowPriorityWhenUnchanged``),
    adds from the source's initial list and unchanged updates are queued at ``LOW_PRIORITY``. Every
    other event is live: its requests are queued at ``priority_of(request)``, or 0 without one (a
    controller-runtime handler's choice of the priority it passes to ``AddWithOpts``; its
    ``WithLowPriorityWhenUnchanged`` overrides that choice for unchanged events, as here).
    """

    __slots__ = ("_batch_period", "_controller", "_low", "_map", "_matters", "_priority_of", "_queue")

    def __init__(
        self,
        queue: WorkQueue[Request],
        map_to: Mapper,
        controller: str,
        *,
        low_priority_when_unchanged: bool,
        priority_of: PriorityOf | None = None,
        update_matters: UpdateMatters | None = None,
        batch_period: float = 0.0,
    ) -> None:
        self._queue = queue
        self._map = map_to
        self._controller = controller
        self._low = low_priority_when_unchanged
        self._priority_of = priority_of
        self._matters = update_matters
        self._batch_period = batch_period

    def _add(self, request: Request, priority: int) -> None:
        """Queue a live event's request: at its priority now, or batched when at the default."""
        if priority == 0 and self._batch_period > 0:
            self._queue.add_batched(request, self._batch_period)
        else:
            self._queue.add(request, priority)

    def _enqueue(self, obj: Object, *, unchanged: bool) -> None:
        try:
            requests = self._map(obj)
        except Exception:
            # A mapper bug must not break the source that calls us; the object is skipped.
            log.exception("mapping an object to requests failed", controller=self._controller)
            return
        priority_of = self._priority_of
        if unchanged or priority_of is None:
            add = self._queue.add if unchanged or self._batch_period <= 0 else self._add
            priority = LOW_PRIORITY if unchanged else 0
            for request in requests:
                add(request, priority)
            return
        for request in requests:
            try:
                priority = priority_of(request)
            except Exception:
                # Nor may a bug in ranking it: the request is queued at the default priority.
                log.exception("choosing a request's priority failed", controller=self._controller)
                priority = 0
            self._add(request, priority)

    def on_add(self, obj: Object, *, is_initial_list: bool) -> None:
        self._enqueue(obj, unchanged=is_initial_list and self._low)

    def on_update(self, old: Object, new: Object) -> None:
        if self._matters is not None:
            try:
                matters = self._matters(old, new)
            except Exception:
                # A predicate bug must not lose the event: it is delivered.
                log.exception("deciding whether an update matters failed", controller=self._controller)
                matters = True
            if not matters:
                return
        unchanged = self._low and _is_unchanged(old, new)
        # Both: a changed owner or label moves the object from one request to another.
        self._enqueue(new, unchanged=unchanged)
        self._enqueue(old, unchanged=unchanged)

    def on_delete(self, obj: Object) -> None:
        self._enqueue(obj, unchanged=False)


class Controller:
    """Reconciles the requests its watched sources produce, with ``max_concurrent_reconciles`` workers.

    ``watch`` the sources, then ``await run()``: it registers the handlers, waits until every
    source has synced (``CacheSyncTimeoutError`` after ``cache_sync_timeout`` seconds), and runs
    the workers until ``stop()`` (in-flight reconciles finish; queued keys are dropped, the next
    start lists them again) or until cancelled (in-flight reconciles are cancelled too).
    """

    def __init__(
        self,
        *,
        name: str,
        reconciler: Reconciler,
        max_concurrent_reconciles: int = 1,
        rate_limiter: RateLimiter | None = None,
        cache_sync_timeout: float = 120.0,
        batch_period: float = 0.0,
        registry: CollectorRegistry = REGISTRY,
    ) -> None:
        if not name:
            raise ValueError("a controller needs a name (it labels its metrics and logs)")
        if max_concurrent_reconciles < 1:
            raise ValueError(f"max_concurrent_reconciles must be >= 1, got {max_concurrent_reconciles}")
        self.name = name
        self._reconciler = reconciler
        self._workers = max_concurrent_reconciles
        self._cache_sync_timeout = cache_sync_timeout
        self._batch_period = batch_period
        self._queue: WorkQueue[Request] = WorkQueue(name=name, rate_limiter=rate_limiter, registry=registry)
        self._watches: list[tuple[Source, Mapper, bool, PriorityOf | None, UpdateMatters | None]] = []
        self._started = False
        self._stopping = False
        self._synced = False
        # Reconcile ids: a random prefix per controller instance and a counter, unique across
        # replicas and restarts, and far cheaper per reconcile than a UUID.
        self._id_prefix = f"{secrets.token_hex(4)}-"
        self._ids = itertools.count(1)
        metrics = runtime_metrics(registry)
        # Every result label exists from the start (at 0), as controller-runtime initialises them.
        # "requeue" stays 0: controller-runtime counts there only its deprecated Result.Requeue
        # (an immediate rate-limited requeue), which has no equivalent here; requeue_after is its own.
        self._m_success, self._m_error, _, self._m_requeue_after = (
            metrics.reconcile_total.labels(name, result)
            for result in ("success", "error", "requeue", "requeue_after")
        )
        self._m_errors = metrics.reconcile_errors_total.labels(name)
        self._m_terminal = metrics.terminal_reconcile_errors_total.labels(name)
        self._m_time = metrics.reconcile_time_seconds.labels(name)
        self._m_active = metrics.active_workers.labels(name)
        self._m_max = metrics.max_concurrent_reconciles.labels(name)

    @property
    def queue(self) -> WorkQueue[Request]:
        return self._queue

    def has_synced(self) -> bool:
        """True once every watched source has synced and the workers run."""
        return self._synced

    def watch(
        self,
        source: Source,
        *,
        map_to: Mapper = own_key,
        low_priority_when_unchanged: bool = True,
        priority_of: PriorityOf | None = None,
        update_matters: UpdateMatters | None = None,
    ) -> None:
        """Reconcile the requests ``map_to`` gives for each object ``source`` adds, updates or deletes.

        With ``low_priority_when_unchanged`` (the default, as controller-runtime's builder), adds from
        the source's initial list and updates that changed nothing (same resourceVersion: a resync)
        are queued at ``LOW_PRIORITY``, behind every real change.

        ``priority_of`` ranks the live events (every other add, update and delete): each request one
        maps to is queued at ``priority_of(request)`` instead of 0, as a controller-runtime handler
        chooses the priority it passes to ``AddWithOpts``. Why: some reconciles are urgent for a
        reason only the program knows (the event may be the one a waiting job needs), and with many
        ordinary live events queued (cleanups, say) they would otherwise wait their turn. It is not
        consulted for the events marked low (a backlog stays a backlog); it runs on the source's
        path, so it must be cheap (a dict lookup), and a failure queues the request at 0.

        ``update_matters`` drops the updates that change nothing the reconciler reads (a pod's
        conditions when only its phase is read, say), as a controller-runtime update predicate: on a
        busy cluster most updates are status churn, and each would be a reconcile that decides what
        the last one did. It must compare exactly what the reconciler reads; when it fails, the
        update is delivered.
        """
        if self._started:
            raise RuntimeError(f"controller {self.name}: watch() after run()")
        self._watches.append((source, map_to, low_priority_when_unchanged, priority_of, update_matters))

    def stop(self) -> None:
        """Stop taking keys; ``run`` returns once the in-flight reconciles have finished."""
        self._stopping = True
        self._queue.shutdown()

    async def run(self) -> None:
        if self._started:
            raise RuntimeError(f"controller {self.name} already ran")
        self._started = True
        bound = log.bind(controller=self.name)
        try:
            for source, map_to, low, priority_of, update_matters in self._watches:
                source.add_handler(
                    _Enqueuer(
                        self._queue,
                        map_to,
                        self.name,
                        low_priority_when_unchanged=low,
                        priority_of=priority_of,
                        update_matters=update_matters,
                        batch_period=self._batch_period,
                    )
                )
            await self._wait_for_sync()
            if self._stopping:
                return
            self._synced = True
            self._m_max.set(self._workers)
            bound.info("starting workers", worker_count=self._workers)
            async with asyncio.TaskGroup() as tg:
                for i in range(self._workers):
                    tg.create_task(self._work(), name=f"controller {self.name} worker {i}")
            bound.info("all workers finished")
        finally:
            self._synced = False
            self._queue.shutdown()

    async def _wait_for_sync(self) -> None:
        sources = [source for source, *_ in self._watches]
        deadline = time.monotonic() + self._cache_sync_timeout
        while not self._stopping and not all(source.has_synced() for source in sources):
            if time.monotonic() >= deadline:
                raise CacheSyncTimeoutError(
                    f"controller {self.name}: timed out waiting for caches to sync "
                    f"after {self._cache_sync_timeout} s"
                )
            await asyncio.sleep(_SYNC_POLL_INTERVAL)

    async def _work(self) -> None:
        # Each worker is a task with its own copy of the context: values bound here (and per
        # reconcile below) are seen only by this worker's reconciles and need no unbinding.
        structlog.contextvars.bind_contextvars(controller=self.name)
        queue = self._queue
        while True:
            got = await queue.get_with_priority()
            if got is None:
                return
            request, priority = got
            if self._stopping:
                queue.done(request)
                return
            self._m_active.inc()
            try:
                await self._reconcile(request, priority)
            finally:
                self._m_active.dec()
                queue.done(request)

    async def _reconcile(self, request: Request, priority: int) -> None:
        queue = self._queue
        started = time.perf_counter()
        structlog.contextvars.bind_contextvars(
            namespace=request.namespace,
            name=request.name,
            reconcile_id=f"{self._id_prefix}{next(self._ids):x}",
        )
        try:
            result: Any = await self._reconciler.reconcile(request)
            if not isinstance(result, Result):
                raise TypeError(f"reconcile returned {type(result).__name__}, not Result")
        except TerminalError:
            self._m_terminal.inc()
            self._m_errors.inc()
            self._m_error.inc()
            log.exception("reconciler error", terminal=True)
        except Exception:
            queue.add_rate_limited(request, priority=priority)
            self._m_errors.inc()
            self._m_error.inc()
            log.exception("reconciler error", retries=queue.num_requeues(request))
        else:
            queue.forget(request)
            if result.requeue_after is not None and result.requeue_after > 0:
                if result.priority is not None:
                    priority = result.priority
                queue.add_after(request, result.requeue_after, priority=priority)
                self._m_requeue_after.inc()
            else:
                self._m_success.inc()
        finally:
            self._m_time.observe(time.perf_counter() - started)
