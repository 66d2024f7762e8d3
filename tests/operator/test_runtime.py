"""The reconcile loop: deduplication, time order, requeues and error isolation."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from karpy.operator.cluster import ConflictError, NotLeaderError
from karpy.operator.runtime import LivelockError, Runtime, Watch
from karpy.sim.clock import VirtualClock


class Recording:
    def __init__(
        self,
        name: str,
        requeue: float | None = None,
        fail: bool = False,
        raises: Exception | None = None,
        takes: float = 0.0,
    ) -> None:
        self.name = name
        self.takes = takes  # seconds of the clock each reconcile takes
        self.requeue = requeue
        self.fail = fail
        self.raises = raises
        self.calls: list[tuple[float, str]] = []
        self.clock: VirtualClock | None = None

    def watches(self) -> list[Watch]:
        return [Watch("Thing", self._map)]

    @staticmethod
    def _map(old: object | None, new: object | None) -> Iterable[str]:
        return [str(new if new is not None else old)]

    def reconcile(self, key: str) -> float | None:
        assert self.clock is not None
        self.calls.append((self.clock.now() - self.clock.start, key))
        self.clock.advance(self.takes)
        if self.fail:
            raise RuntimeError("boom")
        if self.raises is not None:
            raise self.raises
        return self.requeue


def setup(controller: Recording) -> tuple[Runtime, VirtualClock]:
    return setup_all(controller)


def setup_all(*controllers: Recording) -> tuple[Runtime, VirtualClock]:
    clock = VirtualClock()
    runtime = Runtime(clock)
    for controller in controllers:
        controller.clock = clock
        runtime.register(controller)
    return runtime, clock


def test_forget_drops_one_controllers_queued_keys_and_leaves_the_others() -> None:
    dropped, kept = Recording("dropped"), Recording("kept")
    runtime, clock = setup_all(dropped, kept)
    runtime.on_change("Thing", None, "a")
    runtime.enqueue("dropped", "b", after=5.0)
    assert runtime.forget("dropped") == 2
    assert runtime.run_due() == 1 and kept.calls == [(0.0, "a")]
    assert runtime.next_due() is None
    clock.advance(10.0)
    assert runtime.run_due() == 0 and dropped.calls == []
    runtime.enqueue("dropped", "b")  # a key queued after is reconciled as ever
    assert runtime.run_due() == 1 and dropped.calls == [(10.0, "b")]


def test_a_key_queued_twice_is_reconciled_once() -> None:
    controller = Recording("c")
    runtime, _ = setup(controller)
    runtime.on_change("Thing", None, "a")
    runtime.on_change("Thing", None, "a")
    runtime.on_change("Other", None, "b")
    assert runtime.run_due() == 1
    assert controller.calls == [(0.0, "a")]


def test_timers_fire_in_time_order_and_the_earliest_request_wins() -> None:
    controller = Recording("c")
    runtime, clock = setup(controller)
    runtime.enqueue("c", "late", 5)
    runtime.enqueue("c", "early", 2)
    runtime.enqueue("c", "late", 3)
    assert runtime.run_due() == 0
    while (due := runtime.next_due()) is not None:
        clock.advance_to(due)
        runtime.run_due()
    assert controller.calls == [(2.0, "early"), (3.0, "late")]


def test_a_requeue_schedules_the_next_reconcile() -> None:
    controller = Recording("c", requeue=10)
    runtime, clock = setup(controller)
    runtime.enqueue("c", "k")
    runtime.run_due()
    assert runtime.next_due() == clock.start + 10


def test_a_failing_reconcile_is_recorded_and_retried_not_fatal() -> None:
    controller = Recording("c", fail=True)
    runtime, clock = setup(controller)
    runtime.enqueue("c", "k")
    runtime.run_due()
    assert runtime.errors and "boom" in runtime.errors[0]
    assert runtime.next_due() == clock.start + 1


def test_controllers_that_requeue_each_other_forever_are_stopped() -> None:
    controller = Recording("c", requeue=0.0)
    runtime, _ = setup(controller)
    runtime.MAX_RECONCILES_PER_INSTANT = 50
    runtime.enqueue("c", "k")
    with pytest.raises(LivelockError):
        runtime.run_due()


def test_registering_a_name_twice_is_refused() -> None:
    runtime, _ = setup(Recording("c"))
    with pytest.raises(ValueError):
        runtime.register(Recording("c"))


def test_a_write_refused_by_the_fence_ends_the_loop_and_is_not_an_error() -> None:
    controller = Recording("c", raises=NotLeaderError("not leading"))
    runtime, _ = setup(controller)
    runtime.enqueue("c", "k")
    with pytest.raises(NotLeaderError):
        runtime.run_due()
    assert runtime.errors == []


def test_the_observer_is_told_each_reconcile_and_its_result() -> None:
    seen: list[tuple[str, str]] = []
    clock = VirtualClock()
    runtime = Runtime(clock, observer=lambda name, seconds, result: seen.append((name, result)))
    outcomes: list[Recording] = [
        Recording("done"),
        Recording("again", requeue=5),
        Recording("broken", fail=True),
        Recording("stale", raises=ConflictError("modified")),
    ]
    for controller in outcomes:
        controller.clock = clock
        runtime.register(controller)
        runtime.enqueue(controller.name, "k")
    runtime.run_due()
    assert sorted(seen) == [
        ("again", "requeue_after"),
        ("broken", "error"),
        ("done", "success"),
        ("stale", "stale"),
    ]


def test_a_turn_gives_each_controller_its_budget_so_a_long_queue_holds_no_other_back() -> None:
    # Five launches of 0.1 s each are due, then a provisioning batch: the batch's turn comes
    # once the launches have had TURN_BUDGET (0.25 s: three of them), not after all five.
    launches, batch = Recording("launches", takes=0.1), Recording("batch", takes=0.1)
    runtime, clock = setup_all(launches, batch)
    for index in range(5):
        runtime.enqueue("launches", f"claim-{index}")
    runtime.enqueue("batch", "batch", 1)
    runtime.enqueue("launches", "claim-0", 0.5)  # later than its request already queued: kept once
    clock.advance(2)
    assert runtime.run_round() == 4
    assert [key for _, key in launches.calls] == ["claim-0", "claim-1", "claim-2"]
    assert [moment for moment, _ in batch.calls] == [pytest.approx(2.3)]
    assert runtime.run_round() == 2
    assert [key for _, key in launches.calls] == [f"claim-{index}" for index in range(5)]
    assert len(batch.calls) == 1
    assert runtime.run_round() == 0
    assert runtime.next_due() is None


def test_a_turn_leaves_keys_not_yet_due_and_run_due_still_takes_everything_due_in_time_order() -> None:
    first, second = Recording("first"), Recording("second")
    runtime, clock = setup_all(first, second)
    runtime.enqueue("first", "a")
    runtime.enqueue("first", "b")
    runtime.enqueue("second", "c")
    runtime.enqueue("second", "later", 10)
    assert runtime.run_round() == 3
    assert runtime.run_round() == 0
    assert runtime.next_due() == clock.now() + 10
    runtime.enqueue("first", "x")
    runtime.enqueue("first", "y")
    assert runtime.run_due() == 2
    assert [key for _, key in first.calls] == ["a", "b", "x", "y"]


class RequeueToDeadline(Recording):
    """Asks to come back at one fixed moment, as the provisioning batch window does."""

    def __init__(self, name: str, deadline: float) -> None:
        super().__init__(name)
        self.deadline = deadline

    def reconcile(self, key: str) -> float | None:
        super().reconcile(key)
        assert self.clock is not None
        return self.deadline - self.clock.now()


@pytest.mark.parametrize("turn", ["run_round", "run_due"])
def test_a_requeue_to_the_moment_of_a_superseded_request_is_one_reconcile(turn: str) -> None:
    # The batch timer asks for the window's end; a pod arriving earlier supersedes that
    # request; its reconcile asks for the same end again, to the same float. The superseded
    # entry and the new one then share their due time and both looked current: a turn of
    # `karpy run` took the key twice and its loop ended on the second.
    runtime, clock = setup(controller := RequeueToDeadline("c", deadline=0.0))
    controller.deadline = clock.now() + 5.0
    runtime.enqueue("c", "batch", controller.deadline - clock.now())
    clock.advance(1.0)
    runtime.enqueue("c", "batch")  # earlier than the window's end: supersedes it
    assert getattr(runtime, turn)() == 1
    clock.advance_to(controller.deadline)
    controller.deadline += 10.0
    assert getattr(runtime, turn)() == 1
    assert [at for at, _ in controller.calls] == [1.0, 5.0]
    assert runtime.next_due() == controller.deadline


# Requests of the property below: reconcile a key in `after` seconds, or at a fixed moment
# (seconds after the clock's start), as a batch window's end or a budget's next minute is.
Request = tuple[str, float]
requests = st.one_of(
    st.tuples(st.just("after"), st.sampled_from([0.0, 0.25, 1.0, 3.0])),
    st.tuples(st.just("at"), st.sampled_from([2.0, 5.0])),
)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("enqueue"), st.sampled_from("ab"), requests),
        st.tuples(st.just("advance"), st.sampled_from([0.1, 0.5, 1.0, 3.0])),
        st.tuples(st.just("turn")),
    ),
    max_size=60,
)


class Scripted(Recording):
    """Each reconcile returns the next of ``answers`` (None: done), cycling."""

    def __init__(self, answers: list[Request | None]) -> None:
        super().__init__("c")
        self.answers = answers or [None]
        self.turn = 0

    def reconcile(self, key: str) -> float | None:
        super().reconcile(key)
        assert self.clock is not None
        answer = self.answers[self.turn % len(self.answers)]
        self.turn += 1
        return None if answer is None else seconds_until(answer, self.clock)


def seconds_until(request: Request, clock: VirtualClock) -> float:
    kind, value = request
    return value if kind == "after" else max(0.0, clock.start + value - clock.now())


@settings(max_examples=1500, deadline=None)
@given(operations, st.lists(st.one_of(st.none(), requests), max_size=5))
def test_a_turn_reconciles_each_key_due_once_and_loses_no_request(
    steps: list[tuple[Any, ...]], answers: list[Request | None]
) -> None:
    runtime, clock = setup(controller := Scripted(answers))
    requested: dict[str, float] = {}  # the model: each key's earliest request since its reconcile

    def request(key: str, after: float) -> None:
        due = clock.now() + after
        requested[key] = min(requested.get(key, due), due)

    for step in steps:
        if step[0] == "enqueue":
            _, key, wanted = step
            after = seconds_until(wanted, clock)
            runtime.enqueue("c", key, after)
            request(key, after)
        elif step[0] == "advance":
            clock.advance(step[1])
        else:
            due = sorted(key for key, at in requested.items() if at <= clock.now())
            before = len(controller.calls)
            for key in due:
                del requested[key]
            runtime.run_round()
            taken = [key for _, key in controller.calls[before:]]
            assert sorted(taken) == due  # each key due exactly once, none early
            # The requeues those reconciles asked for (time stood still), told to the model.
            for turn, key in enumerate(taken, start=controller.turn - len(taken)):
                answer = controller.answers[turn % len(controller.answers)]
                if answer is not None:
                    request(key, seconds_until(answer, clock))
        assert runtime.next_due() == (min(requested.values()) if requested else None)


class Gathering:
    """Reconciles that each wait until ``together`` of them run at once (a barrier), then answer."""

    def __init__(
        self, name: str, together: int, concurrency: int, answer: Exception | float | None = None
    ) -> None:
        self.name = name
        self.max_concurrent_reconciles = concurrency
        self.barrier = threading.Barrier(together, timeout=5)
        self.answer = answer
        self.calls: list[str] = []
        self.threads: set[str] = set()

    def watches(self) -> list[Watch]:
        return []

    def reconcile(self, key: str) -> float | None:
        self.calls.append(key)
        self.threads.add(threading.current_thread().name)
        self.barrier.wait()
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_a_controller_that_allows_it_has_its_due_keys_reconciled_at_once_and_the_turn_goes_on() -> None:
    # Four launches, each waiting for the other three (a round trip each): one at a time,
    # the first would wait for good (the barrier breaks after 5 s and each reconcile fails).
    launches = Gathering("launches", together=4, concurrency=4, answer=2.0)
    other = Recording("other")
    woken = threading.Semaphore(0)
    runtime = Runtime(clock := VirtualClock(), wake=woken.release)
    runtime.register(launches)
    runtime.register(other)
    other.clock = clock
    for index in range(4):
        runtime.enqueue("launches", f"claim-{index}")
    runtime.enqueue("other", "k")
    try:
        # The turn starts the four and reconciles the other controller's key without waiting.
        assert runtime.run_round() == 5
        assert [key for _, key in other.calls] == ["k"]
        for _ in range(4):
            assert woken.acquire(timeout=5)  # each finished reconcile wakes the loop
        assert runtime.run_round() == 0  # takes the outcomes in
    finally:
        runtime.close()
    assert sorted(launches.calls) == [f"claim-{index}" for index in range(4)]
    assert runtime.errors == []
    assert len(launches.threads) == 4 and threading.current_thread().name not in launches.threads
    # Their requeues are the loop's to keep, as for any reconcile.
    assert runtime.next_due() == clock.now() + 2.0


def test_keys_beyond_the_bound_start_as_workers_free_and_run_due_keeps_them_one_at_a_time() -> None:
    # Two at a time: four keys are two pairs, each pair meeting at the barrier.
    launches = Gathering("launches", together=2, concurrency=2)
    runtime = Runtime(VirtualClock())
    runtime.register(launches)
    for index in range(4):
        runtime.enqueue("launches", f"claim-{index}")
    try:
        assert runtime.run_round() == 2
        assert runtime.next_due() is None  # the other two wait for a worker, not for a time
        assert runtime.wait_for_workers(timeout=5) == 2
        assert runtime.run_round() == 2
        assert runtime.wait_for_workers(timeout=5) == 2
    finally:
        runtime.close()
    assert runtime.errors == [] and sorted(launches.calls) == [f"claim-{index}" for index in range(4)]
    # The simulator's run_due never starts a thread: the same controller runs on the caller's.
    alone = Gathering("alone", together=1, concurrency=8)
    runtime = Runtime(VirtualClock())
    runtime.register(alone)
    for index in range(3):
        runtime.enqueue("alone", f"claim-{index}")
    assert runtime.run_due() == 3
    assert alone.threads == {threading.current_thread().name}


def test_a_key_requested_while_it_reconciles_is_reconciled_again_once_it_has_finished() -> None:
    gate = threading.Event()

    class Slow:
        name = "slow"
        max_concurrent_reconciles = 4

        def __init__(self) -> None:
            self.calls: list[str] = []

        def watches(self) -> list[Watch]:
            return [Watch("Thing", lambda old, new: [str(new)])]

        def reconcile(self, key: str) -> float | None:
            self.calls.append(key)
            assert gate.wait(timeout=5)
            return None

    slow = Slow()
    runtime = Runtime(VirtualClock())
    runtime.register(slow)
    runtime.on_change("Thing", None, "claim-0")
    try:
        assert runtime.run_round() == 1
        runtime.on_change("Thing", None, "claim-0")  # changed while it reconciles: held, not started
        assert runtime.run_round() == 0 and slow.calls == ["claim-0"]
        gate.set()
        assert runtime.wait_for_workers(timeout=5) == 1
        assert runtime.run_round() == 1  # once more, now that it has finished
        assert runtime.wait_for_workers(timeout=5) == 1
    finally:
        runtime.close()
    assert slow.calls == ["claim-0", "claim-0"]


def test_a_concurrent_reconcile_that_lost_leadership_ends_the_loop_and_stale_ones_are_retried() -> None:
    lost = Gathering("lost", together=2, concurrency=2, answer=NotLeaderError("not leading"))
    runtime = Runtime(VirtualClock())
    runtime.register(lost)
    for index in range(5):
        runtime.enqueue("lost", f"claim-{index}")
    assert runtime.run_round() == 2
    with pytest.raises(NotLeaderError):
        runtime.wait_for_workers(timeout=5)
    runtime.close()
    # The first two ran (together), the other three were not started.
    assert sorted(lost.calls) == ["claim-0", "claim-1"]
    stale = Gathering("stale", together=3, concurrency=3, answer=ConflictError("changed"))
    runtime = Runtime(clock := VirtualClock())
    runtime.register(stale)
    for index in range(3):
        runtime.enqueue("stale", f"claim-{index}")
    try:
        assert runtime.run_round() == 3
        assert runtime.wait_for_workers(timeout=5) == 3
    finally:
        runtime.close()
    assert runtime.stale_writes == 3 and runtime.errors == []
    assert runtime.next_due() == pytest.approx(clock.now() + 0.1)
