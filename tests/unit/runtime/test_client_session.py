"""Sessions built from kubernetes-asyncio's configuration: base URL, bearer tokens, refresh, 401 retry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from kubernetes_asyncio.client import Configuration
from prometheus_client import CollectorRegistry

from bridge.runtime.client import Client
from bridge.runtime.discovery import Resource
from bridge.runtime.errors import NotFound
from bridge.runtime.session import Session
from tests.fixtures.recording_apiserver import RecordingServer, Seen

CONFIGMAPS = Resource(group="", version="v1", plural="configmaps", kind="ConfigMap", namespaced=True)


def client_for(session: Session) -> Client:
    client = Client(session)
    client.discovery.register(CONFIGMAPS)  # no discovery request: each request below is counted
    return client


async def test_kubeconfig_with_token(server: RecordingServer, tmp_path: Path) -> None:
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server.base_url}}],
        "users": [{"name": "u", "user": {"token": "s3cret-token"}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig))
    async with await Session.load(config_file=path) as session:
        assert session.base_url == server.base_url
        assert "s3cret" not in repr(session)
        await Client(session).get("v1", "ConfigMap", "a", namespace="ns")
    assert server.requests[0].headers["Authorization"] == "Bearer s3cret-token"


async def test_refresh_hook_runs_before_each_request(server: RecordingServer) -> None:
    tokens = iter(["Bearer one", "Bearer two"])

    def refresh(configuration: Any) -> None:
        configuration.api_key["BearerToken"] = next(tokens)

    configuration = Configuration(host=server.base_url)
    configuration.refresh_api_key_hook = refresh
    async with Session.from_configuration(configuration) as session:
        client = client_for(session)
        await client.get("v1", "ConfigMap", "a", namespace="ns")
        await client.get("v1", "ConfigMap", "a", namespace="ns")
    assert [r.headers["Authorization"] for r in server.requests] == ["Bearer one", "Bearer two"]


async def test_unauthorized_is_retried_once_with_fresh_credentials(server: RecordingServer) -> None:
    calls = 0

    def refresh(configuration: Any) -> None:
        nonlocal calls
        calls += 1
        configuration.api_key["BearerToken"] = f"Bearer t{calls}"

    def route(seen: Seen) -> tuple[int, object]:
        if seen.headers["Authorization"] == "Bearer t1":
            return 401, {"kind": "Status", "code": 401, "reason": "Unauthorized"}
        return 200, {"kind": "ConfigMap"}

    server.route = route
    configuration = Configuration(host=server.base_url)
    configuration.refresh_api_key_hook = refresh
    async with Session.from_configuration(configuration) as session:
        assert await client_for(session).get("v1", "ConfigMap", "a", namespace="ns") == {"kind": "ConfigMap"}
    assert [r.headers["Authorization"] for r in server.requests] == ["Bearer t1", "Bearer t2"]


async def test_basic_auth(server: RecordingServer) -> None:
    configuration = Configuration(host=server.base_url, username="admin", password="pw")
    async with Session.from_configuration(configuration) as session:
        await Client(session).get("v1", "ConfigMap", "a", namespace="ns")
    assert server.requests[0].headers["Authorization"].startswith("Basic ")


async def test_every_request_is_counted_by_code_method_and_host_as_client_go_does(
    server: RecordingServer,
) -> None:
    def route(seen: Seen) -> tuple[int, object]:
        if seen.path.endswith("/missing"):
            return 404, {"kind": "Status", "code": 404, "reason": "NotFound"}
        return 200, {"kind": "ConfigMap"}

    server.route = route
    registry = CollectorRegistry()
    host = server.base_url.removeprefix("http://")
    async with Session(base_url=server.base_url, registry=registry) as session:
        client = client_for(session)
        await client.get("v1", "ConfigMap", "a", namespace="ns")
        await client.get("v1", "ConfigMap", "b", namespace="ns")
        with pytest.raises(NotFound):
            await client.get("v1", "ConfigMap", "missing", namespace="ns")
    async with Session(base_url="http://127.0.0.1:9", registry=registry) as session:
        with pytest.raises(aiohttp.ClientError):
            async with session.request("GET", "/api"):
                pass

    def requests(code: str, host: str) -> float | None:
        labels = {"code": code, "method": "GET", "host": host}
        return registry.get_sample_value("rest_client_requests_total", labels)

    assert requests("200", host) == 2
    assert requests("404", host) == 1
    assert requests("<error>", "127.0.0.1:9") == 1
    duration = "rest_client_request_duration_seconds_count"
    assert registry.get_sample_value(duration, {"verb": "GET", "host": host}) == 3
