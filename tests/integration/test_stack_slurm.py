"""The Slurm part of the local stack is real: the bridge's whole Slurm cycle, over REST with a JWT.

Runs once per Slurm generation (22.05 with REST v0.0.38, 24.11 with v0.0.42) against the daemons the
``slurm_cluster`` fixture starts. It talks HTTP directly (aiohttp), not through the product's client,
so that it proves the stack and the REST facts the client is written against, nothing else:

held job seen held -> dynamic slurmd in a namespace registers with the job's feature -> pin
(constraints + node list) and release in one call -> COMPLETED on exactly that node -> node drained
and deleted (REST on 24.11; scontrol on 22.05, whose REST cannot change nodes) -> gone.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import pytest

from bridge.sandbox.netns import existing_namespaces
from bridge.sandbox.slurm import SlurmCluster

pytestmark = pytest.mark.slurm

JOB_SCRIPT = '#!/bin/sh\necho "node=$SLURMD_NODENAME"\n'


class Rest:
    """Just enough of slurmrestd for this test: JSON in, JSON out, ``errors`` always checked."""

    def __init__(self, session: aiohttp.ClientSession, cluster: SlurmCluster) -> None:
        self.session = session
        self.base = f"{cluster.rest_url}/slurm/{cluster.rest_version}"
        self.headers = {"X-SLURM-USER-NAME": "slurm", "X-SLURM-USER-TOKEN": cluster.token(lifespan=900)}

    async def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        async with self.session.request(
            method, f"{self.base}/{path}", json=body, headers=self.headers
        ) as reply:
            text = await reply.text()
            assert reply.status == 200, f"{method} {path}: HTTP {reply.status}: {text}"
            data: dict[str, Any] = await reply.json(content_type=None)
        assert not data.get("errors"), f"{method} {path}: {data['errors']}"
        return data

    async def job(self, job_id: int) -> dict[str, Any]:
        jobs = (await self.call("GET", f"job/{job_id}"))["jobs"]
        assert len(jobs) == 1
        job: dict[str, Any] = jobs[0]
        return job

    async def node_names(self) -> set[str]:
        return {node["name"] for node in (await self.call("GET", "nodes"))["nodes"]}


def _state(job: dict[str, Any]) -> set[str]:
    """``job_state`` as a set: a string in v0.0.38, a list of flags in v0.0.40+."""
    state = job["job_state"]
    return {state} if isinstance(state, str) else set(state)


def _features(node: dict[str, Any]) -> set[str]:
    features = node["active_features"]
    return set(features.split(",")) if isinstance(features, str) else set(features)


def _node_state(node: dict[str, Any]) -> set[str]:
    """Base state and flags: v0.0.38 has ``state: "idle"`` and ``state_flags: ["DRAIN", ...]``."""
    state = node["state"]
    states = [state] if isinstance(state, str) else list(state)
    return {s.upper() for s in [*states, *node.get("state_flags", [])]}


async def _wait_for_job(rest: Rest, job_id: int, *, done: set[str], timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job = await rest.job(job_id)
        # 24.11 reports e.g. [COMPLETED, COMPLETING] while the epilog runs: finished, not yet done.
        if _state(job) & done and "COMPLETING" not in _state(job):
            return job
        assert time.monotonic() < deadline, f"job {job_id} not in {done} after {timeout}s: {job['job_state']}"
        await asyncio.sleep(0.3)


async def test_held_job_runs_on_its_dynamic_node_then_the_node_is_deleted(
    slurm_cluster: SlurmCluster,
) -> None:
    cluster = slurm_cluster
    legacy = cluster.rest_version == "v0.0.38"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        rest = Rest(session, cluster)

        # A job submitted held by a plain user is PENDING, held by the user, priority 0, over REST.
        job_id = cluster.sbatch(
            f"--output={cluster.jobs_dir}/job-%j.out", "--job-name=bridged", script=JOB_SCRIPT
        )
        job = await rest.job(job_id)
        assert _state(job) == {"PENDING"}
        assert job["state_reason"] == "JobHeldUser"
        assert job["user_name"] == cluster.user
        if legacy:
            assert job["priority"] == 0
        else:
            assert job["hold"] is True
            assert job["priority"]["number"] == 0

        # A dynamic slurmd in its own network namespace registers with the job's feature.
        feature = f"bridge-job-{job_id}"
        name = f"b{job_id}-0"
        node = cluster.start_dynamic_node(name, cpus=1, memory_mb=500, features=[feature])
        assert node.namespace.name in existing_namespaces()
        nodes = (await rest.call("GET", f"node/{name}"))["nodes"]
        assert len(nodes) == 1
        assert {"k8sbridge", feature} <= _features(nodes[0])
        assert "IDLE" in _node_state(nodes[0])
        assert nodes[0]["address"] == node.address

        # Pin (constraints + node list) and release in one REST call; it runs to COMPLETED on that node.
        pin: dict[str, Any] = {"constraints": feature, "hold": False}
        pin |= {"nodelist": name} if legacy else {"required_nodes": [name]}
        await rest.call("POST", f"job/{job_id}", pin)
        job = await _wait_for_job(rest, job_id, done={"COMPLETED", "FAILED", "CANCELLED"}, timeout=90)
        assert _state(job) == {"COMPLETED"}, job["job_state"]
        assert job["nodes"] == name
        assert job["features"] == feature
        output = cluster.host_path(cluster.jobs_dir / f"job-{job_id}.out").read_text()
        assert output.strip() == f"node={name}"

        # Drain, then delete the node; it is gone from Slurm.
        if legacy:
            cluster.scontrol("update", f"nodename={name}", "state=drain", "reason=bridge: job done")
            drained = (await rest.call("GET", f"node/{name}"))["nodes"][0]
            assert "DRAIN" in _node_state(drained)
            cluster.scontrol("delete", f"nodename={name}")
        else:
            await rest.call("POST", f"node/{name}", {"state": ["DRAIN"], "reason": "bridge: job done"})
            drained = (await rest.call("GET", f"node/{name}"))["nodes"][0]
            assert "DRAIN" in _node_state(drained)
            await rest.call("DELETE", f"node/{name}")
        assert name not in await rest.node_names()

        # The pod goes away: its slurmd is stopped by pid and its namespace deleted.
        cluster.stop_dynamic_node(node)
        assert not node.process.alive()
        assert node.namespace.name not in existing_namespaces()
        assert name not in await rest.node_names()
