"""Kueue cohorts on bridged Slurm jobs: borrowing, reclaim, and fair sharing with a Kubernetes team.

The promise is that Kueue's quota rules apply to Slurm work exactly as to Kubernetes work, because
Kueue admits both. Here the bridge's ClusterQueue has no quota of its own (0 CPU, 0 memory) and shares
a cohort with a Kubernetes team's ClusterQueue (``reclaimWithinCohort: Any``) that holds the quota.
The claims, each on the real stack (Kueue, JobSet, Slurm 22.05, slurmd pods that really run), and
each twice: with Kueue's fair sharing on and off (its preemption takes other paths):

- a 2-node Slurm job borrows the team's idle quota and runs; when the team's batch/v1 Job asks for
  its nominal quota, Kueue reclaims it (a cohort preemption, although the Slurm job's priority is
  higher), the Slurm job goes back to held PENDING with its JobSet kept and its pods and nodes gone,
  and once the team's Job is done it runs again and completes on exactly its nodes ``b<id>-0/1``;
- with a third ClusterQueue lending all the quota and several jobs queued on both sides, the
  admitted quota follows the ClusterQueues' ``fairSharing.weight`` (2 for Slurm, 1 for the team):
  4 CPUs to 2 of 6, although the team's Jobs are older and of a higher priority; without
  ``fairSharing`` in Kueue's configuration the same queues end at 2 to 4 (Kueue orders the
  borrowers by priority). Both measured in the same run and printed.

The module owns its Kubernetes stacks (fair sharing is a Kueue configuration: one stack with it,
then one without) and its Slurm cluster.
Leaks are checked after every test in the bridge's namespace (the ``e2e`` fixture) and the team's.
"""

from __future__ import annotations

import contextlib
import shlex
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from bridge.admission import WorkloadState, describe_workload
from bridge.api.slurm_job import JobState
from bridge.sandbox.build import MissingPrerequisiteError
from bridge.sandbox.e2e import (
    KUEUE,
    BridgeProcess,
    E2ESettings,
    E2EStack,
    cluster_queue_object,
    local_queue_object,
    wait_for,
)
from bridge.sandbox.processes import StackError
from bridge.sandbox.slurm import SlurmCluster
from bridge.sandbox.stack import KubeStack
from bridge.slurmrest import SlurmClient
from tests.e2e.conftest import LEAK_GRACE
from tests.fixtures.e2e import (
    TASKS_SCRIPT,
    bridge_ready,
    eventually,
    finished,
    job_output,
    jobset,
    scancel,
    stack_summary,
    task_nodes,
    wait_job,
    workload_of,
    workload_state_of,
)
from tests.fixtures.slurm import started_cluster
from translators.slurm import job_selector, jobset_name

pytestmark = pytest.mark.slurm

