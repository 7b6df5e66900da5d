"""A version-independent view of a Slurm node (for the bridge: its dynamic slurmd pods).

The reconciler pins a job only when all N nodes registered idle with the job's feature, and
cleans up by draining and deleting them; this view says exactly that, whatever REST version the
node came from (v0.0.38: lower-case base state + ``state_flags``; v0.0.40+: one list of flags).
"""

from __future__ import annotations

import enum

from pydantic import BaseModel, ConfigDict

__all__ = ["NodeState", "SlurmNode"]


class NodeState(enum.StrEnum):
    """The base state of a node; DRAIN, DYNAMIC_NORM, NOT_RESPONDING ... are in ``state_flags``."""

    IDLE = "IDLE"
    ALLOCATED = "ALLOCATED"
    MIXED = "MIXED"
    DOWN = "DOWN"
    ERROR = "ERROR"
    FUTURE = "FUTURE"
    UNKNOWN = "UNKNOWN"


UNUSABLE_FLAGS = frozenset(
    {
        "DRAIN",
        "NOT_RESPONDING",
        "INVALID_REG",
        "FAIL",
        "MAINTENANCE",
        "POWERED_DOWN",
        "POWERING_DOWN",
        "REBOOT_ISSUED",
    }
)


class SlurmNode(BaseModel):
    """A Slurm node, whatever REST version it came from. Immutable; memory in MB."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    state: NodeState = NodeState.UNKNOWN
    state_flags: frozenset[str] = frozenset()
    features: tuple[str, ...] = ()
    active_features: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    cpus: int | None = None
    alloc_cpus: int | None = None
    real_memory_mb: int | None = None
    alloc_memory_mb: int | None = None
    gres: str = ""
    reason: str = ""
    comment: str = ""
    address: str = ""
    hostname: str = ""
    rest_version: str = ""

    @property
    def is_dynamic(self) -> bool:
        return "DYNAMIC_NORM" in self.state_flags or "DYNAMIC_FUTURE" in self.state_flags

    @property
    def is_drained_or_draining(self) -> bool:
        return "DRAIN" in self.state_flags

    @property
    def is_idle_and_usable(self) -> bool:
        """Registered, idle, and nothing (drain, not responding, bad registration) keeps jobs off."""
        return self.state is NodeState.IDLE and not (self.state_flags & UNUSABLE_FLAGS)

    def has_feature(self, feature: str) -> bool:
        return feature in self.active_features or feature in self.features
