"""Slurm's job and node lists as sources of change for the runtime, polled cheaply.

slurmrestd has no watch. Two :class:`~bridge.runtime.PolledSource` subclasses turn its lists into
the store-plus-events interface every informer has, so the Slurm reconciler is triggered by a
changed job exactly as by a changed JobSet, and reads both from memory:

- :class:`SlurmJobSource` polls ``GET /jobs?update_time=`` (slurmctld answers "not modified" when
  nothing changed: one cheap request per interval; when anything changed it lists every job, and the
  client parses again only the jobs that changed, ``KnownJobs``, whose store objects stay the same
  objects, so an unchanged job costs neither a parse nor an event) and keeps only what the bridge
  acts on: jobs of bridged partitions, plus jobs that still have a JobSet (a job submitted elsewhere
  then moved, or a partition removed from the configuration). The whole list is asked for once an
  ``interval``, never more often, and with a deep queue less often: at most ``list_budget`` listed
  jobs a second (1,000 jobs: a list every 2 s), so what the lists cost does not grow with the queue.
  A job with a reason to have changed is read alone (``GET /job/{id}``, :meth:`SlurmJobSource.refresh`):
  one the bridge has just written, and one whose Slurm nodes changed (a job starts, ends or loses a
  node: ``JobReadOnNodeChange``), so a running job's end is seen within a node poll however long the
  list's interval; a write or an end costs one job's decode instead of every queued job's. Objects are keyed
  ``<cluster>/<job id>``, the key of the reconciler's requests. A finished job leaves slurmctld
  after ``MinJobAge``; it then vanishes from the store, and the reconciler treats a vanished job
  with a JobSet as finished.
- :class:`SlurmNodeSource` polls ``GET /nodes?update_time=`` and keeps the bridge's dynamic nodes,
  indexed by the job they belong to, so "are all N nodes registered idle with the job's feature" is
  a dictionary lookup instead of one REST call per job and reconcile. slurmrestd refuses the
  conditional node list when nothing changed (HTTP 500: 22.05 "Unspecified error", 24.11 "Unable to
  query partitions", on 24.11 also when only nodes changed; found on the local stack); the source
  then lists nodes whole. It lists every ``interval`` (1 s). While a registration is due (an admitted
  job waits for its nodes and one of its slurmd pods runs) the release of that job waits for the
  poll that sees its last node, so that poll is what the bridge's share of the release latency is
  made of: the source then reads just the due nodes (``due()``, ``GET /node/{name}`` each, one node
  packed instead of every node) every ``due_interval`` (0.05 s), as many as ``read_budget`` reads a
  second allow (more due nodes: whole lists every ``fast_interval``, 0.2 s), while an idle bridge
  costs one request a second (docs/adr/0007-release-signal.md).

A failing poll backs off (0.8 s doubling to ``backoff_max``, jittered), so a dead slurmrestd costs
a handful of requests per minute, never a storm. When a poll succeeds after failures, every stored
object is replayed as an update: reconciles that failed meanwhile run again at once instead of
waiting for their own (longer) backoff, so recovery takes at most one backoff period.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Collection
from typing import Any, Protocol

from bridge.api.slurm_job import SlurmJob
from bridge.api.slurm_node import SlurmNode
from bridge.runtime.backoff import BackoffSettings
from bridge.runtime.cache import IndexFunc, meta_namespace_key
from bridge.runtime.handlers import Object
from bridge.runtime.sources import NOT_MODIFIED, Changed, NotModified, PolledSource
from bridge.slurmrest.errors import InvalidJobId, InvalidNodeName, SlurmAPIError, SlurmError
from bridge.slurmrest.errors import NotModified as SlurmNotModified
from bridge.slurmrest.versions import JobsPage, NodesPage

__all__ = [
    "JobLister",
    "NodeLister",
    "SlurmJobSource",
    "SlurmNodeSource",
    "job_key",
    "job_object",
    "job_of",
    "node_object",
    "node_of",
    "source_backoff",
]


class JobLister(Protocol):
    """What the job source needs of :class:`~bridge.slurm.SlurmClient`."""

    async def poll_jobs(self) -> JobsPage | None: ...

    async def list_jobs(self, *, update_time: int | None = None) -> JobsPage: ...

    async def get_job(self, job_id: int) -> SlurmJob: ...


class NodeLister(Protocol):
    """What the node source needs of :class:`~bridge.slurm.SlurmClient`."""

    async def list_nodes(self, *, update_time: int | None = None) -> NodesPage: ...

    async def get_node(self, name: str) -> SlurmNode: ...


_EPSILON = 1e-6
"""Seconds below which what is left of a wait counts as nothing (sums of float steps)."""


def source_backoff(interval: float) -> BackoffSettings:
    """Backoff of a Slurm source: from 0.8 s, doubling, at most ``max(8 s, 4 x interval)``."""
    return BackoffSettings(initial=0.8, maximum=max(8.0, 4.0 * interval))


JOBS_LISTED_PER_SECOND = 500.0
"""Jobs a second the whole job lists may bring at most: with more than ``interval x`` this many jobs
in the last list, the next one waits ``jobs / JOBS_LISTED_PER_SECOND`` seconds instead. A listed job
costs the bridge about 17 us and slurmctld and slurmrestd more (found on the local stack: 1,000 held
jobs, about 17 ms a list), and nearly all of a deep queue is unchanged from one list to the next."""


def _raise_if_none_answered(unanswered: list[SlurmError], *, asked: int) -> None:
    """A round of single reads none of which got an answer (slurmrestd down) fails the poll as a
    failed list does: the source backs off, and its next poll is a whole list."""
    if unanswered and len(unanswered) == asked:
        raise unanswered[0]


def job_key(cluster: str, job_id: int) -> str:
    """``<cluster>/<job id>``: the store key and, split at ``/``, the reconciler's request."""
    return f"{cluster}/{job_id}"


