"""Reclaim what dead processes left of the local stack: daemons, directories, network namespaces.

Why one entry point: a pytest killed by a signal, a sandbox whose terminal closed, a process runner
killed with SIGKILL each leave daemons running in sessions of their own, a Slurm root under /tmp with
/dev bound inside it, and network namespaces with slurmd or Ray workers in them. Each is recorded by the
process that made it, in a form that tells a dead maker from a live one without trusting pids
(:mod:`bridge.sandbox.owners` for daemons and directories, the claims of :mod:`bridge.sandbox.netns`
for namespaces). :func:`reclaim_leftovers` removes everything whose maker is dead, in the order that
works: the daemons first (a process runner among them may be holding namespaces), then the namespaces.

It runs at the start of every stack (:class:`~bridge.sandbox.kube.ControlPlane`,
:class:`~bridge.sandbox.slurm.SlurmCluster`, :class:`~bridge.sandbox.ray.RayHead`), so the next test
run cleans up after a killed one, and from a shell: ``python -m bridge.sandbox.leftovers`` (what
``scripts/dev cleanup`` runs), which also names the ``kb-*`` namespaces no one has claimed (made
before claims existed, or by hand): those it leaves to ``ip netns del``, as it cannot prove them dead.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from bridge.sandbox.netns import claim_path, existing_namespaces, reclaim_namespaces
from bridge.sandbox.owners import Reclaimed, reclaim_owners

__all__ = ["Leftovers", "main", "reclaim_leftovers", "unclaimed_namespaces"]


@dataclass(frozen=True)
class Leftovers:
    """What one :func:`reclaim_leftovers` removed."""

    owners: list[Reclaimed] = field(default_factory=list)
    namespaces: dict[str, list[int]] = field(default_factory=dict)

    @property
    def killed(self) -> list[int]:
        """Every process killed: dead owners' daemons and whatever ran in their namespaces."""
        pids = [pid for owner in self.owners for pid in owner.killed]
        return pids + [pid for killed in self.namespaces.values() for pid in killed]


def reclaim_leftovers() -> Leftovers:
    """Kill dead owners' daemons and remove their directories, then remove the namespaces no live
    process claims (see the module docstring). Live owners' things are never touched."""
    owners = reclaim_owners()
    return Leftovers(owners=owners, namespaces=reclaim_namespaces())


def unclaimed_namespaces() -> list[str]:
    """``kb-*`` namespaces without a claim file: not made by
    :func:`~bridge.sandbox.netns.create_namespace` as it is now, so not provably a dead process's."""
    return [name for name in existing_namespaces() if not claim_path(name).exists()]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bridge.sandbox.leftovers``: reclaim what dead processes left; print what was done."""
    parser = argparse.ArgumentParser(prog="python -m bridge.sandbox.leftovers", description=main.__doc__)
    parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR, format="%(message)s")  # what was done is printed below
    done = reclaim_leftovers()
    for owner in done.owners:
        state = "" if owner.complete else " (incomplete: kept for a retry)"
        directories = ", ".join(str(path) for path in owner.directories) or "no directory"
        print(
            f"owner {owner.owner_pid} (record {owner.token}): killed {len(owner.killed)} processes, "
            f"removed {directories}{state}"
        )
    for name, killed in sorted(done.namespaces.items()):
        print(f"network namespace {name}: removed, {len(killed)} processes killed in it")
    if not done.owners and not done.namespaces:
        print("nothing left by a dead process")
    unclaimed = unclaimed_namespaces()
    if unclaimed:
        print(f"not claimed, left alone (check, then `ip netns del NAME`): {' '.join(unclaimed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
