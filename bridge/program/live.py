"""The live WorkloadMixing as a bridge reads it: the last good configuration, never a half-checked one.

:class:`LiveMixing` is what a reconciler holds (its ``spec`` is None until a first good configuration
is published, and after the resource is deleted); a program subclasses it with accessors for its own
part of the spec. :class:`DirectPublisher` publishes the resource as it is, for a process run with
``--no-mixing-controller`` beside another that owns the status and the checks.
"""

from __future__ import annotations

import structlog
from pydantic import ValidationError

from bridge.api.mixing import API_VERSION, KIND, WorkloadMixingSpec
from bridge.mixing_config import LiveConfig
from bridge.runtime.handlers import Object

__all__ = ["DirectPublisher", "LiveMixing"]

log = structlog.get_logger(__name__)


class LiveMixing:
    """A reconciler's view of a :class:`LiveConfig`: the current spec, and the resource for Events."""

    def __init__(self, live: LiveConfig) -> None:
        self.live = live

    @property
    def spec(self) -> WorkloadMixingSpec | None:
        current = self.live.current
        return current.spec if current is not None else None

    @property
    def object(self) -> Object | None:
        current = self.live.current
        if current is None:
            return None
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": current.name, "uid": current.uid},
        }


class DirectPublisher:
    """An informer handler that publishes the WorkloadMixing as it is (``--no-mixing-controller``)."""

    def __init__(self, live: LiveConfig) -> None:
        self._live = live

    def _publish(self, obj: Object) -> None:
        meta = obj.get("metadata") or {}
        if meta.get("name") != self._live.name:
            return
        try:
            spec = WorkloadMixingSpec.model_validate(obj.get("spec") or {})
        except ValidationError as exc:
            log.error("WorkloadMixing is invalid; keeping the last good one", error=str(exc)[:500])
            return
        self._live.publish(
            uid=str(meta.get("uid", "")), generation=int(meta.get("generation") or 0), spec=spec
        )

    def on_add(self, obj: Object, *, is_initial_list: bool) -> None:
        self._publish(obj)

    def on_update(self, old: Object, new: Object) -> None:
        self._publish(new)

    def on_delete(self, obj: Object) -> None:
        if (obj.get("metadata") or {}).get("name") == self._live.name:
            self._live.withdraw()
