"""The WorkloadMixing reconciler without a cluster: its decisions (pure), the reconciler over real
stores with a fake status writer, Secret reader and event sink, the spacing of counts-only status
writes (on an injected clock), the Secret watches (over fake watches), the reference index that routes
Kueue object and Secret changes to WorkloadMixings, and the live configuration holder the bridges read."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from structlog.testing import capture_logs

from bridge.api import WorkloadMixingSpec
from bridge.api.mixing import SourceCounts, WorkloadMixingStatus
from bridge.api.status import Problem, Reason
from bridge.mixing_config import ConfigSnapshot, CountsBoard, LiveConfig, MixingConfigs
from bridge.runtime.cache import Store
from bridge.runtime.client import Client
from bridge.runtime.controller import Controller, Request, Result
from bridge.runtime.discovery import Resource
from bridge.runtime.errors import Conflict, Forbidden, NotFound
from bridge.runtime.events import EventType
from bridge.runtime.handlers import Object
from bridge.runtime.informer import Dispatcher, Informer
from bridge.runtime.reflector import Reflector, ReflectorSettings
from bridge.runtime.session import Session
from reconcilers.mixing import (
    LEVELS_INDEX,
    REFERENCES_INDEX,
    CountsWriteLimiter,
    MixingController,
    MixingReconciler,
    SecretKeys,
    WatchedSecretKeys,
    _secret_keys,
    decide,
    reference_index_keys,
    referencing_mapper,
    secret_key_names,
    topology_levels,
    watch_sources,
)
from tests.fixtures.fake_apiserver import FakeApiServer, fail_with
from tests.fixtures.mixing import ray_spec, resource, slurm_spec, target

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _spec(**slurm: Any) -> WorkloadMixingSpec:
    return WorkloadMixingSpec.model_validate({"slurm": slurm_spec(**slurm)})


def _missing_queue() -> Problem:
    return Problem(
        field="spec.slurm.mapping.default.localQueue",
        reason=Reason.LOCAL_QUEUE_NOT_FOUND,
        message="LocalQueue k8s-bridge/hpc not found",
    )


# --- decide (pure) ---------------------------------------------------------------------------------


class TestDecide:
    def _decide(self, **overrides: Any) -> Any:
        arguments: dict[str, Any] = {
            "generation": 1,
            "spec": _spec(),
            "problems": [],
            "previous": None,
            "last_good_generation": None,
            "last_good_spec": None,
            "counts": {},
            "now": T0,
        }
        arguments.update(overrides)
        return decide(**arguments)

    def test_missing_reference_is_not_ready_with_a_warning_naming_it(self) -> None:
        decision = self._decide(problems=[_missing_queue()])
        ready = decision.status.conditions[0]
        assert (ready.type, ready.status, ready.reason) == ("Ready", "False", "LocalQueueNotFound")
        assert "k8s-bridge/hpc" in ready.message
        assert decision.write_status
        assert not decision.publish
        assert [(e.type, e.reason) for e in decision.events] == [("Warning", "LocalQueueNotFound")]
        assert "k8s-bridge/hpc" in decision.events[0].note

    def test_valid_spec_is_published_with_a_normal_event(self) -> None:
        decision = self._decide()
        assert decision.publish
        assert decision.write_status
        assert decision.status.observed_generation == 1
        assert [(e.type, e.reason) for e in decision.events] == [("Normal", "ConfigurationValid")]

    def test_unchanged_status_is_not_written_and_records_nothing(self) -> None:
        first = self._decide(problems=[_missing_queue()])
        again = self._decide(problems=[_missing_queue()], previous=first.status, now=T0 + timedelta(hours=1))
        assert again.status == first.status
        assert not again.write_status
        assert again.events == ()

    def test_ready_flip_to_true_records_normal_event_and_moves_transition_time(self) -> None:
        broken = self._decide(problems=[_missing_queue()])
        later = T0 + timedelta(minutes=3)
        fixed = self._decide(previous=broken.status, now=later)
        assert fixed.write_status
        assert fixed.publish
        assert fixed.status.conditions[0].status == "True"
        assert fixed.status.conditions[0].last_transition_time == later
        assert [(e.type, e.reason) for e in fixed.events] == [("Normal", "ConfigurationValid")]

    def test_counts_change_is_written_without_events(self) -> None:
        first = self._decide()
        counted = self._decide(previous=first.status, counts={"slurm": SourceCounts(held=2, running=1)})
        assert counted.write_status
        assert counted.counts_only
        assert counted.events == ()
        assert counted.status.sources.slurm == SourceCounts(held=2, running=1)
        assert counted.status.sources.ray is None

    def test_counts_only_is_false_when_anything_else_changes(self) -> None:
        assert not self._decide().counts_only  # the first write: nothing stored yet
        first = self._decide()
        both = self._decide(
            previous=first.status, problems=[_missing_queue()], counts={"slurm": SourceCounts(held=2)}
        )
        assert both.write_status
        assert not both.counts_only
        same = self._decide(previous=first.status)
        assert not same.write_status
        assert not same.counts_only

    def test_blocked_new_generation_keeps_last_good_and_is_degraded(self) -> None:
        good = self._decide()
        blocked = self._decide(
            generation=2,
            spec=_spec(mapping={"default": target("hpc", priority="missing")}),
            problems=[
                Problem(
                    field="spec.slurm.mapping.default.priorityClass",
                    reason=Reason.PRIORITY_CLASS_NOT_FOUND,
                    message="WorkloadPriorityClass missing not found",
                )
            ],
            previous=good.status,
            last_good_generation=1,
        )
        ready, degraded = blocked.status.conditions
        assert (ready.status, ready.reason) == ("False", "PriorityClassNotFound")
        assert (degraded.status, degraded.reason) == ("True", "LastGoodConfigurationInUse")
        assert not blocked.publish
        assert {e.reason for e in blocked.events} == {"PriorityClassNotFound", "LastGoodConfigurationInUse"}

    def test_unreadable_spec_reports_counts_of_the_configuration_in_use(self) -> None:
        in_use = WorkloadMixingSpec.model_validate({"ray": ray_spec()})
        decision = self._decide(
            generation=3,
            spec=None,
            problems=[Problem(field="spec.slurm", reason=Reason.INVALID_SPEC, message="bad")],
            last_good_generation=2,
            last_good_spec=in_use,
            counts={"ray": SourceCounts(queued=4)},
        )
        ready, degraded = decision.status.conditions
        assert (ready.status, ready.reason) == ("False", "InvalidSpec")
        assert degraded.reason == "LastGoodConfigurationInUse"
        assert decision.status.sources.ray == SourceCounts(queued=4)
        assert decision.status.sources.slurm is None
        assert not decision.publish


# --- the reconciler over stores and fakes ----------------------------------------------------------


class FakeWriter:
    def __init__(self, mixings: Store) -> None:
        self.mixings = mixings
        self.writes: list[Object] = []
        self.fail_with: Exception | None = None

    async def update_status(self, obj: Object, *, field_manager: str | None = None) -> Object:
        if self.fail_with is not None:
            raise self.fail_with
        assert field_manager
        self.writes.append(obj)
        # What the informer would deliver after the write: the stored object with the new status.
        self.mixings.put(obj)
        return obj


class FakeRecorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    async def event(
        self,
        regarding: Object,
        *,
        type: EventType,
        reason: str,
        note: str,
        action: str,
        related: Object | None = None,
    ) -> Object | None:
        self.events.append((type, reason, note))
        return None


class ManualClock:
    """Monotonic seconds that move only when a test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FakeSecrets:
    def __init__(self) -> None:
        self.secrets: dict[tuple[str, str], frozenset[str]] = {("slurm", "jwt"): frozenset({"token"})}
        self.forbidden: set[tuple[str, str]] = set()
        self.reads = 0

    async def __call__(self, namespace: str, name: str) -> frozenset[str] | None:
        self.reads += 1
        if (namespace, name) in self.forbidden:
            raise Forbidden(403, "Forbidden", "secrets is forbidden")
        return self.secrets.get((namespace, name))


