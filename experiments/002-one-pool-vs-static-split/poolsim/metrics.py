"""A simulation's result -> the experiment's figures: waits per class, utilisation, makespan, losses.

Pure. Percentiles interpolate linearly between order statistics (NumPy's default), so a p95 of a
small class is not one job's value rounded up.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from poolsim.sim import Record, Result, Sample
from poolsim.workload import JobClass


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True)
class ClassFigures:
    kind: JobClass
    jobs: int
    completed: int
    wait_p50: float
    wait_p95: float
    wait_mean: float
    wait_max: float
    preemptions: int
    node_seconds: float  # the work itself (nodes x run time) of completed jobs


@dataclass(frozen=True)
class PartitionFigures:
    name: str
    nodes: int
    allocated: float  # mean share of its nodes allocated
    full: float  # share of the time with every node allocated


@dataclass(frozen=True)
class Summary:
    policy: str
    capacity: int
    makespan: float
    utilisation: float  # allocated node-seconds / (capacity x makespan), overheads included
    useful_utilisation: float  # the work only
    overhead_node_seconds: float
    wasted_node_seconds: float  # work lost to preemption
    idle_while_waiting: float  # node-seconds
    preemptions: int
    jobs_lost: int
    classes: tuple[ClassFigures, ...]
    partitions: tuple[PartitionFigures, ...] = ()


def jobs_lost(result: Result) -> list[str]:
    """A job is lost unless it completed exactly once."""
    return sorted(name for name, record in result.records.items() if record.completions != 1)


def _allocated_node_seconds(samples: Sequence[Sample]) -> float:
    total = 0.0
    for sample, following in itertools.pairwise(samples):
        total += sum(sample.allocated) * (following.time - sample.time)
    return total


def summarise(result: Result) -> Summary:
    records = list(result.records.values())
    start = min((r.job.submit for r in records), default=0.0)
    end = max((r.released for r in records if r.released is not None), default=start)
    makespan = end - start
    capacity = result.capacity
    allocated = _allocated_node_seconds(result.samples)
    useful = sum(r.job.nodes * _work(r) for r in records if r.completions)
    wasted = sum(r.wasted_node_seconds for r in records)
    classes = []
    for kind in JobClass:
        mine = [r for r in records if r.job.kind is kind]
        if not mine:
            continue
        waits = [w for r in mine if r.completions and (w := r.wait) is not None]
        classes.append(
            ClassFigures(
                kind=kind,
                jobs=len(mine),
                completed=sum(1 for r in mine if r.completions == 1),
                wait_p50=percentile(waits, 50),
                wait_p95=percentile(waits, 95),
                wait_mean=sum(waits) / len(waits) if waits else math.nan,
                wait_max=max(waits, default=math.nan),
                preemptions=sum(r.preemptions for r in mine),
                node_seconds=sum(r.job.nodes * _work(r) for r in mine if r.completions),
            )
        )
    denominator = capacity * makespan if makespan > 0 else math.nan
    return Summary(
        policy=result.policy.name,
        capacity=capacity,
        makespan=makespan,
        utilisation=allocated / denominator,
        useful_utilisation=useful / denominator,
        overhead_node_seconds=allocated - useful - wasted,
        wasted_node_seconds=wasted,
        idle_while_waiting=result.idle_while_waiting,
        preemptions=result.preemptions,
        jobs_lost=len(jobs_lost(result)),  # an unschedulable job never completes: counted there
        classes=tuple(classes),
        partitions=_partitions(result),
    )


def _partitions(result: Result) -> tuple[PartitionFigures, ...]:
    samples = result.samples
    span = samples[-1].time - samples[0].time if samples else 0.0
    figures = []
    for i, partition in enumerate(result.policy.partitions):
        held = full = 0.0
        for sample, following in itertools.pairwise(samples):
            held += sample.allocated[i] * (following.time - sample.time)
            if sample.allocated[i] == partition.nodes:
                full += following.time - sample.time
        figures.append(
            PartitionFigures(
                name=partition.name,
                nodes=partition.nodes,
                allocated=held / (partition.nodes * span) if span else math.nan,
                full=full / span if span else math.nan,
            )
        )
    return tuple(figures)


def _work(record: Record) -> float:
    if record.finished is None or record.running is None:
        return 0.0
    return record.finished - record.running


def utilisation_series(result: Result, *, bucket: float) -> list[tuple[float, float, dict[JobClass, float]]]:
    """Per bucket of time: (start, allocated / capacity, per class allocated / capacity)."""
    samples = result.samples
    if len(samples) < 2:
        return []
    origin = samples[0].time
    buckets = math.ceil((samples[-1].time - origin) / bucket) or 1
    total = [0.0] * buckets
    by_class = [[0.0] * len(JobClass) for _ in range(buckets)]
    for sample, following in itertools.pairwise(samples):
        t0, t1 = sample.time, following.time
        while t0 < t1:
            index = min(buckets - 1, int((t0 - origin) // bucket))
            edge = min(t1, origin + (index + 1) * bucket)
            if edge <= t0:
                edge = t1
            span = edge - t0
            total[index] += sum(sample.allocated) * span
            for i, nodes in enumerate(sample.by_class):
                by_class[index][i] += nodes * span
            t0 = edge
    capacity = result.capacity
    series = []
    for index in range(buckets):
        norm = capacity * bucket
        series.append(
            (
                origin + index * bucket,
                total[index] / norm,
                {kind: by_class[index][i] / norm for i, kind in enumerate(JobClass)},
            )
        )
    return series


def partition_series(
    result: Result, *, bucket: float, start: float, end: float
) -> list[tuple[float, tuple[float, ...], float]]:
    """Per bucket over ``[start, end)``: (start, each partition's allocated share, mean pending jobs)."""
    samples = result.samples
    capacities = [p.nodes for p in result.policy.partitions]
    buckets = max(1, math.ceil((end - start) / bucket))
    held = [[0.0] * len(capacities) for _ in range(buckets)]
    pending = [0.0] * buckets
    for sample, following in itertools.pairwise(samples):
        t0, t1 = max(sample.time, start), min(following.time, end)
        while t0 < t1:
            index = min(buckets - 1, int((t0 - start) // bucket))
            edge = min(t1, start + (index + 1) * bucket)
            if edge <= t0:
                edge = t1
            for i, nodes in enumerate(sample.allocated):
                held[index][i] += nodes * (edge - t0)
            pending[index] += sample.pending * (edge - t0)
            t0 = edge
    return [
        (
            start + index * bucket,
            tuple(held[index][i] / (capacities[i] * bucket) for i in range(len(capacities))),
            pending[index] / bucket,
        )
        for index in range(buckets)
    ]
