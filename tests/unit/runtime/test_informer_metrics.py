"""Informer figures reach Prometheus through the project's registry, summed by informer name."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from bridge.runtime.client import Client
from bridge.runtime.discovery import Resource
from bridge.runtime.informer import Informer
from bridge.runtime.session import Session

CONFIGMAPS = Resource(group="", version="v1", plural="configmaps", kind="ConfigMap", namespaced=True)


async def test_reflector_counters_and_cache_size_are_exported() -> None:
    registry = CollectorRegistry()
    async with Session(base_url="http://127.0.0.1:9") as session:
        informer = Informer(Client(session), CONFIGMAPS, namespace="ns", registry=registry)
        informer.on_replace([{"metadata": {"name": "a", "namespace": "ns", "resourceVersion": "1"}}])
        informer.reflector.stats.gone = 2
        text = generate_latest(registry).decode()
    assert 'reflector_gone_total{name="v1/ConfigMap/ns//"} 2.0' in text
    assert 'informer_cache_objects{name="v1/ConfigMap/ns//"} 1.0' in text
