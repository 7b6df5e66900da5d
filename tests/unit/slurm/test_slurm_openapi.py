"""The adapters are checked against each version's OpenAPI document.

Only v0.0.38 and v0.0.40-42 run here for real; for v0.0.43-45 these checks are what stands behind
"supported": every path, method, query parameter and field an adapter reads or writes must exist in
that version's document (the generated ones and, for v0.0.40-42, also the one 24.11.5 served).
The reader in ``versions.py`` refuses undeclared fields, so the declarations are complete.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from bridge.api.slurm_job import JobState
from bridge.api.slurm_node import NodeState
from bridge.slurmrest.versions import SUPPORTED_VERSIONS, Endpoint, RestAdapter, adapter_for

Load = Callable[[str], Any]

CASES = [
    ("v0.0.38", "v0.0.38-slurm-22.05.8.json"),
    ("v0.0.40", "v0.0.40.json"),
    ("v0.0.40", "v0.0.40-42-slurm-24.11.5.json"),
    ("v0.0.41", "v0.0.41.json"),
    ("v0.0.41", "v0.0.40-42-slurm-24.11.5.json"),
    ("v0.0.42", "v0.0.42.json"),
    ("v0.0.42", "v0.0.40-42-slurm-24.11.5.json"),
    ("v0.0.43", "v0.0.43.json"),
    ("v0.0.44", "v0.0.44.json"),
    ("v0.0.45", "v0.0.45.json"),
]

# Used although 22.05's document does not list them, all verified on a real 22.05: the pin field
# (slurm.md), and fields every real answer carries (rest-v0.0.38-job17.json, -node-dyn1.json).
UNDOCUMENTED = {
    ("v0.0.38", "job_update", "nodelist"),
    ("v0.0.38", "job", "tasks_per_node"),
    ("v0.0.38", "job", "prefer"),
    ("v0.0.38", "node", "comment"),
}


def deref(doc: Any, schema: Any) -> Any:
    while isinstance(schema, dict) and "$ref" in schema:
        schema = doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def props(doc: Any, schema: Any) -> dict[str, Any]:
    schema = deref(doc, schema)
    if schema.get("type") == "array":
        schema = deref(doc, schema["items"])
    out: dict[str, Any] = {}
    for part in schema.get("allOf", []):
        out.update(props(doc, part))
    out.update(schema.get("properties", {}))
    return out


def operation(doc: Any, endpoint: Endpoint) -> Any:
    assert endpoint.template in doc["paths"], endpoint.template
    op = doc["paths"][endpoint.template].get(endpoint.method.lower())
    assert op is not None, f"{endpoint.method} {endpoint.template}"
    return op


def response_props(doc: Any, endpoint: Endpoint) -> dict[str, Any]:
    op = operation(doc, endpoint)
    return props(doc, op["responses"]["200"]["content"]["application/json"]["schema"])


def body_props(doc: Any, endpoint: Endpoint) -> dict[str, Any]:
    op = operation(doc, endpoint)
    return props(doc, op["requestBody"]["content"]["application/json"]["schema"])


def missing(version: str, kind: str, used: frozenset[str], documented: dict[str, Any]) -> set[str]:
    return {f for f in used - documented.keys() if (version, kind, f) not in UNDOCUMENTED}


@pytest.fixture(params=CASES, ids=[f"{v}-{f.removesuffix('.json')}" for v, f in CASES])
def case(request: pytest.FixtureRequest, openapi: Load) -> tuple[RestAdapter, Any]:
    version, name = request.param
    return adapter_for(version), openapi(name)


def test_paths_methods_and_query_parameters(case: tuple[RestAdapter, Any]) -> None:
    adapter, doc = case
    for endpoint in adapter.endpoints.values():
        op = operation(doc, endpoint)
        params = {p["name"]: p["in"] for p in op.get("parameters", [])}
        for name in re.findall(r"{(\w+)}", endpoint.template):
            assert params.get(name) == "path", (endpoint.template, name)
        for name in endpoint.query:
            assert params.get(name) == "query", (endpoint.template, name)


def test_job_fields(case: tuple[RestAdapter, Any]) -> None:
    adapter, doc = case
    for op in ("list_jobs", "get_job"):
        resp = response_props(doc, adapter.endpoints[op])
        assert not missing(adapter.version, "jobs_response", adapter.jobs_response_fields, resp)
        assert not missing(adapter.version, "job", adapter.job_fields, props(doc, resp["jobs"]))
        assert not missing(adapter.version, "error", adapter.error_fields, props(doc, resp["errors"]))
        if adapter.warning_fields:
            assert not missing(
                adapter.version, "warning", adapter.warning_fields, props(doc, resp["warnings"])
            )


def test_job_update_body(case: tuple[RestAdapter, Any]) -> None:
    adapter, doc = case
    documented = body_props(doc, adapter.endpoints["update_job"])
    assert not missing(adapter.version, "job_update", adapter.job_update_fields, documented)
    body = adapter.job_update_body(
        required_nodes=["a"], constraints="f", hold=False, begin_time=1, comment="c",
        admin_comment="a" if adapter.can_set_admin_comment else None,
    )  # fmt: skip
    assert set(body) == adapter.job_update_fields


def test_node_fields_and_updates(case: tuple[RestAdapter, Any]) -> None:
    adapter, doc = case
    for op in ("list_nodes", "get_node"):
        resp = response_props(doc, adapter.endpoints[op])
        assert not missing(adapter.version, "nodes_response", adapter.nodes_response_fields, resp)
        assert not missing(adapter.version, "node", adapter.node_fields, props(doc, resp["nodes"]))
    if adapter.can_update_nodes:
        documented = body_props(doc, adapter.endpoints["update_node"])
        assert not missing(adapter.version, "node_update", adapter.node_update_fields, documented)
        assert {"DRAIN", "DOWN"} <= set(deref(doc, documented["state"])["items"]["enum"])


def test_ping_fields(case: tuple[RestAdapter, Any]) -> None:
    adapter, doc = case
    resp = response_props(doc, adapter.endpoints["ping"])
    assert not missing(adapter.version, "ping_response", adapter.ping_response_fields, resp)
    assert not missing(adapter.version, "ping", adapter.ping_fields, props(doc, resp["pings"]))


# v0.0.38 documents states as free-form strings, so only the data_parser generation has enums to check.
@pytest.mark.parametrize(
    ("version", "document"),
    [(v, f) for v, f in CASES if v != "v0.0.38"],
    ids=[f"{v}-{f.removesuffix('.json')}" for v, f in CASES if v != "v0.0.38"],
)
def test_state_names_exist(version: str, document: str, openapi: Load) -> None:
    adapter, doc = adapter_for(version), openapi(document)
    job = props(doc, response_props(doc, adapter.endpoints["list_jobs"])["jobs"])
    assert {s.value for s in JobState} - {"UNKNOWN"} <= set(deref(doc, job["job_state"])["items"]["enum"])
    node = props(doc, response_props(doc, adapter.endpoints["list_nodes"])["nodes"])
    assert {s.value for s in NodeState} <= set(deref(doc, node["state"])["items"]["enum"])


def test_undocumented_fields_are_really_undocumented(openapi: Load, reference: Load) -> None:
    """Keep the allowance minimal: each entry is absent from the document and seen for real."""
    adapter = adapter_for("v0.0.38")
    doc = openapi("v0.0.38-slurm-22.05.8.json")
    documented = {
        "job_update": body_props(doc, adapter.endpoints["update_job"]),
        "job": props(doc, response_props(doc, adapter.endpoints["list_jobs"])["jobs"]),
        "node": props(doc, response_props(doc, adapter.endpoints["list_nodes"])["nodes"]),
    }
    seen = {
        "job": reference("rest-v0.0.38-job17.json")["jobs"][0],
        "node": reference("rest-v0.0.38-node-dyn1.json")["nodes"][0],
    }
    for version, kind, name in UNDOCUMENTED:
        assert version == "v0.0.38"
        assert name not in documented[kind]
        assert kind == "job_update" or name in seen[kind]


def test_every_supported_version_is_checked() -> None:
    assert set(SUPPORTED_VERSIONS) == {v for v, _ in CASES}
