"""The images run: their programs' ``--help``, as nobody, and each bridge ready against the real stack.

The stack tests start each image with ``--network=host`` against the session's Kubernetes stack and
a real Slurm 22.05 cluster (slurmctld, slurmrestd with JWT), wired by
:class:`~bridge.sandbox.e2e.E2EStack` as a site wires it (the WorkloadMixing, the JWT Secret, Kueue
objects); the bridge inside must turn ready (``/readyz``), which the Slurm bridge only does once
its sources have read slurmrestd. The image's ``scontrol`` (the fallback's) answers the same
slurmctld with the JWT and the cluster's slurm.conf mounted.
"""

from __future__ import annotations

import base64
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from bridge.sandbox.e2e import E2ESettings, E2EStack, local_queue_object, priority_class_object
from bridge.sandbox.processes import StackError, free_port
from bridge.sandbox.slurm import SlurmCluster
from bridge.sandbox.stack import KubeStack
from tests.fixtures.images import Built, Podman
from tests.fixtures.slurm import started_cluster

READY_TIMEOUT = 240.0
NAMES = ["k8s-bridge", "ray-bridge"]


@pytest.mark.parametrize("name", NAMES)
def test_help_runs_as_nobody(built_images: dict[str, Built], podman: Podman, name: str) -> None:
    image = built_images[name]
    helped = podman.run(image, "--help")
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("usage:")
    assert "--kubeconfig" in helped.stdout
    assert "--config" in helped.stdout
    who = podman.run(image, "-u", entrypoint="id")
    assert who.returncode == 0, who.stderr
    assert who.stdout.strip() == "65534"
    # The root filesystem can be read-only, as the chart mounts it: the program still starts.
    read_only = podman.run(image, "--help", options=["--read-only"])
    assert read_only.returncode == 0, read_only.stderr


@pytest.fixture(scope="module")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """Slurm 22.05, the release of the image's own scontrol."""
    yield from started_cluster(SlurmCluster(version="22.05"))


@pytest.fixture(scope="module")
def site(
    kube_stack: KubeStack, slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[E2EStack]:
    stack = E2EStack(
        kube=kube_stack,
        slurm=slurm_cluster,
        workdir=tmp_path_factory.mktemp("images-site"),
        settings=E2ESettings(pool="images", runner_nodes=1, kwok_nodes=1),
    )
    try:
        stack.start()
    except StackError as failed:
        pytest.fail(f"the stack did not start: {failed}", pytrace=False)
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture
def mounts(site: E2EStack, tmp_path: Path) -> Path:
    """A folder of files the container's nobody may read: a self-contained admin kubeconfig, the
    cluster's slurm.conf, the webhook serving pair (only ever made for a test's own stack)."""
    folder = tmp_path / "mounts"
    folder.mkdir()
    certs = site.kube.control_plane.certificates

    def data(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "stack",
                "cluster": {
                    "server": site.kube.control_plane.server,
                    "certificate-authority-data": data(certs.ca_cert),
                },
            }
        ],
        "users": [
            {
                "name": "admin",
                "user": {
                    "client-certificate-data": data(certs.admin_cert),
                    "client-key-data": data(certs.admin_key),
                },
            }
        ],
        "contexts": [{"name": "stack", "context": {"cluster": "stack", "user": "admin"}}],
        "current-context": "stack",
    }
    (folder / "kubeconfig").write_text(yaml.safe_dump(kubeconfig))
    shutil.copyfile(site.slurm.host_path(site.slurm.conf_path), folder / "slurm.conf")
    shutil.copyfile(certs.serving_cert, folder / "tls.crt")
    shutil.copyfile(certs.serving_key, folder / "tls.key")
    folder.chmod(0o755)
    for path in folder.iterdir():
        path.chmod(0o644)
    return folder


def _wait_ready(podman: Podman, container: str, port: int) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    last = ""
    while time.monotonic() < deadline:
        state = podman("inspect", "--format", "{{.State.Status}}", container, check=False).stdout.strip()
        if state not in ("running", "created", "configured"):
            break
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError) as error:
            last = str(error)
        time.sleep(1)
    logs = podman("logs", container, check=False)
    pytest.fail(
        f"{container} never became ready ({last}); state {state!r}; "
        f"logs:\n{(logs.stdout + logs.stderr)[-4000:]}"
    )


