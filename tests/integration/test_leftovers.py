"""Nothing of the local stack outlives a crash of the process that started it, once a stack starts again.

A separate process (the "owner", as a pytest session or the sandbox would be) starts real stacks from
a worker thread: a Slurm cluster with a dynamic node in its network namespace running a job (so
slurmstepd and the job's processes run in sessions of their own), and for 24.11 its restored root with
/proc, /sys and /dev mounted inside, plus a Kubernetes control plane (etcd, kube-apiserver). The test
SIGKILLs the owner, checks that all of it is still there (the leak: daemons in sessions of their own
are not ended by their owner's death), starts a stack again in this process, and checks that the start
removed everything the dead owner left: processes (by pid and start time, from /proc), namespaces
(``ip netns list``), mounts and directories. A process runner's pod directories are pruned once a pod
is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.sandbox.kube import ControlPlane
from bridge.sandbox.leftovers import reclaim_leftovers
from bridge.sandbox.owners import start_time
from bridge.sandbox.runner import ProcessRunner
from bridge.sandbox.slurm import SlurmCluster
from bridge.sandbox.slurm_root import mounts_under
from bridge.sandbox.stack import KubeStack

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]

OWNER = textwrap.dedent(
    """
    import concurrent.futures, json, os, sys, time
    from bridge.sandbox.kube import ControlPlane
    from bridge.sandbox.processes import wait_until
    from bridge.sandbox.slurm import SlurmCluster

    version, with_kube = sys.argv[1], sys.argv[2] == "kube"

    def start():
        plane = ControlPlane().start() if with_kube else None
        cluster = SlurmCluster(version=version).start()
        cluster.start_dynamic_node("leak-0", cpus=1, memory_mb=256)
        job = cluster.sbatch("--nodelist=leak-0", script="#!/bin/sh\\nsleep 3600\\n", hold=False)
        wait_until(
            lambda: "JobState=RUNNING" in cluster.scontrol("show", "job", str(job)),
            timeout=60, what=f"job {job} to run",
        )
        return plane, cluster

    # as fixtures may: started from a worker thread, which has ended when the owner is killed
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        plane, cluster = pool.submit(start).result()
    daemons = cluster.process_ids() + ([p.pid for p in plane.group.processes] if plane else [])
    workdirs = [str(cluster.workdir)] + ([str(plane.workdir)] if plane else [])
    print(json.dumps({"daemons": daemons, "namespaces": cluster.namespaces_created, "workdirs": workdirs}))
    sys.stdout.flush()
    time.sleep(3600)
    """
)


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def running(pid: int, started: int) -> bool:
    """The very process seen (same start time) is still there, and not a zombie."""
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z" and int(fields[19]) == started


def namespace_members(name: str) -> set[int]:
    out = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, check=False).stdout
    return {int(word) for word in out.split()}


def stack_processes(daemons: list[int], namespaces: list[str]) -> dict[int, int]:
    """Every process of the owner's stacks, found without the code under test: the sessions of its
    daemons and whatever is in its namespaces; ``{pid: start time}``."""
    sessions = set(daemons)
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None and fields[0] != "Z" and int(fields[3]) in sessions:
                found.add(int(entry.name))
    for name in namespaces:
        found |= namespace_members(name)
    return {pid: started for pid in found if (started := start_time(pid)) is not None}


def ip_netns_list() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


@contextlib.contextmanager
def killed_owner(version: str, *, with_kube: bool, log: Path) -> Iterator[dict[str, Any]]:
    """Run the owner until its stacks are up, SIGKILL it, and yield what it had started (its daemons'
    and namespaces' processes as ``processes``). Whatever is left afterwards is removed regardless."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "-c", OWNER, version, "kube" if with_kube else "slurm"]
    seen: dict[str, Any] = {"processes": {}, "namespaces": [], "workdirs": []}
    try:
        with (
            log.open("wb") as errors,
            subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=errors, env=env) as owner,
        ):
            try:
                assert owner.stdout is not None
                line = owner.stdout.readline()
                assert line, f"the owner failed:\n{log.read_text(errors='replace')[-3000:]}"
                seen.update(json.loads(line))
                seen["processes"] = stack_processes(seen["daemons"], seen["namespaces"])
            finally:
                owner.kill()  # a crash: nothing of the owner's own clean-up runs
        yield seen
    finally:
        reclaim_leftovers()
        for pid, started in seen["processes"].items():
            if running(pid, started):
                os.kill(pid, signal.SIGKILL)


