"""bridge.admission: Workload and JobSet states from objects shaped like Kueue v0.17's (v1beta2)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import pytest

from bridge.admission import (
    JOB_UID_LABEL,
    WORKLOAD_API_VERSION,
    JobSetState,
    ObjectLister,
    WorkloadState,
    admitted_placement,
    admitted_podsets,
    condition,
    describe_jobset,
    describe_workload,
    find_workload,
    jobset_state,
    select_workload,
    topology_domains,
    workload_selector,
    workload_state,
)
from bridge.runtime import Client

JOBSET_UID = "6f1c2a8e-0000-4000-8000-000000000042"
T0 = "2026-11-30T10:00:00Z"


def cond(type_: str, status: str, reason: str, message: str = "", at: str = T0) -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": at,
        "observedGeneration": 1,
    }


def workload(
    *conditions: dict[str, Any], admission: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    """A Workload as Kueue v0.17 makes it for the JobSet slurm-hpc-42 (one podSet "slurmd", 2 pods)."""
    status: dict[str, Any] = {"conditions": list(conditions)}
    if admission is not None:
        status["admission"] = admission
    status.update(extra.pop("status", {}))
    obj: dict[str, Any] = {
        "apiVersion": WORKLOAD_API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": "jobset-slurm-hpc-42-1a2b3",
            "namespace": "slurm",
            "uid": "wl-uid-1",
            "creationTimestamp": T0,
            "labels": {JOB_UID_LABEL: JOBSET_UID, "kueue.x-k8s.io/queue-name": "hpc"},
            "ownerReferences": [
                {
                    "apiVersion": "jobset.x-k8s.io/v1alpha2",
                    "kind": "JobSet",
                    "name": "slurm-hpc-42",
                    "uid": JOBSET_UID,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "finalizers": ["kueue.x-k8s.io/resource-in-use"],
        },
        "spec": {
            "active": True,
            "queueName": "hpc",
            "priority": 0,
            "podSets": [
                {
                    "name": "slurmd",
                    "count": 2,
                    "template": {"spec": {"containers": [{"name": "slurmd", "image": "slurmd"}]}},
                    "topologyRequest": {
                        "podIndexLabel": "batch.kubernetes.io/job-completion-index",
                        "subGroupIndexLabel": "jobset.sigs.k8s.io/job-index",
                        "subGroupCount": 1,
                    },
                }
            ],
        },
        "status": status,
    }
    obj["spec"].update(extra.pop("spec", {}))
    assert not extra
    return obj


ADMISSION = {
    "clusterQueue": "shared",
    "podSetAssignments": [
        {
            "name": "slurmd",
            "flavors": {"cpu": "default-flavor", "memory": "default-flavor", "nvidia.com/gpu": "gpu-flavor"},
            "resourceUsage": {"cpu": "4200m", "memory": "1312Mi", "nvidia.com/gpu": "2"},
            "count": 2,
        }
    ],
}
PENDING = workload(cond("QuotaReserved", "False", "Pending", "couldn't assign flavors to pod set slurmd"))
QUOTA_RESERVED = workload(
    cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue shared"),
    admission=ADMISSION,
    status={
        "admissionChecks": [
            {"name": "autoscaler", "state": "Pending", "message": "", "lastTransitionTime": T0}
        ]
    },
)
ADMITTED = workload(
    cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue shared"),
    cond("Admitted", "True", "Admitted", "The workload is admitted"),
    admission=ADMISSION,
)
# right after a preemption: still admitted until the JobSet is suspended again
PREEMPTED_NOW = workload(
    cond("QuotaReserved", "True", "QuotaReserved"),
    cond("Admitted", "True", "Admitted"),
    cond(
        "Evicted", "True", "Preempted", "Preempted to accommodate a workload (UID: x) due to prioritization"
    ),
    cond("Preempted", "True", "InClusterQueue", "Preempted to accommodate a workload (UID: x)"),
    admission=ADMISSION,
)
# once inactive: quota released and requeued
PREEMPTED_REQUEUED = workload(
    cond("QuotaReserved", "False", "Pending", "Preempted"),
    cond("Admitted", "False", "NoReservation", "The workload has no reservation"),
    cond("Evicted", "True", "Preempted", "Preempted to accommodate a workload"),
    cond("Preempted", "True", "InClusterQueue", "Preempted to accommodate a workload"),
    cond("Requeued", "True", "Preempted", "Preempted to accommodate a workload"),
    status={"requeueState": {"count": 1}},
)
# admitted again: Kueue resets Evicted and Preempted to False on the new reservation
READMITTED = workload(
    cond("QuotaReserved", "True", "QuotaReserved"),
    cond("Admitted", "True", "Admitted"),
    cond("Evicted", "False", "QuotaReserved", "Previously: Preempted to accommodate a workload"),
    cond("Preempted", "False", "QuotaReserved", "Previously: Preempted to accommodate a workload"),
    cond("Requeued", "True", "Preempted"),
    admission=ADMISSION,
)
PODS_READY_TIMEOUT = workload(
    cond("QuotaReserved", "True", "QuotaReserved"),
    cond("Admitted", "True", "Admitted"),
    cond("Evicted", "True", "PodsReadyTimeout", "Exceeded the PodsReady timeout default/slurm-hpc-42"),
    admission=ADMISSION,
)
DEACTIVATED = workload(
    cond("QuotaReserved", "True", "QuotaReserved"),
    cond("Admitted", "True", "Admitted"),
    admission=ADMISSION,
    spec={"active": False},
)
MAX_EXEC_EXCEEDED = workload(
    cond("QuotaReserved", "True", "QuotaReserved"),
    cond("Admitted", "True", "Admitted"),
    cond(
        "DeactivationTarget", "True", "MaximumExecutionTimeExceeded", "exceeding the maximum execution time"
    ),
    admission=ADMISSION,
)
FINISHED_OK = workload(
    cond("QuotaReserved", "True", "QuotaReserved"),
    cond("Admitted", "True", "Admitted"),
    cond("Finished", "True", "Succeeded", "jobset completed successfully"),
    admission=ADMISSION,
)
FINISHED_FAILED = workload(
    cond("Evicted", "True", "Preempted"),
    cond("Finished", "True", "Failed", "jobset failed"),
)


@pytest.mark.parametrize(
    ("obj", "state"),
    [
        (workload(), WorkloadState.PENDING),
        (PENDING, WorkloadState.PENDING),
        (QUOTA_RESERVED, WorkloadState.QUOTA_RESERVED),
        (ADMITTED, WorkloadState.ADMITTED),
        (PREEMPTED_NOW, WorkloadState.PREEMPTED),
        (PREEMPTED_REQUEUED, WorkloadState.PREEMPTED),
        (READMITTED, WorkloadState.ADMITTED),
        (PODS_READY_TIMEOUT, WorkloadState.EVICTED),
        (DEACTIVATED, WorkloadState.EVICTED),
        (MAX_EXEC_EXCEEDED, WorkloadState.EVICTED),
        (FINISHED_OK, WorkloadState.FINISHED),
        (FINISHED_FAILED, WorkloadState.FINISHED),
    ],
)
def test_workload_state(obj: dict[str, Any], state: WorkloadState) -> None:
    assert workload_state(obj) is state
    assert describe_workload(obj).state is state


def test_quota_reserved_is_not_admission() -> None:
    view = describe_workload(QUOTA_RESERVED)
    assert view.state is WorkloadState.QUOTA_RESERVED
    assert view.cluster_queue == "shared"  # status.admission is set already
    assert [(c.name, c.state) for c in view.admission_checks] == [("autoscaler", "Pending")]


def test_describe_admitted() -> None:
    view = describe_workload(ADMITTED)
    assert (view.name, view.namespace, view.uid) == ("jobset-slurm-hpc-42-1a2b3", "slurm", "wl-uid-1")
    assert view.reason == "Admitted"
    assert view.active
    assert view.succeeded is None
    (podset,) = view.podsets
    assert podset.name == "slurmd"
    assert podset.count == 2
    assert podset.flavors["nvidia.com/gpu"] == "gpu-flavor"
    assert podset.resource_usage["cpu"] == "4200m"


def test_describe_preempted_and_finished() -> None:
    view = describe_workload(PREEMPTED_REQUEUED)
    assert view.reason == "InClusterQueue"
    assert view.requeue_count == 1
    assert view.podsets == ()
    assert describe_workload(PODS_READY_TIMEOUT).reason == "PodsReadyTimeout"
    assert describe_workload(DEACTIVATED).reason == "Deactivated"
    assert not describe_workload(DEACTIVATED).active
    assert describe_workload(FINISHED_OK).succeeded is True
    assert describe_workload(FINISHED_FAILED).succeeded is False


def test_condition_reader() -> None:
    found = condition(ADMITTED, "Admitted")
    assert found is not None
    assert found.is_true
    assert found.observed_generation == 1
    assert condition(ADMITTED, "Evicted") is None
    assert condition({}, "Admitted") is None


# --- placement -----------------------------------------------------------------------------------

FLAVORS: dict[str, dict[str, Any]] = {
    "default-flavor": {"spec": {"nodeLabels": {"example.com/pool": "shared"}}},
    "gpu-flavor": {
        "spec": {
            "nodeLabels": {"example.com/pool": "shared", "example.com/gpu": "a100"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        }
    },
}


def test_admitted_placement_merges_flavors_and_admission_check_updates() -> None:
    obj = copy.deepcopy(ADMITTED)
    obj["status"]["admissionChecks"] = [
        {
            "name": "autoscaler",
            "state": "Ready",
            "message": "",
            "lastTransitionTime": T0,
            "podSetUpdates": [
                {
                    "name": "slurmd",
                    "nodeSelector": {"autoscaling.x-k8s.io/provisioning-class-name": "booked"},
                    "tolerations": [{"key": "booked", "operator": "Exists", "effect": "NoSchedule"}],
                }
            ],
        }
    ]
    placement = admitted_placement(obj, FLAVORS, podset="slurmd")
    assert placement is not None
    assert placement.flavors == ("default-flavor", "gpu-flavor")
    assert placement.node_selector == {
        "example.com/pool": "shared",
        "example.com/gpu": "a100",
        "autoscaling.x-k8s.io/provisioning-class-name": "booked",
    }
    assert [t["key"] for t in placement.tolerations] == ["nvidia.com/gpu", "booked"]
    assert admitted_placement(obj, FLAVORS, podset="other") is None
    assert admitted_placement(PENDING, FLAVORS, podset="slurmd") is None
    assert admitted_placement(ADMITTED, {}, podset="slurmd") is not None  # flavors not cached yet


def test_topology_assignment_examples_from_the_kueue_api() -> None:
    # Example 1 of PodSetAssignment.topologyAssignment
    example1 = {
        "levels": ["cloud.provider.com/topology-block", "cloud.provider.com/topology-rack"],
        "slices": [
            {
                "domainCount": 2,
                "valuesPerLevel": [
                    {"individual": {"roots": ["block-1", "block-1"]}},
                    {"individual": {"roots": ["rack-1", "rack-2"]}},
                ],
                "podCounts": {"individual": [4, 2]},
            }
        ],
    }
    # Example 2: the same with a universal value and a prefix
    example2 = {
        "levels": example1["levels"],
        "slices": [
            {
                "domainCount": 2,
                "valuesPerLevel": [
                    {"universal": "block-1"},
                    {"individual": {"prefix": "rack-", "roots": ["1", "2"]}},
                ],
                "podCounts": {"individual": [4, 2]},
            }
        ],
    }
    expected = [
        ({"cloud.provider.com/topology-block": "block-1", "cloud.provider.com/topology-rack": "rack-1"}, 4),
        ({"cloud.provider.com/topology-block": "block-1", "cloud.provider.com/topology-rack": "rack-2"}, 2),
    ]
    for assignment in (example1, example2):
        assert [(dict(d.values), d.count) for d in topology_domains(assignment)] == expected
    # Example 4: two slices, hostnames with prefixes, universal pod count
    example4 = {
        "levels": ["kubernetes.io/hostname"],
        "slices": [
            {
                "domainCount": 4,
                "valuesPerLevel": [
                    {"individual": {"prefix": "block-1-rack-1-node-", "roots": ["1", "2", "3", "4"]}}
                ],
                "podCounts": {"universal": 1},
            },
            {
                "domainCount": 2,
                "valuesPerLevel": [{"individual": {"prefix": "block-1-rack-2-node-", "roots": ["1", "2"]}}],
                "podCounts": {"universal": 1},
            },
        ],
    }
    domains = topology_domains(example4)
    assert [d.values["kubernetes.io/hostname"] for d in domains][-1] == "block-1-rack-2-node-2"
    assert sum(d.count for d in domains) == 6
    obj = copy.deepcopy(ADMITTED)
    obj["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"] = example4
    assert len(admitted_podsets(obj)[0].topology) == 6


# --- finding the Workload --------------------------------------------------------------------------


def test_select_workload_by_label_and_owner() -> None:
    other = copy.deepcopy(ADMITTED)
    other["metadata"]["labels"][JOB_UID_LABEL] = "someone-else"
    foreign_owner = copy.deepcopy(ADMITTED)
    foreign_owner["metadata"]["ownerReferences"][0]["uid"] = "someone-else"
    assert select_workload([other, foreign_owner], jobset_uid=JOBSET_UID) is None
    assert select_workload([other, ADMITTED], jobset_uid=JOBSET_UID) == ADMITTED


def test_select_prefers_live_then_newest() -> None:
    stale = copy.deepcopy(FINISHED_OK)
    stale["metadata"]["name"] = "jobset-slurm-hpc-42-00000"
    deleting = copy.deepcopy(ADMITTED)
    deleting["metadata"] |= {"name": "jobset-slurm-hpc-42-zzzzz", "deletionTimestamp": T0}
    newer = copy.deepcopy(PENDING)
    newer["metadata"] |= {"name": "jobset-slurm-hpc-42-aaaaa", "creationTimestamp": "2026-11-30T11:00:00Z"}
    assert select_workload([stale, deleting, ADMITTED], jobset_uid=JOBSET_UID) == ADMITTED
    assert select_workload([ADMITTED, newer], jobset_uid=JOBSET_UID) == newer
    assert select_workload([deleting, ADMITTED], jobset_uid=JOBSET_UID) == ADMITTED
    assert select_workload([ADMITTED, deleting], jobset_uid=JOBSET_UID) == ADMITTED


class FakeLister:
    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items
        self.calls: list[tuple[str, str, str | None, str | None]] = []

    async def list(
        self, api_version: str, kind: str, *, namespace: str | None = None, label_selector: str | None = None
    ) -> Sequence[dict[str, Any]]:
        self.calls.append((api_version, kind, namespace, label_selector))
        key, _, value = (label_selector or "").partition("=")
        return [i for i in self.items if i["metadata"]["labels"].get(key) == value]


async def test_find_workload_lists_by_job_uid_label() -> None:
    lister = FakeLister([ADMITTED])
    jobset = {"metadata": {"name": "slurm-hpc-42", "namespace": "slurm", "uid": JOBSET_UID}}
    assert await find_workload(lister, jobset=jobset) == ADMITTED
    assert lister.calls == [("kueue.x-k8s.io/v1beta2", "Workload", "slurm", f"{JOB_UID_LABEL}={JOBSET_UID}")]
    assert workload_selector(JOBSET_UID) == f"kueue.x-k8s.io/job-uid={JOBSET_UID}"
    assert await find_workload(lister, jobset={"metadata": {"name": "not-created-yet"}}) is None
    assert lister.calls[1:] == []


def _runtime_client_fits(client: Client) -> ObjectLister:
    return client  # checked by mypy: the runtime's Client satisfies the Protocol


# --- JobSet --------------------------------------------------------------------------------------


def jobset(*conditions: dict[str, Any], suspend: bool, **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "slurm-hpc-42", "namespace": "slurm", "uid": JOBSET_UID},
        "spec": {"suspend": suspend, "replicatedJobs": [{"name": "slurmd", "replicas": 1}]},
        "status": {"conditions": list(conditions), **status},
    }


@pytest.mark.parametrize(
    ("obj", "state"),
    [
        (jobset(suspend=True), JobSetState.SUSPENDED),
        (jobset(cond("Suspended", "True", "SuspendedJobs"), suspend=True), JobSetState.SUSPENDED),
        (jobset(cond("Suspended", "False", "ResumeJobs"), suspend=False), JobSetState.ACTIVE),
        (
            jobset(cond("Completed", "True", "AllJobsCompleted"), suspend=False, terminalState="Completed"),
            JobSetState.COMPLETED,
        ),
        (
            jobset(cond("Failed", "True", "FailedJobs"), suspend=False, terminalState="Failed"),
            JobSetState.FAILED,
        ),
        (jobset(suspend=False, terminalState="Failed"), JobSetState.FAILED),
    ],
)
def test_jobset_state(obj: dict[str, Any], state: JobSetState) -> None:
    assert jobset_state(obj) is state


def test_describe_jobset() -> None:
    obj = jobset(
        cond("Failed", "True", "FailedJobs", "jobset failed due to ..."),
        suspend=False,
        terminalState="Failed",
        restarts=0,
        replicatedJobsStatus=[
            {"name": "slurmd", "ready": 1, "succeeded": 0, "failed": 0, "active": 1, "suspended": 0}
        ],
    )
    obj["metadata"]["deletionTimestamp"] = T0
    view = describe_jobset(obj)
    assert view.state is JobSetState.FAILED
    assert (view.reason, view.ready, view.deleting, view.suspended) == ("FailedJobs", 1, True, False)
    assert describe_jobset(jobset(suspend=True)).suspended
    assert not view.runs_elsewhere
    remote = jobset(suspend=False)
    remote["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    assert describe_jobset(remote).runs_elsewhere
