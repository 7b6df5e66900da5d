"""Experiment 002's real run, its pure parts: the plan, the record transitions, the figures.

The run itself (the stack, the driver) is the e2e tier's (tests/e2e/test_exp002_real.py); here what
turns its observations into figures must hold for any sequence of polls.
"""

from __future__ import annotations

import math

from poolsim import sim
from poolsim.workload import JobClass
from realrun import figures
from realrun.drive import slurm_jobs
from realrun.plan import Plan, Policy, RealParams, build
from realrun.records import Record, Seen, observe


def _record(kind: JobClass = JobClass.BATCH, name: str = "j", nodes: int = 1) -> Record:
    return Record(name, kind, nodes, 5.0, 0.0, submitted=0.0)


def test_the_plan_is_the_simulators_workload_cut_to_the_stack() -> None:
    params = RealParams(max_ray_jobs=1, max_runtime=30.0)
    plan = build(params)
    kinds = {job.kind for job in plan.jobs}
    assert kinds == {JobClass.SLURM, JobClass.BATCH, JobClass.RAY}
    assert len(plan.of(JobClass.RAY)) == 1
    assert all(job.runtime <= 30.0 for job in plan.jobs)
    assert all(0 <= job.submit < params.horizon for job in plan.jobs)
    assert [job.submit for job in plan.jobs] == sorted(job.submit for job in plan.jobs)
    # The inference curve starts at the slice's time of day (09:00): it rises towards 16:00.
    replicas = [count for _, count in plan.replicas]
    assert replicas == sorted(replicas)
    assert replicas[-1] > replicas[0]
    assert sum(job.runtime for job in plan.inference) == sum(
        count * (params.horizon / len(plan.replicas)) for count in replicas
    )


def test_a_smoke_plan_keeps_the_first_jobs_of_each_class() -> None:
    full = build(RealParams(days=0.03))
    small = build(RealParams(days=0.03, max_slurm_jobs=2, max_batch_jobs=1, max_ray_jobs=1))
    assert small.of(JobClass.SLURM) == full.of(JobClass.SLURM)[:2]
    assert len(small.of(JobClass.BATCH)) == 1


def test_observe_records_first_sightings_and_the_cleanup() -> None:
    record = _record()
    observe(record, Seen(), 1.0)
    observe(record, Seen(admitted=True), 2.0)
    observe(record, Seen(admitted=True, running=True), 3.0)
    observe(record, Seen(admitted=True, running=True), 4.0)
    observe(record, Seen(finished=True, succeeded=True), 8.0)
    assert not record.done
    observe(record, Seen(finished=True, gone=True), 9.5)
    assert (record.admitted, record.running, record.finished, record.cleaned) == (2.0, 3.0, 8.0, 9.5)
    assert record.completions == 1
    assert record.wait == 3.0
    assert record.spans == [(2.0, 9.5)]
    observe(record, Seen(finished=True, succeeded=True, gone=True), 12.0)
    assert record.completions == 1, "a cleaned-up job is not counted again"


def test_a_job_seen_finished_at_once_was_admitted_and_ran_then() -> None:
    record = _record(JobClass.SLURM)
    observe(record, Seen(finished=True, succeeded=True), 4.0)
    assert (record.admitted, record.running, record.finished) == (4.0, 4.0, 4.0)


def test_a_preemption_starts_the_job_over_and_keeps_the_held_span() -> None:
    record = _record()
    observe(record, Seen(admitted=True, running=True), 1.0)
    observe(record, Seen(preempted=True), 5.0)
    assert record.preemptions == 1
    assert record.admitted is None
    assert record.running is None
    observe(record, Seen(admitted=True, running=True), 7.0)
    observe(record, Seen(finished=True, succeeded=True, gone=True), 12.0)
    assert record.spans == [(1.0, 5.0), (7.0, 12.0)]
    assert record.wait == 7.0, "the wait is of the final run, as the simulator's"


