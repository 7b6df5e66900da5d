"""The flags every bridge program takes, each with its environment variable, and their settings.

Why one place: the Slurm and the Ray bridge are run, deployed and debugged the same way (a Helm chart
sets the same environment variables on both; an operator types the same ``--leader-elect`` on both),
so the flags they share are defined once. Names follow controller-runtime's (``--leader-elect``,
``--metrics-bind-address``, ``--health-probe-bind-address``, ``--zap-log-level`` as ``--log-level``);
each flag also reads ``K8S_BRIDGE_<FLAG>`` and the flag wins.

A program adds its own flags to the parser (:func:`add_common_flags` for every subcommand,
:func:`add_run_flags` for the controller) and subclasses :class:`ProgramSettings` with its own fields.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Final

from bridge.runtime.logging import configure_logging

__all__ = [
    "ENV_PREFIX",
    "ProgramSettings",
    "add_common_flags",
    "add_run_flags",
    "bind_address",
    "check_common",
    "common_settings",
    "configure_program_logging",
    "default_namespace",
    "env",
    "env_bool",
    "flag_help",
    "program_name",
]

ENV_PREFIX: Final = "K8S_BRIDGE_"
LOG_LEVELS: Final = {"debug": 1, "info": 0, "warning": -1, "error": -1}
_NAMESPACE_FILE: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def default_namespace() -> str:
    """The pod's namespace in a cluster, else ``$POD_NAMESPACE``, else ``default``."""
    try:
        return _NAMESPACE_FILE.read_text().strip() or "default"
    except OSError:
        return os.environ.get("POD_NAMESPACE") or "default"


@dataclass(frozen=True, kw_only=True)
class ProgramSettings:
    """What every bridge program is told on its command line (or environment)."""

    lease_prefix: ClassVar[str] = "k8s-bridge"
    """The default Lease is ``<lease_prefix>-<config>``; each program sets its own."""

    config: str
    """Name of the WorkloadMixing to run."""
    kubeconfig: str | None = None
    leader_elect: bool = False
    leader_election_namespace: str = field(default_factory=default_namespace)
    leader_election_id: str = ""
    """Lease name; empty: ``<lease_prefix>-<config>``."""
    metrics_bind_address: str = ":8080"
    health_probe_bind_address: str = ":8081"
    log_level: str = "info"
    log_format: str = "auto"
    verbose: int = 0
    """``-v`` flags: 1 is debug (as ``--log-level=debug``), 2 also logs the HTTP client libraries."""
    max_concurrent_reconciles: int = 16
    """Reconciles wait on the API server and the external system, not the CPU."""
    memory_trim_interval: float = 60.0
    """Seconds between two hand-backs of the allocator's free memory (``malloc_trim``); 0: never."""
    reconcile_batch_period: float = 0.1
    """Seconds a live event's reconcile waits for the events that follow it (one reconcile for the
    burst one action sets off); events a program ranks urgent are not held."""
    graceful_shutdown_timeout: float = 30.0
    mixing_controller: bool = True

    @property
    def lease_name(self) -> str:
        return self.leader_election_id or f"{self.lease_prefix}-{self.config}"


def program_name(argv0: str, *, module: str) -> str:
    """The name a program was run by, for its usage and help: the command (``k8s-bridge``, the console
    script the chart and the images run, whatever folder it is in), or ``python -m <module>`` when run
    as a module (``argv[0]`` is then the module's ``__main__.py``), or when ``argv[0]`` is empty."""
    name = Path(argv0).name
    if not name or name == "__main__.py":
        return f"python -m {module}"
    return name


def env(name: str, default: str | None = None) -> str | None:
    """``K8S_BRIDGE_<NAME>`` (dashes as underscores), else ``default``."""
    return os.environ.get(ENV_PREFIX + name.upper().replace("-", "_"), default)


def env_bool(name: str, default: bool) -> bool:
    value = env(name)
    if value is None:
        return default
    return value.strip().lower() in ("1", "true", "yes", "on")


def flag_help(text: str, flag: str) -> str:
    """A flag's help text, naming the environment variable that also sets it."""
    return f"{text} [env {ENV_PREFIX}{flag.upper().replace('-', '_')}]"


def add_common_flags(parser: argparse.ArgumentParser) -> None:
    """Flags of every subcommand: where the cluster is, which WorkloadMixing, how to log."""
    add = parser.add_argument
    add(
        "--kubeconfig",
        default=env("kubeconfig"),
        help=flag_help(
            "Path to a kubeconfig; default: $KUBECONFIG, ~/.kube/config, else in-cluster", "kubeconfig"
        ),
    )
    add(
        "--config",
        default=env("config"),
        help=flag_help("Name of the WorkloadMixing to run (required)", "config"),
    )
    add(
        "--log-level",
        choices=sorted(LOG_LEVELS),
        default=env("log-level", "info"),
        help=flag_help("Log level (zap-log-level); -v is debug", "log-level"),
    )
    add("-v", "--verbose", action="count", default=0, help="More logs (-vv also logs HTTP client libraries)")
    add(
        "--log-format",
        choices=["auto", "json", "console"],
        default=env("log-format", "auto"),
        help=flag_help(
            "Log format: JSON lines (auto: when not on a terminal or in a pod) or console", "log-format"
        ),
    )


