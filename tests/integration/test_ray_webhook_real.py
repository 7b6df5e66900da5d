"""The Ray bridge on a real kube-apiserver: the gate webhook registered in a real
MutatingWebhookConfiguration (the API server calls it over TLS, verifying the certificate against the
caBundle), RayJob CREATEs mutated, denied or passed, and the controller making the worker JobSet of a
gated RayJob and letting it go, JobSet and finalizer, when the RayJob is deleted.

The control plane is this module's own, with the KubeRay, JobSet, Kueue and WorkloadMixing CRDs and
no controllers: KubeRay does not run here (nothing is submitted to Ray), so what is checked is what
the API server and the bridge do with the objects.
"""

from __future__ import annotations

import asyncio
import base64
import shutil
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from bridge.admission import JOBSET_API_VERSION, JOBSET_KIND
from bridge.api.mixing import API_VERSION, KIND
from bridge.ray.program import RayBridge, Settings
from bridge.ray.webhook import GATE_PATH
from bridge.runtime.client import Client
from bridge.runtime.errors import ApiError
from bridge.runtime.handlers import Object
from bridge.runtime.session import Session
from bridge.sandbox.build import MissingPrerequisiteError, stack_paths
from bridge.sandbox.kube import ControlPlane
from bridge.sandbox.processes import StackError
from tests.fixtures.mixing import ray_spec, target
from tests.fixtures.ray_objects import raycluster, rayjob
from translators.ray import ANNOTATION_GATE, ANNOTATION_WORKERS, FINALIZER, LABEL_RAY_JOB_UID

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKLOADMIXING_CRDS = REPO_ROOT / "charts" / "k8s-bridge" / "crds"
TIMEOUT = 60.0
NAMESPACE = "team-a"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    control_plane = ControlPlane(workdir=tmp_path_factory.mktemp("ray-webhook-kube"))
    try:
        control_plane.start()
        crds = stack_paths().crds
        control_plane.install_crds(WORKLOADMIXING_CRDS, crds["kueue"], crds["jobset"], crds["kuberay"])
    except (MissingPrerequisiteError, StackError) as failed:
        pytest.fail(f"the control plane with its CRDs did not start: {failed}", pytrace=False)
    try:
        yield control_plane
    finally:
        control_plane.stop()


async def _eventually(check: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
async def bridge(plane: ControlPlane, tmp_path: Path) -> AsyncIterator[tuple[Client, RayBridge]]:
    """The namespace's objects, the bridge running in-process with its webhook, the webhook registered."""
    certs = plane.certificates
    cert_dir = tmp_path / "certs"
    cert_dir.mkdir()
    shutil.copy(certs.serving_cert, cert_dir / "tls.crt")
    shutil.copy(certs.serving_key, cert_dir / "tls.key")
    port = _free_port()
    mixing = f"site-{uuid.uuid4().hex[:6]}"
    async with await Session.load(config_file=plane.kubeconfig) as session:
        client = Client(session)
        await client.apply(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}, field_manager="t"
        )
        await client.apply(
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
             "metadata": {"name": "ray", "namespace": NAMESPACE}, "spec": {"clusterQueue": "pool"}},
            field_manager="t",
        )  # fmt: skip
        await client.apply(raycluster(), field_manager="t")
        await client.apply(raycluster(name="private", labels={"bridge": "no"}), field_manager="t")
        spec = {
            "ray": ray_spec(
                clusterSelector={"matchLabels": {"bridge": "yes"}}, mapping={"default": target("ray")}
            )
        }
        await client.create(
            {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": mixing}, "spec": spec}
        )
        settings = Settings(
            config=mixing,
            kubeconfig=str(plane.kubeconfig),
            metrics_bind_address="0",
            health_probe_bind_address="0",
            webhook_bind_address=f"127.0.0.1:{port}",
            webhook_cert_dir=str(cert_dir),
        )
        program = RayBridge(settings, registry=CollectorRegistry(), handle_signals=False)
        task = asyncio.create_task(program.run())
        webhook_name = f"ray-bridge-{mixing}"
        try:
            await _eventually(lambda: _configured(program), "the configuration to be published")
            await client.create(
                _webhook_configuration(webhook_name, port=port, ca=certs.ca_cert.read_bytes())
            )
            await _eventually(lambda: _webhook_answers(client), "the API server to call the webhook")
            yield client, program
        finally:
            program.stop()
            await asyncio.wait_for(task, timeout=TIMEOUT)
            await client.delete(
                "admissionregistration.k8s.io/v1",
                "MutatingWebhookConfiguration",
                webhook_name,
                missing_ok=True,
            )
            await client.delete(API_VERSION, KIND, mixing, missing_ok=True)


async def _configured(program: RayBridge) -> bool:
    return program.live.current is not None and program.webhook is not None


def _webhook_configuration(name: str, *, port: int, ca: bytes) -> Object:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": "gate.ray.k8s-bridge.io",
                "clientConfig": {
                    "url": f"https://127.0.0.1:{port}{GATE_PATH}",
                    "caBundle": base64.b64encode(ca).decode(),
                },
                "rules": [
                    {
                        "apiGroups": ["ray.io"],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["rayjobs"],
                    }
                ],
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 10,
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}},
            }
        ],
    }


