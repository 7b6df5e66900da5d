"""Mapping resolution: first match wins, empty lists match all, `*` globs, defaults, home namespaces."""

from __future__ import annotations

import fnmatch
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.api import (
    MappingError,
    QueueTarget,
    WorkloadMixingSpec,
    glob_match,
    resolve_gres,
    resolve_ray_mapping,
    resolve_slurm_mapping,
    resolve_slurm_topology,
)
from tests.fixtures.mixing import ray_spec, slurm_spec, target


def _spec(
    *, rules: list[dict[str, Any]], default: dict[str, Any] | None = None, **slurm: Any
) -> WorkloadMixingSpec:
    mapping = {"rules": rules, "default": default or target("fallback", priority="normal")}
    return WorkloadMixingSpec.model_validate(
        {"slurm": slurm_spec(mapping=mapping, **slurm), "shared": {"jobSetNamespace": "slurm-jobs"}}
    )


class TestSlurmMapping:
    def test_no_rules_gives_the_default_in_the_home_namespace(self) -> None:
        spec = _spec(rules=[])
        assert resolve_slurm_mapping(spec, partition="bridge", account="a", qos="normal") == QueueTarget(
            namespace="slurm-jobs", local_queue="fallback", priority_class="normal", rule=None
        )

    def test_first_matching_rule_wins(self) -> None:
        spec = _spec(
            rules=[
                {"match": {"accounts": ["physics"]}, "target": target("physics")},
                {"match": {"partitions": ["bridge"]}, "target": target("bridge-any")},
                {"match": {"accounts": ["physics"], "partitions": ["bridge"]}, "target": target("never")},
            ]
        )
        got = resolve_slurm_mapping(spec, partition="bridge", account="physics", qos=None)
        assert (got.local_queue, got.rule) == ("physics", 0)
        got = resolve_slurm_mapping(spec, partition="bridge", account="chemistry", qos=None)
        assert (got.local_queue, got.rule) == ("bridge-any", 1)

    def test_every_non_empty_list_must_match(self) -> None:
        spec = _spec(rules=[{"match": {"partitions": ["bridge"], "qos": ["high"]}, "target": target("hot")}])
        assert resolve_slurm_mapping(spec, partition="bridge", account=None, qos="high").local_queue == "hot"
        assert resolve_slurm_mapping(spec, partition="bridge", account=None, qos="low").rule is None
        assert resolve_slurm_mapping(spec, partition="other", account=None, qos="high").rule is None

    def test_any_pattern_in_a_list_matches(self) -> None:
        spec = _spec(rules=[{"match": {"accounts": ["a", "b"]}, "target": target("ab")}])
        assert resolve_slurm_mapping(spec, partition="p", account="b", qos=None).rule == 0

    def test_empty_match_is_a_catch_all(self) -> None:
        spec = _spec(rules=[{"target": target("all")}, {"match": {"accounts": ["x"]}, "target": target("x")}])
        assert resolve_slurm_mapping(spec, partition="p", account="x", qos="q").local_queue == "all"

    def test_globs(self) -> None:
        spec = _spec(rules=[{"match": {"accounts": ["ml-*"]}, "target": target("ml")}])
        assert resolve_slurm_mapping(spec, partition="p", account="ml-vision", qos=None).rule == 0
        assert resolve_slurm_mapping(spec, partition="p", account="ml-", qos=None).rule == 0
        assert resolve_slurm_mapping(spec, partition="p", account="xml-vision", qos=None).rule is None
        assert resolve_slurm_mapping(spec, partition="p", account="ML-vision", qos=None).rule is None

    @pytest.mark.parametrize("qos", [None, ""])
    def test_absent_attribute_matches_only_star(self, qos: str | None) -> None:
        spec = _spec(
            rules=[
                {"match": {"qos": ["normal"]}, "target": target("normal")},
                {"match": {"qos": ["*"]}, "target": target("star")},
            ]
        )
        assert resolve_slurm_mapping(spec, partition="p", account=None, qos=qos).local_queue == "star"

    def test_explicit_namespace_and_no_priority(self) -> None:
        spec = _spec(
            rules=[{"match": {"partitions": ["gpu"]}, "target": target("gpu", namespace="gpu-team")}]
        )
        got = resolve_slurm_mapping(spec, partition="gpu", account=None, qos=None)
        assert got == QueueTarget(namespace="gpu-team", local_queue="gpu", priority_class=None, rule=0)
        assert got.labels() == {"kueue.x-k8s.io/queue-name": "gpu"}

    def test_labels_carry_the_priority_class(self) -> None:
        got = resolve_slurm_mapping(_spec(rules=[]), partition="p", account=None, qos=None)
        assert got.labels() == {
            "kueue.x-k8s.io/queue-name": "fallback",
            "kueue.x-k8s.io/priority-class": "normal",
        }

    def test_without_a_slurm_section(self) -> None:
        spec = WorkloadMixingSpec.model_validate({"ray": ray_spec()})
        with pytest.raises(MappingError, match=r"spec\.slurm"):
            resolve_slurm_mapping(spec, partition="p", account=None, qos=None)


