"""Watch decoding and cache memory: the runtime's hot path against plain json.loads and kubernetes-asyncio.

Bench tier: prints figures and ratios measured in the same run, asserts nothing about time.
Run: ``python -m pytest tests/bench/test_decode_bench.py -s -p no:randomly``.

- decode+cache: our reflector's chunk decoder feeding an informer (store, transform) in process, and
  end to end (aiohttp stream from a local server -> reflector -> store);
- plain ``json.loads`` of the same lines, in memory, results dropped (the anchor), the same with
  ``orjson.loads`` (the decoder the runtime uses: the ceiling), and ``json.loads`` kept in a
  plain dict by key (what a naive cache costs: retained objects are what makes a cache slow);
- kubernetes-asyncio's ``Watch().stream`` over the same local server (what Python operators use);
- memory per cached object (tracemalloc), against the plain decoded dict with managedFields, for the
  default transform (managedFields stripped, envelope strings shared), stripping only, and compact.
"""

from __future__ import annotations

import contextlib
import gc
import json
import subprocess
import sys
import time
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import watch as k8s_watch

from bridge.runtime.cache import Transform, compact, default_transform, strip_managed_fields
from bridge.runtime.client import Client
from bridge.runtime.discovery import Resource
from bridge.runtime.informer import Informer
from bridge.runtime.session import Session
from tests.fixtures.watch_events import jobset_event_lines, pod_event_lines

PODS = Resource(group="", version="v1", plural="pods", kind="Pod", namespaced=True)
JOBSETS = Resource(
    group="jobset.x-k8s.io", version="v1alpha2", plural="jobsets", kind="JobSet", namespaced=True
)
COUNT = 2000
CHUNK = 64 * 1024  # what aiohttp hands the reflector per read, at most
SERVER_CHILD = Path(__file__).with_name("watch_server_child.py")


ROUNDS = 5


def rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


def timed(fn: Callable[[], None]) -> float:
    gc.collect()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


async def atimed(fn: Callable[[], Awaitable[None]]) -> float:
    gc.collect()
    start = time.perf_counter()
    await fn()
    return time.perf_counter() - start


def chunks(lines: list[bytes]) -> list[list[bytes]]:
    """Group lines as they arrive in 64 KiB reads (the reflector splits each read into lines)."""
    out: list[list[bytes]] = [[]]
    size = 0
    for line in lines:
        if size + len(line) > CHUNK and out[-1]:
            out.append([])
            size = 0
        out[-1].append(line)
        size += len(line) + 1
    return out


