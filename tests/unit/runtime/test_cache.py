"""The store: keys, indexes kept right through every mutation, transforms, typed views."""

from __future__ import annotations

import copy
import json
import sys
from typing import Any

import pytest
from pydantic import BaseModel

from bridge.runtime.cache import Store, compact, default_transform, meta_namespace_key, strip_managed_fields
from bridge.runtime.handlers import Object


def pod(
    name: str, node: str | None, *, namespace: str | None = "default", labels: dict[str, str] | None = None
) -> Object:
    metadata: dict[str, Any] = {"name": name, "labels": labels or {}}
    if namespace:
        metadata["namespace"] = namespace
    metadata["managedFields"] = [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {"nodeName": node}}


def by_node(obj: Object) -> list[str]:
    node = obj["spec"].get("nodeName")
    return [node] if node else []


def names(objs: list[Object]) -> list[str]:
    return sorted(o["metadata"]["name"] for o in objs)


def test_keys_are_namespace_slash_name_or_name() -> None:
    assert meta_namespace_key(pod("a", None)) == "default/a"
    assert meta_namespace_key(pod("n1", None, namespace=None)) == "n1"


def test_transform_strips_managed_fields_by_default() -> None:
    store = Store()
    old, new = store.put(pod("a", "n1"))
    assert old is None
    assert "managedFields" not in new["metadata"]
    assert store.get("default/a") is new


def test_no_transform_keeps_everything() -> None:
    store = Store(transform=None)
    store.put(pod("a", "n1"))
    stored = store.get("default/a")
    assert stored is not None
    assert "managedFields" in stored["metadata"]


def test_index_follows_put_update_pop_and_replace() -> None:
    store = Store(indexers={"node": by_node})
    store.put(pod("a", "n1"))
    store.put(pod("b", "n1"))
    store.put(pod("c", None))
    assert names(store.by_index("node", "n1")) == ["a", "b"]
    store.put(pod("b", "n2"))  # moved
    assert names(store.by_index("node", "n1")) == ["a"]
    assert names(store.by_index("node", "n2")) == ["b"]
    store.pop("default/a")
    assert store.by_index("node", "n1") == []
    assert store.index_values("node") == ["n2"]
    vanished, changes = store.replace([pod("b", "n3"), pod("d", "n3")])
    assert names(vanished) == ["c"]
    assert sorted((o["metadata"]["name"] if o else "", n["metadata"]["name"]) for o, n in changes) == [
        ("", "d"),
        ("b", "b"),
    ]
    assert names(store.by_index("node", "n3")) == ["b", "d"]
    assert store.by_index("node", "n2") == []


def test_indexer_added_later_covers_existing_objects() -> None:
    store = Store()
    store.put(pod("a", "n1"))
    store.add_indexer("node", by_node)
    assert names(store.by_index("node", "n1")) == ["a"]
    with pytest.raises(ValueError, match="exists"):
        store.add_indexer("node", by_node)


def test_values_generation_moves_only_when_an_index_gains_or_loses_a_value() -> None:
    store = Store(indexers={"node": by_node})
    seen = [store.values_generation("node")]

    def moved() -> bool:
        now = store.values_generation("node")
        changed = now != seen[-1]
        seen.append(now)
        return changed

    store.put(pod("a", "n1"))
    assert moved()  # n1 appears
    store.put(pod("b", "n1"))
    assert not moved()  # a second object of n1
    store.put(pod("b", "n1", labels={"x": "y"}))
    assert not moved()  # an update that keeps its value
    store.put(pod("c", None))
    assert not moved()  # no value at all
    store.put(pod("b", "n2"))
    assert moved()  # n2 appears
    store.pop("default/a")
    assert moved()  # n1's last object went
    store.replace([pod("b", "n2"), pod("d", "n2")])
    assert not moved()
    store.replace([pod("d", "n2")])
    assert not moved()
    store.replace([])
    assert moved()
    assert store.index_values("node") == []


def test_multi_valued_index() -> None:
    store = Store(indexers={"label": lambda o: [f"{k}={v}" for k, v in o["metadata"]["labels"].items()]})
    store.put(pod("a", None, labels={"app": "x", "tier": "web"}))
    store.put(pod("b", None, labels={"app": "x"}))
    assert names(store.by_index("label", "app=x")) == ["a", "b"]
    assert store.index_keys("label", "tier=web") == ["default/a"]


class PodView(BaseModel):
    kind: str
    spec: dict[str, Any]


def test_typed_view_on_request() -> None:
    store = Store()
    store.put(pod("a", "n1"))
    view = store.get_as("default/a", PodView)
    assert view is not None
    assert view.spec["nodeName"] == "n1"
    assert store.get_as("default/missing", PodView) is None


def test_compact_shares_strings_and_keeps_content() -> None:
    a, b = pod("a", "node-1"), pod("b", "node-1")
    expected = strip_managed_fields(copy.deepcopy(a))
    ca, cb = compact(copy.deepcopy(a)), compact(b)
    assert ca == expected
    key_a = next(k for k in ca["spec"])
    key_b = next(k for k in cb["spec"])
    assert key_a is key_b
    assert ca["spec"]["nodeName"] is cb["spec"]["nodeName"]
    assert sys.getrefcount(key_a) > 2


def test_default_transform_strips_and_shares_the_envelope_keys() -> None:
    def decoded(name: str) -> Object:
        # Decoded from JSON, as the reflector does: no string is shared between two documents yet.
        result: Object = json.loads(json.dumps(pod(name, "node-1")))
        return result

    a, b = decoded("a"), decoded("b")
    assert next(iter(a)) is not next(iter(b))
    expected = strip_managed_fields(copy.deepcopy(a))
    da, db = default_transform(copy.deepcopy(a)), default_transform(b)
    assert da == expected
    assert list(da) == list(expected), "key order is kept"
    assert "managedFields" not in db["metadata"]
    for key_a, key_b in [*zip(da, db, strict=True), *zip(da["metadata"], db["metadata"], strict=True)]:
        assert key_a is key_b
    assert Store().transform is default_transform


def test_replace_indexes_again_only_the_objects_that_are_not_the_stored_ones() -> None:
    """A polled source hands back the very objects it stored for what did not change: a list of many
    with one change costs the index function for that one (and for what vanished), not for all."""
    calls: list[str] = []

    def by_team(obj: Object) -> list[str]:
        calls.append(obj["metadata"]["name"])
        return [obj["metadata"]["labels"]["team"]]

    def cm(name: str, team: str) -> Object:
        return {"metadata": {"namespace": "ns", "name": name, "labels": {"team": team}}}

    store = Store(key_func=meta_namespace_key, transform=None, indexers={"team": by_team})  # as PolledSource
    objects = [cm(f"c{i}", "a") for i in range(50)]
    store.replace(objects)
    calls.clear()
    moved = cm("c7", "b")
    store.replace([*objects[:7], moved, *objects[8:49]])  # c7 changed, c49 vanished
    assert sorted(calls) == ["c49", "c7", "c7"]  # before and after for each
    assert store.index_keys("team", "b") == ["ns/c7"]
    assert len(store.index_keys("team", "a")) == 48


def test_every_change_of_the_store_moves_its_generation() -> None:
    store = Store(key_func=meta_namespace_key, transform=None)
    seen = [store.generation]
    obj: Object = {"metadata": {"namespace": "ns", "name": "a"}}
    store.put(obj)
    seen.append(store.generation)
    store.replace([obj])
    seen.append(store.generation)
    store.pop("ns/a")
    seen.append(store.generation)
    assert seen == sorted(set(seen))
