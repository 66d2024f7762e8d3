"""Single-node consolidation: one node deleted or replaced alone (Karpenter's SingleNodeConsolidation).

Tried once multi-node consolidation has found nothing: each non-empty
candidate in disruption order, the first that can go is the command, and
each that cannot says why. Under karpy's rules a node may be split into up
to two new nodes (docs/consolidation.md, "Splitting a node").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from karpy.api.nodepool import REASON_UNDERUTILIZED
from karpy.disruption.balanced import BalancedEvaluator, ScoredMove, scored_moves
from karpy.disruption.consolidation import ConsolidationCommand, ConsolidationRules, evaluate
from karpy.disruption.emptiness import is_empty
from karpy.disruption.method import Candidate, MethodResult
from karpy.disruption.rejection import Rejection
from karpy.disruption.simulator import RemovalSimulator


def consolidate_single(
    candidates: Sequence[Candidate],
    simulator: RemovalSimulator,
    prices: Mapping[str, float],
    allowed: Mapping[str, int],
    *,
    rules: ConsolidationRules,
    balanced: BalancedEvaluator | None = None,
    moves: list[ScoredMove] | None = None,
) -> tuple[ConsolidationCommand | None, dict[str, Rejection]]:
    """The first candidate, in the given order, that can be deleted or replaced alone.

    Returns the command (or None) and, for each candidate tried in vain, why.
    ``balanced`` scores the moves of Balanced NodePools: a node that even a
    delete would not score high enough for is not simulated (Karpenter's
    CanPassThreshold), and a move that scores too low is no command. Each
    move worked out, approved or not, is added to ``moves`` (Karpenter counts
    them all; a node not simulated is no move).
    """
    unconsolidatable: dict[str, Rejection] = {}
    for candidate in candidates:
        if allowed.get(candidate.nodepool.name, 0) <= 0 or is_empty(candidate):
            continue
        if balanced is not None and not balanced.can_pass(candidate):
            rejected = balanced.rejection([candidate], prices.get(candidate.nodeclaim.name, 0.0))
            if rejected is not None:
                unconsolidatable[candidate.nodeclaim.name] = rejected
            continue
        result = evaluate([candidate], simulator, prices, rules)
        if isinstance(result, ConsolidationCommand) and moves is not None:
            moves.extend(scored_moves(balanced, result, multi_node=False))
        if isinstance(result, ConsolidationCommand) and balanced is not None:
            result = balanced.rejection_of(result) or result
        if isinstance(result, ConsolidationCommand):
            return result, unconsolidatable
        unconsolidatable[candidate.nodeclaim.name] = result
    return None, unconsolidatable


@dataclass(frozen=True, slots=True)
class SingleNodeConsolidation:
    """Karpenter's SingleNodeConsolidation: the first node that can go alone (a :class:`Method`)."""

    simulator: RemovalSimulator
    prices: Mapping[str, float]
    rules: ConsolidationRules
    balanced: BalancedEvaluator | None = None
    reason: str = REASON_UNDERUTILIZED
    # Every move compute works out, scored (see consolidate_single); the caller reads them.
    moves: list[ScoredMove] = field(default_factory=list)

    def considers(self, candidate: Candidate) -> bool:
        # Empty nodes are emptiness' business, under its own budget.
        return not is_empty(candidate)

    def compute(self, candidates: Sequence[Candidate], allowed: Mapping[str, int]) -> MethodResult:
        command, rejected = consolidate_single(
            candidates,
            self.simulator,
            self.prices,
            allowed,
            rules=self.rules,
            balanced=self.balanced,
            moves=self.moves,
        )
        return MethodResult(command, rejected)
