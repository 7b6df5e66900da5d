"""Leader election, probes and metrics of real manager processes against a real kube-apiserver.

Each replica is a subprocess (``manager_process.py``): a Manager with leader election on a
coordination.k8s.io Lease, an informer, a controller that stamps ConfigMaps with its replica's
identity, and the probe server. So "the leader dies without releasing" is a real SIGKILL and "a
clean stop" is a real SIGTERM, as a kubelet would send them.

What is checked: exactly one replica leads and only its controller runs (the follower's work
queue sees no adds); a killed leader's lease is not released, and the other replica takes over
once it has expired (not before: the safety bound), within the lease duration plus two retry
periods; a clean stop releases the lease, so the takeover takes one retry period, far less than the
lease; ``/healthz``, ``/readyz`` (not ready until every cache has synced) and ``/metrics``.

Takeover figures are printed (``-s``). Bounds allow for a loaded two-core machine; the lower bound
is a correctness property (an expired lease is judged from when the follower saw it change, and
the dead leader renewed at most ``renew_deadline`` before it died), not a speed target.

The control plane is this module's own (etcd + kube-apiserver, no controllers).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bridge.runtime.client import Client
from bridge.runtime.errors import NotFound
from bridge.runtime.handlers import Object
from bridge.runtime.leaderelection import JITTER_FACTOR
from bridge.sandbox.kube import ControlPlane
from bridge.sandbox.processes import free_port, log_tail

SCRIPT = Path(__file__).with_name("manager_process.py")
REPO = Path(__file__).parents[3]
CONTROLLER = "stamper"
HANDLED_BY = "handled-by"

# Short but valid (lease > renew deadline > 1.2 x retry period): a kill test takes seconds, not 20.
FAST = {"lease_duration": 6.0, "renew_deadline": 4.0, "retry_period": 1.0}
DEFAULTS = {"lease_duration": 15.0, "renew_deadline": 10.0, "retry_period": 2.0}
SLACK = 4.0
"""Seconds allowed on top of the protocol's bounds for process start-up and a loaded machine."""


class Replica:
    """One manager subprocess; its log goes to a file whose tail failures show."""

    def __init__(self, identity: str, *, log_dir: Path, argv: list[str], port: int) -> None:
        self.identity = identity
        self.port = port
        self.log_path = log_dir / f"{identity}.log"
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        }
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, str(SCRIPT), *argv], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO
            )

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        if self.alive:
            self.process.send_signal(sig)

    async def wait(self, timeout: float) -> int:
        return await asyncio.to_thread(self.process.wait, timeout)

    def tail(self) -> str:
        return f"--- {self.identity} (exit {self.process.poll()}) ---\n{log_tail(self.log_path, lines=40)}"

    async def get(self, http: aiohttp.ClientSession, path: str) -> tuple[int, str]:
        """Status and body of ``path`` on the probe server; ``(0, error)`` while it does not answer."""
        try:
            async with http.get(f"http://127.0.0.1:{self.port}{path}") as response:
                return response.status, await response.text()
        except aiohttp.ClientError as exc:
            return 0, str(exc)

    async def metric(self, http: aiohttp.ClientSession, sample: str, **labels: str) -> float | None:
        """The value of one sample on ``/metrics`` (``None`` when absent)."""
        status, text = await self.get(http, "/metrics")
        assert status == 200, f"/metrics answered {status}: {text[:300]}\n{self.tail()}"
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
                    return float(s.value)
        return None


class Replicas:
    """Starts replicas for one test; every one still alive at the end is killed and reaped."""

    def __init__(self, plane: ControlPlane, namespace: str, log_dir: Path) -> None:
        self._plane = plane
        self.namespace = namespace
        self.lease = f"lease-{uuid.uuid4().hex[:6]}"
        self._log_dir = log_dir
        self.started: list[Replica] = []

    def start(self, name: str, *, timing: dict[str, float], watch_missing_crd: bool = False) -> Replica:
        port = free_port()
        argv = [
            f"--kubeconfig={self._plane.kubeconfig}",
            f"--namespace={self.namespace}",
            f"--lease={self.lease}",
            f"--identity={name}-{uuid.uuid4().hex[:6]}",
            f"--port={port}",
            f"--lease-duration={timing['lease_duration']}",
            f"--renew-deadline={timing['renew_deadline']}",
            f"--retry-period={timing['retry_period']}",
        ]
        if watch_missing_crd:
            argv.append("--watch-missing-crd")
        replica = Replica(argv[3].split("=", 1)[1], log_dir=self._log_dir, argv=argv, port=port)
        self.started.append(replica)
        return replica

    def tails(self) -> str:
        return "\n".join(r.tail() for r in self.started)

    def reap(self) -> None:
        for replica in self.started:
            if replica.alive:
                replica.process.kill()
            replica.process.wait(timeout=30)


@pytest.fixture
def replicas(kube_control_plane: ControlPlane, namespace: str, tmp_path: Path) -> Iterator[Replicas]:
    group = Replicas(kube_control_plane, namespace, tmp_path)
    try:
        yield group
    finally:
        group.reap()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


