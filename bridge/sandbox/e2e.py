"""The whole local stack for end-to-end runs of the Slurm bridge: Kubernetes + runner nodes + Slurm + Kueue.

Why a composition of its own: each part already exists alone (:class:`~bridge.sandbox.stack.KubeStack`,
:mod:`bridge.sandbox.runner`, :class:`~bridge.sandbox.slurm.SlurmCluster`); an end-to-end claim such as
"the job ran on exactly the two nodes Kueue admitted" needs them wired to each other the way a site
would wire them, and the wiring is the same for every e2e test, the demo and the benchmarks:

- process-runner nodes (real pods: each pod's command runs in its own network namespace), labelled
  and tainted for one ResourceFlavor, so only Kueue-admitted pods of that flavor land there; kwok nodes
  beside them for Kubernetes workloads that need no process;
- Kueue objects: the ResourceFlavor (nodeLabels select the runner nodes, tolerations pass the taint;
  with topology levels in the settings, a Kueue Topology over the runner nodes' labels that the
  flavor names, for topology-aware scheduling),
  a ClusterQueue with a small quota and in-queue preemption (in a cohort when the settings name one),
  the LocalQueue the bridged JobSets go to,
  and two WorkloadPriorityClasses (Slurm's, and a higher one for urgent Kubernetes work);
- the JWT Secret (a SlurmUser token from ``scontrol token``) and a WorkloadMixing pointing at the real
  slurmrestd and slurmctld, whose slurmd pod command is :mod:`bridge.sandbox.slurmd_pod` for this
  cluster's workdir (``mixing=False``: neither it nor its CRD, when the Helm chart makes them);
- the bridge itself as a subprocess (:class:`BridgeProcess`), so a test can SIGKILL and restart it.

Everything runs synchronously (urllib and subprocesses): the stack outlives any one event loop, so a
pytest fixture of module or session scope can own it while tests run their own loops. The runner runs
as a subprocess for the same reason. :meth:`E2EStack.leaks` lists what a finished test left behind.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from bridge.api.mixing import WorkloadMixingSpec
from bridge.sandbox.controllers import create_kwok_nodes, delete_nodes, wait_nodes_ready
from bridge.sandbox.kube import ApiError, RestClient
from bridge.sandbox.netns import existing_namespaces
from bridge.sandbox.processes import ManagedProcess, ProcessGroup, StackError, free_port, log_tail
from bridge.sandbox.runner import pod_namespaces
from bridge.sandbox.slurm import BRIDGE_PARTITION, SlurmCluster
from bridge.sandbox.stack import KubeStack
from translators.slurm import node_name_job_id

__all__ = [
    "CHART_CRDS",
    "BridgeProcess",
    "E2ESettings",
    "E2EStack",
    "bridge_node_names",
    "cluster_queue_object",
    "local_queue_object",
    "priority_class_object",
    "processes_of_cluster",
    "topology_object",
    "wait_for",
]

CHART_CRDS = Path(__file__).resolve().parents[2] / "charts" / "k8s-bridge" / "crds"
KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2"
MIXINGS = "/apis/bridge.k8s-bridge.io/v1alpha1/workloadmixings"


def local_queue_object(name: str, *, namespace: str, cluster_queue: str) -> tuple[str, dict[str, Any]]:
    """(collection path, manifest) of a Kueue LocalQueue, as :meth:`RestClient.apply` takes them."""
    manifest = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue},
    }
    return f"{KUEUE}/namespaces/{namespace}/localqueues", manifest


def cluster_queue_object(
    name: str,
    *,
    flavor: str,
    cpu: str,
    memory: str,
    cohort: str | None = None,
    preemption: Mapping[str, Any] | None = None,
    weight: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """(collection path, manifest) of a Kueue ClusterQueue with ``cpu`` and ``memory`` of nominal
    quota in one flavor, open to every namespace. ``cohort``: its ``spec.cohortName`` (it borrows the
    idle quota of the cohort's other queues and lends its own); ``preemption``: its policy (default:
    in-queue preemption of lower priorities); ``weight``: its ``fairSharing.weight`` (used when Kueue's
    fair sharing is on)."""
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory"],
                "flavors": [
                    {
                        "name": flavor,
                        "resources": [
                            {"name": "cpu", "nominalQuota": cpu},
                            {"name": "memory", "nominalQuota": memory},
                        ],
                    }
                ],
            }
        ],
        "preemption": dict(preemption or {"withinClusterQueue": "LowerPriority"}),
    }
    if cohort is not None:
        spec["cohortName"] = cohort
    if weight is not None:
        spec["fairSharing"] = {"weight": weight}
    manifest = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": spec,
    }
    return f"{KUEUE}/clusterqueues", manifest


def topology_object(name: str, *, levels: Sequence[str]) -> tuple[str, dict[str, Any]]:
    """(collection path, manifest) of a Kueue Topology: ``levels`` are node labels, highest first."""
    manifest = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": [{"nodeLabel": level} for level in levels]},
    }
    return f"{KUEUE}/topologies", manifest


def priority_class_object(name: str, *, value: int) -> tuple[str, dict[str, Any]]:
    """(collection path, manifest) of a Kueue WorkloadPriorityClass."""
    manifest = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": name},
        "value": value,
    }
    return f"{KUEUE}/workloadpriorityclasses", manifest


@dataclass(frozen=True, kw_only=True)
class E2ESettings:
    """Names and sizes of the e2e wiring; the defaults give quota for exactly one 2 x 1-CPU job."""

    pool: str = "e2e-slurm"
    """Value of the ``k8s-bridge.io/pool`` label and taint on the runner nodes; names the Kueue objects."""
    runner_nodes: int = 4
    runner_cpu: str = "4"
    runner_memory: str = "8Gi"
    kwok_nodes: int = 2
    quota_cpu: str = "2"
    quota_memory: str = "2Gi"
    cohort: str | None = None
    """Kueue cohort of the ClusterQueue (``spec.cohortName``); None: in none, it uses its own quota only."""
    fair_sharing_weight: str | None = None
    """The ClusterQueue's ``fairSharing.weight``; None: Kueue's default (1)."""
    namespace: str = "slurm"
    """Namespace of the LocalQueue, hence of the bridged JobSets and their pods."""
    bridge_namespace: str = "k8s-bridge"
    """Namespace of the JWT Secret."""
    local_queue: str = "hpc"
    slurm_priority: str = "e2e-slurm-normal"
    slurm_priority_value: int = 100
    urgent_priority: str = "e2e-urgent"
    urgent_priority_value: int = 10000
    poll_interval_seconds: float = 1.0
    runner_node_labels: tuple[Mapping[str, str], ...] = ()
    """More labels of runner node ``i`` (``runner_node_labels[i]``), beyond the pool's: e.g. its block
    and rack of a Kueue Topology. Nodes beyond the tuple get none."""
    topology_levels: tuple[str, ...] = ()
    """Node labels of the levels of a Kueue Topology (highest first, ``kubernetes.io/hostname`` last if
    at all), named after the pool; the ResourceFlavor names it (``topologyName``), so Kueue places the
    pods of its workloads topology-aware. Empty: no Topology."""
    slurm_topology: Mapping[str, Any] | None = None
    """The WorkloadMixing's ``spec.slurm.topology`` (``switches``, ``partitions``); None: none."""

    def __post_init__(self) -> None:
        if len(self.runner_node_labels) > self.runner_nodes:
            raise ValueError(
                f"labels for {len(self.runner_node_labels)} runner nodes, {self.runner_nodes} made"
            )

    @property
    def topology(self) -> str | None:
        """Name of the Kueue Topology over the runner nodes, None without ``topology_levels``."""
        return self.pool if self.topology_levels else None

    @property
    def flavor(self) -> str:
        return f"{self.pool}-runner"

    @property
    def cluster_queue(self) -> str:
        return self.pool

    @property
    def pool_label(self) -> tuple[str, str]:
        return ("k8s-bridge.io/pool", self.pool)


