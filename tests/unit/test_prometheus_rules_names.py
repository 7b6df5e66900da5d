"""Every series the chart's recording and alerting rules read is a metric the bridges export (as
documented), a series a rule records, or Prometheus' own ``up``; and every label they group or
match by is one those metrics carry (or a target label). promtool then tests their behaviour
(tests/integration/test_prometheus_rules.py)."""

from __future__ import annotations

import re

from tests.dashboard_queries import family_name, metric_names, recorded_names, rules
from tests.metrics_catalogue import documented_metrics

TARGET_LABELS = {"bridge", "namespace", "instance", "job"}
"""Labels Prometheus (and the chart's ServiceMonitors) put on every scraped series."""

_GROUPING = re.compile(r"\b(?:by|on)\s*\(([^)]*)\)")
_MATCHER = re.compile(r"([a-z_]+)\s*(?:=~|!~|!=|=)\s*\"")


def test_every_series_a_rule_reads_is_exported_recorded_or_up() -> None:
    documented = set(documented_metrics())
    known = documented | recorded_names() | {"up"}
    for rule in rules():
        names = {family_name(name, documented) for name in metric_names(rule["expr"])}
        assert names - known == set(), (rule.get("alert") or rule.get("record"), rule["expr"])


def test_every_label_a_rule_groups_or_matches_by_exists() -> None:
    catalogue = documented_metrics()
    labels = set().union(*(d.labels for d in catalogue.values())) | TARGET_LABELS | {"le", "slo", "code"}
    for rule in rules():
        used = {label.strip() for group in _GROUPING.findall(rule["expr"]) for label in group.split(",")}
        used |= set(_MATCHER.findall(rule["expr"]))
        used.discard("")
        assert used - labels == set(), (rule.get("alert") or rule.get("record"), rule["expr"])
