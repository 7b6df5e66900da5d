"""The API server's audit log, read back: what each user actually asked of the API server.

Why: "the roles grant exactly what the bridge uses" is shown, not claimed, by running the bridges
under their chart's ServiceAccounts with the audit log on (``KubeStack(audit=True)``) and comparing
what each ServiceAccount did with what its roles grant: a call outside them was refused (403), a
grant never exercised is either explained or one too many.

The log is JSON lines of ``audit.k8s.io/v1`` Events at Metadata level
(:data:`bridge.sandbox.kube.AUDIT_POLICY`): one per request and stage; a watch has a
``ResponseStarted`` event when it starts and a ``ResponseComplete`` one when it ends (none yet if it
is still open), so events are merged by ``auditID``. Pure functions: the caller reads the file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "AuditEvent",
    "Call",
    "by_user",
    "calls",
    "forbidden",
    "parse_events",
    "service_account_user",
    "verbs_used",
]

_STAGE_ORDER = {"ResponseStarted": 1, "ResponseComplete": 2, "Panic": 3}


@dataclass(frozen=True, kw_only=True)
class Call:
    """One kind of request: ``verb`` on ``group``/``resource`` (``subresource``) in ``namespace``
    (empty: cluster-scoped or across all namespaces). Non-resource requests (discovery, ``/version``)
    have ``resource`` empty and the path as ``name``."""

    verb: str
    group: str
    resource: str
    subresource: str
    namespace: str
    name: str = ""

    @property
    def full_resource(self) -> str:
        """``resource/subresource`` as RBAC names it (``workloadmixings/status``)."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


@dataclass(frozen=True, kw_only=True)
class AuditEvent:
    """One request as the audit log tells it: who, what, the answer's code and the authoriser's decision."""

    audit_id: str
    stage: str
    user: str
    call: Call
    code: int
    decision: str
    uri: str


def _call(raw: Mapping[str, Any]) -> Call:
    ref = raw.get("objectRef") or {}
    verb = str(raw.get("verb") or "")
    if not ref.get("resource"):
        path = str(raw.get("requestURI") or "").split("?", 1)[0]
        return Call(verb=verb, group="", resource="", subresource="", namespace="", name=path)
    return Call(
        verb=verb,
        group=str(ref.get("apiGroup") or ""),
        resource=str(ref["resource"]),
        subresource=str(ref.get("subresource") or ""),
        namespace=str(ref.get("namespace") or ""),
        name=str(ref.get("name") or ""),
    )


def _event(raw: Mapping[str, Any]) -> AuditEvent:
    return AuditEvent(
        audit_id=str(raw.get("auditID") or ""),
        stage=str(raw.get("stage") or ""),
        user=str((raw.get("user") or {}).get("username") or ""),
        call=_call(raw),
        code=int((raw.get("responseStatus") or {}).get("code") or 0),
        decision=str((raw.get("annotations") or {}).get("authorization.k8s.io/decision") or ""),
        uri=str(raw.get("requestURI") or ""),
    )


def parse_events(lines: Iterable[str]) -> list[AuditEvent]:
    """One :class:`AuditEvent` per request, in the order requests first appear, each at its latest
    stage (a watch still open at its ``ResponseStarted``). Blank lines and a torn last line (the log
    being written) are skipped."""
    latest: dict[str, AuditEvent] = {}
    for line in lines:
        text = line.strip()
        if not text:
            continue
        try:
            raw = json.loads(text)
        except json.JSONDecodeError:
            continue
        if not isinstance(raw, dict) or raw.get("kind") != "Event":
            continue
        event = _event(raw)
        seen = latest.get(event.audit_id)
        if seen is None or _STAGE_ORDER.get(event.stage, 0) >= _STAGE_ORDER.get(seen.stage, 0):
            latest[event.audit_id] = event
    return list(latest.values())


def service_account_user(namespace: str, name: str) -> str:
    """The user name a ServiceAccount's token authenticates as."""
    return f"system:serviceaccount:{namespace}:{name}"


def by_user(events: Iterable[AuditEvent]) -> dict[str, list[AuditEvent]]:
    """The events of each user."""
    grouped: dict[str, list[AuditEvent]] = {}
    for event in events:
        grouped.setdefault(event.user, []).append(event)
    return grouped


def calls(events: Iterable[AuditEvent]) -> set[tuple[str, str, str, str]]:
    """The distinct resource requests as ``(verb, resource, subresource, namespace)``."""
    return {
        (e.call.verb, e.call.resource, e.call.subresource, e.call.namespace)
        for e in events
        if e.call.resource
    }


def verbs_used(events: Iterable[AuditEvent]) -> set[tuple[str, str, str]]:
    """``(group, resource[/subresource], verb)`` of every resource request that was allowed: what a
    role's rules are compared with."""
    return {
        (e.call.group, e.call.full_resource, e.call.verb)
        for e in events
        if e.call.resource and e.decision != "forbid"
    }


def forbidden(events: Iterable[AuditEvent]) -> list[AuditEvent]:
    """The requests the authoriser refused (RBAC's ``forbid``, answered 403). A 403 from admission
    (a namespace being deleted refuses new objects) was authorised, and is not among them."""
    return [e for e in events if e.decision == "forbid"]
