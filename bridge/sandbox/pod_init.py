"""What runs inside a runner container's fresh namespaces before its command: hostname, mounts, exec.

Why a script of its own: it runs between ``unshare`` and the container's command as
``python -I -S pod_init.py MODE HOSTNAME HOSTS MOUNTS ARGV...`` (no site, no project import: the
standard library only), in the container's private mount namespace (``unshare --mount
--propagation=private``: nothing done here reaches the host's mount table). It replaces an inline
``python -c`` string, which grew past what can be read, typed and tested. It

1. sets the UTS hostname and binds the pod's hosts file on ``/etc/hosts``;
2. makes each volume mount of the plan ``MOUNTS`` (a JSON file the runner wrote: ``mounts``, each
   source, target, read-only, parents first; ``stage``, an empty folder of the pod's own): a bind of
   the volume's directory (or file) on ``mountPath``, then a read-only remount where asked. Every
   source is opened (``O_PATH``) before anything is mounted and bound through ``/proc/self/fd/N``,
   so a mount over ``/tmp`` cannot hide the sources below it. A failed mount ends the container
   with exit code 1 and the reason on its standard error;
3. execs the command (mode ``exec``: after asking for SIGKILL when the runner dies), or (mode
   ``init``) runs it as the child of this process, pid 1 of the container's PID namespace, forwarding
   signals and reaping orphans.

**A mountPath that does not exist on the host** (``/var/run/secrets/kubernetes.io/serviceaccount``
on a machine without ``/run/secrets``) needs its missing directories made, and making them on the
host's filesystem would leave them there. So the nearest existing directory ``P`` is *mirrored*
(:func:`mirror`): a tmpfs is mounted on ``P`` inside the container's namespace, and every entry of the
host's ``P`` is put back in it (each directory and file bound from the original, recursively with its
submounts; each symlink copied), then the missing directories are made in the tmpfs. The container
therefore still sees every file of ``P`` the host had, reads and writes them through to the host, and
only the new directories are its own. What differs: a name the host creates directly in ``P`` after
the container started is not seen by the container, and one the container creates directly in ``P``
stays in its tmpfs (both work one level down, in the bound directories). A tmpfs alone would have
hidden ``P``'s files (all of ``/run``); an overlay would not carry ``P``'s submounts and would keep the
container's writes in ``P``'s subdirectories from the host. A missing directory is made without a
mirror only inside a directory this script made or a writable volume (as a container runtime makes
mount points inside volumes); below a read-only volume the container fails with a message. When
the nearest existing directory is ``/`` itself (a mountPath ``/certs``), the mirror cannot be stacked
on the root the process already has: it is made on the plan's ``stage`` and the process chroots into
it (:func:`mirror_root`), its working directory kept; the tmpfs is unbindable, so that binding
``/tmp`` back into it does not copy the stage into itself.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import stat
import sys
from collections.abc import Callable, Sequence

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_UNBINDABLE = 1 << 17

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]


class MountError(Exception):
    """A mount the container needs could not be made; the message says which."""


def _encode(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    if _libc.mount(_encode(source), target.encode(), _encode(fstype), flags, _encode(data)) != 0:
        error = ctypes.get_errno()
        raise MountError(f"mount {source} on {target}: {os.strerror(error)}")


def split_existing(path: str, *, exists: Callable[[str], bool] = os.path.exists) -> tuple[str, list[str]]:
    """The longest prefix of ``path`` that exists (symlinks resolved) and the names missing below it."""
    parts = [part for part in path.split("/") if part]
    for count in range(len(parts), -1, -1):
        prefix = "/" + "/".join(parts[:count])
        if exists(prefix):
            return os.path.realpath(prefix), parts[count:]
    return "/", parts


def within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def mirror(directory: str, *, onto: str | None = None) -> None:
    """Mount a tmpfs on ``onto`` (default ``directory`` itself) holding every entry the host has in
    ``directory`` (see the module docstring). The tmpfs is unbindable, so that binding an entry
    that holds it (``/`` mirrored onto a folder below ``/tmp``) does not copy it into itself."""
    place = onto or directory
    original = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        info = os.stat(original)
        names = os.listdir(f"/proc/self/fd/{original}")
        options = f"mode={stat.S_IMODE(info.st_mode):o},uid={info.st_uid},gid={info.st_gid}"
        mount("tmpfs", place, "tmpfs", MS_NOSUID | MS_NODEV, options)
        mount(None, place, None, MS_UNBINDABLE)
        for name in names:
            _put_back(f"/proc/self/fd/{original}/{name}", os.path.join(place, name))
    finally:
        os.close(original)


def _put_back(source: str, target: str) -> None:
    """One entry of a mirrored directory: a symlink copied, anything else bound from the original."""
    entry = os.lstat(source)
    if stat.S_ISLNK(entry.st_mode):
        os.symlink(os.readlink(source), target)
    elif stat.S_ISDIR(entry.st_mode):
        os.mkdir(target, stat.S_IMODE(entry.st_mode))
        mount(source, target, None, MS_BIND | MS_REC)
    else:
        os.close(os.open(target, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600))
        mount(source, target, None, MS_BIND)


def mirror_root(stage: str) -> None:
    """Mirror ``/`` itself: a tmpfs cannot be stacked on the root a process already has, so the mirror
    is made on ``stage`` (a folder of the pod's own) and the process chroots into it, keeping its
    working directory."""
    cwd = os.getcwd()
    mirror("/", onto=stage)
    os.chroot(stage)
    os.chdir(cwd if os.path.isdir(cwd) else "/")


class Mounter:
    """Makes the mounts of one container, remembering which directories are its own."""

    def __init__(self, *, stage: str | None = None) -> None:
        self.stage = stage
        """A folder of the pod's own where ``/`` can be mirrored (None: a mount point right below
        ``/`` that does not exist is refused)."""
        self.own: set[str] = set()
        """Directories made here (in a mirror's tmpfs or a writable volume) and mirror roots."""
        self.volumes: list[tuple[str, bool]] = []
        """Targets mounted so far, with whether each is writable."""

    def _may_create_in(self, directory: str) -> bool:
        """Whether a new name in ``directory`` stays the container's (else it must be mirrored first)."""
        if directory in self.own:
            return True
        holders = [(target, writable) for target, writable in self.volumes if within(directory, target)]
        if holders:
            target, writable = max(holders, key=lambda holder: len(holder[0]))
            if not writable:
                raise MountError(f"cannot make a mount point in {directory}: it is in read-only {target}")
            return True
        return False

    def prepare(self, target: str, *, directory: bool) -> str:
        """Make sure ``target`` exists (as a directory or a file), without touching the host's view."""
        existing, missing = split_existing(target)
        if not missing:
            return existing
        if not self._may_create_in(existing):
            if existing != "/":
                mirror(existing)
            elif self.stage is not None:
                mirror_root(self.stage)
            else:
                raise MountError(f"cannot make {target}: only / of it exists, and no stage to mirror / on")
            self.own.add(existing)
        path = existing
        for index, name in enumerate(missing):
            path = os.path.join(path, name)
            if index < len(missing) - 1 or directory:
                os.mkdir(path, 0o755)
                self.own.add(path)
            else:
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))
        return path

    def bind(self, source_fd: int, target: str, *, read_only: bool) -> None:
        is_dir = stat.S_ISDIR(os.fstat(source_fd).st_mode)
        path = self.prepare(target, directory=is_dir)
        mount(f"/proc/self/fd/{source_fd}", path, None, MS_BIND | (MS_REC if is_dir else 0))
        if read_only:
            keep = os.statvfs(path).f_flag & (MS_NOSUID | MS_NODEV | MS_NOEXEC)
            mount(None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | keep)
        self.volumes.append((path, not read_only))


