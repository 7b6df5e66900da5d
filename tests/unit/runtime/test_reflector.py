"""The reflector against a scripted API server on a real socket: list, watch, and every way they fail."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web
from structlog.testing import capture_logs

from bridge.runtime.backoff import BackoffSettings
from bridge.runtime.client import Client
from bridge.runtime.discovery import Resource
from bridge.runtime.handlers import Object
from bridge.runtime.informer import Informer
from bridge.runtime.reflector import ReflectorSettings
from bridge.runtime.session import Session
from tests.fixtures.fake_apiserver import (
    FakeApiServer,
    drop_connection,
    hang_after_headers,
    line,
    send_then_close,
    status,
)

CONFIGMAPS = Resource(group="", version="v1", plural="configmaps", kind="ConfigMap", namespaced=True)
FAST_BACKOFF = BackoffSettings(initial=0.01, maximum=0.05)


def settings(**overrides: Any) -> ReflectorSettings:
    values: dict[str, Any] = {"inactivity_timeout": 5.0, "streaming_list": False, "backoff": FAST_BACKOFF}
    values.update(overrides)
    return ReflectorSettings(**values)


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def on_add(self, obj: Object, *, is_initial_list: bool) -> None:
        self.events.append(("add", obj["metadata"]["name"], is_initial_list))

    def on_update(self, old: Object, new: Object) -> None:
        self.events.append(("update", new["metadata"]["name"]))

    def on_delete(self, obj: Object) -> None:
        self.events.append(("delete", obj["metadata"]["name"], obj["data"]["v"]))


@pytest.fixture
async def server() -> AsyncIterator[FakeApiServer]:
    fake = FakeApiServer()
    await fake.start()
    yield fake
    await fake.close()


@pytest.fixture
async def client(server: FakeApiServer) -> AsyncIterator[Client]:
    session = Session(base_url=server.base_url)
    yield Client(session)
    await session.close()


@asynccontextmanager
async def running(informer: Informer) -> AsyncIterator[Informer]:
    async with asyncio.TaskGroup() as tg:
        tg.create_task(informer.run())
        try:
            yield informer
        finally:
            informer.stop()


async def eventually(predicate: Callable[[], bool], *, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)


def cm(name: str, rv: int, value: str = "1") -> Object:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default", "resourceVersion": str(rv)},
        "data": {"v": value},
    }


def informer(client: Client, recorder: Recorder | None = None, **overrides: Any) -> Informer:
    inf = Informer(
        client, CONFIGMAPS, namespace="default", settings=settings(**overrides), resync_period=None
    )
    if recorder is not None:
        inf.add_handler(recorder)
    return inf


def data(inf: Informer) -> dict[str, str]:
    return {obj["metadata"]["name"]: obj["data"]["v"] for obj in inf.store.list()}


def expected(server: FakeApiServer) -> dict[str, str]:
    return {name: obj["data"]["v"] for name, obj in server.objects.items()}


async def test_list_then_watch_converges_and_strips_managed_fields(
    server: FakeApiServer, client: Client
) -> None:
    await server.put("a", {"v": "1"})
    await server.put("b", {"v": "1"})
    rec = Recorder()
    async with running(informer(client, rec)) as inf:
        assert await inf.wait_for_sync(5)
        assert rec.events == [("add", "a", True), ("add", "b", True)]
        await server.put("c", {"v": "1"})
        await server.put("a", {"v": "2"})
        await server.remove("b")
        await eventually(lambda: data(inf) == {"a": "2", "c": "1"})
        assert rec.events[2:] == [("add", "c", False), ("update", "a"), ("delete", "b", "1")]
        stored = inf.store.get("default/a")
        assert stored is not None
        assert "managedFields" not in stored["metadata"]
        assert stored["kind"] == "ConfigMap"
    assert server.lists[0]["resourceVersion"] == "0"
    watch = server.watches[0]
    assert watch["allowWatchBookmarks"] == "true"
    assert 300 <= int(watch["timeoutSeconds"]) <= 600
    assert watch["resourceVersion"] == "102"


async def test_list_follows_continue_tokens(server: FakeApiServer, client: Client) -> None:
    for i in range(7):
        await server.put(f"o{i}", {"v": "1"})
    async with running(informer(client, page_size=3)) as inf:
        assert await inf.wait_for_sync(5)
        assert len(inf.store) == 7
    assert [p.get("continue") for p in server.lists] == [None, "3", "6"]
    assert "resourceVersion" not in server.lists[1]  # the server refuses it beside continue


async def test_clean_close_rewatches_from_last_event_without_relisting(
    server: FakeApiServer, client: Client
) -> None:
    await server.put("a", {"v": "1"})
    server.watch_scripts.append(send_then_close(line("MODIFIED", cm("a", 150, "x"))))
    async with running(informer(client)) as inf:
        await eventually(lambda: len(server.watches) >= 2)
        assert data(inf) == {"a": "x"}
    assert server.watches[1]["resourceVersion"] == "150"
    assert len(server.lists) == 1


async def test_bookmark_advances_resource_version(server: FakeApiServer, client: Client) -> None:
    await server.put("a", {"v": "1"})
    bookmark = {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"resourceVersion": "555"}}
    server.watch_scripts.append(send_then_close(line("BOOKMARK", bookmark)))
    rec = Recorder()
    async with running(informer(client, rec)):
        await eventually(lambda: len(server.watches) >= 2)
    assert server.watches[1]["resourceVersion"] == "555"
    assert rec.events == [("add", "a", True)]  # a bookmark is not an object change
    assert len(server.lists) == 1


def gated_gone(gate: asyncio.Event) -> Any:
    async def script(fake: FakeApiServer, request: web.Request) -> web.StreamResponse:
        response = await fake.begin(request)
        await gate.wait()
        await response.write(line("ERROR", status(410, "Expired", "too old resource version")))
        return response

    return script


async def test_gone_mid_stream_relists_and_delivers_deletes_first(
    server: FakeApiServer, client: Client
) -> None:
    for name in ("a", "b", "c"):
        await server.put(name, {"v": "1"})
    gate = asyncio.Event()
    server.watch_scripts.append(gated_gone(gate))
    rec = Recorder()
    async with running(informer(client, rec)) as inf:
        assert await inf.wait_for_sync(5)
        list_rv = inf.reflector.last_resource_version
        # Changes whose events the watch never delivers (compacted away before we saw them).
        await server.remove("b", silently=True)
        await server.put("a", {"v": "2"}, silently=True)
        await server.put("d", {"v": "1"}, silently=True)
        gate.set()
        await eventually(lambda: data(inf) == expected(server))
        after_sync = rec.events[3:]
        assert after_sync[0] == ("delete", "b", "1")  # with the last known object
        assert sorted(after_sync[1:]) == [("add", "d", False), ("update", "a"), ("update", "c")]
    assert [p["resourceVersion"] for p in server.lists] == ["0", list_rv]
    assert inf.reflector.stats.gone == 1


async def test_gone_on_relist_falls_back_to_consistent_read(server: FakeApiServer, client: Client) -> None:
    for name in ("a", "b"):
        await server.put(name, {"v": "1"})
    gate = asyncio.Event()
    server.watch_scripts.append(gated_gone(gate))
    rec = Recorder()
    async with running(informer(client, rec)) as inf:
        assert await inf.wait_for_sync(5)
        list_rv = inf.reflector.last_resource_version
        await server.remove("a", silently=True)
        await server.put("e", {"v": "1"}, silently=True)
        server.compact()  # the relist at the last resourceVersion is too old as well
        gate.set()
        await eventually(lambda: data(inf) == expected(server))
        await eventually(lambda: len(server.watches) >= 2)
        assert rec.events[2] == ("delete", "a", "1")
    assert [p["resourceVersion"] for p in server.lists] == ["0", list_rv, ""]
    assert inf.reflector.stats.gone == 2
    assert int(server.watches[1]["resourceVersion"]) >= server.compacted


async def test_gone_as_http_status_relists(server: FakeApiServer, client: Client) -> None:
    await server.put("a", {"v": "1"})

    async def gone(fake: FakeApiServer, request: web.Request) -> web.StreamResponse:
        return web.json_response(status(410, "Gone"), status=410)

    server.watch_scripts.append(gone)
    async with running(informer(client)) as inf:
        await eventually(lambda: len(server.lists) >= 2 and len(server.watches) >= 2)
        assert inf.has_synced()


@pytest.mark.parametrize("script", [hang_after_headers, "before_headers"])
async def test_inactivity_timeout_recovers_a_hung_stream(
    server: FakeApiServer, client: Client, script: Any
) -> None:
    async def hang_before_headers(fake: FakeApiServer, request: web.Request) -> web.StreamResponse:
        await fake._closing.wait()
        return web.Response()

    await server.put("a", {"v": "1"})
    server.watch_scripts.append(hang_before_headers if script == "before_headers" else script)
    with capture_logs() as logs:
        async with running(informer(client, inactivity_timeout=0.3)) as inf:
            assert await inf.wait_for_sync(5)
            await server.put("late", {"v": "1"})
            await eventually(lambda: "late" in data(inf))
            assert inf.reflector.stats.inactivity_timeouts == 1
    assert len(server.lists) == 1  # re-watched from the last resourceVersion, no relist
    failed = [entry for entry in logs if entry["event"] == "watch failed, backing off"]
    assert [entry["log_level"] for entry in failed] == ["info"], "a first quiet watch is no warning"


async def test_a_watch_that_stays_quiet_is_a_warning(server: FakeApiServer, client: Client) -> None:
    """Quiet again right after it was watched anew (no answer in between): something is wrong."""

    async def hang_before_headers(fake: FakeApiServer, request: web.Request) -> web.StreamResponse:
        await fake._closing.wait()
        return web.Response()

    await server.put("a", {"v": "1"})
    server.watch_scripts.extend([hang_before_headers, hang_before_headers])
    with capture_logs() as logs:
        async with running(informer(client, inactivity_timeout=0.3)) as inf:
            assert await inf.wait_for_sync(5)
            await eventually(lambda: inf.reflector.stats.inactivity_timeouts >= 2)
    failed = [entry["log_level"] for entry in logs if entry["event"] == "watch failed, backing off"]
    assert failed[:2] == ["info", "warning"]


async def test_disconnect_storm_backs_off_exponentially_then_converges(
    server: FakeApiServer, client: Client
) -> None:
    delays: list[float] = []

    async def fake_sleep(delay: float) -> None:
        delays.append(delay)
        await asyncio.sleep(0)

    await server.put("a", {"v": "1"})
    storm = 8
    for i in range(storm):
        server.watch_scripts.append(drop_connection if i % 2 else send_then_close())
    inf = Informer(
        client,
        CONFIGMAPS,
        namespace="default",
        settings=ReflectorSettings(streaming_list=False),  # the real 0.8 s -> 30 s backoff
        resync_period=None,
        sleep=fake_sleep,
        rng=random.Random(7),
    )
    async with running(inf):
        assert await inf.wait_for_sync(5)
        await server.put("b", {"v": "2"})
        await eventually(lambda: data(inf) == {"a": "1", "b": "2"})
    assert len(delays) == storm
    for i, delay in enumerate(delays):
        base = min(0.8 * 2**i, 30.0)
        assert base <= delay <= min(2 * base, 30.0), (i, delay)
    assert delays[-1] == 30.0 or delays[-1] >= 25.6
    assert len(server.lists) == 1


async def test_garbage_lines_are_skipped_without_losing_the_stream(
    server: FakeApiServer, client: Client
) -> None:
    await server.put("a", {"v": "1"})

    async def garbage(fake: FakeApiServer, request: web.Request) -> web.StreamResponse:
        response = await fake.begin(request)
        await response.write(b"this is not json\n")
        await response.write(b'{"type":"ADDED"}\n')  # no object
        await response.write(b"\n")  # blank lines are not garbage
        await response.write(b'{"type":"SURPRISE","object":{"metadata":{"resourceVersion":"1"}}}\n')
        await response.write(line("ADDED", cm("g", 300))[:30])  # split across writes: not garbage
        await response.write(line("ADDED", cm("g", 300))[30:])
        await fake._closing.wait()
        return response

    server.watch_scripts.append(garbage)
    async with running(informer(client)) as inf:
        await eventually(lambda: "g" in data(inf))
        assert inf.reflector.stats.garbage_lines == 3
    assert len(server.watches) == 1
    assert inf.reflector.last_resource_version == "300"


async def test_streaming_list_when_the_server_offers_it(client: Client) -> None:
    fake = FakeApiServer(streaming_list=True)
    await fake.start()
    session = Session(base_url=fake.base_url)
    try:
        await fake.put("a", {"v": "1"})
        await fake.put("b", {"v": "1"})
        rec = Recorder()
        inf = informer(Client(session), rec, streaming_list=True)
        async with running(inf):
            assert await inf.wait_for_sync(5)
            assert rec.events == [("add", "a", True), ("add", "b", True)]
            await fake.put("c", {"v": "1"})
            await eventually(lambda: "c" in data(inf))
        assert fake.lists == []
        assert len(fake.watches) == 1  # the same stream carried on as a watch
        assert fake.watches[0]["sendInitialEvents"] == "true"
        assert fake.watches[0]["resourceVersionMatch"] == "NotOlderThan"
        assert inf.reflector.stats.streaming_lists == 1
    finally:
        await session.close()
        await fake.close()


async def test_streaming_list_falls_back_to_a_plain_list(server: FakeApiServer, client: Client) -> None:
    await server.put("a", {"v": "1"})
    async with running(informer(client, streaming_list=True)) as inf:
        assert await inf.wait_for_sync(5)
        await server.put("b", {"v": "1"})
        await eventually(lambda: "b" in data(inf))
    assert server.watches[0]["sendInitialEvents"] == "true"
    assert "sendInitialEvents" not in server.watches[1]
    assert [p["resourceVersion"] for p in server.lists] == ["0"]


async def test_streaming_list_without_end_bookmark_falls_back(server: FakeApiServer, client: Client) -> None:
    await server.put("a", {"v": "1"})
    server.watch_scripts.append(send_then_close(line("ADDED", server.objects["a"])))
    async with running(informer(client, streaming_list=True)) as inf:
        assert await inf.wait_for_sync(5)
    assert len(server.lists) == 1


async def test_list_errors_back_off_and_retry(server: FakeApiServer, client: Client) -> None:
    await server.put("a", {"v": "1"})
    server.list_failures.extend([500, 503, 429])
    async with running(informer(client)) as inf:
        assert await inf.wait_for_sync(5)
    assert len(server.lists) == 4
    assert inf.reflector.stats.failures == 3


async def test_resync_replays_updates(server: FakeApiServer, client: Client) -> None:
    await server.put("a", {"v": "1"})
    rec = Recorder()
    inf = Informer(client, CONFIGMAPS, namespace="default", settings=settings(), resync_period=0.05)
    inf.add_handler(rec)
    async with running(inf):
        await eventually(lambda: ("update", "a") in rec.events)
