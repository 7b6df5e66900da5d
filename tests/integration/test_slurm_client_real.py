"""The product's slurmrestd client against the real Slurm of the local stack, both generations.

Runs once per ``slurm_cluster`` (22.05 with REST v0.0.38, 24.11 with v0.0.40-42): the client finds
the version itself, polls with ``update_time`` until slurmctld answers 304, sees a held job held,
pins and releases it onto a dynamic node in one call, and drains and deletes the node (REST on
24.11; ``scontrol`` with the same JWT on 22.05, whose REST cannot change nodes).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bridge.api.slurm_job import JobState, SlurmJob
from bridge.sandbox.slurm import SlurmCluster
from bridge.slurm import (
    InvalidNodeName,
    JwtAuth,
    NotModified,
    ScontrolCli,
    SlurmClient,
    StaticToken,
)

pytestmark = pytest.mark.slurm

JOB_SCRIPT = '#!/bin/sh\necho "node=$SLURMD_NODENAME"\n'


@pytest.fixture
async def client(slurm_cluster: SlurmCluster) -> AsyncIterator[SlurmClient]:
    cluster = slurm_cluster
    auth = JwtAuth(user_name="slurm", token=StaticToken(cluster.token(lifespan=900)))
    prefix = [] if cluster.sysroot == Path("/") else ["chroot", str(cluster.sysroot)]
    scontrol = ScontrolCli(auth=auth, argv_prefix=prefix, env={"SLURM_CONF": str(cluster.conf_path)})
    async with SlurmClient(cluster.rest_url, auth=auth, scontrol=scontrol, timeout=30) as slurm:
        yield slurm


async def wait_for(slurm: SlurmClient, job_id: int, *, timeout: float) -> SlurmJob:
    deadline = time.monotonic() + timeout
    while True:
        job = await slurm.get_job(job_id)
        if job.is_finished and not job.is_completing:
            return job
        assert time.monotonic() < deadline, f"job {job_id} still {job.state} {sorted(job.state_flags)}"
        await asyncio.sleep(0.3)


async def test_version_is_detected(client: SlurmClient, slurm_cluster: SlurmCluster) -> None:
    pings = await client.ping()
    assert client.rest_version == slurm_cluster.rest_version
    assert any(p.responding for p in pings)


async def test_update_time_polling_answers_304(client: SlurmClient, slurm_cluster: SlurmCluster) -> None:
    page = await client.list_jobs()
    deadline = time.monotonic() + 20
    while True:  # a busy controller may change something between two polls; it settles quickly
        assert page.update_time is not None
        try:
            page = await client.list_jobs(update_time=page.update_time)
        except NotModified:
            break
        assert time.monotonic() < deadline, "slurmctld never answered 304"
        await asyncio.sleep(1)
    job_id = slurm_cluster.sbatch("--job-name=poll", script=JOB_SCRIPT)
    changed = await client.list_jobs(update_time=page.update_time)
    assert job_id in {j.job_id for j in changed.jobs}
    await client.cancel_job(job_id)


async def test_held_job_pinned_released_then_node_drained_and_deleted(
    client: SlurmClient, slurm_cluster: SlurmCluster
) -> None:
    cluster = slurm_cluster
    job_id = cluster.sbatch(
        f"--output={cluster.jobs_dir}/job-%j.out", "--job-name=bridged", script=JOB_SCRIPT
    )
    job = await client.get_job(job_id)
    assert job.state is JobState.PENDING
    assert job.hold
    assert job.held_by == "user"
    assert job.waits_for_bridge({"bridge"})

    feature = f"bridge-job-{job_id}"
    name = f"c{job_id}-0"
    node = cluster.start_dynamic_node(name, cpus=1, memory_mb=500, features=[feature])
    try:
        seen = await client.get_node(name)
        assert seen.is_idle_and_usable
        assert seen.has_feature(feature)

        await client.pin_and_release(job_id, nodes=[name], constraints=feature)
        done = await wait_for(client, job_id, timeout=90)
        assert done.state is JobState.COMPLETED
        assert done.nodes == (name,)
        assert done.is_pinned_to([name], feature)

        await client.drain_node(name, reason="k8s-bridge: job done")
        assert (await client.get_node(name)).is_drained_or_draining
        await client.delete_node(name)
        with pytest.raises(InvalidNodeName):
            await client.get_node(name)
    finally:
        cluster.stop_dynamic_node(node)
