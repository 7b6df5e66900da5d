"""Runner pods with in-cluster configuration, volumes and webhooks, as a Helm-installed bridge needs.

On the session's stack (its API server bound to every address, with aggregator routing): a pod whose
command uses ``bridge.runtime``'s Session with in-cluster configuration authenticates as its own
ServiceAccount through the token the runner requested (it may list pods, it may not list Secrets);
a Secret volume's file appears at its mountPath (below a directory the host does not have, which
stays absent on the host) and changes when the Secret does, and a pod whose Secret is missing waits
Pending until it appears; a mutating webhook served by a runner pod behind a Service is called by the
API server; a runner pod reaches slurmrestd by the host's name; emptyDirs are the pod's own (Memory
ones in /dev/shm) and go with it, one right below / included.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import errno
import os
import sys
import textwrap
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from bridge.sandbox.kube import ApiError
from bridge.sandbox.processes import StackError
from bridge.sandbox.runner import ProcessRunner
from bridge.sandbox.slurm import SlurmCluster
from bridge.sandbox.stack import KubeStack
from tests.fixtures.slurm import started_cluster

TAINT = {"key": "k8s-bridge.io/runner-test", "value": "true", "effect": "NoSchedule"}
TOLERATION = {"key": TAINT["key"], "operator": "Equal", "value": "true", "effect": "NoSchedule"}
TIMEOUT = 90.0
REPO = Path(__file__).resolve().parents[2]


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
        await asyncio.sleep(0.3)


class Api:
    """The stack's admin REST client, called from threads, for one namespace."""

    def __init__(self, stack: KubeStack, namespace: str) -> None:
        self.stack = stack
        self.namespace = namespace

    def path(self, kind: str, name: str = "", *, group: str = "api/v1") -> str:
        base = f"/{group}/namespaces/{self.namespace}/{kind}"
        return f"{base}/{name}" if name else base

    async def create(self, kind: str, body: dict[str, Any], *, group: str = "api/v1") -> Any:
        return await asyncio.to_thread(self.stack.client.create, self.path(kind, group=group), body)

    async def get(self, kind: str, name: str, *, group: str = "api/v1") -> Any:
        try:
            return await asyncio.to_thread(self.stack.client.get, self.path(kind, name, group=group))
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    async def pod_phase(self, name: str, phases: set[str]) -> Any:
        return await wait_for(
            lambda: self.get("pods", name),
            lambda pod: pod is not None and pod.get("status", {}).get("phase") in phases,
            what=f"pod {name} in {sorted(phases)}",
        )


@pytest.fixture
async def api(kube_stack: KubeStack, kube_namespace: str) -> Api:
    # Pods need the namespace's default ServiceAccount (made by the controller manager) to be admitted.
    api = Api(kube_stack, kube_namespace)
    await wait_for(lambda: api.get("serviceaccounts", "default"), bool, what="the default ServiceAccount")
    return api


@pytest.fixture
async def runner(kube_stack: KubeStack, tmp_path: Path) -> AsyncIterator[ProcessRunner]:
    """One process runner node for the test (tainted: only this module's pods land there)."""
    name = f"runner-{uuid.uuid4().hex[:6]}"
    started = ProcessRunner(
        kubeconfig=kube_stack.kubeconfig, node_names=[name], workdir=tmp_path / "runner", taints=[TAINT]
    )
    await started.start()
    try:
        yield started
    finally:
        await started.stop()
        kube_stack.client.delete(f"/api/v1/nodes/{name}")


def pod(
    name: str, runner: ProcessRunner, argv: list[str], *, env: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    container = {
        "name": "main",
        "image": "ignored.example/none:0",
        "command": argv,
        "env": [
            {"name": key, "value": value} for key, value in {"PYTHONPATH": str(REPO), **(env or {})}.items()
        ],
        **spec.pop("container", {}),
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": spec.pop("labels", {})},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": runner.node_names[0]},
            "tolerations": [TOLERATION],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [container],
            **spec,
        },
    }


