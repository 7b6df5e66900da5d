"""What a bridge asks of the API server, as RBAC rules: the one list its chart roles are held to.

Why a table in the code: "exactly the verbs the bridge uses" is a claim about the code, so it is
written next to the code, one rule per (API group, resource) with the reason it is needed, and the
Helm chart's roles (``charts/k8s-bridge/templates/*/rbac.yaml``, each rule commented) are checked
against it by ``tests/integration/test_chart.py``: a verb granted and not listed here, or listed and
not granted, fails that test. Whoever adds an API call adds its rule here, and the test then names
the chart rule to add. (What the bridges really did, seen in an API server audit log of a real
install, is the stronger proof; this table is what such a comparison reads.)

Where a rule applies (:class:`Scope`):

- ``CLUSTER``: a ClusterRole. Informers watch every namespace (RayJobs and JobSets may live
  anywhere a LocalQueue does), and Events go to the namespace of what they are about;
- ``LEASE``: a Role in the leader-election namespace (the release's); ``named`` rules are
  restricted to the Lease's name (``create`` cannot be: the name is not known before it exists);
- ``SECRET``: a Role in the namespace of the Secret a WorkloadMixing names, restricted to its name
  (a list or watch with a ``metadata.name`` field selector is authorised against ``resourceNames``).

What the tables cover is the controller (``run``): ``explain`` is an operator's command, run with the
operator's credentials, and reads more (``get`` on the WorkloadMixing, lists per namespace).

:data:`SHELL_RULES` are what :mod:`bridge.program.shell` needs for every bridge (the WorkloadMixing
controller, leader election, Events); each bridge adds its own (``bridge.<name>.permissions``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["SHELL_RULES", "Rule", "Scope", "grants"]


class Scope(enum.StrEnum):
    CLUSTER = "cluster"
    LEASE = "lease"
    SECRET = "secret"  # noqa: S105 - a scope's name, not a password


@dataclass(frozen=True, kw_only=True)
class Rule:
    """One RBAC rule: ``verbs`` on ``resource`` (``"pods"``, ``"workloadmixings/status"``) of ``group``."""

    group: str
    resource: str
    verbs: frozenset[str]
    why: str
    scope: Scope = Scope.CLUSTER
    named: bool = False
    """Restricted by ``resourceNames`` to the one object the bridge is configured with."""


def _rule(
    group: str, resource: str, verbs: str, why: str, *, scope: Scope = Scope.CLUSTER, named: bool = False
) -> Rule:
    verb_set = frozenset(verbs.split())
    return Rule(group=group, resource=resource, verbs=verb_set, why=why, scope=scope, named=named)


SHELL_RULES: tuple[Rule, ...] = (
    _rule(
        "bridge.k8s-bridge.io", "workloadmixings", "list watch",
        "the WorkloadMixing informer (mixing controller; with --no-mixing-controller, one object by field "
        "selector)",
    ),
    _rule(
        "bridge.k8s-bridge.io", "workloadmixings/status", "update",
        "the mixing controller writes Ready/Degraded and the counts (a PUT of the status subresource)",
    ),
    _rule(
        "kueue.x-k8s.io", "localqueues", "list watch",
        "the mixing controller checks that mapping targets exist (the Ray webhook reads the same cache)",
    ),
    _rule("kueue.x-k8s.io", "workloadpriorityclasses", "list watch", "the mixing controller checks them"),
    _rule("kueue.x-k8s.io", "topologies", "list watch", "the mixing controller checks topology levels"),
    _rule(
        "events.k8s.io", "events", "create patch",
        "Events on WorkloadMixings (namespace default) and on bridged objects (their namespace); a "
        "repeat patches the series count",
    ),
    _rule(
        "coordination.k8s.io", "leases", "create",
        "leader election: the Lease, the first time (create cannot be limited to a name)", scope=Scope.LEASE,
    ),
    _rule(
        "coordination.k8s.io", "leases", "get update",
        "leader election: read, renew and release the one Lease", scope=Scope.LEASE, named=True,
    ),
)  # fmt: skip


def grants(rules: Iterable[Rule], *, scope: Scope) -> frozenset[tuple[str, str, str, bool]]:
    """``(group, resource, verb, named)`` for every verb of ``rules`` in ``scope``: what a role must grant."""
    return frozenset(
        (rule.group, rule.resource, verb, rule.named)
        for rule in rules
        if rule.scope is scope
        for verb in rule.verbs
    )
