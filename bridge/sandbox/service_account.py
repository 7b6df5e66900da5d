"""ServiceAccount tokens for runner pods, requested and refreshed as kubelet does.

Why: a pod's in-cluster identity is a token bound to the pod. The ServiceAccount admission plugin
gives every pod that does not opt out (``automountServiceAccountToken: false``) a projected volume
``kube-api-access-<random>`` with a ``serviceAccountToken`` source (``path: token``,
``expirationSeconds: 3607``), the ``kube-root-ca.crt`` ConfigMap's ``ca.crt`` and the namespace from
the downward API, mounted at ``/var/run/secrets/kubernetes.io/serviceaccount``. Kubelet fills the
token through the TokenRequest API (``serviceaccounts/<name>/token``, bound to the pod by name and
uid, so the API server stops accepting it once the pod is gone; audience the source's, or the API
server's own when it names none) and requests a new one before 80% of its lifetime has passed (or
after 24 hours), writing it with the volume's atomic ``..data`` swap. The runner does the same: this
module builds the request and decides when to refresh (pure), and sends the request.

With ``expirationSeconds: 3607`` and the API server's ``--service-account-extend-token-expiration``
(on by default) the token itself is valid for a year, while its status says 3607 s: kubelet, and
so the runner, refresh by the status, as for any other lifetime.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from bridge.runtime import Client
from bridge.runtime.errors import error_from_status

__all__ = [
    "DEFAULT_EXPIRATION_SECONDS",
    "IssuedToken",
    "refresh_at",
    "request_token",
    "token_request",
    "token_request_path",
]

DEFAULT_EXPIRATION_SECONDS = 3607
"""A ``serviceAccountToken`` source without ``expirationSeconds`` gets what admission writes (3607)."""

MAX_TOKEN_AGE = timedelta(hours=24)
"""Kubelet refreshes a token at the latest after this long, whatever its lifetime."""

MAX_JITTER = 10.0
"""Seconds, at most, a refresh is brought forward by (kubelet's jitter: pods do not refresh at once)."""


@dataclass(frozen=True)
class IssuedToken:
    """A token as the TokenRequest API answered: the JWT, its lifetime and when the status says it ends."""

    token: str
    expiration: datetime
    expiration_seconds: int

    def __repr__(self) -> str:  # never the token itself
        return f"IssuedToken(expiration={self.expiration.isoformat()}, seconds={self.expiration_seconds})"


def token_request(pod: Mapping[str, Any], source: Mapping[str, Any]) -> dict[str, Any]:
    """The TokenRequest body kubelet sends for one ``serviceAccountToken`` projected source."""
    metadata = pod["metadata"]
    spec: dict[str, Any] = {
        "expirationSeconds": int(source.get("expirationSeconds") or DEFAULT_EXPIRATION_SECONDS),
        "boundObjectRef": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": metadata["name"],
            "uid": metadata["uid"],
        },
    }
    if source.get("audience"):
        spec["audiences"] = [str(source["audience"])]
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}


def token_request_path(pod: Mapping[str, Any]) -> str:
    """``/api/v1/namespaces/<ns>/serviceaccounts/<name>/token`` for the pod's ServiceAccount."""
    namespace = pod["metadata"]["namespace"]
    account = pod.get("spec", {}).get("serviceAccountName") or "default"
    return f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token"


def refresh_at(token: IssuedToken, *, jitter: float = 0.0) -> datetime:
    """When to request a new token: 20% of its lifetime before it ends, or 24 hours after it was
    issued if that comes first, ``jitter`` seconds earlier (kubelet's ``requiresRefresh``)."""
    lifetime = timedelta(seconds=token.expiration_seconds)
    issued = token.expiration - lifetime
    due = min(token.expiration - lifetime * 0.2, issued + MAX_TOKEN_AGE)
    return due - timedelta(seconds=jitter)


def _parse_time(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


async def request_token(
    client: Client, pod: Mapping[str, Any], source: Mapping[str, Any], *, rng: random.Random | None = None
) -> tuple[IssuedToken, datetime]:
    """Ask the API server for the pod's token for ``source``; the token and when to refresh it.

    Raises the runtime's :class:`~bridge.runtime.ApiError` subclasses (the pod or its ServiceAccount
    may be gone, or not there yet).
    """
    body = json.dumps(token_request(pod, source)).encode()
    async with client.session.request(
        "POST", token_request_path(pod), body=body, content_type="application/json"
    ) as response:
        raw = await response.read()
        if response.status >= 400:
            raise error_from_status(response.status, raw)
    answer = json.loads(raw)
    issued = IssuedToken(
        token=answer["status"]["token"],
        expiration=_parse_time(answer["status"]["expirationTimestamp"]),
        expiration_seconds=int(answer["spec"]["expirationSeconds"]),
    )
    jitter = (rng or random.Random()).uniform(0.0, MAX_JITTER)  # noqa: S311 - jitter, not secrets
    return issued, refresh_at(issued, jitter=jitter)
