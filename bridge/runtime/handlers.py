"""The one interface between sources of change and the controllers that react to them.

An informer (a Kubernetes watch) and a polled source (the Slurm job list) both deliver changes of
plain-dict objects to ``EventHandler``s; a controller turns each change into a work-queue key. So a
reconciler never cares where a change came from, only which key changed.
"""

from __future__ import annotations

from typing import Any, Protocol

Object = dict[str, Any]
"""A decoded object as the cache holds it: plain JSON data, not a generated model."""


class EventHandler(Protocol):
    """Called by a source, in order, for each change it observes. Must not block."""

    def on_add(self, obj: Object, *, is_initial_list: bool) -> None: ...

    def on_update(self, old: Object, new: Object) -> None: ...

    def on_delete(self, obj: Object) -> None: ...


class Source(Protocol):
    """Anything that feeds a store and handlers: a Kubernetes informer or a polled external list."""

    def add_handler(self, handler: EventHandler) -> None:
        """Register ``handler``; it first receives ``on_add`` for every object already known."""
        ...

    def has_synced(self) -> bool:
        """True once the first full list has been delivered."""
        ...
