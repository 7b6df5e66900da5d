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
from typing import Any

import structlog
from poolsim.workload import Job, JobClass

from bridge.sandbox.e2e import JOBSETS, bridge_node_names
from bridge.sandbox.kuberay import RAY_API
from realrun.plan import Plan, Policy
from realrun.records import Record, Seen, observe
from realrun.seen import Snapshot, batch_seen, ray_seen, slurm_jobs, slurm_seen
from realrun.stack import NAMESPACE, RealStack
from translators.ray import ANNOTATION_WORKERS, LABEL_RAY_JOB_UID
from translators.slurm import LABEL_JOB_ID

log = structlog.get_logger("exp002.real")

RAY_DRIVER = "python -c \"import ray, time; ray.init(); time.sleep({runtime:.1f}); print('done')\""


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
            if record.kind is JobClass.SLURM:
                seen = slurm_seen(record, snap, policy=self.policy)
            elif record.kind is JobClass.BATCH:
                seen = batch_seen(record, snap)
            else:
                seen = self._ray_seen(record, snap)
            observe(record, seen, now)
            self._act(record, seen, snap)
        self._inference(snap, now)

    def _ray_seen(self, record: Record, snap: Snapshot) -> Seen:
        seen, uid = ray_seen(
            record, snap, uid=self._ray_uid_of.get(record.ident), attempts=self.attempts[record.name]
        )
        if uid is not None:
            self._ray_uid_of[record.ident] = uid
        return seen

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
