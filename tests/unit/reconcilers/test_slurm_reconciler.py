"""reconcilers.slurm.SlurmReconciler: gathering the observation and executing the decision.

Fakes stand in for the API server and slurmrestd (unit tier); the e2e tier runs the real ones.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from bridge.api.mixing import API_VERSION, KIND, WorkloadMixingSpec
from bridge.api.slurm_job import JobState, SlurmJob
from bridge.api.slurm_node import NodeState, SlurmNode
from bridge.api.slurm_reservation import SlurmReservation
from bridge.runtime.cache import Store
from bridge.runtime.client import Client
from bridge.runtime.controller import Controller, Request, Result
from bridge.runtime.discovery import Resource
from bridge.runtime.errors import ApiError, NotFound
from bridge.runtime.handlers import Object
from bridge.runtime.manager import Manager
from bridge.slurm.metrics import slurm_metrics
from bridge.slurm.program import Settings, SlurmBridge, parse_args
from bridge.slurm.source import SlurmNodeSource, node_object
from bridge.slurmrest.errors import (
    ErrorEntry,
    InvalidJobId,
    InvalidNodeName,
    JobAlreadyDone,
    SlurmAPIError,
    SlurmUnavailable,
    api_error,
)
from reconcilers.slurm import (
    INDEX_JOB,
    INDEX_JOB_UID,
    RELEASE_PRIORITY,
    SLURM_RETRY,
    WAIT_FOR_NODES,
    Phase,
    SlurmReconciler,
    jobset_job_keys,
    node_job_keys,
    pod_job_keys,
    workload_uid_keys,
)
from reconcilers.slurm_reservations import ReservationCache
from tests.fixtures.mixing import slurm_spec
from translators.slurm import FINALIZER, Translation, translate

SPEC = WorkloadMixingSpec.model_validate({"slurm": slurm_spec()})


def held(**fields: Any) -> SlurmJob:
    base: dict[str, Any] = {
        "job_id": 42,
        "partition": "bridge",
        "state": JobState.PENDING,
        "hold": True,
        "state_reason": "JobHeldAdmin",
        "admin_comment": "k8s-bridge: held",  # the bridge's own hold
        "node_count": 2,
        "cpus": 2,
        "memory_per_node_mb": 1000,
    }
    base.update(fields)
    return SlurmJob(**base)


class Config:
    def __init__(self, spec: WorkloadMixingSpec | None = SPEC) -> None:
        self.spec = spec
        self.object: Object | None = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": "site", "uid": "u"},
        }


class Jobs:
    def __init__(self, *jobs: SlurmJob) -> None:
        self.jobs = {j.job_id: j for j in jobs}
        self.refreshed: list[int] = []

    def job(self, job_id: int) -> SlurmJob | None:
        return self.jobs.get(job_id)

    def any_job(self, job_id: int) -> SlurmJob | None:
        return self.jobs.get(job_id)

    def refresh(self, job_id: int) -> None:
        self.refreshed.append(job_id)


class FakeSlurm:
    def __init__(self, jobs: Jobs, *, down: bool = False) -> None:
        self.jobs = jobs
        self.calls: list[tuple[Any, ...]] = []
        self.down = down
        self.gone_nodes: set[str] = set()
        self.refuse_hold = False
        self.hold_error: Exception | None = None
        self.comment_error: Exception | None = None
        self.delete_error: Exception | None = None
        self.release_error: Exception | None = None
        self.before_hold: Callable[[], Awaitable[None]] | None = None
        self.unpinned: list[tuple[int, tuple[str, ...]]] = []
        self.admin_comments: list[tuple[int, str]] = []

    def _check(self) -> None:
        if self.down:
            raise SlurmUnavailable("connection refused")

    async def get_job(self, job_id: int) -> SlurmJob:
        self._check()
        self.calls.append(("get_job", job_id))
        job = self.jobs.job(job_id)
        if job is None:
            raise InvalidJobId("gone", error_number=2017)
        return job

    async def hold_job(
        self,
        job_id: int,
        *,
        unpin: Sequence[str] = (),
        comment: str | None = None,
        admin_comment: str | None = None,
    ) -> None:
        if self.before_hold is not None:
            await self.before_hold()
        self.calls.append(("hold", job_id))
        if admin_comment is not None:
            self.admin_comments.append((job_id, admin_comment))
        if unpin:
            self.unpinned.append((job_id, tuple(unpin)))
        if self.hold_error is not None:
            raise self.hold_error
        if self.refuse_hold:
            raise SlurmAPIError("Job update requested failed", status=500, error_number=2015)

    async def requeue_hold(self, job_id: int) -> None:
        self.calls.append(("requeue_hold", job_id))

    async def set_comment(self, job_id: int, comment: str) -> None:
        self.calls.append(("comment", job_id, comment))
        if self.comment_error is not None:
            raise self.comment_error

    async def set_admin_comment(self, job_id: int, admin_comment: str) -> None:
        self.calls.append(("admin_comment", job_id, admin_comment))
        self.admin_comments.append((job_id, admin_comment))

    async def pin_and_release(
        self,
        job_id: int,
        *,
        nodes: Sequence[str],
        constraints: str,
        begin_time: int | None = None,
        comment: str | None = None,
        admin_comment: str | None = None,
        released: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._check()
        self.calls.append(("pin", job_id, tuple(nodes), constraints, begin_time))
        if released is not None:
            await released()
        if self.release_error is not None:
            raise self.release_error

    async def drain_node(self, name: str, *, reason: str) -> None:
        self.calls.append(("drain", name))

    async def down_node(self, name: str, *, reason: str) -> None:
        self.calls.append(("down", name))

    async def resume_node(self, name: str) -> None:
        self.calls.append(("resume", name))

    async def delete_node(self, name: str, *, down_if_busy: bool = True, reason: str = "") -> None:
        if name in self.gone_nodes:
            raise InvalidNodeName(f"{name} gone", error_number=2018)
        self.calls.append(("delete_node", name))
        if self.delete_error is not None:
            raise self.delete_error


class FakeKube:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], Object] = {}
        self.calls: list[tuple[Any, ...]] = []
        self.create_error: Exception | None = None
        self.before_create: Callable[[], Awaitable[None]] | None = None
        self.gets = 0
        self.delete_answers = False
        """Answer a delete with the object, as the API server does while finalizers keep it."""

    async def create(self, obj: Object, **kwargs: Any) -> Object:
        if self.before_create is not None:
            await self.before_create()
        meta = obj["metadata"]
        self.calls.append(("create", obj["kind"], meta["name"]))
        if self.create_error is not None:
            raise self.create_error
        stored = copy.deepcopy(obj)
        stored["metadata"].update(uid="uid-1", resourceVersion="1")
        self.objects[(obj["kind"], meta.get("namespace", ""), meta["name"])] = stored
        return stored

    async def get(self, api_version: str, kind: str, name: str, *, namespace: str | None = None) -> Object:
        self.gets += 1
        obj = self.objects.get((kind, namespace or "", name))
        if obj is None:
            raise NotFound(404, "NotFound", name)
        return copy.deepcopy(obj)

    async def patch(self, api_version: str, kind: str, name: str, patch: Any, **kwargs: Any) -> Object:
        self.calls.append(("patch", kind, name, patch))
        obj = self.objects[(kind, kwargs.get("namespace") or "", name)]
        obj["metadata"]["finalizers"] = patch["metadata"]["finalizers"]
        return obj

    async def delete(self, api_version: str, kind: str, name: str, **kwargs: Any) -> Object | None:
        self.calls.append(("delete", kind, name, kwargs.get("propagation_policy")))
        obj = self.objects.get((kind, kwargs.get("namespace") or "", name))
        if not self.delete_answers or obj is None:
            return None
        # As the API server answers while finalizers keep the object: the object, marked, a new version.
        obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:01Z"
        obj["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)
        return copy.deepcopy(obj)


def jobset_object(
    *, deleting: bool = False, finalizers: list[str] | None = None, suspended: bool = True
) -> Object:
    translation = translate(held(), SPEC)
    assert isinstance(translation, Translation)
    obj = copy.deepcopy(dict(translation.manifest))
    obj["metadata"].update(uid="js-uid", resourceVersion="7", finalizers=finalizers or [FINALIZER])
    obj["spec"]["suspend"] = suspended
    if deleting:
        obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return obj


def workload_object(admitted: bool) -> Object:
    conditions = [{"type": "Admitted", "status": "True" if admitted else "False"}]
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": "jobset-slurm-hpc-42-abcde",
            "namespace": "default",
            "uid": "wl",
            "labels": {"kueue.x-k8s.io/job-uid": "js-uid"},
        },
        "status": {"conditions": conditions},
    }


def idle(name: str) -> SlurmNode:
    return SlurmNode(
        name=name,
        state=NodeState.IDLE,
        features=("k8sbridge", "bridge-job-42"),
        state_flags=frozenset({"DYNAMIC_NORM"}),
    )


def released_by_the_bridge() -> SlurmJob:
    """Job 42 as Slurm has it right after the bridge's pin-and-release."""
    return held(hold=False, required_nodes=("b42-0", "b42-1"), features="bridge-job-42", state_reason="None")


