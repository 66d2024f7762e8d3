"""Consolidation: the rules, and the command (or rejection) for removing some nodes.

Consolidation deletes nodes whose pods fit on the rest of the cluster, and
replaces nodes whose pods fit on cheaper new ones. This module holds what
both consolidation methods (:mod:`~karpy.disruption.multi_node`,
:mod:`~karpy.disruption.single_node`) share, as Karpenter's consolidation.go
does: the :class:`ConsolidationRules` they decide by (karpy's defaults, or
Karpenter v1's :data:`KARPENTER_RULES`), the :class:`ConsolidationCommand`,
and :func:`evaluate`, which simulates removing some nodes
(:class:`~karpy.disruption.simulator.RemovalSimulator`) and turns the plan
into a delete, a replacement narrowed to the options below the price ceiling
at their worst launch price (:func:`karpy.api.instancetype.worst_launch_price`),
or a typed :class:`~karpy.disruption.rejection.Rejection` saying why not.

Pure: a function of a snapshot (the candidates, the other nodes' capacity,
what each NodePool can launch, prices, budgets); the controller supplies it
and carries the command out. docs/consolidation.md has the rules (minimum
saving, spot-to-spot, weights, merging, splitting), the numbers behind each,
and how Karpenter's differ.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from karpy.api.core import Pod
from karpy.api.instancetype import InstanceType, cheapest_price, priced_below, worst_launch_price
from karpy.api.nodepool import REASON_UNDERUTILIZED
from karpy.api.requirements import (
    CAPACITY_TYPE_ON_DEMAND,
    CAPACITY_TYPE_SPOT,
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    Requirement,
    Requirements,
)
from karpy.disruption.candidates import capacity_type_of, instance_type_of
from karpy.disruption.method import Candidate
from karpy.disruption.rejection import Rejection, RejectionKind
from karpy.disruption.simulator import RemovalSimulator
from karpy.scheduling.solver import ExistingCapacity, NewNodeClaim, min_values_met

# Karpenter's MinInstanceTypesForSpotToSpotConsolidation.
MIN_INSTANCE_TYPES_FOR_SPOT_TO_SPOT = 15
# Karpenter's margin: a replacement must be at least this much cheaper (fraction of the price it replaces).
MIN_SAVINGS_FRACTION = 0.01
# karpy's: what a disruption costs paid back within an hour (docs/consolidation.md).
KARPY_MIN_SAVINGS_FRACTION = 0.10
# Splitting: a node is replaced by at most this many new nodes (docs/consolidation.md).
MAX_SPLIT_NODES = 2
# Splitting: the new nodes must save at least this fraction of the node's price. kube-scheduler
# spreads the pods of a split by least allocation, not onto the two nodes planned for them; on
# the real cluster 16x nodes split for a fifth of their price were merged back and split again.
SPLIT_MIN_SAVINGS_FRACTION = 0.25
# What a consolidation command is for: a lower price, or the NodePools' order of preference.
KIND_PRICE = "price"
KIND_WEIGHT = "weight"
# How multi-node consolidation looks for groups of nodes to remove together.
MULTI_NODE_PREFIX = "prefix"  # Karpenter's: the largest prefix, by binary search
MULTI_NODE_MERGE = "merge"  # also other groups, and N nodes to M < N replacements


@dataclass(frozen=True, slots=True)
class ConsolidationRules:
    """The rules consolidation decides by: karpy's defaults, or Karpenter's (:data:`KARPENTER_RULES`).

    One object so that ``karpy run`` (its feature gates), a Scenario's
    settings and the convergence benchmark, which runs each scenario under
    both, choose the same things the same way.
    """

    # Spot nodes may be replaced by cheaper spot nodes (the SpotToSpotConsolidation gate).
    spot_to_spot: bool = True
    # MULTI_NODE_PREFIX or MULTI_NODE_MERGE.
    multi_node: str = MULTI_NODE_MERGE
    # NodePool weights order replacements too, and pods move back to a higher-weight pool.
    weights: bool = True
    # A replacement must save at least this fraction of the price it replaces.
    min_savings_fraction: float = KARPY_MIN_SAVINGS_FRACTION
    # A single node may be replaced by several new nodes when together they save the margin.
    split: bool = True
    # The nodes a plan removes in later passes (the budgets let only some go now) are
    # tainted karpy.dev/consolidation-planned:PreferNoSchedule, so the pods evicted
    # meanwhile go to the nodes that stay (controllers/disruption.py).
    mark_planned: bool = True


# Karpenter v1's rules, for comparison.
KARPENTER_RULES = ConsolidationRules(
    spot_to_spot=False,
    multi_node=MULTI_NODE_PREFIX,
    weights=False,
    min_savings_fraction=MIN_SAVINGS_FRACTION,
    split=False,
    mark_planned=False,
)


@dataclass(slots=True)
class ConsolidationCommand:
    """Delete ``candidates``, after launching ``replacement`` if there is one."""

    candidates: list[Candidate]
    replacement: NewNodeClaim | None
    savings_per_hour: float
    description: str
    reason: str = REASON_UNDERUTILIZED
    # Candidates that were not considered, and why (NodeClaim name -> reason).
    blocked: dict[str, Rejection] = field(default_factory=dict)
    # KIND_PRICE, or KIND_WEIGHT for a move to a preferred NodePool.
    kind: str = KIND_PRICE
    # New NodeClaims beyond the first, when a merge replaces N nodes by M > 1.
    more_replacements: list[NewNodeClaim] = field(default_factory=list)
    # The rest of the plan: nodes it removes once the budgets let them go (their pods
    # fit on what stays and on the replacements), for later passes.
    planned: list[Candidate] = field(default_factory=list)
    # What the whole plan saves, $/h, the planned nodes included; for a merge that the
    # budgets cut to a delete, more than savings_per_hour.
    planned_savings_per_hour: float = 0.0

    @property
    def is_delete(self) -> bool:
        return self.replacement is None

    @property
    def replacements(self) -> list[NewNodeClaim]:
        return [] if self.replacement is None else [self.replacement, *self.more_replacements]

    @property
    def nodeclaim_names(self) -> list[str]:
        return [candidate.nodeclaim.name for candidate in self.candidates]


def _fewest_meeting_min_values(requirements: Requirements, options: Sequence[InstanceType]) -> int:
    for end in range(1, len(options) + 1):
        if min_values_met(requirements, options[:end]):
            return end
    return len(options)


def _cheaper_replacement(
    claim: NewNodeClaim,
    removed: Sequence[Candidate],
    ceiling: float,
    spot_to_spot: bool,
    *,
    single_spot_rule: bool = True,
) -> NewNodeClaim | Rejection:
    """The replacement narrowed to options whose worst launch price is below ``ceiling``, or why not."""
    requirements = claim.requirements.copy()
    capacity_types = requirements.get(LABEL_CAPACITY_TYPE)
    all_spot = all(capacity_type_of(c) == CAPACITY_TYPE_SPOT for c in removed)
    spot_only = Requirement.from_operator(LABEL_CAPACITY_TYPE, "In", (CAPACITY_TYPE_SPOT,))
    if all_spot and capacity_types.has(CAPACITY_TYPE_SPOT):
        if not spot_to_spot:
            return Rejection(
                RejectionKind.SPOT_TO_SPOT_DISABLED,
                "spot-to-spot consolidation is disabled: a spot node can be deleted but not replaced by spot",
            )
        requirements.add(spot_only)
        options = priced_below(claim.instance_types, requirements, ceiling)
    elif capacity_types.has(CAPACITY_TYPE_SPOT) and capacity_types.has(CAPACITY_TYPE_ON_DEMAND):
        # Priced as spot, so launched as spot or not at all; priced under that very
        # requirement, so a type whose spot offerings are all unavailable (a capacity
        # error marked them) is not offered as spot on the strength of its on-demand
        # price: a launch that cannot succeed, rolled back and retried pass after pass.
        pinned = requirements.copy()
        pinned.add(spot_only)
        options = priced_below(claim.instance_types, pinned, ceiling)
        if options:
            requirements = pinned
        else:
            # No spot below the ceiling: an on-demand replacement, priced as it launches.
            options = priced_below(claim.instance_types, requirements, ceiling)
    else:
        options = priced_below(claim.instance_types, requirements, ceiling)
    if not options:
        return Rejection(RejectionKind.NOT_CHEAPER, f"no replacement costs less than ${ceiling:.4f}/h")
    if not min_values_met(requirements, options):
        return Rejection(
            RejectionKind.MIN_VALUES_UNMET, "the cheaper replacement options do not satisfy minValues"
        )
    options.sort(key=lambda t: (cheapest_price(t, requirements), t.name))
    if single_spot_rule and all_spot and capacity_types.has(CAPACITY_TYPE_SPOT) and len(removed) == 1:
        if len(options) < MIN_INSTANCE_TYPES_FOR_SPOT_TO_SPOT:
            return Rejection(
                RejectionKind.TOO_FEW_SPOT_TYPES,
                f"spot-to-spot consolidation needs {MIN_INSTANCE_TYPES_FOR_SPOT_TO_SPOT} cheaper "
                f"instance types, found {len(options)}",
            )
        keep = max(MIN_INSTANCE_TYPES_FOR_SPOT_TO_SPOT, _fewest_meeting_min_values(requirements, options))
        options = options[:keep]
    return _narrowed(claim, requirements, options)


def _narrowed(claim: NewNodeClaim, requirements: Requirements, options: list[InstanceType]) -> NewNodeClaim:
    previous = (
        requirements.get(LABEL_INSTANCE_TYPE).min_values if LABEL_INSTANCE_TYPE in requirements else None
    )
    if previous is not None and previous > len(options):
        previous = None
    requirements.add(
        Requirement.from_operator(LABEL_INSTANCE_TYPE, "In", [t.name for t in options], previous)
    )
    return dataclasses.replace(claim, requirements=requirements, instance_types=options)


def _without_same_types(
    claim: NewNodeClaim, removed: Sequence[Candidate], prices: Mapping[str, float]
) -> NewNodeClaim | Rejection:
    """Karpenter's ``filterOutSameType`` for multi-node replacements.

    If the replacement may be a type one of the removed nodes already is,
    it must be cheaper than the cheapest such node; otherwise keeping that
    node and deleting the rest does as well with fewer pods disrupted.
    """
    by_type: dict[str, float] = {}
    for candidate in removed:
        type_name = instance_type_of(candidate)
        price = prices[candidate.nodeclaim.name]
        by_type[type_name] = min(price, by_type.get(type_name, math.inf))
    ceiling = min((by_type[t.name] for t in claim.instance_types if t.name in by_type), default=math.inf)
    if math.isinf(ceiling):
        return claim
    options = priced_below(claim.instance_types, claim.requirements, ceiling)
    if not options or not min_values_met(claim.requirements, options):
        return Rejection(
            RejectionKind.SAME_TYPE_NOT_CHEAPER,
            "the replacement is no cheaper than one of the nodes it replaces",
        )
    return _narrowed(claim, claim.requirements.copy(), options)


def _names(candidates: Sequence[Candidate], shown: int = 3) -> str:
    names = [c.nodeclaim.name for c in candidates]
    text = ", ".join(names[:shown])
    return text + (f" and {len(names) - shown} more" if len(names) > shown else "")


def _describe_removed(candidates: Sequence[Candidate], total: float) -> str:
    if len(candidates) == 1:
        return f"{candidates[0].nodeclaim.name} ({instance_type_of(candidates[0])}, ${total:.2f}/h)"
    return f"{len(candidates)} nodes ({_names(candidates)}, ${total:.2f}/h)"


def _worst_price(claim: NewNodeClaim) -> float:
    return max(worst_launch_price(t, claim.requirements) for t in claim.instance_types)


def _cheapest_worst_price(claim: NewNodeClaim) -> float:
    return min((worst_launch_price(t, claim.requirements) for t in claim.instance_types), default=math.inf)


def _moves_up_in_weight(
    claims: Sequence[NewNodeClaim], removed: Sequence[Candidate], weights: Mapping[str, int]
) -> bool:
    """Whether every new NodeClaim is in a NodePool weighted above every removed node's."""
    highest_removed = max(candidate.nodepool.weight or 0 for candidate in removed)
    return all(weights.get(claim.nodepool, 0) > highest_removed for claim in claims)


