"""The Kubernetes stack is real: Kueue admits and preempts, JobSet and the Job controller make pods,
the scheduler binds them to kwok nodes, and kwok runs them.

Each test fails if a component is faked or missing: without Kueue nothing is admitted or unsuspended;
without the JobSet controller, kube-controller-manager or kube-scheduler no pod is created or bound;
without kwok the nodes never become Ready and pods never reach Running. Objects are created with the
defaults the (unregistered) webhooks would set, as ../shared/reference/kueue-jobset.md says.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s_client

from bridge.sandbox.build import MissingPrerequisiteError, StackPaths
from bridge.sandbox.controllers import delete_nodes
from bridge.sandbox.kube import ApiError, ControlPlane
from bridge.sandbox.stack import KubeStack
from tests.fixtures.kube import create_namespace

KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta2"
JOBSET_GROUP, JOBSET_VERSION = "jobset.x-k8s.io", "v1alpha2"
POOL_LABEL = "k8s-bridge.test/pool"


# --- helpers -----------------------------------------------------------------------------------------


async def eventually(check: Callable[[], Awaitable[bool]], *, timeout: float = 60.0, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(0.25)


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for item in obj.get("status", {}).get("conditions", []) or []:
        if item.get("type") == kind:
            return dict(item)
    return None


def is_true(obj: dict[str, Any], kind: str) -> bool:
    found = condition(obj, kind)
    return found is not None and found.get("status") == "True"


def jobset_manifest(
    name: str, *, queue: str, priority_class: str | None = None, replicas: int = 1, cpu: str = "1"
) -> dict[str, Any]:
    """A queue-labelled, suspended JobSet with every default its webhook would set written out."""
    labels = {"kueue.x-k8s.io/queue-name": queue}
    if priority_class:
        labels["kueue.x-k8s.io/priority-class"] = priority_class
    return {
        "apiVersion": f"{JOBSET_GROUP}/{JOBSET_VERSION}",
        "kind": "JobSet",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "suspend": True,
            "successPolicy": {"operator": "All"},
            "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": replicas,
                    "template": {
                        "spec": {
                            "parallelism": 1,
                            "completions": 1,
                            "backoffLimit": 0,
                            "completionMode": "Indexed",
                            "template": {
                                "spec": {
                                    "restartPolicy": "Never",
                                    "containers": [
                                        {
                                            "name": "worker",
                                            # kwok never pulls images; the name only has to be valid.
                                            "image": "registry.invalid/k8s-bridge/worker:test",
                                            "command": ["sleep", "infinity"],
                                            "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}},
                                        }
                                    ],
                                }
                            },
                        }
                    },
                }
            ],
        },
    }


@dataclass
class Kueue:
    """Kueue objects of one test (a flavor, a ClusterQueue for its namespace, a LocalQueue) + helpers."""

    api: k8s_client.ApiClient
    namespace: str
    suffix: str

    @property
    def custom(self) -> k8s_client.CustomObjectsApi:
        return k8s_client.CustomObjectsApi(self.api)

    @property
    def queue(self) -> str:
        return "lq"

    async def create_queues(self, *, cpu: str, node_labels: dict[str, str] | None = None) -> None:
        flavor = {
            "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}",
            "kind": "ResourceFlavor",
            "metadata": {"name": f"rf-{self.suffix}"},
            "spec": {"nodeLabels": node_labels or {POOL_LABEL: self.suffix}},
        }
        cluster_queue = {
            "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}",
            "kind": "ClusterQueue",
            "metadata": {"name": f"cq-{self.suffix}"},
            "spec": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": self.namespace}},
                "queueingStrategy": "BestEffortFIFO",
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory"],
                        "flavors": [
                            {
                                "name": f"rf-{self.suffix}",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": cpu},
                                    {"name": "memory", "nominalQuota": "64Gi"},
                                ],
                            }
                        ],
                    }
                ],
                "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Never"},
            },
        }
        local_queue = {
            "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}",
            "kind": "LocalQueue",
            "metadata": {"name": self.queue, "namespace": self.namespace},
            "spec": {"clusterQueue": f"cq-{self.suffix}"},
        }
        await self.custom.create_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "resourceflavors", flavor)
        await self.custom.create_cluster_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", cluster_queue
        )
        await self.custom.create_namespaced_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, self.namespace, "localqueues", local_queue
        )

        async def active() -> bool:
            cq = await self.custom.get_cluster_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", f"cq-{self.suffix}"
            )
            return is_true(cq, "Active")

        await eventually(active, timeout=30, what=f"ClusterQueue cq-{self.suffix} Active (is Kueue running?)")

    async def priority_class(self, name: str, value: int) -> str:
        full = f"{name}-{self.suffix}"
        body = {
            "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}",
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": full},
            "value": value,
        }
        await self.custom.create_cluster_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, "workloadpriorityclasses", body
        )
        return full

    async def create_jobset(self, manifest: dict[str, Any]) -> dict[str, Any]:
        created: dict[str, Any] = await self.custom.create_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, self.namespace, "jobsets", manifest
        )
        return created

    async def jobset(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = await self.custom.get_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, self.namespace, "jobsets", name
        )
        return found

    async def delete_jobset(self, name: str) -> None:
        await self.custom.delete_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, self.namespace, "jobsets", name, propagation_policy="Background"
        )

    async def workload(self, jobset: dict[str, Any]) -> dict[str, Any] | None:
        """The Workload Kueue made for ``jobset``, found by its job-uid label (never by name)."""
        listed = await self.custom.list_namespaced_custom_object(
            KUEUE_GROUP,
            KUEUE_VERSION,
            self.namespace,
            "workloads",
            label_selector=f"kueue.x-k8s.io/job-uid={jobset['metadata']['uid']}",
        )
        items: list[dict[str, Any]] = listed["items"]
        return items[0] if items else None

    async def admitted(self, jobset: dict[str, Any]) -> bool:
        workload = await self.workload(jobset)
        return workload is not None and is_true(workload, "Admitted")

    async def suspended(self, name: str) -> bool:
        return bool((await self.jobset(name))["spec"].get("suspend"))

    async def cleanup(self) -> None:
        custom = self.custom
        for plural, name in (
            ("clusterqueues", f"cq-{self.suffix}"),
            ("resourceflavors", f"rf-{self.suffix}"),
        ):
            try:
                await custom.delete_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, plural, name)
            except k8s_client.ApiException as error:
                if error.status != 404:
                    raise


@pytest.fixture
async def kueue(kube_api: k8s_client.ApiClient, kube_namespace: str) -> AsyncIterator[Kueue]:
    setup = Kueue(api=kube_api, namespace=kube_namespace, suffix=kube_namespace)
    try:
        yield setup
    finally:
        await setup.cleanup()


@pytest.fixture
def pool_nodes(kube_stack: KubeStack, kube_namespace: str) -> Iterator[list[str]]:
    """Two kwok nodes (4 CPU each) labelled with this test's pool, deleted after it."""
    names = kube_stack.create_kwok_nodes(
        count=2, prefix=f"kwok-{kube_namespace}", cpu="4", memory="16Gi", labels={POOL_LABEL: kube_namespace}
    )
    yield names
    delete_nodes(kube_stack.client, names)


