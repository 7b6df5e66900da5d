"""The process runner against the real control plane, controller manager, scheduler and kwok.

Each test registers runner node(s) of its own (unique names, tainted so that no other test's pods
land there), lets the real kube-scheduler bind pods to them by node selector, and checks what only a
real run can show: the command ran as a process in its own network namespace (its pod IP answers
from the host, its hostname and environment are the pod's), the phases and exit codes reported
through the API, a Job completed by the real Job controller, deletion stopping the process and
removing its namespace, a restarted runner failing the pods whose processes it lost, a runner killed
with SIGKILL leaving nothing behind once it is started again, and kwok's nodes and pods left alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s_client

from bridge.sandbox.netns import existing_namespaces
from bridge.sandbox.runner import (
    PID_NAMESPACE_ANNOTATION,
    RUNNER_LABEL,
    NodeResources,
    ProcessRunner,
    pod_namespaces,
)
from bridge.sandbox.stack import KubeStack

TAINT = {"key": "k8s-bridge.io/runner-test", "value": "true", "effect": "NoSchedule"}
TOLERATION = {"key": TAINT["key"], "operator": "Equal", "value": "true", "effect": "NoSchedule"}
TIMEOUT = 60.0
REPO = Path(__file__).resolve().parents[2]

RunnerFactory = Callable[..., Awaitable[ProcessRunner]]


@pytest.fixture
async def start_runner(kube_stack: KubeStack, tmp_path: Path) -> AsyncIterator[RunnerFactory]:
    """Start process runners for this test; all are stopped and their nodes deleted afterwards."""
    runners: list[ProcessRunner] = []
    nodes: set[str] = set()

    async def start(*, nodes_named: list[str] | None = None, **options: Any) -> ProcessRunner:
        names = nodes_named or [f"runner-{uuid.uuid4().hex[:6]}"]
        runner = ProcessRunner(
            kubeconfig=kube_stack.kubeconfig,
            node_names=names,
            workdir=tmp_path / f"runner-{len(runners)}",
            taints=[TAINT],
            restart_backoff=0.2,
            **options,
        )
        await runner.start()
        runners.append(runner)
        nodes.update(names)
        return runner

    try:
        yield start
    finally:
        for runner in reversed(runners):
            await runner.stop()
        for name in nodes:
            kube_stack.client.delete(f"/api/v1/nodes/{name}")


def pod_manifest(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def pod_spec(
    node: str,
    argv: list[str],
    *,
    env: dict[str, str] | None = None,
    restart_policy: str = "Never",
    grace: int = 30,
) -> dict[str, Any]:
    return {
        "nodeSelector": {"kubernetes.io/hostname": node},
        "tolerations": [TOLERATION],
        "restartPolicy": restart_policy,
        "terminationGracePeriodSeconds": grace,
        "containers": [
            {
                "name": "main",
                "image": "ignored.example/none:0",
                "command": argv,
                "env": [
                    *({"name": key, "value": value} for key, value in (env or {}).items()),
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                ],
            }
        ],
    }


def python(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


async def wait_for(
    read: Callable[[], Awaitable[Any]], check: Callable[[Any], bool], *, what: str, timeout: float = TIMEOUT
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await read()
        if check(value):
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}; last seen: {value}")
        await asyncio.sleep(0.2)


class Pods:
    """Small async helpers over the real API for one namespace."""

    def __init__(self, api: k8s_client.ApiClient, namespace: str, stack: KubeStack) -> None:
        self.core = k8s_client.CoreV1Api(api)
        self.batch = k8s_client.BatchV1Api(api)
        self.namespace = namespace
        self._stack = stack

    async def create(
        self, manifest: dict[str, Any], *, collection: str = "api/v1", kind: str = "pods"
    ) -> None:
        path = f"/{collection}/namespaces/{self.namespace}/{kind}"
        await asyncio.to_thread(self._stack.client.create, path, manifest)

    async def get(self, name: str) -> Any:
        try:
            return await self.core.read_namespaced_pod(name, self.namespace)
        except k8s_client.ApiException as error:
            if error.status == 404:
                return None
            raise

    async def phase(self, name: str, phase: str, *, timeout: float = TIMEOUT) -> Any:
        return await wait_for(
            lambda: self.get(name),
            lambda pod: pod is not None and pod.status.phase == phase,
            what=f"pod {name} {phase}",
            timeout=timeout,
        )

    async def gone(self, name: str) -> None:
        await wait_for(lambda: self.get(name), lambda pod: pod is None, what=f"pod {name} gone")


@pytest.fixture
async def pods(kube_api: k8s_client.ApiClient, kube_namespace: str, kube_stack: KubeStack) -> Pods:
    # Pods need the namespace's default ServiceAccount (made by the controller manager) to be admitted.
    await wait_for(
        lambda: asyncio.to_thread(
            kube_stack.client.exists, f"/api/v1/namespaces/{kube_namespace}/serviceaccounts/default"
        ),
        bool,
        what="the default ServiceAccount",
    )
    return Pods(kube_api, kube_namespace, kube_stack)


def pid_of(pod: Any) -> int:
    (status,) = pod.status.container_statuses
    container_id = status.container_id or ""
    assert container_id.startswith("process://"), container_id
    return int(container_id.removeprefix("process://"))


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def netns_of(pid: int) -> str:
    return subprocess.run(
        ["ip", "netns", "identify", str(pid)], capture_output=True, text=True, check=True
    ).stdout.strip()


def fetch(address: str, port: int) -> bytes:
    with socket.create_connection((address, port), timeout=5) as connection:
        return connection.recv(65536)


# ---------------------------------------------------------------------------------------------------


async def test_nodes_are_registered_ready_with_a_lease_and_kwok_leaves_them_alone(
    start_runner: RunnerFactory, kube_stack: KubeStack, kube_api: k8s_client.ApiClient
) -> None:
    runner = await start_runner(
        resources=NodeResources(cpu="4", memory="8Gi", extended={"example.com/widget": "2"}),
        labels={"pool": "shared"},
        heartbeat_interval=1.0,
    )
    (name,) = runner.node_names
    core = k8s_client.CoreV1Api(kube_api)
    node = await core.read_node(name)
    assert node.metadata.labels[RUNNER_LABEL] == "true"
    assert node.metadata.labels["pool"] == "shared"
    assert not any(key.startswith("kwok.x-k8s.io") for key in node.metadata.annotations or {})
    assert node.status.allocatable["example.com/widget"] == "2"
    assert node.status.allocatable["cpu"] == "4"

    lease_api = k8s_client.CoordinationV1Api(kube_api)
    first = (await lease_api.read_namespaced_lease(name, "kube-node-lease")).spec.renew_time
    renewed = await wait_for(
        lambda: lease_api.read_namespaced_lease(name, "kube-node-lease"),
        lambda lease: lease.spec.renew_time > first,
        what="the node lease to be renewed",
    )
    assert renewed.spec.holder_identity == name

    # kwok nodes are kwok's: the runner's node keeps the runner's node info, and it took no kwok node
    (kwok_node,) = kube_stack.create_kwok_nodes(count=1, prefix=f"kwok-{uuid.uuid4().hex[:6]}")
    try:
        node = await core.read_node(name)
        assert node.status.node_info.kubelet_version.endswith("process-runner")
        assert all(c.status == "True" for c in node.status.conditions if c.type == "Ready")
        assert (await core.read_node(kwok_node)).metadata.labels.get(RUNNER_LABEL) is None
    finally:
        kube_stack.client.delete(f"/api/v1/nodes/{kwok_node}")


async def test_a_pod_runs_its_command_in_its_own_network_namespace(
    start_runner: RunnerFactory, pods: Pods, tmp_path: Path
) -> None:
    runner = await start_runner()
    (node,) = runner.node_names
    out = tmp_path / "seen.json"
    server = python(
        """
        import json, os, socket
        seen = {"hostname": socket.gethostname(), "env": dict(os.environ),
                "resolved": socket.gethostbyname(socket.gethostname())}
        with open(os.environ["OUT"], "w") as f:
            json.dump(seen, f)
        listener = socket.create_server((os.environ["POD_IP"], 8080))
        connection, _ = listener.accept()
        connection.sendall(b"hello from " + os.environ["POD_NAME"].encode())
        connection.close()
        """
    )
    await pods.create(pod_manifest("web", pod_spec(node, server, env={"OUT": str(out)})))

    pod = await pods.phase("web", "Running")
    assert pod.spec.node_name == node
    ready = {c.type: c.status for c in pod.status.conditions}
    assert ready["Ready"] == "True"
    assert ready["ContainersReady"] == "True"
    assert pod.status.pod_ip.startswith("10.213.")
    assert pod.status.pod_ips[0].ip == pod.status.pod_ip
    assert pod.status.start_time is not None
    pid = pid_of(pod)
    assert alive(pid)
    namespace = runner.namespace_of(pod.metadata.uid)
    assert namespace is not None
    assert netns_of(pid) == namespace.name  # the process really is in the pod's namespace

    # the host reaches the pod at its pod IP, and the process saw the pod's identity
    await wait_for(lambda: asyncio.to_thread(out.exists), bool, what="the pod's output file")
    reply = await wait_for(
        lambda: asyncio.to_thread(_try_fetch, pod.status.pod_ip, 8080), bool, what="the pod's port 8080"
    )
    assert reply == b"hello from web"
    seen = json.loads(out.read_text())
    assert seen["hostname"] == "web"
    assert seen["resolved"] == pod.status.pod_ip
    assert seen["env"]["POD_IP"] == pod.status.pod_ip
    assert seen["env"]["HOSTNAME"] == "web"
    assert seen["env"]["NODE_NAME"] == node

    pod = await pods.phase("web", "Succeeded")
    (status,) = pod.status.container_statuses
    assert status.state.terminated.exit_code == 0
    assert status.state.terminated.reason == "Completed"
    assert {c.type: c.status for c in pod.status.conditions}["Ready"] == "False"
    assert not alive(pid)
    assert namespace.name not in existing_namespaces()


async def test_a_login_shell_keeps_the_pods_path_and_a_home_and_tmpdir_of_its_own(
    start_runner: RunnerFactory, pods: Pods, tmp_path: Path
) -> None:
    # KubeRay's pods run `/bin/bash -lc -- '<script>'`: a login shell reads the host's /etc/profile
    # (which on Debian resets PATH) and ~/.profile; the container's PATH must still hold.
    runner = await start_runner()
    (node,) = runner.node_names
    out = tmp_path / "login.txt"
    script = 'printf "%s\\n%s\\n%s\\n%s\\n" "$PATH" "$HOME" "$(command -v python3)" "$TMPDIR" > "$OUT"'
    await pods.create(
        pod_manifest("login", pod_spec(node, ["/bin/bash", "-lc", "--", script], env={"OUT": str(out)}))
    )
    await pods.phase("login", "Succeeded")
    path, home, python3, tmpdir = out.read_text().splitlines()
    assert path.split(os.pathsep)[0] == str(Path(sys.executable).parent)
    assert Path(home).is_relative_to(runner.workdir), home
    assert Path(home).name == "main"  # the container's own
    assert python3 == str(Path(sys.executable).parent / "python3")
    # a temporary directory of the pod's own, gone with the pod's network namespace
    assert Path(tmpdir).name.startswith("kb-pod-"), tmpdir
    await wait_for(
        lambda: asyncio.to_thread(Path(tmpdir).exists), lambda exists: not exists, what="TMPDIR gone"
    )


async def test_a_pod_annotated_for_it_sees_only_its_own_processes(
    start_runner: RunnerFactory, pods: Pods, tmp_path: Path
) -> None:
    runner = await start_runner()
    (node,) = runner.node_names
    out = tmp_path / "pids.json"
    probe = python(
        """
        import json, os, subprocess, sys
        child = subprocess.Popen(["sleep", "6127"])  # left running: it must not outlive the pod
        pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
        with open(os.environ["OUT"], "w") as f:
            json.dump({"pid": os.getpid(), "ppid": os.getppid(), "pids": pids, "child": child.pid}, f)
        sys.exit(3)
        """
    )
    manifest = pod_manifest("isolated", pod_spec(node, probe, env={"OUT": str(out)}))
    manifest["metadata"]["annotations"] = {PID_NAMESPACE_ANNOTATION: "true"}
    await pods.create(manifest)
    pod = await pods.phase("isolated", "Failed")
    assert pod.status.container_statuses[0].state.terminated.exit_code == 3  # the command's own code
    seen = json.loads(out.read_text())
    # pid 1 is the runner's init, the command its child; nothing of the host is visible.
    assert (seen["ppid"], seen["pid"]) == (1, 2)
    assert set(seen["pids"]) == {1, 2, seen["child"]}
    await wait_for(
        lambda: asyncio.to_thread(_processes_running, ["sleep", "6127"]),
        lambda found: not found,
        what="no sleep left",
    )


def _processes_running(argv: list[str]) -> list[int]:
    wanted = "\0".join(argv).encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if (entry / "cmdline").read_bytes() == wanted:
                    found.append(int(entry.name))
    return found


async def test_services_resolve_to_their_ready_pods_through_the_hosts_file(
    start_runner: RunnerFactory, pods: Pods, kube_stack: KubeStack, tmp_path: Path
) -> None:
    # No cluster DNS and no kube-proxy: the runner lists every Service's ready endpoints in each pod's
    # /etc/hosts, and rewrites it when they change. The client starts before the Service exists.
    runner = await start_runner()
    (node,) = runner.node_names
    ns = pods.namespace
    out = tmp_path / "resolved.json"
    names = [f"echo.{ns}.svc.cluster.local", f"echo.{ns}.svc", f"echo.{ns}", "echo"]
    client = python(
        f"""
        import json, os, socket, time
        names, found = {names!r}, {{}}
        while len(found) < len(names):
            for name in names:
                try:
                    found[name] = socket.gethostbyname(name)
                except OSError:
                    pass
            time.sleep(0.2)
        with open(os.environ["OUT"], "w") as f:
            json.dump(found, f)
        """
    )
    await pods.create(pod_manifest("client", pod_spec(node, client, env={"OUT": str(out)})))
    await pods.phase("client", "Running")
    server = pod_manifest("server", pod_spec(node, ["sleep", "600"], grace=1))
    server["metadata"]["labels"] = {"app": "echo"}
    await pods.create(server)
    server_pod = await pods.phase("server", "Running")
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "echo"},
        "spec": {"clusterIP": "None", "selector": {"app": "echo"}, "ports": [{"name": "x", "port": 80}]},
    }
    await pods.create(service, kind="services")
    await pods.phase("client", "Succeeded", timeout=120)
    assert json.loads(out.read_text()) == dict.fromkeys(names, server_pod.status.pod_ip)
    await asyncio.to_thread(kube_stack.client.delete, f"/api/v1/namespaces/{ns}/pods/server")


def _try_fetch(address: str, port: int) -> bytes:
    try:
        return fetch(address, port)
    except OSError:
        return b""


async def test_a_failing_command_fails_the_pod_with_its_exit_code(
    start_runner: RunnerFactory, pods: Pods
) -> None:
    runner = await start_runner()
    (node,) = runner.node_names
    await pods.create(pod_manifest("fails", pod_spec(node, python("import sys; sys.exit(3)"))))
    pod = await pods.phase("fails", "Failed")
    (status,) = pod.status.container_statuses
    assert status.state.terminated.exit_code == 3
    assert status.state.terminated.reason == "Error"
    assert status.restart_count == 0

    # a command missing from the host fails like a shell would (127), and nothing is left running
    await pods.create(pod_manifest("missing", pod_spec(node, ["/nonexistent/k8s-bridge-command"])))
    pod = await pods.phase("missing", "Failed")
    assert pod.status.container_statuses[0].state.terminated.exit_code == 127

    # a pod the runner cannot run (no command: images are not run) is refused with a reason
    manifest = pod_manifest("no-command", pod_spec(node, ["unused"]))
    del manifest["spec"]["containers"][0]["command"]
    await pods.create(manifest)
    pod = await pods.phase("no-command", "Failed")
    assert pod.status.reason == "Unrunnable"
    assert "no command" in pod.status.message


async def test_init_containers_run_first_in_the_same_namespace(
    start_runner: RunnerFactory, pods: Pods, tmp_path: Path
) -> None:
    runner = await start_runner()
    (node,) = runner.node_names
    shared = tmp_path / "from-init"
    manifest = pod_manifest(
        "initialized",
        pod_spec(
            node,
            python("import os, sys; sys.exit(open(os.environ['SHARED']).read() != os.environ['POD_IP'])"),
        ),
    )
    main = manifest["spec"]["containers"][0]
    main["env"].append({"name": "SHARED", "value": str(shared)})
    manifest["spec"]["initContainers"] = [
        {
            "name": "prepare",
            "image": "ignored",
            "command": python("import os; open(os.environ['SHARED'], 'w').write(os.environ['POD_IP'])"),
            "env": main["env"],
        }
    ]
    await pods.create(manifest)
    pod = await pods.phase("initialized", "Succeeded")
    assert shared.read_text() == pod.status.pod_ip
    (init,) = pod.status.init_container_statuses
    assert init.state.terminated.exit_code == 0
    assert {c.type: c.status for c in pod.status.conditions}["Initialized"] == "True"


async def test_a_job_with_restart_on_failure_completes_after_a_local_restart(
    start_runner: RunnerFactory, pods: Pods, tmp_path: Path
) -> None:
    runner = await start_runner()
    (node,) = runner.node_names
    marker = tmp_path / "attempted"
    flaky = python(
        """
        import os, sys
        marker = os.environ["MARKER"]
        if not os.path.exists(marker):
            open(marker, "w").close()
            sys.exit(1)
        """
    )
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "flaky"},
        "spec": {
            "backoffLimit": 3,
            "template": {
                "spec": pod_spec(node, flaky, env={"MARKER": str(marker)}, restart_policy="OnFailure")
            },
        },
    }
    await pods.create(job, collection="apis/batch/v1", kind="jobs")

    def complete(job: Any) -> bool:
        return any(c.type == "Complete" and c.status == "True" for c in job.status.conditions or [])

    done = await wait_for(
        lambda: pods.batch.read_namespaced_job("flaky", pods.namespace), complete, what="the Job to complete"
    )
    assert done.status.succeeded == 1
    listed = await pods.core.list_namespaced_pod(pods.namespace, label_selector="job-name=flaky")
    (pod,) = listed.items  # restarted in place, not replaced by a new pod
    assert pod.spec.node_name == node
    assert pod.status.phase == "Succeeded"
    (status,) = pod.status.container_statuses
    assert status.restart_count == 1
    assert status.last_state.terminated.exit_code == 1
    assert status.state.terminated.exit_code == 0


async def test_an_indexed_job_runs_its_pods_side_by_side_each_with_its_own_ip(
    start_runner: RunnerFactory, pods: Pods, tmp_path: Path
) -> None:
    runner = await start_runner()
    (node,) = runner.node_names
    out = tmp_path / "out"
    out.mkdir()
    # each pod records its index (JOB_COMPLETION_INDEX, which the Job controller injects as a fieldRef
    # on an annotation) and IP, then waits until all three are up: they must run at the same time
    worker = python(
        """
        import os, pathlib, time
        out = pathlib.Path(os.environ["OUT"])
        (out / os.environ["JOB_COMPLETION_INDEX"]).write_text(os.environ["POD_IP"])
        deadline = time.monotonic() + 30
        while len(list(out.iterdir())) < 3:
            if time.monotonic() > deadline:
                raise SystemExit(1)
            time.sleep(0.1)
        """
    )
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "indexed"},
        "spec": {
            "completionMode": "Indexed",
            "completions": 3,
            "parallelism": 3,
            "backoffLimit": 0,
            "template": {"spec": pod_spec(node, worker, env={"OUT": str(out)})},
        },
    }
    await pods.create(job, collection="apis/batch/v1", kind="jobs")

    def finished(job: Any) -> bool:
        return any(
            c.type in ("Complete", "Failed") and c.status == "True" for c in job.status.conditions or []
        )

    done = await wait_for(
        lambda: pods.batch.read_namespaced_job("indexed", pods.namespace), finished, what="the Job to finish"
    )
    assert done.status.succeeded == 3
    addresses = {path.name: path.read_text() for path in out.iterdir()}
    assert sorted(addresses) == ["0", "1", "2"]
    assert len(set(addresses.values())) == 3


async def test_deleting_a_pod_stops_its_process_and_removes_its_namespace(
    start_runner: RunnerFactory, pods: Pods
) -> None:
    runner = await start_runner()
    (node,) = runner.node_names
    await pods.create(pod_manifest("sleeper", pod_spec(node, ["sleep", "3600"], grace=10)))
    pod = await pods.phase("sleeper", "Running")
    pid = pid_of(pod)
    namespace = netns_of(pid)
    assert namespace in existing_namespaces()
    assert pod_namespaces(runner.workdir) == {namespace}  # recorded, for leak checks of this runner only

    began = time.monotonic()
    await pods.core.delete_namespaced_pod("sleeper", pods.namespace)
    await pods.gone("sleeper")
    assert time.monotonic() - began < 8.0  # sleep dies on SIGTERM: no waiting for the grace period
    assert not alive(pid)
    assert namespace not in existing_namespaces()


async def test_a_process_ignoring_sigterm_is_killed_after_the_grace_period(
    start_runner: RunnerFactory, pods: Pods
) -> None:
    runner = await start_runner()
    (node,) = runner.node_names
    stubborn = python(
        """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(3600)
        """
    )
    await pods.create(pod_manifest("stubborn", pod_spec(node, stubborn, grace=2)))
    pod = await pods.phase("stubborn", "Running")
    pid = pid_of(pod)
    await asyncio.sleep(0.5)  # let the interpreter install its handler
    began = time.monotonic()
    await pods.core.delete_namespaced_pod("stubborn", pods.namespace)
    await pods.gone("stubborn")
    assert 1.5 < time.monotonic() - began < 10.0
    assert not alive(pid)


async def test_a_restarted_runner_fails_the_pods_it_lost_and_stop_leaves_nothing(
    start_runner: RunnerFactory, pods: Pods
) -> None:
    first = await start_runner()
    (node,) = first.node_names
    await pods.create(pod_manifest("orphan", pod_spec(node, ["sleep", "3600"])))
    pod = await pods.phase("orphan", "Running")
    pid = pid_of(pod)
    namespace = netns_of(pid)

    await first.stop()
    assert not alive(pid)
    assert namespace not in existing_namespaces()

    await start_runner(nodes_named=[node])
    pod = await pods.phase("orphan", "Failed")
    assert pod.status.reason == "ProcessLost"
    assert pod.status.container_statuses[0].state.terminated.exit_code == 137


async def test_pods_on_kwok_nodes_are_not_run(
    start_runner: RunnerFactory, pods: Pods, kube_stack: KubeStack, tmp_path: Path
) -> None:
    runner = await start_runner()
    (kwok_node,) = kube_stack.create_kwok_nodes(
        count=1, prefix=f"kwok-{uuid.uuid4().hex[:6]}", taints=[TAINT]
    )
    try:
        touched = tmp_path / "touched"
        manifest = pod_manifest("simulated", pod_spec(kwok_node, ["touch", str(touched)]))
        await pods.create(manifest)
        pod = await pods.phase("simulated", "Running")
        assert pod.spec.node_name == kwok_node
        assert not (pod.status.pod_ip or "").startswith("10.213.")
        await asyncio.sleep(1.0)
        assert not touched.exists()
        assert runner.namespace_of(pod.metadata.uid) is None
    finally:
        await pods.core.delete_namespaced_pod("simulated", pods.namespace, grace_period_seconds=0)
        kube_stack.client.delete(f"/api/v1/nodes/{kwok_node}")


# ---------------------------------------------------------------------------------------------------
# A runner that crashes: run as a command-line process of its own, so that it can be SIGKILLed.


class RunnerProcess:
    """``python -m bridge.sandbox.runner`` for one node and workdir; one log per start, to show on failure."""

    def __init__(self, *, kubeconfig: Path, node: str, workdir: Path) -> None:
        self.node = node
        self.workdir = workdir
        self.argv = [
            sys.executable, "-m", "bridge.sandbox.runner", "--kubeconfig", str(kubeconfig), "--node", node,
            "--workdir", str(workdir), "--taint", f"{TAINT['key']}={TAINT['value']}:{TAINT['effect']}",
        ]  # fmt: skip
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def log_path(self) -> Path:
        return self.workdir.parent / f"runner-process-{self.starts}.log"

    def log_tail(self) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-40:])
        except FileNotFoundError:
            return "(no log)"

    async def start(self) -> None:
        """Start it and wait until it serves its node (it has reclaimed what an earlier one left)."""
        self.starts += 1
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
            "PYTHONUNBUFFERED": "1",
        }
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO, start_new_session=True
            )
        process = self.process

        def serving() -> bool:
            if process.poll() is not None:
                pytest.fail(f"the runner exited with {process.returncode}:\n{self.log_tail()}")
            return "process runner: serving nodes" in self.log_path.read_text(errors="replace")

        await wait_for(lambda: asyncio.to_thread(serving), bool, what="the runner to serve its node")

    def kill(self) -> None:
        """SIGKILL: a crash, nothing of the runner's own clean-up runs."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


