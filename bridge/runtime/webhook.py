"""An admission webhook server: AdmissionReview v1 over TLS, certificates reloaded from disk.

The API server calls webhooks over HTTPS with a certificate that cert-manager (or the chart) rotates
by rewriting the mounted files. Restarting the server for that would drop admissions, so the files'
modification times are checked every ``reload_interval`` seconds and, when they change, a new TLS
context is built and used for every new connection (through the ``sni_callback`` hook, which OpenSSL
calls for each handshake, SNI or not). A pair that does not load (half written) keeps the old one.

Handlers are plain async functions of the review's ``request`` that return an
:class:`AdmissionResponse`; the server handles the envelope, the ``uid``, base64 JSON patches and
failures (a handler that raises answers "not allowed", code 500, never a broken HTTP reply).
Each request is counted as controller-runtime's webhook server counts it
(``controller_runtime_webhook_requests_total{webhook,code}``, the code being the review's result
code: 200 allowed, the denial's code, 500 a handler failure, 400 a body that is no AdmissionReview),
so the same alerts work.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog
from aiohttp import web
from prometheus_client import CollectorRegistry

from bridge.runtime.handlers import Object
from bridge.runtime.metrics import REGISTRY, webhook_metrics

__all__ = ["AdmissionHandler", "AdmissionResponse", "WebhookServer"]

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class AdmissionResponse:
    allowed: bool
    message: str | None = None
    code: int | None = None
    patch: list[Object] | None = None
    """JSON patch operations (mutating webhooks)."""
    warnings: tuple[str, ...] = ()
    audit_annotations: dict[str, str] = field(default_factory=dict)

    @classmethod
    def allow(cls, *, patch: list[Object] | None = None, warnings: tuple[str, ...] = ()) -> AdmissionResponse:
        return cls(allowed=True, patch=patch, warnings=warnings)

    @classmethod
    def deny(cls, message: str, *, code: int = 403) -> AdmissionResponse:
        return cls(allowed=False, message=message, code=code)

    def to_review(self, uid: str) -> Object:
        response: Object = {"uid": uid, "allowed": self.allowed}
        if self.message is not None or self.code is not None:
            status: Object = {}
            if self.code is not None:
                status["code"] = self.code
            if self.message is not None:
                status["message"] = self.message
            response["status"] = status
        if self.patch is not None:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(self.patch).encode()).decode()
        if self.warnings:
            response["warnings"] = list(self.warnings)
        if self.audit_annotations:
            response["auditAnnotations"] = dict(self.audit_annotations)
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


AdmissionHandler = Callable[[Object], Awaitable[AdmissionResponse]]
"""Called with the AdmissionReview's ``request`` (``uid``, ``kind``, ``operation``, ``object``, ...)."""


class _CertificateWatcher:
    """The current TLS context for a certificate/key pair on disk, rebuilt when the files change."""

    def __init__(self, cert_file: str | os.PathLike[str], key_file: str | os.PathLike[str]) -> None:
        self.cert_file = os.fspath(cert_file)
        self.key_file = os.fspath(key_file)
        self._stamp = self._read_stamp()
        self.current = self._build()
        self.reloads = 0

    def _read_stamp(self) -> tuple[tuple[int, int, int], ...]:
        stats = (os.stat(self.cert_file), os.stat(self.key_file))
        return tuple((s.st_mtime_ns, s.st_size, s.st_ino) for s in stats)

    def _build(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_file, self.key_file)
        return context

    def listening_context(self) -> ssl.SSLContext:
        """The context given to the listening socket: it hands each handshake to ``current``."""
        context = self._build()

        def use_current(ssl_object: ssl.SSLObject, server_name: str | None, _: ssl.SSLContext) -> None:
            ssl_object.context = self.current

        context.sni_callback = use_current
        return context

    def check(self) -> bool:
        """Reload when the files changed; True when a new context is in use."""
        try:
            stamp = self._read_stamp()
        except OSError as exc:
            log.warning("webhook certificate unreadable, keeping the current one", error=str(exc))
            return False
        if stamp == self._stamp:
            return False
        try:
            context = self._build()
        except (OSError, ssl.SSLError) as exc:
            log.warning("webhook certificate does not load yet, keeping the current one", error=str(exc))
            return False
        self._stamp = stamp
        self.current = context
        self.reloads += 1
        log.info("webhook certificate reloaded", cert_file=self.cert_file)
        return True


