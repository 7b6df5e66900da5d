"""The discrete-event simulator of the two policies, on whole nodes.

A policy is a set of partitions, each with its nodes, the classes it serves and its scheduler:

- ``easy``: Slurm with ``priority/basic`` (first come, first served) and EASY backfill: the first job
  that does not fit gets a reservation at the earliest time enough nodes free up (by the running
  jobs' time limits); a later job may start now if it fits and ends (by its limit) before that time, or
  uses only nodes the reservation leaves over.
- ``kueue``: one Kueue ClusterQueue with a quota of the partition's nodes; pending workloads ordered by
  priority, then submit time; ``BestEffortFIFO`` (Kueue's default) tries each in turn and admits what
  fits, ``StrictFIFO`` stops at the first that does not; a workload that does not fit may preempt
  running ones of lower priority (``withinClusterQueue: LowerPriority``: lowest priority first, then
  the most recently admitted). A preempted job goes back to its queue at its submit time and starts
  again from nothing (a requeued Slurm job, a restarted Job); its lost node-seconds are counted.

Admission holds the nodes at once; the work starts after the class's start overhead (pod start;
slurmd registration and the bridge's release for a bridged Slurm job) and the nodes come back after
its end overhead (the bridge's cleanup). No randomness: ties are broken by name, so one workload gives
one result.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from poolsim.workload import KUBE_CLASSES, Job, JobClass

EPS = 1e-6


class Scheduler(StrEnum):
    EASY = "easy"
    KUEUE = "kueue"


class Strategy(StrEnum):
    BEST_EFFORT_FIFO = "BestEffortFIFO"
    STRICT_FIFO = "StrictFIFO"


@dataclass(frozen=True)
class Overheads:
    """Seconds a job holds its nodes before its work starts, and after it ends; and seconds from its
    submission until its scheduler sees it (``admission``: nodes are not held meanwhile)."""

    start: float = 0.0
    end: float = 0.0
    admission: float = 0.0


@dataclass(frozen=True)
class Calibration:
    """Per-job overheads in seconds (see the README for where each default comes from)."""

    pod_start: float = 1.0
    slurm_native_start: float = 0.5
    slurmd_registration: float = 10.0
    release: float = 0.7
    cleanup: float = 5.0
    ray_worker_join: float = 2.75
    kube_admission: float = 0.0
    """Submission -> Kueue's admission of a Job, RayJob's workers or replica with quota free (0: at once)."""
    bridge_admission: float = 0.0
    """``sbatch --hold`` -> Kueue's admission of the bridged JobSet with quota free (the bridge's poll,
    its JobSet, Kueue's admission; 0: at once)."""

    def native(self) -> dict[JobClass, Overheads]:
        return {
            JobClass.SLURM: Overheads(start=self.slurm_native_start),
            JobClass.BATCH: Overheads(start=self.pod_start, admission=self.kube_admission),
            JobClass.RAY: Overheads(start=self.ray_worker_join, admission=self.kube_admission),
            JobClass.INFERENCE: Overheads(start=self.pod_start, admission=self.kube_admission),
        }

    def bridged(self) -> dict[JobClass, Overheads]:
        return {
            **self.native(),
            JobClass.SLURM: Overheads(
                start=self.slurmd_registration + self.release,
                end=self.cleanup,
                admission=self.bridge_admission,
            ),
        }


@dataclass(frozen=True)
class Partition:
    name: str
    nodes: int
    scheduler: Scheduler
    classes: frozenset[JobClass]


@dataclass(frozen=True)
class Policy:
    name: str
    partitions: tuple[Partition, ...]
    overheads: Mapping[JobClass, Overheads]
    strategy: Strategy = Strategy.BEST_EFFORT_FIFO

    def partition_of(self, kind: JobClass) -> Partition:
        for partition in self.partitions:
            if kind in partition.classes:
                return partition
        raise ValueError(f"policy {self.name} serves no {kind.value} jobs")


def static_split(
    *, slurm_nodes: int, kube_nodes: int, calibration: Calibration, strategy: Strategy
) -> Policy:
    return Policy(
        name="static-split",
        partitions=(
            Partition("slurm", slurm_nodes, Scheduler.EASY, frozenset({JobClass.SLURM})),
            Partition("kube", kube_nodes, Scheduler.KUEUE, frozenset(KUBE_CLASSES)),
        ),
        overheads=calibration.native(),
        strategy=strategy,
    )


def one_pool(*, slurm_nodes: int, kube_nodes: int, calibration: Calibration, strategy: Strategy) -> Policy:
    return Policy(
        name="one-pool",
        partitions=(Partition("pool", slurm_nodes + kube_nodes, Scheduler.KUEUE, frozenset(JobClass)),),
        overheads=calibration.bridged(),
        strategy=strategy,
    )


