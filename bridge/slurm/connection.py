"""The Slurm connection of the live configuration: the slurmrestd client, rebuilt when it changes.

Why an adapter between the configuration and :class:`~bridge.slurmrest.SlurmClient`: the URL, REST
version and user come from the WorkloadMixing, which may change while the bridge runs; sources and the
reconciler hold one :class:`LiveSlurm` for the life of the process, and it builds a new client when
those settings change (closing the old one only once the calls still using it are done). The JWT
comes from the Secret the configuration names (:class:`SecretToken`: read with a GET, kept 300 s or
until shortly before the JWT expires, re-read after an authentication failure) or from a file
(``--slurm-token-file``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

import structlog

from bridge.api.mixing import SlurmSpec
from bridge.api.slurm_job import SlurmJob
from bridge.api.slurm_node import SlurmNode
from bridge.api.slurm_reservation import SlurmReservation
from bridge.program import LiveMixing
from bridge.runtime.client import Client
from bridge.runtime.errors import ApiError
from bridge.slurmrest.auth import JwtAuth, TokenSource
from bridge.slurmrest.cli import ScontrolCli
from bridge.slurmrest.client import RequestObserver, SlurmClient
from bridge.slurmrest.errors import SlurmAuthError
from bridge.slurmrest.versions import JobsPage, NodesPage

__all__ = ["ConnectionSettings", "LiveSlurm", "SecretToken", "SlurmMixing"]

log = structlog.get_logger(__name__)

T = TypeVar("T")

_TOKEN_TTL = 300.0
"""Seconds a token read from the Secret is used before the Secret is read again."""
_TOKEN_MARGIN = 30.0
"""Seconds before a JWT's ``exp`` at which it is read again (a rotated token is in the Secret by then)."""


class ConnectionSettings(Protocol):
    """The program settings a connection reads (local overrides of the configuration)."""

    @property
    def slurm_url(self) -> str | None: ...

    @property
    def scontrol(self) -> str: ...

    @property
    def scontrol_prefix(self) -> tuple[str, ...]: ...


class SlurmMixing(LiveMixing):
    """The live configuration, with accessors for its Slurm part."""

    def slurm(self) -> SlurmSpec | None:
        spec = self.spec
        return spec.slurm if spec is not None else None

    def cluster(self) -> str:
        slurm = self.slurm()
        return slurm.cluster_name if slurm is not None else ""

    def partitions(self) -> list[str]:
        slurm = self.slurm()
        return list(slurm.partitions) if slurm is not None else []


class SecretToken:
    """The JWT from the Secret the live configuration names: a GET, kept until it is due again.

    A GET rather than a watch: the reference may change with the configuration, and a watch of
    Secrets would cache content the bridge does not need. The token read is kept ``ttl`` seconds
    (300), or until ``margin`` (30 s) before the ``exp`` claim of the JWT when that comes first, and
    :meth:`invalidate` drops it at once: the connection calls it after any authentication failure,
    so a rotated key or a token that expired early is read again at the next request. Concurrent
    callers share one read (a burst of reconciles after the cache ran out costs one GET, not one
    each).
    """

    def __init__(
        self,
        client: Client,
        config: SlurmMixing,
        *,
        ttl: float = _TOKEN_TTL,
        margin: float = _TOKEN_MARGIN,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self._config = config
        self._ttl = ttl
        self._margin = margin
        self._clock = clock
        self._wall_clock = wall_clock
        self._cached: tuple[tuple[str, str, str], float, str] | None = None
        """(Secret reference, monotonic time it is due again, token)."""
        self._lock = asyncio.Lock()

    def invalidate(self) -> None:
        self._cached = None

    def _fresh(self, where: tuple[str, str, str]) -> str | None:
        cached = self._cached
        if cached is not None and cached[0] == where and self._clock() < cached[1]:
            return cached[2]
        return None

    async def get(self) -> str:
        slurm = self._config.slurm()
        if slurm is None:
            raise SlurmAuthError("no configuration yet: no token Secret known")
        ref = slurm.auth.token_secret_ref
        where = (ref.namespace, ref.name, ref.key)
        token = self._fresh(where)
        if token is not None:
            return token
        async with self._lock:
            token = self._fresh(where)  # read by the caller that held the lock
            if token is not None:
                return token
            try:
                secret = await self._client.get("v1", "Secret", ref.name, namespace=ref.namespace)
            except ApiError as exc:
                raise SlurmAuthError(f"cannot read Secret {ref.namespace}/{ref.name}: {exc.reason}") from None
            raw = (secret.get("data") or {}).get(ref.key)
            if not raw:
                raise SlurmAuthError(f"Secret {ref.namespace}/{ref.name} has no key {ref.key!r}")
            token = base64.b64decode(raw).decode("utf-8", "replace").strip()
            now = self._clock()
            keep = self._ttl
            expires = jwt_expiry(token)
            if expires is not None:
                keep = min(keep, expires - self._wall_clock() - self._margin)
            # At least a few seconds, even for a token near (or past) its expiry: else every request
            # would read the Secret again, one at a time behind the lock, until it is renewed.
            self._cached = (where, now + max(keep, _MIN_KEEP), token)
            return token


_MIN_KEEP = 5.0
"""Seconds a token read from its Secret is used for at the least."""


def jwt_expiry(token: str) -> float | None:
    """The ``exp`` claim (epoch seconds) of a JWT, read without verifying it; None when there is none.

    Only to know when to read the Secret again: slurmrestd verifies the token."""
    parts = token.removeprefix("SLURM_JWT=").split(".")
    if len(parts) != 3:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload))
    except (ValueError, TypeError):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    if isinstance(exp, bool) or not isinstance(exp, int | float):
        return None
    return float(exp)


