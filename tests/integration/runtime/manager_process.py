"""A small bridge-like process for the leader-election integration tests: one Manager, run for real.

Why a separate process: "the leader dies without releasing its lease" can only be shown by killing a
process (SIGKILL: no ``finally``, no release), and a clean stop by what a kubelet sends (SIGTERM). So
each replica under test is this module, started with ``python manager_process.py ...``.

What it runs, as a bridge would: a ``Manager`` with leader election on a Lease; an informer on the
ConfigMaps labelled ``test=le`` in one namespace; a controller ``stamper`` whose (level-based)
reconciler writes ``data.handled-by = <identity>`` on every such ConfigMap that lacks it, so the
test can see *which* replica's controllers run; and the probe server (``/healthz``, ``/readyz``,
``/metrics``) on ``--port``. ``--watch-missing-crd`` adds an informer on a custom resource that
does not exist until the test creates its CRD: the cache cannot sync before, so ``/readyz`` must
say not ready until then.

Exit status: 0 after a graceful stop (SIGTERM), 1 when the lease was lost.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

import structlog

from bridge.runtime.backoff import BackoffSettings
from bridge.runtime.client import Client
from bridge.runtime.controller import Controller, Request, Result
from bridge.runtime.discovery import Resource
from bridge.runtime.errors import NotFound
from bridge.runtime.informer import Informer
from bridge.runtime.leaderelection import LeaderElectionConfig, LeaderElectionLostError, LeaderElector
from bridge.runtime.logging import configure_logging
from bridge.runtime.manager import Manager
from bridge.runtime.probes import ProbeServer
from bridge.runtime.reflector import ReflectorSettings
from bridge.runtime.session import Session

CONTROLLER = "stamper"
LABEL_SELECTOR = "test=le"
HANDLED_BY = "handled-by"
WIDGETS = Resource(group="k8s-bridge.test", version="v1", plural="widgets", kind="Widget", namespaced=True)
"""The custom resource of ``--watch-missing-crd`` (its CRD is created by the test)."""

SETTINGS = ReflectorSettings(backoff=BackoffSettings(initial=0.2, maximum=1.0), inactivity_timeout=30.0)

log = structlog.get_logger("manager_process")


class Stamper:
    """Marks each ConfigMap with the identity of the replica whose controller reconciled it first."""

    def __init__(self, client: Client, informer: Informer, identity: str) -> None:
        self._client = client
        self._informer = informer
        self._identity = identity

    async def reconcile(self, request: Request) -> Result:
        obj = self._informer.store.get(f"{request.namespace}/{request.name}")
        if obj is None or HANDLED_BY in (obj.get("data") or {}):
            return Result()
        try:
            await self._client.patch(
                "v1",
                "ConfigMap",
                request.name,
                {"data": {HANDLED_BY: self._identity}},
                namespace=request.namespace,
            )
        except NotFound:
            return Result()
        log.info("stamped", configmap=str(request))
        return Result()


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--lease", required=True)
    parser.add_argument("--identity", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--lease-duration", type=float, default=15.0)
    parser.add_argument("--renew-deadline", type=float, default=10.0)
    parser.add_argument("--retry-period", type=float, default=2.0)
    parser.add_argument("--watch-missing-crd", action="store_true")
    return parser.parse_args(argv)


async def run(args: argparse.Namespace) -> None:
    async with await Session.load(config_file=args.kubeconfig) as session:
        client = Client(session)
        configmaps = Informer(
            client,
            await client.resource("v1", "ConfigMap"),
            namespace=args.namespace,
            label_selector=LABEL_SELECTOR,
            settings=SETTINGS,
        )
        controller = Controller(name=CONTROLLER, reconciler=Stamper(client, configmaps, args.identity))
        controller.watch(configmaps)
        elector = LeaderElector(
            config=LeaderElectionConfig(
                name=args.lease,
                namespace=args.namespace,
                identity=args.identity,
                lease_duration=args.lease_duration,
                renew_deadline=args.renew_deadline,
                retry_period=args.retry_period,
            ),
            client=client,
        )
        manager = Manager(
            leader_election=elector,
            probes=ProbeServer(host="127.0.0.1", port=args.port),
            graceful_shutdown_timeout=10.0,
        )
        manager.add_cache(configmaps)
        if args.watch_missing_crd:
            manager.add_cache(Informer(client, WIDGETS, namespace=args.namespace, settings=SETTINGS))
        manager.add_controller(controller)
        await manager.run()


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    configure_logging(json=True, stream=sys.stderr)
    structlog.contextvars.bind_contextvars(identity=args.identity)
    try:
        asyncio.run(run(args))
    except LeaderElectionLostError:
        log.exception("leader election lost: exiting")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
