"""``python -m bridge.slurm``: the Slurm bridge as a program (and :class:`SlurmBridge` in-process).

The Slurm bridge on the shared program shell (:mod:`bridge.program`: manager, leader election,
probes, metrics, the live WorkloadMixing configuration, counts). What it wires onto it:

- a :class:`~bridge.slurm.connection.LiveSlurm` slurmrestd client for the live configuration;
- the job and node sources, which poll slurmrestd (:mod:`bridge.slurm.source`), the node source
  faster while a registration is due (:mod:`bridge.slurm.node_poll`);
- informers of the bridged jobs' JobSets, Workloads, pods and child Jobs;
- the ``slurm`` controller, which reconciles ``<cluster>/<job id>`` keys (reconcilers/slurm.py).

The subcommand ``explain <job-id>`` prints what the bridge would make of one job, through the
reconciler's own observer and ``decide``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, TextIO

import structlog
import yaml

from bridge.admission import JOB_UID_LABEL, WORKLOAD_API_VERSION, WORKLOAD_KIND
from bridge.api.slurm_job import SlurmJob
from bridge.mixing_config import ConfigSnapshot
from bridge.program import (
    EXIT_ERROR,
    EXIT_NOT_SERVABLE,
    EXIT_SERVABLE,
    BridgeProgram,
    ExplainContext,
    ProgramSettings,
    Shell,
    Wiring,
    add_common_flags,
    add_run_flags,
    check_common,
    common_settings,
    configure_program_logging,
    env,
    flag_help,
    program_name,
    run_explain,
    run_until_stopped,
    workload_lines,
)
from bridge.program.mappers import through_owner_jobset
from bridge.runtime.client import Client
from bridge.runtime.controller import Controller, Request
from bridge.runtime.handlers import Object
from bridge.runtime.informer import Informer, SharedInformerFactory
from bridge.slurmrest.auth import CallableToken, FileToken, TokenSource
from bridge.slurmrest.errors import InvalidJobId, SlurmError
from reconcilers.queue_positions import QueuePositionSource
from reconcilers.slurm import (
    INDEX_DEPENDS_ON,
    INDEX_JOB,
    INDEX_JOB_UID,
    INDEX_LOCAL_QUEUE,
    JobsWithJobSets,
    Observed,
    Phase,
    SlurmObserver,
    SlurmReconciler,
    decide,
    dependency_keys,
    jobset_job_keys,
    jobset_queue_keys,
    node_job_id,
    node_job_keys,
    pod_job_keys,
    request_for_key,
    workload_uid_keys,
)
from reconcilers.slurm_reads import (
    child_job_update_matters,
    child_job_view,
    jobset_update_matters,
    jobset_view,
    pod_update_matters,
    workload_update_matters,
    workload_view,
)
from reconcilers.slurm_reservations import ReservationCache
from reconcilers.slurm_waiting import dependency_ids
from translators.slurm import JOBSET_API_VERSION, JOBSET_KIND, LABEL_JOB_ID, Translation, job_selector

from .connection import LiveSlurm, SecretToken, SlurmMixing
from .job_reads import JobReadOnNodeChange
from .metrics import slurm_metrics
from .node_poll import NodePollOnPodStart, RegistrationLead, RegistrationSeen, due_nodes, registration_due
from .source import DUE_READ_BUDGET, SlurmJobSource, SlurmNodeSource, node_object

__all__ = ["Settings", "SlurmBridge", "explain", "main", "parse_args"]

log = structlog.get_logger(__name__)


# --- settings ------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Settings(ProgramSettings):
    """The shell's settings and the Slurm bridge's own."""

    lease_prefix: ClassVar[str] = "k8s-bridge-slurm"

    slurm_token_file: str | None = None
    slurm_url: str | None = None
    """Overrides ``spec.slurm.url`` (a local run against a port-forwarded slurmrestd)."""
    scontrol: str = "scontrol"
    scontrol_prefix: tuple[str, ...] = ()
    node_poll_interval: float = 1.0
    node_poll_fast_interval: float = 0.2
    """Node poll interval while a registration is due (0: always ``node_poll_interval``)."""
    node_poll_due_interval: float = 0.05
    """Interval of the reads of the due nodes alone (0: never narrowed, whole lists only)."""


def _slurm_flags(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--slurm-token-file",
        default=env("slurm-token-file"),
        help=flag_help(
            "Read the slurmrestd JWT from this file (re-read on change) instead of the Secret the "
            "WorkloadMixing names; for local runs",
            "slurm-token-file",
        ),
    )
    add(
        "--slurm-url",
        default=env("slurm-url"),
        help=flag_help("Use this slurmrestd URL instead of spec.slurm.url; for local runs", "slurm-url"),
    )
    add(
        "--scontrol",
        default=env("scontrol", "scontrol"),
        help=flag_help(
            "The scontrol program, for what a REST version cannot do (node drain/delete on v0.0.38, "
            "requeue-hold before v0.0.45); run with an argv list and the JWT in SLURM_JWT",
            "scontrol",
        ),
    )
    add(
        "--scontrol-prefix",
        default=env("scontrol-prefix", ""),
        help=flag_help(
            "Words put before scontrol (e.g. 'chroot /srv/slurm-24.11'), split like a shell would, "
            "never run by one; SLURM_CONF in the environment reaches scontrol",
            "scontrol-prefix",
        ),
    )


def _node_poll_flags(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--node-poll-interval",
        type=float,
        default=float(env("node-poll-interval", "1.0") or 1.0),
        help=flag_help(
            "Seconds between polls of slurmctld's node list (cheap when unchanged)", "node-poll-interval"
        ),
    )
    add(
        "--node-poll-fast-interval",
        type=float,
        default=float(env("node-poll-fast-interval", "0.2") or 0.0),
        help=flag_help(
            "Seconds between node polls while an admitted job waits for its nodes and one of its slurmd "
            "pods runs (0: always --node-poll-interval)",
            "node-poll-fast-interval",
        ),
    )
    add(
        "--node-poll-due-interval",
        type=float,
        default=float(env("node-poll-due-interval", "0.05") or 0.0),
        help=flag_help(
            "Seconds between reads of just the nodes whose registration is due (their slurmd pod runs, "
            f"not seen idle yet), at most {DUE_READ_BUDGET:g} reads a second; more due nodes are listed "
            "whole at --node-poll-fast-interval (0: whole lists only)",
            "node-poll-due-interval",
        ),
    )


def _run_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="k8s-bridge for Slurm: held Slurm jobs in bridged partitions become suspended JobSets "
        "that Kueue admits; admitted jobs run on dynamic Slurm nodes made for them alone.",
        epilog=f"Subcommand: '{prog} explain <job-id> [--config NAME | --mixing-file FILE] "
        "[--slurm-token-file F]' prints the JobSet the bridge would create for a job, and why, or why it "
        "cannot be served (exit status 0: servable, 2: not servable, 1: error).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_common_flags(parser)
    _slurm_flags(parser)
    add_run_flags(
        parser,
        lease_default=f"{Settings.lease_prefix}-<config>",
        concurrency_help="Jobs reconciled at once. Reconciles mostly wait on the API server and slurmrestd, "
        "not on the CPU: 16 made a burst of held jobs into JobSets 3x faster than 4 did, as fast as Kueue "
        "admitted; more added nothing measurable (docs/controller.md, Performance)",
    )
    _node_poll_flags(parser)
    return parser


def _explain_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"{prog} explain",
        description="Print the JobSet the bridge would create for a Slurm job and why (mapping rule, "
        "LocalQueue, priority, topology), or the reason it cannot be served, and what the bridge would "
        "do about the job now.",
    )
    add_common_flags(parser)
    _slurm_flags(parser)
    parser.add_argument("job_id", type=int, help="The Slurm job id")
    parser.add_argument("--mixing-file", help="Read the WorkloadMixing from this YAML file, not the cluster")
    return parser


def parse_args(argv: Sequence[str], *, prog: str | None = None) -> tuple[str, Settings, argparse.Namespace]:
    """``("run" | "explain", settings, raw namespace)``; exits with usage on bad input. ``prog``: the
    program's name in usage and help (default: from ``sys.argv[0]``, :func:`program_name`)."""
    args = list(argv)
    command = "explain" if args[:1] == ["explain"] else "run"
    name = prog if prog is not None else program_name(sys.argv[0], module="bridge.slurm")
    parser = _explain_parser(name) if command == "explain" else _run_parser(name)
    ns = parser.parse_args(args[1:] if command == "explain" else args)
    run = command == "run"
    settings = Settings(
        **common_settings(ns, run=run),
        slurm_token_file=ns.slurm_token_file,
        slurm_url=ns.slurm_url,
        scontrol=ns.scontrol,
        scontrol_prefix=tuple(shlex.split(ns.scontrol_prefix or "")),
        **(
            {
                "node_poll_interval": ns.node_poll_interval,
                "node_poll_fast_interval": ns.node_poll_fast_interval,
                "node_poll_due_interval": ns.node_poll_due_interval,
            }
            if run
            else {}
        ),
    )
    check_common(parser, settings, config_required=not (command == "explain" and ns.mixing_file))
    if settings.node_poll_interval <= 0:
        parser.error("--node-poll-interval must be positive")
    if settings.node_poll_fast_interval < 0:
        parser.error("--node-poll-fast-interval must not be negative")
    if settings.node_poll_due_interval < 0:
        parser.error("--node-poll-due-interval must not be negative")
    return command, settings, ns


