"""Controller result handling, metrics, mapping and lifecycle, with a fake Source."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import structlog
from prometheus_client import CollectorRegistry

from bridge.runtime.controller import (
    CacheSyncTimeoutError,
    Controller,
    Request,
    Result,
    TerminalError,
    _Enqueuer,
    label_mapper,
    own_key,
    owner_mapper,
)
from bridge.runtime.handlers import EventHandler, Object
from bridge.runtime.queue import LOW_PRIORITY, WorkQueue
from bridge.runtime.ratelimit import ItemExponentialFailureRateLimiter
from bridge.runtime.sources import PolledSource


def obj(name: str, namespace: str = "ns", **meta: Any) -> Object:
    return {"metadata": {"name": name, "namespace": namespace, **meta}}


class FakeSource:
    def __init__(self, *, synced: bool = True) -> None:
        self.synced = synced
        self.handlers: list[EventHandler] = []
        self.objects: dict[str, Object] = {}

    def add_handler(self, handler: EventHandler) -> None:
        self.handlers.append(handler)
        for o in self.objects.values():
            handler.on_add(o, is_initial_list=True)

    def has_synced(self) -> bool:
        return self.synced

    def add(self, o: Object) -> None:
        self.objects[o["metadata"]["name"]] = o
        for h in self.handlers:
            h.on_add(o, is_initial_list=False)

    def update(self, new: Object) -> None:
        old = self.objects[new["metadata"]["name"]]
        self.objects[new["metadata"]["name"]] = new
        for h in self.handlers:
            h.on_update(old, new)

    def delete(self, o: Object) -> None:
        self.objects.pop(o["metadata"]["name"], None)
        for h in self.handlers:
            h.on_delete(o)


Behaviour = Callable[[Request], Awaitable[Result]]


class Script:
    """A reconciler that replays scripted outcomes and records each call."""

    def __init__(self, *outcomes: Result | BaseException | Behaviour) -> None:
        self.outcomes = list(outcomes)
        self.calls: list[tuple[Request, float, dict[str, Any]]] = []
        self.called = asyncio.Event()

    async def reconcile(self, request: Request) -> Result:
        self.calls.append((request, time.monotonic(), structlog.contextvars.get_contextvars()))
        self.called.set()
        outcome = self.outcomes.pop(0) if self.outcomes else Result()
        if isinstance(outcome, BaseException):
            raise outcome
        if isinstance(outcome, Result):
            return outcome
        return await outcome(request)


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def sample(registry: CollectorRegistry, metric: str, **labels: str) -> float:
    value = registry.get_sample_value(metric, labels)
    return 0.0 if value is None else value


async def run_until(controller: Controller, condition: Callable[[], bool], timeout: float = 3.0) -> None:
    """Run the controller until ``condition`` holds (polling), then stop it cleanly."""
    task = asyncio.create_task(controller.run())
    try:
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, "condition not reached"
            assert not task.done(), task.exception() if not task.cancelled() else "cancelled"
            await asyncio.sleep(0.005)
    finally:
        controller.stop()
        await asyncio.wait_for(task, 2)


def make(
    registry: CollectorRegistry, reconciler: Script, *, workers: int = 1, base: float = 0.01
) -> tuple[Controller, FakeSource]:
    controller = Controller(
        name="test",
        reconciler=reconciler,
        max_concurrent_reconciles=workers,
        rate_limiter=ItemExponentialFailureRateLimiter(base=base),
        registry=registry,
    )
    source = FakeSource()
    controller.watch(source)
    return controller, source


async def test_success_forgets_and_counts(registry: CollectorRegistry) -> None:
    script = Script(Result())
    controller, source = make(registry, script)
    source.add(obj("a"))
    await run_until(controller, lambda: len(script.calls) == 1)
    assert script.calls[0][0] == Request("ns", "a")
    assert sample(registry, "controller_runtime_reconcile_total", controller="test", result="success") == 1
    assert sample(registry, "controller_runtime_reconcile_errors_total", controller="test") == 0
    assert sample(registry, "controller_runtime_reconcile_time_seconds_count", controller="test") == 1
    assert sample(registry, "controller_runtime_max_concurrent_reconciles", controller="test") == 1


async def test_exception_is_retried_with_growing_backoff_then_forgotten(registry: CollectorRegistry) -> None:
    script = Script(RuntimeError("one"), RuntimeError("two"), Result())
    controller, source = make(registry, script, base=0.02)
    source.add(obj("a"))
    await run_until(controller, lambda: len(script.calls) == 3)
    times = [t for _, t, _ in script.calls]
    assert times[1] - times[0] >= 0.018  # 20 ms
    assert times[2] - times[1] >= 0.038  # 40 ms
    assert sample(registry, "controller_runtime_reconcile_errors_total", controller="test") == 2
    assert sample(registry, "controller_runtime_reconcile_total", controller="test", result="error") == 2
    assert sample(registry, "controller_runtime_reconcile_total", controller="test", result="success") == 1
    assert controller.queue.num_requeues(Request("ns", "a")) == 0, "success forgets the failures"
    assert sample(registry, "workqueue_retries_total", name="test", controller="test") == 2


async def test_terminal_error_is_counted_but_not_retried(registry: CollectorRegistry) -> None:
    script = Script(TerminalError("hopeless"))
    controller, source = make(registry, script)
    source.add(obj("a"))
    await run_until(controller, lambda: len(script.calls) == 1)
    task = asyncio.create_task(asyncio.sleep(0.1))
    await task
    assert len(script.calls) == 1
    assert controller.queue.num_requeues(Request("ns", "a")) == 0
    assert sample(registry, "controller_runtime_terminal_reconcile_errors_total", controller="test") == 1
    assert sample(registry, "controller_runtime_reconcile_errors_total", controller="test") == 1
    assert sample(registry, "controller_runtime_reconcile_total", controller="test", result="error") == 1


async def test_terminal_error_stays_quiet_until_a_new_event(registry: CollectorRegistry) -> None:
    script = Script(TerminalError("hopeless"), Result())
    controller, source = make(registry, script)
    source.add(obj("a"))
    task = asyncio.create_task(controller.run())
    await asyncio.wait_for(script.called.wait(), 2)
    await asyncio.sleep(0.1)
    assert len(script.calls) == 1
    source.update(obj("a", labels={"x": "y"}))
    for _ in range(200):
        if len(script.calls) == 2:
            break
        await asyncio.sleep(0.005)
    controller.stop()
    await asyncio.wait_for(task, 2)
    assert len(script.calls) == 2


async def test_requeue_after_forgets_then_waits(registry: CollectorRegistry) -> None:
    script = Script(RuntimeError("fail once"), Result(requeue_after=0.1), Result())
    controller, source = make(registry, script, base=0.01)
    source.add(obj("a"))
    seen: list[int] = []

    async def watch_requeues() -> None:
        while len(script.calls) < 2:
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.02)  # the second reconcile has returned requeue_after by now
        seen.append(controller.queue.num_requeues(Request("ns", "a")))

    watcher = asyncio.create_task(watch_requeues())
    await run_until(controller, lambda: len(script.calls) == 3)
    await watcher
    assert seen == [0], "requeue_after forgets the failures"
    times = [t for _, t, _ in script.calls]
    assert times[2] - times[1] >= 0.095
    assert (
        sample(registry, "controller_runtime_reconcile_total", controller="test", result="requeue_after") == 1
    )
    # As controller-runtime: "requeue" counts only its deprecated Result.Requeue (no delay), which has
    # no equivalent here; a requeue_after is not also counted as a "requeue".
    assert sample(registry, "controller_runtime_reconcile_total", controller="test", result="requeue") == 0


async def test_non_result_return_is_an_error(registry: CollectorRegistry) -> None:
    async def returns_none(_: Request) -> Any:
        return None

    script = Script(returns_none, Result())
    controller, source = make(registry, script)
    source.add(obj("a"))
    await run_until(controller, lambda: len(script.calls) == 2)
    assert sample(registry, "controller_runtime_reconcile_errors_total", controller="test") == 1


async def test_reconcile_id_is_bound_per_reconcile(registry: CollectorRegistry) -> None:
    script = Script(Result(), Result())
    controller, source = make(registry, script)
    source.add(obj("a"))
    source.add(obj("b"))
    await run_until(controller, lambda: len(script.calls) == 2)
    contexts = [c for _, _, c in script.calls]
    assert {c["controller"] for c in contexts} == {"test"}
    assert [c["name"] for c in contexts] == ["a", "b"]
    ids = {c["reconcile_id"] for c in contexts}
    assert len(ids) == 2
    assert structlog.contextvars.get_contextvars().get("reconcile_id") is None


async def test_burst_of_events_while_processing_costs_one_more_reconcile(registry: CollectorRegistry) -> None:
    release = asyncio.Event()

    async def slow(_: Request) -> Result:
        await release.wait()
        return Result()

    script = Script(slow, Result(), Result())
    controller, source = make(registry, script)
    source.add(obj("a"))
    task = asyncio.create_task(controller.run())
    await asyncio.wait_for(script.called.wait(), 2)
    for i in range(10):
        source.update(obj("a", labels={"v": str(i)}))
    release.set()
    await asyncio.sleep(0.1)
    controller.stop()
    await asyncio.wait_for(task, 2)
    assert len(script.calls) == 2


async def test_workers_run_in_parallel_but_never_on_one_key(registry: CollectorRegistry) -> None:
    in_flight: set[Request] = set()
    peak = 0
    overlaps = 0

    async def work(request: Request) -> Result:
        nonlocal peak, overlaps
        overlaps += request in in_flight
        in_flight.add(request)
        peak = max(peak, len(in_flight))
        await asyncio.sleep(0.01)
        in_flight.discard(request)
        return Result()

    script = Script(*([work] * 400))
    controller, source = make(registry, script, workers=4)
    for i in range(5):
        source.add(obj(f"o{i}"))
    task = asyncio.create_task(controller.run())
    for round_ in range(20):
        for i in range(5):
            source.update(obj(f"o{i}", labels={"r": str(round_)}))
        await asyncio.sleep(0.004)
    await asyncio.sleep(0.1)
    controller.stop()
    await asyncio.wait_for(task, 2)
    assert overlaps == 0
    assert peak > 1
    assert sample(registry, "controller_runtime_active_workers", controller="test") == 0
    assert sample(registry, "controller_runtime_max_concurrent_reconciles", controller="test") == 4


async def test_waits_for_sync_before_reconciling(registry: CollectorRegistry) -> None:
    script = Script()
    controller, source = make(registry, script)
    source.synced = False
    source.add(obj("a"))
    task = asyncio.create_task(controller.run())
    await asyncio.sleep(0.25)
    assert script.calls == []
    assert not controller.has_synced()
    source.synced = True
    await asyncio.wait_for(script.called.wait(), 2)
    assert controller.has_synced()
    controller.stop()
    await asyncio.wait_for(task, 2)


async def test_cache_sync_timeout_is_an_error(registry: CollectorRegistry) -> None:
    controller = Controller(name="test", reconciler=Script(), cache_sync_timeout=0.2, registry=registry)
    controller.watch(FakeSource(synced=False))
    with pytest.raises(CacheSyncTimeoutError):
        await asyncio.wait_for(controller.run(), 2)


async def test_stop_lets_the_reconcile_in_flight_finish(registry: CollectorRegistry) -> None:
    finished = asyncio.Event()

    async def slow(_: Request) -> Result:
        await asyncio.sleep(0.1)
        finished.set()
        return Result()

    script = Script(slow)
    controller, source = make(registry, script)
    source.add(obj("a"))
    source.add(obj("b"))
    task = asyncio.create_task(controller.run())
    await asyncio.wait_for(script.called.wait(), 2)
    controller.stop()
    await asyncio.wait_for(task, 2)
    assert finished.is_set()
    assert len(script.calls) == 1, "queued keys are not started after stop"


async def test_cancel_cancels_the_reconcile_in_flight(registry: CollectorRegistry) -> None:
    cancelled = asyncio.Event()

    async def slow(_: Request) -> Result:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return Result()

    script = Script(slow)
    controller, source = make(registry, script)
    source.add(obj("a"))
    task = asyncio.create_task(controller.run())
    await asyncio.wait_for(script.called.wait(), 2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled.is_set()
    assert sample(registry, "controller_runtime_active_workers", controller="test") == 0


async def test_watch_after_run_and_run_twice_are_refused(registry: CollectorRegistry) -> None:
    controller, _ = make(registry, Script())
    task = asyncio.create_task(controller.run())
    await asyncio.sleep(0.01)
    with pytest.raises(RuntimeError):
        controller.watch(FakeSource())
    with pytest.raises(RuntimeError):
        await controller.run()
    controller.stop()
    await asyncio.wait_for(task, 2)


def test_two_controllers_of_one_name_on_one_registry_are_refused(registry: CollectorRegistry) -> None:
    first = Controller(name="dup", reconciler=Script(), registry=registry)
    with pytest.raises(ValueError, match="dup"):
        Controller(name="dup", reconciler=Script(), registry=registry)
    del first


async def test_mapper_errors_skip_the_object(registry: CollectorRegistry) -> None:
    def broken(o: Object) -> list[Request]:
        if o["metadata"]["name"] == "bad":
            raise KeyError("boom")
        return [Request.of(o)]

    script = Script()
    controller = Controller(name="test", reconciler=script, registry=registry)
    source = FakeSource()
    controller.watch(source, map_to=broken)
    source.add(obj("bad"))
    source.add(obj("good"))
    await run_until(controller, lambda: len(script.calls) == 1)
    assert script.calls[0][0] == Request("ns", "good")


async def test_update_maps_old_and_new(registry: CollectorRegistry) -> None:
    script = Script()
    controller = Controller(name="test", reconciler=script, registry=registry)
    source = FakeSource()
    controller.watch(source, map_to=label_mapper("owner"))
    source.objects["pod"] = obj("pod", labels={"owner": "x"})
    task = asyncio.create_task(controller.run())
    await asyncio.wait_for(script.called.wait(), 2)
    script.calls.clear()
    source.update(obj("pod", labels={"owner": "y"}))  # x loses the pod, y gains it: both reconcile
    await asyncio.sleep(0.05)
    controller.stop()
    await asyncio.wait_for(task, 2)
    assert sorted(r for r, _, _ in script.calls) == [Request("ns", "x"), Request("ns", "y")]


def test_own_key_and_request() -> None:
    assert own_key(obj("a")) == (Request("ns", "a"),)
    assert own_key({"metadata": {"name": "node"}}) == (Request("", "node"),)
    assert str(Request("ns", "a")) == "ns/a"
    assert str(Request("", "node")) == "node"
    assert hash(Request("ns", "a")) == hash(Request("ns", "a"))


def test_owner_mapper() -> None:
    refs = [
        {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "js", "controller": True},
        {"apiVersion": "batch/v1", "kind": "Job", "name": "job", "controller": False},
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "controller": True},
    ]
    o = obj("pod", ownerReferences=refs)
    assert owner_mapper(kind="JobSet", group="jobset.x-k8s.io")(o) == (Request("ns", "js"),)
    assert owner_mapper(kind="Job", group="batch")(o) == ()
    assert owner_mapper(kind="Job", group="batch", controller_only=False)(o) == (Request("ns", "job"),)
    assert owner_mapper(kind="ConfigMap")(o) == (Request("ns", "cm"),)
    assert owner_mapper(kind="JobSet", group="other.io")(o) == ()
    assert owner_mapper(kind="JobSet", group="jobset.x-k8s.io", cluster_scoped=True)(o) == (
        Request("", "js"),
    )
    assert owner_mapper(kind="JobSet", group="jobset.x-k8s.io")(obj("orphan")) == ()


def test_label_mapper() -> None:
    o = obj("pod", labels={"app": "web"})
    assert label_mapper("app")(o) == (Request("ns", "web"),)
    assert label_mapper("app", namespace="")(o) == (Request("", "web"),)
    assert label_mapper("missing")(o) == ()


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError):  # noqa: PT011
        Controller(name="", reconciler=Script(), registry=CollectorRegistry())
    with pytest.raises(ValueError):  # noqa: PT011
        Controller(name="x", reconciler=Script(), max_concurrent_reconciles=0, registry=CollectorRegistry())


# -- priorities: initial-list and unchanged events queue behind live ones ------------------------


def backlog(source: FakeSource, n: int) -> list[Request]:
    """``n`` objects the source already holds: a new handler gets them as its initial list."""
    for i in range(n):
        source.objects[f"o{i}"] = obj(f"o{i}", resourceVersion=str(i + 1))
    return [Request("ns", f"o{i}") for i in range(n)]


class Gate:
    """A reconciler whose first reconcile waits until ``release``; it records every request."""

    def __init__(self) -> None:
        self.calls: list[Request] = []
        self.started = asyncio.Event()
        self.gate = asyncio.Event()

    async def reconcile(self, request: Request) -> Result:
        self.calls.append(request)
        if len(self.calls) == 1:
            self.started.set()
            await self.gate.wait()
        return Result()

    async def open_until(self, calls: int, *, controller: Controller, task: asyncio.Task[None]) -> None:
        """Let the first reconcile finish, wait for ``calls`` reconciles in all, then stop the controller."""
        self.gate.set()
        try:
            async with asyncio.timeout(5):
                while len(self.calls) < calls:
                    await asyncio.sleep(0.005)
        finally:
            controller.stop()
            await asyncio.wait_for(task, 2)


async def test_a_live_event_overtakes_an_initial_list_backlog(registry: CollectorRegistry) -> None:
    """After a restart, 1,000 unchanged objects are queued; real changes made meanwhile go first."""
    gate = Gate()
    controller = Controller(name="test", reconciler=gate, registry=registry)
    source = FakeSource()
    controller.watch(source)
    initial = backlog(source, 1000)
    task = asyncio.create_task(controller.run())
    await asyncio.wait_for(gate.started.wait(), 2)  # o0 in flight, o1..o999 queued (initial list)
    source.update(obj("o999", resourceVersion="5000", labels={"changed": "yes"}))  # a real change
    source.add(obj("new"))  # a live add
    source.update(source.objects["o500"])  # a resync: same resourceVersion, stays where it is
    await gate.open_until(1001, controller=controller, task=task)
    assert gate.calls[:3] == [Request("ns", "o0"), Request("ns", "o999"), Request("ns", "new")]
    assert gate.calls[3:] == initial[1:999], "the backlog follows, in order, each key once"


async def test_without_low_priority_the_backlog_goes_first(registry: CollectorRegistry) -> None:
    """``low_priority_when_unchanged=False``: the classic FIFO, the live event waits its turn."""
    gate = Gate()
    controller = Controller(name="test", reconciler=gate, registry=registry)
    source = FakeSource()
    controller.watch(source, low_priority_when_unchanged=False)
    initial = backlog(source, 100)
    task = asyncio.create_task(controller.run())
    await asyncio.wait_for(gate.started.wait(), 2)
    source.add(obj("new"))
    await gate.open_until(101, controller=controller, task=task)
    assert gate.calls == [*initial, Request("ns", "new")]


async def test_a_changed_polled_job_overtakes_the_first_list(registry: CollectorRegistry) -> None:
    """PolledSource: its first list is an initial list; a later poll's change is a live event."""
    polls: list[list[Object]] = [
        [{"job_id": i, "state": "PENDING"} for i in range(300)],
        [{"job_id": i, "state": "RUNNING" if i == 299 else "PENDING"} for i in range(300)],
    ]

    async def poll() -> list[Object]:
        return polls.pop(0)

    jobs = PolledSource(name="jobs", poll=poll, key=lambda o: str(o["job_id"]), interval=3600.0)
    gate = Gate()
    controller = Controller(name="test", reconciler=gate, registry=registry)
    controller.watch(jobs, map_to=lambda o: (Request("", str(o["job_id"])),))
    task = asyncio.create_task(controller.run())
    await jobs.poll_once()  # the first list, delivered to the controller's handler
    await asyncio.wait_for(gate.started.wait(), 2)
    await jobs.poll_once()  # job 299 changed
    await gate.open_until(300, controller=controller, task=task)
    assert gate.calls[:3] == [Request("", "0"), Request("", "299"), Request("", "1")]
    assert len(set(gate.calls)) == 300