def _local_queue(namespace: str, name: str) -> Object:
    return {"metadata": {"namespace": namespace, "name": name}, "spec": {}}


def _cluster_object(name: str, **spec: Any) -> Object:
    return {"metadata": {"name": name}, "spec": spec}


def _mixing(spec: dict[str, Any], *, generation: int = 1, uid: str = "uid-1", name: str = "site") -> Object:
    obj = resource(spec, name=name)
    obj["metadata"].update(generation=generation, uid=uid, resourceVersion=str(generation))
    return obj


class World:
    """Stores as informers would fill them, and the reconciler over them."""

    def __init__(self) -> None:
        self.mixings = Store(indexers={REFERENCES_INDEX: reference_index_keys})
        self.local_queues = Store()
        self.priority_classes = Store()
        self.topologies = Store(indexers={LEVELS_INDEX: topology_levels})
        self.secrets = FakeSecrets()
        self.writer = FakeWriter(self.mixings)
        self.recorder = FakeRecorder()
        self.configs = MixingConfigs()
        self.board = CountsBoard()
        self.clock = ManualClock()
        self.reconciler = self.make_reconciler(self.secrets)

    def make_reconciler(self, secret_keys: SecretKeys) -> MixingReconciler:
        return MixingReconciler(
            mixings=self.mixings,
            local_queues=self.local_queues,
            priority_classes=self.priority_classes,
            topologies=self.topologies,
            secret_keys=secret_keys,
            writer=self.writer,
            recorder=self.recorder,
            configs=self.configs,
            counts=self.board,
            recheck_after=30.0,
            counts_interval=5.0,
            now=lambda: T0,
            clock=self.clock,
        )

    async def reconcile(self, name: str = "site") -> Result:
        return await self.reconciler.reconcile(Request("", name))

    def current(self, name: str = "site") -> ConfigSnapshot | None:
        return self.configs.get(name).current

    def status(self, name: str = "site") -> WorkloadMixingStatus:
        obj = self.mixings.get(name)
        assert obj is not None
        return WorkloadMixingStatus.model_validate(obj["status"])

    def ready(self, name: str = "site") -> tuple[str, str, str]:
        ready = self.status(name).conditions[0]
        assert ready.type == "Ready"
        return ready.status, ready.reason, ready.message

    def degraded(self, name: str = "site") -> tuple[str, str]:
        degraded = self.status(name).conditions[1]
        assert degraded.type == "Degraded"
        return degraded.status, degraded.reason


@pytest.fixture
def world() -> World:
    return World()


