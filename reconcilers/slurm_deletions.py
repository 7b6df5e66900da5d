"""Nodes the bridge deleted: not deleted again on every event of the job (deletion expectations).

While a job is cleaned up, every event of it (its pods terminating, its JobSet going) reconciles it
again, and without a memory of the deletion each of those would delete its nodes again: one request
each, an ``scontrol delete`` subprocess on 22.05. Two kinds of name are deleted:

- a node the node source shows: it stays in the store until the next whole list (up to a second).
  Deleted again only if a whole list *begun after* the deletion still shows it (the delete did not
  take, or the node registered anew);
- a name recorded on the JobSet that the node source does not show (its slurmd may have registered
  after the last list): deleted once. Should it register later, the node source shows it, the job is
  reconciled, and the first rule applies.

Kubernetes' own controllers keep "expectations" for the same reason; as theirs, this memory is only
an economy: a bridge that restarts deletes once more, which is harmless. The last
:data:`REMEMBERED` deletions are kept; one forgotten costs one more delete.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Iterable
from typing import Protocol

__all__ = ["REMEMBERED", "NodeDeletions", "NodeListings"]

REMEMBERED = 10_000
"""Deletions kept (a name and a number each); the oldest go first."""


class NodeListings(Protocol):
    """What this reads of the node source (:class:`bridge.slurm.source.SlurmNodeSource`)."""

    @property
    def lists(self) -> int:
        """Whole lists begun."""
        ...

    @property
    def listed(self) -> int:
        """The number (in ``lists``) of the last whole list the store shows; 0 before the first."""
        ...


class NodeDeletions:
    """The nodes this process deleted, by name, with the number of the last whole list begun then."""

    def __init__(self, listings: NodeListings, *, remembered: int = REMEMBERED) -> None:
        self._listings = listings
        self._remembered = remembered
        self._deleted: OrderedDict[str, int] = OrderedDict()

    def deleted(self, name: str) -> None:
        """``name`` was deleted (or slurmctld did not know it)."""
        self._deleted[name] = self._listings.lists
        self._deleted.move_to_end(name)
        if len(self._deleted) > self._remembered:
            self._deleted.popitem(last=False)

    def done_already(self, *, shown: Collection[str], recorded: Iterable[str]) -> frozenset[str]:
        """Of the nodes the store ``shown`` and the names ``recorded`` on the JobSet, those not to
        delete again: shown ones no whole list begun since the deletion has shown, and recorded ones
        the store does not show, once deleted."""
        if not self._deleted:
            return frozenset()
        listed = self._listings.listed
        done = {n for n in shown if self._deleted.get(n, -1) >= listed}
        done.update(n for n in recorded if n not in shown and n in self._deleted)
        return frozenset(done)

    def __len__(self) -> int:
        return len(self._deleted)
