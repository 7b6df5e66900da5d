"""The event recorder writes events.k8s.io/v1 Events and folds repeats into a series."""

from __future__ import annotations

import datetime as dt

from bridge.runtime.client import Client
from bridge.runtime.events import EventRecorder
from tests.fixtures.recording_apiserver import RecordingServer, Seen

JOB = {
    "apiVersion": "jobset.x-k8s.io/v1alpha2",
    "kind": "JobSet",
    "metadata": {"name": "train", "namespace": "team-a", "uid": "u-1", "resourceVersion": "5"},
}


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def recorder(client: Client, clock: Clock) -> EventRecorder:
    fixed = dt.datetime(2025, 5, 1, 10, 0, 0, 123456, tzinfo=dt.UTC)
    return EventRecorder(
        client,
        reporting_controller="bridge.k8s.io/slurm",
        reporting_instance="pod-1",
        clock=clock,
        now=lambda: fixed,
    )


async def test_event_body(server: RecordingServer, client: Client) -> None:
    await recorder(client, Clock()).event(
        JOB, type="Warning", reason="Held", note="no partition fits", action="Admit"
    )
    request = server.requests[0]
    assert (request.method, request.path) == ("POST", "/apis/events.k8s.io/v1/namespaces/team-a/events")
    body = request.body
    assert body["metadata"]["name"].startswith("train.")
    assert body["eventTime"] == "2025-05-01T10:00:00.123456Z"
    assert body["regarding"] == {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "name": "train",
        "namespace": "team-a",
        "uid": "u-1",
        "resourceVersion": "5",
    }
    assert (body["type"], body["reason"], body["note"], body["action"]) == (
        "Warning",
        "Held",
        "no partition fits",
        "Admit",
    )
    assert (body["reportingController"], body["reportingInstance"]) == ("bridge.k8s.io/slurm", "pod-1")


async def test_repeats_become_a_series_within_the_window(server: RecordingServer, client: Client) -> None:
    clock = Clock()
    events = recorder(client, clock)
    for _ in range(3):
        await events.event(JOB, type="Normal", reason="Pinned", note="n", action="Pin")
    clock.now = 400.0  # past the 6 minute window: a fresh Event
    await events.event(JOB, type="Normal", reason="Pinned", note="n", action="Pin")
    assert [r.method for r in server.requests] == ["POST", "PATCH", "PATCH", "POST"]
    assert server.requests[2].body["series"]["count"] == 3
    assert server.requests[1].path.endswith("/events/" + server.requests[0].body["metadata"]["name"])


async def test_failures_are_swallowed(server: RecordingServer, client: Client) -> None:
    def forbidden(seen: Seen) -> tuple[int, object]:
        return 403, {"kind": "Status", "code": 403, "reason": "Forbidden"}

    server.route = forbidden
    assert await recorder(client, Clock()).event(JOB, type="Normal", reason="R", note="n", action="A") is None
