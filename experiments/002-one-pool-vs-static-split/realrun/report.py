"""The real run's results as data (``<name>-run.json``) and as the tables of ``<name>-summary.md``.

:func:`summary` takes each policy's records and adds every figure (per class waits, overheads,
makespan, utilisation, preemptions, jobs lost, utilisation over time) and the simulator's run of the
same jobs with the overheads measured, with the difference of the waits. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from poolsim import metrics

from realrun import figures
from realrun.plan import Plan, Policy, RealParams
from realrun.records import Record

BUCKET = 5.0  # seconds per utilisation bucket


def _num(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 3)


def policy_figures(records: list[Record], plan: Plan, params: RealParams, policy: Policy) -> dict[str, Any]:
    setup = figures.Setup(policy, params.slurm_nodes, params.kube_nodes)
    result = figures.simulate(records, plan, setup=setup)
    simulated = metrics.summarise(result)
    return {
        "classes": [
            {
                k: (_num(v) if isinstance(v, float) else (v.value if k == "kind" else v))
                for k, v in vars(row).items()
            }
            for row in figures.class_rows(records, setup)
        ],
        "makespan_s": _num(figures.makespan(records)),
        "utilisation": _num(figures.utilisation(records, setup=setup)),
        "preemptions": sum(r.preemptions for r in records),
        "jobs_lost": figures.jobs_lost(records),
        "utilisation_series": [
            {"t": t, **{k: round(v, 3) for k, v in held.items()}}
            for t, held in figures.utilisation_series(records, setup=setup, bucket=BUCKET)
        ],
        "calibration": vars(figures.calibration(records, setup=setup)),
        "simulated": {
            "makespan_s": _num(simulated.makespan),
            "utilisation": _num(simulated.utilisation),
            "preemptions": simulated.preemptions,
            "jobs_lost": simulated.jobs_lost,
        },
        "comparison": [
            {k: (_num(v) if isinstance(v, float) else v.value) for k, v in vars(row).items()}
            for row in figures.compare(records, result, setup=setup)
        ],
    }


def summary(
    params: RealParams,
    plan: Plan,
    outcomes: Mapping[Policy, Mapping[str, Any]],
    *,
    stack_start_seconds: float,
) -> dict[str, Any]:
    policies = {}
    for policy, outcome in outcomes.items():
        records: list[Record] = list(outcome["records"])
        policies[policy.value] = {
            **{k: v for k, v in outcome.items() if k != "records"},
            **policy_figures(records, plan, params, policy),
            "records": [r.as_dict() for r in records],
        }
    counts: dict[str, int] = {}
    for job in plan.jobs:
        counts[job.kind.value] = counts.get(job.kind.value, 0) + 1
    return {
        "params": params.as_dict(),
        "horizon_s": params.horizon,
        "planned_jobs": counts,
        "replica_steps": [list(step) for step in plan.replicas],
        "stack_start_s": round(stack_start_seconds, 1),
        "policies": policies,
    }


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def markdown(result: Mapping[str, Any]) -> str:
    lines = [
        "| policy | makespan | utilisation | preemptions | jobs lost | run took "
        "| load average before / after |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, p in result["policies"].items():
        before = " ".join(f"{x:.1f}" for x in p["loadavg_before"])
        after = " ".join(f"{x:.1f}" for x in p["loadavg_after"])
        lines.append(
            f"| {name} | {_s(p['makespan_s'])} | {p['utilisation']:.3f} | {p['preemptions']} | "
            f"{len(p['jobs_lost'])} | {p['seconds']:.0f} s | {before} / {after} |"
        )
    lines += [
        "",
        "| policy | class | jobs | completed | wait p50 | wait p95 | max | preemptions | "
        "admitted -> running (median) | finished -> cleaned up (median) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, p in result["policies"].items():
        for row in p["classes"]:
            lines.append(
                f"| {name} | {row['kind']} | {row['jobs']} | {row['completed']} | {_s(row['wait_p50'])} | "
                f"{_s(row['wait_p95'])} | {_s(row['wait_max'])} | {row['preemptions']} | "
                f"{_s(row['start_overhead'])} | {_s(row['end_overhead'])} |"
            )
    lines += [
        "",
        "| policy | class | wait p50 real / simulated | wait p95 real / simulated "
        "| mean abs. difference per job |",
        "|---|---|---|---|---|",
    ]
    for name, p in result["policies"].items():
        for row in p["comparison"]:
            lines.append(
                f"| {name} | {row['kind']} | {_s(row['real_p50'])} / {_s(row['sim_p50'])} | "
                f"{_s(row['real_p95'])} / {_s(row['sim_p95'])} | {_s(row['mean_abs_difference'])} |"
            )
    lines += ["", "| policy | makespan real / simulated | utilisation real / simulated |", "|---|---|---|"]
    for name, p in result["policies"].items():
        s = p["simulated"]
        lines.append(
            f"| {name} | {_s(p['makespan_s'])} / {_s(s['makespan_s'])} | "
            f"{p['utilisation']:.3f} / {s['utilisation']:.3f} |"
        )
    return "\n".join(lines) + "\n"