# --- the bridge ----------------------------------------------------------------------------------

_COUNT_OF_PHASE: Mapping[str, str] = {
    Phase.HELD: "held",
    Phase.UNSERVABLE: "held",
    Phase.QUEUED: "queued",
    Phase.EVICTED: "queued",
    Phase.ADMITTED: "admitted",
    Phase.RELEASING: "admitted",
    Phase.RUNNING: "running",
}


def _token_source(settings: Settings, client: Client | None, config: SlurmMixing) -> TokenSource:
    """The JWT: from ``--slurm-token-file``, else the configuration's Secret, else ``$SLURM_JWT`` (explain
    from a file, with no cluster)."""
    if settings.slurm_token_file:
        return FileToken(settings.slurm_token_file)
    if client is not None:
        return SecretToken(client, config)
    value = os.environ.get("SLURM_JWT", "")
    return CallableToken(lambda: value)


class SlurmBridge(BridgeProgram):
    """The whole Slurm bridge in one object: ``await run()`` until ``stop()`` (or SIGTERM)."""

    name: ClassVar[str] = "slurm"
    title: ClassVar[str] = "Slurm"

    def __init__(self, settings: Settings, **options: object) -> None:
        super().__init__(settings, **options)  # type: ignore[arg-type]
        self.settings: Settings = settings
        self.reconciler: SlurmReconciler | None = None
        self.registration_lead = RegistrationLead()

    async def wire(self, shell: Shell) -> Wiring:
        s = self.settings
        config = SlurmMixing(self.live)
        metrics = slurm_metrics(self.registry)
        slurm = LiveSlurm(
            config=config,
            token=_token_source(s, shell.client, config),
            settings=s,
            observer=metrics.observe_request,
        )
        kube = await _KubeSide.start(shell.factory)
        jobs, nodes = self._sources(slurm, config=config, kube=kube)
        places = QueuePositionSource(client=shell.client, queues=lambda: _local_queues(kube.jobsets))
        metrics.live.nodes = lambda: _node_states(nodes)
        reconciler = SlurmReconciler(
            client=shell.client,
            slurm=slurm,
            config=config,
            jobs=jobs,
            jobsets=kube.jobsets.store,
            workloads=kube.workloads.store,
            pods=kube.pods.store,
            nodes=nodes.store,
            child_jobs=kube.child_jobs.store,
            reservations=ReservationCache(list_reservations=slurm.list_reservations),
            queue_positions=places,
            nodes_trigger=nodes.trigger,
            node_listings=nodes,
            metrics=metrics,
            recorder=shell.recorder,
            on_phases=self._report_counts,
        )
        self.reconciler = reconciler
        kube.pods.add_handler(
            NodePollOnPodStart(
                nodes.trigger, lambda key: key in reconciler.waiting_for_nodes, lead=self.registration_lead
            )
        )
        nodes.add_handler(JobReadOnNodeChange(jobs))
        nodes.add_handler(RegistrationSeen(self.registration_lead))

        def on_config(snapshot: ConfigSnapshot | None) -> None:
            if snapshot is not None and snapshot.spec.slurm is not None:
                jobs.interval = snapshot.spec.slurm.poll_interval_seconds
            # Every known job is decided again under the new configuration: one refused under the
            # old one (a limit, a mapping) is bridged now, though Slurm has nothing new to report
            # and the next poll answers "not modified".
            jobs.resync()
            jobs.trigger()
            nodes.trigger()

        self.live.subscribe(on_config)
        controller = Controller(
            name="slurm",
            reconciler=reconciler,
            max_concurrent_reconciles=s.max_concurrent_reconciles,
            batch_period=s.reconcile_batch_period,
            registry=self.registry,
        )
        _watch(
            controller, config=config, kube=kube, jobs=jobs, nodes=nodes, places=places, reconciler=reconciler
        )
        return Wiring(controllers=[controller], caches=[jobs, nodes, places], close=slurm.close)

    def _sources(
        self, slurm: LiveSlurm, *, config: SlurmMixing, kube: _KubeSide
    ) -> tuple[SlurmJobSource, SlurmNodeSource]:
        """The job source (bridged partitions, and jobs that have a JobSet) and the node source."""

        with_jobsets = JobsWithJobSets(kube.jobsets.store)

        def bridged() -> frozenset[int]:
            return with_jobsets.ids(config.cluster())

        slurm_spec = config.slurm()
        jobs = SlurmJobSource(
            slurm=slurm,
            cluster=config.cluster,
            partitions=config.partitions,
            bridged=bridged,
            interval=slurm_spec.poll_interval_seconds if slurm_spec is not None else 2.0,
            indexers={INDEX_DEPENDS_ON: dependency_keys},
        )
        nodes = SlurmNodeSource(
            slurm=slurm,
            keep=lambda node: node_job_id(node) is not None,
            enabled=lambda: bool(config.cluster()),
            interval=self.settings.node_poll_interval,
            fast_interval=self.settings.node_poll_fast_interval or None,
            wanted=lambda: (
                self.reconciler is not None
                and registration_due(self._waiting(), kube.pods.store, ripe=self.registration_lead.ripe)
            ),
            due=lambda: (
                due_nodes(self._waiting(), kube.pods.store, nodes.store, ripe=self.registration_lead.ripe)
                if self.reconciler is not None
                else ()
            ),
            due_interval=self.settings.node_poll_due_interval or None,
            indexers={INDEX_JOB: node_job_keys},
        )
        return jobs, nodes

    def _waiting(self) -> dict[str, Phase]:
        """The jobs waiting for their nodes (phase ``admitted``), without a look at every tracked job."""
        waiting = self.reconciler.waiting_for_nodes if self.reconciler is not None else ()
        return dict.fromkeys(waiting, Phase.ADMITTED)

    def _report_counts(self, phases: Mapping[str, int]) -> None:
        self.report_phases(phases, buckets=_COUNT_OF_PHASE)


