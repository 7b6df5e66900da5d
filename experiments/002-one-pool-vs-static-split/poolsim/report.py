"""Summaries -> the files under results/: a markdown table, CSVs, and PNG plots.

The tables are plain text made here; only the plots need matplotlib (the ``experiments`` extra), so
it is imported inside ``plot`` and the simulator and its tests run without it.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from pathlib import Path

from poolsim.metrics import Summary
from poolsim.workload import JobClass

HOUR = 3600.0


def _fmt(seconds: float) -> str:
    if math.isnan(seconds):
        return "-"
    if seconds < 100:
        return f"{seconds:.1f} s"
    if seconds < 100 * 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / HOUR:.1f} h"


def markdown(summaries: Sequence[Summary], *, time_scale: float = 1.0) -> str:
    """Two tables: one line per run, then waits per class per run.

    ``time_scale`` turns simulated seconds back into trace seconds for the makespan (the compression).
    """
    lines = [
        "| run | nodes | makespan (trace days) | utilisation | of which work | idle node-h while jobs waited "
        "| preemptions | work lost to preemption (node-h) | jobs lost |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        lines.append(
            f"| {s.policy} | {s.capacity} | {s.makespan * time_scale / 86400:.2f} | {s.utilisation:.3f} "
            f"| {s.useful_utilisation:.3f} | {s.idle_while_waiting / HOUR:,.0f} | {s.preemptions} "
            f"| {s.wasted_node_seconds / HOUR:,.1f} | {s.jobs_lost} |"
        )
    lines += [
        "",
        "| run | class | jobs | completed | wait p50 | wait p95 | mean | max | preemptions |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        for c in s.classes:
            lines.append(
                f"| {s.policy} | {c.kind.value} | {c.jobs} | {c.completed} | {_fmt(c.wait_p50)} "
                f"| {_fmt(c.wait_p95)} | {_fmt(c.wait_mean)} | {_fmt(c.wait_max)} | {c.preemptions} |"
            )
    lines += [
        "",
        "| run | partition | nodes | mean share allocated | share of the time full |",
        "|---|---|---|---|---|",
    ]
    for s in summaries:
        for p in s.partitions:
            lines.append(f"| {s.policy} | {p.name} | {p.nodes} | {p.allocated:.3f} | {p.full:.3f} |")
    return "\n".join(lines) + "\n"


def summary_csv(summaries: Sequence[Summary]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(
        [
            "run",
            "nodes",
            "makespan_s",
            "utilisation",
            "useful_utilisation",
            "overhead_node_s",
            "wasted_node_s",
            "idle_while_waiting_node_s",
            "preemptions",
            "jobs_lost",
            "class",
            "jobs",
            "completed",
            "wait_p50_s",
            "wait_p95_s",
            "wait_mean_s",
            "wait_max_s",
            "class_preemptions",
        ]
    )
    for s in summaries:
        for c in s.classes:
            writer.writerow(
                [
                    s.policy,
                    s.capacity,
                    f"{s.makespan:.3f}",
                    f"{s.utilisation:.5f}",
                    f"{s.useful_utilisation:.5f}",
                    f"{s.overhead_node_seconds:.1f}",
                    f"{s.wasted_node_seconds:.1f}",
                    f"{s.idle_while_waiting:.1f}",
                    s.preemptions,
                    s.jobs_lost,
                    c.kind.value,
                    c.jobs,
                    c.completed,
                    f"{c.wait_p50:.3f}",
                    f"{c.wait_p95:.3f}",
                    f"{c.wait_mean:.3f}",
                    f"{c.wait_max:.3f}",
                    c.preemptions,
                ]
            )
    return out.getvalue()


Series = list[tuple[float, float, dict[JobClass, float]]]


def utilisation_csv(series: dict[str, Series], *, time_scale: float) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["run", "bucket_start_trace_days", "utilisation", *[k.value for k in JobClass]])
    for name, rows in series.items():
        for start, total, by_class in rows:
            writer.writerow(
                [
                    name,
                    f"{start * time_scale / 86400:.4f}",
                    f"{total:.5f}",
                    *[f"{by_class[k]:.5f}" for k in JobClass],
                ]
            )
    return out.getvalue()


PartitionSeries = list[tuple[float, tuple[float, ...], float]]


def plot_zoom(
    *,
    zoom: dict[str, tuple[tuple[str, ...], PartitionSeries]],
    time_scale: float,
    day_offset: float,
    out: Path,
    title: str,
) -> Path:
    """zoom.png: each partition's allocated share and the jobs waiting, in short buckets of a window."""
    import matplotlib  # noqa: PLC0415 - only the plots need it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, axes = plt.subplots(len(zoom), 1, figsize=(11, 2.6 * len(zoom)), sharex=True, squeeze=False)
    for ax, (name, (partitions, rows)) in zip(axes[:, 0], zoom.items(), strict=True):
        days = [day_offset + start * time_scale / 86400 for start, _, _ in rows]
        for i, partition in enumerate(partitions):
            ax.plot(days, [shares[i] for _, shares, _ in rows], label=f"{partition} nodes allocated")
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("share")
        twin = ax.twinx()
        twin.fill_between(days, [p for _, _, p in rows], color="grey", alpha=0.3, step="post")
        twin.set_ylabel("jobs waiting", color="grey")
        ax.set_title(name, fontsize=9)
        ax.legend(loc="upper left", fontsize=7)
    axes[-1, 0].set_xlabel("trace day")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = out / "zoom.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot(
    *,
    series: dict[str, Series],
    waits: dict[str, dict[JobClass, list[float]]],
    time_scale: float,
    day_offset: float,
    out: Path,
    title: str,
) -> list[Path]:
    """utilisation.png (per bucket, each run) and waits.png (p50/p95 per class, each run)."""
    import matplotlib  # noqa: PLC0415 - only the plots need it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    written = []
    fig, axes = plt.subplots(len(series), 1, figsize=(11, 2.6 * len(series)), sharex=True, squeeze=False)
    colours = {
        JobClass.SLURM: "#1f77b4",
        JobClass.BATCH: "#ff7f0e",
        JobClass.RAY: "#2ca02c",
        JobClass.INFERENCE: "#d62728",
    }
    for ax, (name, rows) in zip(axes[:, 0], series.items(), strict=True):
        days = [day_offset + start * time_scale / 86400 for start, _, _ in rows]
        stacks = [[by_class[k] for _, _, by_class in rows] for k in JobClass]
        ax.stackplot(days, stacks, labels=[k.value for k in JobClass], colors=[colours[k] for k in JobClass])
        mean = sum(t for _, t, _ in rows) / len(rows) if rows else 0.0
        ax.set_title(f"{name}: allocated share of the nodes (mean of buckets {mean:.2f})", fontsize=9)
        ax.set_ylim(0, 1)
        ax.set_ylabel("share")
    axes[0, 0].legend(loc="upper right", fontsize=7, ncol=4)
    axes[-1, 0].set_xlabel("trace day")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = out / "utilisation.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)

    from poolsim.metrics import percentile  # noqa: PLC0415

    kinds = [k for k in JobClass if any(waits[name].get(k) for name in waits)]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), squeeze=False)
    width = 0.8 / max(1, len(waits))
    for ax, q in zip(axes[0], (50, 95), strict=True):
        for i, name in enumerate(waits):
            values = [max(percentile(waits[name].get(k, []), q), 0.1) for k in kinds]
            ax.bar([j + i * width for j in range(len(kinds))], values, width=width, label=name)
        ax.set_yscale("log")
        ax.set_xticks([j + width * (len(waits) - 1) / 2 for j in range(len(kinds))])
        ax.set_xticklabels([k.value for k in kinds])
        ax.set_ylabel("seconds (log; floor 0.1 s)")
        ax.set_title(f"wait p{q}, submit -> running", fontsize=9)
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = out / "waits.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)
    return written