def test_slurm_requeues_count_as_preemptions_once_each() -> None:
    record = _record(JobClass.SLURM)
    observe(record, Seen(admitted=True, running=True), 1.0)
    observe(record, Seen(restarts=1), 3.0)
    observe(record, Seen(restarts=1), 4.0)
    observe(record, Seen(admitted=True, running=True, restarts=1), 6.0)
    assert record.preemptions == 1
    assert record.running == 6.0


def test_a_failed_job_is_lost() -> None:
    ok, failed = _record(name="ok"), _record(name="bad")
    observe(ok, Seen(finished=True, succeeded=True, gone=True), 2.0)
    observe(failed, Seen(finished=True, succeeded=False, gone=True), 2.0)
    assert figures.jobs_lost([ok, failed]) == ["bad"]


def test_scontrol_jobs_are_parsed() -> None:
    text = (
        "JobId=12 JobName=slurm-1 UserId=k(1) JobState=RUNNING Reason=None Restarts=0 BatchFlag=1\n"
        "JobId=13 JobName=slurm-2 JobState=PENDING Reason=JobHeldUser Restarts=2\n"
    )
    assert slurm_jobs(text) == {"12": ("RUNNING", 0), "13": ("PENDING", 2)}
    assert slurm_jobs("No jobs in the system\n") == {}


def _finished(kind: JobClass, name: str, *, submitted: float, admitted: float, running: float,
              finished: float, cleaned: float, nodes: int = 1) -> Record:  # fmt: skip
    record = Record(name, kind, nodes, finished - running, submitted, submitted=submitted)
    observe(record, Seen(admitted=True), admitted)
    observe(record, Seen(admitted=True, running=True), running)
    observe(record, Seen(finished=True, succeeded=True), finished)
    observe(record, Seen(finished=True, gone=True), cleaned)
    return record


def test_figures_per_class_and_utilisation() -> None:
    records = [
        _finished(JobClass.SLURM, "s1", submitted=0, admitted=1, running=3, finished=8, cleaned=9, nodes=2),
        _finished(JobClass.SLURM, "s2", submitted=1, admitted=9, running=11, finished=16, cleaned=17),
        _finished(JobClass.BATCH, "b1", submitted=0, admitted=0.5, running=1.5, finished=10, cleaned=11),
    ]
    rows = {row.kind: row for row in figures.class_rows(records)}
    assert rows[JobClass.SLURM].wait_p50 == 6.5  # waits 3 and 10
    assert rows[JobClass.SLURM].start_overhead == 2.0
    assert rows[JobClass.SLURM].end_overhead == 1.0
    assert rows[JobClass.SLURM].admission == 1.0
    assert figures.makespan(records) == 17.0
    held = 2 * 8 + 8 + 10.5
    assert math.isclose(figures.utilisation(records, policy=Policy.ONE_POOL, capacity=4), held / (4 * 17))
    series = figures.utilisation_series(records, policy=Policy.ONE_POOL, bucket=5.0)
    assert [t for t, _ in series] == [0.0, 5.0, 10.0, 15.0]
    assert math.isclose(sum(h["slurm"] + h["batch"] for _, h in series) * 5.0, held)
    # In the split a Slurm job holds its nodes while it runs only.
    split = figures.utilisation(records, policy=Policy.STATIC_SPLIT, capacity=4)
    assert math.isclose(split, (2 * 5 + 5 + 10.5) / (4 * 17))


def test_calibration_and_simulation_of_the_same_jobs() -> None:
    records = [
        _finished(JobClass.SLURM, "s1", submitted=0, admitted=1, running=3, finished=8, cleaned=9),
        _finished(JobClass.BATCH, "b1", submitted=0, admitted=0.5, running=1.5, finished=10, cleaned=11),
    ]
    calibration = figures.calibration(records, policy=Policy.ONE_POOL)
    assert (calibration.slurmd_registration, calibration.release, calibration.cleanup) == (2.0, 0.0, 1.0)
    assert calibration.pod_start == 1.0
    assert calibration.ray_worker_join == sim.Calibration().ray_worker_join  # nothing measured
    plan = Plan(jobs=(), replicas=(), inference=())
    assert figures.replayed_jobs(records, plan) == []  # only planned jobs are replayed
