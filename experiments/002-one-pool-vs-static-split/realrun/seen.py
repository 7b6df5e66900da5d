"""One poll of the stack (:class:`Snapshot`) and what it says of each job (a
:class:`~realrun.records.Seen`), per class. Pure: the driver fetches, these read.

- a **Slurm** job of the split is admitted when Slurm runs it and gone when it ends (Slurm's own
  nodes stay); in the one pool it is admitted when its JobSet is unsuspended (Kueue's admission) and
  gone when its JobSet, pods and slurmd nodes are; Slurm's ``Restarts`` counts its requeues;
- a **batch** Job is admitted when unsuspended, preempted when suspended again before it finished,
  gone when it and its pods are (the run deletes it once finished);
- a **Ray** job is admitted when its worker JobSet is unsuspended and running when Ray runs it; a
  failure is taken for a preemption (Ray cannot move a running job off workers Kueue took back),
  until :data:`MAX_RAY_ATTEMPTS`, after which the job is lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from realrun.plan import Policy
from realrun.records import Record, Seen

FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL"}
MAX_RAY_ATTEMPTS = 3
"""A RayJob that failed this many times is lost (a failure is taken for a preemption before that)."""


def slurm_jobs(text: str) -> dict[str, tuple[str, int]]:
    """``scontrol show jobs --oneliner`` -> {job id: (JobState, Restarts)}."""
    jobs = {}
    for line in text.splitlines():
        fields = dict(word.split("=", 1) for word in line.split() if "=" in word)
        if "JobId" in fields:
            jobs[fields["JobId"]] = (fields.get("JobState", ""), int(fields.get("Restarts", "0") or 0))
    return jobs


@dataclass
class Snapshot:
    """One poll of the stack, grouped by the owner each object belongs to."""

    slurm: dict[str, tuple[str, int]] = field(default_factory=dict)
    slurm_jobsets: dict[str, bool] = field(default_factory=dict)  # job id -> suspended
    slurm_busy: set[str] = field(default_factory=set)  # job ids with pods or slurmd nodes left
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    job_pods: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    inference_pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    rayjobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    ray_jobsets: dict[str, bool] = field(default_factory=dict)  # RayJob uid -> suspended
    ray_busy: set[str] = field(default_factory=set)  # RayJob uids with pods left


def _condition(obj: dict[str, Any], kind: str) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


def slurm_seen(record: Record, snap: Snapshot, *, policy: Policy) -> Seen:
    state, restarts = snap.slurm.get(record.ident, ("", 0))
    finished = state in FINISHED
    running = state in ("RUNNING", "COMPLETING") or finished
    if policy is Policy.STATIC_SPLIT:
        return Seen(admitted=running, running=running, finished=finished,
                    succeeded=state == "COMPLETED", gone=finished, restarts=restarts)  # fmt: skip
    suspended = snap.slurm_jobsets.get(record.ident)
    gone = suspended is None and record.ident not in snap.slurm_busy
    return Seen(
        admitted=suspended is False, running=running,
        finished=finished, succeeded=state == "COMPLETED", gone=gone, restarts=restarts,
    )  # fmt: skip


def batch_seen(record: Record, snap: Snapshot) -> Seen:
    job = snap.jobs.get(record.ident)
    pods = snap.job_pods.get(record.ident, [])
    if job is None:
        return Seen(finished=record.finished is not None, gone=not pods)
    suspended = bool(job["spec"].get("suspend"))
    finished = _condition(job, "Complete") or _condition(job, "Failed")
    running = any((p.get("status") or {}).get("phase") in ("Running", "Succeeded") for p in pods)
    return Seen(
        admitted=not suspended, running=running and not suspended, finished=finished,
        succeeded=_condition(job, "Complete"), gone=False,
        preempted=suspended and record.admitted is not None and not finished,
    )  # fmt: skip


def ray_seen(record: Record, snap: Snapshot, *, uid: str | None, attempts: int) -> tuple[Seen, str | None]:
    """What the poll says of a Ray job whose current RayJob is ``record.ident``, and that RayJob's uid
    (``uid``: the one seen before, for when it is gone)."""
    rayjob = snap.rayjobs.get(record.ident)
    if rayjob is None:
        gone = uid is None or (uid not in snap.ray_busy and uid not in snap.ray_jobsets)
        return Seen(finished=record.finished is not None, gone=gone), uid
    uid = str(rayjob["metadata"]["uid"])
    status = (rayjob.get("status") or {}).get("jobStatus")
    suspended = snap.ray_jobsets.get(uid)
    if status in ("FAILED", "STOPPED") and attempts >= MAX_RAY_ATTEMPTS:
        return Seen(finished=True, succeeded=False), uid
    seen = Seen(
        admitted=suspended is False, running=status in ("RUNNING", "SUCCEEDED"),
        finished=status == "SUCCEEDED", succeeded=status == "SUCCEEDED", gone=False,
        preempted=status in ("FAILED", "STOPPED"),
    )  # fmt: skip
    return seen, uid
