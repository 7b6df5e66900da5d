"""A version-independent view of a Slurm advanced reservation, for the jobs that ask for one.

A job submitted with ``--reservation`` may start only while its reservation is active, and, when
the reservation holds nodes or cores without the FLEX flag, only on those nodes. The bridge's nodes
are created for each job when Kueue admits it, so they are in no such reservation: bridging that
job would hold quota (and slurmd pods) for a job Slurm never starts. What a reservation allows is
read from these few fields (``reconcilers.slurm_waiting.reservation_reason``).
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict

__all__ = ["SlurmReservation"]


class SlurmReservation(BaseModel):
    """One reservation as slurmctld reports it. Immutable."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    start_time: datetime | None = None
    end_time: datetime | None = None
    flags: frozenset[str] = frozenset()
    node_count: int = 0
    core_count: int = 0
    licenses: str = ""
    partition: str = ""

    @property
    def holds_nodes(self) -> bool:
        """Nodes or cores reserved: a job in it may use only those, unless the reservation is FLEX
        (or ANY_NODES, which a reservation of licenses or burst buffers only carries)."""
        return (self.node_count > 0 or self.core_count > 0) and not self.flags & {"FLEX", "ANY_NODES"}
