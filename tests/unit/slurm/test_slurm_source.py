"""bridge.slurm.source: which jobs and nodes reach the store, the cheap path, backoff and recovery."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import pytest

from bridge.api.slurm_job import JobState, SlurmJob
from bridge.api.slurm_node import NodeState, SlurmNode
from bridge.runtime.controller import Request
from bridge.runtime.handlers import Object
from bridge.runtime.sources import Changed, NotModified
from bridge.slurm.source import SlurmJobSource, SlurmNodeSource, job_of, node_of, source_backoff
from bridge.slurmrest.errors import InvalidJobId, InvalidNodeName, SlurmAPIError, SlurmUnavailable
from bridge.slurmrest.errors import NotModified as SlurmNotModified
from bridge.slurmrest.versions import JobsPage, NodesPage
from reconcilers.slurm import INDEX_JOB, node_job_id, node_job_keys


def sjob(job_id: int, partition: str = "bridge", **fields: Any) -> SlurmJob:
    return SlurmJob(job_id=job_id, partition=partition, state=fields.pop("state", JobState.PENDING), **fields)


class FakeSlurm:
    """Scripted answers: a JobsPage/NodesPage, None (not modified) or an exception, in order."""

    def __init__(self, jobs: list[Any] | None = None, nodes: list[Any] | None = None) -> None:
        self.jobs = list(jobs or [])
        self.nodes = list(nodes or [])
        self.calls: list[str] = []
        self.current: dict[int, SlurmJob] = {}
        """What ``get_job`` answers."""

    async def poll_jobs(self) -> JobsPage | None:
        self.calls.append("poll_jobs")
        item = self.jobs.pop(0) if self.jobs else None
        if isinstance(item, Exception):
            raise item
        return item

    async def list_jobs(self, *, update_time: int | None = None) -> JobsPage:
        self.calls.append("list_jobs")
        return JobsPage(jobs=(), update_time=1)

    async def get_job(self, job_id: int) -> SlurmJob:
        self.calls.append(f"get_job({job_id})")
        job = self.current.get(job_id)
        if job is None:
            raise InvalidJobId("gone", error_number=2017)
        return job

    async def list_nodes(self, *, update_time: int | None = None) -> NodesPage:
        self.calls.append(f"list_nodes({update_time})")
        item = self.nodes.pop(0) if self.nodes else SlurmNotModified(update_time or 0)
        if isinstance(item, Exception):
            raise item
        return item  # type: ignore[no-any-return]

    async def get_node(self, name: str) -> SlurmNode:
        self.calls.append(f"get_node({name})")
        raise InvalidNodeName("Invalid node name specified", error_number=2018)


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def on_add(self, obj: Object, *, is_initial_list: bool) -> None:
        self.events.append(("add", str(Request.of(obj))))

    def on_update(self, old: Object, new: Object) -> None:
        self.events.append(("update", str(Request.of(new))))

    def on_delete(self, obj: Object) -> None:
        self.events.append(("delete", str(Request.of(obj))))


def page(*jobs: SlurmJob) -> JobsPage:
    return JobsPage(jobs=jobs, update_time=100)


def job_source(
    slurm: FakeSlurm, *, bridged: Callable[[], list[int]] = list, cluster: str = "hpc", **kw: Any
) -> SlurmJobSource:
    return SlurmJobSource(
        slurm=slurm,
        cluster=lambda: cluster,
        partitions=lambda: ["bridge"],
        bridged=bridged,
        interval=kw.pop("interval", 3600.0),
        **kw,
    )


async def test_only_bridged_partitions_and_jobs_with_a_jobset_are_kept() -> None:
    slurm = FakeSlurm(
        [page(sjob(1), sjob(2, "debug"), sjob(3, "debug,bridge"), sjob(4, "debug"), sjob(5, "gpu"))]
    )
    src = job_source(slurm, bridged=lambda: [4])
    await src.poll_once()
    assert sorted(src.store.keys()) == ["hpc/1", "hpc/3", "hpc/4"]
    assert src.job(1) == sjob(1)
    assert src.job(2) is None
    obj = src.store.get("hpc/3")
    assert obj is not None
    assert Request.of(obj) == Request("hpc", "3")
    assert job_of(obj).job_id == 3


async def test_not_modified_is_cheap_unless_the_filter_changed() -> None:
    bridged: list[int] = []
    slurm = FakeSlurm([page(sjob(1), sjob(2, "debug")), None, None])
    src = job_source(slurm, bridged=lambda: list(bridged))
    rec = Recorder()
    src.add_handler(rec)
    await src.poll_once()
    assert rec.events == [("add", "hpc/1")]
    result = await src._list()  # nothing changed in Slurm nor in the filter: no diff at all
    assert isinstance(result, NotModified)
    bridged.append(2)  # job 2 got a JobSet: the last list is filtered again
    await src.poll_once()
    assert rec.events == [("add", "hpc/1"), ("add", "hpc/2")]
    assert slurm.calls == ["poll_jobs", "poll_jobs", "poll_jobs"]


async def test_a_job_gone_from_slurmctld_is_delivered_as_a_delete() -> None:
    slurm = FakeSlurm([page(sjob(1), sjob(2)), page(sjob(2, state=JobState.RUNNING))])
    src = job_source(slurm)
    rec = Recorder()
    src.add_handler(rec)
    await src.poll_once()
    await src.poll_once()
    assert rec.events[2:] == [("delete", "hpc/1"), ("update", "hpc/2")]


async def test_an_unchanged_job_keeps_its_store_object_and_costs_no_event() -> None:
    """The client hands back the very SlurmJob of the last list for an unchanged job (``KnownJobs``);
    the source then reuses its store object, so the diff is an identity check and delivers nothing."""
    same = [sjob(i) for i in range(1, 6)]
    changed = sjob(3, comment="edited")
    slurm = FakeSlurm([page(*same), page(*same[:2], changed, *same[3:])])
    src = job_source(slurm)
    rec = Recorder()
    src.add_handler(rec)
    await src.poll_once()
    before = {key: src.store.get(key) for key in list(src.store.keys())}
    rec.events.clear()
    await src.poll_once()
    assert rec.events == [("update", "hpc/3")]
    for key in ("hpc/1", "hpc/2", "hpc/4", "hpc/5"):
        assert src.store.get(key) is before[key]
    assert src.job(3) is changed


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_a_written_job_is_read_alone_and_the_whole_list_waits_for_its_interval() -> None:
    """After a write the reconciler asks for that job again: one ``GET job/{id}`` (one job decoded),
    not the whole list, and the next list is still due one interval after the last one."""
    clock = Clock()
    slurm = FakeSlurm([page(sjob(1), sjob(2), sjob(3)), page(sjob(1), sjob(2, comment="listed"), sjob(3))])
    src = job_source(slurm, interval=1.0, clock=clock)
    rec = Recorder()
    src.add_handler(rec)
    await src.poll_once()
    unchanged = src.store.get("hpc/1")
    clock.now = 0.3
    slurm.current = {2: sjob(2, comment="written"), 3: sjob(3, state=JobState.RUNNING)}
    src.refresh(2)
    src.refresh(3)
    src.refresh(2)  # coalesced
    await src.poll_once()
    assert slurm.calls == ["poll_jobs", "get_job(2)", "get_job(3)"]
    assert rec.events[3:] == [("update", "hpc/2"), ("update", "hpc/3")]
    assert src.job(2) == sjob(2, comment="written")
    assert src.any_job(3) == sjob(3, state=JobState.RUNNING)
    assert src.store.get("hpc/1") is unchanged
    assert src.delay_after_poll() == pytest.approx(0.7)  # not postponed by the read
    clock.now = 1.0
    src.refresh(1)  # a list is due anyway: it brings the job too
    await src.poll_once()
    assert slurm.calls[3:] == ["poll_jobs"]
    assert src.job(2) == sjob(2, comment="listed")  # the list replaces what the reads brought
    assert (src.lists, src.reads) == (2, 2)


async def test_a_read_after_a_write_touches_that_job_alone_however_deep_the_queue() -> None:
    """The poll that reads written jobs hands back those jobs only (``Changed``): nothing else of a
    deep queue is filtered, keyed or compared again, so a write costs what it read."""
    clock = Clock()
    queue = [sjob(i) for i in range(1, 1001)]
    slurm = FakeSlurm([page(*queue)])
    src = job_source(slurm, interval=1.0, clock=clock)
    await src.poll_once()
    before = {key: src.store.get(key) for key in list(src.store.keys())}
    slurm.current = {500: sjob(500, comment="written")}
    src.refresh(500)
    result = await src._list()
    assert isinstance(result, Changed)
    assert [job_of(obj) for obj in result.objects] == [sjob(500, comment="written")]
    src.apply_changed(result.objects)
    assert src.job(500) == sjob(500, comment="written")
    assert all(src.store.get(key) is obj for key, obj in before.items() if key != "hpc/500")


async def test_a_written_job_that_left_the_bridged_partitions_is_deleted_by_its_read() -> None:
    clock = Clock()
    slurm = FakeSlurm([page(sjob(1), sjob(2), sjob(3, partition="other"))])
    src = job_source(slurm, interval=1.0, clock=clock)
    rec = Recorder()
    src.add_handler(rec)
    await src.poll_once()
    rec.events.clear()
    slurm.current = {2: sjob(2, partition="other"), 3: sjob(3, partition="bridge")}
    src.refresh(2)
    src.refresh(3)
    await src.poll_once()
    assert sorted(rec.events) == [("add", "hpc/3"), ("delete", "hpc/2")]
    assert src.job(2) is None
    assert src.job(3) == sjob(3, partition="bridge")


async def test_a_written_job_gone_from_slurmctld_is_left_to_the_next_list() -> None:
    clock = Clock()
    slurm = FakeSlurm([page(sjob(1))])
    src = job_source(slurm, interval=1.0, clock=clock)
    await src.poll_once()
    src.refresh(1)
    assert isinstance(await src._list(), NotModified)
    assert slurm.calls == ["poll_jobs", "get_job(1)"]
    assert src.job(1) == sjob(1)


async def test_written_jobs_whose_reads_all_go_unanswered_fail_the_poll_and_a_whole_list_follows() -> None:
    """slurmrestd went away after a write: the reads fail the poll (the source backs off instead of
    calling it a success), and the poll after the failure is a whole list, not the reads again."""
    clock = Clock()
    slurm = FakeSlurm([page(sjob(1)), page(sjob(1, comment="listed"))])
    src = job_source(slurm, interval=1.0, clock=clock)
    await src.poll_once()

    async def down(job_id: int) -> SlurmJob:
        slurm.calls.append(f"get_job({job_id})")
        raise SlurmUnavailable("connection refused")

    slurm.get_job = down  # type: ignore[method-assign]
    src.refresh(1)
    with pytest.raises(SlurmUnavailable):
        await src.poll_once()
    assert src.last_error == "SlurmUnavailable: connection refused"
    src.refresh(1)
    await src.poll_once()  # 0 s after the last list, yet a whole list: the source was failing
    assert slurm.calls == ["poll_jobs", "get_job(1)", "poll_jobs"]
    assert src.healthy
    assert src.job(1) == sjob(1, comment="listed")


async def test_a_refused_read_of_a_written_job_is_an_answer_not_a_failure() -> None:
    clock = Clock()
    slurm = FakeSlurm([page(sjob(1))])
    src = job_source(slurm, interval=1.0, clock=clock)
    await src.poll_once()

    async def refused(job_id: int) -> SlurmJob:
        raise SlurmAPIError("Unspecified error", error_number=1)

    slurm.get_job = refused  # type: ignore[method-assign]
    src.refresh(1)
    assert isinstance(await src._list(), NotModified)
    assert src.healthy


async def test_a_list_of_the_very_same_jobs_is_no_diff_at_all() -> None:
    """Slurm said something changed, but every job of the list is the last list's object (what changed
    was another partition's job, or a field no adapter reads): no store diff, no event."""
    same = [sjob(i) for i in range(1, 4)]
    slurm = FakeSlurm([page(*same, sjob(9, "debug")), page(*same, sjob(9, "debug", comment="x"))])
    src = job_source(slurm)
    await src.poll_once()
    assert isinstance(await src._list(), NotModified)
    assert sorted(src.store.keys()) == ["hpc/1", "hpc/2", "hpc/3"]


