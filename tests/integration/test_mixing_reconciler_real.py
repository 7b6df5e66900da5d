"""The WorkloadMixing reconciler against a real kube-apiserver with Kueue's CRDs and the WorkloadMixing
CRD installed: semantic errors (a missing LocalQueue, WorkloadPriorityClass, Topology level) give
``Ready=False`` with a reason naming the object and an Event, and are healed when the object appears,
by the watch on Kueue objects, without restarting anything; ``observedGeneration`` follows the spec;
a new generation that is not usable leaves the last good one in the live configuration and sets
``Degraded``; counts reported by the bridges reach the status; nothing is written in a loop.

What the controller costs the API server, counted by the server itself (``apiserver_request_total``
on ``/metrics``): a catch-up in which the bridge's counts change a thousand times writes the status
once per ``counts_interval``, and neither that nor a quiet window of rechecks and Kueue status churn
reads the Secret (its watch does); a Secret created later is seen through that watch; the watch needs
RBAC on the one named Secret only.

The control plane is this module's own (etcd + kube-apiserver, no controllers: nothing else writes
these objects); Kueue's CRDs come from the stack's build cache (``python3 -m bridge.sandbox.build all``).
"""

from __future__ import annotations

import asyncio
import base64
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from bridge.api.mixing import API_VERSION, KIND, SourceCounts
from bridge.mixing_config import CountsBoard, MixingConfigs
from bridge.program.settings import ProgramSettings
from bridge.program.shell import BridgeProgram, Shell, Wiring
from bridge.runtime.cache import Store
from bridge.runtime.client import Client
from bridge.runtime.errors import Forbidden
from bridge.runtime.events import EventRecorder
from bridge.runtime.handlers import Object
from bridge.runtime.informer import Dispatcher, SharedInformerFactory
from bridge.runtime.session import Session
from bridge.sandbox.build import MissingPrerequisiteError, stack_paths
from bridge.sandbox.kube import ControlPlane
from bridge.sandbox.processes import StackError
from reconcilers.mixing import (
    CONTROLLER_NAME,
    KUEUE_API_VERSION,
    REFERENCES_INDEX,
    MixingController,
    WatchedSecretKeys,
    reference_index_keys,
    setup_mixing_controller,
)
from tests.fixtures.mixing import slurm_spec, target

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKLOADMIXING_CRDS = REPO_ROOT / "charts" / "k8s-bridge" / "crds"
TIMEOUT = 30.0


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver with Kueue's and the WorkloadMixing CRDs; every process stopped after."""
    control_plane = ControlPlane(workdir=tmp_path_factory.mktemp("mixing-kube"))
    try:
        control_plane.start()
    except MissingPrerequisiteError as missing:
        pytest.fail(f"the Kubernetes control plane: missing prerequisite: {missing}", pytrace=False)
    except StackError as failed:
        pytest.fail(f"the Kubernetes control plane did not start: {failed}", pytrace=False)
    try:
        try:
            control_plane.install_crds(WORKLOADMIXING_CRDS, stack_paths().crds["kueue"])
        except (MissingPrerequisiteError, StackError) as failed:
            pytest.fail(f"installing the CRDs failed: {failed}", pytrace=False)
        yield control_plane
    finally:
        pids = [p.pid for p in control_plane.group.processes]
        control_plane.stop()
        assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()], "control plane processes left"


class CountingClient(Client):
    """Counts status writes, so a test can tell a no-op write (which the server ignores) from none."""

    status_writes = 0

    async def update_status(self, obj: Object, *, field_manager: str | None = None) -> Object:
        self.status_writes += 1
        return await super().update_status(obj, field_manager=field_manager)


@pytest.fixture
async def client(plane: ControlPlane) -> AsyncIterator[CountingClient]:
    async with await Session.load(config_file=plane.kubeconfig) as session:
        yield CountingClient(session)


@pytest.fixture
async def namespace(client: Client) -> AsyncIterator[str]:
    name = f"wm-{uuid.uuid4().hex[:8]}"
    await client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    await client.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "jwt", "namespace": name},
            "stringData": {"token": "not-a-real-jwt"},
        }
    )
    yield name
    await client.delete("v1", "Namespace", name, missing_ok=True)


