"""Consolidation candidates: which nodes may be disrupted now, in what order, and why not the others.

A node is a candidate when its NodeClaim is initialized and not being
deleted, its NodePool consolidates underused nodes and its consolidateAfter
has elapsed (Karpenter's ``Consolidatable``), nothing blocks evicting its
pods, and the price of its offering is known. Every node left out gets a
typed reason (:class:`~karpy.disruption.rejection.Rejection`); those held
back only by do-not-disrupt or their pods are kept apart, so the caller can
say what keeping them costs. Candidates come cheapest to disrupt first
(Karpenter's disruption cost). docs/consolidation.md ("Candidates") has the
rules.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass, field

from karpy.api.core import DO_NOT_DISRUPT_ANNOTATION, Pod
from karpy.api.nodeclaim import CONDITION_INITIALIZED, NodeClaim
from karpy.api.nodepool import CONSOLIDATES_UNDERUTILIZED
from karpy.api.requirements import LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE
from karpy.disruption.emptiness import empty_since, reschedulable
from karpy.disruption.method import Candidate
from karpy.disruption.rejection import Rejection, RejectionKind
from karpy.scheduling.solver import Plan

POD_DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
# Karpenter v1.15's own per-pod steer of consolidation, read before the pod deletion cost.
DISRUPTION_COST_ANNOTATION = "karpenter.sh/disruption-cost"
# Karpenter's per-pod eviction cost: 1 + priority / 2**25 + deletion cost / 2**27, clamped.
_PRIORITY_SCALE = 2.0**25
_DELETION_COST_SCALE = 2.0**27
_POD_COST_BOUND = 10.0

# The hourly price of a candidate's launched offering: by NodeClaim name, or a
# function of the candidate (None when it cannot be told).
PriceOf = Mapping[str, float] | Callable[[Candidate], float | None]


@dataclass(slots=True)
class CandidateSelection:
    """The nodes consolidation may disrupt, cheapest to disrupt first, and the others."""

    eligible: list[Candidate] = field(default_factory=list)
    # The launched offering's hourly price of every eligible candidate, by NodeClaim name.
    prices: dict[str, float] = field(default_factory=dict)
    blocked: dict[str, Rejection] = field(default_factory=dict)
    # Blocked only by their pods or the node's annotation (priced, due): what they
    # would save is worth telling (see :func:`savings_given_up`).
    held_back: list[Candidate] = field(default_factory=list)
    # When the next candidate whose consolidateAfter has not elapsed becomes one, or a
    # pod's timed do-not-disrupt lapses.
    next_due: float | None = None


def eviction_cost(pod: Pod) -> float:
    """Karpenter's cost of evicting one pod: about 1, more for priority and disruption or deletion cost."""
    cost = 1.0
    annotations = pod.metadata.annotations
    deletion_cost = annotations.get(DISRUPTION_COST_ANNOTATION, annotations.get(POD_DELETION_COST_ANNOTATION))
    if deletion_cost is not None:
        try:
            value = float(deletion_cost)
        except ValueError:
            value = 0.0
        if math.isfinite(value):
            cost += value / _DELETION_COST_SCALE
    cost += pod.spec.priority / _PRIORITY_SCALE
    return min(_POD_COST_BOUND, max(-_POD_COST_BOUND, cost))


def lifetime_remaining(candidate: Candidate, now: float) -> float:
    """The fraction of the NodeClaim's ``expireAfter`` still ahead of it, 1 without one."""
    return nodeclaim_lifetime_remaining(candidate.nodeclaim, now)


def nodeclaim_lifetime_remaining(nodeclaim: NodeClaim, now: float) -> float:
    """:func:`lifetime_remaining` of a NodeClaim that need not be a candidate."""
    expire_after = nodeclaim.spec.expire_after
    created = nodeclaim.metadata.creation_timestamp
    if expire_after is None or expire_after <= 0 or created is None:
        return 1.0
    return min(1.0, max(0.0, (expire_after - (now - created)) / expire_after))


