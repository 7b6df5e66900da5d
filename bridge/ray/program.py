"""``python -m bridge.ray``: the Ray bridge as a program (and :class:`RayBridge` in-process).

The Ray bridge on the shared program shell (:mod:`bridge.program`). What it wires onto it:

- informers of RayJobs and RayClusters (all: a RayJob created ungated must be seen too), of the
  worker JobSets it made (label ``bridge.k8s-bridge.io/ray-job-uid``) and of their Workloads;
- the ``ray`` controller, which reconciles ``<namespace>/<rayjob>`` keys (reconcilers/ray.py),
  reaching each shared cluster's head through the API server's service proxy (:mod:`.dashboard`);
- the gate webhook (:mod:`.webhook`) on ``--webhook-bind-address`` with the certificate pair of
  ``--webhook-cert-dir``; without a certificate directory no webhook is served (a local run beside
  a webhook served elsewhere).

The subcommand ``explain <namespace>/<rayjob>`` prints what the bridge would make of one RayJob,
through the reconciler's own ``observe`` and ``decide``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Final, TextIO

import yaml

from bridge.admission import (
    JOB_UID_LABEL,
    JOBSET_API_VERSION,
    JOBSET_KIND,
    WORKLOAD_API_VERSION,
    WORKLOAD_KIND,
)
from bridge.api.status import Problem, Reason
from bridge.program import (
    EXIT_ERROR,
    EXIT_NOT_SERVABLE,
    EXIT_SERVABLE,
    BridgeProgram,
    ExplainContext,
    LiveMixing,
    ProgramSettings,
    Shell,
    Wiring,
    add_common_flags,
    add_run_flags,
    bind_address,
    check_common,
    common_settings,
    configure_program_logging,
    env,
    flag_help,
    program_name,
    run_explain,
    run_until_stopped,
)
from bridge.program.mappers import through_owner_jobset
from bridge.runtime.cache import IndexFunc, Store
from bridge.runtime.client import Client
from bridge.runtime.controller import Controller, Request
from bridge.runtime.handlers import Object
from bridge.runtime.informer import Informer, SharedInformerFactory
from bridge.runtime.webhook import WebhookServer
from reconcilers.ray import (
    INDEX_JOB_UID,
    INDEX_RAYCLUSTER,
    INDEX_RAYJOB_KEY,
    INDEX_RAYJOB_UID,
    Phase,
    RayReconciler,
    decide,
    jobset_rayjob_keys,
    jobset_rayjob_name_keys,
    jobset_request,
    rayjob_cluster_keys,
    workload_uid_keys,
)
from translators.ray import LABEL_RAY_JOB_UID, Translation, head_service_name

from .dashboard import RayDashboard, ServiceProxyTransport
from .metrics import ray_metrics
from .webhook import GATE_PATH, GateWebhook

__all__ = ["RAY_API_VERSION", "RayBridge", "Settings", "explain", "main", "parse_args"]

RAY_API_VERSION = "ray.io/v1"


@dataclass(frozen=True, kw_only=True)
class Settings(ProgramSettings):
    """The shell's settings and the Ray bridge's own."""

    lease_prefix: ClassVar[str] = "k8s-bridge-ray"

    webhook_bind_address: str = ":9443"
    webhook_cert_dir: str | None = None
    """Holds ``tls.crt`` and ``tls.key`` (as cert-manager and the chart mount them); None: no webhook."""
    cluster_domain: str = "cluster.local"


def _ray_flags(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--cluster-domain",
        default=env("cluster-domain", "cluster.local"),
        help=flag_help("The cluster's DNS domain, in the head address workers join", "cluster-domain"),
    )


def _run_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="ray-bridge: RayJobs in shared RayClusters get dedicated workers that Kueue admits; "
        "the job's entrypoint waits for them.",
        epilog=f"Subcommand: '{prog} explain <namespace>/<rayjob> [--config NAME]' prints the "
        "worker JobSet the bridge would create for a RayJob and what it would do now (exit status 0: "
        "servable, 2: not servable, 1: error).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_common_flags(parser)
    _ray_flags(parser)
    add_run_flags(
        parser,
        lease_default=f"{Settings.lease_prefix}-<config>",
        concurrency_help="RayJobs reconciled at once (reconciles wait on the API server, not the CPU)",
    )
    add = parser.add_argument
    add(
        "--webhook-bind-address",
        default=env("webhook-bind-address", ":9443"),
        help=flag_help("host:port of the gate webhook (HTTPS)", "webhook-bind-address"),
    )
    add(
        "--webhook-cert-dir",
        default=env("webhook-cert-dir"),
        help=flag_help(
            "Directory with tls.crt and tls.key of the webhook (re-read on change); unset: no webhook",
            "webhook-cert-dir",
        ),
    )
    return parser


def _explain_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"{prog} explain",
        description="Print the worker JobSet the bridge would create for a RayJob and why, or the reason it "
        "cannot be bridged, and what the bridge would do about it now.",
    )
    add_common_flags(parser)
    _ray_flags(parser)
    parser.add_argument("rayjob", help="<namespace>/<name> of the RayJob")
    return parser


def parse_args(argv: Sequence[str], *, prog: str | None = None) -> tuple[str, Settings, argparse.Namespace]:
    """``("run" | "explain", settings, raw namespace)``; exits with usage on bad input. ``prog``: the
    program's name in usage and help (default: from ``sys.argv[0]``, :func:`program_name`)."""
    args = list(argv)
    command = "explain" if args[:1] == ["explain"] else "run"
    name = prog if prog is not None else program_name(sys.argv[0], module="bridge.ray")
    parser = _explain_parser(name) if command == "explain" else _run_parser(name)
    ns = parser.parse_args(args[1:] if command == "explain" else args)
    run = command == "run"
    settings = Settings(
        **common_settings(ns, run=run),
        cluster_domain=ns.cluster_domain,
        **(
            {"webhook_bind_address": ns.webhook_bind_address, "webhook_cert_dir": ns.webhook_cert_dir}
            if run
            else {}
        ),
    )
    check_common(parser, settings, config_required=True)
    if run:
        try:
            bind_address(settings.webhook_bind_address)
        except ValueError as exc:
            parser.error(f"--webhook-bind-address: {exc}")
    elif "/" not in ns.rayjob:
        parser.error("the RayJob is given as <namespace>/<name>")
    return command, settings, ns


