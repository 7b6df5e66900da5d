"""Informer start-up: 10,000 ConfigMaps listed and synced from a real kube-apiserver; seconds and memory.

Bench tier: prints figures and ratios measured in the same run, asserts nothing about time.
Run: ``python -m pytest tests/bench/test_informer_startup_bench.py -s``.

A control plane of this module's own (etcd + kube-apiserver, watch cache on as in a real cluster)
gets 10,000 ConfigMaps of about 1 KiB (one managedFields entry each, as ``kubectl create`` leaves
them), created through our client with 64 requests in flight. Then each way of reading them runs in
a fresh child process (``informer_startup_child.py``: a clean RSS baseline), best of ``ROUNDS``:

- our Informer as a bridge runs it (streaming list if the server offers it, else a paginated list),
  and with streaming list off (paginated list of 500, as client-go);
- our ``Client.list`` (raw dicts, no store, no transform: what the informer is built on);
- kubernetes-asyncio's ``list_namespaced_config_map`` (typed models: what Python operators use);

reporting seconds to a synced cache, RSS growth (VmRSS after the sync and a GC, minus before the
list), and, in a separate traced run, tracemalloc's retained and peak bytes for the informer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.runtime.client import Client
from bridge.runtime.errors import AlreadyExists
from bridge.runtime.session import Session
from bridge.sandbox.build import MissingPrerequisiteError
from bridge.sandbox.kube import ControlPlane

COUNT = 10_000
IN_FLIGHT = 64
ROUNDS = 2
NAMESPACE = "bench-startup"
CHILD = Path(__file__).with_name("informer_startup_child.py")
REPO = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def kube_control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = ControlPlane(workdir=tmp_path_factory.mktemp("startup-kube"))
    try:
        plane.start()
    except MissingPrerequisiteError as missing:
        pytest.fail(f"the Kubernetes control plane: missing prerequisite: {missing}", pytrace=False)
    try:
        yield plane
    finally:
        plane.stop()


def configmap(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"cm-{i:05d}",
            "namespace": NAMESPACE,
            "labels": {"app.kubernetes.io/name": "bench", "bench.k8s-bridge/shard": str(i % 16)},
        },
        "data": {"index": str(i), "payload": f"{i:08d}" * 100},
    }


async def create_all(client: Client) -> float:
    """Create the ConfigMaps with ``IN_FLIGHT`` concurrent requests; return creates per second."""
    await client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    pending = iter(range(COUNT))

    async def creator() -> None:
        for i in pending:  # one shared iterator: each index is taken by exactly one creator
            with contextlib.suppress(AlreadyExists):
                await client.create(configmap(i))

    start = time.perf_counter()
    async with asyncio.TaskGroup() as tg:
        for _ in range(IN_FLIGHT):
            tg.create_task(creator())
    return COUNT / (time.perf_counter() - start)


def child(plane: ControlPlane, mode: str, *, traced: bool = False) -> dict[str, Any]:
    argv = [sys.executable, str(CHILD), f"--kubeconfig={plane.kubeconfig}", f"--namespace={NAMESPACE}"]
    argv.append(f"--mode={mode}")
    if traced:
        argv.append("--tracemalloc")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        pytest.fail(f"{mode}: exit {done.returncode}\n{done.stderr[-3000:]}", pytrace=False)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["objects"] == COUNT, result
    return result


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


async def test_informer_startup_10k_configmaps(kube_control_plane: ControlPlane) -> None:
    async with await Session.load(config_file=kube_control_plane.kubeconfig) as session:
        create_rate = await create_all(Client(session))
    print(f"\n== informer start-up: {COUNT} ConfigMaps (~1 KiB each), load average {load()}")
    print(f"  created at {create_rate:,.0f}/s with {IN_FLIGHT} requests in flight")
    modes = ("informer", "informer-list", "client-list", "kubernetes-asyncio")
    best: dict[str, dict[str, Any]] = {}
    for _ in range(ROUNDS):  # interleaved: load on a shared machine drifts
        for mode in modes:
            result = await asyncio.to_thread(child, kube_control_plane, mode)
            if mode not in best or result["seconds"] < best[mode]["seconds"]:
                best[mode] = result
    traced = await asyncio.to_thread(child, kube_control_plane, "informer", traced=True)
    mib = 1024 * 1024
    print(f"  {'mode':22s} {'seconds':>8s} {'objects/s':>10s} {'RSS +MiB':>9s} {'RSS KiB/obj':>12s}")
    for mode in modes:
        r = best[mode]
        rss = r["rss_after"] - r["rss_before"]
        print(
            f"  {mode:22s} {r['seconds']:8.2f} {r['objects'] / r['seconds']:10,.0f} {rss / mib:9.1f} "
            f"{rss / r['objects'] / 1024:12.2f}"
        )
    informer = best["informer"]
    how = "streaming list" if informer.get("streaming_lists") else "paginated list"
    print(f"  informer (default settings) synced by {how}")
    retained, peak = traced["traced_bytes"], traced["traced_peak"]
    print(
        f"  tracemalloc, informer: retained {retained / mib:.1f} MiB "
        f"({retained / COUNT / 1024:.2f} KiB/object), peak {peak / mib:.1f} MiB"
    )
    ratio = best["kubernetes-asyncio"]["seconds"] / informer["seconds"]
    rss_ratio = (best["kubernetes-asyncio"]["rss_after"] - best["kubernetes-asyncio"]["rss_before"]) / max(
        1, informer["rss_after"] - informer["rss_before"]
    )
    print(
        f"  RATIOS: kubernetes-asyncio list / informer sync: time {ratio:.1f}x, RSS {rss_ratio:.1f}x; "
        f"informer / client list: time {informer['seconds'] / best['client-list']['seconds']:.2f}x"
    )