async def test_without_a_configuration_there_is_no_request() -> None:
    slurm = FakeSlurm([page(sjob(1))])
    src = job_source(slurm, cluster="")
    await src.poll_once()
    assert src.has_synced()
    assert len(src.store) == 0
    assert slurm.calls == []


async def test_errors_back_off_without_a_storm_and_recovery_replays_every_job() -> None:
    delays: list[float] = []

    async def fake_sleep(delay: float) -> None:
        delays.append(delay)
        if delay < 100:
            return
        await asyncio.Event().wait()  # the long interval: only trigger() ends it

    down = SlurmUnavailable("connection refused")
    slurm = FakeSlurm([page(sjob(1), sjob(2)), *([down] * 8), None])
    src = job_source(slurm, sleep=fake_sleep, backoff=source_backoff(2.0))  # as at a 2 s poll interval
    rec = Recorder()
    src.add_handler(rec)
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(src.run())
        async with asyncio.timeout(5):
            while not src.has_synced():
                await asyncio.sleep(0.001)
            src.trigger()  # end the long interval: the failures follow, each after its backoff
            while src.polls < 10:
                await asyncio.sleep(0.001)
        task.cancel()
    backoffs = [d for d in delays if d < 100]
    assert len(backoffs) == 8
    assert backoffs[0] <= 1.6
    assert max(backoffs) <= source_backoff(2.0).maximum == 8.0
    assert src.failures == 8
    assert src.healthy
    # The successful poll after the failures replayed both jobs, though Slurm said "not modified".
    assert rec.events[-2:] == [("update", "hpc/1"), ("update", "hpc/2")]


