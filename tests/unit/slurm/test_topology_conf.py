"""Slurm's topology.conf (tree plugin) mapped to Kueue levels and node labels."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml

from bridge.api.mixing import WorkloadMixingSpec, resolve_slurm_topology
from bridge.slurm.topology_conf import (
    HOSTNAME_LEVEL,
    TopologyConfError,
    main,
    map_topology_conf,
    parse_switches,
)

BLOCK, RACK = "example.com/block", "example.com/rack"

TWO_TIERS = """\
# two racks of two hosts under one block switch
SwitchName=rack0 Nodes=n[0-1] LinkSpeed=100
SwitchName=rack1 Nodes=n[2-3]
SwitchName=block0 Switches=rack[0-1]   # the spine
"""


def test_two_tiers_give_the_block_and_rack_of_every_node() -> None:
    mapping = map_topology_conf(TWO_TIERS, level_labels=[BLOCK, RACK])
    assert mapping.levels == (BLOCK, RACK, HOSTNAME_LEVEL)
    assert mapping.node_labels == {
        "n0": {BLOCK: "block0", RACK: "rack0", HOSTNAME_LEVEL: "n0"},
        "n1": {BLOCK: "block0", RACK: "rack0", HOSTNAME_LEVEL: "n1"},
        "n2": {BLOCK: "block0", RACK: "rack1", HOSTNAME_LEVEL: "n2"},
        "n3": {BLOCK: "block0", RACK: "rack1", HOSTNAME_LEVEL: "n3"},
    }
    assert mapping.switches_level == RACK  # --switches=1: one leaf switch
    assert mapping.topology("site")["spec"] == {
        "levels": [{"nodeLabel": BLOCK}, {"nodeLabel": RACK}, {"nodeLabel": HOSTNAME_LEVEL}]
    }


def test_the_leaf_level_is_what_a_job_asking_for_one_switch_gets() -> None:
    mapping = map_topology_conf(TWO_TIERS, level_labels=[BLOCK, RACK])
    spec = WorkloadMixingSpec.model_validate(
        {
            "slurm": {
                "url": "http://slurmrestd:6820",
                "auth": {"tokenSecretRef": {"namespace": "k8s-bridge", "name": "jwt", "key": "token"}},
                "clusterName": "hpc",
                "confServer": "slurmctld:6817",
                "partitions": ["bridge"],
                "mapping": {"default": {"localQueue": {"namespace": "slurm", "name": "hpc"}}},
                "podTemplate": {"image": "slurmd"},
                "topology": {"switches": {"required": mapping.switches_level}},
            }
        }
    )
    constraint = resolve_slurm_topology(spec, partition="bridge", switches=1)
    assert constraint is not None
    assert constraint.annotations() == {"kueue.x-k8s.io/podset-required-topology": RACK}


def test_a_shorter_branch_is_its_own_domain_at_the_upper_tiers() -> None:
    text = """\
SwitchName=leaf0 Nodes=a0
SwitchName=leaf1 Nodes=b0
SwitchName=mid Switches=leaf1
SwitchName=top Switches=leaf0,mid
SwitchName=island Nodes=c0
"""
    tiers = ["example.com/top", "example.com/mid", "example.com/leaf"]
    labels = map_topology_conf(text, level_labels=tiers, hostname=False).node_labels
    assert labels["b0"] == {"example.com/top": "top", "example.com/mid": "mid", "example.com/leaf": "leaf1"}
    # a0's leaf hangs off the top switch directly; the island has no switch above it at all
    assert labels["a0"] == {"example.com/top": "top", "example.com/mid": "top", "example.com/leaf": "leaf0"}
    assert labels["c0"] == {
        "example.com/top": "island",
        "example.com/mid": "island",
        "example.com/leaf": "island",
    }


def test_one_tier_without_hostname() -> None:
    mapping = map_topology_conf("SwitchName=s0 Nodes=n[0-2]\n", level_labels=[RACK], hostname=False)
    assert mapping.levels == (RACK,)
    assert mapping.node_labels["n2"] == {RACK: "s0"}


def test_keys_are_case_insensitive_as_slurm_reads_them() -> None:
    switches = parse_switches("switchname=s0 nodes=n[0-1]\nSWITCHNAME=s1 SWITCHES=s0\n")
    assert switches["s0"].nodes == ("n0", "n1")
    assert switches["s1"].switches == ("s0",)


@pytest.mark.parametrize(
    ("text", "labels", "match"),
    [
        ("BlockName=b0 Nodes=n[0-1]\n", [RACK], "'BlockName' is not a tree-plugin key"),
        ("SwitchName=s0 Nodes=n0\nSwitchName=s0 Nodes=n1\n", [RACK], "already defined on line 1"),
        ("SwitchName=s0 Nodes=n0 Switches=s1\n", [RACK], "exactly one of"),
        ("SwitchName=s0\n", [RACK], "exactly one of"),
        ("SwitchName=s0 Nodes=n0\nSwitchName=t Switches=s[0-1]\n", [BLOCK, RACK], "'s1' is not defined"),
        (
            "SwitchName=s0 Nodes=n0\nSwitchName=a Switches=s0\nSwitchName=b Switches=s0\n",
            [BLOCK, RACK],
            "also under 'a'",
        ),
        ("SwitchName=s0 Nodes=n[0-1]\nSwitchName=s1 Nodes=n1\n", [RACK], "'n1' is also under switch 's0'"),
        ("SwitchName=a Switches=b\nSwitchName=b Switches=a\nSwitchName=s Nodes=n0\n", [RACK], "cycle"),
        (TWO_TIERS, [RACK], "2 tier\\(s\\) deep: 2 level label\\(s\\) needed, got 1"),
        (TWO_TIERS, [RACK, RACK], "distinct"),
        ("SwitchName=s/0 Nodes=n0\n", [RACK], "not valid label values"),
        ("SwitchName=s0 Nodes=n[0-\n", [RACK], "line 1"),
        ("# nothing\n", [RACK], "no SwitchName= line"),
        ("Nodes=n0\n", [RACK], "line 1: no SwitchName="),
    ],
)
def test_what_cannot_be_mapped_is_refused_with_where(text: str, labels: list[str], match: str) -> None:
    with pytest.raises(TopologyConfError, match=match):
        map_topology_conf(text, level_labels=labels)


def test_the_command_prints_the_topology_the_mixing_entry_and_the_labels(tmp_path: Path) -> None:
    conf = tmp_path / "topology.conf"
    conf.write_text(TWO_TIERS)
    out = io.StringIO()
    assert main([str(conf), "--levels", f"{BLOCK},{RACK}", "--name", "site"], out=out) == 0
    topology, mixing, labels = yaml.safe_load_all(out.getvalue())
    assert topology["kind"] == "Topology"
    assert topology["metadata"]["name"] == "site"
    assert mixing == {"switches": {"required": RACK}}
    assert labels["n3"] == {BLOCK: "block0", RACK: "rack1", HOSTNAME_LEVEL: "n3"}


def test_the_command_says_what_is_wrong(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "topology.conf"
    conf.write_text(TWO_TIERS)
    assert main([str(conf), "--levels", RACK], out=io.StringIO()) == 1
    assert "2 level label(s) needed, got 1" in capsys.readouterr().err