def _bridge_options(mounts: Path, *extra: str) -> list[str]:
    return [
        "--network=host",
        "--read-only",
        "--tmpfs", "/tmp",
        "--cap-drop=all",
        "--security-opt=no-new-privileges",
        "-v", f"{mounts}:/etc/k8s-bridge:ro",
        *extra,
    ]  # fmt: skip


def test_the_slurm_image_becomes_ready_against_slurmrestd(
    built_images: dict[str, Built], podman: Podman, site: E2EStack, mounts: Path
) -> None:
    health = free_port()
    container = podman.start(
        built_images["k8s-bridge"],
        "--kubeconfig", "/etc/k8s-bridge/kubeconfig",
        "--config", site.mixing_name,
        "--metrics-bind-address", f"127.0.0.1:{free_port()}",
        "--health-probe-bind-address", f"127.0.0.1:{health}",
        name=f"images-slurm-{health}",
        options=_bridge_options(mounts, "-e", "SLURM_CONF=/etc/k8s-bridge/slurm.conf"),
    )  # fmt: skip
    try:
        _wait_ready(podman, container, health)
    finally:
        podman.remove(container)


def test_the_slurm_image_scontrol_talks_to_slurmctld(
    built_images: dict[str, Built], podman: Podman, site: E2EStack, mounts: Path
) -> None:
    token = site.slurm.token(lifespan=600)
    options = [
        "--network=host",
        "-v",
        f"{mounts}:/etc/k8s-bridge:ro",
        "-e",
        "SLURM_CONF=/etc/k8s-bridge/slurm.conf",
    ]
    version = podman.run(built_images["k8s-bridge"], "--version", entrypoint="scontrol", options=options)
    assert version.returncode == 0, version.stderr
    assert version.stdout.split() == ["slurm-wlm", site.slurm.package_version]
    ping = podman.run(
        built_images["k8s-bridge"],
        "ping",
        entrypoint="scontrol",
        options=[*options, "-e", f"SLURM_JWT={token}"],
    )
    assert ping.returncode == 0, ping.stdout + ping.stderr
    assert "is UP" in ping.stdout
    nodes = podman.run(
        built_images["k8s-bridge"],
        "show",
        "partitions",
        entrypoint="scontrol",
        options=[*options, "-e", f"SLURM_JWT={token}"],
    )
    assert nodes.returncode == 0, nodes.stderr
    assert "PartitionName=" in nodes.stdout


def test_the_ray_image_becomes_ready(
    built_images: dict[str, Built], podman: Podman, site: E2EStack, mounts: Path
) -> None:
    namespace, queue, priority = "images-ray", "images-ray", "images-ray-low"
    site.kube.control_plane.ensure_namespace(namespace)
    site.client.apply(
        *local_queue_object(queue, namespace=namespace, cluster_queue=site.settings.cluster_queue)
    )
    site.client.apply(*priority_class_object(priority, value=10))
    mixing = "images-ray"
    site.client.apply(
        "/apis/bridge.k8s-bridge.io/v1alpha1/workloadmixings",
        {
            "apiVersion": "bridge.k8s-bridge.io/v1alpha1",
            "kind": "WorkloadMixing",
            "metadata": {"name": mixing},
            "spec": {
                "ray": {
                    "clusterSelector": {"matchLabels": {"k8s-bridge.io/images": "true"}},
                    "mapping": {"default": {"localQueue": {"name": queue}, "priorityClass": priority}},
                    "workerDefaults": {"workers": 1, "resources": {"cpu": "1", "memory": "512Mi"}},
                }
            },
        },
    )
    health = free_port()
    container = podman.start(
        built_images["ray-bridge"],
        "--kubeconfig", "/etc/k8s-bridge/kubeconfig",
        "--config", mixing,
        "--metrics-bind-address", f"127.0.0.1:{free_port()}",
        "--health-probe-bind-address", f"127.0.0.1:{health}",
        "--webhook-bind-address", f"127.0.0.1:{free_port()}",
        "--webhook-cert-dir", "/etc/k8s-bridge",
        name=f"images-ray-{health}",
        options=_bridge_options(mounts),
    )  # fmt: skip
    try:
        _wait_ready(podman, container, health)
    finally:
        podman.remove(container)
        site.client.delete(f"/apis/bridge.k8s-bridge.io/v1alpha1/workloadmixings/{mixing}")
