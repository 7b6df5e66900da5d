"""What the real run saw of each job, and the transitions an observation makes in it.

One :class:`Record` per planned job (and per inference pod), with the first time the observer saw it
submitted, admitted, running, finished and cleaned up (seconds since the run's start). The driver
turns each poll of the stack into a :class:`Seen` per job (pure data) and :func:`observe` moves the
record on; a preemption (admitted again after it was admitted, or a Ray job failed on its preempted
workers) closes the current holding and starts the job over, as the simulator counts it. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from poolsim.workload import JobClass


@dataclass(frozen=True)
class Seen:
    """One job's state in one poll of the stack."""

    admitted: bool = False
    """Holds its quota (Kueue admitted its Workload; for a Slurm job of the split: it runs)."""
    running: bool = False
    finished: bool = False
    succeeded: bool = False
    """Finished and done its work (COMPLETED, Job succeeded, Ray job SUCCEEDED)."""
    gone: bool = False
    """Nothing of it holds nodes any more: objects, pods, slurmd nodes gone."""
    preempted: bool = False
    """Evicted since the last poll (its admission taken back, or its Ray job failed on its workers)."""
    restarts: int = 0
    """Slurm's own count of requeues (a bridged job preempted by Kueue is requeued held)."""


@dataclass
class Record:
    name: str
    kind: JobClass
    nodes: int
    runtime: float
    planned: float
    submitted: float | None = None
    admitted: float | None = None
    running: float | None = None
    finished: float | None = None
    cleaned: float | None = None
    completions: int = 0
    preemptions: int = 0
    ident: str = ""
    """The stack's name for it: a Slurm job id, a Job's, RayJob's or pod's name."""
    spans: list[tuple[float, float]] = field(default_factory=list)
    """Each holding of its quota, admitted -> preempted or cleaned up."""

    @property
    def wait(self) -> float | None:
        if self.running is None or self.submitted is None:
            return None
        return self.running - self.submitted

    @property
    def done(self) -> bool:
        return self.cleaned is not None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind.value,
            "nodes": self.nodes,
            "runtime": self.runtime,
            "planned": self.planned,
            "submitted": self.submitted,
            "admitted": self.admitted,
            "running": self.running,
            "finished": self.finished,
            "cleaned": self.cleaned,
            "completions": self.completions,
            "preemptions": self.preemptions,
            "ident": self.ident,
            "spans": [list(span) for span in self.spans],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Record:
        return cls(
            name=str(data["name"]),
            kind=JobClass(data["kind"]),
            nodes=int(data["nodes"]),
            runtime=float(data["runtime"]),
            planned=float(data["planned"]),
            submitted=data["submitted"],
            admitted=data["admitted"],
            running=data["running"],
            finished=data["finished"],
            cleaned=data["cleaned"],
            completions=int(data["completions"]),
            preemptions=int(data["preemptions"]),
            ident=str(data["ident"]),
            spans=[(float(a), float(b)) for a, b in data["spans"]],
        )


def _start_over(record: Record, now: float) -> None:
    if record.admitted is not None:
        record.spans.append((record.admitted, now))
    record.preemptions += 1
    record.admitted = record.running = None


def observe(record: Record, seen: Seen, now: float) -> None:
    """Move ``record`` on by what one poll saw at ``now`` (first sightings only)."""
    if record.cleaned is not None:
        return
    if seen.preempted or seen.restarts > record.preemptions:
        _start_over(record, now)
        if seen.restarts > record.preemptions:
            record.preemptions = seen.restarts
        return
    if record.finished is None:
        if record.admitted is None and (seen.admitted or seen.running or seen.finished):
            record.admitted = now
        if record.running is None and (seen.running or seen.finished):
            record.running = now
        if seen.finished:
            record.finished = now
            record.completions += 1 if seen.succeeded else 0
    if record.finished is not None and seen.gone:
        record.cleaned = now
        if record.admitted is not None:
            record.spans.append((record.admitted, now))
