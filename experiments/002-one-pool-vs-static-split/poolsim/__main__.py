"""``python -m poolsim``: the trace slice -> the workload -> both policies -> results/.

Every parameter of the experiment is a flag here; ``run`` beside this package passes its defaults.
What was run is written to ``run.json`` beside the tables, so a result names its own parameters.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from poolsim import metrics, report, sim, swf, workload

HERE = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = HERE / "data" / "NASA-iPSC-1993-3.1-cln.swf.gz"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="poolsim", description=__doc__)
    p.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="an SWF file, .gz or plain")
    p.add_argument("--start-day", type=float, default=0.0, help="the slice's first day in the trace")
    p.add_argument("--days", type=float, default=None, help="the slice's length in days (all: omit)")
    p.add_argument("--compression", type=float, default=1.0, help="trace seconds per simulated second")
    p.add_argument("--slurm-nodes", type=int, default=128, help="the Slurm side of the split")
    p.add_argument("--kube-nodes", type=int, default=64, help="the Kubernetes side of the split")
    p.add_argument("--seed", type=int, default=2)
    p.add_argument("--batch-load", type=float, default=0.40, help="fraction of the Kubernetes side")
    p.add_argument("--ray-load", type=float, default=0.15, help="fraction of the Kubernetes side")
    p.add_argument("--inference-min", type=float, default=0.10, help="fraction of the Kubernetes side")
    p.add_argument("--inference-max", type=float, default=0.60, help="fraction of the Kubernetes side")
    p.add_argument("--estimate-factor", type=float, default=1.0, help="time limit / run time (>= 1)")
    p.add_argument("--batch-priority", type=int, default=100)
    p.add_argument(
        "--strategy",
        action="append",
        choices=[s.value for s in sim.Strategy],
        help="Kueue queueing strategy; repeat for several (default: both)",
    )
    for name, default in dataclasses.asdict(sim.Calibration()).items():
        p.add_argument(f"--{name.replace('_', '-')}", type=float, default=default, help="seconds")
    p.add_argument("--bucket-hours", type=float, default=24.0, help="utilisation plot bucket (trace hours)")
    p.add_argument("--zoom-start", type=float, default=14.0, help="zoom.png's first trace day")
    p.add_argument("--zoom-days", type=float, default=7.0, help="zoom.png's length in trace days")
    p.add_argument("--zoom-bucket-hours", type=float, default=1.0)
    p.add_argument("--out", type=Path, default=HERE / "results", help="where the tables and plots go")
    p.add_argument("--name", default="full", help="prefix of the result files")
    p.add_argument("--no-plots", action="store_true")
    return p


def _shown(path: Path) -> str:
    """A path as the results name it: relative to the experiment's folder when inside it."""
    resolved = path.resolve()
    return str(resolved.relative_to(HERE)) if resolved.is_relative_to(HERE) else str(path)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    began = time.monotonic()
    trace = swf.parse(swf.read_lines(args.trace))
    selection = swf.replayable(trace)
    params = workload.WorkloadParams(
        slurm_nodes=args.slurm_nodes,
        kube_nodes=args.kube_nodes,
        trace_nodes=trace.max_nodes or 128,
        start_day=args.start_day,
        days=args.days,
        compression=args.compression,
        estimate_factor=args.estimate_factor,
        seed=args.seed,
        batch=dataclasses.replace(workload.WorkloadParams().batch, load=args.batch_load),
        ray=dataclasses.replace(workload.WorkloadParams().ray, load=args.ray_load),
        inference=workload.InferenceParams(min_fraction=args.inference_min, max_fraction=args.inference_max),
        priorities=workload.Priorities(batch=args.batch_priority),
    )
    jobs = workload.build(selection.jobs, params)
    calibration = sim.Calibration(
        **{name: getattr(args, name) for name in dataclasses.asdict(sim.Calibration())}
    )
    strategies = [sim.Strategy(s) for s in (args.strategy or [s.value for s in sim.Strategy])]
    summaries: list[metrics.Summary] = []
    series: dict[str, report.Series] = {}
    zoom: dict[str, tuple[tuple[str, ...], report.PartitionSeries]] = {}
    zoom_from = (args.zoom_start - args.start_day) * 86400 / args.compression
    zoom_to = zoom_from + args.zoom_days * 86400 / args.compression
    waits: dict[str, dict[workload.JobClass, list[float]]] = {}
    for strategy in strategies:
        for make in (sim.static_split, sim.one_pool):
            policy = make(
                slurm_nodes=args.slurm_nodes,
                kube_nodes=args.kube_nodes,
                calibration=calibration,
                strategy=strategy,
            )
            name = f"{policy.name} ({strategy.value})"
            result = sim.simulate(policy=policy, jobs=jobs)
            summaries.append(dataclasses.replace(metrics.summarise(result), policy=name))
            series[name] = metrics.utilisation_series(
                result, bucket=args.bucket_hours * 3600 / args.compression
            )
            if strategy is strategies[0]:
                zoom[name] = (
                    tuple(p.name for p in policy.partitions),
                    metrics.partition_series(
                        result,
                        bucket=args.zoom_bucket_hours * 3600 / args.compression,
                        start=zoom_from,
                        end=zoom_to,
                    ),
                )
            waits[name] = {
                kind: [w for r in result.records.values() if r.job.kind is kind and (w := r.wait) is not None]
                for kind in workload.JobClass
            }
    elapsed = time.monotonic() - began
    args.out.mkdir(parents=True, exist_ok=True)
    prefix = args.out / args.name
    table = report.markdown(summaries, time_scale=args.compression)
    Path(f"{prefix}-summary.md").write_text(table)
    Path(f"{prefix}-summary.csv").write_text(report.summary_csv(summaries))
    Path(f"{prefix}-utilisation.csv").write_text(report.utilisation_csv(series, time_scale=args.compression))
    counts = {kind.value: sum(1 for j in jobs if j.kind is kind) for kind in workload.JobClass}
    run = {
        "arguments": {k: _shown(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "trace_jobs": len(trace.jobs),
        "replayable": len(selection.jobs),
        "dropped": selection.dropped,
        "jobs": counts,
        "seconds": round(elapsed, 2),
    }
    Path(f"{prefix}-run.json").write_text(json.dumps(run, indent=2, sort_keys=True) + "\n")
    if not args.no_plots:
        out = args.out / args.name
        out.mkdir(exist_ok=True)
        last = "end" if args.days is None else f"{args.start_day + args.days:g}"
        title = (
            f"{args.trace.name}, days {args.start_day:g}-{last}, Slurm {args.slurm_nodes} + "
            f"Kubernetes {args.kube_nodes} nodes, compression {args.compression:g}"
        )
        report.plot(
            series=series,
            waits=waits,
            time_scale=args.compression,
            day_offset=args.start_day,
            out=out,
            title=title,
        )
        report.plot_zoom(
            zoom=zoom, time_scale=args.compression, day_offset=args.start_day, out=out, title=title
        )
    sys.stdout.write(table)
    sys.stdout.write(f"\n{json.dumps(counts)}; simulated in {elapsed:.1f} s\n")
    lost = sum(s.jobs_lost for s in summaries)
    return 1 if lost else 0


if __name__ == "__main__":
    raise SystemExit(main())
