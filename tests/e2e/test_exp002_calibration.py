"""Experiment 002's real smoke: a NASA trace slice through the bridge calibrates the simulator's overheads.

The first jobs of a trace day, scaled to the e2e stack's quota of two 1-CPU slurmd pods and compressed
(run times of 2 to 8 s), are submitted held at once to the real slurmctld of the ``e2e`` stack; the
bridge turns each into a JobSet, Kueue admits them one quota's worth at a time, the slurmd pods
register, the bridge releases, the jobs run and are cleaned up. One observer loop records, per job,
when it was seen admitted, RUNNING, finished and cleaned up (JobSet, pods and nodes gone). From those:

- the bridged Slurm job's start overhead (admitted -> RUNNING: pod start, slurmd registration, the
  release) and end overhead (finished -> cleaned up), the simulator's ``--slurmd-registration`` +
  ``--release`` and ``--cleanup``;
- the same jobs in the simulator's one pool (2 nodes, those overheads, the observed submit offsets
  and run times), and the difference of each job's wait (submit -> RUNNING) between the two.

It asserts what must hold (each job completes exactly once, nothing is left: the ``e2e`` fixture) and
prints the figures; nothing is asserted about time. ``K8S_BRIDGE_EXP002_RESULTS=<dir>`` also writes
them as JSON there. Only the one pool runs here: the static split of the experiment is simulated only.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from bridge.admission import WorkloadState
from bridge.api.slurm_job import JobState
from bridge.sandbox.e2e import E2EStack
from bridge.slurmrest import SlurmClient
from tests.fixtures.e2e import bridge_ready, eventually, finished, jobset, stack_summary, workload_state_of
from translators.slurm import job_selector, jobset_name

EXPERIMENT = Path(__file__).resolve().parents[2] / "experiments" / "002-one-pool-vs-static-split"
sys.path.insert(0, str(EXPERIMENT))
from poolsim import metrics, sim, swf, workload  # noqa: E402

# One Slurm version: the calibration measures the bridge's overheads for the simulator, and the
# bridge's paths on both versions are the other e2e modules' business.
pytestmark = [
    pytest.mark.slurm,
    pytest.mark.parametrize("slurm_cluster", ["22.05"], indirect=True, ids=["slurm-22.05"]),
]

JOBS = int(os.environ.get("K8S_BRIDGE_EXP002_JOBS", "4"))
START_DAY = 10.0
COMPRESSION = 600.0
TIMEOUT = 150.0 * JOBS


@dataclass
class Seen:
    job_id: int
    nodes: int
    runtime: float
    submitted: float
    admitted: float | None = None
    running: float | None = None
    finished: float | None = None
    gone: float | None = None
    completed: bool = False


def slice_jobs() -> list[workload.Job]:
    trace = swf.parse(swf.read_lines(EXPERIMENT / "data" / "NASA-iPSC-1993-3.1-cln.swf.gz"))
    params = workload.WorkloadParams(
        slurm_nodes=2, start_day=START_DAY, days=1, compression=COMPRESSION, min_runtime=2.0
    )
    return workload.slurm_jobs(swf.replayable(trace).jobs, params)[:JOBS]


async def test_a_trace_slice_through_the_bridge_calibrates_the_simulator(
    e2e: E2EStack, slurm_client: SlurmClient
) -> None:
    jobs = slice_jobs()
    assert len(jobs) == JOBS
    bridge = e2e.bridge().start()
    await eventually(lambda: bridge_ready(bridge), timeout=60, what="the bridge to serve /metrics")
    cluster = e2e.slurm
    seen: list[Seen] = []
    origin = time.monotonic()
    for job in jobs:
        runtime = min(8, round(job.runtime))
        job_id = cluster.sbatch(
            f"-N{job.nodes}", "--ntasks-per-node=1", "--mem=400", "--job-name=exp002",
            script=f"#!/bin/sh\nsleep {runtime:d}\n",
        )  # fmt: skip
        seen.append(Seen(job_id, job.nodes, float(runtime), time.monotonic() - origin))

    async def observe() -> bool:
        now = time.monotonic() - origin
        nodes = set(e2e.slurm_nodes())
        for entry in seen:
            name = jobset_name(e2e.cluster_name, entry.job_id)
            if entry.admitted is None and workload_state_of(e2e, name) in (
                WorkloadState.ADMITTED,
                WorkloadState.FINISHED,
            ):
                entry.admitted = now
            if entry.finished is None:
                state = await slurm_client.get_job(entry.job_id)
                if entry.running is None and (state.is_running or finished(state)):
                    entry.running = now
                if finished(state):
                    entry.finished = now
                    entry.completed = state.state == JobState.COMPLETED and state.restart_count == 0
            elif entry.gone is None:
                mine = {f"b{entry.job_id}-{i}" for i in range(entry.nodes)}
                if (
                    jobset(e2e, name) is None
                    and not e2e.pods(labelSelector=job_selector(e2e.cluster_name, entry.job_id))
                    and not mine & nodes
                ):
                    entry.gone = now
        return all(entry.gone is not None for entry in seen)

    await eventually(
        observe, timeout=TIMEOUT, interval=0.2, what="every job to run, finish and be cleaned up",
        describe=lambda: f"{seen}\n{stack_summary(e2e, bridge=bridge)}",
    )  # fmt: skip
    assert all(entry.completed for entry in seen), seen
    assert bridge.alive(), bridge.log_tail()

    start = [e.running - e.admitted for e in seen if e.running is not None and e.admitted is not None]
    end = [e.gone - e.finished for e in seen if e.gone is not None and e.finished is not None]
    calibration = sim.Calibration(
        slurmd_registration=statistics.median(start), release=0.0, cleanup=statistics.median(end)
    )
    replay = [
        workload.Job(
            name=f"slurm-{e.job_id}",
            kind=workload.JobClass.SLURM,
            submit=e.submitted,
            nodes=e.nodes,
            runtime=(e.finished or 0.0) - (e.running or 0.0),
            estimate=(e.finished or 0.0) - (e.running or 0.0),
            priority=100,
        )
        for e in seen
    ]
    policy = sim.one_pool(
        slurm_nodes=2, kube_nodes=0, calibration=calibration, strategy=sim.Strategy.BEST_EFFORT_FIFO
    )
    result = sim.simulate(policy=policy, jobs=replay)
    assert metrics.jobs_lost(result) == []
    rows = []
    for e in seen:
        simulated = result.records[f"slurm-{e.job_id}"].wait or 0.0
        real = (e.running or 0.0) - e.submitted
        rows.append({"job": e.job_id, "nodes": e.nodes, "real_wait": real, "sim_wait": simulated})
    differences = [abs(float(r["real_wait"]) - float(r["sim_wait"])) for r in rows]
    figures = {
        "slurm_version": cluster.version,
        "jobs": JOBS,
        "admitted_to_running_s": start,
        "finished_to_cleaned_up_s": end,
        "calibrated": {"start": calibration.slurmd_registration, "cleanup": calibration.cleanup},
        "per_job": rows,
        "wait_abs_difference_mean_s": statistics.mean(differences),
        "makespan_real_s": max(e.gone or 0.0 for e in seen),
        "makespan_sim_s": metrics.summarise(result).makespan,
    }
    print(json.dumps(figures, indent=2, default=str))
    results = os.environ.get("K8S_BRIDGE_EXP002_RESULTS")
    if results:
        path = Path(results) / f"calibration-{cluster.version}.json"
        path.write_text(json.dumps(figures, indent=2, default=str) + "\n")