class Counter:
    def __init__(self) -> None:
        self.count = 0

    def append_one(self) -> None:
        self.count += 1


class NodeLists:
    """The node source's whole-list numbers, moved by the test (``list_begun``, ``list_stored``)."""

    def __init__(self) -> None:
        self.lists = 1
        self.listed = 1

    def list_begun(self) -> None:
        self.lists += 1

    def list_stored(self) -> None:
        self.listed = self.lists


class World:
    def __init__(
        self,
        *jobs: SlurmJob,
        down: bool = False,
        spec: WorkloadMixingSpec = SPEC,
        reservations: ReservationCache | None = None,
    ) -> None:
        self.jobs = Jobs(*jobs)
        self.slurm = FakeSlurm(self.jobs, down=down)
        self.kube = FakeKube()
        self.jobsets = Store(indexers={INDEX_JOB: jobset_job_keys})
        self.workloads = Store(indexers={INDEX_JOB_UID: workload_uid_keys})
        self.pods = Store(indexers={INDEX_JOB: pod_job_keys})
        self.nodes = Store(indexers={INDEX_JOB: node_job_keys})
        self.child_jobs = Store(indexers={INDEX_JOB: pod_job_keys})
        self.registry = CollectorRegistry()
        self.phases: list[dict[str, int]] = []
        self.node_polls = Counter()
        self.node_lists = NodeLists()
        self.reconciler = SlurmReconciler(
            client=cast(Client, self.kube),
            slurm=self.slurm,
            config=Config(spec),
            jobs=self.jobs,
            jobsets=self.jobsets,
            workloads=self.workloads,
            pods=self.pods,
            nodes=self.nodes,
            child_jobs=self.child_jobs,
            reservations=reservations,
            metrics=slurm_metrics(self.registry),
            on_phases=lambda p: self.phases.append(dict(p)),
            nodes_trigger=self.node_polls.append_one,
            node_listings=self.node_lists,
        )

    def admit_with_idle_nodes(self, jobset: Object) -> None:
        """The JobSet in the cache, its Workload Admitted, both of job 42's nodes registered idle."""
        self.add_jobset(jobset)
        self.workloads.put(workload_object(admitted=True))
        for name in ("b42-0", "b42-1"):
            self.nodes.put(node_object(idle(name)))

    def add_jobset(self, obj: Object) -> None:
        self.jobsets.put(obj)
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        self.kube.objects[("JobSet", ns, name)] = copy.deepcopy(obj)

    async def reconcile(self, key: str = "42") -> Result:
        return await self.reconciler.reconcile(Request("hpc", key))

    def metric(self, name: str, **labels: str) -> float:
        value = self.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value


async def test_held_job_gets_its_jobset_created() -> None:
    w = World(held())
    result = await w.reconcile()
    assert w.kube.calls == [("create", "JobSet", "slurm-hpc-42")]
    assert result == Result()
    assert w.reconciler.phases == {"hpc/42": "queued"}
    assert w.phases[-1] == {"queued": 1}
    assert w.metric("k8s_bridge_slurm_jobs", phase="queued") == 1


async def test_requests_of_another_cluster_or_not_a_job_id_are_ignored() -> None:
    w = World(held())
    assert await w.reconciler.reconcile(Request("other", "42")) == Result()
    assert await w.reconciler.reconcile(Request("hpc", "x")) == Result()
    assert w.kube.calls == []


async def test_admitted_with_nodes_pins_after_a_fresh_read_and_measures_latency() -> None:
    w = World(held())
    await w.reconcile()  # queued
    w.admit_with_idle_nodes(jobset_object())
    await w.reconcile()
    assert ("get_job", 42) in w.slurm.calls
    assert w.slurm.calls[-1] == ("pin", 42, ("b42-0", "b42-1"), "bridge-job-42", None)
    assert w.jobs.refreshed == [42]
    assert w.metric("k8s_bridge_slurm_held_to_admitted_seconds_count") == 1
    assert w.metric("k8s_bridge_slurm_actions_total", action="pin_and_release", result="ok") == 1


async def test_pin_is_skipped_when_the_fresh_read_shows_the_job_already_released() -> None:
    w = World(held())
    w.admit_with_idle_nodes(jobset_object())
    # The source is a poll behind: Slurm already has the job released by our last reconcile.
    w.slurm.jobs = Jobs(released_by_the_bridge())
    await w.reconcile()
    assert [c[0] for c in w.slurm.calls] == ["get_job"]


async def test_nodes_are_not_deleted_under_a_job_the_cache_shows_held_but_slurm_has_released() -> None:
    """Someone deletes the JobSet just after the bridge released the job; the job source is a poll
    behind and still shows it held. A fresh read shows the release: the job is held again first,
    and its nodes stay until it is (row 3, not row 4)."""
    w = World(held())
    w.admit_with_idle_nodes(jobset_object(deleting=True))
    w.slurm.jobs = Jobs(released_by_the_bridge())
    await w.reconcile()
    assert [c[0] for c in w.slurm.calls] == ["get_job", "hold"]


async def test_waiting_for_nodes_requeues_soon() -> None:
    w = World(held())
    w.add_jobset(jobset_object())
    w.workloads.put(workload_object(admitted=True))
    w.nodes.put(node_object(idle("b42-0")))
    result = await w.reconcile()
    assert result.requeue_after is not None
    assert result.requeue_after <= 2
    assert w.slurm.calls == []


