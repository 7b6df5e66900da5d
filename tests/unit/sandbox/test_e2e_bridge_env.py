"""bridge.sandbox.e2e.bridge_environment: what of the caller's environment the bridge subprocess gets."""

from __future__ import annotations

from bridge.sandbox.e2e import bridge_environment


def test_the_bridge_runs_the_callers_sources_and_nothing_else_of_its_environment() -> None:
    caller = {
        "PATH": "/opt/bin",
        "HOME": "/home/x",
        "PYTHONPATH": "/tmp/other-checkout",
        "K8S_BRIDGE_MAX_CONCURRENT_RECONCILES": "1",  # would set a flag of the bridge
        "SECRET": "s",
    }
    env = bridge_environment(caller, {"SLURM_CONF": "/etc/slurm.conf"})
    assert env == {
        "PATH": "/opt/bin",
        "HOME": "/home/x",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": "/tmp/other-checkout",
        "SLURM_CONF": "/etc/slurm.conf",
    }


def test_no_import_path_of_its_own_when_the_caller_has_none() -> None:
    env = bridge_environment({"PATH": "/bin"}, {})
    assert "PYTHONPATH" not in env
    assert env["HOME"] == "/root"