async def _webhook_answers(client: Client) -> bool:
    """A dry-run CREATE goes through admission: mutated means the webhook is called."""
    try:
        created = await client.create(rayjob(name=f"probe-{uuid.uuid4().hex[:6]}", uid=None), dry_run=True)
    except ApiError:
        return False
    return ANNOTATION_GATE in (created["metadata"].get("annotations") or {})


def _new(**fields: Any) -> Object:
    return rayjob(name=f"job-{uuid.uuid4().hex[:8]}", uid=None, **fields)


async def test_a_rayjob_of_a_selected_cluster_is_gated_at_creation(bridge: tuple[Client, RayBridge]) -> None:
    client, _ = bridge
    created = await client.create(_new())
    gate = created["metadata"]["annotations"][ANNOTATION_GATE]
    assert gate.startswith("k8s-bridge-")
    assert f'"{gate}"' in created["spec"]["entrypointResources"]
    assert FINALIZER in created["metadata"]["finalizers"]


async def test_a_rayjob_of_another_cluster_passes_untouched(bridge: tuple[Client, RayBridge]) -> None:
    client, _ = bridge
    created = await client.create(_new(clusterSelector={"ray.io/cluster": "private"}))
    assert ANNOTATION_GATE not in (created["metadata"].get("annotations") or {})
    assert "entrypointResources" not in created["spec"]


async def test_a_rayjob_asking_for_too_many_workers_is_denied_with_what_to_change(
    bridge: tuple[Client, RayBridge],
) -> None:
    client, _ = bridge
    with pytest.raises(ApiError) as denied:
        await client.create(rayjob(name="too-big", uid=None, annotations={ANNOTATION_WORKERS: "100000"}))
    assert "workers" in str(denied.value).lower()


async def test_the_controller_makes_the_jobset_and_lets_everything_go_on_delete(
    bridge: tuple[Client, RayBridge],
) -> None:
    client, _ = bridge
    created = await client.create(_new())
    name, uid = created["metadata"]["name"], created["metadata"]["uid"]

    async def jobsets() -> list[Object]:
        return await client.list(
            JOBSET_API_VERSION, JOBSET_KIND, namespace=NAMESPACE, label_selector=f"{LABEL_RAY_JOB_UID}={uid}"
        )

    async def one_jobset() -> bool:
        found = await jobsets()
        return len(found) == 1 and found[0]["spec"]["suspend"] is True

    await _eventually(one_jobset, "the suspended worker JobSet")
    await client.delete("ray.io/v1", "RayJob", name, namespace=NAMESPACE)

    async def all_gone() -> bool:
        try:
            await client.get("ray.io/v1", "RayJob", name, namespace=NAMESPACE)
        except ApiError:
            return not [js for js in await jobsets() if not js["metadata"].get("deletionTimestamp")]
        return False

    await _eventually(all_gone, "the RayJob released and its JobSet deleted")
