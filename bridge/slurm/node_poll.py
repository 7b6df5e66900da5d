"""When the node source polls fast: while an admitted job waits for its nodes and one of its pods runs.

A running slurmd registers within about a second, and the node poll that sees a job's last node is
what its release waits for. Polling fast all the time would cost slurmctld a request every 0.2 s for
nothing; polling slowly would add up to a second to every job's start. So the node source polls fast
only while :func:`registration_due` holds, reads just the nodes :func:`due_nodes` names (their pod
runs, the node is not seen idle yet) instead of every node, and a pod that starts running (or becomes
ready) for a job waiting for its nodes triggers a poll at once (:class:`NodePollOnPodStart`). Why
this signal and not another: docs/adr/0007-release-signal.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from bridge.runtime.cache import Store
from bridge.runtime.handlers import Object
from bridge.slurm.source import node_of
from reconcilers.slurm import INDEX_JOB, Phase, PodsView, pod_job_keys

__all__ = ["NodePollOnPodStart", "due_nodes", "registration_due"]


def registration_due(phases: Mapping[str, Phase], pods: Store) -> bool:
    """Is a node registration due: an admitted job waits for its nodes and one of its pods runs?

    ``phases`` are the reconciler's (``<cluster>/<job id>`` -> phase as last reconciled), ``pods`` the
    pod informer's store indexed by job. A running slurmd registers within about a second, and the
    node poll that sees its job's last node is what the release waits for, so the node source polls
    fast (``--node-poll-fast-interval``) while this holds and slowly otherwise: no faster polling
    while pods are still being scheduled or pulled, nor for a job whose nodes are all up."""
    for key, phase in list(phases.items()):
        if phase is Phase.ADMITTED and PodsView.of(pods.by_index(INDEX_JOB, key)).running:
            return True
    return False


def due_nodes(phases: Mapping[str, Phase], pods: Store, nodes: Store) -> list[str]:
    """The nodes whose registration is due: of jobs admitted and waiting for their nodes, each node
    whose slurmd pod runs (active, phase Running) and that ``nodes`` (the node source's store, keyed
    by name) does not show registered idle and usable. What the node source reads alone, at a short
    interval, instead of listing every node."""
    due: list[str] = []
    for key, phase in list(phases.items()):
        if phase is not Phase.ADMITTED:
            continue
        pods_of_job = pods.by_index(INDEX_JOB, key)
        running = [p for p in pods_of_job if (p.get("status") or {}).get("phase") == "Running"]
        for name in sorted(PodsView.of(running).active_nodes):
            stored = nodes.get(name)
            if stored is None or not node_of(stored).is_idle_and_usable:
                due.append(name)
    return due


def _pod_signals(pod: Object) -> frozenset[str]:
    """Which of "Running" (phase) and "Ready" (condition) hold for a pod."""
    status = pod.get("status") or {}
    signals = {"Running"} if status.get("phase") == "Running" else set()
    if any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ()):
        signals.add("Ready")
    return frozenset(signals)


class NodePollOnPodStart:
    """Pod informer handler: poll the nodes now when a slurmd pod of an admitted job starts running
    or becomes ready (a readiness probe on slurmd's registration makes Ready the registration itself).

    Only for jobs ``waiting(key)`` says wait for their nodes (phase ``admitted``). Triggers coalesce
    in the node source: one poll in flight plus at most one right after it, however many pods start.
    """

    def __init__(self, trigger: Callable[[], None], waiting: Callable[[str], bool]) -> None:
        self._trigger = trigger
        self._waiting = waiting

    def _maybe(self, pod: Object, before: frozenset[str]) -> None:
        if _pod_signals(pod) - before and any(self._waiting(key) for key in pod_job_keys(pod)):
            self._trigger()

    def on_add(self, obj: Object, *, is_initial_list: bool) -> None:
        if not is_initial_list:
            self._maybe(obj, frozenset())

    def on_update(self, old: Object, new: Object) -> None:
        self._maybe(new, _pod_signals(old))

    def on_delete(self, obj: Object) -> None:
        pass