async def test_vanished_job_is_cleaned_up_and_the_finalizer_removed_last() -> None:
    w = World()
    w.add_jobset(jobset_object(suspended=False))
    for name in ("b42-0", "b42-1"):
        w.nodes.put(node_object(idle(name)))
    w.slurm.gone_nodes.add("b42-1")  # deleted already, before a crash: ignored
    await w.reconcile()
    assert w.slurm.calls == [
        ("get_job", 42),  # "vanished" is confirmed on a fresh read first
        ("drain", "b42-0"),
        ("drain", "b42-1"),
        ("delete_node", "b42-0"),
    ]
    assert w.kube.calls[0] == ("delete", "JobSet", "slurm-hpc-42", "Foreground")
    kind, what, name, patch = w.kube.calls[1]
    assert (kind, what, name) == ("patch", "JobSet", "slurm-hpc-42")
    assert patch["metadata"]["finalizers"] == []
    assert w.reconciler.phases == {"hpc/42": "finishing"}
    # The JobSet's delete and the nodes' disappearance reconcile again: nothing is left to track.
    for obj in w.jobsets:
        w.jobsets.pop(w.jobsets.key_of(obj))
    for name in ("b42-0", "b42-1"):
        w.nodes.pop(name)
    await w.reconcile()
    assert w.reconciler.phases == {}


async def test_a_job_missing_from_the_cache_but_alive_in_slurm_is_not_cleaned_up() -> None:
    """Right after a restart the job source may have listed before the configuration arrived: the
    job is absent from the cache while it runs. A fresh read shows it, and nothing is deleted."""
    alive = held(
        state=JobState.RUNNING, hold=False, state_reason="None", nodes=("b42-0", "b42-1"),
        required_nodes=("b42-0", "b42-1"), features="bridge-job-42",
    )  # fmt: skip
    w = World()
    w.slurm.jobs = Jobs(alive)
    w.admit_with_idle_nodes(jobset_object())
    await w.reconcile()
    # nothing deleted: its nodes are only kept for it while it runs
    assert w.slurm.calls == [("get_job", 42), ("drain", "b42-0"), ("drain", "b42-1")]
    assert w.kube.calls == []
    assert w.reconciler.phases == {"hpc/42": "running"}


async def test_finalizer_removal_tolerates_a_jobset_already_gone() -> None:
    w = World()
    obj = jobset_object(deleting=True)
    w.jobsets.put(obj)  # in the cache, but gone from the server
    await w.reconcile()
    assert [c[0] for c in w.kube.calls] == []


async def test_slurmrestd_down_requeues_calmly_instead_of_raising() -> None:
    w = World(held(), down=True)
    w.admit_with_idle_nodes(jobset_object())
    result = await w.reconcile()
    assert result == Result(requeue_after=SLURM_RETRY)


async def test_unservable_job_gets_comment_and_event_once() -> None:
    events: list[tuple[str, str]] = []

    class Recorder:
        async def event(self, regarding: Object, **kw: Any) -> None:
            events.append((regarding["kind"], kw["reason"]))

    w = World(held(node_count=100000))
    w.reconciler._recorder = cast(Any, Recorder())
    await w.reconcile()
    assert w.slurm.calls[0] == ("get_job", 42)
    (_, _, comment) = w.slurm.calls[1]
    assert comment.startswith("k8s-bridge: held: ")
    assert events == [("WorkloadMixing", "TooManyNodes")]
    assert w.kube.calls == []
    # The comment is on the job now: nothing more is written.
    w.jobs.jobs[42] = held(node_count=100000, comment=comment)
    w.slurm.calls.clear()
    await w.reconcile()
    assert w.slurm.calls == []


@pytest.mark.parametrize("admitted", [False, True])
async def test_running_job_is_requeue_held_when_admission_is_lost(admitted: bool) -> None:
    job = held(
        state=JobState.RUNNING, hold=False, nodes=("b42-0", "b42-1"), required_nodes=("b42-0", "b42-1")
    )
    w = World(job)
    w.add_jobset(jobset_object())
    w.workloads.put(workload_object(admitted=admitted))
    await w.reconcile()
    assert ("requeue_hold", 42) in w.slurm.calls or admitted
    assert (("requeue_hold", 42) in w.slurm.calls) is not admitted


def child_job(*, owner_uid: str, failed: int) -> Object:
    """The JobSet's one Job as the cache holds it, owned by the JobSet of ``owner_uid``."""
    labels = jobset_object()["spec"]["replicatedJobs"][0]["template"]["metadata"]["labels"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"slurm-hpc-42-slurmd-{owner_uid}",
            "namespace": "default",
            "labels": dict(labels),
            "ownerReferences": [{"kind": "JobSet", "name": "slurm-hpc-42", "uid": owner_uid}],
        },
        "status": {"failed": failed, "active": 2},
    }


def running_on_replacement_pods(*, failed_job_owner: str) -> World:
    """Job 42 running on its two nodes, both slurmd pods active, while the JobSet's Job (of
    ``failed_job_owner``) counts one failed pod: a node lost and replaced under the same name."""
    job = held(
        state=JobState.RUNNING, hold=False, nodes=("b42-0", "b42-1"), required_nodes=("b42-0", "b42-1")
    )
    w = World(job)
    w.add_jobset(jobset_object(suspended=False))
    w.workloads.put(workload_object(admitted=True))
    labels = child_job(owner_uid="js-uid", failed=0)["metadata"]["labels"]
    for index in (0, 1):
        w.pods.put(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"slurm-hpc-42-{index}",
                    "namespace": "default",
                    "labels": {**labels, "batch.kubernetes.io/job-completion-index": str(index)},
                },
                "status": {"phase": "Running"},
            }
        )
    w.child_jobs.put(child_job(owner_uid=failed_job_owner, failed=1))
    return w


async def test_a_lost_node_replaced_under_its_name_is_still_a_lost_node_by_its_jobs_failed_count() -> None:
    """The slurmd pod was deleted while the bridge could not act; the Job replaced it under the same
    node name. Only the Job's failed count is left of the loss: the job goes back to the queue held
    and the JobSet goes, so that it never runs on a node that lost its part of the job."""
    w = running_on_replacement_pods(failed_job_owner="js-uid")
    await w.reconcile()
    assert ("requeue_hold", 42) in w.slurm.calls
    assert ("delete", "JobSet", "slurm-hpc-42") in [c[:3] for c in w.kube.calls]


async def test_a_failed_count_of_a_deleted_predecessors_job_is_not_this_jobsets_loss() -> None:
    """The Job of a JobSet deleted before (its uid another) may linger until collected: its failures
    are not this JobSet's."""
    w = running_on_replacement_pods(failed_job_owner="old-js-uid")
    await w.reconcile()
    assert ("requeue_hold", 42) not in w.slurm.calls
    assert "delete" not in [c[0] for c in w.kube.calls]


