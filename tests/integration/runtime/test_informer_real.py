"""The informer, client and event recorder against a real kube-apiserver + etcd.

These tests compact etcd and restart the API server, so they run on a control plane of this module's
own (etcd + kube-apiserver only: no CRDs or controllers are needed), with the watch cache off: a
compaction then turns every older resourceVersion into ``410 Gone`` at once, as a long-lived
cluster does over time.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from bridge.runtime.backoff import BackoffSettings
from bridge.runtime.client import Client
from bridge.runtime.events import EventRecorder
from bridge.runtime.handlers import Object
from bridge.runtime.informer import Informer, SharedInformerFactory
from bridge.runtime.reflector import ReflectorSettings
from bridge.sandbox.kube import ControlPlane

SETTINGS = ReflectorSettings(backoff=BackoffSettings(initial=0.2, maximum=2.0), inactivity_timeout=30.0)


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def on_add(self, obj: Object, *, is_initial_list: bool) -> None:
        self.events.append(("add", obj["metadata"]["name"]))

    def on_update(self, old: Object, new: Object) -> None:
        self.events.append(("update", new["metadata"]["name"]))

    def on_delete(self, obj: Object) -> None:
        self.events.append(("delete", obj["metadata"]["name"]))


def configmap(namespace: str, name: str, value: str) -> Object:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"v": value},
    }


async def eventually(predicate: Callable[[], Any], *, timeout: float = 30.0) -> None:
    async with asyncio.timeout(timeout):
        while not await predicate():
            await asyncio.sleep(0.1)


def cached(informer: Informer) -> dict[str, tuple[str, str]]:
    return {
        o["metadata"]["name"]: (o["data"]["v"], o["metadata"]["resourceVersion"])
        for o in informer.store.list()
    }


async def fresh(client: Client, namespace: str) -> dict[str, tuple[str, str]]:
    items = await client.list("v1", "ConfigMap", namespace=namespace, label_selector="test=rt")
    return {o["metadata"]["name"]: (o["data"]["v"], o["metadata"]["resourceVersion"]) for o in items}


@asynccontextmanager
async def running(informer: Informer) -> AsyncIterator[Informer]:
    async with asyncio.TaskGroup() as tg:
        tg.create_task(informer.run())
        try:
            yield informer
        finally:
            informer.stop()


def labelled(namespace: str, name: str, value: str) -> Object:
    obj = configmap(namespace, name, value)
    obj["metadata"]["labels"] = {"test": "rt"}
    return obj


async def converged(client: Client, namespace: str, informer: Informer) -> bool:
    return cached(informer) == await fresh(client, namespace)


async def test_cache_converges_on_creates_updates_deletes(client: Client, namespace: str) -> None:
    for i in range(10):
        await client.create(labelled(namespace, f"pre-{i}", "0"))
    factory = SharedInformerFactory(client, settings=SETTINGS)
    informer = await factory.informer("v1", "ConfigMap", namespace=namespace, label_selector="test=rt")
    assert (
        await factory.informer("v1", "ConfigMap", namespace=namespace, label_selector="test=rt") is informer
    )
    recorder = Recorder()
    informer.add_handler(recorder)
    async with asyncio.TaskGroup() as tg:
        tg.create_task(factory.run())
        assert await factory.wait_for_sync(30)
        assert len(informer.store) == 10
        for i in range(10):
            await client.create(labelled(namespace, f"new-{i}", "0"))
        for i in range(5):
            await client.patch("v1", "ConfigMap", f"pre-{i}", {"data": {"v": "1"}}, namespace=namespace)
        for i in range(5, 10):
            await client.delete("v1", "ConfigMap", f"pre-{i}", namespace=namespace)
        await eventually(lambda: converged(client, namespace, informer))
        factory.stop()
    assert len(informer.store) == 15
    stored = informer.store.get(f"{namespace}/pre-0")
    assert stored is not None
    assert "managedFields" not in stored["metadata"]
    assert sum(1 for e in recorder.events if e[0] == "delete") == 5


async def test_real_gone_relists_without_losing_a_change(
    kube_control_plane: ControlPlane, client: Client, namespace: str
) -> None:
    for i in range(6):
        await client.create(labelled(namespace, f"cm-{i}", "0"))
    recorder = Recorder()
    informer = Informer(
        client,
        await client.resource("v1", "ConfigMap"),
        namespace=namespace,
        label_selector="test=rt",
        settings=SETTINGS,
    )
    informer.add_handler(recorder)
    async with running(informer):
        assert await informer.wait_for_sync(30)
    old_rv = informer.reflector.last_resource_version
    # While nobody watches: changes, then a compaction that makes old_rv unavailable.
    await client.patch("v1", "ConfigMap", "cm-0", {"data": {"v": "changed"}}, namespace=namespace)
    await client.delete("v1", "ConfigMap", "cm-1", namespace=namespace)
    await client.create(labelled(namespace, "cm-new", "0"))
    await asyncio.to_thread(kube_control_plane.compact_etcd)
    recorder.events.clear()
    async with running(informer):  # resumes the watch from old_rv: 410, relist, consistent read
        await eventually(lambda: converged(client, namespace, informer))
        assert informer.reflector.stats.gone >= 1
        # A change after the relist still arrives through the new watch.
        await client.patch("v1", "ConfigMap", "cm-2", {"data": {"v": "after"}}, namespace=namespace)
        await eventually(lambda: converged(client, namespace, informer))
    assert informer.reflector.last_resource_version != old_rv
    assert ("delete", "cm-1") in recorder.events
    assert recorder.events.index(("delete", "cm-1")) < recorder.events.index(("add", "cm-new"))
    assert informer.store.get(f"{namespace}/cm-0")["data"]["v"] == "changed"  # type: ignore[index]


async def test_api_server_restarted_mid_watch(
    kube_control_plane: ControlPlane, client: Client, namespace: str
) -> None:
    informer = Informer(
        client,
        await client.resource("v1", "ConfigMap"),
        namespace=namespace,
        label_selector="test=rt",
        settings=SETTINGS,
    )
    async with running(informer):
        assert await informer.wait_for_sync(30)
        await client.create(labelled(namespace, "before", "0"))
        await asyncio.to_thread(kube_control_plane.restart_apiserver, down_for=2.0)
        await client.create(labelled(namespace, "after", "0"))
        await client.patch("v1", "ConfigMap", "before", {"data": {"v": "1"}}, namespace=namespace)
        await eventually(lambda: converged(client, namespace, informer), timeout=60)
        assert informer.reflector.stats.failures >= 1 or informer.reflector.stats.watches >= 2


async def test_server_side_apply_is_idempotent(client: Client, namespace: str) -> None:
    desired = labelled(namespace, "applied", "1")
    first = await client.apply(desired, field_manager="k8s-bridge-test")
    second = await client.apply(desired, field_manager="k8s-bridge-test")
    assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    desired["data"]["v"] = "2"
    third = await client.apply(desired, field_manager="k8s-bridge-test", force=True)
    assert third["data"] == {"v": "2"}
    assert third["metadata"]["resourceVersion"] != first["metadata"]["resourceVersion"]
    managers = {m["manager"] for m in third["metadata"]["managedFields"]}
    assert "k8s-bridge-test" in managers


async def test_events_appear(client: Client, namespace: str) -> None:
    target = await client.create(labelled(namespace, "subject", "1"))
    recorder = EventRecorder(
        client, reporting_controller="k8s-bridge.test/runtime", reporting_instance="test-1"
    )
    created = await recorder.event(
        target, type="Warning", reason="Held", note="no partition fits", action="Admit"
    )
    assert created is not None
    await recorder.event(target, type="Warning", reason="Held", note="no partition fits", action="Admit")
    events = await client.list("events.k8s.io/v1", "Event", namespace=namespace)
    mine = [e for e in events if e.get("reason") == "Held"]
    assert len(mine) == 1
    assert mine[0]["regarding"]["uid"] == target["metadata"]["uid"]
    assert mine[0]["series"]["count"] == 2
    assert mine[0]["reportingController"] == "k8s-bridge.test/runtime"


async def test_streaming_list_or_fallback_syncs(client: Client, namespace: str) -> None:
    await client.create(labelled(namespace, "one", "1"))
    informer = Informer(
        client,
        await client.resource("v1", "ConfigMap"),
        namespace=namespace,
        label_selector="test=rt",
        settings=SETTINGS,
    )
    async with running(informer):
        assert await informer.wait_for_sync(30)
        assert set(cached(informer)) == {"one"}
    stats = informer.reflector.stats
    assert stats.streaming_lists + stats.lists == 1


async def test_a_background_delete_ends_a_foreground_deletion_in_progress(
    client: Client, namespace: str
) -> None:
    """What the Slurm bridge relies on for a JobSet whose foreground deletion waits on a dependent
    that waits on it (Kueue's Workload): deleting it again with background propagation takes the
    collector's ``foregroundDeletion`` finalizer off, so only the other finalizers keep it."""
    obj = labelled(namespace, "owner", "1")
    obj["metadata"]["finalizers"] = ["k8s-bridge.io/test"]
    await client.create(obj)
    answer = await client.delete(
        "v1", "ConfigMap", "owner", namespace=namespace, propagation_policy="Foreground"
    )
    assert answer is not None
    assert "foregroundDeletion" in answer["metadata"]["finalizers"]  # no collector here: it stays
    again = await client.delete(
        "v1", "ConfigMap", "owner", namespace=namespace, propagation_policy="Background"
    )
    assert again is not None
    assert again["metadata"]["finalizers"] == ["k8s-bridge.io/test"]
    await client.patch("v1", "ConfigMap", "owner", {"metadata": {"finalizers": None}}, namespace=namespace)