def python(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def container_log(runner: ProcessRunner, item: dict[str, Any]) -> str:
    meta = item["metadata"]
    path = runner.workdir / "logs" / f"{meta['namespace']}_{meta['name']}_{meta['uid'][:8]}_main.log"
    return path.read_text(errors="replace") if path.exists() else f"(no log at {path})"


def pid_of(item: dict[str, Any]) -> int:
    (status,) = item["status"]["containerStatuses"]
    return int(status["containerID"].removeprefix("process://"))


# -- in-cluster configuration --------------------------------------------------------------------------

IN_CLUSTER_PROGRAM = """
import asyncio, json, os, sys
from bridge.runtime import Client, Forbidden, Session

async def main() -> None:
    namespace = open("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read()
    async with await Session.load() as session:
        print("server", session.base_url, flush=True)
        client = Client(session)
        review = await client.create(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview", "metadata": {}}
        )
        user = review["status"]["userInfo"]
        print("user", json.dumps(user), flush=True)
        pods = await client.list("v1", "Pod", namespace=namespace)
        print("pods", sorted(p["metadata"]["name"] for p in pods), flush=True)
        try:
            await client.list("v1", "Secret", namespace=namespace)
        except Forbidden as refused:
            print("secrets forbidden:", refused, flush=True)
        else:
            sys.exit("listing Secrets was allowed: this is not the pod's ServiceAccount")
    if user["username"] != os.environ["WANT_USER"]:
        sys.exit(f"authenticated as {user['username']}, not {os.environ['WANT_USER']}")
    if user.get("extra", {}).get("authentication.kubernetes.io/pod-name") != [os.environ["POD_NAME"]]:
        sys.exit(f"the token is not bound to this pod: {user}")
    if os.environ["POD_NAME"] not in [p["metadata"]["name"] for p in pods]:
        sys.exit("the pod does not see itself")

asyncio.run(main())
"""


async def test_a_pod_authenticates_as_its_service_account_with_in_cluster_configuration(
    api: Api, runner: ProcessRunner
) -> None:
    account = "reader"
    await api.create("serviceaccounts", {"metadata": {"name": account}})
    rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]
    rbac = "apis/rbac.authorization.k8s.io/v1"
    await api.create("roles", {"metadata": {"name": "pod-reader"}, "rules": rules}, group=rbac)
    binding = {
        "metadata": {"name": "pod-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": api.namespace}],
    }
    await api.create("rolebindings", binding, group=rbac)
    env = {"WANT_USER": f"system:serviceaccount:{api.namespace}:{account}", "POD_NAME": "in-cluster"}
    await api.create(
        "pods", pod("in-cluster", runner, python(IN_CLUSTER_PROGRAM), env=env, serviceAccountName=account)
    )
    done = await api.pod_phase("in-cluster", {"Succeeded", "Failed"})
    log = container_log(runner, done)
    assert done["status"]["phase"] == "Succeeded", log
    assert (
        f"server https://kubernetes.default.svc:{runner.api_server.port if runner.api_server else 0}" in log
    )
    assert "secrets forbidden:" in log


# -- a Secret volume -----------------------------------------------------------------------------------


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


async def test_a_secret_volume_appears_at_its_mount_path_and_follows_the_secret(
    api: Api, runner: ProcessRunner
) -> None:
    mount_dir = f"/etc/k8s-bridge-test-{uuid.uuid4().hex[:6]}/secret"
    assert not Path(mount_dir).parent.exists()
    await api.create("secrets", {"metadata": {"name": "greeting"}, "data": {"text": _b64("hello")}})
    volume = {
        "name": "greeting",
        "secret": {"secretName": "greeting", "items": [{"key": "text", "path": "now"}]},
    }
    manifest = pod(
        "reader",
        runner,
        ["sleep", "600"],
        volumes=[volume],
        container={"volumeMounts": [{"name": "greeting", "mountPath": mount_dir}]},
    )
    await api.create("pods", manifest)
    running = await api.pod_phase("reader", {"Running", "Failed"})
    assert running["status"]["phase"] == "Running", container_log(runner, running)
    inside = Path(f"/proc/{pid_of(running)}/root")
    path = inside / mount_dir.lstrip("/") / "now"

    async def seen() -> bool:
        return path.exists()

    # The pid is the container's from its start: its command runs once its mounts are made, but seen
    # from outside, on a loaded machine, the process may still be making them.
    await wait_for(seen, bool, what=f"{path} inside the container")
    assert path.read_text() == "hello"
    assert (inside / mount_dir.lstrip("/") / "..data").is_symlink()
    with pytest.raises(OSError, match="Read-only file system") as written:
        path.open("a").close()
    assert written.value.errno == errno.EROFS
    # The host's /etc is whole inside (mirrored, not hidden), and nothing of the mount is on the host.
    assert sorted(os.listdir("/etc")) == sorted(
        set(os.listdir(inside / "etc")) - {Path(mount_dir).parent.name}
    )
    assert not Path(mount_dir).parent.exists()
    # The ServiceAccount's files, where in-cluster configuration reads them.
    # (/var/run is a symlink to /run, which a path through /proc/<pid>/root would resolve on the host.)
    account = inside / "run/secrets/kubernetes.io/serviceaccount"
    assert "netns" in os.listdir(inside / "run")  # the host's /run, mirrored
    assert (account / "namespace").read_text() == api.namespace
    assert (account / "token").read_text().count(".") == 2  # a JWT
    assert (account / "ca.crt").read_bytes() == api.stack.control_plane.certificates.ca_cert.read_bytes()
    assert not Path("/run/secrets").exists()

    patch = {"data": {"text": _b64("changed")}}
    await asyncio.to_thread(
        api.stack.client.request,
        "PATCH",
        api.path("secrets", "greeting"),
        body=patch,
        content_type="application/merge-patch+json",
    )

    async def content() -> str:
        return path.read_text()

    await wait_for(content, lambda text: text == "changed", what="the mounted file to follow the Secret")


