"""The slurmd "pod" command of the local stack: make a runner pod look like a Slurm node host, exec slurmd.

Why a shim: in a real cluster the slurmd pod's image carries munge's socket, ``/etc/hosts`` and the
site's Slurm; in the local stack the process runner starts the pod's command from the host filesystem,
in the pod's own network, UTS and mount namespaces, and knows nothing of Slurm. The WorkloadMixing's
``spec.slurm.podTemplate.command`` is therefore
``[python, -m, bridge.sandbox.slurmd_pod, --cluster-dir, <SlurmCluster workdir>, --, slurmd]``; the
bridge appends its slurmd arguments (``-D -Z -N <node> --conf-server ... --conf ...``), and this
program reproduces what :meth:`bridge.sandbox.slurm.SlurmCluster.start_dynamic_node` does around slurmd
(facts in ``docs/slurm-stack-notes.md``), then replaces itself with slurmd, arguments unchanged:

- a private mount namespace of its own (made here too, so nothing leaks to the host even when the shim
  is run outside the runner);
- ``/etc/hosts`` bound to a hosts file the cluster's pods share (``<state>/nodes/pods.hosts``): the
  controller's name and every pod's node name and hostname with its pod IP. Each pod adds (or
  replaces) its own line, in place, under a lock. Shared rather than per pod because ``srun`` inside
  a multi-node job on 22.05 resolves the other nodes' names itself;
- ``/etc/resolv.conf`` bound to ``nameserver 127.0.0.1`` (24.11's slurmd otherwise waits 10 s on a DNS
  server the namespace cannot reach);
- on 22.05 (the host's Slurm) a tmpfs on ``/run`` with the cluster's munge socket directory bound at
  ``/run/munge``, since a configless slurmd authenticates with the default socket before it has the
  configuration; on 24.11 the mounts go into the restored trixie root and slurmd runs chrooted there
  (whose ``/run`` is the cluster's own);
- a clean environment: ``SLURM_JWT`` in slurmd's environment breaks every launch, ``SLURM_CONF``
  bypasses configless.

Every command is an argv list and the slurmd arguments are never parsed beyond reading the node name
(``-N``) for the hosts file. The cluster's layout comes from :class:`~bridge.sandbox.slurm.SlurmCluster`
itself (``sysroot``, ``state_dir``, ``host_path``, ``munge_socket``); the mount recipe is a small copy of
``start_dynamic_node``'s, which slurm.py does not expose as a function (to be shared later).
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import os
import re
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bridge.sandbox.slurm import VERSIONS, SlurmCluster, SlurmVersion

__all__ = ["PodLayout", "exec_slurmd", "main", "node_name_of", "update_hosts"]

_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_CLONE_NEWNS = 0x00020000
#: Variables of the pod's environment slurmd keeps (everything else, SLURM_* above all, is dropped).
_KEPT_ENV = ("HOSTNAME", "K8S_BRIDGE_NODE_INDEX", "K8S_BRIDGE_NODE_NAME", "LANG", "LC_ALL", "TZ")
_HOSTS_MARK = "# k8s-bridge pod"
#: slurmd options that take a separate value (``slurmd --help``), skipped when looking for ``-N``.
_VALUE_OPTIONS = frozenset({"--conf", "--conf-server", "-d", "-f", "-L", "-M", "--extra", "--instance-id"})
_CTLD_HOST = re.compile(r"^SlurmctldHost=([^(\s]+)\(([^)\s]+)\)\s*$", re.MULTILINE)


class ShimError(RuntimeError):
    """The pod cannot be prepared; the message says what (printed before exiting non-zero)."""


@dataclass(frozen=True, kw_only=True)
class PodLayout:
    """Where a cluster's files are on the host, and what the slurmd pod binds where."""

    version: SlurmVersion
    sysroot: Path
    """``/`` for 22.05; the restored trixie root for 24.11 (slurmd is chrooted there)."""
    nodes_dir: Path
    """Host path of ``<state>/nodes``: the shared hosts file and resolv.conf live here."""
    munge_dir: Path | None
    """Host path of the cluster's munge socket directory to bind at /run/munge (22.05 only)."""
    controller_host: str
    controller_address: str

    @property
    def hosts_file(self) -> Path:
        return self.nodes_dir / "pods.hosts"

    @property
    def resolv_file(self) -> Path:
        return self.nodes_dir / "pods.resolv.conf"

    @property
    def lock_file(self) -> Path:
        return self.nodes_dir / "pods.hosts.lock"