async def test_recovery_is_tracked() -> None:
    slurm = FakeSlurm([page(sjob(1)), SlurmUnavailable("down"), None])
    src = job_source(slurm)
    await src.poll_once()
    with contextlib.suppress(SlurmUnavailable):
        await src.poll_once()
    assert not src.healthy
    assert src.last_error is not None
    assert "down" in src.last_error
    await src.poll_once()
    assert src.healthy


def snode(name: str, *features: str, dynamic: bool = True) -> SlurmNode:
    flags = frozenset({"DYNAMIC_NORM"}) if dynamic else frozenset()
    return SlurmNode(name=name, state=NodeState.IDLE, features=features, state_flags=flags)


async def test_node_source_keeps_bridge_nodes_indexed_by_job() -> None:
    slurm = FakeSlurm(
        nodes=[
            NodesPage(
                nodes=(
                    snode("b42-0", "k8sbridge", "bridge-job-42"),
                    snode("b42-1", "k8sbridge"),
                    snode("b7-0", "k8sbridge", "bridge-job-7"),
                    snode("c1", "gpu", dynamic=False),
                    snode("b3-0", dynamic=False),
                ),
                update_time=555,
            )
        ]
    )
    src = SlurmNodeSource(
        slurm=slurm,
        keep=lambda n: node_job_id(n) is not None,
        interval=3600.0,
        indexers={INDEX_JOB: node_job_keys},
    )
    await src.poll_once()
    assert sorted(src.store.keys()) == ["b42-0", "b42-1", "b7-0"]
    assert sorted(node_of(o).name for o in src.store.by_index(INDEX_JOB, "42")) == ["b42-0", "b42-1"]
    await src.poll_once()  # not modified since 555: the store stays
    assert slurm.calls == ["list_nodes(None)", "list_nodes(555)"]
    assert len(src.store) == 3


