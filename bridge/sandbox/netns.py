"""Network namespaces that stand in for pods: one IP per "pod", reachable from the host.

Why: a dynamic slurmd cannot take its own port (slurmctld always calls the global SlurmdPort), so
two slurmd on one IP collide; Ray workers likewise want a node IP of their own. A Kubernetes pod
has its own network namespace, and so does each of these: a veth pair, the host end
``10.<a>.<b>.<c>+1/30`` and the namespace end ``+2/30`` (``eth0``), a default route via the host
end, and ``ip_forward`` on, so the namespace reaches daemons on the host's addresses and the host
reaches it.

Each namespace is named ``kb-<token>`` (its veth ends ``kbh<token>`` and ``kbn<token>``) and is
deleted by that name alone. The token is random unless the caller gives one: the process runner
derives it from the node and pod uid (:func:`namespace_token`), so that a restarted runner can tell
its namespaces by name. Commands run inside with ``nsenter --net=/run/netns/<name>`` (not
``ip netns exec``, which remounts /sys and breaks slurmd's cgroup detection).

A namespace lives on while any process is in it, even once its name is deleted, and then nothing
can find it any more: :func:`remove_namespace` therefore kills every process in the namespace
(:func:`namespace_pids`, the same test as ``ip netns pids``; each pid pinned by a pidfd and checked
again before the signal, so a reused pid is never hit) before deleting it, and keeps the name when
some are still there after the timeout (:class:`NamespaceBusyError`), so that it can be retried.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import secrets
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from bridge.sandbox.processes import StackError

NETNS_DIR = Path("/run/netns")
PREFIX = "kb-"
"""Every namespace made here is named ``kb-<token>``."""
_SUBNET = ipaddress.IPv4Network("10.213.0.0/16")
_TOKEN_LENGTH = 10
"""Hex digits of a derived token: ``kbh`` + 10 is 13 characters, under the 15 of an interface name."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    completed = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and completed.returncode != 0:
        raise StackError(f"ip {' '.join(args)} failed: {completed.stderr.strip()}")
    return completed


def _used_host_addresses() -> set[str]:
    out = _ip("-o", "-4", "addr", "show").stdout
    return {field.split("/")[0] for line in out.splitlines() for field in line.split() if "/" in field}


@dataclass(frozen=True)
class NetworkNamespace:
    """One pod-like network namespace; ``address`` is its IP, ``gateway`` the host's end."""

    name: str
    address: str
    gateway: str
    host_interface: str

    @property
    def path(self) -> Path:
        return NETNS_DIR / self.name

    def enter(self) -> list[str]:
        """The argv prefix that runs a command inside this namespace."""
        return ["nsenter", f"--net={self.path}"]

    def delete(self) -> None:
        """Remove the namespace and its veth pair (deleting either end removes both)."""
        _ip("link", "del", self.host_interface, check=False)
        _ip("netns", "del", self.name, check=False)


def _enable_forwarding() -> None:
    Path("/proc/sys/net/ipv4/ip_forward").write_text("1\n")


def namespace_token(*parts: str) -> str:
    """A token derived from ``parts`` (e.g. a node name and a pod uid): the same parts, the same name."""
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()
    return digest[:_TOKEN_LENGTH]


def namespace_name(token: str) -> str:
    return f"{PREFIX}{token}"


def create_namespace(*, token: str | None = None, attempts: int = 20) -> NetworkNamespace:
    """Create a namespace on a free /30 of 10.213.0.0/16 and wire it to the host.

    ``token`` names it (``kb-<token>``, at most 12 characters); random by default. A namespace of that
    name must not exist yet (:func:`remove_namespace` it first).
    """
    if token is not None and not (0 < len(token) <= 12 and token.isalnum()):
        raise ValueError(f"a namespace token is 1 to 12 letters or digits, not {token!r}")
    _enable_forwarding()
    used = _used_host_addresses()
    subnets = list(_SUBNET.subnets(new_prefix=30))
    for _ in range(attempts):
        subnet = subnets[secrets.randbelow(len(subnets))]
        gateway, address = (str(host) for host in subnet.hosts())
        if gateway in used:
            continue
        chosen = token or secrets.token_hex(4)
        name, host_end, ns_end = namespace_name(chosen), f"kbh{chosen}", f"kbn{chosen}"
        namespace = NetworkNamespace(name=name, address=address, gateway=gateway, host_interface=host_end)
        _ip("netns", "add", name)  # fails if the name is taken: then nothing here is ours to delete
        try:
            _ip("link", "add", host_end, "type", "veth", "peer", "name", ns_end)
            _ip("link", "set", ns_end, "netns", name)
            _ip("addr", "add", f"{gateway}/30", "dev", host_end)
            _ip("link", "set", host_end, "up")
            inside = ["-n", name]
            _ip(*inside, "link", "set", ns_end, "name", "eth0")
            _ip(*inside, "addr", "add", f"{address}/30", "dev", "eth0")
            _ip(*inside, "link", "set", "eth0", "up")
            _ip(*inside, "link", "set", "lo", "up")
            _ip(*inside, "route", "add", "default", "via", gateway)
        except StackError:
            namespace.delete()
            raise
        return namespace
    raise StackError("no free /30 left in 10.213.0.0/16 for a network namespace")


