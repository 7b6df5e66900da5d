"""What the Slurm reconciler reads of each Kubernetes object it watches, so that updates which change
none of it are not reconciled (controller-runtime's update predicates).

Most updates on a busy cluster are status churn: a pod's conditions and container statuses, a Job's
``active``/``ready``/``uncountedTerminatedPods`` counts, a Workload's ``resourceRequests``. Each was a
reconcile that decided what the last one did, and with a deep queue those are most of the bridge's
work. Each function here gives what :class:`reconcilers.slurm.SlurmObserver` reads of one object, and
an update matters when that differs between the old and the new object. Keep them in step with the
observer: a field read there and missing here would be a change the bridge sees only at its next
event (the unit tests compare them on recorded updates).

The views (:func:`jobset_view`, :func:`workload_view`, :func:`child_job_view`) are the other half:
what the informers keep of each object. A JobSet carries its slurmd pod template, a Workload a copy
of it in each podSet and each of the JobSet's Jobs (made while the JobSet is suspended, so one per
queued job) another, a few KiB each that nothing of the bridge reads; with a deep queue thousands of
each are cached (2,000 queued jobs' Jobs whole: about 25 MiB).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bridge.admission import describe_jobset, describe_workload
from bridge.runtime.handlers import Object
from reconcilers.slurm import PodsView

__all__ = [
    "child_job_update_matters",
    "child_job_view",
    "jobset_update_matters",
    "jobset_view",
    "pod_update_matters",
    "workload_update_matters",
    "workload_view",
]


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _identity(obj: Mapping[str, Any]) -> tuple[object, ...]:
    """What every index and mapper reads: name, labels, owners, deletion."""
    meta = _meta(obj)
    return (
        meta.get("name"),
        meta.get("labels"),
        meta.get("ownerReferences"),
        meta.get("deletionTimestamp"),
        meta.get("finalizers"),
    )


def pod_update_matters(old: Object, new: Object) -> bool:
    """A slurmd pod is read as :meth:`PodsView.of` counts it (phase, deletion, labels)."""
    return _identity(old) != _identity(new) or PodsView.of((old,)) != PodsView.of((new,))


def child_job_update_matters(old: Object, new: Object) -> bool:
    """A JobSet's Job is read for ``completedIndexes``, ``failed``, its owner and its deletion."""

    def read(job: Object) -> tuple[object, ...]:
        status = job.get("status") or {}
        return (*_identity(job), status.get("completedIndexes"), status.get("failed"))

    return read(old) != read(new)


def workload_update_matters(old: Object, new: Object) -> bool:
    """A Workload is read as :func:`describe_workload` sees it, and chosen among its JobSet's by its
    labels, owner, deletion and creation (``select_workload``)."""
    created = _meta(old).get("creationTimestamp") != _meta(new).get("creationTimestamp")
    return created or _identity(old) != _identity(new) or describe_workload(old) != describe_workload(new)


def jobset_update_matters(old: Object, new: Object) -> bool:
    """A JobSet is read as :func:`describe_jobset` sees it, plus its annotations (the nodes, shape and
    feature recorded on it) and its finalizers."""
    annotations = _meta(old).get("annotations") != _meta(new).get("annotations")
    return annotations or _identity(old) != _identity(new) or describe_jobset(old) != describe_jobset(new)


def _without_in_spec(obj: Object, field: str) -> Object:
    """``obj`` with ``spec.<field>`` left out (a new ``spec``: the other objects sharing it keep it)."""
    spec = obj.get("spec")
    if isinstance(spec, dict) and field in spec:
        obj["spec"] = {k: v for k, v in spec.items() if k != field}
    return obj


def jobset_view(obj: Object) -> Object:
    """A JobSet as the Slurm bridge caches it: without ``spec.replicatedJobs`` (the slurmd pod
    template). :func:`describe_jobset` reads the metadata, ``spec.suspend``, ``spec.managedBy`` and
    the status; the bridge's writes to a JobSet are patches of its metadata and deletions."""
    return _without_in_spec(obj, "replicatedJobs")


def workload_view(obj: Object) -> Object:
    """A Workload as the Slurm bridge caches it: without ``spec.podSets`` (a copy of the pod
    template each). :func:`describe_workload` reads the metadata, ``spec.active`` and the status."""
    return _without_in_spec(obj, "podSets")


def child_job_view(obj: Object) -> Object:
    """A JobSet's Job as the Slurm bridge caches it: its metadata and status, without ``spec`` (the
    slurmd pod template). The observer reads its identity, ``completedIndexes`` and ``failed``
    (:func:`child_job_update_matters`); the bridge's writes to it are deletions."""
    return {k: v for k, v in obj.items() if k != "spec"}