def _needs_uninitialized(node: str) -> Rejection:
    return Rejection(
        RejectionKind.TARGET_NOT_INITIALIZED,
        f"its pods would need node {node}, which is not initialized yet",
        nodes=(node,),
    )


def _not_cheaper(margin: float, total: float) -> Rejection:
    return Rejection(
        RejectionKind.NOT_CHEAPER,
        f"no replacement is at least {margin:.0%} cheaper than ${total:.4f}/h",
    )


def evaluate(
    removed: Sequence[Candidate],
    simulator: RemovalSimulator,
    prices: Mapping[str, float],
    rules: ConsolidationRules,
    *,
    disrupt: Sequence[Candidate] | None = None,
    max_new: int = 1,
) -> ConsolidationCommand | Rejection:
    """:func:`_worked_out`, or its earlier answer when nothing it depends on changed."""
    inputs = simulator.inputs(removed)
    question = (rules, tuple(c.nodeclaim.name for c in (removed if disrupt is None else disrupt)), max_new)
    key = simulator.memo_key(removed, inputs, prices, question)
    memo = simulator.memo
    if key is not None:
        assert memo is not None
        answer = memo.get(key)
        if answer is not None:
            return answer
    alike = None
    if len(removed) == 1 and disrupt is None:
        alike = simulator.alike_key(removed[0], inputs, prices, (rules, max_new))
        if alike is not None:
            assert memo is not None
            answer = memo.get(alike)
            if answer is not None:
                return answer
    result = _worked_out(removed, inputs, simulator, prices, rules, disrupt=disrupt, max_new=max_new)
    if isinstance(result, Rejection):
        if key is not None:
            assert memo is not None
            memo.put(key, result)
        # An answer that names a pod (one that would not schedule) is this node's alone.
        if alike is not None and not result.pods:
            assert memo is not None
            memo.put(alike, result)
    return result


