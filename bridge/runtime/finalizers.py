"""Add and remove finalizers without losing anyone else's.

A finalizer list is shared by every controller that guards an object. Both helpers send a merge
patch carrying the whole new list *and* the ``resourceVersion`` read, so the server applies it only
if nobody changed the object meanwhile (else :class:`~bridge.runtime.errors.Conflict`: read again and
retry, which the controller's requeue does).
"""

from __future__ import annotations

from bridge.runtime.client import Client
from bridge.runtime.handlers import Object

__all__ = ["add_finalizer", "has_finalizer", "remove_finalizer"]


def has_finalizer(obj: Object, finalizer: str) -> bool:
    return finalizer in ((obj.get("metadata") or {}).get("finalizers") or ())


async def add_finalizer(
    client: Client, obj: Object, finalizer: str, *, field_manager: str | None = None
) -> Object:
    """Ensure ``finalizer`` is on ``obj``; returns the updated object (``obj`` itself when already there)."""
    current: list[str] = list((obj.get("metadata") or {}).get("finalizers") or ())
    if finalizer in current:
        return obj
    return await _patch_finalizers(client, obj, [*current, finalizer], field_manager=field_manager)


async def remove_finalizer(
    client: Client, obj: Object, finalizer: str, *, field_manager: str | None = None
) -> Object:
    """Ensure ``finalizer`` is not on ``obj``; returns the updated object (``obj`` itself when absent)."""
    current: list[str] = list((obj.get("metadata") or {}).get("finalizers") or ())
    if finalizer not in current:
        return obj
    return await _patch_finalizers(
        client, obj, [f for f in current if f != finalizer], field_manager=field_manager
    )


async def _patch_finalizers(
    client: Client, obj: Object, finalizers: list[str], *, field_manager: str | None
) -> Object:
    metadata = obj["metadata"]
    patch = {"metadata": {"finalizers": finalizers, "resourceVersion": metadata["resourceVersion"]}}
    return await client.patch(
        obj["apiVersion"],
        obj["kind"],
        metadata["name"],
        patch,
        namespace=metadata.get("namespace"),
        patch_type="merge",
        field_manager=field_manager,
    )