def test_unchanged_means_the_same_resource_version() -> None:
    added: list[tuple[Request, int]] = []

    class Recording:
        def add(self, key: Request, priority: int = 0) -> None:
            added.append((key, priority))

    enqueuer = _Enqueuer(Recording(), own_key, "test", low_priority_when_unchanged=True)  # type: ignore[arg-type]
    enqueuer.on_add(obj("a"), is_initial_list=True)
    enqueuer.on_add(obj("b"), is_initial_list=False)
    same = obj("c", resourceVersion="7")
    enqueuer.on_update(same, same)  # a resync
    enqueuer.on_update(same, obj("c", resourceVersion="8"))
    # No resourceVersion (a polled job, a synthetic object): its sources send only real changes.
    enqueuer.on_update(obj("d"), obj("d"))
    enqueuer.on_delete(same)
    low, normal = LOW_PRIORITY, 0
    assert added == [
        (Request("ns", "a"), low),
        (Request("ns", "b"), normal),
        (Request("ns", "c"), low),
        (Request("ns", "c"), low),
        (Request("ns", "c"), normal),
        (Request("ns", "c"), normal),
        (Request("ns", "d"), normal),
        (Request("ns", "d"), normal),
        (Request("ns", "c"), normal),
    ]


async def test_requeues_keep_the_priority_handed_out_unless_the_result_names_one(
    registry: CollectorRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As controller-runtime: a retry or requeue_after of a low-priority key stays low."""
    delayed: list[tuple[Request, int]] = []
    original = WorkQueue.add_after

    def recording(self: WorkQueue[Request], key: Request, delay: float, *, priority: int = 0) -> None:
        delayed.append((key, priority))
        original(self, key, delay, priority=priority)

    monkeypatch.setattr(WorkQueue, "add_after", recording)
    outcomes: dict[str, Result | Exception] = {
        "fails": RuntimeError("retry me"),
        "later": Result(requeue_after=600),
        "urgent": Result(requeue_after=600, priority=0),
    }

    class ByName:
        async def reconcile(self, request: Request) -> Result:
            outcome = outcomes.get(request.name, Result())
            if isinstance(outcome, Exception):
                raise outcome
            return outcome

    controller = Controller(
        name="test",
        reconciler=ByName(),
        rate_limiter=ItemExponentialFailureRateLimiter(base=600),
        registry=registry,
    )
    source = FakeSource()
    controller.watch(source)
    for name in outcomes:
        source.objects[name] = obj(name, resourceVersion="1")  # initial list: low priority
    await run_until(controller, lambda: len(delayed) == 3)
    assert sorted(delayed) == [
        (Request("ns", "fails"), LOW_PRIORITY),
        (Request("ns", "later"), LOW_PRIORITY),
        (Request("ns", "urgent"), 0),
    ]


# -- priorities: a watch ranks its live events ----------------------------------------------------


def urgent_first(request: Request) -> int:
    return 10 if request.name.startswith("urgent") else 0


async def test_an_urgent_live_event_overtakes_a_backlog_of_live_events(registry: CollectorRegistry) -> None:
    """``priority_of``: a live add, update or delete it ranks higher goes before ordinary live events."""
    gate = Gate()
    controller = Controller(name="test", reconciler=gate, registry=registry)
    source = FakeSource()
    controller.watch(source, priority_of=urgent_first)
    task = asyncio.create_task(controller.run())
    try:
        async with asyncio.timeout(2):
            while not controller.has_synced():
                await asyncio.sleep(0.005)
        source.add(obj("o0", resourceVersion="1"))
        await asyncio.wait_for(gate.started.wait(), 2)  # o0 in flight
        ordinary = [Request("ns", f"o{i}") for i in range(1, 100)]
        for request in ordinary:
            source.add(obj(request.name, resourceVersion="1"))  # live, ordinary: 99 queued at 0
        source.add(obj("urgent-add", resourceVersion="1"))
        source.update(obj("urgent-add", resourceVersion="2"))  # dedup: still one key
        source.delete(obj("urgent-delete", resourceVersion="3"))
        gate.gate.set()
        async with asyncio.timeout(5):
            while len(gate.calls) < 102:
                await asyncio.sleep(0.005)
    finally:
        controller.stop()
        await asyncio.wait_for(task, 2)
    first = [Request("ns", "o0"), Request("ns", "urgent-add"), Request("ns", "urgent-delete")]
    assert gate.calls[:3] == first
    assert gate.calls[3:] == ordinary, "the ordinary live events follow, in order"


def test_priority_of_ranks_only_live_events() -> None:
    """Initial-list adds and unchanged updates stay ``LOW_PRIORITY``, ``priority_of`` not asked."""
    added: list[tuple[Request, int]] = []
    asked: list[Request] = []

    class Recording:
        def add(self, key: Request, priority: int = 0) -> None:
            added.append((key, priority))

    def priority_of(request: Request) -> int:
        asked.append(request)
        return urgent_first(request)

    enqueuer = _Enqueuer(
        Recording(),  # type: ignore[arg-type]
        own_key,
        "test",
        low_priority_when_unchanged=True,
        priority_of=priority_of,
    )
    same = obj("urgent-c", resourceVersion="7")
    enqueuer.on_add(obj("urgent-a"), is_initial_list=True)
    enqueuer.on_update(same, same)  # a resync
    low = LOW_PRIORITY
    assert added == [
        (Request("ns", "urgent-a"), low),
        (Request("ns", "urgent-c"), low),
        (Request("ns", "urgent-c"), low),
    ]
    assert asked == [], "not consulted for events that changed nothing"
    added.clear()
    enqueuer.on_add(obj("urgent-a"), is_initial_list=False)
    enqueuer.on_add(obj("b"), is_initial_list=False)
    enqueuer.on_update(same, obj("urgent-c", resourceVersion="8"))
    enqueuer.on_delete(obj("d"))
    assert added == [
        (Request("ns", "urgent-a"), 10),
        (Request("ns", "b"), 0),
        (Request("ns", "urgent-c"), 10),
        (Request("ns", "urgent-c"), 10),
        (Request("ns", "d"), 0),
    ]
    assert asked == [request for request, _ in added]

    # Without the marking (the classic FIFO), every event is live, the initial list too.
    added.clear()
    fifo = _Enqueuer(Recording(), own_key, "test", low_priority_when_unchanged=False, priority_of=priority_of)  # type: ignore[arg-type]
    fifo.on_add(obj("urgent-a"), is_initial_list=True)
    fifo.on_update(same, same)
    assert added == [(Request("ns", "urgent-a"), 10)] + [(Request("ns", "urgent-c"), 10)] * 2


def test_a_failing_priority_of_queues_at_the_default_priority() -> None:
    """A bug in ranking must not lose the event nor break the source that delivers it."""
    added: list[tuple[Request, int]] = []

    class Recording:
        def add(self, key: Request, priority: int = 0) -> None:
            added.append((key, priority))

    def broken(request: Request) -> int:
        raise KeyError(request.name)

    enqueuer = _Enqueuer(Recording(), own_key, "test", low_priority_when_unchanged=True, priority_of=broken)  # type: ignore[arg-type]
    enqueuer.on_add(obj("a"), is_initial_list=False)
    enqueuer.on_delete(obj("b"))
    assert added == [(Request("ns", "a"), 0), (Request("ns", "b"), 0)]


def test_an_update_that_does_not_matter_is_dropped_adds_and_deletes_never() -> None:
    """``update_matters``: an update predicate. A failing one delivers the update."""
    added: list[Request] = []

    class Recording:
        def add(self, key: Request, priority: int = 0) -> None:
            added.append(key)

    def phase_changed(old: Object, new: Object) -> bool:
        if new.get("broken"):
            raise KeyError("phase")
        return old.get("phase") != new.get("phase")

    enqueuer = _Enqueuer(
        Recording(),  # type: ignore[arg-type]
        own_key,
        "test",
        low_priority_when_unchanged=False,
        update_matters=phase_changed,
    )
    pending = {**obj("p", resourceVersion="1"), "phase": "Pending"}
    enqueuer.on_add(pending, is_initial_list=False)
    enqueuer.on_update(
        pending,
        {
            **pending,
            "conditions": ["scheduled"],
            "metadata": {"name": "p", "namespace": "ns", "resourceVersion": "2"},
        },
    )
    assert added == [Request("ns", "p")]
    running = {**pending, "phase": "Running"}
    enqueuer.on_update(pending, running)
    assert added == [Request("ns", "p")] * 3  # the new object's requests and the old one's
    enqueuer.on_update(running, {**running, "broken": True})
    enqueuer.on_delete(running)
    assert added == [Request("ns", "p")] * 6


def test_with_a_batch_period_live_events_at_the_default_priority_are_batched() -> None:
    """``batch_period``: a live event at priority 0 waits for the ones that follow it; an urgent one,
    an initial-list add and a resync are queued at once, as without it."""
    calls: list[tuple[str, Request, float | int]] = []

    class Recording:
        def add(self, key: Request, priority: int = 0) -> None:
            calls.append(("add", key, priority))

        def add_batched(self, key: Request, period: float) -> None:
            calls.append(("batched", key, period))

    enqueuer = _Enqueuer(
        Recording(),  # type: ignore[arg-type]
        own_key,
        "test",
        low_priority_when_unchanged=True,
        priority_of=urgent_first,
        batch_period=0.1,
    )
    same = obj("c", resourceVersion="7")
    enqueuer.on_add(obj("a"), is_initial_list=True)
    enqueuer.on_update(same, same)
    enqueuer.on_add(obj("b"), is_initial_list=False)
    enqueuer.on_add(obj("urgent-u"), is_initial_list=False)
    enqueuer.on_delete(obj("d"))
    assert calls == [
        ("add", Request("ns", "a"), LOW_PRIORITY),
        ("add", Request("ns", "c"), LOW_PRIORITY),
        ("add", Request("ns", "c"), LOW_PRIORITY),
        ("batched", Request("ns", "b"), 0.1),
        ("add", Request("ns", "urgent-u"), 10),
        ("batched", Request("ns", "d"), 0.1),
    ]
    calls.clear()
    plain = _Enqueuer(Recording(), own_key, "test", low_priority_when_unchanged=True, batch_period=0.1)  # type: ignore[arg-type]
    plain.on_add(obj("b"), is_initial_list=False)
    assert calls == [("batched", Request("ns", "b"), 0.1)], "without priority_of too"
