"""PolledSource: a polled list diffed into the same store and handler events as an informer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from bridge.runtime.handlers import Object
from bridge.runtime.sources import NOT_MODIFIED, Changed, NotModified, PolledSource


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def on_add(self, obj: Object, *, is_initial_list: bool) -> None:
        self.events.append(("add", obj["job_id"], is_initial_list))

    def on_update(self, old: Object, new: Object) -> None:
        self.events.append(("update", new["job_id"], old["state"], new["state"]))

    def on_delete(self, obj: Object) -> None:
        self.events.append(("delete", obj["job_id"], obj["state"]))


def job(job_id: int, state: str) -> Object:
    return {"job_id": job_id, "state": state}


def key(obj: Object) -> str:
    return str(obj["job_id"])


async def eventually(predicate: Callable[[], bool], *, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.005)


def source(results: list[list[Object] | NotModified | Changed | Exception], **kwargs: Any) -> PolledSource:
    pending = list(results)

    async def poll() -> list[Object] | NotModified | Changed:
        item = pending.pop(0) if pending else NOT_MODIFIED
        if isinstance(item, Exception):
            raise item
        return item

    return PolledSource(
        name="slurm-jobs", poll=poll, key=key, interval=kwargs.pop("interval", 3600.0), **kwargs
    )


async def test_diff_deletes_first_then_adds_and_changed_updates() -> None:
    src = source(
        [
            [job(1, "PENDING"), job(2, "PENDING"), job(3, "RUNNING")],
            [job(2, "RUNNING"), job(3, "RUNNING"), job(4, "PENDING")],
            NOT_MODIFIED,
        ]
    )
    rec = Recorder()
    src.add_handler(rec)
    assert not src.has_synced()
    await src.poll_once()
    assert src.has_synced()
    assert rec.events == [("add", 1, True), ("add", 2, True), ("add", 3, True)]
    rec.events.clear()
    await src.poll_once()
    assert rec.events == [("delete", 1, "PENDING"), ("update", 2, "PENDING", "RUNNING"), ("add", 4, False)]
    rec.events.clear()
    await src.poll_once()  # NotModified: nothing
    assert rec.events == []
    assert sorted(src.store.keys()) == ["2", "3", "4"]


async def test_late_handler_gets_existing_objects() -> None:
    src = source([[job(1, "PENDING")]])
    await src.poll_once()
    rec = Recorder()
    src.add_handler(rec)
    assert rec.events == [("add", 1, True)]


async def test_run_backs_off_on_errors_and_trigger_polls_now() -> None:
    delays: list[float] = []

    async def fake_sleep(delay: float) -> None:
        delays.append(delay)
        if delay < 100:
            return
        await asyncio.Event().wait()  # the long interval: only trigger() ends it

    src = source(
        [RuntimeError("slurmrestd down"), OSError("refused"), [job(1, "PENDING")], [job(1, "RUNNING")]],
        sleep=fake_sleep,
    )
    rec = Recorder()
    src.add_handler(rec)
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(src.run())
        await eventually(src.has_synced)
        assert src.failures == 2
        assert 0.8 <= delays[0] <= 1.6
        assert 1.6 <= delays[1] <= 3.2
        src.trigger()
        await eventually(lambda: ("update", 1, "PENDING", "RUNNING") in rec.events)
        task.cancel()
    assert delays[2:] == [3600.0, 3600.0]


async def test_the_wait_after_a_poll_is_the_subclass_delay() -> None:
    """A source may wait less than ``interval`` after a poll (the Slurm job source: what is left until
    its next whole list, after a poll that read one job)."""
    delays: list[float] = []

    async def fake_sleep(delay: float) -> None:
        delays.append(delay)
        await asyncio.Event().wait()

    class Shorter(PolledSource):
        def delay_after_poll(self) -> float:
            return 12.5

    src = Shorter(name="jobs", poll=lambda: asyncio.sleep(0, [job(1, "PENDING")]), key=key,
                  interval=3600.0, sleep=fake_sleep)  # fmt: skip
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(src.run())
        await eventually(lambda: bool(delays))
        task.cancel()
    assert delays == [12.5]


async def test_a_changed_poll_compares_and_stores_only_its_objects() -> None:
    """``Changed``: the objects a poll read alone are stored and delivered (an add, an update, nothing
    for one equal to the stored one); every other stored object stands, none is deleted."""
    src = source([
        [job(1, "PENDING"), job(2, "PENDING"), job(3, "PENDING")],
        Changed([job(2, "RUNNING"), job(3, "PENDING"), job(4, "PENDING")]),
    ])  # fmt: skip
    rec = Recorder()
    src.add_handler(rec)
    await src.poll_once()
    kept = src.store.get("1")
    rec.events.clear()
    await src.poll_once()
    assert rec.events == [("update", 2, "PENDING", "RUNNING"), ("add", 4, False)]
    assert src.store.get("1") is kept
    assert sorted(src.store.keys()) == ["1", "2", "3", "4"]


async def test_a_changed_poll_before_any_list_is_an_error() -> None:
    src = source([Changed([job(1, "PENDING")])])
    with pytest.raises(RuntimeError, match="before any list"):
        await src.poll_once()