@dataclass(frozen=True, kw_only=True)
class _KubeSide:
    """The informers of what the bridge creates for its jobs, each indexed by job."""

    jobsets: Informer
    workloads: Informer
    pods: Informer
    child_jobs: Informer
    """The JobSets' own Jobs: their completedIndexes are slurmd pods that ended with 0 and that the
    Job never replaces, known even once the pods are gone (lost nodes)."""

    @classmethod
    async def start(cls, factory: SharedInformerFactory) -> _KubeSide:
        return cls(
            jobsets=await factory.informer(
                JOBSET_API_VERSION,
                JOBSET_KIND,
                label_selector=LABEL_JOB_ID,
                indexers={INDEX_JOB: jobset_job_keys, INDEX_LOCAL_QUEUE: jobset_queue_keys},
                view=jobset_view,
            ),
            workloads=await factory.informer(
                WORKLOAD_API_VERSION,
                WORKLOAD_KIND,
                label_selector=JOB_UID_LABEL,
                indexers={INDEX_JOB_UID: workload_uid_keys},
                view=workload_view,
            ),
            pods=await factory.informer(
                "v1", "Pod", label_selector=LABEL_JOB_ID, indexers={INDEX_JOB: pod_job_keys}
            ),
            child_jobs=await factory.informer(
                "batch/v1",
                "Job",
                label_selector=LABEL_JOB_ID,
                indexers={INDEX_JOB: pod_job_keys},
                view=child_job_view,
            ),
        )


