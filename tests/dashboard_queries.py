"""The checked-in dashboards' panel queries and the rules file's expressions, read as data: the unit
tests check the names they read, the end-to-end tier runs each against a real Prometheus."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
DASHBOARD_JSON = REPO_ROOT / "dashboards" / "json"
RULES_FILE = REPO_ROOT / "charts" / "k8s-bridge" / "files" / "prometheus-rules.yaml"

_SELECTED = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{")
_RECORDED = re.compile(r"\b([a-z0-9_]+:[a-z0-9_]+:[a-z0-9_]+)\b")
_HISTOGRAM_SERIES = ("_bucket", "_count", "_sum")


@dataclass(frozen=True, slots=True)
class PanelQuery:
    dashboard: str
    panel: str
    expr: str


def panel_queries() -> list[PanelQuery]:
    out: list[PanelQuery] = []
    for path in sorted(DASHBOARD_JSON.glob("*.json")):
        board: dict[str, Any] = json.loads(path.read_text())
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                out.append(PanelQuery(board["title"], panel["title"], target["expr"]))
    return out


def rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES_FILE.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def recorded_names() -> set[str]:
    return {rule["record"] for rule in rules() if "record" in rule}


def metric_names(expr: str) -> set[str]:
    """The series names an expression reads: every selector's name, and every recorded name."""
    return set(_SELECTED.findall(expr)) | set(_RECORDED.findall(expr))


def family_name(series: str, documented: set[str]) -> str:
    """A histogram's ``_bucket``/``_count``/``_sum`` series belong to its family."""
    for suffix in _HISTOGRAM_SERIES:
        if series.endswith(suffix) and series.removesuffix(suffix) in documented:
            return series.removesuffix(suffix)
    return series


def with_rate_interval(expr: str, interval: str) -> str:
    """Grafana's one variable in the queries, replaced as Grafana would."""
    return expr.replace("$__rate_interval", interval)
