"""The real run's figures from its records, and the simulator run on the same jobs with the overheads
measured, for the difference between the two. Pure: records in, numbers out.

- **wait**: submitted -> running (the work started), as the simulator's;
- **utilisation over time**: the quota held (every span admitted -> cleaned up; for a Slurm job of
  the split, running -> finished) per class, in buckets, as a share of the policy's nodes;
- **overheads**: per class, the median of admitted -> running (pod start; for a bridged Slurm job
  slurmd registration and the release; for a Ray job the worker joining) and of finished -> cleaned
  up, which calibrate the simulator (:func:`calibration`);
- **jobs lost**: planned jobs that did not complete exactly once.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from poolsim import metrics, sim
from poolsim.workload import KUBE_CLASSES, Job, JobClass

from realrun.plan import Plan, Policy
from realrun.records import Record


@dataclass(frozen=True)
class ClassRow:
    kind: JobClass
    jobs: int
    completed: int
    wait_p50: float
    wait_p95: float
    wait_max: float
    preemptions: int
    start_overhead: float
    end_overhead: float
    admission: float
    """Median submitted -> admitted of the jobs that found room in their partition when submitted
    (no wait for others): the admission latency (for the split's Slurm jobs, admitted = running:
    Slurm's own start latency)."""


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _differences(records: Sequence[Record], first: str, second: str) -> list[float]:
    out = []
    for record in records:
        a, b = getattr(record, first), getattr(record, second)
        if a is not None and b is not None:
            out.append(b - a)
    return out


@dataclass(frozen=True)
class Setup:
    """A policy on a pool size: its partitions (the split's Slurm side and Kubernetes ClusterQueue,
    or the one pool's ClusterQueue), each as (nodes, classes)."""

    policy: Policy
    slurm_nodes: int
    kube_nodes: int

    @property
    def capacity(self) -> int:
        return self.slurm_nodes + self.kube_nodes

    def partition_of(self, kind: JobClass) -> tuple[int, frozenset[JobClass]]:
        if self.policy is Policy.ONE_POOL:
            return self.capacity, frozenset(JobClass)
        if kind is JobClass.SLURM:
            return self.slurm_nodes, frozenset({JobClass.SLURM})
        return self.kube_nodes, frozenset(KUBE_CLASSES)


def found_room(record: Record, records: Sequence[Record], setup: Setup) -> bool:
    """Whether its partition had room for ``record`` when it was submitted: the nodes the others held
    then, and those of the others submitted before it and still waiting, left room for it."""
    if record.submitted is None:
        return False
    t = record.submitted
    nodes, classes = setup.partition_of(record.kind)
    others = [other for other in records if other is not record and other.kind in classes]
    held = sum(other.nodes for other in others for a, b in held_spans(other, setup.policy) if a <= t < b)
    ahead = sum(
        other.nodes
        for other in others
        if other.submitted is not None
        and other.submitted <= t
        and not any(a <= t for a, _ in held_spans(other, setup.policy))
    )
    return held + ahead + record.nodes <= nodes


def class_rows(records: Sequence[Record], setup: Setup) -> list[ClassRow]:
    rows = []
    for kind in JobClass:
        mine = [r for r in records if r.kind is kind]
        if not mine:
            continue
        waits = [w for r in mine if r.completions == 1 and (w := r.wait) is not None]
        rows.append(
            ClassRow(
                kind=kind,
                jobs=len(mine),
                completed=sum(1 for r in mine if r.completions == 1),
                wait_p50=metrics.percentile(waits, 50),
                wait_p95=metrics.percentile(waits, 95),
                wait_max=max(waits, default=float("nan")),
                preemptions=sum(r.preemptions for r in mine),
                start_overhead=_median(_differences(mine, "admitted", "running")),
                end_overhead=_median(_differences(mine, "finished", "cleaned")),
                admission=_median(
                    [
                        r.admitted - r.submitted
                        for r in mine
                        if r.admitted is not None
                        and r.submitted is not None
                        and found_room(r, records, setup)
                    ]
                ),
            )
        )
    return rows


def jobs_lost(records: Sequence[Record]) -> list[str]:
    return sorted(r.name for r in records if r.completions != 1)


def makespan(records: Sequence[Record]) -> float:
    starts = [r.submitted for r in records if r.submitted is not None]
    ends = [t for r in records for t in (r.cleaned, r.finished) if t is not None]
    return max(ends, default=0.0) - min(starts, default=0.0)


def held_spans(record: Record, policy: Policy) -> list[tuple[float, float]]:
    """When the job held quota: its spans; a Slurm job of the split holds nodes while it runs."""
    if policy is Policy.STATIC_SPLIT and record.kind is JobClass.SLURM:
        if record.running is not None and record.finished is not None:
            return [(record.running, record.finished)]
        return []
    return list(record.spans)


def utilisation_series(
    records: Sequence[Record], *, setup: Setup, bucket: float
) -> list[tuple[float, dict[str, float]]]:
    """(bucket start, nodes held on average in the bucket per class) over the run."""
    end = makespan(records)
    buckets = max(1, int(end // bucket) + 1)
    series: list[tuple[float, dict[str, float]]] = []
    for index in range(buckets):
        low, high = index * bucket, (index + 1) * bucket
        held: dict[str, float] = {kind.value: 0.0 for kind in JobClass}
        for record in records:
            for a, b in held_spans(record, setup.policy):
                overlap = min(b, high) - max(a, low)
                if overlap > 0:
                    held[record.kind.value] += record.nodes * overlap / bucket
        series.append((low, held))
    return series


def utilisation(records: Sequence[Record], *, setup: Setup) -> float:
    """Node-seconds held / (capacity x makespan)."""
    total = sum(r.nodes * (b - a) for r in records for a, b in held_spans(r, setup.policy))
    span = makespan(records)
    return total / (setup.capacity * span) if span > 0 else float("nan")


def calibration(records: Sequence[Record], *, setup: Setup) -> sim.Calibration:
    """The simulator's overheads from what was measured in this run (its defaults where nothing was):
    the admission latencies, the start overheads (admitted -> running) and the bridged Slurm job's
    cleanup."""
    rows = {row.kind: row for row in class_rows(records, setup)}
    default = sim.Calibration()

    def measured(kind: JobClass, name: str, fallback: float) -> float:
        row = rows.get(kind)
        value = float(getattr(row, name)) if row is not None else math.nan
        return fallback if math.isnan(value) else value

    pool = setup.policy is Policy.ONE_POOL
    slurm_admission = measured(JobClass.SLURM, "admission", math.nan)
    return sim.Calibration(
        pod_start=measured(JobClass.BATCH, "start_overhead", default.pod_start),
        slurm_native_start=default.slurm_native_start
        if pool or math.isnan(slurm_admission)
        else slurm_admission,
        slurmd_registration=measured(JobClass.SLURM, "start_overhead", default.slurmd_registration)
        if pool
        else default.slurmd_registration,
        release=0.0 if pool else default.release,
        cleanup=measured(JobClass.SLURM, "end_overhead", default.cleanup) if pool else default.cleanup,
        ray_worker_join=measured(JobClass.RAY, "start_overhead", default.ray_worker_join),
        kube_admission=measured(JobClass.BATCH, "admission", default.kube_admission),
        bridge_admission=default.bridge_admission
        if not pool or math.isnan(slurm_admission)
        else slurm_admission,
    )


def replayed_jobs(records: Sequence[Record], plan: Plan) -> list[Job]:
    """The jobs as they really went: submitted when the driver submitted them, for as long as they
    ran; inference as planned (a replica index per stretch)."""
    planned = {job.name: job for job in plan.jobs}
    jobs = []
    for record in records:
        job = planned.get(record.name)
        if job is None:
            continue
        ran = (record.finished - record.running) if record.finished and record.running else job.runtime
        jobs.append(
            Job(
                name=job.name,
                kind=job.kind,
                submit=record.submitted if record.submitted is not None else job.submit,
                nodes=job.nodes,
                runtime=ran,
                estimate=ran,
                priority=job.priority,
            )
        )
    return sorted([*jobs, *plan.inference], key=lambda job: (job.submit, job.name))


def simulate(records: Sequence[Record], plan: Plan, *, setup: Setup) -> sim.Result:
    build = sim.static_split if setup.policy is Policy.STATIC_SPLIT else sim.one_pool
    chosen = build(
        slurm_nodes=setup.slurm_nodes,
        kube_nodes=setup.kube_nodes,
        calibration=calibration(records, setup=setup),
        strategy=sim.Strategy.BEST_EFFORT_FIFO,
    )
    return sim.simulate(policy=chosen, jobs=replayed_jobs(records, plan))


@dataclass(frozen=True)
class Comparison:
    kind: JobClass
    real_p50: float
    sim_p50: float
    real_p95: float
    sim_p95: float
    mean_abs_difference: float
    """Mean over the jobs of |real wait - simulated wait| (inference: of the class's p50 instead)."""


def compare(records: Sequence[Record], result: sim.Result, *, setup: Setup) -> list[Comparison]:
    simulated = metrics.summarise(result)
    by_kind = {row.kind: row for row in simulated.classes}
    rows = []
    for row in class_rows(records, setup):
        other = by_kind.get(row.kind)
        if other is None:
            continue
        pairs = [
            (wait, sim_wait)
            for r in records
            if r.kind is row.kind
            and (wait := r.wait) is not None
            and (simulated_record := result.records.get(r.name)) is not None
            and (sim_wait := simulated_record.wait) is not None
        ]
        difference = (
            statistics.mean(abs(a - b) for a, b in pairs) if pairs else abs(row.wait_p50 - other.wait_p50)
        )
        rows.append(
            Comparison(
                kind=row.kind,
                real_p50=row.wait_p50,
                sim_p50=other.wait_p50,
                real_p95=row.wait_p95,
                sim_p95=other.wait_p95,
                mean_abs_difference=difference,
            )
        )
    return rows
