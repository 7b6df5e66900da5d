"""Parse only the jobs that changed: the job list's per-job results kept from one list to the next.

slurmctld answers ``GET /jobs?update_time=`` with the whole list as soon as any job changed, so with a
deep queue nearly every poll brings thousands of jobs of which a handful changed (a completion, a
hold). Building a :class:`~bridge.api.slurm_job.SlurmJob` for each of them again was most of the
bridge's steady-state CPU. An adapter reads a job only through the fields it declares
(``RestAdapter.job_fields``, enforced by its reader), so the parse of a job is a function of those
fields alone: when they are equal to the last list's, the last list's ``SlurmJob`` is the answer, and
reusing the very same object also makes every later comparison of it (the job source's diff) an
identity check. Comparing the fields is one dictionary comparison in C per job.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from bridge.api.slurm_job import SlurmJob

__all__ = ["KnownJobs"]


class KnownJobs:
    """The jobs of the last list, by id, each with the declared fields it was parsed from.

    ``parsed`` and ``reused`` count what :meth:`parse` did, for tests and the benchmark. Jobs absent
    from a list are forgotten, so the memory held is that of one list's declared fields.
    """

    def __init__(self) -> None:
        self._known: dict[int, tuple[dict[str, Any], SlurmJob]] = {}
        self._version: str | None = None
        self.parsed = 0
        self.reused = 0

    def parse(
        self,
        raws: Iterable[object],
        *,
        fields: frozenset[str],
        parse: Callable[[object], SlurmJob],
        version: str,
    ) -> tuple[SlurmJob, ...]:
        """``parse`` applied to each raw job, or the last list's result where its fields are equal."""
        if version != self._version:  # another REST version parses otherwise
            self._known = {}
            self._version = version
        known = self._known
        fresh: dict[int, tuple[dict[str, Any], SlurmJob]] = {}
        jobs: list[SlurmJob] = []
        for raw in raws:
            if not isinstance(raw, Mapping):
                jobs.append(parse(raw))  # the adapter says what is wrong with it
                continue
            declared = {k: v for k, v in raw.items() if k in fields}
            job_id = declared.get("job_id")
            before = known.get(job_id) if type(job_id) is int else None
            if before is not None and before[0] == declared:
                job = before[1]
                self.reused += 1
            else:
                job = parse(raw)
                self.parsed += 1
            if type(job_id) is int:
                fresh[job_id] = (declared, job)
            jobs.append(job)
        self._known = fresh
        return tuple(jobs)
