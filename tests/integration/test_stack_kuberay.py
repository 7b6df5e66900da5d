"""KubeRay for real on the local stack: a shared RayCluster's head runs under the process runner, and
KubeRay submits selector RayJobs to it.

What only the real parts can show: the KubeRay operator creates the head pod and its Service from a
RayCluster as a user writes it; the process runner runs the pod's generated
``/bin/bash -c -- 'ulimit ...; ray start --head ...'`` (``fieldRef`` env and all) with the pinned
``ray`` CLI in a network namespace of its own and reports it Ready, so the Service gets Endpoints;
KubeRay reaches the dashboard through the API server's service proxy and submits a RayJob with
``clusterSelector`` in HTTPMode, which Ray runs to SUCCEEDED. A second RayJob with an entrypoint
resource stays PENDING in Ray until a plain pod of the runner joins the cluster as a worker at the
head Service's cluster-DNS name (``<svc>.<ns>.svc.cluster.local``, resolved by the runner's hosts
files: there is no cluster DNS here) offering that resource, and then runs on that pod.

One set-up per module (the session's Kubernetes stack, plus the operator, a runner with one node and
the RayCluster, all module-scoped): a head takes tens of seconds on a two-core machine. Teardown
deletes everything and checks that nothing is left: no pod or namespace in the API, no network
namespace of the runner, no process that ran in one, no Ray file in /dev/shm.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bridge.sandbox.controllers import Controllers, wait_nodes_ready
from bridge.sandbox.kube import ApiError, RestClient
from bridge.sandbox.kuberay import (
    RAY_API,
    head_service,
    head_service_fqdn,
    ray_cluster_manifest,
    ray_job_manifest,
    ray_job_status,
    wait_head_ready,
    wait_job_status,
)
from bridge.sandbox.netns import existing_namespaces, namespace_pids
from bridge.sandbox.processes import ManagedProcess, ProcessGroup, StackError
from bridge.sandbox.runner import pod_namespaces, pod_tmp_dir
from bridge.sandbox.stack import KubeStack
from tests.fixtures.kube import _start_or_fail, create_namespace

pytestmark = pytest.mark.ray

CLUSTER = "shared"
TAINT_KEY = "k8s-bridge.io/kuberay-test"
GATE = "k8s-bridge-test"
TIMEOUT = 300.0
PENDING_CHECK_SECONDS = 8.0
SHM = Path("/dev/shm")

# The entrypoint: a driver that joins the cluster and says on which node Ray ran it.
DRIVER = "python -c \"import ray; ray.init(); print('driver ran on', ray.util.get_node_ip_address())\""


def wait_for(probe: Callable[[], Any], *, what: str, timeout: float = TIMEOUT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.5)


def get(client: RestClient, path: str, **query: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = client.get(path, **query)
    except ApiError as error:
        if error.status == 404:
            return None
        raise
    return found


def items(client: RestClient, path: str, **query: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = (get(client, path, **query) or {}).get("items") or []
    return found


def ray_shm_files() -> set[str]:
    """Ray's object-store files in /dev/shm, and the runner pods' Memory emptyDirs (KubeRay's /dev/shm)."""
    return {entry.name for entry in SHM.iterdir() if entry.name.startswith(("plasma", "ray", "kb-pod-"))}


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def command_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


@dataclass
class Runner:
    """The module's process runner (a subprocess, as in the sandbox) serving one tainted node."""

    node: str
    workdir: Path
    process: ManagedProcess
    seen_pids: set[int] = field(default_factory=set)
    seen_namespaces: set[str] = field(default_factory=set)

    @property
    def toleration(self) -> dict[str, str]:
        return {"key": TAINT_KEY, "operator": "Equal", "value": "true", "effect": "NoSchedule"}

    def record_pod_processes(self) -> set[int]:
        """Remember every pod network namespace of the runner and every process now running in one
        (checked at the end: a finished pod's record is pruned, so the runner's records would not do)."""
        names = pod_namespaces(self.workdir)
        self.seen_namespaces |= names
        now = {pid for name in names for pid in namespace_pids(name)}
        self.seen_pids |= now
        return now


@pytest.fixture(scope="module")
def kuberay_operator(kube_stack: KubeStack) -> Iterator[Controllers]:
    """The KubeRay operator against the session's stack (its CRDs are installed there already)."""
    operator = Controllers(kube_stack.control_plane, components=["kuberay"])
    _start_or_fail("the KubeRay operator", operator.start)
    pid = operator.process("kuberay").pid
    try:
        yield operator
    finally:
        operator.stop()
    assert not alive(pid), "the KubeRay operator outlived its stop"


@pytest.fixture(scope="module")
def ray_namespace(kube_stack: KubeStack) -> Iterator[str]:
    name = create_namespace(kube_stack.client, prefix="ray")
    yield name
    kube_stack.client.delete(f"/api/v1/namespaces/{name}")
    # The namespace controller empties it and then removes it: nothing of this module may stay.
    wait_for(
        lambda: get(kube_stack.client, f"/api/v1/namespaces/{name}") is None, what=f"namespace {name} gone"
    )


@pytest.fixture(scope="module")
def runner(kube_stack: KubeStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runner]:
    workdir = tmp_path_factory.mktemp("kuberay-runner")
    node = f"ray-runner-{uuid.uuid4().hex[:6]}"
    shm_before = ray_shm_files()
    group = ProcessGroup(workdir)
    argv = [sys.executable, "-m", "bridge.sandbox.runner", "--kubeconfig", str(kube_stack.kubeconfig)]
    argv += ["--node", node, "--workdir", str(workdir / "runner"), "--cpu", "4", "--memory", "8Gi"]
    # Each container in a PID namespace of its own, as in Kubernetes: a Ray driver looks for "its"
    # raylet among the processes it can see, and would find the head's on a shared host.
    argv += ["--taint", f"{TAINT_KEY}=true:NoSchedule", "--pid-namespace"]
    process = group.start("runner", argv, env={"PYTHONUNBUFFERED": "1"}, inherit_env=True)
    try:
        wait_nodes_ready(kube_stack.client, [node], timeout=60)
    except StackError as failed:
        group.stop_all()
        pytest.fail(str(process.failure(f"did not register its node ({failed})")), pytrace=False)
    handle = Runner(node=node, workdir=workdir / "runner", process=process)
    try:
        yield handle
    finally:
        handle.record_pod_processes()
        group.stop(process, grace=30.0)
        group.stop_all()
        kube_stack.client.delete(f"/api/v1/nodes/{node}")
    recorded = pod_namespaces(handle.workdir) | handle.seen_namespaces
    left = recorded & set(existing_namespaces())
    assert not left, f"network namespaces of the runner left behind: {sorted(left)}"
    tmp_left = [str(pod_tmp_dir(name)) for name in recorded if pod_tmp_dir(name).exists()]
    assert not tmp_left, f"pods' temporary directories left behind: {tmp_left}"
    leaked = sorted(pid for pid in handle.seen_pids if alive(pid))
    assert not leaked, f"processes of the runner's pods left behind: {leaked}"
    assert handle.seen_pids, "no pod process was ever seen: the leak check checked nothing"
    shm_left = ray_shm_files() - shm_before
    assert not shm_left, f"/dev/shm objects left behind: {sorted(shm_left)}"


@pytest.fixture(scope="module")
def shared_cluster(
    kube_stack: KubeStack, kuberay_operator: Controllers, runner: Runner, ray_namespace: str
) -> Iterator[dict[str, Any]]:
    """A head-only RayCluster on the runner's node, ready; deleted with its RayJobs and pods after."""
    client = kube_stack.client
    wait_for(
        lambda: get(client, f"/api/v1/namespaces/{ray_namespace}/serviceaccounts/default"),
        what="the namespace's default ServiceAccount",
    )
    manifest = ray_cluster_manifest(
        CLUSTER,
        namespace=ray_namespace,
        node_selector={"kubernetes.io/hostname": runner.node},
        tolerations=[runner.toleration],
    )
    client.create(f"{RAY_API}/namespaces/{ray_namespace}/rayclusters", manifest)
    try:
        try:
            cluster = wait_head_ready(client, namespace=ray_namespace, name=CLUSTER, timeout=TIMEOUT)
        except StackError as failed:
            pytest.fail(f"{failed}\nrunner log:\n{runner.process.failure('log')}", pytrace=False)
        yield cluster
    finally:
        runner.record_pod_processes()
        # RayJobs first, while the head still answers (KubeRay's finalizer stops the job in Ray).
        for job in items(client, f"{RAY_API}/namespaces/{ray_namespace}/rayjobs"):
            client.delete(f"{RAY_API}/namespaces/{ray_namespace}/rayjobs/{job['metadata']['name']}")
        wait_for(
            lambda: not items(client, f"{RAY_API}/namespaces/{ray_namespace}/rayjobs"),
            what="the RayJobs gone",
        )
        client.delete(f"{RAY_API}/namespaces/{ray_namespace}/rayclusters/{CLUSTER}")
        wait_for(
            lambda: not items(client, f"/api/v1/namespaces/{ray_namespace}/pods"),
            what="every pod of the namespace gone",
        )


def head_pod(client: RestClient, namespace: str) -> dict[str, Any]:
    pods = items(
        client,
        f"/api/v1/namespaces/{namespace}/pods",
        labelSelector=f"ray.io/cluster={CLUSTER},ray.io/node-type=head",
    )
    assert len(pods) == 1, f"expected one head pod, found {[p['metadata']['name'] for p in pods]}"
    return pods[0]


def job_logs(client: RestClient, cluster: dict[str, Any], status: dict[str, Any]) -> str:
    """The job's driver output, from the dashboard through the API server's service proxy (as KubeRay)."""
    namespace = cluster["metadata"]["namespace"]
    path = f"/api/v1/namespaces/{namespace}/services/{head_service(cluster)}:dashboard/proxy"
    reply = client.get(f"{path}/api/jobs/{status['jobId']}/logs")
    return str(reply.get("logs", "")) if isinstance(reply, dict) else str(reply)


def create_job(client: RestClient, namespace: str, manifest: dict[str, Any]) -> str:
    client.create(f"{RAY_API}/namespaces/{namespace}/rayjobs", manifest)
    return str(manifest["metadata"]["name"])


# ---------------------------------------------------------------------------------------------------


def test_the_head_is_kuberays_pod_run_for_real(
    kube_stack: KubeStack, shared_cluster: dict[str, Any], runner: Runner, ray_namespace: str
) -> None:
    client = kube_stack.client
    pod = head_pod(client, ray_namespace)
    (container,) = pod["spec"]["containers"]
    # KubeRay's own generated command and env, not ours: bash running `ulimit ...; ray start --head`
    # (v1.5.0 writes `/bin/bash -c --`; with ENABLE_LOGIN_SHELL=true, and in later versions, `-lc`).
    assert container["command"][0] == "/bin/bash", container["command"]
    assert "c" in container["command"][1], container["command"]
    assert "ray start --head" in " ".join(container.get("args") or []), container.get("args")
    assert any("fieldRef" in (entry.get("valueFrom") or {}) for entry in container.get("env") or [])
    assert pod["spec"]["nodeName"] == runner.node
    ip = pod["status"]["podIP"]
    # The head Service's endpoints are the pod, so the API server's service proxy (KubeRay's way to
    # the dashboard) and the runner's hosts files (workers' way to the GCS) both reach it.
    slices = items(
        client,
        f"/apis/discovery.k8s.io/v1/namespaces/{ray_namespace}/endpointslices",
        labelSelector=f"kubernetes.io/service-name={head_service(shared_cluster)}",
    )
    addresses = {a for s in slices for e in s.get("endpoints") or [] for a in e.get("addresses") or []}
    assert addresses == {ip}

    # The pod is Ready once its process runs (the runner runs no probes); Ray's own daemons follow.
    def head_daemons() -> bool:
        names = {command_name(pid) for pid in runner.record_pod_processes()}
        return {"gcs_server", "raylet"} <= names

    wait_for(head_daemons, what="gcs_server and raylet in the head pod's network namespace")


def test_a_selector_rayjob_in_http_mode_runs_on_the_shared_cluster(
    kube_stack: KubeStack, shared_cluster: dict[str, Any], ray_namespace: str
) -> None:
    client = kube_stack.client
    name = create_job(
        client,
        ray_namespace,
        ray_job_manifest("hello", namespace=ray_namespace, cluster=CLUSTER, entrypoint=DRIVER),
    )
    status = wait_job_status(
        client, namespace=ray_namespace, name=name, statuses=frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
    )
    logs = job_logs(client, shared_cluster, status)
    assert status["jobStatus"] == "SUCCEEDED", f"{status}\n{logs}"
    head_ip = head_pod(client, ray_namespace)["status"]["podIP"]
    assert f"driver ran on {head_ip}" in logs
    # KubeRay used the existing cluster and made none of its own.
    clusters = items(client, f"{RAY_API}/namespaces/{ray_namespace}/rayclusters")
    assert [c["metadata"]["name"] for c in clusters] == [CLUSTER]
    assert status.get("rayClusterName") == CLUSTER


def test_a_gated_rayjob_waits_for_a_runner_pod_that_joins_with_its_resource(
    kube_stack: KubeStack, shared_cluster: dict[str, Any], runner: Runner, ray_namespace: str
) -> None:
    client = kube_stack.client
    name = create_job(
        client,
        ray_namespace,
        ray_job_manifest(
            "gated",
            namespace=ray_namespace,
            cluster=CLUSTER,
            entrypoint=DRIVER,
            entrypoint_resources={GATE: 1},
        ),
    )
    wait_job_status(client, namespace=ray_namespace, name=name, statuses=frozenset({"PENDING"}))
    # Submitted, and Ray keeps it waiting: no node offers the resource, however long we look.
    deadline = time.monotonic() + PENDING_CHECK_SECONDS
    while time.monotonic() < deadline:
        assert ray_job_status(client, namespace=ray_namespace, name=name).get("jobStatus") == "PENDING"
        time.sleep(0.5)

    address = f"{head_service_fqdn(shared_cluster)}:6379"
    worker = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gate-worker", "namespace": ray_namespace},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": runner.node},
            "tolerations": [runner.toleration],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 10,
            "containers": [
                {
                    "name": "ray-worker",
                    "image": "rayproject/ray",
                    # An argv list, no shell: the runner finds `ray` on the pods' PATH.
                    "command": [
                        "ray",
                        "start",
                        f"--address={address}",
                        f"--resources={json.dumps({GATE: 1})}",
                        "--num-cpus=1",
                        "--block",
                    ],
                    "env": [{"name": "RAY_USAGE_STATS_ENABLED", "value": "0"}],
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                }
            ],
        },
    }
    client.create(f"/api/v1/namespaces/{ray_namespace}/pods", worker)
    try:
        status = wait_job_status(
            client,
            namespace=ray_namespace,
            name=name,
            statuses=frozenset({"SUCCEEDED", "FAILED", "STOPPED"}),
        )
        pod = get(client, f"/api/v1/namespaces/{ray_namespace}/pods/gate-worker") or {}
        logs = job_logs(client, shared_cluster, status)
        assert status["jobStatus"] == "SUCCEEDED", f"{status}\n{logs}"
        assert f"driver ran on {pod['status']['podIP']}" in logs
        runner.record_pod_processes()
    finally:
        client.delete(f"/api/v1/namespaces/{ray_namespace}/pods/gate-worker")
    wait_for(
        lambda: get(client, f"/api/v1/namespaces/{ray_namespace}/pods/gate-worker") is None,
        what="the worker pod gone",
        timeout=120,
    )