def _local_queues(jobsets: Informer) -> list[tuple[str, str]]:
    """The LocalQueues the bridge's JobSets are submitted to, as ``(namespace, name)``."""
    keys = jobsets.store.index_values(INDEX_LOCAL_QUEUE)
    return [(namespace, name) for namespace, _, name in (key.partition("/") for key in keys)]


def _node_states(nodes: SlurmNodeSource) -> dict[str, int]:
    counts: dict[str, int] = {}
    for obj in nodes.store.list():
        state = str(obj["node"].state).lower()
        counts[state] = counts.get(state, 0) + 1
    return counts


def _watch(
    controller: Controller,
    *,
    config: SlurmMixing,
    kube: _KubeSide,
    jobs: SlurmJobSource,
    nodes: SlurmNodeSource,
    places: QueuePositionSource,
    reconciler: SlurmReconciler,
) -> None:
    """What reconciles a job: its own changes and its dependencies', its nodes, its Kubernetes objects,
    its Workload's place in line."""

    def by_labels(obj: Object) -> list[Request]:
        return [request_for_key(key) for key in jobset_job_keys(obj)]

    def by_node(obj: Object) -> list[Request]:
        cluster = config.cluster()
        return [Request(cluster, key) for key in node_job_keys(obj)] if cluster else []

    def with_dependents(obj: Object) -> list[Request]:
        """A job's change reconciles it, and the jobs waiting for it (a dependency met)."""
        key = Request.of(obj)
        dependents = jobs.store.by_index(INDEX_DEPENDS_ON, key.name)
        return [key, *(Request.of(d) for d in dependents)]

    controller.watch(jobs, map_to=with_dependents)
    # A node event of a job admitted and waiting for its nodes may be its release: ahead of the
    # ordinary reconciles. Not the pod events: the release needs the node source to show the nodes,
    # and its own event then comes at that priority (a pod of a waiting job only makes the node
    # source poll sooner, NodePollOnPodStart); ranking the four or so pod events of every starting
    # job high would queue them beside the releases.
    controller.watch(nodes, map_to=by_node, priority_of=reconciler.release_priority)
    # Updates that change nothing the reconciler reads (status churn) are not reconciled.
    controller.watch(kube.jobsets, map_to=by_labels, update_matters=jobset_update_matters)
    controller.watch(kube.pods, map_to=by_labels, update_matters=pod_update_matters)
    controller.watch(kube.child_jobs, map_to=by_labels, update_matters=child_job_update_matters)
    by_workload = through_owner_jobset(kube.jobsets.store, by_labels)

    def by_place(obj: Object) -> list[Request]:
        workload = kube.workloads.store.get(f"{obj['metadata']['namespace']}/{obj['metadata']['name']}")
        return by_workload(workload) if workload is not None else []

    controller.watch(kube.workloads, map_to=by_workload, update_matters=workload_update_matters)
    controller.watch(places, map_to=by_place)