class WebhookServer:
    """Serves registered admission handlers on ``https://host:port/<path>``.

    ``await run()`` serves until cancelled (or :meth:`stop`); :meth:`start` / :meth:`close` for callers
    that manage the lifetime themselves. ``port=0`` picks a free port (see :attr:`port`).
    """

    def __init__(
        self,
        *,
        cert_file: str | os.PathLike[str],
        key_file: str | os.PathLike[str],
        host: str = "0.0.0.0",  # noqa: S104 - the API server reaches the pod on its IP
        port: int = 9443,
        reload_interval: float = 10.0,
        registry: CollectorRegistry = REGISTRY,
    ) -> None:
        self._metrics = webhook_metrics(registry)
        self._certs = _CertificateWatcher(cert_file, key_file)
        self._host = host
        self._port = port
        self._reload_interval = reload_interval
        self._handlers: dict[str, AdmissionHandler] = {}
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._watch_task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    def register(self, path: str, handler: AdmissionHandler) -> None:
        if self._runner is not None:
            raise RuntimeError("register handlers before the server starts")
        if not path.startswith("/"):
            raise ValueError(f"a webhook path starts with '/': {path!r}")
        self._handlers[path] = handler

    @property
    def port(self) -> int:
        """The bound port (after :meth:`start`)."""
        if self._runner is None or not self._runner.addresses:
            return self._port
        return int(self._runner.addresses[0][1])

    @property
    def reloads(self) -> int:
        return self._certs.reloads

    def check_certificates(self) -> bool:
        """Reload the certificate now if its files changed (the watch loop calls this periodically)."""
        return self._certs.check()

    async def start(self) -> None:
        app = web.Application()
        for path in self._handlers:
            app.router.add_post(path, self._serve)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self._host, self._port, ssl_context=self._certs.listening_context())
        await site.start()
        self._runner, self._site = runner, site
        self._watch_task = asyncio.get_running_loop().create_task(
            self._watch_certificates(), name="webhook certs"
        )
        log.info("webhook server listening", host=self._host, port=self.port, paths=sorted(self._handlers))

    async def close(self) -> None:
        task, self._watch_task = self._watch_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        runner, self._runner, self._site = self._runner, None, None
        if runner is not None:
            await runner.cleanup()

    async def run(self) -> None:
        await self.start()
        try:
            await self._stop.wait()
        finally:
            self._stop.clear()
            await self.close()

    def stop(self) -> None:
        self._stop.set()

    async def _watch_certificates(self) -> None:
        while True:
            await asyncio.sleep(self._reload_interval)
            self._certs.check()

    async def _serve(self, request: web.Request) -> web.Response:
        m = self._metrics
        with (
            m.webhook_latency_seconds.labels(request.path).time(),
            m.webhook_requests_in_flight.labels(request.path).track_inprogress(),
        ):
            code, response = await self._review(request)
        m.webhook_requests_total.labels(request.path, str(code)).inc()
        return response

    async def _review(self, request: web.Request) -> tuple[int, web.Response]:
        try:
            review: Any = json.loads(await request.read())
            admission = review["request"]
            uid = str(admission["uid"])
        except (ValueError, KeyError, TypeError):
            error = {"error": "expected an admission.k8s.io/v1 AdmissionReview"}
            return 400, web.json_response(error, status=400)
        handler = self._handlers[request.path]
        try:
            result = await handler(admission)
        except Exception as exc:
            log.exception("admission handler failed", path=request.path, uid=uid)
            result = AdmissionResponse(
                allowed=False, code=500, message=f"internal error: {type(exc).__name__}"
            )
        code = result.code if result.code is not None else (200 if result.allowed else 403)
        return code, web.json_response(result.to_review(uid))