def wait_for(
    predicate: Callable[[], Any],
    *,
    timeout: float,
    what: str,
    interval: float = 0.5,
    describe: Callable[[], str] | None = None,
) -> Any:
    """Poll ``predicate`` until it returns something truthy (returned); on timeout a StackError that
    says what was awaited and, with ``describe``, how things stood."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = f"\n{describe()}" if describe is not None else ""
            raise StackError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        time.sleep(interval)


def bridge_node_names(cluster: SlurmCluster) -> list[str]:
    """Slurm nodes named like the bridge's dynamic nodes (``b<job>[r<run>]-<index>``) that exist now."""
    out = cluster.scontrol("show", "nodes", "--oneliner", check=False)
    names = [w.removeprefix("NodeName=") for w in out.split() if w.startswith("NodeName=")]
    return [n for n in names if node_name_job_id(n) is not None]


def _proc_text(pid: str, name: str) -> str:
    try:
        return (Path("/proc") / pid / name).read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _proc_link(pid: str, name: str) -> str:
    try:
        return os.readlink(Path("/proc") / pid / name)
    except OSError:
        return ""


def _process_group(pid: str) -> int | None:
    stat = _proc_text(pid, "stat")
    if ")" not in stat:
        return None
    return int(stat.rsplit(")", 1)[1].split()[2])


