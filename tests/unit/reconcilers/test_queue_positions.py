"""Where a waiting Workload stands in line, from Kueue's visibility API."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import replace
from typing import Any, cast

import pytest

from bridge.admission import WorkloadState
from bridge.runtime.client import Client
from bridge.runtime.errors import ApiError
from reconcilers.queue_positions import (
    PAGE_LIMIT,
    QueuePosition,
    QueuePositions,
    parse_pending,
    position_text,
)
from reconcilers.slurm import WAIT_FOR_POSITION, decide
from tests.fixtures.slurm_decisions import job, jobset, kinds, observe, workload


@pytest.mark.parametrize(
    ("place", "text"),
    [
        (1, "1st"), (2, "2nd"), (3, "3rd"), (4, "4th"), (10, "10th"),
        (11, "11th-20th"), (20, "11th-20th"), (21, "21st-50th"), (101, "101st-200th"),
        (1000, "501st-1000th"), (1001, "beyond the 1000th"),
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
    assert changes <= 20


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


class FakeVisibility:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None, str | None]] = []
        self.fail: ApiError | None = None
        self.unserved: ApiError | None = None
        self.body = summary(("wl-a", 4, 2))

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
        if self.fail is not None:
            raise self.fail
        return self.body


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_one_read_per_local_queue_serves_every_waiting_job_until_it_is_old() -> None:
    api, clock = FakeVisibility(), Clock()
    positions = QueuePositions(client=cast(Client, api), max_age=10.0, clock=clock)
    got = await asyncio.gather(
        *(positions.position(namespace="hpc", local_queue="q", workload=w) for w in ("wl-a", "wl-b") * 5)
    )
    assert api.calls == [("visibility.kueue.x-k8s.io/v1beta2/localqueues/q", "hpc", "pendingworkloads")]
    assert got[0] == QueuePosition(in_cluster_queue=4, in_local_queue=2)
    assert got[1] is None  # not pending there (admitted meanwhile, or another queue's)
    clock.now = 0.9
    await positions.position(namespace="hpc", local_queue="q", workload="wl-b")
    assert len(api.calls) == 1
    clock.now = 10.0
    await positions.position(namespace="hpc", local_queue="q", workload="wl-a")
    assert len(api.calls) == 2


async def test_a_workload_missing_from_the_list_has_it_read_again_after_a_second() -> None:
    """The list was read for another job just before this Workload joined the queue."""
    api, clock = FakeVisibility(), Clock()
    positions = QueuePositions(client=cast(Client, api), max_age=10.0, clock=clock)
    assert await positions.position(namespace="hpc", local_queue="q", workload="wl-new") is None
    api.body = summary(("wl-a", 4, 2), ("wl-new", 5, 3))
    clock.now = 1.0
    assert await positions.position(namespace="hpc", local_queue="q", workload="wl-new") == QueuePosition(
        in_cluster_queue=5, in_local_queue=3
    )
    assert len(api.calls) == 2


async def test_a_cluster_without_the_visibility_api_is_asked_again_only_much_later() -> None:
    api, clock = FakeVisibility(), Clock()
    api.unserved = ApiError(404, "NotFound", "the server could not find the requested resource")
    positions = QueuePositions(client=cast(Client, api), retry_unserved=300.0, clock=clock)
    for queue in ("q", "q", "other"):
        assert await positions.position(namespace="hpc", local_queue=queue, workload="wl-a") is None
    assert api.calls == []  # asked once (discovery), then not for 300 s
    api.unserved = None
    clock.now = 301.0
    assert await positions.position(namespace="hpc", local_queue="q", workload="wl-a") is not None


def test_the_waiting_comment_leads_with_the_place_and_the_job_is_looked_at_again() -> None:
    pending = replace(
        workload(WorkloadState.PENDING, reason="Pending"),
        message="couldn't assign flavors: insufficient quota, 1 more needed",
    )
    placed = decide(
        observe(
            job(), js=jobset(), wl=pending, queue_position=QueuePosition(in_cluster_queue=2, in_local_queue=0)
        )
    )
    (comment,) = [a for a in placed.actions if a.kind == "write_comment"]
    assert "queued in Kueue (3rd in its ClusterQueue): Pending: couldn't assign flavors" in str(comment)
    assert placed.requeue_after == WAIT_FOR_POSITION
    unplaced = decide(observe(job(), js=jobset(), wl=pending))
    assert kinds(unplaced).count("write_comment") == 1
    assert unplaced.requeue_after is None  # nothing moves without an event on its Workload


async def test_one_local_queue_failing_keeps_the_others_and_its_last_positions() -> None:
    """A LocalQueue without a ClusterQueue answers 404, a busy server 429: that queue's read only."""
    api, clock = FakeVisibility(), Clock()
    positions = QueuePositions(client=cast(Client, api), max_age=10.0, clock=clock)
    first = await positions.position(namespace="hpc", local_queue="q", workload="wl-a")
    assert first is not None
    api.fail = ApiError(429, "TooManyRequests", "slow down")
    clock.now = 10.0
    assert await positions.position(namespace="hpc", local_queue="q", workload="wl-a") == first
    assert await positions.position(namespace="hpc", local_queue="other", workload="wl-a") is None
    api.fail = None
    clock.now = 15.0  # a queue whose read failed is not read again each second for a newcomer
    assert await positions.position(namespace="hpc", local_queue="other", workload="wl-b") is None
    assert len(api.calls) == 3
    clock.now = 20.0
    assert await positions.position(namespace="hpc", local_queue="other", workload="wl-a") == first


async def test_a_workload_missing_from_a_full_list_stands_beyond_it_without_a_read_each_second() -> None:
    api, clock = FakeVisibility(), Clock()
    api.body = summary(*((f"wl-{i}", i, i) for i in range(PAGE_LIMIT)))
    positions = QueuePositions(client=cast(Client, api), clock=clock)
    for step in range(5):
        clock.now = float(step) * 2
        far = await positions.position(namespace="hpc", local_queue="q", workload="wl-far")
        assert far is not None
        assert position_text(far) == "beyond the 1000th in its ClusterQueue"
    assert len(api.calls) == 1
