"""The experiment's workload: four classes of jobs on one timeline, every one of them whole nodes.

- **Slurm** jobs come from the trace (a window of days), submit times kept relative to the window's
  start and divided by the time compression, sizes scaled from the trace machine's nodes to the Slurm
  side's (``ceil(procs * slurm_nodes / trace_nodes)``), run times divided by the compression with a
  floor. The trace has no requested times, so the time limit backfill plans with is the run time times
  ``estimate_factor`` (>= 1: a job never outlives its limit).
- **Kubernetes batch** (Jobs/JobSets admitted natively by Kueue) and **Ray** jobs are synthetic:
  Poisson arrivals whose rate gives the offered load asked for, as a fraction of the Kubernetes side's
  nodes; sizes drawn from a few powers of two given as fractions of a 64-node side; run times
  log-normal (median and sigma below, capped) in trace time, then compressed like the trace.
- **Inference**: a Deployment whose desired replicas follow a daily cosine between ``min`` and ``max``
  (fractions of the Kubernetes side, lowest at 04:00, highest at 16:00 trace-local time, the window
  starting at its ``start_day``'s time of day), re-evaluated every ``step`` (trace time). Each
  replica index that is wanted over a stretch of time is one 1-node
  job that must run until the stretch ends (its ``until``), at the highest priority.

Everything is a pure function of its parameters and the seed.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from poolsim.swf import SwfJob

DAY = 86_400.0
HOUR = 3_600.0


class JobClass(StrEnum):
    SLURM = "slurm"
    BATCH = "batch"
    RAY = "ray"
    INFERENCE = "inference"


KUBE_CLASSES = (JobClass.BATCH, JobClass.RAY, JobClass.INFERENCE)


@dataclass(frozen=True)
class Job:
    """A unit of work: ``nodes`` whole nodes for ``runtime`` seconds, or until ``until`` (inference)."""

    name: str
    kind: JobClass
    submit: float
    nodes: int
    runtime: float
    estimate: float
    priority: int
    until: float | None = None


@dataclass(frozen=True)
class StreamParams:
    """A synthetic stream: offered load (fraction of the Kubernetes side), sizes, run times."""

    load: float
    size_fractions: tuple[tuple[float, float], ...]  # (fraction of a 64-node side, weight)
    median_runtime: float  # trace seconds
    sigma: float = 1.0
    max_runtime: float = 12 * HOUR


@dataclass(frozen=True)
class InferenceParams:
    min_fraction: float = 0.10
    max_fraction: float = 0.60
    step: float = HOUR  # trace seconds between re-evaluations of the desired replicas
    peak_hour: float = 16.0


@dataclass(frozen=True)
class Priorities:
    """Kueue WorkloadPriorityClass values per class (the Slurm side of a split ignores them)."""

    inference: int = 1000
    slurm: int = 100
    ray: int = 100
    batch: int = 100

    def of(self, kind: JobClass) -> int:
        return int(getattr(self, kind.value))


@dataclass(frozen=True)
class WorkloadParams:
    slurm_nodes: int = 128
    kube_nodes: int = 64
    trace_nodes: int = 128
    start_day: float = 0.0
    days: float | None = None  # None: to the trace's end
    compression: float = 1.0
    min_runtime: float = 1.0  # seconds, after compression
    estimate_factor: float = 1.0
    seed: int = 2
    batch: StreamParams = field(
        default_factory=lambda: StreamParams(
            load=0.40,
            size_fractions=((1 / 64, 4.0), (2 / 64, 3.0), (4 / 64, 2.0), (8 / 64, 1.0)),
            median_runtime=15 * 60.0,
        )
    )
    ray: StreamParams = field(
        default_factory=lambda: StreamParams(
            load=0.15,
            size_fractions=((1 / 64, 2.0), (2 / 64, 2.0), (4 / 64, 1.0)),
            median_runtime=30 * 60.0,
        )
    )
    inference: InferenceParams = field(default_factory=InferenceParams)
    priorities: Priorities = field(default_factory=Priorities)


def scale_nodes(procs: int, *, target: int, source: int) -> int:
    """Trace processors -> nodes of a side of ``target`` nodes, at least 1 and at most ``target``."""
    return max(1, min(target, math.ceil(procs * target / source - 1e-9)))


def slurm_jobs(trace_jobs: Sequence[SwfJob], params: WorkloadParams) -> list[Job]:
    """The trace window as Slurm jobs (see the module docstring for the scaling)."""
    if not trace_jobs:
        return []
    origin = min(job.submit for job in trace_jobs)
    start = origin + params.start_day * DAY
    end = math.inf if params.days is None else start + params.days * DAY
    jobs: list[Job] = []
    for job in trace_jobs:
        if not start <= job.submit < end:
            continue
        procs = job.procs
        if procs is None or job.run_time is None:
            raise ValueError(f"trace job {job.number} has no size or run time: pass replayable jobs only")
        runtime = max(params.min_runtime, job.run_time / params.compression)
        jobs.append(
            Job(
                name=f"slurm-{job.number}",
                kind=JobClass.SLURM,
                submit=(job.submit - start) / params.compression,
                nodes=scale_nodes(procs, target=params.slurm_nodes, source=params.trace_nodes),
                runtime=runtime,
                estimate=runtime * params.estimate_factor,
                priority=params.priorities.slurm,
            )
        )
    return jobs


def _mean_nodes(stream: StreamParams, kube_nodes: int) -> float:
    total = sum(weight for _, weight in stream.size_fractions)
    return sum(max(1, round(frac * kube_nodes)) * weight for frac, weight in stream.size_fractions) / total


def synthetic_stream(
    *, kind: JobClass, stream: StreamParams, params: WorkloadParams, horizon: float
) -> list[Job]:
    """Poisson arrivals over ``[0, horizon)`` (compressed seconds) at the offered load asked for.

    Each stream draws from a generator of its own (seeded with the seed and the class), so changing
    one stream's parameters leaves the other streams' jobs as they were.
    """
    if stream.load <= 0 or horizon <= 0:
        return []
    rng = random.Random(f"{params.seed}-{kind.value}")
    mu = math.log(stream.median_runtime)
    mean_runtime = stream.median_runtime * math.exp(stream.sigma**2 / 2)
    mean_runtime = min(mean_runtime, stream.max_runtime)
    rate = stream.load * params.kube_nodes / (_mean_nodes(stream, params.kube_nodes) * mean_runtime)
    rate *= params.compression  # per compressed second
    sizes = [max(1, round(frac * params.kube_nodes)) for frac, _ in stream.size_fractions]
    weights = [weight for _, weight in stream.size_fractions]
    jobs: list[Job] = []
    now = rng.expovariate(rate)
    while now < horizon:
        trace_runtime = min(stream.max_runtime, rng.lognormvariate(mu, stream.sigma))
        runtime = max(params.min_runtime, trace_runtime / params.compression)
        jobs.append(
            Job(
                name=f"{kind.value}-{len(jobs)}",
                kind=kind,
                submit=now,
                nodes=rng.choices(sizes, weights)[0],
                runtime=runtime,
                estimate=runtime,
                priority=params.priorities.of(kind),
            )
        )
        now += rng.expovariate(rate)
    return jobs


def desired_replicas(trace_time: float, *, inference: InferenceParams, kube_nodes: int) -> int:
    """The daily curve at a trace time (seconds since the window's start, which is local midnight)."""
    low = inference.min_fraction * kube_nodes
    high = inference.max_fraction * kube_nodes
    phase = 2 * math.pi * ((trace_time / HOUR - inference.peak_hour) / 24.0)
    return round(low + (high - low) * (1 + math.cos(phase)) / 2)


def replica_schedule(params: WorkloadParams, *, horizon: float) -> list[tuple[float, int]]:
    """(compressed time, desired replicas) at every re-evaluation over ``[0, horizon)``. The window's
    start is at its trace-local time of day (``start_day``'s fraction: 0.375 is 09:00)."""
    if params.inference.max_fraction <= 0 or horizon <= 0:
        return []
    step = params.inference.step / params.compression
    time_of_day = (params.start_day % 1.0) * DAY
    return [
        (
            i * step,
            desired_replicas(
                time_of_day + i * params.inference.step,
                inference=params.inference,
                kube_nodes=params.kube_nodes,
            ),
        )
        for i in range(math.ceil(horizon / step))
    ]


def inference_jobs(params: WorkloadParams, *, horizon: float) -> list[Job]:
    """Each replica index wanted over a stretch of steps -> one 1-node job until the stretch ends."""
    step = params.inference.step / params.compression
    schedule = replica_schedule(params, horizon=horizon)
    if not schedule:
        return []
    steps = len(schedule)
    wanted = [replicas for _, replicas in schedule]
    jobs: list[Job] = []
    top = max(wanted)
    for replica in range(top):
        i = 0
        while i < steps:
            if wanted[i] <= replica:
                i += 1
                continue
            first = i
            while i < steps and wanted[i] > replica:
                i += 1
            begin, end = first * step, min(horizon, i * step)
            jobs.append(
                Job(
                    name=f"inference-r{replica}-{len(jobs)}",
                    kind=JobClass.INFERENCE,
                    submit=begin,
                    nodes=1,
                    runtime=end - begin,
                    estimate=end - begin,
                    priority=params.priorities.inference,
                    until=end,
                )
            )
    return jobs


def build(trace_jobs: Sequence[SwfJob], params: WorkloadParams) -> list[Job]:
    """Every class over the window the Slurm slice spans, sorted by submit time then name."""
    slurm = slurm_jobs(trace_jobs, params)
    if params.days is not None:
        horizon = params.days * DAY / params.compression
    else:
        horizon = max((job.submit for job in slurm), default=0.0)
    jobs = [
        *slurm,
        *synthetic_stream(kind=JobClass.BATCH, stream=params.batch, params=params, horizon=horizon),
        *synthetic_stream(kind=JobClass.RAY, stream=params.ray, params=params, horizon=horizon),
        *inference_jobs(params, horizon=horizon),
    ]
    return sorted(jobs, key=lambda job: (job.submit, job.name))
