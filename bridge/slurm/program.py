"""``python -m bridge.slurm``: the Slurm bridge as a program (and :class:`SlurmBridge` in-process).

Why a class and a thin ``main``: the e2e tests start the bridge both ways, as a subprocess they can
SIGKILL at any step (``python -m bridge.slurm --kubeconfig K --config NAME``) and in-process
(``await SlurmBridge(settings).run()`` / ``stop()``); both go through the same wiring.

The wiring, in one manager (leader election, probes, metrics, graceful shutdown):

- the WorkloadMixing controller (reconcilers/mixing.py) checks the named WorkloadMixing and publishes
  it to a :class:`~bridge.mixing_config.LiveConfig` once valid; the Slurm side reads only that last
  good configuration (``--no-mixing-controller``: publish the resource as it is, unchecked, for a
  process that runs beside another that owns the status);
- the slurmrestd client is built from that configuration and rebuilt when its URL, REST version or
  user change; the JWT comes from the Secret it names (read with a GET, cached 15 s, re-read after
  an authentication failure) or from ``--slurm-token-file``;
- the job and node sources poll slurmrestd; informers watch JobSets, Workloads and pods of bridged
  jobs; the ``slurm`` controller reconciles ``<cluster>/<job id>`` keys (reconcilers/slurm.py).

Flags follow controller-runtime's names; each has an environment variable ``K8S_BRIDGE_<FLAG>``
(the flag wins). The subcommand ``explain <job-id>`` prints what the bridge would make of one job.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import shlex
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO, TypeVar

import structlog
import yaml
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from bridge.admission import (
    JOB_UID_LABEL,
    WORKLOAD_API_VERSION,
    WORKLOAD_KIND,
)
from bridge.api.mixing import API_VERSION, KIND, SlurmSpec, SourceCounts, WorkloadMixing, WorkloadMixingSpec
from bridge.api.slurm_job import SlurmJob
from bridge.mixing_config import ConfigSnapshot, CountsBoard, LiveConfig, MixingConfigs
from bridge.runtime.cache import Store
from bridge.runtime.client import Client
from bridge.runtime.controller import Controller, Request
from bridge.runtime.errors import ApiError
from bridge.runtime.events import EventRecorder
from bridge.runtime.handlers import Object
from bridge.runtime.informer import SharedInformerFactory
from bridge.runtime.leaderelection import LeaderElectionConfig, LeaderElector, default_identity
from bridge.runtime.logging import configure_logging
from bridge.runtime.manager import Manager
from bridge.runtime.metrics import REGISTRY
from bridge.runtime.probes import ProbeServer
from bridge.runtime.session import Session
from reconcilers.slurm import (
    INDEX_DEPENDS_ON,
    INDEX_JOB,
    INDEX_JOB_UID,
    Observed,
    Phase,
    PodsView,
    SlurmObserver,
    SlurmReconciler,
    decide,
    dependency_keys,
    jobset_job_keys,
    node_job_id,
    node_job_keys,
    pod_job_keys,
    request_for_key,
    workload_uid_keys,
)
from reconcilers.slurm_waiting import dependency_ids
from translators.slurm import (
    JOBSET_API_VERSION,
    JOBSET_KIND,
    LABEL_JOB_ID,
    Translation,
    job_selector,
)

from .auth import CallableToken, FileToken, JwtAuth, TokenSource
from .cli import ScontrolCli
from .client import RequestObserver, SlurmClient
from .errors import InvalidJobId, SlurmAuthError, SlurmError
from .metrics import slurm_metrics
from .source import SlurmJobSource, SlurmNodeSource, node_object
from .versions import JobsPage, NodesPage

__all__ = [
    "ENV_PREFIX",
    "DirectPublisher",
    "LiveMixing",
    "LiveSlurm",
    "SecretToken",
    "Settings",
    "SlurmBridge",
    "bind_address",
    "explain",
    "main",
    "parse_args",
]

log = structlog.get_logger(__name__)

T = TypeVar("T")

ENV_PREFIX = "K8S_BRIDGE_"
_TOKEN_TTL = 15.0
_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


# --- settings ------------------------------------------------------------------------------------


def _default_namespace() -> str:
    try:
        return _NAMESPACE_FILE.read_text().strip() or "default"
    except OSError:
        return os.environ.get("POD_NAMESPACE") or "default"


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Everything the program is told on its command line (or environment)."""

    config: str
    """Name of the WorkloadMixing to run."""
    kubeconfig: str | None = None
    leader_elect: bool = False
    leader_election_namespace: str = field(default_factory=_default_namespace)
    leader_election_id: str = ""
    """Lease name; empty: ``k8s-bridge-slurm-<config>``."""
    metrics_bind_address: str = ":8080"
    health_probe_bind_address: str = ":8081"
    log_level: str = "info"
    log_format: str = "auto"
    verbose: int = 0
    """``-v`` flags: 1 is debug (as ``--log-level=debug``), 2 also logs the HTTP client libraries."""
    max_concurrent_reconciles: int = 16
    """Reconciles wait on slurmrestd and the API server, not the CPU (docs/controller.md, Performance)."""
    slurm_token_file: str | None = None
    slurm_url: str | None = None
    """Overrides ``spec.slurm.url`` (a local run against a port-forwarded slurmrestd)."""
    scontrol: str = "scontrol"
    scontrol_prefix: tuple[str, ...] = ()
    node_poll_interval: float = 1.0
    node_poll_fast_interval: float = 0.2
    """Node poll interval while a registration is due (0: always ``node_poll_interval``)."""
    graceful_shutdown_timeout: float = 30.0
    mixing_controller: bool = True

    @property
    def lease_name(self) -> str:
        return self.leader_election_id or f"k8s-bridge-slurm-{self.config}"


