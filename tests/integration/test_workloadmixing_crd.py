"""The generated WorkloadMixing CRD on a real kube-apiserver: it installs, valid resources are stored
with the same defaults the models apply, and invalid ones are refused, by the OpenAPI schema or by
a CEL rule, with a cause that names the field.

Every refused case is also checked against the pydantic models: the API server and the bridges must
agree on what a valid WorkloadMixing is, since one is generated from the other.

The control plane is a module-scoped ``ControlPlane`` (etcd + kube-apiserver, no controllers) from
bridge/sandbox/kube.py, with only this CRD installed; the whole-site example additionally needs
Kueue's CRDs (``python3 -m bridge.sandbox.build all``).
"""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from bridge.api import WorkloadMixing, WorkloadMixingStatus, build_status
from bridge.api.crdgen import CRD_PATH
from bridge.api.mixing import API_VERSION, GROUP, PLURAL, SourceCounts
from bridge.sandbox.kube import ApiError, ControlPlane, RestClient
from tests.fixtures.mixing import drop_empty

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = REPO_ROOT / "docs" / "examples" / "workloadmixing-site.yaml"
COLLECTION = f"/apis/{API_VERSION}/{PLURAL}"
CRD_NAME = f"{PLURAL}.{GROUP}"

# Where each kind of the site example is created (namespaced kinds take the object's namespace).
KIND_PATHS = {
    "Namespace": "/api/v1/namespaces",
    "Topology": "/apis/kueue.x-k8s.io/v1beta2/topologies",
    "ResourceFlavor": "/apis/kueue.x-k8s.io/v1beta2/resourceflavors",
    "ClusterQueue": "/apis/kueue.x-k8s.io/v1beta2/clusterqueues",
    "LocalQueue": "/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/localqueues",
    "WorkloadPriorityClass": "/apis/kueue.x-k8s.io/v1beta2/workloadpriorityclasses",
    "WorkloadMixing": COLLECTION,
}