class TestReconciler:
    async def test_missing_local_queue_then_appearing(self, world: World) -> None:
        world.mixings.put(_mixing({"slurm": slurm_spec()}))
        assert await world.reconcile() == Result(requeue_after=30.0)
        status, reason, message = world.ready()
        assert (status, reason) == ("False", "LocalQueueNotFound")
        assert "k8s-bridge/hpc" in message
        assert world.configs.get("site").current is None
        assert world.recorder.events[-1][:2] == ("Warning", "LocalQueueNotFound")

        world.local_queues.put(_local_queue("k8s-bridge", "hpc"))
        await world.reconcile()
        assert world.ready()[:2] == ("True", "ConfigurationValid")
        current = world.configs.get("site").current
        assert current is not None
        assert current.generation == 1
        assert world.recorder.events[-1][:2] == ("Normal", "ConfigurationValid")

    async def test_nothing_written_when_nothing_changed(self, world: World) -> None:
        world.local_queues.put(_local_queue("k8s-bridge", "hpc"))
        world.mixings.put(_mixing({"slurm": slurm_spec()}))
        await world.reconcile()
        await world.reconcile()
        await world.reconcile()
        assert len(world.writer.writes) == 1
        assert len(world.recorder.events) == 1

    async def test_invalid_new_generation_keeps_last_good_config(self, world: World) -> None:
        world.local_queues.put(_local_queue("k8s-bridge", "hpc"))
        world.mixings.put(_mixing({"slurm": slurm_spec()}))
        await world.reconcile()
        live = world.configs.get("site")
        good = live.current
        assert good is not None

        bad = slurm_spec(mapping={"default": target("hpc", priority="urgent")})
        world.mixings.put(_mixing({"slurm": bad}, generation=2))
        await world.reconcile()
        assert world.status().observed_generation == 2
        assert world.ready()[:2] == ("False", "PriorityClassNotFound")
        assert world.degraded() == ("True", "LastGoodConfigurationInUse")
        assert live.current is good

        world.priority_classes.put(_cluster_object("urgent", value=1000))
        await world.reconcile()
        assert world.ready()[:2] == ("True", "ConfigurationValid")
        assert world.degraded() == ("False", "AsExpected")
        assert live.current is not None
        assert live.current.generation == 2

    async def test_spec_the_models_refuse_is_invalid_spec(self, world: World) -> None:
        world.local_queues.put(_local_queue("k8s-bridge", "hpc"))
        broken = slurm_spec()
        del broken["mapping"]
        world.mixings.put(_mixing({"slurm": broken}))
        await world.reconcile()
        status, reason, message = world.ready()
        assert (status, reason) == ("False", "InvalidSpec")
        assert "spec.slurm.mapping" in message
        assert world.configs.get("site").current is None

    async def test_secret_missing_key_and_unreadable(self, world: World) -> None:
        world.local_queues.put(_local_queue("k8s-bridge", "hpc"))
        world.mixings.put(_mixing({"slurm": slurm_spec()}))
        world.secrets.secrets.clear()
        await world.reconcile()
        assert world.ready()[1] == "SecretNotFound"
        world.secrets.secrets[("slurm", "jwt")] = frozenset({"other"})
        await world.reconcile()
        assert world.ready()[1] == "SecretKeyNotFound"
        world.secrets.forbidden.add(("slurm", "jwt"))
        await world.reconcile()
        assert world.ready()[1] == "SecretUnreadable"

    async def test_topology_level_resolved_through_index(self, world: World) -> None:
        world.local_queues.put(_local_queue("k8s-bridge", "hpc"))
        spec = slurm_spec(topology={"switches": {"preferred": "example.com/rack"}})
        world.mixings.put(_mixing({"slurm": spec}))
        await world.reconcile()
        assert world.ready()[1] == "TopologyLevelNotFound"
        world.topologies.put(
            _cluster_object("default", levels=[{"nodeLabel": "example.com/rack"}, {"nodeLabel": "h"}])
        )
        await world.reconcile()
        assert world.ready()[0] == "True"

    async def test_counts_from_the_board(self, world: World) -> None:
        world.local_queues.put(_local_queue("k8s-bridge", "hpc"))
        world.mixings.put(_mixing({"slurm": slurm_spec()}))
        await world.reconcile()
        assert world.status().sources.slurm == SourceCounts()
        world.clock.advance(5.0)
        world.board.set("site", "slurm", SourceCounts(held=1, queued=2, admitted=3, running=4))
        await world.reconcile()
        assert world.status().sources.slurm == SourceCounts(held=1, queued=2, admitted=3, running=4)
        assert len(world.recorder.events) == 1  # counts alone record no Event

    async def test_problems_a_bridge_finds_degrade_without_blocking(self, world: World) -> None:
        world.local_queues.put(_local_queue("k8s-bridge", "hpc"))
        world.mixings.put(_mixing({"slurm": slurm_spec()}))
        await world.reconcile()
        found = Problem(
            field="spec.ray.clusterSelector",
            reason=Reason.RAY_START_TIMEOUT_TOO_SHORT,
            message="RayCluster a/b: too short",
            blocking=False,
        )
        world.board.set_problems("site", "ray", (found,))
        await world.reconcile()
        degraded = {c.type: c for c in world.status().conditions}["Degraded"]
        assert (degraded.status, degraded.reason) == ("True", "RayStartTimeoutTooShort")
        assert world.ready()[0] == "True"
        assert world.current() is not None
        world.board.set_problems("site", "ray", ())
        await world.reconcile()
        assert {c.type: c for c in world.status().conditions}["Degraded"].status == "False"

    async def test_deleted_withdraws_and_recreated_is_a_new_resource(self, world: World) -> None:
        world.local_queues.put(_local_queue("k8s-bridge", "hpc"))
        world.mixings.put(_mixing({"slurm": slurm_spec()}))
        await world.reconcile()
        assert world.current() is not None
        world.mixings.pop("site")
        assert await world.reconcile() == Result()
        assert world.current() is None

        world.mixings.put(_mixing({"slurm": slurm_spec()}))
        await world.reconcile()
        # Re-created under a new uid while the old config was still held: not "last good" for it.
        world.mixings.put(_mixing({"slurm": slurm_spec(mapping={"default": target("gone")})}, uid="uid-2"))
        await world.reconcile()
        assert world.current() is None
        assert world.degraded() == ("False", "AsExpected")

    async def test_conflict_waits_for_the_newer_object_without_events(self, world: World) -> None:
        world.mixings.put(_mixing({"slurm": slurm_spec()}))
        world.writer.fail_with = Conflict(409, "Conflict", "the object has been modified")
        assert await world.reconcile() == Result(requeue_after=1.0)
        assert world.recorder.events == []

    async def test_deleted_during_write(self, world: World) -> None:
        world.mixings.put(_mixing({"slurm": slurm_spec()}))
        world.writer.fail_with = NotFound(404, "NotFound", "gone")
        assert await world.reconcile() == Result()


# --- counts-only status writes, spaced out ---------------------------------------------------------


class TestCountsWriteLimiter:
    def test_first_write_at_once_then_one_per_interval(self) -> None:
        clock = ManualClock()
        limiter = CountsWriteLimiter(5.0, clock=clock)
        assert limiter.delay("site") == 0.0
        limiter.wrote("site")
        assert limiter.delay("site") == 5.0
        clock.advance(2.0)
        assert limiter.delay("site") == 3.0
        assert limiter.delay("other") == 0.0  # per WorkloadMixing
        clock.advance(3.0)
        assert limiter.delay("site") == 0.0
        clock.advance(100.0)
        assert limiter.delay("site") == 0.0

    def test_forget_and_zero_interval(self) -> None:
        clock = ManualClock()
        limiter = CountsWriteLimiter(5.0, clock=clock)
        limiter.wrote("site")
        limiter.forget("site")
        assert limiter.delay("site") == 0.0
        unlimited = CountsWriteLimiter(0.0, clock=clock)
        unlimited.wrote("site")
        assert unlimited.delay("site") == 0.0
        with pytest.raises(ValueError, match="interval"):
            CountsWriteLimiter(-1.0)


