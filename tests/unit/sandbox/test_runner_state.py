"""What lets a restarted process runner find what an earlier one left: names, records, the workdir lock.

The reclaiming itself (killing processes, deleting namespaces) needs root and real namespaces: see
``tests/integration/test_process_runner.py``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from bridge.sandbox import runner
from bridge.sandbox.netns import create_namespace, namespace_name, namespace_token
from bridge.sandbox.processes import StackError
from bridge.sandbox.runner import (
    LOCK_FILE,
    NETNS_FILE,
    ProcessRunner,
    _PodEvents,
    lock_node,
    lock_workdir,
    pod_namespaces,
    reclaim,
)


def pod(uid: str, name: str = "worker-0") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "team-a", "uid": uid}, "spec": {"nodeName": "runner-0"}}


class TestNamespaceNames:
    def test_the_same_node_and_pod_give_the_same_name(self) -> None:
        assert namespace_token("runner-0", "uid-1") == namespace_token("runner-0", "uid-1")

    def test_another_pod_or_node_gives_another_name(self) -> None:
        names = {
            namespace_token("runner-0", "uid-1"),
            namespace_token("runner-0", "uid-2"),
            namespace_token("runner-1", "uid-1"),
            namespace_token("runner-0uid-1"),
        }
        assert len(names) == 4

    def test_names_fit_interface_names(self) -> None:
        token = namespace_token("a-node-with-a-rather-long-name", "0f8e5b1c-9d2a-4c3b-8e7f-6a5b4c3d2e1f")
        assert namespace_name(token) == f"kb-{token}"
        assert len(f"kbh{token}") <= 15  # IFNAMSIZ - 1: the veth ends are named after the token
        assert token.isalnum()

    @pytest.mark.parametrize("token", ["", "x" * 13, "a/b", "a b"])
    def test_create_refuses_tokens_that_cannot_name_a_namespace(self, token: str) -> None:
        with pytest.raises(ValueError, match="token"):
            create_namespace(token=token)


class TestRecords:
    def test_pod_namespaces_reads_every_record(self, tmp_path: Path) -> None:
        for uid, name in (("uid-1", "kb-aaa"), ("uid-2", "kb-bbb"), ("uid-3", "")):
            (tmp_path / "pods" / uid).mkdir(parents=True)
            (tmp_path / "pods" / uid / NETNS_FILE).write_text(name + "\n")
        assert pod_namespaces(tmp_path) == {"kb-aaa", "kb-bbb"}

    def test_reclaim_leaves_alone_what_no_longer_exists(self, tmp_path: Path) -> None:
        (tmp_path / "pods" / "uid-1").mkdir(parents=True)
        (tmp_path / "pods" / "uid-1" / NETNS_FILE).write_text("kb-0000000000-never-made\n")
        assert reclaim(tmp_path) == {}

    def test_reclaim_of_an_empty_workdir_does_nothing(self, tmp_path: Path) -> None:
        assert reclaim(tmp_path / "new") == {}


class TestWorkdirLock:
    def test_one_runner_per_workdir(self, tmp_path: Path) -> None:
        held = lock_workdir(tmp_path / "runner")
        try:
            assert (tmp_path / "runner" / LOCK_FILE).read_text() == f"{os.getpid()}\n"
            with pytest.raises(StackError, match=rf"another process runner \(pid {os.getpid()}\)"):
                lock_workdir(tmp_path / "runner")
            other = lock_workdir(tmp_path / "elsewhere")  # another workdir is another runner's
            os.close(other)
        finally:
            os.close(held)
        again = lock_workdir(tmp_path / "runner")  # given up: the next runner takes it
        os.close(again)

    def test_the_lock_is_not_inherited_by_container_processes(self, tmp_path: Path) -> None:
        held = lock_workdir(tmp_path)
        try:
            assert not os.get_inheritable(held)
        finally:
            os.close(held)


class TestNodeLock:
    def test_one_runner_per_node_whatever_its_workdir(self, tmp_path: Path) -> None:
        held = lock_node("runner-0", lock_dir=tmp_path)
        try:
            assert (tmp_path / "runner-runner-0.lock").read_text() == f"{os.getpid()}\n"
            assert not os.get_inheritable(held)
            with pytest.raises(StackError, match=rf"pid {os.getpid()}\) is serving node runner-0"):
                lock_node("runner-0", lock_dir=tmp_path)
            other = lock_node("runner-1", lock_dir=tmp_path)  # another node is another runner's
            os.close(other)
        finally:
            os.close(held)
        again = lock_node("runner-0", lock_dir=tmp_path)  # given up: the next runner takes it
        os.close(again)

    @pytest.mark.parametrize("node", ["", ".", "..", "a/b"])
    def test_names_that_cannot_name_a_lock_file_are_refused(self, tmp_path: Path, node: str) -> None:
        with pytest.raises(ValueError, match="node name"):
            lock_node(node, lock_dir=tmp_path)

    async def test_a_second_runner_of_a_node_refuses_to_start_and_touches_nothing(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # Two runners with different workdirs for one node would each take the other's pod namespaces
        # (named after node and pod uid) for leftovers of their own, and kill their processes.
        monkeypatch.setattr(runner, "check_prerequisites", lambda: None)
        reclaimed: list[Path] = []

        def record(workdir: Path) -> dict[str, list[int]]:
            reclaimed.append(workdir)
            return {}

        monkeypatch.setattr(runner, "reclaim", record)
        first = lock_node("runner-1", lock_dir=tmp_path / "locks")  # the live runner of runner-1
        try:
            second = ProcessRunner(
                kubeconfig=tmp_path / "kubeconfig",
                node_names=["runner-0", "runner-1"],
                workdir=tmp_path / "second",
                node_lock_dir=tmp_path / "locks",
            )
            with pytest.raises(StackError, match="serving node runner-1"):
                await second.start()
            assert reclaimed == []
        finally:
            os.close(first)
        # Every lock it took is given up: its workdir and its other node are free again.
        os.close(lock_workdir(tmp_path / "second"))
        os.close(lock_node("runner-0", lock_dir=tmp_path / "locks"))


class _Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, bool]] = []

    def observe(self, obj: dict[str, Any], *, gone: bool) -> None:
        self.seen.append((obj["metadata"]["uid"], gone))


class TestPodEvents:
    def test_changes_reach_the_runner(self) -> None:
        recorder = _Recorder()
        events = _PodEvents(recorder)  # type: ignore[arg-type]
        events.on_add(pod("uid-1"), is_initial_list=True)
        events.on_update(pod("uid-1"), pod("uid-1"))
        events.on_delete(pod("uid-1"))
        assert recorder.seen == [("uid-1", False), ("uid-1", False), ("uid-1", True)]

    def test_a_pod_replaced_under_the_same_name_ends_the_old_one(self) -> None:
        # A relist keys pods by namespace/name: a pod deleted and created again meanwhile comes as an
        # update from the old uid to the new one.
        recorder = _Recorder()
        _PodEvents(recorder).on_update(pod("uid-old"), pod("uid-new"))  # type: ignore[arg-type]
        assert recorder.seen == [("uid-old", True), ("uid-new", False)]