def _worked_out(
    removed: Sequence[Candidate],
    inputs: tuple[list[Pod], list[ExistingCapacity]],
    simulator: RemovalSimulator,
    prices: Mapping[str, float],
    rules: ConsolidationRules,
    *,
    disrupt: Sequence[Candidate] | None = None,
    max_new: int = 1,
) -> ConsolidationCommand | Rejection:
    """The command that removes ``removed``, or why there is none.

    ``removed`` is what the simulation takes away and what the saving is
    reckoned on. ``disrupt`` (a prefix of it, by default all of it) is what
    the command disrupts now: a merge larger than the budgets allow
    launches the capacity for the whole group and disrupts what the budgets
    let go; the rest, whose pods then fit on that capacity, are deleted by
    later passes. At most ``max_new`` new NodeClaims, and never more than
    the nodes disrupted now, so a multi-node command never adds nodes; a
    single node may be split into several under ``rules.split``.
    """
    disrupted = list(removed if disrupt is None else disrupt)
    # Capacity that may never come is not counted on (Karpenter's rule), whatever else the
    # simulation would say: checked first, and without solving when the first pod is sure
    # to land there.
    first_target = simulator.certain_first_target(inputs)
    if first_target is not None:
        return _needs_uninitialized(first_target)
    if len(removed) > 1:
        # A group is no command if it needs as many new nodes as it has (or more than allowed).
        too_many = min(len(removed), max_new + 1)
        at_least = simulator.needs_new_nodes(removed, inputs, too_many)
        if at_least is not None:
            return Rejection(
                RejectionKind.TOO_MANY_NEW_NODES, f"removing it needs at least {at_least} new nodes"
            )
    plan = simulator.solve(inputs, removed)
    if plan.stopped_at is not None:
        return _needs_uninitialized(plan.stopped_at)
    waiting = sorted({target for target in plan.existing.values() if target in simulator.uninitialized})
    if waiting:
        return _needs_uninitialized(waiting[0])
    if plan.unschedulable:
        key = min(plan.unschedulable)
        more = len(plan.unschedulable) - 1
        return Rejection(
            RejectionKind.POD_UNSCHEDULABLE,
            f"pod {key} would not schedule: {plan.unschedulable[key]}"
            + (f" (and {more} more)" if more else ""),
            pods=tuple(sorted(plan.unschedulable)),
        )
    total = sum(prices[c.nodeclaim.name] for c in removed)
    claims = plan.new_nodeclaims
    later = [candidate for candidate in removed if candidate not in disrupted]
    if not claims:
        if later:
            # Deleting the ones the budgets allow is a delete of its own: judge it so.
            delete = evaluate(disrupted, simulator, prices, rules)
            if isinstance(delete, ConsolidationCommand):
                delete.planned = later
                delete.planned_savings_per_hour = total
            return delete
        description = (
            f"delete {_describe_removed(removed, total)}"
            if len(removed) == 1
            else f"delete {len(removed)} nodes ({_names(removed)}) saving ${total:.2f}/h"
        )
        return ConsolidationCommand(list(removed), None, total, description, planned_savings_per_hour=total)
    # A split: one node whose pods the solver places more cheaply on several new ones.
    split = rules.split and len(removed) == 1 and 1 < len(claims) <= MAX_SPLIT_NODES
    if not split and (len(claims) > max_new or len(claims) >= len(removed) > 1):
        return Rejection(RejectionKind.TOO_MANY_NEW_NODES, f"removing it needs {len(claims)} new nodes")
    if not split and len(claims) > len(disrupted):
        return Rejection(
            RejectionKind.BUDGET_TOO_SMALL,
            f"the budgets let {len(disrupted)} of its {len(removed)} nodes go now, "
            f"it needs {len(claims)} new",
        )
    weight_move = rules.weights and _moves_up_in_weight(claims, removed, simulator.weights)
    # A move to the preferred NodePool is not for price: it may cost as much as now, not more.
    margin = 0.0 if weight_move else rules.min_savings_fraction
    if split and not weight_move:
        margin = max(margin, SPLIT_MIN_SAVINGS_FRACTION)
    required = max(margin, rules.min_savings_fraction)  # what a rejection says was asked
    ceiling = math.nextafter(total, math.inf) if weight_move else total * (1.0 - margin)
    cheapest = [_cheapest_worst_price(claim) for claim in claims]
    if any(math.isinf(price) for price in cheapest) or sum(cheapest) >= ceiling:
        return _not_cheaper(required, total)
    replacements: list[NewNodeClaim] = []
    for claim, floor in zip(claims, cheapest, strict=True):
        # Each new NodeClaim gets its share of the ceiling, so their worst prices add up below it.
        share = ceiling * floor / sum(cheapest) if len(claims) > 1 else ceiling
        narrowed = _cheaper_replacement(
            claim, removed, share, rules.spot_to_spot, single_spot_rule=len(removed) == 1
        )
        if isinstance(narrowed, NewNodeClaim) and len(removed) > 1 and len(claims) == 1:
            narrowed = _without_same_types(narrowed, removed, prices)
        if isinstance(narrowed, Rejection):
            return narrowed
        replacements.append(narrowed)
    worst = sum(_worst_price(claim) for claim in replacements)
    if not worst < ceiling:
        # Each option is below its share; this holds the sum to the ceiling whatever rounding did.
        return _not_cheaper(required, total)
    first = replacements[0].instance_types[0]
    others = len(replacements[0].instance_types) - 1
    if len(replacements) == 1:
        launched = f"a {first.name} (${worst_launch_price(first, replacements[0].requirements):.2f}/h)" + (
            f" or one of {others} other cheaper types" if others else ""
        )
    else:
        launched = f"{len(replacements)} new nodes (${worst:.2f}/h at most)"
    description = (
        f"replace {_describe_removed(removed, total)} with {launched}, saving at least ${total - worst:.2f}/h"
    )
    if len(disrupted) < len(removed):
        description += (
            f"; {_names(disrupted)} now, the other {len(removed) - len(disrupted)} once their pods fit"
        )
    kind = KIND_PRICE
    if weight_move:
        pools = ", ".join(sorted({claim.nodepool for claim in replacements}))
        description = f"weight consolidation: move the pods to the preferred NodePool {pools}; {description}"
        kind = KIND_WEIGHT
    return ConsolidationCommand(
        disrupted,
        replacements[0],
        total - worst,
        description,
        kind=kind,
        more_replacements=replacements[1:],
        planned=later,
        planned_savings_per_hour=total - worst,
    )
