"""A client for any resource: plain dicts in and out, typed errors.

Reconcilers mostly read from the cache and write through this client. Each call is one HTTP request
(``list`` follows ``continue`` tokens); failures raise the classes of :mod:`bridge.runtime.errors`.
Resources are named by ``apiVersion`` and kind (or plural) and resolved through cached discovery, so
custom resources need no generated code.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Literal, TypeVar

import orjson

from bridge.runtime.discovery import Discovery, Resource
from bridge.runtime.errors import NotFound, error_from_status
from bridge.runtime.handlers import Object
from bridge.runtime.session import Session

__all__ = ["Client", "PatchType"]

PatchType = Literal["merge", "json", "strategic"]

_PATCH_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}
_T = TypeVar("_T")

_APPLY_CONTENT_TYPE = "application/apply-patch+yaml"  # JSON is YAML: the body is sent as JSON


class Client:
    """CRUD, patch and server-side apply for any resource over one :class:`Session`."""

    def __init__(self, session: Session, *, discovery: Discovery | None = None) -> None:
        self.session = session
        self.discovery = discovery if discovery is not None else Discovery(session)

    async def resource(self, api_version: str, kind: str) -> Resource:
        """Resolve ``kind`` (or its plural) in ``api_version`` through cached discovery."""
        return await self.discovery.resolve(api_version, kind)

    # --- reads ------------------------------------------------------------------------------------

    async def get(
        self,
        api_version: str,
        kind: str,
        name: str,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> Object:
        result: Object = await self.get_decoded(
            api_version, kind, name, decode=orjson.loads, namespace=namespace, subresource=subresource
        )
        return result

    async def get_decoded(
        self,
        api_version: str,
        kind: str,
        name: str,
        *,
        decode: Callable[[bytes], _T],
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> _T:
        """:meth:`get` with the answer's bytes handed to ``decode``: a reader of a few fields of a
        long answer decodes just those (a typed msgspec decoder) instead of every object in it."""
        res = await self.resource(api_version, kind)
        path = res.path(namespace=namespace, name=name, subresource=subresource)
        result: _T = await self._call("GET", path, decode=decode)
        return result

    async def list(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
    ) -> builtins.list[Object]:
        """All matching objects (every page), each with ``apiVersion`` and ``kind`` set."""
        res = await self.resource(api_version, kind)
        items: builtins.list[Object] = []
        async for page in self.list_pages(
            res,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            page_size=page_size,
        ):
            items.extend(page.get("items") or ())
        return items

    async def list_pages(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        page_size: int = 500,
    ) -> AsyncIterator[Object]:
        """Yield each raw list page; items get ``apiVersion``/``kind`` (the server omits them)."""
        params: dict[str, str] = {"limit": str(page_size)}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        if resource_version is not None:
            params["resourceVersion"] = resource_version
        path = resource.path(namespace=namespace)
        api_version, kind = resource.api_version, resource.kind
        while True:
            page: Object = await self._call("GET", path, params=params)
            for item in page.get("items") or ():
                item["apiVersion"] = api_version
                item["kind"] = kind
            yield page
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return
            params.pop("resourceVersion", None)  # the server refuses resourceVersion with continue
            params["continue"] = token

    # --- writes -----------------------------------------------------------------------------------

    async def create(
        self,
        obj: Object,
        *,
        namespace: str | None = None,
        field_manager: str | None = None,
        dry_run: bool = False,
    ) -> Object:
        res, ns, _ = await self._locate(obj, namespace)
        params = _write_params(field_manager=field_manager, dry_run=dry_run)
        result: Object = await self._call("POST", res.path(namespace=ns), params=params, body=obj)
        return result

    async def update(self, obj: Object, *, field_manager: str | None = None, dry_run: bool = False) -> Object:
        """Replace (PUT) the object; its ``metadata.resourceVersion`` makes it a compare-and-swap."""
        res, ns, name = await self._locate(obj, None)
        params = _write_params(field_manager=field_manager, dry_run=dry_run)
        result: Object = await self._call("PUT", res.path(namespace=ns, name=name), params=params, body=obj)
        return result

    async def update_status(self, obj: Object, *, field_manager: str | None = None) -> Object:
        """Replace the status subresource (only ``status`` changes; resourceVersion is checked)."""
        res, ns, name = await self._locate(obj, None)
        params = _write_params(field_manager=field_manager, dry_run=False)
        path = res.path(namespace=ns, name=name, subresource="status")
        result: Object = await self._call("PUT", path, params=params, body=obj)
        return result

    async def patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: Object | builtins.list[Object],
        *,
        namespace: str | None = None,
        patch_type: PatchType = "merge",
        field_manager: str | None = None,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> Object:
        """Merge patch (a dict), JSON patch (a list of operations) or strategic merge (built-in kinds)."""
        res = await self.resource(api_version, kind)
        params = _write_params(field_manager=field_manager, dry_run=dry_run)
        path = res.path(namespace=namespace, name=name, subresource=subresource)
        content_type = _PATCH_CONTENT_TYPES[patch_type]
        result: Object = await self._call("PATCH", path, params=params, body=patch, content_type=content_type)
        return result

    async def patch_status(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: Object | builtins.list[Object],
        *,
        namespace: str | None = None,
        patch_type: PatchType = "merge",
        field_manager: str | None = None,
    ) -> Object:
        return await self.patch(
            api_version,
            kind,
            name,
            patch,
            namespace=namespace,
            patch_type=patch_type,
            field_manager=field_manager,
            subresource="status",
        )

    async def apply(
        self,
        obj: Object,
        *,
        field_manager: str,
        force: bool = False,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> Object:
        """Server-side apply: ``obj`` states the fields this manager owns; ``force`` takes them over."""
        res, ns, name = await self._locate(obj, None)
        params = _write_params(field_manager=field_manager, dry_run=dry_run)
        if force:
            params["force"] = "true"
        path = res.path(namespace=ns, name=name, subresource=subresource)
        result: Object = await self._call(
            "PATCH", path, params=params, body=obj, content_type=_APPLY_CONTENT_TYPE
        )
        return result

    async def delete(
        self,
        api_version: str,
        kind: str,
        name: str,
        *,
        namespace: str | None = None,
        propagation_policy: Literal["Foreground", "Background", "Orphan"] | None = None,
        preconditions: Mapping[str, str] | None = None,
        grace_period_seconds: int | None = None,
        missing_ok: bool = False,
    ) -> Object | None:
        """Delete; ``preconditions`` takes ``uid`` and/or ``resourceVersion``. Returns the server's answer."""
        res = await self.resource(api_version, kind)
        options: Object = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if propagation_policy is not None:
            options["propagationPolicy"] = propagation_policy
        if preconditions:
            options["preconditions"] = dict(preconditions)
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        try:
            result: Object | None = await self._call(
                "DELETE", res.path(namespace=namespace, name=name), body=options
            )
            return result
        except NotFound:
            if missing_ok:
                return None
            raise

    # --- plumbing ---------------------------------------------------------------------------------

    async def _locate(self, obj: Object, namespace: str | None) -> tuple[Resource, str | None, str | None]:
        try:
            api_version, kind = obj["apiVersion"], obj["kind"]
        except KeyError as exc:
            raise ValueError(f"object has no {exc.args[0]}") from None
        res = await self.resource(api_version, kind)
        metadata = obj.get("metadata") or {}
        ns = namespace or metadata.get("namespace")
        if res.namespaced and not ns:
            raise ValueError(f"{kind} is namespaced: give metadata.namespace or namespace=")
        return res, ns if res.namespaced else None, metadata.get("name")

    async def _call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        decode: Callable[[bytes], Any] = orjson.loads,
    ) -> Any:
        data = json.dumps(body, separators=(",", ":")).encode() if body is not None else None
        async with self.session.request(
            method, path, params=params, body=data, content_type=content_type if data is not None else None
        ) as response:
            raw = await response.read()
            if response.status >= 400:
                retry_after = response.headers.get("Retry-After")
                raise error_from_status(
                    response.status,
                    raw,
                    retry_after=float(retry_after) if retry_after and retry_after.isdigit() else None,
                )
        return decode(raw) if raw else None


def _write_params(*, field_manager: str | None, dry_run: bool) -> dict[str, str]:
    params: dict[str, str] = {}
    if field_manager:
        params["fieldManager"] = field_manager
    if dry_run:
        params["dryRun"] = "All"
    return params
