"""The e2e harness proves itself without the bridge: a JobSet made by hand runs a real Slurm job.

Why first: every bridge test below rests on the stack doing its part (Kueue admits the translated
JobSet against the runner flavor's quota, the runner really runs each slurmd pod in its own network
namespace, the shim makes slurmd join as the job's dynamic node, the pinned job runs on exactly those
nodes). Here each of the bridge's steps is done by the test, with the product's translator and
slurmrestd client, so a failure points at the harness, not at the bridge.
"""

from __future__ import annotations

from typing import Any

import pytest

from bridge.admission import WorkloadState
from bridge.api.slurm_job import JobState
from bridge.sandbox.e2e import JOBSETS, E2EStack
from bridge.sandbox.netns import existing_namespaces
from bridge.slurmrest import InvalidNodeName, SlurmClient
from tests.fixtures.e2e import (
    TASKS_SCRIPT,
    eventually,
    finished,
    job_output,
    jobset,
    running_pods,
    stack_summary,
    task_nodes,
    wait_job,
    workload_state_of,
)
from translators.slurm import FINALIZER, Translation, job_selector, translate

pytestmark = pytest.mark.slurm


async def test_hand_made_jobset_runs_the_held_job_on_its_two_slurmd_pods(
    e2e: E2EStack, slurm_client: SlurmClient
) -> None:
    stack, cluster = e2e, e2e.slurm
    job_id = cluster.sbatch(
        "-N2", "--ntasks-per-node=1", "--mem=400", "--job-name=smoke",
        f"--output={cluster.jobs_dir}/job-%j.out", script=TASKS_SCRIPT,
    )  # fmt: skip
    job = await slurm_client.get_job(job_id)
    assert job.is_pending
    assert job.hold

    translation = translate(job, stack.mixing_spec())
    assert isinstance(translation, Translation), translation
    assert translation.node_names == (f"b{job_id}-0", f"b{job_id}-1")
    ns, name = translation.namespace, translation.name
    assert ns == stack.settings.namespace
    stack.client.create(f"{JOBSETS}/namespaces/{ns}/jobsets", translation.manifest)
    path = f"{JOBSETS}/namespaces/{ns}/jobsets/{name}"
    try:
        # Kueue admits the JobSet against the runner flavor's quota and unsuspends it.
        await eventually(
            lambda: workload_state_of(stack, name) == WorkloadState.ADMITTED,
            timeout=60, what="Kueue to admit the JobSet", describe=lambda: stack_summary(stack),
        )  # fmt: skip
        await eventually(
            lambda: (jobset(stack, name) or {}).get("spec", {}).get("suspend") is False,
            timeout=30, what="the JobSet to be resumed", describe=lambda: stack_summary(stack),
        )  # fmt: skip

        # Two pods run on runner nodes, each in a network namespace of its own.
        selector = job_selector(stack.cluster_name, job_id)
        pods: list[dict[str, Any]] = await eventually(
            lambda: (found := running_pods(stack, selector=selector)) and len(found) == 2 and found,
            timeout=90, what="both slurmd pods to run",
            describe=lambda: stack_summary(stack) + "\nrunner log:\n" + stack.runner_log_tail(),
        )  # fmt: skip
        assert {p["spec"]["nodeName"] for p in pods} <= set(stack.runner_node_names)
        pod_ips = {p["status"]["podIP"] for p in pods}
        assert len(pod_ips) == 2

        # Their slurmd register as the job's dynamic nodes, idle, with its feature, at the pod IPs.
        async def registered() -> bool:
            for node_name in translation.node_names:
                try:
                    node = await slurm_client.get_node(node_name)
                except InvalidNodeName:
                    return False
                if node.state != "IDLE" or translation.feature not in node.active_features:
                    return False
            return True

        await eventually(
            registered, timeout=60, what="both nodes to register idle with the job's feature",
            describe=lambda: stack_summary(stack) + "\nrunner log:\n" + stack.runner_log_tail(),
        )  # fmt: skip
        nodes = [await slurm_client.get_node(n) for n in translation.node_names]
        assert {n.address for n in nodes} == pod_ips
        assert len(existing_namespaces()) >= 2

        # Pin and release in one call; the job completes, one task on each of exactly those nodes.
        await slurm_client.pin_and_release(
            job_id, nodes=translation.node_names, constraints=translation.constraints
        )
        done = await wait_job(slurm_client, job_id, until=finished, timeout=90, what="to finish", stack=stack)
        assert done.state == JobState.COMPLETED, done
        assert sorted(done.nodes) == sorted(translation.node_names)
        assert task_nodes(job_output(stack, f"job-{job_id}.out")) == sorted(translation.node_names)
    finally:
        # The bridge's cleanup, by hand: drain and delete the nodes, then let the JobSet go.
        for node_name in translation.node_names:
            try:
                await slurm_client.drain_node(node_name, reason="e2e harness: done")
                await slurm_client.delete_node(node_name)
            except InvalidNodeName:
                pass
        stack.client.request(
            "PATCH",
            path,
            body={"metadata": {"finalizers": None}},
            content_type="application/merge-patch+json",
        )
        stack.client.delete(path)
    assert FINALIZER in translation.manifest["metadata"]["finalizers"]
    await eventually(
        lambda: not stack.pods(labelSelector=selector) and jobset(stack, name) is None,
        timeout=60, what="the JobSet and its pods to go", describe=lambda: stack_summary(stack),
    )  # fmt: skip
