"""Balanced consolidation: a move's savings weighed against the disruption it causes (Karpenter v1.15).

A NodePool with ``consolidationPolicy: Balanced`` consolidates as
WhenEmptyOrUnderutilized does, but a move (a delete or a replacement) is
carried out only when its score reaches ``1 / k`` with Karpenter's
``BalancedK`` of 2::

    score = (savings / pool cost) / (disruption cost / pool disruption cost)

The pool's cost is what all its nodes cost an hour; a node's disruption cost
is 1 plus the eviction cost (:func:`~karpy.disruption.candidates.eviction_cost`,
negative ones counted as 0) of each pod that would have to move, and the
pool's is the sum over all its nodes, candidates or not. A move that saves a
tenth of the pool's cost is taken when it disrupts at most a fifth of the
pool's pods. Empty nodes are not scored (emptiness deletes them under every
policy), nor are pools with another policy; a move across several Balanced
pools must pass in each, its savings shared by what each pool's nodes cost;
a plan the budgets split is scored on every node its saving counts.

karpy scores a replacement on the saving it can count on (the removed nodes'
price less the worst launch price of the replacement's options, which is
what :class:`~karpy.disruption.consolidation.ConsolidationCommand` holds);
Karpenter scores it on the cheapest option's price, which the launch may not
get. docs/consolidation.md ("Balanced") has the rule and an example.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from karpy.api.nodepool import BALANCED
from karpy.disruption.candidates import eviction_cost
from karpy.disruption.consolidation import ConsolidationCommand
from karpy.disruption.emptiness import reschedulable
from karpy.disruption.method import Candidate
from karpy.disruption.rejection import Rejection, RejectionKind

# Karpenter's BalancedK: a move passes when its score is at least 1/k.
BALANCED_K = 2
# Karpenter's PerNodeBaseDisruptionCost: what disrupting even an empty node costs.
PER_NODE_BASE_DISRUPTION_COST = 1.0


@dataclass(frozen=True, slots=True)
class PoolTotals:
    """A NodePool's hourly cost and disruption cost, over all its nodes: the score's denominators."""

    cost: float
    disruption_cost: float


@dataclass(frozen=True, slots=True)
class BalancedScore:
    """One pool's share of a move: the fractions of its cost saved and of its disruption caused."""

    savings_fraction: float
    disruption_fraction: float
    k: int = BALANCED_K

    @property
    def score(self) -> float:
        if self.savings_fraction <= 0:
            return 0.0
        if self.disruption_fraction == 0:
            return float("inf")
        return self.savings_fraction / self.disruption_fraction

    @property
    def threshold(self) -> float:
        return 1.0 / self.k

    @property
    def approved(self) -> bool:
        return self.score >= self.threshold


def reschedule_disruption_cost(candidate: Candidate) -> float:
    """Karpenter's RescheduleDisruptionCost: 1 plus each pod that would move's eviction cost, at least 0."""
    return PER_NODE_BASE_DISRUPTION_COST + sum(
        max(0.0, eviction_cost(pod)) for pod in candidate.pods if reschedulable(pod)
    )


def pool_totals(nodes: Sequence[Candidate], prices: Mapping[str, float]) -> dict[str, PoolTotals]:
    """Each Balanced NodePool's totals over ``nodes`` (all its nodes, not only the candidates).

    A node whose price is not known adds nothing to its pool's cost, as in
    Karpenter, where an unpriceable node carries a price of 0.
    """
    cost: dict[str, float] = {}
    disruption: dict[str, float] = {}
    for node in nodes:
        if node.nodepool.disruption.consolidation_policy != BALANCED:
            continue
        pool = node.nodepool.name
        cost[pool] = cost.get(pool, 0.0) + max(0.0, prices.get(node.nodeclaim.name, 0.0))
        disruption[pool] = disruption.get(pool, 0.0) + reschedule_disruption_cost(node)
    return {pool: PoolTotals(cost[pool], disruption[pool]) for pool in cost}


def score_move(
    savings: float, disruption_cost: float, totals: PoolTotals, k: int = BALANCED_K
) -> BalancedScore:
    """Karpenter's ScoreMove: with a zero total there is nothing to weigh against, and the move fails."""
    if totals.cost <= 0 or totals.disruption_cost <= 0:
        return BalancedScore(0.0, 0.0, k)
    return BalancedScore(savings / totals.cost, disruption_cost / totals.disruption_cost, k)


@dataclass(frozen=True, slots=True)
class BalancedEvaluator:
    """Scores consolidation moves for the Balanced NodePools among their candidates."""

    totals: Mapping[str, PoolTotals]
    prices: Mapping[str, float]

    def scores(self, removed: Sequence[Candidate], savings: float) -> dict[str, BalancedScore]:
        """The score of removing ``removed`` (saving ``savings`` $/h) in each Balanced pool it touches."""
        by_pool: dict[str, list[Candidate]] = {}
        for candidate in removed:
            by_pool.setdefault(candidate.nodepool.name, []).append(candidate)
        source_cost = sum(self.prices.get(c.nodeclaim.name, 0.0) for c in removed)
        scores: dict[str, BalancedScore] = {}
        for pool, members in sorted(by_pool.items()):
            if members[0].nodepool.disruption.consolidation_policy != BALANCED:
                continue
            pool_savings = savings
            if len(by_pool) > 1 and source_cost > 0:
                # A move across pools: each gets the share of the savings its nodes' cost makes.
                pool_cost = sum(self.prices.get(c.nodeclaim.name, 0.0) for c in members)
                pool_savings = savings * pool_cost / source_cost
            disruption = sum(reschedule_disruption_cost(c) for c in members)
            scores[pool] = score_move(pool_savings, disruption, self.totals.get(pool, PoolTotals(0.0, 0.0)))
        return scores

    def rejection(self, removed: Sequence[Candidate], savings: float) -> Rejection | None:
        """Why a move that saves ``savings`` $/h is not Balanced enough, or None when every pool approves."""
        for pool, score in self.scores(removed, savings).items():
            if not score.approved:
                return Rejection(
                    RejectionKind.BALANCED_SCORE_TOO_LOW,
                    f"NodePool {pool} is Balanced: the move saves {score.savings_fraction:.1%} of its cost "
                    f"for {score.disruption_fraction:.1%} of its disruption cost (score {score.score:.2f}, "
                    f"needs {score.threshold:.2f})",
                )
        return None

    def rejection_of(self, command: ConsolidationCommand) -> Rejection | None:
        """:meth:`rejection` of a command: its saving is reckoned on the nodes it disrupts now and
        those it plans to remove once the budgets let them go, so it is scored on all of them."""
        return self.rejection([*command.candidates, *command.planned], command.savings_per_hour)

    def can_pass(self, candidate: Candidate) -> bool:
        """Karpenter's CanPassThreshold: whether deleting the node alone (the best move of it) passes."""
        totals = self.totals.get(candidate.nodepool.name)
        balanced = candidate.nodepool.disruption.consolidation_policy == BALANCED
        if not balanced or totals is None or totals.cost <= 0:
            return True
        return self.rejection([candidate], self.prices.get(candidate.nodeclaim.name, 0.0)) is None


__all__ = [
    "BALANCED_K",
    "BalancedEvaluator",
    "BalancedScore",
    "PoolTotals",
    "pool_totals",
    "reschedule_disruption_cost",
    "score_move",
]