class TestCountsWrites:
    """The reconciler writes counts-only changes at most every ``counts_interval`` (5 s here), with
    the counts of the moment it writes; anything else is written at once."""

    @staticmethod
    async def _ready(world: World) -> None:
        world.local_queues.put(_local_queue("k8s-bridge", "hpc"))
        world.mixings.put(_mixing({"slurm": slurm_spec()}))
        assert await world.reconcile() == Result(requeue_after=30.0)
        assert len(world.writer.writes) == 1

    async def test_a_burst_of_counts_is_one_write_of_the_latest(self, world: World) -> None:
        await self._ready(world)
        for second in range(5):
            world.board.set("site", "slurm", SourceCounts(held=100 - second, queued=second))
            # Too soon after the last write: nothing written, called again when the interval ends.
            assert await world.reconcile() == Result(requeue_after=5.0 - second)
            world.clock.advance(1.0)
        assert len(world.writer.writes) == 1
        assert world.status().sources.slurm == SourceCounts()

        # The interval is over: the counts of this moment are written, the ones before never were.
        assert await world.reconcile() == Result(requeue_after=30.0)
        assert len(world.writer.writes) == 2
        assert world.status().sources.slurm == SourceCounts(held=96, queued=4)
        # And the next change waits a whole interval again.
        world.board.set("site", "slurm", SourceCounts(held=95, queued=5))
        assert await world.reconcile() == Result(requeue_after=5.0)
        assert len(world.writer.writes) == 2

    async def test_first_counts_after_a_quiet_interval_are_written_at_once(self, world: World) -> None:
        await self._ready(world)
        world.clock.advance(60.0)
        world.board.set("site", "slurm", SourceCounts(running=1))
        assert await world.reconcile() == Result(requeue_after=30.0)
        assert world.status().sources.slurm == SourceCounts(running=1)

    async def test_a_condition_change_is_written_at_once_with_the_latest_counts(self, world: World) -> None:
        await self._ready(world)
        world.clock.advance(1.0)
        world.board.set("site", "slurm", SourceCounts(held=7))
        world.local_queues.pop("k8s-bridge/hpc")
        assert await world.reconcile() == Result(requeue_after=30.0)
        assert len(world.writer.writes) == 2
        assert world.ready()[:2] == ("False", "LocalQueueNotFound")
        assert world.status().sources.slurm == SourceCounts(held=7)
        # That write (1 s after the first) counts as the last one: counts alone wait 5 s from it.
        world.clock.advance(1.0)
        world.board.set("site", "slurm", SourceCounts(held=8))
        assert await world.reconcile() == Result(requeue_after=4.0)
        assert len(world.writer.writes) == 2

    async def test_a_failed_write_does_not_count_as_written(self, world: World) -> None:
        await self._ready(world)
        world.clock.advance(5.0)
        world.board.set("site", "slurm", SourceCounts(held=1))
        world.writer.fail_with = Conflict(409, "Conflict", "the object has been modified")
        assert await world.reconcile() == Result(requeue_after=1.0)
        world.writer.fail_with = None
        assert await world.reconcile() == Result(requeue_after=30.0)
        assert world.status().sources.slurm == SourceCounts(held=1)

    async def test_a_deleted_and_recreated_mixing_starts_afresh(self, world: World) -> None:
        await self._ready(world)
        world.mixings.pop("site")
        assert await world.reconcile() == Result()
        # Re-created with a status already stored (say, restored from a backup): counts differ only.
        stored = _mixing({"slurm": slurm_spec()}, uid="uid-2")
        world.mixings.put(stored)
        await world.reconcile()
        world.board.set("site", "slurm", SourceCounts(held=2))
        world.clock.advance(5.0)
        assert await world.reconcile() == Result(requeue_after=30.0)
        assert world.status().sources.slurm == SourceCounts(held=2)


# --- the Secret watches ----------------------------------------------------------------------------


class FakeWatch(Dispatcher):
    """A watch of one Secret that a test feeds by hand (``replace`` = the initial list)."""

    def __init__(self, namespace: str, name: str) -> None:
        super().__init__(Store(transform=secret_key_names), name=f"{namespace}/{name}")
        self.running = False
        self.stopped = False
        self.failing = False
        self._stop = asyncio.Event()

    async def run(self) -> None:
        self.running = True
        try:
            await self._stop.wait()
        finally:
            self.running = False

    def stop(self) -> None:
        self.stopped = True
        self._stop.set()

    def is_running(self) -> bool:
        return self.running


def _secret(namespace: str, name: str, version: str = "1", **data: str) -> Object:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"namespace": namespace, "name": name, "resourceVersion": version, "uid": "s-1"},
        "data": dict(data),
    }


class SecretsWorld:
    def __init__(self) -> None:
        self.mixings = Dispatcher(Store(indexers={REFERENCES_INDEX: reference_index_keys}), name="mixings")
        self.fallback = FakeSecrets()
        self.made: list[FakeWatch] = []
        self.secrets = WatchedSecretKeys(
            mixings=self.mixings.store, watch=self._watch, fallback=self.fallback
        )
        self.mixings.add_handler(self.secrets)

    def _watch(self, namespace: str, name: str) -> FakeWatch:
        watch = FakeWatch(namespace, name)
        self.made.append(watch)
        return watch

    def watch(self, namespace: str, name: str) -> FakeWatch:
        (watch,) = [w for w in self.made if w.name == f"{namespace}/{name}" and not w.stopped]
        return watch


async def _spin() -> None:
    """Let every ready task run (a few loop iterations; no time passes)."""
    for _ in range(20):
        await asyncio.sleep(0)


def _slurm_with_secret(namespace: str, name: str) -> dict[str, Any]:
    return {"slurm": slurm_spec(auth={"tokenSecretRef": {"namespace": namespace, "name": name}})}