def detect_version(cluster_dir: Path) -> SlurmVersion:
    """24.11 runs from a restored root under the workdir; 22.05 has its state directly in it."""
    return VERSIONS[1] if (cluster_dir / "root" / "bridge").is_dir() else VERSIONS[0]


def layout(cluster_dir: Path, *, version: SlurmVersion | None = None) -> PodLayout:
    """The layout of the started cluster whose workdir is ``cluster_dir`` (read, never changed)."""
    if not cluster_dir.is_dir():
        raise ShimError(f"no Slurm cluster workdir at {cluster_dir}")
    chosen = version or detect_version(cluster_dir)
    cluster = SlurmCluster(version=chosen)
    cluster.workdir = cluster_dir
    conf = cluster.host_path(cluster.conf_path)
    try:
        text = conf.read_text()
    except OSError as error:
        raise ShimError(f"cannot read the cluster's slurm.conf at {conf}: {error}") from error
    match = _CTLD_HOST.search(text)
    if match is None:
        raise ShimError(f"{conf} has no SlurmctldHost=<name>(<address>) line")
    in_chroot = cluster.sysroot != Path("/")
    munge_dir = None if in_chroot else cluster.host_path(cluster.munge_socket.parent)
    return PodLayout(
        version=chosen,
        sysroot=cluster.sysroot,
        nodes_dir=cluster.host_path(cluster.state_dir / "nodes"),
        munge_dir=munge_dir,
        controller_host=match.group(1),
        controller_address=match.group(2),
    )


def node_name_of(slurmd_argv: Sequence[str]) -> str | None:
    """The node name slurmd is started with (``-N name``, ``-Nname``, ``--nodename[=]name``), if any.

    Values of slurmd's other options are skipped, so ``--conf "-N x"`` is never read as a name.
    """
    skip = False
    for index, arg in enumerate(slurmd_argv):
        if skip:
            skip = False
            continue
        if arg in _VALUE_OPTIONS:
            skip = True
        elif arg in ("-N", "--nodename"):
            return slurmd_argv[index + 1] if index + 1 < len(slurmd_argv) else None
        elif arg.startswith("--nodename="):
            return arg.removeprefix("--nodename=")
        elif arg.startswith("-N"):
            return arg[2:]
    return None


def _valid_host_word(word: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}", word))


def render_hosts(existing: str, *, header: Sequence[str], address: str, names: Sequence[str]) -> str:
    """The shared hosts file with ``names`` on ``address``: header lines first, then one line per pod,
    an earlier line with the same first name (an older pod of the same node) replaced. Pure."""
    wanted = [n for n in dict.fromkeys(names) if _valid_host_word(n)]
    kept: list[str] = []
    for line in existing.splitlines():
        if not line.endswith(_HOSTS_MARK):
            continue
        words = line.split("#", 1)[0].split()
        if len(words) >= 2 and not (wanted and words[1] == wanted[0]):
            kept.append(line)
    if wanted:
        kept.append(f"{address} {' '.join(wanted)} {_HOSTS_MARK}")
    return "\n".join([*header, *kept]) + "\n"