def disruption_cost(candidate: Candidate, now: float) -> float:
    """What disrupting the node costs: its reschedulable pods' eviction costs, scaled by lifetime left."""
    pods_cost = sum(eviction_cost(pod) for pod in candidate.pods if reschedulable(pod))
    return pods_cost * lifetime_remaining(candidate, now)


def disruption_order(candidates: Sequence[Candidate], now: float) -> list[Candidate]:
    """Cheapest to disrupt first, ties by NodeClaim name."""
    return sorted(candidates, key=lambda c: (disruption_cost(c, now), c.nodeclaim.name))


def do_not_disrupt_rejection(pod: Pod, now: float) -> Rejection | None:
    """The pod's ``karpenter.sh/do-not-disrupt``, if it still protects the pod at ``now``."""
    until = pod.do_not_disrupt_until()
    if until is None or now >= until:
        return None
    # "true" keeps the message it always had; a duration says how long it still holds.
    lapses = "" if math.isinf(until) else f" for another {until - now:.0f}s"
    return Rejection(
        RejectionKind.POD_DO_NOT_DISRUPT,
        f"pod {pod.key} has {DO_NOT_DISRUPT_ANNOTATION}{lapses}",
        pods=(pod.key,),
    )


def do_not_disrupt_lapses(pods: Sequence[Pod], now: float) -> float | None:
    """When the first timed ``do-not-disrupt`` still holding one of ``pods`` lapses, if any."""
    ends = [pod.do_not_disrupt_until() for pod in pods]
    return min((until for until in ends if until is not None and now < until < math.inf), default=None)


def eviction_blocker(candidate: Candidate, pdb_blocked: Mapping[str, str], now: float) -> Rejection | None:
    """Why the node's pods cannot be evicted at ``now``, or None if they can."""
    if candidate.node.metadata.annotations.get(DO_NOT_DISRUPT_ANNOTATION) == "true":
        return Rejection(RejectionKind.NODE_DO_NOT_DISRUPT, f"node has {DO_NOT_DISRUPT_ANNOTATION}")
    for pod in sorted(candidate.pods, key=lambda pod: pod.key):
        if not reschedulable(pod):
            continue
        protected = do_not_disrupt_rejection(pod, now)
        if protected is not None:
            return protected
        if pod.metadata.controller is None:
            return Rejection(
                RejectionKind.POD_WITHOUT_OWNER,
                f"pod {pod.key} has no controller owner to recreate it",
                pods=(pod.key,),
            )
        pdb_reason = pdb_blocked.get(pod.key)
        if pdb_reason is not None:
            return Rejection(
                RejectionKind.POD_DISRUPTION_BUDGET, f"pod {pod.key}: {pdb_reason}", pods=(pod.key,)
            )
    return None


def price_table(candidates: Sequence[Candidate], price_of: PriceOf) -> dict[str, float | None]:
    if isinstance(price_of, Mapping):
        return {c.nodeclaim.name: price_of.get(c.nodeclaim.name) for c in candidates}
    return {c.nodeclaim.name: price_of(c) for c in candidates}


def _waiting(candidate: Candidate, now: float) -> tuple[Rejection | None, float | None]:
    """Why consolidation must leave ``candidate`` alone for now (None if it need not), and when
    it may look again if that is a matter of time (consolidateAfter)."""
    pool = candidate.nodepool
    disruption = pool.disruption
    if candidate.nodeclaim.metadata.deleting or candidate.node.metadata.deleting:
        return Rejection(RejectionKind.BEING_DELETED, "node is being deleted"), None
    if not candidate.nodeclaim.is_true(CONDITION_INITIALIZED):
        return Rejection(RejectionKind.NOT_INITIALIZED, "node is not initialized yet"), None
    if disruption.consolidate_after is None:
        message = f"NodePool {pool.name} has consolidation disabled (consolidateAfter: Never)"
        return Rejection(RejectionKind.CONSOLIDATION_DISABLED, message), None
    if disruption.consolidation_policy not in CONSOLIDATES_UNDERUTILIZED:
        message = f"NodePool {pool.name} consolidates only empty nodes ({disruption.consolidation_policy})"
        return Rejection(RejectionKind.EMPTY_ONLY, message), None
    due = empty_since(candidate) + disruption.consolidate_after
    if due > now:
        message = f"consolidateAfter has not elapsed (consolidatable in {due - now:.0f}s)"
        return Rejection(RejectionKind.NOT_DUE, message), due
    return None, None


