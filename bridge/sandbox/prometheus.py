"""A real Prometheus server for the local stack: scrapes the running bridges, evaluates the chart's rules.

Why a real server and not a parser of ``/metrics``: the dashboards and alerts are PromQL, and only
Prometheus says whether a query is valid, what a ``rate`` over scraped samples returns, and whether a
recording rule records. The server is the one the stack build makes (``stack_paths().prometheus``),
started as a daemon of a :class:`~bridge.sandbox.processes.ProcessGroup` on 127.0.0.1 with static
targets (one per bridge, labelled ``bridge`` as the chart's ServiceMonitors label them) and the rule
files given; its HTTP API is read with urllib (synchronous, like the rest of the e2e stack).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from bridge.sandbox.build import stack_paths
from bridge.sandbox.processes import ManagedProcess, ProcessGroup, StackError, free_port

__all__ = ["PrometheusServer", "scrape_config"]


def scrape_config(
    *,
    targets: Mapping[str, str],
    rule_files: Sequence[Path],
    interval: str,
    namespace: str,
) -> dict[str, Any]:
    """Prometheus' configuration: one job per bridge (``targets``: bridge -> host:port), scraped and
    evaluated every ``interval``, each target labelled with its ``bridge`` and ``namespace``."""
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
        "rule_files": [str(path) for path in rule_files],
        "scrape_configs": [
            {
                "job_name": f"k8s-bridge-{bridge}",
                "static_configs": [
                    {"targets": [address], "labels": {"bridge": bridge, "namespace": namespace}}
                ],
            }
            for bridge, address in sorted(targets.items())
        ],
    }


@dataclass
class PrometheusServer:
    """``prometheus`` scraping ``targets`` (bridge -> metrics port on 127.0.0.1); see the module docstring."""

    group: ProcessGroup
    workdir: Path
    targets: Mapping[str, int]
    rule_files: Sequence[Path] = ()
    interval: str = "1s"
    namespace: str = "e2e"
    port: int = field(default_factory=free_port)
    process: ManagedProcess | None = field(default=None, init=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *, timeout: float = 60.0) -> Self:
        binary = stack_paths().prometheus
        if not binary.exists():
            raise StackError(f"prometheus is not built ({binary}): run `python3 -m bridge.sandbox.build all`")
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "prometheus.yml"
        addresses = {bridge: f"127.0.0.1:{port}" for bridge, port in self.targets.items()}
        document = scrape_config(
            targets=addresses, rule_files=self.rule_files, interval=self.interval, namespace=self.namespace
        )
        config.write_text(json.dumps(document, indent=2))  # JSON is YAML
        argv = [
            str(binary),
            f"--config.file={config}",
            f"--storage.tsdb.path={self.workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--storage.tsdb.retention.time=1d",
            "--log.level=warn",
        ]
        self.process = self.group.start("prometheus", argv)
        deadline = time.monotonic() + timeout
        while not self._ready():
            if not self.process.alive():
                raise StackError(f"prometheus exited: see {self.process.log_path}")
            if time.monotonic() > deadline:
                raise StackError(f"prometheus not ready after {timeout:.0f}s: see {self.process.log_path}")
            time.sleep(0.2)
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.group.stop(self.process, grace=10.0)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as reply:  # noqa: S310 - loopback http
                return int(reply.status) == 200
        except (urllib.error.URLError, OSError):
            return False

    def api(self, path: str, **params: str | Sequence[str]) -> Any:
        """GET ``/api/v1/<path>``: its ``data``; an error answer raises :class:`StackError` with Prometheus'
        message (a query that does not parse, a bad range)."""
        query = urllib.parse.urlencode(params, doseq=True)
        try:
            url = f"{self.url}/api/v1/{path}?{query}"
            with urllib.request.urlopen(url, timeout=30) as reply:  # noqa: S310 - a loopback http URL built here
                body: Any = json.loads(reply.read())
        except urllib.error.HTTPError as failed:
            body = json.loads(failed.read() or b"{}")
        if body.get("status") != "success":
            raise StackError(f"prometheus {path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query now: its vector (or a scalar as one sample)."""
        data = self.api("query", query=expr)
        result = data["result"]
        return [{"metric": {}, "value": result}] if data["resultType"] == "scalar" else list(result)

    def query_range(self, expr: str, *, start: float, end: float, step: float = 1.0) -> list[dict[str, Any]]:
        data = self.api("query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=str(step))
        return list(data["result"])

    def series(self, match: str, *, start: float) -> list[dict[str, str]]:
        return list(self.api("series", **{"match[]": match, "start": f"{start:.3f}"}))

    def names(self, match: str, *, start: float) -> set[str]:
        """Every metric name with a series matching ``match`` since ``start``."""
        return set(self.api("label/__name__/values", **{"match[]": match, "start": f"{start:.3f}"}))

    def rules(self) -> list[dict[str, Any]]:
        return [rule for group in self.api("rules")["groups"] for rule in group["rules"]]

    def targets_up(self) -> dict[str, str]:
        """bridge -> target health (``up``, ``down``, ``unknown``)."""
        active = self.api("targets", state="active")["activeTargets"]
        return {str(t["labels"].get("bridge")): str(t["health"]) for t in active}
