"""``python -m realrun``: the real run of both policies on the local stack, then the simulator on the
same jobs with the overheads measured; ``results/<name>-run.json`` and ``<name>-summary.md``.

Both policies run one after the other on one stack (Kubernetes, Kueue, JobSet, kwok, KubeRay, Slurm
22.05, the runner's nodes, both bridges' wiring): the static split first (the ClusterQueue's quota is
the Kubernetes side, the Slurm side is static slurmd nodes, the Slurm bridge not running), then the
one pool (the quota is both sides, the Slurm bridge running). ``run real`` beside this package runs
it with the project's environment, then draws the plots (:mod:`realrun.plots`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bridge.sandbox.e2e import wait_for
from bridge.sandbox.netns import existing_namespaces
from realrun.drive import Driver
from realrun.plan import EXPERIMENT, Plan, Policy, RealParams, build
from realrun.report import markdown, summary
from realrun.stack import NAMESPACE, RealStack


def parser() -> argparse.ArgumentParser:
    d = RealParams()
    p = argparse.ArgumentParser(prog="realrun", description=__doc__)
    p.add_argument("--trace", type=Path, default=d.trace)
    p.add_argument(
        "--start-day", type=float, default=d.start_day, help="first trace day (fraction: time of day)"
    )
    p.add_argument("--days", type=float, default=d.days, help="the slice's length in trace days")
    p.add_argument("--compression", type=float, default=d.compression, help="trace seconds per real second")
    p.add_argument("--slurm-nodes", type=int, default=d.slurm_nodes, help="the split's Slurm side")
    p.add_argument("--kube-nodes", type=int, default=d.kube_nodes, help="the split's Kubernetes side")
    p.add_argument("--max-runtime", type=float, default=d.max_runtime, help="cap on a job's run time (s)")
    p.add_argument("--max-ray-jobs", type=int, default=d.max_ray_jobs)
    p.add_argument("--max-slurm-jobs", type=int, default=None)
    p.add_argument("--max-batch-jobs", type=int, default=None)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--policy", action="append", choices=[x.value for x in Policy], help="default: both")
    p.add_argument("--out", type=Path, default=EXPERIMENT / "results")
    p.add_argument("--name", default="real")
    return p


def params_of(args: argparse.Namespace) -> RealParams:
    return RealParams(
        trace=args.trace, start_day=args.start_day, days=args.days, compression=args.compression,
        slurm_nodes=args.slurm_nodes, kube_nodes=args.kube_nodes, max_runtime=args.max_runtime,
        max_ray_jobs=args.max_ray_jobs, max_slurm_jobs=args.max_slurm_jobs,
        max_batch_jobs=args.max_batch_jobs, seed=args.seed,
    )  # fmt: skip


def timeout_for(plan: Plan, params: RealParams) -> float:
    """Generous: the slice, every job's run time one after another on its side, and 15 s per job."""
    work = sum(job.runtime for job in plan.jobs)
    return params.horizon + work + 15.0 * len(plan.jobs) + 300.0


def run_policy(stack: RealStack, plan: Plan, params: RealParams, policy: Policy) -> dict[str, object]:
    """One policy's run on a started stack; its records and what it took."""
    began = time.monotonic()
    bridge = None
    if policy is Policy.STATIC_SPLIT:
        stack.set_quota(params.kube_nodes)
        stack.start_static_slurm()
    else:
        stack.set_quota(params.slurm_nodes + params.kube_nodes)
        bridge = stack.e2e.bridge().start()
        wait_for(
            lambda: bridge.metric("k8s_bridge_slurmrestd_request_duration_seconds_count") > 0,
            timeout=120,
            what="the Slurm bridge to serve /metrics and poll slurmrestd",
        )
    load_before = os.getloadavg()
    driver = Driver(stack, plan, policy=policy, horizon=params.horizon)
    try:
        records = driver.run(timeout=timeout_for(plan, params))
    finally:
        if bridge is not None:
            bridge.stop(grace=5.0)
            stack.e2e.bridges.remove(bridge)
        stack.stop_static_slurm()
    return {
        "records": records,
        "withdrawn_inference_pods": len(driver.withdrawn),
        "polls": driver.polls,
        "seconds": time.monotonic() - began,
        "loadavg_before": list(load_before),
        "loadavg_after": list(os.getloadavg()),
    }


def leaks(stack: RealStack, *, namespaces_before: set[str]) -> list[str]:
    """What a finished policy left: the pool's and Ray's leaks (network namespaces made since
    ``namespaces_before`` included), Jobs and pods of the Kubernetes classes."""
    found = [*stack.e2e.leaks(namespaces_before=namespaces_before), *stack.ray_pool.leaks()]
    for what, path in (("Job", "/apis/batch/v1"), ("Pod", "/api/v1")):
        kind = "jobs" if what == "Job" else "pods"
        found += [
            f"{what} {i['metadata']['name']}"
            for i in stack.e2e.list_items(f"{path}/namespaces/{NAMESPACE}/{kind}")
        ]
    return found


def run(params: RealParams, *, policies: Sequence[Policy], workdir: Path) -> dict[str, Any]:
    plan = build(params)
    outcomes: dict[Policy, dict[str, object]] = {}
    began = time.monotonic()
    with RealStack(workdir=workdir, slurm_nodes=params.slurm_nodes, kube_nodes=params.kube_nodes) as stack:
        started = time.monotonic() - began
        for policy in policies:
            print(
                f"[exp002 real] {policy.value}: {len(plan.jobs)} jobs, {len(plan.replicas)} replica steps",
                flush=True,
            )
            before = set(existing_namespaces())
            outcomes[policy] = run_policy(stack, plan, params, policy)
            left = leaks(stack, namespaces_before=before)
            deadline = time.monotonic() + 90
            while left and time.monotonic() < deadline:
                time.sleep(1.0)
                left = leaks(stack, namespaces_before=before)
            outcomes[policy]["left_behind"] = left
    return summary(params, plan, outcomes, stack_start_seconds=started)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    params = params_of(args)
    policies = [Policy(p) for p in args.policy] if args.policy else list(Policy)
    with tempfile.TemporaryDirectory(prefix="exp002-real-") as tmp:
        result = run(params, policies=policies, workdir=Path(tmp))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}-run.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    table = markdown(result)
    (args.out / f"{args.name}-summary.md").write_text(table)
    print(table)
    policies_run: dict[str, dict[str, Any]] = result["policies"]
    lost = sum(len(p["jobs_lost"]) for p in policies_run.values())
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
