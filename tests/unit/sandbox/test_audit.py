"""Reading the API server's audit log: one event per request at its latest stage, calls per user,
what was used, what the authoriser refused."""

import json
from typing import Any

from bridge.sandbox.audit import by_user, calls, forbidden, parse_events, service_account_user, verbs_used

SLURM = service_account_user("k8s-bridge", "k8s-bridge-slurm")


def event(
    audit_id: str,
    *,
    verb: str,
    resource: str = "",
    group: str = "",
    namespace: str = "",
    subresource: str = "",
    name: str = "",
    stage: str = "ResponseComplete",
    code: int = 200,
    decision: str = "allow",
    user: str = SLURM,
    uri: str = "/apis/x",
) -> str:
    raw: dict[str, Any] = {
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "level": "Metadata",
        "auditID": audit_id,
        "stage": stage,
        "requestURI": uri,
        "verb": verb,
        "user": {"username": user, "groups": ["system:serviceaccounts"]},
        "responseStatus": {"metadata": {}, "code": code},
        "annotations": {"authorization.k8s.io/decision": decision},
    }
    if resource:
        ref = {"resource": resource, "apiGroup": group, "namespace": namespace, "name": name}
        if subresource:
            ref["subresource"] = subresource
        raw["objectRef"] = {k: v for k, v in ref.items() if v}
    return json.dumps(raw)


def test_a_watch_is_one_request_at_its_latest_stage_and_torn_lines_are_skipped() -> None:
    lines = [
        event("w1", verb="watch", resource="pods", stage="ResponseStarted"),
        "",
        event("g1", verb="get", resource="jobsets", group="jobset.x-k8s.io", namespace="slurm", name="j"),
        event("w1", verb="watch", resource="pods", stage="ResponseComplete"),
        event("w2", verb="watch", resource="jobs", group="batch", stage="ResponseStarted"),
        '{"kind": "Event", "auditID": "torn',
    ]
    events = parse_events(lines)
    assert [(e.audit_id, e.stage) for e in events] == [
        ("w1", "ResponseComplete"),
        ("g1", "ResponseComplete"),
        ("w2", "ResponseStarted"),
    ]
    assert events[1].call.name == "j"


def test_calls_are_grouped_by_user_as_verb_resource_subresource_namespace() -> None:
    lines = [
        event(
            "1", verb="update", resource="workloadmixings", group="bridge.k8s-bridge.io", subresource="status"
        ),
        event("2", verb="create", resource="events", group="events.k8s.io", namespace="slurm"),
        event("3", verb="create", resource="events", group="events.k8s.io", namespace="slurm"),
        event("4", verb="get", resource="pods", user="system:kube-scheduler"),
        event("5", verb="get", uri="/apis?timeout=32s"),
    ]
    users = by_user(parse_events(lines))
    assert set(users) == {SLURM, "system:kube-scheduler"}
    assert calls(users[SLURM]) == {
        ("update", "workloadmixings", "status", ""),
        ("create", "events", "", "slurm"),
    }
    # Discovery is a non-resource request: named by its path, never compared with resource rules.
    (discovery,) = [e for e in users[SLURM] if not e.call.resource]
    assert discovery.call.name == "/apis"
    assert verbs_used(users[SLURM]) == {
        ("bridge.k8s-bridge.io", "workloadmixings/status", "update"),
        ("events.k8s.io", "events", "create"),
    }


def test_only_the_authorisers_refusals_are_forbidden_and_they_are_not_used_grants() -> None:
    lines = [
        event("1", verb="list", resource="secrets", namespace="slurm", code=403, decision="forbid"),
        # Authorised, refused by admission (the namespace is being deleted): a grant that was used.
        event("2", verb="create", resource="events", group="events.k8s.io", namespace="gone", code=403),
        event("3", verb="get", resource="secrets", namespace="slurm", name="jwt"),
    ]
    events = parse_events(lines)
    assert [e.audit_id for e in forbidden(events)] == ["1"]
    assert verbs_used(events) == {("events.k8s.io", "events", "create"), ("", "secrets", "get")}
