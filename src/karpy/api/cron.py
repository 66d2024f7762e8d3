"""Cron schedules, as Kubernetes and Karpenter read them (five fields, UTC).

Two kinds take a cron ``schedule``: a NodePool's disruption budget (a window
opens at each fire and lasts ``duration``) and a CronJob (a Job is created at
each fire). Both read the standard five fields (minute, hour, day of month,
month, day of week) with lists, ranges, steps and the ``@hourly``-style
macros, and evaluate them in UTC: the only time zone a simulation has, and
Karpenter's for budgets.

When both day fields are restricted a moment matches if *either* does, the
rule cron has always had; when one is ``*`` (or ``?``, or a step over ``*``)
only the other counts. Months and weekdays may be written by name (``jan``,
``mon-fri``, any case), and Sunday as 0 or 7, as the cron library behind
both Kubernetes' CronJobs and Karpenter's budgets reads them.

A CronJob may also say ``@every <duration>`` (``@every 6h``, ``@every 1h30m``):
Kubernetes' cron library reads it although its docs do not list it, and Helm
charts use it. It fires ``duration`` after the CronJob's creation, then
``duration`` after each fire (the library's constant delay, in whole seconds,
at least one). Karpenter's budget schedules do not take it (their CRD's
pattern allows the named macros and five fields only), so it is read only
where asked for (:func:`read_schedule`'s ``every``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from karpy.api._reader import FieldReader
from karpy.api.duration import DurationError, parse_duration

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# Day of week runs to 7 (Sunday again), folded onto 0 once read.
_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_MONTH_NAMES = {
    name: number
    for number, name in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), start=1
    )
}
_WEEKDAY_NAMES = {
    name: number for number, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))
}
_NAMES: tuple[dict[str, int], ...] = ({}, {}, {}, _MONTH_NAMES, _WEEKDAY_NAMES)
# How far ahead a next fire is looked for: a schedule may fire once a year
# (``0 0 29 2 *`` only in leap years), so a little over four years.
_HORIZON = timedelta(days=4 * 366 + 1)


class CronError(ValueError):
    pass


def _number(text: str, names: dict[str, int]) -> int | None:
    if text.isdigit():
        return int(text)
    return names.get(text.lower())


def _field_values(text: str, low: int, high: int, names: dict[str, int]) -> frozenset[int]:
    values: set[int] = set()
    for item in text.split(","):
        step = 1
        part = item
        if "/" in item:
            part, step_text = item.split("/", 1)
            if not step_text.isdigit() or int(step_text) == 0:
                raise CronError(f"invalid step {step_text!r}")
            step = int(step_text)
        if part in ("*", "?"):
            start, end = low, high
        elif "-" in part:
            start_text, end_text = part.split("-", 1)
            first, last = _number(start_text, names), _number(end_text, names)
            if first is None or last is None:
                raise CronError(f"invalid range {part!r}")
            start, end = first, last
        elif (single := _number(part, names)) is not None:
            start = end = single
            if step != 1:
                end = high
        else:
            raise CronError(f"invalid field {part!r}")
        if start < low or end > high or start > end:
            raise CronError(f"{part!r} is out of range {low}-{high}")
        values.update(range(start, end + 1, step))
    return frozenset(values)


_EVERY = "@every"


def read_schedule(reader: FieldReader, key: str, *, every: bool = False) -> str | None:
    """A cron ``schedule`` field, checked to be one; None when it is not there.

    ``@every <duration>`` is one only where ``every`` says so (a CronJob's).
    """
    schedule = reader.string(key) or None
    if schedule is not None:
        if not every and schedule.strip().startswith(_EVERY):
            raise reader.error(key, f"{_EVERY} is not a schedule here; use five cron fields or a macro")
        try:
            CronSchedule(schedule)
        except CronError as error:
            raise reader.error(key, str(error)) from error
    return schedule


class CronSchedule:
    """A standard five-field cron expression, evaluated in UTC, or a CronJob's ``@every``."""

    def __init__(self, expression: str) -> None:
        text = _MACROS.get(expression.strip(), expression.strip())
        # Seconds between fires for "@every <duration>"; None for a cron expression.
        self.every: float | None = None
        if text.startswith(_EVERY + " "):
            try:
                delay = parse_duration(text.removeprefix(_EVERY).strip())
            except DurationError as error:
                raise CronError(f"{_EVERY}: {error}") from error
            self.every = max(1.0, float(int(delay)))
            text = "* * * * *"
        fields = text.split()
        if len(fields) != 5:
            raise CronError(f"expected a cron expression of five fields, got {expression!r}")
        self.minutes, self.hours, self.days, self.months, weekdays = (
            _field_values(field, *_RANGES[index], _NAMES[index]) for index, field in enumerate(fields)
        )
        self.weekdays = frozenset(day % 7 for day in weekdays)
        self._any_day = fields[2].startswith(("*", "?"))
        self._any_weekday = fields[4].startswith(("*", "?"))

    def _day_matches(self, moment: datetime) -> bool:
        day_ok = moment.day in self.days
        weekday_ok = (moment.isoweekday() % 7) in self.weekdays
        if self._any_day or self._any_weekday:
            return day_ok and weekday_ok
        return day_ok or weekday_ok  # cron's rule when both are restricted

    def matches(self, moment: datetime) -> bool:
        if (
            moment.minute not in self.minutes
            or moment.hour not in self.hours
            or moment.month not in self.months
        ):
            return False
        return self._day_matches(moment)

    def last_fire_within(self, now: float, window: float) -> float | None:
        """The latest fire time in (now − window, now], if any."""
        moment = datetime.fromtimestamp(now, tz=UTC).replace(second=0, microsecond=0)
        earliest = now - window
        while moment.timestamp() > earliest:
            if self.matches(moment):
                return moment.timestamp()
            moment -= timedelta(minutes=1)
        return None

    def next_fire_after(self, after: float) -> float | None:
        """The first fire time strictly after ``after``; None if it never fires (``0 0 31 2 *``).

        Walks forward a month, a day or an hour at a time while that unit
        cannot match, so a yearly schedule costs a few hundred steps, not
        half a million minutes.
        """
        if self.every is not None:
            return float(int(after)) + self.every
        moment = datetime.fromtimestamp(after, tz=UTC).replace(second=0, microsecond=0)
        moment += timedelta(minutes=1)
        limit = moment + _HORIZON
        while moment < limit:
            if moment.month not in self.months:
                year, month = (moment.year + 1, 1) if moment.month == 12 else (moment.year, moment.month + 1)
                moment = moment.replace(year=year, month=month, day=1, hour=0, minute=0)
            elif not self._day_matches(moment):
                moment = moment.replace(hour=0, minute=0) + timedelta(days=1)
            elif moment.hour not in self.hours:
                moment = moment.replace(minute=0) + timedelta(hours=1)
            elif moment.minute not in self.minutes:
                moment += timedelta(minutes=1)
            else:
                return moment.timestamp()
        return None
