"""Slurm's own share of the release latency: pin-and-release call -> job RUNNING, polled every 20 ms.

No Kubernetes and no bridge: one real Slurm cluster of the local stack (``bridge.sandbox.slurm``),
``--nodes`` dynamic slurmd in network namespaces, ``--jobs`` held 1-CPU jobs that run long (so no job
ends during the stream: an ending job's epilog makes slurmctld schedule at once and would hide the
delay under test). The jobs are released one after another, each pinned to a node in the same REST
call the bridge makes (v0.0.38 ``nodelist``, v0.0.40+ ``required_nodes``), with a random gap between
releases (``--gap-min``..``--gap-max`` s, so the releases fall at every phase of slurmctld's
once-a-second background loop). A poller reads ``GET job/{id}`` for every released job not yet seen
running, one round every ``--poll`` s (plus the time the reads take); the figure per job is from the
release call's answer to the first read that shows it RUNNING.

    flock /tmp/k8s-bridge-heavy.lock python experiments/001-slurm-bridge-throughput/release_probe.py \\
        --slurm 22.05 --params '' --out /tmp/probe.json       # Slurm's defaults
    ... --params batch_sched_delay=0                            # the candidate

Prints p50 / p99 / max and writes the per-job figures as JSON (``--out``). Needs root (the stack does).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from bridge.sandbox.slurm import VERSIONS, SlurmCluster


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


def summary(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "p50": round(percentile(values, 50), 3),
        "p90": round(percentile(values, 90), 3),
        "p99": round(percentile(values, 99), 3),
        "max": round(max(values), 3),
        "min": round(min(values), 3),
    }


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _states(job: dict[str, Any]) -> set[str]:
    state = job["job_state"]
    return {state} if isinstance(state, str) else set(state)


async def probe(cluster: SlurmCluster, args: argparse.Namespace) -> dict[str, Any]:
    legacy = cluster.rest_version == "v0.0.38"
    base = f"{cluster.rest_url}/slurm/{cluster.rest_version}"
    headers = {"X-SLURM-USER-NAME": "slurm", "X-SLURM-USER-TOKEN": cluster.token(lifespan=3600)}
    names = [f"p{i}" for i in range(args.nodes)]
    for name in names:
        cluster.start_dynamic_node(name, cpus=args.cpus, memory_mb=100 * args.cpus + 100)
    script = f"#!/bin/sh\nsleep {args.job_seconds}\n"
    ids = [cluster.sbatch("-N1", "-n1", "--mem=100", "--time=30", script=script) for _ in range(args.jobs)]
    await asyncio.sleep(args.settle)

    released: dict[int, float] = {}
    sent: dict[int, float] = {}
    running: dict[int, float] = {}
    start_time: dict[int, int] = {}
    rounds = 0
    rng = random.Random(args.seed)

    async with aiohttp.ClientSession(headers=headers, timeout=aiohttp.ClientTimeout(total=30)) as session:

        async def call(method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
            async with session.request(method, f"{base}/{path}", json=body) as reply:
                data: dict[str, Any] = await reply.json(content_type=None)
                if reply.status != 200 or data.get("errors"):
                    raise RuntimeError(f"{method} {path}: HTTP {reply.status} {data.get('errors')}")
                return data

        async def poller(done: asyncio.Event) -> None:
            nonlocal rounds
            while not (done.is_set() and released.keys() <= running.keys()):
                waiting = [j for j in released if j not in running]
                for job_id in waiting:
                    job = (await call("GET", f"job/{job_id}"))["jobs"][0]
                    if _states(job) & {"RUNNING", "COMPLETING", "COMPLETED"}:
                        running[job_id] = time.monotonic()
                        raw = job.get("start_time")
                        start_time[job_id] = int(raw["number"] if isinstance(raw, dict) else raw)
                rounds += 1
                await asyncio.sleep(args.poll)

        done = asyncio.Event()
        poll_task = asyncio.create_task(poller(done))
        load_before = load()
        began = time.monotonic()
        for index, job_id in enumerate(ids):
            node = names[index % len(names)]
            body: dict[str, Any] = {"hold": False}
            body |= {"nodelist": node} if legacy else {"required_nodes": [node]}
            sent[job_id] = time.monotonic()
            await call("POST", f"job/{job_id}", body)
            released[job_id] = time.monotonic()
            await asyncio.sleep(rng.uniform(args.gap_min, args.gap_max))
        done.set()
        await asyncio.wait_for(poll_task, timeout=120)
        seconds = time.monotonic() - began
        wall = time.time() - time.monotonic()  # monotonic -> epoch, for Slurm's start_time
    latencies = [running[j] - released[j] for j in ids]
    return {
        "slurm": cluster.package_version,
        "rest": cluster.rest_version,
        "scheduler_parameters": cluster.scheduler_parameters or "(Slurm defaults)",
        "jobs": args.jobs,
        "nodes": args.nodes,
        "gap_s": [args.gap_min, args.gap_max],
        "poll_s": args.poll,
        "poll_round_s": round(seconds / max(rounds, 1), 4),
        "load_before": load_before,
        "load_after": load(),
        "release_call_s": summary([released[j] - sent[j] for j in ids]),
        "released_to_running_s": summary(latencies),
        "slurm_start_time_minus_release_s": summary([start_time[j] - (released[j] + wall) for j in ids]),
        "per_job": [{"job": j, "release_to_running_s": round(running[j] - released[j], 4)} for j in ids],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slurm", choices=VERSIONS, default="22.05")
    parser.add_argument("--params", default="", help="SchedulerParameters ('' = Slurm's defaults)")
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--cpus", type=int, default=12)
    parser.add_argument("--job-seconds", type=int, default=600)
    parser.add_argument("--gap-min", type=float, default=0.1)
    parser.add_argument("--gap-max", type=float, default=0.9)
    parser.add_argument("--poll", type=float, default=0.02)
    parser.add_argument("--settle", type=float, default=4.0)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    cluster = SlurmCluster(version=args.slurm, scheduler_parameters=args.params, max_nodes=64)
    cluster.start()
    try:
        result = asyncio.run(probe(cluster, args))
    finally:
        cluster.stop()
    r = result["released_to_running_s"]
    print(
        f"Slurm {result['slurm']} SchedulerParameters={result['scheduler_parameters']}: release -> RUNNING "
        f"p50 {r['p50']} s  p90 {r['p90']} s  p99 {r['p99']} s  max {r['max']} s  (n={r['n']}; "
        f"poll round {result['poll_round_s']} s; load {result['load_before']} -> {result['load_after']})"
    )
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
