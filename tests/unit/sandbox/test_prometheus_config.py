"""The e2e Prometheus' configuration: one job per bridge, labelled as the chart's ServiceMonitors label
the series, scraped and evaluated at the given interval, with the rule files."""

from __future__ import annotations

from pathlib import Path

from bridge.sandbox.prometheus import scrape_config


def test_each_bridge_is_a_job_of_its_own_labelled_with_its_bridge() -> None:
    config = scrape_config(
        targets={"slurm": "127.0.0.1:8080", "ray": "127.0.0.1:8081"},
        rule_files=[Path("/rules.yaml")],
        interval="1s",
        namespace="e2e",
    )
    assert config["global"] == {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"}
    assert config["rule_files"] == ["/rules.yaml"]
    assert config["scrape_configs"] == [
        {
            "job_name": "k8s-bridge-ray",
            "static_configs": [
                {"targets": ["127.0.0.1:8081"], "labels": {"bridge": "ray", "namespace": "e2e"}}
            ],
        },
        {
            "job_name": "k8s-bridge-slurm",
            "static_configs": [
                {"targets": ["127.0.0.1:8080"], "labels": {"bridge": "slurm", "namespace": "e2e"}}
            ],
        },
    ]
