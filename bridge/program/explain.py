"""The scaffolding of ``python -m bridge.<name> explain``: one job, seen as the controller sees it.

Why scaffolding and not a second implementation: ``explain`` must never disagree with the controller.
So a program's explain fills the stores of its reconciler's own observer from one list each (instead
of informers) and calls the reconciler's own ``decide``; what is common to every bridge lives here:
the WorkloadMixing read from the cluster or from a file (so that a site can ask "what would this
configuration do with that job" before applying it), published into a :class:`LiveConfig` the way the
controller's mixing controller would, and errors turned into a message and exit status 1.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import ValidationError

from bridge.admission import WorkloadState, WorkloadView
from bridge.api.mixing import API_VERSION, KIND, WorkloadMixing, WorkloadMixingSpec
from bridge.mixing_config import LiveConfig
from bridge.runtime.client import Client
from bridge.runtime.errors import ApiError
from bridge.runtime.session import Session

from .settings import ProgramSettings

__all__ = [
    "EXIT_ERROR",
    "EXIT_NOT_SERVABLE",
    "EXIT_SERVABLE",
    "ExplainContext",
    "load_mixing_file",
    "run_explain",
    "workload_lines",
]

EXIT_SERVABLE = 0
EXIT_ERROR = 1
EXIT_NOT_SERVABLE = 2


@dataclass(frozen=True, kw_only=True)
class ExplainContext:
    """What an explain body works with."""

    client: Client | None
    """None with ``--mixing-file``: nothing in the cluster is read."""
    spec: WorkloadMixingSpec
    live: LiveConfig
    """Holds ``spec`` as the current configuration, as the mixing controller would publish it."""


def load_mixing_file(path: str) -> WorkloadMixingSpec:
    """A WorkloadMixing (or just its spec) from a YAML file."""
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    if isinstance(data, dict) and "spec" in data:
        return WorkloadMixing.model_validate(data).spec
    return WorkloadMixingSpec.model_validate(data or {})


def workload_lines(workload: WorkloadView) -> list[str]:
    """What Kueue decided for the job's Workload, as explain prints it: its state (with Kueue's reason
    and message while it is not admitted), then each podSet's admission: pods, flavors and, when
    topology-aware scheduling placed it, the domains (node-label values per level) and their pods."""
    where = f" in ClusterQueue {workload.cluster_queue}" if workload.cluster_queue else ""
    head = f"Kueue: Workload {workload.namespace}/{workload.name} {workload.state}{where}"
    if workload.state is not WorkloadState.ADMITTED and (workload.reason or workload.message):
        head += f": {workload.reason or '-'}: {workload.message}".rstrip(": ")
    lines = [head]
    for podset in workload.podsets:
        flavors = ", ".join(f"{resource}={flavor}" for resource, flavor in sorted(podset.flavors.items()))
        count = f"{podset.count} pod(s)" if podset.count is not None else "pods"
        lines.append(f"  podset {podset.name}: {count}, flavors {flavors or '-'}")
        for domain in podset.topology:
            values = ", ".join(f"{level}={value}" for level, value in domain.values.items())
            lines.append(f"    topology domain {values}: {domain.count} pod(s)")
    return lines


async def run_explain(
    settings: ProgramSettings,
    *,
    mixing_file: str | None,
    body: Callable[[ExplainContext], Awaitable[int]],
    errors: tuple[type[Exception], ...] = (),
) -> int:
    """Run ``body`` with the configuration; its exit status, or 1 after printing an error to stderr.

    ``errors`` are the external system's own failures, reported like the API server's.
    """
    caught: tuple[type[Exception], ...] = (ApiError, ValidationError, OSError, yaml.YAMLError, *errors)
    session: Session | None = None
    try:
        client: Client | None = None
        if mixing_file:
            spec = load_mixing_file(mixing_file)
        else:
            session = await Session.load(config_file=settings.kubeconfig)
            client = Client(session)
            spec = WorkloadMixing.model_validate(await client.get(API_VERSION, KIND, settings.config)).spec
        live = LiveConfig(settings.config or "explain")
        live.publish(uid="explain", generation=0, spec=spec)
        return await body(ExplainContext(client=client, spec=spec, live=live))
    except caught as exc:
        print(f"explain: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        if session is not None:
            await session.close()
