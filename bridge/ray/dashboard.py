"""Ray's Job REST API on a shared RayCluster's head, reached through the API server's service proxy.

Why the service proxy: it is how KubeRay itself reaches the dashboard with ``--use-kubernetes-proxy``
(``/api/v1/namespaces/<ns>/services/<head svc>:dashboard/proxy/...``), it needs no cluster DNS and
no network path from the bridge's pod to Ray, and the bridge's RBAC says exactly which it may reach
(``services/proxy``). The bridge only ever reads job status and submits one kind of job.

Why a job to cancel a job: ``ray job stop`` (what KubeRay calls when a RayJob goes) only signals the
job's supervisor actor, and a pending job's supervisor has not been created yet, because it waits
for the very resource the gate asks for; the stop is queued behind it and the job would run the day
its resource appears. Killing the supervisor actor fails the job at once. The Job API cannot kill an
actor, but it can run a small driver on the head that does (:data:`CANCEL_SCRIPT`): ``ray.kill`` of
``_ray_internal_job_actor_<id>`` in Ray's supervisor namespace, the name Ray's JobManager gives it.
The job's id reaches that driver only as an environment variable of its runtime env; the entrypoint
is a constant, so no job field ever reaches the head's shell. The canceller's submission id is
derived from the cancelled job's, so a repeated cancel submits nothing new.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shlex
from collections.abc import Callable
from typing import Any, Final, Protocol

import aiohttp
import structlog

from bridge.runtime.client import Client
from bridge.runtime.errors import error_from_status

__all__ = [
    "CANCEL_ENV",
    "CANCEL_SCRIPT",
    "DirectTransport",
    "RayDashboard",
    "ServiceProxyTransport",
    "Transport",
    "canceller_submission_id",
]

log = structlog.get_logger(__name__)

CANCEL_ENV: Final = "K8S_BRIDGE_CANCEL_JOB_ID"
CANCEL_SCRIPT: Final = """\
import os, ray
job_id = os.environ["K8S_BRIDGE_CANCEL_JOB_ID"]
ray.init(address="auto", log_to_driver=False)
try:
    actor = ray.get_actor("_ray_internal_job_actor_" + job_id, namespace="SUPERVISOR_ACTOR_RAY_NAMESPACE")
except ValueError:
    print("no supervisor of", job_id, "left: nothing to cancel")
else:
    ray.kill(actor, no_restart=True)
    print("cancelled", job_id)
"""
"""The canceller's driver: kill the job's supervisor actor (the job then FAILS), whatever its state."""

_TERMINAL: Final = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
_PORT_NAME: Final = "dashboard"


def canceller_submission_id(job_id: str) -> str:
    """The submission id of the job that cancels ``job_id`` (deterministic: cancel is idempotent)."""
    return "k8s-bridge-cancel-" + hashlib.sha256(job_id.encode()).hexdigest()[:20]


class Transport(Protocol):
    """How a request reaches the dashboard of the head of ``namespace/cluster``: ``(status, body)``."""

    async def __call__(
        self, method: str, *, namespace: str, cluster: str, path: str, body: bytes | None
    ) -> tuple[int, bytes]: ...


class ServiceProxyTransport:
    """Through the API server's service proxy to the head Service's ``dashboard`` port."""

    def __init__(self, client: Client, *, head_service: Callable[[str, str], str]) -> None:
        self._client = client
        self._head_service = head_service

    async def __call__(
        self, method: str, *, namespace: str, cluster: str, path: str, body: bytes | None
    ) -> tuple[int, bytes]:
        service = self._head_service(namespace, cluster)
        proxied = f"/api/v1/namespaces/{namespace}/services/{service}:{_PORT_NAME}/proxy{path}"
        async with self._client.session.request(
            method, proxied, body=body, content_type="application/json" if body is not None else None
        ) as response:
            return response.status, await response.read()


class DirectTransport:
    """Straight to a dashboard URL (``url_of(namespace, cluster)``): a head outside Kubernetes, tests."""

    def __init__(self, url_of: Callable[[str, str], str], *, timeout: float = 30.0) -> None:
        self._url_of = url_of
        self._timeout = aiohttp.ClientTimeout(total=timeout)

    async def __call__(
        self, method: str, *, namespace: str, cluster: str, path: str, body: bytes | None
    ) -> tuple[int, bytes]:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        connector = aiohttp.TCPConnector(force_close=True)
        try:
            async with (
                aiohttp.ClientSession(timeout=self._timeout, connector=connector) as session,
                session.request(
                    method, self._url_of(namespace, cluster) + path, data=body, headers=headers
                ) as response,
            ):
                return response.status, await response.read()
        finally:
            # A closed transport is finalized on the loop's next pass: give it that pass, or a loop that
            # ends right after the call leaves it to the garbage collector (a ResourceWarning).
            await asyncio.sleep(0)


class RayDashboard:
    """The Job REST API of each shared cluster's head, addressed by ``(namespace, cluster)``."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport

    async def _call(self, method: str, namespace: str, cluster: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        status, raw = await self._transport(
            method, namespace=namespace, cluster=cluster, path=path, body=data
        )
        if status == 404:
            return None
        if status >= 400:
            raise error_from_status(status, raw)
        return json.loads(raw) if raw else None

    async def get_job(self, *, namespace: str, cluster: str, job_id: str) -> dict[str, Any] | None:
        """A job's details (``status``, ``entrypoint_resources``...), None when Ray does not know it."""
        found = await self._call("GET", namespace, cluster, f"/api/jobs/{job_id}")
        return found if isinstance(found, dict) else None

    async def list_jobs(self, *, namespace: str, cluster: str) -> list[dict[str, Any]]:
        found = await self._call("GET", namespace, cluster, "/api/jobs/")
        return [job for job in found or () if isinstance(job, dict)]

    async def job_finished(self, *, namespace: str, cluster: str, job_id: str) -> bool:
        job = await self.get_job(namespace=namespace, cluster=cluster, job_id=job_id)
        return job is None or str(job.get("status")) in _TERMINAL

    async def cancel_pending(self, *, namespace: str, cluster: str, job_id: str) -> None:
        """Fail ``job_id`` in Ray if it has not ended; idempotent."""
        if await self.job_finished(namespace=namespace, cluster=cluster, job_id=job_id):
            return
        submission_id = canceller_submission_id(job_id)
        if await self.get_job(namespace=namespace, cluster=cluster, job_id=submission_id) is not None:
            return  # submitted already: it runs once
        body = {
            "entrypoint": "python -c " + shlex.quote(CANCEL_SCRIPT),
            "submission_id": submission_id,
            "runtime_env": {"env_vars": {CANCEL_ENV: job_id}},
            "metadata": {"k8s-bridge.io/cancels": job_id},
        }
        await self._call("POST", namespace, cluster, "/api/jobs/", body)
        log.info("cancelling a pending Ray job", namespace=namespace, cluster=cluster, job_id=job_id)