def processes_of_cluster(cluster: SlurmCluster) -> list[str]:
    """Processes that belong to ``cluster``'s nodes or jobs but not to its daemons: slurmd pods (their
    ``--conf-server`` names this cluster), slurmstepd and job steps (their root or working directory is
    under the cluster's workdir). Each as ``"<pid> <command line>"``. Empty after a clean test."""
    workdir = str(cluster.workdir)
    conf_server = f"{cluster.controller_address}:{cluster.controller_port}"
    daemons = set(cluster.process_ids())
    found: list[str] = []
    for entry in Path("/proc").iterdir():
        pid = entry.name
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        if _process_group(pid) in daemons:
            continue
        cmdline = _proc_text(pid, "cmdline").strip()
        if not cmdline:
            continue  # kernel thread or already gone
        root, cwd = _proc_link(pid, "root"), _proc_link(pid, "cwd")
        ours = conf_server in cmdline.split() or any(
            path == workdir or path.startswith(workdir + "/") for path in (root, cwd)
        )
        if ours:
            found.append(f"{pid} {cmdline[:200]}")
    return found


def bridge_environment(caller: Mapping[str, str], extra: Mapping[str, str]) -> dict[str, str]:
    """The bridge subprocess's whole environment: ``PATH``, ``HOME`` and ``PYTHONPATH`` of the caller,
    then ``extra``. The caller's import path, so that the bridge runs the same sources as the test
    that starts it (a checkout other than the editable install's); nothing else of the caller's, whose
    ``K8S_BRIDGE_*`` variables would set the bridge's flags."""
    environment = {
        "PATH": caller.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "HOME": caller.get("HOME", "/root"),
        "PYTHONUNBUFFERED": "1",
    }
    if caller.get("PYTHONPATH"):
        environment["PYTHONPATH"] = caller["PYTHONPATH"]
    return {**environment, **extra}


