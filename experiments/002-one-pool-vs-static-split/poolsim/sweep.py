"""``python -m poolsim.sweep``: the full trace once per variant of one assumption -> results/sweep.md.

Each variant changes one parameter of the default run (Kueue's default BestEffortFIFO only), so the
table shows which conclusions hang on which assumption. Extra arguments go to every run.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Sequence

from poolsim.__main__ import HERE, main

VARIANTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("default", ()),
    ("Kubernetes load lower (batch 0.25, Ray 0.10)", ("--batch-load=0.25", "--ray-load=0.10")),
    ("Kubernetes load higher (batch 0.55)", ("--batch-load=0.55",)),
    ("Slurm time limits 3x the run time", ("--estimate-factor=3",)),
    ("batch below Slurm (priority 50)", ("--batch-priority=50",)),
    (
        "bridge overheads x5 (registration 50 s, release 3.5 s, cleanup 25 s)",
        ("--slurmd-registration=50", "--release=3.5", "--cleanup=25"),
    ),
    (
        "both sides 96 nodes (the trace scaled to 96, the streams to 96)",
        ("--slurm-nodes=96", "--kube-nodes=96"),
    ),
)

COLUMNS = ("slurm", "batch", "ray", "inference")


def main_sweep(argv: Sequence[str]) -> str:
    out = HERE / "results" / "sweep"
    lines = [
        "| variant | run | wait p50 / p95: slurm | batch | ray | inference | idle node-h while jobs waited "
        "| preemptions | jobs lost |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for index, (title, extra) in enumerate(VARIANTS):
        name = f"v{index}"
        code = main(
            [*extra, *argv, "--strategy=BestEffortFIFO", "--no-plots", f"--out={out}", f"--name={name}"]
        )
        if code:
            raise SystemExit(f"variant {title!r} lost jobs")
        rows = list(csv.DictReader((out / f"{name}-summary.csv").read_text().splitlines()))
        for run in dict.fromkeys(row["run"] for row in rows):
            mine = {row["class"]: row for row in rows if row["run"] == run}
            first = next(iter(mine.values()))
            cells = [
                f"{_s(mine[c]['wait_p50_s'])} / {_s(mine[c]['wait_p95_s'])}" if c in mine else "-"
                for c in COLUMNS
            ]
            lines.append(
                f"| {title} | {run.split(' ')[0]} | {' | '.join(cells)} "
                f"| {float(first['idle_while_waiting_node_s']) / 3600:,.0f} | {first['preemptions']} "
                f"| {first['jobs_lost']} |"
            )
    table = "\n".join(lines) + "\n"
    (HERE / "results" / "sweep.md").write_text(table)
    return table


def _s(value: str) -> str:
    seconds = float(value)
    if seconds < 100:
        return f"{seconds:.1f} s"
    if seconds < 6000:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


if __name__ == "__main__":
    sys.stdout.write(main_sweep(sys.argv[1:]))
