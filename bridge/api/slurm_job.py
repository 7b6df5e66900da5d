"""A version-independent view of a Slurm job, as the bridge needs it.

slurmrestd describes a job differently in every REST version (v0.0.38 plain numbers and one state
string; v0.0.40+ ``{set, infinite, number}`` objects, a list of state flags and a ``hold``
boolean). The adapters in ``bridge.slurmrest.versions`` map all of them onto this one model, so the
translator and the reconciler never see a REST shape. Units are fixed here: memory in MB, time
limits in minutes (``time_limit_seconds`` for Kueue), instants as aware UTC datetimes, ``None`` for
"not set" (and for memory: "the whole node").
"""

from __future__ import annotations

import enum
from collections.abc import Collection
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Gres", "JobState", "SlurmJob"]


class JobState(enum.StrEnum):
    """The base state of a job. Modifiers (COMPLETING, REQUEUE_HOLD, ...) are in ``state_flags``."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    UNKNOWN = "UNKNOWN"


FINISHED_STATES = frozenset(
    {
        JobState.COMPLETED,
        JobState.CANCELLED,
        JobState.FAILED,
        JobState.TIMEOUT,
        JobState.NODE_FAIL,
        JobState.PREEMPTED,
        JobState.BOOT_FAIL,
        JobState.DEADLINE,
        JobState.OUT_OF_MEMORY,
    }
)
HELD_USER_REASON = "JobHeldUser"
HELD_ADMIN_REASON = "JobHeldAdmin"


class Gres(BaseModel):
    """One generic resource request, e.g. ``gres/gpu:a100:2`` -> name gpu, type a100, count 2."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    type: str | None = None
    count: int = 1

    @classmethod
    def parse_list(cls, text: str) -> tuple[Gres, ...]:
        """Parse a TRES/GRES list as Slurm prints it (``gres:gpu:1``, ``gres/gpu:a100=2``, ...).

        Entries that are not GRES (``cpu=2``, ``license/x=1``) are skipped; a malformed count
        raises ValueError so that the job is refused rather than mis-sized.
        """
        out: list[Gres] = []
        for raw in text.replace(";", ",").split(","):
            entry = raw.strip()
            if not entry:
                continue
            for prefix in ("gres:", "gres/"):
                if entry.startswith(prefix):
                    entry = entry[len(prefix) :]
                    break
            else:
                if not entry.startswith("gpu"):
                    continue
            count_text = "1"
            if "=" in entry:
                entry, count_text = entry.split("=", 1)
                fields = entry.split(":")
            else:
                fields = entry.split(":")
                if len(fields) > 1 and fields[-1].isdigit():
                    count_text = fields.pop()
            if not count_text.isdigit() or not fields[0] or len(fields) > 2:
                raise ValueError(f"cannot parse GRES {raw!r}")
            out.append(
                cls(name=fields[0], type=fields[1] if len(fields) == 2 else None, count=int(count_text))
            )
        return tuple(out)


def _count(gres: tuple[Gres, ...], name: str) -> int | None:
    matching = [g.count for g in gres if g.name == name]
    return sum(matching) if matching else None


