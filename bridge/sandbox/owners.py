"""Who started what: crash-safe records of the local stack's daemons and directories, and reclaiming
those of an owner that died.

Why: every daemon of the stack (etcd, kube-apiserver, Kueue, slurmctld, a Ray head...) runs in a
session of its own, so nothing ends it when the process that started it (a pytest session, the
sandbox) is killed by a signal: the daemons would run on, orphaned, holding ports, memory and a Slurm
root under /tmp. ``PR_SET_PDEATHSIG`` is no answer: it fires when the *thread* that forked dies, and
stacks are started from worker threads too. So each starting process keeps a record that outlives it,
and the next start of any stack (or ``scripts/dev cleanup``) reclaims the records of dead owners.

The record. A process that starts something is an *owner*; on first use it creates, under
``<run_dir>/owners/`` (:func:`run_dir`: ``/run/k8s-bridge`` as root, a tmpfs emptied by a reboot
like the pids it holds), ``<token>.lock``, locked with ``flock`` for the owner's whole life (the kernel
drops the lock when the process dies, however it dies, and never before: a dead owner is told from a
live one by the lock alone, pids play no part), and a directory ``<token>/`` with one file per thing
made and not yet cleaned up:

- ``p<pid>-<start>``: a daemon it started, by pid and start time (``/proc/<pid>/stat`` field 22),
  read while the child is not reaped yet, so that the pid cannot be another process's;
- ``d<hash>``: a directory it made (the file holds its path): unmounted below, then deleted;
- ``m<hash>``: a directory kept on purpose with mounts below it (the file holds its path): unmounted.

The daemons also carry ``K8S_BRIDGE_OWNER=<token>`` in their environment, which their children inherit.

Reclaiming (:func:`reclaim_owners`). A record whose lock can be taken is a dead owner's. Its processes
are found in a snapshot of /proc (:func:`owned`, pure); a process is provably the dead owner's when it

1. is a recorded daemon, same pid and same start time;
2. is in the session of such a daemon, that daemon alive (a session's id is its leader's pid, so while
   the leader lives no other session can have that id);
3. carries the record's token in its environment (a random 64-bit token: only the owner's daemons
   and their descendants have it);
4. is a child (``ppid``) of a process found so, started no earlier than it.

Nothing else is touched, whatever its name or command line. Each process found is pinned with a pidfd,
checked to be the very process of the snapshot (its start time) and stopped (SIGSTOP), and snapshots
are taken again until no new one appears, so that no fork escapes; then all are SIGKILLed through
their pidfds (a pid reused meanwhile is never hit) and waited for. Then the directories go, then the
record. Two reclaimers never work on one record: the lock is theirs while they do.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import logging
import os
import secrets
import select
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bridge.sandbox import slurm_root

__all__ = [
    "OWNER_ENV",
    "RUN_DIR_ENV",
    "OwnerRecord",
    "ProcessInfo",
    "Reclaimed",
    "SelfOwnedError",
    "current",
    "hold",
    "kill_owned",
    "owned",
    "reclaim_owners",
    "release",
    "remove_directory",
    "run_dir",
    "snapshot",
    "start_time",
]

log = logging.getLogger(__name__)

OWNER_ENV = "K8S_BRIDGE_OWNER"
"""Environment variable set on every daemon started: the token of its owner's record."""

RUN_DIR_ENV = "K8S_BRIDGE_RUN_DIR"
"""Overrides :func:`run_dir` (tests keep their records apart with it; children inherit it)."""


def run_dir() -> Path:
    """Where the stack's records live: ``/run/k8s-bridge`` as root; else a private directory of the user.

    ``$K8S_BRIDGE_RUN_DIR`` overrides it. A tmpfs is the right place: a reboot empties it, as it ends
    every process and namespace recorded there.
    """
    override = os.environ.get(RUN_DIR_ENV)
    if override:
        path = Path(override)
    elif os.geteuid() == 0:
        path = Path("/run/k8s-bridge")
    else:
        base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
        path = Path(base) / f"k8s-bridge-{os.getuid()}"
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        if path.stat().st_uid != os.getuid():
            raise PermissionError(
                f"{path} belongs to another user: set {RUN_DIR_ENV} to a directory of yours"
            )
    path.mkdir(parents=True, exist_ok=True)
    return path


def owners_dir() -> Path:
    return run_dir() / "owners"


# ---------------------------------------------------------------------------------------------------
# Lock files: held for a lifetime, taken over once their holder is dead.
# ---------------------------------------------------------------------------------------------------