async def test_a_job_whose_reservation_has_not_started_is_not_bridged_until_it_has() -> None:
    """The reconciler reads slurmctld's reservations for a job that asks for one (not for others)."""
    listed: list[tuple[SlurmReservation, ...]] = []
    start = datetime.now(tz=UTC) + timedelta(hours=1)
    future = (SlurmReservation(name="r1", start_time=start, flags=frozenset({"ANY_NODES"})),)

    async def list_reservations() -> tuple[SlurmReservation, ...]:
        listed.append(future)
        return future

    plain = World(held(), reservations=ReservationCache(list_reservations=list_reservations))
    await plain.reconcile()
    assert listed == []
    assert [c[:2] for c in plain.kube.calls] == [("create", "JobSet")]
    w = World(held(reservation="r1"), reservations=ReservationCache(list_reservations=list_reservations))
    result = await w.reconcile()
    assert len(listed) == 1
    assert not [c for c in w.kube.calls if c[0] == "create"]
    assert result.requeue_after is not None
    (comment,) = [c[2] for c in w.slurm.calls if c[0] == "comment"]
    assert "its reservation r1 starts at" in str(comment)


async def test_a_written_comment_is_read_back_at_once() -> None:
    """Until the job source shows the comment, a look at the job takes it for one the budget holds
    back and puts the job in the backlog that spaces every queued job's first comment."""
    start = datetime.now(tz=UTC) + timedelta(hours=1)
    future = (SlurmReservation(name="r1", start_time=start, flags=frozenset({"ANY_NODES"})),)

    async def list_reservations() -> tuple[SlurmReservation, ...]:
        return future

    w = World(held(reservation="r1"), reservations=ReservationCache(list_reservations=list_reservations))
    await w.reconcile()
    assert [c[0] for c in w.slurm.calls] == ["get_job", "comment"]
    assert w.jobs.refreshed == [42]


async def test_no_new_jobset_while_the_previous_ones_jobs_are_not_collected() -> None:
    """JobSet adopts child Jobs by its name: a JobSet made again before the old Job is collected
    would run the old Job (its old shape) as its own."""
    w = World(held())
    w.child_jobs.put(child_job(owner_uid="old-js-uid", failed=0))
    result = await w.reconcile()
    assert not [c for c in w.kube.calls if c[0] == "create"]
    assert result.requeue_after is not None
    w.child_jobs.pop(w.child_jobs.key_of(child_job(owner_uid="old-js-uid", failed=0)))
    await w.reconcile()
    assert [c[:2] for c in w.kube.calls if c[0] == "create"] == [("create", "JobSet")]


def user_held_with_its_jobset() -> World:
    """sbatch's user hold, the JobSet made, the Workload waiting for quota."""
    w = World(held(state_reason="JobHeldUser", admin_comment=""))
    w.add_jobset(jobset_object())
    w.workloads.put(workload_object(admitted=False))
    return w


async def test_a_refused_admin_hold_of_a_user_held_job_is_not_an_error() -> None:
    w = user_held_with_its_jobset()
    w.slurm.refuse_hold = True
    assert await w.reconcile() == Result()
    assert w.slurm.calls == [("hold", 42)]


def job_finished_answer() -> SlurmAPIError:
    """What 22.05 answers to an update of a job cancelled since the last poll (seen on the local
    stack in a mass cancel: ``Job has already finished``, error 2084, HTTP 500)."""
    error = api_error([ErrorEntry(2084, "Job has already finished", "slurm_update_job()")], status=500)
    assert isinstance(error, SlurmAPIError)
    return error


async def test_a_job_cancelled_before_its_hold_conversion_is_no_warning() -> None:
    """A mass cancel of queued jobs whose conversions are still under way: each is an expected
    outcome (the next poll shows the end and cleans up), logged at info, not a warning per job."""
    w = user_held_with_its_jobset()
    w.slurm.hold_error = job_finished_answer()
    with capture_logs() as logs:
        assert await w.reconcile() == Result()
    assert w.slurm.calls == [("hold", 42)]
    assert not [e for e in logs if e["log_level"] in ("warning", "error")], logs
    assert any(e["event"] == "job ended before it could be held" for e in logs)


async def test_a_job_cancelled_as_it_is_released_is_no_error() -> None:
    """A mass cancel that meets a release: 22.05 refuses the admin comment clear that follows the
    update (by scontrol: "Job has already finished"). Expected: logged at info, not a reconcile error."""
    w = World(held())
    await w.reconcile()  # queued
    w.admit_with_idle_nodes(jobset_object())
    w.slurm.release_error = JobAlreadyDone("Job has already finished", error_number=2084, source="scontrol")
    with capture_logs() as logs:
        await w.reconcile()
    assert w.slurm.calls[-1][:2] == ("pin", 42)
    assert not [e for e in logs if e["log_level"] in ("warning", "error")], logs
    assert any(e["event"] == "job ended as it was released" for e in logs)


async def test_a_job_cancelled_before_its_comment_is_no_error_and_no_event() -> None:
    events: list[str] = []

    class Recorder:
        async def event(self, regarding: Object, **kw: Any) -> None:
            events.append(kw["reason"])

    w = World(held(node_count=100000))
    w.reconciler._recorder = cast(Any, Recorder())
    w.slurm.comment_error = job_finished_answer()
    with capture_logs() as logs:
        assert await w.reconcile() == Result()
    assert [c[0] for c in w.slurm.calls] == ["get_job", "comment"]
    assert events == []  # nothing reported for a job that is gone
    assert not [e for e in logs if e["log_level"] in ("warning", "error")], logs


async def test_a_guard_hold_makes_the_job_source_poll_at_once() -> None:
    w = World(held(hold=False, state_reason="Priority"))
    await w.reconcile()
    assert w.slurm.calls == [("get_job", 42), ("hold", 42)]
    assert w.jobs.refreshed == [42]


async def test_a_refused_guard_hold_is_retried() -> None:
    w = World(held(hold=False, state_reason="Priority"))
    w.slurm.refuse_hold = True
    with pytest.raises(SlurmAPIError):
        await w.reconcile()


NAMES = ("b42-0", "b42-1")


async def test_holding_the_bridges_own_release_clears_its_pin_and_a_users_node_list_stays() -> None:
    """Evicted after the release (row 11): the hold names the job's own nodes to unpin, as decided on
    the fresh read. A job pinned by its user (``-w`` of other nodes) is held with its list kept."""
    w = World(held(hold=False, required_nodes=NAMES, features="bridge-job-42", state_reason="None"))
    w.add_jobset(jobset_object())
    w.workloads.put(workload_object(admitted=False))
    await w.reconcile()
    assert w.slurm.calls == [("get_job", 42), ("hold", 42)]
    assert w.slurm.unpinned == [(42, NAMES)]

    users = World(held(hold=False, required_nodes=("c1", "c2"), state_reason="Priority"))
    users.add_jobset(jobset_object())
    users.workloads.put(workload_object(admitted=False))
    await users.reconcile()
    assert users.slurm.calls == [("get_job", 42), ("hold", 42)]
    assert users.slurm.unpinned == []


# --- the JobSet's creation: no fresh read, independent actions at once ----------------------------


