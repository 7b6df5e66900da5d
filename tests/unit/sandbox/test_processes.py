"""Daemons are stopped by the process ids this code started, children included."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

from bridge.sandbox.processes import ProcessGroup, StackError, free_port, wait_until


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); read its state.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def test_stop_all_kills_the_daemon_and_its_children(tmp_path: Path) -> None:
    child_pid_file = tmp_path / "child.pid"
    script = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(child_pid_file)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(600)\n"
    )
    with ProcessGroup(tmp_path) as group:
        daemon = group.start("sleeper", [sys.executable, "-c", script])
        wait_until(child_pid_file.exists, timeout=10, what="child pid file", process=daemon)
        child_pid = int(child_pid_file.read_text())
        assert _pid_alive(child_pid)
    assert not daemon.alive()
    wait_until(lambda: not _pid_alive(child_pid), timeout=5, what="child gone")


def test_a_daemon_that_dies_fails_fast_with_its_log(tmp_path: Path) -> None:
    with ProcessGroup(tmp_path) as group:
        daemon = group.start("broken", [sys.executable, "-c", "print('bad flag --x'); raise SystemExit(3)"])
        with pytest.raises(StackError, match=r"(?s)broken died before readiness.*code 3.*bad flag --x"):
            wait_until(lambda: False, timeout=30, what="readiness", process=daemon)


def test_free_port_is_bindable() -> None:
    port = free_port()
    with socket.socket() as server:
        server.bind(("127.0.0.1", port))
