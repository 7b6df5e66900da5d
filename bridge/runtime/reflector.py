"""List, then watch, forever: the one place that talks to the API server for an informer.

Python operator frameworks are known for watches that go silently stale. This reflector follows
client-go's (``tools/cache/reflector.go``) rules and adds what the Python stack lacks:

- streams are read raw from aiohttp and each line is decoded with ``orjson.loads`` to a plain dict
  (2.5x the standard library's ``json.loads``, and it shares short keys across documents, which a
  cache of thousands of objects repeats; kubernetes-asyncio's ``Watch`` builds models through a
  JSON round trip: 20-30x slower than ``json.loads``);
- an inactivity timeout (no byte for ``inactivity_timeout`` seconds; bookmarks come about every
  minute) abandons a hung stream, because aiohttp requests have no read timeout of their own;
- a clean close re-watches from the last resourceVersion; ``410 Gone`` (as an HTTP status or an
  ``ERROR`` event) relists at the last resourceVersion, and with ``resourceVersion=""`` (a consistent
  read) if that is too old as well;
- every relist is handed over whole (``Sink.on_replace``) so that objects deleted meanwhile are
  delivered as deletes;
- failures back off 0.8 s -> 30 s with jitter (:mod:`bridge.runtime.backoff`);
- a streaming list (``sendInitialEvents``) replaces the paginated list when the server offers it;
  any failure of it falls back to the plain list for that attempt.

Undecodable lines are logged and skipped: one bad line never costs the stream.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
import orjson
import structlog

from bridge.runtime.backoff import Backoff, BackoffSettings
from bridge.runtime.client import Client
from bridge.runtime.discovery import Resource
from bridge.runtime.errors import ApiError, Gone, error_from_status
from bridge.runtime.handlers import Object

__all__ = ["InactivityTimeoutError", "Reflector", "ReflectorSettings", "ReflectorStats", "Sink", "WatchError"]

log = structlog.get_logger(__name__)

INITIAL_EVENTS_END = "k8s.io/initial-events-end"

_WATCH_HTTP_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=None)
"""No aiohttp read timeout on watches: the reflector's own inactivity deadline covers the whole request."""


class WatchError(Exception):
    """A watch ended in a way that calls for a backoff (not an API error)."""


class InactivityTimeoutError(WatchError):
    """Nothing arrived on the stream (not even a bookmark) for ``inactivity_timeout`` seconds."""


class _StreamingListUnsupportedError(WatchError):
    """The server did not deliver a streaming list; use a plain list."""


class Sink(Protocol):
    """Where a reflector delivers what it sees (an informer)."""

    def on_event(self, event_type: str, obj: Object) -> None:
        """``ADDED``, ``MODIFIED`` or ``DELETED`` with the object as the server sent it."""
        ...

    def on_replace(self, objects: list[Object]) -> None:
        """The complete current list (after a list or a streaming list); the sink diffs it."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ReflectorSettings:
    page_size: int = 500
    watch_timeout: tuple[int, int] = (300, 600)
    """Server-side ``timeoutSeconds`` of each watch, chosen at random in this range (spreads reconnects)."""
    inactivity_timeout: float = 70.0
    """No data for this long: the stream is considered hung and is replaced."""
    streaming_list: bool = True
    """Try ``sendInitialEvents=true`` before a plain list."""
    min_watch_duration: float = 1.0
    """A watch closed sooner than this without any event counts as a failure (backoff)."""
    backoff: BackoffSettings = field(default_factory=BackoffSettings)
    log_undecodable_lines: bool = True
    """Log the first 200 bytes of an undecodable watch line; False for resources whose contents must
    never reach a log (Secrets): the line's length is logged instead."""


@dataclass(slots=True)
class ReflectorStats:
    """Plain counters, read at scrape time (as ``reflector_<field>_total``)."""

    lists: int = 0
    streaming_lists: int = 0
    watches: int = 0
    events: int = 0
    gone: int = 0
    inactivity_timeouts: int = 0
    failures: int = 0
    garbage_lines: int = 0