async def test_node_source_disabled_makes_no_request() -> None:
    slurm = FakeSlurm()
    src = SlurmNodeSource(slurm=slurm, keep=lambda n: True, interval=1.0, enabled=lambda: False)
    await src.poll_once()
    assert src.has_synced()
    assert slurm.calls == []


async def test_node_source_falls_back_to_whole_lists_when_the_conditional_one_is_refused() -> None:
    refused = SlurmAPIError("Unspecified error", status=500, error_number=0)
    first = NodesPage(nodes=(snode("b42-0", "bridge-job-42"),), update_time=555)
    second = NodesPage(
        nodes=(snode("b42-0", "bridge-job-42"), snode("b42-1", "bridge-job-42")), update_time=560
    )
    slurm = FakeSlurm(nodes=[first, refused, second])
    src = SlurmNodeSource(slurm=slurm, keep=lambda n: True, interval=1.0)
    await src.poll_once()
    await src.poll_once()  # 22.05: the conditional list answers 500; the whole list is fetched at once
    assert slurm.calls == ["list_nodes(None)", "list_nodes(555)", "list_nodes(None)"]
    assert sorted(src.store.keys()) == ["b42-0", "b42-1"]
    assert not src.conditional


# --- the node source's adaptive interval and triggers ---------------------------------------------


class VirtualTime:
    """A fake ``sleep`` on a virtual clock: each nap advances ``now`` at once and yields."""

    def __init__(self) -> None:
        self.now = 0.0
        self.naps: list[float] = []

    async def sleep(self, delay: float) -> None:
        self.naps.append(delay)
        self.now += delay
        await asyncio.sleep(0)


class TimedNodes:
    """A node lister that records the virtual time of every poll (and fails when told to)."""

    def __init__(self, clock: VirtualTime, *, failing: Callable[[float], bool] = lambda now: False) -> None:
        self.clock = clock
        self.failing = failing
        self.polls: list[float] = []

    async def list_nodes(self, *, update_time: int | None = None) -> NodesPage:
        self.polls.append(round(self.clock.now, 6))
        if self.failing(self.clock.now):
            raise SlurmUnavailable("down")
        return NodesPage(nodes=(snode("b42-0", "bridge-job-42"),), update_time=len(self.polls))

    async def get_node(self, name: str) -> SlurmNode:
        raise AssertionError("no node is due: nothing is read alone")


