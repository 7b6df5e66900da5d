"""The Slurm bridge's RBAC rules: the shell's, and what its informers and reconciler call.

Read from :mod:`bridge.slurm.program` (informers), :mod:`reconcilers.slurm` (JobSet create, get,
finalizer patches, delete), :mod:`bridge.slurm.connection` (the JWT read) and the mixing
controller's watch of the JWT Secret. See :mod:`bridge.program.permissions` for why a table.
"""

from __future__ import annotations

from bridge.program.permissions import SHELL_RULES, Rule, Scope

__all__ = ["RULES"]

RULES: tuple[Rule, ...] = (
    *SHELL_RULES,
    Rule(
        group="jobset.x-k8s.io", resource="jobsets",
        verbs=frozenset({"list", "watch", "create", "get", "patch", "delete"}),
        why="the slurmd JobSets: informer; created suspended; read again before the finalizer is removed; "
        "finalizer added and removed (merge patch); deleted when the job ends",
    ),
    Rule(
        group="kueue.x-k8s.io", resource="workloads", verbs=frozenset({"list", "watch"}),
        why="the JobSets' Workloads (admission, eviction), by the job-uid label",
    ),
    Rule(
        group="", resource="pods", verbs=frozenset({"list", "watch", "delete"}),
        why="the slurmd pods (a node registration is due once one runs); those of a JobSet deleted in "
        "the foreground whose Jobs are gone deleted, as the garbage collector would, when it lags",
    ),
    Rule(
        group="batch", resource="jobs", verbs=frozenset({"list", "watch", "delete"}),
        why="the JobSets' Jobs (completed indexes and failed counts outlive their pods); those of a JobSet "
        "deleted in the foreground deleted in the background, so that their pods go at once",
    ),
    Rule(
        group="visibility.kueue.x-k8s.io", resource="localqueues/pendingworkloads", verbs=frozenset({"get"}),
        why="where a waiting job stands in its queue, for its Slurm comment (Kueue's visibility API)",
    ),
    Rule(
        group="", resource="secrets", verbs=frozenset({"get", "list", "watch"}),
        why="the slurmrestd JWT: the mixing controller watches the one Secret by name; the bridge GETs "
        "its token (cached 15 s)",
        scope=Scope.SECRET, named=True,
    ),
)  # fmt: skip
