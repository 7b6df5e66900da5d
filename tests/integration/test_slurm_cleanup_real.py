"""The bridge's cleanup of a job whose slurmd is gone, against the real slurmctld of both versions.

A two-node job runs on two dynamic nodes; one node's slurmd goes (its pod was deleted: what a node
failure or an eviction looks like) and the job is cancelled: one node completes, the other stays
COMPLETING and NOT_RESPONDING. slurmctld 22.05.8 segfaulted when the first node was deleted while the
job was still completing and the second was then set DOWN, the sequence the bridge used to run. Here
the reconciler's own ``decide`` chooses every step from what the real Slurm shows, and its node
actions go through the product's client, until nothing is left: slurmctld must be running after
each step, the job must end, and no node may be left.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from bridge.api.mixing import WorkloadMixingSpec
from bridge.sandbox.slurm import SlurmCluster
from bridge.slurmrest import InvalidNodeName, SlurmClient, SlurmError
from reconcilers.slurm import DeleteNodes, DownNodes, DrainNodes, Observed, decide, node_job_id
from tests.fixtures.mixing import slurm_spec

pytestmark = pytest.mark.slurm

SPEC = WorkloadMixingSpec.model_validate({"slurm": slurm_spec()})


@pytest.fixture
def client(cluster_client: SlurmClient) -> SlurmClient:
    return cluster_client


def slurmctld_alive(cluster: SlurmCluster) -> bool:
    out = cluster._run(["scontrol", "ping"], check=False).stdout
    return "is UP" in out


async def until(predicate: object, *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.5)


async def test_cleanup_of_a_cancelled_job_with_a_silent_node_leaves_slurmctld_running(
    client: SlurmClient, slurm_cluster: SlurmCluster
) -> None:
    cluster = slurm_cluster
    job_id = cluster.sbatch("-N2", "--job-name=silent", script="#!/bin/sh\nsleep 600\n")
    names = (f"b{job_id}-0", f"b{job_id}-1")
    feature = f"bridge-job-{job_id}"
    nodes = [cluster.start_dynamic_node(n, cpus=1, memory_mb=500, features=[feature]) for n in names]
    try:
        await client.pin_and_release(job_id, nodes=names, constraints=feature)

        async def running() -> bool:
            return (await client.get_job(job_id)).is_running

        await until(running, timeout=60, what="the job to run")
        cluster.stop_dynamic_node(nodes[1])  # its pod is gone
        await client.cancel_job(job_id)

        async def silent() -> bool:
            return "NOT_RESPONDING" in (await client.get_node(names[1])).state_flags

        await until(silent, timeout=60, what=f"{names[1]} to stop responding")
        steps: list[str] = []
        deadline = time.monotonic() + 120
        while True:
            job = await client.get_job(job_id)
            seen = tuple(n for n in (await client.list_nodes()).nodes if node_job_id(n) == job_id)
            d = decide(Observed(job_id=job_id, job=job, partitions=frozenset(SPEC.slurm.partitions)
                                if SPEC.slurm else frozenset(), nodes=seen))  # fmt: skip
            if not d.actions and not seen:
                break
            for action in d.actions:
                steps.append(f"{action.kind} {','.join(getattr(action, 'names', ()))}")
                try:
                    if isinstance(action, DrainNodes):
                        for name in action.names:
                            await client.drain_node(name, reason=action.reason)
                    elif isinstance(action, DownNodes):
                        for name in action.names:
                            await client.down_node(name, reason=action.reason)
                    elif isinstance(action, DeleteNodes):
                        for name in action.names:
                            await client.delete_node(name, down_if_busy=name not in action.down_already)
                except InvalidNodeName:
                    pass
                except SlurmError as failed:
                    if not slurmctld_alive(cluster):
                        pytest.fail(f"slurmctld died after: {steps} ({failed})")
                    raise
                await asyncio.sleep(1.0)  # slurmctld's crash came from its own follow-up work
                assert slurmctld_alive(cluster), f"slurmctld died after: {steps}"
            assert time.monotonic() < deadline, f"cleanup did not finish: {steps}, nodes {seen}"
            await asyncio.sleep(d.requeue_after or 0.5)
        assert slurmctld_alive(cluster), steps
        done = await client.get_job(job_id)
        assert done.is_finished
        assert not done.is_completing
        for name in names:
            with pytest.raises(InvalidNodeName):
                await client.get_node(name)
        # The order that crashed 22.05.8 never happened: no node deleted before the job completed.
        first_delete = next(i for i, s in enumerate(steps) if s.startswith("delete_nodes"))
        assert any(s.startswith("down_nodes") for s in steps[:first_delete]), steps
        print(f"Slurm {cluster.version}: {steps}")
    finally:
        for node in nodes:
            if node.process.alive():
                cluster.stop_dynamic_node(node)
