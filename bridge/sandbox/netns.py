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

Nothing is left after a crash either. Before a namespace is made, its name is *claimed*: the file
``<run_dir>/netns/<name>.claim`` (:func:`bridge.sandbox.owners.run_dir`) is locked with ``flock`` by
the creating process for as long as the namespace exists, and the kernel drops that lock when the
process dies, however it dies. So a namespace whose claim no one holds is a dead creator's:
:func:`reclaim_namespaces` (run by the next start of a stack, or ``scripts/dev cleanup``) removes every
such one, and :func:`create_namespace` removes a leftover of the name it is about to use, while a
name a live process holds is refused (:class:`NamespaceHeldError`), to creators and removers alike.

Two namespaces made at once (threads of one process, or two processes) never share a subnet: the
free /30 is chosen (:func:`choose_subnet`) and its host end assigned under one lock,
``<run_dir>/netns/subnets.lock``, and a /30 is free when no address of the host is in it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import ipaddress
import logging
import os
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from bridge.sandbox.owners import hold, read_holder, release, run_dir
from bridge.sandbox.processes import StackError

log = logging.getLogger(__name__)

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
        """Kill whatever runs in it, then remove it and its veth pair (:func:`remove_namespace`)."""
        remove_namespace(self.name)


def _enable_forwarding() -> None:
    Path("/proc/sys/net/ipv4/ip_forward").write_text("1\n")


def namespace_token(*parts: str) -> str:
    """A token derived from ``parts`` (e.g. a node name and a pod uid): the same parts, the same name."""
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()
    return digest[:_TOKEN_LENGTH]


def namespace_name(token: str) -> str:
    return f"{PREFIX}{token}"


def choose_subnet(
    used: Iterable[str],
    *,
    pool: ipaddress.IPv4Network = _SUBNET,
    attempts: int = 20,
    randbelow: Callable[[int], int] = secrets.randbelow,
) -> ipaddress.IPv4Network | None:
    """A /30 of ``pool`` holding none of the ``used`` addresses; None when every one holds some.

    ``attempts`` random picks first (two stacks started at once rarely meet), then the first free one
    in order, so that a crowded pool still yields its last free /30.
    """
    taken = set()
    for text in used:
        with contextlib.suppress(ValueError):
            address = ipaddress.IPv4Address(text)
            if address in pool:
                taken.add(ipaddress.IPv4Network((int(address) & ~3, 30)))
    count = 2 ** (30 - pool.prefixlen)

    def nth(index: int) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network((int(pool.network_address) + 4 * index, 30))

    for _ in range(attempts):
        subnet = nth(randbelow(count))
        if subnet not in taken:
            return subnet
    return next((nth(i) for i in range(count) if nth(i) not in taken), None)


def _claims_dir() -> Path:
    path = run_dir() / "netns"
    path.mkdir(parents=True, exist_ok=True)
    return path


def claim_path(name: str) -> Path:
    """The claim file of the namespace ``name``, locked by the process that made it while it exists."""
    return _claims_dir() / f"{name}.claim"


