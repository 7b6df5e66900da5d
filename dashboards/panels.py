"""Panel builders shared by the dashboards: a Prometheus data source variable, time series and stat
panels from (query, legend) pairs, quantiles of a histogram.

Queries use Grafana's ``$__rate_interval`` for every range; nothing else of Grafana's templating,
so each query is plain PromQL once that one variable is replaced.
"""

from __future__ import annotations

from collections.abc import Sequence

from grafana_foundation_sdk.builders import prometheus, stat, timeseries
from grafana_foundation_sdk.builders.dashboard import DatasourceVariable
from grafana_foundation_sdk.models.dashboard import DataSourceRef

__all__ = [
    "DATASOURCE",
    "RATE",
    "Query",
    "datasource_variable",
    "quantiles",
    "stat_panel",
    "timeseries_panel",
]

RATE = "$__rate_interval"
"""Grafana's range for ``rate()``: at least four scrape intervals."""

DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")

Query = tuple[str, str]
"""A PromQL expression and its legend format."""


def datasource_variable() -> DatasourceVariable:
    return DatasourceVariable("datasource").label("Prometheus").type("prometheus")


def _targets(queries: Sequence[Query]) -> list[prometheus.Dataquery]:
    return [
        prometheus.Dataquery()
        .expr(expr)
        .legend_format(legend)
        .ref_id(chr(ord("A") + i))
        .datasource(DATASOURCE)
        for i, (expr, legend) in enumerate(queries)
    ]


def timeseries_panel(
    title: str, queries: Sequence[Query], *, unit: str = "short", description: str = "", span: int = 8
) -> timeseries.Panel:
    panel = timeseries.Panel().title(title).unit(unit).datasource(DATASOURCE).height(8).span(span)
    if description:
        panel = panel.description(description)
    for target in _targets(queries):
        panel = panel.with_target(target)
    return panel


def stat_panel(
    title: str, queries: Sequence[Query], *, unit: str = "short", description: str = ""
) -> stat.Panel:
    panel = stat.Panel().title(title).unit(unit).datasource(DATASOURCE).height(4).span(6)
    if description:
        panel = panel.description(description)
    for target in _targets(queries):
        panel = panel.with_target(target)
    return panel


def quantiles(
    metric: str, *, selector: str, by: Sequence[str] = (), legend: str = "", qs: Sequence[float] = (0.5, 0.99)
) -> list[Query]:
    """``histogram_quantile`` of ``metric`` (a histogram's base name) at each of ``qs``."""
    group = ", ".join(("le", *by))
    prefix = f"{legend} " if legend else ""
    return [
        (
            f"histogram_quantile({q}, sum by ({group}) (rate({metric}_bucket{{{selector}}}[{RATE}])))",
            f"{prefix}p{round(q * 100)}" + "".join(f" {{{{{label}}}}}" for label in by),
        )
        for q in qs
    ]