def hold(path: Path, *, content: str | None = None) -> int | None:
    """Take an exclusive ``flock`` on ``path`` (created when missing); the descriptor, or None while
    another open file holds it (another process, or another holder in this one).

    The descriptor is close-on-exec, so daemons started meanwhile do not keep the lock. After locking,
    ``path`` must still name the file locked: whoever held it may have unlinked it meanwhile (the end
    of a claim), and a lock on an unlinked file guards nothing; then it is tried again. ``content``
    (e.g. the holder's pid) replaces the file's text once held.
    """
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            linked = os.stat(path)
        except FileNotFoundError:
            linked = None
        locked = os.fstat(fd)
        if linked is not None and (linked.st_dev, linked.st_ino) == (locked.st_dev, locked.st_ino):
            if content is not None:
                os.ftruncate(fd, 0)
                os.pwrite(fd, content.encode(), 0)
            return fd
        os.close(fd)


def release(fd: int, path: Path, *, remove: bool) -> None:
    """Give up a lock from :func:`hold`; with ``remove``, unlink the file first (while still held, so
    that a process waiting for it finds it gone and starts afresh)."""
    try:
        if remove:
            path.unlink(missing_ok=True)
    finally:
        os.close(fd)


def read_holder(path: Path) -> str:
    """The text a holder wrote in a lock file (its pid), for messages; ``?`` when there is none."""
    try:
        return path.read_text(errors="replace").split("\n", 1)[0].strip() or "?"
    except OSError:
        return "?"


# ---------------------------------------------------------------------------------------------------
# Processes, as /proc shows them.
# ---------------------------------------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command (which may hold spaces and parentheses)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot; field 22 of its stat); None if there is none."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields is not None and len(fields) > 19 else None


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


@dataclass(frozen=True)
class ProcessInfo:
    """One process as a /proc snapshot saw it."""

    pid: int
    ppid: int
    session: int
    start: int
    owner: str | None = None
    """The ``K8S_BRIDGE_OWNER`` token of its environment, if any."""


def _owner_token(pid: int) -> str | None:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    marker = OWNER_ENV.encode() + b"="
    if marker not in environ:
        return None
    for entry in environ.split(b"\0"):
        if entry.startswith(marker):
            return entry[len(marker) :].decode(errors="replace")
    return None


def snapshot() -> dict[int, ProcessInfo]:
    """Every live process now (zombies left out: they are dead already), with its owner token."""
    found: dict[int, ProcessInfo] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        fields = _stat_fields(pid)
        if fields is None or len(fields) < 20 or fields[0] in ("Z", "X"):
            continue
        found[pid] = ProcessInfo(
            pid=pid,
            ppid=int(fields[1]),
            session=int(fields[3]),
            start=int(fields[19]),
            owner=_owner_token(pid),
        )
    return found


def owned(
    processes: Mapping[int, ProcessInfo],
    *,
    roots: Iterable[tuple[int, int]],
    token: str,
) -> dict[int, int]:
    """The processes of ``processes`` (a snapshot) that are provably the owner's: ``{pid: start time}``.

    ``roots`` are the daemons recorded (``(pid, start time)``); ``token`` the record's marker. The four
    rules are in the module docstring. Init (pid 1) is never returned.
    """
    found: dict[int, int] = {}
    alive_roots = set()
    for pid, started in roots:
        info = processes.get(pid)
        if info is not None and info.start == started:
            found[pid] = started
            alive_roots.add(pid)
    for info in processes.values():
        if info.session in alive_roots or (token and info.owner == token):
            found[info.pid] = info.start
    children: dict[int, list[ProcessInfo]] = {}
    for info in processes.values():
        children.setdefault(info.ppid, []).append(info)
    pending = list(found)
    while pending:
        parent = processes.get(pending.pop())
        if parent is None:
            continue
        for child in children.get(parent.pid, []):
            if child.pid not in found and child.start >= parent.start:
                found[child.pid] = child.start
                pending.append(child.pid)
    found.pop(1, None)
    return found


def _pin(pid: int, started: int) -> int | None:
    """A pidfd for ``pid`` if it is still the process that started at ``started``; else None."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return None
    if start_time(pid) != started:  # the pid is another process's by now: not ours to touch
        os.close(pidfd)
        return None
    return pidfd


class SelfOwnedError(RuntimeError):
    """The caller is itself among a dead owner's processes (an orphan of it): it leaves that record alone."""


