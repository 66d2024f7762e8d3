"""Cron schedules read as the cron library behind CronJobs and Karpenter's budgets reads them.

Karpenter's docs write budget windows as ``0 9 * * mon-fri``; a schedule
written with names, a Sunday of 7, ``?`` or a step over ``*`` in a day
field is valid there and must be here.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from karpy.api._reader import FieldReader, ManifestError
from karpy.api.cron import CronError, CronSchedule, read_schedule


def _at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("names", "numbers"),
    [
        ("0 9 * * mon-fri", "0 9 * * 1-5"),
        ("0 9 * * MON,wed,Fri", "0 9 * * 1,3,5"),
        ("0 0 1 jan-mar *", "0 0 1 1-3 *"),
        ("0 0 * * sun", "0 0 * * 0"),
        ("0 0 * * 7", "0 0 * * 0"),
        ("0 0 * * 5-7", "0 0 * * 0,5,6"),
        ("0 0 ? * 1", "0 0 * * 1"),
    ],
)
def test_names_and_sunday_as_7_read_as_their_numbers(names: str, numbers: str) -> None:
    start = _at("2026-12-03T00:00:00")
    written, plain = CronSchedule(names), CronSchedule(numbers)
    fires_written, fires_plain = [], []
    moment_written = moment_plain = start
    for _ in range(20):
        next_written = written.next_fire_after(moment_written)
        next_plain = plain.next_fire_after(moment_plain)
        assert next_written is not None and next_plain is not None
        fires_written.append(next_written)
        fires_plain.append(next_plain)
        moment_written, moment_plain = next_written, next_plain
    assert fires_written == fires_plain


def test_a_step_over_every_day_of_month_leaves_the_weekday_to_decide() -> None:
    # "*/2" in the day of month is unrestricted for cron's either-day rule: Mondays on odd days only.
    schedule = CronSchedule("0 0 */2 * mon")
    assert schedule.matches(datetime(2026, 12, 7, tzinfo=UTC))  # Monday the 7th
    assert not schedule.matches(datetime(2026, 12, 14, tzinfo=UTC))  # Monday the 14th
    assert not schedule.matches(datetime(2026, 12, 9, tzinfo=UTC))  # Wednesday the 9th


@pytest.mark.parametrize("bad", ["0 9 * * mon-funday", "0 9 * * 8", "0 0 1 foo *", "61 * * * *", "0 9 * *"])
def test_what_is_not_a_schedule_is_refused(bad: str) -> None:
    with pytest.raises(CronError):
        CronSchedule(bad)


@pytest.mark.parametrize(
    ("schedule", "delay"), [("@every 6h", 6 * 3600.0), ("@every 1h30m", 5400.0), ("@every 1500ms", 1.0)]
)
def test_every_fires_its_delay_after_the_last_fire_in_whole_seconds(schedule: str, delay: float) -> None:
    start = _at("2026-12-03T10:17:42.5")
    assert CronSchedule(schedule).next_fire_after(start) == _at("2026-12-03T10:17:42") + delay


def test_every_is_a_cronjob_schedule_and_not_a_disruption_budget_one() -> None:
    every = FieldReader({"schedule": "@every 1h"}, "spec")
    assert read_schedule(every, "schedule", every=True) == "@every 1h"
    with pytest.raises(ManifestError, match="@every is not a schedule here"):
        read_schedule(every, "schedule")
    with pytest.raises(ManifestError, match="invalid duration"):
        read_schedule(FieldReader({"schedule": "@every soon"}, "spec"), "schedule", every=True)
