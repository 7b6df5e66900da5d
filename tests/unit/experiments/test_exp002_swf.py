"""poolsim.swf on lines of the real NASA iPSC/860 trace: header, -1 fields, zero run times, cancelled jobs."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from poolsim import swf
from poolsim.__main__ import DEFAULT_TRACE

# The trace's first header lines and job lines as they are (job 658 ran for 0 s).
REAL = """\
; Version: 2.2
; Computer: Intel iPSC/860
; Installation: NASA Ames Research Center
;
; MaxNodes: 128
; MaxProcs: 128
; Note: There is no information on wait times - the given submit
;       times are actually start times
; Note: group 1 is normal users
    1        0     -1   1451  128     -1    -1   -1     -1    -1 -1   1   1  -1 -1 -1 -1 -1
   57    25574     -1     10    1     -1    -1   -1     -1    -1 -1   4   1   2 -1 -1 -1 -1

  658   168848     -1      0  128     -1    -1   -1     -1    -1 -1   1   1  -1 -1 -1 -1 -1
"""

# The NASA log marks no job cancelled (status -1 on every line), so these are real lines with the
# status (field 11) set to 5, once for a job that ran and once with the run time and size SWF gives a
# job cancelled before it started (-1).
CANCELLED_AFTER_RUNNING = (
    "   59    26613     -1    716   32     -1    -1   -1     -1    -1  5   4   1   3 -1 -1 -1 -1"
)
CANCELLED_BEFORE_RUNNING = (
    "   60    27331     -1     -1   -1     -1    -1   4     -1    -1  5   4   1   4 -1 -1 -1 -1"
)


def test_header_and_jobs() -> None:
    trace = swf.parse(REAL.splitlines())
    assert trace.header["Version"] == "2.2"
    assert trace.header["Computer"] == "Intel iPSC/860"
    assert trace.max_nodes == 128
    assert trace.header["Note"].startswith("There is no information on wait times")
    assert "group 1 is normal users" in trace.header["Note"]
    assert [job.number for job in trace.jobs] == [1, 57, 658]


def test_minus_one_is_none() -> None:
    first = swf.parse(REAL.splitlines()).jobs[0]
    assert first.submit == 0.0
    assert first.run_time == 1451.0
    assert first.allocated_procs == 128
    assert first.wait is None
    assert first.requested_procs is None
    assert first.requested_time is None
    assert first.status is swf.Status.UNKNOWN
    assert first.user == 1
    assert first.application is None
    assert first.procs == 128


def test_requested_processors_stand_in_for_allocated() -> None:
    job = swf.parse_line(CANCELLED_BEFORE_RUNNING)
    assert job.allocated_procs is None
    assert job.procs == 4
    assert job.status is swf.Status.CANCELLED


@pytest.mark.parametrize("line", ["1 0 -1 1451 128", "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19"])
def test_a_line_without_18_fields_is_refused(line: str) -> None:
    with pytest.raises(ValueError, match="18 fields"):
        swf.parse_line(line)


def test_a_job_without_submit_time_is_refused() -> None:
    with pytest.raises(ValueError, match="no submit time"):
        swf.parse_line(
            "    1       -1     -1   1451  128     -1    -1   -1     -1    -1 -1   1   1  -1 -1 -1 -1 -1"
        )


def test_replayable_keeps_what_held_the_machine() -> None:
    lines = [*REAL.splitlines(), CANCELLED_AFTER_RUNNING, CANCELLED_BEFORE_RUNNING]
    lines.append(
        "   61    27400     -1     30   -1     -1    -1   -1     -1    -1 -1   4   1   4 -1 -1 -1 -1"
    )
    selection = swf.replayable(swf.parse(lines))
    assert [job.number for job in selection.jobs] == [1, 57, 658, 59]
    # job 60: cancelled with no run time; job 61: no size at all
    assert selection.dropped == {"no run time": 1, "no processors": 1}


def test_cancelled_with_zero_run_time_is_dropped() -> None:
    line = CANCELLED_AFTER_RUNNING.replace("    716", "      0")
    selection = swf.replayable(swf.parse([line]))
    assert selection.jobs == []
    assert selection.dropped == {"cancelled before running": 1}


def test_read_lines_gzip_and_plain(tmp_path: Path) -> None:
    plain = tmp_path / "t.swf"
    plain.write_text(REAL)
    packed = tmp_path / "t.swf.gz"
    packed.write_bytes(gzip.compress(REAL.encode()))
    assert list(swf.read_lines(plain)) == list(swf.read_lines(packed))


def test_the_shipped_trace() -> None:
    path = DEFAULT_TRACE
    assert path.stat().st_size < 1_000_000
    trace = swf.parse(swf.read_lines(path))
    assert len(trace.jobs) == 18_239
    assert trace.max_nodes == 128
    selection = swf.replayable(trace)
    assert len(selection.jobs) == 18_239
    assert max(job.procs or 0 for job in selection.jobs) == 128
