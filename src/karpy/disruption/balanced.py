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

Each move consolidation computes is also told as a :class:`ScoredMove` per
NodePool it touches (Karpenter's ``consolidation_moves_total`` counts every
pool's, its ``consolidation_score`` and ``ConsolidationApproved`` Event only
the Balanced pools'); the controller publishes them.

karpy scores a replacement on the saving it can count on (the removed nodes'
price less the worst launch price of the replacement's options, which is
what :class:`~karpy.disruption.consolidation.ConsolidationCommand` holds);
Karpenter scores it on the cheapest option's price, which the launch may not
get. docs/consolidation.md ("Balanced") has the rule and an example.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from karpy.api.instancetype import worst_launch_price
from karpy.api.nodepool import BALANCED
from karpy.disruption.candidates import eviction_cost
from karpy.disruption.consolidation import ConsolidationCommand
from karpy.disruption.emptiness import reschedulable
from karpy.disruption.method import Candidate
from karpy.disruption.rejection import Rejection, RejectionKind
from karpy.scheduling.solver import NewNodeClaim, pod_requests

# Karpenter's BalancedK: a move passes when its score is at least 1/k.
BALANCED_K = 2
# Karpenter's PerNodeBaseDisruptionCost: what disrupting even an empty node costs.
PER_NODE_BASE_DISRUPTION_COST = 1.0
# Karpenter's ``decision`` label values of its Balanced move metrics.
MOVE_APPROVED = "approved"
MOVE_REJECTED = "rejected"


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


def node_totals(nodes: Sequence[Candidate], prices: Mapping[str, float]) -> PoolTotals:
    """What ``nodes`` cost an hour and what disrupting all of them costs.

    A node whose price is not known adds nothing to the cost, as in Karpenter,
    where an unpriceable node carries a price of 0.
    """
    cost = sum(max(0.0, prices.get(node.nodeclaim.name, 0.0)) for node in nodes)
    return PoolTotals(cost, sum(reschedule_disruption_cost(node) for node in nodes))


def pool_totals(nodes: Sequence[Candidate], prices: Mapping[str, float]) -> dict[str, PoolTotals]:
    """Each Balanced NodePool's totals over ``nodes`` (all its nodes, not only the candidates)."""
    by_pool: dict[str, list[Candidate]] = {}
    for node in nodes:
        if node.nodepool.disruption.consolidation_policy == BALANCED:
            by_pool.setdefault(node.nodepool.name, []).append(node)
    return {pool: node_totals(members, prices) for pool, members in by_pool.items()}


def score_move(
    savings: float, disruption_cost: float, totals: PoolTotals, k: int = BALANCED_K
) -> BalancedScore:
    """Karpenter's ScoreMove: with a zero total there is nothing to weigh against, and the move fails."""
    if totals.cost <= 0 or totals.disruption_cost <= 0:
        return BalancedScore(0.0, 0.0, k)
    return BalancedScore(savings / totals.cost, disruption_cost / totals.disruption_cost, k)


def _shares_of(claim: NewNodeClaim, pool_of_pod: Mapping[str, str]) -> dict[str, float]:
    """Each pool's part of a replacement: its pods' share of the CPU and memory requests (the mean of
    the two where both are requested), or of the pods where nothing is."""
    weights: dict[str, list[float]] = {}
    totals = [0.0, 0.0]
    for pod in claim.pods:
        pool = pool_of_pod.get(pod.key)
        if pool is None:
            continue
        requests = pod_requests(pod)
        amounts = [float(requests.get("cpu", 0)), float(requests.get("memory", 0))]
        weights.setdefault(pool, [0.0, 0.0, 0.0])
        for index, amount in enumerate(amounts):
            weights[pool][index] += amount
            totals[index] += amount
        weights[pool][2] += 1
    if not weights:
        return {}
    counted = [index for index in (0, 1) if totals[index] > 0]
    if not counted:
        pods = sum(weight[2] for weight in weights.values())
        return {pool: weight[2] / pods for pool, weight in weights.items()}
    return {
        pool: sum(weight[index] / totals[index] for index in counted) / len(counted)
        for pool, weight in weights.items()
    }


def pool_savings(
    by_pool: Mapping[str, Sequence[Candidate]],
    prices: Mapping[str, float],
    savings: float,
    replacements: Sequence[NewNodeClaim],
) -> dict[str, float]:
    """Each pool's own saving in a move across pools: its removed nodes' cost less its part of what
    the move still pays for.

    What the move pays for is the removed nodes' cost less ``savings``: the
    replacements' worst launch prices, each shared by the pools whose pods it
    is for (:func:`_shares_of`); what is left of it (a plan the budgets
    split, whose nodes to go later are still paid for) is shared by each
    pool's part of the removed nodes' cost, as Karpenter shares the saving.
    The pools' savings add up to ``savings``.
    """
    cost = {
        pool: sum(prices.get(c.nodeclaim.name, 0.0) for c in members) for pool, members in by_pool.items()
    }
    source = sum(cost.values())
    if source <= 0:
        return {pool: savings for pool in by_pool}
    pool_of_pod = {pod.key: pool for pool, members in by_pool.items() for c in members for pod in c.pods}
    paid = {pool: 0.0 for pool in by_pool}
    shared_out = 0.0
    for claim in replacements:
        worst = max((worst_launch_price(t, claim.requirements) for t in claim.instance_types), default=0.0)
        for pool, share in _shares_of(claim, pool_of_pod).items():
            paid[pool] += worst * share
            shared_out += worst * share
    rest = source - savings - shared_out
    return {pool: cost[pool] - paid[pool] - rest * cost[pool] / source for pool in by_pool}


@dataclass(frozen=True, slots=True)
class ScoredMove:
    """One NodePool's part of a consolidation move, approved or rejected: what Karpenter counts in
    ``karpenter_consolidation_moves_total`` (every pool) and, for a Balanced pool, observes in
    ``karpenter_consolidation_score`` and tells in a ``ConsolidationApproved`` Event."""

    nodepool: str
    # The pool's consolidationPolicy, as written (Karpenter's ``policy`` label).
    policy: str
    approved: bool
    # The pool's score; None for a pool that is not Balanced (counted, never scored).
    score: BalancedScore | None
    # The pool's NodeClaims in the move.
    nodeclaims: tuple[str, ...]
    # Multi-node consolidation's move: its Event is on the NodePool, a single node's on the node.
    # ``approved`` is the move's (every Balanced pool's approval), the score's own the pool's.
    multi_node: bool = False

    @property
    def decision(self) -> str:
        """Karpenter's ``decision`` label: ``approved`` or ``rejected``."""
        return MOVE_APPROVED if self.approved else MOVE_REJECTED


def scored_moves(
    evaluator: BalancedEvaluator | None, command: ConsolidationCommand, *, multi_node: bool
) -> list[ScoredMove]:
    """The command's move, per NodePool it removes nodes of, as ``evaluator`` scores it (every pool
    approved without one: no Balanced pool among the candidates)."""
    removed = [*command.candidates, *command.planned]
    scores = (
        evaluator.scores(removed, command.savings_per_hour, command.replacements)
        if evaluator is not None
        else {}
    )
    by_pool: dict[str, list[Candidate]] = {}
    for candidate in removed:
        by_pool.setdefault(candidate.nodepool.name, []).append(candidate)
    # A move is approved when every Balanced pool approves it (Karpenter's allApproved).
    approved = all(score.approved for score in scores.values())
    moves: list[ScoredMove] = []
    for pool, members in sorted(by_pool.items()):
        score = scores.get(pool)
        moves.append(
            ScoredMove(
                pool,
                members[0].nodepool.disruption.consolidation_policy or "",
                approved,
                score,
                tuple(c.nodeclaim.name for c in members),
                multi_node,
            )
        )
    return moves


@dataclass(frozen=True, slots=True)
class BalancedEvaluator:
    """Scores consolidation moves for the Balanced NodePools among their candidates."""

    totals: Mapping[str, PoolTotals]
    prices: Mapping[str, float]

    def scores(
        self, removed: Sequence[Candidate], savings: float, replacements: Sequence[NewNodeClaim] = ()
    ) -> dict[str, BalancedScore]:
        """The score of removing ``removed`` (saving ``savings`` $/h, launching ``replacements``) in
        each Balanced pool it touches, each on its own saving (:func:`pool_savings`)."""
        by_pool: dict[str, list[Candidate]] = {}
        for candidate in removed:
            by_pool.setdefault(candidate.nodepool.name, []).append(candidate)
        shared = pool_savings(by_pool, self.prices, savings, replacements) if len(by_pool) > 1 else {}
        scores: dict[str, BalancedScore] = {}
        for pool, members in sorted(by_pool.items()):
            if members[0].nodepool.disruption.consolidation_policy != BALANCED:
                continue
            disruption = sum(reschedule_disruption_cost(c) for c in members)
            totals = self.totals.get(pool, PoolTotals(0.0, 0.0))
            scores[pool] = score_move(shared.get(pool, savings), disruption, totals)
        return scores

    def rejection(
        self, removed: Sequence[Candidate], savings: float, replacements: Sequence[NewNodeClaim] = ()
    ) -> Rejection | None:
        """Why a move that saves ``savings`` $/h is not Balanced enough, or None when every pool approves."""
        for pool, score in self.scores(removed, savings, replacements).items():
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
        return self.rejection(
            [*command.candidates, *command.planned], command.savings_per_hour, command.replacements
        )

    def can_pass(self, candidate: Candidate) -> bool:
        """Karpenter's CanPassThreshold: whether deleting the node alone (the best move of it) passes."""
        totals = self.totals.get(candidate.nodepool.name)
        balanced = candidate.nodepool.disruption.consolidation_policy == BALANCED
        if not balanced or totals is None or totals.cost <= 0:
            return True
        return self.rejection([candidate], self.prices.get(candidate.nodeclaim.name, 0.0)) is None


__all__ = [
    "BALANCED_K",
    "MOVE_APPROVED",
    "MOVE_REJECTED",
    "BalancedEvaluator",
    "BalancedScore",
    "PoolTotals",
    "ScoredMove",
    "pool_savings",
    "pool_totals",
    "reschedule_disruption_cost",
    "score_move",
    "scored_moves",
]