async def test_a_user_held_job_gets_its_jobset_then_the_admin_hold_without_a_fresh_read() -> None:
    w = World(held(state_reason="JobHeldUser", admin_comment=""))
    assert await w.reconcile() == Result()
    assert w.slurm.calls == []  # no GET job/42, and no hold before the JobSet exists
    assert w.kube.calls == [("create", "JobSet", "slurm-hpc-42")]
    w.add_jobset(jobset_object())
    assert await w.reconcile() == Result()
    assert w.slurm.calls == [("hold", 42)]
    assert w.slurm.admin_comments == [(42, "k8s-bridge: held")]  # with the hold: the bridge's mark
    # No poll at once for the conversion: nothing waits on seeing it, and in a burst of held jobs
    # slurmctld would list every job back to back.
    assert w.jobs.refreshed == []
    assert w.metric("k8s_bridge_slurm_actions_total", action="convert_hold", result="ok") == 1
    assert w.reconciler.phases == {"hpc/42": "queued"}


async def test_a_failed_create_converts_no_hold() -> None:
    """Else an admin hold without a JobSet and without the bridge's mark: an administrator's, to the
    bridge, and the job would never be bridged."""
    w = World(held(state_reason="JobHeldUser", admin_comment=""))
    w.kube.create_error = ApiError(500, "InternalError", "etcd timed out")
    with pytest.raises(ApiError, match="etcd timed out"):
        await w.reconcile()
    assert w.slurm.calls == []
    assert w.metric("k8s_bridge_slurm_actions_total", action="create_jobset", result="error") == 1


async def test_slurmrestd_down_during_the_hold_conversion_retries_calmly() -> None:
    w = user_held_with_its_jobset()
    w.slurm.hold_error = SlurmUnavailable("connection refused")
    assert await w.reconcile() == Result(requeue_after=SLURM_RETRY)


async def test_a_job_that_ended_since_the_poll_gets_a_jobset_that_the_next_look_deletes() -> None:
    """The cache still shows the job user-held; slurmctld has finished it. The hold conversion finds it
    gone (not an error), and the next reconcile, on the finished job, deletes the new JobSet."""
    w = World(held(state_reason="JobHeldUser"))
    w.slurm.hold_error = InvalidJobId("gone", error_number=2017)
    assert await w.reconcile() == Result()
    assert w.kube.calls == [("create", "JobSet", "slurm-hpc-42")]
    w.add_jobset(jobset_object())
    w.jobs.jobs[42] = held(state=JobState.CANCELLED, hold=False)
    w.kube.calls.clear()
    w.slurm.calls.clear()
    await w.reconcile()
    assert [c[:3] for c in w.kube.calls] == [
        ("delete", "JobSet", "slurm-hpc-42"),
        ("patch", "JobSet", "slurm-hpc-42"),
    ]
    assert w.slurm.calls == []  # never admitted: no node of it can exist
    assert w.reconciler.phases == {"hpc/42": "finishing"}


async def test_a_comment_is_cleared_only_if_the_fresh_read_still_shows_the_bridges() -> None:
    """The cache shows the bridge's old reason; the user has written their own comment since."""
    old = "k8s-bridge: held: too many nodes"
    w = World(held(comment=old))
    w.slurm.jobs = Jobs(held(comment="my own note"))
    await w.reconcile()
    assert w.slurm.calls == [("get_job", 42)]
    assert w.kube.calls == [("create", "JobSet", "slurm-hpc-42")]
    # The fresh read stands for the job until the cache moves: nothing cleared on a later look.
    w.slurm.calls.clear()
    await w.reconcile()
    assert ("comment", 42, "") not in w.slurm.calls
    # Had the fresh read still shown the bridge's reason, it would have been cleared.
    w = World(held(comment=old))
    await w.reconcile()
    assert w.slurm.calls == [("get_job", 42), ("comment", 42, "")]


# --- a held job changed by its user (row 16) ---------------------------------------------------------


async def test_the_jobset_of_a_job_changed_by_its_user_is_replaced_after_a_fresh_read() -> None:
    """The JobSet was made for two nodes (its recorded shape); the user asked for three since."""
    w = World(held(node_count=3, cpus=3))
    w.add_jobset(jobset_object())
    w.workloads.put(workload_object(admitted=False))
    await w.reconcile()
    assert w.slurm.calls == [("get_job", 42)]  # confirmed; never admitted, so no node call
    assert [c[:3] for c in w.kube.calls] == [
        ("delete", "JobSet", "slurm-hpc-42"),
        ("patch", "JobSet", "slurm-hpc-42"),
    ]
    assert w.reconciler.phases == {"hpc/42": "queued"}


async def test_a_job_grown_as_a_fresh_read_shows_gets_its_new_size_though_the_cache_is_behind() -> None:
    """A comment's confirmation reads the job fresh and finds it grown (two nodes to three): the
    JobSet made for two goes. The next look, with the JobSet gone and the cache still a poll behind,
    makes the JobSet of three, not of two again; once the cache moves, it stands for the job."""
    w = World(held())
    grown = held(node_count=3, cpus=3)
    w.slurm.jobs = Jobs(grown)
    w.add_jobset(jobset_object())
    pending = workload_object(admitted=False)
    pending["status"]["conditions"] = [
        {
            "type": "QuotaReserved",
            "status": "False",
            "reason": "Pending",
            "message": "insufficient unused quota",
        }
    ]
    w.workloads.put(pending)
    await w.reconcile()
    assert w.slurm.calls == [("get_job", 42)]
    assert [c[:3] for c in w.kube.calls] == [
        ("delete", "JobSet", "slurm-hpc-42"),
        ("patch", "JobSet", "slurm-hpc-42"),
    ]
    for store in (w.jobsets, w.workloads):
        for obj in store.list():
            store.pop(store.key_of(obj))
    w.kube.calls.clear()
    w.kube.objects.clear()
    await w.reconcile()
    assert w.kube.calls == [("create", "JobSet", "slurm-hpc-42")]
    assert parallelism(w.kube.objects[("JobSet", "k8s-bridge", "slurm-hpc-42")]) == 3
    # The cache moves (here: back to what it was): from then on it is the job again.
    w.jobs.jobs[42] = held()
    w.kube.objects.clear()
    await w.reconcile()
    assert parallelism(w.kube.objects[("JobSet", "k8s-bridge", "slurm-hpc-42")]) == 2


def parallelism(jobset: Object) -> int:
    (replicated,) = jobset["spec"]["replicatedJobs"]
    return int(replicated["template"]["spec"]["parallelism"])


async def test_a_jobset_is_kept_when_the_fresh_read_shows_the_shape_it_was_made_for() -> None:
    """The cache is a poll behind the read the JobSet was made from: it still shows the job before its
    user's change. The fresh read shows the JobSet's own shape, so nothing is deleted."""
    w = World(held(node_count=3, cpus=3))
    w.slurm.jobs = Jobs(held())
    w.add_jobset(jobset_object())
    w.workloads.put(workload_object(admitted=False))
    await w.reconcile()
    assert w.slurm.calls == [("get_job", 42)]
    assert w.kube.calls == []


# --- cleanup: in order, and no calls for nodes that cannot exist -------------------------------------