class TestWatchedSecretKeys:
    def test_the_transform_keeps_key_names_never_values(self) -> None:
        kept = secret_key_names(_secret("slurm", "jwt", token="c2VjcmV0", extra="eA=="))
        assert kept == {
            "metadata": {"namespace": "slurm", "name": "jwt", "resourceVersion": "1", "uid": "s-1"},
            "keyNames": ["extra", "token"],
        }
        assert "c2VjcmV0" not in repr(kept)

    def test_one_watch_per_named_secret_following_the_specs(self) -> None:
        world = SecretsWorld()
        world.mixings.upsert(_mixing(_slurm_with_secret("slurm", "jwt"), name="a"))
        world.mixings.upsert(_mixing(_slurm_with_secret("slurm", "jwt"), name="b"))
        world.mixings.upsert(_mixing({"ray": ray_spec()}, name="ray-only"))
        assert world.secrets.watched == [("slurm", "jwt")]
        assert len(world.made) == 1

        # "a" moves to another Secret: "b" still names the first one.
        world.mixings.upsert(_mixing(_slurm_with_secret("slurm", "jwt2"), name="a", generation=2))
        assert world.secrets.watched == [("slurm", "jwt"), ("slurm", "jwt2")]
        world.mixings.delete(_mixing({}, name="b"))
        assert world.secrets.watched == [("slurm", "jwt2")]
        assert [(w.name, w.stopped) for w in world.made] == [("slurm/jwt", True), ("slurm/jwt2", False)]
        world.mixings.delete(_mixing({}, name="a"))
        assert world.secrets.watched == []
        assert all(w.stopped for w in world.made)

    async def test_read_from_the_watch_once_listed_else_with_a_get(self) -> None:
        world = SecretsWorld()
        world.mixings.upsert(_mixing(_slurm_with_secret("slurm", "jwt")))
        watch = world.watch("slurm", "jwt")
        # Not listed yet (or forbidden by RBAC: it never lists): the fallback GET answers.
        assert await world.secrets("slurm", "jwt") == frozenset({"token"})
        assert world.fallback.reads == 1
        # Not watched at all (no WorkloadMixing names it): a GET too.
        assert await world.secrets("other", "jwt") is None
        assert world.fallback.reads == 2

        assert not world.secrets.has_listed("slurm", "jwt")
        watch.replace([_secret("slurm", "jwt", token="dA==", ca="Yw==")])
        assert world.secrets.has_listed("slurm", "jwt")
        for _ in range(3):
            assert await world.secrets("slurm", "jwt") == frozenset({"ca", "token"})
        watch.delete(_secret("slurm", "jwt"))
        assert await world.secrets("slurm", "jwt") is None
        assert world.fallback.reads == 2  # every read after the list came from the watch

    async def test_run_starts_every_watch_including_later_ones_and_stop_ends_them(self) -> None:
        world = SecretsWorld()
        world.mixings.upsert(_mixing(_slurm_with_secret("slurm", "jwt"), name="a"))
        first = world.watch("slurm", "jwt")
        async with asyncio.TaskGroup() as tg:
            task = tg.create_task(world.secrets.run())
            await _spin()
            assert first.is_running()
            world.mixings.upsert(_mixing(_slurm_with_secret("slurm", "other"), name="b"))
            second = world.watch("slurm", "other")
            await _spin()
            assert second.is_running()
            world.mixings.delete(_mixing({}, name="a"))
            await _spin()
            assert not first.is_running()
            world.secrets.stop()
        assert task.done()
        assert not second.is_running()

    async def test_secret_changes_requeue_the_mixing_but_a_rotated_value_does_not(self, world: World) -> None:
        """Through a controller: the Secret appearing heals Ready; a new token value costs nothing."""
        mixings = Dispatcher(world.mixings, name="mixings")
        made: dict[str, FakeWatch] = {}

        def new_watch(namespace: str, name: str) -> FakeWatch:
            made[f"{namespace}/{name}"] = FakeWatch(namespace, name)
            return made[f"{namespace}/{name}"]

        world.secrets.secrets.clear()
        secrets = WatchedSecretKeys(mixings=world.mixings, watch=new_watch, fallback=world.secrets)
        mixings.add_handler(secrets)
        reconciles = 0
        reconciler = world.make_reconciler(secrets)

        class Counting:
            async def reconcile(self, request: Request) -> Result:
                nonlocal reconciles
                reconciles += 1
                return await reconciler.reconcile(request)

        controller = Controller(name="mixing-secrets-test", reconciler=Counting())
        kueue = [
            Dispatcher(world.local_queues, name="localqueues"),
            Dispatcher(world.priority_classes, name="priorityclasses"),
            Dispatcher(world.topologies, name="topologies"),
        ]
        watch_sources(
            controller,
            mixings=mixings,
            local_queues=kueue[0],
            priority_classes=kueue[1],
            topologies=kueue[2],
            secrets=secrets,
        )
        kueue[0].replace([_local_queue("k8s-bridge", "hpc")])
        kueue[1].replace([])
        kueue[2].replace([])
        mixings.replace([_mixing({"slurm": slurm_spec()})])
        watch = made["slurm/jwt"]
        watch.replace([])  # listed: no such Secret
        async with asyncio.TaskGroup() as tg:
            task = tg.create_task(controller.run())
            await TestWhatQueuesAReconcile._settle(controller)
            assert world.ready()[:2] == ("False", "SecretNotFound")
            before = reconciles

            watch.upsert(_secret("slurm", "jwt", version="2", token="b25l"))
            await TestWhatQueuesAReconcile._settle(controller)
            assert world.ready()[:2] == ("True", "ConfigurationValid")
            assert reconciles == before + 1

            watch.upsert(_secret("slurm", "jwt", version="3", token="dHdv"))  # a rotated token
            await TestWhatQueuesAReconcile._settle(controller)
            assert reconciles == before + 1
            assert world.secrets.reads == 0  # no GET: every read came from the watch

            watch.upsert(_secret("slurm", "jwt", version="4", other="dHdv"))  # the key is gone
            await TestWhatQueuesAReconcile._settle(controller)
            assert world.ready()[:2] == ("False", "SecretKeyNotFound")
            controller.stop()
            await task


