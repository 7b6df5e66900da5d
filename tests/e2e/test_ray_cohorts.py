"""Kueue cohorts on bridged Ray jobs: the workers borrow a Kubernetes team's idle quota and give it back.

The Slurm side is ``tests/e2e/test_cohorts.py``; this is the same promise for the Ray bridge: a RayJob's
worker JobSet is a workload like any other, so Kueue lends it idle quota of the cohort and reclaims it.
The pool's ClusterQueue (the one the Ray bridge's LocalQueue feeds) has no quota of its own (0 CPU,
0 memory) and shares a cohort with a Kubernetes team's ClusterQueue (2 CPUs, ``reclaimWithinCohort:
Any``). The claim, on the real stack (KubeRay, Kueue, JobSet, the shared Ray head, the workers as
real processes): a RayJob runs on 2 borrowed workers; when the team's batch/v1 Job asks for its
nominal quota, Kueue reclaims it (``InCohortReclamation``, although the Ray side's priority is higher
than the team's Job's); Ray cannot move a running job, so it fails, the bridge records
``WorkersPreempted`` on the RayJob and deletes the JobSet, and the team's Job runs on its own quota.
A RayJob still PENDING behind its gate when reclaimed waits in Ray for the next admission (the state
table's row, shown by ``tests/unit/reconcilers/test_ray_decisions.py``).

The module owns its wiring (the pool's ClusterQueue without quota, in the cohort) on the session's
Kubernetes stack. Leaks are checked after every test: the pool's (the ``e2e`` fixture), the Ray
side's (RayJobs, JobSets, pods, Ray nodes, jobs pending in the head) and the team's namespace.
"""

from __future__ import annotations

import contextlib
import shlex
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from bridge.admission import describe_workload
from bridge.sandbox.e2e import (
    KUEUE,
    BridgeProcess,
    E2ESettings,
    E2EStack,
    cluster_queue_object,
    local_queue_object,
)
from bridge.sandbox.e2e import wait_for as wait_until
from bridge.sandbox.processes import StackError
from bridge.sandbox.ray_e2e import RayPool
from bridge.sandbox.slurm import SlurmCluster
from bridge.sandbox.stack import KubeStack
from tests.e2e.conftest import LEAK_GRACE
from tests.fixtures.e2e import eventually
from tests.fixtures.slurm import started_cluster

pytestmark = pytest.mark.ray

TIMEOUT = 240.0
COHORT = "e2e-ray-shared"
TEAM_NAMESPACE = "k8s-team"
TEAM_QUEUE = "team-jobs"
TEAM_CLUSTER_QUEUE = "k8s-team"
TEAM_CPU, TEAM_MEMORY = "2", "2Gi"
"""The team's nominal quota: exactly one 2-worker RayJob's worth (1 CPU, 512 Mi each), idle until the
team needs it."""
RECLAIM_REASON = "InCohortReclamation"
TEAM_JOBS = f"/apis/batch/v1/namespaces/{TEAM_NAMESPACE}/jobs"
TEAM_PODS = f"/api/v1/namespaces/{TEAM_NAMESPACE}/pods"
GATE_ANNOTATION = "bridge.k8s-bridge.io/ray-gate"
DRIVER = (
    'python -c "import ray, time; ray.init(); time.sleep({sleep}); '
    "print('RAN-ON', ray.util.get_node_ip_address(), flush=True)\""
)


@pytest.fixture(scope="module")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """The pool's Slurm side (the stack wants one; no Slurm job runs in this module)."""
    yield from started_cluster(SlurmCluster(version="22.05"))


