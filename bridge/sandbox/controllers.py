"""The real controllers of the local stack, started against a :class:`~bridge.sandbox.kube.ControlPlane`.

Why these and why like this: the bridge's promise is "Kueue admits it", so the tests need the real
Kueue manager and the real JobSet controller deciding, and, for pods to exist at all, the real
kube-controller-manager (Job controller, garbage collector, service accounts), kube-scheduler, and
kwok standing in for kubelets on simulated nodes. Each runs as its own process on free loopback
ports, with leader election off, started and stopped by pid through
:class:`~bridge.sandbox.processes.ProcessGroup`, and is waited for on its health endpoint; a failure
names the component and shows its log tail.

Both Kueue and JobSet always start a TLS webhook server. On a bare API server nobody calls it (no
webhook configurations are registered), so each gets the stack's loopback serving pair in a cert
directory of its own and internal certificate management off; objects are therefore created with
the defaults their webhooks would have set (see ../shared/reference/kueue-jobset.md). Kueue, with
internal certificates off, insists on a metrics certificate at the fixed path
``/etc/kueue/metrics/certs/tls.{crt,key}``: when absent, a self-signed pair is written there (the
only file this stack puts outside its temporary directory; it is never overwritten or removed, as
another stack may be using it); the same for its visibility server's pair at ``/visibility``. That
server (an aggregated API: pending Workloads and their positions) listens on the host's own address
and is registered with the API server by an APIService per version, a selector-less Service and an
EndpointSlice (which may not hold a loopback address).

kwok runs standalone, so it gets its Stages from ``kwok_stages.yaml`` (the defaults kwokctl would
write, except that pods complete only when annotated with :data:`KWOK_POD_COMPLETE_AFTER`), and
manages only nodes annotated ``kwok.x-k8s.io/node=fake``; other nodes (e.g. those of a process
runner) are left alone. :func:`create_kwok_nodes` makes such nodes.

The KubeRay operator (``kuberay``) is optional: it is started only when asked for (it is not in
:data:`COMPONENTS`, the default), since only the Ray tiers need it and the others should not pay for
it. It runs with ``--use-kubernetes-proxy``: it reaches each RayCluster's dashboard (job submission
and status in HTTPMode) through the API server's service proxy
(``/api/v1/namespaces/<ns>/services/<head svc>:dashboard/proxy``) instead of the head Service's
cluster DNS name, which no process on the host can resolve (there is no cluster DNS here, and no
kube-proxy for a ClusterIP). That needs only the head Service's Endpoints (the head pod's IP, which
the host reaches) and the API server. Its webhooks are off (``ENABLE_WEBHOOKS`` unset), so nothing
else is needed. See docs/ray-stack-notes.md.
"""

from __future__ import annotations

import copy
import ipaddress
import os
import re
import socket
import ssl
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import yaml

from bridge.sandbox.build import StackPaths
from bridge.sandbox.kube import ApiError, Certificates, ControlPlane, RestClient, http_ready, require_binary
from bridge.sandbox.processes import ManagedProcess, ProcessGroup, StackError, free_port, wait_until

__all__ = [
    "DEFAULT_KUEUE_FRAMEWORKS",
    "KUEUE_METRICS_CERT_DIR",
    "KUEUE_NAMESPACE",
    "KUEUE_VISIBILITY_CERT_DIR",
    "KWOK_NODE_ANNOTATION",
    "KWOK_POD_COMPLETE_AFTER",
    "OPTIONAL_COMPONENTS",
    "Controllers",
    "create_kwok_nodes",
    "delete_nodes",
    "kwok_node_manifest",
    "wait_nodes_ready",
]