_LEVELS = {"debug": 1, "info": 0, "warning": -1, "error": -1}


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(ENV_PREFIX + name.upper().replace("-", "_"), default)


def _env_bool(name: str, default: bool) -> bool:
    value = _env(name)
    if value is None:
        return default
    return value.strip().lower() in ("1", "true", "yes", "on")


def _help(text: str, flag: str) -> str:
    return f"{text} [env {ENV_PREFIX}{flag.upper().replace('-', '_')}]"


def _common(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--kubeconfig",
        default=_env("kubeconfig"),
        help=_help(
            "Path to a kubeconfig; default: $KUBECONFIG, ~/.kube/config, else in-cluster", "kubeconfig"
        ),
    )
    add(
        "--config",
        default=_env("config"),
        help=_help("Name of the WorkloadMixing to run (required)", "config"),
    )
    add(
        "--log-level",
        choices=sorted(_LEVELS),
        default=_env("log-level", "info"),
        help=_help("Log level (zap-log-level); -v is debug", "log-level"),
    )
    add("-v", "--verbose", action="count", default=0, help="More logs (-vv also logs HTTP client libraries)")
    add(
        "--log-format",
        choices=["auto", "json", "console"],
        default=_env("log-format", "auto"),
        help=_help(
            "Log format: JSON lines (auto: when not on a terminal or in a pod) or console", "log-format"
        ),
    )
    add(
        "--slurm-token-file",
        default=_env("slurm-token-file"),
        help=_help(
            "Read the slurmrestd JWT from this file (re-read on change) instead of the Secret the "
            "WorkloadMixing names; for local runs",
            "slurm-token-file",
        ),
    )
    add(
        "--slurm-url",
        default=_env("slurm-url"),
        help=_help("Use this slurmrestd URL instead of spec.slurm.url; for local runs", "slurm-url"),
    )
    add(
        "--scontrol",
        default=_env("scontrol", "scontrol"),
        help=_help(
            "The scontrol program, for what a REST version cannot do (node drain/delete on v0.0.38, "
            "requeue-hold before v0.0.45); run with an argv list and the JWT in SLURM_JWT",
            "scontrol",
        ),
    )
    add(
        "--scontrol-prefix",
        default=_env("scontrol-prefix", ""),
        help=_help(
            "Words put before scontrol (e.g. 'chroot /srv/slurm-24.11'), split like a shell would, "
            "never run by one; SLURM_CONF in the environment reaches scontrol",
            "scontrol-prefix",
        ),
    )