@dataclass
class Record:
    """What happened to one job."""

    job: Job
    partition: str
    admitted: float | None = None
    running: float | None = None
    finished: float | None = None  # its work ended
    released: float | None = None  # its nodes came back
    admissions: int = 0
    completions: int = 0
    preemptions: int = 0
    wasted_node_seconds: float = 0.0
    reservation: float | None = None  # EASY: the start time promised when it first waited at the head
    spans: list[tuple[float, float]] = field(default_factory=list)  # each holding of its nodes

    @property
    def wait(self) -> float | None:
        return None if self.running is None else self.running - self.job.submit


@dataclass
class _Run:
    job: Job
    admitted: float
    running: float
    work_end: float
    release: float
    expected_release: float  # by the time limit (what backfill plans with)
    epoch: int


@dataclass
class Sample:
    """The allocation right after the events of one instant."""

    time: float
    allocated: tuple[int, ...]  # per partition, in the policy's order
    by_class: tuple[int, ...]  # per JobClass, in JobClass order
    pending: int


@dataclass
class Result:
    policy: Policy
    records: dict[str, Record]
    samples: list[Sample]
    idle_while_waiting: float = 0.0  # node-seconds idle while some job waited
    preemptions: int = 0
    unschedulable: list[str] = field(default_factory=list)

    @property
    def capacity(self) -> int:
        return sum(p.nodes for p in self.policy.partitions)


class _PartitionState:
    def __init__(self, partition: Partition) -> None:
        self.partition = partition
        self.free = partition.nodes
        self.pending: list[tuple[tuple[int, float, str], Job]] = []
        self.running: dict[str, _Run] = {}

    def enqueue(self, job: Job) -> None:
        if self.partition.scheduler is Scheduler.EASY:
            key = (0, job.submit, job.name)
        else:
            key = (-job.priority, job.submit, job.name)
        bisect.insort(self.pending, (key, job))


