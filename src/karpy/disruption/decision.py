"""The consolidation decision of one pass.

:func:`decide_consolidation` selects the candidates
(:mod:`~karpy.disruption.candidates`), holds back those whose budget is
spent, works out what the held-back nodes would save
(:func:`savings_given_up`), and runs the consolidation methods in
Karpenter's order (multi-node, then single-node) until one gives a command.
It decides and writes nothing: the controller carries the command out.
docs/consolidation.md has the rules.
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field

from karpy.api.nodepool import BALANCED, REASON_UNDERUTILIZED
from karpy.api.quantity import ResourceAmounts
from karpy.api.requirements import Requirements
from karpy.disruption.balanced import BalancedEvaluator, ScoredMove, node_totals, pool_totals, scored_moves
from karpy.disruption.candidates import PriceOf, consolidation_candidates, price_table
from karpy.disruption.consolidation import (
    ConsolidationCommand,
    ConsolidationRules,
    evaluate,
)
from karpy.disruption.memo import EvaluationMemo
from karpy.disruption.method import Candidate, Method
from karpy.disruption.multi_node import MultiNodeConsolidation
from karpy.disruption.rejection import Rejection, RejectionKind
from karpy.disruption.simulator import RemovalSimulator
from karpy.disruption.single_node import SingleNodeConsolidation
from karpy.scheduling.constraints import NamespaceLabels
from karpy.scheduling.default_spread import DefaultSpread
from karpy.scheduling.policy import SchedulingPolicy
from karpy.scheduling.solver import DEFAULT_POLICY, ExistingCapacity, NodePoolCapacity


@dataclass(slots=True)
class ConsolidationDecision:
    command: ConsolidationCommand | None = None
    # Nodes not considered, and why (policy, annotation, pods, budget, not due yet).
    blocked: dict[str, Rejection] = field(default_factory=dict)
    # Nodes single-node consolidation tried and could not remove, and why.
    unconsolidatable: dict[str, Rejection] = field(default_factory=dict)
    # $/h that deleting or replacing each node alone would save, for nodes held back
    # only by do-not-disrupt, a pod's PDB or owner, or a budget (see savings_given_up).
    savings_given_up: dict[str, float] = field(default_factory=dict)
    next_due: float | None = None
    # The consolidation moves worked out, per NodePool, approved or rejected (Karpenter's
    # consolidation_moves_total and score): the controller publishes them.
    moves: list[ScoredMove] = field(default_factory=list)


def savings_given_up(
    held_back: Sequence[Candidate],
    simulator: RemovalSimulator,
    prices: Mapping[str, float],
    *,
    rules: ConsolidationRules,
) -> dict[str, float]:
    """What each held-back node would save ($/h) if it alone were deleted or replaced.

    The same evaluation single-node consolidation makes, as if the blocker
    (do-not-disrupt, a PDB, a pod without owner, a budget) were not there:
    the node's price for a delete, its price less the replacement's worst
    launch price for a replace. A node whose pods would not fit elsewhere, or
    that no cheaper replacement exists for, gives up nothing: 0.
    """
    given_up: dict[str, float] = {}
    for candidate in held_back:
        result = evaluate([candidate], simulator, prices, rules)
        saving = result.savings_per_hour if isinstance(result, ConsolidationCommand) else 0.0
        given_up[candidate.nodeclaim.name] = max(0.0, saving)
    return given_up


def decide_consolidation(
    candidates: Sequence[Candidate],
    other_capacity: Sequence[ExistingCapacity],
    pools: Sequence[NodePoolCapacity],
    price_of: PriceOf,
    allowed: Mapping[str, int],
    pdb_blocked: Mapping[str, str],
    now: float,
    *,
    rules: ConsolidationRules,
    volume_terms: Mapping[str, Sequence[Requirements]] | None = None,
    namespace_labels: NamespaceLabels | None = None,
    savings_known: Container[str] = frozenset(),
    memo: EvaluationMemo | None = None,
    policy: SchedulingPolicy = DEFAULT_POLICY,
    volume_counts: Mapping[str, ResourceAmounts] | None = None,
    default_spread: DefaultSpread | None = None,
) -> ConsolidationDecision:
    """Multi-node consolidation, then single-node: the command to run now, if any.

    ``other_capacity`` is every node's and in-flight NodeClaim's capacity as
    the provisioner sees it (candidates included: each simulation leaves out
    the ones it removes; nodes already being disrupted must be left out by
    the caller). ``allowed`` is how many more nodes of each NodePool may be
    disrupted for Underutilized; a NodePool missing from it gets none.
    ``rules`` are the rules to decide by.

    The decision also says what the nodes held back by do-not-disrupt, a PDB
    or a budget would have saved (:func:`savings_given_up`), except for those
    in ``savings_known``: a caller that keeps the figure of a node while it
    stays blocked passes them, so each blocked node costs one simulation, not
    one per pass (a budget of zero over a large pool would otherwise simulate
    every node on every pass for a figure nobody acts on). ``policy`` is the
    scheduling policy provisioning plans with, ``volume_counts`` the volumes
    each moving pod attaches (counted against the nodes' attach limits) and
    ``default_spread`` the cluster's default topology spread constraints, so
    a simulation puts pods where provisioning would.
    """
    selection = consolidation_candidates(candidates, price_of, pdb_blocked, now)
    decision = ConsolidationDecision(blocked=selection.blocked, next_due=selection.next_due)
    held_back = list(selection.held_back)
    for candidate in selection.eligible:
        pool = candidate.nodepool.name
        if allowed.get(pool, 0) <= 0:
            decision.blocked[candidate.nodeclaim.name] = Rejection(
                RejectionKind.BUDGET,
                f"disruption budget of NodePool {pool} allows no more {REASON_UNDERUTILIZED} disruptions now",
            )
            held_back.append(candidate)
    eligible = [c for c in selection.eligible if c.nodeclaim.name not in decision.blocked]
    simulator = RemovalSimulator(
        other_capacity,
        pools,
        volume_terms,
        namespace_labels,
        give_back_limits=rules.weights,
        memo=memo,
        policy=policy,
        volume_counts=volume_counts,
        default_spread=default_spread,
    )
    decision.savings_given_up = savings_given_up(
        [c for c in held_back if c.nodeclaim.name not in savings_known],
        simulator,
        selection.prices,
        rules=rules,
    )
    # The denominators count every node, candidates or not (Karpenter's rule for Balanced).
    priced = price_table(candidates, price_of)
    known = {name: price for name, price in priced.items() if price is not None}
    balanced = None
    if any(c.nodepool.disruption.consolidation_policy == BALANCED for c in eligible):
        balanced = BalancedEvaluator(pool_totals(candidates, known), selection.prices)
    # Karpenter's order: multi-node, then single-node; the first command found is the one.
    # karpy's merges into several NodeClaims pay for the pods they move (see multi_node).
    fleet = node_totals(candidates, known)
    multi = MultiNodeConsolidation(simulator, selection.prices, rules, balanced, fleet)
    single = SingleNodeConsolidation(simulator, selection.prices, rules, balanced)
    methods: tuple[Method, ...] = (multi, single)
    command = None
    for method in methods:
        result = method.compute([c for c in eligible if method.considers(c)], allowed)
        decision.unconsolidatable = result.rejected
        if isinstance(result.command, ConsolidationCommand):
            command = result.command
            break
    if command is not None and method is multi:
        # The move multi-node consolidation found, per pool (the groups it turned down are not
        # counted: karpy's merge search tries many, where Karpenter's binary search counts its last).
        decision.moves = scored_moves(balanced, command, multi_node=True)
    else:
        decision.moves = list(single.moves)
    if command is not None:
        command.blocked = dict(decision.blocked)
    decision.command = command
    return decision