JOB_TIMEOUT = 150.0
CLEANUP_TIMEOUT = 60.0
COHORT = "e2e-shared"
FAIR_SHARING = {"preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]}
"""Kueue's ``fairSharing`` configuration (config v1beta2: present means on)."""
SLURM_WEIGHT, TEAM_WEIGHT = 2, 1
TEAM_NAMESPACE = "k8s-team"
TEAM_QUEUE = "team-jobs"
TEAM_CLUSTER_QUEUE = "k8s-team"
TEAM_CPU, TEAM_MEMORY = "2", "2Gi"
"""The team's nominal quota: exactly one 2 x 1-CPU Slurm job's worth, idle until the team needs it."""
LENDER = "e2e-lender"
LENT_CPU = 6
RECLAIM_REASON = "InCohortReclamation"
"""The Workload's ``Preempted`` reason when a ClusterQueue takes back its lent quota (with fair sharing
on, too: the reclaiming queue stays within its nominal quota), as opposed to ``InClusterQueue``
(priority) or ``InCohortFairSharing`` (shares)."""
TEAM_JOBS = f"/apis/batch/v1/namespaces/{TEAM_NAMESPACE}/jobs"


@pytest.fixture(scope="module", params=[True, False], ids=["fair-sharing", "no-fair-sharing"])
def fair_sharing(request: pytest.FixtureRequest) -> bool:
    """Whether Kueue's fair sharing is on: the module runs once with it and once without."""
    return bool(request.param)


@pytest.fixture(scope="module")
def kube_stack(fair_sharing: bool) -> Iterator[KubeStack]:
    """This module's own Kubernetes stack: Kueue with fair sharing on or off."""
    stack = KubeStack(kueue_config={"fairSharing": FAIR_SHARING} if fair_sharing else {})
    try:
        stack.start()
    except MissingPrerequisiteError as missing:
        pytest.fail(f"the Kubernetes stack: missing prerequisite: {missing}", pytrace=False)
    except StackError as failed:
        pytest.fail(f"the Kubernetes stack did not start: {failed}", pytrace=False)
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def slurm_cluster() -> Iterator[SlurmCluster]:
    yield from started_cluster(SlurmCluster(version="22.05"))


@pytest.fixture(scope="module")
def e2e_stack(
    kube_stack: KubeStack, slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[E2EStack]:
    """The usual wiring, but the bridge's ClusterQueue has no quota and is in the cohort."""
    settings = E2ESettings(
        quota_cpu="0", quota_memory="0", cohort=COHORT, fair_sharing_weight=str(SLURM_WEIGHT)
    )
    stack = E2EStack(
        kube=kube_stack, slurm=slurm_cluster, workdir=tmp_path_factory.mktemp("cohorts"), settings=settings
    )
    try:
        stack.start()
    except StackError as failed:
        pytest.fail(f"the e2e stack did not start: {failed}", pytrace=False)
    try:
        yield stack
    finally:
        stack.stop()


def team_cluster_queue(stack: E2EStack, *, cpu: str = TEAM_CPU, memory: str = TEAM_MEMORY) -> dict[str, Any]:
    """The Kubernetes team's ClusterQueue: the same flavor (the runner nodes), in the cohort, taking
    back what it lent whatever the borrower's priority."""
    _, manifest = cluster_queue_object(
        TEAM_CLUSTER_QUEUE,
        flavor=stack.settings.flavor,
        cpu=cpu,
        memory=memory,
        cohort=COHORT,
        preemption={"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
        weight=str(TEAM_WEIGHT),
    )
    return manifest


def apply_cluster_queue(stack: E2EStack, manifest: dict[str, Any]) -> None:
    stack.client.apply(f"{KUEUE}/clusterqueues", manifest)
    name = manifest["metadata"]["name"]
    wait_for(lambda: cluster_queue_active(stack, name), timeout=60, what=f"ClusterQueue {name} to be Active")


def cluster_queue_active(stack: E2EStack, name: str) -> bool:
    conditions = stack.client.get(f"{KUEUE}/clusterqueues/{name}").get("status", {}).get("conditions") or []
    return any(c.get("type") == "Active" and c.get("status") == "True" for c in conditions)


@pytest.fixture(scope="module")
def team_queue(e2e_stack: E2EStack) -> Iterator[str]:
    """The team's namespace, ClusterQueue and LocalQueue (removed after the module); the LocalQueue."""
    e2e_stack.kube.control_plane.ensure_namespace(TEAM_NAMESPACE)
    apply_cluster_queue(e2e_stack, team_cluster_queue(e2e_stack))
    collection, manifest = local_queue_object(
        TEAM_QUEUE, namespace=TEAM_NAMESPACE, cluster_queue=TEAM_CLUSTER_QUEUE
    )
    e2e_stack.client.apply(collection, manifest)
    try:
        yield TEAM_QUEUE
    finally:
        for path in (f"{collection}/{TEAM_QUEUE}", f"{KUEUE}/clusterqueues/{TEAM_CLUSTER_QUEUE}"):
            with contextlib.suppress(StackError, OSError):
                e2e_stack.client.delete(path)


def team_leftovers(stack: E2EStack) -> list[str]:
    found = []
    for kind, path in (
        ("Job", TEAM_JOBS),
        ("Pod", f"/api/v1/namespaces/{TEAM_NAMESPACE}/pods"),
        ("Workload", f"{KUEUE}/namespaces/{TEAM_NAMESPACE}/workloads"),
    ):
        found += [f"{kind} {TEAM_NAMESPACE}/{item['metadata']['name']}" for item in stack.list_items(path)]
    return found


@pytest.fixture
def team(e2e: E2EStack, team_queue: str) -> Iterator[tuple[str, str]]:
    """(namespace, LocalQueue) of the team, checked after the test for Jobs, pods and Workloads left."""
    yield TEAM_NAMESPACE, team_queue
    deadline = time.monotonic() + LEAK_GRACE
    while (leaks := team_leftovers(e2e)) and time.monotonic() < deadline:
        time.sleep(1.0)
    if leaks:
        for job in e2e.list_items(TEAM_JOBS):
            with contextlib.suppress(StackError):
                e2e.client.delete(f"{TEAM_JOBS}/{job['metadata']['name']}")
    assert not leaks, "left behind in the team's namespace:\n  " + "\n  ".join(leaks)


# --- helpers --------------------------------------------------------------------------------------


async def started_bridge(stack: E2EStack) -> BridgeProcess:
    bridge = stack.bridge().start()
    await eventually(lambda: bridge_ready(bridge), timeout=60, what="the bridge to serve /metrics")
    return bridge


def submit(stack: E2EStack, *, script: str, name: str) -> int:
    cluster = stack.slurm
    return cluster.sbatch(
        "-N2", "--ntasks-per-node=1", "--mem=400", f"--job-name={name}",
        f"--output={cluster.jobs_dir}/job-%j.out", "--open-mode=append", script=script,
    )  # fmt: skip


def expected_nodes(job_id: int) -> list[str]:
    return [f"b{job_id}-{i}" for i in range(2)]


def gated_command(gate: Path) -> list[str]:
    """A team Job's command: runs until ``gate`` exists, so the test decides when the quota frees."""
    return ["sh", "-c", f"while [ ! -e {shlex.quote(str(gate))} ]; do sleep 0.2; done"]


def cpu(quantity: str) -> Decimal:
    return Decimal(quantity[:-1]) / 1000 if quantity.endswith("m") else Decimal(quantity)


def reserved_cpu(stack: E2EStack, cluster_queue: str) -> tuple[Decimal, Decimal]:
    """(total, borrowed) CPUs reserved by the ClusterQueue's admitted workloads."""
    status = stack.client.get(f"{KUEUE}/clusterqueues/{cluster_queue}").get("status", {})
    for flavor in status.get("flavorsReservation") or []:
        for resource in flavor.get("resources") or []:
            if resource["name"] == "cpu":
                return cpu(resource.get("total", "0")), cpu(resource.get("borrowed", "0"))
    return Decimal(0), Decimal(0)


def weighted_share(stack: E2EStack, cluster_queue: str) -> int | None:
    status = stack.client.get(f"{KUEUE}/clusterqueues/{cluster_queue}").get("status", {})
    share = (status.get("fairSharing") or {}).get("weightedShare")
    return int(share) if share is not None else None


def team_workloads(stack: E2EStack) -> list[dict[str, Any]]:
    return stack.list_items(f"{KUEUE}/namespaces/{TEAM_NAMESPACE}/workloads")


def summary(stack: E2EStack, bridge: BridgeProcess) -> str:
    lines = [stack_summary(stack, bridge=bridge)]
    for workload in team_workloads(stack):
        view = describe_workload(workload)
        lines.append(f"team Workload {view.name} state={view.state} {view.message[:160]!r}")
    for name in (stack.settings.cluster_queue, TEAM_CLUSTER_QUEUE, LENDER):
        with contextlib.suppress(StackError):
            status = stack.client.get(f"{KUEUE}/clusterqueues/{name}").get("status", {})
            lines.append(f"ClusterQueue {name}: {status}")
    return "\n".join(lines)


def preempted_reason(workload: dict[str, Any] | None) -> str | None:
    """The reason of the Workload's ``Preempted=True`` condition, if it has one."""
    for condition in (workload or {}).get("status", {}).get("conditions") or []:
        if condition.get("type") == "Preempted" and condition.get("status") == "True":
            return str(condition.get("reason"))
    return None


def job_complete(stack: E2EStack, name: str) -> bool:
    status = stack.client.get(f"{TEAM_JOBS}/{name}").get("status", {})
    return any(c["type"] == "Complete" and c["status"] == "True" for c in status.get("conditions") or [])


def team_runs_on_its_own_quota(stack: E2EStack, *, pods: int) -> bool:
    """The team's ClusterQueue reserves its 2 CPUs, none borrowed, and ``pods`` of its pods run."""
    if reserved_cpu(stack, TEAM_CLUSTER_QUEUE) != (Decimal(2), Decimal(0)):
        return False
    running = [
        p
        for p in stack.list_items(f"/api/v1/namespaces/{TEAM_NAMESPACE}/pods")
        if p.get("status", {}).get("phase") == "Running"
    ]
    return len(running) == pods


def no_pods_nor_nodes(stack: E2EStack, job_id: int) -> bool:
    """The Slurm job has no pod left and none of its ``b<id>-*`` nodes is in slurmctld."""
    return not stack.pods(labelSelector=job_selector(stack.cluster_name, job_id)) and not set(
        expected_nodes(job_id)
    ) & set(stack.slurm_nodes())


async def wait_cleaned_up(stack: E2EStack, job_id: int, bridge: BridgeProcess) -> None:
    name = jobset_name(stack.cluster_name, job_id)

    def gone() -> bool:
        return jobset(stack, name) is None and no_pods_nor_nodes(stack, job_id)

    await eventually(
        gone, timeout=CLEANUP_TIMEOUT, what=f"job {job_id}'s JobSet, pods and nodes to go",
        describe=lambda: summary(stack, bridge),
    )  # fmt: skip


# --- 1 ---------------------------------------------------------------------------------------------


async def test_a_slurm_job_borrows_the_teams_idle_quota_is_reclaimed_then_completes_on_its_nodes(
    e2e: E2EStack, team: tuple[str, str], slurm_client: SlurmClient, tmp_path: Path
) -> None:
    bridge = await started_bridge(e2e)
    job_id = submit(e2e, script=TASKS_SCRIPT + "sleep 20\n", name="borrower")
    name = jobset_name(e2e.cluster_name, job_id)
    running = await wait_job(
        slurm_client, job_id, until=lambda j: j.is_running, timeout=JOB_TIMEOUT,
        what="to run on borrowed quota", stack=e2e, bridge=bridge,
    )  # fmt: skip
    assert sorted(running.nodes) == expected_nodes(job_id)
    # The bridge's ClusterQueue has no quota: all it uses is borrowed from the team's.
    await eventually(
        lambda: reserved_cpu(e2e, e2e.settings.cluster_queue) == (Decimal(2), Decimal(2)), timeout=30,
        what="2 CPUs reserved, all borrowed, by the bridge's ClusterQueue",
        describe=lambda: summary(e2e, bridge),
    )  # fmt: skip
    uid = (jobset(e2e, name) or {})["metadata"]["uid"]

    def same_jobset() -> dict[str, Any]:
        """Kueue keeps the evicted JobSet queued and resumes it: the bridge never replaces it."""
        current = jobset(e2e, name)
        assert current is not None, "the JobSet is gone"
        assert current["metadata"]["uid"] == uid, current["metadata"]
        return current

    # The team's Job needs its nominal quota (2 CPUs). Its priority (none: 0) is below the Slurm
    # job's: only the cohort's reclaim can make room.
    gate = tmp_path / "team-job-may-finish"
    team_job = e2e.batch_job("team-job", command=gated_command(gate), cpu="1", parallelism=2, queue=team)
    e2e.client.create(TEAM_JOBS, team_job)
    try:
        requeued = await wait_job(
            slurm_client, job_id, until=lambda j: j.is_pending and j.hold, timeout=60,
            what="to go back to held PENDING", stack=e2e, bridge=bridge,
        )  # fmt: skip
        assert requeued.restart_count >= 1, requeued
        same_jobset()
        reason = await eventually(
            lambda: preempted_reason(workload_of(e2e, name)), timeout=30,
            what="the Workload's Preempted reason", describe=lambda: summary(e2e, bridge),
        )  # fmt: skip
        assert reason == RECLAIM_REASON, reason

        # While the team's Job holds its quota: its pods run, the Slurm job stays held with its JobSet
        # suspended, and its pods and Slurm nodes are gone (nothing leaks, nothing runs twice).
        await eventually(
            lambda: team_runs_on_its_own_quota(e2e, pods=2), timeout=60,
            what="the team's Job to run on its own quota", describe=lambda: summary(e2e, bridge),
        )  # fmt: skip
        await eventually(
            lambda: no_pods_nor_nodes(e2e, job_id), timeout=CLEANUP_TIMEOUT,
            what="the reclaimed job's pods and Slurm nodes to go", describe=lambda: summary(e2e, bridge),
        )  # fmt: skip
        held = await slurm_client.get_job(job_id)
        assert held.is_pending, held
        assert held.hold, held
        assert same_jobset()["spec"].get("suspend") is True
        assert workload_state_of(e2e, name) != WorkloadState.ADMITTED
        assert reserved_cpu(e2e, e2e.settings.cluster_queue) == (Decimal(0), Decimal(0))

        gate.touch()
        await eventually(
            lambda: job_complete(e2e, "team-job"), timeout=60, what="the team's Job to complete",
            describe=lambda: summary(e2e, bridge),
        )  # fmt: skip
        again = await wait_job(
            slurm_client, job_id, until=lambda j: j.is_running or j.is_finished, timeout=JOB_TIMEOUT,
            what="to run again once the team's quota is idle", stack=e2e, bridge=bridge,
        )  # fmt: skip
        same_jobset()
        done = await wait_job(
            slurm_client, job_id, until=finished, timeout=JOB_TIMEOUT, what="to complete",
            stack=e2e, bridge=bridge,
        )  # fmt: skip
    finally:
        gate.touch()
        e2e.client.delete(f"{TEAM_JOBS}/team-job")
    assert done.state == JobState.COMPLETED, done
    assert sorted(done.nodes) == expected_nodes(job_id), done
    output = job_output(e2e, f"job-{job_id}.out")
    assert set(task_nodes(output)) == set(expected_nodes(job_id)), output  # both runs, its nodes only
    await wait_cleaned_up(e2e, job_id, bridge)
    assert bridge.alive(), bridge.log_tail()
    print(
        f"job {job_id}: borrowed 2 CPUs, reclaimed ({reason}), restarts {requeued.restart_count}, "
        f"ran again at {again.start_time}, completed on {sorted(done.nodes)}"
    )


# --- 2 ---------------------------------------------------------------------------------------------

SLURM_QUEUED, TEAM_QUEUED = 3, 3
"""Jobs of 2 x 1 CPU each: more of each than 6 CPUs admit in either order (2 + 1 or 1 + 2)."""


def lender_cluster_queue(stack: E2EStack, *, cpu: int) -> dict[str, Any]:
    """A ClusterQueue with no LocalQueue, in the cohort: all it does is lend ``cpu`` CPUs."""
    _, manifest = cluster_queue_object(
        LENDER, flavor=stack.settings.flavor, cpu=str(cpu), memory="16Gi", cohort=COHORT
    )
    return manifest


def admitted_slurm_jobs(stack: E2EStack, job_ids: list[int]) -> list[int]:
    return [
        j
        for j in job_ids
        if workload_state_of(stack, jobset_name(stack.cluster_name, j)) == WorkloadState.ADMITTED
    ]


def quota_reserved(workload: dict[str, Any]) -> bool:
    conditions = workload.get("status", {}).get("conditions") or []
    return any(c.get("type") == "QuotaReserved" and c.get("status") == "True" for c in conditions)


async def test_the_lent_quota_follows_the_weights_with_fair_sharing_and_the_priorities_without(
    e2e: E2EStack, team: tuple[str, str], slurm_client: SlurmClient, tmp_path: Path, fair_sharing: bool
) -> None:
    bridge = await started_bridge(e2e)
    slurm_queue = e2e.settings.cluster_queue
    # Both sides borrow everything: the team's own quota goes to 0 for this test, a lender holds it.
    apply_cluster_queue(e2e, team_cluster_queue(e2e, cpu="0", memory="0"))
    gate = tmp_path / "never"
    team_jobs = [f"share-team-{i}" for i in range(TEAM_QUEUED)]
    slurm_jobs: list[int] = []
    try:
        # The team's Jobs first (older, and urgent: Kueue's order without fair sharing would favour
        # them), then the Slurm jobs; nothing can be admitted yet.
        urgent = e2e.settings.urgent_priority
        for name in team_jobs:
            job = e2e.batch_job(
                name, command=gated_command(gate), cpu="1", parallelism=2, priority=urgent, queue=team
            )
            e2e.client.create(TEAM_JOBS, job)
        slurm_jobs = [
            submit(e2e, script=TASKS_SCRIPT + "sleep 300\n", name=f"share-{i}") for i in range(SLURM_QUEUED)
        ]
        await eventually(
            lambda: len(team_workloads(e2e)) == TEAM_QUEUED and len(e2e.workloads()) == SLURM_QUEUED,
            timeout=60, what="every job's Workload", describe=lambda: summary(e2e, bridge),
        )  # fmt: skip
        assert not any(quota_reserved(w) for w in [*team_workloads(e2e), *e2e.workloads()])

        # The quota appears at once; Kueue admits until the cohort is full. With fair sharing the lowest
        # weighted share (usage above nominal / lendable / weight) first, without it the highest priority.
        apply_cluster_queue(e2e, lender_cluster_queue(e2e, cpu=LENT_CPU))

        def cohort_full() -> bool:
            used = reserved_cpu(e2e, slurm_queue)[0] + reserved_cpu(e2e, TEAM_CLUSTER_QUEUE)[0]
            return used == LENT_CPU

        await eventually(
            cohort_full, timeout=60, what=f"{LENT_CPU} CPUs admitted", describe=lambda: summary(e2e, bridge)
        )
        admitted = admitted_slurm_jobs(e2e, slurm_jobs)
        for job_id in admitted:  # the bridged jobs admitted on their share really run
            await wait_job(
                slurm_client, job_id, until=lambda j: j.is_running, timeout=JOB_TIMEOUT, what="to run",
                stack=e2e, bridge=bridge,
            )  # fmt: skip
        # Read once they run: the shares held while they started (no preemption moved them).
        assert admitted_slurm_jobs(e2e, slurm_jobs) == admitted
        slurm_cpu, slurm_borrowed = reserved_cpu(e2e, slurm_queue)
        team_cpu, team_borrowed = reserved_cpu(e2e, TEAM_CLUSTER_QUEUE)
        shares = {q: weighted_share(e2e, q) for q in (slurm_queue, TEAM_CLUSTER_QUEUE)}
        team_admitted = sum(quota_reserved(w) for w in team_workloads(e2e))
        ratio = slurm_cpu / team_cpu if team_cpu else Decimal("Infinity")
        print(
            f"fair sharing {'on' if fair_sharing else 'off'}, weights Slurm {SLURM_WEIGHT} : team "
            f"{TEAM_WEIGHT}, {LENT_CPU} CPUs lent: "
            f"Slurm {slurm_cpu} CPUs ({len(admitted)} of {SLURM_QUEUED} jobs), team {team_cpu} CPUs "
            f"({team_admitted} of {TEAM_QUEUED} Jobs), ratio {ratio:.2f}; "
            f"weighted shares {shares}"
        )
        assert (slurm_borrowed, team_borrowed) == (slurm_cpu, team_cpu)  # all of it lent
        assert slurm_cpu + team_cpu == LENT_CPU
        slurm_share, team_share = shares[slurm_queue], shares[TEAM_CLUSTER_QUEUE]
        if fair_sharing:  # the weights: equal weighted shares
            assert slurm_cpu * TEAM_WEIGHT == team_cpu * SLURM_WEIGHT, (slurm_cpu, team_cpu)
            assert slurm_share is not None, shares
            assert slurm_share > 0, shares
            assert slurm_share == team_share, shares
        else:  # the priorities: each scheduling cycle admits the team's head first while it fits
            assert (slurm_cpu, team_cpu) == (Decimal(2), Decimal(4)), (slurm_cpu, team_cpu)
            assert (slurm_share, team_share) == (None, None), shares
    finally:
        # Close the tap first (Kueue evicts nothing for it), so nothing queued starts while all goes.
        with contextlib.suppress(StackError):
            apply_cluster_queue(e2e, lender_cluster_queue(e2e, cpu=0))
        for job_id in reversed(slurm_jobs):
            scancel(e2e, job_id)
        for name in reversed(team_jobs):
            e2e.client.delete(f"{TEAM_JOBS}/{name}")
        try:
            for job_id in slurm_jobs:
                await wait_cleaned_up(e2e, job_id, bridge)
        finally:  # the cohort as the module has it: the team's own quota back, no lender
            e2e.client.delete(f"{KUEUE}/clusterqueues/{LENDER}")
            apply_cluster_queue(e2e, team_cluster_queue(e2e))
    assert bridge.alive(), bridge.log_tail()
