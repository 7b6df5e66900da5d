"""The chart's alert and SLO rules, checked and unit-tested by the real promtool (built by the stack
build from the Prometheus module at the pinned version).

``charts/k8s-bridge/files/prometheus-rules.yaml`` is the one source: the chart embeds it as its
PrometheusRule (tests/integration/test_chart.py compares them) and ``promtool/rules-test.yaml`` runs
it here: for each alert, series that fire it and series that must not. A promtool run takes well
under a second; the tier only needs promtool built.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from bridge.sandbox.build import stack_paths

REPO_ROOT = Path(__file__).resolve().parents[2]
RULES = REPO_ROOT / "charts" / "k8s-bridge" / "files" / "prometheus-rules.yaml"
RULE_TESTS = Path(__file__).with_name("promtool") / "rules-test.yaml"


@pytest.fixture(scope="module")
def promtool() -> Path:
    binary = stack_paths().promtool
    if not binary.exists():
        build = "python3 -m bridge.sandbox.build all"
        pytest.fail(f"promtool is not built ({binary}): run `{build}`", pytrace=False)
    return binary


def run(promtool: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(promtool), *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=120
    )


def alert_names() -> set[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule}


def test_promtool_checks_the_rules(promtool: Path) -> None:
    done = run(promtool, "check", "rules", str(RULES), cwd=REPO_ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout + done.stderr


def test_promtool_passes_every_rule_test(promtool: Path) -> None:
    done = run(promtool, "test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_has_a_case_that_fires_it_and_one_that_must_not() -> None:
    fired: set[str] = set()
    quiet: set[str] = set()
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            (fired if check["exp_alerts"] else quiet).add(check["alertname"])
    assert alert_names() - fired == set()
    assert alert_names() - quiet == set()


def test_the_required_alerts_are_there() -> None:
    assert alert_names() >= {
        "K8sBridgeDown",
        "K8sBridgeNoLeader",
        "K8sBridgeReconcileErrors",
        "K8sBridgeWorkQueueBackingUp",
        "K8sBridgeSlurmJobsNotRunning",
        "K8sBridgeRayJobsNotRunning",
        "K8sBridgeSlurmrestdErrors",
        "K8sBridgeWebhookFailures",
        "K8sBridgeReleaseLatencyBudgetBurn",
    }


def test_every_alert_has_a_runbook_section_in_the_operations_guide() -> None:
    guide = (REPO_ROOT / "docs" / "operations.md").read_text()
    for name in alert_names():
        assert f"### {name}" in guide, name


def test_a_wrong_expectation_fails(promtool: Path, tmp_path: Path) -> None:
    # The check itself: the same tests with a threshold moved must fail.
    rules = tmp_path / "charts" / "k8s-bridge" / "files"
    rules.mkdir(parents=True)
    (rules / RULES.name).write_text(RULES.read_text().replace("> 0.1\n", "> 0.5\n"))
    tests = tmp_path / "tests" / "integration" / "promtool"
    tests.mkdir(parents=True)
    shutil.copyfile(RULE_TESTS, tests / RULE_TESTS.name)
    done = run(promtool, "test", "rules", RULE_TESTS.name, cwd=tests)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "K8sBridgeReconcileErrors" in done.stdout + done.stderr