class Simulator:
    """One run of one policy over one workload; ``run()`` once."""

    def __init__(self, *, policy: Policy, jobs: Sequence[Job]) -> None:
        self.policy = policy
        self.jobs = list(jobs)
        self.states = [_PartitionState(p) for p in policy.partitions]
        self.records: dict[str, Record] = {}
        self.events: list[tuple[float, int, int, str, int]] = []
        self.seq = 0
        self.epochs: dict[str, int] = {}
        self.result = Result(policy=policy, records=self.records, samples=[])

    def _push(self, time: float, order: int, name: str, epoch: int) -> None:
        self.seq += 1
        heapq.heappush(self.events, (time, order, self.seq, name, epoch))

    def run(self) -> Result:
        by_name: dict[str, Job] = {}
        for job in self.jobs:
            if job.name in by_name:
                raise ValueError(f"two jobs named {job.name}")
            by_name[job.name] = job
            partition = self.policy.partition_of(job.kind)
            self.records[job.name] = Record(job=job, partition=partition.name)
            self.epochs[job.name] = 0
            if job.nodes > partition.nodes or job.nodes <= 0:
                self.result.unschedulable.append(job.name)
                continue
            self._push(job.submit + self.policy.overheads[job.kind].admission, 1, job.name, -1)
        last = 0.0
        while self.events:
            now = self.events[0][0]
            self._account(last, now)
            while self.events and self.events[0][0] <= now + EPS:
                _, order, _, name, epoch = heapq.heappop(self.events)
                if order == 0:
                    self._release(name, epoch, now)
                else:
                    state = self._state_of(by_name[name])
                    state.enqueue(by_name[name])
            for state in self.states:
                if state.partition.scheduler is Scheduler.EASY:
                    self._easy_pass(state, now)
                else:
                    self._kueue_pass(state, now)
            self._sample(now)
            last = now
        return self.result

    def _state_of(self, job: Job) -> _PartitionState:
        for state in self.states:
            if job.kind in state.partition.classes:
                return state
        raise AssertionError(job.kind)

    def _account(self, last: float, now: float) -> None:
        if now <= last or not self.result.samples:
            return
        if any(state.pending for state in self.states):
            idle = sum(state.free for state in self.states)
            self.result.idle_while_waiting += idle * (now - last)

    def _sample(self, now: float) -> None:
        by_class = dict.fromkeys(JobClass, 0)
        for state in self.states:
            for run in state.running.values():
                by_class[run.job.kind] += run.job.nodes
        sample = Sample(
            time=now,
            allocated=tuple(s.partition.nodes - s.free for s in self.states),
            by_class=tuple(by_class[kind] for kind in JobClass),
            pending=sum(len(s.pending) for s in self.states),
        )
        samples = self.result.samples
        if samples and abs(samples[-1].time - now) <= EPS:
            samples[-1] = sample
        else:
            samples.append(sample)

    def _admit(self, state: _PartitionState, job: Job, now: float) -> None:
        overheads = self.policy.overheads[job.kind]
        running = now + overheads.start
        work_end = running + job.runtime
        if job.until is not None:
            work_end = max(running, job.until)
        release = work_end + overheads.end
        expected = running + job.estimate + overheads.end
        if job.until is not None:
            expected = release
        epoch = self.epochs[job.name] + 1
        self.epochs[job.name] = epoch
        state.running[job.name] = _Run(job, now, running, work_end, release, expected, epoch)
        state.free -= job.nodes
        if state.free < 0:
            raise AssertionError(f"{state.partition.name} over-allocated admitting {job.name}")
        record = self.records[job.name]
        record.admitted = now
        record.running = running
        record.admissions += 1
        self._push(release, 0, job.name, epoch)

    def _release(self, name: str, epoch: int, now: float) -> None:
        if epoch != self.epochs[name]:
            return  # preempted since
        record = self.records[name]
        state = self._state_of(record.job)
        run = state.running.pop(name)
        state.free += run.job.nodes
        # Events within EPS are taken together at the first one's time, which may be before this
        # release's own by less than EPS: its work is not reported ending after its nodes came back.
        record.finished = min(run.work_end, now)
        record.released = now
        record.spans.append((run.admitted, now))
        record.completions += 1

    def _preempt(self, state: _PartitionState, run: _Run, now: float) -> None:
        record = self.records[run.job.name]
        del state.running[run.job.name]
        state.free += run.job.nodes
        self.epochs[run.job.name] += 1
        record.preemptions += 1
        record.spans.append((run.admitted, now))
        record.wasted_node_seconds += run.job.nodes * (now - run.admitted)
        record.running = None
        self.result.preemptions += 1

    # --- Slurm: FCFS + EASY backfill -------------------------------------------------------------

    def _easy_pass(self, state: _PartitionState, now: float) -> None:
        while state.pending and state.pending[0][1].nodes <= state.free:
            _, job = state.pending.pop(0)
            self._admit(state, job, now)
        if not state.pending:
            return
        head = state.pending[0][1]
        shadow, extra = math.inf, 0
        available = state.free
        for run in sorted(state.running.values(), key=lambda r: (r.expected_release, r.job.name)):
            available += run.job.nodes
            if available >= head.nodes:
                shadow, extra = run.expected_release, available - head.nodes
                break
        record = self.records[head.name]
        if record.reservation is None:
            record.reservation = shadow
        kept: list[tuple[tuple[int, float, str], Job]] = [state.pending[0]]
        for entry in state.pending[1:]:
            job = entry[1]
            if job.nodes <= state.free:
                overheads = self.policy.overheads[job.kind]
                ends = now + overheads.start + job.estimate + overheads.end
                if ends <= shadow + EPS:
                    self._admit(state, job, now)
                    continue
                if job.nodes <= extra:
                    extra -= job.nodes
                    self._admit(state, job, now)
                    continue
            kept.append(entry)
        state.pending = kept

    # --- Kueue: one ClusterQueue ------------------------------------------------------------------

    def _victims(self, state: _PartitionState, job: Job, now: float) -> list[_Run] | None:
        need = job.nodes - state.free
        candidates = sorted(
            (r for r in state.running.values() if r.job.priority < job.priority and r.work_end > now + EPS),
            key=lambda r: (r.job.priority, -r.admitted, r.job.name),
        )
        chosen: list[_Run] = []
        for run in candidates:
            if need <= 0:
                break
            chosen.append(run)
            need -= run.job.nodes
        return chosen if need <= 0 else None

    def _kueue_pass(self, state: _PartitionState, now: float) -> None:
        """Kueue's cycle; preempted workloads are requeued and the cycle runs again over them."""
        while state.pending:
            requeued = self._kueue_cycle(state, now)
            if not requeued:
                return
            for job in requeued:
                state.enqueue(job)

    def _kueue_cycle(self, state: _PartitionState, now: float) -> list[Job]:
        strict = self.policy.strategy is Strategy.STRICT_FIFO
        lowest = min((r.job.priority for r in state.running.values()), default=math.inf)
        kept: list[tuple[tuple[int, float, str], Job]] = []
        requeued: list[Job] = []
        pending = state.pending
        for index, entry in enumerate(pending):
            job = entry[1]
            if state.free == 0 and job.priority <= lowest:
                kept.extend(pending[index:])  # nothing after it can be admitted or preempt
                break
            if job.nodes <= state.free:
                self._admit(state, job, now)
                lowest = min(lowest, job.priority)
                continue
            victims = self._victims(state, job, now) if job.priority > lowest else None
            if victims is not None:
                for run in victims:
                    self._preempt(state, run, now)
                    requeued.append(run.job)
                self._admit(state, job, now)
                lowest = min(lowest, job.priority)
                continue
            kept.append(entry)
            if strict:
                kept.extend(pending[index + 1 :])
                break
        state.pending = kept
        return requeued


def simulate(*, policy: Policy, jobs: Sequence[Job]) -> Result:
    return Simulator(policy=policy, jobs=jobs).run()
