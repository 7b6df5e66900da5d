"""A bridged job's Slurm nodes changing is the job changing: read that job alone, at once.

The whole job list comes at most every ``pollIntervalSeconds``, and less often with a deep queue
(``JOBS_LISTED_PER_SECOND``). A job that starts, ends, or loses a node shows it first on its dynamic
nodes (allocated, idle, not responding), and the node source polls those every second. So a change
of a job's node asks the job source to read that job alone (``GET /job/{id}``): a running job's end,
which frees its quota, is seen within a node poll whatever the list's interval, for one job's decode.
"""

from __future__ import annotations

from typing import Protocol

from bridge.api.slurm_job import SlurmJob
from bridge.runtime.handlers import Object
from bridge.slurm.source import node_of
from reconcilers.slurm import node_job_id

__all__ = ["JobReadOnNodeChange"]


class JobRefresher(Protocol):
    """What the handler needs of :class:`~bridge.slurm.source.SlurmJobSource`."""

    def job(self, job_id: int) -> SlurmJob | None: ...

    def refresh(self, job_id: int) -> None: ...


class JobReadOnNodeChange:
    """Node source handler: a node that changed or went away reads its job alone, while the job
    source shows that job and not finished.

    A node's first appearance is its registration: the job itself does not change with it, and the
    reconciler is told by the node's own event. A finished job changes no more (its nodes do, as the
    bridge drains and deletes them: no read for those), and a job the source does not show would be
    left to the next list anyway. Reads coalesce in the job source (one read per job per poll,
    however many of its nodes changed)."""

    def __init__(self, jobs: JobRefresher) -> None:
        self._jobs = jobs

    def _read(self, obj: Object) -> None:
        job_id = node_job_id(node_of(obj))
        if job_id is None:
            return
        job = self._jobs.job(job_id)
        if job is not None and not job.is_finished:
            self._jobs.refresh(job_id)

    def on_add(self, obj: Object, *, is_initial_list: bool) -> None:
        pass

    def on_update(self, old: Object, new: Object) -> None:
        self._read(new)

    def on_delete(self, obj: Object) -> None:
        self._read(obj)
