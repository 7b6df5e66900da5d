"""E2ESettings for topology-aware scheduling: a Kueue Topology over labelled runner nodes."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest

from bridge.sandbox.e2e import E2ESettings, E2EStack
from bridge.sandbox.slurm import SlurmCluster
from bridge.sandbox.stack import KubeStack

LEVELS = ("example.com/block", "example.com/rack", "kubernetes.io/hostname")


def stack(tmp_path: Path, settings: E2ESettings) -> E2EStack:
    """An E2EStack that is never started: only its manifests are read."""
    return E2EStack(
        kube=cast(KubeStack, object()),
        slurm=cast(SlurmCluster, object()),
        workdir=tmp_path,
        settings=settings,
    )


def test_with_levels_the_flavor_names_a_topology_made_before_it(tmp_path: Path) -> None:
    objects = stack(tmp_path, E2ESettings(pool="tas", topology_levels=LEVELS)).kueue_objects()
    kinds = [manifest["kind"] for _, manifest in objects]
    assert kinds.index("Topology") < kinds.index("ResourceFlavor")
    topology = next(m for _, m in objects if m["kind"] == "Topology")
    assert topology["metadata"]["name"] == "tas"
    assert [level["nodeLabel"] for level in topology["spec"]["levels"]] == list(LEVELS)
    flavor = next(m for _, m in objects if m["kind"] == "ResourceFlavor")
    assert flavor["spec"]["topologyName"] == "tas"
    assert flavor["spec"]["nodeLabels"] == {"k8s-bridge.io/pool": "tas"}


def test_without_levels_nothing_changes(tmp_path: Path) -> None:
    objects = stack(tmp_path, E2ESettings()).kueue_objects()
    assert "Topology" not in [manifest["kind"] for _, manifest in objects]
    flavor = next(m for _, m in objects if m["kind"] == "ResourceFlavor")
    assert "topologyName" not in flavor["spec"]
    assert E2ESettings().topology is None


def test_labels_for_more_runner_nodes_than_made_are_refused() -> None:
    with pytest.raises(ValueError, match="labels for 2 runner nodes, 1 made"):
        E2ESettings(runner_nodes=1, runner_node_labels=({"a": "b"}, {"a": "c"}))
