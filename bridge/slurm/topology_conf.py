"""Slurm's ``topology.conf`` (the tree plugin's switches) as a Kueue Topology and node labels.

Why: a site that moves work from Slurm to Kueue already describes its network to slurmctld, switch by
switch (``SwitchName=s0 Nodes=n[0-15]``, ``SwitchName=top Switches=s[0-3]``). Kueue's topology-aware
scheduling wants the same facts as node labels, one per level of a ``Topology``, and the bridge maps a
job's ``--switches=1`` to one of those levels (``spec.slurm.topology.switches``). Writing both by hand
invites the two descriptions to drift; :func:`map_topology_conf` derives them from the file.

The mapping (``docs/controller.md``, "Topology-aware placement"): switch tiers are counted from the
nodes up. Tier 0 is the leaf switches (those with ``Nodes=``), tier 1 their parents, and so on; the
caller names one node label per tier, highest first, so the last label is the leaf switches'. Every
node gets, for each tier, the name of its switch at that tier. A branch shorter than the tree's
deepest one has no switch at the upper tiers: its topmost switch stands for them (a domain that holds
only that branch, which is what Slurm means: nothing above connects it to the rest). ``--switches=1``
(one leaf switch) is then the last label's level; ``kubernetes.io/hostname`` can close the levels.
Node names are taken to be the Kubernetes nodes' names (the hosts Slurm and Kubernetes share).

What is refused, with the line: keys other than ``SwitchName``, ``Switches``, ``Nodes`` and
``LinkSpeed`` (e.g. the block plugin's ``BlockName``), a switch named twice, with both or neither of
``Nodes`` and ``Switches``, a child switch that is not defined or has two parents, a node under two
leaf switches, a cycle, and switch names that are not valid label values. Pure: text in, mapping out.

From a shell, ``python -m bridge.slurm.topology_conf topology.conf --levels
example.com/block,example.com/rack`` prints the Topology, the WorkloadMixing's
``spec.slurm.topology`` for ``--switches=1`` and every node's labels, as YAML documents.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import yaml

from bridge.slurmrest import hostlist

__all__ = [
    "HOSTNAME_LEVEL",
    "SlurmTopologyMapping",
    "TopologyConfError",
    "map_topology_conf",
    "parse_switches",
]

HOSTNAME_LEVEL = "kubernetes.io/hostname"
_KEYS = frozenset({"switchname", "switches", "nodes", "linkspeed"})
_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")


class TopologyConfError(ValueError):
    """The topology.conf text cannot be mapped; the message names the line or the switch."""


@dataclass(frozen=True, kw_only=True)
class Switch:
    """One ``SwitchName=`` line: its child switches or its nodes (one of the two)."""

    name: str
    switches: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()
    line: int = 0


@dataclass(frozen=True, kw_only=True)
class SlurmTopologyMapping:
    """What :func:`map_topology_conf` yields."""

    levels: tuple[str, ...]
    """The Kueue Topology's ``spec.levels[].nodeLabel``, highest first."""
    node_labels: Mapping[str, Mapping[str, str]]
    """Node name -> its label per switch tier (and its hostname, when the levels end with it)."""
    switches_level: str
    """The level of one leaf switch: the ``required`` or ``preferred`` of the WorkloadMixing's
    ``spec.slurm.topology.switches``, for jobs submitted with ``--switches=1``."""

    def topology(self, name: str) -> dict[str, object]:
        """The Kueue Topology (v1beta2) manifest named ``name``."""
        return {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Topology",
            "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": level} for level in self.levels]},
        }


def _fields(text: str, number: int) -> dict[str, str]:
    fields: dict[str, str] = {}
    for word in text.split():
        key, sep, value = word.partition("=")
        if not sep or not value:
            raise TopologyConfError(f"line {number}: {word!r} is not KEY=VALUE")
        if key.lower() not in _KEYS:
            raise TopologyConfError(
                f"line {number}: {key!r} is not a tree-plugin key (SwitchName, Switches, Nodes)"
            )
        if key.lower() in fields:
            raise TopologyConfError(f"line {number}: {key} given twice")
        fields[key.lower()] = value
    return fields


def _expand(expr: str, number: int) -> tuple[str, ...]:
    try:
        return tuple(hostlist.expand(expr))
    except hostlist.HostlistError as error:
        raise TopologyConfError(f"line {number}: {error}") from None


def parse_switches(text: str) -> dict[str, Switch]:
    """The switches of a tree-plugin topology.conf, by name (comments and ``LinkSpeed`` dropped)."""
    switches: dict[str, Switch] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = _fields(line, number)
        name = fields.get("switchname")
        if name is None:
            raise TopologyConfError(f"line {number}: no SwitchName=")
        if name in switches:
            raise TopologyConfError(
                f"line {number}: switch {name!r} is already defined on line {switches[name].line}"
            )
        if ("switches" in fields) == ("nodes" in fields):
            raise TopologyConfError(
                f"line {number}: switch {name!r} needs exactly one of Switches= and Nodes="
            )
        switches[name] = Switch(
            name=name,
            switches=_expand(fields["switches"], number) if "switches" in fields else (),
            nodes=_expand(fields["nodes"], number) if "nodes" in fields else (),
            line=number,
        )
    if not switches:
        raise TopologyConfError("no SwitchName= line")
    return switches


