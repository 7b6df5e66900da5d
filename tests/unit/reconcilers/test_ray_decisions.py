"""The Ray reconciler's state table: each row of ``decide`` (reached through the reconciler's own
``observe`` over filled caches), the invariants over every combination, and the executor's actions.
"""

from __future__ import annotations

import copy
import datetime as dt
from dataclasses import dataclass, field, replace
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.admission import JOB_UID_LABEL
from bridge.api.mixing import WorkloadMixingSpec
from bridge.runtime.cache import Store
from bridge.runtime.client import Client
from bridge.runtime.controller import Request
from reconcilers.ray import (
    ANNOTATION_RAY_JOB_ID,
    INDEX_JOB_UID,
    INDEX_RAYCLUSTER,
    INDEX_RAYJOB_KEY,
    INDEX_RAYJOB_UID,
    START_TIMEOUT_DEFAULT,
    AnnotateJobSet,
    CancelInRay,
    CreateJobSet,
    Decision,
    DeleteJobSet,
    Emit,
    Observed,
    Phase,
    RayReconciler,
    RemoveFinalizer,
    cluster_start_timeout,
    decide,
    jobset_rayjob_keys,
    jobset_rayjob_name_keys,
    rayjob_cluster_keys,
    workload_uid_keys,
)
from tests.fixtures.ray_objects import (
    CLUSTER,
    MIXING,
    NAMESPACE,
    RAYJOB_UID,
    gated,
    make_spec,
    raycluster,
    rayjob,
)
from translators.ray import ANNOTATION_WORKERS, FINALIZER, Translation, translate

NOW = 1_800_000_000.0
JOBSET_UID = "5b0c3f0e-3d9e-4f7e-9d55-0c9a7d1e2f10"


@dataclass
class _Config:
    spec: WorkloadMixingSpec | None


def _iso(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _gated_job(
    *, status: str = "", deleting: bool = False, finalizer: bool = True, **fields: Any
) -> dict[str, Any]:
    job = gated(rayjob(**fields))
    meta = job["metadata"]
    meta["creationTimestamp"] = _iso(NOW - 10)
    meta["resourceVersion"] = "7"
    if finalizer:
        meta["finalizers"] = [FINALIZER]
    if deleting:
        meta["deletionTimestamp"] = _iso(NOW - 1)
    if status:
        job["status"] = {"jobStatus": status, "jobId": "train-abc12", "jobDeploymentStatus": "Running"}
    return job


def _jobset_for(job: dict[str, Any], *, created: float = NOW - 5) -> dict[str, Any]:
    result = translate(rayjob=job, raycluster=raycluster(), spec=make_spec(), mixing_name=MIXING)
    assert isinstance(result, Translation), result
    jobset = copy.deepcopy(result.manifest)
    jobset["metadata"]["uid"] = JOBSET_UID
    jobset["metadata"]["creationTimestamp"] = _iso(created)
    job_id = (job.get("status") or {}).get("jobId")
    if job_id:
        jobset["metadata"]["annotations"][ANNOTATION_RAY_JOB_ID] = job_id
    return jobset


def _workload(condition: str, *, reason: str = "") -> dict[str, Any]:
    conditions = [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": ""}]
    if condition in ("Admitted", "Evicted"):
        conditions.append({"type": "Admitted", "status": "True", "reason": "Admitted", "message": ""})
    if condition == "Evicted":
        conditions.append(
            {"type": "Evicted", "status": "True", "reason": reason or "Preempted", "message": "x"}
        )
        conditions.append({"type": "Preempted", "status": "True", "reason": "InClusterQueue", "message": "x"})
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": "jobset-ray-train-1",
            "namespace": NAMESPACE,
            "uid": "wl-1",
            "labels": {JOB_UID_LABEL: JOBSET_UID},
            "ownerReferences": [{"kind": "JobSet", "name": "x", "uid": JOBSET_UID}],
        },
        "spec": {"active": True},
        "status": {"conditions": conditions},
    }