def _run_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bridge.slurm",
        description="k8s-bridge for Slurm: held Slurm jobs in bridged partitions become suspended JobSets "
        "that Kueue admits; admitted jobs run on dynamic Slurm nodes made for them alone.",
        epilog="Subcommand: 'python -m bridge.slurm explain <job-id> [--config NAME | --mixing-file FILE] "
        "[--slurm-token-file F]' prints the JobSet the bridge would create for a job, and why, or why it "
        "cannot be served (exit status 0: servable, 2: not servable, 1: error).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    _common(parser)
    add = parser.add_argument
    add(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=_env_bool("leader-elect", False),
        help=_help("Run only while holding a Lease, so several replicas can run", "leader-elect"),
    )
    add(
        "--leader-election-namespace",
        default=_env("leader-election-namespace", _default_namespace()),
        help=_help("Namespace of the Lease", "leader-election-namespace"),
    )
    add(
        "--leader-election-id",
        default=_env("leader-election-id", ""),
        help=_help("Name of the Lease (default: k8s-bridge-slurm-<config>)", "leader-election-id"),
    )
    add(
        "--metrics-bind-address",
        default=_env("metrics-bind-address", ":8080"),
        help=_help("host:port of /metrics ('0' disables it)", "metrics-bind-address"),
    )
    add(
        "--health-probe-bind-address",
        default=_env("health-probe-bind-address", ":8081"),
        help=_help("host:port of /healthz and /readyz ('0' disables it)", "health-probe-bind-address"),
    )
    add(
        "--max-concurrent-reconciles",
        type=int,
        default=int(_env("max-concurrent-reconciles", "16") or 16),
        help=_help(
            "Jobs reconciled at once. Reconciles mostly wait on the API server and slurmrestd, not on "
            "the CPU: 16 made a burst of held jobs into JobSets 3x faster than 4 did, as fast as Kueue "
            "admitted; more added nothing measurable (docs/controller.md, Performance)",
            "max-concurrent-reconciles",
        ),
    )
    add(
        "--node-poll-interval",
        type=float,
        default=float(_env("node-poll-interval", "1.0") or 1.0),
        help=_help(
            "Seconds between polls of slurmctld's node list (cheap when unchanged)", "node-poll-interval"
        ),
    )
    add(
        "--node-poll-fast-interval",
        type=float,
        default=float(_env("node-poll-fast-interval", "0.2") or 0.0),
        help=_help(
            "Seconds between node polls while an admitted job waits for its nodes and one of its slurmd "
            "pods runs (0: always --node-poll-interval)",
            "node-poll-fast-interval",
        ),
    )
    add(
        "--graceful-shutdown-timeout",
        type=float,
        default=float(_env("graceful-shutdown-timeout", "30") or 30),
        help=_help("Seconds in-flight reconciles get on SIGTERM", "graceful-shutdown-timeout"),
    )
    add(
        "--mixing-controller",
        action=argparse.BooleanOptionalAction,
        default=_env_bool("mixing-controller", True),
        help=_help(
            "Also run the WorkloadMixing controller (validation, status, last good configuration); "
            "without it the resource is used as it is",
            "mixing-controller",
        ),
    )
    return parser  # fmt: skip


def _explain_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bridge.slurm explain",
        description="Print the JobSet the bridge would create for a Slurm job and why (mapping rule, "
        "LocalQueue, priority, topology), or the reason it cannot be served, and what the bridge would "
        "do about the job now.",
    )
    _common(parser)
    parser.add_argument("job_id", type=int, help="The Slurm job id")
    parser.add_argument("--mixing-file", help="Read the WorkloadMixing from this YAML file, not the cluster")
    return parser