def _established(client: RestClient) -> bool:
    crd = client.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}")
    # status.conditions is null for a moment after creation.
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def _install(plane: ControlPlane) -> None:
    with (REPO_ROOT / CRD_PATH).open() as handle:
        crd = yaml.safe_load(handle)
    plane.client.apply("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    deadline = time.monotonic() + 60
    while not _established(plane.client):
        if time.monotonic() > deadline:
            pytest.fail(f"CRD {CRD_NAME} not Established within 60 s", pytrace=False)
        time.sleep(0.2)


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver with the WorkloadMixing CRD installed; every process stopped after."""
    control_plane = ControlPlane(workdir=tmp_path_factory.mktemp("wm-kube"))
    try:
        control_plane.start()
    except RuntimeError as failed:  # MissingPrerequisiteError and StackError both say what and how
        pytest.fail(f"the Kubernetes control plane did not start: {failed}", pytrace=False)
    try:
        _install(control_plane)
        yield control_plane
    finally:
        pids = [p.pid for p in control_plane.group.processes]
        control_plane.stop()
        assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()], (
            "control plane processes left behind"
        )


def _example_documents() -> list[dict[str, Any]]:
    with EXAMPLE.open() as handle:
        return [d for d in yaml.safe_load_all(handle) if isinstance(d, dict)]


def _example_mixing() -> dict[str, Any]:
    (document,) = [d for d in _example_documents() if d["kind"] == "WorkloadMixing"]
    return document


def _named(document: dict[str, Any]) -> dict[str, Any]:
    document = copy.deepcopy(document)
    document["metadata"] = {"name": f"wm-{uuid.uuid4().hex[:8]}"}
    return document


def _minimal_slurm() -> dict[str, Any]:
    return {
        "url": "https://slurmrestd.slurm:6820",
        "auth": {"tokenSecretRef": {"namespace": "slurm", "name": "jwt"}},
        "clusterName": "hpc",
        "confServer": "slurmctld",
        "partitions": ["bridge"],
        "mapping": {"default": {"localQueue": {"name": "hpc"}}},
        "podTemplate": {"image": "slurmd:24.11"},
    }


def _minimal_ray() -> dict[str, Any]:
    return {"clusterSelector": {}, "mapping": {"default": {"localQueue": {"name": "ray"}}}}


def _resource(spec: dict[str, Any]) -> dict[str, Any]:
    return _named({"apiVersion": API_VERSION, "kind": "WorkloadMixing", "metadata": {}, "spec": spec})


# --- accepted --------------------------------------------------------------------------------------


class TestAccepted:
    def test_crd_is_discoverable_as_cluster_scoped_with_short_name(self, plane: ControlPlane) -> None:
        resources = plane.client.get(f"/apis/{API_VERSION}")["resources"]
        (main,) = [r for r in resources if r["name"] == PLURAL]
        assert main["namespaced"] is False
        assert main["shortNames"] == ["wm"]
        assert any(r["name"] == f"{PLURAL}/status" for r in resources)

    def test_example_is_stored_with_the_models_defaults(self, plane: ControlPlane) -> None:
        document = _named(_example_mixing())
        stored = plane.client.create(COLLECTION, document)
        expected = WorkloadMixing.model_validate(document).dump()
        assert drop_empty(stored["spec"]) == drop_empty(expected["spec"])
        assert WorkloadMixing.model_validate(stored).spec == WorkloadMixing.model_validate(document).spec

    @pytest.mark.parametrize(
        "spec",
        [
            pytest.param({"slurm": _minimal_slurm()}, id="slurm-only"),
            pytest.param({"ray": _minimal_ray()}, id="ray-only"),
            pytest.param(
                {
                    "slurm": {
                        **_minimal_slurm(),
                        "partitions": ["bridge", "gpu"],
                        "restVersion": "v0.0.38",
                        "topology": {
                            "partitions": [{"partition": "gpu", "required": "example.com/rack"}],
                            "switches": {"preferred": "example.com/block"},
                        },
                        "gres": {"gpu": "nvidia.com/gpu", "gpu:mi300": "amd.com/gpu"},
                        "podTemplate": {"image": "x", "overhead": {"cpu": 1, "memory": "512Mi"}},
                    },
                    "ray": {
                        **_minimal_ray(),
                        "clusterSelector": {
                            "matchExpressions": [{"key": "example.com/shared", "operator": "Exists"}]
                        },
                    },
                    "shared": {"annotations": {"example.com/owner": "hpc-team"}},
                },
                id="everything",
            ),
        ],
    )
    def test_valid_specs(self, plane: ControlPlane, spec: dict[str, Any]) -> None:
        stored = plane.client.create(COLLECTION, _resource(spec))
        WorkloadMixing.model_validate(stored)

    def test_status_subresource_takes_what_build_status_makes(self, plane: ControlPlane) -> None:
        stored = plane.client.create(COLLECTION, _named(_example_mixing()))
        mixing = WorkloadMixing.model_validate(stored)
        status = build_status(
            spec=mixing.spec,
            generation=stored["metadata"]["generation"],
            problems=[],
            previous=None,
            now=datetime.now(UTC).replace(microsecond=0),
            counts={"slurm": SourceCounts(held=1, queued=2, admitted=0, running=3)},
        )
        stored["status"] = status.model_dump(mode="json", by_alias=True, exclude_none=True)
        name = stored["metadata"]["name"]
        updated = plane.client.request("PUT", f"{COLLECTION}/{name}/status", body=stored)
        assert WorkloadMixingStatus.model_validate(updated["status"]) == status
        assert updated["metadata"]["generation"] == stored["metadata"]["generation"]


# --- refused ---------------------------------------------------------------------------------------


def _with(path: str, value: Any, *, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """A valid spec (slurm and ray) with one dotted path set to ``value`` (``...`` deletes it)."""
    spec = copy.deepcopy(base or {"slurm": _minimal_slurm(), "ray": _minimal_ray()})
    *parents, last = path.split(".")
    node = spec
    for part in parents:
        node = node.setdefault(part, {})
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return spec


# (id, spec, field the API server names, text in its message)
REFUSED: list[tuple[str, dict[str, Any], str, str]] = [
    # OpenAPI schema
    (
        "default-mapping-missing",
        _with("slurm.mapping.default", ...),
        "spec.slurm.mapping.default",
        "Required",
    ),
    (
        "rest-version-enum",
        _with("slurm.restVersion", "v0.0.39"),
        "spec.slurm.restVersion",
        "Unsupported value",
    ),
    ("no-partitions", _with("slurm.partitions", []), "spec.slurm.partitions", "at least 1"),
    ("duplicate-partitions", _with("slurm.partitions", ["a", "a"]), "spec.slurm.partitions[1]", "Duplicate"),
    (
        "local-queue-name",
        _with("slurm.mapping.default.localQueue.name", "Not_A_Name"),
        "spec.slurm.mapping.default.localQueue.name",
        "should match",
    ),
    (
        "max-nodes-bound",
        _with("slurm.limits", {"maxNodesPerJob": 0}),
        "spec.slurm.limits.maxNodesPerJob",
        "0",
    ),
    (
        "quantity",
        _with("slurm.podTemplate", {"image": "x", "overhead": {"cpu": "lots"}}),
        "spec.slurm.podTemplate.overhead.cpu",
        "should match",
    ),
    (
        "secret-namespace",
        _with("slurm.auth.tokenSecretRef.namespace", ...),
        "spec.slurm.auth.tokenSecretRef.namespace",
        "Required",
    ),
    ("cluster-name", _with("slurm.clusterName", "Has Spaces"), "spec.slurm.clusterName", "should match"),
    ("poll-interval", _with("slurm.pollIntervalSeconds", 0.01), "spec.slurm.pollIntervalSeconds", "0.2"),
    # CEL
    ("neither-source", {"shared": {}}, "spec", "at least one of spec.slurm or spec.ray"),
    ("url-scheme", _with("slurm.url", "ftp://slurm:6820"), "spec.slurm.url", "http:// or https://"),
    ("url-not-a-url", _with("slurm.url", "slurmrestd:6820"), "spec.slurm.url", "http:// or https://"),
    (
        "topology-both",
        _with("slurm.topology", {"switches": {"required": "a", "preferred": "b"}}),
        "spec.slurm.topology.switches",
        "exactly one of required or preferred",
    ),
    (
        "topology-neither",
        _with("slurm.topology", {"partitions": [{"partition": "bridge"}]}),
        "spec.slurm.topology.partitions[0]",
        "exactly one of required or preferred",
    ),
    (
        "topology-partition-not-bridged",
        _with("slurm.topology", {"partitions": [{"partition": "other", "required": "rack"}]}),
        "spec.slurm.topology.partitions",
        "must be one of spec.slurm.partitions",
    ),
    (
        "reserved-label",
        _with("shared.labels", {"kueue.x-k8s.io/queue-name": "x"}),
        "spec.shared.labels",
        "reserved prefixes",
    ),
    (
        "selector-in-without-values",
        _with("ray.clusterSelector", {"matchExpressions": [{"key": "a", "operator": "In"}]}),
        "spec.ray.clusterSelector.matchExpressions[0].values",
        "values must be non-empty",
    ),
    (
        "workers-over-limit",
        _with("ray.workerDefaults", {"workers": 10}, base=_with("ray.limits", {"maxWorkersPerJob": 5})),
        "spec.ray.workerDefaults.workers",
        "must not exceed",
    ),
    ("gres-key", _with("slurm.gres", {"gpu type": "nvidia.com/gpu"}), "spec.slurm.gres", "GRES name"),
    (
        "node-selector-key",
        _with("slurm.podTemplate", {"image": "x", "nodeSelector": {"bad key!": "x"}}),
        "spec.slurm.podTemplate.nodeSelector",
        "label keys",
    ),
    (
        "topology-partition-duplicate",
        _with(
            "slurm.topology",
            {
                "partitions": [
                    {"partition": "bridge", "required": "a"},
                    {"partition": "bridge", "required": "b"},
                ]
            },
        ),
        "spec.slurm.topology.partitions[1]",
        "Duplicate",
    ),
    (
        "overhead-key",
        _with("slurm.podTemplate", {"image": "x", "overhead": {"not a name": "1"}}),
        "spec.slurm.podTemplate.overhead",
        "resource names",
    ),
]


@pytest.mark.parametrize(("spec", "field", "text"), [pytest.param(s, f, t, id=i) for i, s, f, t in REFUSED])
def test_refused_with_the_field_named(
    plane: ControlPlane, spec: dict[str, Any], field: str, text: str
) -> None:
    document = _resource(spec)
    with pytest.raises(ApiError) as refused:
        plane.client.create(COLLECTION, document)
    assert refused.value.status == 422
    causes = refused.value.body["details"]["causes"]
    assert any(c.get("field") == field and text in c.get("message", "") for c in causes), causes
    # The models refuse it too.
    with pytest.raises(ValidationError):
        WorkloadMixing.model_validate(document)


# --- the whole site --------------------------------------------------------------------------------


def test_whole_site_example_applies_with_kueue_crds(plane: ControlPlane) -> None:
    """Every object of docs/examples/workloadmixing-site.yaml is accepted by the real API server
    with Kueue's real CRDs (v1beta2): the example is not just valid for our CRD."""
    folder = plane.paths.crds["kueue"]
    if not folder.is_dir():
        pytest.fail(f"Kueue's CRDs ({folder}) are needed: python3 -m bridge.sandbox.build all", pytrace=False)
    plane.install_crds(folder)
    suffix = uuid.uuid4().hex[:6]
    for original in _example_documents():
        document = copy.deepcopy(original)
        kind = document["kind"]
        if kind == "WorkloadMixing":
            document["metadata"]["name"] += f"-{suffix}"
        path = KIND_PATHS[kind].format(namespace=document["metadata"].get("namespace", ""))
        plane.client.apply(path, document)
    stored = plane.client.get(f"{COLLECTION}/site-{suffix}")
    assert WorkloadMixing.model_validate(stored).spec.slurm is not None
