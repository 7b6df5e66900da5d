"""What a pod needs to find the API server from inside, as kubelet and cluster DNS would give it.

Why: a bridge installed by its Helm chart runs with in-cluster configuration: it reads
``KUBERNETES_SERVICE_HOST`` / ``KUBERNETES_SERVICE_PORT`` and the ServiceAccount files, and connects to
``https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT``. Kubelet sets those variables to the
``kubernetes`` Service's ClusterIP; without kube-proxy a ClusterIP leads nowhere, so the process
runner names the API server instead (``kubernetes.default.svc``, a name its serving certificate
carries) and maps that name, in the pod's ``/etc/hosts``, to an address of the host the pod can
reach: its own gateway (the host's end of its veth pair), where a kube-apiserver bound to every
address (``--bind-address=0.0.0.0``, :mod:`bridge.sandbox.kube`) answers. The port is the API
server's own (no Service port translation either).

:data:`HOST_ALIAS` is the same idea for any other daemon of the stack on the host (slurmrestd): a
name that, inside a runner pod, is the host as the pod reaches it.

Pure functions: no I/O.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from dataclasses import dataclass

__all__ = [
    "API_SERVER_HOST",
    "HOST_ALIAS",
    "ApiServerAddress",
    "api_server_address",
    "api_server_hosts",
    "in_cluster_env",
]

API_SERVER_HOST = "kubernetes.default.svc"
"""The pods' ``KUBERNETES_SERVICE_HOST``: a name (the stack's serving certificate carries it)."""

HOST_ALIAS = "host.k8s-bridge.internal"
"""In a runner pod's hosts file: the host, at the pod's gateway (for daemons of the stack on the host)."""


@dataclass(frozen=True)
class ApiServerAddress:
    """Where pods reach the API server: ``ip`` (None: the pod's own gateway) and ``port``."""

    ip: str | None
    port: int


def api_server_address(server: str) -> ApiServerAddress | None:
    """From the runner's own API server URL (``https://127.0.0.1:6443``): the address pods use.

    A loopback server is reached at each pod's gateway (the host; the server must listen on every
    address); a server at another IP address at that address; a server known only by a name, or
    not over https, gives None (no in-cluster configuration for the pods).
    """
    url = urllib.parse.urlsplit(server)
    if url.scheme != "https" or not url.hostname:
        return None
    port = url.port or 443
    if url.hostname == "localhost":
        return ApiServerAddress(ip=None, port=port)
    try:
        address = ipaddress.ip_address(url.hostname)
    except ValueError:
        return None
    if address.is_loopback:
        return ApiServerAddress(ip=None, port=port)
    return ApiServerAddress(ip=str(address), port=port) if address.version == 4 else None


def in_cluster_env(port: int) -> dict[str, str]:
    """The variables kubelet gives every container for the ``kubernetes`` Service (host, port)."""
    return {
        "KUBERNETES_SERVICE_HOST": API_SERVER_HOST,
        "KUBERNETES_SERVICE_PORT": str(port),
        "KUBERNETES_SERVICE_PORT_HTTPS": str(port),
        "KUBERNETES_PORT": f"tcp://{API_SERVER_HOST}:{port}",
        f"KUBERNETES_PORT_{port}_TCP": f"tcp://{API_SERVER_HOST}:{port}",
        f"KUBERNETES_PORT_{port}_TCP_PROTO": "tcp",
        f"KUBERNETES_PORT_{port}_TCP_PORT": str(port),
        f"KUBERNETES_PORT_{port}_TCP_ADDR": API_SERVER_HOST,
    }


def api_server_hosts(
    *, address: ApiServerAddress, gateway: str, namespace: str, cluster_domain: str = "cluster.local"
) -> list[tuple[str, list[str]]]:
    """Hosts entries for a pod in ``namespace``: the ``kubernetes`` Service's names (``kubernetes``
    alone only in ``default``, as the DNS search path would find it) and :data:`HOST_ALIAS`, at the
    API server's address (``gateway`` when it is the host)."""
    names = [f"kubernetes.default.svc.{cluster_domain}", "kubernetes.default.svc", "kubernetes.default"]
    if namespace == "default":
        names.append("kubernetes")
    return [(address.ip or gateway, names), (gateway, [HOST_ALIAS])]