@dataclass
class Running:
    configs: MixingConfigs
    board: CountsBoard
    controller: MixingController
    registry: CollectorRegistry

    def reconciles(self) -> float:
        """Reconciles done so far (each ends in a periodic requeue when ``recheck_after`` is set)."""
        total = 0.0
        for result in ("success", "requeue_after", "error"):
            labels = {"controller": CONTROLLER_NAME, "result": result}
            total += self.registry.get_sample_value("controller_runtime_reconcile_total", labels) or 0.0
        return total


@asynccontextmanager
async def mixing_controller(client: Client, *, recheck_after: float | None) -> AsyncIterator[Running]:
    """The reconciler and its informers, running until the block ends (both stopped and awaited)."""
    factory = SharedInformerFactory(client)
    registry = CollectorRegistry()
    configs, board = MixingConfigs(), CountsBoard()
    controller = await setup_mixing_controller(
        client=client,
        factory=factory,
        configs=configs,
        recorder=EventRecorder(client, reporting_controller="k8s-bridge/mixing", reporting_instance="test"),
        counts=board,
        recheck_after=recheck_after,
        registry=registry,
    )
    running = Running(configs=configs, board=board, controller=controller, registry=registry)
    async with asyncio.TaskGroup() as tg:
        tg.create_task(factory.run(), name="informers")
        tg.create_task(controller.run(), name="mixing controller")
        try:
            yield running
        finally:
            controller.stop()
            factory.stop()


def mixing(name: str, spec: dict[str, Any]) -> Object:
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}, "spec": spec}


def slurm(namespace: str, **overrides: Any) -> dict[str, Any]:
    """A Slurm spec whose every reference lives in ``namespace`` (LocalQueue ``hpc``, Secret ``jwt``)."""
    spec = slurm_spec(
        auth={"tokenSecretRef": {"namespace": namespace, "name": "jwt"}},
        mapping={"default": target("hpc", namespace=namespace)},
        **overrides,
    )
    return {"slurm": spec, "shared": {"jobSetNamespace": namespace}}


def local_queue(namespace: str, name: str) -> Object:
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": "shared"},
    }


def reader(client: Client, name: str) -> Callable[[], Awaitable[Object]]:
    """Reads the WorkloadMixing ``name`` from the API server (not from any cache)."""

    async def get() -> Object:
        return await client.get(API_VERSION, KIND, name)

    return get


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def eventually(probe: Callable[[], Awaitable[Any]], check: Callable[[Any], bool], *, what: str) -> Any:
    """Poll ``probe`` until ``check`` holds for its value; fail naming ``what`` and the last value."""
    last: Any = None
    try:
        async with asyncio.timeout(TIMEOUT):
            while True:
                last = await probe()
                if check(last):
                    return last
                await asyncio.sleep(0.1)
    except TimeoutError:
        pytest.fail(f"timed out after {TIMEOUT} s waiting for {what}; last seen: {last}")


def conditions(obj: Object) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or ()}


def ready_is(status: str, reason: str, *, generation: int | None = None) -> Callable[[Object], bool]:
    def check(obj: Object) -> bool:
        ready = conditions(obj).get("Ready") or {}
        observed = (obj.get("status") or {}).get("observedGeneration")
        return (
            ready.get("status") == status
            and ready.get("reason") == reason
            and (generation is None or observed == generation)
        )

    return check


async def events_about(client: Client, name: str) -> list[Object]:
    # The WorkloadMixing is cluster-scoped: its Events go to "default".
    items = await client.list("events.k8s.io/v1", "Event", namespace="default")
    return [e for e in items if (e.get("regarding") or {}).get("name") == name]


