"""RayClusters and RayJobs on the local stack, run by the real KubeRay operator and the process runner.

Why this module: the Ray bridge works on RayJobs that KubeRay submits to a shared RayCluster
(``spec.clusterSelector``), so the tests and the sandbox need such a cluster for real: KubeRay
(:class:`~bridge.sandbox.controllers.Controllers` with ``"kuberay"``) makes the head pod and its
Service, the process runner (:mod:`bridge.sandbox.runner`) runs the pod's generated
``/bin/bash -c -- 'ulimit ...; ray start --head ...'`` (``-lc`` with KubeRay's ``ENABLE_LOGIN_SHELL``)
in a network namespace of its own, and
KubeRay reaches the head's dashboard through the API server's service proxy. What this module adds
is only what every user of that set-up writes the same way: the manifests (as a user would write
them, nothing the runner needs in particular, apart from a node selector and toleration that steer
the head onto runner nodes) and waits on their status. Each wait polls the API on a condition with a
generous timeout, never a fixed sleep, and fails naming what it waited for and how things stood.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bridge.sandbox.build import load_versions
from bridge.sandbox.kube import ApiError, RestClient
from bridge.sandbox.processes import StackError

__all__ = [
    "RAY_API",
    "RAY_IMAGE",
    "RAY_VERSION",
    "TERMINAL_JOB_STATUSES",
    "head_service",
    "head_service_fqdn",
    "ray_cluster_manifest",
    "ray_job_manifest",
    "ray_job_status",
    "wait_head_ready",
    "wait_job_status",
]

RAY_API = "/apis/ray.io/v1"
RAY_VERSION = str(load_versions()["ray"]["version"])
RAY_IMAGE = f"rayproject/ray:{RAY_VERSION}"
"""What a user would put in the pod template; the process runner ignores images (the host's ``ray``
CLI from the pinned PyPI package runs instead)."""
TERMINAL_JOB_STATUSES = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})


def ray_cluster_manifest(
    name: str,
    *,
    namespace: str,
    num_cpus: int = 1,
    memory: str = "2Gi",
    object_store_memory: int = 100 * 1024 * 1024,
    job_start_timeout: int = 7 * 24 * 3600,
    node_selector: Mapping[str, str] | None = None,
    tolerations: Sequence[Mapping[str, str]] = (),
    pod_annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A RayCluster with a head and no worker groups: the shape of a cluster shared by selector RayJobs.

    ``RAY_JOB_START_TIMEOUT_SECONDS`` is raised in the head's environment (Ray fails a job pending
    longer than that, 900 s by default, and a job waiting for Kueue can wait longer); ``num_cpus``
    and ``object_store_memory`` go into ``rayStartParams`` as a user would write them.
    """
    resources = {"cpu": str(num_cpus), "memory": memory}
    pod_spec: dict[str, Any] = {
        "containers": [
            {
                "name": "ray-head",
                "image": RAY_IMAGE,
                "env": [
                    {"name": "RAY_JOB_START_TIMEOUT_SECONDS", "value": str(job_start_timeout)},
                    {"name": "RAY_USAGE_STATS_ENABLED", "value": "0"},
                ],
                "ports": [
                    {"containerPort": 6379, "name": "gcs-server"},
                    {"containerPort": 8265, "name": "dashboard"},
                    {"containerPort": 10001, "name": "client"},
                ],
                "resources": {"requests": dict(resources), "limits": dict(resources)},
            }
        ],
    }
    if node_selector:
        pod_spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        pod_spec["tolerations"] = [dict(toleration) for toleration in tolerations]
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "rayVersion": RAY_VERSION,
            "headGroupSpec": {
                "rayStartParams": {
                    "num-cpus": str(num_cpus),
                    "object-store-memory": str(object_store_memory),
                },
                "template": {
                    **({"metadata": {"annotations": dict(pod_annotations)}} if pod_annotations else {}),
                    "spec": pod_spec,
                },
            },
        },
    }


def ray_job_manifest(
    name: str,
    *,
    namespace: str,
    cluster: str,
    entrypoint: str,
    entrypoint_resources: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """A RayJob that KubeRay submits over HTTP (``HTTPMode``) to the existing RayCluster ``cluster``.

    ``entrypoint_resources`` become ``spec.entrypointResources`` (a JSON string, as the CRD wants):
    Ray holds the job PENDING until a node offering them joins, the gate the Ray bridge relies on.
    """
    spec: dict[str, Any] = {
        "clusterSelector": {"ray.io/cluster": cluster},
        "submissionMode": "HTTPMode",
        "entrypoint": entrypoint,
    }
    if entrypoint_resources:
        spec["entrypointResources"] = json.dumps(dict(entrypoint_resources))
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def _wait(
    probe: Callable[[], Any], *, timeout: float, what: str, describe: Callable[[], str], interval: float = 0.5
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found:
            return found
        if time.monotonic() > deadline:
            raise StackError(f"timed out after {timeout:.0f}s waiting for {what}; {describe()}")
        time.sleep(interval)


def _get(client: RestClient, path: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = client.get(path)
    except ApiError as error:
        if error.status == 404:
            return None
        raise
    return found


def wait_head_ready(
    client: RestClient, *, namespace: str, name: str, timeout: float = 300.0
) -> dict[str, Any]:
    """Wait until KubeRay reports the RayCluster ``ready`` with its head pod Ready; return the cluster."""
    path = f"{RAY_API}/namespaces/{namespace}/rayclusters/{name}"

    def ready() -> dict[str, Any] | None:
        cluster = _get(client, path)
        status = (cluster or {}).get("status") or {}
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        if status.get("state") == "ready" and conditions.get("HeadPodReady") == "True":
            return cluster
        return None

    found: dict[str, Any] = _wait(
        ready,
        timeout=timeout,
        what=f"RayCluster {namespace}/{name} to be ready",
        describe=lambda: f"status: {((_get(client, path) or {}).get('status'))}",
    )
    return found


def head_service(cluster: Mapping[str, Any]) -> str:
    """The name of a RayCluster's head Service, as KubeRay reports it (``<cluster>-head-svc``)."""
    status = cluster.get("status") or {}
    return str((status.get("head") or {}).get("serviceName") or f"{cluster['metadata']['name']}-head-svc")


def head_service_fqdn(cluster: Mapping[str, Any], *, cluster_domain: str = "cluster.local") -> str:
    """``<head svc>.<namespace>.svc.<domain>``: the address Ray workers join (the runner's hosts files
    resolve it to the head pod's IP)."""
    return f"{head_service(cluster)}.{cluster['metadata']['namespace']}.svc.{cluster_domain}"


def ray_job_status(client: RestClient, *, namespace: str, name: str) -> dict[str, Any]:
    """A RayJob's ``status`` now (empty while KubeRay has not written one)."""
    job = _get(client, f"{RAY_API}/namespaces/{namespace}/rayjobs/{name}") or {}
    status: dict[str, Any] = job.get("status") or {}
    return status


def wait_job_status(
    client: RestClient, *, namespace: str, name: str, statuses: frozenset[str], timeout: float = 300.0
) -> dict[str, Any]:
    """Wait until the RayJob's ``status.jobStatus`` (Ray's own job state) is one of ``statuses``."""

    def reached() -> dict[str, Any] | None:
        status = ray_job_status(client, namespace=namespace, name=name)
        return status if status.get("jobStatus") in statuses else None

    found: dict[str, Any] = _wait(
        reached,
        timeout=timeout,
        what=f"RayJob {namespace}/{name} to reach {sorted(statuses)}",
        describe=lambda: f"status: {ray_job_status(client, namespace=namespace, name=name)}",
    )
    return found
