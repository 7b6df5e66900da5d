"""The models: the example validates, round trips through YAML, and bad specs are refused by name."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from bridge.api import WorkloadMixing, WorkloadMixingSpec
from bridge.api.mixing import SourceCounts, WorkloadMixingStatus
from tests.fixtures.mixing import example_mixing, ray_spec, resource, slurm_spec, target


def _refused(spec: dict[str, Any], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        WorkloadMixing.model_validate(resource(spec))


class TestExample:
    def test_validates(self) -> None:
        mixing = WorkloadMixing.model_validate(example_mixing())
        assert mixing.spec.slurm is not None
        assert mixing.spec.slurm.partitions == ["bridge"]
        assert mixing.spec.ray is not None
        assert mixing.spec.shared.job_set_namespace == "slurm"

    def test_round_trip_through_yaml(self) -> None:
        mixing = WorkloadMixing.model_validate(example_mixing())
        text = yaml.safe_dump(mixing.dump(), sort_keys=False)
        again = WorkloadMixing.model_validate(yaml.safe_load(text))
        assert again == mixing
        assert again.dump() == mixing.dump()

    def test_dump_keeps_everything_the_example_says(self) -> None:
        original = example_mixing()
        dumped = WorkloadMixing.model_validate(original).dump()

        def contained(small: Any, big: Any) -> bool:
            if isinstance(small, dict):
                return isinstance(big, dict) and all(
                    k in big and contained(v, big[k]) for k, v in small.items()
                )
            if isinstance(small, list):
                return isinstance(big, list) and len(small) == len(big) and all(map(contained, small, big))
            return bool(small == big or str(small) == big)  # quantities come back as strings

        assert contained(original, dumped)

    def test_passthrough_fields_survive(self) -> None:
        mixing = WorkloadMixing.model_validate(example_mixing())
        assert mixing.spec.slurm is not None
        volumes = mixing.dump()["spec"]["slurm"]["podTemplate"]["volumes"]
        assert volumes == [{"name": "munge-key", "secret": {"secretName": "munge-key", "defaultMode": 256}}]


class TestDefaults:
    def test_minimal_slurm_spec(self) -> None:
        spec = WorkloadMixingSpec.model_validate({"slurm": slurm_spec()})
        assert spec.slurm is not None
        assert spec.slurm.rest_version == "auto"
        assert spec.slurm.auth.user_name == "slurm"
        assert spec.slurm.auth.token_secret_ref.key == "token"
        assert spec.slurm.gres == {"gpu": "nvidia.com/gpu"}
        assert spec.slurm.pod_template.command == ["slurmd"]
        assert spec.slurm.limits.max_nodes_per_job == 16
        assert spec.shared.job_set_namespace == "k8s-bridge"
        assert spec.ray is None

    def test_quantities_accept_integers(self) -> None:
        spec = WorkloadMixingSpec.model_validate({"ray": ray_spec(workerDefaults={"resources": {"cpu": 2}})})
        assert spec.ray is not None
        assert spec.ray.worker_defaults.resources == {"cpu": "2"}

    def test_snake_case_names_work_in_python(self) -> None:
        spec = WorkloadMixingSpec(shared={"job_set_namespace": "x"}, ray=ray_spec())
        assert spec.shared.job_set_namespace == "x"


class TestRefused:
    def test_neither_source(self) -> None:
        _refused({}, "at least one of spec.slurm or spec.ray")

    def test_unknown_field(self) -> None:
        _refused({"slurm": slurm_spec(pollInterval=3)}, r"slurm\.pollInterval")

    @pytest.mark.parametrize("url", ["ftp://host", "slurmrestd:6820", "http://", "not a url"])
    def test_url_scheme(self, url: str) -> None:
        _refused({"slurm": slurm_spec(url=url)}, r"slurm\.url")

    def test_rest_version_enum(self) -> None:
        _refused({"slurm": slurm_spec(restVersion="v0.0.39")}, r"slurm\.restVersion")

    def test_topology_required_and_preferred_exclusive(self) -> None:
        topology = {"switches": {"required": "a", "preferred": "b"}}
        _refused({"slurm": slurm_spec(topology=topology)}, "exactly one of required or preferred")
        _refused({"slurm": slurm_spec(topology={"switches": {}})}, "exactly one of required or preferred")

    def test_topology_partition_must_be_bridged(self) -> None:
        topology = {"partitions": [{"partition": "other", "required": "rack"}]}
        _refused({"slurm": slurm_spec(topology=topology)}, "must be one of spec.slurm.partitions")

    def test_mapping_needs_a_default(self) -> None:
        _refused({"slurm": slurm_spec(mapping={"rules": [{"target": target("x")}]})}, r"mapping\.default")

    def test_partitions_not_empty(self) -> None:
        _refused({"slurm": slurm_spec(partitions=[])}, r"slurm\.partitions")

    @pytest.mark.parametrize("name", ["Upper", "with space", "-dash", "a" * 64])
    def test_local_queue_name(self, name: str) -> None:
        _refused({"slurm": slurm_spec(mapping={"default": target(name)})}, r"localQueue\.name")

    def test_reserved_label_prefix(self) -> None:
        _refused({"ray": ray_spec(), "shared": {"labels": {"kueue.x-k8s.io/queue-name": "x"}}}, "reserved")

    def test_selector_operator_values(self) -> None:
        selector: dict[str, Any] = {"matchExpressions": [{"key": "a", "operator": "In"}]}
        _refused({"ray": ray_spec(clusterSelector=selector)}, "values must be non-empty")
        selector = {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}
        _refused({"ray": ray_spec(clusterSelector=selector)}, "values must be non-empty")

    def test_default_workers_within_limit(self) -> None:
        spec = ray_spec(workerDefaults={"workers": 8}, limits={"maxWorkersPerJob": 4})
        _refused({"ray": spec}, "must not exceed")

    def test_bad_quantity(self) -> None:
        _refused({"slurm": slurm_spec(podTemplate={"image": "x", "overhead": {"cpu": "lots"}})}, "overhead")

    def test_poll_interval_bounds(self) -> None:
        _refused({"slurm": slurm_spec(pollIntervalSeconds=0)}, "pollIntervalSeconds")

    @pytest.mark.parametrize(
        ("spec", "match"),
        [
            ({"slurm": slurm_spec(gres={"gpu type": "x"})}, r"gres\.gpu type\.\[key\]"),
            ({"slurm": slurm_spec(podTemplate={"image": "x", "overhead": {"not a name": "1"}})}, r"\[key\]"),
            (
                {"slurm": slurm_spec(podTemplate={"image": "x", "nodeSelector": {"bad key!": "x"}})},
                r"\[key\]",
            ),
            ({"ray": ray_spec(), "shared": {"annotations": {"/x": "y"}}}, r"\[key\]"),
        ],
    )
    def test_map_keys(self, spec: dict[str, Any], match: str) -> None:
        _refused(spec, match)

    def test_duplicate_partitions(self) -> None:
        _refused({"slurm": slurm_spec(partitions=["a", "a"])}, "duplicate partitions")
        topology = {
            "partitions": [{"partition": "bridge", "required": "a"}, {"partition": "bridge", "required": "b"}]
        }
        _refused({"slurm": slurm_spec(topology=topology)}, "duplicate topology partitions")

    def test_wrong_kind(self) -> None:
        document = resource({"ray": ray_spec()})
        document["kind"] = "ClusterQueue"
        with pytest.raises(ValidationError, match="kind"):
            WorkloadMixing.model_validate(document)


class TestSelector:
    def test_kubernetes_semantics(self) -> None:
        spec = WorkloadMixingSpec.model_validate(
            {
                "ray": ray_spec(
                    clusterSelector={
                        "matchLabels": {"shared": "true"},
                        "matchExpressions": [
                            {"key": "tier", "operator": "NotIn", "values": ["prod"]},
                            {"key": "legacy", "operator": "DoesNotExist"},
                        ],
                    }
                )
            }
        )
        assert spec.ray is not None
        selector = spec.ray.cluster_selector
        assert selector.matches({"shared": "true"})
        assert selector.matches({"shared": "true", "tier": "dev"})
        assert not selector.matches({"shared": "true", "tier": "prod"})
        assert not selector.matches({"shared": "true", "legacy": ""})
        assert not selector.matches({})


_counts = st.builds(
    SourceCounts,
    held=st.integers(0, 10**6),
    queued=st.integers(0, 10**6),
    admitted=st.integers(0, 10**6),
    running=st.integers(0, 10**6),
)


@given(slurm=_counts, ray=st.one_of(st.none(), _counts), generation=st.integers(0, 10**9))
def test_status_round_trips(slurm: SourceCounts, ray: SourceCounts | None, generation: int) -> None:
    status = WorkloadMixingStatus.model_validate(
        {
            "observedGeneration": generation,
            "sources": {"slurm": slurm.model_dump(), **({"ray": ray.model_dump()} if ray else {})},
        }
    )
    dumped = status.model_dump(mode="json", exclude_none=True)
    assert WorkloadMixingStatus.model_validate(copy.deepcopy(dumped)) == status
