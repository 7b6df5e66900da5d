"""The slurmd container's entry script, run by a real ``/bin/sh`` around a stand-in for slurmd.

The stand-in behaves as slurmd does on SIGTERM (exits 0), so the first test fails on a pod command
that runs slurmd directly: that exit 0 is what made a lost node's index count as Succeeded.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from translators.slurm import SLURMD_ENTRY, SLURMD_ENTRY_NAME

#: Like slurmd -D: runs until SIGTERM, then exits 0; writes its argv and a "ready" mark first.
FAKE_SLURMD = """
import json, signal, sys, time
from pathlib import Path
out = Path(sys.argv[1])
def stop(signum, frame):
    out.with_suffix(".stopped").write_text("yes")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
out.write_text(json.dumps(sys.argv[2:]))
if sys.argv[2:3] == ["--exit"]:
    sys.exit(int(sys.argv[3]))
while True:
    time.sleep(0.05)
"""


def entry(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
    fake = tmp_path / "slurmd.py"
    fake.write_text(FAKE_SLURMD)
    out = tmp_path / "argv.json"
    argv = ["/bin/sh", "-c", SLURMD_ENTRY, SLURMD_ENTRY_NAME, sys.executable, str(fake), str(out), *args]
    return subprocess.Popen(argv), out


def wait_for(path: Path, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while not path.exists():
        assert process.poll() is None, "the entry script ended before its slurmd started"
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_slurmd_stopped_by_a_signal_is_not_a_success(tmp_path: Path, signum: int) -> None:
    process, out = entry(tmp_path, "-D")
    wait_for(out, process)
    process.send_signal(signum)
    assert process.wait(timeout=30) == 143
    assert out.with_suffix(".stopped").read_text() == "yes"  # slurmd was told, and stopped cleanly


@pytest.mark.parametrize("status", [0, 3])
def test_slurmds_own_exit_status_is_kept(tmp_path: Path, status: int) -> None:
    process, _ = entry(tmp_path, "--exit", str(status))
    assert process.wait(timeout=30) == status


def test_every_argument_reaches_slurmd_as_one_word_uninterpreted(tmp_path: Path) -> None:
    hostile = ["--conf", "RealMemory=1 Feature=a,b", "$(id)", "`id`", "a;b", "'\"", "*", ""]
    process, out = entry(tmp_path, *hostile)
    wait_for(out, process)
    process.terminate()
    process.wait(timeout=30)
    assert out.read_text() == json.dumps(hostile)


def test_the_script_holds_nothing_kubernetes_would_expand() -> None:
    assert "$(" not in SLURMD_ENTRY
    assert "$$" not in SLURMD_ENTRY