KUEUE_NAMESPACE = "kueue-system"
KUEUE_METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
KUEUE_VISIBILITY_CERT_DIR = Path("/visibility")
KUEUE_VISIBILITY_SERVICE = "visibility-server"
KUEUE_VISIBILITY_VERSIONS = ("v1beta2", "v1beta1")
DEFAULT_KUEUE_FRAMEWORKS = ("batch/job", "jobset.x-k8s.io/jobset")
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
KWOK_POD_COMPLETE_AFTER = "pod-complete.stage.kwok.x-k8s.io/delay"
KWOK_STAGES = Path(__file__).with_name("kwok_stages.yaml")
COMPONENTS = ("kube-controller-manager", "kube-scheduler", "kwok", "jobset", "kueue")
"""The components started by default, in dependency order."""
OPTIONAL_COMPONENTS = ("kuberay",)
"""Components started only when named: the KubeRay operator, for the Ray tiers."""
_ALL_COMPONENTS = (*COMPONENTS, *OPTIONAL_COMPONENTS)


@dataclass(frozen=True)
class _Component:
    process: ManagedProcess
    ready_url: str
    tls: bool


class Controllers:
    """kube-controller-manager, kube-scheduler, kwok, JobSet, Kueue and KubeRay against one control plane.

    ``components`` picks which to run (:data:`COMPONENTS` by default; add ``"kuberay"`` for the
    KubeRay operator, whose RayCluster and RayJob CRDs must be installed; any subset, e.g. only
    ``["kuberay"]`` beside a stack already running the others), started in dependency order.
    ``kueue_frameworks`` and ``kueue_config`` (deep-merged into the generated Kueue Configuration,
    e.g. ``fairSharing`` or ``waitForPodsReady``) shape Kueue. The CRDs of Kueue and JobSet must
    already be installed.
    """

    def __init__(
        self,
        control_plane: ControlPlane,
        *,
        paths: StackPaths | None = None,
        components: Sequence[str] = COMPONENTS,
        kueue_frameworks: Sequence[str] = DEFAULT_KUEUE_FRAMEWORKS,
        kueue_config: Mapping[str, Any] | None = None,
        start_timeout: float = 120.0,
    ) -> None:
        unknown = set(components) - set(_ALL_COMPONENTS)
        if unknown:
            raise ValueError(f"unknown components {sorted(unknown)}; choose from {_ALL_COMPONENTS}")
        self.control_plane = control_plane
        self.paths = paths or control_plane.paths
        self.components = [name for name in _ALL_COMPONENTS if name in components]
        self.kueue_frameworks = list(kueue_frameworks)
        self.kueue_config = dict(kueue_config or {})
        self.start_timeout = start_timeout
        self.workdir = control_plane.workdir
        self.group = ProcessGroup(self.workdir)
        self._running: dict[str, _Component] = {}
        self._argv: dict[str, tuple[list[str], dict[str, str]]] = {}
        self.ports: dict[str, int] = {}
        self.visibility_address: str | None = None
        """Where Kueue's visibility server listens; None: the host has no address but loopback."""
        self._lock = threading.RLock()

    # -- public surface ------------------------------------------------------------------------

    def binaries(self) -> dict[str, Path]:
        """The binary of each chosen component; :class:`MissingPrerequisiteError` if one is not built."""
        paths = {
            "kube-controller-manager": self.paths.kube_controller_manager,
            "kube-scheduler": self.paths.kube_scheduler,
            "kwok": self.paths.kwok,
            "jobset": self.paths.jobset,
            "kueue": self.paths.kueue,
            "kuberay": self.paths.kuberay,
        }
        return {name: require_binary(paths[name], name) for name in self.components}

    def start(self) -> Self:
        """Start every chosen component (all at once, as they only need the API server), wait for each."""
        binaries = self.binaries()
        try:
            if "kueue" in self.components:
                self._check_server_version_for_kueue()
                self.control_plane.ensure_namespace(KUEUE_NAMESPACE)
            for name in self.components:
                argv, env = getattr(self, "_prepare_" + name.replace("-", "_"))(binaries[name])
                self._argv[name] = (argv, env)
                self._launch(name)
            for name in self.components:
                self._wait_ready(name)
            if "kueue" in self.components:
                self._register_kueue_visibility()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every process started here, by pid, newest first (after a restart in another thread)."""
        with self._lock:
            self.group.stop_all()
            self._running.clear()

    def restart(self, name: str) -> None:
        """Stop one component (SIGTERM) and start it again with the same ports and configuration."""
        with self._lock:
            component = self._running.get(name)
            if component is None:
                raise StackError(f"{name} is not running")
            self.group.stop(component.process)
            self._launch(name)
            self._wait_ready(name)

    def process(self, name: str) -> ManagedProcess:
        return self._running[name].process

    def log_path(self, name: str) -> Path:
        return self.workdir / "logs" / f"{name}.log"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _check_server_version_for_kueue(self) -> None:
        """Kueue exits when /version is not semver, as with a kube-apiserver built without version stamps."""
        reported = str(self.control_plane.client.get("/version").get("gitVersion", ""))
        if not re.fullmatch(r"v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?", reported):
            raise StackError(
                f"kube-apiserver ({self.control_plane.paths.kube_apiserver}) reports version {reported!r}, "
                "which Kueue cannot parse and exits on: it was built without "
                "`-ldflags -X k8s.io/component-base/version.gitVersion=v<version>`. Rebuild it "
                "(remove its cache folder and run `python3 -m bridge.sandbox.build all`) or point "
                "KUBEBUILDER_ASSETS at a released kube-apiserver and etcd."
            )

    # -- launching -----------------------------------------------------------------------------

    def _launch(self, name: str) -> None:
        argv, env = self._argv[name]
        process = self.group.start(name, argv, env=env)
        url, tls = self._ready_urls[name]
        self._running[name] = _Component(process=process, ready_url=url, tls=tls)

    def _wait_ready(self, name: str) -> None:
        component = self._running[name]
        context: ssl.SSLContext | None = None
        if component.tls:
            context = ssl.create_default_context(cafile=str(self.control_plane.certificates.ca_cert))
        wait_until(
            lambda: http_ready(component.ready_url, context=context),
            timeout=self.start_timeout,
            what=f"{name} health endpoint {component.ready_url}",
            process=component.process,
            interval=0.25,
        )

    @property
    def _ready_urls(self) -> dict[str, tuple[str, bool]]:
        port = self.ports.get
        return {
            "kube-controller-manager": (f"https://127.0.0.1:{port('kube-controller-manager')}/healthz", True),
            "kube-scheduler": (f"https://127.0.0.1:{port('kube-scheduler')}/healthz", True),
            "kwok": (f"http://127.0.0.1:{port('kwok')}/healthz", False),
            "jobset": (f"http://127.0.0.1:{port('jobset')}/readyz", False),
            "kueue": (f"http://127.0.0.1:{port('kueue')}/readyz", False),
            "kuberay": (f"http://127.0.0.1:{port('kuberay')}/readyz", False),
        }

    def _component_dir(self, name: str) -> Path:
        directory = self.workdir / name
        directory.mkdir(parents=True, exist_ok=True)
        return directory

    def _kube_common(self, name: str) -> list[str]:
        """Flags kube-controller-manager and kube-scheduler share: admin identity, our serving pair."""
        certs = self.control_plane.certificates
        kubeconfig = self.control_plane.kubeconfig
        self.ports[name] = free_port()
        return [
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.ports[name]}",
            f"--cert-dir={self._component_dir(name)}",
            f"--tls-cert-file={certs.serving_cert}",
            f"--tls-private-key-file={certs.serving_key}",
        ]

    def _prepare_kube_controller_manager(self, binary: Path) -> tuple[list[str], dict[str, str]]:
        certs = self.control_plane.certificates
        argv = [
            str(binary),
            *self._kube_common("kube-controller-manager"),
            "--controllers=*",
            f"--service-account-private-key-file={certs.service_account_key}",
            f"--root-ca-file={certs.ca_cert}",
            f"--cluster-signing-cert-file={certs.ca_cert}",
            f"--cluster-signing-key-file={certs.ca_key}",
            f"--service-cluster-ip-range={self.control_plane.service_cluster_ip_range}",
            "--use-service-account-credentials=false",
            # Job-heavy tests: do not let the Job controller be the bottleneck.
            "--concurrent-job-syncs=10",
        ]
        return argv, {}

    def _prepare_kube_scheduler(self, binary: Path) -> tuple[list[str], dict[str, str]]:
        return [str(binary), *self._kube_common("kube-scheduler")], {}

    def _prepare_kwok(self, binary: Path) -> tuple[list[str], dict[str, str]]:
        if not KWOK_STAGES.is_file():
            raise StackError(f"kwok stage configuration {KWOK_STAGES} is missing from the checkout")
        self.ports["kwok"] = free_port()
        key, value = KWOK_NODE_ANNOTATION
        argv = [
            str(binary),
            f"--kubeconfig={self.control_plane.kubeconfig}",
            f"--config={KWOK_STAGES}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={key}={value}",
            # Leases keep the simulated nodes Ready for the node lifecycle controller.
            "--node-lease-duration-seconds=40",
            "--cidr=10.244.0.1/16",
            "--node-ip=10.243.0.1",
            f"--server-address=127.0.0.1:{self.ports['kwok']}",
        ]
        return argv, {}

    def _prepare_jobset(self, binary: Path) -> tuple[list[str], dict[str, str]]:
        directory = self._component_dir("jobset")
        certs_dir = self.control_plane.certificates.write_serving_pair(directory / "certs")
        self.ports["jobset"] = free_port()
        config = {
            "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
            "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.ports['jobset']}"},
            "metrics": {"bindAddress": "0", "certDir": str(certs_dir)},
            "webhook": {"host": "127.0.0.1", "port": free_port(), "certDir": str(certs_dir)},
            "clientConnection": {"qps": 500, "burst": 500},
        }
        config_path = directory / "config.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        argv = [str(binary), f"--config={config_path}", "--zap-devel=false", "--zap-log-level=info"]
        return argv, {"KUBECONFIG": str(self.control_plane.kubeconfig)}

    def _prepare_kueue(self, binary: Path) -> tuple[list[str], dict[str, str]]:
        directory = self._component_dir("kueue")
        certs = self.control_plane.certificates
        certs_dir = certs.write_serving_pair(directory / "webhook-certs")
        _ensure_kueue_fixed_certs(certs, KUEUE_METRICS_CERT_DIR, what="metrics")
        _ensure_kueue_fixed_certs(certs, KUEUE_VISIBILITY_CERT_DIR, what="visibility server")
        self.ports["kueue"] = free_port()
        self.ports["kueue-visibility"] = free_port()
        # Recorded: a stack that wants Kueue's webhooks called registers them at this port (multikueue.py).
        self.ports["kueue-webhook"] = free_port()
        self.visibility_address = host_address()
        config: dict[str, Any] = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": KUEUE_NAMESPACE,
            "manageJobsWithoutQueueName": False,
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.ports['kueue']}"},
            "metrics": {"bindAddress": f"127.0.0.1:{free_port()}"},
            "webhook": {"host": "127.0.0.1", "port": self.ports["kueue-webhook"], "certDir": str(certs_dir)},
            "clientConnection": {"qps": 100, "burst": 200},
            "integrations": {"frameworks": list(self.kueue_frameworks)},
            # The visibility API (pending workloads and their positions), served to the API server's
            # aggregator (front-proxy) through an APIService: _register_kueue_visibility.
            # An EndpointSlice may not hold a loopback address: it listens on the host's own address
            # (none: no visibility API; delegated authentication guards it either way).
            "visibilityServer": {
                "bindAddress": self.visibility_address or "127.0.0.1",
                "bindPort": self.ports["kueue-visibility"],
            },
            "featureGates": {"VisibilityOnDemand": self.visibility_address is not None},
        }
        config = _deep_merge(config, self.kueue_config)
        config_path = directory / "config.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        # --kubeconfig, not only KUBECONFIG: the visibility server reads the flag to delegate
        # authentication and authorization to the API server.
        argv = [
            str(binary),
            f"--config={config_path}",
            f"--kubeconfig={self.control_plane.kubeconfig}",
            "--zap-log-level=info",
        ]
        return argv, {"KUBECONFIG": str(self.control_plane.kubeconfig)}

    def _register_kueue_visibility(self) -> None:
        """Make Kueue's visibility server an aggregated API of this stack's API server, and wait until
        the API server reaches it. A selector-less Service and an EndpointSlice lead to the server on
        the host's own address (an EndpointSlice may not hold a loopback one; the aggregator's
        endpoint routing does not take an ExternalName Service). That address is reachable from the
        host's network too, where only delegated authentication guards it: a sandbox's trade-off. The
        server's certificate is self-signed (as Kueue's own manifests have it: TLS not verified)."""
        client = self.control_plane.client
        port = self.ports["kueue-visibility"]
        address = self.visibility_address
        if address is None:
            return
        client.apply(
            f"/api/v1/namespaces/{KUEUE_NAMESPACE}/services",
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": KUEUE_VISIBILITY_SERVICE, "namespace": KUEUE_NAMESPACE},
                "spec": {"ports": [{"name": "https", "port": port, "protocol": "TCP"}]},
            },
        )
        client.apply(
            f"/apis/discovery.k8s.io/v1/namespaces/{KUEUE_NAMESPACE}/endpointslices",
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": KUEUE_VISIBILITY_SERVICE,
                    "namespace": KUEUE_NAMESPACE,
                    "labels": {
                        "kubernetes.io/service-name": KUEUE_VISIBILITY_SERVICE,
                        "endpointslice.kubernetes.io/managed-by": "k8s-bridge-sandbox",
                    },
                },
                "addressType": "IPv4",
                "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
                "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
            },
        )
        for version in KUEUE_VISIBILITY_VERSIONS:
            client.apply(
                "/apis/apiregistration.k8s.io/v1/apiservices",
                {
                    "apiVersion": "apiregistration.k8s.io/v1",
                    "kind": "APIService",
                    "metadata": {"name": f"{version}.visibility.kueue.x-k8s.io"},
                    "spec": {
                        "group": "visibility.kueue.x-k8s.io",
                        "version": version,
                        "groupPriorityMinimum": 100,
                        "versionPriority": 100,
                        "insecureSkipTLSVerify": True,
                        "service": {
                            "name": KUEUE_VISIBILITY_SERVICE,
                            "namespace": KUEUE_NAMESPACE,
                            "port": port,
                        },
                    },
                },
            )

        def available() -> bool:
            for version in KUEUE_VISIBILITY_VERSIONS:
                status = client.get(
                    f"/apis/apiregistration.k8s.io/v1/apiservices/{version}.visibility.kueue.x-k8s.io"
                ).get("status", {})
                conditions = {c.get("type"): c.get("status") for c in status.get("conditions", [])}
                if conditions.get("Available") != "True":
                    return False
            return True

        wait_until(
            available,
            timeout=self.start_timeout,
            what="Kueue's visibility API through the API server",
            process=self._running["kueue"].process,
            interval=0.25,
        )

    def _prepare_kuberay(self, binary: Path) -> tuple[list[str], dict[str, str]]:
        self.ports["kuberay"] = free_port()
        argv = [
            str(binary),
            f"--kubeconfig={self.control_plane.kubeconfig}",
            "--enable-leader-election=false",
            f"--health-probe-bind-address=127.0.0.1:{self.ports['kuberay']}",
            "--metrics-addr=0",  # controller-runtime: "0" serves no metrics
            # The head's dashboard through the API server's service proxy: no cluster DNS needed.
            "--use-kubernetes-proxy",
            "--log-stdout-encoder=console",
            "--zap-log-level=info",
        ]
        return argv, {"KUBECONFIG": str(self.control_plane.kubeconfig)}


def host_address() -> str | None:
    """The host's own IPv4 address on its default route (no packet is sent); None without one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 9))
            address = str(probe.getsockname()[0])
        except OSError:
            return None
    return None if ipaddress.ip_address(address).is_loopback or address == "0.0.0.0" else address  # noqa: S104


