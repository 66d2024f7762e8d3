"""The simulator's virtual clock.

Time stands still while controllers run and jumps to the next thing that is
due when they are done, so a day of cluster time takes as long as the work in
it, and two runs of the same scenario are identical to the second.
"""

from __future__ import annotations

from datetime import UTC, datetime

# 2026-01-01T00:00:00Z: a fixed origin keeps runs reproducible.
SIMULATION_EPOCH = datetime(2026, 1, 1, tzinfo=UTC).timestamp()


class VirtualClock:
    def __init__(self, start: float = SIMULATION_EPOCH) -> None:
        self.start = start
        self._now = start

    def now(self) -> float:
        return self._now

    @property
    def elapsed(self) -> float:
        return self._now - self.start

    def advance_to(self, moment: float) -> None:
        if moment < self._now:
            raise ValueError(f"time cannot go backwards ({moment} < {self._now})")
        self._now = moment

    def advance(self, seconds: float) -> None:
        self.advance_to(self._now + seconds)
