"""``python -m bridge.sandbox``: the whole local stack with k8s-bridge running on it.

What a newcomer wants from one command: a Kubernetes control plane with the real Kueue and JobSet
controllers, nodes that really run pods (process-runner nodes) beside simulated ones (kwok), a real
Slurm cluster whose bridge partition is fed by the bridge, and ``python -m bridge.slurm`` itself,
all wired the way a site would wire them (:class:`bridge.sandbox.e2e.E2EStack`); the real KubeRay
operator with a shared RayCluster (namespace ``ray``, name ``shared``, a head only) whose head runs
on a runner node, and ``python -m bridge.ray`` with its gate webhook, so that a RayJob in that cluster
gets its own workers admitted by Kueue from the same pool (:class:`bridge.sandbox.ray_e2e.RayPool`;
``--no-ray`` leaves the Ray part out); and Kueue's pod and Deployment integrations, so that serving
work queues there too (:mod:`bridge.sandbox.serving`). It prints how to talk to each part and keeps
running until Ctrl-C, then stops everything it started.

``--demo`` submits a held two-node job and prints its way through the bridge (JobSet created, Kueue
admission, slurmd pods joining, release, completion, clean-up), then, with the Ray part, a RayJob
in the shared cluster through the Ray bridge; ``--exit-after-demo`` then stops the stack, which makes
the command a smoke test of the whole project.
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from bridge.sandbox import owners
from bridge.sandbox.build import MissingPrerequisiteError
from bridge.sandbox.e2e import JOBSETS, E2ESettings, E2EStack
from bridge.sandbox.kuberay import head_service, wait_job_status
from bridge.sandbox.processes import StackError
from bridge.sandbox.ray_e2e import RayPool
from bridge.sandbox.serving import SANDBOX_KUEUE_FRAMEWORKS, register_serving_webhooks
from bridge.sandbox.shell_env import write_env_script
from bridge.sandbox.slurm import SlurmCluster
from bridge.sandbox.slurm_root import RootBuildError
from bridge.sandbox.stack import KubeStack
from translators.slurm import jobset_name

DEMO_SCRIPT = "#!/bin/sh\nsrun sh -c 'echo \"task $SLURM_PROCID ran on node $SLURMD_NODENAME\"'\n"
RAY_DEMO_ENTRYPOINT = (
    "python -c \"import ray; ray.init(); print('Ray ran the job on', ray.util.get_node_ip_address())\""
)


def _say(message: str) -> None:
    print(f"[sandbox] {message}", flush=True)


def _wait(probe: Callable[[], Any], *, what: str, timeout: float, stopping: threading.Event) -> Any:
    deadline = time.monotonic() + timeout
    while not stopping.is_set():
        found = probe()
        if found:
            return found
        if time.monotonic() > deadline:
            raise StackError(f"demo: timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.5)
    raise StackError("demo: interrupted")


def _slurm_state(stack: E2EStack, job_id: int) -> str:
    out = stack.slurm.scontrol("show", "job", str(job_id), "--oneliner")
    fields = dict(word.split("=", 1) for word in out.split() if "=" in word)
    return fields.get("JobState", "?")


def run_demo(stack: E2EStack, *, stopping: threading.Event) -> None:
    """Submit a held two-node job and follow it through the bridge to completion and clean-up."""
    job_id = stack.slurm.sbatch("-N2", "--job-name=sandbox-demo", script=DEMO_SCRIPT)
    name = jobset_name(stack.cluster_name, job_id)
    jobset_path = f"{JOBSETS}/namespaces/{stack.settings.namespace}/jobsets/{name}"
    _say(f"submitted Slurm job {job_id} held (sbatch --hold -N2 -p bridge)")

    def jobset() -> dict[str, Any] | None:
        items = stack.list_items(f"{JOBSETS}/namespaces/{stack.settings.namespace}/jobsets")
        return next((js for js in items if js["metadata"]["name"] == name), None)

    _wait(jobset, what=f"JobSet {name}", timeout=60, stopping=stopping)
    _say(f"the bridge created JobSet {stack.settings.namespace}/{name}, suspended, queued in Kueue")
    _wait(
        lambda: (jobset() or {}).get("spec", {}).get("suspend") is False,
        what="Kueue admission",
        timeout=120,
        stopping=stopping,
    )
    _say("Kueue admitted it: the JobSet is unsuspended and its slurmd pods start on runner nodes")
    _wait(
        lambda: _slurm_state(stack, job_id) in {"RUNNING", "COMPLETING", "COMPLETED"},
        what="the job to run",
        timeout=120,
        stopping=stopping,
    )
    _say(f"the slurmd pods joined Slurm; the bridge pinned job {job_id} to them and released it")
    _wait(
        lambda: _slurm_state(stack, job_id) == "COMPLETED", what="completion", timeout=120, stopping=stopping
    )
    output = stack.slurm.host_path(stack.slurm.jobs_dir / f"slurm-{job_id}.out").read_text().strip()
    _say(f"job {job_id} COMPLETED; its output:\n" + "\n".join(f"    {line}" for line in output.splitlines()))
    _wait(
        lambda: not stack.client.exists(jobset_path) and not stack.slurm_nodes(),
        what="clean-up",
        timeout=120,
        stopping=stopping,
    )
    _say("the bridge drained and deleted the Slurm nodes and deleted the JobSet: nothing is left")


def run_ray_demo(ray: RayPool) -> None:
    """Submit a RayJob to the shared cluster (clusterSelector, HTTPMode) and print its way through the
    Ray bridge: gated, its worker JobSet admitted by Kueue, the job run on that worker."""
    name = "sandbox-demo"
    ray.create_rayjob(ray.rayjob(name, entrypoint=RAY_DEMO_ENTRYPOINT))
    _say(f"created RayJob {ray.namespace}/{name} with clusterSelector ray.io/cluster={ray.cluster}")
    status = wait_job_status(
        ray.client,
        namespace=ray.namespace,
        name=name,
        statuses=frozenset({"SUCCEEDED", "FAILED", "STOPPED"}),
    )
    if status["jobStatus"] != "SUCCEEDED":
        raise StackError(f"demo: RayJob {name} ended {status['jobStatus']}: {status}")
    # Its worker (and the logs on it) may be gone already: Ray's node table keeps the dead nodes.
    driver = str((ray.ray_job(str(status["jobId"])) or {}).get("driver_node_id"))
    ran_on = next((n for n in ray.ray_nodes() if str(n.get("node_id")) == driver), {})
    where = "the head" if ran_on.get("is_head_node") else f"its own worker {ran_on.get('node_ip', '?')}"
    _say(
        "the Ray bridge gated it and queued one worker in Kueue; once admitted, the worker joined the "
        f"shared head and Ray ran the job on {where}: SUCCEEDED"
    )
    ray.delete_rayjob(name)


def _print_ray_guide(kube: KubeStack, ray: RayPool) -> None:
    head = head_service(ray.raycluster)
    _say(
        f"shared RayCluster {ray.namespace}/{ray.cluster} is ready and the Ray bridge runs "
        f"WorkloadMixing {ray.mixing_name}: RayJobs in namespace {ray.namespace} with spec.clusterSelector "
        f"{{ray.io/cluster: {ray.cluster}}} (submissionMode HTTPMode) get their own Kueue-admitted workers"
    )
    _say(f"its dashboard: {kube.server}/api/v1/namespaces/{ray.namespace}/services/{head}:dashboard/proxy/")


def _print_guide(kube: KubeStack, slurm: SlurmCluster, stack: E2EStack) -> None:
    conf = f"SLURM_CONF={slurm.conf_path}"
    prefix = shlex.join(stack.scontrol_prefix()) + " " if stack.scontrol_prefix() else ""
    _say(f"Slurm {slurm.version}, REST {slurm.rest_version} at {slurm.rest_url}")
    _say(f"kubeconfig: {kube.kubeconfig}")
    _say(f"WorkloadMixing: {stack.mixing_name}; bridged JobSets go to namespace {stack.settings.namespace}")
    _say(
        "submit a bridged job: "
        f"{conf} {prefix}runuser -u {slurm.user} -- "
        f"sbatch --hold -p bridge -N1 --chdir={slurm.jobs_dir} --wrap=hostname"
    )
    _say(
        f"explain a job: python -m bridge.slurm explain <job-id> --kubeconfig {kube.kubeconfig} "
        f"--config {stack.mixing_name}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bridge.sandbox", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--slurm", choices=["22.05", "24.11"], default="22.05", help="Slurm generation to run"
    )
    parser.add_argument("--demo", action="store_true", help="submit a two-node job and follow it through")
    parser.add_argument("--exit-after-demo", action="store_true", help="stop everything after the demo")
    parser.add_argument("--workdir", type=Path, default=None, help="keep every part's files and logs here")
    parser.add_argument(
        "--ray",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run the KubeRay operator and a shared RayCluster (default: yes)",
    )
    args = parser.parse_args(argv)

    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    keep = args.workdir is not None
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="k8s-bridge-sandbox-"))
    workdir.mkdir(parents=True, exist_ok=True)
    record = owners.current()
    entry = None if keep else record.add_directory(workdir)  # removed by the next start should we die
    try:
        with (
            KubeStack(
                workdir=workdir / "kube", keep_workdir=keep, kueue_frameworks=SANDBOX_KUEUE_FRAMEWORKS
            ) as kube,
            SlurmCluster(version=args.slurm, keep_workdir=keep) as slurm,
            E2EStack(
                kube=kube, slurm=slurm, workdir=workdir / "wiring", settings=E2ESettings(pool="sandbox")
            ) as stack,
            contextlib.ExitStack() as ray_part,
        ):
            register_serving_webhooks(kube)
            bridge = stack.bridge().start()
            _say(f"k8s-bridge is running (log {bridge.log_path})")
            _print_guide(kube, slurm, stack)
            ray = ray_part.enter_context(RayPool(stack, workdir=workdir / "ray")) if args.ray else None
            if ray is not None:
                ray_bridge = ray.bridge().start()
                ray.wait_gate_serving(ray_bridge)
                _say(f"the Ray bridge is running (log {ray_bridge.log_path})")
                _print_ray_guide(kube, ray)
            env_file = write_env_script(stack, workdir / "env.sh", ray=ray)
            _say(f"in another shell: source {env_file}   (kubectl, squeue, sbatch ready; docs/tutorial.md)")
            if args.demo:
                run_demo(stack, stopping=stopping)
                if ray is not None:
                    run_ray_demo(ray)
            if not (args.demo and args.exit_after_demo):
                _say("Ctrl-C stops the sandbox")
                stopping.wait()
    except (MissingPrerequisiteError, RootBuildError) as missing:
        print(f"missing prerequisite: {missing}", file=sys.stderr)
        return 2
    except StackError as failed:
        print(f"sandbox failed: {failed}", file=sys.stderr)
        return 1
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
        if entry is not None:
            record.discard(entry)
    return 0


if __name__ == "__main__":
    sys.exit(main())
