"""Nodes the bridge deleted, until the node source has listed whole since (deletion expectations).

A deleted node stays in the node source's store until its next whole list (up to a second), and a
name recorded on a JobSet that never registered is absent before and after. Meanwhile every event of
the job (its pods terminating, its JobSet going) reconciles it again, and without a memory of the
deletion each of those would delete the nodes again: one request each, an ``scontrol delete``
subprocess on 22.05. Kubernetes' own controllers keep "expectations" for the same reason; as theirs,
this memory is only an economy: a bridge that restarts deletes once more, which is harmless.

A deletion is remembered until a whole list *begun after it* has been stored. If that list still
shows the node (the delete did not take), the node is deleted again.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

__all__ = ["NodeDeletions", "NodeListings"]


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
    """The nodes deleted since the node source's last whole list began, by name."""

    def __init__(self, listings: NodeListings) -> None:
        self._listings = listings
        self._deleted: dict[str, int] = {}
        """Node name -> the number of the last whole list begun when it was deleted."""

    def deleted(self, name: str) -> None:
        """``name`` was deleted (or slurmctld did not know it): remember it until the next list."""
        listed = self._listings.listed
        self._deleted = {n: at for n, at in self._deleted.items() if at >= listed}
        self._deleted[name] = self._listings.lists

    def unlisted(self, names: Iterable[str]) -> frozenset[str]:
        """Of ``names``, those deleted that no whole list begun since has shown the fate of."""
        if not self._deleted:
            return frozenset()
        listed = self._listings.listed
        return frozenset(n for n in names if self._deleted.get(n, -1) >= listed)

    def __len__(self) -> int:
        return len(self._deleted)
