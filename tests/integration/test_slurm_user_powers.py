"""What a Slurm user can do to a job the bridge holds, on the real slurmctld of both generations.

Why a test of Slurm itself: the Slurm bridge's defence against a user who releases their own
bridged job (docs/reference/threat-model.md, T3; ADR 0003) is that it turns the user's hold into an
*admin* hold, marked in the job's admin comment, and that Slurm lets only administrators release
such a hold or write that comment. The reconciler's unit tests take those semantics for granted;
this shows them on slurmctld: the user's ``scontrol release`` and ``scontrol update AdminComment=``
change nothing, while the user can still cancel the job.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from bridge.api.slurm_job import JobState, SlurmJob
from bridge.sandbox.slurm import SlurmCluster
from bridge.slurmrest import SlurmClient
from reconcilers.slurm_waiting import BridgeHold

pytestmark = pytest.mark.slurm


async def _until(
    slurm: SlurmClient, job_id: int, done: Callable[[SlurmJob], bool], *, timeout: float = 60
) -> SlurmJob:
    deadline = time.monotonic() + timeout
    while True:
        job = await slurm.get_job(job_id)
        if done(job):
            return job
        assert time.monotonic() < deadline, f"job {job_id}: {job.state} {job.state_reason}"
        await asyncio.sleep(0.3)


async def test_a_user_can_neither_release_the_bridges_hold_nor_forge_its_mark(
    cluster_client: SlurmClient, slurm_cluster: SlurmCluster
) -> None:
    slurm, cluster = cluster_client, slurm_cluster
    job_id = cluster.sbatch("--job-name=guarded")
    assert (await slurm.get_job(job_id)).held_by == "user"
    mark = BridgeHold().text()
    await slurm.hold_job(job_id, admin_comment=mark)  # what the bridge does once the JobSet exists
    held = await _until(slurm, job_id, lambda job: job.held_by == "admin")
    assert held.admin_comment == mark

    release = cluster.as_user("scontrol", "release", str(job_id))
    forge = cluster.as_user("scontrol", "update", f"jobid={job_id}", "AdminComment=forged")
    assert release.returncode != 0, release
    assert forge.returncode != 0, forge
    after = await slurm.get_job(job_id)
    assert after.state is JobState.PENDING
    assert after.held_by == "admin"
    assert after.admin_comment == mark

    cancel = cluster.as_user("scancel", str(job_id))  # the user keeps the right to cancel
    assert cancel.returncode == 0, cancel
    await _until(slurm, job_id, lambda job: job.state is JobState.CANCELLED)