# --- tests -------------------------------------------------------------------------------------------


async def test_quota_for_one_admits_exactly_one_then_the_next(kueue: Kueue) -> None:
    await kueue.create_queues(cpu="1")
    first = await kueue.create_jobset(jobset_manifest("js-a", queue=kueue.queue))
    second = await kueue.create_jobset(jobset_manifest("js-b", queue=kueue.queue))

    async def one_admitted() -> bool:
        return await kueue.admitted(first) or await kueue.admitted(second)

    await eventually(one_admitted, what="Kueue to admit one of two JobSets")
    winner, loser = (first, second) if await kueue.admitted(first) else (second, first)
    winner_name, loser_name = winner["metadata"]["name"], loser["metadata"]["name"]

    async def winner_unsuspended() -> bool:
        return not await kueue.suspended(winner_name)

    await eventually(
        winner_unsuspended, timeout=30, what=f"Kueue to unsuspend the admitted JobSet {winner_name}"
    )
    # The other must stay pending and suspended: the quota holds one.
    for _ in range(12):
        assert not await kueue.admitted(loser), (
            f"both JobSets admitted against a quota for one ({loser_name})"
        )
        assert await kueue.suspended(loser_name)
        await asyncio.sleep(0.25)
    loser_workload = await kueue.workload(loser)
    assert loser_workload is not None, "Kueue made no Workload for the second JobSet"
    assert not is_true(loser_workload, "QuotaReserved")

    await kueue.delete_jobset(winner_name)

    async def loser_admitted_and_running() -> bool:
        return await kueue.admitted(loser) and not await kueue.suspended(loser_name)

    await eventually(
        loser_admitted_and_running, what=f"{loser_name} to be admitted once {winner_name} is gone"
    )