async def eventually(
    predicate: Callable[[], Awaitable[Any]], *, timeout: float, what: str, tails: Callable[[], str]
) -> Any:
    """Poll ``predicate`` every 0.1 s until it returns something truthy (returned)."""
    try:
        async with asyncio.timeout(timeout):
            while not (value := await predicate()):
                await asyncio.sleep(0.1)
            return value
    except TimeoutError:
        pytest.fail(f"not within {timeout} s: {what}\n{tails()}", pytrace=False)


async def lease_spec(client: Client, replicas: Replicas) -> dict[str, Any]:
    try:
        lease = await client.get(
            "coordination.k8s.io/v1", "Lease", replicas.lease, namespace=replicas.namespace
        )
    except NotFound:
        return {}
    return dict(lease.get("spec") or {})


async def holder(client: Client, replicas: Replicas) -> str:
    return str((await lease_spec(client, replicas)).get("holderIdentity") or "")


def labelled(namespace: str, name: str) -> Object:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": {"test": "le"}},
        "data": {},
    }


async def handled_by(client: Client, namespace: str, name: str) -> str:
    obj = await client.get("v1", "ConfigMap", name, namespace=namespace)
    return str((obj.get("data") or {}).get(HANDLED_BY) or "")


async def ready(http: aiohttp.ClientSession, replica: Replica) -> bool:
    assert replica.alive, replica.tail()
    return (await replica.get(http, "/readyz"))[0] == 200


def micro_time(value: str) -> datetime:
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%fZ")


async def test_one_leads_and_a_killed_leader_is_replaced_once_its_lease_expires(
    client: Client, replicas: Replicas, http: aiohttp.ClientSession
) -> None:
    ns = replicas.namespace
    first, second = replicas.start("a", timing=FAST), replicas.start("b", timing=FAST)
    by_identity = {first.identity: first, second.identity: second}
    await eventually(lambda: ready(http, first), timeout=60, what="a ready", tails=replicas.tails)
    await eventually(lambda: ready(http, second), timeout=60, what="b ready", tails=replicas.tails)
    leader_id = await eventually(
        lambda: holder(client, replicas), timeout=30, what="a holder", tails=replicas.tails
    )
    leader = by_identity[leader_id]
    follower = second if leader is first else first

    # Exactly one leads: only its controller runs; the follower's queue never sees a key.
    await client.create(labelled(ns, "before"))
    stamped = await eventually(
        lambda: handled_by(client, ns, "before"), timeout=30, what="stamped", tails=replicas.tails
    )
    assert stamped == leader.identity
    await asyncio.sleep(FAST["lease_duration"])  # several renewals: leadership stays put
    assert await holder(client, replicas) == leader.identity
    assert await leader.metric(http, "leader_election_master_status", name=replicas.lease) == 1
    assert await follower.metric(http, "leader_election_master_status", name=replicas.lease) == 0
    success = {"controller": CONTROLLER, "result": "success"}
    assert (await leader.metric(http, "controller_runtime_reconcile_total", **success) or 0) >= 1
    assert await follower.metric(http, "controller_runtime_reconcile_total", **success) == 0
    assert await follower.metric(http, "workqueue_adds_total", name=CONTROLLER) in (None, 0)

    # The leader dies without releasing: the lease still names it until it expires.
    last_renew = (await lease_spec(client, replicas))["renewTime"]
    leader.signal(signal.SIGKILL)
    killed_at = time.monotonic()
    assert await leader.wait(10) == -signal.SIGKILL
    spec = await lease_spec(client, replicas)
    assert spec["holderIdentity"] == leader.identity, "a killed leader cannot have released its lease"
    await eventually(
        lambda: _holder_is(client, replicas, follower.identity),
        timeout=FAST["lease_duration"] + 2 * (1 + JITTER_FACTOR) * FAST["retry_period"] + SLACK,
        what="the follower takes over the expired lease",
        tails=replicas.tails,
    )
    took = time.monotonic() - killed_at
    spec = await lease_spec(client, replicas)
    final_renew = micro_time(spec["acquireTime"]) - micro_time(last_renew)
    print(
        f"\nleader SIGKILLed -> follower leads after {took:.1f} s (lease {FAST['lease_duration']:.0f} s, "
        f"retry {FAST['retry_period']:.0f} s); {final_renew.total_seconds():.1f} s after a renewal seen "
        f"before the kill; lease transitions {spec.get('leaseTransitions')}"
    )
    # Safety: the dead leader renewed at most renew_deadline before it died, so its lease was valid
    # until at least lease_duration - renew_deadline after the kill.
    assert took >= FAST["lease_duration"] - FAST["renew_deadline"]
    assert spec.get("leaseTransitions", 0) >= 1

    # The new leader's controller runs: it stamps a new object; the old stamp stays.
    await client.create(labelled(ns, "after"))
    stamped = await eventually(
        lambda: handled_by(client, ns, "after"), timeout=30, what="stamped after", tails=replicas.tails
    )
    assert stamped == follower.identity
    assert await handled_by(client, ns, "before") == leader.identity
    assert await follower.metric(http, "leader_election_master_status", name=replicas.lease) == 1
    assert (await follower.metric(http, "controller_runtime_reconcile_total", **success) or 0) >= 1


