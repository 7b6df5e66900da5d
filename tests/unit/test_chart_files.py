"""The chart's files that must follow the code: its version is the project's, its CRD is generated.

(That ``charts/k8s-bridge/crds/workloadmixing.yaml`` is exactly what ``bridge/api/crdgen.py`` writes is
``tests/unit/api/test_mixing_crd.py``'s; what the templates render is the integration tier's,
``tests/integration/test_chart.py``, with the real helm.)
"""

from __future__ import annotations

import json
import tarfile
import tomllib
from pathlib import Path

import yaml

from bridge.api.crdgen import CRD_PATH

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "k8s-bridge"
PREVIOUS_CHART = REPO_ROOT / "tests" / "data" / "k8s-bridge-0.1.0.tgz"


def test_chart_version_and_app_version_are_the_project_version() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["version"] == project
    assert chart["appVersion"] == project


def test_the_chart_ships_the_generated_crd_and_nothing_else_in_crds() -> None:
    assert [p.relative_to(REPO_ROOT) for p in (CHART / "crds").iterdir()] == [CRD_PATH]


def test_the_values_schema_refuses_unknown_keys_at_every_object_level() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def check(node: dict[str, object], value: object, path: str) -> None:
        if not isinstance(value, dict) or "properties" not in node:
            return
        assert node.get("additionalProperties") is False, path
        properties = node["properties"]
        assert isinstance(properties, dict)
        assert set(value) <= set(properties), path
        for key, child in value.items():
            check(properties[key], child, f"{path}.{key}")

    check(schema, values, "")


def _packaged(name: str) -> str:
    with tarfile.open(PREVIOUS_CHART) as archive:
        member = archive.extractfile(f"k8s-bridge/{name}")
        assert member is not None, name
        return member.read().decode()


def _without_descriptions(node: object) -> object:
    """The schema as the API server enforces it: descriptions (documentation) left out."""
    if isinstance(node, dict):
        return {k: _without_descriptions(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_without_descriptions(v) for v in node]
    return node


def test_the_previous_chart_is_0_1_0_and_this_crd_only_adds_to_its_crd() -> None:
    # The upgrade test's starting point (tests/data/README.md says how it was made).
    chart = yaml.safe_load(_packaged("Chart.yaml"))
    assert (chart["version"], chart["appVersion"]) == ("0.1.0", "0.1.0")
    (old,) = yaml.safe_load(_packaged("crds/workloadmixing.yaml"))["spec"]["versions"]
    (new,) = yaml.safe_load((CHART / "crds" / "workloadmixing.yaml").read_text())["spec"]["versions"]
    assert _without_descriptions(new["schema"]) == _without_descriptions(old["schema"])
    old_columns = old["additionalPrinterColumns"]
    assert [c for c in new["additionalPrinterColumns"] if c in old_columns] == old_columns
    added = [c["name"] for c in new["additionalPrinterColumns"] if c not in old_columns]
    assert added == ["Slurm-Held", "Ray-Held"]
