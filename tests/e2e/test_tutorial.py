"""docs/tutorial.md, run: every ``console`` block against the stack the sandbox runs, outputs checked.

Why an e2e test: the tutorial is the newcomer's path through the whole system (a Slurm job and a
Kubernetes Job sharing one pool under Kueue, a live WorkloadMixing edit, a preemption seen from
both sides, ``explain``), and it is true only while every command in it prints what it shows. The
stack is the sandbox's own wiring (``E2ESettings(pool="sandbox")``, Slurm 22.05, the bridge as a
subprocess) on the session's Kubernetes stack, and the shell gets the variables ``env.sh`` gives a
person (:func:`bridge.sandbox.shell_env.shell_environment`). The format of the page is
tests/fixtures/tutorial.py's. ``K8S_BRIDGE_TUTORIAL_RECORD=1`` prints what each command printed
and does not compare the blocks that are not waited on (for writing the page; never in CI).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

import pytest

from bridge.sandbox.build import MissingPrerequisiteError, stack_paths
from bridge.sandbox.e2e import E2ESettings, E2EStack
from bridge.sandbox.netns import existing_namespaces
from bridge.sandbox.processes import StackError
from bridge.sandbox.shell_env import shell_environment
from bridge.sandbox.slurm import SlurmCluster
from bridge.sandbox.stack import KubeStack
from tests.fixtures.docs_refs import ROOT
from tests.fixtures.e2e import bridge_ready
from tests.fixtures.tutorial import Shell, Step, environment, parse, run_steps

pytestmark = pytest.mark.slurm

TUTORIAL = ROOT / "docs" / "tutorial.md"
RECORD = os.environ.get("K8S_BRIDGE_TUTORIAL_RECORD") == "1"


@pytest.fixture(scope="module")
def sandbox(kube_stack: KubeStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[E2EStack]:
    """What ``python -m bridge.sandbox`` runs for Slurm (no Ray part: the tutorial has none)."""
    if not stack_paths().kubectl.exists():
        pytest.fail("kubectl is not built: run scripts/dev setup (python3 -m bridge.sandbox.build all)")
    try:
        with (
            SlurmCluster(version="22.05") as slurm,
            E2EStack(
                kube=kube_stack,
                slurm=slurm,
                workdir=tmp_path_factory.mktemp("tutorial"),
                settings=E2ESettings(pool="sandbox"),
            ) as stack,
        ):
            bridge = stack.bridge().start()
            deadline = time.monotonic() + 120
            while not bridge_ready(bridge):
                assert time.monotonic() < deadline, f"the bridge never served:\n{bridge.log_tail()}"
                time.sleep(0.5)
            yield stack
    except MissingPrerequisiteError as missing:
        pytest.fail(f"tutorial stack: missing prerequisite: {missing}", pytrace=False)
    except StackError as failed:
        pytest.fail(f"tutorial stack did not start: {failed}", pytrace=False)


def _cancel_everything(stack: E2EStack) -> None:
    out = stack.slurm.scontrol("show", "jobs", "--oneliner", check=False)
    for word in out.split():
        if word.startswith("JobId="):
            stack.slurm.scontrol("cancel", word.removeprefix("JobId="), check=False)
    ns = stack.settings.namespace
    for job in stack.list_items(f"/apis/batch/v1/namespaces/{ns}/jobs"):
        with contextlib.suppress(StackError):
            stack.client.delete(f"/apis/batch/v1/namespaces/{ns}/jobs/{job['metadata']['name']}")


def test_the_tutorial_runs_as_written(sandbox: E2EStack) -> None:
    steps = parse(TUTORIAL.read_text())
    assert len(steps) >= 20, "the tutorial lost its console blocks"
    before = set(existing_namespaces())
    shell = Shell(env=environment(shell_environment(sandbox)), cwd=ROOT)

    def show(step: Step, out: list[str]) -> None:
        if RECORD:
            print(f"\n$ {step.command}\n" + "\n".join(out), flush=True)

    try:
        run_steps(steps, shell, on_step=show, record=RECORD, wait_timeout=60.0 if RECORD else 300.0)
    except AssertionError as failed:
        raise AssertionError(f"{failed}\n--- bridge log:\n{sandbox.bridges[0].log_tail()}") from None
    finally:
        shell.close()
    deadline = time.monotonic() + 60
    leaks = sandbox.leaks(namespaces_before=before)
    while leaks and time.monotonic() < deadline:
        time.sleep(1.0)
        leaks = sandbox.leaks(namespaces_before=before)
    if leaks:
        _cancel_everything(sandbox)
    assert not leaks, "the tutorial's clean-up left:\n  " + "\n  ".join(leaks)
