"""Status helpers: references, reference checks and the Ready/Degraded conditions they give."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from bridge.api import (
    Inventory,
    Problem,
    Reason,
    WorkloadMixing,
    WorkloadMixingSpec,
    build_status,
    check_references,
    compute_conditions,
    references,
    validation_problems,
)
from bridge.api.mixing import SourceCounts
from tests.fixtures.mixing import example_mixing, ray_spec, slurm_spec, target

T0 = datetime(2026, 1, 1, tzinfo=UTC)
T1 = T0 + timedelta(minutes=5)


def _example_spec() -> WorkloadMixingSpec:
    return WorkloadMixing.model_validate(example_mixing()).spec


def _complete_inventory() -> Inventory:
    return Inventory(
        local_queues=frozenset({("slurm", "hpc")}),
        priority_classes=frozenset({"high", "normal", "low"}),
        topology_levels=frozenset({"example.com/rack"}),
        secrets={("slurm", "slurm-jwt"): frozenset({"token"})},
    )


class TestReferences:
    def test_example(self) -> None:
        refs = {(r.kind, r.namespace, r.name, r.field) for r in references(_example_spec())}
        assert ("SecretKey", "slurm", "slurm-jwt", "spec.slurm.auth.tokenSecretRef") in refs
        assert ("LocalQueue", "slurm", "hpc", "spec.slurm.mapping.rules[0].target.localQueue") in refs
        assert (
            "WorkloadPriorityClass",
            None,
            "low",
            "spec.slurm.mapping.rules[1].target.priorityClass",
        ) in refs
        assert ("TopologyLevel", None, "example.com/rack", "spec.slurm.topology.switches.preferred") in refs
        # Ray's default has no namespace: its LocalQueue is per RayJob namespace, not checkable here.
        assert not any(r.kind == "LocalQueue" and "spec.ray" in r.field for r in references(_example_spec()))
        assert ("WorkloadPriorityClass", None, "normal", "spec.ray.mapping.default.priorityClass") in refs

    def test_ray_target_with_namespace_is_listed(self) -> None:
        spec = WorkloadMixingSpec.model_validate(
            {"ray": ray_spec(mapping={"default": target("q", namespace="ns")})}
        )
        assert [(r.kind, r.namespace, r.name) for r in references(spec)] == [("LocalQueue", "ns", "q")]


class TestCheckReferences:
    def test_all_present(self) -> None:
        assert check_references(_example_spec(), inventory=_complete_inventory()) == []

    def test_missing_local_queue_reported_once_at_first_mention(self) -> None:
        inventory = Inventory(
            priority_classes=frozenset({"high", "normal", "low"}),
            topology_levels=frozenset({"example.com/rack"}),
            secrets={("slurm", "slurm-jwt"): frozenset({"token"})},
        )
        (problem,) = check_references(_example_spec(), inventory=inventory)
        assert problem.reason is Reason.LOCAL_QUEUE_NOT_FOUND
        assert problem.field == "spec.slurm.mapping.rules[0].target.localQueue"
        assert "slurm/hpc" in problem.message

    @pytest.mark.parametrize(
        ("secrets", "unreadable", "reason"),
        [
            ({}, frozenset(), Reason.SECRET_NOT_FOUND),
            ({("slurm", "slurm-jwt"): frozenset({"other"})}, frozenset(), Reason.SECRET_KEY_NOT_FOUND),
            ({}, frozenset({("slurm", "slurm-jwt")}), Reason.SECRET_UNREADABLE),
        ],
    )
    def test_secret(
        self,
        secrets: dict[tuple[str, str], frozenset[str]],
        unreadable: frozenset[tuple[str, str]],
        reason: Reason,
    ) -> None:
        full = _complete_inventory()
        inventory = Inventory(
            local_queues=full.local_queues,
            priority_classes=full.priority_classes,
            topology_levels=full.topology_levels,
            secrets=secrets,
            unreadable_secrets=unreadable,
        )
        (problem,) = check_references(_example_spec(), inventory=inventory)
        assert problem.reason is reason
        assert problem.field == "spec.slurm.auth.tokenSecretRef"

    def test_missing_priority_class_and_topology(self) -> None:
        full = _complete_inventory()
        inventory = Inventory(
            local_queues=full.local_queues,
            secrets=full.secrets,
            priority_classes=frozenset({"high", "normal"}),
        )
        reasons = [p.reason for p in check_references(_example_spec(), inventory=inventory)]
        assert reasons == [Reason.PRIORITY_CLASS_NOT_FOUND, Reason.TOPOLOGY_LEVEL_NOT_FOUND]


def _problem(reason: Reason, *, blocking: bool = True, field: str = "spec.x") -> Problem:
    return Problem(field=field, reason=reason, message=str(reason), blocking=blocking)


class TestConditions:
    def test_ready(self) -> None:
        ready, degraded = compute_conditions(generation=3, problems=[], previous=[], now=T0)
        assert (ready.type, ready.status, ready.reason, ready.observed_generation) == (
            "Ready",
            "True",
            "ConfigurationValid",
            3,
        )
        assert (degraded.type, degraded.status, degraded.reason) == ("Degraded", "False", "AsExpected")
        assert ready.last_transition_time == T0

    def test_first_blocking_problem_gives_the_reason(self) -> None:
        problems = [_problem(Reason.LOCAL_QUEUE_NOT_FOUND, field="spec.a"), _problem(Reason.SECRET_NOT_FOUND)]
        ready, degraded = compute_conditions(generation=1, problems=problems, previous=[], now=T0)
        assert (ready.status, ready.reason) == ("False", "LocalQueueNotFound")
        assert ready.message.startswith("spec.a: ")
        assert degraded.status == "False"

    def test_transition_time_moves_only_on_status_change(self) -> None:
        first = compute_conditions(
            generation=1, problems=[_problem(Reason.SECRET_NOT_FOUND)], previous=[], now=T0
        )
        still = compute_conditions(
            generation=2, problems=[_problem(Reason.LOCAL_QUEUE_NOT_FOUND)], previous=first, now=T1
        )
        assert still[0].last_transition_time == T0
        assert still[0].reason == "LocalQueueNotFound"
        fixed = compute_conditions(generation=2, problems=[], previous=still, now=T1)
        assert (fixed[0].status, fixed[0].last_transition_time) == ("True", T1)
        assert fixed[1].last_transition_time == T0  # Degraded stayed False

    def test_last_good_configuration(self) -> None:
        _, degraded = compute_conditions(
            generation=5,
            problems=[_problem(Reason.INVALID_SPEC)],
            previous=[],
            now=T0,
            last_good_generation=4,
        )
        assert (degraded.status, degraded.reason) == ("True", "LastGoodConfigurationInUse")
        assert "generation 4" in degraded.message

    def test_non_blocking_problem_degrades_but_stays_ready(self) -> None:
        problem = _problem(Reason.SLURM_UNREACHABLE, blocking=False)
        ready, degraded = compute_conditions(generation=1, problems=[problem], previous=[], now=T0)
        assert (ready.status, degraded.status, degraded.reason) == ("True", "True", "SlurmUnreachable")

    def test_long_problem_lists_are_summarised(self) -> None:
        problems = [_problem(Reason.LOCAL_QUEUE_NOT_FOUND, field=f"spec.f{i}") for i in range(8)]
        ready, _ = compute_conditions(generation=1, problems=problems, previous=[], now=T0)
        assert ready.message.endswith("; and 3 more")


class TestBuildStatus:
    def test_counts_only_for_configured_sources(self) -> None:
        spec = WorkloadMixingSpec.model_validate({"slurm": slurm_spec()})
        status = build_status(
            spec=spec,
            generation=2,
            problems=[],
            previous=None,
            now=T0,
            counts={"slurm": SourceCounts(held=1, queued=2, admitted=3, running=4)},
        )
        dumped = status.model_dump(mode="json", by_alias=True, exclude_none=True)
        assert dumped["observedGeneration"] == 2
        assert dumped["sources"] == {"slurm": {"held": 1, "queued": 2, "admitted": 3, "running": 4}}
        assert [c["type"] for c in dumped["conditions"]] == ["Ready", "Degraded"]
        assert dumped["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"

    def test_status_keeps_previous_transition_times(self) -> None:
        spec = WorkloadMixingSpec.model_validate({"ray": ray_spec()})
        first = build_status(spec=spec, generation=1, problems=[], previous=None, now=T0)
        again = build_status(spec=spec, generation=2, problems=[], previous=first, now=T1)
        assert [c.last_transition_time for c in again.conditions] == [T0, T0]
        assert again.sources.ray == SourceCounts()
        assert again.sources.slurm is None


def test_validation_problems_name_the_field() -> None:
    document: dict[str, Any] = {"slurm": slurm_spec(partitions=[], url="ftp://x")}
    with pytest.raises(ValidationError) as caught:
        WorkloadMixingSpec.model_validate(document)
    problems = validation_problems(caught.value, root="spec")
    assert {p.field for p in problems} == {"spec.slurm.partitions", "spec.slurm.url"}
    assert all(p.reason is Reason.INVALID_SPEC and p.blocking for p in problems)
