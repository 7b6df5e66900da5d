"""The dashboards: the checked-in JSON is what the code generates, it is a Grafana 11.6 dashboard
on a Prometheus data source variable, and every series a panel reads is a documented metric or a
recording rule of the chart (the end-to-end tier then runs each query against the real bridges)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import dashboards.__main__ as generator
from dashboards.__main__ import DASHBOARDS, JSON_DIR, main, render
from tests.dashboard_queries import family_name, metric_names, panel_queries, recorded_names
from tests.metrics_catalogue import documented_metrics


def test_the_checked_in_json_is_what_the_code_generates() -> None:
    for name, build in DASHBOARDS.items():
        assert (JSON_DIR / name).read_text() == render(build), f"{name} is stale: run `python -m dashboards`"
    assert main(["--check"]) == 0
    assert sorted(p.name for p in JSON_DIR.glob("*.json")) == sorted(DASHBOARDS)


def test_each_dashboard_is_grafana_11_on_a_prometheus_datasource_variable() -> None:
    uids = set()
    for name in DASHBOARDS:
        board = json.loads((JSON_DIR / name).read_text())
        assert board["schemaVersion"] == 41
        uids.add(board["uid"])
        (variable,) = board["templating"]["list"]
        assert (variable["type"], variable["name"], variable["query"]) == (
            "datasource",
            "datasource",
            "prometheus",
        )
        panels = [p for p in board["panels"] if p["type"] != "row"]
        assert panels
        for panel in panels:
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
            assert panel["targets"], panel["title"]
            assert [t["refId"] for t in panel["targets"]] == [
                chr(65 + i) for i in range(len(panel["targets"]))
            ]
            right = panel["gridPos"]["x"] + panel["gridPos"]["w"]
            assert right <= 24, panel["title"]
    assert len(uids) == len(DASHBOARDS)


def test_every_series_a_panel_reads_is_a_documented_metric_or_a_recording_rule() -> None:
    documented = set(documented_metrics())
    known = documented | recorded_names()
    for query in panel_queries():
        names = {family_name(name, documented) for name in metric_names(query.expr)}
        assert names, query
        assert names - known == set(), (query.panel, query.expr)


def test_the_fleet_and_controller_panels_the_operations_guide_names_exist() -> None:
    titles = {q.panel for q in panel_queries()}
    assert {
        "Slurm jobs by phase",
        "RayJobs by phase",
        "Admissions",
        "Evicted Slurm jobs",
        "Admission -> running",
        "Kubernetes API requests by code",
        "slurmrestd requests by code",
        "Work queue depth",
        "Reconciles by result",
        "Reconcile errors by controller",
        "Reconcile duration p99",
        "Leader",
    } <= titles


def test_a_stale_or_missing_file_is_reported_and_regenerated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(generator, "JSON_DIR", tmp_path)
    assert generator.main(["--check"]) == 1
    assert "stale: k8s-bridge-fleet.json" in capsys.readouterr().err
    assert generator.main([]) == 0
    assert generator.main(["--check"]) == 0
