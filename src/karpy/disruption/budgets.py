"""Disruption budgets: how many of a NodePool's nodes may be disrupted at once.

Karpenter's rules: each budget allows ``nodes`` (a count, or a percentage of
the pool's nodes rounded up); a budget with ``schedule`` (cron, UTC) and
``duration`` applies only inside its windows (the cron reading is
``karpy.api.cron``, shared with CronJobs); a budget with ``reasons``
applies only to those reasons; when several apply, the most restrictive wins;
nodes already being disrupted count against the allowance.
"""

from __future__ import annotations

from karpy.api.cron import CronSchedule
from karpy.api.nodepool import Budget, NodePool


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
