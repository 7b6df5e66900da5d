"""Where a waiting Workload stands in line, from Kueue's visibility API."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any, cast

import pytest

from bridge.admission import WorkloadState
from bridge.runtime.client import Client
from bridge.runtime.errors import ApiError
from bridge.runtime.handlers import Object
from reconcilers.queue_positions import (
    PAGE_LIMIT,
    QueuePosition,
    QueuePositionSource,
    decode_pending,
    parse_pending,
    position_text,
)
from reconcilers.slurm import WAIT_FOR_PLACE, decide
from tests.fixtures.slurm_decisions import job, jobset, kinds, observe, workload


@pytest.mark.parametrize(
    ("place", "text"),
    [
        (1, "1st"), (2, "2nd"), (3, "3rd"), (4, "4th"), (10, "10th"),
        (11, "11th-100th"), (100, "11th-100th"), (101, "101st-1000th"),
        (1000, "101st-1000th"), (1001, "beyond the 1000th"),
    ],
)  # fmt: skip
def test_the_place_is_exact_near_the_head_and_a_range_further_back(place: int, text: str) -> None:
    assert position_text(QueuePosition(in_cluster_queue=place - 1, in_local_queue=0)) == (
        f"{text} in its ClusterQueue"
    )


def test_a_place_changes_its_text_only_a_few_times_over_a_long_wait() -> None:
    """Every admission ahead moves a job up one place; its comment (a write to slurmctld) changes
    only when the text does."""
    texts = [position_text(QueuePosition(in_cluster_queue=p, in_local_queue=p)) for p in range(2000)]
    changes = sum(1 for a, b in itertools.pairwise(texts) if a != b)
    assert changes <= 12


def summary(*items: tuple[str, int, int]) -> dict[str, Any]:
    return {
        "kind": "PendingWorkloadsSummary",
        "items": [
            {"metadata": {"name": n}, "positionInClusterQueue": cq, "positionInLocalQueue": lq, "priority": 0}
            for n, cq, lq in items
        ],
    }


def test_a_summary_is_read_by_workload_name_and_odd_items_are_skipped() -> None:
    body = summary(("a", 0, 0), ("b", 3, 1))
    body["items"].append({"metadata": {}, "positionInClusterQueue": 1})
    body["items"].append("nonsense")
    assert parse_pending(body) == {
        "a": QueuePosition(in_cluster_queue=0, in_local_queue=0),
        "b": QueuePosition(in_cluster_queue=3, in_local_queue=1),
    }


def test_a_summary_decoded_from_its_bytes_reads_as_the_parsed_one() -> None:
    """The typed decode skips every other field of a thousand items; an odd item sends the whole
    answer through ``parse_pending``, which skips it alone; a body that is not JSON is an error."""
    body = summary(*((f"wl-{i}", i, i // 2) for i in range(1000)))
    body["items"][3]["spec"] = {"podSets": [{"count": 1}]}
    assert decode_pending(json.dumps(body).encode()) == parse_pending(body)
    body["items"].append({"metadata": {"name": "odd"}, "positionInClusterQueue": "first"})
    body["items"].append("nonsense")
    decoded = decode_pending(json.dumps(body).encode())
    assert decoded == parse_pending(body)
    assert len(decoded) == 1000
    with pytest.raises(ValueError, match="JSON"):
        decode_pending(b"<html>busy</html>")


class FakeVisibility:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None, str | None]] = []
        self.fail: ApiError | None = None
        self.unserved: ApiError | None = None
        self.body = summary(("wl-a", 4, 2))
        self.bodies: dict[str, dict[str, Any]] = {}

    async def resource(self, api_version: str, kind: str) -> object:
        if self.unserved is not None:
            raise self.unserved
        return object()

    async def get(
        self,
        api_version: str,
        kind: str,
        name: str,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        self.calls.append((f"{api_version}/{kind}/{name}", namespace, subresource))
        await asyncio.sleep(0)
        if self.unserved is not None:
            raise self.unserved
        if self.fail is not None:
            raise self.fail
        return self.bodies.get(name, self.body)

    async def get_decoded(
        self,
        api_version: str,
        kind: str,
        name: str,
        *,
        decode: Callable[[bytes], Any],
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> Any:
        body = await self.get(api_version, kind, name, namespace=namespace, subresource=subresource)
        return decode(json.dumps(body).encode())


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Sleeps:
    """The source's sleep: records what it was asked to wait, advances the clock, never blocks."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.asked: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.asked.append(seconds)
        self.clock.now += seconds