def any_consolidatable(candidates: Sequence[Candidate], now: float) -> bool:
    """Whether consolidation could act on any of ``candidates`` now, as far as time and state go.

    When none could, ``decide_consolidation`` decides nothing whatever the
    rest of the cluster looks like (it only reports why each waits), so a
    caller can skip building the cluster's capacity for it: during a
    scale-up every new node waits out consolidateAfter, pass after pass.
    """
    return any(_waiting(candidate, now)[0] is None for candidate in candidates)


def consolidation_candidates(
    candidates: Sequence[Candidate],
    price_of: PriceOf,
    pdb_blocked: Mapping[str, str],
    now: float,
) -> CandidateSelection:
    """Which nodes consolidation may disrupt now (in disruption order), and why not the others."""
    selection = CandidateSelection()
    prices = price_table(candidates, price_of)
    for candidate in sorted(candidates, key=lambda c: c.nodeclaim.name):
        name = candidate.nodeclaim.name
        waiting, due = _waiting(candidate, now)
        if waiting is not None:
            selection.blocked[name] = waiting
            if due is not None:
                selection.next_due = due if selection.next_due is None else min(selection.next_due, due)
            continue
        blocker = eviction_blocker(candidate, pdb_blocked, now)
        lapses = do_not_disrupt_lapses([pod for pod in candidate.pods if reschedulable(pod)], now)
        if lapses is not None:
            # A timed do-not-disrupt lapsing is a moment to look again, as consolidateAfter is.
            selection.next_due = lapses if selection.next_due is None else min(selection.next_due, lapses)
        price = prices[name]
        if price is None or not math.isfinite(price):
            selection.blocked[name] = blocker or Rejection(
                RejectionKind.PRICE_UNKNOWN,
                f"the price of its offering ({offering_label(candidate)}) is unknown",
            )
            continue
        selection.prices[name] = price
        if blocker is not None:
            selection.blocked[name] = blocker
            selection.held_back.append(candidate)
            continue
        selection.eligible.append(candidate)
    selection.eligible = disruption_order(selection.eligible, now)
    selection.held_back = disruption_order(selection.held_back, now)
    return selection


def waiting_on_uninitialized(plan: Plan, uninitialized: Container[str]) -> tuple[str, str] | None:
    """The first pod (by key) ``plan`` puts on a node or NodeClaim not initialized yet, with that
    target, or None. A plan counting on capacity that may never come is no plan to disrupt by
    (Karpenter's rule); each method says so with its own rejection."""
    return min(
        ((key, target) for key, target in plan.existing.items() if target in uninitialized),
        default=None,
    )


def capacity_type_of(candidate: Candidate) -> str:
    return candidate.nodeclaim.capacity_type or candidate.node.metadata.labels.get(LABEL_CAPACITY_TYPE, "")


def instance_type_of(candidate: Candidate) -> str:
    return candidate.nodeclaim.instance_type or candidate.node.metadata.labels.get(LABEL_INSTANCE_TYPE, "")


def offering_label(candidate: Candidate) -> str:
    parts = (
        instance_type_of(candidate),
        candidate.nodeclaim.zone,
        capacity_type_of(candidate),
    )
    return ", ".join(part for part in parts if part) or "no labels"
