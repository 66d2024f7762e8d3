"""Multi-node consolidation: several nodes removed by one command (Karpenter's MultiNodeConsolidation).

Karpenter's search (``MULTI_NODE_PREFIX``) takes the candidates the budgets
allow, at most :data:`MAX_MULTI_NODE_CANDIDATES`, and binary-searches the
largest prefix that can go at once with at most one cheaper new NodeClaim.
karpy's (``MULTI_NODE_MERGE``) runs it too, and also grows groups of wasteful
nodes greedily (:func:`consolidate_merge`) to replace N nodes by M < N new
ones, in at most :data:`MAX_MERGE_SIMULATIONS` tries a pass; the command
that saves more wins. A merge is karpy's own move, and kube-scheduler puts
the pods it evicts by least allocation, not where the plan packed them, so
what is left is merged again: a merge into several new NodeClaims (Karpenter's
multi-node consolidation launches at most one) must pay for the pods it
moves, as a Balanced NodePool's moves must (:func:`merge_rejection`). docs/consolidation.md
("Merging fragments") has the rules and the bound.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from karpy.api.nodepool import REASON_UNDERUTILIZED
from karpy.api.quantity import ResourceAmounts
from karpy.disruption.balanced import (
    BalancedEvaluator,
    PoolTotals,
    reschedule_disruption_cost,
    score_move,
)
from karpy.disruption.candidates import capacity_type_of
from karpy.disruption.consolidation import (
    MULTI_NODE_MERGE,
    ConsolidationCommand,
    ConsolidationRules,
    evaluate,
)
from karpy.disruption.emptiness import reschedulable
from karpy.disruption.method import Candidate, MethodResult
from karpy.disruption.rejection import Rejection, RejectionKind
from karpy.disruption.simulator import RemovalSimulator
from karpy.scheduling.solver import pod_requests

# Karpenter's cap on the batch multi-node consolidation considers.
MAX_MULTI_NODE_CANDIDATES = 100
# Merging: at most this many nodes in a group, and this many simulations per pass.
MAX_MERGE_GROUP = 20
MAX_MERGE_SIMULATIONS = 100
_WASTE_RESOURCES = ("cpu", "memory")
# A merge into several NodeClaims must save at least the share of the fleet's cost that it
# disrupts of the fleet (a Balanced score of 1, where Balanced's moves need 1/2): on the real
# cluster a merge passing 1/2 (20 nodes into 11, a third of the cost for half the pods) still
# left kube-scheduler's placement of its pods to merge again.
MERGE_K = 1


def merge_rejection(command: ConsolidationCommand, fleet: PoolTotals) -> Rejection | None:
    """Why a merge does not pay for the pods it moves, or None when it does.

    Scored as a Balanced NodePool's move (Karpenter's score), over the whole
    fleet: the share of its cost the merge saves against the share of its
    disruption cost (1 a node plus each pod's eviction cost) it causes, on
    every node it disrupts now or plans to remove, at least ``1/MERGE_K``. A
    merge that saves a third of the fleet's cost by moving half its pods
    fails; it would leave kube-scheduler's placement of those pods to merge
    again.
    """
    removed = [*command.candidates, *command.planned]
    disruption = sum(reschedule_disruption_cost(candidate) for candidate in removed)
    score = score_move(command.savings_per_hour, disruption, fleet, MERGE_K)
    if score.approved:
        return None
    return Rejection(
        RejectionKind.MERGE_NOT_WORTH_MOVES,
        f"the merge saves {score.savings_fraction:.1%} of the fleet's cost for "
        f"{score.disruption_fraction:.1%} of its disruption cost "
        f"(score {score.score:.2f}, needs {score.threshold:.2f})",
    )


def _within_budget(group: Sequence[Candidate], allowed: Mapping[str, int]) -> list[Candidate]:
    """The members of ``group``, in its order, that the budgets let go now."""
    left = dict(allowed)
    chosen: list[Candidate] = []
    for candidate in group:
        pool = candidate.nodepool.name
        if left.get(pool, 0) > 0:
            left[pool] -= 1
            chosen.append(candidate)
    return chosen


def consolidate_multi(
    candidates: Sequence[Candidate],
    simulator: RemovalSimulator,
    prices: Mapping[str, float],
    allowed: Mapping[str, int],
    *,
    rules: ConsolidationRules,
    balanced: BalancedEvaluator | None = None,
) -> ConsolidationCommand | None:
    """The largest prefix (2..100) of ``candidates`` that can be removed at once, by binary search.

    ``candidates`` in disruption order (see :func:`consolidation_candidates`);
    each NodePool contributes no more than ``allowed`` of them. A prefix whose
    move ``balanced`` scores too low counts as one that cannot go, as in Karpenter.
    """
    batchable = _within_budget(candidates, allowed)[:MAX_MULTI_NODE_CANDIDATES]
    best: ConsolidationCommand | None = None
    low, high = 2, len(batchable)
    while low <= high:
        middle = (low + high) // 2
        result = _scored(evaluate(batchable[:middle], simulator, prices, rules), balanced)
        if isinstance(result, ConsolidationCommand):
            best = result
            low = middle + 1
        else:
            high = middle - 1
    return best


def _scored(
    result: ConsolidationCommand | Rejection, balanced: BalancedEvaluator | None
) -> ConsolidationCommand | Rejection:
    """The command, or why a Balanced NodePool turns it down."""
    if balanced is None or isinstance(result, Rejection):
        return result
    return balanced.rejection_of(result) or result


def waste(candidate: Candidate, price: float) -> float:
    """Price per unit of use: the node's price over the larger of its CPU and memory use (fractions).

    A node whose pods use a tenth of it costs ten times its share; merging
    starts from such nodes.
    """
    requested: ResourceAmounts = {}
    for pod in candidate.pods:
        if reschedulable(pod):
            for resource, amount in pod_requests(pod).items():
                requested[resource] = requested.get(resource, 0) + amount
    allocatable = candidate.node.allocatable
    use = max(
        (
            requested.get(resource, 0) / allocatable[resource]
            for resource in _WASTE_RESOURCES
            if allocatable.get(resource)
        ),
        default=0.0,
    )
    return price / max(use, 0.01)


def merge_groups(candidates: Sequence[Candidate], prices: Mapping[str, float]) -> list[list[Candidate]]:
    """The groups merging tries: per NodePool and capacity type, then all together; most wasteful first."""
    ordered = sorted(candidates, key=lambda c: (-waste(c, prices[c.nodeclaim.name]), c.nodeclaim.name))
    by_kind: dict[tuple[str, str], list[Candidate]] = {}
    for candidate in ordered:
        by_kind.setdefault((candidate.nodepool.name, capacity_type_of(candidate)), []).append(candidate)
    groups = [group[:MAX_MERGE_GROUP] for _, group in sorted(by_kind.items()) if len(group) > 1]
    mixed = ordered[:MAX_MERGE_GROUP]
    if len(mixed) > 1 and all(mixed != group for group in groups):
        groups.append(mixed)
    return groups


def consolidate_merge(
    candidates: Sequence[Candidate],
    simulator: RemovalSimulator,
    prices: Mapping[str, float],
    allowed: Mapping[str, int],
    *,
    rules: ConsolidationRules,
    balanced: BalancedEvaluator | None = None,
    fleet: PoolTotals | None = None,
) -> ConsolidationCommand | None:
    """Merge underused nodes: grow each group greedily, keep the command that saves the most.

    See docs/consolidation.md for the search and its bound. A group starts
    with its most wasteful node; each next node joins if the pods of the
    group with it still all find a place (two half-full nodes may need a
    node no cheaper than both, where three would not), and is skipped
    otherwise. Each try is one simulation; every try that is a valid
    command, and, when it launches several NodeClaims, pays for its moves on
    ``fleet`` (:func:`merge_rejection`, when given), competes on its saving.
    """
    best: ConsolidationCommand | None = None
    simulations = 0
    for group in merge_groups(candidates, prices):
        members = [group[0]]
        for candidate in group[1:]:
            if simulations >= MAX_MERGE_SIMULATIONS:
                return best
            trial = [*members, candidate]
            simulations += 1
            disrupt = _within_budget(trial, allowed)
            if not disrupt:
                break
            result = _scored(
                evaluate(trial, simulator, prices, rules, disrupt=disrupt, max_new=len(trial) - 1), balanced
            )
            if isinstance(result, Rejection):
                if not result.infeasible:
                    members = trial
                continue
            members = trial
            if fleet is not None and result.more_replacements and merge_rejection(result, fleet) is not None:
                continue
            if best is None or _saves_more(result, best):
                best = result
    return best


def _saves_more(command: ConsolidationCommand, than: ConsolidationCommand) -> bool:
    """More now, or as much now and more once the whole plan is carried out.

    The second matters when the budgets cut merges down to deleting the same
    node: the largest group says best which nodes stay (and so where the
    evicted pods should go).
    """
    if command.savings_per_hour > than.savings_per_hour + 1e-9:
        return True
    return (
        command.savings_per_hour > than.savings_per_hour - 1e-9
        and command.planned_savings_per_hour > than.planned_savings_per_hour + 1e-9
    )


@dataclass(frozen=True, slots=True)
class MultiNodeConsolidation:
    """Karpenter's MultiNodeConsolidation: several nodes at once (a :class:`Method`).

    The largest prefix by binary search and, under karpy's rules
    (``MULTI_NODE_MERGE``), merged groups too: whichever saves more.
    """

    simulator: RemovalSimulator
    prices: Mapping[str, float]
    rules: ConsolidationRules
    balanced: BalancedEvaluator | None = None
    # Every node's cost and disruption cost, for judging merges (:func:`merge_rejection`).
    fleet: PoolTotals | None = None
    reason: str = REASON_UNDERUTILIZED

    def considers(self, candidate: Candidate) -> bool:
        return True

    def compute(self, candidates: Sequence[Candidate], allowed: Mapping[str, int]) -> MethodResult:
        command = consolidate_multi(
            candidates, self.simulator, self.prices, allowed, rules=self.rules, balanced=self.balanced
        )
        if self.rules.multi_node == MULTI_NODE_MERGE:
            # Merging also keeps Karpenter's largest prefix (up to 100 nodes at once, where a
            # merge group stops at 20): whichever saves more.
            merged = consolidate_merge(
                candidates,
                self.simulator,
                self.prices,
                allowed,
                rules=self.rules,
                balanced=self.balanced,
                fleet=self.fleet,
            )
            if merged is not None and (command is None or merged.savings_per_hour > command.savings_per_hour):
                command = merged
        return MethodResult(command)