@dataclass
class World:
    """The caches one reconcile reads."""

    rayjobs: list[dict[str, Any]] = field(default_factory=list)
    clusters: list[dict[str, Any]] = field(default_factory=lambda: [raycluster()])
    jobsets: list[dict[str, Any]] = field(default_factory=list)
    workloads: list[dict[str, Any]] = field(default_factory=list)
    spec: WorkloadMixingSpec | None = field(default_factory=make_spec)

    def reconciler(self, client: Any = None, **options: Any) -> RayReconciler:
        stores = {
            "rayjobs": Store(indexers={INDEX_RAYCLUSTER: rayjob_cluster_keys}),
            "rayclusters": Store(),
            "jobsets": Store(
                indexers={INDEX_RAYJOB_UID: jobset_rayjob_keys, INDEX_RAYJOB_KEY: jobset_rayjob_name_keys}
            ),
            "workloads": Store(indexers={INDEX_JOB_UID: workload_uid_keys}),
        }
        for name, objects in (
            ("rayjobs", self.rayjobs),
            ("rayclusters", self.clusters),
            ("jobsets", self.jobsets),
            ("workloads", self.workloads),
        ):
            for obj in objects:
                stores[name].put(copy.deepcopy(obj))
        return RayReconciler(
            client=cast(Client, client),
            ray_jobs=options.pop("ray_jobs", None) or _NoRay(),
            config=_Config(self.spec),
            mixing_name=MIXING,
            wall_clock=lambda: NOW,
            rayjobs=stores["rayjobs"],
            rayclusters=stores["rayclusters"],
            jobsets=stores["jobsets"],
            workloads=stores["workloads"],
            **options,
        )

    def observe(self, name: str = "train") -> Observed:
        return self.reconciler().observe(NAMESPACE, name)

    def decide(self, name: str = "train", **changes: Any) -> Decision:
        observed = self.observe(name)
        if changes:
            observed = replace(observed, **changes)
        return decide(observed)


class _NoRay:
    async def job_finished(self, *, namespace: str, cluster: str, job_id: str) -> bool:
        raise AssertionError("Ray asked without need")

    async def cancel_pending(self, *, namespace: str, cluster: str, job_id: str) -> None:
        raise AssertionError("cancel without need")


def kinds(decision: Decision) -> list[type]:
    return [type(a) for a in decision.actions]


# --- rows --------------------------------------------------------------------------------------


def test_no_rayjob_no_jobset_is_nothing() -> None:
    decision = World().decide()
    assert decision.actions == ()
    assert decision.phase is None


def test_an_orphan_jobset_is_deleted_and_its_ray_job_cancelled() -> None:
    job = _gated_job(status="PENDING")
    decision = World(jobsets=[_jobset_for(job)]).decide()
    assert kinds(decision) == [CancelInRay, DeleteJobSet]
    cancel = decision.actions[0]
    assert isinstance(cancel, CancelInRay)
    assert (cancel.job_id, cancel.cluster) == ("train-abc12", CLUSTER)


def test_an_orphan_jobset_of_a_job_never_submitted_is_deleted() -> None:
    assert kinds(World(jobsets=[_jobset_for(_gated_job())]).decide()) == [DeleteJobSet]


def test_the_ray_job_id_is_recorded_on_the_jobset() -> None:
    job = _gated_job(status="PENDING")
    created = World(rayjobs=[job]).decide().actions[0]
    assert isinstance(created, CreateJobSet)
    assert created.manifest["metadata"]["annotations"][ANNOTATION_RAY_JOB_ID] == "train-abc12"
    decision = World(rayjobs=[job], jobsets=[_jobset_for(_gated_job())]).decide()
    assert kinds(decision) == [AnnotateJobSet]
    assert decision.phase is Phase.QUEUED


def test_a_gated_rayjob_without_jobset_gets_one_for_kueue() -> None:
    job = _gated_job(status="PENDING")
    decision = World(rayjobs=[job]).decide()
    assert kinds(decision) == [CreateJobSet]
    assert decision.phase is Phase.QUEUED
    manifest = decision.actions[0].manifest  # type: ignore[attr-defined]
    assert manifest["spec"]["suspend"] is True