async def _holder_is(client: Client, replicas: Replicas, identity: str) -> bool:
    return await holder(client, replicas) == identity


async def test_a_clean_stop_releases_the_lease_for_a_fast_takeover(
    client: Client, replicas: Replicas, http: aiohttp.ClientSession
) -> None:
    # client-go's default timing: a takeover well inside the 15 s lease can only come from a release.
    first = replicas.start("a", timing=DEFAULTS)
    await eventually(
        lambda: _holder_is(client, replicas, first.identity), timeout=60, what="a leads", tails=replicas.tails
    )
    second = replicas.start("b", timing=DEFAULTS)
    await eventually(lambda: ready(http, second), timeout=60, what="b ready", tails=replicas.tails)
    await asyncio.sleep(DEFAULTS["retry_period"])  # b has seen the lease held at least once
    assert await holder(client, replicas) == first.identity

    first.signal(signal.SIGTERM)
    stopped_at = time.monotonic()
    assert await first.wait(30) == 0, first.tail()
    await eventually(
        lambda: _holder_is(client, replicas, second.identity),
        timeout=2 * (1 + JITTER_FACTOR) * DEFAULTS["retry_period"] + SLACK,
        what="b takes over the released lease",
        tails=replicas.tails,
    )
    took = time.monotonic() - stopped_at
    print(
        f"\nleader SIGTERMed -> lease released -> follower leads after {took:.1f} s "
        f"(lease {DEFAULTS['lease_duration']:.0f} s, retry {DEFAULTS['retry_period']:.0f} s)"
    )
    assert took < DEFAULTS["lease_duration"]
    log = first.log_path.read_text()
    assert "released lease" in log
    assert log.index("stopping and waiting for controllers") < log.index("released lease")
    await client.create(labelled(replicas.namespace, "after-release"))
    stamped = await eventually(
        lambda: handled_by(client, replicas.namespace, "after-release"),
        timeout=30,
        what="stamped",
        tails=replicas.tails,
    )
    assert stamped == second.identity


def widget_crd() -> Object:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.k8s-bridge.test"},
        "spec": {
            "group": "k8s-bridge.test",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    },
                }
            ],
        },
    }


async def test_probes_and_metrics_of_a_real_manager(
    client: Client, replicas: Replicas, http: aiohttp.ClientSession
) -> None:
    replica = replicas.start("probe", timing=FAST, watch_missing_crd=True)

    async def healthy() -> bool:
        assert replica.alive, replica.tail()
        return (await replica.get(http, "/healthz"))[0] == 200

    await eventually(healthy, timeout=60, what="/healthz", tails=replicas.tails)
    # The Widget cache cannot list before its CRD exists: not ready, for as long as that lasts.
    for _ in range(5):
        status, text = await replica.get(http, "/readyz")
        assert status == 500, text
        assert "[-]caches failed" in text
        await asyncio.sleep(0.4)
    status, text = await replica.get(http, "/readyz?verbose")
    assert "[+]ping ok" in text

    await client.create(widget_crd())
    try:
        await eventually(
            lambda: ready(http, replica), timeout=60, what="ready after the CRD", tails=replicas.tails
        )
        await client.create(labelled(replicas.namespace, "scraped"))
        await eventually(
            lambda: handled_by(client, replicas.namespace, "scraped"),
            timeout=30,
            what="stamped",
            tails=replicas.tails,
        )
        status, text = await replica.get(http, "/metrics")
        assert status == 200
        families = {f.name for f in text_string_to_metric_families(text)}
        for name in (
            "controller_runtime_reconcile",  # the _total suffix is the sample's, not the family's
            "controller_runtime_reconcile_errors",
            "controller_runtime_reconcile_time_seconds",
            "controller_runtime_active_workers",
            "controller_runtime_max_concurrent_reconciles",
            "workqueue_depth",
            "workqueue_adds",
            "workqueue_queue_duration_seconds",
            "workqueue_work_duration_seconds",
            "workqueue_unfinished_work_seconds",
            "workqueue_longest_running_processor_seconds",
            "workqueue_retries",
            "leader_election_master_status",
            "informer_cache_objects",
            "process_resident_memory_bytes",
        ):
            assert name in families, f"{name} not on /metrics"
        success = {"controller": CONTROLLER, "result": "success"}
        assert (await replica.metric(http, "controller_runtime_reconcile_total", **success) or 0) >= 1
        assert (await replica.metric(http, "workqueue_adds_total", name=CONTROLLER) or 0) >= 1
        assert (
            await replica.metric(http, "controller_runtime_max_concurrent_reconciles", controller=CONTROLLER)
            == 1
        )
        assert (await replica.get(http, "/healthz"))[0] == 200
        replica.signal(signal.SIGTERM)
        assert await replica.wait(30) == 0, replica.tail()
    finally:
        await client.delete("apiextensions.k8s.io/v1", "CustomResourceDefinition", "widgets.k8s-bridge.test")
