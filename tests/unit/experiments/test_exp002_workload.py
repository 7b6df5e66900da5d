"""poolsim.workload: the trace slice's scaling, the synthetic streams' load, the inference curve."""

from __future__ import annotations

import dataclasses

import pytest
from poolsim import swf, workload
from poolsim.workload import DAY, HOUR, JobClass, WorkloadParams


def _trace_job(number: int, submit: float, run_time: float, procs: int) -> swf.SwfJob:
    line = f"{number} {submit:.0f} -1 {run_time:.0f} {procs} -1 -1 -1 -1 -1 -1 1 1 -1 -1 -1 -1 -1"
    return swf.parse_line(line)


@pytest.mark.parametrize(
    ("procs", "target", "expected"),
    [(128, 128, 128), (1, 128, 1), (1, 8, 1), (16, 8, 1), (17, 8, 2), (64, 8, 4), (128, 8, 8), (128, 4, 4)],
)
def test_scale_nodes(procs: int, target: int, expected: int) -> None:
    assert workload.scale_nodes(procs, target=target, source=128) == expected


def test_slurm_slice_keeps_submit_times_compressed() -> None:
    jobs = [
        _trace_job(1, 0, 1000, 128),
        _trace_job(2, DAY + 100, 50, 32),
        _trace_job(3, DAY + 7200, 10, 1),
        _trace_job(4, 2 * DAY + 1, 99, 4),
    ]
    params = WorkloadParams(slurm_nodes=8, start_day=1, days=1, compression=100, min_runtime=1.0)
    sliced = workload.slurm_jobs(jobs, params)
    assert [j.name for j in sliced] == ["slurm-2", "slurm-3"]
    assert [j.submit for j in sliced] == [1.0, 72.0]
    assert [j.runtime for j in sliced] == [1.0, 1.0]  # 50/100 and 10/100 s, floored at 1 s
    assert [j.nodes for j in sliced] == [2, 1]
    assert all(j.kind is JobClass.SLURM and j.estimate == j.runtime for j in sliced)


def test_estimate_factor_sets_the_time_limit() -> None:
    params = WorkloadParams(estimate_factor=1.5)
    (job,) = workload.slurm_jobs([_trace_job(1, 0, 1000, 8)], params)
    assert job.runtime == 1000
    assert job.estimate == 1500


def test_synthetic_stream_offers_the_load_asked_for() -> None:
    params = WorkloadParams(kube_nodes=64, compression=10)
    horizon = 60 * DAY / params.compression
    jobs = workload.synthetic_stream(kind=JobClass.BATCH, stream=params.batch, params=params, horizon=horizon)
    offered = sum(j.nodes * j.runtime for j in jobs) / (params.kube_nodes * horizon)
    assert offered == pytest.approx(params.batch.load, rel=0.1)
    assert {j.nodes for j in jobs} == {1, 2, 4, 8}
    assert all(0 <= j.submit < horizon for j in jobs)


def test_build_is_a_function_of_the_seed() -> None:
    trace = [_trace_job(i, i * 3000, 600, 2 ** (i % 8)) for i in range(1, 60)]
    params = WorkloadParams(days=2)
    assert workload.build(trace, params) == workload.build(trace, params)
    assert workload.build(trace, params) != workload.build(trace, dataclasses.replace(params, seed=3))


def test_one_stream_does_not_move_another() -> None:
    params = WorkloadParams(days=2)
    busier = dataclasses.replace(params, ray=dataclasses.replace(params.ray, load=0.5))
    batch = [j for j in workload.build([], params) if j.kind is JobClass.BATCH]
    assert batch == [j for j in workload.build([], busier) if j.kind is JobClass.BATCH]


def test_inference_replicas_follow_the_daily_curve() -> None:
    params = WorkloadParams(kube_nodes=20, days=2, compression=60)
    step = params.inference.step / params.compression
    horizon = params.days * DAY / params.compression  # type: ignore[operator]
    jobs = workload.inference_jobs(params, horizon=horizon)
    for i in range(int(horizon / step)):
        at = i * step + step / 2
        active = sum(1 for j in jobs if j.submit <= at < (j.until or 0))
        wanted = workload.desired_replicas(
            i * params.inference.step, inference=params.inference, kube_nodes=20
        )
        assert active == wanted, i
    assert workload.desired_replicas(16 * HOUR, inference=params.inference, kube_nodes=20) == 12
    assert workload.desired_replicas(4 * HOUR, inference=params.inference, kube_nodes=20) == 2
    assert all(j.nodes == 1 and j.priority == params.priorities.inference for j in jobs)