@pytest.fixture(scope="module")
def e2e_stack(
    kube_stack: KubeStack, slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[E2EStack]:
    """The usual wiring, but the pool's ClusterQueue has no quota and is in the cohort."""
    settings = E2ESettings(quota_cpu="0", quota_memory="0", cohort=COHORT)
    stack = E2EStack(
        kube=kube_stack,
        slurm=slurm_cluster,
        workdir=tmp_path_factory.mktemp("ray-cohorts"),
        settings=settings,
    )
    try:
        stack.start()
    except StackError as failed:
        pytest.fail(f"the e2e stack did not start: {failed}", pytrace=False)
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def ray_pool(e2e_stack: E2EStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayPool]:
    pool = RayPool(e2e_stack, workdir=tmp_path_factory.mktemp("ray-pool"))
    try:
        pool.start()
    except StackError as failed:
        pytest.fail(f"the Ray pool did not start: {failed}", pytrace=False)
    try:
        yield pool
    finally:
        pool.stop()


@pytest.fixture(scope="module")
def team_queue(e2e_stack: E2EStack) -> Iterator[str]:
    """The team's namespace, ClusterQueue (in the cohort, taking back what it lent whatever the
    borrower's priority) and LocalQueue, removed after the module; the LocalQueue's name."""
    stack = e2e_stack
    stack.kube.control_plane.ensure_namespace(TEAM_NAMESPACE)
    queues, cluster_queue = cluster_queue_object(
        TEAM_CLUSTER_QUEUE, flavor=stack.settings.flavor, cpu=TEAM_CPU, memory=TEAM_MEMORY, cohort=COHORT,
        preemption={"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
    )  # fmt: skip
    stack.client.apply(queues, cluster_queue)
    wait_until(
        lambda: _active(stack, TEAM_CLUSTER_QUEUE), timeout=60, what="the team's ClusterQueue to be Active"
    )
    collection, manifest = local_queue_object(
        TEAM_QUEUE, namespace=TEAM_NAMESPACE, cluster_queue=TEAM_CLUSTER_QUEUE
    )
    stack.client.apply(collection, manifest)
    try:
        yield TEAM_QUEUE
    finally:
        for path in (f"{collection}/{TEAM_QUEUE}", f"{queues}/{TEAM_CLUSTER_QUEUE}"):
            with contextlib.suppress(StackError, OSError):
                stack.client.delete(path)


@pytest.fixture
def ray(e2e: E2EStack, ray_pool: RayPool, team_queue: str) -> Iterator[RayPool]:
    """The module's Ray pool, checked after the test for Ray-side leaks and the team's."""
    yield ray_pool
    deadline = time.monotonic() + LEAK_GRACE
    while (leaks := [*ray_pool.leaks(), *_team_leftovers(e2e)]) and time.monotonic() < deadline:
        time.sleep(1.0)
    for job in ray_pool.pool.list_items(f"/apis/ray.io/v1/namespaces/{ray_pool.namespace}/rayjobs"):
        ray_pool.delete_rayjob(job["metadata"]["name"])
    for path, items in ((TEAM_JOBS, e2e.list_items(TEAM_JOBS)), (TEAM_PODS, e2e.list_items(TEAM_PODS))):
        for item in items:
            with contextlib.suppress(StackError):
                e2e.client.delete(f"{path}/{item['metadata']['name']}")
    assert not leaks, "left behind after the test:\n  " + "\n  ".join(leaks)


def _team_leftovers(stack: E2EStack) -> list[str]:
    found = []
    for kind, path in (
        ("Job", TEAM_JOBS),
        ("Pod", TEAM_PODS),
        ("Workload", f"{KUEUE}/namespaces/{TEAM_NAMESPACE}/workloads"),
    ):
        found += [f"{kind} {TEAM_NAMESPACE}/{item['metadata']['name']}" for item in stack.list_items(path)]
    return found


# --- helpers --------------------------------------------------------------------------------------


def _active(stack: E2EStack, name: str) -> bool:
    conditions = stack.client.get(f"{KUEUE}/clusterqueues/{name}").get("status", {}).get("conditions") or []
    return any(c.get("type") == "Active" and c.get("status") == "True" for c in conditions)


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _cpu(quantity: str) -> Decimal:
    return Decimal(quantity[:-1]) / 1000 if quantity.endswith("m") else Decimal(quantity)


def _reserved_cpu(stack: E2EStack, cluster_queue: str) -> tuple[Decimal, Decimal]:
    """(total, borrowed) CPUs reserved by the ClusterQueue's admitted workloads."""
    status = stack.client.get(f"{KUEUE}/clusterqueues/{cluster_queue}").get("status", {})
    for flavor in status.get("flavorsReservation") or []:
        for resource in flavor.get("resources") or []:
            if resource["name"] == "cpu":
                return _cpu(resource.get("total", "0")), _cpu(resource.get("borrowed", "0"))
    return Decimal(0), Decimal(0)


def _status(ray: RayPool, name: str) -> dict[str, Any]:
    return (ray.get_rayjob(name) or {}).get("status") or {}


def _workload(ray: RayPool) -> dict[str, Any] | None:
    """The Workload of the test's one worker JobSet (None while there is none)."""
    found = ray.workloads()
    return found[0] if len(found) == 1 else None


def _preempted_reason(workload: dict[str, Any] | None) -> str | None:
    """The reason of the Workload's ``Preempted=True`` condition, if it has one."""
    for condition in (workload or {}).get("status", {}).get("conditions") or []:
        if condition.get("type") == "Preempted" and condition.get("status") == "True":
            return str(condition.get("reason"))
    return None


def _events(ray: RayPool, name: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in ray.events(involved=name) if e.get("reason") == reason]


def _describe(ray: RayPool, bridge: BridgeProcess | None = None) -> str:
    stack = ray.pool
    lines = []
    for job in stack.list_items(f"/apis/ray.io/v1/namespaces/{ray.namespace}/rayjobs"):
        status = job.get("status") or {}
        lines.append(
            f"RayJob {job['metadata']['name']}: {status.get('jobDeploymentStatus')} {status.get('jobStatus')}"
        )
    for js in ray.jobsets():
        lines.append(f"JobSet {js['metadata']['name']} suspend={js['spec'].get('suspend')}")
    for pod in [*ray.pods(), *stack.list_items(TEAM_PODS)]:
        meta = pod["metadata"]
        lines.append(f"Pod {meta['namespace']}/{meta['name']} {pod.get('status', {}).get('phase')}")
    for wl in [*ray.workloads(), *stack.list_items(f"{KUEUE}/namespaces/{TEAM_NAMESPACE}/workloads")]:
        view = describe_workload(wl)
        lines.append(
            f"Workload {view.namespace}/{view.name}: {view.state} {view.reason} {view.message[:160]!r}"
        )
    for queue in (stack.settings.cluster_queue, TEAM_CLUSTER_QUEUE):
        with contextlib.suppress(StackError):
            reservation = stack.client.get(f"{KUEUE}/clusterqueues/{queue}").get("status", {})
            lines.append(f"ClusterQueue {queue}: {reservation.get('flavorsReservation')}")
    for event in stack.list_items(f"/api/v1/namespaces/{ray.namespace}/events"):
        involved = event.get("involvedObject") or {}
        lines.append(
            f"Event {involved.get('kind')}/{involved.get('name')} {event.get('reason')}: "
            f"{str(event.get('message'))[:200]!r}"
        )
    if bridge is not None:
        lines.append("bridge log:\n" + bridge.log_tail(40))
    return "\n".join(lines)


async def _job_status_is(ray: RayPool, name: str, wanted: set[str], bridge: BridgeProcess) -> dict[str, Any]:
    status: dict[str, Any] = await eventually(
        lambda: s if (s := _status(ray, name)).get("jobStatus") in wanted else None,
        timeout=TIMEOUT, what=f"RayJob {name} to reach {sorted(wanted)}",
        describe=lambda: _describe(ray, bridge),
    )  # fmt: skip
    return status


def _team_job(stack: E2EStack, gate: Path) -> dict[str, Any]:
    """The team's Job: 2 x 1 CPU (its nominal quota), at no priority (below the Ray side's), running
    until ``gate`` exists, so the test decides when the quota frees."""
    command = ["sh", "-c", f"while [ ! -e {shlex.quote(str(gate))} ]; do sleep 0.2; done"]
    return stack.batch_job(
        "team-job", command=command, cpu="1", parallelism=2, queue=(TEAM_NAMESPACE, TEAM_QUEUE)
    )


def _team_runs_on_its_own_quota(stack: E2EStack) -> bool:
    """The team's ClusterQueue reserves its 2 CPUs, none borrowed, and both its pods run."""
    if _reserved_cpu(stack, TEAM_CLUSTER_QUEUE) != (Decimal(2), Decimal(0)):
        return False
    running = [
        p
        for p in stack.list_items(TEAM_PODS, labelSelector="job-name=team-job")
        if p.get("status", {}).get("phase") == "Running"
    ]
    return len(running) == 2


def _job_complete(stack: E2EStack, name: str) -> bool:
    status = stack.client.get(f"{TEAM_JOBS}/{name}").get("status", {})
    return any(c["type"] == "Complete" and c["status"] == "True" for c in status.get("conditions") or [])


def _worker_ips(ray: RayPool, rayjob_uid: str) -> set[str]:
    pods = ray.pods(labelSelector=f"bridge.k8s-bridge.io/ray-job-uid={rayjob_uid}")
    return {str(p.get("status", {}).get("podIP")) for p in pods if p.get("status", {}).get("podIP")}


# --- 1 ---------------------------------------------------------------------------------------------


async def test_a_running_rayjob_on_borrowed_workers_is_reclaimed_fails_and_says_so(
    ray: RayPool, tmp_path: Path
) -> None:
    stack = ray.pool
    bridge = ray.bridge().start()
    ray.wait_gate_serving(bridge)
    name = _name("borrower")
    gate = tmp_path / "team-job-may-finish"
    created = ray.create_rayjob(ray.rayjob(name, entrypoint=DRIVER.format(sleep=300), workers=2))
    assert created["metadata"]["annotations"].get(GATE_ANNOTATION), "the webhook did not gate the RayJob"
    try:
        await _job_status_is(ray, name, {"RUNNING"}, bridge)
        # The pool's ClusterQueue has no quota: the workers' 2 CPUs are all borrowed from the team's.
        await eventually(
            lambda: _reserved_cpu(stack, stack.settings.cluster_queue) == (Decimal(2), Decimal(2)),
            timeout=30, what="2 CPUs reserved, all borrowed, by the pool's ClusterQueue",
            describe=lambda: _describe(ray, bridge),
        )  # fmt: skip
        assert len(_worker_ips(ray, created["metadata"]["uid"])) == 2

        # The team's Job needs its nominal quota. Its priority (none: 0) is below the Ray side's:
        # only the cohort's reclaim can make room.
        stack.client.create(TEAM_JOBS, _team_job(stack, gate))
        reason = await eventually(
            lambda: _preempted_reason(_workload(ray)), timeout=TIMEOUT,
            what="the workers' Workload preempted", describe=lambda: _describe(ray, bridge),
        )  # fmt: skip
        assert reason == RECLAIM_REASON, reason
        failed = await _job_status_is(ray, name, {"FAILED", "SUCCEEDED", "STOPPED"}, bridge)
        assert failed["jobStatus"] == "FAILED", failed  # Ray cannot move a running job
        events = await eventually(
            lambda: _events(ray, name, "WorkersPreempted"), timeout=TIMEOUT,
            what="a WorkersPreempted Event on the RayJob", describe=lambda: _describe(ray, bridge),
        )  # fmt: skip
        assert "Kueue" in events[0]["message"], events[0]
        await eventually(
            lambda: _team_runs_on_its_own_quota(stack), timeout=TIMEOUT,
            what="the team's Job to run on its own quota", describe=lambda: _describe(ray, bridge),
        )  # fmt: skip
        await eventually(
            lambda: not ray.jobsets() and not ray.workloads(), timeout=TIMEOUT,
            what="the workers' JobSet and Workload deleted", describe=lambda: _describe(ray, bridge),
        )  # fmt: skip
        assert _reserved_cpu(stack, stack.settings.cluster_queue) == (Decimal(0), Decimal(0))
        gate.touch()
        await eventually(
            lambda: _job_complete(stack, "team-job"), timeout=TIMEOUT, what="the team's Job to complete",
            describe=lambda: _describe(ray, bridge),
        )  # fmt: skip
    finally:
        gate.touch()
        ray.delete_rayjob(name)
        with contextlib.suppress(StackError):
            stack.client.delete(f"{TEAM_JOBS}/team-job")
    assert bridge.alive(), bridge.log_tail()
    print(
        f"RayJob {name}: 2 CPUs borrowed, reclaimed ({reason}), "
        f"Ray job {failed['jobStatus']}, Event WorkersPreempted"
    )
