"""The metrics table of docs/operations.md, read as data: the unit audit and the end-to-end scrape
both compare what a bridge exports with it, so the document cannot drift from the code."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

OPERATIONS_DOC = Path(__file__).resolve().parents[1] / "docs" / "operations.md"

BRIDGES = ("slurm", "ray")

FORBIDDEN_LABELS = frozenset(
    {"job", "job_id", "jobid", "job_name", "rayjob", "raycluster", "jobset", "workload", "uid"}
    | {"namespace", "pod", "node", "node_name", "user", "account"}
)
"""Labels whose values grow with the jobs run (or with the cluster): never a label of ours."""

_ROW = re.compile(
    r"^\| `(?P<name>[a-z0-9_:]+)` \| (?P<bridge>both|slurm|ray) \| (?P<type>\w+) \| (?P<labels>[^|]+) \|"
)


@dataclass(frozen=True, slots=True)
class Documented:
    name: str
    """As exposed: counters with their ``_total``."""
    bridges: frozenset[str]
    type: str
    labels: frozenset[str]


def documented_metrics(text: str | None = None) -> dict[str, Documented]:
    """Every row of the metrics tables, by exposed name."""
    text = OPERATIONS_DOC.read_text() if text is None else text
    out: dict[str, Documented] = {}
    for line in text.splitlines():
        match = _ROW.match(line)
        if match is None:
            continue
        labels = frozenset(re.findall(r"`([a-z0-9_]+)`", match["labels"]))
        bridge = match["bridge"]
        bridges = frozenset(BRIDGES) if bridge == "both" else frozenset({bridge})
        if match["name"] in out:
            raise ValueError(f"{match['name']} is documented twice")
        out[match["name"]] = Documented(match["name"], bridges, match["type"], labels)
    return out


def exposed_name(family_name: str, family_type: str) -> str:
    """prometheus_client names a counter family without ``_total``; Prometheus stores the sample's."""
    return f"{family_name}_total" if family_type == "counter" else family_name