class Calls:
    """An event handler that records what it is told, with ``is_initial_list``."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def on_add(self, obj: Object, *, is_initial_list: bool) -> None:
        self.calls.append(("add", obj["metadata"]["name"], is_initial_list))

    def on_update(self, old: Object, new: Object) -> None:
        self.calls.append(("update", new["metadata"]["name"]))

    def on_delete(self, obj: Object) -> None:
        self.calls.append(("delete", obj["metadata"]["name"]))


class TestSecretWatchLifecycle:
    """Review of 19fc7fa: shutdown, the first list, a failing watch."""

    @pytest.mark.parametrize("yields", [0, 1])
    async def test_a_secret_named_while_stopping_is_recorded_not_started(self, yields: int) -> None:
        """An edit naming a new Secret after stop() (before or after run() woke up) starts nothing in
        the group being left: run() returns, and a later run() starts the recorded watch."""
        world = SecretsWorld()
        world.mixings.upsert(_mixing(_slurm_with_secret("slurm", "jwt"), name="a"))
        task = asyncio.create_task(world.secrets.run())
        try:
            await _spin()
            assert world.watch("slurm", "jwt").is_running()
            world.secrets.stop()
            for _ in range(yields):
                await asyncio.sleep(0)
            # The WorkloadMixing informer still runs (caches stop after controllers).
            world.mixings.upsert(_mixing(_slurm_with_secret("slurm", "jwt2"), name="b"))
            late = world.watch("slurm", "jwt2")
            await _spin()
            assert task.done()
            assert task.exception() is None
            assert not late.is_running()
            assert world.secrets.watched == [("slurm", "jwt"), ("slurm", "jwt2")]
        finally:
            if not task.done():  # the defect: a watch started in the group being left
                for watch in world.made:
                    watch.stop()
            await task

        async with asyncio.TaskGroup() as tg:  # run again (e.g. leadership regained): both start
            again = tg.create_task(world.secrets.run())
            await _spin()
            assert late.is_running()
            world.secrets.stop()
        assert again.done()
        assert not late.is_running()

    @pytest.mark.parametrize("listed", [[], [_secret("slurm", "jwt", token="dA==")]])
    async def test_the_first_list_requeues_the_mixings_naming_the_secret(self, listed: list[Object]) -> None:
        """Empty or not, a watch's first list is announced as a live (not initial-list) add of the
        Secret, which the reference index maps to the WorkloadMixings naming it."""
        world = SecretsWorld()
        calls = Calls()
        world.secrets.add_handler(calls)
        world.mixings.upsert(_mixing(_slurm_with_secret("slurm", "jwt"), name="a"))
        watch = world.watch("slurm", "jwt")
        async with asyncio.TaskGroup() as tg:
            tg.create_task(world.secrets.run())
            await _spin()
            assert calls.calls == []
            watch.replace(listed)
            await _spin()
            assert calls.calls[-1] == ("add", "jwt", False)
            assert [call for call in calls.calls if call[0] == "add"] == [
                *(("add", "jwt", True) for _ in listed),
                ("add", "jwt", False),
            ]
            watch.replace(listed)  # a relist later is no first list: no announcement
            await _spin()
            assert calls.calls.count(("add", "jwt", False)) == 1
            world.secrets.stop()
        stub = {"metadata": {"namespace": "slurm", "name": "jwt"}}
        assert referencing_mapper(world.mixings.store, _secret_keys)(stub) == [Request("", "a")]

    async def test_a_secret_deleted_between_the_get_and_the_first_list_is_noticed(self, world: World) -> None:
        mixings = Dispatcher(world.mixings, name="mixings")
        made: dict[str, FakeWatch] = {}

        def new_watch(namespace: str, name: str) -> FakeWatch:
            made[f"{namespace}/{name}"] = FakeWatch(namespace, name)
            return made[f"{namespace}/{name}"]

        secrets = WatchedSecretKeys(mixings=world.mixings, watch=new_watch, fallback=world.secrets)
        mixings.add_handler(secrets)
        controller = Controller(name="mixing-first-list-test", reconciler=world.make_reconciler(secrets))
        kueue = [
            Dispatcher(world.local_queues, name="localqueues"),
            Dispatcher(world.priority_classes, name="priorityclasses"),
            Dispatcher(world.topologies, name="topologies"),
        ]
        watch_sources(
            controller,
            mixings=mixings,
            local_queues=kueue[0],
            priority_classes=kueue[1],
            topologies=kueue[2],
            secrets=secrets,
        )
        kueue[0].replace([_local_queue("k8s-bridge", "hpc")])
        kueue[1].replace([])
        kueue[2].replace([])
        mixings.replace([_mixing({"slurm": slurm_spec()})])
        async with asyncio.TaskGroup() as tg:
            tg.create_task(secrets.run())
            task = tg.create_task(controller.run())
            await TestWhatQueuesAReconcile._settle(controller)
            assert world.ready()[:2] == ("True", "ConfigurationValid")  # judged against the GET
            assert world.secrets.reads == 1
            world.secrets.secrets.clear()  # deleted; then the watch lists: nothing there
            made["slurm/jwt"].replace([])
            await TestWhatQueuesAReconcile._settle(controller)
            assert world.ready()[:2] == ("False", "SecretNotFound")
            assert world.secrets.reads == 1
            controller.stop()
            await task
            secrets.stop()

    async def test_a_failing_watch_falls_back_to_the_get(self, world: World) -> None:
        """RBAC revoked after the watch listed: its cache is stale, the GET tells the truth."""
        secrets_world = SecretsWorld()
        secrets_world.mixings.upsert(_mixing(_slurm_with_secret("slurm", "jwt")))
        watch = secrets_world.watch("slurm", "jwt")
        watch.replace([_secret("slurm", "jwt", token="dA==")])
        secrets = secrets_world.secrets
        fallback = secrets_world.fallback
        assert await secrets("slurm", "jwt") == frozenset({"token"})
        assert fallback.reads == 0

        watch.failing = True
        fallback.forbidden.add(("slurm", "jwt"))
        assert not secrets.has_listed("slurm", "jwt")
        with pytest.raises(Forbidden):
            await secrets("slurm", "jwt")
        assert fallback.reads == 1

        world.mixings.put(_mixing({"slurm": slurm_spec()}))
        await world.make_reconciler(secrets).reconcile(Request("", "site"))
        assert world.ready()[:2] == ("False", "SecretUnreadable")

        watch.failing = False  # the watch recovered: its cache answers again
        assert await secrets("slurm", "jwt") == frozenset({"token"})
        assert fallback.reads == 2


SECRETS = Resource(group="", version="v1", plural="secrets", kind="Secret", namespaced=True)
CONFIGMAPS = Resource(group="", version="v1", plural="configmaps", kind="ConfigMap", namespaced=True)


class TestSecretInformers:
    """What for_client's informers do beyond a plain informer: no raw line logged, metrics only
    while running; and the reflector's ``failing``."""

    async def test_a_watch_never_run_exports_no_metrics(self) -> None:
        registry = CollectorRegistry()
        mixings = Dispatcher(Store(indexers={REFERENCES_INDEX: reference_index_keys}), name="mixings")
        async with Session(base_url="http://127.0.0.1:9") as session:
            secrets = WatchedSecretKeys.for_client(
                Client(session), SECRETS, mixings=mixings.store, registry=registry
            )
            mixings.add_handler(secrets)
            mixings.upsert(_mixing(_slurm_with_secret("slurm", "jwt")))  # a standby: never run
            watch = secrets.watch_of("slurm", "jwt")
            assert isinstance(watch, Informer)
            assert "metadata.name=jwt" not in generate_latest(registry).decode()
            assert watch.reflector.settings.log_undecodable_lines is False

    async def test_an_informer_exports_metrics_only_while_running(self) -> None:
        registry = CollectorRegistry()
        async with Session(base_url="http://127.0.0.1:9") as session:
            informer = Informer(
                Client(session), SECRETS, namespace="ns", registry=registry, metrics_while_running=True
            )
            informer.reflector.stats.lists = 3
            never = asyncio.Event()

            async def idle() -> None:
                await never.wait()

            informer.reflector.run = idle  # type: ignore[method-assign]
            name = 'reflector_lists_total{name="v1/Secret/ns//"}'
            assert name not in generate_latest(registry).decode()
            async with asyncio.TaskGroup() as tg:
                tg.create_task(informer.run())
                await _spin()
                assert f"{name} 3.0" in generate_latest(registry).decode()
                informer.stop()
            assert name not in generate_latest(registry).decode()
            # The default is unchanged: exported from construction on.
            Informer(Client(session), SECRETS, namespace="other", registry=registry)
            assert 'name="v1/Secret/other//"' in generate_latest(registry).decode()

    @pytest.mark.parametrize("log_lines", [True, False])
    async def test_an_undecodable_line_is_logged_raw_only_when_allowed(self, log_lines: bool) -> None:
        garbage = b'{"type": "ADDED", "object": {"data": {"token": "c2VjcmV0"'
        async with Session(base_url="http://127.0.0.1:9") as session:
            with capture_logs() as logs:
                reflector = Reflector(
                    Client(session),
                    SECRETS,
                    Informer(Client(session), SECRETS, registry=None),
                    settings=ReflectorSettings(log_undecodable_lines=log_lines),
                )
                reflector._process([garbage])
        assert reflector.stats.garbage_lines == 1
        assert [entry["event"] for entry in logs] == ["skipping undecodable watch line"]
        assert ("c2VjcmV0" in repr(logs)) is log_lines

    async def test_the_reflector_reports_failing_until_a_watch_is_accepted(self) -> None:
        server = FakeApiServer()
        await server.start()
        released = asyncio.Event()
        backing_off = asyncio.Event()

        async def sleep(_: float) -> None:
            backing_off.set()
            await released.wait()

        try:
            async with Session(base_url=server.base_url) as session:
                informer = Informer(
                    Client(session),
                    CONFIGMAPS,  # what the fake API server serves
                    namespace="default",
                    settings=ReflectorSettings(streaming_list=False),
                    sleep=sleep,
                    resync_period=None,
                    registry=None,
                )
                server.watch_scripts.append(fail_with(403, "Forbidden"))
                async with asyncio.TaskGroup() as tg:
                    tg.create_task(informer.run())
                    await backing_off.wait()  # listed, then the watch was refused
                    assert informer.has_synced()
                    failing: list[bool] = [informer.failing]
                    released.set()
                    while len(server.watches) < 2 or informer.failing:
                        await asyncio.sleep(0.01)  # the next watch is accepted
                    failing.append(informer.failing)
                    assert failing == [True, False]
                    informer.stop()
        finally:
            await server.close()


