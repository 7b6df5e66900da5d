"""One HTTP session to one API server, configured the way kubectl would be.

kubernetes-asyncio knows every way of finding and authenticating to a cluster (kubeconfig with
tokens, client certificates and exec plugins; the in-cluster service account) but its generated
clients decode every answer into models, which is far too slow for watches. So we borrow only its
configuration: load it, read host, CA, client certificate and token from its ``Configuration``, and
drive one plain ``aiohttp.ClientSession`` ourselves. Tokens are refreshed through the same hooks
kubernetes-asyncio uses (the in-cluster token file is re-read; an exec plugin runs again when its
credential expires or the server answers 401). Credentials never appear in logs or reprs. Every
request is counted under client-go's ``rest_client_*`` names (by code, method and the server's
host), so API call rates and errors show on the same dashboards as a Go controller's.
"""

from __future__ import annotations

import os
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import structlog
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client import Configuration
from prometheus_client import CollectorRegistry

from bridge.runtime.metrics import REGISTRY, rest_client_metrics

__all__ = ["DEFAULT_TIMEOUT", "Session"]

log = structlog.get_logger(__name__)

DEFAULT_TIMEOUT = aiohttp.ClientTimeout(total=60, sock_connect=10)
"""For ordinary requests. Watches pass their own timeout (no total; an inactivity timeout instead)."""


class Session:
    """An ``aiohttp.ClientSession`` bound to one API server's base URL and credentials.

    Build it with :meth:`load` (kubeconfig or in-cluster), :meth:`from_configuration`, or directly
    (tests: a plain ``http://127.0.0.1:port`` URL, no credentials). Close it with :meth:`close` or use
    it as an async context manager.
    """

    def __init__(
        self,
        *,
        base_url: str,
        ssl_context: ssl.SSLContext | None = None,
        configuration: Configuration | None = None,
        loader: Any = None,
        connection_limit: int = 0,
        registry: CollectorRegistry = REGISTRY,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._metrics = rest_client_metrics(registry)
        self._host = urlsplit(self.base_url).netloc
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        self._configuration = configuration
        self._loader = loader
        self._server_hostname: str | None = getattr(configuration, "tls_server_name", None) or None
        self._proxy: str | None = getattr(configuration, "proxy", None) or None
        # Watches hold one connection each for minutes: no pool limit by default.
        self._connector = aiohttp.TCPConnector(limit=connection_limit, ssl=self._ssl)
        self.http = aiohttp.ClientSession(connector=self._connector, timeout=DEFAULT_TIMEOUT)

    def __repr__(self) -> str:
        return f"Session(base_url={self.base_url!r})"

    # --- construction -----------------------------------------------------------------------------

    @classmethod
    async def load(
        cls,
        *,
        config_file: str | os.PathLike[str] | None = None,
        context: str | None = None,
        registry: CollectorRegistry = REGISTRY,
    ) -> Session:
        """kubeconfig when one is given or found (``$KUBECONFIG``, ``~/.kube/config``), else in-cluster."""
        configuration = Configuration()
        loader: Any = None
        kubeconfig = config_file or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or None
        default = Path.home() / ".kube" / "config"
        if kubeconfig is None and "KUBERNETES_SERVICE_HOST" in os.environ:
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            loader = await k8s_config.load_kube_config(
                config_file=str(kubeconfig or default),
                context=context,
                client_configuration=configuration,
                persist_config=False,
            )
        return cls.from_configuration(configuration, loader=loader, registry=registry)

    @classmethod
    def from_configuration(
        cls, configuration: Configuration, *, loader: Any = None, registry: CollectorRegistry = REGISTRY
    ) -> Session:
        """Build from a loaded kubernetes-asyncio ``Configuration`` (and its kubeconfig loader, if any)."""
        host = str(configuration.host)
        ssl_context = ssl_context_from(configuration) if host.startswith("https:") else None
        return cls(
            base_url=host,
            ssl_context=ssl_context,
            configuration=configuration,
            loader=loader,
            registry=registry,
        )

    # --- credentials ------------------------------------------------------------------------------

    async def auth_headers(self) -> dict[str, str]:
        """The ``Authorization`` header for the next request, refreshing an expiring token first."""
        cfg = self._configuration
        if cfg is None:
            return {}
        loader = self._loader
        if loader is not None and getattr(loader, "exec_plugin_expiry", None) is not None:
            # kubernetes-asyncio's exec loader returns at once while the credential is still valid.
            await loader.load_from_exec_plugin()
            if getattr(loader, "token", None):
                cfg.api_key["BearerToken"] = loader.token
        if "BearerToken" in cfg.api_key or cfg.refresh_api_key_hook is not None:
            # Runs the refresh hook (in-cluster: re-reads the projected token file when due).
            token = await cfg.get_api_key_with_prefix("BearerToken")
            if token:
                return {"Authorization": token if " " in token else f"Bearer {token}"}
        if cfg.username or cfg.password:
            basic: str = cfg.get_basic_auth_token()
            return {"Authorization": basic}
        return {}

    async def refresh_credentials(self) -> bool:
        """Reload credentials after a 401; True when there was anything to reload."""
        loader = self._loader
        cfg = self._configuration
        if cfg is None:
            return False
        if loader is not None:
            if hasattr(loader, "exec_plugin_expiry"):
                del loader.exec_plugin_expiry
            await loader.load_and_set(cfg)
            if str(cfg.host).startswith("https:"):
                self._ssl = ssl_context_from(cfg)
            log.info("credentials reloaded", base_url=self.base_url)
            return True
        return cfg.refresh_api_key_hook is not None

    # --- requests ---------------------------------------------------------------------------------

    @asynccontextmanager
    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: bytes | None = None,
        content_type: str | None = None,
        client_timeout: aiohttp.ClientTimeout | None = None,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """Send one request to ``base_url + path``; the response is released on exit.

        A 401 is retried once after reloading credentials; any other status is the caller's to read.
        """
        url = self.base_url + path
        for attempt in range(2):
            headers = await self.auth_headers()
            headers["Accept"] = "application/json"
            if content_type is not None:
                headers["Content-Type"] = content_type
            kwargs: dict[str, Any] = {}
            if self._server_hostname:
                kwargs["server_hostname"] = self._server_hostname
            if self._proxy:
                kwargs["proxy"] = self._proxy
            started = time.perf_counter()
            try:
                response = await self.http.request(
                    method,
                    url,
                    params=params,
                    data=body,
                    headers=headers,
                    ssl=self._ssl,
                    timeout=client_timeout if client_timeout is not None else DEFAULT_TIMEOUT,
                    **kwargs,
                )
            except (aiohttp.ClientError, TimeoutError):
                self._observe(method, "<error>", started)
                raise
            self._observe(method, str(response.status), started)
            if response.status == 401 and attempt == 0 and await self.refresh_credentials():
                response.release()
                continue
            try:
                yield response
            finally:
                response.release()
            return

    def _observe(self, method: str, code: str, started: float) -> None:
        seconds = time.perf_counter() - started
        self._metrics.observe(method=method, host=self._host, code=code, seconds=seconds)

    async def close(self) -> None:
        await self.http.close()

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


def ssl_context_from(configuration: Configuration) -> ssl.SSLContext:
    """The TLS context kubernetes-asyncio's own REST layer would build from ``configuration``."""
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, keyfile=configuration.key_file)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if getattr(configuration, "disable_strict_ssl_verification", False):
        context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return context