def job_object(cluster: str, job: SlurmJob) -> Object:
    """The store's object for ``job``: Kubernetes-like metadata (for keys and requests) + the view."""
    return {"metadata": {"namespace": cluster, "name": str(job.job_id)}, "job": job}


def job_of(obj: Object) -> SlurmJob:
    job = obj["job"]
    assert isinstance(job, SlurmJob)
    return job


def node_object(node: SlurmNode) -> Object:
    return {"metadata": {"name": node.name}, "node": node}


def node_of(obj: Object) -> SlurmNode:
    node = obj["node"]
    assert isinstance(node, SlurmNode)
    return node


class _RecoveringSource(PolledSource):
    """A polled source that replays its store once a poll succeeds after failures."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._failing = False
        self.last_error: str | None = None

    @property
    def healthy(self) -> bool:
        """False from a failed poll until the next successful one."""
        return not self._failing

    async def poll_once(self) -> None:
        try:
            await super().poll_once()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._failing = True
            self.last_error = f"{type(exc).__name__}: {exc}"
            raise
        if self._failing:
            self._failing = False
            self.last_error = None
            self._log.info("polling recovered; replaying every object")
            self.resync()


_Filter = tuple[str, frozenset[str], frozenset[int]]
"""What a list is filtered by: (cluster, bridged partitions, ids of jobs with a JobSet)."""


def _kept(job: SlurmJob, current: _Filter) -> bool:
    """Does ``current`` keep ``job``: in a bridged partition, or with a JobSet."""
    _, partitions, bridged = current
    return job.job_id in bridged or any(p in partitions for p in job.partitions)


class SlurmJobSource(_RecoveringSource):
    """The jobs of bridged partitions (and of existing JobSets), keyed ``<cluster>/<job id>``.

    ``partitions`` and ``bridged`` are read at every poll: the live configuration's bridged
    partitions, and the ids of jobs that have a JobSet (from the JobSet informer). When Slurm
    reports no change but either of them changed, the last list is filtered again.

    The whole list is polled every ``interval`` seconds and no more often: slurmctld packs, and
    slurmrestd and the bridge decode, every job for it. A job the bridge has just written is read
    alone instead (:meth:`refresh`: ``GET /job/{id}``, one job decoded), at once, so the reconcile
    after a write sees its effect without a whole list per write; the next list replaces what such
    reads brought.
    """

    def __init__(
        self,
        *,
        slurm: JobLister,
        cluster: Callable[[], str],
        partitions: Callable[[], Collection[str]],
        bridged: Callable[[], Collection[int]],
        interval: float,
        list_budget: float = JOBS_LISTED_PER_SECOND,
        indexers: dict[str, IndexFunc] | None = None,
        backoff: BackoffSettings | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        name: str = "slurm-jobs",
    ) -> None:
        super().__init__(
            name=name,
            poll=self._list,
            key=meta_namespace_key,
            interval=interval,
            transform=None,
            indexers=indexers,
            backoff=backoff if backoff is not None else source_backoff(interval),
            sleep=sleep,
            rng=rng,
        )
        self._slurm = slurm
        self.list_budget = list_budget
        """Listed jobs a second at most (``JOBS_LISTED_PER_SECOND``)."""
        self._cluster = cluster
        self._partitions = partitions
        self._bridged = bridged
        self._clock = clock
        self._jobs: tuple[SlurmJob, ...] | None = None
        self._by_id: dict[int, SlurmJob] | None = None
        self._filter: _Filter | None = None
        self._objects: dict[int, Object] = {}
        self._dropped: dict[int, SlurmJob] = {}
        """Jobs of the last list the filter left out, by id."""
        self._due: set[int] = set()
        """Jobs written since the last poll: read alone at the next one unless a list is due."""
        self._read: dict[int, SlurmJob] = {}
        """Jobs read alone since the last list (newer than that list's)."""
        self._listed_at: float | None = None
        self.lists = 0
        """Whole lists asked for (polls that were not single reads)."""
        self.reads = 0
        """Jobs read alone after a write."""

    def refresh(self, job_id: int) -> None:
        """``job_id`` has a reason to have changed (the bridge wrote it, its nodes changed): read it
        alone at once (coalesced with other reads), unless a whole list is due anyway."""
        self._due.add(job_id)
        self.trigger()

    def due_reads(self) -> frozenset[int]:
        """The jobs to read alone at the next poll (unless a whole list is due)."""
        return frozenset(self._due)

    def list_interval(self) -> float:
        """Seconds between whole lists: ``interval``, longer when the last list was so long that
        ``list_budget`` jobs a second would be exceeded."""
        listed = len(self._jobs) if self._jobs is not None else 0
        return max(self.interval, listed / self.list_budget) if self.list_budget > 0 else self.interval

    def delay_after_poll(self) -> float:
        """Until the next whole list is due: a single read after a write does not postpone it."""
        if self._listed_at is None:
            return self.interval
        return max(0.0, self._listed_at + self.list_interval() - self._clock())

    def _list_due(self) -> bool:
        if self._listed_at is None:
            return True
        return self._clock() - self._listed_at >= self.list_interval() - _EPSILON

    async def _list(self) -> list[Object] | NotModified | Changed:
        if not self._cluster():  # no configuration yet: no REST call
            self._filter = None
            self._due.clear()
            return []
        current = (self._cluster(), frozenset(self._partitions()), frozenset(self._bridged()))
        if self._due and self._jobs is not None and not self._failing and not self._list_due():
            return await self._read_due(current)
        self._due.clear()
        self._listed_at = self._clock()
        self.lists += 1
        page = await self._slurm.poll_jobs()
        if page is None and self._jobs is None:  # someone else polled this client first
            page = await self._slurm.list_jobs()
        if page is not None:
            self._jobs = page.jobs
            self._by_id = None
            self._read = {}
        if page is None:
            return self._refiltered(current, [])
        return self._filtered(current)

    async def _read_due(self, current: _Filter) -> list[Object] | NotModified | Changed:
        """Read each job written since the last poll alone; the store changes only for those.

        When no read got an answer (slurmrestd down), the poll fails as a failed list does."""
        due, self._due = sorted(self._due), set()
        read: list[SlurmJob] = []
        unanswered: list[SlurmError] = []
        for job_id in due:
            self.reads += 1
            try:
                job = await self._slurm.get_job(job_id)
            except InvalidJobId:
                continue  # gone from slurmctld: the next list says so
            except SlurmAPIError as exc:  # refused: the next list brings it
                self._log.debug("reading a written job refused", job_id=job_id, error=str(exc))
                continue
            except SlurmError as exc:
                self._log.debug("reading a written job failed", job_id=job_id, error=str(exc))
                unanswered.append(exc)
                continue
            if job.job_id == job_id:
                self._read[job_id] = job
                if self._by_id is not None:  # kept up to date, not made again over the whole list
                    self._by_id[job_id] = job
                read.append(job)
        _raise_if_none_answered(unanswered, asked=len(due))
        return self._refiltered(current, read)

    def _refiltered(self, current: _Filter, read: list[SlurmJob]) -> list[Object] | NotModified | Changed:
        """The last list under ``current`` with ``read`` (jobs read alone since) in it, as changes.

        Jobs gain and lose their JobSet all the time (the filter's third part), and for a job of a
        bridged partition that changes nothing: only the jobs that did so are looked at again, not
        the whole queue. When one of them is now kept or left out where it was not, or the cluster
        or partitions changed, the whole last list is filtered again."""
        before = self._filter
        if before is None or before[:2] != current[:2]:
            return self._filtered(current)
        objects = self._objects
        for job_id in before[2] ^ current[2]:
            job = self.any_job(job_id)
            if job is not None and (job_id in objects) != _kept(job, current):
                return self._filtered(current)
        self._filter = current
        return self._changed_by_reads(current, read) if read else NOT_MODIFIED

    def _changed_by_reads(
        self, current: _Filter, jobs: list[SlurmJob]
    ) -> list[Object] | NotModified | Changed:
        """The store objects of ``jobs``, read alone under the last list's filter (``current`` is it),
        as a :class:`Changed`: the other jobs stand, so a read costs what it read, not the queue's
        length. A job the filter now leaves out that the store shows (moved out of the bridged
        partitions) is a deletion: the whole list is filtered again for it. A job the last list did
        not have is left to the next list."""
        cluster, _, _ = current
        objects, dropped = self._objects, self._dropped
        if any(job.job_id in objects and not _kept(job, current) for job in jobs):
            return self._filtered(current)
        changed: list[Object] = []
        for job in jobs:
            job_id = job.job_id
            if job_id not in objects and job_id not in dropped:
                continue
            if not _kept(job, current):
                dropped[job_id] = job
                continue
            dropped.pop(job_id, None)
            objects[job_id] = obj = job_object(cluster, job)
            changed.append(obj)
        return Changed(changed) if changed else NOT_MODIFIED

    def _filtered(self, current: _Filter) -> list[Object] | NotModified:
        """The jobs ``current`` keeps, as store objects; NOT_MODIFIED when they are the stored ones.

        An unchanged job is the very object of the last list (``KnownJobs``): under the same filter
        its verdict and its store object are the last ones, with no look at its partitions, so a list
        of thousands of unchanged jobs costs a dictionary lookup each and no diff at all."""
        same = current == self._filter
        self._filter = current
        cluster, _, _ = current
        before, dropped = self._objects, self._dropped
        read = self._read
        objects: dict[int, Object] = {}
        left_out: dict[int, SlurmJob] = {}
        changed = not same
        for listed in self._jobs or ():
            job = read.get(listed.job_id, listed) if read else listed
            job_id = job.job_id
            obj = before.get(job_id)
            if same and obj is not None and obj["job"] is job:
                objects[job_id] = obj
            elif same and dropped.get(job_id) is job:
                left_out[job_id] = job
            elif _kept(job, current):
                if obj is None or obj["job"] is not job or obj["metadata"]["namespace"] != cluster:
                    obj = job_object(cluster, job)
                    changed = True
                objects[job_id] = obj
            else:
                left_out[job_id] = job
        self._dropped = left_out
        if not changed and objects.keys() == before.keys() and self.has_synced():
            return NOT_MODIFIED
        self._objects = objects
        return list(objects.values())

    def job(self, job_id: int) -> SlurmJob | None:
        """The stored job, or None (not in a bridged partition, or gone from slurmctld)."""
        obj = self.store.get(job_key(self._cluster(), job_id))
        return None if obj is None else job_of(obj)

    def any_job(self, job_id: int) -> SlurmJob | None:
        """Any job of the last poll, whatever its partition (the jobs a bridged job depends on); None
        when slurmctld did not list it (gone), or before the first poll."""
        if self._by_id is None:
            self._by_id = {job.job_id: job for job in self._jobs or ()}
            self._by_id.update(self._read)
        return self._by_id.get(job_id)


DUE_READ_BUDGET = 40.0
"""Reads of single due nodes a second at most: the due nodes are read every ``max(due_interval,
len(due) / budget)`` seconds, and while more are due than ``budget x fast_interval`` (8) the source
lists nodes whole every ``fast_interval`` instead (one request, whatever the count)."""


class SlurmNodeSource(_RecoveringSource):
    """The dynamic nodes ``keep`` accepts (the bridge's own), keyed by node name.

    While ``enabled()`` is false (no configuration yet) it reports an empty list without a request.

    ``indexers`` work on the stored objects (use :func:`node_of`); the reconciler indexes nodes by
    the job they were made for.

    Adaptive interval: between polls the source waits ``interval`` seconds, but looks at
    ``wanted()`` every ``fast_interval`` seconds meanwhile (no request, a function call) and polls
    as soon as it is true and ``fast_interval`` has passed since the last poll. So while a node
    registration is due it polls every ``fast_interval``, and it switches to that within
    ``fast_interval`` of ``wanted()`` turning true. A failing source keeps its backoff whatever
    ``wanted()`` says. :meth:`trigger` polls at once; triggers that arrive while a poll is in flight
    coalesce into one poll right after it (``PolledSource.run`` clears its wake-up only before a
    poll), never into a second poll at the same time.

    Narrowed reads: ``due()`` names the nodes whose registration is due (their slurmd pod runs, the
    store does not show them idle). While there are some, and few enough for ``read_budget``, a poll
    reads only those (``GET /node/{name}`` each, at once) every ``due_interval`` seconds, and the
    whole list still comes every ``interval`` (the only poll that sees a node go away). A node not
    registered yet answers "invalid node name" and changes nothing; a refused read is left to the
    next poll, and a round of reads none of which got an answer fails like a failed list (backoff;
    the first poll after a failure is a whole list).
    """

    def __init__(
        self,
        *,
        slurm: NodeLister,
        keep: Callable[[SlurmNode], bool],
        interval: float,
        fast_interval: float | None = None,
        wanted: Callable[[], bool] = lambda: False,
        due: Callable[[], Collection[str]] = lambda: (),
        due_interval: float | None = None,
        read_budget: float = DUE_READ_BUDGET,
        enabled: Callable[[], bool] = lambda: True,
        indexers: dict[str, IndexFunc] | None = None,
        backoff: BackoffSettings | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        name: str = "slurm-nodes",
    ) -> None:
        super().__init__(
            name=name,
            poll=self._list,
            key=meta_namespace_key,
            interval=interval,
            transform=None,
            indexers=indexers,
            backoff=backoff if backoff is not None else source_backoff(interval),
            sleep=self._pause,
            rng=rng,
        )
        self._nap = sleep
        self._clock = clock
        self.fast_interval = fast_interval
        """Seconds between polls while ``wanted()``; None (or not shorter than ``interval``): off."""
        self.due_interval = due_interval
        """Seconds between reads of the due nodes alone; None (or 0): never narrowed."""
        self.read_budget = read_budget
        self._wanted = wanted
        self._due = due
        self._slurm = slurm
        self._keep = keep
        self._enabled = enabled
        self._update_time: int | None = None
        self._objects: dict[str, Object] = {}
        """The last poll's objects by node name (what a narrowed read updates)."""
        self._listed_at: float | None = None
        self.lists = 0
        """Whole lists asked for."""
        self.listed = 0
        """The number (in ``lists``) of the last whole list the store shows; 0 before the first. A
        node deleted when ``lists`` was n is known gone (or not) once ``listed`` passes n."""
        self.reads = 0
        """Single nodes read (narrowed polls)."""
        self.conditional = True
        """False once slurmrestd refused a conditional node list (22.05 and 24.11 answer
        ``GET /nodes?update_time=`` with HTTP 500 when nothing changed); whole lists from then on."""

    def _narrowed(self) -> tuple[str, ...]:
        """The due nodes to read alone now: none when narrowing is off, before the first list, or
        when more are due than the budget allows at the fast interval."""
        due_interval = self.due_interval
        if not due_interval or due_interval <= 0 or self._listed_at is None:
            return ()
        names = tuple(sorted(set(self._due())))
        most = max(1, int(self.read_budget * max(self.fast_interval or 0.0, due_interval) + _EPSILON))
        return names if len(names) <= most else ()

    def _narrowed_wait(self, names: Collection[str]) -> float:
        """Seconds between narrowed reads of ``names``: ``due_interval``, longer if the budget says."""
        return max(self.due_interval or 0.0, len(names) / self.read_budget)

    def _list_due(self) -> bool:
        return self._listed_at is None or self._clock() - self._listed_at >= self.interval - _EPSILON

    def delay_after_poll(self) -> float:
        """Until the next whole list is due: narrowed reads do not postpone it."""
        if self._listed_at is None or not self.due_interval:
            return self.interval
        return max(0.0, self._listed_at + self.interval - self._clock())

    def _early_after(self, slept: float) -> bool:
        """May the wait end after ``slept`` seconds: due nodes to read, or a registration due?"""
        names = self._narrowed()
        if names and slept >= self._narrowed_wait(names) - _EPSILON:
            return True
        fast = self.fast_interval
        return fast is not None and fast > 0 and slept >= fast - _EPSILON and self._wanted()

    async def _pause(self, delay: float) -> None:
        """The wait after a poll (``interval``) or a failure (backoff): ``delay`` seconds, ended
        early (``_early_after``) once due nodes are to be read or ``wanted()`` is true, unless the
        source is failing.

        Sleeps in steps (``due_interval`` while nodes are due, else ``fast_interval``) and asks
        after each step. ``PolledSource`` races this against :meth:`trigger`, which still ends any
        wait at once."""
        fast = self.fast_interval if self.fast_interval and self.fast_interval > 0 else None
        narrowed = self._narrowed()
        step = min(self._narrowed_wait(narrowed), fast or delay) if narrowed else fast
        if step is None or step >= delay or self._failing:
            await self._nap(delay)
            return
        slept = 0.0
        while delay - slept > _EPSILON:
            nap = min(step, delay - slept)
            await self._nap(nap)
            slept += nap
            if delay - slept > _EPSILON and self._early_after(slept):
                return

    async def _list(self) -> list[Object] | NotModified | Changed:
        if not self._enabled():  # no configuration yet: no REST call
            self._update_time = None
            self._listed_at = None
            self._objects = {}
            return []
        if not self._list_due() and not self._failing:  # after a failure, a whole list tells
            names = self._narrowed()
            if names:
                return await self._read_alone(names)
        self._listed_at = self._clock()
        self.lists += 1
        number = self.lists
        try:
            page = await self._slurm.list_nodes(update_time=self._update_time if self.conditional else None)
        except SlurmNotModified:
            self.listed = number
            return NOT_MODIFIED
        except SlurmAPIError as exc:
            if not self.conditional or self._update_time is None:
                raise
            # Expected on 22.05 and 24.11 (HTTP 500 when nothing changed): said once, not a warning.
            self._log.info("conditional node list refused; listing nodes whole from now on", error=str(exc))
            self.conditional = False
            page = await self._slurm.list_nodes()
        self._update_time = page.update_time
        self._objects = {node.name: node_object(node) for node in page.nodes if self._keep(node)}
        self.listed = number
        return list(self._objects.values())

    async def _read_alone(self, names: Collection[str]) -> NotModified | Changed:
        """Read each of ``names`` alone, at once; the store changes only for nodes read anew.

        When no read got an answer (slurmrestd down, or refusing the token), the poll fails as a
        failed list does, so the source backs off instead of reading every ``due_interval``; reads
        that failed beside an answered one are left to the next poll."""
        async with asyncio.TaskGroup() as tg:
            reads = [tg.create_task(self._read_one(name)) for name in names]
        answers = [read.result() for read in reads]
        _raise_if_none_answered([a for a in answers if isinstance(a, SlurmError)], asked=len(answers))
        objects = self._objects
        changed: list[Object] = []
        for node in answers:
            if node is None or isinstance(node, SlurmError) or not self._keep(node):
                continue
            before = objects.get(node.name)
            if before is None or node_of(before) != node:
                objects[node.name] = obj = node_object(node)
                changed.append(obj)
        return Changed(changed) if changed else NOT_MODIFIED

    async def _read_one(self, name: str) -> SlurmNode | SlurmError | None:
        """The node; None when it is not registered yet or slurmctld refused the read (an answer
        all the same: the next poll tells); the error when slurmrestd gave no usable answer."""
        self.reads += 1
        try:
            return await self._slurm.get_node(name)
        except InvalidNodeName:
            return None
        except SlurmAPIError as exc:
            self._log.debug("reading a due node refused", node=name, error=str(exc))
            return None
        except SlurmError as exc:
            self._log.debug("reading a due node failed", node=name, error=str(exc))
            return exc
