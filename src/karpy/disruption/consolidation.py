"""Consolidation: removing or shrinking nodes whose pods fit somewhere cheaper.

After emptiness (and drift), Karpenter looks for nodes that are not empty
but underused: a node whose pods would fit on the rest of the cluster can be
deleted, and a node whose pods would fit on one cheaper new node can be
replaced by it. This module makes that decision as a pure function of a
snapshot (the candidates, the capacity of every other node, what each
NodePool can launch, prices, budgets and the time); the controller supplies
the snapshot, validates the command after its TTL and carries it out.

What makes a node a candidate (Karpenter v1):

* its NodeClaim is initialized and not being deleted, its NodePool's policy
  is ``WhenEmptyOrUnderutilized`` and ``consolidateAfter`` is not ``Never``;
* ``consolidateAfter`` has elapsed since the later of its initialization and
  its last pod event (:func:`~karpy.disruption.emptiness.empty_since`, the
  same clock emptiness uses), which is Karpenter's ``Consolidatable``
  condition;
* the node is not annotated ``karpenter.sh/do-not-disrupt: "true"`` and none
  of its reschedulable pods blocks eviction: a pod annotated
  ``karpenter.sh/do-not-disrupt``, a pod with no controller owner (nothing
  would recreate it), or a pod whose PodDisruptionBudget allows no disruption
  right now (the caller works that out; it needs every PDB and pod);
* the price of its launched offering is known (Karpenter gives up on a
  command whose candidate price it cannot look up).

Every node left out gets a reason in ``blocked``, so the controller can
publish ``Unconsolidatable`` events. A node left out only because of
do-not-disrupt, its pods (PDB, no owner) or a budget is also evaluated as
single-node consolidation would evaluate it, and what deleting or replacing
it would save goes in ``savings_given_up``: the price of keeping it, which
a user weighs against the annotation, PDB or budget. That evaluation decides
nothing and is made once per blocked node by a caller that keeps the figure.

Candidates are tried cheapest to disrupt first. The disruption cost is
Karpenter's: each reschedulable pod costs
``clamp(1 + priority / 2**25 + pod-deletion-cost / 2**27, -10, 10)`` (about 1
for an ordinary pod), and the sum is scaled by the fraction of the node's
lifetime left before ``expireAfter`` (a node about to expire anyway is cheap
to disrupt now). Ties go by NodeClaim name so the order, and therefore the
decision, is the same on every run. (Karpenter sums over every pod of the
node, DaemonSet pods included; counting only the pods that would move ranks
nodes the same way up to the per-node DaemonSet constant and says what the
cost is about.)

Simulating a removal runs the provisioning solver on the candidates'
reschedulable pods against every other node's capacity and the NodePools.
The result is usable only if every pod is placed, no pod lands on a node that
is not initialized yet (as in Karpenter, the simulation must not count on
capacity that may never come), and at most one new NodeClaim is needed: zero
means **delete**, one means **replace** if it is cheaper.

"Cheaper" follows Karpenter's ``RemoveInstanceTypeOptionsByPriceAndMinValues``:
each instance type of the replacement is priced at its *worst launch price*,
the most expensive available offering it has under the replacement's
requirements in the capacity type it would launch with (spot if the
requirements allow spot and the type has spot offerings, else on-demand),
because the cloud provider may launch any of them. Types whose worst launch
price is not below the candidates' price are dropped; what is left must still
satisfy ``minValues``; if nothing is left there is no command. A replacement
for an on-demand node that may be spot is then pinned to spot, since it was
priced as spot: if spot capacity runs out the launch fails and the node stays
rather than being replaced by a dearer on-demand node.

Spot candidates are special. A replacement priced by its cheapest type would
be launched by price *and availability*, may come up as a pricier type of
the list, and would be replaced again at once: churn that ends on the least
available (most interrupted) spot pools. So when every candidate is spot and
the replacement may be spot, Karpenter replaces only if spot-to-spot
consolidation is switched on (``spot_to_spot``; its feature gate is off
by default in Karpenter, on in karpy), and for a single node only if at least
:data:`MIN_INSTANCE_TYPES_FOR_SPOT_TO_SPOT` (15) cheaper types remain; the
replacement then offers just the 15 cheapest (more only if ``minValues``
needs them), so whatever launches is among them and is not itself replaced
straight away. Otherwise a spot node can only be deleted.

The rules are a :class:`ConsolidationRules`: karpy's (the defaults) or
Karpenter v1's (:data:`KARPENTER_RULES`, kept for comparison and for users
who want Karpenter's behaviour exactly). They differ in five ways, each
measured in the simulator (``python -m benchmarks.consolidation_cases``,
docs/consolidation.md).

**Minimum saving** (``min_savings_fraction``). On top of Karpenter's strict
"cheaper", a replacement must save at least this fraction of the
candidates' price at its worst launch price: 1% under Karpenter's rules
(price noise is then not enough to launch a node and drain another), 10%
under karpy's (:data:`KARPY_MIN_SAVINGS_FRACTION`). A disruption has a cost
the price does not show: every moved pod is evicted, rescheduled, pulls its
image, starts and warms up again. Taking that as about 6 minutes of the
pod's share of its node, the pods of a node cost 6/60 of an hour of the
node's price; a replacement that must pay that back within an hour has to
save 10% of the price. Deletes need no margin: they save a whole node.

**Spot-to-spot** (``spot_to_spot``). See above; on in karpy's rules: a
scaled-down spot fleet otherwise keeps its large spot node for ever (3.47x
the price of a fresh plan in the scale-down case), and the 15-type rule
plus the 10% margin keep a replaced spot node from being replaced again.

**Weights** (``weights``). A NodePool's weight is an order of preference
for provisioning; under karpy's rules it is one for consolidation too:

* the removed nodes' capacity no longer counts against their NodePool's
  limits in the simulation (:meth:`RemovalSimulator._pools_without`), so
  pods of a preferred pool at its limit find their place in it again and
  are not replaced into a cheaper, lower-weight pool (Karpenter counts
  them, which empties preferred pools: kubernetes-sigs/karpenter#1829);
* a *weight consolidation*: when the replacement of some nodes lies wholly
  in NodePools weighted above all of theirs and costs no more (no margin:
  it is not done for price), the pods move back to the preferred pool.
  Budgets know only Empty, Drifted and Underutilized, so it counts against
  Underutilized, and consolidateAfter applies as for any consolidation.
  It cannot loop: it only ever moves pods up in weight, and a price
  consolidation never moves them down while a higher pool can take them
  (the solver opens NodeClaims in weight order).

**Multi-node** (``multi_node``). Karpenter's :data:`MULTI_NODE_PREFIX`
search is described below. karpy's :data:`MULTI_NODE_MERGE` search
(:func:`consolidate_merge`) looks for groups of nodes that fewer nodes can
replace:

* groups: the eligible nodes of each NodePool and capacity type, and all of
  them together, each ordered most wasteful first (:func:`waste`: price over
  the larger of CPU and memory use), at most :data:`MAX_MERGE_GROUP` (20)
  nodes a group;
* each group grows greedily from its most wasteful node: the next node
  joins if the pods of the group with it all still find a place (cheaper
  or not yet: two half-full nodes may need a node as dear as both, where
  three would not), else it is skipped; every step is one simulation and,
  if the group so far can be deleted, or replaced by M new NodeClaims with
  M smaller than its size and a total worst launch price saving the
  margin, a candidate command; the one that saves most wins;
* several new NodeClaims share the price ceiling in proportion to their
  cheapest option, so their worst launch prices add up below it;
* budgets: the command disrupts only the group's nodes the budgets let go
  now (most wasteful first) and launches the capacity for the whole group,
  never more NodeClaims than nodes it disrupts; the other nodes' pods then
  fit on the new capacity and later passes delete those nodes one by one.
  With Karpenter's default budget (10%: one node of a small pool) this is
  the only way fragments merge at all; it is why the ICE-fragments case
  ends at the fresh plan under karpy's rules and 1.78x under Karpenter's.

**Split** (``split``). Karpenter replaces a node by at most one new
NodeClaim: if its pods need two, there is no command. karpy's solver prices
each plan whole, and the cheapest home for a large node's remaining pods is
often two smaller nodes (after a scale-down: 14 pods left on a c6g.8xlarge
spot at $0.42/h fit an m6g.2xlarge and an m5a.large spot, $0.15/h
together). Under karpy's rules a single node may be
replaced by the several new NodeClaims of that plan when together they save
the margin (they share the ceiling as a merge's do, and each keeps the
15-type rule when the node is spot), and into :data:`MAX_SPLIT_NODES` (2)
at most: a split adds a node, and what a node costs beyond its instance
(its volumes, address and per-host cost, :mod:`karpy.api.nodecost`) is in
the prices the controller gives this module, but one more node to drain
and patch is not; and under a spot shortage, when the large
types' offerings are marked unavailable one failure at a time, the cheapest
plan for six pods became six one-pod nodes: a fleet shape nobody wants.
It cannot loop: the new nodes are the solver's cheapest plan for those
pods, so merging them back is never 10% cheaper. Multi-node commands still
never add nodes.

Karpenter's prefix search runs too (it removes up to 100 nodes at once
where a merge group stops at 20, which matters when a large pool scales
down), and the command that saves more wins.

The bound: merging makes at most :data:`MAX_MERGE_SIMULATIONS` (100)
tries per pass, each one simulation removing at most :data:`MAX_MERGE_GROUP`
(20) nodes (two simulations when the budgets cut a delete short, the second
removing only what they let go), on top of the prefix search's
``ceil(log2(100))`` = 7; then single-node consolidation, at most one
simulation per candidate, as under Karpenter's rules.

Most merge trials on a busy cluster end with a group that needs as many new
nodes as it has: nodes kept full by an autoscaler's pods, whose pods fill as
many new ones. :meth:`RemovalSimulator.needs_new_nodes` settles such a trial
without a simulation when a lower bound on the new nodes (what the offered
nodes have free, and the largest node any pool offers, as if any pod could
use them) already reaches the group's size, and only where the simulation
could not have ended otherwise (no node being initialized among those
offered, no pool limits, no inter-pod or volume terms, each node's pods
placeable alone): the trial's answer is then "too many new nodes" either
way, so the greedy growth takes the same path. On the simulated day of 20
HPAs it settles 12,008 of the 22,242 multi-node trials that would otherwise
have been simulated.

Multi-node consolidation comes first. Under Karpenter's rules, candidates
that budgets allow (each NodePool's allowance is spent in disruption-cost
order) are taken in that order, at most :data:`MAX_MULTI_NODE_CANDIDATES` (100), and a binary search
finds the largest prefix of at least two that can go at once: their pods fit
on the remaining capacity plus at most one new NodeClaim cheaper than the sum
of their prices. The search assumes that if the first N can go so can fewer,
which is usually but not always true; Karpenter accepts the same
approximation for a logarithmic number of simulations. A replacement that
offers a type of one of the nodes it replaces must also be cheaper than that
node (Karpenter's ``filterOutSameType``): otherwise keeping that node and
deleting the others disrupts fewer pods for the same saving.

Single-node consolidation then tries each non-empty candidate in
disruption-cost order (empty ones are emptiness' business, under its own
budget) and returns the first valid command. Each attempt that fails leaves a
reason in ``unconsolidatable``.

Simulations are many and small (a thousand candidates of ten pods each), so
the fixed cost of a solve, which grows with the number of existing nodes and
of the pods bound to them, would dominate. :class:`RemovalSimulator` builds
what every simulation shares once: when the pods that move have no inter-pod
terms (spread, affinity, anti-affinity, host ports), a node's bound pods can
only matter through their own anti-affinity or host ports, so nodes whose
pods have neither are handed to the solver without their pods, and dropped
altogether when none of the moving pods would fit in what they have free.
And since the solver offers existing nodes to pods first-fit in name order,
when no bound pod anywhere has anti-affinity and the moving pods have no node
constraints, it stops once the untainted nodes so far could each hold a
number of copies of the largest moving pod (largest in every resource) that
adds up to the number of pods: a pod that went past them all would have
found each of them holding at least that many pods already, so the nodes
after them are never reached and are left out. None of this changes a
placement, only the time it takes to find it: the solver's set-up is per
existing node, and on a 1,000-node cluster it is most of the cost of a
ten-pod simulation.

On a 3,000-node cluster the nodes offered are still hundreds per simulation,
and three more things are worked out once per pass instead of once per
simulation, each the same to the solver:

* the nodes offered to each set of pod shapes, as the solver's view
  (:class:`~karpy.scheduling.solver.PreparedCapacity`: their room index and
  topology domains), each simulation leaving out the nodes it removes. Only
  where no node carries pods that count for others and the moving pods have
  no inter-pod terms, so no node's pods are read. The solver then sees the
  whole list where the cut above would have shortened it, but first-fit
  never goes past the cut, so the nodes after it change nothing;
* where that cut falls: a running count of how many of the largest pod the
  nodes hold, bisected, with the removed nodes' part taken off until it
  settles;
* each node's memo key, as a number (:meth:`EvaluationMemo.number`), so a
  key naming the nodes offered is a slice of numbers, not of nested tuples.

And a simulation stops at the first node not yet initialized it would place
a pod on, when that node is the first such node by name (the one the answer
names): the rest of the plan, the new NodeClaims and their repacking, cannot
change the answer. Not under pool limits, where the plan kept may be a
second one made.

On a cluster one plan launched, thousands of nodes are alike: the same
type, price and capacity type, full with the same mix of a few
Deployments' replicas. Evaluated alone, each gives the same answer, and
single-node consolidation worked it out once per node (on five Deployments
of 10,000 replicas, 3,500 nodes, a fifth of the run). So a single-node
answer is also kept under what the node is rather than who
(:meth:`RemovalSimulator.alike_key`): its NodePool, weight, capacity type,
capacity and price, its pods' placement signatures in the order of their
keys (:meth:`EvaluationMemo.pod_signature`: the test the solver groups
alike pods by), and the nodes offered, as in the memo's own key. Safe
because that is all ``_worked_out`` reads of one removed node, and the
solver reads pods only through those signatures and breaks ties between
them by key: pods whose signatures come in the same order are placed the
same way. A node that is among the nodes offered (it has room for its own
pods' shapes) is named in that part of the key and shares nothing; pods
with inter-pod or volume terms (whose labels or volumes count) are left
out; an answer that names a pod (one that would not schedule) is kept for
its node alone. A command is never kept: it ends the pass.
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
from karpy.disruption.emptiness import Candidate
from karpy.disruption.rejection import Rejection, RejectionKind
from karpy.disruption.simulator import RemovalSimulator
from karpy.scheduling.solver import ExistingCapacity, NewNodeClaim, min_values_met

# Karpenter's MinInstanceTypesForSpotToSpotConsolidation.
MIN_INSTANCE_TYPES_FOR_SPOT_TO_SPOT = 15
# Karpenter's margin: a replacement must be at least this much cheaper (fraction of the price it replaces).
MIN_SAVINGS_FRACTION = 0.01
# karpy's: what a disruption costs paid back within an hour (see the module docstring).
KARPY_MIN_SAVINGS_FRACTION = 0.10
# Splitting: a node is replaced by at most this many new nodes (see the module docstring).
MAX_SPLIT_NODES = 2
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


def _not_cheaper(rules: ConsolidationRules, total: float) -> Rejection:
    return Rejection(
        RejectionKind.NOT_CHEAPER,
        f"no replacement is at least {rules.min_savings_fraction:.0%} cheaper than ${total:.4f}/h",
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
    ceiling = math.nextafter(total, math.inf) if weight_move else total * (1.0 - margin)
    cheapest = [_cheapest_worst_price(claim) for claim in claims]
    if any(math.isinf(price) for price in cheapest) or sum(cheapest) >= ceiling:
        return _not_cheaper(rules, total)
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
        return _not_cheaper(rules, total)
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