async def test_a_failed_node_delete_keeps_the_finalizer() -> None:
    w = World(held(state=JobState.CANCELLED, hold=False))
    w.add_jobset(jobset_object(suspended=False))
    w.slurm.delete_error = SlurmAPIError("slurmctld busy", error_number=9999)
    with pytest.raises(SlurmAPIError):
        await w.reconcile()
    assert [c[0] for c in w.kube.calls] == ["delete"]  # the JobSet; never the finalizer patch


async def test_a_job_cancelled_before_admission_costs_no_node_calls() -> None:
    w = World(held(state=JobState.CANCELLED, hold=False))
    w.add_jobset(jobset_object())
    w.workloads.put(workload_object(admitted=False))
    await w.reconcile()
    assert w.slurm.calls == []
    assert [c[:3] for c in w.kube.calls] == [
        ("delete", "JobSet", "slurm-hpc-42"),
        ("patch", "JobSet", "slurm-hpc-42"),
    ]
    # No pod ever: nothing to wait for in the foreground, the JobSet goes with the finalizer.
    assert w.kube.calls[0][3] == "Background"


async def test_the_finalizer_goes_with_the_deletes_answer_without_reading_the_jobset_again() -> None:
    """Two calls per cancelled queued job instead of three: the delete's answer carries the
    resourceVersion the delete made, which the finalizer's patch needs."""
    w = World(held(state=JobState.CANCELLED, hold=False))
    w.add_jobset(jobset_object())
    w.workloads.put(workload_object(admitted=False))
    w.kube.delete_answers = True
    before = w.kube.gets
    await w.reconcile()
    assert [c[0] for c in w.kube.calls] == ["delete", "patch"]
    assert w.kube.gets == before  # no GET of the JobSet
    patch = w.kube.calls[1][3]
    assert patch["metadata"] == {"finalizers": [], "resourceVersion": "8"}  # the delete's version


async def test_without_an_answer_to_the_delete_the_jobset_is_read_before_the_finalizer_goes() -> None:
    w = World(held(state=JobState.CANCELLED, hold=False))
    w.add_jobset(jobset_object())
    w.workloads.put(workload_object(admitted=False))
    before = w.kube.gets
    await w.reconcile()
    assert [c[0] for c in w.kube.calls] == ["delete", "patch"]
    assert w.kube.gets == before + 1


async def test_deleted_nodes_are_not_deleted_again_on_every_event_of_the_cleanup() -> None:
    """Cancelled while its pods run: the nodes (one seen, one only recorded) are deleted once; the
    events of the pods terminating reconcile again meanwhile and delete nothing, before the next
    whole node list and after it; a list begun after the deletion that still shows the seen node
    has it deleted again."""
    w = World(held(state=JobState.CANCELLED, hold=False))
    w.add_jobset(jobset_object(suspended=False, finalizers=[FINALIZER, "foregroundDeletion"]))
    w.workloads.put(workload_object(admitted=True))
    w.nodes.put(node_object(idle("b42-0")))  # b42-1 is only recorded on the JobSet
    w.node_lists.list_begun()  # in flight during the deletion: begun before it
    await w.reconcile()

    def deletes() -> list[str]:
        return [c[1] for c in w.slurm.calls if c[0] == "delete_node"]

    assert deletes() == ["b42-0", "b42-1"]
    await w.reconcile()
    w.node_lists.list_stored()  # begun before the deletion: it proves nothing
    await w.reconcile()
    assert deletes() == ["b42-0", "b42-1"]
    w.node_lists.list_begun()
    w.node_lists.list_stored()  # begun after the deletion, and it still shows b42-0
    await w.reconcile()
    assert deletes() == ["b42-0", "b42-1", "b42-0"]
    w.nodes.pop("b42-0")  # the next list shows it gone
    w.node_lists.list_begun()
    w.node_lists.list_stored()
    await w.reconcile()
    await w.reconcile()
    assert deletes() == ["b42-0", "b42-1", "b42-0"]


async def test_drained_nodes_are_not_drained_again_on_every_event_of_the_cleanup() -> None:
    """Cancelled and still COMPLETING on its nodes (which are not deleted before it has completed):
    each node is drained once, whatever the events meanwhile; a whole list begun after the drain
    that still shows a node undrained has it drained again."""
    w = World(held(state=JobState.CANCELLED, hold=False, state_flags=frozenset({"COMPLETING"})))
    w.add_jobset(jobset_object(suspended=False, finalizers=[FINALIZER, "foregroundDeletion"]))
    w.workloads.put(workload_object(admitted=True))
    for name in ("b42-0", "b42-1"):
        w.nodes.put(node_object(idle(name)))
    w.node_lists.list_begun()  # in flight during the drain: begun before it
    await w.reconcile()

    def drains() -> list[str]:
        return [c[1] for c in w.slurm.calls if c[0] == "drain"]

    assert drains() == ["b42-0", "b42-1"]
    await w.reconcile()
    w.node_lists.list_stored()  # begun before the drain: it proves nothing
    await w.reconcile()
    assert drains() == ["b42-0", "b42-1"]
    w.node_lists.list_begun()
    w.node_lists.list_stored()  # begun after the drain, and it still shows both undrained
    await w.reconcile()
    assert drains() == ["b42-0", "b42-1", "b42-0", "b42-1"]


async def test_a_removed_finalizer_is_not_removed_again_while_the_cache_still_shows_it() -> None:
    """The JobSet's deletion and its finalizer's removal are done; until the informer shows the
    JobSet gone, the events of its end reconcile the job again and write nothing (each try was a read
    of the JobSet, found gone, before)."""
    w = World(held(state=JobState.CANCELLED, hold=False))
    w.add_jobset(jobset_object())
    w.workloads.put(workload_object(admitted=False))
    await w.reconcile()
    assert [c[0] for c in w.kube.calls] == ["delete", "patch"]
    deleting = jobset_object(deleting=True)
    w.jobsets.put(deleting)  # the delete's echo; the patch's is still on its way
    calls, gets = len(w.kube.calls), w.kube.gets
    await w.reconcile()
    await w.reconcile()
    assert (len(w.kube.calls), w.kube.gets) == (calls, gets)


async def test_a_jobset_that_may_have_pods_is_deleted_in_the_foreground() -> None:
    """Its pods may still run slurmd: the JobSet, with the node names recorded on it, stays until the
    garbage collector has deleted them."""
    w = World(held(state=JobState.CANCELLED, hold=False))
    w.add_jobset(jobset_object(suspended=False))
    w.workloads.put(workload_object(admitted=True))
    await w.reconcile()
    assert w.kube.calls[0] == ("delete", "JobSet", "slurm-hpc-42", "Foreground")


async def test_a_node_registered_after_the_last_node_poll_is_deleted_before_the_finalizer_goes() -> None:
    """Admitted, pods running, the node source has not seen the nodes yet, the job is cancelled."""
    w = World(held(state=JobState.CANCELLED, hold=False))
    w.add_jobset(jobset_object(suspended=False))
    w.workloads.put(workload_object(admitted=True))
    await w.reconcile()
    assert w.slurm.calls == [("delete_node", "b42-0"), ("delete_node", "b42-1")]
    assert [c[0] for c in w.kube.calls] == ["delete", "patch"]


# --- workers ---------------------------------------------------------------------------------------


