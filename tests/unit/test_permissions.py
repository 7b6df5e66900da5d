"""The bridges' permission tables: what the chart's roles are checked against must itself be sane."""

from __future__ import annotations

import pytest

from bridge.program.permissions import SHELL_RULES, Rule, Scope, grants
from bridge.ray.permissions import RULES as RAY_RULES
from bridge.slurm.permissions import RULES as SLURM_RULES

VERBS = {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}


@pytest.mark.parametrize("rules", [SLURM_RULES, RAY_RULES], ids=["slurm", "ray"])
def test_every_rule_is_explained_and_names_real_verbs_without_wildcards(rules: tuple[Rule, ...]) -> None:
    for rule in rules:
        assert rule.why.strip(), rule
        assert rule.verbs, rule
        assert rule.verbs <= VERBS, rule
        assert "*" not in rule.resource, rule
        assert "*" not in rule.group, rule


@pytest.mark.parametrize("rules", [SLURM_RULES, RAY_RULES], ids=["slurm", "ray"])
def test_each_bridge_has_the_shell_rules_and_one_rule_per_resource_and_scope(rules: tuple[Rule, ...]) -> None:
    assert set(SHELL_RULES) <= set(rules)
    keys = [(r.group, r.resource, r.scope, r.named) for r in rules]
    assert len(keys) == len(set(keys))


def test_secrets_are_granted_by_name_only_and_to_the_slurm_bridge_only() -> None:
    for rules in (SLURM_RULES, RAY_RULES):
        assert all(r.scope is Scope.SECRET and r.named for r in rules if r.resource == "secrets")
    assert ("", "secrets", "get", True) in grants(SLURM_RULES, scope=Scope.SECRET)
    assert not grants(RAY_RULES, scope=Scope.SECRET)


def test_informers_get_list_and_watch_together() -> None:
    for rules in (SLURM_RULES, RAY_RULES):
        for rule in rules:
            assert ("list" in rule.verbs) == ("watch" in rule.verbs), rule
