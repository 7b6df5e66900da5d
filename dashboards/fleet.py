"""The fleet overview: what the bridges hold and do, how fast jobs go from admission to running,
and the calls they make (Kubernetes API, slurmrestd, the gate webhook)."""

from __future__ import annotations

from grafana_foundation_sdk.builders.dashboard import Dashboard, Row

from .panels import RATE, datasource_variable, quantiles, stat_panel, timeseries_panel

__all__ = ["UID", "fleet"]

UID = "k8s-bridge-fleet"
SLURM = 'bridge="slurm"'
RAY = 'bridge="ray"'
BOTH = 'bridge=~"slurm|ray"'


def fleet() -> Dashboard:
    return (
        Dashboard("k8s-bridge / Fleet overview")
        .uid(UID)
        .tags(["k8s-bridge", "kueue", "slurm", "ray"])
        .description(
            "Bridged Slurm jobs and RayJobs: phases, admissions, latency, calls (docs/operations.md)"
        )
        .refresh("30s")
        .time("now-6h", "now")
        .with_variable(datasource_variable())
        .with_row(Row("Jobs"))
        .with_panel(
            timeseries_panel(
                "Slurm jobs by phase",
                [(f"sum by (phase) (k8s_bridge_slurm_jobs{{{SLURM}}})", "{{phase}}")],
                description="Bridged Slurm jobs by phase, as last reconciled",
            )
        )
        .with_panel(
            timeseries_panel(
                "RayJobs by phase",
                [(f"sum by (phase) (k8s_bridge_ray_jobs{{{RAY}}})", "{{phase}}")],
                description="Gated RayJobs by phase, as last reconciled",
            )
        )
        .with_panel(
            timeseries_panel(
                "Admissions",
                [
                    (
                        f"sum(rate(k8s_bridge_slurm_held_to_admitted_seconds_count{{{SLURM}}}[{RATE}]))",
                        "slurm",
                    ),
                    (f"sum(rate(k8s_bridge_ray_queued_to_admitted_seconds_count{{{RAY}}}[{RATE}]))", "ray"),
                ],
                unit="ops",
                description="Kueue admissions of bridged jobs per second",
            )
        )
        .with_panel(
            stat_panel(
                "Evicted Slurm jobs",
                [(f'sum(k8s_bridge_slurm_jobs{{{SLURM}, phase="evicted"}})', "evicted")],
                description="Slurm jobs whose Workload Kueue evicted, held again until readmitted",
            )
        )
        .with_panel(
            stat_panel(
                "Ungated RayJobs",
                [(f"sum(k8s_bridge_ray_ungated_rayjobs{{{RAY}}})", "ungated")],
                description="RayJobs running in a bridged RayCluster outside Kueue's quota",
            )
        )
        .with_panel(
            stat_panel(
                "Slurm nodes registered",
                [(f"sum by (state) (k8s_bridge_slurm_nodes_registered{{{SLURM}}})", "{{state}}")],
                description="The bridge's dynamic nodes in slurmctld by base state",
            )
        )
        .with_panel(
            stat_panel(
                "Bridge availability (1h)",
                [("k8s_bridge:availability:ratio_avg1h", "{{bridge}}")],
                unit="percentunit",
                description="Share of the last hour with at least one replica up (SLO 99.9%)",
            )
        )
        .with_row(Row("Latency"))
        .with_panel(
            timeseries_panel(
                "Waiting for admission",
                [
                    *quantiles("k8s_bridge_slurm_held_to_admitted_seconds", selector=SLURM, legend="slurm"),
                    *quantiles("k8s_bridge_ray_queued_to_admitted_seconds", selector=RAY, legend="ray"),
                ],
                unit="s",
                description="JobSet created -> Kueue admission (Kueue's quota wait)",
            )
        )
        .with_panel(
            timeseries_panel(
                "Admission -> running",
                [
                    *quantiles(
                        "k8s_bridge_slurm_admitted_to_running_seconds", selector=SLURM, legend="slurm"
                    ),
                    *quantiles("k8s_bridge_ray_admitted_to_running_seconds", selector=RAY, legend="ray"),
                ],
                unit="s",
                description="Kueue admission -> job RUNNING (the release SLOs: 120 s Slurm, 300 s Ray)",
            )
        )
        .with_panel(
            timeseries_panel(
                "Release SLO error ratio",
                [
                    ("k8s_bridge:slo_errors:ratio_rate1h", "{{slo}} 1h"),
                    ("k8s_bridge:slo_errors:ratio_rate6h", "{{slo}} 6h"),
                ],
                unit="percentunit",
                description="Share of releases slower than the SLO threshold (budget: 1%)",
            )
        )
        .with_row(Row("Calls"))
        .with_panel(
            timeseries_panel(
                "Kubernetes API requests by code",
                [
                    (
                        f"sum by (bridge, code) (rate(rest_client_requests_total{{{BOTH}}}[{RATE}]))",
                        "{{bridge}} {{code}}",
                    )
                ],
                unit="reqps",
            )
        )
        .with_panel(
            timeseries_panel(
                "Kubernetes API request p99",
                quantiles(
                    "rest_client_request_duration_seconds", selector=BOTH, by=("bridge", "verb"), qs=(0.99,)
                ),
                unit="s",
            )
        )
        .with_panel(
            timeseries_panel(
                "slurmrestd requests by code",
                [
                    (
                        "sum by (code) "
                        f"(rate(k8s_bridge_slurmrestd_request_duration_seconds_count{{{SLURM}}}[{RATE}]))",
                        "{{code}}",
                    )
                ],
                unit="reqps",
                description="'none': no answer",
            )
        )
        .with_panel(
            timeseries_panel(
                "slurmrestd request p99 by path",
                quantiles(
                    "k8s_bridge_slurmrestd_request_duration_seconds", selector=SLURM, by=("path",), qs=(0.99,)
                ),
                unit="s",
            )
        )
        .with_panel(
            timeseries_panel(
                "Bridge actions by result",
                [
                    (
                        f"sum by (result) (rate(k8s_bridge_slurm_actions_total{{{SLURM}}}[{RATE}]))",
                        "slurm {{result}}",
                    ),
                    (
                        f"sum by (result) (rate(k8s_bridge_ray_actions_total{{{RAY}}}[{RATE}]))",
                        "ray {{result}}",
                    ),
                ],
                unit="ops",
            )
        )
        .with_panel(
            timeseries_panel(
                "Gate webhook reviews",
                [
                    (
                        f"sum by (decision) (rate(k8s_bridge_ray_webhook_reviews_total{{{RAY}}}[{RATE}]))",
                        "{{decision}}",
                    ),
                    (
                        f"sum by (code) (rate(controller_runtime_webhook_requests_total{{{RAY}}}[{RATE}]))",
                        "HTTP {{code}}",
                    ),
                ],
                unit="reqps",
                description="RayJob CREATE reviews by decision, and admission requests by result code",
            )
        )
    )
