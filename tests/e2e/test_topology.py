"""Kueue's topology-aware scheduling (TAS) on bridged Slurm jobs.

The bridge asks for a topology with a pod-template annotation (``--switches=1`` or the partition's
entry in ``spec.slurm.topology``, :func:`~bridge.api.mixing.resolve_slurm_topology`); Kueue does the
placing. The claims, on the real stack (Kueue's TAS, JobSet, kube-scheduler, Slurm, slurmd pods that
really run), over four runner nodes of one CPU each in one block of two racks (a Kueue ``Topology``
of levels block / rack / host, the ResourceFlavor naming it):

- a 2-node job that asks for one rack, submitted while a 1-node job holds one host of some rack (the
  free hosts then span both racks), gets both slurmd pods on the two hosts of the other rack: the
  Workload's ``topologyAssignment`` names them, the pods are bound to exactly those nodes, and the
  job's tasks ran on its own Slurm nodes ``b<id>-0/1``, which are those pods; ``explain`` prints the
  assignment;
- a 3-node job that asks for one rack (of two hosts) waits with its JobSet suspended, takes no pod
  and no Slurm node, and the Slurm job's comment carries Kueue's reason (the topology fits only some
  of its 3 pods), although the ClusterQueue's quota (4 CPUs) would admit it; ``explain`` says so too.

How the job asks depends on what the bridge can read: Slurm 24.11's REST API reports ``--switches``
(``required_switches``), so there the job says ``--switches=1`` and ``topology.switches`` maps it to
the rack level; 22.05's (v0.0.38) does not report it, so there the bridged partition's entry in
``topology.partitions`` asks for the rack for every job of the partition. Either way the same
annotation, ``kueue.x-k8s.io/podset-required-topology: example.com/rack``, reaches Kueue.

The module owns its E2EStack (pool ``e2e-tas``: its own Topology, flavor and ClusterQueue) on the
session's Kubernetes stack. Leaks are checked after every test by the ``e2e`` fixture.
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from bridge.admission import WorkloadState, admitted_podsets, describe_workload, is_condition_true
from bridge.api.slurm_job import JobState
from bridge.sandbox.e2e import BridgeProcess, E2ESettings, E2EStack
from bridge.sandbox.processes import StackError
from bridge.sandbox.slurm import BRIDGE_PARTITION, SlurmCluster
from bridge.sandbox.stack import KubeStack
from bridge.slurmrest import SlurmClient
from tests.fixtures.e2e import (
    TASKS_SCRIPT,
    bridge_ready,
    eventually,
    finished,
    job_output,
    jobset,
    scancel,
    stack_summary,
    task_nodes,
    wait_job,
    workload_of,
)
from translators.slurm import job_selector, jobset_name

pytestmark = pytest.mark.slurm

BLOCK, RACK, HOST = "example.com/block", "example.com/rack", "kubernetes.io/hostname"
RACKS, HOSTS_PER_RACK = 2, 2
JOB_TIMEOUT = 150.0
CLEANUP_TIMEOUT = 60.0
TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-required-topology"


@dataclass(frozen=True, kw_only=True)
class RackRequest:
    """How a job of this Slurm version asks for one rack: the WorkloadMixing's ``topology`` and the
    sbatch options of a job that asks (see the module docstring)."""

    mixing_topology: dict[str, Any]
    sbatch_options: tuple[str, ...]


def rack_request(version: str) -> RackRequest:
    if version == "22.05":  # v0.0.38 does not report --switches: the partition asks for every job
        return RackRequest(
            mixing_topology={"partitions": [{"partition": BRIDGE_PARTITION, "required": RACK}]},
            sbatch_options=(),
        )
    return RackRequest(mixing_topology={"switches": {"required": RACK}}, sbatch_options=("--switches=1",))


def node_labels() -> tuple[dict[str, str], ...]:
    """Runner node ``i``: block ``block-0``, rack ``rack-<i // 2>``."""
    return tuple(
        {BLOCK: "block-0", RACK: f"rack-{i // HOSTS_PER_RACK}"} for i in range(RACKS * HOSTS_PER_RACK)
    )