def kill_owned(token: str, roots: Iterable[tuple[int, int]], *, timeout: float = 10.0) -> list[int]:
    """Stop, then SIGKILL, every process provably the owner's (:func:`owned`); the pids killed.

    Snapshots are taken until one finds nothing new, each process found being pinned (pidfd, start
    time checked) and stopped at once, so that none forks a child that would escape; then every one
    is killed through its pidfd and waited for, up to ``timeout`` seconds. Raises
    :class:`SelfOwnedError`, touching nothing, when the caller is one of them.
    """
    pinned: dict[int, int] = {}  # pid: pidfd
    seeds = set(roots)
    deadline = time.monotonic() + timeout
    try:
        while True:
            found = owned(snapshot(), roots=seeds, token=token)
            if os.getpid() in found:
                for pidfd in pinned.values():
                    with contextlib.suppress(ProcessLookupError):
                        signal.pidfd_send_signal(pidfd, signal.SIGCONT)
                raise SelfOwnedError(f"this process ({os.getpid()}) is one of owner {token}'s")
            new = {pid: started for pid, started in found.items() if pid not in pinned}
            for pid, started in new.items():
                handle = _pin(pid, started)
                if handle is None:
                    continue  # gone since the snapshot
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(handle, signal.SIGSTOP)
                pinned[pid] = handle
                seeds.add((pid, started))
            if not new or time.monotonic() > deadline:
                break
        for pidfd in pinned.values():
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        poller = select.poll()
        for pidfd in pinned.values():
            poller.register(pidfd, select.POLLIN)
        waiting = set(pinned.values())
        patience = time.monotonic() + timeout
        while waiting and time.monotonic() < patience:
            for pidfd, _ in poller.poll(100):
                waiting.discard(pidfd)
                poller.unregister(pidfd)
        if waiting:
            log.error("owners: %d processes of %s did not die within %.0fs", len(waiting), token, timeout)
    finally:
        for pidfd in pinned.values():
            os.close(pidfd)
    return sorted(pinned)


def remove_directory(path: Path, *, delete: bool = True) -> None:
    """Unmount everything below ``path``, then (``delete``) delete it; never while anything is still
    mounted there (deleting through a bind of /dev would empty the host's)."""
    if not path.exists():
        return
    slurm_root.unmount_all(path)
    if slurm_root.mounts_under(path):
        raise OSError(f"{path} still has mounts below it: not deleted")
    if delete:
        shutil.rmtree(path)


# ---------------------------------------------------------------------------------------------------
# The record of a live owner.
# ---------------------------------------------------------------------------------------------------


