"""Decode and parse only the jobs that changed: the job list's per-job results kept from one list to the next.

slurmctld answers ``GET /jobs?update_time=`` with the whole list as soon as any job changed, so with a
deep queue nearly every poll brings thousands of jobs of which a handful changed (a completion, a
hold). Decoding every job's JSON and building a :class:`~bridge.api.slurm_job.SlurmJob` for each
again was the bridge's steady-state CPU, in proportion to the queue. Two tiers keep it in proportion
to the changes:

- :func:`split_job_list` decodes the answer's top level only (msgspec, in C): each job stays its raw
  JSON text. A job whose text is byte for byte the last list's is the last list's ``SlurmJob``, with
  no decode at all: one dictionary lookup of its text.
- A job whose text changed is decoded alone. An adapter reads a job only through the fields it
  declares (``RestAdapter.job_fields``, enforced by its reader), so the parse of a job is a function
  of those fields alone: when they are equal to the last list's (24.11 rewrites
  ``last_sched_evaluation``, which no adapter reads, at every scheduler pass), the last list's
  ``SlurmJob`` is the answer again. The declared fields are kept as their compact JSON text.

Reusing the very same object also makes every later comparison of it (the job source's diff) an
identity check. A job read alone (``GET /job/{id}``, after the bridge wrote it) is remembered as that
job's latest (:meth:`KnownJobs.remember`): the next list, which shows the same write, answers it with
the object read, so one write is one change for the job source, not two (the read's, then the list's).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import msgspec

from bridge.api.slurm_job import SlurmJob

__all__ = ["KnownJobs", "split_job_list"]


class _JobList(msgspec.Struct):
    """The top level of a job list: the jobs left as their JSON text, the rest decoded."""

    jobs: list[msgspec.Raw] | None = None
    errors: Any = None
    warnings: Any = None
    meta: Any = None
    last_update: Any = None
    last_backfill: Any = None


_JOB_LIST = msgspec.json.Decoder(_JobList)
_ENCODE = msgspec.json.Encoder()
_DECODE = msgspec.json.Decoder()


def split_job_list(body: bytes) -> dict[str, Any]:
    """The answer of ``GET /jobs`` with each job as its raw JSON (``msgspec.Raw``); the fields no
    version sends are dropped. Raises ``ValueError`` when it is not a JSON object."""
    doc = _JOB_LIST.decode(body)
    return {name: value for name in doc.__struct_fields__ if (value := getattr(doc, name)) is not None}


class KnownJobs:
    """The jobs of the last list: by raw text, and by id with the declared fields they came from.

    ``parsed``, ``decoded`` and ``reused`` count what :meth:`parse` did, for tests and the benchmark.
    Jobs absent from a list are forgotten, so the memory held is one list's job texts and declared
    fields.
    """

    def __init__(self) -> None:
        self._by_text: dict[bytes, SlurmJob] = {}
        self._by_id: dict[int, tuple[bytes, SlurmJob]] = {}
        self._version: str | None = None
        self.parsed = 0
        """Jobs built by the adapter."""
        self.decoded = 0
        """Raw job texts decoded (the ones that differ from the last list's)."""
        self.reused = 0
        """Jobs answered by the last list's object."""

    def parse(
        self,
        raws: Iterable[object],
        *,
        fields: frozenset[str],
        parse: Callable[[object], SlurmJob],
        version: str,
    ) -> tuple[SlurmJob, ...]:
        """``parse`` applied to each raw job (a mapping, or its JSON as ``msgspec.Raw``), or the last
        list's result where its text, or else its declared fields, are equal."""
        if version != self._version:  # another REST version parses otherwise
            self._by_text, self._by_id = {}, {}
            self._version = version
        by_text, by_id = self._by_text, self._by_id
        fresh_text: dict[bytes, SlurmJob] = {}
        fresh_id: dict[int, tuple[bytes, SlurmJob]] = {}
        jobs: list[SlurmJob] = []
        for raw in raws:
            if not isinstance(raw, msgspec.Raw):  # already decoded (a single job's read, a test)
                jobs.append(self._job(raw, fields=fields, parse=parse, by_id=by_id, fresh_id=fresh_id))
                continue
            text = bytes(raw)
            job = by_text.get(text)
            if job is not None:
                self.reused += 1
                if job.job_id in by_id:
                    fresh_id[job.job_id] = by_id[job.job_id]
            else:
                self.decoded += 1
                decoded = _DECODE.decode(text)
                job = self._job(decoded, fields=fields, parse=parse, by_id=by_id, fresh_id=fresh_id)
            fresh_text[text] = job
            jobs.append(job)
        self._by_text, self._by_id = fresh_text, fresh_id
        return tuple(jobs)

    def remember(
        self,
        raws: Iterable[object],
        *,
        fields: frozenset[str],
        parse: Callable[[object], SlurmJob],
        version: str,
    ) -> tuple[SlurmJob, ...]:
        """``parse`` applied to the (decoded) jobs of a single job's read, each then kept as its
        job's latest (the other jobs of the last list stand): a job whose declared fields are those
        of the last list, or of its last read, is that object again, and the next list answers the
        job with the object read as long as its declared fields are still these."""
        if version != self._version:  # no list of this version yet: nothing to compare with
            jobs = tuple(parse(raw) for raw in raws)
            self.parsed += len(jobs)
            return jobs
        by_id = self._by_id
        return tuple(self._job(raw, fields=fields, parse=parse, by_id=by_id, fresh_id=by_id) for raw in raws)

    def _job(
        self,
        raw: object,
        *,
        fields: frozenset[str],
        parse: Callable[[object], SlurmJob],
        by_id: Mapping[int, tuple[bytes, SlurmJob]],
        fresh_id: dict[int, tuple[bytes, SlurmJob]],
    ) -> SlurmJob:
        if not isinstance(raw, Mapping):
            self.parsed += 1
            return parse(raw)  # the adapter says what is wrong with it
        declared = _ENCODE.encode({k: v for k, v in raw.items() if k in fields})
        job_id = raw.get("job_id")
        before = by_id.get(job_id) if type(job_id) is int else None
        if before is not None and before[0] == declared:
            job = before[1]
            self.reused += 1
        else:
            job = parse(raw)
            self.parsed += 1
        if type(job_id) is int:
            fresh_id[job_id] = (declared, job)
        return job