def parse_args(argv: Sequence[str]) -> tuple[str, Settings, argparse.Namespace]:
    """``("run" | "explain", settings, raw namespace)``; exits with usage on bad input."""
    args = list(argv)
    command = "explain" if args[:1] == ["explain"] else "run"
    parser = _explain_parser() if command == "explain" else _run_parser()
    ns = parser.parse_args(args[1:] if command == "explain" else args)
    if not ns.config and not (command == "explain" and ns.mixing_file):
        parser.error(f"--config (or {ENV_PREFIX}CONFIG) is required")
    level = "debug" if ns.verbose else ns.log_level
    settings = Settings(
        config=ns.config or "",
        kubeconfig=ns.kubeconfig,
        log_level=level,
        log_format=ns.log_format,
        verbose=ns.verbose,
        slurm_token_file=ns.slurm_token_file,
        slurm_url=ns.slurm_url,
        scontrol=ns.scontrol,
        scontrol_prefix=tuple(shlex.split(ns.scontrol_prefix or "")),
        **(
            {
                "leader_elect": ns.leader_elect,
                "leader_election_namespace": ns.leader_election_namespace,
                "leader_election_id": ns.leader_election_id,
                "metrics_bind_address": ns.metrics_bind_address,
                "health_probe_bind_address": ns.health_probe_bind_address,
                "max_concurrent_reconciles": ns.max_concurrent_reconciles,
                "node_poll_interval": ns.node_poll_interval,
                "node_poll_fast_interval": ns.node_poll_fast_interval,
                "graceful_shutdown_timeout": ns.graceful_shutdown_timeout,
                "mixing_controller": ns.mixing_controller,
            }
            if command == "run"
            else {}
        ),
    )
    if settings.max_concurrent_reconciles < 1:
        parser.error("--max-concurrent-reconciles must be at least 1")
    if settings.node_poll_interval <= 0:
        parser.error("--node-poll-interval must be positive")
    if settings.node_poll_fast_interval < 0:
        parser.error("--node-poll-fast-interval must not be negative")
    return command, settings, ns


def bind_address(text: str) -> tuple[str, int] | None:
    """``":8080"`` -> ("0.0.0.0", 8080); ``"127.0.0.1:0"``; ``"0"`` or ``""`` -> None (disabled)."""
    if text in ("", "0"):
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"not a host:port bind address: {text!r}")
    return (host.strip("[]") or "0.0.0.0", int(port))  # noqa: S104 - like controller-runtime's ":8080"


# --- the live configuration and the Slurm connection -----------------------------------------------


class LiveMixing:
    """The reconciler's view of a :class:`LiveConfig` (its ``MixingConfig``)."""

    def __init__(self, live: LiveConfig) -> None:
        self.live = live

    @property
    def spec(self) -> WorkloadMixingSpec | None:
        current = self.live.current
        return current.spec if current is not None else None

    @property
    def object(self) -> Object | None:
        current = self.live.current
        if current is None:
            return None
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": current.name, "uid": current.uid},
        }

    def slurm(self) -> SlurmSpec | None:
        spec = self.spec
        return spec.slurm if spec is not None else None

    def cluster(self) -> str:
        slurm = self.slurm()
        return slurm.cluster_name if slurm is not None else ""

    def partitions(self) -> list[str]:
        slurm = self.slurm()
        return list(slurm.partitions) if slurm is not None else []


class DirectPublisher:
    """An informer handler that publishes the WorkloadMixing as it is (``--no-mixing-controller``)."""

    def __init__(self, live: LiveConfig) -> None:
        self._live = live

    def _publish(self, obj: Object) -> None:
        meta = obj.get("metadata") or {}
        if meta.get("name") != self._live.name:
            return
        try:
            spec = WorkloadMixingSpec.model_validate(obj.get("spec") or {})
        except ValidationError as exc:
            log.error("WorkloadMixing is invalid; keeping the last good one", error=str(exc)[:500])
            return
        self._live.publish(
            uid=str(meta.get("uid", "")), generation=int(meta.get("generation") or 0), spec=spec
        )

    def on_add(self, obj: Object, *, is_initial_list: bool) -> None:
        self._publish(obj)

    def on_update(self, old: Object, new: Object) -> None:
        self._publish(new)

    def on_delete(self, obj: Object) -> None:
        if (obj.get("metadata") or {}).get("name") == self._live.name:
            self._live.withdraw()


class SecretToken:
    """The JWT from the Secret the live configuration names: a GET, cached ``ttl`` seconds.

    A GET rather than a watch: the reference may change with the configuration, and a watch of
    Secrets would cache content the bridge does not need. ``invalidate`` after an auth failure.
    """

    def __init__(self, client: Client, config: LiveMixing, *, ttl: float = _TOKEN_TTL) -> None:
        self._client = client
        self._config = config
        self._ttl = ttl
        self._cached: tuple[tuple[str, str, str], float, str] | None = None

    def invalidate(self) -> None:
        self._cached = None

    async def get(self) -> str:
        slurm = self._config.slurm()
        if slurm is None:
            raise SlurmAuthError("no configuration yet: no token Secret known")
        ref = slurm.auth.token_secret_ref
        where = (ref.namespace, ref.name, ref.key)
        now = time.monotonic()
        if self._cached is not None and self._cached[0] == where and now - self._cached[1] < self._ttl:
            return self._cached[2]
        try:
            secret = await self._client.get("v1", "Secret", ref.name, namespace=ref.namespace)
        except ApiError as exc:
            raise SlurmAuthError(f"cannot read Secret {ref.namespace}/{ref.name}: {exc.reason}") from None
        raw = (secret.get("data") or {}).get(ref.key)
        if not raw:
            raise SlurmAuthError(f"Secret {ref.namespace}/{ref.name} has no key {ref.key!r}")
        token = base64.b64decode(raw).decode("utf-8", "replace").strip()
        self._cached = (where, now, token)
        return token


