"""Experiment 002's command on a tiny slice of the real trace: every file written, nothing lost.

The full run (the whole trace at 128 + 64 nodes, about 25 s) is the experiment's ``run``; this keeps
the command path (trace -> workload -> both policies -> tables) working in the unit tier.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from poolsim.__main__ import main


def test_smoke_two_days_small_pool(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "--days=2",
            "--start-day=10",
            "--slurm-nodes=8",
            "--kube-nodes=4",
            "--compression=60",
            "--no-plots",
            "--name=smoke",
            f"--out={tmp_path}",
        ]
    )
    assert code == 0
    table = (tmp_path / "smoke-summary.md").read_text()
    assert table == capsys.readouterr().out.split("\n\n{")[0].rstrip("\n") + "\n"
    rows = list(csv.DictReader((tmp_path / "smoke-summary.csv").read_text().splitlines()))
    runs = {row["run"] for row in rows}
    assert runs == {
        "static-split (BestEffortFIFO)",
        "one-pool (BestEffortFIFO)",
        "static-split (StrictFIFO)",
        "one-pool (StrictFIFO)",
    }
    assert {row["class"] for row in rows} == {"slurm", "batch", "ray", "inference"}
    assert all(row["jobs_lost"] == "0" and row["jobs"] == row["completed"] for row in rows)
    run = json.loads((tmp_path / "smoke-run.json").read_text())
    assert run["jobs"]["slurm"] > 0
    assert run["trace_jobs"] == 18_239
    utilisation = list(csv.DictReader((tmp_path / "smoke-utilisation.csv").read_text().splitlines()))
    assert utilisation
    assert all(0 <= float(row["utilisation"]) <= 1 for row in utilisation)
