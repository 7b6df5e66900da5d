"""The slurmd pod shim's pure parts: which node slurmd is started as, the shared hosts file, the env.

The mounts and the exec run only in the e2e tier (they need root and a Slurm cluster); what decides
their inputs is checked here.
"""

from __future__ import annotations

import pytest

from bridge.sandbox.slurmd_pod import node_name_of, render_hosts, slurmd_env

HEADER = ["127.0.0.1 localhost", "10.0.0.1 ctld"]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["-D", "-Z", "-N", "b7-0", "--conf", "CPUs=1"], "b7-0"),
        (["-Nb7-1"], "b7-1"),
        (["--nodename", "b7-2"], "b7-2"),
        (["--nodename=b7-3"], "b7-3"),
        (["-D", "--conf", "-N x"], None),
        (["-N"], None),
    ],
)
def test_node_name_is_read_from_slurmd_arguments(argv: list[str], expected: str | None) -> None:
    assert node_name_of(argv) == expected


def test_hosts_file_keeps_other_pods_and_replaces_an_older_pod_of_the_same_node() -> None:
    text = render_hosts("", header=HEADER, address="10.1.0.2", names=["b7-0", "pod-a"])
    text = render_hosts(text, header=HEADER, address="10.1.0.6", names=["b7-1", "pod-b"])
    text = render_hosts(text, header=HEADER, address="10.1.0.10", names=["b7-0", "pod-c"])
    lines = text.splitlines()
    assert lines[:2] == HEADER
    assert [line.split()[:2] for line in lines[2:]] == [["10.1.0.6", "b7-1"], ["10.1.0.10", "b7-0"]]


def test_hosts_file_drops_names_that_are_not_host_names() -> None:
    text = render_hosts("", header=HEADER, address="10.1.0.2", names=["b7-0", "evil\nname", "$(x)"])
    assert text.splitlines()[2].split()[:3] == ["10.1.0.2", "b7-0", "#"]


def test_slurmd_gets_no_slurm_variables_from_the_pod() -> None:
    env = slurmd_env({"SLURM_JWT": "t", "SLURM_CONF": "/x", "PATH": "/evil", "K8S_BRIDGE_NODE_NAME": "b7-0"})
    assert env["PATH"].startswith("/usr/local/sbin")
    assert env["K8S_BRIDGE_NODE_NAME"] == "b7-0"
    assert not any(key.startswith("SLURM") for key in env)