class TestMixingController:
    async def test_runs_the_secret_watches_while_it_runs(self, world: World) -> None:
        secrets_world = SecretsWorld()
        secrets_world.mixings.upsert(_mixing(_slurm_with_secret("slurm", "jwt")))
        watch = secrets_world.watch("slurm", "jwt")
        controller = MixingController(
            name="mixing-run-test", reconciler=world.reconciler, secrets=secrets_world.secrets
        )
        async with asyncio.TaskGroup() as tg:
            task = tg.create_task(controller.run())
            await _spin()
            assert watch.is_running()
            controller.stop()
        assert task.done()
        assert not watch.is_running()

        # What the controller raises comes out as itself, not inside an exception group.
        with pytest.raises(RuntimeError, match="already ran"):
            await controller.run()
        assert not watch.is_running()


# --- index and mappers -----------------------------------------------------------------------------


class TestWhatQueuesAReconcile:
    """Only updates that can change the decision queue a reconcile (and so a Secret GET): not the
    controller's own status writes, not Kueue's LocalQueue status updates, not unchanged counts."""

    @staticmethod
    async def _settle(controller: Controller) -> None:
        for _ in range(200):
            await asyncio.sleep(0.005)
            if len(controller.queue) == 0 and controller.has_synced():
                await asyncio.sleep(0.02)  # let an in-flight reconcile finish
                if len(controller.queue) == 0:
                    return
        raise AssertionError("the controller did not settle")

    async def test_status_only_updates_do_not_reconcile(self, world: World) -> None:
        mixings = Dispatcher(world.mixings, name="mixings")
        local_queues = Dispatcher(world.local_queues, name="localqueues")
        priority_classes = Dispatcher(world.priority_classes, name="priorityclasses")
        topologies = Dispatcher(world.topologies, name="topologies")
        # The writer puts the written object into the store directly; deliver it as the watch would.
        world.writer.mixings = Store()
        original_update = world.writer.update_status

        async def update_status(obj: Object, *, field_manager: str | None = None) -> Object:
            written = await original_update(obj, field_manager=field_manager)
            mixings.upsert({**written, "metadata": {**written["metadata"], "resourceVersion": "w"}})
            return written

        world.writer.update_status = update_status  # type: ignore[method-assign]
        controller = Controller(name="mixing-test", reconciler=world.reconciler)
        watch_sources(
            controller,
            mixings=mixings,
            local_queues=local_queues,
            priority_classes=priority_classes,
            topologies=topologies,
            counts=world.board,
        )
        world.board.set("site", "slurm", SourceCounts())
        local_queues.replace([_local_queue("k8s-bridge", "hpc")])
        priority_classes.replace([])
        topologies.replace([])
        mixings.replace([_mixing({"slurm": slurm_spec()})])
        async with asyncio.TaskGroup() as tg:
            task = tg.create_task(controller.run())
            await self._settle(controller)
            # The first reconcile wrote status; that write came back as an update and was ignored.
            assert len(world.writer.writes) == 1
            assert world.secrets.reads == 1

            # Kueue rewriting the LocalQueue's status (pending counts) over and over.
            for n in range(5):
                local_queues.upsert({**_local_queue("k8s-bridge", "hpc"), "status": {"pendingWorkloads": n}})
            # Someone else's status or metadata write on the WorkloadMixing; an informer resync.
            stored = world.mixings.get("site")
            assert stored is not None
            mixings.upsert({**stored, "metadata": {**stored["metadata"], "annotations": {"a": "b"}}})
            mixings.resync()
            # A bridge reporting the counts it already reported.
            world.board.set("site", "slurm", SourceCounts())
            world.board.set("site", "slurm", SourceCounts())
            await self._settle(controller)
            assert world.secrets.reads == 1

            # What does matter: new counts, a new generation, a LocalQueue that goes away.
            world.clock.advance(5.0)  # (counts alone are written at most every 5 s: TestCountsWrites)
            world.board.set("site", "slurm", SourceCounts(held=3))
            await self._settle(controller)
            assert world.secrets.reads == 2
            assert world.status().sources.slurm == SourceCounts(held=3)
            mixings.upsert(_mixing({"slurm": slurm_spec(partitions=["bridge", "gpu"])}, generation=2))
            await self._settle(controller)
            assert world.secrets.reads == 3
            local_queues.delete(_local_queue("k8s-bridge", "hpc"))
            await self._settle(controller)
            assert world.secrets.reads == 4
            assert world.ready()[:2] == ("False", "LocalQueueNotFound")
            controller.stop()
            await task


