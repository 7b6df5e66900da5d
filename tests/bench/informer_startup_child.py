"""One measurement of the informer start-up bench, in a fresh process (so RSS deltas are its own).

Why a child process: resident memory only means something against a clean baseline; in the
pytest process the 10,000 creates (and earlier tests) leave freed-but-kept memory behind that the
next allocations reuse, which would make any RSS delta look too small.

``python informer_startup_child.py --kubeconfig K --namespace N --mode M`` prints one JSON object:
``seconds`` (from the start of the list to a synced cache), ``objects``, ``rss_before`` and
``rss_after`` (bytes; after imports, session and discovery, and after the sync plus a GC), and with
``--tracemalloc`` ``traced_bytes`` (retained) and ``traced_peak`` (Python allocations only, and
slower: time is not comparable then). Modes:

- ``informer``: our Informer with the default settings (streaming list when the server offers it);
- ``informer-list``: our Informer with streaming list off (paginated list, 500 per page, as client-go);
- ``client-list``: our ``Client.list`` of every page, kept in a list (raw dicts, no store);
- ``kubernetes-asyncio``: ``CoreV1Api.list_namespaced_config_map`` (typed models), kept.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import time
import tracemalloc
from typing import Any

from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

from bridge.runtime.client import Client
from bridge.runtime.informer import Informer
from bridge.runtime.logging import configure_logging
from bridge.runtime.reflector import ReflectorSettings
from bridge.runtime.session import Session

MODES = ("informer", "informer-list", "client-list", "kubernetes-asyncio")


def rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


async def measure(kubeconfig: str, namespace: str, mode: str, traced: bool) -> dict[str, Any]:
    kept: Any = None
    stats: dict[str, int] = {}
    async with await Session.load(config_file=kubeconfig) as session:
        client = Client(session)
        resource = await client.resource("v1", "ConfigMap")
        configuration = k8s_client.Configuration()
        await k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        async with k8s_client.ApiClient(configuration) as api:
            core = k8s_client.CoreV1Api(api)
            await core.list_namespaced_config_map(namespace, limit=1)  # warm: connection, TLS
            await client.get("v1", "Namespace", namespace)  # warm: our session's connection too
            gc.collect()
            rss_before = rss_bytes()
            if traced:
                tracemalloc.start()
            traced_before = tracemalloc.get_traced_memory()[0] if traced else 0
            start = time.perf_counter()
            if mode.startswith("informer"):
                settings = ReflectorSettings(streaming_list=mode == "informer")
                informer = Informer(
                    client, resource, namespace=namespace, settings=settings, resync_period=None
                )
                task = asyncio.create_task(informer.run())
                try:
                    await informer.wait_for_sync()
                    seconds = time.perf_counter() - start
                    stats = {"streaming_lists": informer.reflector.stats.streaming_lists}
                    stats["lists"] = informer.reflector.stats.lists
                finally:
                    informer.stop()
                    await task
                kept = informer
                count = len(informer.store)
            elif mode == "client-list":
                kept = await client.list("v1", "ConfigMap", namespace=namespace)
                seconds = time.perf_counter() - start
                count = len(kept)
            else:
                kept = await core.list_namespaced_config_map(namespace)
                seconds = time.perf_counter() - start
                count = len(kept.items)
            gc.collect()
            result: dict[str, Any] = {
                "mode": mode,
                "seconds": seconds,
                "objects": count,
                "rss_before": rss_before,
                "rss_after": rss_bytes(),
                **stats,
            }
            if traced:
                current, peak = tracemalloc.get_traced_memory()
                tracemalloc.stop()
                result["traced_bytes"] = current - traced_before
                result["traced_peak"] = peak - traced_before
    del kept
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument("--tracemalloc", action="store_true")
    args = parser.parse_args(argv)
    configure_logging(verbosity=-1, json=True, stream=sys.stderr)  # stdout carries the result only
    result = asyncio.run(measure(args.kubeconfig, args.namespace, args.mode, args.tracemalloc))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
