"""Experiment 002's real run, its pure parts: the plan, the record transitions, the figures.

The run itself (the stack, the driver) is the e2e tier's (tests/e2e/test_exp002_real.py); here what
turns its observations into figures must hold for any sequence of polls.
"""

from __future__ import annotations

import math

from poolsim import sim
from poolsim.workload import Job, JobClass
from realrun import figures
from realrun.plan import Plan, Policy, RealParams, build
from realrun.records import Record, Seen, observe
from realrun.seen import MAX_RAY_ATTEMPTS, Snapshot, batch_seen, ray_seen, slurm_jobs, slurm_seen


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
    pool = figures.Setup(Policy.ONE_POOL, 2, 2)
    rows = {row.kind: row for row in figures.class_rows(records, pool)}
    assert rows[JobClass.SLURM].wait_p50 == 6.5  # waits 3 and 10
    assert rows[JobClass.SLURM].start_overhead == 2.0
    assert rows[JobClass.SLURM].end_overhead == 1.0
    # s2 found s1 (2 nodes) and b1 (1) holding 3 of the 4 nodes: room for it, so both count.
    assert rows[JobClass.SLURM].admission == 4.5  # 1 and 8
    assert figures.makespan(records) == 17.0
    held = 2 * 8 + 8 + 10.5
    assert math.isclose(figures.utilisation(records, setup=pool), held / (4 * 17))
    series = figures.utilisation_series(records, setup=pool, bucket=5.0)
    assert [t for t, _ in series] == [0.0, 5.0, 10.0, 15.0]
    assert math.isclose(sum(h["slurm"] + h["batch"] for _, h in series) * 5.0, held)
    # In the split a Slurm job holds its nodes while it runs only.
    split = figures.utilisation(records, setup=figures.Setup(Policy.STATIC_SPLIT, 2, 2))
    assert math.isclose(split, (2 * 5 + 5 + 10.5) / (4 * 17))


def test_calibration_and_simulation_of_the_same_jobs() -> None:
    records = [
        _finished(JobClass.SLURM, "s1", submitted=0, admitted=1, running=3, finished=8, cleaned=9),
        _finished(JobClass.BATCH, "b1", submitted=0, admitted=0.5, running=1.5, finished=10, cleaned=11),
    ]
    calibration = figures.calibration(records, setup=figures.Setup(Policy.ONE_POOL, 2, 2))
    assert (calibration.slurmd_registration, calibration.release, calibration.cleanup) == (2.0, 0.0, 1.0)
    assert (calibration.pod_start, calibration.kube_admission, calibration.bridge_admission) == (
        1.0,
        0.5,
        1.0,
    )
    assert calibration.ray_worker_join == sim.Calibration().ray_worker_join  # nothing measured
    plan = Plan(jobs=(), replicas=(), inference=())
    assert figures.replayed_jobs(records, plan) == []  # only planned jobs are replayed


def test_only_jobs_that_found_room_measure_the_admission_latency() -> None:
    first = _finished(JobClass.BATCH, "b1", submitted=0, admitted=1, running=1, finished=10, cleaned=10)
    queued = _finished(JobClass.BATCH, "b2", submitted=2, admitted=10, running=10, finished=12, cleaned=12)
    setup = figures.Setup(Policy.STATIC_SPLIT, 4, 1)  # a Kubernetes side of 1 node
    assert figures.found_room(first, [first, queued], setup)
    assert not figures.found_room(queued, [first, queued], setup)
    (row,) = figures.class_rows([first, queued], setup)
    assert row.admission == 1.0, "the queued job's 8 s are a wait, not the latency"
    # In the split a Slurm job is Slurm's: the Kubernetes side's jobs leave its nodes free.
    slurm = _finished(JobClass.SLURM, "s", submitted=3, admitted=3.5, running=3.5, finished=5, cleaned=5)
    assert figures.found_room(slurm, [first, queued, slurm], figures.Setup(Policy.STATIC_SPLIT, 1, 1))
    assert not figures.found_room(slurm, [first, queued, slurm], figures.Setup(Policy.ONE_POOL, 1, 0))
    # A job submitted behind one that still waits finds no room either (it is not at the head).
    late = _finished(JobClass.BATCH, "b3", submitted=2.5, admitted=12, running=12, finished=13, cleaned=13)
    assert not figures.found_room(late, [first, queued, late], figures.Setup(Policy.STATIC_SPLIT, 4, 2))
    assert figures.found_room(late, [first, queued, late], figures.Setup(Policy.STATIC_SPLIT, 4, 3))