class LiveSlurm:
    """A :class:`SlurmClient` for the live configuration, rebuilt when its connection settings change.

    Implements what the sources and the reconciler call, delegating to the current client.
    """

    def __init__(
        self,
        *,
        config: LiveMixing,
        token: TokenSource,
        settings: Settings,
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

    async def get_job(self, job_id: int) -> SlurmJob:
        return await self._call(lambda c: c.get_job(job_id))

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
    ) -> None:
        await self._call(
            lambda c: c.pin_and_release(
                job_id,
                nodes=nodes,
                constraints=constraints,
                begin_time=begin_time,
                comment=comment,
                admin_comment=admin_comment,
            )
        )

    async def drain_node(self, name: str, *, reason: str) -> None:
        await self._call(lambda c: c.drain_node(name, reason=reason))

    async def down_node(self, name: str, *, reason: str) -> None:
        await self._call(lambda c: c.down_node(name, reason=reason))

    async def delete_node(
        self, name: str, *, down_if_busy: bool = True, reason: str = "k8s-bridge: delete"
    ) -> None:
        await self._call(lambda c: c.delete_node(name, down_if_busy=down_if_busy, reason=reason))


# --- the bridge ----------------------------------------------------------------------------------


def registration_due(phases: Mapping[str, Phase], pods: Store) -> bool:
    """Is a node registration due: an admitted job waits for its nodes and one of its pods runs?

    ``phases`` are the reconciler's (``<cluster>/<job id>`` -> phase as last reconciled), ``pods`` the
    pod informer's store indexed by job. A running slurmd registers within about a second, and the
    node poll that sees its job's last node is what the release waits for, so the node source polls
    fast (``--node-poll-fast-interval``) while this holds and slowly otherwise: no faster polling
    while pods are still being scheduled or pulled, nor for a job whose nodes are all up."""
    for key, phase in list(phases.items()):
        if phase is Phase.ADMITTED and PodsView.of(pods.by_index(INDEX_JOB, key)).running:
            return True
    return False


def _pod_signals(pod: Object) -> frozenset[str]:
    """Which of "Running" (phase) and "Ready" (condition) hold for a pod."""
    status = pod.get("status") or {}
    signals = {"Running"} if status.get("phase") == "Running" else set()
    if any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ()):
        signals.add("Ready")
    return frozenset(signals)


class NodePollOnPodStart:
    """Pod informer handler: poll the nodes now when a slurmd pod of an admitted job starts running
    or becomes ready (a readiness probe on slurmd's registration makes Ready the registration itself).

    Only for jobs ``waiting(key)`` says wait for their nodes (phase ``admitted``). Triggers coalesce
    in the node source: one poll in flight plus at most one right after it, however many pods start.
    """

    def __init__(self, trigger: Callable[[], None], waiting: Callable[[str], bool]) -> None:
        self._trigger = trigger
        self._waiting = waiting

    def _maybe(self, pod: Object, before: frozenset[str]) -> None:
        if _pod_signals(pod) - before and any(self._waiting(key) for key in pod_job_keys(pod)):
            self._trigger()

    def on_add(self, obj: Object, *, is_initial_list: bool) -> None:
        if not is_initial_list:
            self._maybe(obj, frozenset())

    def on_update(self, old: Object, new: Object) -> None:
        self._maybe(new, _pod_signals(old))

    def on_delete(self, obj: Object) -> None:
        pass


