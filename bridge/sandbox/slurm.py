"""A real Slurm cluster for tests and the sandbox: munge, slurmctld, slurmrestd and dynamic slurmd "pods".

Why real daemons: the bridge's claims ("the job ran on exactly the admitted nodes") only mean something
against Slurm itself, and the REST API differs between generations in ways no mock captures. Two
generations run here: Debian bookworm's 22.05 on the host (REST v0.0.38) and Debian trixie's 24.11 in a
chroot restored from the cached root of :mod:`bridge.sandbox.slurm_root` (REST v0.0.40 .. v0.0.42).

Why it looks the way it does (facts in ``shared/reference/slurm.md``):

- Nothing of the host's Slurm or munge setup is used or touched: each cluster has a temporary workdir
  with its own munge key and munged socket (``AuthInfo=socket=...`` tells every Slurm program), JWT key,
  generated ``slurm.conf`` (daemons get ``-f``, clients ``SLURM_CONF``), fresh StateSaveLocation, and
  ports picked free. Stopping it stops exactly the process ids it started, unmounts what it mounted and
  deletes the network namespaces it made (killing whatever still runs in them: slurmstepd and job
  steps run in sessions of their own). After a crash, the next start of a stack does the same for what
  the dead process left (:mod:`bridge.sandbox.leftovers`): its daemons, its workdir and mounts (recorded
  in its owner record), its namespaces (claimed).
- slurmctld must be reachable from the slurmd network namespaces, so its address is the host end of a
  veth pair that the cluster owns (an "anchor" namespace): a host address that every namespace reaches
  through its default route, whatever the machine's own interfaces are.
- A dynamic slurmd cannot take a port of its own (slurmctld calls the global ``SlurmdPort``), so each
  one runs in its own network namespace, like a pod. It enters it with ``nsenter`` (``ip netns exec``
  remounts /sys and breaks slurmd's cgroup detection) and a private mount namespace where a per-node
  ``/etc/hosts`` is bound in. Before a configless slurmd has the configuration it authenticates with the
  default munge socket, so on the host a private ``/run`` with this cluster's socket is bound there too
  (the chroot's /run is private to the cluster already).
- slurmrestd refuses root and SlurmUser: it runs as a plain user (created when missing) with JWT auth;
  tokens for SlurmUser come from ``scontrol token``. ``SLURM_JWT`` never reaches slurmd (it would then
  load only auth/jwt and every launch fails).
- Job fields never reach a shell: every command is an argv list. The one ``sh -c`` script (the mount
  setup before ``exec slurmd``) is a constant that takes paths as positional arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Literal

from bridge.sandbox import owners, slurm_root
from bridge.sandbox.build import MissingPrerequisiteError, load_versions
from bridge.sandbox.in_cluster import HOST_ALIAS
from bridge.sandbox.leftovers import reclaim_leftovers
from bridge.sandbox.netns import NamespaceBusyError, NetworkNamespace, create_namespace, remove_namespace
from bridge.sandbox.processes import (
    ManagedProcess,
    ProcessGroup,
    StackError,
    free_port,
    port_open,
    wait_until,
)

SlurmVersion = Literal["22.05", "24.11"]
VERSIONS: tuple[SlurmVersion, ...] = ("22.05", "24.11")
BRIDGE_FEATURE = "k8sbridge"
BRIDGE_PARTITION = "bridge"
SANDBOX_LICENSE = "sandbox"
"""A cluster license of the local stack (``Licenses=``), for reservations of licenses only."""
DEFAULT_PARTITION = "batch"
SCHEDULER_PARAMETERS = "batch_sched_delay=0"
"""``SchedulerParameters`` of the generated slurm.conf. slurmctld runs its main scheduler for a queued
event (a job released by an update, a node registered, a job submitted) only from its background loop,
which wakes once a second, and by default at most every ``batch_sched_delay`` = 3 s: a stream of
releases then waits up to 4 s each. ``batch_sched_delay=0`` lets every background tick schedule, so a
release starts within about a second (docs/controller.md, "Release latency")."""
SLURMRESTD_MALLOC_ARENA_MAX = "2"
"""``MALLOC_ARENA_MAX`` in slurmrestd's environment, as a site is advised to set it: with glibc's
default (eight arenas a core) each worker thread that serves a whole job list keeps that list's peak
(about 100 MiB for 1,000 jobs on 22.05) in an arena of its own, so slurmrestd's RSS climbs with the
queue's length times its threads; two arenas keep it near one list's peak (docs/controller.md, "Slurm
settings for sites"; ``tests/bench/test_slurmrestd_memory_bench.py``)."""
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Runs inside the slurmd's private mount namespace: bind files over their targets (pairs up to "--"),
# optionally give the process a private /run holding this cluster's munge socket at the default path,
# then exec the rest. Constant text; every variable part is a positional argument, never shell-parsed.
_ENTER_SCRIPT = """set -e
munge_dir=$1
shift
while [ "$1" != "--" ]; do
  mount --bind "$1" "$2"
  shift 2
done
shift
if [ -n "$munge_dir" ]; then
  mount -t tmpfs -o mode=755 bridge-run /run
  mkdir /run/munge
  mount --bind "$munge_dir" /run/munge
fi
exec "$@"
"""


@dataclass(frozen=True)
class Generation:
    """What differs between the two Slurm generations the stack runs."""

    version: SlurmVersion
    package_version: str
    rest_version: str
    in_chroot: bool


def generation(version: SlurmVersion) -> Generation:
    slurm = load_versions()["slurm"]
    if version == "22.05":
        return Generation(version, str(slurm["host_version"]), str(slurm["host_rest"]), in_chroot=False)
    return Generation(version, str(slurm["root_version"]), str(slurm["root_rest"]), in_chroot=True)


@dataclass
class DynamicNode:
    """A dynamic slurmd (``slurmd -Z``) in its own network namespace: what a slurmd pod is."""

    name: str
    namespace: NetworkNamespace
    process: ManagedProcess
    cpus: int
    memory_mb: int
    features: tuple[str, ...]
    gres: str | None

    @property
    def address(self) -> str:
        return self.namespace.address


@dataclass(frozen=True)
class _Account:
    uid: int
    gid: int


def _account(sysroot: Path, user: str) -> _Account:
    """uid/gid of ``user`` as the programs under ``sysroot`` see it (the chroot has its own passwd)."""
    for line in (sysroot / "etc" / "passwd").read_text().splitlines():
        fields = line.split(":")
        if len(fields) >= 4 and fields[0] == user:
            return _Account(int(fields[2]), int(fields[3]))
    raise StackError(f"user {user!r} does not exist in {sysroot / 'etc' / 'passwd'}")


def _require_tools(*tools: str) -> None:
    for tool in tools:
        if shutil.which(tool) is None:
            raise MissingPrerequisiteError(
                f"'{tool}' is not installed: run `scripts/dev setup` (Debian packages munge slurmctld slurmd "
                "slurmrestd slurm-client iproute2 util-linux)"
            )


@dataclass
class SlurmCluster:
    """One Slurm cluster with REST and JWT auth, in a temporary workdir, for one generation.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. Paths given to and returned by
    Slurm are paths as the daemons see them (inside the chroot for 24.11); :meth:`host_path` maps one to
    the host.
    """

    version: SlurmVersion = "22.05"
    user: str = "k8sbridge"
    max_nodes: int = 64
    keep_workdir: bool = False
    scheduler_parameters: str = SCHEDULER_PARAMETERS
    """``SchedulerParameters`` in slurm.conf; empty: none (Slurm's defaults)."""
    slurmrestd_malloc_arena_max: str | None = SLURMRESTD_MALLOC_ARENA_MAX
    """``MALLOC_ARENA_MAX`` for slurmrestd; None: glibc's default (a benchmark's baseline)."""
    workdir: Path = field(init=False)
    timings: dict[str, float] = field(init=False, default_factory=dict)
    _generation: Generation = field(init=False)
    _group: ProcessGroup | None = field(init=False, default=None)
    _anchor: NetworkNamespace | None = field(init=False, default=None)
    _nodes: dict[str, DynamicNode] = field(init=False, default_factory=dict)
    namespaces_created: list[str] = field(init=False, default_factory=list)
    """Every network namespace this cluster created, so leak checks look at its own alone."""
    _mounted: bool = field(init=False, default=False)
    _workdir_entry: tuple[owners.OwnerRecord, str] | None = field(init=False, default=None)
    """The workdir's entry in the owner record: deleted (or, when kept, unmounted) after a crash."""
    _ctld_port: int = field(init=False, default=0)
    _rest_port: int = field(init=False, default=0)
    _hostname: str = field(init=False, default="")

    def __post_init__(self) -> None:
        if self.version not in VERSIONS:
            raise ValueError(f"unknown Slurm version {self.version!r}; choose one of {', '.join(VERSIONS)}")
        self._generation = generation(self.version)

    # ---- layout -----------------------------------------------------------------------------------

    @property
    def sysroot(self) -> Path:
        """The root filesystem the daemons see: ``/`` for 22.05, the restored trixie root for 24.11."""
        return self.workdir / "root" if self._generation.in_chroot else Path("/")

    @property
    def state_dir(self) -> PurePosixPath:
        """This cluster's directory as the daemons see it (config, keys, state, job files)."""
        if self._generation.in_chroot:
            return PurePosixPath("/bridge")
        return PurePosixPath(self.workdir) / "state"

    @property
    def jobs_dir(self) -> PurePosixPath:
        """A directory the plain user owns: default working directory and output of :meth:`sbatch`."""
        return self.state_dir / "jobs"

    @property
    def conf_path(self) -> PurePosixPath:
        return self.state_dir / "etc" / "slurm.conf"

    def host_path(self, path: PurePosixPath | str) -> Path:
        """Where a path as the daemons see it is on the host."""
        return self.sysroot / str(path).lstrip("/")

    @property
    def rest_version(self) -> str:
        """The newest REST (openapi / data_parser) version this generation serves."""
        return self._generation.rest_version

    @property
    def package_version(self) -> str:
        return self._generation.package_version

    @property
    def rest_url(self) -> str:
        return f"http://127.0.0.1:{self._rest_port}"

    @property
    def pod_rest_url(self) -> str:
        """slurmrestd as a process runner pod reaches it: the host by its name in the pods' hosts file
        (:data:`bridge.sandbox.in_cluster.HOST_ALIAS`, the pod's gateway)."""
        return f"http://{HOST_ALIAS}:{self._rest_port}"

    @property
    def controller_address(self) -> str:
        if self._anchor is None:
            raise StackError("the Slurm cluster is not started")
        return self._anchor.gateway

    @property
    def controller_port(self) -> int:
        return self._ctld_port

    @property
    def nodes(self) -> Mapping[str, DynamicNode]:
        return dict(self._nodes)

    def process_ids(self) -> list[int]:
        """Process ids (each also a process group id) of the daemons running now, dynamic slurmd included."""
        return [process.pid for process in self._group.processes] if self._group is not None else []

    def _prefix(self) -> list[str]:
        return ["chroot", str(self.sysroot)] if self._generation.in_chroot else []

    def _as_user(self, user: str) -> list[str]:
        account = _account(self.sysroot, user)
        return ["setpriv", f"--reuid={account.uid}", f"--regid={account.gid}", "--init-groups", "--"]

    def _env(self) -> dict[str, str]:
        return {"PATH": _PATH, "LC_ALL": "C", "SLURM_CONF": str(self.conf_path)}

    def _run(
        self, argv: Sequence[str], *, user: str | None = None, check: bool = True, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        full = [*self._prefix(), *(self._as_user(user) if user else []), *argv]
        completed = subprocess.run(
            full, input=stdin, capture_output=True, text=True, check=False, env=self._env(), timeout=60
        )
        if check and completed.returncode != 0:
            raise StackError(
                f"{shlex.join(full)} failed (exit {completed.returncode}): "
                f"{(completed.stderr or completed.stdout).strip()}"
            )
        return completed

    # ---- lifecycle --------------------------------------------------------------------------------

    def start(self) -> SlurmCluster:
        """Start munged, slurmctld and slurmrestd; return when REST answers with a valid token."""
        if os.geteuid() != 0:
            raise MissingPrerequisiteError(
                "the Slurm stack needs root (munge keys, chroot, network namespaces)"
            )
        _require_tools("nsenter", "unshare", "setpriv", "ip", "mount", "chroot")
        if not self._generation.in_chroot:
            _require_tools("munged", "slurmctld", "slurmd", "slurmrestd", "scontrol", "sbatch")
        started = time.monotonic()
        reclaim_leftovers()
        self.workdir = Path(tempfile.mkdtemp(prefix=f"kb-slurm-{self.version.replace('.', '')}-"))
        record = owners.current()
        self._workdir_entry = (record, record.add_directory(self.workdir, delete=not self.keep_workdir))
        self.workdir.chmod(0o755)  # munge, slurm and the job user traverse it
        self._group = ProcessGroup(self.workdir)
        try:
            if self._generation.in_chroot:
                restore_started = time.monotonic()
                slurm_root.restore(self.sysroot)
                slurm_root.mount_system(self.sysroot)
                self._mounted = True
                self.timings["restore_root"] = time.monotonic() - restore_started
            self._ensure_user()
            self._anchor = create_namespace()
            self.namespaces_created.append(self._anchor.name)
            self._hostname = socket.gethostname().split(".")[0]
            self._ctld_port = free_port("0.0.0.0")  # noqa: S104 - slurmctld listens on all addresses
            self._rest_port = free_port("0.0.0.0")  # noqa: S104 - slurmrestd too, for runner pods
            self._write_files()
            self._start_munged()
            self._start_slurmctld()
            self._start_slurmrestd()
        except BaseException:
            self.stop()
            raise
        self.timings["start"] = time.monotonic() - started
        return self

    def stop(self) -> None:
        """Stop every slurmd, slurmrestd, slurmctld and munged this cluster started; undo mounts."""
        for node in list(self._nodes.values()):
            with contextlib.suppress(Exception):
                self.stop_dynamic_node(node)
        if self._group is not None:
            self._group.stop_all(grace=10.0)
        if self._anchor is not None:
            try:
                self._anchor.delete()
            except NamespaceBusyError as error:  # kept with its claim: reclaimed once this process ends
                print(f"slurm: {error}", file=sys.stderr)
            self._anchor = None
        if self._mounted:
            slurm_root.unmount_all(self.sysroot)
            self._mounted = False
        if self._group is not None:
            self._group = None
            if not self.keep_workdir:
                if self._generation.in_chroot:
                    slurm_root.remove_root(self.sysroot)  # refuses while anything is mounted inside
                shutil.rmtree(self.workdir, ignore_errors=True)
        if self._workdir_entry is not None and not slurm_root.mounts_under(self.workdir):
            record, entry = self._workdir_entry
            record.discard(entry)
            self._workdir_entry = None

    def __enter__(self) -> SlurmCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _ensure_user(self) -> None:
        passwd = (self.sysroot / "etc" / "passwd").read_text()
        if any(line.split(":")[0] == self.user for line in passwd.splitlines()):
            return
        argv = [*self._prefix(), "useradd", "--system", "--user-group", "--no-create-home"]
        argv += ["--shell", "/usr/sbin/nologin", self.user]
        completed = subprocess.run(argv, capture_output=True, text=True, check=False, env=self._env())
        if completed.returncode != 0 and f"user '{self.user}' already exists" not in completed.stderr:
            raise StackError(f"creating the plain user {self.user!r} failed: {completed.stderr.strip()}")

    def _mkdir(self, path: PurePosixPath, *, owner: str = "root", mode: int = 0o755) -> Path:
        host = self.host_path(path)
        host.mkdir(parents=True, exist_ok=True)
        account = _account(self.sysroot, owner)
        os.chown(host, account.uid, account.gid)
        host.chmod(mode)
        return host

    def _write_secret(self, path: PurePosixPath, *, size: int, owner: str, mode: int) -> None:
        host = self.host_path(path)
        host.write_bytes(os.urandom(size))
        account = _account(self.sysroot, owner)
        os.chown(host, account.uid, account.gid)
        host.chmod(mode)

    @property
    def _munge_socket_dir(self) -> PurePosixPath:
        # In the chroot the default location is the cluster's own (its /run is a private tmpfs), which a
        # configless slurmd needs before it has the configuration; on the host it is in the workdir.
        if self._generation.in_chroot:
            return PurePosixPath("/run/munge")
        return self.state_dir / "munge-run"

    @property
    def munge_socket(self) -> PurePosixPath:
        return self._munge_socket_dir / "munge.socket.2"

    def _write_files(self) -> None:
        state = self.state_dir
        self._mkdir(state)
        self._mkdir(state / "etc")
        self._mkdir(state / "munge", owner="munge", mode=0o700)
        self._mkdir(self._munge_socket_dir, owner="munge", mode=0o755)
        self._mkdir(state / "ctld", owner="slurm", mode=0o700)
        self._mkdir(state / "slurmd")
        self._mkdir(state / "nodes")
        self._mkdir(self.jobs_dir, owner=self.user, mode=0o755)
        if self._generation.in_chroot:
            self._mkdir(PurePosixPath("/run/slurm"), owner="slurm")
            # 24.11's slurmctld reverse-resolves the address of every RPC peer when it accepts the
            # connection; the machine's name server drops some of a burst of such queries, and each
            # drop stalled that RPC 5 s (the resolver's timeout). No DNS in the root: 127.0.0.1 has
            # no name server, so a lookup fails at once (as in the slurmd "pods").
            resolv = self.sysroot / "etc" / "resolv.conf"
            resolv.unlink(missing_ok=True)
            resolv.write_text("nameserver 127.0.0.1\n")
        self._write_secret(state / "munge" / "munge.key", size=1024, owner="munge", mode=0o400)
        self._write_secret(state / "jwt_hs256.key", size=32, owner="slurm", mode=0o600)
        self.host_path(self.conf_path).write_text(self.render_config())
        cgroup = "CgroupPlugin=disabled\n" if self._generation.in_chroot else ""
        self.host_path(state / "etc" / "cgroup.conf").write_text(cgroup)
        self.host_path(state / "etc" / "gres.conf").write_text("# lines for dynamic nodes with GPUs\n")

    def render_config(self) -> str:
        """The generated slurm.conf (see slurm.md for why each setting is there)."""
        state = self.state_dir
        lines = [
            f"ClusterName=kb{self.version.replace('.', '')}",
            f"SlurmctldHost={self._hostname}({self.controller_address})",
            "SlurmUser=slurm",
            f"SlurmctldPort={self._ctld_port}",
            f"SlurmdPort={free_port()}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            "AuthAltTypes=auth/jwt",
            f"AuthAltParameters=jwt_key={state / 'jwt_hs256.key'}",
            f"StateSaveLocation={state / 'ctld'}",
            f"SlurmdSpoolDir={state / 'slurmd' / '%n'}",
            f"SlurmctldPidFile={state / 'slurmctld.pid'}",
            f"SlurmdPidFile={state / 'slurmd' / 'slurmd-%n.pid'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "SchedulerType=sched/backfill",
            *([f"SchedulerParameters={self.scheduler_parameters}"] if self.scheduler_parameters else []),
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            f"MaxNodeCount={self.max_nodes}",
            "GresTypes=gpu",
            # Licenses to reserve: a reservation of licenses only is one a bridged job can use.
            f"Licenses={SANDBOX_LICENSE}:4",
            "TreeWidth=65533",
            "ReturnToService=2",
            "MpiDefault=none",
            "SlurmctldParameters=enable_configless",
            f"Nodeset=bridgens Feature={BRIDGE_FEATURE}",
            f"PartitionName={DEFAULT_PARTITION} Default=YES MaxTime=INFINITE State=UP",
            f"PartitionName={BRIDGE_PARTITION} Nodes=bridgens MaxTime=INFINITE State=UP",
        ]
        return "\n".join(lines) + "\n"

    def _start_munged(self) -> None:
        assert self._group is not None
        munge = self.state_dir / "munge"
        argv = [
            *self._prefix(),
            *self._as_user("munge"),
            "munged",
            "--foreground",
            f"--socket={self.munge_socket}",
            f"--key-file={munge / 'munge.key'}",
            f"--pid-file={munge / 'munged.pid'}",
            f"--log-file={munge / 'munged.log'}",
            f"--seed-file={munge / 'munged.seed'}",
        ]
        process = self._group.start("munged", argv, env=self._env(), inherit_env=False)
        wait_until(
            lambda: self.host_path(self.munge_socket).exists(),
            timeout=20,
            what="munged socket",
            process=process,
        )

    def kill_slurmctld(self) -> None:
        """SIGKILL slurmctld (a crash): its jobs and nodes survive in its state directory as far as it
        had saved them; :meth:`restart_slurmctld` brings it back from there."""
        assert self._group is not None
        (process,) = [p for p in self._group.processes if p.name == "slurmctld"]
        self._group.stop(process, grace=0.0, sig=signal.SIGKILL)

    def restart_slurmctld(self) -> None:
        """Start slurmctld again from its saved state (no ``-i``), as after a crash or a restart."""
        self._start_slurmctld(recover=True)

    def _start_slurmctld(self, *, recover: bool = False) -> None:
        assert self._group is not None
        argv = [*self._prefix(), "slurmctld", "-D", *([] if recover else ["-i"]), "-f", str(self.conf_path)]
        process = self._group.start("slurmctld", argv, env=self._env(), inherit_env=False)

        def answers() -> bool:
            if not port_open(self.controller_address, self._ctld_port):
                return False
            return "UP" in self._run(["scontrol", "ping"], check=False).stdout

        wait_until(
            answers, timeout=60, what="slurmctld to answer scontrol ping", process=process, interval=0.3
        )

    def _start_slurmrestd(self) -> None:
        assert self._group is not None
        argv = [*self._prefix(), *self._as_user(self.user), "slurmrestd", "-a", "rest_auth/jwt"]
        # Without slurmdbd the default plugin set (which includes the dbv* ones) fails to load.
        if self._generation.in_chroot:
            argv += ["-s", "openapi/slurmctld"]  # v0.0.40 .. v0.0.42
        else:
            argv += ["-s", "openapi/v0.0.36,openapi/v0.0.37,openapi/v0.0.38"]
        # Every address: runner pods reach it at their gateway (:attr:`pod_rest_url`).
        argv.append(f"0.0.0.0:{self._rest_port}")
        env = {**self._env(), "SLURM_JWT": "daemon"}
        if self.slurmrestd_malloc_arena_max is not None:
            env["MALLOC_ARENA_MAX"] = self.slurmrestd_malloc_arena_max
        process = self._group.start("slurmrestd", argv, env=env, inherit_env=False)
        token = self.token(lifespan=600)
        jobs_url = f"{self.rest_url}/slurm/{self.rest_version}/jobs"

        def answers() -> bool:
            if not port_open("127.0.0.1", self._rest_port):
                return False
            request = urllib.request.Request(  # noqa: S310 - a loopback http URL built here
                jobs_url, headers={"X-SLURM-USER-NAME": "slurm", "X-SLURM-USER-TOKEN": token}
            )
            try:
                with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
                    return bool(response.status == 200 and "jobs" in json.loads(response.read()))
            except (urllib.error.URLError, OSError, ValueError):
                return False

        wait_until(answers, timeout=60, what=f"slurmrestd to serve {jobs_url}", process=process, interval=0.3)

    # ---- helpers ----------------------------------------------------------------------------------

    def scontrol(self, *args: str, check: bool = True) -> str:
        """Run ``scontrol`` as root against this cluster; return its standard output."""
        return self._run(["scontrol", *args], check=check).stdout

    def as_user(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client command (an argv list) as the plain user, as a user of the site would;
        never raises on a non-zero exit: what the user may not do is the point of calling it."""
        return self._run(argv, user=self.user, check=False)

    def token(self, *, user: str = "slurm", lifespan: int = 3600) -> str:
        """A JWT for ``user`` (SlurmUser by default, which may act for others) from ``scontrol token``."""
        out = self.scontrol("token", f"username={user}", f"lifespan={lifespan}")
        for line in out.splitlines():
            if line.startswith("SLURM_JWT="):
                return line.removeprefix("SLURM_JWT=").strip()
        raise StackError(f"scontrol token printed no SLURM_JWT: {out!r}")

    def sbatch(
        self,
        *options: str,
        script: str = "#!/bin/sh\ntrue\n",
        hold: bool = True,
        partition: str = BRIDGE_PARTITION,
        user: str | None = None,
    ) -> int:
        """Submit ``script`` (given on stdin) with sbatch ``options`` as a plain user; return the job id.

        The options are argv entries, never a shell string. The job runs in :attr:`jobs_dir` and writes
        its output there (``slurm-<id>.out``) unless the options say otherwise.
        """
        argv = ["sbatch", "--parsable", f"--partition={partition}", f"--chdir={self.jobs_dir}"]
        argv += [f"--output={self.jobs_dir / 'slurm-%j.out'}"]
        if hold:
            argv.append("--hold")
        argv += options
        out = self._run(argv, user=user or self.user, stdin=script).stdout.strip()
        try:
            return int(out.split(";")[0])
        except ValueError:
            raise StackError(f"sbatch printed no job id: {out!r}") from None

    # ---- dynamic nodes ----------------------------------------------------------------------------

    def start_dynamic_node(
        self,
        name: str,
        *,
        cpus: int,
        memory_mb: int,
        features: Sequence[str] = (),
        gres: str | None = None,
        timeout: float = 60.0,
    ) -> DynamicNode:
        """Start ``slurmd -Z -N <name>`` in a new network namespace and wait until it registers idle."""
        if self._group is None or self._anchor is None:
            raise StackError("the Slurm cluster is not started")
        if name in self._nodes:
            raise StackError(f"dynamic node {name!r} already runs")
        all_features = [BRIDGE_FEATURE, *(f for f in features if f != BRIDGE_FEATURE)]
        conf = f"CPUs={cpus} RealMemory={memory_mb} Feature={','.join(all_features)}"
        if gres is not None:
            self._add_gres(name, gres)
            conf += f" Gres={gres}"
        namespace = create_namespace()
        self.namespaces_created.append(namespace.name)
        try:
            hosts = self.host_path(self.state_dir / "nodes" / f"{name}.hosts")
            lines = ["127.0.0.1 localhost", f"{namespace.address} {name}"]
            lines.append(f"{self.controller_address} {self._hostname}")
            hosts.write_text("\n".join(lines) + "\n")
            # No DNS in a "pod": 24.11's slurmd reverse-resolves 0.0.0.0 and would wait 2 x 5 s for the
            # host's name server; 127.0.0.1 inside the namespace refuses at once.
            resolv = self.host_path(self.state_dir / "nodes" / "resolv.conf")
            resolv.write_text("nameserver 127.0.0.1\n")
            munge_dir = self.host_path(self._munge_socket_dir) if not self._generation.in_chroot else ""
            binds = [str(hosts), str(self.sysroot / "etc" / "hosts")]
            binds += [str(resolv), str(self.sysroot / "etc" / "resolv.conf")]
            argv = [
                *namespace.enter(),
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "--",
                "sh",
                "-c",
                _ENTER_SCRIPT,
                "bridge-enter",
                str(munge_dir),
                *binds,
                "--",
                *self._prefix(),
                "slurmd",
                "-D",
                "-Z",
                "-N",
                name,
                "--conf-server",
                f"{self.controller_address}:{self._ctld_port}",
                "--conf",
                conf,
            ]
            # A clean environment: SLURM_CONF would bypass configless, SLURM_JWT would break launches.
            process = self._group.start(f"slurmd-{name}", argv, env={"PATH": _PATH}, inherit_env=False)
        except BaseException:
            namespace.delete()
            raise
        node = DynamicNode(
            name=name,
            namespace=namespace,
            process=process,
            cpus=cpus,
            memory_mb=memory_mb,
            features=tuple(all_features),
            gres=gres,
        )
        self._nodes[name] = node
        try:
            wait_until(
                lambda: "IDLE" in self.node_state(name),
                timeout=timeout,
                what=f"dynamic node {name} to register idle",
                process=process,
                interval=0.3,
            )
        except BaseException:
            self.stop_dynamic_node(node)
            raise
        return node

    def node_state(self, name: str) -> str:
        """The node's state as scontrol shows it (``IDLE+DYNAMIC_NORM``), or ``""`` when it is unknown."""
        out = self.scontrol("show", "node", name, "--oneliner", check=False)
        for item in out.split():
            if item.startswith("State="):
                return item.removeprefix("State=")
        return ""

    def _add_gres(self, name: str, gres: str) -> None:
        """Give node ``name`` fake GPU device files in gres.conf (else it registers INVALID_REG)."""
        kind, _, count_text = gres.partition(":")
        count = int(count_text.rsplit(":", 1)[-1] or "1")
        if kind != "gpu" or count < 1:
            raise StackError(f"only gres 'gpu:<n>' is supported by the local stack, not {gres!r}")
        devices = self._mkdir(self.state_dir / "devices" / name)
        for index in range(count):
            (devices / f"gpu{index}").touch()
        inside = self.state_dir / "devices" / name
        files = f"{inside}/gpu[0-{count - 1}]" if count > 1 else f"{inside}/gpu0"
        with self.host_path(self.state_dir / "etc" / "gres.conf").open("a") as handle:
            handle.write(f"NodeName={name} Name=gpu File={files}\n")
        self.scontrol("reconfigure")  # configless slurmd fetch the files slurmctld read last

    def stop_dynamic_node(self, node: DynamicNode) -> None:
        """Stop the node's slurmd by its process id and delete its namespace (the pod is gone).

        The Slurm node itself stays until it is deleted (``scontrol delete`` or REST), as with a pod.
        """
        if self._group is not None:
            self._group.stop(node.process, grace=10.0)
        # slurmstepd and job processes run in sessions of their own, beyond the slurmd's process group;
        # like a pod's, whatever still runs in the node's network namespace goes with it.
        remove_namespace(node.namespace.name)
        self._nodes.pop(node.name, None)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """``python -m bridge.sandbox.slurm [22.05|24.11]``: run a cluster until Ctrl-C; print how to reach it."""
    parser = argparse.ArgumentParser(prog="python -m bridge.sandbox.slurm", description=main.__doc__)
    parser.add_argument("version", nargs="?", choices=VERSIONS, default=VERSIONS[0])
    chosen = parser.parse_args(argv).version
    cluster = SlurmCluster(version=next(v for v in VERSIONS if v == chosen))
    try:
        cluster.start()
    except (StackError, MissingPrerequisiteError, slurm_root.RootBuildError) as error:
        print(f"slurm: error: {error}", file=sys.stderr)
        return 1
    try:
        print(f"Slurm {cluster.package_version} up in {cluster.timings['start']:.1f}s")
        print(f"REST: {cluster.rest_url}/slurm/{cluster.rest_version}/  (user slurm)")
        print(f"SLURM_JWT={cluster.token(lifespan=86400)}")
        print(f"SLURM_CONF={cluster.host_path(cluster.conf_path)}  workdir={cluster.workdir}")
        # Handlers, not inherited dispositions: a background shell starts us with SIGINT ignored.
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, _interrupt)
        while True:
            signal.pause()
    except KeyboardInterrupt:
        print("stopping", file=sys.stderr)
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
