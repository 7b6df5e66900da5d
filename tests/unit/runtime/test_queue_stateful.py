"""Property-based, stateful: the work queue against a model of client-go's semantics.

Hypothesis drives random sequences of add / add_after / add_rate_limited / get / done / forget /
shutdown / clock advances against a real ``WorkQueue`` (on a fake clock, using the synchronous
``get_nowait``) and a plain-Python model, and checks after every step that both agree and that the
invariants hold: no key is handed out twice at once, a key waits at most once, nothing is lost, a key
dirtied while processing comes back on ``done``, the earliest delay wins, shutdown drops delayed keys
and ignores adds but still hands out what is queued.
"""

from __future__ import annotations

import asyncio

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from bridge.runtime.queue import WorkQueue
from bridge.runtime.ratelimit import ItemExponentialFailureRateLimiter

KEYS = st.sampled_from(["a", "b", "c", "d", "e"])
DELAYS = st.sampled_from([-1.0, 0.0, 0.25, 0.5, 1.0, 2.0, 3.0])


class FakeClock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


class WorkQueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.limiter = ItemExponentialFailureRateLimiter(base=0.25, maximum=2.0)
        self.queue: WorkQueue[str] = WorkQueue(clock=self.clock, rate_limiter=self.limiter)
        # The model.
        self.ready: list[str] = []
        self.dirty: set[str] = set()
        self.processing: set[str] = set()
        self.waiting: dict[str, tuple[float, int]] = {}  # key -> (due, push order)
        self.pushes = 0
        self.failures: dict[str, int] = {}
        self.shut = False
        self.handed_out: list[str] = []

    # -- the model's operations --

    def model_add(self, key: str) -> None:
        if self.shut or key in self.dirty:
            return
        self.dirty.add(key)
        if key not in self.processing:
            self.ready.append(key)

    def model_add_after(self, key: str, delay: float) -> None:
        if self.shut:
            return
        if delay <= 0:
            self.model_add(key)
            return
        due = self.clock.now + delay
        known = self.waiting.get(key)
        if known is None or due < known[0]:
            self.pushes += 1
            self.waiting[key] = (due, self.pushes)

    def model_promote(self) -> None:
        due = sorted((v, k) for k, v in self.waiting.items() if v[0] <= self.clock.now)
        for _, key in due:
            del self.waiting[key]
            self.model_add(key)

    # -- rules --

    @rule(key=KEYS)
    def add(self, key: str) -> None:
        self.queue.add(key)
        self.model_add(key)

    @rule(key=KEYS, delay=DELAYS)
    def add_after(self, key: str, delay: float) -> None:
        self.queue.add_after(key, delay)
        self.model_add_after(key, delay)

    @rule(key=KEYS)
    def add_rate_limited(self, key: str) -> None:
        self.queue.add_rate_limited(key)
        if not self.shut:
            n = self.failures.get(key, 0)
            self.failures[key] = n + 1
            self.model_add_after(key, min(2.0, 0.25 * 2**n))

    @rule(key=KEYS)
    def forget(self, key: str) -> None:
        self.queue.forget(key)
        self.failures.pop(key, None)

    @rule(dt=st.sampled_from([0.1, 0.25, 0.5, 1.0, 5.0]))
    def advance(self, dt: float) -> None:
        self.clock.now += dt

    @rule()
    def get(self) -> None:
        self.model_promote()
        if not self.ready:
            try:
                key = self.queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            raise AssertionError(f"queue handed out {key!r}, the model has nothing ready")
        key = self.queue.get_nowait()
        expected = self.ready.pop(0)
        assert key == expected, "FIFO order (and the earliest-due order of delayed keys) is kept"
        assert key not in self.processing, "a key is never handed to two workers at once"
        self.dirty.discard(key)
        self.processing.add(key)
        self.handed_out.append(key)

    @precondition(lambda self: bool(self.processing))
    @rule(data=st.data())
    def done(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.processing)))
        self.queue.done(key)
        self.processing.discard(key)
        if key in self.dirty:
            self.ready.append(key)  # dirtied while processing: queued again on done

    @rule()
    def shutdown(self) -> None:
        self.queue.shutdown()
        self.shut = True
        self.waiting.clear()

    # -- invariants --

    @invariant()
    def lengths_agree(self) -> None:
        assert len(self.queue) == len(self.ready)
        assert self.queue.stats().depth == len(self.ready)

    @invariant()
    def model_is_consistent(self) -> None:
        assert len(set(self.ready)) == len(self.ready), "a key waits at most once"
        assert set(self.ready) <= self.dirty
        # Nothing is lost: every dirty key is either queued, or being processed (queued on done).
        assert self.dirty <= set(self.ready) | self.processing

    @invariant()
    def requeues_agree(self) -> None:
        for key in "abcde":
            assert self.queue.num_requeues(key) == self.failures.get(key, 0)


TestWorkQueueStateful = WorkQueueMachine.TestCase
TestWorkQueueStateful.settings = settings(max_examples=300, stateful_step_count=60, deadline=None)
