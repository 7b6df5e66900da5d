"""Fixtures of the e2e tier: the whole local stack once per Slurm version, a leak check around every test.

Why these scopes: the Kubernetes stack (control plane, Kueue, JobSet, kwok, scheduler) is shared by the
session (``kube_stack``, tens of seconds to start); the Slurm cluster is per module and per version
(``slurm_cluster``: one to twenty seconds), and :class:`~bridge.sandbox.e2e.E2EStack` wires the two
for the module (runner nodes, Kueue objects, JWT Secret, WorkloadMixing). Every test that takes ``e2e``
is checked afterwards for leaks (JobSets, Jobs, pods, Workloads, bridge Slurm nodes, network
namespaces, node and job processes), with time for asynchronous cleanup to finish; whatever a failed
test left is then scrubbed so the next test starts clean, and the leak still fails the test.

``K8S_BRIDGE_KEEP_WORKDIR=1`` keeps the Slurm workdir and the stack's logs.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import AsyncIterator, Iterator

import pytest

from bridge.sandbox.build import MissingPrerequisiteError
from bridge.sandbox.e2e import JOBSETS, E2EStack
from bridge.sandbox.netns import existing_namespaces
from bridge.sandbox.processes import StackError
from bridge.sandbox.slurm import SlurmCluster
from bridge.sandbox.stack import KubeStack
from bridge.slurmrest import JwtAuth, ScontrolCli, SlurmClient, StaticToken

pytestmark = pytest.mark.slurm

LEAK_GRACE = float(os.environ.get("K8S_BRIDGE_E2E_LEAK_GRACE", "60"))


@pytest.fixture(scope="module")
def e2e_stack(
    kube_stack: KubeStack, slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[E2EStack]:
    """The stack wired for this module's Slurm cluster (see the module docstring)."""
    stack = E2EStack(
        kube=kube_stack, slurm=slurm_cluster, workdir=tmp_path_factory.mktemp(f"e2e-{slurm_cluster.version}")
    )
    try:
        stack.start()
    except MissingPrerequisiteError as missing:
        pytest.fail(f"e2e stack: missing prerequisite: {missing}", pytrace=False)
    except StackError as failed:
        pytest.fail(f"e2e stack did not start: {failed}", pytrace=False)
    try:
        yield stack
    finally:
        stack.stop()


def scrub(stack: E2EStack) -> None:
    """Remove whatever a test left: Slurm jobs cancelled, bridge nodes deleted, JobSets (finalizers
    dropped), Jobs and pods deleted. Best effort; the leak check has already reported them."""
    cluster = stack.slurm
    out = cluster.scontrol("show", "jobs", "--oneliner", check=False)
    for word in out.split():
        if word.startswith("JobId="):
            with contextlib.suppress(StackError):
                cluster._run(["scancel", word.removeprefix("JobId=")])
    for name in stack.slurm_nodes():
        cluster.scontrol("update", f"nodename={name}", "state=down", "reason=e2e scrub", check=False)
        cluster.scontrol("delete", f"nodename={name}", check=False)
    ns = stack.settings.namespace
    for jobset in stack.jobsets():
        path = f"{JOBSETS}/namespaces/{ns}/jobsets/{jobset['metadata']['name']}"
        with contextlib.suppress(StackError):
            stack.client.request(
                "PATCH",
                path,
                body={"metadata": {"finalizers": None}},
                content_type="application/merge-patch+json",
            )
            stack.client.delete(path)
    for job in stack.list_items(f"/apis/batch/v1/namespaces/{ns}/jobs"):
        with contextlib.suppress(StackError):
            stack.client.delete(f"/apis/batch/v1/namespaces/{ns}/jobs/{job['metadata']['name']}")
    deadline = time.monotonic() + 30
    while (stack.pods() or stack.jobsets()) and time.monotonic() < deadline:
        time.sleep(0.5)


@pytest.fixture
def e2e(e2e_stack: E2EStack) -> Iterator[E2EStack]:
    """The module's stack, checked for leaks after the test (waiting up to LEAK_GRACE seconds)."""
    before = set(existing_namespaces())
    yield e2e_stack
    deadline = time.monotonic() + LEAK_GRACE
    leaks = e2e_stack.leaks(namespaces_before=before)
    while leaks and time.monotonic() < deadline:
        time.sleep(1.0)
        leaks = e2e_stack.leaks(namespaces_before=before)
    for bridge in list(e2e_stack.bridges):
        bridge.stop(grace=5.0)
    e2e_stack.bridges.clear()
    if leaks:
        scrub(e2e_stack)
    assert not leaks, "left behind after the test:\n  " + "\n  ".join(leaks)


@pytest.fixture
async def slurm_client(e2e_stack: E2EStack) -> AsyncIterator[SlurmClient]:
    """The product's slurmrestd client for the module's cluster, as SlurmUser (scontrol fallback set up)."""
    auth = JwtAuth(user_name="slurm", token=StaticToken(e2e_stack.slurm.token(lifespan=3600)))
    scontrol = ScontrolCli(auth=auth, argv_prefix=e2e_stack.scontrol_prefix(), env=e2e_stack.scontrol_env())
    async with SlurmClient(e2e_stack.slurm.rest_url, auth=auth, scontrol=scontrol) as client:
        yield client
