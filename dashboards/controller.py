"""Controller internals: the runtime's controller-runtime and client-go series (leader, work queues,
reconciles, informers, the process), the panels an operator of any Go controller knows."""

from __future__ import annotations

from grafana_foundation_sdk.builders.dashboard import Dashboard, Row

from .panels import RATE, datasource_variable, quantiles, timeseries_panel

__all__ = ["UID", "controller_internals"]

UID = "k8s-bridge-controller"
BOTH = 'bridge=~"slurm|ray"'


def controller_internals() -> Dashboard:
    return (
        Dashboard("k8s-bridge / Controller internals")
        .uid(UID)
        .tags(["k8s-bridge", "controller-runtime"])
        .description("Work queues, reconciles, informers and leader election of both bridges")
        .refresh("30s")
        .time("now-3h", "now")
        .with_variable(datasource_variable())
        .with_row(Row("Leader and workers"))
        .with_panel(
            timeseries_panel(
                "Leader",
                [
                    (
                        f"max by (bridge, instance) (leader_election_master_status{{{BOTH}}})",
                        "{{bridge}} {{instance}}",
                    )
                ],
                description="1: this replica holds the Lease",
            )
        )
        .with_panel(
            timeseries_panel(
                "Active workers",
                [
                    (
                        f"sum by (bridge, controller) (controller_runtime_active_workers{{{BOTH}}})",
                        "{{controller}}",
                    ),
                    (
                        "sum by (bridge, controller) "
                        f"(controller_runtime_max_concurrent_reconciles{{{BOTH}}})",
                        "{{controller}} max",
                    ),
                ],
            )
        )
        .with_panel(
            timeseries_panel(
                "Longest running reconcile",
                [
                    (
                        f"max by (bridge, name) (workqueue_longest_running_processor_seconds{{{BOTH}}})",
                        "{{name}}",
                    )
                ],
                unit="s",
            )
        )
        .with_row(Row("Work queues"))
        .with_panel(
            timeseries_panel(
                "Work queue depth",
                [(f"sum by (bridge, name) (workqueue_depth{{{BOTH}}})", "{{name}}")],
            )
        )
        .with_panel(
            timeseries_panel(
                "Work queue adds and retries",
                [
                    (
                        f"sum by (bridge, name) (rate(workqueue_adds_total{{{BOTH}}}[{RATE}]))",
                        "{{name}} adds",
                    ),
                    (
                        f"sum by (bridge, name) (rate(workqueue_retries_total{{{BOTH}}}[{RATE}]))",
                        "{{name}} retries",
                    ),
                ],
                unit="ops",
            )
        )
        .with_panel(
            timeseries_panel(
                "Work queue wait p99",
                quantiles("workqueue_queue_duration_seconds", selector=BOTH, by=("name",), qs=(0.99,)),
                unit="s",
            )
        )
        .with_row(Row("Reconciles"))
        .with_panel(
            timeseries_panel(
                "Reconciles by result",
                [
                    (
                        "sum by (bridge, controller, result) "
                        f"(rate(controller_runtime_reconcile_total{{{BOTH}}}[{RATE}]))",
                        "{{controller}} {{result}}",
                    )
                ],
                unit="ops",
            )
        )
        .with_panel(
            timeseries_panel(
                "Reconcile errors by controller",
                [
                    (
                        "sum by (bridge, controller) "
                        f"(rate(controller_runtime_reconcile_errors_total{{{BOTH}}}[{RATE}]))",
                        "{{controller}}",
                    )
                ],
                unit="ops",
            )
        )
        .with_panel(
            timeseries_panel(
                "Reconcile duration p99",
                quantiles(
                    "controller_runtime_reconcile_time_seconds", selector=BOTH, by=("controller",), qs=(0.99,)
                ),
                unit="s",
            )
        )
        .with_row(Row("Informers and process"))
        .with_panel(
            timeseries_panel(
                "Watch events received",
                [
                    (
                        f"sum by (bridge, name) (rate(reflector_events_total{{{BOTH}}}[{RATE}]))",
                        "{{bridge}} {{name}}",
                    )
                ],
                unit="ops",
            )
        )
        .with_panel(
            timeseries_panel(
                "Lists, failures and 410 Gone",
                [
                    (f"sum by (bridge) (rate(reflector_lists_total{{{BOTH}}}[{RATE}]))", "{{bridge}} lists"),
                    (
                        f"sum by (bridge) (rate(reflector_failures_total{{{BOTH}}}[{RATE}]))",
                        "{{bridge}} failures",
                    ),
                    (f"sum by (bridge) (rate(reflector_gone_total{{{BOTH}}}[{RATE}]))", "{{bridge}} gone"),
                ],
                unit="ops",
            )
        )
        .with_panel(
            timeseries_panel(
                "Informer cache objects",
                [(f"sum by (bridge, name) (informer_cache_objects{{{BOTH}}})", "{{bridge}} {{name}}")],
            )
        )
        .with_panel(
            timeseries_panel(
                "Resident memory",
                [
                    (
                        f"max by (bridge, instance) (process_resident_memory_bytes{{{BOTH}}})",
                        "{{bridge}} {{instance}}",
                    )
                ],
                unit="bytes",
            )
        )
        .with_panel(
            timeseries_panel(
                "CPU",
                [
                    (
                        f"max by (bridge, instance) (rate(process_cpu_seconds_total{{{BOTH}}}[{RATE}]))",
                        "{{bridge}} {{instance}}",
                    )
                ],
                unit="percentunit",
            )
        )
    )
