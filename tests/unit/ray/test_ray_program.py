"""bridge.ray.program and bridge.ray.webhook: the Ray program's flags on the shared shell, and the gate
webhook's lookups in the bridge's caches."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from dataclasses import dataclass

import pytest
from prometheus_client import CollectorRegistry

from bridge.api.mixing import WorkloadMixingSpec
from bridge.ray.metrics import ray_metrics
from bridge.ray.program import RayBridge, Settings, parse_args
from bridge.ray.webhook import GateWebhook
from bridge.runtime.cache import Store
from tests.fixtures.ray_objects import (
    NAMESPACE,
    admission_request,
    apply_patch,
    make_spec,
    raycluster,
    rayjob,
)
from translators.ray import ANNOTATION_GATE


@dataclass
class _Config:
    spec: WorkloadMixingSpec | None


def test_flags_parse_into_settings_with_the_shells_names() -> None:
    command, s, _ = parse_args(
        ["--config", "site", "--leader-elect", "--webhook-cert-dir", "/certs", "--cluster-domain", "k.local"]
    )
    assert command == "run"
    assert (s.config, s.leader_elect, s.webhook_cert_dir, s.cluster_domain) == (
        "site",
        True,
        "/certs",
        "k.local",
    )
    assert s.lease_name == "k8s-bridge-ray-site"


def test_flags_have_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("K8S_BRIDGE_CONFIG", "env-site")
    monkeypatch.setenv("K8S_BRIDGE_WEBHOOK_BIND_ADDRESS", "127.0.0.1:9999")
    monkeypatch.setenv("K8S_BRIDGE_MAX_CONCURRENT_RECONCILES", "3")
    _, s, _ = parse_args([])
    assert (s.config, s.webhook_bind_address, s.max_concurrent_reconciles) == (
        "env-site",
        "127.0.0.1:9999",
        3,
    )


def test_bad_flags_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, message in (
        (["--config", "site", "--webhook-bind-address", "nonsense"], "--webhook-bind-address"),
        (["explain", "no-namespace", "--config", "site"], "<namespace>/<name>"),
        (["--config", "site", "--max-concurrent-reconciles", "0"], "at least 1"),
    ):
        with pytest.raises(SystemExit):
            parse_args(argv)
        assert message in capsys.readouterr().err


def test_explain_takes_namespace_and_name() -> None:
    command, _, ns = parse_args(["explain", "team-a/train", "--config", "site"])
    assert (command, ns.rayjob) == ("explain", "team-a/train")


def test_the_program_is_a_bridge_on_the_shell() -> None:
    bridge = RayBridge(Settings(config="site"), handle_signals=False)
    assert (bridge.name, bridge.live.name) == ("ray", "site")
    with pytest.raises(ValueError, match="WorkloadMixing"):
        RayBridge(Settings(config=""))


def test_module_entry_point_prints_help() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bridge.ray", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0
    assert "--webhook-cert-dir" in done.stdout
    assert "K8S_BRIDGE_WEBHOOK_CERT_DIR" in done.stdout


def _webhook(*, spec: WorkloadMixingSpec | None, labels: dict[str, str], queues: list[str]) -> GateWebhook:
    clusters, local_queues = Store(), Store()
    clusters.put(raycluster(labels=labels))
    for queue in queues:
        local_queues.put({"kind": "LocalQueue", "metadata": {"name": queue, "namespace": NAMESPACE}})
    return GateWebhook(
        config=_Config(spec), mixing_name="site", rayclusters=clusters, local_queues=local_queues
    )


SELECTING = make_spec(clusterSelector={"matchLabels": {"bridge": "yes"}})


async def test_webhook_gates_a_rayjob_of_a_selected_cluster() -> None:
    webhook = _webhook(spec=SELECTING, labels={"bridge": "yes"}, queues=["ray"])
    request = admission_request(rayjob())
    response = await webhook.review(request)
    assert response.allowed
    assert response.patch is not None
    mutated = apply_patch(request["object"], response.patch)
    assert mutated["metadata"]["annotations"][ANNOTATION_GATE].startswith("k8s-bridge-")
    review = response.to_review("u")
    assert json.loads(base64.b64decode(review["response"]["patch"])) == response.patch
    assert webhook.decisions == {"gate": 1}


async def test_webhook_passes_a_cluster_the_configuration_does_not_select() -> None:
    webhook = _webhook(spec=SELECTING, labels={"bridge": "no"}, queues=["ray"])
    response = await webhook.review(admission_request(rayjob()))
    assert (response.allowed, response.patch) == (True, None)


async def test_webhook_passes_everything_without_a_configuration() -> None:
    response = await _webhook(spec=None, labels={"bridge": "yes"}, queues=["ray"]).review(
        admission_request(rayjob())
    )
    assert (response.allowed, response.patch) == (True, None)


async def test_webhook_denies_when_the_local_queue_does_not_exist() -> None:
    webhook = _webhook(spec=SELECTING, labels={"bridge": "yes"}, queues=[])
    response = await webhook.review(admission_request(rayjob()))
    assert not response.allowed
    assert response.message is not None
    assert "LocalQueue" in response.message
    assert webhook.decisions == {"deny": 1}


def test_metrics_read_live_state_when_scraped() -> None:
    registry = CollectorRegistry()
    metrics = ray_metrics(registry)
    assert ray_metrics(registry) is metrics
    metrics.live.phases = lambda: {"queued": 2, "running": 1}
    metrics.live.ungated = lambda: 3
    metrics.live.webhook = lambda: {"gate": 5, "deny": 1}
    value = registry.get_sample_value
    assert value("k8s_bridge_ray_jobs", {"phase": "queued"}) == 2
    assert value("k8s_bridge_ray_jobs", {"phase": "admitted"}) == 0
    assert value("k8s_bridge_ray_ungated_rayjobs") == 3
    assert value("k8s_bridge_ray_webhook_reviews_total", {"decision": "deny"}) == 1


def test_short_start_timeouts_degrade_the_workloadmixing() -> None:
    bridge = RayBridge(Settings(config="site"), handle_signals=False)
    bridge._report_short_timeouts({"team-a/shared": "RayJob team-a/x: waited 800 s"})
    (problem,) = bridge.counts.problems("site")
    assert (problem.reason, problem.blocking) == ("RayStartTimeoutTooShort", False)
    assert "team-a/shared" in problem.message
    bridge._report_short_timeouts({})
    assert bridge.counts.problems("site") == []