async def run_until(src: SlurmNodeSource, done: Callable[[], bool]) -> None:
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(src.run())
        async with asyncio.timeout(5):
            while not done():
                await asyncio.sleep(0)
        task.cancel()


def adaptive_source(
    slurm: TimedNodes, clock: VirtualTime, wanted: Callable[[], bool], **kw: Any
) -> SlurmNodeSource:
    return SlurmNodeSource(
        slurm=slurm,
        keep=lambda n: True,
        interval=kw.pop("interval", 1.0),
        fast_interval=kw.pop("fast_interval", 0.2),
        wanted=wanted,
        sleep=clock.sleep,
        backoff=source_backoff(1.0),
        **kw,
    )


async def test_node_source_polls_fast_only_while_a_registration_is_due() -> None:
    clock = VirtualTime()
    slurm = TimedNodes(clock)
    due = lambda: 3.0 <= clock.now < 4.0 + 1e-9  # noqa: E731 - a registration due from t=3 s to t=4 s
    src = adaptive_source(slurm, clock, due)
    await run_until(src, lambda: len(slurm.polls) >= 12)
    # Idle: once a second; due: every 0.2 s; then once a second again, counted from the last poll.
    assert slurm.polls[:12] == pytest.approx([0, 1, 2, 3, 3.2, 3.4, 3.6, 3.8, 4.0, 5.0, 6.0, 7.0])
    # While idle it only looks at wanted() every 0.2 s: naps, no requests.
    assert max(clock.naps) == pytest.approx(0.2)


async def test_node_source_turns_fast_within_one_fast_interval_of_wanted() -> None:
    clock = VirtualTime()
    slurm = TimedNodes(clock)
    src = adaptive_source(slurm, clock, lambda: clock.now >= 0.5)
    await run_until(src, lambda: len(slurm.polls) >= 3)
    # Due from t=0.5 s: the poll comes at the next 0.2 s look (t=0.6 s), not at the idle t=1 s.
    assert slurm.polls[:3] == pytest.approx([0, 0.6, 0.8])


async def test_node_source_without_a_fast_interval_keeps_its_interval() -> None:
    clock = VirtualTime()
    slurm = TimedNodes(clock)
    src = adaptive_source(slurm, clock, lambda: True, fast_interval=None)
    await run_until(src, lambda: len(slurm.polls) >= 3)
    assert slurm.polls[:3] == pytest.approx([0, 1, 2])
    assert clock.naps[:2] == [1.0, 1.0]


async def test_a_failing_node_source_keeps_its_backoff_while_wanted() -> None:
    clock = VirtualTime()
    slurm = TimedNodes(clock, failing=lambda now: now < 3.0)
    src = adaptive_source(slurm, clock, lambda: True)
    await run_until(src, lambda: len(slurm.polls) >= 4)
    gaps = [b - a for a, b in zip(slurm.polls, slurm.polls[1:], strict=False)]
    assert all(gap >= 0.8 for gap in gaps[:2]), slurm.polls  # backoff (0.8 s doubling), not 0.2 s
    assert src.failures >= 2


async def test_triggers_during_a_poll_in_flight_coalesce_into_one_poll_after_it() -> None:
    clock = VirtualTime()
    release = asyncio.Event()
    in_flight = 0
    most_at_once = 0
    polls = 0

    class SlowNodes:
        async def list_nodes(self, *, update_time: int | None = None) -> NodesPage:
            nonlocal in_flight, most_at_once, polls
            polls += 1
            in_flight += 1
            most_at_once = max(most_at_once, in_flight)
            if polls == 2:
                await release.wait()  # the second poll stays in flight until released
            in_flight -= 1
            return NodesPage(nodes=(), update_time=polls)

        async def get_node(self, name: str) -> SlurmNode:
            raise AssertionError("no node is due")

    src = SlurmNodeSource(
        slurm=SlowNodes(), keep=lambda n: True, interval=3600.0, fast_interval=0.2,
        wanted=lambda: False, sleep=clock.sleep,
    )  # fmt: skip
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(src.run())
        async with asyncio.timeout(5):
            while polls < 1 or in_flight:
                await asyncio.sleep(0)
            src.trigger()  # ends the idle wait: poll 2 starts and stays in flight
            while polls < 2:
                await asyncio.sleep(0)
            for _ in range(5):  # five pods became ready meanwhile
                src.trigger()
            release.set()
            while polls < 3:
                await asyncio.sleep(0)
            waited = clock.now
            for _ in range(200):  # let the loop run on: nothing more is due for an hour
                await asyncio.sleep(0)
        task.cancel()
    assert polls == 3  # the five triggers made exactly one poll, right after the one in flight
    assert most_at_once == 1
    assert waited < 3600.0  # at once, not after the interval