_COUNT_OF_PHASE = {
    Phase.HELD: "held",
    Phase.UNSERVABLE: "held",
    Phase.QUEUED: "queued",
    Phase.EVICTED: "queued",
    Phase.ADMITTED: "admitted",
    Phase.RELEASING: "admitted",
    Phase.RUNNING: "running",
}


class SlurmBridge:
    """The whole Slurm bridge in one object: ``await run()`` until ``stop()`` (or SIGTERM).

    ``run`` returns normally after a graceful stop and raises on a failure (e.g. the Lease lost).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        registry: CollectorRegistry = REGISTRY,
        handle_signals: bool = True,
    ) -> None:
        if not settings.config:
            raise ValueError("the bridge needs the name of its WorkloadMixing (Settings.config)")
        self.settings = settings
        self.registry = registry
        self.handle_signals = handle_signals
        self.configs = MixingConfigs()
        self.live = self.configs.get(settings.config)
        self.counts = CountsBoard()
        self.manager: Manager | None = None
        self._stop_requested = False
        self.reconciler: SlurmReconciler | None = None

    def stop(self) -> None:
        """Begin a graceful stop (what SIGTERM does)."""
        self._stop_requested = True
        if self.manager is not None:
            self.manager.stop()

    async def run(self) -> None:
        s = self.settings
        session = await Session.load(config_file=s.kubeconfig)
        try:
            client = Client(session)
            await self._run(client)
        finally:
            await session.close()

    async def _run(self, client: Client) -> None:
        s = self.settings
        identity = default_identity()
        config = LiveMixing(self.live)
        metrics = slurm_metrics(self.registry)
        token: TokenSource = (
            FileToken(s.slurm_token_file) if s.slurm_token_file else SecretToken(client, config)
        )
        slurm = LiveSlurm(config=config, token=token, settings=s, observer=metrics.observe_request)
        recorder = EventRecorder(
            client, reporting_controller="k8s-bridge.io/slurm", reporting_instance=identity
        )
        factory = SharedInformerFactory(client)

        controllers: list[Controller] = []
        if s.mixing_controller:
            from reconcilers.mixing import setup_mixing_controller  # noqa: PLC0415 - optional wiring

            controllers.append(
                await setup_mixing_controller(
                    client=client,
                    factory=factory,
                    configs=self.configs,
                    recorder=recorder,
                    counts=self.counts,
                    registry=self.registry,
                )
            )
        else:
            mixings = await factory.informer(API_VERSION, KIND, field_selector=f"metadata.name={s.config}")
            mixings.add_handler(DirectPublisher(self.live))

        jobsets = await factory.informer(
            JOBSET_API_VERSION,
            JOBSET_KIND,
            label_selector=LABEL_JOB_ID,
            indexers={INDEX_JOB: jobset_job_keys},
        )
        workloads = await factory.informer(
            WORKLOAD_API_VERSION, WORKLOAD_KIND, label_selector=JOB_UID_LABEL,
            indexers={INDEX_JOB_UID: workload_uid_keys},
        )  # fmt: skip
        pods = await factory.informer(
            "v1", "Pod", label_selector=LABEL_JOB_ID, indexers={INDEX_JOB: pod_job_keys}
        )
        # The JobSets' own Jobs: their completedIndexes are slurmd pods that ended with 0 and that
        # the Job never replaces, known even once the pods are gone (lost nodes).
        child_jobs = await factory.informer(
            "batch/v1", "Job", label_selector=LABEL_JOB_ID, indexers={INDEX_JOB: pod_job_keys}
        )

        def bridged() -> list[int]:
            prefix = config.cluster() + "/"
            return [
                int(key[len(prefix) :])
                for key in jobsets.store.index_values(INDEX_JOB)
                if key.startswith(prefix)
            ]

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
            interval=s.node_poll_interval,
            fast_interval=s.node_poll_fast_interval or None,
            wanted=lambda: (
                self.reconciler is not None and registration_due(self.reconciler.phases, pods.store)
            ),
            indexers={INDEX_JOB: node_job_keys},
        )

        def node_states() -> dict[str, int]:
            counts: dict[str, int] = {}
            for obj in nodes.store.list():
                state = str(obj["node"].state).lower()
                counts[state] = counts.get(state, 0) + 1
            return counts

        metrics.live.nodes = node_states

        def report_counts(phases: Mapping[str, int]) -> None:
            totals = {"held": 0, "queued": 0, "admitted": 0, "running": 0}
            for phase, count in phases.items():
                bucket = _COUNT_OF_PHASE.get(Phase(phase))
                if bucket is not None:
                    totals[bucket] += count
            self.counts.set(s.config, "slurm", SourceCounts(**totals))

        reconciler = SlurmReconciler(
            client=client,
            slurm=slurm,
            config=config,
            jobs=jobs,
            jobsets=jobsets.store,
            workloads=workloads.store,
            pods=pods.store,
            nodes=nodes.store,
            child_jobs=child_jobs.store,
            nodes_trigger=nodes.trigger,
            metrics=metrics,
            recorder=recorder,
            on_phases=report_counts,
        )
        self.reconciler = reconciler
        pods.add_handler(
            NodePollOnPodStart(nodes.trigger, lambda key: reconciler.phases.get(key) is Phase.ADMITTED)
        )

        def on_config(snapshot: ConfigSnapshot | None) -> None:
            if snapshot is not None and snapshot.spec.slurm is not None:
                jobs.interval = snapshot.spec.slurm.poll_interval_seconds
            jobs.trigger()
            nodes.trigger()

        self.live.subscribe(on_config)

        def by_labels(obj: Object) -> list[Request]:
            return [request_for_key(key) for key in jobset_job_keys(obj)]

        def by_owner_jobset(obj: Object) -> list[Request]:
            meta = obj.get("metadata") or {}
            out: list[Request] = []
            for ref in meta.get("ownerReferences") or ():
                if ref.get("kind") == JOBSET_KIND:
                    owner = jobsets.store.get(f"{meta.get('namespace')}/{ref.get('name')}")
                    if owner is not None:
                        out.extend(by_labels(owner))
            return out

        def by_node(obj: Object) -> list[Request]:
            cluster = config.cluster()
            return [Request(cluster, key) for key in node_job_keys(obj)] if cluster else []

        controller = Controller(
            name="slurm",
            reconciler=reconciler,
            max_concurrent_reconciles=s.max_concurrent_reconciles,
            registry=self.registry,
        )

        def with_dependents(obj: Object) -> list[Request]:
            """A job's change reconciles it, and the jobs waiting for it (a dependency met)."""
            key = Request.of(obj)
            dependents = jobs.store.by_index(INDEX_DEPENDS_ON, key.name)
            return [key, *(Request.of(d) for d in dependents)]

        controller.watch(jobs, map_to=with_dependents)
        # A node event of a job admitted and waiting for its nodes may be its release: ahead of the
        # ordinary reconciles. Not the pod events: the release needs the node source to show the
        # nodes, and its own event then comes at that priority (a pod of a waiting job only makes the
        # node source poll sooner, NodePollOnPodStart); ranking the four or so pod events of every
        # starting job high would queue them beside the releases.
        controller.watch(nodes, map_to=by_node, priority_of=reconciler.release_priority)
        controller.watch(jobsets, map_to=by_labels)
        controller.watch(pods, map_to=by_labels)
        controller.watch(child_jobs, map_to=by_labels)
        controller.watch(workloads, map_to=by_owner_jobset)
        controllers.append(controller)

        probes = self._probe_server(s.health_probe_bind_address)
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
            probes=probes,
            graceful_shutdown_timeout=s.graceful_shutdown_timeout,
            handle_signals=self.handle_signals,
        )
        if s.metrics_bind_address != s.health_probe_bind_address:
            metrics_server = self._probe_server(s.metrics_bind_address)
            if metrics_server is not None:
                manager.add_server(metrics_server)
        manager.add_cache(factory)
        manager.add_cache(jobs)
        manager.add_cache(nodes)
        for each in controllers:
            manager.add_controller(each)
        self.manager = manager
        if self._stop_requested:
            return
        log.info(
            "starting the Slurm bridge",
            config=s.config,
            leader_elect=s.leader_elect,
            mixing_controller=s.mixing_controller,
        )
        try:
            await manager.run()
        finally:
            await slurm.close()

    def _probe_server(self, address: str) -> ProbeServer | None:
        bound = bind_address(address)
        if bound is None:
            return None
        return ProbeServer(host=bound[0], port=bound[1], registry=self.registry)


