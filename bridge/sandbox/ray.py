"""A real Ray head, and Ray worker nodes that join it from their own network namespaces.

Why real Ray and not a fake: the Ray bridge's whole claim is that a job submitted with an entrypoint
resource ``{"<job>": 1}`` waits in Ray until workers carrying that resource join, and then runs on
them. Only Ray's own scheduler can show that, so the stack runs ``ray start`` from the ``ray`` package
pinned in ``versions.toml`` (the CLI next to ``sys.executable``) and talks to it the way KubeRay's
HTTPMode does: over the dashboard's Job REST API. The calling process never imports ``ray``.

How it is laid out:

- The head runs on the host, advertised on a host address that network namespaces can reach (the
  source address of the default route, not loopback), with every port it listens on chosen free and
  passed explicitly, so concurrent stacks never collide. ``RAY_JOB_START_TIMEOUT_SECONDS`` is raised
  in the head's environment (the Job API hands every job to the JobManager in the head node's
  dashboard agent, which reads it): Ray fails a job that stays PENDING longer than that, and a job
  held for Kueue can wait for hours.
- Each worker runs in its own network namespace (its own IP, like a pod, so Ray's default ports
  are free there) and its own PID namespace, whose init is ``ray start --block``: when that process
  ends, the kernel ends every process of the node, so nothing can outlive a removed worker.
- Ray's temporary directories live in the stack's workdir. Ray puts unix sockets there, whose
  paths are limited to 107 bytes; when the workdir is too deep, a short directory under /tmp is used
  and moved into the workdir on stop.
- After a crash, the next start of a stack kills what the dead process left (the head's and workers'
  process groups are recorded, and every Ray process carries its owner's token in its environment),
  removes the workers' namespaces and a borrowed /tmp root (:mod:`bridge.sandbox.leftovers`).
- Stopping sends SIGTERM to ``ray start`` alone (it drains the node through the GCS and stops its
  children in order; signalling the whole group kills the GCS first and ``ray start`` then hangs
  retrying it), then SIGKILLs what is left of the process group this code started.
"""

from __future__ import annotations

import contextlib
import http.client
import importlib.metadata
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bridge.sandbox import owners
from bridge.sandbox.build import MissingPrerequisiteError, load_versions
from bridge.sandbox.leftovers import reclaim_leftovers
from bridge.sandbox.netns import NetworkNamespace, create_namespace
from bridge.sandbox.processes import ManagedProcess, ProcessGroup, StackError, log_tail, wait_until

__all__ = [
    "TERMINAL_JOB_STATES",
    "HeadPorts",
    "RayHead",
    "RayWorker",
    "group_members",
    "reachable_host_address",
]

# Linux limits a unix socket path to 107 bytes; Ray appends
# "/session_<date>_<time>_<micros>_<pid>/sockets/plasma_store" (at most 66 bytes) to its temp dir, and
# the temp dir of a worker is "<root>/w<8 hex>" (10 bytes).
_SOCKET_PATH_MAX = 107
_RAY_SOCKET_SUFFIX = 66
_NODE_DIR = 10

# The job states Ray reports that never change again.
TERMINAL_JOB_STATES = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})


def _ray_executable() -> Path:
    """The ``ray`` CLI of this Python environment, at the version ``versions.toml`` pins."""
    pinned = str(load_versions()["ray"]["version"])
    install = f"install it with `{sys.executable} -m pip install 'ray[default]=={pinned}'`"
    install += " (or run `tox -e integration`)"
    executable = Path(sys.executable).parent / "ray"
    try:
        installed = importlib.metadata.version("ray")
    except importlib.metadata.PackageNotFoundError:
        raise MissingPrerequisiteError(
            f"the ray package is not installed in {sys.prefix}: {install}"
        ) from None
    if installed != pinned:
        raise MissingPrerequisiteError(
            f"ray {installed} is installed, versions.toml pins {pinned}: {install}"
        )
    if not executable.is_file():
        raise MissingPrerequisiteError(f"the ray CLI is missing at {executable}: {install}")
    return executable