@contextlib.contextmanager
def _subnet_lock() -> Iterator[None]:
    """Held while a /30 is chosen and its host end assigned: threads and processes, one at a time."""
    fd = os.open(_claims_dir() / "subnets.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


_held: dict[str, int] = {}
"""Claims this process holds: namespace name to the locked descriptor."""
_held_lock = threading.Lock()


def _claim(name: str) -> None:
    """Hold the claim on ``name`` for this process; :class:`NamespaceHeldError` when a live one has it."""
    path = claim_path(name)
    fd = hold(path, content=f"{os.getpid()}\n")
    if fd is None:
        raise NamespaceHeldError(name, holder=read_holder(path))
    with _held_lock:
        _held[name] = fd


def _unclaim(name: str, *, remove: bool) -> None:
    """Give this process's claim on ``name`` up; ``remove`` once the namespace is gone."""
    with _held_lock:
        fd = _held.pop(name, None)
    if fd is not None:
        release(fd, claim_path(name), remove=remove)


def holds_claim(name: str) -> bool:
    """Whether this process holds the claim on ``name`` (made it and has not removed it yet)."""
    with _held_lock:
        return name in _held


def create_namespace(*, token: str | None = None, attempts: int = 20) -> NetworkNamespace:
    """Create a namespace on a free /30 of 10.213.0.0/16 and wire it to the host.

    ``token`` names it (``kb-<token>``, at most 12 characters); random by default. Its name is claimed
    first: :class:`NamespaceHeldError` when a live process holds it; a namespace of that name left by
    a dead one is removed (its processes killed) and replaced.
    """
    if token is not None and not (0 < len(token) <= 12 and token.isalnum()):
        raise ValueError(f"a namespace token is 1 to 12 letters or digits, not {token!r}")
    _enable_forwarding()
    chosen = token or secrets.token_hex(4)
    name, host_end, ns_end = namespace_name(chosen), f"kbh{chosen}", f"kbn{chosen}"
    _claim(name)
    try:
        if (NETNS_DIR / name).exists():
            log.warning("network namespace %s was left by a dead process: removing it", name)
            _remove(name, timeout=5.0)
    except BaseException:
        _unclaim(name, remove=False)  # the leftover stays claimable, for a later reclaim
        raise
    made = False
    try:
        _ip("netns", "add", name)  # fails if an unclaimed one of the name appeared: nothing of it is ours
        made = True
        try:
            with _subnet_lock():
                subnet = choose_subnet(_used_host_addresses(), attempts=attempts)
                if subnet is None:
                    raise StackError("no free /30 left in 10.213.0.0/16 for a network namespace")
                gateway, address = (str(host) for host in subnet.hosts())
                _ip("link", "add", host_end, "type", "veth", "peer", "name", ns_end)
                _ip("addr", "add", f"{gateway}/30", "dev", host_end)
            _ip("link", "set", ns_end, "netns", name)
            _ip("link", "set", host_end, "up")
            inside = ["-n", name]
            _ip(*inside, "link", "set", ns_end, "name", "eth0")
            _ip(*inside, "addr", "add", f"{address}/30", "dev", "eth0")
            _ip(*inside, "link", "set", "eth0", "up")
            _ip(*inside, "link", "set", "lo", "up")
            _ip(*inside, "route", "add", "default", "via", gateway)
        except BaseException:
            _ip("link", "del", host_end, check=False)
            _ip("netns", "del", name, check=False)
            raise
    except BaseException:
        # The claim file stays only for a namespace made here that could not be deleted again.
        _unclaim(name, remove=not made or not (NETNS_DIR / name).exists())
        raise
    return NetworkNamespace(name=name, address=address, gateway=gateway, host_interface=host_end)


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


class NamespaceHeldError(NamespaceBusyError):
    """Another live process holds the namespace's claim: it is that process's, and left alone."""

    def __init__(self, name: str, *, holder: str) -> None:
        StackError.__init__(self, f"network namespace {name} is claimed by live process {holder}; left alone")
        self.name = name
        self.pids = []
        self.holder = holder


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


def _remove(name: str, *, timeout: float) -> list[int]:
    """Kill what runs in the namespace, then delete it and its veth pair; the claim is the caller's."""
    killed = kill_processes(name, timeout=timeout)
    left = namespace_pids(name)
    if left:
        raise NamespaceBusyError(name, left)
    token = name.removeprefix(PREFIX)
    if name.startswith(PREFIX):
        _ip("link", "del", f"kbh{token}", check=False)
    _ip("netns", "del", name, check=False)
    return killed


def remove_namespace(name: str, *, timeout: float = 5.0) -> list[int]:
    """Kill every process in the named namespace, then delete it and its veth pair, knowing only its
    name (e.g. found after a crash). Nothing to do when it does not exist. Returns the pids killed.

    Only a namespace this process made, or one no live process claims, is removed: one that another
    live process holds raises :class:`NamespaceHeldError` and is left alone. Raises
    :class:`NamespaceBusyError` and deletes nothing when processes are still in it after ``timeout``
    seconds of killing: deleting the name would leave them running in a namespace nobody can find any
    more, while kept (and its claim file with it) it is retried by the next stop or reclaim.
    """
    ours = holds_claim(name)
    if not ours:
        _claim(name)
    try:
        killed = _remove(name, timeout=timeout)
    except BaseException:
        if not ours:
            _unclaim(name, remove=False)
        raise
    _unclaim(name, remove=True)
    return killed


def reclaim_namespaces(*, timeout: float = 5.0) -> dict[str, list[int]]:
    """Remove every namespace whose claim no live process holds (its creator died without removing
    it), killing what still runs in it; returns each one removed with the pids killed.

    A namespace whose processes outlive ``timeout`` is kept with its claim file, for the next call.
    """
    removed: dict[str, list[int]] = {}
    for path in sorted(_claims_dir().glob("*.claim")):
        name = path.name.removesuffix(".claim")
        if holds_claim(name):
            continue
        existed = (NETNS_DIR / name).exists()
        try:
            killed = remove_namespace(name, timeout=timeout)
        except NamespaceHeldError:
            continue
        except NamespaceBusyError as error:
            log.error("network namespaces: %s", error)
            continue
        if existed:
            removed[name] = killed
            log.warning(
                "network namespaces: removed %s left by a dead process; killed %d processes in it",
                name, len(killed),
            )  # fmt: skip
    return removed