# --- narrowed reads: only the nodes whose registration is due -------------------------------------


class RegisteringNodes:
    """slurmctld on a virtual clock: ``registers`` says when each node registers idle; the whole
    list and single reads answer accordingly, and every request is recorded with its time."""

    def __init__(self, clock: VirtualTime, registers: dict[str, float]) -> None:
        self.clock = clock
        self.registers = registers
        self.calls: list[tuple[str, float]] = []

    def _up(self) -> list[SlurmNode]:
        return [snode(n, "bridge-job-42") for n, at in sorted(self.registers.items()) if self.clock.now >= at]

    async def list_nodes(self, *, update_time: int | None = None) -> NodesPage:
        self.calls.append(("list", round(self.clock.now, 3)))
        return NodesPage(nodes=tuple(self._up()), update_time=None)

    async def get_node(self, name: str) -> SlurmNode:
        self.calls.append((name, round(self.clock.now, 3)))
        for node in self._up():
            if node.name == name:
                return node
        raise InvalidNodeName("Invalid node name specified", error_number=2018)


def narrowed_source(
    slurm: RegisteringNodes, clock: VirtualTime, due: Callable[[SlurmNodeSource], list[str]]
) -> SlurmNodeSource:
    holder: list[SlurmNodeSource] = []
    src = SlurmNodeSource(
        slurm=slurm,
        keep=lambda n: True,
        interval=1.0,
        fast_interval=0.2,
        due=lambda: due(holder[0]),
        wanted=lambda: bool(due(holder[0])),
        due_interval=0.05,
        sleep=clock.sleep,
        clock=lambda: clock.now,
    )
    holder.append(src)
    return src


def not_stored(src: SlurmNodeSource, names: list[str], *, since: float, clock: VirtualTime) -> list[str]:
    """The due nodes of a job whose pods run from ``since`` on: those the store does not hold."""
    return [n for n in names if clock.now >= since - 1e-9 and src.store.get(n) is None]


async def test_due_nodes_are_read_alone_every_due_interval_and_the_whole_list_keeps_its_interval() -> None:
    clock = VirtualTime()
    slurm = RegisteringNodes(clock, {"b42-0": 0.5})
    src = narrowed_source(slurm, clock, lambda s: not_stored(s, ["b42-0"], since=0.3, clock=clock))
    events = Recorder()
    src.add_handler(events)
    await run_until(src, lambda: len([c for c in slurm.calls if c[0] == "list"]) >= 2)
    # The pod runs from t=0.3 (seen at the next 0.2 s look, t=0.4); the node is read alone every
    # 0.05 s until it registers (t=0.5); the whole list still comes once a second, never postponed.
    assert slurm.calls == [("list", 0.0), ("b42-0", 0.4), ("b42-0", 0.45), ("b42-0", 0.5), ("list", 1.0)]
    assert events.events == [("add", "b42-0")]
    assert (src.lists, src.reads) == (2, 3)


async def test_a_read_alone_changes_only_the_node_read() -> None:
    clock = VirtualTime()
    slurm = RegisteringNodes(clock, {"b42-0": 0.0, "b42-1": 0.12})
    src = narrowed_source(slurm, clock, lambda s: not_stored(s, ["b42-1"], since=0.0, clock=clock))
    events = Recorder()
    src.add_handler(events)
    await run_until(src, lambda: src.store.get("b42-1") is not None)
    assert sorted(src.store.keys()) == ["b42-0", "b42-1"]  # the listed node stays
    assert events.events == [("add", "b42-0"), ("add", "b42-1")]
    assert [c[0] for c in slurm.calls] == ["list", "b42-1", "b42-1", "b42-1"]  # 0.05, 0.1, 0.15