def _ensure_kueue_fixed_certs(certs: Certificates, directory: Path, *, what: str) -> None:
    """Kueue reads its metrics and visibility server pairs from fixed paths when internal certs are
    off: provide each once (any pair serves: nobody verifies them against this stack's CA). Written
    aside and renamed, as another stack may be reading the same files at the same moment."""
    crt, key = directory / "tls.crt", directory / "tls.key"
    if crt.is_file() and key.is_file():
        return
    try:
        aside = certs.write_serving_pair(
            directory, cert_name=f".tls.crt.{os.getpid()}", key_name=f".tls.key.{os.getpid()}"
        )
        os.replace(aside / f".tls.key.{os.getpid()}", key)
        os.replace(aside / f".tls.crt.{os.getpid()}", crt)
    except OSError as error:
        raise StackError(
            f"Kueue needs a {what} certificate at {crt} and {key} (fixed in cmd/kueue when internal "
            f"certificate management is off) and they could not be written: {error}. Create that "
            "folder writable, or place any PEM certificate/key pair there."
        ) from error


def _deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


# ---------------------------------------------------------------------------------------------------
# Simulated nodes


def kwok_node_manifest(
    name: str,
    *,
    cpu: str = "8",
    memory: str = "32Gi",
    pods: int = 110,
    gpu: int = 0,
    gpu_resource: str = "nvidia.com/gpu",
    extra_resources: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
) -> dict[str, Any]:
    """A Node that kwok manages (annotation ``kwok.x-k8s.io/node=fake``), with the given capacity."""
    capacity: dict[str, str] = {"cpu": cpu, "memory": memory, "pods": str(pods)}
    if gpu:
        capacity[gpu_resource] = str(gpu)
    capacity.update(extra_resources or {})
    key, value = KWOK_NODE_ANNOTATION
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {key: value},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                **(labels or {}),
            },
        },
        "spec": {"taints": [dict(taint) for taint in taints]} if taints else {},
        # A Node's status may be set on create; kwok keeps it (and the lease) up to date afterwards.
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