LEAVER = python(
    """
    import os, subprocess, time
    # a child in a session of its own, as a daemon would be: out of reach of the container's process
    # group and of the kernel's SIGKILL when the runner dies
    child = subprocess.Popen(["sleep", "3600"], start_new_session=True)
    with open(os.environ["CHILD"], "w") as f:
        f.write(str(child.pid))
    time.sleep(3600)
    """
)


def namespace_inode(name: str) -> int:
    return os.stat(f"/run/netns/{name}").st_ino


def start_time(pid: int) -> int:
    """When the process started (clock ticks since boot, field 22 of ``/proc/<pid>/stat``); 0 if gone."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (FileNotFoundError, ProcessLookupError):
        return 0


def net_namespaces_in_use(*, started_before: int | None = None) -> set[int]:
    """Inodes of the network namespaces processes are in now, as ``lsns`` lists them (each with its
    lowest pid). With ``started_before``, only those whose process started before then: a freed
    namespace's inode may go to a new one at once, but none of its processes can predate that."""
    out = subprocess.run(
        ["lsns", "--type", "net", "--noheadings", "--raw", "--output", "NS,PID"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    rows = [line.split() for line in out.splitlines()]
    return {
        int(ns) for ns, pid in rows if started_before is None or 0 < start_time(int(pid)) < started_before
    }


def _remove_leftovers(workdir: Path, seen: dict[int, int]) -> None:
    """After a failed test: kill the processes it saw (``pid: start time``, so that a pid used again
    since is left alone) and those in its namespaces, and delete those, so that nothing stays behind."""
    for pid, started in seen.items():
        if start_time(pid) == started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    for name in set(pod_namespaces(workdir)) & set(existing_namespaces()):
        listed = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, check=False)
        for word in listed.stdout.split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(word), signal.SIGKILL)
        subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)


