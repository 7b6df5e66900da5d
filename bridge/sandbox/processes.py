"""Start the stack's daemons and stop exactly those, by the process ids this code started.

Why not systemd or a supervisor: tests run many stacks one after another (and CI runs on a bare
machine), each on free loopback ports in its own temporary directory. Each daemon is started in a
new session (its own process group), its output goes to ``<workdir>/logs/<name>.log``, and stopping
it signals that process group: SIGTERM, then SIGKILL after a grace period. Nothing is found by name,
so a developer's own daemons are never touched, and nothing started here is left behind.

Nor after a crash: each daemon is recorded (pid and start time) in the starting process's owner record
and carries its token in ``K8S_BRIDGE_OWNER`` (:mod:`bridge.sandbox.owners`), and the entry is dropped
once the daemon is stopped; when the starting process dies first, the next start of a stack (or
``scripts/dev cleanup``) kills what it left.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bridge.sandbox import owners


class StackError(RuntimeError):
    """A part of the local stack failed to start or to become ready; the message says which and why."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now (the kernel picks it; a race with others is unlikely)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def log_tail(path: Path, *, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log written)"


@dataclass
class ManagedProcess:
    """One daemon this stack started."""

    name: str
    argv: Sequence[str]
    log_path: Path
    popen: subprocess.Popen[bytes]
    record: owners.OwnerRecord | None = None
    entry: str | None = None
    """Its entry in ``record`` (the owner record of the process that started it), dropped once stopped."""

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def failure(self, what: str) -> StackError:
        status = "running" if self.alive() else f"exited with code {self.popen.returncode}"
        return StackError(
            f"{self.name} {what} ({status}); last lines of {self.log_path}:\n{log_tail(self.log_path)}"
        )


def wait_until(
    predicate: Callable[[], bool],
    *,
    timeout: float,
    what: str,
    process: ManagedProcess | None = None,
    interval: float = 0.1,
) -> None:
    """Poll ``predicate`` until it holds; fail fast if ``process`` dies, with its log in the error."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return
        if process is not None and not process.alive():
            raise process.failure(f"died before {what}")
        if time.monotonic() > deadline:
            if process is not None:
                raise process.failure(f"not ready after {timeout:.0f}s waiting for {what}")
            raise StackError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def port_open(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
        return True
    return False


@dataclass
class ProcessGroup:
    """Owns the daemons of one stack; stops them in reverse start order.

    ``mark_environment=False`` leaves the owner's token out of the daemons' environment (the process
    runner's containers get exactly their pod's environment); they are still recorded.
    """

    workdir: Path
    processes: list[ManagedProcess] = field(default_factory=list)
    mark_environment: bool = True

    def __post_init__(self) -> None:
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        inherit_env: bool = True,
    ) -> ManagedProcess:
        """Start ``argv`` (never through a shell) in its own session, logging to ``logs/<name>.log``."""
        log_path = self.workdir / "logs" / f"{name}.log"
        record = owners.current()
        environment = {**(os.environ if inherit_env else {}), **(env or {})}
        if self.mark_environment:
            environment[owners.OWNER_ENV] = record.token
        else:
            environment.pop(owners.OWNER_ENV, None)
        with log_path.open("ab") as log:
            popen = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=environment,
                cwd=cwd or self.workdir,
                start_new_session=True,
            )
        try:
            entry = record.add_process(popen.pid)  # before any wait: the pid is still this child's
        except BaseException:
            popen.kill()
            popen.wait()
            raise
        process = ManagedProcess(
            name=name, argv=list(argv), log_path=log_path, popen=popen, record=record, entry=entry
        )
        self.processes.append(process)
        return process

    def stop(self, process: ManagedProcess, *, grace: float = 10.0, sig: int = signal.SIGTERM) -> None:
        """Signal the process group this code started, wait ``grace`` seconds, then SIGKILL it."""
        if process.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.popen.wait(timeout=grace)
        # The leader may be gone while children of its group linger: kill the group regardless.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.popen.wait(timeout=5)
        if process.record is not None and process.entry is not None and process.popen.returncode is not None:
            process.record.discard(process.entry)
            process.entry = None
        if process in self.processes:
            self.processes.remove(process)

    def kill(self, process: ManagedProcess) -> None:
        """SIGKILL at once: a crash, as tests of recovery need it."""
        self.stop(process, grace=0.0, sig=signal.SIGKILL)

    def stop_all(self, *, grace: float = 10.0) -> None:
        for process in reversed(list(self.processes)):
            self.stop(process, grace=grace)

    def __enter__(self) -> ProcessGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()


@contextlib.contextmanager
def process_group(workdir: Path) -> Iterator[ProcessGroup]:
    group = ProcessGroup(workdir)
    try:
        yield group
    finally:
        group.stop_all()
