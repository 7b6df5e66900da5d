"""bridge.slurm.program's node-poll wiring: when a node registration is due, and the pod trigger.

The node source polls every ``--node-poll-fast-interval`` while :func:`registration_due` holds (an
admitted job waits for its nodes and one of its slurmd pods runs) and polls at once when such a pod
starts running or becomes ready (:class:`NodePollOnPodStart`); the source's own timing is tested in
test_slurm_source.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from bridge.api.slurm_node import NodeState, SlurmNode
from bridge.runtime.cache import Store, meta_namespace_key
from bridge.slurm.node_poll import NodePollOnPodStart, due_nodes, registration_due
from bridge.slurm.program import parse_args
from bridge.slurm.source import node_object
from reconcilers.slurm import INDEX_JOB, Phase, pod_job_keys
from translators.slurm import LABEL_CLUSTER, LABEL_JOB_ID

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


def pod(
    job_id: int, index: int = 0, *, phase: str = "Pending", ready: bool = False, **meta: Any
) -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {
        "metadata": {
            "namespace": "ns",
            "name": f"slurm-hpc-{job_id}-slurmd-0-{index}-abcde",
            "labels": {LABEL_CLUSTER: "hpc", LABEL_JOB_ID: str(job_id), COMPLETION_INDEX: str(index)},
            **meta,
        },
        "status": {"phase": phase, "conditions": conditions},
    }


def pod_store(*pods: dict[str, Any]) -> Store:
    store = Store(key_func=meta_namespace_key, indexers={INDEX_JOB: pod_job_keys})
    for each in pods:
        store.put(each)
    return store


def test_a_registration_is_due_when_an_admitted_job_has_a_running_pod() -> None:
    pods = pod_store(pod(1, 0, phase="Running"), pod(1, 1), pod(2), pod(3, phase="Running"))
    # Job 1 admitted, one of its two slurmd pods runs: its slurmd registers within about a second.
    assert registration_due({"hpc/1": Phase.ADMITTED, "hpc/2": Phase.QUEUED}, pods)
    # Admitted, but no pod runs yet (being scheduled, or pulling its image): no fast polling.
    assert not registration_due({"hpc/2": Phase.ADMITTED}, pods)
    # A running pod of a job past the wait (all nodes up: releasing, running): none either.
    assert not registration_due({"hpc/3": Phase.RELEASING, "hpc/1": Phase.RUNNING}, pods)
    assert not registration_due({}, pods)


def test_a_terminating_pod_does_not_make_a_registration_due() -> None:
    pods = pod_store(pod(1, phase="Running", deletionTimestamp="2026-01-01T00:00:00Z"))
    assert not registration_due({"hpc/1": Phase.ADMITTED}, pods)


def node_store(*nodes: SlurmNode) -> Store:
    store = Store(key_func=meta_namespace_key)
    for node in nodes:
        store.put(node_object(node))
    return store


def test_the_due_nodes_are_those_of_running_pods_of_admitted_jobs_not_seen_idle() -> None:
    pods = pod_store(
        pod(1, 0, phase="Running"), pod(1, 1, phase="Running"), pod(1, 2), pod(2, 0, phase="Running"),
        pod(3, 0, phase="Running"), pod(4, 0, phase="Running", deletionTimestamp="2026-01-01T00:00:00Z"),
    )  # fmt: skip
    nodes = node_store(
        SlurmNode(name="b1-0", state=NodeState.IDLE),  # registered idle: not due any more
        SlurmNode(name="b3-0", state=NodeState.IDLE, state_flags=frozenset({"DRAIN"})),  # not usable
    )
    phases = {
        "hpc/1": Phase.ADMITTED,
        "hpc/2": Phase.RUNNING,
        "hpc/3": Phase.ADMITTED,
        "hpc/4": Phase.ADMITTED,
    }
    # Job 1: b1-1's slurmd runs and is not seen yet; b1-2's pod is still pending (nothing to read).
    # Job 2 is past the wait; job 4's only pod is being deleted.
    assert due_nodes(phases, pods, nodes) == ["b1-1", "b3-0"]
    assert due_nodes({}, pods, nodes) == []


def test_a_slurmd_pod_of_a_waiting_job_that_starts_or_gets_ready_triggers_a_node_poll() -> None:
    triggered: list[int] = []
    waiting = {"hpc/1"}
    handler = NodePollOnPodStart(lambda: triggered.append(1), lambda key: key in waiting)

    handler.on_add(pod(1), is_initial_list=False)  # created, pending: nothing to see yet
    assert triggered == []
    handler.on_update(pod(1), pod(1, phase="Running"))  # slurmd started
    assert len(triggered) == 1
    handler.on_update(pod(1, phase="Running"), pod(1, phase="Running", ready=True))  # probe passed
    assert len(triggered) == 2
    handler.on_update(pod(1, phase="Running", ready=True), pod(1, phase="Running", ready=True))
    assert len(triggered) == 2  # a status heartbeat that changes neither: no poll
    handler.on_update(pod(1, phase="Running", ready=True), pod(1, phase="Running"))
    assert len(triggered) == 2  # losing readiness: no poll
    handler.on_add(pod(1, 1, phase="Running"), is_initial_list=False)
    assert len(triggered) == 3  # first seen already running


def test_pods_of_jobs_not_waiting_for_nodes_or_the_initial_list_trigger_nothing() -> None:
    triggered: list[int] = []
    handler = NodePollOnPodStart(lambda: triggered.append(1), lambda key: key == "hpc/1")
    handler.on_update(pod(2), pod(2, phase="Running"))  # job 2 is not waiting for nodes
    handler.on_add(pod(1, phase="Running"), is_initial_list=True)  # start-up: the first poll comes anyway
    handler.on_delete(pod(1, phase="Running"))
    unlabelled = pod(1, phase="Running")
    unlabelled["metadata"]["labels"] = {}
    handler.on_update(pod(1), unlabelled)
    assert triggered == []


def test_the_fast_node_poll_interval_flag_and_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    _, s, _ = parse_args(["--config", "site"])
    assert (s.node_poll_interval, s.node_poll_fast_interval, s.node_poll_due_interval) == (1.0, 0.2, 0.05)
    _, s, _ = parse_args(["--config", "site", "--node-poll-due-interval", "0"])
    assert s.node_poll_due_interval == 0.0  # off: whole lists only
    _, s, _ = parse_args(["--config", "site", "--node-poll-fast-interval", "0.1"])
    assert s.node_poll_fast_interval == 0.1
    monkeypatch.setenv("K8S_BRIDGE_NODE_POLL_FAST_INTERVAL", "0")
    _, s, _ = parse_args(["--config", "site"])
    assert s.node_poll_fast_interval == 0.0  # off: always --node-poll-interval


def test_a_negative_fast_node_poll_interval_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--config", "site", "--node-poll-fast-interval", "-1"])
    assert "--node-poll-fast-interval" in capsys.readouterr().err


def test_help_documents_the_fast_node_poll_interval(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--node-poll-fast-interval" in text
    assert "K8S_BRIDGE_NODE_POLL_FAST_INTERVAL" in text
    assert "--node-poll-due-interval" in text
    assert "K8S_BRIDGE_NODE_POLL_DUE_INTERVAL" in text