# --- explain -------------------------------------------------------------------------------------


def _describe_job(job: SlurmJob) -> str:
    return (
        f"Slurm job {job.job_id} {job.name!a}: {job.state}"
        f"{' held by ' + str(job.held_by) if job.hold else ''}, partition {job.partition!a}, "
        f"{job.node_count} node(s), user {job.user_name!a}, account {job.account!a}"
    )


async def explain(settings: Settings, *, job_id: int, mixing_file: str | None, out: TextIO) -> int:
    """Print what the bridge would do with ``job_id``; 0 when it can be served, 2 when not, 1 on error."""

    async def body(context: ExplainContext) -> int:
        if context.spec.slurm is None:
            print("the WorkloadMixing has no spec.slurm: Slurm is not bridged", file=out)
            return EXIT_ERROR
        config = SlurmMixing(context.live)
        token = _token_source(settings, context.client, config)
        slurm = LiveSlurm(config=config, token=token, settings=settings)
        try:
            return await _explain_job(
                slurm,
                client=context.client,
                config=config,
                job_id=job_id,
                cluster=context.spec.slurm.cluster_name,
                out=out,
            )
        finally:
            await slurm.close()

    return await run_explain(settings, mixing_file=mixing_file, body=body, errors=(SlurmError,))


async def _explain_job(
    slurm: LiveSlurm, *, client: Client | None, config: SlurmMixing, job_id: int, cluster: str, out: TextIO
) -> int:
    try:
        job = await slurm.get_job(job_id)
    except InvalidJobId:
        print(f"Slurm job {job_id} is not known to slurmctld (never existed, or purged)", file=out)
        return EXIT_ERROR
    print(_describe_job(job), file=out)
    observed = await _observe_for_explain(client=client, slurm=slurm, config=config, job=job, cluster=cluster)
    result = observed.translation
    assert result is not None or job.is_finished
    decision = decide(observed)
    if result is None:
        print(f"the job has ended ({job.state})", file=out)
        print(f"the bridge now: {decision.why}", file=out)
        return EXIT_NOT_SERVABLE
    if isinstance(result, Translation):
        print(f"servable: JobSet {result.namespace}/{result.name}", file=out)
        for note in result.notes:
            print(f"  why: {note}", file=out)
    else:
        print(f"cannot be served ({result.code}): {result.reason}", file=out)
        print("  the job stays held, the reason goes into its comment, an Event on the "
              "WorkloadMixing", file=out)  # fmt: skip
    if observed.workload is not None:
        for line in workload_lines(observed.workload):
            print(line, file=out)
    print(f"the bridge now: {decision.why}", file=out)
    for action in decision.actions:
        print(f"  action: {action.kind}", file=out)
    if not isinstance(result, Translation):
        return EXIT_NOT_SERVABLE
    print("---", file=out)
    out.write(yaml.safe_dump(result.manifest, sort_keys=False, allow_unicode=False))
    return EXIT_SERVABLE