# --- explain -------------------------------------------------------------------------------------


def _load_mixing_file(path: str) -> WorkloadMixingSpec:
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    if isinstance(data, dict) and "spec" in data:
        return WorkloadMixing.model_validate(data).spec
    return WorkloadMixingSpec.model_validate(data or {})


def _describe_job(job: SlurmJob) -> str:
    return (
        f"Slurm job {job.job_id} {job.name!a}: {job.state}"
        f"{' held by ' + str(job.held_by) if job.hold else ''}, partition {job.partition!a}, "
        f"{job.node_count} node(s), user {job.user_name!a}, account {job.account!a}"
    )


async def explain(settings: Settings, *, job_id: int, mixing_file: str | None, out: TextIO) -> int:
    """Print what the bridge would do with ``job_id``; 0 when it can be served, 2 when not, 1 on error."""
    session: Session | None = None
    client: Client | None = None
    try:
        if mixing_file:
            spec = _load_mixing_file(mixing_file)
        else:
            session = await Session.load(config_file=settings.kubeconfig)
            client = Client(session)
            raw = await client.get(API_VERSION, KIND, settings.config)
            spec = WorkloadMixing.model_validate(raw).spec
        if spec.slurm is None:
            print("the WorkloadMixing has no spec.slurm: Slurm is not bridged", file=out)
            return 1
        live = LiveConfig(settings.config or "explain")
        live.publish(uid="explain", generation=0, spec=spec)
        config = LiveMixing(live)
        if settings.slurm_token_file:
            token: TokenSource = FileToken(settings.slurm_token_file)
        elif client is not None:
            token = SecretToken(client, config)
        else:
            value = os.environ.get("SLURM_JWT", "")
            token = CallableToken(lambda: value)
        slurm = LiveSlurm(config=config, token=token, settings=settings)
        try:
            try:
                job = await slurm.get_job(job_id)
            except InvalidJobId:
                print(f"Slurm job {job_id} is not known to slurmctld (never existed, or purged)", file=out)
                return 1
            print(_describe_job(job), file=out)
            observed = await _observe_for_explain(
                client=client, slurm=slurm, config=config, job=job, cluster=spec.slurm.cluster_name
            )
            result = observed.translation
            assert result is not None or job.is_finished
            decision = decide(observed)
            if result is None:
                print(f"the job has ended ({job.state})", file=out)
                print(f"the bridge now: {decision.why}", file=out)
                return 2
            if isinstance(result, Translation):
                print(f"servable: JobSet {result.namespace}/{result.name}", file=out)
                for note in result.notes:
                    print(f"  why: {note}", file=out)
            else:
                print(f"cannot be served ({result.code}): {result.reason}", file=out)
                print("  the job stays held, the reason goes into its comment, an Event on the "
                      "WorkloadMixing", file=out)  # fmt: skip
            print(f"the bridge now: {decision.why}", file=out)
            for action in decision.actions:
                print(f"  action: {action.kind}", file=out)
            if isinstance(result, Translation):
                print("---", file=out)
                out.write(yaml.safe_dump(result.manifest, sort_keys=False, allow_unicode=False))
            return 0 if isinstance(result, Translation) else 2
        finally:
            await slurm.close()
    except (SlurmError, ApiError, ValidationError, OSError, yaml.YAMLError) as exc:
        print(f"explain: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        if session is not None:
            await session.close()


async def _observe_for_explain(
    *, client: Client | None, slurm: LiveSlurm, config: LiveMixing, job: SlurmJob, cluster: str
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
    observed, _ = observer.observe(job.job_id, job, dependees=dependees if job.dependency else None)
    return observed


# --- main ----------------------------------------------------------------------------------------


def _configure_logging(settings: Settings) -> None:
    json_logs = None if settings.log_format == "auto" else settings.log_format == "json"
    configure_logging(verbosity=max(_LEVELS.get(settings.log_level, 0), settings.verbose), json=json_logs)


def main(argv: Sequence[str] | None = None) -> int:
    command, settings, ns = parse_args(sys.argv[1:] if argv is None else argv)
    _configure_logging(settings)
    if command == "explain":
        return asyncio.run(explain(settings, job_id=ns.job_id, mixing_file=ns.mixing_file, out=sys.stdout))
    bridge = SlurmBridge(settings)
    try:
        asyncio.run(bridge.run())
    except KeyboardInterrupt:
        return 130
    return 0