def assert_left_behind(seen: dict[str, Any]) -> None:
    """The leak being fixed: the owner is dead, everything it started is not."""
    processes: dict[int, int] = seen["processes"]
    assert len(processes) >= len(seen["daemons"]) + 2, "daemons, slurmstepd and the job's process"
    assert all(running(pid, started) for pid, started in processes.items())
    assert set(seen["namespaces"]) <= ip_netns_list()
    assert all(Path(workdir).is_dir() for workdir in seen["workdirs"])


def assert_nothing_left(seen: dict[str, Any]) -> None:
    processes: dict[int, int] = seen["processes"]
    assert not [pid for pid, started in processes.items() if running(pid, started)]
    assert not set(seen["namespaces"]) & ip_netns_list()
    for workdir in map(Path, seen["workdirs"]):
        assert not mounts_under(workdir)
        assert not workdir.exists()


def test_a_killed_owner_of_a_slurm_cluster_is_cleaned_up_by_the_next_cluster_start(tmp_path: Path) -> None:
    with killed_owner("22.05", with_kube=False, log=tmp_path / "owner.log") as seen:
        assert_left_behind(seen)
        with SlurmCluster(version="22.05") as cluster:  # the next start of the same stack
            assert_nothing_left(seen)
            assert "UP" in cluster.scontrol("ping")


def test_a_killed_owner_of_a_control_plane_and_a_slurm_root_is_cleaned_up_by_the_next_start(
    tmp_path: Path,
) -> None:
    with killed_owner("24.11", with_kube=True, log=tmp_path / "owner.log") as seen:
        assert_left_behind(seen)
        slurm_workdir = Path(seen["workdirs"][0])
        assert mounts_under(slurm_workdir), "the 24.11 root's /proc, /sys and /dev"
        with ControlPlane(workdir=tmp_path / "kube") as plane:  # the next start of another stack
            assert_nothing_left(seen)
            assert plane.client.get("/version")["major"]


# ---------------------------------------------------------------------------------------------------
# The process runner's pod directories.
# ---------------------------------------------------------------------------------------------------


async def test_a_runner_prunes_a_pods_directory_once_the_pod_is_gone(
    kube_stack: KubeStack, kube_namespace: str, tmp_path: Path
) -> None:
    client = kube_stack.client
    node = f"runner-{uuid.uuid4().hex[:6]}"
    taint = {"key": "k8s-bridge.io/leftovers-test", "value": "true", "effect": "NoSchedule"}
    runner = ProcessRunner(
        kubeconfig=kube_stack.kubeconfig, node_names=[node], workdir=tmp_path / "runner", taints=[taint]
    )
    pods = tmp_path / "runner" / "pods"

    async def wait(check: Any, what: str) -> Any:
        deadline = time.monotonic() + 60
        while not (value := await asyncio.to_thread(check)):
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            await asyncio.sleep(0.2)
        return value

    def pod_phase() -> str | None:
        path = f"/api/v1/namespaces/{kube_namespace}/pods/done"
        return client.get(path)["status"].get("phase") if client.exists(path) else None

    await wait(lambda: client.exists(f"/api/v1/namespaces/{kube_namespace}/serviceaccounts/default"), "SA")
    await runner.start()
    try:
        manifest = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "done"},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node},
                "tolerations": [{**taint, "operator": "Equal"}],
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "none", "command": ["true"]}],
            },
        }
        await asyncio.to_thread(client.create, f"/api/v1/namespaces/{kube_namespace}/pods", manifest)
        await wait(lambda: pod_phase() == "Succeeded", "the pod to succeed")
        (pod_dir,) = pods.iterdir()  # its record, while the pod exists
        await asyncio.to_thread(client.delete, f"/api/v1/namespaces/{kube_namespace}/pods/done")
        await wait(lambda: pod_phase() is None, "the pod to go")
        await wait(lambda: not pod_dir.exists(), "its directory to be pruned")
        assert list(pods.iterdir()) == []
    finally:
        await runner.stop()
        client.delete(f"/api/v1/nodes/{node}")