def reachable_host_address() -> str:
    """A host IPv4 address that network namespaces reach through their default route.

    Any address of the host is delivered locally when a namespace sends to it via its gateway, but
    loopback is not: packets to 127.0.0.1 never leave the namespace. The source address of the
    default route is the natural choice; failing that, any global address not on a namespace's veth.
    """
    route = subprocess.run(
        ["ip", "-4", "-o", "route", "get", "1.0.0.1"], capture_output=True, text=True, check=False
    )
    words = route.stdout.split()
    if route.returncode == 0 and "src" in words:
        return words[words.index("src") + 1]
    addresses = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True, check=False
    )
    for line in addresses.stdout.splitlines():
        fields = line.split()
        if len(fields) > 3 and not fields[1].startswith("kbh"):
            return fields[3].split("/")[0]
    raise StackError(
        "the Ray head needs a non-loopback IPv4 address that network namespaces can reach, and this host "
        "has none (`ip -4 addr show scope global` is empty); pass RayHead(host=...) explicitly"
    )


def _free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on all addresses (held together while picking, so distinct)."""
    probes: list[socket.socket] = []
    try:
        for _ in range(count):
            probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            probes.append(probe)
            probe.bind(("0.0.0.0", 0))  # noqa: S104 - the probe only reserves a port number
        return [int(probe.getsockname()[1]) for probe in probes]
    finally:
        for probe in probes:
            probe.close()


def group_members(pgid: int) -> set[int]:
    """Pids of the live processes in process group ``pgid`` (zombies excluded), read from /proc."""
    members: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            # Fields after the parenthesised command: state ppid pgrp ...
            after_comm = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(after_comm[2]) == pgid and after_comm[0] != "Z":
                members.add(int(entry.name))
    return members


def _children(pid: int) -> list[int]:
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


@dataclass(frozen=True, kw_only=True)
class HeadPorts:
    """Every port the head listens on, chosen free and passed to ``ray start`` explicitly."""

    gcs: int
    dashboard: int
    client_server: int
    node_manager: int
    object_manager: int
    dashboard_agent_listen: int
    dashboard_agent_grpc: int
    runtime_env_agent: int
    metrics_export: int
    workers: tuple[int, ...]

    @classmethod
    def pick(cls, *, worker_ports: int) -> HeadPorts:
        ports = _free_ports(9 + worker_ports)
        return cls(
            gcs=ports[0],
            dashboard=ports[1],
            client_server=ports[2],
            node_manager=ports[3],
            object_manager=ports[4],
            dashboard_agent_listen=ports[5],
            dashboard_agent_grpc=ports[6],
            runtime_env_agent=ports[7],
            metrics_export=ports[8],
            workers=tuple(ports[9:]),
        )

    def argv(self) -> list[str]:
        return [
            f"--port={self.gcs}",
            f"--dashboard-port={self.dashboard}",
            f"--ray-client-server-port={self.client_server}",
            f"--node-manager-port={self.node_manager}",
            f"--object-manager-port={self.object_manager}",
            f"--dashboard-agent-listen-port={self.dashboard_agent_listen}",
            f"--dashboard-agent-grpc-port={self.dashboard_agent_grpc}",
            f"--runtime-env-agent-port={self.runtime_env_agent}",
            f"--metrics-export-port={self.metrics_export}",
            f"--worker-port-list={','.join(str(port) for port in self.workers)}",
        ]


@dataclass(kw_only=True)
class RayWorker:
    """One Ray worker node: ``ray start --block`` in its own network and PID namespace."""

    name: str
    resources: Mapping[str, float]
    num_cpus: int
    namespace: NetworkNamespace
    process: ManagedProcess
    temp_dir: Path
    join_seconds: float = 0.0

    @property
    def address(self) -> str:
        """The node's IP, as Ray reports it in ``node_ip``."""
        return self.namespace.address

    def pids(self) -> set[int]:
        """The live processes of this node now (the process group started for it)."""
        return group_members(self.process.pid)


