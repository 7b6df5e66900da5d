"""bridge.slurmrest.known_jobs: a job list parses only the jobs whose declared fields changed.

Built on the recorded answers of both Slurm versions (``data/``), multiplied into a queue.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from bridge.api.slurm_job import SlurmJob
from bridge.slurmrest.known_jobs import KnownJobs, split_job_list
from bridge.slurmrest.versions import adapter_for

DATA = Path(__file__).parent / "data"
RECORDED = {
    "v0.0.38": "rest-v0.0.38-pending-held-job.json",
    "v0.0.42": "rest-24.11-jobs-held-v0.0.42.json",
}


def queue(version: str, count: int) -> dict[str, Any]:
    """A recorded answer with ``count`` copies of its job, ids 1..count."""
    body: dict[str, Any] = json.loads((DATA / RECORDED[version]).read_text())
    (one,) = body["jobs"]
    jobs = []
    for job_id in range(1, count + 1):
        job = copy.deepcopy(one)
        job["job_id"] = job_id
        jobs.append(job)
    body["jobs"] = jobs
    return body


def counting(version: str) -> tuple[Any, list[int]]:
    adapter = adapter_for(version)
    parsed: list[int] = []
    original = adapter.parse_job

    def parse_job(raw: object) -> SlurmJob:
        job = original(raw)
        parsed.append(job.job_id)
        return job

    return parse_job, parsed


@pytest.mark.parametrize("version", sorted(RECORDED))
def test_only_changed_jobs_are_parsed_again_and_the_others_are_the_same_objects(version: str) -> None:
    adapter = adapter_for(version)
    parse_job, parsed = counting(version)
    known = KnownJobs()

    def parse(body: dict[str, Any]) -> tuple[SlurmJob, ...]:
        raws = body["jobs"]
        return known.parse(raws, fields=adapter.job_fields, parse=parse_job, version=version)

    first = parse(queue(version, 50))
    assert sorted(parsed) == list(range(1, 51))
    parsed.clear()

    body = queue(version, 50)  # decoded again, as each poll does: equal, not identical
    body["jobs"][6]["comment"] = "changed by its user"
    body["jobs"] = [j for j in body["jobs"] if j["job_id"] != 10]  # gone from slurmctld
    second = parse(body)
    assert parsed == [7]
    assert known.reused == 48
    by_id = {j.job_id: j for j in first}
    for job in second:
        if job.job_id == 7:
            assert job.comment == "changed by its user"
            assert job != by_id[7]
        else:
            assert job is by_id[job.job_id]  # the very object: later comparisons are identity checks
    # What was parsed is what a full parse gives.
    assert second == adapter.parse_jobs(body).jobs

    parsed.clear()
    back = queue(version, 50)  # job 10 is back: it was forgotten, so it is parsed
    parse(back)
    assert parsed == [7, 10]  # 7 changed back too


@pytest.mark.parametrize("version", sorted(RECORDED))
def test_a_field_no_adapter_reads_does_not_cost_a_parse(version: str) -> None:
    """Slurm sends many fields the bridge never reads (24.11: ``last_sched_evaluation`` changes at
    every scheduler pass); only the adapter's declared fields are compared."""
    adapter = adapter_for(version)
    parse_job, parsed = counting(version)
    known = KnownJobs()
    known.parse(queue(version, 3)["jobs"], fields=adapter.job_fields, parse=parse_job, version=version)
    parsed.clear()
    body = queue(version, 3)
    undeclared = "last_sched_evaluation" if version != "v0.0.38" else "nice"
    assert undeclared not in adapter.job_fields
    body["jobs"][0][undeclared] = 12345
    known.parse(body["jobs"], fields=adapter.job_fields, parse=parse_job, version=version)
    assert parsed == []


def test_another_version_parses_everything_again() -> None:
    known = KnownJobs()
    for version in ("v0.0.42", "v0.0.41"):
        adapter = adapter_for(version)
        body = queue("v0.0.42", 2)
        jobs = known.parse(body["jobs"], fields=adapter.job_fields, parse=adapter.parse_job, version=version)
        assert all(j.rest_version == version for j in jobs)
    assert known.parsed == 4


def test_the_adapter_parses_through_known_jobs_when_given() -> None:
    adapter = adapter_for("v0.0.42")
    known = KnownJobs()
    body = queue("v0.0.42", 5)
    page = adapter.parse_jobs(body, known=known)
    again = adapter.parse_jobs(queue("v0.0.42", 5), known=known)
    assert page.update_time == again.update_time
    assert known.parsed == 5
    assert known.reused == 5
    assert all(a is b for a, b in zip(page.jobs, again.jobs, strict=True))


