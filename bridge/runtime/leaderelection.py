"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's ``leaderelection`` does it.

Several replicas of a bridge may run; only the leader may reconcile, or two of them would release
the same Slurm job twice. The Lease is a record (holder, duration, renew time) updated with
optimistic concurrency (its ``resourceVersion``): whoever writes it first wins a round.

As in client-go, expiry is judged on the *local monotonic clock*, from when this process last saw
the record change, never by comparing the wall-clock times written in it, so clock skew between
machines does not matter. The leader renews every ``retry_period``; if it cannot renew within
``renew_deadline`` it must stop (``hold`` raises ``LeaderElectionLostError``) before the others may
take over (``lease_duration``). There is no fencing: a leader that is paused longer than the
lease may still act; keep ``renew_deadline`` well below ``lease_duration``.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import structlog
from prometheus_client import CollectorRegistry

from bridge.runtime.errors import NotFound
from bridge.runtime.handlers import Object
from bridge.runtime.metrics import REGISTRY, runtime_metrics
from bridge.runtime.ratelimit import Clock

__all__ = [
    "LeaderElectionConfig",
    "LeaderElectionLostError",
    "LeaderElector",
    "LeaseClient",
    "default_identity",
]

log = structlog.get_logger(__name__)

JITTER_FACTOR = 1.2
"""client-go's jitter between acquire attempts, and the bound ``renew_deadline > 1.2 x retry_period``."""

_LEASE_API_VERSION = "coordination.k8s.io/v1"


class LeaderElectionLostError(Exception):
    """The lease could not be renewed in time: another replica may lead now, so this one must stop."""


class LeaseClient(Protocol):
    """What leader election needs of the API client (``bridge.runtime.client.Client`` fits).

    Failures raise ``bridge.runtime.errors``: ``NotFound`` from ``get``, ``AlreadyExists`` from
    ``create``, ``Conflict`` from ``update`` when the resourceVersion is stale.
    """

    async def get(
        self, api_version: str, kind: str, name: str, *, namespace: str | None = None
    ) -> Object: ...

    async def create(self, obj: Object) -> Object: ...

    async def update(self, obj: Object) -> Object: ...


def default_identity() -> str:
    """``<hostname>_<uuid>`` as controller-runtime builds it: unique even for two replicas on one host."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4()}"


@dataclass(frozen=True, kw_only=True)
class LeaderElectionConfig:
    """Which Lease, who we are, and client-go's timing (15 s / 10 s / 2 s by default)."""

    name: str
    namespace: str
    identity: str = field(default_factory=default_identity)
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not self.name or not self.namespace or not self.identity:
            raise ValueError("leader election needs a lease name, a namespace and an identity")
        if min(self.lease_duration, self.renew_deadline, self.retry_period) <= 0:
            raise ValueError("lease_duration, renew_deadline and retry_period must be positive")
        if self.lease_duration <= self.renew_deadline:
            raise ValueError("lease_duration must be greater than renew_deadline")
        if self.renew_deadline <= JITTER_FACTOR * self.retry_period:
            raise ValueError(f"renew_deadline must be greater than {JITTER_FACTOR} x retry_period")