def test_a_rayjob_not_yet_submitted_is_bridged_too() -> None:
    assert kinds(World(rayjobs=[_gated_job()]).decide()) == [CreateJobSet]


def test_an_untranslatable_rayjob_stays_gated_with_an_event() -> None:
    job = _gated_job(annotations={ANNOTATION_WORKERS: "100000"})
    job["metadata"]["annotations"].update(gated(rayjob())["metadata"]["annotations"])
    decision = World(rayjobs=[job]).decide()
    assert kinds(decision) == [Emit]
    assert decision.actions[0].reason == "CannotBridge"  # type: ignore[attr-defined]
    assert decision.phase is Phase.HELD


def test_no_configuration_means_wait() -> None:
    decision = World(rayjobs=[_gated_job()], spec=None).decide()
    assert decision.actions == ()
    assert decision.phase is Phase.HELD


def test_the_bridged_jobs_limit_holds_new_jobsets_back() -> None:
    other = _gated_job(name="other", uid="8d0e2a53-0000-4000-8000-000000000001")
    spec = make_spec(limits={"maxBridgedJobs": 1})
    decision = World(rayjobs=[_gated_job(), other], jobsets=[_jobset_for(other)], spec=spec).decide()
    assert (decision.actions, decision.phase) == ((), Phase.HELD)
    assert decision.requeue_after


def test_queued_jobset_waits_for_kueue_and_looks_again_before_the_start_timeout() -> None:
    job = _gated_job(status="PENDING")
    decision = World(rayjobs=[job], jobsets=[_jobset_for(job, created=NOW - 100)]).decide()
    assert decision.actions == ()
    assert decision.phase is Phase.QUEUED
    assert decision.requeue_after == pytest.approx(0.8 * START_TIMEOUT_DEFAULT - 100)


def test_a_queue_wait_near_the_heads_start_timeout_is_warned_about() -> None:
    job = _gated_job(status="PENDING")
    decision = World(rayjobs=[job], jobsets=[_jobset_for(job, created=NOW - 800)]).decide()
    assert kinds(decision) == [Emit]
    assert decision.actions[0].reason == "StartTimeoutNear"  # type: ignore[attr-defined]


def test_the_start_timeout_comes_from_the_heads_environment() -> None:
    cluster = raycluster()
    head = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    head["env"] = [{"name": "RAY_JOB_START_TIMEOUT_SECONDS", "value": "86400"}]
    assert cluster_start_timeout(cluster) == 86400
    assert cluster_start_timeout(raycluster()) == START_TIMEOUT_DEFAULT
    job = _gated_job(status="PENDING")
    decision = World(
        rayjobs=[job], clusters=[cluster], jobsets=[_jobset_for(job, created=NOW - 800)]
    ).decide()
    assert decision.actions == ()


@pytest.mark.parametrize(("status", "phase"), [("PENDING", Phase.ADMITTED), ("RUNNING", Phase.RUNNING)])
def test_admitted_workers_need_nothing_from_the_bridge(status: str, phase: Phase) -> None:
    job = _gated_job(status=status)
    decision = World(rayjobs=[job], jobsets=[_jobset_for(job)], workloads=[_workload("Admitted")]).decide()
    assert decision.actions == ()
    assert decision.phase is phase


def test_preempted_workers_of_a_running_job_are_reported() -> None:
    job = _gated_job(status="RUNNING")
    decision = World(rayjobs=[job], jobsets=[_jobset_for(job)], workloads=[_workload("Evicted")]).decide()
    assert kinds(decision) == [Emit]
    assert decision.actions[0].reason == "WorkersPreempted"  # type: ignore[attr-defined]
    assert decision.phase is Phase.QUEUED


def test_preempted_workers_of_a_pending_job_lose_nothing() -> None:
    job = _gated_job(status="PENDING")
    decision = World(rayjobs=[job], jobsets=[_jobset_for(job)], workloads=[_workload("Evicted")]).decide()
    assert decision.actions == ()
    assert decision.phase is Phase.QUEUED