class Events:
    """What a controller watching the source would get."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []

    def on_add(self, obj: Object, *, is_initial_list: bool) -> None:
        self.seen.append(("add", obj["metadata"]["name"], obj["place"]))

    def on_update(self, old: Object, new: Object) -> None:
        self.seen.append(("update", new["metadata"]["name"], new["place"]))

    def on_delete(self, obj: Object) -> None:
        self.seen.append(("delete", obj["metadata"]["name"], obj["place"]))


def source(
    api: FakeVisibility, clock: Clock, queues: list[tuple[str, str]] | None = None, **options: Any
) -> tuple[QueuePositionSource, Events]:
    places = QueuePositionSource(
        client=cast(Client, api),
        queues=lambda: queues if queues is not None else [("hpc", "q")],
        clock=clock,
        sleep=options.pop("sleep", None) or Sleeps(clock),
        **options,
    )
    events = Events()
    places.add_handler(events)
    return places, events


async def test_one_read_per_local_queue_places_every_waiting_workload() -> None:
    api, clock = FakeVisibility(), Clock()
    api.body = summary(("wl-a", 4, 2), ("wl-b", 0, 0))
    places, _ = source(api, clock, [("hpc", "q"), ("hpc", "q")])
    await places.poll_once()
    assert api.calls == [("visibility.kueue.x-k8s.io/v1beta2/localqueues/q", "hpc", "pendingworkloads")]
    assert places.place(namespace="hpc", local_queue="q", workload="wl-a") == "5th in its ClusterQueue"
    assert places.place(namespace="hpc", local_queue="q", workload="wl-b") == "1st in its ClusterQueue"
    # Not pending there: admitted meanwhile, or another queue's.
    assert places.place(namespace="hpc", local_queue="q", workload="wl-c") is None
    assert places.place(namespace="hpc", local_queue="other", workload="wl-a") is None


async def test_only_a_change_of_the_place_shown_is_delivered() -> None:
    """An admission ahead moves every Workload one place: only those whose text moved are told."""
    api, clock = FakeVisibility(), Clock()
    api.body = summary(*((f"wl-{i}", i, i) for i in range(120)))
    places, events = source(api, clock)
    await places.poll_once()
    events.seen.clear()
    api.body = summary(*((f"wl-{i}", i - 1, i - 1) for i in range(1, 120)))  # wl-0 admitted
    await places.poll_once()
    assert ("delete", "wl-0", "1st in its ClusterQueue") in events.seen
    moved = sorted(name for kind, name, _ in events.seen if kind == "update")
    # 2nd..10th become 1st..9th, the 11th becomes 10th, the 101st becomes one of the 11th-100th.
    assert moved == sorted([*(f"wl-{i}" for i in range(1, 11)), "wl-100"])
    assert len(events.seen) == 1 + len(moved)


async def test_a_place_that_reads_the_same_keeps_its_stored_object() -> None:
    """Most of a deep queue's places read the same from one read to the next: those are the stored
    objects again, so the store neither compares nor indexes them anew."""
    api, clock = FakeVisibility(), Clock()
    api.body = summary(*((f"wl-{i}", i, i) for i in range(120)))
    places, _ = source(api, clock)
    await places.poll_once()
    before = {o["metadata"]["name"]: o for o in places.store.list()}
    api.body = summary(*((f"wl-{i}", i - 1, i - 1) for i in range(1, 120)))
    clock.now += 10.0
    await places.poll_once()
    same = [o for o in places.store.list() if before.get(o["metadata"]["name"]) is o]
    assert len(same) == 119 - 11  # all but the ten near the head and wl-100, whose text moved


async def test_an_answer_that_is_not_json_fails_that_queues_read_only() -> None:
    api, clock = FakeVisibility(), Clock()
    places, events = source(api, clock)
    await places.poll_once()
    events.seen.clear()

    async def garbled(*args: Any, decode: Callable[[bytes], Any], **kwargs: Any) -> Any:
        return decode(b"<html>proxy error</html>")

    api.get_decoded = garbled  # type: ignore[method-assign]
    clock.now += 10.0
    await places.poll_once()
    assert events.seen == []
    assert places.place(namespace="hpc", local_queue="q", workload="wl-a") == "5th in its ClusterQueue"


async def test_a_newcomer_is_looked_up_once_soon_and_its_comment_waits_for_it() -> None:
    api, clock = FakeVisibility(), Clock()
    sleeps = Sleeps(clock)
    places, events = source(api, clock, sleep=sleeps)
    await places.poll_once()
    where = {"namespace": "hpc", "local_queue": "q", "workload": "wl-new"}
    assert places.looking_up(**where)
    assert places.looking_up(**where)  # still: no read since it was asked
    api.body = summary(("wl-a", 4, 2), ("wl-new", 5, 3))
    clock.now += 0.2
    await places.poll_once()
    assert sleeps.asked == [pytest.approx(0.8)]  # at most one read per MISSING_AGE
    assert places.place(**where) == "6th in its ClusterQueue"
    assert not places.looking_up(**where)
    assert ("add", "wl-new", "6th in its ClusterQueue") in events.seen


async def test_a_newcomer_the_read_did_not_find_is_not_looked_up_again() -> None:
    """Not listed (not queued in Kueue yet, or just admitted): its comment goes without a place."""
    api, clock = FakeVisibility(), Clock()
    places, _ = source(api, clock)
    where = {"namespace": "hpc", "local_queue": "q", "workload": "wl-gone"}
    assert places.looking_up(**where)
    clock.now += 0.1
    await places.poll_once()
    calls = len(api.calls)
    for _ in range(5):
        clock.now += 2.0
        assert not places.looking_up(**where)
    assert len(api.calls) == calls


async def test_a_cluster_without_the_visibility_api_is_asked_again_only_much_later() -> None:
    api, clock = FakeVisibility(), Clock()
    api.unserved = ApiError(404, "NotFound", "the server could not find the requested resource")
    places, _ = source(api, clock, retry_unserved=300.0)
    await places.poll_once()
    assert places.has_synced()  # the controller waiting on it starts
    assert not places.looking_up(namespace="hpc", local_queue="q", workload="wl-a")
    for _ in range(3):
        clock.now += 50.0
        await places.poll_once()
    assert api.calls == []  # asked once (discovery), then not for 300 s
    api.unserved = None
    clock.now = 301.0
    await places.poll_once()
    assert places.place(namespace="hpc", local_queue="q", workload="wl-a") == "5th in its ClusterQueue"


async def test_forbidden_stops_every_read_and_drops_the_places() -> None:
    api, clock = FakeVisibility(), Clock()
    places, events = source(api, clock, retry_unserved=300.0)
    await places.poll_once()
    api.fail = ApiError(403, "Forbidden", "cannot get resource localqueues/pendingworkloads")
    clock.now += 10.0
    await places.poll_once()
    assert ("delete", "wl-a", "5th in its ClusterQueue") in events.seen
    calls = len(api.calls)
    clock.now += 100.0
    await places.poll_once()
    assert len(api.calls) == calls


def test_the_waiting_comment_leads_with_the_place_and_waits_for_nothing_but_events() -> None:
    pending = replace(
        workload(WorkloadState.PENDING, reason="Pending"),
        message="couldn't assign flavors: insufficient quota, 1 more needed",
    )
    placed = decide(observe(job(), js=jobset(), wl=pending, queue_place="3rd in its ClusterQueue"))
    (comment,) = [a for a in placed.actions if a.kind == "write_comment"]
    assert "queued in Kueue (3rd in its ClusterQueue): Pending: couldn't assign flavors" in str(comment)
    assert placed.requeue_after is None  # the place source delivers the next move
    unplaced = decide(observe(job(), js=jobset(), wl=pending))
    assert kinds(unplaced).count("write_comment") == 1
    assert unplaced.requeue_after is None  # nothing moves without an event on its Workload


def test_a_workload_kueue_has_not_tried_yet_is_commented_with_its_place_alone() -> None:
    """Deep in a busy queue, Kueue's scheduler may not try a Workload for a long while (no condition):
    its place is all there is to say, and it is said; without a place, nothing is."""
    untried = workload(WorkloadState.PENDING)
    placed = decide(
        observe(job(), js=jobset(), wl=untried, queue_place="beyond the 1000th in its ClusterQueue")
    )
    (comment,) = [a for a in placed.actions if a.kind == "write_comment"]
    assert (
        "queued in Kueue (beyond the 1000th in its ClusterQueue): Pending: not tried by Kueue's scheduler yet"
        in str(comment)
    )
    assert "write_comment" not in kinds(decide(observe(job(), js=jobset(), wl=untried)))


def test_the_first_comment_waits_while_the_place_is_read() -> None:
    pending = replace(workload(WorkloadState.PENDING, reason="Pending"), message="insufficient quota")
    looking = decide(observe(job(), js=jobset(), wl=pending, queue_place_pending=True))
    assert "write_comment" not in kinds(looking)
    assert looking.requeue_after == WAIT_FOR_PLACE


async def test_one_local_queue_failing_keeps_the_others_and_its_last_places() -> None:
    """A LocalQueue without a ClusterQueue answers 404, a busy server 429: that queue's read only."""
    api, clock = FakeVisibility(), Clock()
    api.bodies["other"] = summary(("wl-o", 0, 0))
    places, events = source(api, clock, [("hpc", "q"), ("hpc", "other")])
    await places.poll_once()
    events.seen.clear()
    api.fail = ApiError(429, "TooManyRequests", "slow down")
    clock.now += 10.0
    await places.poll_once()
    assert events.seen == []
    assert places.place(namespace="hpc", local_queue="q", workload="wl-a") == "5th in its ClusterQueue"
    assert places.place(namespace="hpc", local_queue="other", workload="wl-o") == "1st in its ClusterQueue"
    # The newcomer's lookup is not over while reads fail: its comment waits for the next good read.
    assert places.looking_up(namespace="hpc", local_queue="q", workload="wl-b")
    clock.now += 1.0
    await places.poll_once()
    assert places.looking_up(namespace="hpc", local_queue="q", workload="wl-b")
    api.fail = None
    clock.now += 1.0
    await places.poll_once()
    assert not places.looking_up(namespace="hpc", local_queue="q", workload="wl-b")


async def test_a_workload_missing_from_a_full_list_stands_beyond_it() -> None:
    api, clock = FakeVisibility(), Clock()
    api.body = summary(*((f"wl-{i}", i, i) for i in range(PAGE_LIMIT)))
    places, _ = source(api, clock)
    await places.poll_once()
    where = {"namespace": "hpc", "local_queue": "q", "workload": "wl-far"}
    assert places.place(**where) == "beyond the 1000th in its ClusterQueue"
    assert not places.looking_up(**where)
    api.body = summary(("wl-0", 0, 0))
    clock.now += 10.0
    await places.poll_once()
    assert places.place(**where) is None


async def test_a_queue_no_jobset_uses_any_more_is_forgotten() -> None:
    api, clock = FakeVisibility(), Clock()
    queues = [("hpc", "q")]
    places, events = source(api, clock, queues)
    await places.poll_once()
    queues.clear()
    clock.now += 10.0
    await places.poll_once()
    assert events.seen[-1] == ("delete", "wl-a", "5th in its ClusterQueue")
    assert len(api.calls) == 1
