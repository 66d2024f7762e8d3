"""Ready conditions that summarize others, and the log line when one changes.

A NodePool's ``Ready`` summarizes its ``ValidationSucceeded`` and
``NodeClassReady``; an EC2NodeClass' summarizes its subnets, security groups,
AMIs and instance profile. Both are worked out by :func:`with_ready` and
logged by :func:`log_ready_change`, whether the NodePool status controller or
the AWS provider's node class status controller writes them, so the two
read alike. They live below both for that reason.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from karpy.api.conditions import FALSE, TRUE, UNKNOWN, Condition, find_condition, set_condition
from karpy.api.nodeclass import NodeClass
from karpy.api.nodepool import CONDITION_READY, NodePool
from karpy.logs import about

# The NodePool status controller's logger, which these lines have always been written to.
log = logging.getLogger("karpy.nodepool")

REASON_UNHEALTHY_DEPENDENTS = "UnhealthyDependents"
REASON_AWAITING_RECONCILIATION = "AwaitingReconciliation"


def with_ready(
    conditions: tuple[Condition, ...], dependents: Iterable[str], now: float
) -> tuple[Condition, ...]:
    """``conditions`` with ``Ready`` summarizing ``dependents``: true when all are.

    False when any is false (the message names them, ``NodeClassReady=False``),
    Unknown while any is still unknown or unset.
    """
    states = {
        kind: (found.status if (found := find_condition(conditions, kind)) else UNKNOWN)
        for kind in dependents
    }
    failing = [f"{kind}={status}" for kind, status in states.items() if status == FALSE]
    if failing:
        return set_condition(
            conditions, CONDITION_READY, FALSE, now, REASON_UNHEALTHY_DEPENDENTS, ", ".join(failing)
        )
    waiting = [f"{kind}={status}" for kind, status in states.items() if status != TRUE]
    if waiting:
        return set_condition(
            conditions, CONDITION_READY, UNKNOWN, now, REASON_AWAITING_RECONCILIATION, ", ".join(waiting)
        )
    return set_condition(conditions, CONDITION_READY, TRUE, now)


def log_ready_change(
    obj: NodePool | NodeClass,
    before: tuple[Condition, ...],
    after: tuple[Condition, ...],
    controller: str = "nodepool.status",
) -> None:
    """One log line when an object's Ready condition changes status or message."""
    old, new = find_condition(before, CONDITION_READY), find_condition(after, CONDITION_READY)
    if new is None or (old is not None and (old.status, old.message) == (new.status, new.message)):
        return
    log.info(
        "%s %s is %s",
        obj.kind.lower(),
        obj.metadata.name,
        "ready" if new.is_true else f"not ready: {new.message}",
        extra=about(obj, controller=controller),
    )
