"""The Standard Workload Format (SWF 2.2) reader: a trace's text -> header and job records.

Pure: it takes lines and returns values, so the parser is tested on lines of the real trace without
files. SWF writes -1 for a field the log does not have; the records carry ``None`` there, so no caller
mistakes -1 for a size or a duration. Which records can be replayed (a job that never ran, a
cancelled one) is decided here once, with the reason counted, not left to each workload class.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path

FIELDS = 18


class Status(IntEnum):
    """SWF field 11. The NASA iPSC/860 log has -1 (unknown) on every job."""

    UNKNOWN = -1
    FAILED = 0
    COMPLETED = 1
    PARTIAL = 2
    PARTIAL_LAST_COMPLETED = 3
    PARTIAL_LAST_FAILED = 4
    CANCELLED = 5


@dataclass(frozen=True)
class SwfJob:
    """One job line; ``None`` where the trace has -1."""

    number: int
    submit: float
    wait: float | None
    run_time: float | None
    allocated_procs: int | None
    avg_cpu: float | None
    used_memory: float | None
    requested_procs: int | None
    requested_time: float | None
    requested_memory: float | None
    status: Status
    user: int | None
    group: int | None
    application: int | None
    queue: int | None
    partition: int | None
    preceding_job: int | None
    think_time: float | None

    @property
    def procs(self) -> int | None:
        """The processors the job held: allocated, else requested (SWF's own fallback)."""
        return self.allocated_procs if self.allocated_procs is not None else self.requested_procs


@dataclass(frozen=True)
class Trace:
    """A parsed trace: its header (``; Key: value`` lines, repeated keys joined) and its jobs."""

    header: dict[str, str]
    jobs: tuple[SwfJob, ...]

    @property
    def max_nodes(self) -> int | None:
        value = self.header.get("MaxNodes") or self.header.get("MaxProcs")
        return int(value) if value else None


@dataclass
class Selection:
    """The replayable jobs of a trace and how many were left out, by reason."""

    jobs: list[SwfJob] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)

    def drop(self, reason: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1


def _int(text: str) -> int | None:
    value = int(float(text))
    return None if value == -1 else value


def _float(text: str) -> float | None:
    value = float(text)
    return None if value == -1 else value


def parse_line(line: str) -> SwfJob:
    """One job line (18 whitespace-separated numbers) -> a record; ValueError on anything else."""
    parts = line.split()
    if len(parts) != FIELDS:
        raise ValueError(f"an SWF job line has {FIELDS} fields, this one {len(parts)}: {line!r}")
    submit = float(parts[1])
    if submit < 0:
        raise ValueError(f"job {parts[0]} has no submit time: {line!r}")
    status = _int(parts[10])
    return SwfJob(
        number=int(parts[0]),
        submit=submit,
        wait=_float(parts[2]),
        run_time=_float(parts[3]),
        allocated_procs=_int(parts[4]),
        avg_cpu=_float(parts[5]),
        used_memory=_float(parts[6]),
        requested_procs=_int(parts[7]),
        requested_time=_float(parts[8]),
        requested_memory=_float(parts[9]),
        status=Status(-1 if status is None else status),
        user=_int(parts[11]),
        group=_int(parts[12]),
        application=_int(parts[13]),
        queue=_int(parts[14]),
        partition=_int(parts[15]),
        preceding_job=_int(parts[16]),
        think_time=_float(parts[17]),
    )


def parse(lines: Iterable[str]) -> Trace:
    """Header comments (``;``) and blank lines apart, every line is a job."""
    header: dict[str, str] = {}
    jobs: list[SwfJob] = []
    for raw in lines:
        line = raw.strip()
        if not line:
            continue
        if line.startswith(";"):
            key, sep, value = line[1:].partition(":")
            if sep and key.strip() and " " not in key.strip():
                name = key.strip()
                header[name] = f"{header[name]}\n{value.strip()}" if name in header else value.strip()
            continue
        jobs.append(parse_line(line))
    return Trace(header=header, jobs=tuple(jobs))


def read_lines(path: Path) -> Iterator[str]:
    """The lines of a trace file, gzip-compressed (``.gz``) or not."""
    if path.suffix == ".gz":
        with gzip.open(path, "rt", encoding="ascii") as handle:
            yield from handle
    else:
        with path.open(encoding="ascii") as handle:
            yield from handle


def replayable(trace: Trace) -> Selection:
    """The jobs that held the machine: a size and a run time, not cancelled before running.

    A cancelled job (status 5) is kept only when it ran (run time > 0 and a size): it held its nodes
    until cancelled, which is what the replay needs. A run time of 0 is kept (the job was started and
    ended at once); the workload gives it a floor.
    """
    selection = Selection()
    for job in trace.jobs:
        procs = job.procs
        if procs is None or procs <= 0:
            selection.drop("no processors")
        elif job.run_time is None:
            selection.drop("no run time")
        elif job.status is Status.CANCELLED and job.run_time <= 0:
            selection.drop("cancelled before running")
        else:
            selection.jobs.append(job)
    return selection
