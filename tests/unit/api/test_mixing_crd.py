"""The generated CRD and field reference: up to date, structural, and defaulting like the models."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from bridge.api import WorkloadMixing
from bridge.api.crdgen import CRD_PATH, DOCS_PATH, SchemaError, _convert, crd, main, render_crd, render_docs
from tests.fixtures.mixing import REPO_ROOT, drop_empty, example_mixing, ray_spec, resource, slurm_spec

SCHEMA = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _nodes(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for key, child in node.get("properties", {}).items():
        yield from _nodes(child, f"{path}.{key}")
    if "items" in node:
        yield from _nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _nodes(node["additionalProperties"], f"{path}.*")


def _apply_defaults(node: dict[str, Any], value: Any) -> Any:
    """Structural defaulting as the API server does it: set missing defaulted properties, then descend
    (into defaulted values too, so ``default: {}`` picks up nested defaults)."""
    if isinstance(value, dict) and "properties" in node:
        for key, child in node["properties"].items():
            if key not in value and "default" in child:
                value[key] = copy.deepcopy(child["default"])
            if key in value:
                value[key] = _apply_defaults(child, value[key])
    elif isinstance(value, dict) and isinstance(node.get("additionalProperties"), dict):
        for key in value:
            value[key] = _apply_defaults(node["additionalProperties"], value[key])
    elif isinstance(value, list) and "items" in node:
        value = [_apply_defaults(node["items"], v) for v in value]
    return value


class TestCheckedInFilesAreCurrent:
    def test_crd(self) -> None:
        assert (REPO_ROOT / CRD_PATH).read_text() == render_crd(), "run: python -m bridge.api.crdgen"

    def test_docs(self) -> None:
        assert (REPO_ROOT / DOCS_PATH).read_text() == render_docs(), "run: python -m bridge.api.crdgen"

    def test_check_mode(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["--check", "--root", str(REPO_ROOT)]) == 0
        assert main(["--check", "--root", str(tmp_path)]) == 1
        assert "stale" in capsys.readouterr().err
        assert main(["--root", str(tmp_path)]) == 0
        assert main(["--check", "--root", str(tmp_path)]) == 0
        assert yaml.safe_load((tmp_path / CRD_PATH).read_text()) == crd()


class TestStructural:
    @pytest.mark.parametrize(("path", "node"), list(_nodes(SCHEMA)))
    def test_node(self, path: str, node: dict[str, Any]) -> None:
        assert "$ref" not in node
        assert "$defs" not in node
        assert not {"oneOf", "allOf", "not", "nullable", "title", "const", "uniqueItems"} & set(node)
        if "anyOf" in node:
            assert node.get("x-kubernetes-int-or-string") is True
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}]
        else:
            assert node.get("type") in {"object", "array", "string", "integer", "number", "boolean"}, path
        assert node.get("additionalProperties") is not False, path
        assert not ("properties" in node and "additionalProperties" in node), path
        if "default" in node:
            assert node["default"] is not None, path
        if node.get("x-kubernetes-list-type") == "map":
            item_properties = node["items"]["properties"]
            assert all(k in item_properties for k in node["x-kubernetes-list-map-keys"]), path

    def test_top_level(self) -> None:
        version = crd()["spec"]["versions"][0]
        assert crd()["spec"]["scope"] == "Cluster"
        assert crd()["spec"]["names"]["shortNames"] == ["wm"]
        assert version["subresources"] == {"status": {}}
        assert {c["name"] for c in version["additionalPrinterColumns"]} >= {"Ready", "Age"}
        assert SCHEMA["properties"]["metadata"] == {"type": "object"}
        assert SCHEMA["required"] == ["spec"]

    def test_cross_field_rules_are_in_the_schema(self) -> None:
        rules = {
            rule["rule"] for _, node in _nodes(SCHEMA) for rule in node.get("x-kubernetes-validations", [])
        }
        assert "has(self.slurm) || has(self.ray)" in rules
        assert "has(self.required) != has(self.preferred)" in rules
        assert any("getScheme()" in r for r in rules)
        assert any("t.partition in self.partitions" in r for r in rules)

    def test_every_field_is_documented(self) -> None:
        undocumented = [
            path
            for path, node in _nodes(SCHEMA)
            if path.count(".") >= 2 and not path.endswith(("[]", ".*")) and not node.get("description")
        ]
        assert undocumented == []

    def test_unsupported_union_is_refused(self) -> None:
        with pytest.raises(SchemaError, match="unions"):
            _convert({"anyOf": [{"type": "integer"}, {"type": "boolean"}]}, {}, ".x")

    def test_unique_items_is_refused(self) -> None:
        with pytest.raises(SchemaError, match="uniqueItems"):
            _convert({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, {}, ".x")

    def test_exclusive_bounds_become_boolean(self) -> None:
        node = _convert({"type": "number", "exclusiveMinimum": 0}, {}, ".x")
        assert node == {"type": "number", "minimum": 0, "exclusiveMinimum": True}


class TestDefaultingMatchesTheModels:
    def _check(self, document: dict[str, Any]) -> None:
        server = _apply_defaults(SCHEMA, copy.deepcopy(document))
        model = WorkloadMixing.model_validate(document).dump()
        assert drop_empty(server) == drop_empty(model)

    def test_example(self) -> None:
        self._check(example_mixing())

    def test_minimal(self) -> None:
        self._check(resource({"slurm": slurm_spec(), "ray": ray_spec()}))

    @given(
        with_slurm=st.booleans(),
        limits=st.fixed_dictionaries({}, optional={"maxNodesPerJob": st.integers(1, 4096)}),
        rest_version=st.sampled_from(["auto", "v0.0.38", "v0.0.42"]),
        workers=st.one_of(st.none(), st.integers(1, 64)),
    )
    def test_partial_specs(
        self, with_slurm: bool, limits: dict[str, int], rest_version: str, workers: int | None
    ) -> None:
        spec: dict[str, Any] = {
            "ray": ray_spec(**({"workerDefaults": {"workers": workers}} if workers else {}))
        }
        if with_slurm:
            spec["slurm"] = slurm_spec(limits=limits, restVersion=rest_version)
        self._check(resource(spec))
