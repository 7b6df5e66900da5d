"""When the node source polls fast: while an admitted job waits for its nodes and one of its pods runs.

A running slurmd registers within about a second, and the node poll that sees a job's last node is
what its release waits for. Polling fast all the time would cost slurmctld a request every 0.2 s for
nothing; polling slowly would add up to a second to every job's start. So the node source polls fast
only while :func:`registration_due` holds, reads just the nodes :func:`due_nodes` names (their pod
runs, the node is not seen idle yet) instead of every node, and a pod that starts running (or becomes
ready) for a job waiting for its nodes triggers a poll at once (:class:`NodePollOnPodStart`). Why
this signal and not another: docs/adr/0007-release-signal.md.

A slurmd registers some time after its pod runs (the process starts, fetches its configuration,
registers: 0.3 to 0.5 s on the local stack), and every read of its node before that asks for
nothing: on 22.05 an HTTP 500 that also closes the connection, seven a job at the due interval.
:class:`RegistrationLead` learns that delay from the registrations it sees, and a node is due only
once its pod has run for a share of the shortest delay seen lately.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Mapping

from bridge.runtime.cache import Store
from bridge.runtime.handlers import Object
from bridge.slurm.source import node_of
from reconcilers.slurm import INDEX_JOB, Phase, PodsView, pod_job_keys, pod_node_name

__all__ = ["NodePollOnPodStart", "RegistrationLead", "RegistrationSeen", "due_nodes", "registration_due"]


class RegistrationLead:
    """How long after its slurmd pod is seen running a node is worth reading: ``share`` of the
    shortest of the last ``samples`` delays from a pod seen running to its node seen registered, 0
    until ``least`` delays are known, at most ``most`` seconds.

    The first read of a node then comes a little before the earliest registration seen lately, and
    the due reads after it at the due interval as before. A registration sooner than the lead is
    seen at the first read (or the next whole list): its delay, shorter than the last shortest,
    shortens the lead for the next nodes. Bounded: one start time per node not yet seen registered
    (forgotten when its pod goes), and ``samples`` delays."""

    def __init__(
        self,
        *,
        share: float = 0.8,
        samples: int = 32,
        least: int = 4,
        most: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._share = share
        self._least = least
        self._most = most
        self._clock = clock
        self._started: dict[str, float] = {}
        self._delays: deque[float] = deque(maxlen=samples)

    def lead(self) -> float:
        """Seconds from a pod seen running to its node's first read."""
        if len(self._delays) < self._least:
            return 0.0
        return min(self._most, self._share * min(self._delays))

    def started(self, node: str) -> None:
        """``node``'s slurmd pod is seen running (the first time counts)."""
        self._started.setdefault(node, self._clock())

    def registered(self, node: str) -> None:
        """``node`` is seen registered, idle: one more delay, if its pod's start was seen."""
        started = self._started.pop(node, None)
        if started is not None:
            self._delays.append(self._clock() - started)

    def forget(self, node: str) -> None:
        """``node``'s pod is gone before its node registered: no delay to learn from it."""
        self._started.pop(node, None)

    def remaining(self, node: str) -> float:
        """Seconds until ``node``'s pod has run for the lead; 0 when it has, or its start was not seen."""
        started = self._started.get(node)
        return 0.0 if started is None else max(0.0, started + self.lead() - self._clock())

    def ripe(self, node: str) -> bool:
        """Has ``node``'s pod run for the lead (or was its start not seen: read it)?"""
        return self.remaining(node) <= 0.001  # a timer may fire that early


class RegistrationSeen:
    """Node source handler: each bridge node seen registered, idle and usable, tells ``lead``."""

    def __init__(self, lead: RegistrationLead) -> None:
        self._lead = lead

    def _seen(self, obj: Object) -> None:
        node = node_of(obj)
        if node.is_idle_and_usable:
            self._lead.registered(node.name)

    def on_add(self, obj: Object, *, is_initial_list: bool) -> None:
        self._seen(obj)

    def on_update(self, old: Object, new: Object) -> None:
        self._seen(new)

    def on_delete(self, obj: Object) -> None:
        self._lead.forget(node_of(obj).name)


def _always(node: str) -> bool:
    return True