@pytest.mark.parametrize("status", ["SUCCEEDED", "FAILED", "STOPPED"])
def test_a_finished_job_loses_its_workers(status: str) -> None:
    job = _gated_job(status=status)
    decision = World(rayjobs=[job], jobsets=[_jobset_for(job)]).decide()
    assert kinds(decision) == [DeleteJobSet]
    assert decision.phase is Phase.FINISHING


def test_a_finished_job_without_workers_is_let_go() -> None:
    decision = World(rayjobs=[_gated_job(status="SUCCEEDED")]).decide()
    assert kinds(decision) == [RemoveFinalizer]
    assert decision.phase is None


def test_a_start_timeout_failure_says_what_to_raise() -> None:
    job = _gated_job(status="FAILED")
    job["status"]["message"] = (
        "Job supervisor actor failed to start within 900.0 seconds. JOB_SUPERVISOR_ACTOR_START_TIMEOUT"
    )
    decision = World(rayjobs=[job]).decide()
    assert kinds(decision) == [Emit, RemoveFinalizer]
    assert "RAY_JOB_START_TIMEOUT_SECONDS" in decision.actions[0].note  # type: ignore[attr-defined]


def test_deleted_while_pending_cancels_in_ray_and_deletes_the_workers() -> None:
    job = _gated_job(status="PENDING", deleting=True)
    decision = World(rayjobs=[job], jobsets=[_jobset_for(job)]).decide(ray_job_finished=False)
    assert kinds(decision) == [CancelInRay, DeleteJobSet]
    assert decision.actions[0].job_id == "train-abc12"  # type: ignore[attr-defined]
    assert decision.requeue_after is not None


def test_deleted_and_cancelled_in_ray_waits_for_the_jobset_then_lets_go() -> None:
    job = _gated_job(status="PENDING", deleting=True)
    world = World(rayjobs=[job], jobsets=[_jobset_for(job)])
    assert kinds(world.decide(ray_job_finished=True)) == [DeleteJobSet]
    assert kinds(World(rayjobs=[job]).decide(ray_job_finished=True)) == [RemoveFinalizer]


def test_deleted_before_kueray_submitted_cancels_nothing() -> None:
    job = _gated_job(deleting=True)
    assert kinds(World(rayjobs=[job]).decide()) == [RemoveFinalizer]


def test_an_ungated_rayjob_in_a_selected_cluster_is_reported() -> None:
    job = rayjob()
    decision = World(rayjobs=[job]).decide()
    assert kinds(decision) == [Emit]
    assert decision.actions[0].reason == "Ungated"  # type: ignore[attr-defined]
    not_selected = World(rayjobs=[job], clusters=[raycluster(labels={"bridge": "no"})])
    not_selected.spec = make_spec(clusterSelector={"matchLabels": {"bridge": "yes"}})
    assert not_selected.decide().actions == ()


def test_a_tampered_gate_is_no_gate() -> None:
    job = _gated_job()
    job["metadata"]["annotations"].pop("bridge.k8s-bridge.io/ray-gate")
    decision = World(rayjobs=[job], jobsets=[_jobset_for(_gated_job())]).decide()
    assert DeleteJobSet in kinds(decision)
    assert CreateJobSet not in kinds(decision)


# --- invariants --------------------------------------------------------------------------------


_STATUSES = st.sampled_from(["", "PENDING", "RUNNING", "SUCCEEDED", "FAILED", "STOPPED"])


