"""docs/tutorial.md, run: every ``console`` block against the stack the sandbox runs, outputs checked.

Why an e2e test: the tutorial is the newcomer's path through the whole system (a Slurm job, a
Kubernetes Job, a Ray job in the shared RayCluster and an inference Deployment sharing one pool
under Kueue, a preemption seen from Kubernetes, Slurm and Ray, live WorkloadMixing edits,
``explain``), and it is true only while every command in it prints what it shows. The stack is the
sandbox's own wiring (``python -m bridge.sandbox``): a Kubernetes stack of the module's own with
Kueue's pod and Deployment integrations and their webhooks (:mod:`bridge.sandbox.serving`; the
session's stack runs without them), ``E2ESettings(pool="sandbox")``, Slurm 22.05, the Ray part
(:class:`~bridge.sandbox.ray_e2e.RayPool`), both bridges as subprocesses; the shell gets the
variables ``env.sh`` gives a person (:func:`bridge.sandbox.shell_env.shell_environment`). The
format of the page is tests/fixtures/tutorial.py's. ``K8S_BRIDGE_TUTORIAL_RECORD=1`` prints what
each command printed and does not compare the blocks that are not waited on (for writing the
page; never in CI).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from bridge.sandbox.build import MissingPrerequisiteError, stack_paths
from bridge.sandbox.e2e import BridgeProcess, E2ESettings, E2EStack
from bridge.sandbox.netns import existing_namespaces
from bridge.sandbox.processes import StackError
from bridge.sandbox.ray_e2e import RayPool
from bridge.sandbox.serving import SANDBOX_KUEUE_FRAMEWORKS, register_serving_webhooks
from bridge.sandbox.shell_env import shell_environment
from bridge.sandbox.slurm import SlurmCluster
from bridge.sandbox.stack import KubeStack
from tests.fixtures.docs_refs import ROOT
from tests.fixtures.e2e import bridge_ready
from tests.fixtures.tutorial import Shell, Step, environment, parse, run_steps

pytestmark = [pytest.mark.slurm, pytest.mark.ray]

TUTORIAL = ROOT / "docs" / "tutorial.md"
RECORD = os.environ.get("K8S_BRIDGE_TUTORIAL_RECORD") == "1"


@dataclass(frozen=True)
class Sandbox:
    stack: E2EStack
    ray: RayPool


def _wait_serving(bridge: BridgeProcess) -> None:
    deadline = time.monotonic() + 120
    while not bridge_ready(bridge):
        assert time.monotonic() < deadline, f"{bridge.name} never served:\n{bridge.log_tail()}"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """What ``python -m bridge.sandbox`` runs, on a Kubernetes stack of this module's own."""
    if not stack_paths().kubectl.exists():
        pytest.fail("kubectl is not built: run scripts/dev setup (python3 -m bridge.sandbox.build all)")
    workdir = tmp_path_factory.mktemp("tutorial")
    try:
        with (
            KubeStack(workdir=workdir / "kube", kueue_frameworks=SANDBOX_KUEUE_FRAMEWORKS) as kube,
            SlurmCluster(version="22.05") as slurm,
            E2EStack(
                kube=kube, slurm=slurm, workdir=workdir / "wiring", settings=E2ESettings(pool="sandbox")
            ) as stack,
            RayPool(stack, workdir=workdir / "ray") as ray,
        ):
            register_serving_webhooks(kube)
            _wait_serving(stack.bridge().start())
            ray_bridge = ray.bridge().start()
            _wait_serving(ray_bridge)
            ray.wait_gate_serving(ray_bridge)
            yield Sandbox(stack=stack, ray=ray)
    except MissingPrerequisiteError as missing:
        pytest.fail(f"tutorial stack: missing prerequisite: {missing}", pytrace=False)
    except StackError as failed:
        pytest.fail(f"tutorial stack did not start: {failed}", pytrace=False)


def _cancel_everything(sandbox: Sandbox) -> None:
    stack = sandbox.stack
    out = stack.slurm.scontrol("show", "jobs", "--oneliner", check=False)
    for word in out.split():
        if word.startswith("JobId="):
            stack.slurm.scontrol("cancel", word.removeprefix("JobId="), check=False)
    ns = stack.settings.namespace
    for collection in (f"/apis/batch/v1/namespaces/{ns}/jobs", f"/apis/apps/v1/namespaces/{ns}/deployments"):
        for item in stack.list_items(collection):
            with contextlib.suppress(StackError):
                stack.client.delete(f"{collection}/{item['metadata']['name']}")
    for job in stack.list_items(f"/apis/ray.io/v1/namespaces/{sandbox.ray.namespace}/rayjobs"):
        sandbox.ray.delete_rayjob(job["metadata"]["name"])


def _leaks(sandbox: Sandbox, *, namespaces_before: set[str]) -> list[str]:
    ns = sandbox.stack.settings.namespace
    deployments = sandbox.stack.list_items(f"/apis/apps/v1/namespaces/{ns}/deployments")
    return [
        *sandbox.stack.leaks(namespaces_before=namespaces_before),
        *sandbox.ray.leaks(),
        *(f"Deployment {ns}/{d['metadata']['name']}" for d in deployments),
    ]


def test_the_tutorial_runs_as_written(sandbox: Sandbox) -> None:
    steps = parse(TUTORIAL.read_text())
    assert len(steps) >= 20, "the tutorial lost its console blocks"
    before = set(existing_namespaces())
    shell = Shell(env=environment(shell_environment(sandbox.stack, ray=sandbox.ray)), cwd=ROOT)

    def show(step: Step, out: list[str]) -> None:
        if RECORD:
            print(f"\n$ {step.command}\n" + "\n".join(out), flush=True)

    try:
        run_steps(steps, shell, on_step=show, record=RECORD, wait_timeout=60.0 if RECORD else 300.0)
    except AssertionError as failed:
        logs = "\n".join(f"--- {b.name} log:\n{b.log_tail()}" for b in sandbox.stack.bridges)
        raise AssertionError(f"{failed}\n{logs}") from None
    finally:
        shell.close()
    deadline = time.monotonic() + 60
    leaks = _leaks(sandbox, namespaces_before=before)
    while leaks and time.monotonic() < deadline:
        time.sleep(1.0)
        leaks = _leaks(sandbox, namespaces_before=before)
    if leaks:
        _cancel_everything(sandbox)
    assert not leaks, "the tutorial's clean-up left:\n  " + "\n  ".join(leaks)