@dataclass(kw_only=True)
class RayHead:
    """A local Ray head with its Job REST API, plus the workers added to it; see the module docstring.

    Use as a context manager, or call ``start()`` and ``stop()``; all options are keywords. ``group``
    may be shared with the rest of the stack; only the processes started here are stopped by ``stop()``.
    """

    workdir: Path
    group: ProcessGroup | None = None
    host: str | None = None
    num_cpus: int = 1
    object_store_memory: int = 100 * 1024 * 1024
    job_start_timeout: float = 7 * 24 * 3600.0
    drain_timeout: float = 5.0
    start_timeout: float = 180.0

    ports: HeadPorts | None = field(default=None, init=False)
    workers: list[RayWorker] = field(default_factory=list, init=False)
    # Every namespace a worker was given, removed or not: tests check that none of them is left.
    namespaces_created: list[str] = field(default_factory=list, init=False)
    # From `ray start` to the Job API answering with the head node alive.
    start_seconds: float = field(default=0.0, init=False)
    _process: ManagedProcess | None = field(default=None, init=False)
    _group: ProcessGroup | None = field(default=None, init=False)
    _owns_group: bool = field(default=False, init=False)
    _ray_root: Path | None = field(default=None, init=False)
    _ray_root_borrowed: bool = field(default=False, init=False)
    _ray_root_entry: tuple[owners.OwnerRecord, str] | None = field(default=None, init=False)
    _ray: Path | None = field(default=None, init=False)

    # ---- lifecycle -------------------------------------------------------------------------------

    def start(self) -> RayHead:
        """Start the head and wait until the Job REST API answers; returns self."""
        if self._process is not None:
            raise StackError("this Ray head is already started")
        self._ray = _ray_executable()
        reclaim_leftovers()
        self.host = self.host or reachable_host_address()
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.group is None:
            self._group, self._owns_group = ProcessGroup(self.workdir), True
        else:
            self._group = self.group
        self._ray_root = self._make_ray_root()
        self.ports = HeadPorts.pick(worker_ports=max(16, 4 * self.num_cpus + 8))
        temp_dir = self._ray_root / "head"
        argv = [
            str(self._ray),
            "start",
            "--head",
            "--block",
            f"--node-ip-address={self.host}",
            f"--dashboard-host={self.host}",
            "--include-dashboard=true",
            f"--num-cpus={self.num_cpus}",
            "--num-gpus=0",
            f"--object-store-memory={self.object_store_memory}",
            f"--temp-dir={temp_dir}",
            "--disable-usage-stats",
            "--log-style=record",
            "--log-color=false",
            *self.ports.argv(),
        ]
        env = {**self._ray_env(), "RAY_JOB_START_TIMEOUT_SECONDS": str(int(self.job_start_timeout))}
        started = time.monotonic()
        self._process = self._group.start("ray-head", argv, env=env, inherit_env=False)
        try:
            wait_until(
                self._ready,
                timeout=self.start_timeout,
                what=f"the Ray Job API at {self.dashboard_url} and the head node",
                process=self._process,
                interval=0.5,
            )
        except StackError as error:
            raylet = log_tail(temp_dir / "session_latest" / "logs" / "raylet.out", lines=10)
            self.stop()
            raise StackError(f"{error}\nlast lines of the head's raylet.out:\n{raylet}") from None
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - started
        return self

    def stop(self) -> None:
        """Stop every worker, then the head, by the pids started here; delete their namespaces."""
        for worker in list(self.workers):
            self.remove_worker(worker)
        if self._process is not None and self._group is not None:
            self._stop_ray_start(self._process, self._process.pid, grace=self.drain_timeout + 20.0)
            self._process = None
        if self._owns_group and self._group is not None:
            self._group.stop_all()
        self._keep_ray_root_in_workdir()

    def process_groups(self) -> list[int]:
        """The process groups started here and still owned: the head's, then each worker's."""
        head = [self._process.pid] if self._process is not None else []
        return head + [worker.process.pid for worker in self.workers]

    def __enter__(self) -> RayHead:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- addresses -------------------------------------------------------------------------------

    @property
    def gcs_address(self) -> str:
        """``<host>:<port>`` as workers and drivers pass it to ``ray start --address`` / ``ray.init``."""
        return f"{self._host()}:{self._ports().gcs}"

    @property
    def dashboard_url(self) -> str:
        """The dashboard and Job REST API (what KubeRay calls the dashboard URL)."""
        return f"http://{self._host()}:{self._ports().dashboard}"

    @property
    def log_dir(self) -> Path:
        """Where Ray writes the head's own logs (the newest session)."""
        if self._ray_root is None:
            raise StackError("the Ray head was never started")
        return self._ray_root / "head" / "session_latest" / "logs"

    # ---- Job REST API ----------------------------------------------------------------------------

    def submit(
        self,
        entrypoint: str,
        *,
        entrypoint_resources: Mapping[str, float] | None = None,
        entrypoint_num_cpus: float | None = None,
        submission_id: str | None = None,
        runtime_env: Mapping[str, Any] | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> str:
        """Submit a job as KubeRay's HTTPMode does; returns its submission id.

        ``entrypoint`` is a shell command line: that is Ray's contract for entrypoints (it runs them
        with a shell), so quote its parts with ``shlex.join``.
        """
        body: dict[str, Any] = {"entrypoint": entrypoint}
        if entrypoint_resources:
            body["entrypoint_resources"] = dict(entrypoint_resources)
        if entrypoint_num_cpus is not None:
            body["entrypoint_num_cpus"] = entrypoint_num_cpus
        if submission_id is not None:
            body["submission_id"] = submission_id
        if runtime_env is not None:
            body["runtime_env"] = dict(runtime_env)
        if metadata is not None:
            body["metadata"] = dict(metadata)
        reply = self._request("POST", "/api/jobs/", body)
        return str(reply["submission_id"])

    def job_info(self, submission_id: str) -> dict[str, Any]:
        """The job's details as the Job API returns them (``status``, ``message``, ``driver_node_id``...)."""
        return dict(self._request("GET", f"/api/jobs/{submission_id}"))

    def job_status(self, submission_id: str) -> str:
        """PENDING, RUNNING, STOPPED, SUCCEEDED or FAILED."""
        return str(self.job_info(submission_id)["status"])

    def job_logs(self, submission_id: str) -> str:
        return str(self._request("GET", f"/api/jobs/{submission_id}/logs")["logs"])

    def stop_job(self, submission_id: str) -> bool:
        """Ask Ray to stop the job. Ray 2.60 does not cancel a PENDING job this way (reference/ray.md)."""
        return bool(self._request("POST", f"/api/jobs/{submission_id}/stop")["stopped"])

    def wait_for_job(self, submission_id: str, *, timeout: float) -> str:
        """Wait until the job reaches a terminal state; returns it."""
        status = ""

        def terminal() -> bool:
            nonlocal status
            status = self.job_status(submission_id)
            return status in TERMINAL_JOB_STATES

        wait_until(terminal, timeout=timeout, what=f"Ray job {submission_id} to end", interval=0.5)
        return status

    def nodes(self) -> list[dict[str, Any]]:
        """Ray's node table (state API): ``node_ip``, ``state`` (ALIVE/DEAD), ``resources_total``..."""
        reply = self._request("GET", "/api/v0/nodes?limit=1000")
        return list(reply["data"]["result"]["result"])

    def alive_node_ips(self) -> set[str]:
        return {str(node["node_ip"]) for node in self.nodes() if node.get("state") == "ALIVE"}

    # ---- workers ---------------------------------------------------------------------------------

    def add_worker(
        self,
        resources: Mapping[str, float],
        *,
        num_cpus: int = 1,
        labels: Mapping[str, str] | None = None,
        timeout: float = 120.0,
    ) -> RayWorker:
        """Start a worker node with custom ``resources`` (and node ``labels``) in a new namespace; wait
        until Ray has it alive."""
        if self._process is None or self._group is None or self._ray is None or self._ray_root is None:
            raise StackError("start the Ray head before adding workers")
        token = secrets.token_hex(4)
        name = f"ray-worker-{token}"
        temp_dir = self._ray_root / f"w{token}"
        namespace = create_namespace()
        self.namespaces_created.append(namespace.name)
        argv = [
            *namespace.enter(),
            # A PID namespace whose init is `ray start`: when it ends, the kernel ends the whole node.
            # --kill-child: if unshare itself is killed, its child (and so the namespace) dies too.
            "unshare",
            "--pid",
            "--fork",
            "--mount-proc",
            "--kill-child=SIGKILL",
            str(self._ray),
            "start",
            f"--address={self.gcs_address}",
            f"--node-ip-address={namespace.address}",
            f"--resources={json.dumps(dict(resources), sort_keys=True)}",
            f"--num-cpus={num_cpus}",
            "--num-gpus=0",
            f"--object-store-memory={self.object_store_memory}",
            *([f"--labels={json.dumps(dict(labels), sort_keys=True)}"] if labels else []),
            f"--temp-dir={temp_dir}",
            "--disable-usage-stats",
            "--log-style=record",
            "--log-color=false",
            "--block",
        ]
        started = time.monotonic()
        try:
            process = self._group.start(name, argv, env=self._ray_env(), inherit_env=False)
        except BaseException:
            namespace.delete()
            raise
        worker = RayWorker(
            name=name,
            resources=dict(resources),
            num_cpus=num_cpus,
            namespace=namespace,
            process=process,
            temp_dir=temp_dir,
        )
        self.workers.append(worker)
        try:
            wait_until(
                lambda: namespace.address in self.alive_node_ips(),
                timeout=timeout,
                what=f"Ray worker {name} ({namespace.address}) to join {self.gcs_address}",
                process=process,
                interval=0.25,
            )
        except BaseException:
            self.remove_worker(worker)
            raise
        worker.join_seconds = time.monotonic() - started
        return worker

    def remove_worker(self, worker: RayWorker, *, grace: float | None = None) -> None:
        """Stop the worker's processes (SIGTERM to ``ray start``, then SIGKILL) and delete its namespace.

        As a deleted pod would: a job running on that node fails.
        """
        if self._group is None:
            raise StackError("this Ray head was never started")
        # The group leader is `unshare`, which blocks SIGTERM; `ray start` is its only child.
        children = _children(worker.process.pid)
        target = children[0] if children else worker.process.pid
        grace = self.drain_timeout + 10.0 if grace is None else grace
        self._stop_ray_start(worker.process, target, grace=grace)
        worker.namespace.delete()
        if worker in self.workers:
            self.workers.remove(worker)

    # ---- internals -------------------------------------------------------------------------------

    def _stop_ray_start(self, process: ManagedProcess, ray_start_pid: int, *, grace: float) -> None:
        if self._group is None:
            return
        if process.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(ray_start_pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.popen.wait(timeout=grace)
        # Whatever is left of the process group (all of it, if ray start did not finish in time).
        self._group.stop(process, grace=0.0, sig=signal.SIGKILL)
        deadline = time.monotonic() + 10.0
        while group_members(process.pid) and time.monotonic() < deadline:
            time.sleep(0.1)

    def _ray_env(self) -> dict[str, str]:
        """A clean environment: nothing from the caller's RAY_* settings leaks into the stack."""
        keep = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "USER", "LOGNAME", "SSL_CERT_FILE", "SSL_CERT_DIR")
        env = {key: os.environ[key] for key in keep if key in os.environ}
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "/usr/bin:/bin")])
        env.update(
            {
                "RAY_USAGE_STATS_ENABLED": "0",
                "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": str(self.drain_timeout),
                "PYTHONUNBUFFERED": "1",
            }
        )
        return env

    def _make_ray_root(self) -> Path:
        """Ray's temp root: ``<workdir>/ray`` when its socket paths fit, else a short /tmp directory."""
        preferred = self.workdir / "ray"
        if len(str(preferred.resolve())) + _NODE_DIR + _RAY_SOCKET_SUFFIX <= _SOCKET_PATH_MAX:
            preferred.mkdir(parents=True, exist_ok=True)
            return preferred
        self._ray_root_borrowed = True
        borrowed = Path(tempfile.mkdtemp(prefix="kb-ray-"))
        record = owners.current()
        self._ray_root_entry = (record, record.add_directory(borrowed))  # deleted should we die
        return borrowed

    def _keep_ray_root_in_workdir(self) -> None:
        """Move a /tmp fallback root into the workdir, so logs stay with the stack and /tmp stays clean."""
        root = self._ray_root
        if root is None or not self._ray_root_borrowed:
            return
        target = self.workdir / "ray"
        if target.exists():
            target = self.workdir / f"ray-{secrets.token_hex(2)}"
        # Sockets cannot be copied; they are gone once Ray stopped, and anything left is dropped.
        shutil.move(str(root), str(target), copy_function=_copy_regular_files)
        shutil.rmtree(root, ignore_errors=True)
        self._ray_root, self._ray_root_borrowed = target, False
        if self._ray_root_entry is not None:
            record, entry = self._ray_root_entry
            record.discard(entry)
            self._ray_root_entry = None

    def _ready(self) -> bool:
        """The Job API answers and the head's own node is alive (its raylet and agents are up)."""
        try:
            self._request("GET", "/api/jobs/", timeout=2.0)
            return self._host() in self.alive_node_ips()
        except (StackError, OSError, http.client.HTTPException, ValueError, KeyError, TypeError):
            return False

    def _request(
        self, method: str, path: str, body: Mapping[str, Any] | None = None, *, timeout: float = 60.0
    ) -> Any:
        connection = http.client.HTTPConnection(self._host(), self._ports().dashboard, timeout=timeout)
        try:
            payload = None if body is None else json.dumps(body).encode()
            headers = {"Content-Type": "application/json"} if payload is not None else {}
            connection.request(method, path, body=payload, headers=headers)
            response = connection.getresponse()
            data = response.read()
        finally:
            connection.close()
        if response.status >= 300:
            raise StackError(
                f"Ray {method} {path} answered {response.status}: {data.decode(errors='replace')[:500]}"
            )
        return json.loads(data) if data else None

    def _host(self) -> str:
        if self.host is None:
            raise StackError("the Ray head was never started")
        return self.host

    def _ports(self) -> HeadPorts:
        if self.ports is None:
            raise StackError("the Ray head was never started")
        return self.ports


def _copy_regular_files(source: str, destination: str) -> None:
    if Path(source).is_file():
        shutil.copy2(source, destination)