def registration_due(
    phases: Mapping[str, Phase], pods: Store, *, ripe: Callable[[str], bool] = _always
) -> bool:
    """Is a node registration due: an admitted job waits for its nodes and one of its pods runs
    (for the lead: ``ripe`` of its node)?

    ``phases`` are the reconciler's (``<cluster>/<job id>`` -> phase as last reconciled), ``pods`` the
    pod informer's store indexed by job. A running slurmd registers within about a second, and the
    node poll that sees its job's last node is what the release waits for, so the node source polls
    fast (``--node-poll-fast-interval``) while this holds and slowly otherwise: no faster polling
    while pods are still being scheduled or pulled, nor for a job whose nodes are all up."""
    for key, phase in list(phases.items()):
        if phase is Phase.ADMITTED and any(ripe(name) for name in _running_nodes(pods, key)):
            return True
    return False


def _running_nodes(pods: Store, key: str) -> frozenset[str]:
    """The node names of the job's active slurmd pods whose phase is Running."""
    running = [p for p in pods.by_index(INDEX_JOB, key) if (p.get("status") or {}).get("phase") == "Running"]
    return PodsView.of(running).active_nodes


def due_nodes(
    phases: Mapping[str, Phase], pods: Store, nodes: Store, *, ripe: Callable[[str], bool] = _always
) -> list[str]:
    """The nodes whose registration is due: of jobs admitted and waiting for their nodes, each node
    whose slurmd pod runs (active, phase Running; for the lead: ``ripe``) and that ``nodes`` (the
    node source's store, keyed by name) does not show registered idle and usable. What the node
    source reads alone, at a short interval, instead of listing every node."""
    due: list[str] = []
    for key, phase in list(phases.items()):
        if phase is not Phase.ADMITTED:
            continue
        for name in sorted(_running_nodes(pods, key)):
            stored = nodes.get(name)
            if (stored is None or not node_of(stored).is_idle_and_usable) and ripe(name):
                due.append(name)
    return due


def _pod_signals(pod: Object) -> frozenset[str]:
    """Which of "Running" (phase) and "Ready" (condition) hold for a pod."""
    status = pod.get("status") or {}
    signals = {"Running"} if status.get("phase") == "Running" else set()
    if any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ()):
        signals.add("Ready")
    return frozenset(signals)


Later = Callable[[float, Callable[[], None]], object]
"""Run a callback after so many seconds (the event loop's ``call_later``)."""


def _call_later(delay: float, callback: Callable[[], None]) -> object:
    return asyncio.get_running_loop().call_later(delay, callback)


class NodePollOnPodStart:
    """Pod informer handler: poll the nodes when a slurmd pod of an admitted job starts running (once
    its node is worth reading: after the ``lead``, which it tells when the pod started) or becomes
    ready (a readiness probe on slurmd's registration makes Ready the registration itself: at once).

    Only for jobs ``waiting(key)`` says wait for their nodes (phase ``admitted``). Triggers coalesce
    in the node source: one poll in flight plus at most one right after it, however many pods start.
    A pod that goes is forgotten by the lead.
    """

    def __init__(
        self,
        trigger: Callable[[], None],
        waiting: Callable[[str], bool],
        *,
        lead: RegistrationLead | None = None,
        later: Later = _call_later,
    ) -> None:
        self._trigger = trigger
        self._waiting = waiting
        self._lead = lead
        self._later = later

    def _maybe(self, pod: Object, before: frozenset[str]) -> None:
        gained = _pod_signals(pod) - before
        if not gained or not any(self._waiting(key) for key in pod_job_keys(pod)):
            return
        lead = self._lead
        if lead is None or "Ready" in gained:
            self._trigger()
            return
        name = pod_node_name(pod)
        if name is None:
            self._trigger()
            return
        lead.started(name)
        self._when_ripe(lead, name)

    def _when_ripe(self, lead: RegistrationLead, name: str) -> None:
        """Trigger a poll once ``name`` is ripe: now, or when the lead says (again then, if the lead
        grew meanwhile)."""
        if lead.ripe(name):
            self._trigger()
        else:
            self._later(lead.remaining(name), lambda: self._when_ripe(lead, name))

    def on_add(self, obj: Object, *, is_initial_list: bool) -> None:
        if not is_initial_list:
            self._maybe(obj, frozenset())

    def on_update(self, old: Object, new: Object) -> None:
        self._maybe(new, _pod_signals(old))

    def on_delete(self, obj: Object) -> None:
        if self._lead is not None and (name := pod_node_name(obj)) is not None:
            self._lead.forget(name)