async def test_more_due_nodes_than_the_budget_allows_are_listed_whole_at_the_fast_interval() -> None:
    clock = VirtualTime()
    many = [f"b42-{i}" for i in range(9)]  # 40 reads/s x 0.2 s = 8 at most
    slurm = RegisteringNodes(clock, dict.fromkeys(many, 100.0))
    src = narrowed_source(slurm, clock, lambda s: not_stored(s, many, since=0.0, clock=clock))
    await run_until(src, lambda: len(slurm.calls) >= 4)
    assert slurm.calls[:4] == [("list", 0.0), ("list", 0.2), ("list", 0.4), ("list", 0.6)]


async def test_the_read_budget_spaces_the_reads_of_several_due_nodes() -> None:
    clock = VirtualTime()
    four = [f"b42-{i}" for i in range(4)]
    slurm = RegisteringNodes(clock, dict.fromkeys(four, 100.0))
    src = narrowed_source(slurm, clock, lambda s: not_stored(s, four, since=0.0, clock=clock))
    await run_until(src, lambda: len(slurm.calls) >= 9)
    # Four due nodes at 40 reads a second: a round of four every 0.1 s, not every 0.05 s.
    assert sorted({at for _, at in slurm.calls[1:9]}) == pytest.approx([0.1, 0.2])


async def test_without_a_due_interval_due_nodes_are_never_read_alone() -> None:
    clock = VirtualTime()
    slurm = RegisteringNodes(clock, {"b42-0": 100.0})
    src = narrowed_source(slurm, clock, lambda s: not_stored(s, ["b42-0"], since=0.0, clock=clock))
    src.due_interval = None
    await run_until(src, lambda: len(slurm.calls) >= 3)
    assert slurm.calls[:3] == [("list", 0.0), ("list", 0.2), ("list", 0.4)]


class OutageNodes(RegisteringNodes):
    """slurmctld as :class:`RegisteringNodes`, with slurmrestd unreachable from ``down`` on."""

    def __init__(self, clock: VirtualTime, registers: dict[str, float], *, down: float) -> None:
        super().__init__(clock, registers)
        self.down = down

    async def list_nodes(self, *, update_time: int | None = None) -> NodesPage:
        page = await super().list_nodes(update_time=update_time)
        if self.clock.now >= self.down:
            raise SlurmUnavailable("connection refused")
        return page

    async def get_node(self, name: str) -> SlurmNode:
        if self.clock.now >= self.down:
            self.calls.append((name, round(self.clock.now, 3)))
            raise SlurmUnavailable("connection refused")
        return await super().get_node(name)


async def test_due_node_reads_that_get_no_answer_back_off_like_a_failed_list() -> None:
    """slurmrestd is down while a node is due: the reads fail the poll, so the source backs off
    (0.8 s doubling) instead of reading every 0.05 s, and recovers with a whole list."""
    clock = VirtualTime()
    slurm = OutageNodes(clock, {"b42-0": 100.0}, down=0.3)
    src = narrowed_source(slurm, clock, lambda s: not_stored(s, ["b42-0"], since=0.0, clock=clock))
    await run_until(src, lambda: clock.now >= 30.0)
    during = [c for c in slurm.calls if c[1] >= 0.3]
    assert 4 <= len(during) <= 10, during  # 0.8-1.6, 1.6-3.2, 3.2-6.4, then 6.4-8 s apart
    assert [name for name, _ in during[1:]] == ["list"] * (len(during) - 1)  # each retry lists whole
    assert src.failures == len(during)


async def test_a_due_node_read_refused_beside_an_answered_one_is_left_to_the_next_poll() -> None:
    clock = VirtualTime()
    slurm = RegisteringNodes(clock, {"b42-0": 0.0, "b42-1": 0.12, "b42-2": 0.12})
    answer = slurm.get_node

    async def one_refused(name: str) -> SlurmNode:
        if name == "b42-2":
            slurm.calls.append((name, round(clock.now, 3)))
            raise SlurmUnavailable("reset by peer")
        return await answer(name)

    slurm.get_node = one_refused  # type: ignore[method-assign]
    src = narrowed_source(slurm, clock, lambda s: not_stored(s, ["b42-1", "b42-2"], since=0.0, clock=clock))
    await run_until(src, lambda: src.store.get("b42-1") is not None)
    assert src.failures == 0
    assert src.healthy
    assert src.store.get("b42-2") is None  # the next read (or list) brings it


async def test_the_node_source_says_which_whole_list_its_store_shows() -> None:
    """``listed`` is the number of the last whole list stored: a narrowed read does not move it, a
    failed list does not either."""
    clock = VirtualTime()
    slurm = OutageNodes(clock, {"b42-0": 0.12}, down=1.5)
    src = narrowed_source(slurm, clock, lambda s: not_stored(s, ["b42-0"], since=0.0, clock=clock))
    assert (src.lists, src.listed) == (0, 0)
    await run_until(src, lambda: src.store.get("b42-0") is not None)
    assert (src.lists, src.listed) == (1, 1)  # brought by a read alone
    await run_until(src, lambda: src.failures > 0)
    assert src.listed == src.lists - 1  # the last list failed: the store shows the one before


