"""One policy's real run: submit the plan on its schedule, scale the inference Deployment along its
curve, poll the stack, record every job's transitions, clean up what finished, until all is done.

One loop, every ``tick`` seconds: the jobs due are submitted (Slurm: ``sbatch``, held into the bridged
partition in the one pool, not held in the split, where Slurm schedules them on its static nodes;
batch: a suspended Job in the Kubernetes LocalQueue; Ray: a RayJob for the shared cluster, which the
Ray bridge gates and gives workers through Kueue); the Deployment is scaled at each step of the curve;
then one listing per kind of object (Slurm jobs and nodes, JobSets, Jobs, RayJobs, pods) becomes a
:class:`~realrun.records.Seen` per job. What the run does as the jobs' owner: deletes a finished
Job or RayJob (its cleanup is then measured) and resubmits a RayJob that failed because Kueue took
its workers back (Ray cannot move a running job; the owner's retry, counted as a preemption).
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import structlog
from poolsim.workload import Job, JobClass

from bridge.sandbox.e2e import JOBSETS, bridge_node_names
from bridge.sandbox.kuberay import RAY_API
from realrun.plan import Plan, Policy
from realrun.records import Record, Seen, observe
from realrun.stack import NAMESPACE, RealStack
from translators.ray import ANNOTATION_WORKERS, LABEL_RAY_JOB_UID
from translators.slurm import LABEL_JOB_ID

log = structlog.get_logger("exp002.real")

FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL"}
MAX_RAY_ATTEMPTS = 3
"""A RayJob that failed this many times is lost (a failure is taken for a preemption before that)."""
RAY_DRIVER = "python -c \"import ray, time; ray.init(); time.sleep({runtime:.1f}); print('done')\""


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


class Driver:
    """Runs ``plan`` under ``policy`` on ``stack`` (started, its quota and Slurm side set)."""

    def __init__(
        self, stack: RealStack, plan: Plan, *, policy: Policy, horizon: float, tick: float = 0.5
    ) -> None:
        self.stack = stack
        self.plan = plan
        self.policy = policy
        self.horizon = horizon
        self.tick = tick
        self.records = {
            job.name: Record(job.name, job.kind, job.nodes, job.runtime, job.submit) for job in plan.jobs
        }
        self.inference: dict[str, Record] = {}
        self.withdrawn: set[str] = set()
        """Inference pods deleted by a scale-down before they ran (not jobs: nothing was asked of them)."""
        self._ray_uid_of: dict[str, str] = {}
        self.attempts: dict[str, int] = defaultdict(lambda: 1)
        self.deleted: set[str] = set()
        self.steps = [*list(plan.replicas), (horizon, 0)]
        self.last_scale_up = 0.0
        self.replicas = 0
        self.polls = 0
        self.origin = 0.0

    # ---- the loop ----------------------------------------------------------------------------------

    def run(self, *, timeout: float) -> list[Record]:
        self.origin = time.monotonic()
        pending = list(self.plan.jobs)
        while True:
            now = self.now()
            while pending and pending[0].submit <= now:
                self.submit(pending.pop(0), now)
            while self.steps and self.steps[0][0] <= now:
                _, replicas = self.steps.pop(0)
                self.scale(replicas, now)
            snapshot = self.poll()
            now = self.now()
            self.apply(snapshot, now)
            if not pending and not self.steps and self.all_done():
                return [*self.records.values(), *self.inference.values()]
            if now > timeout:
                waiting = [r.name for r in self.records.values() if not r.done]
                raise TimeoutError(f"{self.policy}: not done after {timeout:.0f}s: {waiting[:20]}")
            time.sleep(max(0.0, self.tick - (self.now() - now)))

    def now(self) -> float:
        return time.monotonic() - self.origin

    def all_done(self) -> bool:
        return all(r.done for r in self.records.values()) and all(r.done for r in self.inference.values())

    # ---- submissions -------------------------------------------------------------------------------

    def submit(self, job: Job, now: float) -> None:
        record = self.records[job.name]
        record.submitted = now
        if job.kind is JobClass.SLURM:
            job_id = self.stack.slurm.sbatch(
                f"-N{job.nodes}", "--ntasks-per-node=1", "--mem=400", f"--job-name={job.name}",
                script=f"#!/bin/sh\nsleep {job.runtime:.1f}\n", hold=self.policy is Policy.ONE_POOL,
            )  # fmt: skip
            record.ident = str(job_id)
        elif job.kind is JobClass.BATCH:
            manifest = self.stack.batch_job(job.name, nodes=job.nodes, runtime=job.runtime)
            self.stack.e2e.client.create(f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs", manifest)
            record.ident = job.name
        else:
            record.ident = self._create_rayjob(job.name, nodes=job.nodes, runtime=job.runtime)
        log.info("submitted", job=job.name, ident=record.ident, at=round(now, 2))

    def _create_rayjob(self, name: str, *, nodes: int, runtime: float) -> str:
        ray = self.stack.ray_pool
        ident = f"{name}-a{self.attempts[name]}"
        manifest = ray.rayjob(ident, entrypoint=RAY_DRIVER.format(runtime=runtime), workers=nodes)
        manifest["metadata"]["annotations"][ANNOTATION_WORKERS] = str(nodes)
        ray.create_rayjob(manifest)
        return ident

    def scale(self, replicas: int, now: float) -> None:
        if replicas > self.replicas:
            self.last_scale_up = now
        self.replicas = replicas
        self.stack.scale_inference(replicas)
        log.info("inference scaled", replicas=replicas, at=round(now, 2))

    # ---- observation -------------------------------------------------------------------------------

    def _items(self, path: str) -> list[dict[str, Any]]:
        return self.stack.e2e.list_items(path)

    def poll(self) -> Snapshot:
        self.polls += 1
        snap = Snapshot()
        stack = self.stack
        snap.slurm = slurm_jobs(stack.slurm.scontrol("show", "jobs", "--oneliner", check=False))
        if self.policy is Policy.ONE_POOL:
            slurm_ns = stack.settings.namespace
            for js in self._items(f"{JOBSETS}/namespaces/{slurm_ns}/jobsets"):
                job_id = (js["metadata"].get("labels") or {}).get(LABEL_JOB_ID)
                if job_id:
                    snap.slurm_jobsets[job_id] = bool(js["spec"].get("suspend"))
            for pod in self._items(f"/api/v1/namespaces/{slurm_ns}/pods"):
                job_id = (pod["metadata"].get("labels") or {}).get(LABEL_JOB_ID)
                if job_id:
                    snap.slurm_busy.add(job_id)
            for node in bridge_node_names(stack.slurm):
                snap.slurm_busy.add(node[1:].split("-")[0])
        for job in self._items(f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs"):
            snap.jobs[job["metadata"]["name"]] = job
        for pod in self._items(f"/api/v1/namespaces/{NAMESPACE}/pods"):
            labels = pod["metadata"].get("labels") or {}
            if labels.get("app") == "inference":
                snap.inference_pods[pod["metadata"]["name"]] = pod
            elif "job-name" in labels:
                snap.job_pods.setdefault(labels["job-name"], []).append(pod)
        ray = stack.ray_pool
        for rayjob in self._items(f"{RAY_API}/namespaces/{ray.namespace}/rayjobs"):
            snap.rayjobs[rayjob["metadata"]["name"]] = rayjob
        for js in ray.jobsets():
            uid = (js["metadata"].get("labels") or {}).get(LABEL_RAY_JOB_UID)
            if uid:
                snap.ray_jobsets[uid] = bool(js["spec"].get("suspend"))
        for pod in ray.pods():
            uid = (pod["metadata"].get("labels") or {}).get(LABEL_RAY_JOB_UID)
            if uid:
                snap.ray_busy.add(uid)
        return snap

    def apply(self, snap: Snapshot, now: float) -> None:
        for record in self.records.values():
            if record.submitted is None or record.done:
                continue
            seen = {
                JobClass.SLURM: self._slurm_seen,
                JobClass.BATCH: self._batch_seen,
                JobClass.RAY: self._ray_seen,
            }[record.kind](record, snap)
            observe(record, seen, now)
            self._act(record, seen, snap)
        self._inference(snap, now)

    def _slurm_seen(self, record: Record, snap: Snapshot) -> Seen:
        state, restarts = snap.slurm.get(record.ident, ("", 0))
        finished = state in FINISHED
        running = state in ("RUNNING", "COMPLETING") or finished
        if self.policy is Policy.STATIC_SPLIT:
            return Seen(admitted=running, running=running, finished=finished,
                        succeeded=state == "COMPLETED", gone=finished, restarts=restarts)  # fmt: skip
        suspended = snap.slurm_jobsets.get(record.ident)
        gone = suspended is None and record.ident not in snap.slurm_busy
        return Seen(
            admitted=suspended is False, running=running,
            finished=finished, succeeded=state == "COMPLETED", gone=gone, restarts=restarts,
        )  # fmt: skip

    def _batch_seen(self, record: Record, snap: Snapshot) -> Seen:
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

    def _ray_seen(self, record: Record, snap: Snapshot) -> Seen:
        rayjob = snap.rayjobs.get(record.ident)
        if rayjob is None:
            uids = self._ray_uids(record)
            gone = not uids & snap.ray_busy and not uids & set(snap.ray_jobsets)
            return Seen(finished=record.finished is not None, gone=gone)
        uid = rayjob["metadata"]["uid"]
        self._ray_uid_of[record.ident] = uid
        status = (rayjob.get("status") or {}).get("jobStatus")
        suspended = snap.ray_jobsets.get(uid)
        if status in ("FAILED", "STOPPED") and self.attempts[record.name] >= MAX_RAY_ATTEMPTS:
            return Seen(finished=True, succeeded=False)
        return Seen(
            admitted=suspended is False, running=status in ("RUNNING", "SUCCEEDED"),
            finished=status == "SUCCEEDED", succeeded=status == "SUCCEEDED", gone=False,
            preempted=status in ("FAILED", "STOPPED"),
        )  # fmt: skip

    def _ray_uids(self, record: Record) -> set[str]:
        uid = self._ray_uid_of.get(record.ident)
        return {uid} if uid else set()

    def _act(self, record: Record, seen: Seen, snap: Snapshot) -> None:
        """The owner's part: delete what finished, resubmit a Ray job failed on preempted workers."""
        if record.kind is JobClass.BATCH and record.finished is not None and record.ident not in self.deleted:
            self.stack.e2e.client.delete(f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/{record.ident}")
            self.deleted.add(record.ident)
        if record.kind is JobClass.RAY:
            if record.finished is not None and record.ident not in self.deleted:
                self.stack.ray_pool.delete_rayjob(record.ident)
                self.deleted.add(record.ident)
            elif seen.preempted:
                log.info("ray job failed on its workers: resubmitted", job=record.name, ident=record.ident)
                self.stack.ray_pool.delete_rayjob(record.ident)
                self.deleted.add(record.ident)
                self.attempts[record.name] += 1
                record.ident = self._create_rayjob(record.name, nodes=record.nodes, runtime=record.runtime)

    def _inference(self, snap: Snapshot, now: float) -> None:
        for name, pod in snap.inference_pods.items():
            if (
                name not in self.inference
                and name not in self.withdrawn
                and "deletionTimestamp" not in pod["metadata"]
            ):
                self.inference[name] = Record(
                    f"inference/{name}", JobClass.INFERENCE, 1, 0.0, self.last_scale_up,
                    submitted=self.last_scale_up, ident=name,
                )  # fmt: skip
        for name, record in list(self.inference.items()):
            if record.done:
                continue
            current = snap.inference_pods.get(name)
            if current is None or "deletionTimestamp" in current["metadata"]:
                if record.running is None:
                    self.withdrawn.add(name)
                    del self.inference[name]
                    continue
                observe(record, Seen(finished=True, succeeded=True, gone=current is None), now)
                continue
            gated = bool(current["spec"].get("schedulingGates"))
            running = (current.get("status") or {}).get("phase") == "Running"
            observe(record, Seen(admitted=not gated, running=running), now)