class Reflector:
    """Keeps a :class:`Sink` in step with one resource (optionally in one namespace, with selectors)."""

    def __init__(
        self,
        client: Client,
        resource: Resource,
        sink: Sink,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        settings: ReflectorSettings | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self._client = client
        self.resource = resource
        self._sink = sink
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.settings = settings if settings is not None else ReflectorSettings()
        self._clock = clock
        self._rng = rng if rng is not None else random.Random()  # noqa: S311 - jitter, not secrets
        self._sleep = sleep
        self._backoff = Backoff(self.settings.backoff, clock=clock, sleep=sleep, rng=self._rng)
        self._path = resource.path(namespace=namespace)
        self.last_resource_version: str | None = None
        """The resourceVersion of the last list, event or bookmark seen."""
        self.stats = ReflectorStats()
        self._initial: list[Object] | None = None
        self._listed_by_stream = False
        self._events_this_watch = 0
        self._failing = False
        self._log = log.bind(resource=f"{resource.plural}.{resource.group or 'core'}", namespace=namespace)

    @property
    def name(self) -> str:
        parts = [self.resource.api_version, self.resource.kind, self.namespace or ""]
        parts += [self.label_selector or "", self.field_selector or ""]
        return "/".join(parts)

    @property
    def failing(self) -> bool:
        """True from a failed list or watch until the API server next accepts one (a list completes
        or a watch gets a successful response): meanwhile the sink may be stale."""
        return self._failing

    async def run(self) -> None:
        """List and watch until cancelled. Never returns; never raises but ``CancelledError``.

        Run again after a cancellation, it resumes watching from the last resourceVersion (the sink
        still holds what was listed); a ``410`` then relists as usual.
        """
        need_list = self.last_resource_version is None
        consistent_read = False  # the last resourceVersion has been found expired on a list
        while True:
            try:
                if need_list:
                    rv = "" if consistent_read else (self.last_resource_version or "0")
                    if self.settings.streaming_list and await self._streaming_list(rv):
                        need_list = consistent_read = False
                        continue  # listed, and the same stream then ended cleanly as a watch
                    await self._list(rv)
                    need_list = consistent_read = False
                await self._watch(streaming_list_from=None)
            except asyncio.CancelledError:
                raise
            except Gone as exc:
                self.stats.gone += 1
                if need_list and not self._listed_by_stream:
                    # The relist itself was too old: read the current state (client-go's
                    # isLastSyncResourceVersionUnavailable).
                    consistent_read = True
                need_list = True
                self._log.info(
                    "resource version expired, relisting", rv=self.last_resource_version, error=str(exc)
                )
                await self._sleep(self._backoff.next_delay())
            except Exception as exc:  # every other failure: back off and try again
                if self._listed_by_stream:
                    need_list = consistent_read = False
                # A healthy watch that went quiet (a bookmark late under load) is watched again
                # from where it was: expected now and then, so said at info, once.
                quiet = isinstance(exc, InactivityTimeoutError) and not self._failing and not need_list
                self._failing = True
                self.stats.failures += 1
                if isinstance(exc, InactivityTimeoutError):
                    self.stats.inactivity_timeouts += 1
                delay = self._backoff.next_delay()
                (self._log.info if quiet else self._log.warning)(
                    "watch failed, backing off",
                    error=f"{type(exc).__name__}: {exc}",
                    delay=round(delay, 3),
                    relisting=need_list,
                )
                await self._sleep(delay)

    async def _streaming_list(self, rv: str) -> bool:
        """Try a streaming list that carries on as a watch; False: it is not available, list instead.

        Returns True when the stream listed and then ended cleanly; raises when it listed and then
        failed as a watch (``_listed_by_stream`` tells), or on ``Gone``.
        """
        try:
            await self._watch(streaming_list_from=rv)
        except asyncio.CancelledError:
            raise
        except Gone:
            raise
        except Exception as exc:
            if self._listed_by_stream:
                raise
            self._log.info("streaming list not available, listing", error=f"{type(exc).__name__}: {exc}")
            return False
        return True

    # --- list -------------------------------------------------------------------------------------

    async def _list(self, resource_version: str) -> None:
        items: list[Object] = []
        list_rv: str | None = None
        async for page in self._client.list_pages(
            self.resource,
            namespace=self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            resource_version=resource_version,
            page_size=self.settings.page_size,
        ):
            if list_rv is None:
                list_rv = (page.get("metadata") or {}).get("resourceVersion")
            items.extend(page.get("items") or ())
        self.stats.lists += 1
        self._failing = False
        self._sink.on_replace(items)
        self.last_resource_version = list_rv or self.last_resource_version
        self._log.debug("listed", count=len(items), rv=self.last_resource_version)

    # --- watch ------------------------------------------------------------------------------------

    async def _watch(self, *, streaming_list_from: str | None) -> None:
        """One watch request, read to its end. With ``streaming_list_from`` it starts with a streaming list.

        Returns on a clean close; raises :class:`Gone` (relist), :class:`WatchError` or transport errors.
        """
        s = self.settings
        params: dict[str, str] = {
            "watch": "1",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(self._rng.randint(*s.watch_timeout)),
        }
        if streaming_list_from is not None:
            params["sendInitialEvents"] = "true"
            params["resourceVersionMatch"] = "NotOlderThan"
            params["resourceVersion"] = "" if streaming_list_from == "0" else streaming_list_from
        else:
            params["resourceVersion"] = self.last_resource_version or ""
        if self.label_selector:
            params["labelSelector"] = self.label_selector
        if self.field_selector:
            params["fieldSelector"] = self.field_selector

        loop = asyncio.get_running_loop()
        inactivity = s.inactivity_timeout
        started = self._clock()
        self.stats.watches += 1
        self._events_this_watch = 0
        self._listed_by_stream = False
        # A list while the streaming list is being received; then None: the stream carries on as a watch.
        self._initial = [] if streaming_list_from is not None else None
        # The deadline covers waiting for the response headers too (a hung server may never answer).
        deadline = asyncio.timeout(inactivity)
        try:
            async with (
                deadline,
                self._client.session.request(
                    "GET", self._path, params=params, client_timeout=_WATCH_HTTP_TIMEOUT
                ) as response,
            ):
                if response.status >= 400:
                    raise error_from_status(response.status, await response.read())
                self._failing = False
                content = response.content
                tail = b""
                while True:
                    chunk = await content.readany()
                    if not chunk:
                        break
                    deadline.reschedule(loop.time() + inactivity)
                    if tail:
                        chunk = tail + chunk
                    lines = chunk.split(b"\n")
                    tail = lines.pop()
                    if lines:
                        self._process(lines)
                if tail.strip():
                    self._process([tail])
        except TimeoutError:
            if deadline.expired():
                raise InactivityTimeoutError(f"no data for {inactivity} s on {self._path}") from None
            raise
        if self._initial is not None:
            raise _StreamingListUnsupportedError("the stream ended before the initial-events-end bookmark")
        if self._events_this_watch == 0 and self._clock() - started < s.min_watch_duration:
            raise WatchError("the watch closed at once without events")

    def _process(self, lines: list[bytes]) -> None:
        """Decode and dispatch one chunk's lines. The hot path: keep it flat."""
        loads = orjson.loads
        sink_event = self._sink.on_event
        initial = self._initial
        rv: str | None = self.last_resource_version
        count = 0
        try:
            for line in lines:
                try:
                    event = loads(line)
                    event_type = event["type"]
                    obj = event["object"]
                    obj_rv = obj["metadata"]["resourceVersion"] if event_type != "ERROR" else rv
                except (ValueError, TypeError, KeyError):
                    if line.strip():
                        self.stats.garbage_lines += 1
                        if self.settings.log_undecodable_lines:
                            self._log.warning("skipping undecodable watch line", line=line[:200])
                        else:
                            self._log.warning("skipping undecodable watch line", length=len(line))
                    continue
                if event_type == "ADDED" or event_type == "MODIFIED" or event_type == "DELETED":  # noqa: PLR1714
                    count += 1
                    if initial is not None:
                        initial.append(obj)
                    else:
                        try:
                            sink_event(event_type, obj)
                        except Exception as exc:
                            self._log.exception("sink failed on event", event_type=event_type, error=str(exc))
                    rv = obj_rv
                elif event_type == "BOOKMARK":
                    rv = obj_rv
                    if initial is not None:
                        annotations = obj["metadata"].get("annotations") or {}
                        if annotations.get(INITIAL_EVENTS_END) != "true":
                            raise _StreamingListUnsupportedError("a bookmark before initial-events-end")
                        self._finish_initial(initial, str(rv))
                        initial = None
                elif event_type == "ERROR":
                    raise self._error_event(obj)
                else:
                    self.stats.garbage_lines += 1
                    self._log.warning("skipping watch event of unknown type", event_type=str(event_type)[:50])
        finally:
            self.last_resource_version = rv
            self._events_this_watch += count
            self.stats.events += count

    def _finish_initial(self, objects: list[Object], rv: str) -> None:
        self._initial = None
        self._listed_by_stream = True
        self.stats.streaming_lists += 1
        self._sink.on_replace(objects)
        self.last_resource_version = rv
        self._log.debug("streaming list complete", count=len(objects), rv=rv)

    def _error_event(self, status: Any) -> ApiError:
        code = status.get("code") if isinstance(status, dict) else None
        return error_from_status(
            code if isinstance(code, int) else 500, status if isinstance(status, dict) else None
        )
