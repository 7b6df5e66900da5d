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
from bridge.slurm.node_poll import (
    NodePollOnPodStart,
    RegistrationLead,
    RegistrationSeen,
    due_nodes,
    registration_due,
)
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


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def learned(clock: Clock, *delays: float) -> RegistrationLead:
    """A lead that has seen a registration ``delay`` seconds after its pod started, for each delay."""
    lead = RegistrationLead(clock=clock)
    for i, delay in enumerate(delays):
        lead.started(f"b9{i}-0")
        clock.now += delay
        lead.registered(f"b9{i}-0")
    return lead


def test_the_lead_is_a_share_of_the_shortest_recent_registration_once_enough_are_seen() -> None:
    clock = Clock()
    assert learned(clock, 0.4, 0.5, 0.6).lead() == 0.0, "too few registrations seen: read at once"
    lead = learned(clock, 0.4, 0.5, 0.6, 0.45)
    assert lead.lead() == pytest.approx(0.8 * 0.4)
    lead.registered("b1-0")  # a node whose pod's start was not seen teaches nothing
    assert lead.lead() == pytest.approx(0.32)
    slow = learned(clock, 9.0, 9.0, 9.0, 9.0)
    assert slow.lead() == 2.0, "capped"


def test_a_node_is_ripe_once_its_pod_has_run_for_the_lead() -> None:
    clock = Clock()
    lead = learned(clock, 0.5, 0.5, 0.5, 0.5)  # lead 0.4 s
    lead.started("b1-0")
    assert not lead.ripe("b1-0")
    clock.now += 0.3
    assert not lead.ripe("b1-0")
    clock.now += 0.1
    assert lead.ripe("b1-0")
    assert lead.ripe("b2-0"), "a node whose pod's start was not seen (a restart) is read at once"
    lead.started("b3-0")
    lead.forget("b3-0")
    assert lead.ripe("b3-0")


def test_a_registration_sooner_than_the_lead_shortens_it() -> None:
    clock = Clock()
    lead = learned(clock, 0.5, 0.5, 0.5, 0.5)
    lead.started("b1-0")
    clock.now += 0.4  # registered at 0.2 s, seen at the first read (the lead)
    lead.registered("b1-0")
    assert lead.lead() == pytest.approx(0.32)


def test_unripe_nodes_are_neither_due_nor_make_a_registration_due() -> None:
    pods = pod_store(pod(1, 0, phase="Running"), pod(1, 1, phase="Running"))
    phases = {"hpc/1": Phase.ADMITTED}
    ripe = {"b1-1"}
    assert due_nodes(phases, pods, node_store(), ripe=ripe.__contains__) == ["b1-1"]
    assert registration_due(phases, pods, ripe=ripe.__contains__)
    ripe.clear()
    assert due_nodes(phases, pods, node_store(), ripe=ripe.__contains__) == []
    assert not registration_due(phases, pods, ripe=ripe.__contains__)


def test_a_starting_pod_triggers_the_node_poll_after_the_lead_and_a_ready_one_at_once() -> None:
    clock = Clock()
    lead = learned(clock, 0.5, 0.5, 0.5, 0.5)
    triggered: list[int] = []
    later: list[float] = []

    def trigger() -> None:
        triggered.append(1)

    def call_later(delay: float, callback: Any) -> None:
        later.append(delay)
        clock.now += delay
        callback()

    handler = NodePollOnPodStart(trigger, lambda key: key == "hpc/1", lead=lead, later=call_later)
    handler.on_update(pod(1), pod(1, phase="Running"))
    assert later == [pytest.approx(0.4)]
    assert len(triggered) == 1
    assert lead.ripe("b1-0"), "the poll came once it was ripe"
    handler.on_update(pod(1, phase="Running"), pod(1, phase="Running", ready=True))
    assert later == [pytest.approx(0.4)], "ready: slurmd registered, poll now"
    assert len(triggered) == 2
    handler.on_delete(pod(1, phase="Running"))
    assert lead.ripe("b1-0"), "a pod that goes is forgotten"


def test_the_node_source_handler_tells_the_lead_each_node_seen_idle() -> None:
    clock = Clock()
    lead = RegistrationLead(clock=clock, least=1)
    seen = RegistrationSeen(lead)
    lead.started("b1-0")
    clock.now += 0.3
    seen.on_add(node_object(SlurmNode(name="b1-0", state=NodeState.DOWN)), is_initial_list=False)
    assert lead.lead() == 0.0, "not registered idle yet"
    clock.now += 0.2
    seen.on_update(
        node_object(SlurmNode(name="b1-0", state=NodeState.DOWN)),
        node_object(SlurmNode(name="b1-0", state=NodeState.IDLE)),
    )
    assert lead.lead() == pytest.approx(0.8 * 0.5)


def test_a_lead_that_grew_meanwhile_delays_the_poll_again() -> None:
    """The fourth registration seen turns the lead from 0 to a share of the shortest: a pod whose
    poll was scheduled under a shorter lead is polled once it is ripe under the new one."""
    clock = Clock()
    lead = learned(clock, 0.5, 0.5, 0.5, 0.5)  # 0.4 s
    triggered: list[float] = []
    pending: list[tuple[float, Any]] = []

    def call_later(delay: float, callback: Any) -> None:
        pending.append((delay, callback))

    handler = NodePollOnPodStart(
        lambda: triggered.append(clock.now), lambda key: True, lead=lead, later=call_later
    )
    others = [f"b8{i}-0" for i in range(32)]
    for name in others:
        lead.started(name)
    clock.now += 1.0
    start = clock.now
    handler.on_update(pod(1), pod(1, phase="Running"))
    ((delay, callback),) = pending
    pending.clear()
    for name in others:  # 32 registrations of 1 s each: the lead becomes 0.8 s
        lead.registered(name)
    clock.now += delay
    callback()
    assert triggered == [], "not ripe under the new lead"
    ((delay, callback),) = pending
    assert delay == pytest.approx(0.4)
    clock.now += delay
    callback()
    assert triggered == [pytest.approx(start + 0.8)]
