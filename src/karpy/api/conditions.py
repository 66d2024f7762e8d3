"""Status conditions, as Karpenter's NodeClaims and NodePools carry them.

A condition changes its ``lastTransitionTime`` only when its status changes;
re-asserting the same status keeps the old time, so "Initialized since" stays
true across reconciles. Conditions are kept sorted by type for stable output.
"""

from __future__ import annotations

from dataclasses import dataclass

from karpy.api._reader import FieldReader
from karpy.api.meta import format_timestamp, parse_timestamp

TRUE = "True"
FALSE = "False"
UNKNOWN = "Unknown"


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition_time: float = 0.0

    @classmethod
    def parse(cls, reader: FieldReader) -> Condition:
        when = reader.string("lastTransitionTime")
        return cls(
            type=reader.required_str("type"),
            status=reader.string("status", UNKNOWN),
            reason=reader.string("reason"),
            message=reader.string("message"),
            last_transition_time=parse_timestamp(when, reader.child_path("lastTransitionTime"))
            if when
            else 0.0,
        )

    @property
    def is_true(self) -> bool:
        return self.status == TRUE

    def to_dict(self) -> dict[str, str]:
        return {
            "type": self.type,
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
            "lastTransitionTime": format_timestamp(self.last_transition_time),
        }


def find_condition(conditions: tuple[Condition, ...], kind: str) -> Condition | None:
    for condition in conditions:
        if condition.type == kind:
            return condition
    return None


def set_condition(
    conditions: tuple[Condition, ...],
    kind: str,
    status: str,
    now: float,
    reason: str = "",
    message: str = "",
) -> tuple[Condition, ...]:
    """``conditions`` with ``kind`` set; the transition time moves only on a status change.

    A true condition's reason defaults to its type, as Karpenter's do; any other
    must name its reason (Karpenter never writes a condition without one).
    """
    if status != TRUE and not reason:
        raise ValueError(f"condition {kind}={status} needs a reason")
    existing = find_condition(conditions, kind)
    if (
        existing is not None
        and existing.status == status
        and existing.reason == reason
        and existing.message == message
    ):
        return conditions
    when = existing.last_transition_time if existing is not None and existing.status == status else now
    updated = Condition(kind, status, reason or kind if status == TRUE else reason, message, when)
    others = tuple(condition for condition in conditions if condition.type != kind)
    return tuple(sorted((*others, updated), key=lambda condition: condition.type))


def remove_condition(conditions: tuple[Condition, ...], kind: str) -> tuple[Condition, ...]:
    return tuple(condition for condition in conditions if condition.type != kind)
