"""The Ray bridge's RBAC rules: the shell's, and what its informers, reconciler and Job API calls use.

Read from :mod:`bridge.ray.program` (informers), :mod:`reconcilers.ray` (JobSet create, annotate,
delete; the RayJob finalizer removed by a JSON patch) and :mod:`bridge.ray.dashboard` (Ray's Job API
through the API server's service proxy: GET is ``get``, POST is ``create`` on ``services/proxy``).
The webhook needs no permission: the API server calls it. See :mod:`bridge.program.permissions`.
"""

from __future__ import annotations

from bridge.program.permissions import SHELL_RULES, Rule

__all__ = ["RULES"]

RULES: tuple[Rule, ...] = (
    *SHELL_RULES,
    Rule(
        group="ray.io", resource="rayjobs", verbs=frozenset({"list", "watch", "patch"}),
        why="every RayJob (an ungated one is reported too); the bridge's finalizer removed (JSON patch)",
    ),
    Rule(
        group="ray.io", resource="rayclusters", verbs=frozenset({"list", "watch"}),
        why="the shared clusters the WorkloadMixing selects (the webhook reads the same cache)",
    ),
    Rule(
        group="jobset.x-k8s.io", resource="jobsets",
        verbs=frozenset({"list", "watch", "create", "patch", "delete"}),
        why="the worker JobSets: informer; created suspended; annotated with the Ray job id; deleted",
    ),
    Rule(
        group="kueue.x-k8s.io", resource="workloads", verbs=frozenset({"list", "watch"}),
        why="the worker JobSets' Workloads, by the job-uid label",
    ),
    Rule(
        group="", resource="services/proxy", verbs=frozenset({"get", "create"}),
        why="Ray's Job API on each shared head, through the service proxy: job status (GET), the cancel "
        "of a pending job (POST)",
    ),
)  # fmt: skip
