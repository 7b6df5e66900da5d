"""A watch server in a process of its own, for the decode bench's end-to-end figure.

Why a child process: the informer's end-to-end rate is what it absorbs from a stream; an API server
is another process, and one in the benchmark's own event loop would charge its writes to the
informer. ``python watch_server_child.py PODS_FILE JOBSETS_FILE`` serves each file's bytes, written
once per request with chunked transfer encoding as kube-apiserver writes a watch, at the pods and
the JobSets watch paths of namespace ``team-a``; prints ``port <n>`` when it listens, and stops when
its standard input closes.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web


async def serve(pods: bytes, jobsets: bytes) -> None:
    def handler(body: bytes) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def watch(request: web.Request) -> web.StreamResponse:
            response = web.StreamResponse(headers={"Content-Type": "application/json"})
            response.enable_chunked_encoding()
            await response.prepare(request)
            await response.write(body)
            await response.write_eof()
            return response

        return watch

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/team-a/pods", handler(pods))
    app.router.add_get("/apis/jobset.x-k8s.io/v1alpha2/namespaces/team-a/jobsets", handler(jobsets))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(f"port {runner.addresses[0][1]}", flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)  # until the parent closes our stdin
    await runner.cleanup()


def main() -> None:
    pods, jobsets = (Path(name).read_bytes() for name in sys.argv[1:3])
    asyncio.run(serve(pods, jobsets))


if __name__ == "__main__":
    main()
