"""The manager: runs everything a bridge process consists of, and stops it in the right order.

One ``asyncio.TaskGroup`` owns every task (caches, controllers, webhook and HTTP servers, the lease
renewal), so nothing outlives ``run`` and any unexpected failure stops the whole process instead of
leaving it half alive. As in controller-runtime:

- caches, webhooks and servers run at once; controllers only once this replica holds the Lease
  (when leader election is configured), so only the leader ever writes;
- ``/readyz`` turns ready once every cache that can tell (``has_synced``) has synced;
- SIGTERM or SIGINT (or ``stop()``) starts a graceful shutdown, in controller-runtime's order:
  controllers (in-flight reconciles finish), then caches (no more events), then webhooks, then HTTP
  servers, all within ``graceful_shutdown_timeout``; then the lease is released so another replica
  takes over at once. A second signal cancels everything at once;
- losing the lease ends ``run`` with ``LeaderElectionLostError``: the process must exit, since another
  replica may already be acting.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterable
from typing import Protocol

import structlog

from bridge.runtime.controller import Controller
from bridge.runtime.leaderelection import LeaderElector
from bridge.runtime.probes import ProbeServer

__all__ = ["Manager", "Runnable", "ShutdownTimeoutError"]

log = structlog.get_logger(__name__)


class Runnable(Protocol):
    """Anything the manager runs: works until cancelled (informers, polled sources, servers)."""

    async def run(self) -> None: ...


class ShutdownTimeoutError(TimeoutError):
    """Some tasks did not finish within the graceful shutdown timeout and had to be cancelled."""


class Manager:
    """Owns and runs caches, controllers, webhooks and servers; see the module docstring."""

    def __init__(
        self,
        *,
        leader_election: LeaderElector | None = None,
        probes: ProbeServer | None = None,
        graceful_shutdown_timeout: float = 30.0,
        handle_signals: bool = True,
    ) -> None:
        self._elector = leader_election
        self._probes = probes
        self._timeout = graceful_shutdown_timeout
        self._handle_signals = handle_signals
        self._caches: list[Runnable] = []
        self._controllers: list[Controller] = []
        self._webhooks: list[Runnable] = []
        self._servers: list[Runnable] = [probes] if probes is not None else []
        self._stop = asyncio.Event()
        self._main: asyncio.Task[None] | None = None
        self._running = False
        if probes is not None:
            probes.add_readyz_check("caches", self.caches_synced)

    def add_cache(self, cache: Runnable) -> None:
        """An informer, informer factory or polled source; counts for ``/readyz`` if it has ``has_synced``."""
        self._caches.append(cache)

    def add_controller(self, controller: Controller) -> None:
        """Run ``controller`` while this replica leads (always, without leader election)."""
        self._controllers.append(controller)

    def add_webhook(self, server: Runnable) -> None:
        self._webhooks.append(server)

    def add_server(self, server: Runnable) -> None:
        self._servers.append(server)

    def caches_synced(self) -> bool:
        """True once every cache that reports it has synced."""
        for cache in self._caches:
            has_synced = getattr(cache, "has_synced", None)
            if has_synced is not None and not has_synced():
                return False
        return True

    def stop(self) -> None:
        """Begin a graceful shutdown (what SIGTERM does); a second call cancels everything at once."""
        if self._stop.is_set() and self._main is not None:
            log.warning("second stop request: cancelling everything")
            self._main.cancel()
        self._stop.set()

    async def run(self) -> None:
        """Run until ``stop()`` or SIGTERM (returns), or until a failure (raises it, e.g. lease lost)."""
        if self._running:
            raise RuntimeError("the manager is already running")
        self._running = True
        self._main = asyncio.current_task()
        signals = self._install_signal_handlers()
        try:
            async with asyncio.TaskGroup() as tg:
                servers = [tg.create_task(s.run(), name="http server") for s in self._servers]
                webhooks = [tg.create_task(w.run(), name="webhook server") for w in self._webhooks]
                caches = [tg.create_task(c.run(), name="cache") for c in self._caches]
                stopping = tg.create_task(self._stop.wait(), name="manager stop signal")
                hold: asyncio.Task[None] | None = None
                leading = self._elector is None
                if self._elector is not None:
                    acquire = tg.create_task(self._elector.acquire(), name="leader election")
                    await asyncio.wait({acquire, stopping}, return_when=asyncio.FIRST_COMPLETED)
                    if acquire.done():
                        leading = True
                        hold = tg.create_task(self._elector.hold(), name="lease renewal")
                    else:
                        acquire.cancel()
                controllers: list[asyncio.Task[None]] = []
                if leading:
                    controllers = [
                        tg.create_task(c.run(), name=f"controller {c.name}") for c in self._controllers
                    ]
                await stopping
                late = await self._shutdown(
                    controllers=controllers, caches=caches, webhooks=webhooks, servers=servers
                )
                if hold is not None and self._elector is not None:
                    # Every controller task has ended by now: hand the lease over.
                    hold.cancel()
                    await asyncio.wait({hold})
                    await self._elector.release()
        except BaseExceptionGroup as group:
            raise _sole_error(group) from None
        finally:
            for sig in signals:
                asyncio.get_running_loop().remove_signal_handler(sig)
            self._main = None
        if late:
            raise ShutdownTimeoutError(
                f"not stopped within the grace period of {self._timeout} s (cancelled): {', '.join(late)}"
            )
        log.info("manager stopped")

    async def _shutdown(
        self,
        *,
        controllers: list[asyncio.Task[None]],
        caches: list[asyncio.Task[None]],
        webhooks: list[asyncio.Task[None]],
        servers: list[asyncio.Task[None]],
    ) -> list[str]:
        """Stop the groups in order; return the names of tasks that had to be cancelled when late."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        late: list[str] = []
        for controller in self._controllers:
            controller.stop()
        for label, tasks, graceful in (
            ("controllers", controllers, True),
            ("caches", caches, False),
            ("webhooks", webhooks, False),
            ("HTTP servers", servers, False),
        ):
            log.info(f"stopping and waiting for {label}")
            if not graceful:
                for task in tasks:
                    task.cancel()
            pending = _not_done(tasks)
            if pending:
                _, still = await asyncio.wait(pending, timeout=max(0.0, deadline - loop.time()))
                if still:
                    late.extend(t.get_name() for t in still)
                    for task in still:
                        task.cancel()
                    await asyncio.wait(still)
        if late:
            log.error("graceful shutdown timed out; cancelled", tasks=late, timeout=self._timeout)
        return late

    def _install_signal_handlers(self) -> list[signal.Signals]:
        if not self._handle_signals:
            return []
        loop = asyncio.get_running_loop()
        installed = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, self._on_signal, sig)
            except (NotImplementedError, RuntimeError):  # not the main thread, or no signals here
                continue
            installed.append(sig)
        return installed

    def _on_signal(self, sig: signal.Signals) -> None:
        log.info("received signal, shutting down", signal=sig.name)
        self.stop()


def _not_done(tasks: Iterable[asyncio.Task[None]]) -> set[asyncio.Task[None]]:
    return {t for t in tasks if not t.done()}


def _sole_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one real error of a task group (the others are the cancellations it caused)."""
    errors = [e for e in _leaves(group) if not isinstance(e, asyncio.CancelledError)]
    if len(errors) == 1:
        return errors[0]
    return group


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for sub in error.exceptions for leaf in _leaves(sub)]
    return [error]
