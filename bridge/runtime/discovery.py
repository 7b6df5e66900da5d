"""Which URL serves a kind: API discovery, cached.

A client addresses any resource by ``apiVersion`` and kind (or plural). The path, the plural and
whether it is namespaced come from the group-version's resource list (``/api/v1``,
``/apis/<group>/<version>``), fetched once and cached; a miss refetches once, since a CRD may have
been installed since.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from bridge.runtime.errors import NotFound, error_from_status
from bridge.runtime.session import Session

__all__ = ["Discovery", "Resource"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Resource:
    """One resource type as the API serves it."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    subresources: frozenset[str] = field(default_factory=frozenset)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, *, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """``/api/v1/namespaces/ns/pods/name/status``; no namespace on a namespaced kind = all namespaces."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base


class Discovery:
    """Resource lists per group-version, fetched on first use."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._by_gv: dict[str, dict[str, Resource]] = {}

    def register(self, resource: Resource) -> None:
        """Seed the cache (tests, or kinds known in advance) so no request is needed."""
        names = self._by_gv.setdefault(resource.api_version, {})
        names[resource.kind] = resource
        names[resource.plural] = resource

    def invalidate(self) -> None:
        self._by_gv.clear()

    async def resolve(self, api_version: str, kind: str) -> Resource:
        """The resource of ``kind`` (or plural name) in ``api_version``; NotFound when the server has none."""
        names = self._by_gv.get(api_version)
        if names is None or kind not in names:
            names = await self._fetch(api_version)
        found = names.get(kind) or names.get(kind.lower())
        if found is None:
            raise NotFound(404, "NotFound", f"the server has no resource {kind!r} in {api_version!r}")
        return found

    async def _fetch(self, api_version: str) -> dict[str, Resource]:
        group, _, version = api_version.rpartition("/")
        path = f"/apis/{api_version}" if group else f"/api/{version}"
        async with self._session.request("GET", path) as response:
            raw = await response.read()
            if response.status >= 400:
                raise error_from_status(response.status, raw)
        listing: dict[str, Any] = json.loads(raw)
        subresources: dict[str, set[str]] = {}
        entries: list[dict[str, Any]] = listing.get("resources") or []
        for entry in entries:
            parent, slash, sub = str(entry.get("name", "")).partition("/")
            if slash:
                subresources.setdefault(parent, set()).add(sub)
        names: dict[str, Resource] = {}
        for entry in entries:
            plural = str(entry.get("name", ""))
            if "/" in plural:
                continue
            resource = Resource(
                group=group,
                version=version,
                plural=plural,
                kind=str(entry.get("kind", "")),
                namespaced=bool(entry.get("namespaced")),
                subresources=frozenset(subresources.get(plural, ())),
            )
            names.setdefault(resource.kind, resource)
            names[plural] = resource
            singular = entry.get("singularName")
            if singular:
                names.setdefault(str(singular), resource)
        for resource in self._by_gv.get(api_version, {}).values():
            names.setdefault(resource.kind, resource)
        self._by_gv[api_version] = names
        return names