def test_the_default_worker_count_is_the_measured_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reconciles wait on the API server and slurmrestd, not on the CPU: 16 workers, from the sweep in
    experiments/001-slurm-bridge-throughput (4 made the bridge the bottleneck; more than 16 added
    nothing measurable). The flag's default and the in-process default agree."""
    monkeypatch.delenv("K8S_BRIDGE_MAX_CONCURRENT_RECONCILES", raising=False)
    _, settings, _ = parse_args(["--config", "site"])
    assert settings.max_concurrent_reconciles == 16
    assert Settings(config="site").max_concurrent_reconciles == 16


# --- release priority --------------------------------------------------------------------------


async def test_a_job_waiting_for_its_nodes_has_its_events_ranked_first() -> None:
    """Only while the job is admitted and waiting for its nodes: its next reconcile may be the release."""
    w = World(held())
    waiting = Request("hpc", "42")
    assert w.reconciler.release_priority(waiting) == 0  # not tracked yet
    await w.reconcile()
    assert w.reconciler.phases == {"hpc/42": "queued"}
    assert w.reconciler.release_priority(waiting) == 0
    w.add_jobset(jobset_object())
    w.workloads.put(workload_object(admitted=True))
    w.nodes.put(node_object(idle("b42-0")))
    await w.reconcile()  # 1 of 2 nodes
    assert w.reconciler.phases == {"hpc/42": "admitted"}
    assert w.reconciler.release_priority(waiting) == RELEASE_PRIORITY > 0
    assert w.reconciler.release_priority(Request("hpc", "43")) == 0
    assert w.reconciler.release_priority(Request("other", "42")) == 0
    w.nodes.put(node_object(idle("b42-1")))
    await w.reconcile()  # pinned and released
    assert w.reconciler.phases == {"hpc/42": "releasing"}
    assert w.reconciler.release_priority(waiting) == 0


async def test_the_look_again_while_waiting_for_nodes_is_not_ranked_first() -> None:
    """The node event carries the priority; the safety-net look runs at 0, whatever this reconcile
    was handed out with (a requeue keeps that unless the result names one)."""
    w = World(held())
    w.add_jobset(jobset_object())
    w.workloads.put(workload_object(admitted=True))
    w.nodes.put(node_object(idle("b42-0")))
    assert await w.reconcile() == Result(requeue_after=WAIT_FOR_NODES, priority=0)
    assert w.reconciler.phases == {"hpc/42": "admitted"}


class DiscoveryOnly:
    """A client that only resolves resources: enough to wire the bridge without running it."""

    async def resource(self, api_version: str, kind: str) -> Resource:
        group, _, version = api_version.rpartition("/")
        return Resource(group=group, version=version, plural=kind.lower() + "s", kind=kind, namespaced=True)


async def test_the_bridge_ranks_node_events_of_waiting_jobs_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """The program wires the node source's watch with ``release_priority``, and no other watch."""
    watches: list[tuple[object, Any]] = []
    original = Controller.watch

    def recording(self: Controller, source: Any, **options: Any) -> None:
        watches.append((source, options.get("priority_of")))
        original(self, source, **options)

    async def no_run(self: Manager) -> None:
        return None

    monkeypatch.setattr(Controller, "watch", recording)
    monkeypatch.setattr(Manager, "run", no_run)
    settings = Settings(
        config="site", mixing_controller=False, metrics_bind_address="0", health_probe_bind_address="0"
    )
    bridge = SlurmBridge(settings, registry=CollectorRegistry(), handle_signals=False)
    await bridge._run(cast(Client, DiscoveryOnly()))
    reconciler = bridge.reconciler
    assert reconciler is not None
    ranked = [(source, priority_of) for source, priority_of in watches if priority_of is not None]
    assert [type(source) for source, _ in ranked] == [SlurmNodeSource]
    reconciler.phases["hpc/42"] = Phase.ADMITTED
    assert ranked[0][1](Request("hpc", "42")) == RELEASE_PRIORITY
    assert ranked[0][1](Request("hpc", "43")) == 0


async def test_max_bridged_jobs_counts_only_this_clusters_jobsets() -> None:
    """One bridge per Slurm cluster may share the JobSet informer's namespace with another's."""
    one = WorkloadMixingSpec.model_validate({"slurm": slurm_spec(limits={"maxBridgedJobs": 1})})
    w = World(held(), spec=one)
    other = jobset_object()
    other["metadata"]["name"] = "slurm-other-42"
    other["metadata"]["labels"]["bridge.k8s-bridge.io/slurm-cluster"] = "other"
    w.jobsets.put(other)
    await w.reconcile()
    assert w.kube.calls == [("create", "JobSet", "slurm-hpc-42")]
    w.kube.calls.clear()
    w.jobs.jobs[43] = held(job_id=43)
    w.add_jobset(jobset_object())  # job 42's: this cluster's one JobSet
    await w.reconcile("43")
    assert w.kube.calls == []  # the limit is reached for hpc