class LiveSlurm:
    """A :class:`SlurmClient` for the live configuration, rebuilt when its connection settings change.

    Implements what the sources and the reconciler call, delegating to the current client.
    """

    def __init__(
        self,
        *,
        config: SlurmMixing,
        token: TokenSource,
        settings: ConnectionSettings,
        observer: RequestObserver | None = None,
    ) -> None:
        self._config = config
        self._token = token
        self._settings = settings
        self._observer = observer
        self._client: SlurmClient | None = None
        self._identity: tuple[str, str, str] | None = None
        self._lock = asyncio.Lock()
        self._in_flight: dict[SlurmClient, int] = {}
        self._retired: set[SlurmClient] = set()

    def connection(self) -> tuple[str, str, str] | None:
        slurm = self._config.slurm()
        if slurm is None:
            return None
        return (self._settings.slurm_url or slurm.url, slurm.rest_version, slurm.auth.user_name)

    async def client(self) -> SlurmClient:
        wanted = self.connection()
        if wanted is None:
            raise SlurmAuthError("no WorkloadMixing configuration published yet")
        async with self._lock:
            if self._client is None or wanted != self._identity:
                if self._client is not None:
                    log.info("Slurm connection settings changed; reconnecting", url=wanted[0])
                    await self._retire(self._client)
                url, version, user = wanted
                auth = JwtAuth(user_name=user, token=self._token)
                scontrol = ScontrolCli(
                    auth=auth, scontrol=self._settings.scontrol, argv_prefix=self._settings.scontrol_prefix
                )
                self._client = SlurmClient(
                    url,
                    auth=auth,
                    version=None if version == "auto" else version,
                    observer=self._observer,
                    scontrol=scontrol,
                )
                self._identity = wanted
            return self._client

    async def _retire(self, client: SlurmClient) -> None:
        """An old client is closed once the calls still using it are done, never under them."""
        if self._in_flight.get(client):
            self._retired.add(client)
        else:
            await client.close()

    async def close(self) -> None:
        for client in [*self._retired, *([self._client] if self._client is not None else [])]:
            await client.close()
        self._retired.clear()
        self._client = None

    async def _call(self, operation: Callable[[SlurmClient], Awaitable[T]]) -> T:
        client = await self.client()
        self._in_flight[client] = self._in_flight.get(client, 0) + 1
        try:
            return await operation(client)
        except SlurmAuthError:
            invalidate = getattr(self._token, "invalidate", None)
            if invalidate is not None:
                invalidate()  # a rotated Secret is read again at the next request
            raise
        finally:
            left = self._in_flight.pop(client) - 1
            if left:
                self._in_flight[client] = left
            elif client in self._retired:
                self._retired.discard(client)
                await client.close()

    # JobLister / NodeLister / SlurmActions
    async def poll_jobs(self) -> JobsPage | None:
        return await self._call(lambda c: c.poll_jobs())

    async def list_jobs(self, *, update_time: int | None = None) -> JobsPage:
        return await self._call(lambda c: c.list_jobs(update_time=update_time))

    async def list_nodes(self, *, update_time: int | None = None) -> NodesPage:
        return await self._call(lambda c: c.list_nodes(update_time=update_time))

    async def get_node(self, name: str) -> SlurmNode:
        return await self._call(lambda c: c.get_node(name))

    async def get_job(self, job_id: int) -> SlurmJob:
        return await self._call(lambda c: c.get_job(job_id))

    async def list_reservations(self) -> tuple[SlurmReservation, ...]:
        return await self._call(lambda c: c.list_reservations())

    async def hold_job(
        self,
        job_id: int,
        *,
        unpin: Sequence[str] = (),
        comment: str | None = None,
        admin_comment: str | None = None,
    ) -> None:
        await self._call(
            lambda c: c.hold_job(job_id, unpin=unpin, comment=comment, admin_comment=admin_comment)
        )

    async def set_admin_comment(self, job_id: int, admin_comment: str) -> None:
        await self._call(lambda c: c.set_admin_comment(job_id, admin_comment))

    async def requeue_hold(self, job_id: int) -> None:
        await self._call(lambda c: c.requeue_hold(job_id))

    async def set_comment(self, job_id: int, comment: str) -> None:
        await self._call(lambda c: c.set_comment(job_id, comment))

    async def pin_and_release(
        self,
        job_id: int,
        *,
        nodes: Sequence[str],
        constraints: str,
        begin_time: int | None = None,
        comment: str | None = None,
        admin_comment: str | None = None,
        released: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        await self._call(
            lambda c: c.pin_and_release(
                job_id,
                nodes=nodes,
                constraints=constraints,
                begin_time=begin_time,
                comment=comment,
                admin_comment=admin_comment,
                released=released,
            )
        )

    async def drain_node(self, name: str, *, reason: str) -> None:
        await self._call(lambda c: c.drain_node(name, reason=reason))

    async def down_node(self, name: str, *, reason: str) -> None:
        await self._call(lambda c: c.down_node(name, reason=reason))

    async def resume_node(self, name: str) -> None:
        await self._call(lambda c: c.resume_node(name))

    async def delete_node(
        self, name: str, *, down_if_busy: bool = True, reason: str = "k8s-bridge: delete"
    ) -> None:
        await self._call(lambda c: c.delete_node(name, down_if_busy=down_if_busy, reason=reason))


# --- the bridge ----------------------------------------------------------------------------------