def _parents(switches: Mapping[str, Switch]) -> dict[str, str]:
    parent: dict[str, str] = {}
    for switch in switches.values():
        for child in switch.switches:
            if child not in switches:
                raise TopologyConfError(f"line {switch.line}: switch {child!r} is not defined")
            if child in parent:
                raise TopologyConfError(
                    f"line {switch.line}: switch {child!r} is also under {parent[child]!r}"
                )
            parent[child] = switch.name
    return parent


def _path_up(leaf: str, parent: Mapping[str, str]) -> list[str]:
    path = [leaf]
    while path[-1] in parent:
        path.append(parent[path[-1]])
        if len(path) > len(parent) + 1:
            raise TopologyConfError(f"the switches above {leaf!r} form a cycle")
    return path


def map_topology_conf(
    text: str, *, level_labels: Sequence[str], hostname: bool = True
) -> SlurmTopologyMapping:
    """Map a tree-plugin topology.conf to Kueue levels and node labels (see the module docstring).

    ``level_labels``: one node label per switch tier, highest first (as many as the tree is deep);
    ``hostname``: end the levels with ``kubernetes.io/hostname`` (each node its own domain).
    """
    switches = parse_switches(text)
    parent = _parents(switches)
    paths: dict[str, list[str]] = {}
    for switch in switches.values():
        if switch.switches:
            continue
        path = _path_up(switch.name, parent)
        for node in switch.nodes:
            if node in paths:
                raise TopologyConfError(
                    f"line {switch.line}: node {node!r} is also under switch {paths[node][0]!r}"
                )
            paths[node] = path
    for name in switches:  # a cycle of switches with no leaf below is never walked up
        _path_up(name, parent)
    depth = max(len(path) for path in paths.values())
    if len(level_labels) != depth:
        raise TopologyConfError(
            f"the switches are {depth} tier(s) deep: {depth} level label(s) needed, got {len(level_labels)}"
        )
    if len(set(level_labels)) != len(level_labels) or HOSTNAME_LEVEL in level_labels:
        raise TopologyConfError(
            f"level labels must be distinct and not {HOSTNAME_LEVEL}: {list(level_labels)}"
        )
    bad = sorted(name for name in switches if not _LABEL_VALUE.match(name))
    if bad:
        raise TopologyConfError(f"switch names that are not valid label values: {bad}")
    tiers = list(reversed(level_labels))  # tier 0 (the leaf switches) first
    node_labels: dict[str, dict[str, str]] = {}
    for node, path in sorted(paths.items()):
        labels = {label: path[min(tier, len(path) - 1)] for tier, label in enumerate(tiers)}
        node_labels[node] = {level: labels[level] for level in level_labels}
        if hostname:
            node_labels[node][HOSTNAME_LEVEL] = node
    levels = (*level_labels, HOSTNAME_LEVEL) if hostname else tuple(level_labels)
    return SlurmTopologyMapping(levels=levels, node_labels=node_labels, switches_level=level_labels[-1])


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bridge.slurm.topology_conf",
        description="Map Slurm's topology.conf (tree plugin) to a Kueue Topology and node labels.",
    )
    parser.add_argument("file", type=Path, help="the topology.conf")
    parser.add_argument(
        "--levels", required=True, help="node label of each switch tier, highest first, comma-separated"
    )
    parser.add_argument("--name", default="slurm-switches", help="the Topology's name")
    parser.add_argument("--no-hostname", dest="hostname", action="store_false", help="no hostname level")
    return parser


def main(argv: Sequence[str] | None = None, *, out: TextIO = sys.stdout) -> int:
    """Print the mapping of a topology.conf as YAML; 0, or 1 with the reason on stderr."""
    options = _parser().parse_args(argv)
    try:
        text = options.file.read_text(encoding="utf-8")
        labels = [label.strip() for label in options.levels.split(",") if label.strip()]
        mapping = map_topology_conf(text, level_labels=labels, hostname=options.hostname)
    except (OSError, TopologyConfError) as error:
        print(f"topology_conf: error: {error}", file=sys.stderr)
        return 1
    out.write("# Kueue Topology (the ResourceFlavor names it: spec.topologyName)\n")
    out.write(yaml.safe_dump(mapping.topology(options.name), sort_keys=False))
    out.write("---\n# the WorkloadMixing's spec.slurm.topology: --switches=1 asks for one leaf switch\n")
    out.write(yaml.safe_dump({"switches": {"required": mapping.switches_level}}, sort_keys=False))
    out.write("---\n# node labels: kubectl label node <name> <key>=<value> ... --overwrite\n")
    out.write(yaml.safe_dump({k: dict(v) for k, v in mapping.node_labels.items()}, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