async def test_higher_priority_preempts_lower(kueue: Kueue) -> None:
    await kueue.create_queues(cpu="1")
    low_class = await kueue.priority_class("low", 100)
    high_class = await kueue.priority_class("high", 10000)
    low = await kueue.create_jobset(jobset_manifest("low", queue=kueue.queue, priority_class=low_class))

    async def low_running() -> bool:
        return await kueue.admitted(low) and not await kueue.suspended("low")

    await eventually(low_running, what="the low-priority JobSet to be admitted and unsuspended")

    high = await kueue.create_jobset(jobset_manifest("high", queue=kueue.queue, priority_class=high_class))

    async def low_evicted_and_suspended() -> bool:
        workload = await kueue.workload(low)
        return workload is not None and is_true(workload, "Evicted") and await kueue.suspended("low")

    await eventually(low_evicted_and_suspended, what="the low-priority JobSet to be evicted and re-suspended")
    workload = await kueue.workload(low)
    assert workload is not None
    evicted = condition(workload, "Evicted")
    assert evicted is not None
    assert evicted.get("reason") == "Preempted", evicted

    async def high_running() -> bool:
        return await kueue.admitted(high) and not await kueue.suspended("high")

    await eventually(high_running, what="the high-priority JobSet to be admitted in its place")
    assert not await kueue.admitted(low)


async def test_pods_of_admitted_jobset_run_on_kwok_nodes(
    kueue: Kueue, kube_api: k8s_client.ApiClient, pool_nodes: list[str]
) -> None:
    await kueue.create_queues(cpu="8")
    created = await kueue.create_jobset(jobset_manifest("run", queue=kueue.queue, replicas=2))
    core = k8s_client.CoreV1Api(kube_api)

    async def admitted() -> bool:
        return await kueue.admitted(created)

    await eventually(admitted, what="Kueue to admit the JobSet")

    async def pods_running() -> bool:
        pods = await core.list_namespaced_pod(
            kueue.namespace, label_selector="jobset.sigs.k8s.io/jobset-name=run"
        )
        return len(pods.items) == 2 and all(pod.status.phase == "Running" for pod in pods.items)

    await eventually(pods_running, timeout=90, what="both pods of the admitted JobSet to reach Running")
    pods = await core.list_namespaced_pod(
        kueue.namespace, label_selector="jobset.sigs.k8s.io/jobset-name=run"
    )
    for pod in pods.items:
        assert pod.spec.node_name in pool_nodes, f"{pod.metadata.name} ran on {pod.spec.node_name}"
        # Kueue merged the flavor's nodeLabels into the pod template on admission.
        assert (pod.spec.node_selector or {}).get(POOL_LABEL) == kueue.namespace
        assert pod.metadata.labels.get("kueue.x-k8s.io/podset") == "workers"


def fake_paths(tmp_path: Path, *, missing: str) -> StackPaths:
    """Paths where every binary is some executable except ``missing`` (so no other gap is hit first)."""
    stand_in = Path(sys.executable)
    crds = {name: tmp_path for name in ("kueue", "jobset", "kuberay")}
    # Every binary field of StackPaths, whatever the build adds next.
    binaries = dict.fromkeys((f.name for f in dataclasses.fields(StackPaths) if f.name != "crds"), stand_in)
    binaries[missing] = tmp_path / "nowhere" / missing.replace("_", "-")
    return StackPaths(crds=crds, **binaries)


def test_missing_binary_names_it_and_how_to_build(tmp_path: Path) -> None:
    paths = fake_paths(tmp_path, missing="kube_apiserver")
    with pytest.raises(MissingPrerequisiteError) as raised:
        ControlPlane(workdir=tmp_path / "plane", paths=paths).start()
    message = str(raised.value)
    assert "kube-apiserver" in message
    assert str(paths.kube_apiserver) in message
    assert "python3 -m bridge.sandbox.build all" in message


def test_missing_controller_binary_fails_before_anything_starts(tmp_path: Path) -> None:
    stack = KubeStack(workdir=tmp_path / "stack", paths=fake_paths(tmp_path, missing="kueue"))
    with pytest.raises(
        MissingPrerequisiteError, match=r"kueue is not built.*python3 -m bridge\.sandbox\.build all"
    ):
        stack.start()
    assert not stack.control_plane.group.processes
    assert not (tmp_path / "stack" / "logs" / "etcd.log").exists()


def test_compaction_gives_a_real_410_and_the_apiserver_restarts(kube_control_plane: ControlPlane) -> None:
    client = kube_control_plane.client
    old = client.get("/api/v1/namespaces")["metadata"]["resourceVersion"]
    # Two writes: a watch from ``old`` starts at old+1, which must be compacted away as well.
    create_namespace(client)
    create_namespace(client)
    kube_control_plane.compact_etcd()

    with pytest.raises(ApiError) as gone:
        client.get("/api/v1/namespaces", resourceVersion=old, resourceVersionMatch="Exact")
    assert gone.value.status == 410
    event = client.request(
        "GET", "/api/v1/namespaces", query={"watch": "1", "resourceVersion": old, "timeoutSeconds": "5"}
    )
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 410

    apiserver = kube_control_plane.apiserver
    kube_control_plane.restart_apiserver()
    assert kube_control_plane.apiserver is not apiserver
    assert apiserver is not None
    assert not apiserver.alive()
    assert kube_control_plane.client.get("/api/v1/namespaces/default")["metadata"]["name"] == "default"
