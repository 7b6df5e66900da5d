"""Fixtures of the runtime integration tests: a control plane of each module's own, the runtime's
Client on it, and a fresh namespace per test.

The control plane is etcd + kube-apiserver only (no CRDs or controllers are needed), with the watch
cache off: a compaction then turns every older resourceVersion into ``410 Gone`` at once, as a
long-lived cluster does over time. Modules restart it and compact etcd, hence one per module.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from bridge.runtime.client import Client
from bridge.runtime.session import Session
from bridge.sandbox.build import MissingPrerequisiteError
from bridge.sandbox.kube import ControlPlane


@pytest.fixture(scope="module")
def kube_control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver for this module, stopped (every process) even when start fails."""
    plane = ControlPlane(workdir=tmp_path_factory.mktemp("runtime-kube"), watch_cache=False)
    try:
        plane.start()  # stops what it started when it fails
    except MissingPrerequisiteError as missing:
        pytest.fail(f"the Kubernetes control plane: missing prerequisite: {missing}", pytrace=False)
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture
async def client(kube_control_plane: ControlPlane) -> AsyncIterator[Client]:
    async with await Session.load(config_file=kube_control_plane.kubeconfig) as session:
        yield Client(session)


@pytest.fixture
async def namespace(client: Client) -> AsyncIterator[str]:
    name = f"rt-{uuid.uuid4().hex[:8]}"
    await client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    await client.delete("v1", "Namespace", name, missing_ok=True)