async def test_missing_local_queue_then_created(client: CountingClient, namespace: str) -> None:
    name = unique("wm")
    await client.create(mixing(name, slurm(namespace)))
    get = reader(client, name)

    async with mixing_controller(client, recheck_after=0.3) as running:
        broken = await eventually(get, ready_is("False", "LocalQueueNotFound"), what="Ready=False")
        message = conditions(broken)["Ready"]["message"]
        assert f"LocalQueue {namespace}/hpc not found" in message
        assert "spec.slurm.mapping.default.localQueue" in message
        assert broken["status"]["observedGeneration"] == 1
        assert running.configs.get(name).current is None
        warnings = await eventually(
            lambda: events_about(client, name),
            lambda events: any(e["reason"] == "LocalQueueNotFound" for e in events),
            what="a LocalQueueNotFound Event",
        )
        (warning,) = [e for e in warnings if e["reason"] == "LocalQueueNotFound"]
        assert warning["type"] == "Warning"
        assert f"{namespace}/hpc" in warning["note"]
        assert warning["regarding"]["kind"] == KIND

        # The LocalQueue appears; the same reconciler, never restarted, turns Ready. (That the
        # LocalQueue watch, not the recheck, does it is the next test's point.)
        await client.create(local_queue(namespace, "hpc"))
        fixed = await eventually(get, ready_is("True", "ConfigurationValid"), what="Ready=True")
        assert conditions(fixed)["Degraded"]["status"] == "False"
        current = running.configs.get(name).current
        assert current is not None
        assert current.generation == 1
        assert current.spec.slurm is not None
        await eventually(
            lambda: events_about(client, name),
            lambda events: any(e["reason"] == "ConfigurationValid" and e["type"] == "Normal" for e in events),
            what="a ConfigurationValid Event",
        )

        # Settled: rechecks every 0.3 s find nothing new, so nothing is written, not even a no-op.
        settled, writes = (await get())["metadata"]["resourceVersion"], client.status_writes
        await asyncio.sleep(2.0)
        assert (await get())["metadata"]["resourceVersion"] == settled
        assert client.status_writes == writes


async def test_kueue_objects_appearing_requeue_through_the_watch(client: Client, namespace: str) -> None:
    """With no periodic recheck, only the watches on Kueue objects can heal the status."""
    name, priority = unique("wm"), unique("prio")
    spec = slurm(namespace, topology={"switches": {"required": "example.com/rack"}})
    spec["slurm"]["mapping"] = {"default": target("hpc", namespace=namespace, priority=priority)}
    await client.create(mixing(name, spec))
    get = reader(client, name)

    async with mixing_controller(client, recheck_after=None):
        await eventually(get, ready_is("False", "LocalQueueNotFound"), what="LocalQueueNotFound")
        await client.create(local_queue(namespace, "hpc"))
        await eventually(get, ready_is("False", "PriorityClassNotFound"), what="PriorityClassNotFound")
        await client.create(
            {
                "apiVersion": KUEUE_API_VERSION,
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": priority},
                "value": 100,
            }
        )
        await eventually(get, ready_is("False", "TopologyLevelNotFound"), what="TopologyLevelNotFound")
        await client.create(
            {
                "apiVersion": KUEUE_API_VERSION,
                "kind": "Topology",
                "metadata": {"name": unique("topo")},
                "spec": {
                    "levels": [{"nodeLabel": "example.com/rack"}, {"nodeLabel": "kubernetes.io/hostname"}]
                },
            }
        )
        await eventually(get, ready_is("True", "ConfigurationValid"), what="Ready=True")


async def test_unusable_update_keeps_the_last_good_configuration(client: Client, namespace: str) -> None:
    name, priority = unique("wm"), unique("prio")
    await client.create(local_queue(namespace, "hpc"))
    await client.create(mixing(name, slurm(namespace)))
    get = reader(client, name)

    async with mixing_controller(client, recheck_after=5.0) as running:
        await eventually(get, ready_is("True", "ConfigurationValid", generation=1), what="generation 1 ready")
        live = running.configs.get(name)
        good = live.current
        assert good is not None
        assert good.generation == 1
        seen = live.version

        # Schema-valid, semantically broken: a WorkloadPriorityClass that does not exist.
        patch = {
            "spec": {"slurm": {"mapping": {"default": target("hpc", namespace=namespace, priority=priority)}}}
        }
        await client.patch(API_VERSION, KIND, name, patch)
        blocked = await eventually(
            get, ready_is("False", "PriorityClassNotFound", generation=2), what="generation 2 blocked"
        )
        degraded = conditions(blocked)["Degraded"]
        assert degraded["status"] == "True"
        assert degraded["reason"] == "LastGoodConfigurationInUse"
        assert "generation 1" in degraded["message"]
        assert live.current is good
        assert live.version == seen
        # The Event is recorded after the status is written: wait for it, do not race it.
        await eventually(
            lambda: events_about(client, name),
            lambda events: any(e["reason"] == "PriorityClassNotFound" for e in events),
            what="the PriorityClassNotFound Event",
        )

        # The bridges learn of the fix without a restart: they are waiting for the next version.
        async with asyncio.TaskGroup() as tg:
            change = tg.create_task(live.wait_for_change(after=seen))
            await client.create(
                {
                    "apiVersion": KUEUE_API_VERSION,
                    "kind": "WorkloadPriorityClass",
                    "metadata": {"name": priority},
                    "value": 10,
                }
            )
            async with asyncio.timeout(TIMEOUT):
                snapshot = await change
        assert snapshot is not None
        assert snapshot.generation == 2
        assert snapshot.spec.slurm is not None
        assert snapshot.spec.slurm.mapping.default.priority_class == priority
        healed = await eventually(get, ready_is("True", "ConfigurationValid", generation=2), what="healed")
        assert conditions(healed)["Degraded"]["reason"] == "AsExpected"