@settings(max_examples=300, deadline=None)
@given(
    exists=st.booleans(),
    gate=st.booleans(),
    status=_STATUSES,
    deleting=st.booleans(),
    finalizer=st.booleans(),
    jobset=st.booleans(),
    workload=st.sampled_from(["", "Pending", "Admitted", "Evicted"]),
    ray_finished=st.sampled_from([None, True, False]),
    waited=st.floats(min_value=0, max_value=10_000),
)
def test_invariants(
    exists: bool,
    gate: bool,
    status: str,
    deleting: bool,
    finalizer: bool,
    jobset: bool,
    workload: str,
    ray_finished: bool | None,
    waited: float,
) -> None:
    job = _gated_job(status=status, deleting=deleting, finalizer=finalizer)
    if not gate:
        job["metadata"]["annotations"].pop("bridge.k8s-bridge.io/ray-gate")
    world = World(
        rayjobs=[job] if exists else [],
        jobsets=[_jobset_for(_gated_job(), created=NOW - waited)] if jobset else [],
        workloads=[_workload(workload)] if jobset and workload else [],
    )
    observed = world.observe()
    decision = decide(Observed(**{**observed.__dict__, "ray_job_finished": ray_finished}))
    actions = kinds(decision)
    finished = status in ("SUCCEEDED", "FAILED", "STOPPED")
    # One JobSet per RayJob, none for a job that is over or going.
    if CreateJobSet in actions:
        assert (exists, gate, jobset, finished, deleting) == (True, True, False, False, False)
    # The gate's hold on deletion goes only once nothing can be left pending in Ray or running.
    if RemoveFinalizer in actions:
        assert exists
        assert not jobset or DeleteJobSet not in actions or not gate
        if gate and deleting and status in ("PENDING", "RUNNING"):
            assert ray_finished is True
    # A running job's workers are never taken by the bridge itself.
    if DeleteJobSet in actions and exists and gate and not deleting:
        assert finished
    # Each action is of a kind the executor knows.
    assert all(kind in RayReconciler._handlers for kind in actions)


# --- the executor ------------------------------------------------------------------------------