def existing_namespaces() -> list[str]:
    """Names of this project's namespaces present now (``kb-*``), for leak checks in tests."""
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(PREFIX)]


def _namespace_id(name: str) -> tuple[int, int] | None:
    """The nsfs identity (device, inode) of the named namespace; None when it does not exist."""
    try:
        found = os.stat(NETNS_DIR / name)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def _net_namespace_of(pid: int) -> tuple[int, int] | None:
    """The nsfs identity of process ``pid``'s network namespace; None when it is gone or a zombie."""
    try:
        found = os.stat(f"/proc/{pid}/ns/net")
    except OSError:
        return None
    return found.st_dev, found.st_ino


def namespace_pids(name: str) -> list[int]:
    """The processes in the named namespace now (what ``ip netns pids <name>`` lists); [] if none.

    A process is in it when its ``/proc/<pid>/ns/net`` is the same nsfs inode as ``/run/netns/<name>``.
    Zombies have no namespace left and are not listed.
    """
    wanted = _namespace_id(name)
    if wanted is None:
        return []
    return [
        int(entry.name)
        for entry in os.scandir("/proc")
        if entry.name.isdigit() and _net_namespace_of(int(entry.name)) == wanted
    ]


def _kill_in_namespace(pid: int, wanted: tuple[int, int]) -> bool:
    """SIGKILL process ``pid`` if it is (still) in the namespace ``wanted``; whether it was signalled.

    The pid comes from a scan of /proc, and that process may have exited since and its pid been reused
    by another one, anywhere on the host. So the process is pinned with a pidfd first, its namespace
    read again, and the signal sent through the pidfd: if ``/proc/<pid>`` was already another process
    when the pidfd was opened, the namespace read is that process's and does not match; if the pinned
    process exits (and the pid is reused) after the check, the signal goes to the exited one and fails.
    """
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    try:
        if _net_namespace_of(pid) != wanted:
            return False
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except ProcessLookupError:
        return False
    finally:
        os.close(pidfd)
    return True


class NamespaceBusyError(StackError):
    """Processes are still in a namespace after killing them for the whole timeout; it is kept."""

    def __init__(self, name: str, pids: list[int]) -> None:
        super().__init__(
            f"network namespace {name} still holds processes {pids} after SIGKILL; kept under its name"
        )
        self.name = name
        self.pids = pids


def kill_processes(name: str, *, timeout: float = 5.0) -> list[int]:
    """SIGKILL every process in the named namespace, again until none is left (a fork may race the
    first pass) or ``timeout`` passes; the pids killed. Each pid is checked to be in the namespace
    still when it is signalled (:func:`_kill_in_namespace`), so a reused pid is never killed."""
    killed: list[int] = []
    deadline = time.monotonic() + timeout
    while pids := namespace_pids(name):
        wanted = _namespace_id(name)
        if wanted is None:
            break
        for pid in pids:
            if _kill_in_namespace(pid, wanted) and pid not in killed:
                killed.append(pid)
        if time.monotonic() > deadline:
            break
        time.sleep(0.02)
    return killed


def remove_namespace(name: str, *, timeout: float = 5.0) -> list[int]:
    """Kill every process in the named namespace, then delete it and its veth pair, knowing only its
    name (e.g. found after a crash). Nothing to do when it does not exist. Returns the pids killed.

    Raises :class:`NamespaceBusyError` and deletes nothing when processes are still in it after
    ``timeout`` seconds of killing: deleting the name would leave them running in a namespace nobody
    can find any more, while kept it is retried by the next stop or reclaim.
    """
    killed = kill_processes(name, timeout=timeout)
    left = namespace_pids(name)
    if left:
        raise NamespaceBusyError(name, left)
    token = name.removeprefix(PREFIX)
    if name.startswith(PREFIX):
        _ip("link", "del", f"kbh{token}", check=False)
    _ip("netns", "del", name, check=False)
    return killed
