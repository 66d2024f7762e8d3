"""Disruption budgets: how many of a NodePool's nodes may be disrupted at once.

Karpenter's rules: each budget allows ``nodes`` (a count, or a percentage of
the pool's nodes rounded up); a budget with ``schedule`` (cron, UTC) and
``duration`` applies only inside its windows; a budget with ``reasons``
applies only to those reasons; when several apply, the most restrictive wins;
nodes already being disrupted count against the allowance.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from karpy.api.nodepool import Budget, NodePool

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 6))


class CronError(ValueError):
    pass


def _field_values(text: str, low: int, high: int) -> frozenset[int]:
    values: set[int] = set()
    for item in text.split(","):
        step = 1
        part = item
        if "/" in item:
            part, step_text = item.split("/", 1)
            if not step_text.isdigit() or int(step_text) == 0:
                raise CronError(f"invalid step {step_text!r}")
            step = int(step_text)
        if part == "*":
            start, end = low, high
        elif "-" in part:
            start_text, end_text = part.split("-", 1)
            if not (start_text.isdigit() and end_text.isdigit()):
                raise CronError(f"invalid range {part!r}")
            start, end = int(start_text), int(end_text)
        elif part.isdigit():
            start = end = int(part)
            if step != 1:
                end = high
        else:
            raise CronError(f"invalid field {part!r}")
        if start < low or end > high or start > end:
            raise CronError(f"{part!r} is out of range {low}-{high}")
        values.update(range(start, end + 1, step))
    return frozenset(values)


class CronSchedule:
    """A standard five-field cron expression, evaluated in UTC."""

    def __init__(self, expression: str) -> None:
        text = _MACROS.get(expression.strip(), expression.strip())
        fields = text.split()
        if len(fields) != 5:
            raise CronError(f"expected five fields, got {expression!r}")
        self.minutes, self.hours, self.days, self.months, weekdays = (
            _field_values(field.replace("7", "0") if index == 4 else field, *_RANGES[index])
            for index, field in enumerate(fields)
        )
        self.weekdays = weekdays
        self._any_day = fields[2] == "*"
        self._any_weekday = fields[4] == "*"

    def matches(self, moment: datetime) -> bool:
        if (
            moment.minute not in self.minutes
            or moment.hour not in self.hours
            or moment.month not in self.months
        ):
            return False
        day_ok = moment.day in self.days
        weekday_ok = (moment.isoweekday() % 7) in self.weekdays
        if self._any_day or self._any_weekday:
            return day_ok and weekday_ok
        return day_ok or weekday_ok  # cron's rule when both are restricted

    def last_fire_within(self, now: float, window: float) -> float | None:
        """The latest fire time in (now − window, now], if any."""
        moment = datetime.fromtimestamp(now, tz=UTC).replace(second=0, microsecond=0)
        earliest = now - window
        while moment.timestamp() > earliest:
            if self.matches(moment):
                return moment.timestamp()
            moment -= timedelta(minutes=1)
        return None


def budget_active(budget: Budget, now: float) -> bool:
    if budget.schedule is None or budget.duration is None:
        return True
    return CronSchedule(budget.schedule).last_fire_within(now, budget.duration) is not None


def allowed_disruptions(
    nodepool: NodePool, reason: str, total_nodes: int, disrupting: int, now: float
) -> int:
    """How many more of the pool's nodes may be disrupted for ``reason`` right now."""
    allowed: int | None = None
    for budget in nodepool.disruption.budgets:
        if budget.reasons and reason not in budget.reasons:
            continue
        if not budget_active(budget, now):
            continue
        limit = budget.allowed(total_nodes)
        allowed = limit if allowed is None else min(allowed, limit)
    if allowed is None:
        # No budget applies: Karpenter's default of 10% holds.
        allowed = Budget().allowed(total_nodes)
    return max(0, allowed - disrupting)