# -- a webhook behind a Service ------------------------------------------------------------------------


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def webhook_pair(dns_name: str) -> tuple[bytes, bytes, bytes]:
    """A CA, and a serving certificate for ``dns_name`` and its key signed by it (PEM)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "webhook-test-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_name)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(dns_name)]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return _pem(ca), _pem(leaf), key_pem


WEBHOOK_PROGRAM = """
import base64, http.server, json, ssl, sys
certs = sys.argv[1]

class Hook(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        patch = [{"op": "add", "path": "/metadata/labels", "value": {"k8s-bridge.test/webhook": "called"}}]
        answer = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {
                "uid": review["request"]["uid"],
                "allowed": True,
                "patchType": "JSONPatch",
                "patch": base64.b64encode(json.dumps(patch).encode()).decode(),
            },
        }
        body = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

server = http.server.HTTPServer(("0.0.0.0", 8443), Hook)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(f"{certs}/tls.crt", f"{certs}/tls.key")
server.socket = context.wrap_socket(server.socket, server_side=True)
print("serving", flush=True)
server.serve_forever()
"""


@contextlib.contextmanager
def webhook_configuration(stack: KubeStack, body: dict[str, Any]) -> Iterator[None]:
    collection = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
    stack.client.create(collection, body)
    try:
        yield
    finally:
        stack.client.delete(f"{collection}/{body['metadata']['name']}")


async def test_a_webhook_served_by_a_runner_pod_behind_a_service_is_called_by_the_api_server(
    api: Api, runner: ProcessRunner
) -> None:
    ca, cert, key = webhook_pair(f"hook.{api.namespace}.svc")
    secret = {"metadata": {"name": "hook-tls"}, "type": "kubernetes.io/tls"}
    secret["data"] = {"tls.crt": base64.b64encode(cert).decode(), "tls.key": base64.b64encode(key).decode()}
    await api.create("secrets", secret)
    certs = "/tmp/k8s-webhook-server/serving-certs"
    manifest = pod(
        "hook",
        runner,
        [*python(WEBHOOK_PROGRAM), certs],
        labels={"app": "hook"},
        volumes=[{"name": "tls", "secret": {"secretName": "hook-tls"}}],
        container={"volumeMounts": [{"name": "tls", "mountPath": certs, "readOnly": True}]},
    )
    await api.create("pods", manifest)
    service = {
        "metadata": {"name": "hook"},
        "spec": {"selector": {"app": "hook"}, "ports": [{"port": 443, "targetPort": 8443}]},
    }
    await api.create("services", service)
    running = await api.pod_phase("hook", {"Running", "Failed"})
    assert running["status"]["phase"] == "Running", container_log(runner, running)
    name = f"k8s-bridge-test-{api.namespace}"
    configuration = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": "hook.k8s-bridge.test",
                "clientConfig": {
                    "service": {"namespace": api.namespace, "name": "hook", "port": 443, "path": "/mutate"},
                    "caBundle": base64.b64encode(ca).decode(),
                },
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["configmaps"],
                    }
                ],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": api.namespace}},
                "objectSelector": {"matchLabels": {"k8s-bridge.test/probe": "true"}},
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "failurePolicy": "Fail",
                "timeoutSeconds": 10,
            }
        ],
    }
    probes = iter(range(10_000))

    async def create_probe() -> Any:
        """A new ConfigMap as created (the webhook labels it), or the error that refused it."""
        body = {"metadata": {"name": f"probe-{next(probes)}", "labels": {"k8s-bridge.test/probe": "true"}}}
        try:
            return await api.create("configmaps", body)
        except (ApiError, StackError) as error:
            return str(error)

    def mutated(made: Any) -> bool:
        return (
            isinstance(made, dict) and made["metadata"]["labels"].get("k8s-bridge.test/webhook") == "called"
        )

    with webhook_configuration(api.stack, configuration):
        # The API server picks the configuration up within a moment: until then probes pass unmutated.
        await wait_for(create_probe, mutated, what="a ConfigMap mutated by the webhook")
    assert "serving" in container_log(runner, running)


# -- slurmrestd from a pod -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    yield from started_cluster(SlurmCluster(version="22.05"))


REST_PROGRAM = """
import json, os, urllib.request
request = urllib.request.Request(
    os.environ["REST_URL"], headers={"X-SLURM-USER-NAME": "slurm", "X-SLURM-USER-TOKEN": os.environ["TOKEN"]}
)
with urllib.request.urlopen(request, timeout=20) as response:
    print("status", response.status, "jobs" in json.loads(response.read()), flush=True)
