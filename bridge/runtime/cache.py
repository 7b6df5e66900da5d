"""The in-memory store behind an informer: plain dicts by key, with indexes.

In Python the cost of an operator is its cache: every watched object lives here as a decoded dict,
so the store keeps objects as the JSON decoder made them (no models), drops what nobody reads
(``metadata.managedFields``, through a transform hook applied before storing), shares the keys
every object repeats in its envelope (:func:`default_transform`), and can intern every key and short
string (:func:`compact`) where memory matters more than decode speed. Typed views are built on
request, one object at a time (:meth:`Store.get_as`).

Why interning pays: ``json.loads`` shares a key string only within one document, so ten thousand
cached objects hold ten thousand copies of ``"resourceVersion"`` (about 60 bytes each).

Objects in the store are shared with every handler and reader: treat them as read-only, as with
client-go's cache.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from pydantic import BaseModel

from bridge.runtime.handlers import Object

__all__ = [
    "IndexFunc",
    "KeyFunc",
    "Store",
    "Transform",
    "compact",
    "default_transform",
    "meta_namespace_key",
    "strip_managed_fields",
]

Transform = Callable[[Object], Object]
"""Applied to every object before it is stored (and before handlers see it); may mutate and return it."""
IndexFunc = Callable[[Object], list[str]]
"""The index values of an object (client-go's ``IndexFunc``)."""
KeyFunc = Callable[[Object], str]

M = TypeVar("M", bound=BaseModel)


def meta_namespace_key(obj: Object) -> str:
    """``namespace/name``, or ``name`` for cluster-scoped objects (client-go's MetaNamespaceKeyFunc)."""
    metadata = obj["metadata"]
    namespace = metadata.get("namespace")
    return f"{namespace}/{metadata['name']}" if namespace else str(metadata["name"])


def strip_managed_fields(obj: Object) -> Object:
    """Drop ``managedFields``: a third of a typical object, and nobody reads it (no interning)."""
    metadata = obj.get("metadata")
    if metadata is not None:
        metadata.pop("managedFields", None)
    return obj


_interned: dict[str, str] = {}
_INTERN_MAX_LEN = 64
_INTERN_TABLE_MAX = 1_000_000
"""A pathological vocabulary (random keys or values) clears the table instead of growing it forever."""


def default_transform(obj: Object) -> Object:
    """The informers' default: strip ``managedFields`` and share the top-level and ``metadata`` keys.

    Two dictionary comprehensions per object (about 5% of the cost of decoding and storing it) that
    save 0.5-0.8 KiB per object (docs/runtime-benchmarks.md). Sharing more (label keys, the
    ``apiVersion`` and ``kind`` values) saved little more and cost three to four times as much;
    :func:`compact` shares every key and short string but walks every value and halves the decode
    rate.
    """
    if len(_interned) > _INTERN_TABLE_MAX:
        _interned.clear()
    share = _interned.setdefault
    metadata = obj.get("metadata")
    if type(metadata) is dict:
        metadata.pop("managedFields", None)
        obj["metadata"] = {share(k, k): v for k, v in metadata.items()}
    out: Object = {share(k, k): v for k, v in obj.items()}
    return out


def _compact_value(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        intern = _interned.setdefault
        return {intern(k, k): _compact_value(v) for k, v in value.items()}
    if kind is list:
        return [_compact_value(v) for v in value]
    if kind is str and len(value) <= _INTERN_MAX_LEN:
        return _interned.setdefault(value, value)
    return value


def compact(obj: Object) -> Object:
    """Strip managedFields and share every key and short string among all cached objects.

    Halves the memory of :func:`strip_managed_fields` again (keys such as ``"metadata"`` and values
    such as ``"IfNotPresent"`` exist once), at about twice the decode cost: use it for large caches
    of slowly changing objects. The intern table only grows; its strings are the vocabulary of the
    watched objects, bounded in practice.
    """
    if len(_interned) > _INTERN_TABLE_MAX:
        _interned.clear()
    result: Object = _compact_value(strip_managed_fields(obj))
    return result


class Store:
    """Objects by key plus named indexes; mutated only by the source that owns it."""

    __slots__ = ("_indexers", "_indices", "_items", "_values_changed", "generation", "key_func", "transform")

    def __init__(
        self,
        *,
        key_func: KeyFunc = meta_namespace_key,
        transform: Transform | None = default_transform,
        indexers: dict[str, IndexFunc] | None = None,
    ) -> None:
        self.key_func = key_func
        self.transform = transform
        self._items: dict[str, Object] = {}
        self.generation = 0
        """Incremented by every change: what a count over the store is cached against."""
        self._indexers: dict[str, IndexFunc] = {}
        self._indices: dict[str, dict[str, set[str]]] = {}
        self._values_changed: dict[str, int] = {}
        for name, func in (indexers or {}).items():
            self.add_indexer(name, func)

    # --- reads ------------------------------------------------------------------------------------

    def get(self, key: str) -> Object | None:
        return self._items.get(key)

    def get_as(self, key: str, model: type[M]) -> M | None:
        """A typed (pydantic) view of one object, validated now; None when absent."""
        obj = self._items.get(key)
        return None if obj is None else model.model_validate(obj)

    def list(self) -> list[Object]:
        return list(self._items.values())

    def keys(self) -> builtins.list[str]:
        return list(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[Object]:
        return iter(list(self._items.values()))

    def by_index(self, index: str, value: str) -> builtins.list[Object]:
        """Objects whose ``index`` function returned ``value``."""
        items = self._items
        return [items[k] for k in self._indices[index].get(value, ())]

    def index_keys(self, index: str, value: str) -> builtins.list[str]:
        return sorted(self._indices[index].get(value, ()))

    def index_values(self, index: str) -> builtins.list[str]:
        """The values ``index`` gives for at least one stored object (a value that loses its last
        object leaves the index at once)."""
        return list(self._indices[index])

    def values_generation(self, index: str) -> int:
        """Incremented whenever :meth:`index_values` of ``index`` changes (a value gains its first
        object or loses its last), and only then: what a view of the values is cached against, where
        ``generation`` would change with every update of every object."""
        return self._values_changed[index]

    @property
    def indexer_names(self) -> frozenset[str]:
        return frozenset(self._indexers)

    def add_indexer(self, name: str, func: IndexFunc) -> None:
        """Add an index (also over the objects already stored)."""
        if name in self._indexers:
            raise ValueError(f"indexer {name!r} exists")
        self._indexers[name] = func
        index: dict[str, set[str]] = {}
        self._indices[name] = index
        self._values_changed[name] = 0
        for key, obj in self._items.items():
            for value in func(obj):
                index.setdefault(value, set()).add(key)

    # --- mutations (by the owning informer or source) ---------------------------------------------

    def put(self, obj: Object) -> tuple[Object | None, Object]:
        """Transform and store ``obj``; return ``(old, new)``."""
        if self.transform is not None:
            obj = self.transform(obj)
        key = self.key_func(obj)
        items = self._items
        old = items.get(key)
        items[key] = obj
        self.generation += 1
        if self._indexers:
            self._reindex(key, old, obj)
        return old, obj

    def pop(self, key: str) -> Object | None:
        old = self._items.pop(key, None)
        self.generation += 1
        if old is not None and self._indexers:
            self._reindex(key, old, None)
        return old

    def key_of(self, obj: Object) -> str:
        return self.key_func(obj)

    def replace(
        self, objects: Iterable[Object]
    ) -> tuple[builtins.list[Object], builtins.list[tuple[Object | None, Object]]]:
        """Make the store hold exactly ``objects``.

        Returns the objects that vanished (last known state) and the ``(old, new)`` pairs for the rest,
        so the caller can deliver deletes before adds and updates.
        """
        transform, key_func = self.transform, self.key_func
        fresh: dict[str, Object] = {}
        for raw in objects:
            obj = transform(raw) if transform is not None else raw
            fresh[key_func(obj)] = obj
        items = self._items
        gone = items.keys() - fresh.keys()
        vanished = [items[k] for k in gone]
        changes = [(items.get(k), obj) for k, obj in fresh.items()]
        if self._indexers:
            # Only what changed is indexed again: a polled source hands back the very objects it
            # stored for what did not change, so a list of thousands with a few changes costs a few.
            for key in gone:
                self._reindex(key, items[key], None)
            for key, obj in fresh.items():
                old = items.get(key)
                if old is not obj:
                    self._reindex(key, old, obj)
        self._items = fresh
        self.generation += 1
        return vanished, changes

    def _reindex(self, key: str, old: Object | None, new: Object | None) -> None:
        for name, func in self._indexers.items():
            before = func(old) if old is not None else ()
            after = func(new) if new is not None else ()
            if before == after:
                continue
            index = self._indices[name]
            for value in before:
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]
                        self._values_changed[name] += 1
            for value in after:
                keys = index.get(value)
                if keys is None:
                    index[value] = {key}
                    self._values_changed[name] += 1
                else:
                    keys.add(key)


def interned_count() -> int:
    """How many distinct strings :func:`compact` shares (for diagnostics)."""
    return len(_interned)