def make_mounts(plan: Sequence[dict[str, object]], *, stage: str | None = None) -> None:
    """Open every source first, then bind each on its target in order (the plan is parents first)."""
    opened = [os.open(str(entry["source"]), os.O_PATH | os.O_CLOEXEC) for entry in plan]
    mounter = Mounter(stage=stage)
    for entry, source in zip(plan, opened, strict=True):
        try:
            mounter.bind(source, str(entry["target"]), read_only=bool(entry["read_only"]))
        except OSError as error:
            raise MountError(f"volume mount at {entry['target']}: {error}") from None
    for source in opened:
        os.close(source)


def _run(argv: Sequence[str]) -> None:
    try:
        os.execvp(argv[0], list(argv))  # noqa: S606 - the container's argv, as given
    except OSError as error:
        print(f"process runner: cannot run {argv[0]!r}: {error}", file=sys.stderr)
        os._exit(127)


def _init(argv: Sequence[str]) -> None:
    """pid 1 of the container's PID namespace: the command as a child, signals forwarded, orphans reaped."""
    child = 0

    def forward(signum: int, frame: object) -> None:
        if child > 0:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signum)

    forwarded = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
    for signum in forwarded:
        signal.signal(signum, forward)
    child = os.fork()
    if child == 0:
        os.setpgid(0, 0)
        _run(argv)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            sys.exit(0)
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            sys.exit(128 - code if code < 0 else code)


def main(arguments: Sequence[str]) -> None:
    mode, hostname, hosts, plan_file = arguments[:4]
    argv = arguments[4:]
    socket.sethostname(hostname)
    try:
        mount(hosts, "/etc/hosts", None, MS_BIND)
    except MountError as error:
        print(f"process runner: /etc/hosts: {error}", file=sys.stderr)
    if plan_file:
        with open(plan_file) as handle:
            plan = json.load(handle)
        try:
            make_mounts(plan["mounts"], stage=plan.get("stage"))
        except (MountError, OSError) as error:
            print(f"process runner: {error}", file=sys.stderr)
            sys.exit(1)
    if mode == "exec":
        _libc.prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
        _run(argv)
    _init(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