class TestReferenceIndex:
    def test_keys_of_a_spec(self) -> None:
        spec = {
            "slurm": slurm_spec(
                mapping={
                    "rules": [{"match": {"partitions": ["gpu"]}, "target": target("gpu", namespace="team")}],
                    "default": target("hpc", priority="low"),
                },
                partitions=["bridge", "gpu"],
                topology={"partitions": [{"partition": "gpu", "required": "example.com/rack"}]},
            )
        }
        assert reference_index_keys(_mixing(spec)) == [
            "LocalQueue:k8s-bridge/hpc",
            "LocalQueue:team/gpu",
            "Secret:slurm/jwt",
            "TopologyLevel:example.com/rack",
            "WorkloadPriorityClass:low",
        ]

    def test_invalid_spec_has_no_keys(self) -> None:
        assert reference_index_keys(_mixing({})) == []

    def test_kueue_object_maps_to_the_mixings_naming_it(self) -> None:
        mixings = Store(indexers={REFERENCES_INDEX: reference_index_keys})
        mixings.put(_mixing({"slurm": slurm_spec()}, name="a"))
        mixings.put(_mixing({"slurm": slurm_spec()}, name="b"))
        mixings.put(_mixing({"slurm": slurm_spec(mapping={"default": target("other")})}, name="c"))
        mapper = referencing_mapper(
            mixings,
            lambda obj: [f"LocalQueue:{obj['metadata']['namespace']}/{obj['metadata']['name']}"],
        )
        assert list(mapper(_local_queue("k8s-bridge", "hpc"))) == [Request("", "a"), Request("", "b")]
        assert list(mapper(_local_queue("elsewhere", "hpc"))) == []

    def test_topology_levels(self) -> None:
        topology = _cluster_object("t", levels=[{"nodeLabel": "b"}, {"nodeLabel": "a"}])
        assert topology_levels(topology) == ["a", "b"]
        assert topology_levels(_cluster_object("empty")) == []


# --- the live configuration holder -----------------------------------------------------------------


class TestLiveConfig:
    def test_publish_notifies_once_per_change(self) -> None:
        live = LiveConfig("site")
        seen: list[ConfigSnapshot | None] = []
        unsubscribe = live.subscribe(seen.append)
        assert live.publish(uid="u", generation=1, spec=_spec())
        assert not live.publish(uid="u", generation=1, spec=_spec())
        assert live.publish(uid="u", generation=2, spec=_spec())
        assert [s.generation if s else None for s in seen] == [1, 2]
        assert live.version == 2
        unsubscribe()
        assert live.withdraw()
        assert not live.withdraw()
        assert len(seen) == 2
        assert live.current is None
        assert live.version == 3

    def test_a_failing_subscriber_does_not_stop_the_others(self) -> None:
        live = LiveConfig("site")
        seen: list[int] = []

        def broken(snapshot: ConfigSnapshot | None) -> None:
            raise RuntimeError("bridge bug")

        live.subscribe(broken)
        live.subscribe(lambda s: seen.append(s.generation if s else 0))
        live.publish(uid="u", generation=7, spec=_spec())
        assert seen == [7]

    def test_last_good_generation_is_per_resource(self) -> None:
        live = LiveConfig("site")
        live.publish(uid="u", generation=4, spec=_spec())
        assert live.last_good_generation(uid="u") == 4
        assert live.last_good_generation(uid="other") is None

    async def test_wait_for_change_sees_changes_made_while_busy(self) -> None:
        live = LiveConfig("site")
        seen = live.version
        live.publish(uid="u", generation=1, spec=_spec())  # before the bridge waits
        snapshot = await asyncio.wait_for(live.wait_for_change(after=seen), 1)
        assert snapshot is not None
        assert snapshot.generation == 1

        async with asyncio.TaskGroup() as tg:
            waiter = tg.create_task(live.wait_for_change(after=live.version))
            await asyncio.sleep(0)
            assert not waiter.done()
            live.publish(uid="u", generation=2, spec=_spec())
        snapshot = waiter.result()
        assert snapshot is not None
        assert snapshot.generation == 2

    def test_configs_are_per_name(self) -> None:
        configs = MixingConfigs()
        assert configs.get("a") is configs.get("a")
        assert configs.get("a") is not configs.get("b")
        assert configs.names() == ["a", "b"]


class Collect:
    def __init__(self) -> None:
        self.names: list[str] = []

    def on_add(self, obj: Object, *, is_initial_list: bool) -> None:
        self.names.append(obj["metadata"]["name"])

    def on_update(self, old: Object, new: Object) -> None:
        self.names.append(new["metadata"]["name"])

    def on_delete(self, obj: Object) -> None:
        raise AssertionError("the board never deletes")


class TestCountsBoard:
    def test_changes_notify_handlers_and_repeats_do_not(self) -> None:
        board = CountsBoard()
        board.set("early", "ray", SourceCounts(queued=1))
        handler = Collect()
        board.add_handler(handler)
        assert board.has_synced()
        assert handler.names == ["early"]
        board.set("site", "slurm", SourceCounts(held=1))
        board.set("site", "slurm", SourceCounts(held=1))
        board.set("site", "slurm", SourceCounts(held=2))
        assert handler.names == ["early", "site", "site"]
        assert board.counts("site", "slurm") == SourceCounts(held=2)
        assert board.counts("site", "ray") is None
        board.clear("site", "slurm")
        board.clear("site", "slurm")
        assert handler.names == ["early", "site", "site", "site"]
        assert board.counts("site", "slurm") is None