async def _observe_for_explain(
    *, client: Client | None, slurm: LiveSlurm, config: SlurmMixing, job: SlurmJob, cluster: str
) -> Observed:
    """The job as the reconciler would observe it: the same :class:`SlurmObserver`, its stores filled
    from one list each (the job's JobSets, their Workloads, its pods, the nodes) instead of informers."""
    observer = SlurmObserver.with_empty_stores(config=config)
    if client is not None:
        selector = job_selector(cluster, job.job_id)
        for jobset in await client.list(JOBSET_API_VERSION, JOBSET_KIND, label_selector=selector):
            observer.jobsets.put(jobset)
            uid = jobset["metadata"].get("uid")
            if uid:
                by_uid = f"{JOB_UID_LABEL}={uid}"
                for workload in await client.list(WORKLOAD_API_VERSION, WORKLOAD_KIND, label_selector=by_uid):
                    observer.workloads.put(workload)
        for pod in await client.list("v1", "Pod", label_selector=selector):
            observer.pods.put(pod)
        for child in await client.list("batch/v1", "Job", label_selector=selector):
            observer.child_jobs.put(child)
    for node in (await slurm.list_nodes()).nodes:
        observer.nodes.put(node_object(node))
    dependees: dict[int, SlurmJob | None] = {}
    for dependee in dependency_ids(job):
        try:
            dependees[dependee] = await slurm.get_job(dependee)
        except InvalidJobId:
            dependees[dependee] = None
    reservations = None
    if job.reservation:
        reservations = {r.name: r for r in await slurm.list_reservations()}
    observed, _ = observer.observe(
        job.job_id, job, dependees=dependees if job.dependency else None, reservations=reservations
    )
    return observed


# --- main ----------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    command, settings, ns = parse_args(sys.argv[1:] if argv is None else argv)
    configure_program_logging(settings)
    if command == "explain":
        return asyncio.run(explain(settings, job_id=ns.job_id, mixing_file=ns.mixing_file, out=sys.stdout))
    return run_until_stopped(SlurmBridge(settings))