class OwnerRecord:
    """This process's record (see the module docstring); :func:`current` gives the one in use."""

    def __init__(self, *, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        while True:  # a random token is free unless a reclaimer took the fresh file away: then again
            token = secrets.token_hex(8)
            lock = root / f"{token}.lock"
            fd = hold(lock, content=f"{os.getpid()} {boot_id()}\n")
            if fd is not None:
                break
        self.root = root
        self.token = token
        self.pid = os.getpid()
        self.lock_path = lock
        self.directory = root / token
        self.directory.mkdir(exist_ok=True)
        self._fd: int | None = fd

    def add_process(self, pid: int) -> str:
        """Record a daemon just started (not reaped yet: the pid is still that child's); the entry's name."""
        started = start_time(pid)
        entry = f"p{pid}-{started if started is not None else 0}"
        (self.directory / entry).touch()
        return entry

    def add_directory(self, path: Path, *, delete: bool = True) -> str:
        """Record a directory this process made and removes on a clean stop (``delete``), or one it
        keeps but mounts things below; the entry's name."""
        text = str(path.resolve())
        entry = ("d" if delete else "m") + hashlib.sha256(text.encode()).hexdigest()[:16]
        (self.directory / entry).write_text(text + "\n")
        return entry

    def discard(self, entry: str) -> None:
        """Drop an entry once what it names is cleaned up."""
        (self.directory / entry).unlink(missing_ok=True)

    def entries(self) -> list[str]:
        try:
            return sorted(os.listdir(self.directory))
        except FileNotFoundError:
            return []

    def close(self) -> None:
        """Give the record up: removed when nothing is left in it, else left for a reclaimer."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        empty = not self.entries()
        if empty:
            shutil.rmtree(self.directory, ignore_errors=True)
        release(fd, self.lock_path, remove=empty)

    def forget_after_fork(self) -> None:
        """In a forked child: drop the inherited descriptor (the parent still holds the lock)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


class _Current:
    """The record of this process, once made (a holder, so that no ``global`` is needed)."""

    record: OwnerRecord | None = None
    lock = threading.Lock()


def current() -> OwnerRecord:
    """This process's record, created on first use (and again in a forked child or another run dir)."""
    with _Current.lock:
        root = owners_dir()
        record = _Current.record
        if record is not None and (record.pid != os.getpid() or record.root != root):
            if record.pid == os.getpid():
                record.close()
            record = None
        if record is None:
            record = _Current.record = OwnerRecord(root=root)
        return record


def _close_current() -> None:
    with _Current.lock:
        record = _Current.record
        if record is not None and record.pid == os.getpid():
            record.close()


def _after_fork_in_child() -> None:
    record, _Current.record = _Current.record, None
    if record is not None:
        record.forget_after_fork()
    _Current.lock = threading.Lock()  # a thread of the parent may have held it at the fork


atexit.register(_close_current)
os.register_at_fork(after_in_child=_after_fork_in_child)


# ---------------------------------------------------------------------------------------------------
# Reclaiming dead owners' records.
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reclaimed:
    """What reclaiming one dead owner's record did."""

    token: str
    owner_pid: int | None
    killed: list[int] = field(default_factory=list)
    directories: list[Path] = field(default_factory=list)
    """Unmounted below, and deleted unless recorded as kept."""
    complete: bool = True
    """False when something could not be removed: the record stays, to be retried."""


def _entries(directory: Path) -> tuple[list[tuple[int, int]], dict[str, Path]]:
    """The daemons (``(pid, start)``) and directories (``{entry: path}``, to delete when the entry
    starts with ``d``) of a record's directory."""
    processes: list[tuple[int, int]] = []
    directories: dict[str, Path] = {}
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return processes, directories
    for name in names:
        if name.startswith("p"):
            pid, _, started = name[1:].partition("-")
            if pid.isdigit() and started.isdigit():
                processes.append((int(pid), int(started)))
        elif name.startswith(("d", "m")):
            with contextlib.suppress(OSError):
                text = (directory / name).read_text().strip()
                if text:
                    directories[name] = Path(text)
    return processes, directories


def _reclaim_one(lock: Path, *, timeout: float) -> Reclaimed | None:
    fd = hold(lock)
    if fd is None:
        return None  # its owner lives
    token = lock.name.removesuffix(".lock")
    directory = lock.parent / token
    try:
        words = os.pread(fd, 200, 0).decode(errors="replace").split()
        owner_pid = int(words[0]) if words and words[0].isdigit() else None
        same_boot = len(words) > 1 and words[1] == boot_id()
        processes, directories = _entries(directory)
        # After a reboot no recorded process runs any more and a pid and start time may name another.
        try:
            killed = kill_owned(token, processes, timeout=timeout) if same_boot else []
        except SelfOwnedError as error:
            log.warning("owners: record %s left alone: %s", token, error)
            release(fd, lock, remove=False)
            return Reclaimed(token=token, owner_pid=owner_pid, complete=False)
        removed: list[Path] = []
        complete = True
        for entry, path in sorted(directories.items()):
            try:
                remove_directory(path, delete=entry.startswith("d"))
            except (OSError, slurm_root.RootBuildError) as error:
                log.error("owners: cannot remove %s left by owner %s: %s", path, owner_pid, error)
                complete = False
                continue
            (directory / entry).unlink(missing_ok=True)
            removed.append(path)
    except BaseException:
        release(fd, lock, remove=False)
        raise
    if complete:
        shutil.rmtree(directory, ignore_errors=True)
    release(fd, lock, remove=complete)
    if killed or removed:
        log.warning(
            "owners: owner %s (record %s) is dead: killed %d processes it left, removed %s",
            owner_pid, token, len(killed), [str(p) for p in removed] or "no directory",
        )  # fmt: skip
    return Reclaimed(token=token, owner_pid=owner_pid, killed=killed, directories=removed, complete=complete)


def reclaim_owners(*, root: Path | None = None, timeout: float = 10.0) -> list[Reclaimed]:
    """Reclaim every record whose owner is dead (see the module docstring); what was done for each.

    Passes are repeated while one removes a record: a daemon killed here may be an owner itself (a
    process runner started by a test), whose record is dead only once it is.
    """
    folder = root if root is not None else owners_dir()
    if not folder.is_dir():
        return []
    done: list[Reclaimed] = []
    tried: set[str] = set()
    while True:
        progress = False
        for lock in sorted(folder.glob("*.lock")):
            if lock.name in tried:
                continue
            result = _reclaim_one(lock, timeout=timeout)
            if result is None:
                continue
            tried.add(lock.name)
            done.append(result)
            progress = True
        if not progress:
            return done