def test_the_simulator_admits_after_the_admission_latency() -> None:
    job = Job(name="b", kind=JobClass.BATCH, submit=10.0, nodes=1, runtime=5.0, estimate=5.0, priority=1)
    calibration = sim.Calibration(pod_start=0.5, kube_admission=1.5)
    policy = sim.one_pool(
        slurm_nodes=1, kube_nodes=1, calibration=calibration, strategy=sim.Strategy.STRICT_FIFO
    )
    record = sim.simulate(policy=policy, jobs=[job]).records["b"]
    assert (record.admitted, record.running, record.wait) == (11.5, 12.0, 2.0)


def _job(*, suspend: bool, complete: bool = False) -> dict[str, object]:
    conditions = [{"type": "Complete", "status": "True"}] if complete else []
    return {"metadata": {"name": "b"}, "spec": {"suspend": suspend}, "status": {"conditions": conditions}}


def _pod(phase: str) -> dict[str, object]:
    return {"metadata": {"name": "p"}, "status": {"phase": phase}}


def test_a_batch_job_suspended_again_before_it_finished_was_preempted() -> None:
    record = Record("b", JobClass.BATCH, 1, 5.0, 0.0, submitted=0.0, ident="b")
    waiting = Snapshot(jobs={"b": _job(suspend=True)})
    assert batch_seen(record, waiting) == Seen()
    running = Snapshot(jobs={"b": _job(suspend=False)}, job_pods={"b": [_pod("Running")]})
    observe(record, batch_seen(record, running), 1.0)
    assert (record.admitted, record.running) == (1.0, 1.0)
    evicted = batch_seen(record, waiting)
    assert evicted.preempted
    observe(record, evicted, 2.0)
    observe(record, batch_seen(record, running), 3.0)
    observe(record, batch_seen(record, Snapshot(jobs={"b": _job(suspend=False, complete=True)})), 8.0)
    observe(record, batch_seen(record, Snapshot(job_pods={"b": [_pod("Succeeded")]})), 9.0)
    assert not record.done, "its pod is still there"
    observe(record, batch_seen(record, Snapshot()), 10.0)
    assert (record.preemptions, record.completions, record.cleaned) == (1, 1, 10.0)
    assert record.spans == [(1.0, 2.0), (3.0, 10.0)]


def test_a_bridged_slurm_job_is_admitted_by_its_jobset_and_gone_with_its_pods_and_nodes() -> None:
    record = Record("s", JobClass.SLURM, 1, 2.0, 0.0, submitted=0.0, ident="7")
    held = Snapshot(slurm={"7": ("PENDING", 0)}, slurm_jobsets={"7": True}, slurm_busy={"7"})
    assert slurm_seen(record, held, policy=Policy.ONE_POOL) == Seen()
    admitted = Snapshot(slurm={"7": ("PENDING", 0)}, slurm_jobsets={"7": False}, slurm_busy={"7"})
    assert slurm_seen(record, admitted, policy=Policy.ONE_POOL).admitted
    done = Snapshot(slurm={"7": ("COMPLETED", 0)}, slurm_busy={"7"})
    seen = slurm_seen(record, done, policy=Policy.ONE_POOL)
    assert (seen.finished, seen.succeeded, seen.gone) == (True, True, False)
    assert slurm_seen(record, Snapshot(slurm={"7": ("COMPLETED", 0)}), policy=Policy.ONE_POOL).gone
    # In the split Slurm runs it on its own nodes: admitted when it runs, its nodes free when it ends.
    split = slurm_seen(record, Snapshot(slurm={"7": ("RUNNING", 0)}), policy=Policy.STATIC_SPLIT)
    assert (split.admitted, split.running, split.gone) == (True, True, False)
    assert slurm_seen(record, done, policy=Policy.STATIC_SPLIT).gone


def test_a_failed_ray_job_is_a_preemption_until_its_last_attempt() -> None:
    record = Record("r", JobClass.RAY, 1, 5.0, 0.0, submitted=0.0, ident="r-a1")
    rayjob = {"metadata": {"name": "r-a1", "uid": "u1"}, "status": {"jobStatus": "FAILED"}}
    snap = Snapshot(rayjobs={"r-a1": rayjob}, ray_jobsets={"u1": False}, ray_busy={"u1"})
    seen, uid = ray_seen(record, snap, uid=None, attempts=1)
    assert seen.preempted
    assert uid == "u1"
    last, _ = ray_seen(record, snap, uid=None, attempts=MAX_RAY_ATTEMPTS)
    assert (last.finished, last.succeeded, last.preempted) == (True, False, False)
    rayjob["status"] = {"jobStatus": "RUNNING"}
    seen, _ = ray_seen(record, snap, uid=None, attempts=1)
    assert (seen.admitted, seen.running) == (True, True)
    # Deleted, its workers still there: not gone until they are.
    record.finished = 9.0
    assert not ray_seen(record, Snapshot(ray_busy={"u1"}), uid="u1", attempts=1)[0].gone
    assert ray_seen(record, Snapshot(), uid="u1", attempts=1)[0].gone