def add_run_flags(parser: argparse.ArgumentParser, *, lease_default: str, concurrency_help: str) -> None:
    """Flags of the controller: leader election, probes and metrics, concurrency, shutdown."""
    add = parser.add_argument
    add(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=env_bool("leader-elect", False),
        help=flag_help("Run only while holding a Lease, so several replicas can run", "leader-elect"),
    )
    add(
        "--leader-election-namespace",
        default=env("leader-election-namespace", default_namespace()),
        help=flag_help("Namespace of the Lease", "leader-election-namespace"),
    )
    add(
        "--leader-election-id",
        default=env("leader-election-id", ""),
        help=flag_help(f"Name of the Lease (default: {lease_default})", "leader-election-id"),
    )
    add(
        "--metrics-bind-address",
        default=env("metrics-bind-address", ":8080"),
        help=flag_help("host:port of /metrics ('0' disables it)", "metrics-bind-address"),
    )
    add(
        "--health-probe-bind-address",
        default=env("health-probe-bind-address", ":8081"),
        help=flag_help("host:port of /healthz and /readyz ('0' disables it)", "health-probe-bind-address"),
    )
    add(
        "--max-concurrent-reconciles",
        type=int,
        default=int(env("max-concurrent-reconciles", "16") or 16),
        help=flag_help(concurrency_help, "max-concurrent-reconciles"),
    )
    add(
        "--reconcile-batch-period",
        type=float,
        default=float(env("reconcile-batch-period", "0.1") or 0.1),
        help=flag_help(
            "Seconds a reconcile waits for the changes that follow the one that queued it, so that "
            "a burst (a JobSet's deletion: its pods, its Job, its Workload) is one reconcile; urgent "
            "events (a job's last node registering) are not held; 0: reconcile at once",
            "reconcile-batch-period",
        ),
    )
    add(
        "--memory-trim-interval",
        type=float,
        default=float(env("memory-trim-interval", "60") or 60),
        help=flag_help(
            "Seconds between two hand-backs to the system of the memory glibc holds free "
            "(malloc_trim; a deep queue's cache churn leaves it between live blocks); 0: never",
            "memory-trim-interval",
        ),
    )
    add(
        "--graceful-shutdown-timeout",
        type=float,
        default=float(env("graceful-shutdown-timeout", "30") or 30),
        help=flag_help("Seconds in-flight reconciles get on SIGTERM", "graceful-shutdown-timeout"),
    )
    add(
        "--mixing-controller",
        action=argparse.BooleanOptionalAction,
        default=env_bool("mixing-controller", True),
        help=flag_help(
            "Also run the WorkloadMixing controller (validation, status, last good configuration); "
            "without it the resource is used as it is",
            "mixing-controller",
        ),
    )


def common_settings(ns: argparse.Namespace, *, run: bool) -> dict[str, Any]:
    """Keyword arguments of :class:`ProgramSettings` from parsed common (and, for ``run``, run) flags."""
    values: dict[str, Any] = {
        "config": ns.config or "",
        "kubeconfig": ns.kubeconfig,
        "log_level": "debug" if ns.verbose else ns.log_level,
        "log_format": ns.log_format,
        "verbose": ns.verbose,
    }
    if run:
        values.update(
            leader_elect=ns.leader_elect,
            leader_election_namespace=ns.leader_election_namespace,
            leader_election_id=ns.leader_election_id,
            metrics_bind_address=ns.metrics_bind_address,
            health_probe_bind_address=ns.health_probe_bind_address,
            max_concurrent_reconciles=ns.max_concurrent_reconciles,
            reconcile_batch_period=ns.reconcile_batch_period,
            memory_trim_interval=ns.memory_trim_interval,
            graceful_shutdown_timeout=ns.graceful_shutdown_timeout,
            mixing_controller=ns.mixing_controller,
        )
    return values


def check_common(
    parser: argparse.ArgumentParser, settings: ProgramSettings, *, config_required: bool
) -> None:
    """Exit with usage when a common setting is unusable."""
    if config_required and not settings.config:
        parser.error(f"--config (or {ENV_PREFIX}CONFIG) is required")
    if settings.max_concurrent_reconciles < 1:
        parser.error("--max-concurrent-reconciles must be at least 1")
    if settings.memory_trim_interval < 0:
        parser.error("--memory-trim-interval must not be negative")
    if not 0 <= settings.reconcile_batch_period <= 10:
        parser.error("--reconcile-batch-period must be between 0 and 10 seconds")
    for flag, address in (
        ("--metrics-bind-address", settings.metrics_bind_address),
        ("--health-probe-bind-address", settings.health_probe_bind_address),
    ):
        try:
            bind_address(address)
        except ValueError as exc:
            parser.error(f"{flag}: {exc}")


def bind_address(text: str) -> tuple[str, int] | None:
    """``":8080"`` -> ("0.0.0.0", 8080); ``"127.0.0.1:0"``; ``"0"`` or ``""`` -> None (disabled)."""
    if text in ("", "0"):
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"not a host:port bind address: {text!r}")
    return (host.strip("[]") or "0.0.0.0", int(port))  # noqa: S104 - like controller-runtime's ":8080"


def configure_program_logging(settings: ProgramSettings) -> None:
    """structlog for the whole process, at the level and in the format the settings ask for."""
    json_logs = None if settings.log_format == "auto" else settings.log_format == "json"
    configure_logging(verbosity=max(LOG_LEVELS.get(settings.log_level, 0), settings.verbose), json=json_logs)