# --- the bridge ----------------------------------------------------------------------------------

_COUNT_OF_PHASE: Mapping[str, str] = {
    Phase.HELD: "held",
    Phase.QUEUED: "queued",
    Phase.ADMITTED: "admitted",
    Phase.RUNNING: "running",
}


@dataclass(frozen=True, kw_only=True)
class _Watched:
    """One kind the Ray bridge reads: what to list and watch, and the indexes the reconciler looks up."""

    api_version: str
    kind: str
    label_selector: str | None = None
    indexers: Mapping[str, IndexFunc] | None = None

    def store(self) -> Store:
        return Store(indexers=dict(self.indexers or {}))


_WATCHED: Final = {
    "rayjobs": _Watched(
        api_version=RAY_API_VERSION, kind="RayJob", indexers={INDEX_RAYCLUSTER: rayjob_cluster_keys}
    ),
    "rayclusters": _Watched(api_version=RAY_API_VERSION, kind="RayCluster"),
    "jobsets": _Watched(
        api_version=JOBSET_API_VERSION,
        kind=JOBSET_KIND,
        label_selector=LABEL_RAY_JOB_UID,
        indexers={INDEX_RAYJOB_UID: jobset_rayjob_keys, INDEX_RAYJOB_KEY: jobset_rayjob_name_keys},
    ),
    "workloads": _Watched(
        api_version=WORKLOAD_API_VERSION,
        kind=WORKLOAD_KIND,
        label_selector=JOB_UID_LABEL,
        indexers={INDEX_JOB_UID: workload_uid_keys},
    ),
}
"""Shared by the informers of a running bridge and the one-off lists of ``explain``."""


