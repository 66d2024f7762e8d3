"""Emptiness: the first and cheapest disruption method.

A node is empty when nothing but DaemonSet pods (and finished pods) run on
it. Under either consolidation policy an empty node is deleted once it has
been empty for ``consolidateAfter``, measured from the later of its
initialization and its last pod event, so a node that a Deployment keeps
scaling pods on and off is not torn down between two waves. ``Never``
disables it. Budgets cap how many go at once, and
``karpenter.sh/do-not-disrupt`` on the node blocks it.

This is a pure function of the candidates and the time: the controller
supplies the snapshot and carries out the decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from karpy.api.core import DO_NOT_DISRUPT_ANNOTATION, Node, Pod
from karpy.api.nodeclaim import CONDITION_INITIALIZED, NodeClaim
from karpy.api.nodepool import REASON_EMPTY, NodePool
from karpy.disruption.budgets import allowed_disruptions


@dataclass(frozen=True, slots=True)
class Candidate:
    nodeclaim: NodeClaim
    node: Node
    nodepool: NodePool
    pods: Sequence[Pod]


@dataclass(slots=True)
class EmptinessDecision:
    delete: list[Candidate] = field(default_factory=list)
    blocked: dict[str, str] = field(default_factory=dict)
    # Due but held back by a budget: they go on a later pass.
    deferred: list[str] = field(default_factory=list)
    # Every due candidate (to delete now or deferred): when it became due, that is,
    # when it had been empty for consolidateAfter. A pod event moves this on.
    due_at: dict[str, float] = field(default_factory=dict)
    # When the next not-yet-due empty node becomes due, if any.
    next_due: float | None = None

    @property
    def has_work(self) -> bool:
        return bool(self.delete or self.deferred) or self.next_due is not None


def reschedulable(pod: Pod) -> bool:
    """A pod that would have to move if its node went away."""
    return not pod.is_daemonset_pod and not pod.is_terminal and not pod.metadata.deleting


def is_empty(candidate: Candidate) -> bool:
    return not any(reschedulable(pod) for pod in candidate.pods)


def empty_since(candidate: Candidate) -> float:
    initialized = candidate.nodeclaim.condition(CONDITION_INITIALIZED)
    since = initialized.last_transition_time if initialized is not None else 0.0
    last_pod_event = candidate.nodeclaim.status.last_pod_event_time
    if last_pod_event is not None:
        since = max(since, last_pod_event)
    return since


def decide_emptiness(
    candidates: Sequence[Candidate],
    pool_sizes: dict[str, int],
    disrupting: dict[str, int],
    now: float,
) -> EmptinessDecision:
    """Which empty nodes to delete now, which are blocked and why, and when to look again."""
    decision = EmptinessDecision()
    due: dict[str, list[Candidate]] = {}
    for candidate in sorted(candidates, key=lambda c: c.nodeclaim.name):
        name = candidate.nodeclaim.name
        after = candidate.nodepool.disruption.consolidate_after
        if after is None or not is_empty(candidate):
            continue
        if candidate.node.metadata.annotations.get(DO_NOT_DISRUPT_ANNOTATION) == "true":
            decision.blocked[name] = f"node has {DO_NOT_DISRUPT_ANNOTATION}"
            continue
        when = empty_since(candidate) + after
        if when > now:
            decision.next_due = when if decision.next_due is None else min(decision.next_due, when)
            continue
        decision.due_at[name] = when
        due.setdefault(candidate.nodepool.name, []).append(candidate)
    for pool_name, pool_candidates in sorted(due.items()):
        pool = pool_candidates[0].nodepool
        allowed = allowed_disruptions(
            pool, REASON_EMPTY, pool_sizes.get(pool_name, 0), disrupting.get(pool_name, 0), now
        )
        decision.delete.extend(pool_candidates[:allowed])
        for candidate in pool_candidates[allowed:]:
            decision.deferred.append(candidate.nodeclaim.name)
            decision.blocked[candidate.nodeclaim.name] = (
                f"disruption budget of NodePool {pool_name} allows {allowed} more now"
            )
    return decision