@dataclass
class BridgeProcess:
    """``python -m bridge.slurm`` as a subprocess of the stack: start, SIGKILL, restart, read its logs and
    metrics. The argv is fixed at construction; ``extra_env`` reaches only this process."""

    group: ProcessGroup
    argv: list[str]
    env: dict[str, str]
    metrics_port: int
    name: str = "bridge-slurm"
    process: ManagedProcess | None = field(default=None, init=False)
    starts: int = field(default=0, init=False)

    @property
    def log_path(self) -> Path:
        return self.group.workdir / "logs" / f"{self.name}.log"

    def start(self) -> Self:
        if self.process is not None and self.process.alive():
            raise StackError("the bridge already runs")
        with self.log_path.open("a") as log:
            log.write(f"--- k8s-bridge e2e: start #{self.starts + 1} at {time.time():.3f}\n")
        self.process = self.group.start(self.name, self.argv, env=self.env, inherit_env=False)
        self.starts += 1
        return self

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()

    def kill(self) -> None:
        """SIGKILL the bridge (its whole process group): a crash, nothing flushed, no cleanup."""
        if self.process is not None:
            self.group.kill(self.process)

    def stop(self, *, grace: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after ``grace``; the exit code (None if it was not running)."""
        if self.process is None:
            return None
        self.group.stop(self.process, grace=grace, sig=signal.SIGTERM)
        return self.process.popen.returncode

    def restart(self) -> Self:
        self.kill()
        return self.start()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 60) -> str:
        return log_tail(self.log_path, lines=lines)

    def metrics_text(self) -> str | None:
        """The Prometheus text of ``/metrics``, or None when the bridge does not answer."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                return str(reply.read().decode())
        except (urllib.error.URLError, OSError):
            return None

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples of ``name`` whose labels include ``labels`` (0 when none or no answer)."""
        return sum(
            value
            for pairs, value in self.metric_samples(name).items()
            if all(dict(pairs).get(k) == v for k, v in labels.items())
        )

    def metric_samples(self, name: str) -> dict[tuple[tuple[str, str], ...], float]:
        """Each sample of ``name`` by its sorted label pairs (empty when none or no answer)."""
        text = self.metrics_text() or ""
        samples: dict[tuple[tuple[str, str], ...], float] = {}
        for line in text.splitlines():
            if line.startswith("#") or not line.startswith(name):
                continue
            head, _, value = line.rpartition(" ")
            sample, _, label_text = head.partition("{")
            if sample != name:
                continue
            pairs = tuple(sorted(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', label_text)))
            samples[pairs] = float(value)
        return samples


class E2EStack:
    """Wires a started KubeStack and a started SlurmCluster together (see the module docstring).

    Use as a context manager or :meth:`start` / :meth:`stop`. It does not own the KubeStack or the
    SlurmCluster (fixtures share them); it owns the runner subprocess, the nodes, Kueue objects, Secret
    and WorkloadMixing it creates, and the bridge processes it starts.
    """

    def __init__(
        self,
        *,
        kube: KubeStack,
        slurm: SlurmCluster,
        workdir: Path,
        settings: E2ESettings | None = None,
        mixing: bool = True,
    ) -> None:
        self.kube = kube
        self.mixing = mixing
        """Install the WorkloadMixing CRD and create the WorkloadMixing (:meth:`mixing_spec_dict`);
        False when the Helm chart does both (its ``crds/``, and values built on that spec:
        ``tests/e2e/test_helm_install.py``)."""
        self.slurm = slurm
        self.settings = settings or E2ESettings()
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.group = ProcessGroup(self.workdir)
        self.runner: ManagedProcess | None = None
        self.bridges: list[BridgeProcess] = []
        # Unique on the host: one process runner serves a node name at a time, host-wide
        # (bridge.sandbox.runner.lock_node), and other stacks of the same pool may be running.
        token = uuid.uuid4().hex[:4]
        self.runner_node_names = [
            f"{self.settings.pool}-runner-{token}-{i}" for i in range(self.settings.runner_nodes)
        ]
        self.kwok_node_names: list[str] = []
        self.timings: dict[str, float] = {}

    # ---- names -------------------------------------------------------------------------------------

    @property
    def client(self) -> RestClient:
        return self.kube.client

    @property
    def cluster_name(self) -> str:
        """Slurm's ClusterName (``kb2205`` / ``kb2411``), also the WorkloadMixing's clusterName."""
        return f"kb{self.slurm.version.replace('.', '')}"

    @property
    def mixing_name(self) -> str:
        return f"{self.settings.pool}-{self.cluster_name}"

    @property
    def secret_name(self) -> str:
        return f"{self.cluster_name}-jwt"

    @property
    def conf_server(self) -> str:
        return f"{self.slurm.controller_address}:{self.slurm.controller_port}"

    def slurmd_command(self) -> list[str]:
        """The slurmd pod command: the local-stack shim for this cluster, then ``slurmd``."""
        shim = [sys.executable, "-m", "bridge.sandbox.slurmd_pod", "--cluster-dir", str(self.slurm.workdir)]
        return [*shim, "--", "slurmd"]

    def scontrol_env(self) -> dict[str, str]:
        """What a process on the host needs to run this cluster's ``scontrol`` (with a JWT added)."""
        return {"SLURM_CONF": str(self.slurm.conf_path)}

    def scontrol_prefix(self) -> list[str]:
        """The argv prefix that runs this cluster's Slurm commands (``chroot <root>`` for 24.11)."""
        return ["chroot", str(self.slurm.sysroot)] if self.slurm.sysroot != Path("/") else []

    # ---- manifests ---------------------------------------------------------------------------------

    def mixing_spec_dict(self) -> dict[str, Any]:
        s = self.settings
        return {
            "slurm": {
                "url": self.slurm.rest_url,
                "auth": {
                    "tokenSecretRef": {
                        "namespace": s.bridge_namespace,
                        "name": self.secret_name,
                        "key": "token",
                    },
                    "userName": "slurm",
                },
                "clusterName": self.cluster_name,
                "confServer": self.conf_server,
                "partitions": [BRIDGE_PARTITION],
                "mapping": {
                    "default": {
                        "localQueue": {"namespace": s.namespace, "name": s.local_queue},
                        "priorityClass": s.slurm_priority,
                    }
                },
                "podTemplate": {"image": "k8s-bridge.local/slurmd-shim", "command": self.slurmd_command()},
                "pollIntervalSeconds": s.poll_interval_seconds,
                "limits": {"maxNodesPerJob": s.runner_nodes},
                **({"topology": dict(s.slurm_topology)} if s.slurm_topology is not None else {}),
            },
            "shared": {"jobSetNamespace": s.namespace},
        }

    def mixing_spec(self) -> WorkloadMixingSpec:
        """The WorkloadMixing spec as the bridge's models read it (for ``translate`` in tests)."""
        return WorkloadMixingSpec.model_validate(self.mixing_spec_dict())

    def kueue_objects(self) -> list[tuple[str, dict[str, Any]]]:
        """(collection, manifest) of the Topology (with ``topology_levels``), ResourceFlavor,
        ClusterQueue, LocalQueue and priority classes."""
        s = self.settings
        key, value = s.pool_label
        flavor: dict[str, Any] = {
            "nodeLabels": {key: value},
            "tolerations": [{"key": key, "operator": "Equal", "value": value, "effect": "NoSchedule"}],
        }
        topology: list[tuple[str, dict[str, Any]]] = []
        if s.topology is not None:
            flavor["topologyName"] = s.topology
            topology.append(topology_object(s.topology, levels=s.topology_levels))
        return [
            *topology,
            (
                f"{KUEUE}/resourceflavors",
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "ResourceFlavor",
                    "metadata": {"name": s.flavor},
                    "spec": flavor,
                },
            ),
            cluster_queue_object(
                s.cluster_queue,
                flavor=s.flavor,
                cpu=s.quota_cpu,
                memory=s.quota_memory,
                cohort=s.cohort,
                weight=s.fair_sharing_weight,
            ),
            local_queue_object(s.local_queue, namespace=s.namespace, cluster_queue=s.cluster_queue),
            *(
                priority_class_object(name, value=priority)
                for name, priority in (
                    (s.slurm_priority, s.slurm_priority_value),
                    (s.urgent_priority, s.urgent_priority_value),
                )
            ),
        ]

    def batch_job(
        self,
        name: str,
        *,
        command: Sequence[str],
        cpu: str,
        memory: str = "64Mi",
        priority: str | None = None,
        parallelism: int = 1,
        queue: tuple[str, str] | None = None,
    ) -> dict[str, Any]:
        """A suspended batch/v1 Job in the LocalQueue (Kueue's webhook is not there to suspend it);
        ``queue``: (namespace, LocalQueue) of another team's queue instead of the bridge's."""
        s = self.settings
        namespace, local_queue = queue or (s.namespace, s.local_queue)
        labels = {"kueue.x-k8s.io/queue-name": local_queue}
        if priority is not None:
            labels["kueue.x-k8s.io/priority-class"] = priority
        resources = {"cpu": cpu, "memory": memory}
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {
                "suspend": True,
                "parallelism": parallelism,
                "completions": parallelism,
                "backoffLimit": 0,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "terminationGracePeriodSeconds": 5,
                        "containers": [
                            {
                                "name": "work",
                                "image": "k8s-bridge.local/none",
                                "command": list(command),
                                "resources": {"requests": resources, "limits": resources},
                            }
                        ],
                    }
                },
            },
        }

    # ---- lifecycle ---------------------------------------------------------------------------------

    def _apply_kueue_object(self, collection: str, manifest: dict[str, Any]) -> None:
        """Apply one of :meth:`kueue_objects`. A LocalQueue's ClusterQueue cannot change: one left by
        an earlier stack of another pool on the same API server is replaced."""
        try:
            self.client.apply(collection, manifest)
        except ApiError as error:
            if manifest["kind"] != "LocalQueue" or error.status != 422:
                raise
            path = f"{collection}/{manifest['metadata']['name']}"
            self.client.delete(path)
            deadline = time.monotonic() + 30.0
            while self.client.exists(path) and time.monotonic() < deadline:
                time.sleep(0.2)
            self.client.apply(collection, manifest)

    def start(self) -> Self:
        began = time.monotonic()
        try:
            if self.mixing:
                self.kube.control_plane.install_crds(CHART_CRDS)
            for namespace in (self.settings.namespace, self.settings.bridge_namespace):
                self.kube.control_plane.ensure_namespace(namespace)
            self._start_runner()
            self.kwok_node_names = self._create_kwok_nodes()
            for collection, manifest in self.kueue_objects():
                self._apply_kueue_object(collection, manifest)
            self._wait_cluster_queue_active()
            self.refresh_token()
            if self.mixing:
                self.client.apply(
                    MIXINGS,
                    {
                        "apiVersion": "bridge.k8s-bridge.io/v1alpha1",
                        "kind": "WorkloadMixing",
                        "metadata": {"name": self.mixing_name},
                        "spec": self.mixing_spec_dict(),
                    },
                )
        except BaseException:
            self.stop()
            raise
        self.timings["start"] = time.monotonic() - began
        return self

    def stop(self) -> None:
        """Stop the bridges and the runner (its pods' processes and namespaces go with it), delete what
        :meth:`start` created in the API (nodes, Secret, WorkloadMixing; Kueue objects are kept for reuse
        by the next stack on the same KubeStack)."""
        for bridge in self.bridges:
            bridge.stop(grace=5.0)
        self.bridges.clear()
        if self.runner is not None:
            self.group.stop(self.runner, grace=15.0)
            self.runner = None
        self.group.stop_all(grace=5.0)
        for path in (
            *([f"{MIXINGS}/{self.mixing_name}"] if self.mixing else []),
            f"/api/v1/namespaces/{self.settings.bridge_namespace}/secrets/{self.secret_name}",
        ):
            with contextlib.suppress(StackError, OSError):
                self.client.delete(path)
        with contextlib.suppress(StackError, OSError):
            delete_nodes(self.client, [*self.runner_node_names, *self.kwok_node_names])

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _start_runner(self) -> None:
        key, value = self.settings.pool_label
        argv = [sys.executable, "-m", "bridge.sandbox.runner", "--kubeconfig", str(self.kube.kubeconfig)]
        for name in self.runner_node_names:
            argv += ["--node", name]
        argv += ["--workdir", str(self.workdir / "runner"), "--cpu", self.settings.runner_cpu]
        argv += ["--memory", self.settings.runner_memory, "--label", f"{key}={value}"]
        argv += ["--taint", f"{key}={value}:NoSchedule"]
        for name, labels in zip(self.runner_node_names, self.settings.runner_node_labels, strict=False):
            argv += [f"--node-label={name}:{k}={v}" for k, v in labels.items()]
        if os.environ.get("PYTHONPATH"):  # the pods' shims (slurmd_pod) run the test's sources too
            argv += ["--env", f"PYTHONPATH={os.environ['PYTHONPATH']}"]
        self.runner = self.group.start("runner", argv, env={"PYTHONUNBUFFERED": "1"}, inherit_env=True)
        try:
            wait_nodes_ready(self.client, self.runner_node_names, timeout=60)
        except StackError as failed:
            raise self.runner.failure(f"did not register its nodes ({failed})") from None

    def _create_kwok_nodes(self) -> list[str]:
        prefix = f"{self.settings.pool}-kwok"
        names = [f"{prefix}-{i}" for i in range(self.settings.kwok_nodes)]
        missing = [n for n in names if not self.client.exists(f"/api/v1/nodes/{n}")]
        if missing:
            delete_nodes(self.client, names)
            wait_for(
                lambda: not any(self.client.exists(f"/api/v1/nodes/{n}") for n in names),
                timeout=30,
                what="old kwok nodes to go",
            )
            key, value = self.settings.pool_label
            # Not the runner flavor's label: pods of that flavor must get real processes.
            labels = {key: f"{value}-kwok"}
            create_kwok_nodes(self.client, count=self.settings.kwok_nodes, prefix=prefix, labels=labels)
        return names

    def _wait_cluster_queue_active(self) -> None:
        path = f"{KUEUE}/clusterqueues/{self.settings.cluster_queue}"

        def active() -> bool:
            conditions = self.client.get(path).get("status", {}).get("conditions") or []
            return any(c.get("type") == "Active" and c.get("status") == "True" for c in conditions)

        wait_for(
            active,
            timeout=60,
            what=f"ClusterQueue {self.settings.cluster_queue} to be Active",
            describe=lambda: str(self.client.get(path).get("status")),
        )

    def refresh_token(self, *, lifespan: int = 86400) -> str:
        """Write a fresh SlurmUser JWT into the Secret the WorkloadMixing names; return it."""
        token = self.slurm.token(lifespan=lifespan)
        self.client.apply(
            f"/api/v1/namespaces/{self.settings.bridge_namespace}/secrets",
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": self.secret_name, "namespace": self.settings.bridge_namespace},
                "type": "Opaque",
                "stringData": {"token": token},
            },
        )
        return token

    # ---- the bridge --------------------------------------------------------------------------------

    def bridge(
        self, *extra_args: str, env: Mapping[str, str] | None = None, name: str = "bridge-slurm"
    ) -> BridgeProcess:
        """A :class:`BridgeProcess` for this stack (not started): ``python -m bridge.slurm`` with the
        kubeconfig, the WorkloadMixing and a free metrics port; ``extra_args`` appended."""
        metrics_port = free_port()
        argv = [
            sys.executable, "-m", "bridge.slurm",
            "--kubeconfig", str(self.kube.kubeconfig),
            "--config", self.mixing_name,
            "--metrics-bind-address", f"127.0.0.1:{metrics_port}",
            "--health-probe-bind-address", f"127.0.0.1:{free_port()}",
            *(["--scontrol-prefix", shlex.join(self.scontrol_prefix())] if self.scontrol_prefix() else []),
            *extra_args,
        ]  # fmt: skip
        environment = bridge_environment(os.environ, {**self.scontrol_env(), **(env or {})})
        bridge = BridgeProcess(
            group=self.group, argv=argv, env=environment, metrics_port=metrics_port, name=name
        )
        self.bridges.append(bridge)
        return bridge

    def explain(self, job_id: int, *, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """``python -m bridge.slurm explain <job_id>`` against this stack's WorkloadMixing, as an
        operator would run it (the kubeconfig, the cluster's scontrol); its exit status and output."""
        argv = [
            sys.executable, "-m", "bridge.slurm", "explain", str(job_id),
            "--kubeconfig", str(self.kube.kubeconfig), "--config", self.mixing_name,
            *(["--scontrol-prefix", shlex.join(self.scontrol_prefix())] if self.scontrol_prefix() else []),
        ]  # fmt: skip
        environment = bridge_environment(os.environ, self.scontrol_env())
        return subprocess.run(
            argv, env=environment, capture_output=True, text=True, timeout=timeout, check=False
        )

    # ---- observation -------------------------------------------------------------------------------

    def list_items(self, path: str, **query: str) -> list[dict[str, Any]]:
        try:
            items: list[dict[str, Any]] = self.client.get(path, **query).get("items") or []
        except ApiError as error:
            if error.status == 404:
                return []
            raise
        return items

    def jobsets(self) -> list[dict[str, Any]]:
        return self.list_items(f"{JOBSETS}/namespaces/{self.settings.namespace}/jobsets")

    def pods(self, **query: str) -> list[dict[str, Any]]:
        return self.list_items(f"/api/v1/namespaces/{self.settings.namespace}/pods", **query)

    def workloads(self) -> list[dict[str, Any]]:
        return self.list_items(f"{KUEUE}/namespaces/{self.settings.namespace}/workloads")

    def slurm_nodes(self) -> list[str]:
        return bridge_node_names(self.slurm)

    def own_namespaces(self) -> set[str]:
        """Network namespaces made by this stack: its runner's pods and its Slurm cluster's nodes."""
        return pod_namespaces(self.workdir / "runner") | set(self.slurm.namespaces_created)

    def leaks(self, *, namespaces_before: set[str]) -> list[str]:
        """What a finished test left behind: JobSets, Jobs, pods, Workloads of the e2e namespace, bridge
        Slurm nodes, this stack's network namespaces not in ``namespaces_before``, processes of the
        cluster's nodes and jobs. Empty when clean."""
        found: list[str] = []
        ns = self.settings.namespace
        for what, items in (
            ("JobSet", self.jobsets()),
            ("Job", self.list_items(f"/apis/batch/v1/namespaces/{ns}/jobs")),
            ("Pod", self.pods()),
            ("Workload", self.workloads()),
        ):
            found += [f"{what} {ns}/{item['metadata']['name']}" for item in items]
        found += [f"Slurm node {name}" for name in self.slurm_nodes()]
        # Only this stack's namespaces: other stacks on the host (a sandbox, another tier) make their own.
        leaked = (self.own_namespaces() & set(existing_namespaces())) - namespaces_before
        found += [f"network namespace {name}" for name in sorted(leaked)]
        found += [f"process {line}" for line in processes_of_cluster(self.slurm)]
        return found

    def runner_log_tail(self, lines: int = 60) -> str:
        return log_tail(self.workdir / "logs" / "runner.log", lines=lines)
