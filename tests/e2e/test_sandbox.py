"""The README's main job: ``python -m bridge.sandbox --demo`` runs a job through the whole stack."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bridge.sandbox.netns import existing_namespaces


def test_sandbox_demo_runs_a_two_node_job_through_the_bridge_and_leaves_nothing(tmp_path: Path) -> None:
    namespaces_before = set(existing_namespaces())
    workdirs_before = set(Path("/tmp").glob("k8s-bridge-sandbox-*"))
    completed = subprocess.run(
        # --no-ray: the Ray part (KubeRay, a shared head) has its own test,
        # tests/integration/test_stack_kuberay.py; here it would only add its start time.
        [sys.executable, "-m", "bridge.sandbox", "--demo", "--exit-after-demo", "--no-ray"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        cwd=tmp_path,
    )
    out = completed.stdout
    assert completed.returncode == 0, f"{out}\n{completed.stderr[-3000:]}"
    assert "the bridge created JobSet" in out
    assert "Kueue admitted it" in out
    task_nodes = sorted(line.split()[-1] for line in out.splitlines() if "ran on node" in line)
    assert len(task_nodes) == 2
    assert len(set(task_nodes)) == 2, task_nodes
    assert "nothing is left" in out
    assert set(existing_namespaces()) <= namespaces_before
    left = set(Path("/tmp").glob("k8s-bridge-sandbox-*")) - workdirs_before
    assert not left, f"the sandbox left its working directory: {left}"