async def test_a_deep_queue_is_listed_less_often_and_reads_in_between_stay_single() -> None:
    """Whole lists bring at most ``list_budget`` jobs a second: 30 jobs at 10 a second are listed
    every 3 s, not every second, and a job with a reason to have changed is read alone meanwhile."""
    clock = Clock()
    queue = [sjob(i) for i in range(1, 31)]
    slurm = FakeSlurm([page(*queue), page(*queue)])
    src = job_source(slurm, interval=1.0, clock=clock, list_budget=10.0)
    await src.poll_once()
    assert src.list_interval() == pytest.approx(3.0)
    assert src.delay_after_poll() == pytest.approx(3.0)
    clock.now = 1.5
    slurm.current = {7: sjob(7, state=JobState.RUNNING)}
    src.refresh(7)
    await src.poll_once()
    assert slurm.calls == ["poll_jobs", "get_job(7)"]
    assert src.delay_after_poll() == pytest.approx(1.5)
    clock.now = 3.0
    src.refresh(7)
    await src.poll_once()  # the list is due: it answers for job 7 too
    assert slurm.calls[2:] == ["poll_jobs"]


async def test_a_short_list_keeps_the_configured_interval() -> None:
    src = job_source(FakeSlurm([page(sjob(1), sjob(2))]), interval=1.0, list_budget=10.0)
    await src.poll_once()
    assert src.list_interval() == 1.0


async def test_a_job_gaining_its_jobset_between_lists_costs_no_whole_list_nor_a_pass_over_the_queue() -> None:
    """Jobs gain and lose JobSets all the time; for a job of a bridged partition that changes
    nothing, so a read between lists stays a read and the other jobs are not looked at again."""
    clock = Clock()
    bridged: list[int] = []
    queue = [sjob(i) for i in range(1, 101)]
    slurm = FakeSlurm([page(*queue)])
    src = job_source(slurm, bridged=lambda: list(bridged), interval=1.0, clock=clock)
    rec = Recorder()
    src.add_handler(rec)
    await src.poll_once()
    events = len(rec.events)
    clock.now = 0.5
    bridged.extend([3, 4])
    slurm.current = {3: sjob(3, comment="written")}
    src.refresh(3)
    result = await src._list()
    assert isinstance(result, Changed)
    assert [job_of(obj) for obj in result.objects] == [sjob(3, comment="written")]
    src.apply_changed(result.objects)
    assert slurm.calls == ["poll_jobs", "get_job(3)"]
    assert rec.events[events:] == [("update", "hpc/3")]


async def test_a_job_outside_the_bridged_partitions_gaining_a_jobset_between_lists_is_added() -> None:
    clock = Clock()
    bridged: list[int] = []
    slurm = FakeSlurm([page(sjob(1), sjob(2, "debug"))])
    src = job_source(slurm, bridged=lambda: list(bridged), interval=1.0, clock=clock)
    rec = Recorder()
    src.add_handler(rec)
    await src.poll_once()
    clock.now = 0.5
    bridged.append(2)
    slurm.current = {1: sjob(1, comment="written")}
    src.refresh(1)
    await src.poll_once()
    assert slurm.calls == ["poll_jobs", "get_job(1)"]
    assert sorted(src.store.keys()) == ["hpc/1", "hpc/2"]
    assert ("add", "hpc/2") in rec.events
    assert src.job(1) == sjob(1, comment="written")


async def test_any_job_shows_a_job_read_alone_since_the_last_list() -> None:
    """The jobs by id are kept up to date by each read, not made again over the whole list."""
    clock = Clock()
    slurm = FakeSlurm([page(sjob(1), sjob(2, "debug"))])
    src = job_source(slurm, interval=1.0, clock=clock)
    await src.poll_once()
    assert src.any_job(2) == sjob(2, "debug")
    clock.now = 0.5
    slurm.current = {1: sjob(1, comment="written"), 2: sjob(2, "debug", state=JobState.RUNNING)}
    src.refresh(1)
    src.refresh(2)
    await src.poll_once()
    assert src.any_job(1) == sjob(1, comment="written")
    assert src.any_job(2) == sjob(2, "debug", state=JobState.RUNNING)
