"""Kubernetes Events (events.k8s.io/v1) about the objects a controller acts on.

Events are how an operator tells ``kubectl describe`` readers why something happened ("held: no
partition fits"). Recording one must never fail a reconcile, so errors are logged and swallowed.
Like client-go's events library, a repeat of the same event (same object, type, reason, action and
note) within ``series_window`` becomes a ``series`` on the first one (count and last time) instead
of a new object, so a reconcile loop that says the same thing every minute leaves one Event.
"""

from __future__ import annotations

import datetime as dt
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import structlog

from bridge.runtime.client import Client
from bridge.runtime.errors import NotFound
from bridge.runtime.handlers import Object

__all__ = ["EventRecorder", "EventType"]

log = structlog.get_logger(__name__)

EventType = Literal["Normal", "Warning"]
_NOTE_MAX = 1024  # the API's limit for note


@dataclass(slots=True)
class _Seen:
    name: str
    namespace: str
    count: int
    first: float


def _micro_time(now: dt.datetime) -> str:
    return now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def object_reference(obj: Object) -> Object:
    metadata = obj.get("metadata") or {}
    ref: Object = {
        "apiVersion": obj.get("apiVersion", ""),
        "kind": obj.get("kind", ""),
        "name": metadata.get("name"),
    }
    for source, target in (
        ("namespace", "namespace"),
        ("uid", "uid"),
        ("resourceVersion", "resourceVersion"),
    ):
        if metadata.get(source):
            ref[target] = metadata[source]
    return ref


class EventRecorder:
    """Writes Events as ``reporting_controller`` / ``reporting_instance`` (e.g. pod name)."""

    def __init__(
        self,
        client: Client,
        *,
        reporting_controller: str,
        reporting_instance: str,
        series_window: float = 6 * 60.0,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self._client = client
        self.reporting_controller = reporting_controller
        self.reporting_instance = reporting_instance
        self._window = series_window
        self._clock = clock
        self._now = now
        self._seen: dict[tuple[str, ...], _Seen] = {}

    async def event(
        self,
        regarding: Object,
        *,
        type: EventType,
        reason: str,
        note: str,
        action: str,
        related: Object | None = None,
    ) -> Object | None:
        """Record one event; returns the Event written, or None when it could not be."""
        ref = object_reference(regarding)
        note = note[:_NOTE_MAX]
        key = (ref.get("uid") or f"{ref.get('namespace')}/{ref.get('name')}", type, reason, action, note)
        now = self._now()
        seen = self._seen.get(key)
        clock = self._clock()
        self._forget_old(clock)
        try:
            if seen is not None and clock - seen.first < self._window:
                seen.count += 1
                patch = {"series": {"count": seen.count, "lastObservedTime": _micro_time(now)}}
                try:
                    return await self._client.patch(
                        "events.k8s.io/v1", "Event", seen.name, patch, namespace=seen.namespace
                    )
                except NotFound:
                    del self._seen[key]  # expired or deleted: write a fresh one
            namespace = ref.get("namespace") or "default"
            name = f"{ref.get('name')}.{secrets.token_hex(8)}"
            body: Object = {
                "apiVersion": "events.k8s.io/v1",
                "kind": "Event",
                "metadata": {"name": name, "namespace": namespace},
                "eventTime": _micro_time(now),
                "reportingController": self.reporting_controller,
                "reportingInstance": self.reporting_instance,
                "action": action,
                "reason": reason,
                "note": note,
                "type": type,
                "regarding": ref,
            }
            if related is not None:
                body["related"] = object_reference(related)
            created = await self._client.create(body)
            self._seen[key] = _Seen(name=name, namespace=namespace, count=1, first=clock)
            return created
        except Exception as exc:  # ApiError, aiohttp.ClientError, timeouts: never fail the caller
            log.warning("could not record event", reason=reason, regarding=ref.get("name"), error=repr(exc))
            return None

    def _forget_old(self, clock: float) -> None:
        if len(self._seen) < 4096:
            return
        for key in [k for k, s in self._seen.items() if clock - s.first >= self._window]:
            del self._seen[key]
