"""poolsim.sim: its invariants on random workloads (hypothesis), and the schedulers' rules on small cases.

Invariants, for both policies and both Kueue strategies: no partition is ever allocated beyond its
nodes (checked from each job's own holdings, not the simulator's counters), every job completes
exactly once and nothing is lost, and EASY backfill never starts a job after the reservation it was
promised as the first waiting job.
"""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st
from poolsim import metrics, sim
from poolsim.sim import Calibration, Strategy
from poolsim.workload import Job, JobClass

SLURM_NODES, KUBE_NODES = 6, 4
FREE = Calibration(
    pod_start=0, slurm_native_start=0, slurmd_registration=0, release=0, cleanup=0, ray_worker_join=0
)
PRIORITY = {JobClass.SLURM: 100, JobClass.BATCH: 50, JobClass.RAY: 100, JobClass.INFERENCE: 1000}


def job(
    name: str, kind: JobClass, submit: float, nodes: int, runtime: float, *, estimate: float | None = None
) -> Job:
    return Job(name, kind, submit, nodes, runtime, runtime if estimate is None else estimate, PRIORITY[kind])


@st.composite
def workloads(draw: st.DrawFn) -> list[Job]:
    count = draw(st.integers(min_value=1, max_value=25))
    jobs = []
    for i in range(count):
        kind = draw(st.sampled_from(list(JobClass)))
        limit = SLURM_NODES if kind is JobClass.SLURM else KUBE_NODES
        submit = float(draw(st.integers(min_value=0, max_value=60)))
        runtime = float(draw(st.integers(min_value=1, max_value=40)))
        factor = draw(st.sampled_from([1.0, 1.0, 1.5, 3.0]))
        nodes = draw(st.integers(min_value=1, max_value=limit))
        until = submit + runtime if kind is JobClass.INFERENCE else None
        jobs.append(Job(f"j{i}", kind, submit, nodes, runtime, runtime * factor, PRIORITY[kind], until))
    return jobs


calibrations = st.builds(
    Calibration,
    pod_start=st.sampled_from([0.0, 1.0]),
    slurm_native_start=st.sampled_from([0.0, 0.5]),
    slurmd_registration=st.sampled_from([0.0, 3.0]),
    release=st.sampled_from([0.0, 0.7]),
    cleanup=st.sampled_from([0.0, 2.0]),
    ray_worker_join=st.sampled_from([0.0, 2.75]),
)


def peak_allocation(result: sim.Result) -> dict[str, int]:
    """The most nodes each partition held at once, from each job's holdings alone."""
    edges: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for record in result.records.values():
        for begin, end in record.spans:
            assert end >= begin
            edges[record.partition] += [(begin, record.job.nodes), (end, -record.job.nodes)]
    peaks = {}
    for name, points in edges.items():
        held = peak = 0
        for _, delta in sorted(points, key=lambda p: (p[0], p[1])):  # a release before a start at one time
            held += delta
            peak = max(peak, held)
        peaks[name] = peak
    return peaks


@settings(max_examples=150, deadline=None)
@given(jobs=workloads(), calibration=calibrations, strategy=st.sampled_from(list(Strategy)))
def test_invariants(jobs: list[Job], calibration: Calibration, strategy: Strategy) -> None:
    for make in (sim.static_split, sim.one_pool):
        policy = make(
            slurm_nodes=SLURM_NODES, kube_nodes=KUBE_NODES, calibration=calibration, strategy=strategy
        )
        result = sim.simulate(policy=policy, jobs=jobs)
        capacity = {p.name: p.nodes for p in policy.partitions}
        for name, peak in peak_allocation(result).items():
            assert peak <= capacity[name], (policy.name, name, peak)
        for sample in result.samples:
            assert all(0 <= a <= c for a, c in zip(sample.allocated, capacity.values(), strict=True))
        assert metrics.jobs_lost(result) == []
        assert metrics.summarise(result).jobs_lost == 0
        for record in result.records.values():
            assert record.completions == 1
            assert record.admissions == record.preemptions + 1
            assert len(record.spans) == record.admissions
            assert record.running is not None
            assert record.released is not None
            assert record.finished is not None
            assert record.released >= record.finished >= record.running >= record.job.submit
            if record.reservation is not None:
                assert record.running - policy.overheads[record.job.kind].start <= record.reservation + 1e-6
            if record.job.kind is JobClass.INFERENCE:
                assert record.preemptions == 0  # nothing outranks it
        last = result.samples[-1]
        assert sum(last.allocated) == 0
        assert last.pending == 0


@settings(max_examples=50, deadline=None)
@given(jobs=workloads(), strategy=st.sampled_from(list(Strategy)))
def test_deterministic(jobs: list[Job], strategy: Strategy) -> None:
    policy = sim.one_pool(slurm_nodes=SLURM_NODES, kube_nodes=KUBE_NODES, calibration=FREE, strategy=strategy)
    first = sim.simulate(policy=policy, jobs=jobs)
    second = sim.simulate(policy=policy, jobs=list(reversed(jobs)))
    assert metrics.summarise(first) == metrics.summarise(second)


