"""Property-based, stateful: the work queue against a model of its semantics, priorities included.

Hypothesis drives random sequences of add / add_after / add_rate_limited (each with a priority) /
get / done / forget / shutdown / clock advances against a real ``WorkQueue`` (on a fake clock, using
the synchronous ``get_nowait_with_priority``) and a plain-Python model that says which key comes
next, and checks after every step that both agree and that the invariants hold:

- client-go's semantics: no key is handed out twice at once, a key waits at most once, nothing is
  lost, a key dirtied while processing comes back on ``done``, the earliest delay wins, shutdown drops
  delayed keys (queueing the due ones) and ignores adds but still hands out what is queued;
- controller-runtime's priorities: the highest priority with a ready key goes first, FIFO within a
  priority in the order keys became ready (a delay falling due counts at its due time: every
  operation first moves what fell due); a key added again is upgraded, never downgraded, and an
  upgraded key joins the back of its new line; a delayed key keeps its earliest time and its highest
  priority; a key comes back from ``done`` at the highest priority it was added with meanwhile.
"""

from __future__ import annotations

import asyncio

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from bridge.runtime.queue import LOW_PRIORITY, WorkQueue
from bridge.runtime.ratelimit import ItemExponentialFailureRateLimiter

KEYS = st.sampled_from(["a", "b", "c", "d"])
DELAYS = st.sampled_from([-1.0, 0.0, 0.25, 0.5, 1.0, 2.0, 3.0])
PRIORITIES = st.sampled_from([LOW_PRIORITY, LOW_PRIORITY, 0, 0, 0, 7])


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
        self.lines: dict[int, list[str]] = {}  # priority -> ready keys, first out first
        self.dirty: dict[str, int] = {}  # key -> its priority
        self.processing: dict[str, int] = {}  # key -> the priority it was handed out with
        self.waiting: dict[str, tuple[float, int, int]] = {}  # key -> (due, push order, priority)
        self.pushes = 0
        self.failures: dict[str, int] = {}
        self.shut = False

    # -- the model's operations --

    def model_promote(self) -> None:
        """Every operation first makes the delayed keys that are due ready, earliest first."""
        due = sorted((v, k) for k, v in self.waiting.items() if v[0] <= self.clock.now)
        for (_, _, priority), key in due:
            del self.waiting[key]
            self.model_ready(key, priority)

    def model_ready(self, key: str, priority: int) -> None:
        if key in self.dirty:
            if priority > self.dirty[key]:
                if key not in self.processing:
                    self.lines[self.dirty[key]].remove(key)
                    self.lines.setdefault(priority, []).append(key)  # the back of its new line
                self.dirty[key] = priority
            return
        self.dirty[key] = priority
        if key not in self.processing:
            self.lines.setdefault(priority, []).append(key)

    def model_add(self, key: str, priority: int) -> None:
        if self.shut:
            return
        self.model_promote()
        self.model_ready(key, priority)

    def model_add_after(self, key: str, delay: float, priority: int) -> None:
        if self.shut:
            return
        if delay <= 0:
            self.model_add(key, priority)
            return
        due = self.clock.now + delay
        known = self.waiting.get(key)
        if known is not None:
            if known[0] <= due:
                self.waiting[key] = (known[0], known[1], max(priority, known[2]))
                return
            priority = max(priority, known[2])
        self.pushes += 1
        self.waiting[key] = (due, self.pushes, priority)

    def model_next(self) -> tuple[str, int] | None:
        for priority in sorted(self.lines, reverse=True):
            if self.lines[priority]:
                return self.lines[priority][0], priority
        return None

    # -- rules --

    @rule(key=KEYS, priority=PRIORITIES)
    def add(self, key: str, priority: int) -> None:
        self.queue.add(key, priority=priority)
        self.model_add(key, priority)

    @rule(key=KEYS)
    def add_default_priority(self, key: str) -> None:
        self.queue.add(key)
        self.model_add(key, 0)

    @rule(key=KEYS, delay=DELAYS, priority=PRIORITIES)
    def add_after(self, key: str, delay: float, priority: int) -> None:
        self.queue.add_after(key, delay, priority=priority)
        self.model_add_after(key, delay, priority)

    @rule(key=KEYS, priority=PRIORITIES)
    def add_rate_limited(self, key: str, priority: int) -> None:
        self.queue.add_rate_limited(key, priority=priority)
        if not self.shut:
            n = self.failures.get(key, 0)
            self.failures[key] = n + 1
            self.model_add_after(key, min(2.0, 0.25 * 2**n), priority)

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
        expected = self.model_next()
        if expected is None:
            try:
                got = self.queue.get_nowait_with_priority()
            except asyncio.QueueEmpty:
                return
            raise AssertionError(f"queue handed out {got!r}, the model has nothing ready")
        got = self.queue.get_nowait_with_priority()
        assert got == expected, "the highest priority first; within one, the order keys became ready"
        key, priority = got
        assert key not in self.processing, "a key is never handed to two workers at once"
        self.lines[priority].pop(0)
        del self.dirty[key]
        self.processing[key] = priority

    @precondition(lambda self: bool(self.processing))
    @rule(data=st.data())
    def done(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.processing)))
        self.queue.done(key)
        self.model_promote()  # while the key still counts as processing
        del self.processing[key]
        if key in self.dirty:  # dirtied while processing: queued again at its (highest) priority
            self.lines.setdefault(self.dirty[key], []).append(key)

    @rule(key=KEYS)
    def done_unknown_key_is_ignored(self, key: str) -> None:
        if key not in self.processing:
            self.queue.done(key)

    @rule()
    def shutdown(self) -> None:
        self.queue.shutdown()
        if not self.shut:
            self.model_promote()
        self.shut = True
        self.waiting.clear()

    # -- invariants --

    @invariant()
    def lengths_agree(self) -> None:
        self.model_promote()  # ``len`` and ``stats`` count the delayed keys that have fallen due
        ready = sum(len(line) for line in self.lines.values())
        assert len(self.queue) == ready
        assert self.queue.stats().depth == ready

    @invariant()
    def model_is_consistent(self) -> None:
        queued = [key for line in self.lines.values() for key in line]
        assert len(set(queued)) == len(queued), "a key waits at most once, in one line"
        for priority, line in self.lines.items():
            for key in line:
                assert self.dirty.get(key) == priority, "a key waits in the line of its priority"
                assert key not in self.processing
        # Nothing is lost: every dirty key is either queued, or being processed (queued on done).
        assert set(self.dirty) <= set(queued) | set(self.processing)

    @invariant()
    def requeues_agree(self) -> None:
        for key in "abcd":
            assert self.queue.num_requeues(key) == self.failures.get(key, 0)


TestWorkQueueStateful = WorkQueueMachine.TestCase
TestWorkQueueStateful.settings = settings(max_examples=500, stateful_step_count=80, deadline=None)
