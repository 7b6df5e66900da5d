"""The program shell every bridge runs in: one manager, the live configuration, the counts board.

Why a base class with one hook: what differs between the Slurm and the Ray bridge is which sources,
informers and controllers they wire (:meth:`BridgeProgram.wire`); everything around that is the same
and is written once here:

- a client from the kubeconfig (or in-cluster), an :class:`~bridge.runtime.events.EventRecorder`
  reporting as ``k8s-bridge.io/<name>``, one shared informer factory;
- the WorkloadMixing controller (reconcilers/mixing.py), which checks the named WorkloadMixing,
  publishes it to a :class:`~bridge.mixing_config.LiveConfig` once valid and writes the counts the
  bridge reports on :attr:`BridgeProgram.counts` into its status; or, with ``--no-mixing-controller``,
  a :class:`~bridge.program.live.DirectPublisher` that publishes the resource as it is;
- a :class:`~bridge.runtime.manager.Manager` with leader election on a Lease, ``/healthz``,
  ``/readyz`` and ``/metrics``, and a graceful stop on SIGTERM or :meth:`BridgeProgram.stop`.

Both ways the e2e tests start a bridge go through this: as a subprocess they can SIGKILL
(``python -m bridge.<name> --config NAME``) and in-process (``await Program(settings).run()``).
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import structlog
from prometheus_client import CollectorRegistry

from bridge.api.mixing import API_VERSION, KIND, SourceCounts
from bridge.mixing_config import CountsBoard, MixingConfigs
from bridge.runtime.client import Client
from bridge.runtime.controller import Controller
from bridge.runtime.events import EventRecorder
from bridge.runtime.informer import SharedInformerFactory
from bridge.runtime.leaderelection import LeaderElectionConfig, LeaderElector, default_identity
from bridge.runtime.manager import Manager, Runnable
from bridge.runtime.memory import MemoryTrimmer, libc_malloc_trim
from bridge.runtime.metrics import REGISTRY
from bridge.runtime.probes import ProbeServer
from bridge.runtime.session import Session

from .live import DirectPublisher
from .settings import ProgramSettings, bind_address

__all__ = ["BridgeProgram", "Shell", "Wiring", "run_until_stopped"]

log = structlog.get_logger(__name__)


@dataclass(frozen=True, kw_only=True)
class Shell:
    """What the shell made for a bridge to wire onto."""

    client: Client
    factory: SharedInformerFactory
    recorder: EventRecorder
    identity: str
    """This replica's identity (the Lease holder, the Events' reporting instance)."""


@dataclass(kw_only=True)
class Wiring:
    """What a bridge adds to the manager."""

    controllers: Sequence[Controller] = ()
    caches: Sequence[Runnable] = ()
    """Sources that are not informers of the shared factory (polled external systems)."""
    webhooks: Sequence[Runnable] = ()
    servers: Sequence[Runnable] = ()
    close: Callable[[], Awaitable[None]] | None = field(default=None)
    """Called once the manager has stopped (close clients of external systems)."""


class BridgeProgram(abc.ABC):
    """A bridge as one object: ``await run()`` until ``stop()`` (or SIGTERM).

    ``run`` returns normally after a graceful stop and raises on a failure (e.g. the Lease lost).
    """

    name: ClassVar[str]
    """Short name: Events report as ``k8s-bridge.io/<name>``; the counts board's source name."""
    title: ClassVar[str]
    """For logs: "the <title> bridge"."""

    def __init__(
        self,
        settings: ProgramSettings,
        *,
        registry: CollectorRegistry = REGISTRY,
        handle_signals: bool = True,
    ) -> None:
        if not settings.config:
            raise ValueError("the bridge needs the name of its WorkloadMixing (settings.config)")
        self.settings = settings
        self.registry = registry
        self.handle_signals = handle_signals
        self.configs = MixingConfigs()
        self.live = self.configs.get(settings.config)
        self.counts = CountsBoard()
        self.manager: Manager | None = None
        self._stop_requested = False

    def report_phases(self, phases: Mapping[str, int], *, buckets: Mapping[str, str]) -> None:
        """Put the bridge's jobs by phase on the counts board, as the status's held/queued/admitted/running.

        ``buckets`` maps each phase that counts to one of those four; phases not in it are not counted
        (e.g. jobs finishing).
        """
        totals = {"held": 0, "queued": 0, "admitted": 0, "running": 0}
        for phase, count in phases.items():
            bucket = buckets.get(phase)
            if bucket is not None:
                totals[bucket] += count
        self.counts.set(self.settings.config, self.name, SourceCounts(**totals))

    @abc.abstractmethod
    async def wire(self, shell: Shell) -> Wiring:
        """Create the bridge's sources, informers and controllers on ``shell``."""

    def stop(self) -> None:
        """Begin a graceful stop (what SIGTERM does)."""
        self._stop_requested = True
        if self.manager is not None:
            self.manager.stop()

    async def run(self) -> None:
        session = await Session.load(config_file=self.settings.kubeconfig, registry=self.registry)
        try:
            await self._run(Client(session))
        finally:
            await session.close()

    async def _run(self, client: Client) -> None:
        s = self.settings
        identity = default_identity()
        recorder = EventRecorder(
            client, reporting_controller=f"k8s-bridge.io/{self.name}", reporting_instance=identity
        )
        factory = SharedInformerFactory(client)
        controllers = [*await self._configuration(client, factory, recorder)]
        wiring = await self.wire(Shell(client=client, factory=factory, recorder=recorder, identity=identity))
        try:
            manager = self._manager(client, identity)
            manager.add_cache(factory)
            for cache in wiring.caches:
                manager.add_cache(cache)
            for webhook in wiring.webhooks:
                manager.add_webhook(webhook)
            for server in wiring.servers:
                manager.add_server(server)
            trim = libc_malloc_trim() if s.memory_trim_interval > 0 else None
            if trim is not None:
                manager.add_server(MemoryTrimmer(interval=s.memory_trim_interval, trim=trim))
            for controller in [*controllers, *wiring.controllers]:
                manager.add_controller(controller)
            self.manager = manager
            if self._stop_requested:
                return
            log.info(
                f"starting the {self.title} bridge",
                config=s.config,
                leader_elect=s.leader_elect,
                mixing_controller=s.mixing_controller,
            )
            await manager.run()
        finally:
            if wiring.close is not None:
                await wiring.close()

    async def _configuration(
        self, client: Client, factory: SharedInformerFactory, recorder: EventRecorder
    ) -> list[Controller]:
        """Where the live configuration comes from: the mixing controller, or the resource as it is."""
        if self.settings.mixing_controller:
            from reconcilers.mixing import setup_mixing_controller  # noqa: PLC0415 - optional wiring

            return [
                await setup_mixing_controller(
                    client=client,
                    factory=factory,
                    configs=self.configs,
                    recorder=recorder,
                    counts=self.counts,
                    registry=self.registry,
                    name=self.settings.config,
                )
            ]
        mixings = await factory.informer(
            API_VERSION, KIND, field_selector=f"metadata.name={self.settings.config}"
        )
        mixings.add_handler(DirectPublisher(self.live))
        return []

    def _manager(self, client: Client, identity: str) -> Manager:
        s = self.settings
        elector = None
        if s.leader_elect:
            elector = LeaderElector(
                config=LeaderElectionConfig(
                    name=s.lease_name, namespace=s.leader_election_namespace, identity=identity
                ),
                client=client,
                registry=self.registry,
            )
        manager = Manager(
            leader_election=elector,
            probes=self._probe_server(s.health_probe_bind_address),
            graceful_shutdown_timeout=s.graceful_shutdown_timeout,
            handle_signals=self.handle_signals,
        )
        if s.metrics_bind_address != s.health_probe_bind_address:
            metrics_server = self._probe_server(s.metrics_bind_address)
            if metrics_server is not None:
                manager.add_server(metrics_server)
        return manager

    def _probe_server(self, address: str) -> ProbeServer | None:
        bound = bind_address(address)
        if bound is None:
            return None
        return ProbeServer(host=bound[0], port=bound[1], registry=self.registry)


def run_until_stopped(program: BridgeProgram) -> int:
    """Run ``program`` on a fresh event loop; the process exit status (130 after Ctrl-C)."""
    try:
        asyncio.run(program.run())
    except KeyboardInterrupt:
        return 130
    return 0