async def test_counts_from_the_provider_reach_the_status(client: Client, namespace: str) -> None:
    name = unique("wm")
    await client.create(local_queue(namespace, "hpc"))
    await client.create(mixing(name, slurm(namespace)))
    get = reader(client, name)

    # No periodic recheck: the board itself queues the reconcile.
    async with mixing_controller(client, recheck_after=None) as running:
        ready = await eventually(get, ready_is("True", "ConfigurationValid"), what="Ready=True")
        assert ready["status"]["sources"] == {"slurm": {"held": 0, "queued": 0, "admitted": 0, "running": 0}}
        running.board.set(name, "slurm", SourceCounts(held=3, queued=2, admitted=1, running=5))
        counted = await eventually(
            get,
            lambda obj: (obj.get("status") or {}).get("sources", {}).get("slurm", {}).get("running") == 5,
            what="counts in status",
        )
        assert counted["status"]["sources"]["slurm"] == {"held": 3, "queued": 2, "admitted": 1, "running": 5}
        assert "ray" not in counted["status"]["sources"]


# --- what it costs the API server ------------------------------------------------------------------

_REQUESTS = re.compile(r"^apiserver_request_total\{(?P<labels>.*)\} (?P<value>\S+)$", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def holds(check: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    """``check`` as a probe for :func:`eventually`."""

    async def probe() -> bool:
        return check()

    return probe


def api_requests(plane: ControlPlane) -> dict[tuple[str, str], float]:
    """The API server's own count of requests so far, by (verb, resource[/subresource]), all clients."""
    counts: dict[tuple[str, str], float] = {}
    for match in _REQUESTS.finditer(plane.client.get("/metrics")):
        labels = dict(_LABEL.findall(match["labels"]))
        resource = labels.get("resource", "") + (
            f"/{labels['subresource']}" if labels.get("subresource") else ""
        )
        key = (labels.get("verb", ""), resource)
        counts[key] = counts.get(key, 0.0) + float(match["value"])
    return counts


async def requests_since(plane: ControlPlane, before: dict[tuple[str, str], float]) -> dict[str, int]:
    """How many Secret GETs and WorkloadMixing status PUTs the server has seen since ``before``."""
    after = await asyncio.to_thread(api_requests, plane)
    watched = {"GET secrets": ("GET", "secrets"), "PUT status": ("PUT", "workloadmixings/status")}
    return {name: int(after.get(key, 0.0) - before.get(key, 0.0)) for name, key in watched.items()}


async def test_catch_up_and_quiet_window_cost_few_requests(
    plane: ControlPlane, client: Client, namespace: str
) -> None:
    """Experiment 001 saw 3.8 Secret GETs/s with nothing changing and 222 status PUTs in a 1,000-job
    catch-up. Here a bridge's counts change 1,000 times while a Kueue stand-in rewrites the
    LocalQueue's status 4 times a second, then nothing changes for a while with a recheck every
    0.5 s: the Secret is never read with a GET (its watch answers), and the status is written about
    once per ``counts_interval`` (5 s, the default) during the catch-up and never in the quiet window.
    (Before: one GET per reconcile, so one per recheck, and a GET and a PUT per counts change.)"""
    name = unique("wm")
    await client.create(local_queue(namespace, "hpc"))
    await client.create(mixing(name, slurm(namespace)))
    get = reader(client, name)
    stop_kueue = asyncio.Event()

    async def kueue_rewriting_local_queue_status() -> None:
        pending = 0
        while not stop_kueue.is_set():
            pending += 1
            await client.patch_status(
                KUEUE_API_VERSION,
                "LocalQueue",
                "hpc",
                {"status": {"pendingWorkloads": pending}},
                namespace=namespace,
            )
            await asyncio.sleep(0.25)

    async with mixing_controller(client, recheck_after=0.5) as running, asyncio.TaskGroup() as tg:
        await eventually(get, ready_is("True", "ConfigurationValid"), what="Ready=True")
        # Start-up is over once every named Secret's watch has listed (WorkloadMixings of earlier
        # tests are still there, each naming its own Secret) and their first reconciles are done.
        secrets = running.controller.secrets
        assert (namespace, "jwt") in secrets.watched
        await eventually(
            holds(lambda: all(secrets.has_listed(*key) for key in secrets.watched)),
            bool,
            what="every Secret watch listed",
        )
        await asyncio.sleep(1.0)
        tg.create_task(kueue_rewriting_local_queue_status())

        # Catch-up: every job bridged changes the counts.
        before = await asyncio.to_thread(api_requests, plane)
        started = time.monotonic()
        jobs = 1000
        for bridged in range(1, jobs + 1):
            running.board.set(name, "slurm", SourceCounts(held=jobs - bridged, queued=bridged))
            await asyncio.sleep(0.005)
        final = {"held": 0, "queued": jobs, "admitted": 0, "running": 0}
        await eventually(
            get,
            lambda obj: (obj.get("status") or {}).get("sources", {}).get("slurm") == final,
            what="final counts",
        )
        elapsed = time.monotonic() - started
        catch_up = await requests_since(plane, before)
        print(f"catch-up: {jobs} counts changes in {elapsed:.1f} s: {catch_up}")
        assert catch_up["GET secrets"] == 0
        assert 1 <= catch_up["PUT status"] <= elapsed / 5.0 + 2

        # Quiet: nothing the controller cares about changes; it keeps rechecking.
        before, reconciles = await asyncio.to_thread(api_requests, plane), running.reconciles()
        await asyncio.sleep(5.0)
        quiet = await requests_since(plane, before)
        rechecks = running.reconciles() - reconciles
        print(f"quiet 5 s: {rechecks:.0f} reconciles, {quiet}")
        assert rechecks >= 3, "the quiet window must contain rechecks for its count to mean anything"
        assert quiet == {"GET secrets": 0, "PUT status": 0}
        stop_kueue.set()


async def test_a_secret_created_later_is_seen_through_its_watch(client: Client, namespace: str) -> None:
    """No periodic recheck: only the watch of the named Secret can tell it appeared or changed."""
    name = unique("wm")
    await client.create(local_queue(namespace, "hpc"))
    spec = slurm(namespace)
    spec["slurm"]["auth"] = {"tokenSecretRef": {"namespace": namespace, "name": "late"}}
    await client.create(mixing(name, spec))
    get = reader(client, name)

    async with mixing_controller(client, recheck_after=None):
        await eventually(get, ready_is("False", "SecretNotFound"), what="SecretNotFound")
        await client.create(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "late", "namespace": namespace},
                "stringData": {"other": "x"},
            }
        )
        await eventually(get, ready_is("False", "SecretKeyNotFound"), what="SecretKeyNotFound")
        await client.patch("v1", "Secret", "late", {"stringData": {"token": "t"}}, namespace=namespace)
        await eventually(get, ready_is("True", "ConfigurationValid"), what="Ready=True")


