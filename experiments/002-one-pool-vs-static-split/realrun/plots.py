"""``python -m realrun.plots <name>-run.json``: the real run's PNGs beside it, in ``<name>/``.

- ``utilisation.png``: per policy, the nodes (quota CPUs) each class held over the run, stacked, with
  the pool's size (and, in the split, the Slurm side's);
- ``waits.png``: wait p50 and p95 per class and policy, real beside simulated.

Separate from the run because it needs matplotlib (the project's ``experiments`` extra), which the
stack's environment does not carry; ``run real`` calls both.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import matplotlib as mpl

mpl.use("Agg")
import matplotlib.pyplot as plt

CLASSES = ("slurm", "batch", "ray", "inference")
COLOURS = {"slurm": "tab:blue", "batch": "tab:orange", "ray": "tab:green", "inference": "tab:red"}


def plot_utilisation(result: dict[str, Any], path: Path) -> None:
    params = result["params"]
    policies = result["policies"]
    fig, axes = plt.subplots(len(policies), 1, figsize=(9, 3.2 * len(policies)), sharex=True, squeeze=False)
    for ax, (name, policy) in zip(axes[:, 0], policies.items(), strict=True):
        series = policy["utilisation_series"]
        times = [row["t"] for row in series]
        ax.stackplot(
            times,
            [[row[c] for row in series] for c in CLASSES],
            labels=CLASSES,
            colors=[COLOURS[c] for c in CLASSES],
            step="post",
        )
        ax.axhline(params["slurm_nodes"] + params["kube_nodes"], color="black", lw=1, label="pool")
        if name == "static-split":
            ax.axhline(params["slurm_nodes"], color="tab:blue", lw=1, ls="--", label="Slurm side")
        ax.set_title(f"{name}: nodes held per class (5 s buckets)")
        ax.set_ylabel("nodes")
        ax.legend(loc="upper right", fontsize=7, ncol=3)
    axes[-1, 0].set_xlabel("seconds since the run's start")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_waits(result: dict[str, Any], path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), squeeze=False)
    for ax, quantile in zip(axes[0], ("p50", "p95"), strict=True):
        labels, real, simulated = [], [], []
        for name, policy in result["policies"].items():
            for row in policy["comparison"]:
                labels.append(f"{name}\n{row['kind']}")
                real.append(row[f"real_{quantile}"] or 0.0)
                simulated.append(row[f"sim_{quantile}"] or 0.0)
        xs = range(len(labels))
        ax.bar([x - 0.2 for x in xs], real, width=0.4, label="real")
        ax.bar([x + 0.2 for x in xs], simulated, width=0.4, label="simulated")
        ax.set_xticks(list(xs), labels, fontsize=6, rotation=45, ha="right")
        ax.set_ylabel("seconds")
        ax.set_title(f"wait {quantile} per class")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    source = Path(args[0])
    result = json.loads(source.read_text())
    folder = source.with_name(source.name.removesuffix("-run.json"))
    folder.mkdir(parents=True, exist_ok=True)
    plot_utilisation(result, folder / "utilisation.png")
    plot_waits(result, folder / "waits.png")
    print(f"plots in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