class StreamServer:
    """Serves the given lines as one watch response for pods and jobsets, then closes."""

    def __init__(self) -> None:
        self.body = b""
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    async def _watch(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(self.body)
        return response

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/api/v1/namespaces/team-a/pods", self._watch)
        app.router.add_get("/apis/jobset.x-k8s.io/v1alpha2/namespaces/team-a/jobsets", self._watch)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.base_url = f"http://{host}:{port}"

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def stream_server() -> AsyncIterator[StreamServer]:
    server = StreamServer()
    await server.start()
    yield server
    await server.close()


def new_informer(client: Client, resource: Resource, transform: Transform | None) -> Informer:
    return Informer(client, resource, namespace="team-a", transform=transform, resync_period=None)


async def k8s_asyncio_stream(api: k8s_client.ApiClient, *, pods: bool, expected: int) -> None:
    count = 0
    async with k8s_watch.Watch() as watch:
        if pods:
            stream = watch.stream(
                k8s_client.CoreV1Api(api).list_namespaced_pod, "team-a", timeout_seconds=600
            )
        else:
            stream = watch.stream(
                k8s_client.CustomObjectsApi(api).list_namespaced_custom_object,
                "jobset.x-k8s.io",
                "v1alpha2",
                "team-a",
                "jobsets",
                timeout_seconds=600,
            )
        async for _event in stream:
            count += 1
    assert count == expected


async def measure(
    name: str, lines: list[bytes], resource: Resource, server: StreamServer, *, other_process: str
) -> None:
    """Every method once per round, interleaved (the machine is shared: load drifts), best round each.
    ``other_process``: the base URL of a watch server in another process serving the same lines."""
    server.body = b"\n".join(lines) + b"\n"
    grouped = chunks(lines)
    best: dict[str, float] = {}

    def keep(label: str, seconds: float) -> None:
        best[label] = min(best.get(label, float("inf")), seconds)

    def plain() -> None:
        for line in lines:
            json.loads(line)

    def plain_orjson() -> None:
        for line in lines:
            orjson.loads(line)

    def plain_cache() -> None:
        cache: dict[str, Any] = {}
        for line in lines:
            obj = json.loads(line)["object"]
            metadata = obj["metadata"]
            cache[f"{metadata['namespace']}/{metadata['name']}"] = obj

    configuration = k8s_client.Configuration(host=server.base_url)
    async with (
        Session(base_url=server.base_url) as session,
        Session(base_url=other_process) as other_session,
        k8s_client.ApiClient(configuration) as api,
    ):
        client = Client(session)
        other_client = Client(other_session)
        for _ in range(ROUNDS):
            keep("plain json.loads", timed(plain))
            keep("plain orjson.loads", timed(plain_orjson))
            keep("json.loads into a plain dict cache", timed(plain_cache))
            for label, transform in (
                ("default", default_transform),
                ("strip only", strip_managed_fields),
                ("compact", compact),
            ):
                informer = new_informer(client, resource, transform)

                def in_process(informer: Informer = informer) -> None:
                    for group in grouped:
                        informer.reflector._process(group)

                keep(f"ours in-process ({label})", timed(in_process))
                del informer
            for label, through in (
                ("server in process", client),
                ("server in another process", other_client),
            ):
                informer = new_informer(through, resource, default_transform)

                async def end_to_end(informer: Informer = informer) -> None:
                    await informer.reflector._watch(streaming_list_from=None)

                keep(f"ours end-to-end, {label}", await atimed(end_to_end))
                assert informer.reflector.stats.events == len(lines)
                del informer
            keep(
                "kubernetes-asyncio Watch().stream",
                await atimed(lambda: k8s_asyncio_stream(api, pods=resource is PODS, expected=len(lines))),
            )

    rates = {label: rate(len(lines), seconds) for label, seconds in best.items()}
    plain_rate = rates["plain json.loads"]
    size = sum(len(line) + 1 for line in lines) / len(lines) / 1024
    print(f"\n== {name}: {len(lines)} watch events, {size:.1f} KiB per line, best of {ROUNDS} rounds")
    for label, value in rates.items():
        print(f"  {label:34s} {value:10.0f} events/s   {value / plain_rate:5.2f}x json.loads")
    ours, theirs = rates["ours end-to-end, server in process"], rates["kubernetes-asyncio Watch().stream"]
    apart = rates["ours end-to-end, server in another process"]
    print(
        f"  RATIOS {name}: ours end-to-end / json.loads = {apart / plain_rate:.2f} with the server in "
        f"another process, as an API server is (target >= 1.0), {ours / plain_rate:.2f} with it in this "
        f"process (its writes charged to us); "
        f"ours end-to-end / kubernetes-asyncio Watch().stream = {ours / theirs:.1f} (target >= 10, "
        f"both with the server in process); "
        f"ours in-process / json.loads dict cache = "
        f"{rates['ours in-process (default)'] / rates['json.loads into a plain dict cache']:.2f}"
    )


@contextlib.contextmanager
def watch_server_in_another_process(bodies: Sequence[bytes], folder: Path) -> Iterator[str]:
    """``watch_server_child.py`` serving the pods' and the JobSets' bodies; its base URL."""
    files = []
    for index, body in enumerate(bodies):
        files.append(folder / f"body-{index}")
        files[-1].write_bytes(body)
    argv = [sys.executable, str(SERVER_CHILD), *map(str, files)]
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None
        assert child.stdin is not None
        try:
            word, port = child.stdout.readline().split()
            assert word == "port", (word, port)
            yield f"http://127.0.0.1:{port}"
        finally:
            child.stdin.close()
            child.wait(timeout=30)


async def test_watch_decode_throughput(stream_server: StreamServer, tmp_path: Path) -> None:
    pods, jobsets = pod_event_lines(COUNT), jobset_event_lines(COUNT)
    bodies = [b"\n".join(lines) + b"\n" for lines in (pods, jobsets)]
    with watch_server_in_another_process(bodies, tmp_path) as other_process:
        await measure("Pod", pods, PODS, stream_server, other_process=other_process)
        await measure("JobSet", jobsets, JOBSETS, stream_server, other_process=other_process)


def memory_per_object(lines: list[bytes], build: Callable[[bytes], Any]) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [build(line) for line in lines]
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(kept) == len(lines)
    return (after - before) / len(lines)


async def test_cache_memory_per_object() -> None:
    async with Session(base_url="http://127.0.0.1:9") as session:
        client = Client(session)
        for name, events, resource in (
            ("Pod", pod_event_lines(COUNT), PODS),
            ("JobSet", jobset_event_lines(COUNT), JOBSETS),
        ):
            lines = [line for line in events if b'"ADDED"' in line]  # one line per object
            plain = memory_per_object(lines, lambda line: json.loads(line)["object"])
            print(f"\n== memory per cached {name} ({len(lines)} objects, tracemalloc)")
            print(f"  {'plain dict with managedFields':34s} {plain / 1024:7.1f} KiB")
            for label, transform in (
                ("store, default transform", default_transform),
                ("store, strip only", strip_managed_fields),
                ("store, compact", compact),
            ):
                informer = new_informer(client, resource, transform)
                process = informer.reflector._process

                def build(line: bytes, process: Callable[[list[bytes]], None] = process) -> None:
                    process([line])

                per_object = memory_per_object(lines, build)
                assert len(informer.store) == len(lines)
                print(
                    f"  {label:34s} {per_object / 1024:7.1f} KiB   {per_object / plain:.2f}x (target <= 0.5)"
                )
                del informer