async def test_the_secret_watch_needs_rbac_on_the_named_secret_only(
    plane: ControlPlane, client: Client, namespace: str, tmp_path: Path
) -> None:
    """A ServiceAccount allowed get/list/watch on ``resourceNames: [jwt]`` only - not on the other
    Secrets of the namespace - watches that Secret: the API server authorises a list and watch
    whose ``metadata.name`` field selector names it."""
    await client.create(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "mixing", "namespace": namespace}}
    )
    await client.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "jwt-reader", "namespace": namespace},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["secrets"],
                    "resourceNames": ["jwt"],
                    "verbs": ["get", "list", "watch"],
                }
            ],
        }
    )
    await client.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "jwt-reader", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "jwt-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "mixing", "namespace": namespace}],
        }
    )
    await client.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "neighbour", "namespace": namespace},
            "stringData": {"k": "v"},
        }
    )
    token_request = await asyncio.to_thread(
        plane.client.create,
        f"/api/v1/namespaces/{namespace}/serviceaccounts/mixing/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "plane",
                        "cluster": {
                            "server": plane.server,
                            "certificate-authority": str(plane.certificates.ca_cert),
                        },
                    }
                ],
                "users": [{"name": "mixing", "user": {"token": token_request["status"]["token"]}}],
                "contexts": [{"name": "plane", "context": {"cluster": "plane", "user": "mixing"}}],
                "current-context": "plane",
            }
        )
    )
    mixings = Dispatcher(Store(indexers={REFERENCES_INDEX: reference_index_keys}), name="mixings")
    async with await Session.load(config_file=kubeconfig) as session:
        restricted = Client(session)
        with pytest.raises(Forbidden):
            await restricted.list("v1", "Secret", namespace=namespace)  # not every Secret
        with pytest.raises(Forbidden):
            await restricted.get("v1", "Secret", "neighbour", namespace=namespace)
        secrets = WatchedSecretKeys.for_client(
            restricted, await client.resource("v1", "Secret"), mixings=mixings.store, registry=None
        )
        mixings.add_handler(secrets)
        mixings.replace(
            [{**mixing("site", slurm(namespace)), "metadata": {"name": "site", "uid": "u", "generation": 1}}]
        )
        assert secrets.watched == [(namespace, "jwt")]
        async with asyncio.TaskGroup() as tg:
            task = tg.create_task(secrets.run())
            await eventually(
                holds(lambda: secrets.has_listed(namespace, "jwt")), bool, what="the watch listed"
            )
            assert await secrets(namespace, "jwt") == frozenset({"token"})
            await client.patch(
                "v1",
                "Secret",
                "jwt",
                {"data": {"ca": base64.b64encode(b"x").decode()}},
                namespace=namespace,
            )
            await eventually(
                lambda: secrets(namespace, "jwt"),
                lambda keys: keys == {"ca", "token"},
                what="the new key seen",
            )
            secrets.stop()
        assert task.done()