class SlurmJob(BaseModel):
    """A Slurm job, whatever REST version it came from. Immutable."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # identity
    job_id: int
    name: str = ""
    cluster: str = ""
    user_name: str = ""
    user_id: int | None = None
    partition: str = ""
    account: str = ""
    qos: str = ""
    rest_version: str = Field(default="", description="the REST version the job was read with")

    # state
    state: JobState = JobState.UNKNOWN
    state_flags: frozenset[str] = frozenset()
    state_reason: str = ""
    state_description: str = ""
    hold: bool = False
    priority: int | None = None
    comment: str = ""
    admin_comment: str = Field(default="", description="settable by administrators (and SlurmUser) only")
    restart_count: int = 0
    dependency: str = Field(
        default="", description="the dependencies not yet satisfied, as Slurm shows them (fulfilled ones go)"
    )
    reservation: str = ""

    # size
    node_count: int | None = Field(default=None, description="minimum node count")
    max_nodes: int | None = None
    tasks: int | None = None
    tasks_per_node: int | None = None
    cpus: int | None = Field(default=None, description="total CPUs requested")
    cpus_per_task: int | None = None
    min_cpus_per_node: int | None = None
    cpus_per_gpu: int | None = None
    memory_per_node_mb: int | None = None
    memory_per_cpu_mb: int | None = None
    memory_per_gpu_mb: int | None = None
    gres_per_node: tuple[Gres, ...] = ()
    gres_per_job: tuple[Gres, ...] = ()
    gres_per_task: tuple[Gres, ...] = ()
    gres_per_socket: tuple[Gres, ...] = ()
    tres_requested: str = ""

    # placement
    features: str = Field(default="", description="the constraint expression (-C), as Slurm shows it")
    prefer: str = ""
    exclusive: bool = False
    exclusive_user: bool = False
    contiguous: bool = False
    time_limit_minutes: int | None = Field(default=None, description="None: no limit")
    nodes: tuple[str, ...] = Field(default=(), description="allocated nodes, expanded")
    required_nodes: tuple[str, ...] = ()
    excluded_nodes: tuple[str, ...] = ()
    switches: int | None = None

    # heterogeneous jobs and arrays
    het_job_id: int | None = None
    het_job_offset: int | None = None
    het_job_id_set: str = ""
    array_job_id: int | None = None
    array_task_id: int | None = None
    array_task_string: str = ""
    array_max_tasks: int | None = None

    # times
    submit_time: datetime | None = None
    """For a requeued job: the moment of the requeue (Slurm resets it)."""
    eligible_time: datetime | None = Field(
        default=None, description="the earliest start (--begin), or the requeue delay Slurm sets"
    )
    start_time: datetime | None = None
    end_time: datetime | None = None

    # derived views -------------------------------------------------------------------------

    @property
    def partitions(self) -> tuple[str, ...]:
        """A pending job may name several partitions (``bridge,debug``)."""
        return tuple(p for p in self.partition.split(",") if p)

    @property
    def held_by(self) -> Literal["user", "admin"] | None:
        """Who holds the job: the user (``sbatch --hold``) or an admin (REST hold as SlurmUser)."""
        if not self.hold:
            return None
        return "user" if self.state_reason == HELD_USER_REASON else "admin"

    @property
    def is_pending(self) -> bool:
        return self.state is JobState.PENDING

    @property
    def is_running(self) -> bool:
        return self.state in (JobState.RUNNING, JobState.SUSPENDED)

    @property
    def is_completing(self) -> bool:
        return "COMPLETING" in self.state_flags

    @property
    def is_finished(self) -> bool:
        """Ended (possibly still COMPLETING on its nodes)."""
        return self.state in FINISHED_STATES

    @property
    def is_het(self) -> bool:
        return bool(self.het_job_id) or bool(self.het_job_id_set)

    @property
    def is_array(self) -> bool:
        return bool(self.array_job_id) or bool(self.array_task_string)

    @property
    def time_limit_seconds(self) -> int | None:
        return None if self.time_limit_minutes is None else self.time_limit_minutes * 60

    @property
    def whole_node_memory(self) -> bool:
        """No memory size at all: the job gets (and the pod must offer) the whole node."""
        return (
            self.memory_per_node_mb is None
            and self.memory_per_cpu_mb is None
            and self.memory_per_gpu_mb is None
        )

    @property
    def gpus_per_node(self) -> int | None:
        return _count(self.gres_per_node, "gpu")

    @property
    def gpus_per_job(self) -> int | None:
        return _count(self.gres_per_job, "gpu")

    @property
    def gpus_per_task(self) -> int | None:
        return _count(self.gres_per_task, "gpu")

    @property
    def cpus_per_node(self) -> int | None:
        """CPUs each node must offer: the largest of what the request implies per node.

        v0.0.38 has no ``cpus_per_task``, so ``minimum_cpus_per_node`` and ``cpus / node_count``
        (rounded up, over the minimum node count) are used as well.
        """
        candidates = [self.min_cpus_per_node or 0]
        if self.tasks_per_node and self.cpus_per_task:
            candidates.append(self.tasks_per_node * self.cpus_per_task)
        if self.cpus and self.node_count:
            candidates.append(-(-self.cpus // self.node_count))
        best = max(candidates)
        return best or None

    def waits_for_bridge(self, partitions: Collection[str]) -> bool:
        """Held and pending in one of ``partitions``: a job the bridge should serve."""
        return self.is_pending and self.hold and any(p in partitions for p in self.partitions)

    def is_pinned_to(self, nodes: Collection[str], feature: str) -> bool:
        """Already pinned to exactly ``nodes`` with ``feature`` in its constraints."""
        return set(self.required_nodes) == set(nodes) and feature in _feature_words(self.features)


def _feature_words(expr: str) -> set[str]:
    for sep in "&|,[]()*!":
        expr = expr.replace(sep, " ")
    return {w.split(":")[0] for w in expr.split()}
