"""The node source's narrowed reads against the real slurmctld, both generations.

While a registration is due, the node source reads just the due nodes (``GET /node/{name}``) instead
of listing every node (docs/adr/0007-release-signal.md). What only the real Slurm can say: that a
node not registered yet answers "invalid node name" on both REST generations (and changes nothing),
and that a dynamic slurmd's registration shows up in such a read, IDLE, with no whole list between,
as the same node the whole list then gives.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from bridge.api.slurm_node import NodeState
from bridge.sandbox.slurm import SlurmCluster
from bridge.slurm.source import SlurmNodeSource, node_of
from bridge.slurmrest import SlurmClient
from reconcilers.slurm import node_job_id

pytestmark = pytest.mark.slurm


async def test_a_due_node_is_seen_registering_by_reads_alone(
    cluster_client: SlurmClient, slurm_cluster: SlurmCluster
) -> None:
    name = "b77-0"
    source = SlurmNodeSource(
        slurm=cluster_client,
        keep=lambda node: node_job_id(node) is not None,
        interval=3600.0,  # one whole list, at the start: everything after is a read alone
        fast_interval=0.2,
        due=lambda: [] if source.store.get(name) is not None else [name],
        due_interval=0.05,
    )
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(source.run())
        try:
            async with asyncio.timeout(30):
                # The node does not exist yet: reads that change nothing.
                while not source.has_synced() or source.reads < 3:
                    await asyncio.sleep(0.05)
            assert source.store.get(name) is None
            started = time.monotonic()
            node = await asyncio.to_thread(slurm_cluster.start_dynamic_node, name, cpus=1, memory_mb=300)
            try:
                async with asyncio.timeout(30):
                    while source.store.get(name) is None:
                        await asyncio.sleep(0.01)
                seen = node_of(source.store.get(name) or {})
                took = time.monotonic() - started
                print(f"Slurm {slurm_cluster.version}: seen after {took:.2f} s, {source.reads} reads")
                assert source.lists == 1  # no whole list since the first
                assert seen.state is NodeState.IDLE
                assert seen.is_idle_and_usable
                listed = {n.name: n for n in (await cluster_client.list_nodes()).nodes}
                assert listed[name].state is seen.state
                assert listed[name].features == seen.features
            finally:
                await asyncio.to_thread(slurm_cluster.stop_dynamic_node, node)
        finally:
            task.cancel()
