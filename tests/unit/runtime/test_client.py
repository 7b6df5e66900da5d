"""The client against a recording HTTP server: URLs, verbs, content types, options, error mapping."""

from __future__ import annotations

import pytest

from bridge.runtime import errors
from bridge.runtime.client import Client
from tests.fixtures.recording_apiserver import RecordingServer, Seen


def cm(name: str = "a") -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "ns"},
        "data": {},
    }


async def test_discovery_resolves_kind_plural_and_scope(client: Client) -> None:
    pods = await client.resource("v1", "Pod")
    assert (pods.plural, pods.namespaced, pods.subresources) == ("pods", True, frozenset({"status"}))
    assert await client.resource("v1", "pods") is pods
    namespaces = await client.resource("v1", "Namespace")
    assert namespaces.path(namespace="ignored", name="x") == "/api/v1/namespaces/x"
    jobsets = await client.resource("jobset.x-k8s.io/v1alpha2", "JobSet")
    assert jobsets.path(namespace="ns", name="j", subresource="status") == (
        "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ns/jobsets/j/status"
    )
    with pytest.raises(errors.NotFound):
        await client.resource("v1", "Nope")


async def test_get_create_update_delete(server: RecordingServer, client: Client) -> None:
    await client.get("v1", "ConfigMap", "a", namespace="ns")
    await client.create(cm(), field_manager="me", dry_run=True)
    await client.update(cm())
    await client.delete(
        "v1",
        "ConfigMap",
        "a",
        namespace="ns",
        propagation_policy="Foreground",
        preconditions={"uid": "u1", "resourceVersion": "7"},
    )
    got = [(r.method, r.path) for r in server.requests]
    assert got == [
        ("GET", "/api/v1/namespaces/ns/configmaps/a"),
        ("POST", "/api/v1/namespaces/ns/configmaps"),
        ("PUT", "/api/v1/namespaces/ns/configmaps/a"),
        ("DELETE", "/api/v1/namespaces/ns/configmaps/a"),
    ]
    assert server.requests[1].query == {"fieldManager": "me", "dryRun": "All"}
    assert server.requests[3].body == {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "propagationPolicy": "Foreground",
        "preconditions": {"uid": "u1", "resourceVersion": "7"},
    }


async def test_patch_types_and_apply(server: RecordingServer, client: Client) -> None:
    await client.patch("v1", "ConfigMap", "a", {"data": {"k": "v"}}, namespace="ns")
    await client.patch(
        "v1", "ConfigMap", "a", [{"op": "remove", "path": "/data/k"}], namespace="ns", patch_type="json"
    )
    await client.apply(cm(), field_manager="bridge", force=True)
    await client.patch_status("jobset.x-k8s.io/v1alpha2", "JobSet", "j", {"status": {}}, namespace="ns")
    await client.update_status({**cm(), "apiVersion": "v1", "kind": "Pod"})
    types = [r.headers["Content-Type"] for r in server.requests]
    assert types == [
        "application/merge-patch+json",
        "application/json-patch+json",
        "application/apply-patch+yaml",
        "application/merge-patch+json",
        "application/json",
    ]
    assert server.requests[2].query == {"fieldManager": "bridge", "force": "true"}
    assert server.requests[2].body == cm()
    assert server.requests[3].path.endswith("/jobsets/j/status")
    assert (server.requests[4].method, server.requests[4].path) == (
        "PUT",
        "/api/v1/namespaces/ns/pods/a/status",
    )


async def test_list_follows_continue_and_sets_kind(server: RecordingServer, client: Client) -> None:
    def route(seen: Seen) -> tuple[int, object]:
        token = seen.query.get("continue")
        items = [{"metadata": {"name": f"{token or 'first'}"}}]
        metadata = {"resourceVersion": "9"} if token else {"resourceVersion": "9", "continue": "next"}
        return 200, {"kind": "ConfigMapList", "metadata": metadata, "items": items}

    server.route = route
    items = await client.list("v1", "ConfigMap", namespace="ns", label_selector="app=x", page_size=1)
    assert [i["metadata"]["name"] for i in items] == ["first", "next"]
    assert all(i["kind"] == "ConfigMap" and i["apiVersion"] == "v1" for i in items)
    assert server.requests[0].query == {"limit": "1", "labelSelector": "app=x"}
    assert server.requests[1].query == {"limit": "1", "labelSelector": "app=x", "continue": "next"}


async def test_errors_are_typed(server: RecordingServer, client: Client) -> None:
    server.route = lambda seen: (
        409,
        {
            "kind": "Status",
            "code": 409,
            "reason": "AlreadyExists",
            "message": 'configmaps "a" already exists',
        },
    )
    with pytest.raises(errors.AlreadyExists) as caught:
        await client.create(cm())
    assert caught.value.message == 'configmaps "a" already exists'
    server.route = lambda seen: (
        404,
        {"kind": "Status", "code": 404, "reason": "NotFound", "message": "gone"},
    )
    with pytest.raises(errors.NotFound):
        await client.get("v1", "ConfigMap", "a", namespace="ns")
    assert await client.delete("v1", "ConfigMap", "a", namespace="ns", missing_ok=True) is None


async def test_namespaced_object_without_namespace_is_refused(client: Client) -> None:
    with pytest.raises(ValueError, match="namespaced"):
        await client.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}})
