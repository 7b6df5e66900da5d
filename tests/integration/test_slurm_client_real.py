"""The product's slurmrestd client against the real Slurm of the local stack, both generations.

Runs once per ``slurm_cluster`` (22.05 with REST v0.0.38, 24.11 with v0.0.40-42): the client finds
the version itself, polls with ``update_time`` until slurmctld answers 304, sees a held job held,
pins and releases it onto a dynamic node in one call, and drains and deletes the node (REST on
24.11; ``scontrol`` with the same JWT on 22.05, whose REST cannot change nodes).
"""

from __future__ import annotations

import asyncio
import time

import pytest

from bridge.api.slurm_job import JobState, SlurmJob
from bridge.sandbox.slurm import SlurmCluster
from bridge.slurmrest import (
    InvalidNodeName,
    NotModified,
    SlurmClient,
)

pytestmark = pytest.mark.slurm

JOB_SCRIPT = '#!/bin/sh\necho "node=$SLURMD_NODENAME"\n'


@pytest.fixture
def client(cluster_client: SlurmClient) -> SlurmClient:
    return cluster_client


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


async def test_hold_lands_on_a_released_job_whose_pinned_nodes_were_deleted(
    client: SlurmClient, slurm_cluster: SlurmCluster
) -> None:
    """Released onto its nodes, then the nodes deleted before the job started (a preemption, a crash
    between steps). 24.11 refuses every update of such a job with 2018, before reading its body: the
    bridge's hold of it used to be retried forever. With ``unpin`` the hold lands on both versions,
    the bridge's pin goes (its feature stays), no placeholder node is left, and the job takes
    updates again."""
    cluster = slurm_cluster
    # With fewer CPUs in the partition than the job asks for (here: none), both versions apply a hold
    # but answer 2015 (the job limits check that follows it): a node of someone else with enough CPUs
    # keeps that apart from what is tested here.
    keep = cluster.start_dynamic_node("keep0", cpus=2, memory_mb=500)
    job_id = cluster.sbatch("-N2", "--begin=now+3600", "--job-name=stale-pin", script=JOB_SCRIPT)
    names = [f"b{job_id}-0", f"b{job_id}-1"]
    feature = f"bridge-job-{job_id}"
    try:
        nodes = [cluster.start_dynamic_node(n, cpus=1, memory_mb=500, features=[feature]) for n in names]
        try:
            await client.pin_and_release(job_id, nodes=names, constraints=feature)
            released = await client.get_job(job_id)  # --begin keeps it pending once released
            assert released.state is JobState.PENDING
            assert not released.hold
            assert released.is_pinned_to(names, feature)
        finally:
            for node in nodes:
                cluster.stop_dynamic_node(node)
        for name in names:
            await client.delete_node(name)

        if cluster.version == "24.11":
            with pytest.raises(InvalidNodeName):
                await client.hold_job(job_id)  # the hold alone, as before: refused
        await client.hold_job(job_id, unpin=names)

        held = await client.get_job(job_id)
        assert held.state is JobState.PENDING
        assert held.hold
        assert held.held_by == "admin"
        assert held.required_nodes == ()
        assert held.features == feature
        assert held.node_count == 2  # what its JobSet was made for: unpinning changes nothing else
        for name in names:
            with pytest.raises(InvalidNodeName):
                await client.get_node(name, future=True)
        await client.set_comment(job_id, "k8s-bridge: takes updates again")
        assert (await client.get_job(job_id)).comment == "k8s-bridge: takes updates again"
        await client.cancel_job(job_id)
    finally:
        cluster.stop_dynamic_node(keep)
        await client.delete_node("keep0")


async def test_a_job_list_decodes_and_parses_only_the_jobs_that_changed(
    client: SlurmClient, slurm_cluster: SlurmCluster
) -> None:
    """slurmrestd's real answers, split into each job's text: a list again with nothing new decodes
    no job whose text is the same; a comment written on one held job costs one parse, and the page is
    what a whole decode and parse gives (jobs that only a field no adapter reads changed, 24.11's
    ``last_sched_evaluation``, are decoded, not parsed)."""
    ids = [slurm_cluster.sbatch("--hold", "--job-name=known", script=JOB_SCRIPT) for _ in range(3)]
    try:
        await client.list_jobs()
        known = client.known_jobs
        parsed = known.parsed
        again = await client.list_jobs()
        assert known.parsed == parsed
        assert known.reused >= len(ids)
        await client.set_comment(ids[1], "changed since the last list")
        decoded = known.decoded
        page = await client.list_jobs()
        assert known.parsed == parsed + 1
        assert known.decoded >= decoded + 1
        by_id = {j.job_id: j for j in page.jobs}
        before = {j.job_id: j for j in again.jobs}
        assert by_id[ids[1]].comment == "changed since the last list"
        assert by_id[ids[0]] is before[ids[0]]
        assert by_id[ids[2]] is before[ids[2]]
        for job_id in ids:  # a single job's read decodes its whole answer: the same job
            assert await client.get_job(job_id) == by_id[job_id]
    finally:
        for job_id in ids:
            await client.cancel_job(job_id)