def create_kwok_nodes(
    client: RestClient,
    *,
    count: int,
    prefix: str = "kwok-node",
    cpu: str = "8",
    memory: str = "32Gi",
    pods: int = 110,
    gpu: int = 0,
    gpu_resource: str = "nvidia.com/gpu",
    extra_resources: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    wait: bool = True,
    timeout: float = 60.0,
) -> list[str]:
    """Create ``count`` simulated nodes ``<prefix>-<i>`` and (by default) wait until kwok makes them Ready."""
    names = [f"{prefix}-{index}" for index in range(count)]
    for name in names:
        client.create(
            "/api/v1/nodes",
            kwok_node_manifest(
                name,
                cpu=cpu,
                memory=memory,
                pods=pods,
                gpu=gpu,
                gpu_resource=gpu_resource,
                extra_resources=extra_resources,
                labels=labels,
                taints=taints,
            ),
        )
    if wait:
        wait_nodes_ready(client, names, timeout=timeout)
    return names


def wait_nodes_ready(client: RestClient, names: Sequence[str], *, timeout: float = 60.0) -> None:
    """Wait until every named node has ``Ready=True`` (set by kwok: a sign that kwok is alive)."""
    deadline = time.monotonic() + timeout
    pending = list(names)
    while pending:
        pending = [name for name in pending if not _node_ready(client, name)]
        if not pending:
            return
        if time.monotonic() > deadline:
            raise StackError(
                f"nodes {pending} not Ready after {timeout:.0f}s: is kwok running and are they annotated "
                f"{KWOK_NODE_ANNOTATION[0]}={KWOK_NODE_ANNOTATION[1]}?"
            )
        time.sleep(0.2)


def _node_ready(client: RestClient, name: str) -> bool:
    try:
        node = client.get(f"/api/v1/nodes/{name}")
    except ApiError as error:
        if error.status == 404:
            return False
        raise
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in node.get("status", {}).get("conditions") or []
    )


def delete_nodes(client: RestClient, names: Sequence[str]) -> None:
    for name in names:
        client.delete(f"/api/v1/nodes/{name}")
