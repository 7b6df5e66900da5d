"""Pool the release-latency benchmark's per-job figures over several runs: p50 / p90 / p99 per segment.

Why: one run of ``test_admission_to_running_latency`` has 50 jobs, so its p99 is its largest value,
and whether a burst of cleanups happens to meet a burst of node registrations changes from run to
run. Comparing two variants needs the runs of each pooled (the same nearest-rank percentile as the
benchmark) and the tail counted.

    python experiments/001-slurm-bridge-throughput/pool_latency.py \\
        baseline=results/latency-22.05-release-priority-baseline-run*.json \\
        change=results/latency-22.05-release-priority-change-run*.json

Each argument is ``<name>=<glob>`` (relative to this directory or absolute).
"""

from __future__ import annotations

import glob
import json
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEGMENTS = (
    ("node IDLE -> RUNNING", "running_s", None),
    ("node IDLE -> released (bridge)", "released_s", None),
    ("node IDLE -> release decided", "decided_s", None),
    ("release decided -> released (call)", "released_s", "decided_s"),
    ("released -> RUNNING (Slurm)", "running_s", "released_s"),
)
TAIL = 0.5
"""Seconds: bridge shares above this are counted (the tail the work queue makes)."""
TARGET = 0.1
"""Seconds: issue 14's bound on the bridge's share (p99); shares above it are counted too."""


def percentile(values: list[float], q: float) -> float:
    """Nearest rank, as the benchmark's."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


def main(argv: list[str]) -> None:
    for arg in argv:
        name, _, pattern = arg.partition("=")
        files = sorted(glob.glob(pattern if Path(pattern).is_absolute() else str(HERE / pattern)))
        jobs = [job for f in files for job in json.loads(Path(f).read_text())["per_job_after_node_idle"]]
        print(f"{name}: {len(files)} runs, {len(jobs)} jobs")
        for label, end, start in SEGMENTS:
            measured = [j for j in jobs if end in j and (start is None or start in j)]
            values = [j[end] - (j[start] if start else 0.0) for j in measured]
            if values:
                p50, p90, p99 = (percentile(values, q) for q in (50, 90, 99))
                print(f"  {label:<32} p50 {p50:.3f}  p90 {p90:.3f}  p99 {p99:.3f}  max {max(values):.3f}")
        bridge = [j["released_s"] for j in jobs if "released_s" in j]
        print(f"  bridge share > {TAIL} s: {sum(v > TAIL for v in bridge)} of {len(bridge)}")
        print(f"  bridge share > {TARGET} s: {sum(v > TARGET for v in bridge)} of {len(bridge)}")


if __name__ == "__main__":
    main(sys.argv[1:])