async def test_the_bridged_jobs_are_counted_again_only_when_a_job_gains_or_loses_its_jobset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A count over every JobSet at each reconcile made a deep queue cost in proportion to its square;
    counted again at every JobSet update (each status change of each JobSet), still in proportion."""
    one = WorkloadMixingSpec.model_validate({"slurm": slurm_spec(limits={"maxBridgedJobs": 5})})
    w = World(held(), spec=one)
    w.add_jobset(jobset_object())
    counts = 0
    index_values = Store.index_values

    def counting(store: Store, index: str) -> list[str]:
        nonlocal counts
        counts += store is w.jobsets
        return index_values(store, index)

    monkeypatch.setattr(Store, "index_values", counting)
    await w.reconcile()
    await w.reconcile()
    assert counts == 1
    w.jobsets.put(jobset_object(suspended=False))  # an update of a JobSet the count knows
    await w.reconcile()
    assert counts == 1
    other = translate(held(job_id=43), SPEC)
    assert isinstance(other, Translation)
    w.jobsets.put(copy.deepcopy(dict(other.manifest)))  # another job's JobSet
    await w.reconcile()
    assert counts == 2
    assert w.reconciler.observer._bridged_jobs("hpc") == 2


async def test_the_hold_is_converted_once_though_the_source_shows_it_a_poll_later() -> None:
    """The conversion does not poll at once: every event of the queued job until the next poll would
    convert again, one write to slurmctld each."""
    w = user_held_with_its_jobset()
    await w.reconcile()
    await w.reconcile()
    w.slurm.refuse_hold = True
    await w.reconcile()
    assert w.slurm.calls == [("hold", 42)]


async def test_node_changes_poll_the_node_source_at_once() -> None:
    """Else it shows the deleted nodes until its next poll, and each event of the job meanwhile
    deletes them again (an scontrol call each on 22.05)."""
    w = World(held(state=JobState.CANCELLED, hold=False))
    w.add_jobset(jobset_object())
    for name in ("b42-0", "b42-1"):
        w.nodes.put(node_object(idle(name)))
    await w.reconcile()
    assert ("delete_node", "b42-0") in w.slurm.calls
    assert w.node_polls.count == 1  # after the delete; a drain needs no poll of its own
    w.node_polls.count = 0
    for store in (w.nodes, w.jobsets):
        for obj in store.list():
            store.pop(store.key_of(obj))
    await w.reconcile()  # nothing left about nodes: no poll
    assert w.node_polls.count == 0


async def test_a_running_jobs_nodes_are_drained_once_without_a_node_poll() -> None:
    """Kept for the job while it runs: drained once (the node source shows it a poll later, and no
    event meanwhile drains again), with no node poll at once (nothing waits on seeing it)."""
    alive = held(
        state=JobState.RUNNING, hold=False, state_reason="None", nodes=("b42-0", "b42-1"),
        required_nodes=("b42-0", "b42-1"), features="bridge-job-42",
    )  # fmt: skip
    w = World(alive)
    w.admit_with_idle_nodes(jobset_object())
    await w.reconcile()
    await w.reconcile()
    assert w.slurm.calls == [("drain", "b42-0"), ("drain", "b42-1")]
    assert w.node_polls.count == 0


async def test_a_foreground_deletion_with_running_pods_deletes_their_jobs_in_the_background() -> None:
    """The job was cancelled and its JobSet deleted in the foreground, but a pod Kueue started in the
    freed quota still runs: its Job is deleted in the background (the pod then goes as an orphan),
    and once no pod is left the JobSet is deleted again in the background."""
    w = World()  # the job is gone from slurmctld
    w.add_jobset(jobset_object(deleting=True, suspended=False, finalizers=["foregroundDeletion"]))
    w.workloads.put(workload_object(admitted=True))
    labels = child_job(owner_uid="js-uid", failed=0)["metadata"]["labels"]
    meta = {"name": "slurm-hpc-42-0", "namespace": "default", "labels": dict(labels)}
    pod = {"apiVersion": "v1", "kind": "Pod", "status": {"phase": "Running"}, "metadata": meta}
    w.pods.put(pod)
    w.child_jobs.put(child_job(owner_uid="js-uid", failed=0))
    await w.reconcile()
    assert ("delete", "Job", "slurm-hpc-42-slurmd-js-uid", "Background") in w.kube.calls
    assert ("delete", "JobSet", "slurm-hpc-42", "Background") not in w.kube.calls
    w.pods.pop(w.pods.key_of(pod))
    await w.reconcile()
    assert ("delete", "JobSet", "slurm-hpc-42", "Background") in w.kube.calls


async def test_an_orphaned_pod_deleted_is_not_deleted_again_while_the_cache_shows_it_undeleted() -> None:
    """The events that follow the deletion reconcile the job before the pod's own echo: no second
    delete of it."""
    w = World()  # the job is gone from slurmctld
    w.add_jobset(jobset_object(deleting=True, suspended=False, finalizers=["foregroundDeletion"]))
    w.workloads.put(workload_object(admitted=True))
    labels = child_job(owner_uid="js-uid", failed=0)["metadata"]["labels"]
    meta = {"name": "slurm-hpc-42-0", "namespace": "default", "labels": dict(labels)}
    w.pods.put({"apiVersion": "v1", "kind": "Pod", "status": {"phase": "Running"}, "metadata": meta})
    await w.reconcile()
    await w.reconcile()

    def pod_deletes() -> int:
        return sum(1 for c in w.kube.calls if c[:2] == ("delete", "Pod"))

    assert pod_deletes() == 1


@pytest.mark.parametrize(
    ("finalizers", "deleted_again"),
    [(["foregroundDeletion"], True), ([], False)],
    ids=["waiting on the collector for its pods", "going at once"],
)
async def test_a_child_job_deleted_in_the_foreground_is_deleted_again_in_the_background(
    finalizers: list[str], deleted_again: bool
) -> None:
    """The collector reached the JobSet's Job and deleted it in the foreground too, so the Job waits
    on the collector's retries for its pods: deleted again in the background, it goes at once. A Job
    being deleted otherwise is left alone."""
    w = World()  # the job is gone from slurmctld
    w.add_jobset(jobset_object(deleting=True, suspended=False, finalizers=["foregroundDeletion"]))
    w.workloads.put(workload_object(admitted=True))
    job = child_job(owner_uid="js-uid", failed=0)
    job["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z", finalizers=finalizers)
    w.child_jobs.put(job)
    labels = job["metadata"]["labels"]
    meta = {"name": "slurm-hpc-42-0", "namespace": "default", "labels": dict(labels)}
    w.pods.put({"apiVersion": "v1", "kind": "Pod", "status": {"phase": "Running"}, "metadata": meta})
    await w.reconcile()
    delete = ("delete", "Job", "slurm-hpc-42-slurmd-js-uid", "Background")
    assert (delete in w.kube.calls) is deleted_again
    # Its pod is an orphan the collector deletes in its own time: deleted by the bridge once no Job
    # of the JobSet is left to make it again.
    pod_delete = ("delete", "Pod", "slurm-hpc-42-0", None)
    assert (pod_delete in w.kube.calls) is not deleted_again
    if deleted_again:
        # Before the informer shows the Job's deletion: the Job is not deleted a second time, and it
        # is going, so it makes no pod again: its pod goes.
        await w.reconcile()
        assert w.kube.calls.count(delete) == 1
        assert pod_delete in w.kube.calls


def test_a_job_that_did_not_change_is_not_translated_again() -> None:
    """The job source hands out the same SlurmJob while slurmctld reports the job unchanged: a queued
    job looked at again keeps its translation; a changed job or configuration is translated anew."""
    w = World()
    job = held()
    first, _ = w.reconciler.observer.observe(42, job)
    again, _ = w.reconciler.observer.observe(42, job)
    assert isinstance(first.translation, Translation)
    assert again.translation is first.translation
    changed, _ = w.reconciler.observer.observe(42, job.model_copy(update={"node_count": 3}))
    assert changed.translation is not first.translation
    assert isinstance(changed.translation, Translation)
    assert len(changed.translation.node_names) == 3
    gone, _ = w.reconciler.observer.observe(42, None)
    assert gone.translation is None
    back, _ = w.reconciler.observer.observe(42, job)
    assert back.translation is not first.translation
    assert back.translation == first.translation


def test_phase_counts_and_the_jobs_waiting_for_nodes_follow_every_phase_change() -> None:
    # Kept as phases change (not counted over every tracked job at each change: with 1,000 jobs
    # that count was a tenth of the bridge's profiled time while JobSets were being made).
    w = World(held())
    track = w.reconciler._track_phase  # the one place phases change
    track("hpc/1", Phase.QUEUED)
    track("hpc/2", Phase.ADMITTED)
    track("hpc/3", Phase.ADMITTED)
    assert w.reconciler.phase_counts() == {"queued": 1, "admitted": 2}
    assert w.reconciler.waiting_for_nodes == {"hpc/2", "hpc/3"}
    track("hpc/2", Phase.RELEASING)
    track("hpc/3", Phase.ADMITTED)  # the same phase again: counted once
    track("hpc/1", None)
    assert w.reconciler.phase_counts() == {"admitted": 1, "releasing": 1}
    assert w.reconciler.waiting_for_nodes == {"hpc/3"}
    assert w.reconciler.phases == {"hpc/2": Phase.RELEASING, "hpc/3": Phase.ADMITTED}
    track("hpc/3", None)
    track("hpc/2", None)
    assert w.reconciler.phase_counts() == {}
    assert w.reconciler.waiting_for_nodes == set()