# --- two bridges, each with its own WorkloadMixing -------------------------------------------------


def counts_are(want: dict[str, int]) -> Callable[[Object], bool]:
    def check(obj: Object) -> bool:
        return bool((obj.get("status") or {}).get("sources", {}).get("slurm", {}) == want)

    return check


class IdleBridge(BridgeProgram):
    """The program shell with nothing wired: its mixing controller is all that runs."""

    name = "slurm"
    title = "idle"

    async def wire(self, shell: Shell) -> Wiring:
        return Wiring()


async def test_each_bridge_checks_and_writes_only_its_own_workloadmixing(
    client: Client, plane: ControlPlane, namespace: str
) -> None:
    # Both bridges of one chart run in one cluster, each on its own WorkloadMixing: each one's
    # status is that bridge's (its counts), and neither bridge takes up the other's configuration.
    await client.create(local_queue(namespace, "hpc"))
    names = [unique("wm-a"), unique("wm-b")]
    for name in names:
        await client.create(mixing(name, slurm(namespace)))
    programs = [
        IdleBridge(
            ProgramSettings(
                config=name,
                kubeconfig=str(plane.kubeconfig),
                metrics_bind_address="0",
                health_probe_bind_address="0",
            ),
            registry=CollectorRegistry(),
            handle_signals=False,
        )
        for name in names
    ]
    async with asyncio.TaskGroup() as tg:
        for program in programs:
            tg.create_task(program.run(), name=f"bridge {program.settings.config}")
        try:
            for running, (program, name) in enumerate(zip(programs, names, strict=True), start=1):
                program.report_phases({"running": running}, buckets={"running": "running"})
                await eventually(
                    reader(client, name),
                    counts_are({"held": 0, "queued": 0, "admitted": 0, "running": running}),
                    what=f"{name}'s status to hold its own bridge's counts",
                )
            # A new count for the first: once written, both are settled on their own counts.
            programs[0].report_phases({"running": 7}, buckets={"running": "running"})
            await eventually(
                reader(client, names[0]),
                lambda obj: (obj.get("status") or {}).get("sources", {}).get("slurm", {}).get("running") == 7,
                what="the first WorkloadMixing's new count",
            )
            second = await client.get(API_VERSION, KIND, names[1])
            assert second["status"]["sources"]["slurm"]["running"] == 2
            for program, name in zip(programs, names, strict=True):
                assert program.configs.names() == [name]
                assert program.live.current is not None
        finally:
            for program in programs:
                program.stop()
    for name in names:
        await client.delete(API_VERSION, KIND, name, missing_ok=True)