def as_text(body: dict[str, Any]) -> dict[str, Any]:
    """The body as the client reads slurmrestd's answer: each job left as its JSON text."""
    return split_job_list(json.dumps(body, indent=2).encode())


@pytest.mark.parametrize("version", sorted(RECORDED))
def test_a_job_whose_text_is_unchanged_is_not_even_decoded(version: str) -> None:
    """The cost of a list with nothing new is a lookup of each job's text, no JSON decode of it."""
    adapter = adapter_for(version)
    known = KnownJobs()
    first = adapter.parse_jobs(as_text(queue(version, 40)), known=known)
    assert (known.decoded, known.parsed) == (40, 40)
    body = queue(version, 40)
    body["jobs"][4]["comment"] = "changed by its user"
    second = adapter.parse_jobs(as_text(body), known=known)
    assert (known.decoded, known.parsed) == (41, 41)
    assert [j.job_id for j, k in zip(first.jobs, second.jobs, strict=True) if j is not k] == [5]
    assert second.jobs[4].comment == "changed by its user"
    assert second == adapter.parse_jobs(body)  # the same page as a whole decode and parse


@pytest.mark.parametrize("version", sorted(RECORDED))
def test_a_changed_text_with_the_same_declared_fields_is_decoded_but_not_parsed(version: str) -> None:
    adapter = adapter_for(version)
    known = KnownJobs()
    first = adapter.parse_jobs(as_text(queue(version, 3)), known=known)
    body = queue(version, 3)
    undeclared = "last_sched_evaluation" if version != "v0.0.38" else "nice"
    body["jobs"][1][undeclared] = 12345
    second = adapter.parse_jobs(as_text(body), known=known)
    assert (known.decoded, known.parsed) == (4, 3)
    assert all(a is b for a, b in zip(first.jobs, second.jobs, strict=True))


def test_the_top_level_of_a_job_list_is_decoded_and_the_jobs_kept_as_text() -> None:
    body = queue("v0.0.42", 2)
    split = split_job_list(json.dumps(body).encode())
    assert set(split) == {"jobs", "last_update", "last_backfill", "meta", "errors", "warnings"} & set(body)
    assert split["last_update"] == body["last_update"]
    assert [json.loads(bytes(raw)) for raw in split["jobs"]] == body["jobs"]
    with pytest.raises(ValueError, match="Expected"):
        split_job_list(b'["not", "an object"]')


@pytest.mark.parametrize("version", sorted(RECORDED))
def test_a_job_read_alone_is_the_object_the_next_list_answers(version: str) -> None:
    """A job the bridge wrote, then read alone, is that very object in the next list that shows the
    same write: one write is one change for the job source, not the read's and then the list's."""
    adapter = adapter_for(version)
    parse_job, parsed = counting(version)
    known = KnownJobs()
    first = known.parse(
        queue(version, 5)["jobs"], fields=adapter.job_fields, parse=parse_job, version=version
    )
    parsed.clear()

    written = queue(version, 5)
    written["jobs"][2]["comment"] = "written by the bridge"
    alone = {**written, "jobs": [copy.deepcopy(written["jobs"][2])]}
    (read,) = adapter.parse_jobs(alone, known=known, read_alone=True).jobs
    assert read.comment == "written by the bridge"
    assert known.parsed == 6

    parsed.clear()
    listed = known.parse(
        split_job_list(json.dumps(written).encode())["jobs"],
        fields=adapter.job_fields, parse=parse_job, version=version,
    )  # fmt: skip
    assert parsed == []
    assert listed[2] is read
    assert all(job is before for job, before in zip(listed, first, strict=True) if job.job_id != 3)

    # A read of a job that did not change since the list is the list's object.
    (again,) = adapter.parse_jobs(
        {**written, "jobs": [written["jobs"][0]]}, known=known, read_alone=True
    ).jobs
    assert again is listed[0]
    assert known.parsed == 6


def test_a_read_alone_before_any_list_is_parsed_and_kept_for_no_list() -> None:
    version = "v0.0.38"
    adapter = adapter_for(version)
    known = KnownJobs()
    (job,) = adapter.parse_jobs(queue(version, 1), known=known, read_alone=True).jobs
    assert job.job_id == 1
    assert known.parsed == 1
    listed = known.parse(
        queue(version, 1)["jobs"], fields=adapter.job_fields, parse=adapter.parse_job, version=version
    )
    assert listed[0] == job