def _split(strategy: Strategy = Strategy.BEST_EFFORT_FIFO, calibration: Calibration = FREE) -> sim.Policy:
    return sim.static_split(
        slurm_nodes=SLURM_NODES, kube_nodes=KUBE_NODES, calibration=calibration, strategy=strategy
    )


def test_easy_backfills_a_job_that_ends_before_the_reservation() -> None:
    jobs = [
        job("a", JobClass.SLURM, 0, 4, 10),
        job("head", JobClass.SLURM, 1, 6, 5),  # must wait for a: reserved at 10
        job("short", JobClass.SLURM, 2, 2, 8),  # ends at 10: backfilled
        job("long", JobClass.SLURM, 3, 2, 30),  # would end at 33 on the head's nodes: waits
    ]
    records = sim.simulate(policy=_split(), jobs=jobs).records
    assert records["head"].reservation == 10
    assert records["short"].running == 2
    assert records["head"].running == 10
    assert records["long"].running == 15


def test_easy_backfills_on_nodes_the_reservation_leaves_over() -> None:
    jobs = [
        job("a", JobClass.SLURM, 0, 3, 10),
        job("head", JobClass.SLURM, 1, 4, 5),  # at 10: 6 free, 2 left over
        job("wide", JobClass.SLURM, 2, 3, 50),  # 3 > 2 left over: waits
        job("narrow", JobClass.SLURM, 3, 2, 50),  # fits the 2 left over: starts now
    ]
    records = sim.simulate(policy=_split(), jobs=jobs).records
    assert records["narrow"].running == 3
    assert records["head"].running == 10
    assert records["wide"].running == 15  # when the head ends (narrow holds 2 nodes until 53)


def test_easy_plans_with_the_time_limit() -> None:
    jobs = [
        job("a", JobClass.SLURM, 0, 4, 10, estimate=20),  # limit 20: the head is promised 20
        job("head", JobClass.SLURM, 1, 6, 5),
        job("short", JobClass.SLURM, 2, 2, 15),  # ends at 17 <= 20: backfilled
    ]
    records = sim.simulate(policy=_split(), jobs=jobs).records
    assert records["head"].reservation == 20
    assert records["short"].running == 2
    assert records["head"].running == 17  # a ended at 10, short at 17: earlier than promised


def test_inference_preempts_the_lowest_priority_most_recent() -> None:
    jobs = [
        job("ray", JobClass.RAY, 0, 2, 100),
        job("batch-old", JobClass.BATCH, 1, 1, 100),
        job("batch-new", JobClass.BATCH, 2, 1, 100),
        Job("serve", JobClass.INFERENCE, 5, 1, 10, 10, 1000, until=15),
    ]
    result = sim.simulate(policy=_split(), jobs=jobs)
    records = result.records
    assert records["serve"].running == 5
    assert records["batch-new"].preemptions == 1
    assert records["batch-new"].wasted_node_seconds == 3
    assert records["batch-new"].running == 15  # back when serve's replica goes
    assert records["batch-old"].preemptions == records["ray"].preemptions == 0
    assert result.preemptions == 1


def test_best_effort_admits_past_a_workload_that_does_not_fit_strict_does_not() -> None:
    jobs = [
        job("a", JobClass.BATCH, 0, 3, 10),
        job("big", JobClass.BATCH, 1, 4, 10),
        job("small", JobClass.BATCH, 2, 1, 10),
    ]
    best = sim.simulate(policy=_split(), jobs=jobs).records
    assert best["small"].running == 2
    assert best["big"].running == 12
    strict = sim.simulate(policy=_split(Strategy.STRICT_FIFO), jobs=jobs).records
    assert strict["big"].running == 10
    assert strict["small"].running == 20


def test_one_pool_lends_idle_slurm_nodes_and_charges_the_bridge() -> None:
    calibration = Calibration(pod_start=0, slurm_native_start=0, slurmd_registration=3, release=1, cleanup=2)
    jobs = [
        job("b1", JobClass.BATCH, 0, 4, 10),
        job("b2", JobClass.BATCH, 0, 4, 10),
        job("s", JobClass.SLURM, 1, 2, 5),
    ]
    split = sim.simulate(policy=_split(calibration=calibration), jobs=jobs).records
    assert split["b2"].running == 10  # the Slurm side's 6 nodes idle meanwhile
    pool = sim.simulate(
        policy=sim.one_pool(
            slurm_nodes=SLURM_NODES,
            kube_nodes=KUBE_NODES,
            calibration=calibration,
            strategy=Strategy.BEST_EFFORT_FIFO,
        ),
        jobs=jobs,
    ).records
    assert pool["b2"].running == 0
    assert pool["s"].running == 1 + 3 + 1  # registration and release before it runs
    assert pool["s"].released == 5 + 5 + 2  # cleanup after it


def test_a_job_larger_than_its_partition_counts_as_lost() -> None:
    result = sim.simulate(policy=_split(), jobs=[job("huge", JobClass.BATCH, 0, KUBE_NODES + 1, 1)])
    assert result.unschedulable == ["huge"]
    assert metrics.summarise(result).jobs_lost == 1