@dataclass(frozen=True, kw_only=True)
class _KubeSide:
    rayjobs: Informer
    rayclusters: Informer
    jobsets: Informer
    workloads: Informer

    @classmethod
    async def start(cls, factory: SharedInformerFactory) -> _KubeSide:
        informers = {
            name: await factory.informer(
                watched.api_version,
                watched.kind,
                label_selector=watched.label_selector,
                indexers=dict(watched.indexers) if watched.indexers else None,
            )
            for name, watched in _WATCHED.items()
        }
        return cls(**informers)


class _HeadService:
    """The head Service of a RayCluster, from its status (KubeRay's default name until it says)."""

    def __init__(self, rayclusters: Store) -> None:
        self._rayclusters = rayclusters

    def __call__(self, namespace: str, cluster: str) -> str:
        return head_service_name(self._rayclusters.get(f"{namespace}/{cluster}"), cluster=cluster)


class RayBridge(BridgeProgram):
    """The whole Ray bridge in one object: ``await run()`` until ``stop()`` (or SIGTERM)."""

    name: ClassVar[str] = "ray"
    title: ClassVar[str] = "Ray"

    def __init__(self, settings: Settings, **options: object) -> None:
        super().__init__(settings, **options)  # type: ignore[arg-type]
        self.settings: Settings = settings
        self.reconciler: RayReconciler | None = None
        self.webhook: WebhookServer | None = None

    async def wire(self, shell: Shell) -> Wiring:
        s = self.settings
        config = LiveMixing(self.live)
        metrics = ray_metrics(self.registry)
        kube = await _KubeSide.start(shell.factory)
        local_queues = await shell.factory.informer("kueue.x-k8s.io/v1beta2", "LocalQueue")
        reconciler = RayReconciler(
            client=shell.client,
            ray_jobs=RayDashboard(
                ServiceProxyTransport(shell.client, head_service=_HeadService(kube.rayclusters.store))
            ),
            config=config,
            mixing_name=s.config,
            rayjobs=kube.rayjobs.store,
            rayclusters=kube.rayclusters.store,
            jobsets=kube.jobsets.store,
            workloads=kube.workloads.store,
            recorder=shell.recorder,
            on_phases=self._report_counts,
            on_action=lambda action, result: metrics.actions.labels(action, result).inc(),
            on_latency=metrics.observe_latency,
            on_short_timeouts=self._report_short_timeouts,
            cluster_domain=s.cluster_domain,
        )
        self.reconciler = reconciler
        metrics.live.phases = reconciler.phase_counts
        metrics.live.ungated = reconciler.ungated_count
        controller = Controller(
            name="ray", reconciler=reconciler, max_concurrent_reconciles=s.max_concurrent_reconciles,
            batch_period=s.reconcile_batch_period, registry=self.registry,
        )  # fmt: skip
        _watch(controller, kube=kube)
        webhooks = []
        if s.webhook_cert_dir:
            host, port = bind_address(s.webhook_bind_address) or ("0.0.0.0", 9443)  # noqa: S104
            cert_dir = Path(s.webhook_cert_dir)
            server = WebhookServer(
                host=host,
                port=port,
                cert_file=cert_dir / "tls.crt",
                key_file=cert_dir / "tls.key",
                registry=self.registry,
            )
            gate = GateWebhook(
                config=config,
                mixing_name=s.config,
                rayclusters=kube.rayclusters.store,
                local_queues=local_queues.store,
            )
            server.register(GATE_PATH, gate.review)
            metrics.live.webhook = lambda: gate.decisions
            self.webhook = server
            webhooks.append(server)
        return Wiring(controllers=[controller], webhooks=webhooks)

    def _report_short_timeouts(self, clusters: Mapping[str, str]) -> None:
        """Heads whose start timeout a queue wait reached: ``Degraded`` on the WorkloadMixing."""
        problems = tuple(
            Problem(
                field="spec.ray.clusterSelector",
                reason=Reason.RAY_START_TIMEOUT_TOO_SHORT,
                message=f"RayCluster {cluster}: RAY_JOB_START_TIMEOUT_SECONDS of its head is shorter than "
                f"queue waits ({why})",
                blocking=False,
            )
            for cluster, why in clusters.items()
        )
        self.counts.set_problems(self.settings.config, self.name, problems)

    def _report_counts(self, phases: Mapping[str, int]) -> None:
        self.report_phases(phases, buckets=_COUNT_OF_PHASE)


