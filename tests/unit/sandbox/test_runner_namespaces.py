"""Removing a pod's network namespace: off the event loop, never by a reused pid, never losing the name.

Real namespaces need root and ``ip``: see ``tests/integration/test_process_runner.py``. Here the
namespace is a file under a temporary ``NETNS_DIR`` (or a link to a sleeper's ``/proc/<pid>/ns/net``),
the /proc scan is replaced by the pids a test chooses, and the processes are real children.
"""

from __future__ import annotations

import asyncio
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from bridge.sandbox import netns, runner
from bridge.sandbox.netns import NamespaceBusyError, NetworkNamespace, kill_processes, remove_namespace
from bridge.sandbox.runner import ProcessRunner

NAME = "kb-unittest01"


def scan_finding(*answers: list[int]) -> Callable[[str], list[int]]:
    """A /proc scan that finds ``answers[0]``, then ``answers[1]``, ... and the last one from then on."""
    left = list(answers)

    def scan(name: str) -> list[int]:
        assert name == NAME
        return left.pop(0) if len(left) > 1 else left[0]

    return scan


class TestKillingByPid:
    def test_a_pid_reused_by_a_process_outside_the_namespace_is_not_killed(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sleeper: subprocess.Popen[bytes]
    ) -> None:
        # The scan saw ``sleeper.pid`` in the namespace; by the time it is killed that pid is a process
        # elsewhere (here: the sleeper, whose namespace is not the one named).
        monkeypatch.setattr(netns, "NETNS_DIR", tmp_path)
        (tmp_path / NAME).write_text("")
        monkeypatch.setattr(netns, "namespace_pids", scan_finding([sleeper.pid], []))
        assert kill_processes(NAME, timeout=0.0) == []
        assert sleeper.poll() is None

    def test_a_process_still_in_the_namespace_is_killed(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sleeper: subprocess.Popen[bytes]
    ) -> None:
        monkeypatch.setattr(netns, "NETNS_DIR", tmp_path)
        (tmp_path / NAME).symlink_to(f"/proc/{sleeper.pid}/ns/net")  # the namespace is the sleeper's
        monkeypatch.setattr(netns, "namespace_pids", scan_finding([sleeper.pid], []))
        assert kill_processes(NAME, timeout=0.0) == [sleeper.pid]
        assert sleeper.wait() == -9


class TestRemovingANamespace:
    def test_the_name_is_kept_while_processes_remain(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sleeper: subprocess.Popen[bytes]
    ) -> None:
        # A process that outlives the kill timeout (here: never killed, not being in the namespace by
        # the time it is signalled, yet always found by the scan).
        monkeypatch.setattr(netns, "NETNS_DIR", tmp_path)
        (tmp_path / NAME).write_text("")
        monkeypatch.setattr(netns, "namespace_pids", scan_finding([sleeper.pid]))
        commands: list[tuple[str, ...]] = []
        monkeypatch.setattr(netns, "_ip", lambda *args, check=True: commands.append(args))
        with pytest.raises(NamespaceBusyError, match=NAME) as raised:
            remove_namespace(NAME, timeout=0.0)
        assert raised.value.pids == [sleeper.pid]
        assert commands == [], "neither the namespace nor its veth is deleted"

    def test_an_emptied_namespace_is_deleted(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(netns, "NETNS_DIR", tmp_path)
        monkeypatch.setattr(netns, "namespace_pids", scan_finding([]))
        commands: list[tuple[str, ...]] = []
        monkeypatch.setattr(netns, "_ip", lambda *args, check=True: commands.append(args))
        assert remove_namespace(NAME, timeout=0.0) == []
        assert commands == [("link", "del", "kbhunittest01"), ("netns", "del", NAME)]


class _FakeRemoval:
    """Stands in for ``remove_namespace``: records where it runs; busy for the first ``busy`` calls."""

    def __init__(self, busy: int = 0) -> None:
        self.busy = busy
        self.calls: list[tuple[str, threading.Thread, bool]] = []

    def __call__(self, name: str) -> list[int]:
        try:
            asyncio.get_running_loop()
            on_loop = True
        except RuntimeError:
            on_loop = False
        self.calls.append((name, threading.current_thread(), on_loop))
        if self.busy:
            self.busy -= 1
            raise NamespaceBusyError(name, [4242])
        return []


def make_runner(tmp_path: Path) -> ProcessRunner:
    return ProcessRunner(
        kubeconfig=tmp_path / "kubeconfig",
        node_names=["runner-0"],
        workdir=tmp_path / "work",
        node_lock_dir=tmp_path / "locks",
    )


def namespace(name: str = NAME) -> NetworkNamespace:
    return NetworkNamespace(name=name, address="10.213.0.2", gateway="10.213.0.1", host_interface="kbhx")


class TestRunnerDeletesNamespacesInAThread:
    async def test_a_pod_namespace_is_deleted_off_the_event_loop(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        removal = _FakeRemoval()
        monkeypatch.setattr(runner, "remove_namespace", removal)
        process_runner = make_runner(tmp_path)
        process_runner._namespaces[NAME] = namespace()
        await process_runner.delete_namespace(namespace())
        [(name, thread, on_loop)] = removal.calls
        assert name == NAME
        assert thread is not threading.main_thread()
        assert not on_loop
        assert NAME not in process_runner._namespaces

    async def test_stop_deletes_the_namespaces_left_off_the_event_loop(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        removal = _FakeRemoval()
        monkeypatch.setattr(runner, "remove_namespace", removal)
        process_runner = make_runner(tmp_path)
        for name in (NAME, "kb-unittest02"):
            process_runner._namespaces[name] = namespace(name)
        await process_runner._stop_everything(grace=0.0)
        assert sorted(name for name, _, _ in removal.calls) == [NAME, "kb-unittest02"]
        assert not any(on_loop for _, _, on_loop in removal.calls)
        assert all(thread is not threading.main_thread() for _, thread, _ in removal.calls)
        assert process_runner._namespaces == {}

    async def test_a_namespace_still_busy_is_kept_for_stop_to_retry(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        removal = _FakeRemoval(busy=1)
        monkeypatch.setattr(runner, "remove_namespace", removal)
        process_runner = make_runner(tmp_path)
        process_runner._namespaces[NAME] = namespace()
        await process_runner.delete_namespace(namespace())  # logged, not raised
        assert NAME in process_runner._namespaces
        await process_runner._stop_everything(grace=0.0)
        assert [name for name, _, _ in removal.calls] == [NAME, NAME]
        assert process_runner._namespaces == {}
