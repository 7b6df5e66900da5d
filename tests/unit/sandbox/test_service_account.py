"""ServiceAccount tokens and in-cluster configuration for runner pods: the pure parts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bridge.sandbox.in_cluster import (
    HOST_ALIAS,
    ApiServerAddress,
    api_server_address,
    api_server_hosts,
    in_cluster_env,
)
from bridge.sandbox.service_account import IssuedToken, refresh_at, token_request, token_request_path

POD = {
    "metadata": {"name": "bridge-0", "namespace": "team-a", "uid": "u-1"},
    "spec": {"serviceAccountName": "k8s-bridge"},
}
EXPIRES = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def test_the_token_request_is_bound_to_the_pod_with_the_sources_lifetime() -> None:
    body = token_request(POD, {"path": "token", "expirationSeconds": 3607})
    assert body["spec"] == {
        "expirationSeconds": 3607,
        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "bridge-0", "uid": "u-1"},
    }
    assert "audiences" not in body["spec"], "no audience: the API server's own"
    assert token_request_path(POD) == "/api/v1/namespaces/team-a/serviceaccounts/k8s-bridge/token"


def test_a_token_request_names_the_sources_audience_and_defaults_its_lifetime() -> None:
    body = token_request(POD, {"path": "token", "audience": "vault"})
    assert body["spec"]["audiences"] == ["vault"]
    assert body["spec"]["expirationSeconds"] == 3607
    default_account = {**POD, "spec": {}}
    assert token_request_path(default_account).endswith("/serviceaccounts/default/token")


@pytest.mark.parametrize(
    ("seconds", "due_before_expiry"),
    [
        (3607, timedelta(seconds=3607 * 0.2)),  # refreshed at 80% of its life
        (600, timedelta(seconds=120)),
        (7 * 24 * 3600, timedelta(days=7) - timedelta(hours=24)),  # a long one: 24 hours after issue
    ],
)
def test_a_token_is_refreshed_at_80_percent_of_its_life_or_after_a_day(
    seconds: int, due_before_expiry: timedelta
) -> None:
    token = IssuedToken(token="t", expiration=EXPIRES, expiration_seconds=seconds)
    assert refresh_at(token) == EXPIRES - due_before_expiry
    assert refresh_at(token, jitter=5.0) == EXPIRES - due_before_expiry - timedelta(seconds=5)


def test_an_issued_token_never_shows_itself() -> None:
    assert "secret-jwt" not in repr(
        IssuedToken(token="secret-jwt", expiration=EXPIRES, expiration_seconds=60)
    )


@pytest.mark.parametrize(
    ("server", "expected"),
    [
        ("https://127.0.0.1:40123", ApiServerAddress(ip=None, port=40123)),
        ("https://localhost:6443", ApiServerAddress(ip=None, port=6443)),
        ("https://10.1.2.3:6443", ApiServerAddress(ip="10.1.2.3", port=6443)),
        ("https://api.example.org:6443", None),
        ("http://127.0.0.1:8080", None),
    ],
)
def test_pods_reach_a_loopback_api_server_at_their_gateway(
    server: str, expected: ApiServerAddress | None
) -> None:
    assert api_server_address(server) == expected


def test_every_pod_gets_the_kubernetes_service_variables() -> None:
    env = in_cluster_env(40123)
    assert env["KUBERNETES_SERVICE_HOST"] == "kubernetes.default.svc"
    assert env["KUBERNETES_SERVICE_PORT"] == "40123"
    assert env["KUBERNETES_PORT"] == "tcp://kubernetes.default.svc:40123"


def test_the_api_servers_names_map_to_the_gateway_and_kubernetes_alone_only_in_default() -> None:
    address = ApiServerAddress(ip=None, port=1)
    hosts = api_server_hosts(address=address, gateway="10.213.0.1", namespace="team-a")
    assert hosts == [
        (
            "10.213.0.1",
            ["kubernetes.default.svc.cluster.local", "kubernetes.default.svc", "kubernetes.default"],
        ),
        ("10.213.0.1", [HOST_ALIAS]),
    ]
    in_default = api_server_hosts(address=address, gateway="10.213.0.1", namespace="default")
    assert "kubernetes" in in_default[0][1]
    elsewhere = api_server_hosts(address=ApiServerAddress(ip="10.1.2.3", port=1), gateway="g", namespace="x")
    assert elsewhere[0][0] == "10.1.2.3"
    assert elsewhere[1] == ("g", [HOST_ALIAS])
