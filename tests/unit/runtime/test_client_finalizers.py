"""Finalizer helpers: merge patches that keep others' finalizers and check the resourceVersion."""

from __future__ import annotations

from bridge.runtime.client import Client
from bridge.runtime.finalizers import add_finalizer, has_finalizer, remove_finalizer
from tests.fixtures.recording_apiserver import RecordingServer

F = "bridge.k8s.io/cleanup"


def obj(*finalizers: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "42", "finalizers": list(finalizers)},
    }


async def test_add_keeps_others_and_checks_resource_version(server: RecordingServer, client: Client) -> None:
    await add_finalizer(client, obj("other/one"), F)
    request = server.requests[0]
    assert (request.method, request.path) == ("PATCH", "/api/v1/namespaces/ns/configmaps/a")
    assert request.headers["Content-Type"] == "application/merge-patch+json"
    assert request.body == {"metadata": {"finalizers": ["other/one", F], "resourceVersion": "42"}}


async def test_remove_keeps_others(server: RecordingServer, client: Client) -> None:
    await remove_finalizer(client, obj("other/one", F), F)
    assert server.requests[0].body == {"metadata": {"finalizers": ["other/one"], "resourceVersion": "42"}}


async def test_no_request_when_nothing_to_do(server: RecordingServer, client: Client) -> None:
    original = obj(F)
    assert await add_finalizer(client, original, F) is original
    assert await remove_finalizer(client, obj(), F) is not None
    assert server.requests == []
    assert has_finalizer(original, F)
    assert not has_finalizer(obj(), F)