def _watch(controller: Controller, *, kube: _KubeSide) -> None:
    """What reconciles a RayJob: its own changes, its JobSet's and Workload's, its RayCluster's."""

    def by_cluster(obj: Object) -> list[Request]:
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        return [Request.of(job) for job in kube.rayjobs.store.by_index(INDEX_RAYCLUSTER, key)]

    controller.watch(kube.rayjobs)
    controller.watch(kube.jobsets, map_to=jobset_request)
    controller.watch(kube.workloads, map_to=through_owner_jobset(kube.jobsets.store, jobset_request))
    controller.watch(kube.rayclusters, map_to=by_cluster)


# --- explain -------------------------------------------------------------------------------------


async def explain(settings: Settings, *, rayjob: str, out: TextIO) -> int:
    """Print what the bridge would do with the RayJob ``<namespace>/<name>``; 0, 2 or 1 as the Slurm side."""
    namespace, _, name = rayjob.partition("/")

    async def body(context: ExplainContext) -> int:
        if context.spec.ray is None or context.client is None:
            print("the WorkloadMixing has no spec.ray: Ray is not bridged", file=out)
            return EXIT_ERROR
        reconciler = await _reconciler_from_lists(context.client, context=context, namespace=namespace)
        observed = reconciler.observe(namespace, name)
        if observed.rayjob is None:
            print(f"RayJob {rayjob} does not exist", file=out)
            return EXIT_ERROR
        job = observed.rayjob
        print(
            f"RayJob {job.key}: cluster {job.cluster!a}, gate {job.gate!a}, Ray job {job.job_id!a} "
            f"{job.job_status or '(not submitted)'}",
            file=out,
        )
        decision = decide(observed)
        result = observed.translation
        if isinstance(result, Translation):
            print(f"servable: JobSet {result.namespace}/{result.name}, {result.workers} worker(s)", file=out)
            for note in result.notes:
                print(f"  why: {note}", file=out)
        elif result is not None:
            print(f"cannot be bridged ({result.code}): {result.reason}", file=out)
        print(f"the bridge now: {decision.why}", file=out)
        for action in decision.actions:
            print(f"  action: {action.kind}", file=out)
        if isinstance(result, Translation):
            print("---", file=out)
            out.write(yaml.safe_dump(result.manifest, sort_keys=False, allow_unicode=False))
            return EXIT_SERVABLE
        return EXIT_NOT_SERVABLE if result is not None else EXIT_SERVABLE

    return await run_explain(settings, mixing_file=None, body=body)


async def _reconciler_from_lists(client: Client, *, context: ExplainContext, namespace: str) -> RayReconciler:
    """The reconciler on stores filled from one list each (the namespace's), not informers."""
    stores = {name: watched.store() for name, watched in _WATCHED.items()}
    for name, watched in _WATCHED.items():
        for obj in await client.list(
            watched.api_version, watched.kind, namespace=namespace, label_selector=watched.label_selector
        ):
            stores[name].put(obj)
    return RayReconciler(
        client=client,
        ray_jobs=RayDashboard(
            ServiceProxyTransport(client, head_service=_HeadService(stores["rayclusters"]))
        ),
        config=LiveMixing(context.live),
        mixing_name=context.live.name,
        rayjobs=stores["rayjobs"],
        rayclusters=stores["rayclusters"],
        jobsets=stores["jobsets"],
        workloads=stores["workloads"],
    )


# --- main ----------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    command, settings, ns = parse_args(sys.argv[1:] if argv is None else argv)
    configure_program_logging(settings)
    if command == "explain":
        return asyncio.run(explain(settings, rayjob=ns.rayjob, out=sys.stdout))
    return run_until_stopped(RayBridge(settings))