def update_hosts(pod: PodLayout, *, address: str, names: Sequence[str]) -> None:
    """Add this pod's line to the shared hosts file, rewriting it in place (bind mounts follow the inode)."""
    pod.nodes_dir.mkdir(parents=True, exist_ok=True)
    header = ["127.0.0.1 localhost", f"{pod.controller_address} {pod.controller_host}"]
    with pod.lock_file.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with pod.hosts_file.open("a+") as hosts:
                hosts.seek(0)
                text = render_hosts(hosts.read(), header=header, address=address, names=names)
                hosts.seek(0)
                hosts.truncate()
                hosts.write(text)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    pod.hosts_file.chmod(0o644)


def pod_address(controller_address: str) -> str:
    """This network namespace's address towards slurmctld (the pod IP), without sending anything."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((controller_address, 9))
        return str(probe.getsockname()[0])


def slurmd_env(pod_env: Mapping[str, str]) -> dict[str, str]:
    """slurmd's environment: a fixed PATH and a few harmless pod variables, nothing of Slurm's."""
    return {"PATH": _PATH, **{k: pod_env[k] for k in _KEPT_ENV if k in pod_env}}


def _mount(*args: str) -> None:
    completed = subprocess.run(["mount", *args], capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise ShimError(f"mount {' '.join(args)} failed: {completed.stderr.strip()}")


def _private_mount_namespace() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNS) != 0:
        raise ShimError(f"unshare(CLONE_NEWNS) failed: {os.strerror(ctypes.get_errno())}")
    _mount("--make-rprivate", "/")


def prepare(pod: PodLayout, *, node: str | None) -> None:
    """The mounts of ``start_dynamic_node``, in a mount namespace private to this process."""
    address = pod_address(pod.controller_address)
    update_hosts(pod, address=address, names=[n for n in (node, socket.gethostname()) if n])
    if not pod.resolv_file.exists():
        pod.resolv_file.write_text("nameserver 127.0.0.1\n")
    _private_mount_namespace()
    _mount("--bind", str(pod.hosts_file), str(pod.sysroot / "etc" / "hosts"))
    _mount("--bind", str(pod.resolv_file), str(pod.sysroot / "etc" / "resolv.conf"))
    if pod.munge_dir is not None:
        _mount("-t", "tmpfs", "-o", "mode=755", "bridge-run", "/run")
        Path("/run/munge").mkdir()
        _mount("--bind", str(pod.munge_dir), "/run/munge")


def exec_slurmd(pod: PodLayout, slurmd_argv: Sequence[str], *, env: Mapping[str, str]) -> None:
    """Prepare the mounts, chroot when the cluster runs from a root, and exec slurmd (never returns)."""
    if not slurmd_argv:
        raise ShimError("no slurmd command after '--'")
    prepare(pod, node=node_name_of(slurmd_argv[1:]))
    if pod.sysroot != Path("/"):
        os.chroot(pod.sysroot)
    os.chdir("/")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(slurmd_argv[0], list(slurmd_argv), slurmd_env(env))  # noqa: S606 - argv, no shell


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bridge.sandbox.slurmd_pod",
        description="Run slurmd as a pod of the local stack's Slurm cluster (see the module docstring).",
        usage="%(prog)s --cluster-dir DIR [--version {22.05,24.11}] -- slurmd [ARG ...]",
    )
    parser.add_argument("--cluster-dir", type=Path, required=True, help="the SlurmCluster's workdir")
    parser.add_argument("--version", choices=VERSIONS, default=None, help="default: detected")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" not in args:
        _parser().print_usage(sys.stderr)
        print("slurmd_pod: error: the slurmd command goes after '--'", file=sys.stderr)
        return 2
    split = args.index("--")
    options = _parser().parse_args(args[:split])
    version = next((v for v in VERSIONS if v == options.version), None)
    try:
        pod = layout(options.cluster_dir, version=version)
        exec_slurmd(pod, args[split + 1 :], env=os.environ)
    except (ShimError, OSError) as error:
        print(f"slurmd_pod: error: {error}", file=sys.stderr)
        return 1
    return 0  # pragma: no cover - exec_slurmd does not return


if __name__ == "__main__":
    sys.exit(main())
