"""Jobs a reconcile read fresh from slurmctld that the job source's cache has not caught up with.

A decision that could do harm on a stale job is taken again on a fresh read (``GET /job/<id>``), and
that read may show what the cache does not yet: its user grew the job a moment ago. The decision
taken on it (delete the JobSet made for the old size) must not be followed by one taken on the
cache, a poll behind (make the JobSet again, of the old size). So the fresh read stands for the job
until the cache moves: as long as the cache hands out the very job it showed when the read was
made, the read is newer; once it hands out another, the cache has caught up (the source lists and
reads in order) and the read is forgotten. Nothing more is asked of slurmctld for it: the next
list, or the source's own read after the bridge's next write to the job, moves the cache.

A read stands :data:`MAX_AGE` seconds at most: a job whose text comes back as it was before the read
(changed and changed back) leaves the cache's object as it was, and the read would stand for good.
A read made while the cache showed no job is not kept (the cache may never show one: a job outside
the bridged partitions).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from bridge.api.slurm_job import SlurmJob

__all__ = ["KEPT", "MAX_AGE", "FreshReads"]

KEPT = 256
"""Fresh reads kept at most (the oldest go first); one forgotten is one decision on the cache."""

MAX_AGE = 30.0
"""Seconds a fresh read stands at most: several whole lists of the deepest queue (4 s at 2,000)."""


class FreshReads:
    """By job id: the cached job a fresh read was made over, what the read showed (None: gone from
    slurmctld), and when."""

    def __init__(
        self, *, kept: int = KEPT, max_age: float = MAX_AGE, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._kept = kept
        self._max_age = max_age
        self._clock = clock
        self._reads: OrderedDict[int, tuple[SlurmJob, SlurmJob | None, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._reads)

    def read(self, job_id: int, *, cached: SlurmJob | None, fresh: SlurmJob | None) -> bool:
        """Record ``fresh``, read while the cache showed ``cached``. True when it is kept: it differs
        from a job the cache shows (the cache is behind)."""
        if cached is None or fresh is cached or fresh == cached:
            self._reads.pop(job_id, None)
            return False
        self._reads[job_id] = (cached, fresh, self._clock())
        self._reads.move_to_end(job_id)
        while len(self._reads) > self._kept:
            self._reads.popitem(last=False)
        return True

    def newest(self, job_id: int, cached: SlurmJob | None) -> SlurmJob | None:
        """The job to decide on: the fresh read while the cache still shows what it showed then
        (and for ``MAX_AGE`` at most), else ``cached`` (and the read is forgotten)."""
        entry = self._reads.get(job_id)
        if entry is None:
            return cached
        if entry[0] is cached and self._clock() - entry[2] < self._max_age:
            return entry[1]
        del self._reads[job_id]
        return cached
