"""Experiment 002's real run, smoke size: both policies, every workload class, on the real local stack.

A tiny slice of the NASA trace (the first Slurm jobs of the experiment's default slice, a batch Job,
one Ray job, the inference Deployment at its curve's first step) goes through what
``experiments/002-one-pool-vs-static-split/run real`` runs (:mod:`realrun`): first the static split
(Slurm's own static slurmd nodes scheduling natively, the Kubernetes classes in a ClusterQueue of
the Kubernetes side's quota), then the one pool (one ClusterQueue of both sides' quota; Slurm jobs
held and bridged by the Slurm bridge, Ray workers through the Ray bridge, batch and inference pods
on kwok nodes). The stack is the experiment's own (:class:`realrun.stack.RealStack`: a Kubernetes
stack of this module with Kueue's Deployment integration, Slurm 22.05, KubeRay and a Ray head).

Asserted, per policy: every planned job completed exactly once (jobs lost: none), every class was
seen from submission to cleanup, the inference replicas ran, nothing was left behind; in the one
pool the bridged Slurm jobs' start overhead (admission -> RUNNING: pod, slurmd registration, the
release) was measured and the simulator replayed the same jobs with it. Nothing about time is
asserted; the figures are printed (and written with ``K8S_BRIDGE_EXP002_RESULTS=<dir>``).
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import pytest

from bridge.sandbox.build import MissingPrerequisiteError
from bridge.sandbox.processes import StackError

EXPERIMENT = Path(__file__).resolve().parents[2] / "experiments" / "002-one-pool-vs-static-split"
sys.path.insert(0, str(EXPERIMENT))
from realrun.__main__ import run  # noqa: E402
from realrun.plan import Policy, RealParams  # noqa: E402

pytestmark = [pytest.mark.slurm, pytest.mark.ray]

SMOKE = RealParams(days=0.03, max_slurm_jobs=3, max_batch_jobs=2, max_ray_jobs=1, max_runtime=20.0)


def test_both_policies_run_every_class_and_lose_nothing(tmp_path: Path) -> None:
    try:
        result = run(SMOKE, policies=list(Policy), workdir=tmp_path / "stack")
    except MissingPrerequisiteError as missing:
        pytest.fail(f"exp002 stack: missing prerequisite: {missing}", pytrace=False)
    except StackError as failed:
        pytest.fail(f"exp002 stack did not start: {failed}", pytrace=False)
    shown = {k: v for k, v in result.items() if k != "policies"}
    for name, policy in result["policies"].items():
        shown[name] = {k: v for k, v in policy.items() if k not in ("records", "utilisation_series")}
    print(json.dumps(shown, indent=1, default=str))
    if os.environ.get("K8S_BRIDGE_EXP002_RESULTS"):
        Path(os.environ["K8S_BRIDGE_EXP002_RESULTS"], "real-smoke-run.json").write_text(
            json.dumps(result, indent=1, default=str) + "\n"
        )
    assert set(result["policies"]) == {"static-split", "one-pool"}
    for name, policy in result["policies"].items():
        assert policy["jobs_lost"] == [], name
        assert policy["left_behind"] == [], name
        classes = {row["kind"]: row for row in policy["classes"]}
        assert set(classes) == {"slurm", "batch", "ray", "inference"}, name
        for kind in ("slurm", "batch", "ray"):
            assert classes[kind]["jobs"] == result["planned_jobs"][kind], (name, kind)
            assert classes[kind]["completed"] == classes[kind]["jobs"], (name, kind)
        assert classes["inference"]["completed"] >= 1, name
        records = policy["records"]
        assert all(r["cleaned"] is not None and r["submitted"] is not None for r in records), name
        assert {row["kind"] for row in policy["comparison"]} == set(classes), name
    pool = {row["kind"]: row for row in result["policies"]["one-pool"]["classes"]}
    assert not math.isnan(float(pool["slurm"]["start_overhead"] or math.nan))
    split_slurm = [r for r in result["policies"]["static-split"]["records"] if r["kind"] == "slurm"]
    assert all(r["admitted"] == r["running"] for r in split_slurm), "the split's Slurm jobs: no Kueue"