async def test_a_runner_killed_with_sigkill_leaves_nothing_once_restarted(
    kube_stack: KubeStack, pods: Pods, tmp_path: Path
) -> None:
    node = f"runner-{uuid.uuid4().hex[:6]}"
    runner = RunnerProcess(kubeconfig=kube_stack.kubeconfig, node=node, workdir=tmp_path / "runner")
    seen: dict[int, int] = {}  # the pods' processes (pid: start time), to check and to clean up after

    def running(pid: int) -> bool:
        """Still the process the test saw (not a zombie, and the pid not used again since)."""
        return alive(pid) and start_time(pid) == seen[pid]

    async def run_leaver(name: str) -> tuple[Any, int, str]:
        """A Running pod whose command left a child; the pod, the child's pid and the pod's namespace."""
        child_file = tmp_path / f"{name}.child"
        await pods.create(pod_manifest(name, pod_spec(node, LEAVER, env={"CHILD": str(child_file)}, grace=5)))
        pod = await pods.phase(name, "Running")
        await wait_for(lambda: asyncio.to_thread(child_file.exists), bool, what=f"{name}'s child")
        child = int(await wait_for(lambda: asyncio.to_thread(child_file.read_text), bool, what="its pid"))
        seen.update({pid: start_time(pid) for pid in (pid_of(pod), child)})
        return pod, child, netns_of(pid_of(pod))

    try:
        await runner.start()
        doomed, doomed_child, doomed_ns = await run_leaver("doomed")
        survivor, survivor_child, survivor_ns = await run_leaver("survivor")
        namespaces = {doomed_ns, survivor_ns}
        inodes = {namespace_inode(name) for name in namespaces}
        assert len(namespaces) == 2
        assert pod_namespaces(runner.workdir) == namespaces

        runner.kill()
        # the kernel's part: the containers die with the runner; their children and namespaces do not
        mains = [pid_of(doomed), pid_of(survivor)]
        await wait_for(
            lambda: asyncio.to_thread(lambda: not any(map(running, mains))), bool, what="the mains to die"
        )
        assert running(doomed_child)
        assert running(survivor_child)
        assert namespaces <= set(existing_namespaces())
        assert inodes <= net_namespaces_in_use()

        # while no runner runs, one pod goes for good; the other stays (still Running, as last reported)
        await pods.core.delete_namespaced_pod("doomed", pods.namespace, grace_period_seconds=0)
        await pods.gone("doomed")

        await runner.start()
        assert runner.process is not None
        restarted = start_time(runner.process.pid)
        # started again on the same workdir, the runner has removed both namespaces and killed the
        # children in them before serving: the pod that is gone and the one it can no longer track
        assert not namespaces & set(existing_namespaces())
        assert not inodes & net_namespaces_in_use(started_before=restarted)
        assert not running(doomed_child)
        assert not running(survivor_child)

        # the pod that still exists is reported as what it is: its processes were lost
        pod = await pods.phase("survivor", "Failed")
        assert pod.status.reason == "ProcessLost"
        assert pod.status.container_statuses[0].state.terminated.exit_code == 137
        assert pod.status.pod_ip == survivor.status.pod_ip
        await pods.core.delete_namespaced_pod("survivor", pods.namespace)
        await pods.gone("survivor")

        # the restarted runner runs new pods, and deleting one leaves no process (its child included)
        # and no namespace behind
        fresh, fresh_child, fresh_ns = await run_leaver("fresh")
        assert fresh_ns not in namespaces
        await pods.core.delete_namespaced_pod("fresh", pods.namespace)
        await pods.gone("fresh")
        assert not running(pid_of(fresh))
        assert not running(fresh_child)
        assert fresh_ns not in existing_namespaces()

        assert not pod_namespaces(runner.workdir) & set(existing_namespaces())
        assert not [pid for pid in seen if running(pid)]
    except BaseException:
        print(f"runner log:\n{runner.log_tail()}")
        raise
    finally:
        runner.stop()
        _remove_leftovers(runner.workdir, seen)
        kube_stack.client.delete(f"/api/v1/nodes/{node}")
