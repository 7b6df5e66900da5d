"""Every sandbox unit test keeps its records (owner records, namespace claims) in a directory of its own.

Why: the records of the stack live in ``/run/k8s-bridge`` as root (:func:`bridge.sandbox.owners.run_dir`),
where a live stack of another run keeps its own; a unit test must neither see nor leave anything there.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.sandbox.owners import RUN_DIR_ENV


@pytest.fixture(autouse=True)
def private_run_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path_factory.mktemp("run")
    monkeypatch.setenv(RUN_DIR_ENV, str(path))
    return path


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A real child process (``sleep 600``), killed and reaped after the test."""
    process = subprocess.Popen(["sleep", "600"])
    try:
        yield process
    finally:
        process.kill()
        process.wait()