@pytest.fixture(scope="module")
def e2e_stack(
    kube_stack: KubeStack, slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[E2EStack]:
    """Four one-CPU runner nodes in two racks under a Kueue Topology; quota for four 1-CPU pods."""
    settings = E2ESettings(
        pool="e2e-tas",
        runner_nodes=RACKS * HOSTS_PER_RACK,
        runner_cpu="1",
        runner_memory="2Gi",
        kwok_nodes=0,
        quota_cpu="4",
        quota_memory="4Gi",
        runner_node_labels=node_labels(),
        topology_levels=(BLOCK, RACK, HOST),
        slurm_topology=rack_request(slurm_cluster.version).mixing_topology,
    )
    stack = E2EStack(
        kube=kube_stack,
        slurm=slurm_cluster,
        workdir=tmp_path_factory.mktemp(f"tas-{slurm_cluster.version}"),
        settings=settings,
    )
    try:
        stack.start()
    except StackError as failed:
        pytest.fail(f"the e2e stack did not start: {failed}", pytrace=False)
    try:
        yield stack
    finally:
        stack.stop()


# --- helpers --------------------------------------------------------------------------------------


async def started_bridge(stack: E2EStack) -> BridgeProcess:
    bridge = stack.bridge().start()
    await eventually(lambda: bridge_ready(bridge), timeout=60, what="the bridge to serve /metrics")
    return bridge


def submit(stack: E2EStack, *options: str, nodes: int, script: str, name: str) -> int:
    cluster = stack.slurm
    return cluster.sbatch(
        f"-N{nodes}", "--ntasks-per-node=1", "--mem=400", f"--job-name={name}",
        f"--output={cluster.jobs_dir}/job-%j.out", *options, script=script,
    )  # fmt: skip


def expected_nodes(job_id: int, count: int) -> list[str]:
    return [f"b{job_id}-{i}" for i in range(count)]


def rack_of(stack: E2EStack, node: str) -> str:
    labels: dict[str, str] = stack.client.get(f"/api/v1/nodes/{node}")["metadata"].get("labels") or {}
    return labels.get(RACK, "")


def job_pods(stack: E2EStack, job_id: int) -> list[dict[str, Any]]:
    return stack.pods(labelSelector=job_selector(stack.cluster_name, job_id))


def pod_nodes(stack: E2EStack, job_id: int) -> list[str]:
    """The nodes the job's pods are bound to, sorted (a pod not bound yet: "")."""
    return sorted(str(p.get("spec", {}).get("nodeName") or "") for p in job_pods(stack, job_id))


def assigned_hosts(workload: dict[str, Any] | None) -> list[str]:
    """The hosts of the Workload's topology assignment, one per pod, sorted."""
    hosts: list[str] = []
    for podset in admitted_podsets(workload or {}):
        for domain in podset.topology:
            hosts += [domain.values.get(HOST, "")] * domain.count
    return sorted(hosts)


def topology_message(workload: dict[str, Any] | None) -> str | None:
    """Kueue's message on ``QuotaReserved=False`` when TAS found no domain for the pods."""
    view = describe_workload(workload) if workload is not None else None
    if view is None or view.state is not WorkloadState.PENDING or "topology" not in view.message:
        return None
    return view.message


async def wait_cleaned_up(stack: E2EStack, job_id: int, bridge: BridgeProcess, *, count: int) -> None:
    name = jobset_name(stack.cluster_name, job_id)

    def gone() -> bool:
        return (
            jobset(stack, name) is None
            and not job_pods(stack, job_id)
            and not set(expected_nodes(job_id, count)) & set(stack.slurm_nodes())
        )

    await eventually(
        gone, timeout=CLEANUP_TIMEOUT, what=f"job {job_id}'s JobSet, pods and nodes to go",
        describe=lambda: stack_summary(stack, bridge=bridge),
    )  # fmt: skip


# --- 1 ---------------------------------------------------------------------------------------------


async def test_a_two_node_job_asking_for_one_rack_gets_the_free_rack_and_runs_on_exactly_its_nodes(
    e2e: E2EStack, slurm_client: SlurmClient
) -> None:
    ask = rack_request(e2e.slurm.version)
    bridge = await started_bridge(e2e)
    # A 1-node job holds one host of some rack: the three free hosts span both racks.
    holder = submit(e2e, nodes=1, script="#!/bin/sh\nsleep 300\n", name="holder")
    job_id: int | None = None
    try:
        await wait_job(
            slurm_client, holder, until=lambda j: j.is_running, timeout=JOB_TIMEOUT, what="to run",
            stack=e2e, bridge=bridge,
        )  # fmt: skip
        (held_host,) = pod_nodes(e2e, holder)
        held_rack = rack_of(e2e, held_host)

        # It runs until the test has read explain: a job that has ended is explained as ended.
        gate = e2e.slurm.jobs_dir / "racked.gate"
        wait = f"while [ ! -e {shlex.quote(str(gate))} ]; do sleep 0.2; done\n"
        job_id = submit(e2e, *ask.sbatch_options, nodes=2, script=TASKS_SCRIPT + wait, name="racked")
        name = jobset_name(e2e.cluster_name, job_id)
        running = await wait_job(
            slurm_client, job_id, until=lambda j: j.is_running or j.is_finished, timeout=JOB_TIMEOUT,
            what="to run in one rack", stack=e2e, bridge=bridge,
        )  # fmt: skip
        assert sorted(running.nodes) == expected_nodes(job_id, 2), running
        template = (jobset(e2e, name) or {})["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
        assert template["metadata"]["annotations"][TOPOLOGY_ANNOTATION] == RACK

        hosts = assigned_hosts(workload_of(e2e, name))
        assert len(hosts) == 2, workload_of(e2e, name)
        assert pod_nodes(e2e, job_id) == hosts  # the pods are bound to exactly the assigned hosts
        racks = {rack_of(e2e, host) for host in hosts}
        assert len(racks) == 1, (hosts, racks)  # one rack ...
        assert held_rack not in racks, (held_host, hosts)  # ... the one with two free hosts

        explained = e2e.explain(job_id)
        assert explained.returncode == 0, explained.stderr[-2000:]
        for host in hosts:
            assert f"topology domain {HOST}={host}: 1 pod(s)" in explained.stdout, explained.stdout
        print(explained.stdout.split("---", 1)[0])
        e2e.slurm.host_path(gate).touch()

        done = await wait_job(
            slurm_client, job_id, until=finished, timeout=JOB_TIMEOUT, what="to complete",
            stack=e2e, bridge=bridge,
        )  # fmt: skip
        assert done.state == JobState.COMPLETED, done
        assert sorted(done.nodes) == expected_nodes(job_id, 2), done
        output = job_output(e2e, f"job-{job_id}.out")
        assert task_nodes(output) == expected_nodes(job_id, 2), output
    finally:
        e2e.slurm.host_path(e2e.slurm.jobs_dir / "racked.gate").touch()
        for job in (holder, job_id):
            if job is not None:
                scancel(e2e, job)
    await wait_cleaned_up(e2e, job_id, bridge, count=2)
    await wait_cleaned_up(e2e, holder, bridge, count=1)
    assert bridge.alive(), bridge.log_tail()
    print(
        f"Slurm {e2e.slurm.version}: holder on {held_host} ({held_rack}); job {job_id} "
        f"({' '.join(ask.sbatch_options) or 'partition entry'}) on {hosts} ({racks.pop()})"
    )


# --- 2 ---------------------------------------------------------------------------------------------


async def test_a_job_no_rack_can_hold_waits_without_pods_and_says_why_on_the_slurm_job(
    e2e: E2EStack, slurm_client: SlurmClient
) -> None:
    ask = rack_request(e2e.slurm.version)
    bridge = await started_bridge(e2e)
    job_id = submit(e2e, *ask.sbatch_options, nodes=3, script=TASKS_SCRIPT, name="too-wide")
    name = jobset_name(e2e.cluster_name, job_id)
    try:
        message = await eventually(
            lambda: topology_message(workload_of(e2e, name)), timeout=60,
            what="Kueue to say the topology cannot hold the job",
            describe=lambda: stack_summary(e2e, bridge=bridge),
        )  # fmt: skip
        said = f'topology "{e2e.settings.topology}"'
        assert said in message, message
        assert "of 3 pod(s)" in message, message  # "allows to fit only 2 out of 3 pod(s)" (one rack's)
        commented = await wait_job(
            slurm_client, job_id, until=lambda j: said in j.comment, timeout=90,
            what="to carry Kueue's reason in its comment", stack=e2e, bridge=bridge,
        )  # fmt: skip
        assert "of 3 pod(s)" in commented.comment, commented.comment
        assert commented.is_pending, commented
        assert commented.hold, commented
        assert commented.comment.startswith("k8s-bridge: queued in Kueue"), commented.comment
        # It waits for the topology, not for quota: the ClusterQueue has 4 CPUs free, the job needs 3.
        workload = workload_of(e2e, name)
        assert workload is not None
        assert not is_condition_true(workload, "QuotaReserved"), workload["status"]
        assert (jobset(e2e, name) or {})["spec"]["suspend"] is True
        assert job_pods(e2e, job_id) == []
        assert not set(expected_nodes(job_id, 3)) & set(e2e.slurm_nodes())

        explained = e2e.explain(job_id)
        assert explained.returncode == 0, explained.stderr[-2000:]
        assert f"Pending: Pending: {message}" in explained.stdout, explained.stdout
        print(explained.stdout.split("---", 1)[0])
    finally:
        with contextlib.suppress(StackError):
            scancel(e2e, job_id)
    await wait_cleaned_up(e2e, job_id, bridge, count=3)
    assert bridge.alive(), bridge.log_tail()
    print(f"Slurm {e2e.slurm.version}: job {job_id} (3 nodes) waits: {commented.comment!r}")
