"""Emptiness: the first and cheapest disruption method (Karpenter's Emptiness).

A node is empty when nothing but DaemonSet pods (and finished pods) run on
it. Under either consolidation policy an empty node is deleted once it has
been empty for ``consolidateAfter``, measured from the later of its
initialization and its last pod event, so a node that a Deployment keeps
scaling pods on and off is not torn down between two waves. ``Never``
disables it. Budgets (the ``Empty`` reason) cap how many go at once, and
``karpenter.sh/do-not-disrupt`` on the node blocks it.

This is a pure function of the candidates, the budgets and the time: the
controller supplies the snapshot and carries out the decision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from karpy.api.core import DO_NOT_DISRUPT_ANNOTATION, Pod
from karpy.api.nodeclaim import CONDITION_INITIALIZED, NodeClaim
from karpy.api.nodepool import REASON_EMPTY, NodePool
from karpy.disruption.method import Candidate, MethodResult, RemovalCommand
from karpy.disruption.rejection import Rejection, RejectionKind


@dataclass(slots=True)
class EmptinessDecision(MethodResult):
    """The emptiness method's result: the empty nodes to delete now (``command``), those it
    leaves alone and why (``rejected``), and when to look again."""

    # Due but held back by a budget: they go on a later pass.
    deferred: list[str] = field(default_factory=list)
    # Every due candidate (to delete now or deferred): when it became due, that is,
    # when it had been empty for consolidateAfter. A pod event moves this on.
    due_at: dict[str, float] = field(default_factory=dict)
    # When the next not-yet-due empty node becomes due, if any.
    next_due: float | None = None

    @property
    def has_work(self) -> bool:
        return self.command is not None or bool(self.deferred) or self.next_due is not None


def reschedulable(pod: Pod) -> bool:
    """A pod that would have to move if its node went away."""
    return not pod.is_daemonset_pod and not pod.is_terminal and not pod.metadata.deleting


def is_empty(candidate: Candidate) -> bool:
    return not any(reschedulable(pod) for pod in candidate.pods)


def quiet_since(nodeclaim: NodeClaim) -> float:
    """The later of the NodeClaim's initialization and its last pod event."""
    initialized = nodeclaim.condition(CONDITION_INITIALIZED)
    since = initialized.last_transition_time if initialized is not None else 0.0
    last_pod_event = nodeclaim.status.last_pod_event_time
    if last_pod_event is not None:
        since = max(since, last_pod_event)
    return since


def empty_since(candidate: Candidate) -> float:
    return quiet_since(candidate.nodeclaim)


def consolidatable_at(nodeclaim: NodeClaim, nodepool: NodePool) -> float | None:
    """When the NodeClaim becomes ``Consolidatable`` (Karpenter's condition), None if it cannot.

    An initialized NodeClaim in a NodePool that consolidates at all becomes
    consolidatable once ``consolidateAfter`` has passed since it went quiet
    (:func:`quiet_since`): the moment emptiness and consolidation start to
    consider it.
    """
    after = nodepool.disruption.consolidate_after
    if after is None or not nodeclaim.initialized:
        return None
    return quiet_since(nodeclaim) + after


def considered(candidate: Candidate) -> bool:
    """Whether emptiness looks at the node: empty, in a NodePool that consolidates at all (a static
    pool does not: it keeps its replicas, empty or not)."""
    return (
        not candidate.nodepool.is_static
        and candidate.nodepool.disruption.consolidate_after is not None
        and is_empty(candidate)
    )


def decide_emptiness(
    candidates: Sequence[Candidate], allowed: Mapping[str, int], now: float
) -> EmptinessDecision:
    """Which empty nodes to delete now, which are left alone and why, and when to look again.

    ``allowed`` is how many more nodes of each NodePool may be disrupted for
    ``Empty``; a NodePool missing from it gets none.
    """
    decision = EmptinessDecision()
    due: dict[str, list[Candidate]] = {}
    for candidate in sorted(candidates, key=lambda c: c.nodeclaim.name):
        name = candidate.nodeclaim.name
        after = candidate.nodepool.disruption.consolidate_after
        if after is None or not is_empty(candidate):
            continue
        if candidate.node.metadata.annotations.get(DO_NOT_DISRUPT_ANNOTATION) == "true":
            decision.rejected[name] = Rejection(
                RejectionKind.NODE_DO_NOT_DISRUPT, f"node has {DO_NOT_DISRUPT_ANNOTATION}"
            )
            continue
        when = empty_since(candidate) + after
        if when > now:
            decision.next_due = when if decision.next_due is None else min(decision.next_due, when)
            continue
        decision.due_at[name] = when
        due.setdefault(candidate.nodepool.name, []).append(candidate)
    delete: list[Candidate] = []
    for pool_name, pool_candidates in sorted(due.items()):
        pool_allowed = allowed.get(pool_name, 0)
        delete.extend(pool_candidates[:pool_allowed])
        for candidate in pool_candidates[pool_allowed:]:
            decision.deferred.append(candidate.nodeclaim.name)
            decision.rejected[candidate.nodeclaim.name] = Rejection(
                RejectionKind.BUDGET,
                f"disruption budget of NodePool {pool_name} allows {pool_allowed} more now",
            )
    if delete:
        names = [candidate.nodeclaim.name for candidate in delete]
        decision.command = RemovalCommand(
            REASON_EMPTY, delete, description=f"delete empty {', '.join(names)}"
        )
    return decision


@dataclass(frozen=True, slots=True)
class Emptiness:
    """Karpenter's Emptiness: delete the nodes empty for consolidateAfter (a :class:`Method`)."""

    now: float
    reason: str = REASON_EMPTY

    def considers(self, candidate: Candidate) -> bool:
        return considered(candidate)

    def compute(self, candidates: Sequence[Candidate], allowed: Mapping[str, int]) -> EmptinessDecision:
        return decide_emptiness(candidates, allowed, self.now)


__all__ = [
    "Emptiness",
    "EmptinessDecision",
    "considered",
    "consolidatable_at",
    "decide_emptiness",
    "empty_since",
    "is_empty",
    "quiet_since",
    "reschedulable",
]