class RecordingClient:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    async def create(self, obj: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.calls.append(("create", obj["metadata"]["name"]))
        return obj

    async def delete(self, api_version: str, kind: str, name: str, **options: Any) -> None:
        self.calls.append(("delete", (kind, name, options.get("missing_ok"))))

    async def patch(
        self, api_version: str, kind: str, name: str, patch: Any, **options: Any
    ) -> dict[str, Any]:
        self.calls.append(("patch", patch))
        return {}


class RecordingRay:
    def __init__(self, *, finished: bool) -> None:
        self.finished = finished
        self.cancelled: list[str] = []

    async def job_finished(self, *, namespace: str, cluster: str, job_id: str) -> bool:
        return self.finished

    async def cancel_pending(self, *, namespace: str, cluster: str, job_id: str) -> None:
        self.cancelled.append(job_id)


class RecordingEvents:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    async def event(self, regarding: Any, *, type: str, reason: str, note: str, action: str) -> None:
        self.reasons.append(reason)


async def test_reconcile_creates_then_counts() -> None:
    counts: list[dict[str, int]] = []
    client = RecordingClient()
    reconciler = World(rayjobs=[_gated_job(status="PENDING")]).reconciler(
        client, on_phases=lambda c: counts.append(dict(c))
    )
    await reconciler.reconcile(Request(NAMESPACE, "train"))
    assert client.calls[0][0] == "create"
    assert counts[-1] == {"queued": 1}


async def test_reconcile_of_a_deleted_pending_job_asks_ray_cancels_and_deletes() -> None:
    client, ray = RecordingClient(), RecordingRay(finished=False)
    job = _gated_job(status="PENDING", deleting=True)
    reconciler = World(rayjobs=[job], jobsets=[_jobset_for(job)]).reconciler(client, ray_jobs=ray)
    result = await reconciler.reconcile(Request(NAMESPACE, "train"))
    assert ray.cancelled == ["train-abc12"]
    assert [c[0] for c in client.calls] == ["delete"]
    assert result.requeue_after


async def test_reconcile_lets_a_cancelled_job_go_with_a_guarded_patch() -> None:
    client, ray = RecordingClient(), RecordingRay(finished=True)
    reconciler = World(rayjobs=[_gated_job(status="PENDING", deleting=True)]).reconciler(client, ray_jobs=ray)
    await reconciler.reconcile(Request(NAMESPACE, "train"))
    ((op, patch),) = client.calls
    assert op == "patch"
    assert patch[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "7"}
    assert patch[1]["value"] == []
    assert ray.cancelled == []


async def test_an_event_is_recorded_once_per_rayjob_and_reason() -> None:
    events = RecordingEvents()
    reconciler = World(rayjobs=[rayjob(uid=RAYJOB_UID)]).reconciler(RecordingClient(), recorder=events)
    for _ in range(3):
        await reconciler.reconcile(Request(NAMESPACE, "train"))
    assert events.reasons == ["Ungated"]
    assert reconciler.ungated_count() == 1
    reconciler.rayjobs.pop(f"{NAMESPACE}/train")
    await reconciler.reconcile(Request(NAMESPACE, "train"))
    assert reconciler.ungated_count() == 0


def test_a_jobset_being_deleted_counts_as_gone_for_the_rayjob() -> None:
    job = _gated_job(status="PENDING", deleting=True)
    going = _jobset_for(job)
    going["metadata"]["deletionTimestamp"] = _iso(NOW - 1)
    assert kinds(World(rayjobs=[job], jobsets=[going]).decide(ray_job_finished=True)) == [RemoveFinalizer]
    finished = _gated_job(status="SUCCEEDED")
    assert kinds(World(rayjobs=[finished], jobsets=[going]).decide()) == [RemoveFinalizer]


async def test_phase_changes_report_their_latencies() -> None:
    ticks = iter([10.0, 12.5, 14.0])
    seen: list[tuple[str, float]] = []
    job = _gated_job(status="PENDING")
    world = World(rayjobs=[job], jobsets=[_jobset_for(job)])
    reconciler = world.reconciler(
        RecordingClient(), clock=lambda: next(ticks), on_latency=lambda n, s: seen.append((n, s))
    )
    await reconciler.reconcile(Request(NAMESPACE, "train"))  # queued at 10
    reconciler.workloads.put(_workload("Admitted"))
    await reconciler.reconcile(Request(NAMESPACE, "train"))  # admitted at 12.5
    running = _gated_job(status="RUNNING")
    reconciler.rayjobs.put(running)
    await reconciler.reconcile(Request(NAMESPACE, "train"))  # running at 14
    assert seen == [("queued_to_admitted", 2.5), ("admitted_to_running", 1.5)]


async def test_a_queue_wait_reaching_the_start_timeout_is_reported_for_the_cluster_until_raised() -> None:
    reported: list[dict[str, str]] = []
    job = _gated_job(status="PENDING")
    world = World(rayjobs=[job], jobsets=[_jobset_for(job, created=NOW - 800)])
    reconciler = world.reconciler(RecordingClient(), on_short_timeouts=lambda c: reported.append(dict(c)))
    await reconciler.reconcile(Request(NAMESPACE, "train"))
    await reconciler.reconcile(Request(NAMESPACE, "train"))
    assert len(reported) == 1
    assert list(reported[0]) == [f"{NAMESPACE}/{CLUSTER}"]
    raised = raycluster()
    head = raised["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    head["env"] = [{"name": "RAY_JOB_START_TIMEOUT_SECONDS", "value": "604800"}]
    reconciler.rayclusters.put(raised)
    await reconciler.reconcile(Request(NAMESPACE, "train"))
    assert reported[-1] == {}


def _failed(jobset: dict[str, Any]) -> dict[str, Any]:
    jobset["status"] = {
        "terminalState": "Failed",
        "conditions": [{"type": "Failed", "status": "True", "reason": "FailedJobs", "message": "x"}],
    }
    return jobset


def test_workers_that_fail_before_the_job_starts_get_a_new_jobset() -> None:
    job = _gated_job(status="PENDING")
    decision = World(rayjobs=[job], jobsets=[_failed(_jobset_for(job))]).decide()
    assert kinds(decision) == [Emit, DeleteJobSet]
    assert decision.actions[0].reason == "WorkersFailed"  # type: ignore[attr-defined]
    assert kinds(World(rayjobs=[job]).decide()) == [CreateJobSet]


def test_workers_that_fail_under_a_running_job_are_reported_and_kept_until_it_ends() -> None:
    job = _gated_job(status="RUNNING")
    decision = World(rayjobs=[job], jobsets=[_failed(_jobset_for(job))]).decide()
    assert kinds(decision) == [Emit]
    assert decision.actions[0].reason == "WorkersLost"  # type: ignore[attr-defined]