def _micro_time(now: datetime) -> str:
    """A Kubernetes ``MicroTime``: RFC 3339 in UTC with microseconds."""
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Acquires, holds and releases one Lease for ``config.identity``.

    ``await acquire()`` returns once this process leads; ``await hold()`` renews until cancelled and
    raises ``LeaderElectionLostError`` when a renewal misses the deadline; ``await release()`` hands the
    lease over at once (holder cleared, duration 1 s) on a clean stop.
    """

    def __init__(
        self,
        *,
        config: LeaderElectionConfig,
        client: LeaseClient,
        clock: Clock = time.monotonic,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        registry: CollectorRegistry = REGISTRY,
    ) -> None:
        self.config = config
        self._client = client
        self._clock = clock
        self._wall_clock = wall_clock
        self._lease: Object | None = None  # as last read or written: carries the resourceVersion
        self._observed: dict[str, Any] = {}  # the lease's spec as last seen to change
        self._observed_at = 0.0  # when (local monotonic clock) it was last seen to change
        self._gauge = runtime_metrics(registry).leader_election_master_status.labels(config.name)
        self._gauge.set(0)
        self._log = log.bind(lease=f"{config.namespace}/{config.name}", identity=config.identity)

    @property
    def is_leader(self) -> bool:
        """True while the last record seen or written names this process as holder."""
        return self._observed.get("holderIdentity") == self.config.identity

    @property
    def holder(self) -> str | None:
        """The holder named by the last record seen (``None`` when unknown or released)."""
        return self._observed.get("holderIdentity") or None

    def _lease_valid(self, now: float) -> bool:
        seconds = self._observed.get("leaseDurationSeconds") or 0
        return bool(self._observed) and self._observed_at + float(seconds) > now

    def _observe(self, spec: dict[str, Any]) -> None:
        self._observed = spec
        self._observed_at = self._clock()

    async def try_acquire_or_renew(self) -> bool:
        """One round of client-go's ``tryAcquireOrRenew``: True if this process holds the lease now."""
        cfg = self.config
        stamp = _micro_time(self._wall_clock())
        record: dict[str, Any] = {
            "holderIdentity": cfg.identity,
            "leaseDurationSeconds": max(1, math.ceil(cfg.lease_duration)),
            "acquireTime": stamp,
            "renewTime": stamp,
            "leaseTransitions": 0,
        }
        # 1. The fast path of a leader whose lease is still valid: update what it last wrote.
        if self.is_leader and self._lease is not None and self._lease_valid(self._clock()):
            record["acquireTime"] = self._observed.get("acquireTime", stamp)
            record["leaseTransitions"] = self._observed.get("leaseTransitions", 0)
            try:
                self._lease = await self._client.update({**self._lease, "spec": record})
            except Exception as exc:
                self._log.info("optimistic lease renewal failed, reading the lease", error=str(exc))
            else:
                self._observe(record)
                return True
        # 2. Read the lease, or create it.
        try:
            lease = await self._client.get(_LEASE_API_VERSION, "Lease", cfg.name, namespace=cfg.namespace)
        except NotFound:
            try:
                self._lease = await self._client.create(
                    {
                        "apiVersion": _LEASE_API_VERSION,
                        "kind": "Lease",
                        "metadata": {"name": cfg.name, "namespace": cfg.namespace},
                        "spec": record,
                    }
                )
            except Exception as exc:
                self._log.info("creating the lease failed", error=str(exc))
                return False
            self._observe(record)
            return True
        except Exception as exc:
            self._log.info("reading the lease failed", error=str(exc))
            return False
        # 3. Someone holds it: is their lease still valid (judged from when we saw it change)?
        self._lease = lease
        spec = dict(lease.get("spec") or {})
        if spec != self._observed:
            self._observe(spec)
        if spec.get("holderIdentity") and self._lease_valid(self._clock()) and not self.is_leader:
            return False
        # 4. Take it over, or renew it.
        if self.is_leader:
            record["acquireTime"] = spec.get("acquireTime", stamp)
            record["leaseTransitions"] = spec.get("leaseTransitions", 0)
        else:
            record["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        try:
            self._lease = await self._client.update({**lease, "spec": record})
        except Exception as exc:
            self._log.info("updating the lease failed", error=str(exc))
            return False
        self._observe(record)
        return True

    async def _attempt(self) -> bool:
        try:
            async with asyncio.timeout(self.config.renew_deadline):
                return await self.try_acquire_or_renew()
        except TimeoutError:
            self._log.info("lease request timed out")
            return False

    async def acquire(self) -> None:
        """Try every ``retry_period`` (jittered, as client-go) until this process leads."""
        self._log.info("attempting to acquire leader lease")
        while not await self._attempt():
            if self.holder:
                self._log.debug("lease is held by another", holder=self.holder)
            period = self.config.retry_period
            await asyncio.sleep(period + random.random() * JITTER_FACTOR * period)  # noqa: S311
        self._gauge.set(1)
        self._log.info("successfully acquired lease")

    async def hold(self) -> None:
        """Renew every ``retry_period`` until cancelled; raise ``LeaderElectionLostError`` on a miss."""
        cfg = self.config
        while True:
            await asyncio.sleep(cfg.retry_period)
            try:
                async with asyncio.timeout(cfg.renew_deadline):
                    while True:
                        if await self.try_acquire_or_renew():
                            break
                        await asyncio.sleep(cfg.retry_period)
            except TimeoutError:
                self._gauge.set(0)
                self._log.error("failed to renew lease: leader election lost")
                raise LeaderElectionLostError(
                    f"lease {cfg.namespace}/{cfg.name} not renewed within {cfg.renew_deadline} s"
                ) from None

    async def release(self) -> bool:
        """Give the lease up now (holder cleared, duration 1 s) so another replica takes over at once."""
        if not self.is_leader or self._lease is None:
            return True
        stamp = _micro_time(self._wall_clock())
        record = {
            "holderIdentity": "",
            "leaseDurationSeconds": 1,
            "acquireTime": stamp,
            "renewTime": stamp,
            "leaseTransitions": self._observed.get("leaseTransitions", 0),
        }
        try:
            async with asyncio.timeout(self.config.renew_deadline):
                self._lease = await self._client.update({**self._lease, "spec": record})
        except Exception as exc:
            self._log.error("failed to release lease", error=str(exc))
            return False
        finally:
            self._gauge.set(0)
        self._observe(record)
        self._log.info("released lease")
        return True
