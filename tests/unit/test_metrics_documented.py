"""Every metric family a bridge registers is in docs/operations.md with its type and labels, every
documented one is registered, and no label could carry a job's identity.

Each bridge's registry is built as its program builds it (the runtime's families, a controller and
its work queue, the informers' collector, the bridge's own families, the webhook server's for the Ray
bridge, the process collectors), and every family is given one series, so the labels compared are
the ones a scrape would show (the program's Session counts its API requests on the same registry).
The end-to-end tier checks the same against the running programs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from prometheus_client import GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR, CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from bridge.ray.metrics import ray_metrics
from bridge.runtime.controller import Controller, Request, Result
from bridge.runtime.informer import Informer, informer_collector
from bridge.runtime.metrics import rest_client_metrics, runtime_metrics, webhook_metrics
from bridge.runtime.reflector import ReflectorStats
from bridge.slurm.metrics import slurm_metrics
from tests.metrics_catalogue import BRIDGES, FORBIDDEN_LABELS, documented_metrics, exposed_name

_SAMPLE_ONLY_LABELS = frozenset({"le", "quantile"})


class _NoReconcile:
    async def reconcile(self, request: Request) -> Result:
        return Result()


@dataclass
class _Store:
    objects: int = 3

    def __len__(self) -> int:
        return self.objects


@dataclass
class _Reflector:
    stats: ReflectorStats = field(default_factory=ReflectorStats)


@dataclass(eq=False)
class _InformerStandIn:
    """What the informers' collector reads of an informer: its name, reflector stats and store."""

    name: str
    reflector: _Reflector = field(default_factory=_Reflector)
    store: _Store = field(default_factory=_Store)


def _one_series_each(*holders: object) -> None:
    """Give every labelled prometheus_client metric of ``holders`` one child, as use would."""
    for holder in holders:
        for metric in vars(holder).values():
            if isinstance(metric, MetricWrapperBase):
                names = cast(tuple[str, ...], metric._labelnames)
                if names:
                    metric.labels(*(f"value-{i}" for i in range(len(names))))


def bridge_registry(bridge: str) -> tuple[CollectorRegistry, list[object]]:
    """The registry ``bridge``'s program builds, with every family holding a series."""
    registry = CollectorRegistry(auto_describe=True)
    for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        registry.register(collector)
    keep: list[object] = [Controller(name="workloadmixing", reconciler=_NoReconcile(), registry=registry)]
    runtime = runtime_metrics(registry)
    runtime.leader_election_master_status.labels(f"k8s-bridge-{bridge}-site").set(1)
    informer = _InformerStandIn(name="batch/v1/jobs")
    keep.append(informer)
    informer_collector(registry).add(cast(Informer, informer))
    holders: list[object] = [runtime, rest_client_metrics(registry)]
    if bridge == "slurm":
        slurm = slurm_metrics(registry)
        slurm.live.phases = lambda: {"running": 1}
        slurm.live.nodes = lambda: {"IDLE": 2}
        holders.append(slurm)
    else:
        ray = ray_metrics(registry)
        ray.live.phases = lambda: {"running": 1}
        ray.live.ungated = lambda: 0
        ray.live.webhook = lambda: {"gate": 1}
        holders += [ray, webhook_metrics(registry)]
    _one_series_each(*holders)
    return registry, keep


def exported(registry: CollectorRegistry) -> dict[str, tuple[str, frozenset[str]]]:
    """Exposed name -> (type, labels of its series)."""
    out: dict[str, tuple[str, frozenset[str]]] = {}
    for family in registry.collect():
        labels: set[str] = set()
        for sample in family.samples:
            labels |= set(sample.labels) - _SAMPLE_ONLY_LABELS
        out[exposed_name(family.name, family.type)] = (family.type, frozenset(labels))
    return out


@pytest.mark.parametrize("bridge", BRIDGES)
def test_every_exported_metric_is_documented_and_every_documented_one_exported(bridge: str) -> None:
    registry, _keep = bridge_registry(bridge)
    families = exported(registry)
    documented = {name: d for name, d in documented_metrics().items() if bridge in d.bridges}
    assert sorted(set(families) - set(documented)) == [], "exported but not in docs/operations.md"
    assert sorted(set(documented) - set(families)) == [], "documented but not exported"
    for name, (kind, labels) in families.items():
        assert (name, documented[name].type) == (name, kind)
        assert (name, documented[name].labels) == (name, labels)


@pytest.mark.parametrize("bridge", BRIDGES)
def test_no_label_carries_a_job_or_an_object_name(bridge: str) -> None:
    registry, _keep = bridge_registry(bridge)
    for name, (_, labels) in exported(registry).items():
        assert (name, labels & FORBIDDEN_LABELS) == (name, frozenset())
    for name, documented in documented_metrics().items():
        assert (name, documented.labels & FORBIDDEN_LABELS) == (name, frozenset())


def test_the_catalogue_reader_refuses_a_metric_documented_twice() -> None:
    row = "| `workqueue_depth` | both | gauge | `name` | keys |\n"
    with pytest.raises(ValueError, match="documented twice"):
        documented_metrics(row + row)


def test_the_catalogue_reader_keeps_types_and_labels() -> None:
    text = (
        "| `k8s_bridge_slurm_jobs` | slurm | gauge | `phase` | jobs |\n"
        "| `x_total` | both | counter | - | x |\n"
    )
    read: dict[str, Any] = {
        name: (sorted(d.bridges), d.type, sorted(d.labels)) for name, d in documented_metrics(text).items()
    }
    assert read == {
        "k8s_bridge_slurm_jobs": (["slurm"], "gauge", ["phase"]),
        "x_total": (["ray", "slurm"], "counter", []),
    }
