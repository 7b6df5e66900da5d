"""What the real run submits: the simulator's workload for a trace slice, cut to what the stack can run.

The classes, their scaling and their sources are :mod:`poolsim.workload`'s (the same function builds
the simulator's jobs), so the real run and the simulator replay one workload. Two cuts are the real
run's own, both recorded in its results: run times are capped (``max_runtime``: a trace job of many
hours would otherwise set the makespan alone), and at most ``max_ray_jobs`` Ray jobs are kept (each
is a real Ray worker process joining a real head, the heaviest thing the 2-core machine runs).
Everything here is a pure function of the parameters.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from poolsim import swf, workload
from poolsim.workload import DAY, Job, JobClass

EXPERIMENT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = EXPERIMENT / "data" / "NASA-iPSC-1993-3.1-cln.swf.gz"


class Policy(StrEnum):
    STATIC_SPLIT = "static-split"
    ONE_POOL = "one-pool"


@dataclass(frozen=True, kw_only=True)
class RealParams:
    """The real run's slice, compression and pool size (the defaults: about 5 minutes per policy)."""

    trace: Path = DEFAULT_TRACE
    start_day: float = 10.375
    """The slice's first trace day; its fraction is the time of day (0.375: 09:00), where the
    inference curve starts."""
    days: float = 0.125
    compression: float = 60.0
    slurm_nodes: int = 4
    kube_nodes: int = 4
    min_runtime: float = 2.0
    max_runtime: float = 150.0
    max_ray_jobs: int = 2
    max_slurm_jobs: int | None = None
    """Keep only the first this many Slurm jobs of the slice (None: all): for a smoke run."""
    max_batch_jobs: int | None = None
    seed: int = 2

    @property
    def horizon(self) -> float:
        """Compressed seconds the slice spans (submissions and the inference curve)."""
        return self.days * DAY / self.compression

    def workload_params(self) -> workload.WorkloadParams:
        return workload.WorkloadParams(
            slurm_nodes=self.slurm_nodes,
            kube_nodes=self.kube_nodes,
            start_day=self.start_day,
            days=self.days,
            compression=self.compression,
            min_runtime=self.min_runtime,
            seed=self.seed,
        )

    def as_dict(self) -> dict[str, object]:
        return {k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(self).items()}


@dataclass(frozen=True)
class Plan:
    """Jobs to submit (Slurm, batch, Ray; by submit time) and the inference Deployment's replica steps."""

    jobs: tuple[Job, ...]
    replicas: tuple[tuple[float, int], ...]
    inference: tuple[Job, ...]
    """The simulator's view of the replica steps: each replica index's stretch as one job."""

    def of(self, kind: JobClass) -> list[Job]:
        return [job for job in self.jobs if job.kind is kind]


def _capped(job: Job, cap: float) -> Job:
    runtime = min(job.runtime, cap)
    return dataclasses.replace(job, runtime=runtime, estimate=min(job.estimate, cap))


def _first(jobs: list[Job], count: int | None) -> list[Job]:
    return jobs if count is None else jobs[:count]


def build(params: RealParams, trace_jobs: list[swf.SwfJob] | None = None) -> Plan:
    """The plan for ``params`` (the trace read from ``params.trace`` unless given)."""
    if trace_jobs is None:
        trace_jobs = list(swf.replayable(swf.parse(swf.read_lines(params.trace))).jobs)
    wanted = params.workload_params()
    horizon = params.horizon
    slurm = _first(workload.slurm_jobs(trace_jobs, wanted), params.max_slurm_jobs)
    batch = workload.synthetic_stream(
        kind=JobClass.BATCH, stream=wanted.batch, params=wanted, horizon=horizon
    )
    ray = workload.synthetic_stream(kind=JobClass.RAY, stream=wanted.ray, params=wanted, horizon=horizon)
    jobs = [
        _capped(job, params.max_runtime)
        for job in (*slurm, *_first(batch, params.max_batch_jobs), *ray[: params.max_ray_jobs])
    ]
    return Plan(
        jobs=tuple(sorted(jobs, key=lambda job: (job.submit, job.name))),
        replicas=tuple(workload.replica_schedule(wanted, horizon=horizon)),
        inference=tuple(workload.inference_jobs(wanted, horizon=horizon)),
    )
