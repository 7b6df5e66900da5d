"""One small HTTP server for the kubelet and Prometheus: ``/healthz``, ``/readyz``, ``/metrics``.

controller-runtime serves probes and metrics on two ports; one is enough here and is one less thing
to configure in the chart. Checks are pluggable (name -> callable returning truth, sync or async),
answered like Kubernetes' own ``healthz``: ``200 ok``, or ``500`` listing ``[-]name failed``;
``?verbose`` lists every check. ``/readyz`` is typically given a "caches synced" check by the
manager. ``/metrics`` renders the project registry (``bridge.runtime.metrics.REGISTRY``).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from bridge.runtime.metrics import REGISTRY

__all__ = ["Check", "ProbeServer"]

log = structlog.get_logger(__name__)

Check = Callable[[], bool | Awaitable[bool]]
"""A health or readiness check: truthy when fine; an exception counts as a failure."""


class ProbeServer:
    """Serves the probes and metrics on ``host:port`` (``port=0`` picks a free one; see ``port``)."""

    def __init__(
        self,
        *,
        host: str = "0.0.0.0",  # noqa: S104 - a probe server must be reachable from the kubelet
        port: int = 8081,
        registry: CollectorRegistry = REGISTRY,
    ) -> None:
        self._host = host
        self._port = port
        self._registry = registry
        self._healthz: dict[str, Check] = {"ping": lambda: True}
        self._readyz: dict[str, Check] = {"ping": lambda: True}
        self._runner: web.AppRunner | None = None
        self._bound_port: int | None = None

    def add_healthz_check(self, name: str, check: Check) -> None:
        self._healthz[name] = check

    def add_readyz_check(self, name: str, check: Check) -> None:
        self._readyz[name] = check

    @property
    def port(self) -> int:
        """The port actually bound (after ``start``)."""
        if self._bound_port is None:
            raise RuntimeError("the probe server is not started")
        return self._bound_port

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/healthz", self._handler(self._healthz))
        app.router.add_get("/readyz", self._handler(self._readyz))
        app.router.add_get("/metrics", self._metrics)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self._host, self._port)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self._bound_port = int(runner.addresses[0][1])
        log.info("serving probes and metrics", host=self._host, port=self._bound_port)

    async def run(self) -> None:
        """Serve until cancelled (how the manager runs it), then stop."""
        await self.start()
        try:
            await asyncio.get_running_loop().create_future()
        finally:
            await self.stop()

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    def _handler(self, checks: dict[str, Check]) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(request: web.Request) -> web.Response:
            lines: list[str] = []
            failed = False
            for name, check in list(checks.items()):
                try:
                    outcome = check()
                    if inspect.isawaitable(outcome):
                        outcome = await outcome
                    ok = bool(outcome)
                except Exception as exc:
                    ok = False
                    log.debug("check raised", check=name, error=str(exc))
                failed |= not ok
                lines.append(f"[+]{name} ok" if ok else f"[-]{name} failed")
            if "verbose" in request.query or failed:
                status = "failed" if failed else "passed"
                text = "\n".join([*lines, f"{request.path[1:]} check {status}", ""])
            else:
                text = "ok"
            return web.Response(text=text, status=500 if failed else 200)

        return handle

    async def _metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(self._registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
