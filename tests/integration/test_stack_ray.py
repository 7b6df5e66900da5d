"""The Ray part of the local stack is real Ray: the pin-gate the Ray bridge relies on, and clean removal.

Each test would fail against a fake: the job's gate is Ray's own scheduler honouring an entrypoint
resource, the job's driver runs ``ray.init()`` on the worker in its network namespace and reports
that node's IP, and removal is checked on the processes and in Ray's node table.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
import time
from pathlib import Path

import pytest

from bridge.sandbox.netns import existing_namespaces
from bridge.sandbox.processes import wait_until
from bridge.sandbox.ray import RayHead, group_members

pytestmark = pytest.mark.ray

log = logging.getLogger(__name__)

PENDING_CHECK_SECONDS = 8.0

# Runs on the node Ray schedules the entrypoint on; connects to the cluster like any driver.
DRIVER = "import ray; ray.init(); print('driver ran on', ray.util.get_node_ip_address(), flush=True)"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _command_names(pids: set[int]) -> set[str]:
    names: set[str] = set()
    for pid in pids:
        try:
            names.add(Path(f"/proc/{pid}/comm").read_text().strip())
        except OSError:
            continue
    return names


def _environment(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def test_head_lets_jobs_wait_longer_than_rays_default(ray_head: RayHead) -> None:
    # Ray fails a job pending longer than RAY_JOB_START_TIMEOUT_SECONDS (900 s by default), and a job
    # held for Kueue can wait for hours. In Ray 2.60 the Job API hands every job to the JobManager in
    # the head node's dashboard agent, which the head's raylet starts with its own environment. (The
    # agent's /proc/<pid>/environ cannot be read back: setproctitle overwrites it.)
    head = group_members(ray_head.process_groups()[0])
    raylets = [pid for pid in head if _cmdline(pid).split(" ")[0].endswith("/raylet")]
    assert len(raylets) == 1, "the head's process group should hold exactly one raylet"
    timeout = _environment(raylets[0]).get("RAY_JOB_START_TIMEOUT_SECONDS", "unset")
    assert timeout != "unset", "the head's raylet runs without RAY_JOB_START_TIMEOUT_SECONDS"
    assert float(timeout) >= 24 * 3600


def test_job_with_entrypoint_resource_waits_for_a_worker_that_has_it(ray_head: RayHead) -> None:
    job = ray_head.submit(shlex.join([sys.executable, "-c", DRIVER]), entrypoint_resources={"job-x": 1})

    # The head has a free CPU but no "job-x": Ray must keep the job waiting, however long we look.
    deadline = time.monotonic() + PENDING_CHECK_SECONDS
    while time.monotonic() < deadline:
        assert ray_head.job_status(job) == "PENDING"
        time.sleep(0.5)

    worker = ray_head.add_worker({"job-x": 1})
    log.info("head started in %.1fs, worker joined in %.1fs", ray_head.start_seconds, worker.join_seconds)

    status = ray_head.wait_for_job(job, timeout=180)
    logs = ray_head.job_logs(job)
    assert status == "SUCCEEDED", f"{ray_head.job_info(job)}\n{logs}"
    assert f"driver ran on {worker.address}" in logs
    assert worker.address != ray_head.host


def test_removing_a_worker_stops_its_processes(ray_head: RayHead) -> None:
    worker = ray_head.add_worker({"job-y": 2}, num_cpus=1)
    pids = worker.pids()
    raylets = [pid for pid in pids if _command_names({pid}) == {"raylet"}]
    assert len(raylets) == 1, "the worker node should run exactly one raylet"
    for kind in ("net", "pid"):  # like a pod: its own network and its own process tree
        assert os.readlink(f"/proc/{raylets[0]}/ns/{kind}") != os.readlink(f"/proc/self/ns/{kind}")
    node = next(node for node in ray_head.nodes() if node["node_ip"] == worker.address)
    assert node["state"] == "ALIVE"
    assert node["resources_total"].get("job-y") == 2

    ray_head.remove_worker(worker)

    assert not [pid for pid in pids if _alive(pid)], "processes of the removed worker still run"
    assert not group_members(worker.process.pid)
    assert worker.namespace.name not in existing_namespaces()
    assert not worker.namespace.path.exists()
    assert worker not in ray_head.workers
    wait_until(
        lambda: worker.address not in ray_head.alive_node_ips(),
        timeout=60,
        what=f"Ray to mark the removed node {worker.address} dead",
        interval=0.5,
    )
