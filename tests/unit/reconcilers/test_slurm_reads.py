"""Updates that change nothing the Slurm reconciler reads are not reconciled; every read field counts."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from bridge.admission import describe_jobset, describe_workload
from bridge.runtime.handlers import Object
from reconcilers.slurm_reads import (
    child_job_update_matters,
    child_job_view,
    jobset_update_matters,
    jobset_view,
    pod_update_matters,
    workload_update_matters,
    workload_view,
)
from tests.fixtures.slurm_decisions import SPEC, job
from translators.slurm import Translation, translate

POD: Object = {
    "metadata": {
        "name": "slurm-hpc-42-slurmd-0-0-abcde",
        "namespace": "hpc",
        "labels": {"k8s-bridge.io/slurm-job-id": "42", "batch.kubernetes.io/job-completion-index": "0"},
        "ownerReferences": [{"kind": "Job", "name": "slurm-hpc-42-slurmd-0", "uid": "j1"}],
        "resourceVersion": "10",
    },
    "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]},
}
JOB: Object = {
    "metadata": {
        "name": "slurm-hpc-42-slurmd-0",
        "namespace": "hpc",
        "labels": {"k8s-bridge.io/slurm-job-id": "42"},
        "ownerReferences": [{"kind": "JobSet", "name": "slurm-hpc-42", "uid": "js1"}],
    },
    "status": {"active": 2, "ready": 0, "failed": 0, "completedIndexes": ""},
}
WORKLOAD: Object = {
    "metadata": {
        "name": "jobset-slurm-hpc-42-1a2b3",
        "namespace": "hpc",
        "creationTimestamp": "2026-12-03T10:00:00Z",
        "labels": {"kueue.x-k8s.io/job-uid": "js1"},
        "ownerReferences": [{"kind": "JobSet", "name": "slurm-hpc-42", "uid": "js1"}],
    },
    "spec": {"queueName": "hpc", "active": True},
    "status": {
        "conditions": [
            {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "insufficient quota"}
        ],
        "resourceRequests": [{"name": "slurmd", "resources": {"cpu": "2"}}],
    },
}
JOBSET: Object = {
    "metadata": {
        "name": "slurm-hpc-42",
        "namespace": "hpc",
        "labels": {"k8s-bridge.io/slurm-job-id": "42"},
        "annotations": {"bridge.k8s-bridge.io/slurm-nodes": "b42-0,b42-1"},
        "finalizers": ["k8s-bridge.io/slurm-cleanup"],
    },
    "spec": {"suspend": True},
    "status": {"replicatedJobsStatus": [{"name": "slurmd", "ready": 0, "active": 0}]},
}


def changed(obj: Object, edit: Callable[[dict[str, Any]], object]) -> Object:
    new = copy.deepcopy(obj)
    edit(new)
    return new


Case = tuple[Callable[[Object, Object], bool], Object, Callable[[dict[str, Any]], object]]

CHURN: list[Case] = [
    (pod_update_matters, POD, lambda p: p["status"]["conditions"].append({"type": "Initialized"})),
    (pod_update_matters, POD, lambda p: p["metadata"].update(resourceVersion="11")),
    (pod_update_matters, POD, lambda p: p["status"].update(containerStatuses=[{"ready": False}])),
    (child_job_update_matters, JOB, lambda j: j["status"].update(active=1, ready=2)),
    (child_job_update_matters, JOB, lambda j: j["status"].update(uncountedTerminatedPods={})),
    (workload_update_matters, WORKLOAD, lambda w: w["status"].update(resourceRequests=[])),
    (workload_update_matters, WORKLOAD, lambda w: w["metadata"].update(resourceVersion="99")),
    (jobset_update_matters, JOBSET, lambda s: s["status"]["replicatedJobsStatus"][0].update(active=2)),
]

READ: list[Case] = [
    (pod_update_matters, POD, lambda p: p["status"].update(phase="Running")),
    (pod_update_matters, POD, lambda p: p["status"].update(phase="Failed")),
    (pod_update_matters, POD, lambda p: p["metadata"].update(deletionTimestamp="2026-12-03T10:01:00Z")),
    (
        pod_update_matters,
        POD,
        lambda p: p["metadata"]["labels"].pop("batch.kubernetes.io/job-completion-index"),
    ),
    (child_job_update_matters, JOB, lambda j: j["status"].update(failed=1)),
    (child_job_update_matters, JOB, lambda j: j["status"].update(completedIndexes="0")),
    (child_job_update_matters, JOB, lambda j: j["metadata"]["ownerReferences"][0].update(uid="js2")),
    (child_job_update_matters, JOB, lambda j: j["metadata"].update(deletionTimestamp="2026-12-03T10:01:00Z")),
    (workload_update_matters, WORKLOAD, lambda w: w["status"]["conditions"][0].update(message="other")),
    (
        workload_update_matters,
        WORKLOAD,
        lambda w: w["status"].update(
            conditions=[
                {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": ""},
                {"type": "Admitted", "status": "True", "reason": "Admitted", "message": ""},
            ]
        ),
    ),
    (workload_update_matters, WORKLOAD, lambda w: w["spec"].update(active=False)),
    (
        workload_update_matters,
        WORKLOAD,
        lambda w: w["metadata"].update(creationTimestamp="2026-12-03T11:00:00Z"),
    ),
    (workload_update_matters, WORKLOAD, lambda w: w["metadata"]["labels"].clear()),
    (jobset_update_matters, JOBSET, lambda s: s["spec"].update(suspend=False)),
    (jobset_update_matters, JOBSET, lambda s: s["metadata"]["annotations"].clear()),
    (jobset_update_matters, JOBSET, lambda s: s["metadata"]["finalizers"].append("foregroundDeletion")),
    (jobset_update_matters, JOBSET, lambda s: s["status"]["replicatedJobsStatus"][0].update(ready=2)),
]


@pytest.mark.parametrize(("matters", "obj", "edit"), CHURN)
def test_status_churn_is_not_reconciled(
    matters: Callable[[Object, Object], bool], obj: Object, edit: Callable[[dict[str, Any]], object]
) -> None:
    assert not matters(obj, changed(obj, edit))


@pytest.mark.parametrize(("matters", "obj", "edit"), READ)
def test_a_change_of_what_the_reconciler_reads_is(
    matters: Callable[[Object, Object], bool], obj: Object, edit: Callable[[dict[str, Any]], object]
) -> None:
    assert matters(obj, changed(obj, edit))


def test_the_cached_jobset_keeps_all_the_bridge_reads_without_its_pod_template() -> None:
    """The JobSet the translator makes, with a status: the view reads the same to the observer and
    to the update predicate, and is a fraction of the size."""
    made = translate(job(), SPEC)
    assert isinstance(made, Translation)
    full = copy.deepcopy(made.manifest)
    full["metadata"]["finalizers"] = ["k8s-bridge.io/slurm-cleanup"]
    full["status"] = copy.deepcopy(JOBSET["status"])
    view = jobset_view(copy.deepcopy(full))
    assert describe_jobset(view) == describe_jobset(full)
    assert view["metadata"] == full["metadata"]
    assert not jobset_update_matters(full, view)
    assert len(json.dumps(view)) < len(json.dumps(full)) / 2


def test_the_cached_workload_keeps_all_the_bridge_reads_without_its_pod_sets() -> None:
    full = copy.deepcopy(WORKLOAD)
    full["spec"]["podSets"] = [
        {"name": "slurmd", "count": 2, "template": {"spec": {"containers": [{"name": "slurmd"}]}}}
    ]
    full["spec"]["active"] = False
    view = workload_view(copy.deepcopy(full))
    assert "podSets" not in view["spec"]
    assert describe_workload(view) == describe_workload(full)
    assert not workload_update_matters(full, view)


def test_the_cached_child_job_keeps_all_the_bridge_reads_without_its_pod_template() -> None:
    """A JobSet's Job as the JobSet controller makes it: the view reads the same to the update
    predicate and to the observer (completed indexes, failed pods, owner, deletion)."""
    full = copy.deepcopy(JOB)
    full["metadata"]["deletionTimestamp"] = "2026-12-07T10:00:00Z"
    full["metadata"]["finalizers"] = ["foregroundDeletion"]
    full["status"].update(completedIndexes="0-1", failed=1)
    full["spec"] = {
        "completionMode": "Indexed",
        "suspend": True,
        "template": {"spec": {"containers": [{"name": "slurmd", "image": "slurmd", "args": ["-D"] * 200}]}},
    }
    view = child_job_view(copy.deepcopy(full))
    assert "spec" not in view
    assert view["metadata"] == full["metadata"]
    assert view["status"] == full["status"]
    assert not child_job_update_matters(full, view)
    assert len(json.dumps(view)) < len(json.dumps(full)) / 2
