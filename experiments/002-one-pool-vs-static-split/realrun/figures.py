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

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from poolsim import metrics, sim
from poolsim.workload import Job, JobClass

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
    """Median submitted -> admitted of the jobs that found quota free (no wait for others)."""


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _differences(records: Sequence[Record], first: str, second: str) -> list[float]:
    out = []
    for record in records:
        a, b = getattr(record, first), getattr(record, second)
        if a is not None and b is not None:
            out.append(b - a)
    return out


def class_rows(records: Sequence[Record]) -> list[ClassRow]:
    rows = []
    for kind in JobClass:
        mine = [r for r in records if r.kind is kind]
        if not mine:
            continue
        waits = [w for r in mine if r.completions == 1 and (w := r.wait) is not None]
        admissions = _differences(mine, "submitted", "admitted")
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
                admission=min(admissions, default=float("nan")),
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
    records: Sequence[Record], *, policy: Policy, bucket: float
) -> list[tuple[float, dict[str, float]]]:
    """(bucket start, nodes held on average in the bucket per class) over the run."""
    end = makespan(records)
    buckets = max(1, int(end // bucket) + 1)
    series: list[tuple[float, dict[str, float]]] = []
    for index in range(buckets):
        low, high = index * bucket, (index + 1) * bucket
        held: dict[str, float] = {kind.value: 0.0 for kind in JobClass}
        for record in records:
            for a, b in held_spans(record, policy):
                overlap = min(b, high) - max(a, low)
                if overlap > 0:
                    held[record.kind.value] += record.nodes * overlap / bucket
        series.append((low, held))
    return series


def utilisation(records: Sequence[Record], *, policy: Policy, capacity: int) -> float:
    """Node-seconds held / (capacity x makespan)."""
    total = sum(r.nodes * (b - a) for r in records for a, b in held_spans(r, policy))
    span = makespan(records)
    return total / (capacity * span) if span > 0 else float("nan")


def calibration(records: Sequence[Record], *, policy: Policy) -> sim.Calibration:
    """The simulator's overheads from what was measured in this run (defaults where nothing was)."""
    rows = {row.kind: row for row in class_rows(records)}
    default = sim.Calibration()

    def measured(kind: JobClass, field: str, fallback: float) -> float:
        row = rows.get(kind)
        value = getattr(row, field) if row is not None else float("nan")
        return fallback if value != value else float(value)  # NaN: nothing measured

    slurm = [r for r in records if r.kind is JobClass.SLURM]
    native = min(_differences(slurm, "submitted", "running"), default=default.slurm_native_start)
    return sim.Calibration(
        pod_start=measured(JobClass.BATCH, "start_overhead", default.pod_start),
        slurm_native_start=native if policy is Policy.STATIC_SPLIT else default.slurm_native_start,
        slurmd_registration=measured(JobClass.SLURM, "start_overhead", default.slurmd_registration)
        if policy is Policy.ONE_POOL
        else default.slurmd_registration,
        release=0.0 if policy is Policy.ONE_POOL else default.release,
        cleanup=measured(JobClass.SLURM, "end_overhead", default.cleanup)
        if policy is Policy.ONE_POOL
        else default.cleanup,
        ray_worker_join=measured(JobClass.RAY, "start_overhead", default.ray_worker_join),
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


def simulate(
    records: Sequence[Record], plan: Plan, *, policy: Policy, slurm_nodes: int, kube_nodes: int
) -> sim.Result:
    build = sim.static_split if policy is Policy.STATIC_SPLIT else sim.one_pool
    chosen = build(
        slurm_nodes=slurm_nodes,
        kube_nodes=kube_nodes,
        calibration=calibration(records, policy=policy),
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


def compare(records: Sequence[Record], result: sim.Result) -> list[Comparison]:
    simulated = metrics.summarise(result)
    by_kind = {row.kind: row for row in simulated.classes}
    rows = []
    for row in class_rows(records):
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
