"""What the bridge wrote and has not seen echoed yet: not written again on every event (expectations).

While a job is cleaned up, every event of it (its pods terminating, its JobSet going) reconciles it
again, and the caches show the bridge's own writes only later: the node source at its next whole
list (up to a second), the informers at the watch event (milliseconds, but a burst of events queues
reconciles in between). Without a memory of the write, each of those looks would make it again: a
request each, an ``scontrol`` subprocess on 22.05 for a node. Kubernetes' own controllers keep
"expectations" for the same reason; as theirs, these memories are only an economy: a bridge that
restarts writes once more, which is harmless.

- :class:`NodeWrites`, by node name, for the nodes deleted and those drained. A node the node source
  shows is written again only if a whole list *begun after* the write still shows it unchanged (the
  write did not take, or the node registered anew). A name recorded on the JobSet that the node
  source does not show (its slurmd may have registered after the last list) is deleted once; should
  it register later, the node source shows it, the job is reconciled, and the first rule applies.
- :class:`Remembered`, for Kubernetes objects: the JobSets (by uid) whose finalizer the bridge
  removed, not removed again while the informer still shows the JobSet with it (each try was a read
  and a patch that found the JobSet gone; only the bridge adds that finalizer, and it forgets the
  uid when it does); the slurmd pods it deleted (by namespace and name, names being generated) and
  the JobSets' Jobs (by the JobSet's uid and the Job's name), not deleted again while the informer
  still shows them undeleted.

The last :data:`REMEMBERED` writes of each kind are kept; one forgotten costs one more write.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Iterable
from typing import Protocol

__all__ = ["REMEMBERED", "NodeListings", "NodeWrites", "Remembered"]

REMEMBERED = 10_000
"""Writes kept per memory (a name and a number each); the oldest go first."""


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


class NodeWrites:
    """The nodes this process wrote (deleted, or drained), by name, with the number of the last whole
    list begun then."""

    def __init__(self, listings: NodeListings, *, remembered: int = REMEMBERED) -> None:
        self._listings = listings
        self._remembered = remembered
        self._written: OrderedDict[str, int] = OrderedDict()

    def made(self, name: str) -> None:
        """``name`` was written (or slurmctld did not know it)."""
        self._written[name] = self._listings.lists
        self._written.move_to_end(name)
        if len(self._written) > self._remembered:
            self._written.popitem(last=False)

    def done_already(self, *, shown: Collection[str], recorded: Iterable[str] = ()) -> frozenset[str]:
        """Of the nodes the store ``shown`` and the names ``recorded`` on the JobSet, those not to
        write again: shown ones no whole list begun since the write has shown, and recorded ones
        the store does not show, once written."""
        if not self._written:
            return frozenset()
        listed = self._listings.listed
        done = {n for n in shown if self._written.get(n, -1) >= listed}
        done.update(n for n in recorded if n not in shown and n in self._written)
        return frozenset(done)

    def __len__(self) -> int:
        return len(self._written)


class Remembered:
    """A bounded memory of things written (JobSet uids whose finalizer was removed, pods and Jobs
    deleted): the last ``remembered``, the oldest forgotten first."""

    def __init__(self, *, remembered: int = REMEMBERED) -> None:
        self._remembered = remembered
        self._items: OrderedDict[str, None] = OrderedDict()

    def add(self, item: str) -> None:
        self._items[item] = None
        self._items.move_to_end(item)
        if len(self._items) > self._remembered:
            self._items.popitem(last=False)

    def discard(self, item: str) -> None:
        self._items.pop(item, None)

    def __contains__(self, item: object) -> bool:
        return item in self._items

    def __len__(self) -> int:
        return len(self._items)