class TestRayMapping:
    def _spec(self) -> WorkloadMixingSpec:
        mapping = {
            "rules": [
                {"namespaces": ["team-*"], "target": target("team", priority="high")},
                {"namespaces": ["research", "lab"], "target": target("shared", namespace="ray-shared")},
            ],
            "default": target("ray"),
        }
        return WorkloadMixingSpec.model_validate({"ray": ray_spec(mapping=mapping)})

    def test_rule_without_namespace_uses_the_rayjob_namespace(self) -> None:
        assert resolve_ray_mapping(self._spec(), namespace="team-a") == QueueTarget(
            namespace="team-a", local_queue="team", priority_class="high", rule=0
        )

    def test_rule_with_namespace(self) -> None:
        got = resolve_ray_mapping(self._spec(), namespace="lab")
        assert (got.namespace, got.local_queue, got.rule) == ("ray-shared", "shared", 1)

    def test_default(self) -> None:
        got = resolve_ray_mapping(self._spec(), namespace="prod")
        assert (got.namespace, got.local_queue, got.rule) == ("prod", "ray", None)

    def test_without_a_ray_section(self) -> None:
        with pytest.raises(MappingError, match=r"spec\.ray"):
            resolve_ray_mapping(WorkloadMixingSpec.model_validate({"slurm": slurm_spec()}), namespace="x")


class TestTopology:
    def _spec(self, **topology: Any) -> WorkloadMixingSpec:
        return WorkloadMixingSpec.model_validate(
            {"slurm": slurm_spec(partitions=["bridge", "gpu"], topology=topology)}
        )

    def test_none_configured(self) -> None:
        assert resolve_slurm_topology(self._spec(), partition="bridge", switches=1) is None

    def test_partition_rule(self) -> None:
        spec = self._spec(partitions=[{"partition": "gpu", "required": "example.com/rack"}])
        got = resolve_slurm_topology(spec, partition="gpu", switches=None)
        assert got is not None
        assert got.annotations() == {"kueue.x-k8s.io/podset-required-topology": "example.com/rack"}
        assert resolve_slurm_topology(spec, partition="bridge", switches=None) is None

    @pytest.mark.parametrize(
        ("switches", "expected"),
        [
            (1, "example.com/block"),
            (2, "example.com/rack"),
            (0, "example.com/rack"),
            (None, "example.com/rack"),
        ],
    )
    def test_one_switch_wins_over_the_partition(self, switches: int | None, expected: str) -> None:
        spec = self._spec(
            partitions=[{"partition": "gpu", "required": "example.com/rack"}],
            switches={"preferred": "example.com/block"},
        )
        got = resolve_slurm_topology(spec, partition="gpu", switches=switches)
        assert got is not None
        assert got.level == expected

    def test_preferred_annotation(self) -> None:
        got = resolve_slurm_topology(self._spec(switches={"preferred": "r"}), partition="bridge", switches=1)
        assert got is not None
        assert got.annotations() == {"kueue.x-k8s.io/podset-preferred-topology": "r"}


class TestGres:
    def _spec(self) -> WorkloadMixingSpec:
        gres = {"gpu": "nvidia.com/gpu", "gpu:mi300": "amd.com/gpu"}
        return WorkloadMixingSpec.model_validate({"slurm": slurm_spec(gres=gres)})

    def test_default_maps_gpu_to_nvidia(self) -> None:
        spec = WorkloadMixingSpec.model_validate({"slurm": slurm_spec()})
        assert resolve_gres(spec, name="gpu", gres_type=None) == "nvidia.com/gpu"

    def test_typed_key_wins_and_falls_back(self) -> None:
        spec = self._spec()
        assert resolve_gres(spec, name="gpu", gres_type="mi300") == "amd.com/gpu"
        assert resolve_gres(spec, name="gpu", gres_type="a100") == "nvidia.com/gpu"

    def test_unmapped(self) -> None:
        assert resolve_gres(self._spec(), name="fpga", gres_type=None) is None


# --- properties ------------------------------------------------------------------------------------

_PATTERN_TEXT = st.text(alphabet="ab.-*", max_size=8)
_VALUE_TEXT = st.text(alphabet="ab.-", max_size=8)


@given(pattern=_PATTERN_TEXT, value=_VALUE_TEXT)
def test_glob_match_agrees_with_fnmatch_for_star_only_patterns(pattern: str, value: str) -> None:
    assert glob_match(pattern, value) == fnmatch.fnmatchcase(value, pattern)


@given(value=st.text(max_size=20))
def test_star_matches_everything_and_literal_matches_itself(value: str) -> None:
    assert glob_match("*", value)
    assert glob_match(value.replace("*", ""), value.replace("*", ""))


_NAMES = st.sampled_from(["a", "b", "ab"])
_GLOBS = st.lists(st.sampled_from(["a", "b", "ab", "a*", "*"]), max_size=2)


@given(
    matches=st.lists(
        st.fixed_dictionaries({"partitions": _GLOBS, "accounts": _GLOBS, "qos": _GLOBS}), max_size=6
    ),
    partition=_NAMES,
    account=st.one_of(st.none(), _NAMES),
    qos=st.one_of(st.none(), _NAMES),
)
def test_resolution_is_the_first_rule_that_matches(
    matches: list[dict[str, list[str]]], partition: str, account: str | None, qos: str | None
) -> None:
    rules = [{"match": m, "target": target(f"q{i}")} for i, m in enumerate(matches)]
    spec = _spec(rules=rules)
    got = resolve_slurm_mapping(spec, partition=partition, account=account, qos=qos)

    def holds(patterns: list[str], value: str | None) -> bool:
        return not patterns or any(fnmatch.fnmatchcase(value or "", p) for p in patterns)

    expected = next(
        (
            i
            for i, m in enumerate(matches)
            if holds(m["partitions"], partition) and holds(m["accounts"], account) and holds(m["qos"], qos)
        ),
        None,
    )
    assert got.rule == expected
    assert got.local_queue == ("fallback" if expected is None else f"q{expected}")
    assert got.namespace == "slurm-jobs"