"""


async def test_a_runner_pod_reaches_slurmrestd_by_the_hosts_name(
    api: Api, runner: ProcessRunner, slurm: SlurmCluster
) -> None:
    env = {"REST_URL": f"{slurm.pod_rest_url}/slurm/{slurm.rest_version}/jobs", "TOKEN": slurm.token()}
    await api.create("pods", pod("rest", runner, python(REST_PROGRAM), env=env))
    done = await api.pod_phase("rest", {"Succeeded", "Failed"})
    log = container_log(runner, done)
    assert done["status"]["phase"] == "Succeeded", log
    assert "status 200 True" in log


# -- emptyDir volumes ----------------------------------------------------------------------------------

SHARED_PROGRAM = """
import os, pathlib, time
pathlib.Path("/dev/shm/from-pod").write_text("in memory")
pathlib.Path("/scratch/a/file").parent.mkdir(parents=True)
pathlib.Path("/scratch/a/file").write_text("on disk")
time.sleep(600)
"""


async def test_empty_dirs_are_the_pods_own_and_go_with_it(api: Api, runner: ProcessRunner) -> None:
    volumes = [{"name": "shm", "emptyDir": {"medium": "Memory"}}, {"name": "scratch", "emptyDir": {}}]
    mounts = [{"name": "shm", "mountPath": "/dev/shm"}, {"name": "scratch", "mountPath": "/scratch"}]
    await api.create(
        "pods",
        pod("shared", runner, python(SHARED_PROGRAM), volumes=volumes, container={"volumeMounts": mounts}),
    )
    running = await api.pod_phase("shared", {"Running", "Failed"})
    assert running["status"]["phase"] == "Running", container_log(runner, running)
    namespace = runner.namespace_of(running["metadata"]["uid"])
    assert namespace is not None
    shm = Path("/dev/shm") / f"kb-pod-{namespace.name.removeprefix('kb-')}" / "shm"
    written = shm / "from-pod"
    await wait_for(lambda: asyncio.to_thread(written.exists), bool, what=str(written))
    assert (shm / "from-pod").read_text() == "in memory"
    assert not Path("/dev/shm/from-pod").exists(), "the host's /dev/shm is not the pod's"
    scratch = runner.workdir / "pods" / running["metadata"]["uid"] / "volumes" / "scratch"
    await wait_for(lambda: asyncio.to_thread((scratch / "a" / "file").exists), bool, what="the file on disk")
    assert not Path("/scratch").exists()
    # /scratch needed a mirror of / itself: the pod is chrooted into it, and sees all of the host's /.
    assert set(os.listdir(f"/proc/{pid_of(running)}/root")) == {*os.listdir("/"), "scratch"}
    await asyncio.to_thread(api.stack.client.delete, api.path("pods", "shared"))
    await wait_for(lambda: api.get("pods", "shared"), lambda item: item is None, what="the pod gone")
    await wait_for(
        lambda: asyncio.to_thread(shm.parent.exists), lambda there: not there, what=f"{shm.parent} gone"
    )


async def test_a_pod_waits_pending_for_its_secret_then_starts(api: Api, runner: ProcessRunner) -> None:
    volume = {"name": "late", "secret": {"secretName": "late"}}
    mount = {"name": "late", "mountPath": "/etc/k8s-bridge-test-late"}
    argv = python(
        "import pathlib, sys; sys.exit(pathlib.Path('/etc/k8s-bridge-test-late/key').read_text() != 'v')"
    )
    await api.create(
        "pods", pod("waiting", runner, argv, volumes=[volume], container={"volumeMounts": [mount]})
    )
    waiting = await wait_for(
        lambda: api.get("pods", "waiting"),
        lambda item: item is not None and item.get("status", {}).get("containerStatuses"),
        what="the pod's first status",
    )
    assert waiting["status"]["phase"] == "Pending"
    (state,) = waiting["status"]["containerStatuses"]
    assert state["state"] == {"waiting": {"reason": "ContainerCreating"}}
    await api.create("secrets", {"metadata": {"name": "late"}, "data": {"key": _b64("v")}})
    done = await api.pod_phase("waiting", {"Succeeded", "Failed"})
    assert done["status"]["phase"] == "Succeeded", container_log(runner, done)
