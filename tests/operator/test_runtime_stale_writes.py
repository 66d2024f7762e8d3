"""A stale write (409 Conflict, 404 Not Found) is retried from fresh state, quietly: it is no failure."""

from __future__ import annotations

import logging
from itertools import pairwise

import pytest

from karpy.operator.cluster import ConflictError, KubeError, NotFoundError
from karpy.operator.runtime import (
    STALE_RETRY,
    STALE_RETRY_MAX,
    STALE_WRITES_WORTH_A_WARNING,
    Runtime,
    Watch,
)
from karpy.sim.clock import VirtualClock


class Conflicting:
    """Raises ``error`` (a ConflictError) for its first ``conflicts`` reconciles, then succeeds."""

    name = "writer"

    def __init__(self, clock: VirtualClock, conflicts: int, error: type[KubeError] = ConflictError) -> None:
        self.clock = clock
        self.conflicts = conflicts
        self.error = error
        self.calls: list[float] = []

    def watches(self) -> list[Watch]:
        return []

    def reconcile(self, key: str) -> float | None:
        self.calls.append(self.clock.now() - self.clock.start)
        if len(self.calls) <= self.conflicts:
            raise self.error("the object has been modified")
        return None


def run(conflicts: int, error: type[KubeError] = ConflictError) -> tuple[Runtime, Conflicting, VirtualClock]:
    clock = VirtualClock()
    controller = Conflicting(clock, conflicts, error)
    runtime = Runtime(clock)
    runtime.register(controller)
    runtime.enqueue("writer", "key")
    while (due := runtime.next_due()) is not None:
        clock.advance_to(due)
        runtime.run_due()
    return runtime, controller, clock


@pytest.mark.parametrize("error", [ConflictError, NotFoundError])
def test_a_stale_write_is_retried_soon_and_is_not_an_error(
    caplog: pytest.LogCaptureFixture, error: type[KubeError]
) -> None:
    with caplog.at_level(logging.DEBUG, logger="karpy.runtime"):
        runtime, controller, _ = run(conflicts=1, error=error)
    assert controller.calls == [0.0, pytest.approx(STALE_RETRY)]
    assert runtime.errors == []
    assert runtime.stale_writes == 1
    assert [record.levelno for record in caplog.records] == [logging.DEBUG]
    assert "retrying from fresh state" in caplog.records[0].getMessage()


def test_conflicts_in_a_row_back_off_and_a_stubborn_one_is_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG, logger="karpy.runtime"):
        runtime, controller, _ = run(conflicts=STALE_WRITES_WORTH_A_WARNING)
    gaps = [later - earlier for earlier, later in pairwise(controller.calls)]
    assert gaps[:3] == [pytest.approx(STALE_RETRY * factor) for factor in (1, 2, 4)]
    assert max(gaps) == pytest.approx(STALE_RETRY_MAX)
    assert runtime.errors == []
    warnings = [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert (
        len(warnings) == 1
        and f"{STALE_WRITES_WORTH_A_WARNING} stale writes in a row" in warnings[0].getMessage()
    )


def test_a_success_starts_the_count_over() -> None:
    clock = VirtualClock()
    controller = Conflicting(clock, conflicts=2)
    runtime = Runtime(clock)
    runtime.register(controller)
    runtime.enqueue("writer", "key")
    for _ in range(3):
        due = runtime.next_due()
        assert due is not None
        clock.advance_to(due)
        runtime.run_due()
    assert runtime._stale_in_a_row == {}
    controller.conflicts = 4  # one more conflict: retried at the first delay again
    runtime.enqueue("writer", "key")
    runtime.run_due()
    assert runtime.next_due() == pytest.approx(clock.now() + STALE_RETRY)
