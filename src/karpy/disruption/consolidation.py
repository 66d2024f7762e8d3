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

import bisect
import dataclasses
import itertools
import math
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass, field

from karpy.api.core import DO_NOT_DISRUPT_ANNOTATION, Pod, PodSpec
from karpy.api.instancetype import InstanceType
from karpy.api.nodeclaim import CONDITION_INITIALIZED
from karpy.api.nodepool import REASON_UNDERUTILIZED, WHEN_EMPTY_OR_UNDERUTILIZED
from karpy.api.quantity import ResourceAmounts, add_amounts, fits
from karpy.api.requirements import (
    CAPACITY_TYPE_ON_DEMAND,
    CAPACITY_TYPE_RESERVED,
    CAPACITY_TYPE_SPOT,
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    Requirement,
    Requirements,
)
from karpy.api.taints import UNREGISTERED_TAINT_KEY, untolerated, untolerated_preferences
from karpy.disruption.emptiness import Candidate, empty_since, is_empty, reschedulable
from karpy.scheduling.constraints import NamespaceLabels
from karpy.scheduling.solver import (
    NODES_RESOURCE,
    CapacityLeftOut,
    ExistingCapacity,
    NewNodeClaim,
    NodePoolCapacity,
    Plan,
    PreparedCapacity,
    min_values_met,
    placement_bucket,
    pod_requests,
    same_placement_spec,
    solve,
)

# Karpenter's MinInstanceTypesForSpotToSpotConsolidation.
MIN_INSTANCE_TYPES_FOR_SPOT_TO_SPOT = 15
# Karpenter's cap on the batch multi-node consolidation considers.
MAX_MULTI_NODE_CANDIDATES = 100
# Karpenter's margin: a replacement must be at least this much cheaper (fraction of the price it replaces).
MIN_SAVINGS_FRACTION = 0.01
# karpy's: what a disruption costs paid back within an hour (see the module docstring).
KARPY_MIN_SAVINGS_FRACTION = 0.10
# Merging: at most this many nodes in a group, and this many simulations per pass.
MAX_MERGE_GROUP = 20
MAX_MERGE_SIMULATIONS = 100
# Splitting: a node is replaced by at most this many new nodes (see the module docstring).
MAX_SPLIT_NODES = 2
# Evaluations kept across passes (see EvaluationMemo).
MAX_MEMO_ENTRIES = 50_000
# How many node keys the memo numbers before it starts afresh.
MAX_MEMO_NODE_KEYS = 500_000
# What a consolidation command is for: a lower price, or the NodePools' order of preference.
KIND_PRICE = "price"
KIND_WEIGHT = "weight"
_WASTE_RESOURCES = ("cpu", "memory")
POD_DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
# Karpenter's per-pod eviction cost: 1 + priority / 2**25 + deletion cost / 2**27, clamped.
_PRIORITY_SCALE = 2.0**25
_DELETION_COST_SCALE = 2.0**27
_POD_COST_BOUND = 10.0
# Launch precedence of capacity types, as in Karpenter's WorstLaunchPrice.
_LAUNCH_PRECEDENCE = (CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_SPOT, CAPACITY_TYPE_ON_DEMAND)

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

# The hourly price of a candidate's launched offering: by NodeClaim name, or a
# function of the candidate (None when it cannot be told).
PriceOf = Mapping[str, float] | Callable[[Candidate], float | None]


@dataclass(slots=True)
class ConsolidationCommand:
    """Delete ``candidates``, after launching ``replacement`` if there is one."""

    candidates: list[Candidate]
    replacement: NewNodeClaim | None
    savings_per_hour: float
    description: str
    reason: str = REASON_UNDERUTILIZED
    # Candidates that were not considered, and why (NodeClaim name -> reason).
    blocked: dict[str, str] = field(default_factory=dict)
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


@dataclass(slots=True)
class CandidateSelection:
    """The nodes consolidation may disrupt, cheapest to disrupt first, and the others."""

    eligible: list[Candidate] = field(default_factory=list)
    # The launched offering's hourly price of every eligible candidate, by NodeClaim name.
    prices: dict[str, float] = field(default_factory=dict)
    blocked: dict[str, str] = field(default_factory=dict)
    # Blocked only by their pods or the node's annotation (priced, due): what they
    # would save is worth telling (see :func:`savings_given_up`).
    held_back: list[Candidate] = field(default_factory=list)
    # When the next candidate whose consolidateAfter has not elapsed becomes one.
    next_due: float | None = None


@dataclass(slots=True)
class ConsolidationDecision:
    command: ConsolidationCommand | None = None
    # Nodes not considered, and why (policy, annotation, pods, budget, not due yet).
    blocked: dict[str, str] = field(default_factory=dict)
    # Nodes single-node consolidation tried and could not remove, and why.
    unconsolidatable: dict[str, str] = field(default_factory=dict)
    # $/h that deleting or replacing each node alone would save, for nodes held back
    # only by do-not-disrupt, a pod's PDB or owner, or a budget (see savings_given_up).
    savings_given_up: dict[str, float] = field(default_factory=dict)
    next_due: float | None = None


# -- candidates ----------------------------------------------------------------


def eviction_cost(pod: Pod) -> float:
    """Karpenter's cost of evicting one pod: about 1, more for priority and deletion cost."""
    cost = 1.0
    deletion_cost = pod.metadata.annotations.get(POD_DELETION_COST_ANNOTATION)
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
    expire_after = candidate.nodeclaim.spec.expire_after
    created = candidate.nodeclaim.metadata.creation_timestamp
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


def eviction_blocker(candidate: Candidate, pdb_blocked: Mapping[str, str]) -> str | None:
    """Why the node's pods cannot be evicted, or None if they can."""
    if candidate.node.metadata.annotations.get(DO_NOT_DISRUPT_ANNOTATION) == "true":
        return f"node has {DO_NOT_DISRUPT_ANNOTATION}"
    for pod in sorted(candidate.pods, key=lambda pod: pod.key):
        if not reschedulable(pod):
            continue
        if pod.do_not_disrupt:
            return f"pod {pod.key} has {DO_NOT_DISRUPT_ANNOTATION}"
        if pod.metadata.controller is None:
            return f"pod {pod.key} has no controller owner to recreate it"
        pdb_reason = pdb_blocked.get(pod.key)
        if pdb_reason is not None:
            return f"pod {pod.key}: {pdb_reason}"
    return None


def _price_table(candidates: Sequence[Candidate], price_of: PriceOf) -> dict[str, float | None]:
    if isinstance(price_of, Mapping):
        return {c.nodeclaim.name: price_of.get(c.nodeclaim.name) for c in candidates}
    return {c.nodeclaim.name: price_of(c) for c in candidates}


def _waiting(candidate: Candidate, now: float) -> tuple[str, float | None]:
    """Why consolidation must leave ``candidate`` alone for now ("" if it need not), and when
    it may look again if that is a matter of time (consolidateAfter)."""
    pool = candidate.nodepool
    disruption = pool.disruption
    if candidate.nodeclaim.metadata.deleting or candidate.node.metadata.deleting:
        return "node is being deleted", None
    if not candidate.nodeclaim.is_true(CONDITION_INITIALIZED):
        return "node is not initialized yet", None
    if disruption.consolidate_after is None:
        return f"NodePool {pool.name} has consolidation disabled (consolidateAfter: Never)", None
    if disruption.consolidation_policy != WHEN_EMPTY_OR_UNDERUTILIZED:
        return f"NodePool {pool.name} consolidates only empty nodes ({disruption.consolidation_policy})", None
    due = empty_since(candidate) + disruption.consolidate_after
    if due > now:
        return f"consolidateAfter has not elapsed (consolidatable in {due - now:.0f}s)", due
    return "", None


def any_consolidatable(candidates: Sequence[Candidate], now: float) -> bool:
    """Whether consolidation could act on any of ``candidates`` now, as far as time and state go.

    When none could, ``decide_consolidation`` decides nothing whatever the
    rest of the cluster looks like (it only reports why each waits), so a
    caller can skip building the cluster's capacity for it: during a
    scale-up every new node waits out consolidateAfter, pass after pass.
    """
    return any(not _waiting(candidate, now)[0] for candidate in candidates)


def consolidation_candidates(
    candidates: Sequence[Candidate],
    price_of: PriceOf,
    pdb_blocked: Mapping[str, str],
    now: float,
) -> CandidateSelection:
    """Which nodes consolidation may disrupt now (in disruption order), and why not the others."""
    selection = CandidateSelection()
    prices = _price_table(candidates, price_of)
    for candidate in sorted(candidates, key=lambda c: c.nodeclaim.name):
        name = candidate.nodeclaim.name
        waiting, due = _waiting(candidate, now)
        if waiting:
            selection.blocked[name] = waiting
            if due is not None:
                selection.next_due = due if selection.next_due is None else min(selection.next_due, due)
            continue
        blocker = eviction_blocker(candidate, pdb_blocked)
        price = prices[name]
        if price is None or not math.isfinite(price):
            selection.blocked[name] = blocker or (
                f"the price of its offering ({_offering_label(candidate)}) is unknown"
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


# -- simulation ----------------------------------------------------------------


def _capacity_key(item: ExistingCapacity) -> tuple[object, ...] | None:
    pods: list[object] = []
    for pod in item.pods:
        if not pod.metadata.resource_version:
            return None
        pods.append((pod.key, pod.metadata.resource_version))
    return (
        item.name,
        item.nodepool,
        item.requirements.identity(),
        item.taints,
        item.ephemeral_taints,
        tuple(sorted(item.available.items())),
        item.in_flight,
        tuple(pods),
    )


class EvaluationMemo:
    """Evaluations that found no command, kept across passes by what they were worked out from.

    A consolidation pass evaluates about every candidate, alone and in
    groups, and on a busy cluster (an HPA resizing Deployments every 15
    seconds) some pod or node changes between any two passes, so the
    quiet-pass answer (the whole pass unchanged) seldom applies. But most
    evaluations read only a few nodes: the candidates, their pods and the
    nodes with room for those pods; when none of those changed, the answer
    is the one given before. :meth:`RemovalSimulator.memo_key` says what an
    answer depends on; only answers that are not a command are kept (a
    command is acted on, and worked out afresh), and at most
    :data:`MAX_MEMO_ENTRIES` of them (all dropped when full: the next passes
    fill it again with what is current). Decisions are the same with and
    without it (``tests/sim/test_quiet_consolidation.py``).
    """

    def __init__(self) -> None:
        self._answers: dict[tuple[object, ...], str] = {}
        # Each node's key as a number, so that keys naming hundreds of nodes are tuples of
        # numbers (hashed and compared fast), not of nested tuples.
        self._numbers: dict[tuple[object, ...], int] = {}
        self._next_number = 0
        # The objects whose identity stands in keys, kept alive so no other object
        # can take their identity while a key names it.
        self._pinned: dict[int, object] = {}
        # Each pod's placement signature as a number (see ``pod_signature``), by key and
        # version; like node numbers, never given twice.
        self._signatures: dict[tuple[str, str], int] = {}
        self._alike_specs: dict[tuple[object, ...], list[tuple[PodSpec, int]]] = {}
        self._next_signature = 0
        self.hits = 0
        self.misses = 0

    def pin(self, item: object) -> None:
        self._pinned.setdefault(id(item), item)

    def get(self, key: tuple[object, ...]) -> str | None:
        answer = self._answers.get(key)
        if answer is None:
            self.misses += 1
        else:
            self.hits += 1
        return answer

    def number(self, key: tuple[object, ...]) -> int:
        """A number for this node key, the same while the memo keeps its answers."""
        number = self._numbers.get(key)
        if number is None:
            # Never given twice, not even after the memo starts afresh: a pass may still hold
            # numbers it was given before.
            number = self._numbers[key] = self._next_number
            self._next_number += 1
        return number

    def pod_signature(self, pod: Pod) -> int | None:
        """A number for what the solver sees of ``pod`` (None: it has no resourceVersion).

        Two pods get the same number when the solver would place either the
        same way: equal namespace, labels and spec but for the node a bound pod
        runs on, the test :func:`~karpy.scheduling.solver.alike_groups` groups
        pods by (the replicas of a Deployment). Volume terms are not in it: the
        caller leaves pods with volume terms out.
        """
        version = pod.metadata.resource_version
        if not version:
            return None
        known = self._signatures.get((pod.key, version))
        if known is not None:
            return known
        spec = pod.spec
        entries = self._alike_specs.setdefault(placement_bucket(pod), [])
        number = next((number for other, number in entries if same_placement_spec(other, spec)), None)
        if number is None:
            number = self._next_signature
            self._next_signature += 1
            entries.append((spec, number))
        self._signatures[(pod.key, version)] = number
        return number

    def put(self, key: tuple[object, ...], answer: str) -> None:
        if (
            len(self._answers) >= MAX_MEMO_ENTRIES
            or len(self._numbers) >= MAX_MEMO_NODE_KEYS
            or len(self._signatures) >= MAX_MEMO_NODE_KEYS
        ):
            self._answers.clear()
            self._pinned.clear()
            self._numbers.clear()
            self._signatures.clear()
            self._alike_specs.clear()
            return  # its key may name an object no longer pinned
        self._answers[key] = answer


def _has_inter_pod_terms(pod: Pod) -> bool:
    spec = pod.spec
    return bool(
        spec.pod_affinity or spec.pod_anti_affinity or spec.topology_spread_constraints or spec.host_ports
    )


def _constrains_neighbours(pod: Pod) -> bool:
    """Whether a bound pod can keep another pod off its node (anti-affinity, host ports)."""
    return bool(pod.spec.pod_anti_affinity or pod.spec.host_ports)


class _Offered:
    """The nodes offered to pods of some shapes in one pass, in name order, as the solver sees them."""

    __slots__ = ("_prepared", "_running", "indices", "items", "key_parts", "memo_keys", "names", "positions")

    def __init__(self, indices: list[int], items: list[ExistingCapacity]) -> None:
        self.indices = indices
        self.items = items
        self.names = [item.name for item in items]
        self.positions = {name: position for position, name in enumerate(self.names)}
        self._running: dict[int, list[int]] = {}
        self._prepared: PreparedCapacity | None = None
        # What every node of the list is, for memo keys (see ``RemovalSimulator.memo_key``).
        self.memo_keys: list[int | None] | None = None
        # Per length of the slice a simulation is offered, that slice's keys as one key part.
        self.key_parts: dict[int, _KeyPart | None] = {}

    def running(self, holds: list[int]) -> list[int]:
        """``holds`` (per node of the pass, by index) summed along this list; kept per ``holds``."""
        running = self._running.get(id(holds))
        if running is None:
            running = self._running[id(holds)] = list(
                itertools.accumulate(holds[index] for index in self.indices)
            )
        return running

    def prepared(self) -> PreparedCapacity:
        """These nodes set up for the solver (only for nodes that carry no pods)."""
        if self._prepared is None:
            self._prepared = PreparedCapacity(self.items)
        return self._prepared


class _OfferedNodes(list[ExistingCapacity]):
    """The nodes a simulation offers its pods: the first ``taken`` of ``offered``, less the removed."""

    def __init__(self, kept: list[ExistingCapacity], offered: _Offered, taken: int) -> None:
        super().__init__(kept)
        self.offered = offered
        self.taken = taken


class _KeyPart:
    """A long tuple in a memo key, hashed once: the same list of nodes is in thousands of keys."""

    __slots__ = ("_hash", "items")

    def __init__(self, items: tuple[object, ...]) -> None:
        self.items = items
        self._hash = hash(items)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (
            isinstance(other, _KeyPart) and self._hash == other._hash and self.items == other.items
        )


class RemovalSimulator:
    """Where the pods of some nodes would go if those nodes went away.

    Built once per decision from every node's capacity and the NodePools, then
    asked about many sets of candidates; see the module docstring for what it
    precomputes and why that leaves the solver's answer unchanged.
    """

    def __init__(
        self,
        capacity: Sequence[ExistingCapacity],
        pools: Sequence[NodePoolCapacity],
        volume_terms: Mapping[str, Sequence[Requirements]] | None = None,
        namespace_labels: NamespaceLabels | None = None,
        *,
        give_back_limits: bool = False,
        memo: EvaluationMemo | None = None,
    ) -> None:
        self.capacity = sorted(capacity, key=lambda item: item.name)
        self.memo = memo
        # What every evaluation of this pass shares (pools, namespaces), for memo keys;
        # None when something cannot be told apart (the memo is then not used).
        self._pass_key: tuple[object, ...] | None = None
        self._capacity_keys: dict[int, int | None] = {}
        self.pools = list(pools)
        self.weights = {pool.nodepool.name: pool.nodepool.weight or 0 for pool in self.pools}
        self.give_back_limits = give_back_limits
        self.volume_terms = volume_terms or {}
        self.namespace_labels = namespace_labels
        self.uninitialized = frozenset(item.name for item in self.capacity if item.in_flight)
        # Each node as the solver needs to see it when the moving pods have no inter-pod
        # terms: without its pods if none of them constrains its neighbours.
        self._lean = [
            (
                item,
                None
                if any(_constrains_neighbours(pod) for pod in item.pods)
                else dataclasses.replace(item, pods=()),
            )
            for item in self.capacity
        ]
        # No node carries pods that count for others (see ``_prepared_for``).
        self._all_lean = all(lean is not None for _, lean in self._lean)
        # Without anti-affinity anywhere, a bound pod cannot keep a moving pod off any
        # node but its own (host ports): first-fit never looks past a node that takes them all.
        self._first_fit_stops = not any(
            pod.spec.pod_anti_affinity for item in self.capacity for pod in item.pods
        )
        # Per pod shape (its requests, sorted), the indices in _lean of the nodes offered.
        self._fitting: dict[tuple[tuple[str, int], ...], list[int]] = {}
        # Per size of the largest moving pod, how many such pods each node holds.
        self._holds: dict[tuple[tuple[str, int], ...], list[int]] = {}
        # Per set of pod shapes, the nodes offered to them (see ``_Offered``).
        self._offered_lists: dict[tuple[tuple[tuple[str, int], ...], ...], _Offered] = {}
        # Per pod shape, the most pods of it one new node of any pool holds; per candidate,
        # whether its pods alone find new capacity (see ``needs_new_nodes``).
        self._most_per_node: dict[tuple[tuple[str, int], ...], int] = {}
        self._most_room: dict[str, int] = {}
        self._placeable_afresh: dict[str, bool] = {}

    def simulate(self, removed: Sequence[Candidate]) -> Plan:
        """The whole plan for the removed nodes' pods."""
        return self.solve(self.inputs(removed), whole=True)

    def inputs(self, removed: Sequence[Candidate]) -> tuple[list[Pod], list[ExistingCapacity]]:
        """The pods that move and the capacity the solver is offered for them."""
        gone = {name for c in removed for name in (c.node.name, c.nodeclaim.name)}
        pods = [pod for c in removed for pod in c.pods if reschedulable(pod)]
        return pods, self._existing_for(pods, gone)

    def solve(
        self,
        inputs: tuple[list[Pod], list[ExistingCapacity]],
        removed: Sequence[Candidate] = (),
        *,
        whole: bool = False,
    ) -> Plan:
        """The plan for the moving pods; unless ``whole``, it may stop early (``Plan.stopped_at``)."""
        pods, existing = inputs
        pools = self._pools_without(removed) if self.give_back_limits else self.pools
        # A pod on a node not yet initialized ends the simulation (see ``_worked_out``), and the
        # answer names the first such node by name: stop at that one, the rest is not needed.
        waiting = None if whole else min((item.name for item in existing if item.in_flight), default=None)
        return solve(
            pods,
            self._prepared_for(existing, removed) or existing,
            pools,
            self.volume_terms,
            self.namespace_labels,
            stop_at=() if waiting is None else frozenset((waiting,)),
        )

    def certain_first_target(self, inputs: tuple[list[Pod], list[ExistingCapacity]]) -> str | None:
        """The not yet initialized node the solver is sure to place a pod on first, if any.

        The solver offers existing capacity first-fit in name order, so the
        first pod it places (whichever group it takes first) goes to the
        first node offered when that node has room for every pod's requests,
        admits every pod (one of its node affinity terms, as the solver asks of
        an existing node; every taint, PreferNoSchedule too), and nothing sends
        the pods down another path: no inter-pod terms, preferences, volume
        terms or anti-affinity among the bound pods. On a growing cluster
        that node is nearly always a NodeClaim just launched, and the answer
        is known without a simulation.
        """
        pods, existing = inputs
        if not pods or not existing or not existing[0].in_flight or not self._first_fit_stops:
            return None
        first = existing[0]
        blocking = [
            taint
            for taint in first.taints
            if taint.key != UNREGISTERED_TAINT_KEY and taint not in first.ephemeral_taints
        ]
        for pod in pods:
            spec = pod.spec
            if _has_inter_pod_terms(pod) or spec.preferred_node_terms or self.volume_terms.get(pod.key):
                return None
            if untolerated(blocking, spec.tolerations) or untolerated_preferences(blocking, spec.tolerations):
                return None
            if not any(first.requirements.compatible(option) is None for option in spec.node_requirements()):
                return None
            if _how_many(pod_requests(pod), first.available) < 1:
                return None
        return first.name

    def needs_new_nodes(
        self,
        removed: Sequence[Candidate],
        inputs: tuple[list[Pod], list[ExistingCapacity]],
        count: int,
    ) -> int | None:
        """At least how many new NodeClaims the solver would open for these pods, if that is
        ``count`` or more and the solver is sure to place every pod on a node it may count on;
        else None.

        A merge of N nodes that needs N new ones is no command, and most merge trials on a
        busy cluster end so: a lower bound settles them without a simulation. The bound
        counts what the offered nodes have free as if every pod could use it, and a new
        node as the largest any pool offers (net of its DaemonSets): per resource, the
        requests left over divided by the most a node has of it; with pods of one shape,
        those left over the free places divided by the most one node holds. The solver
        cannot need fewer. It answers only where the simulation could not have ended
        otherwise, so the merge search takes the same path: no offered node is still
        being initialized (a pod there makes the removal infeasible, not too large), no
        pool has limits, no moving pod has inter-pod terms, host ports or volume terms,
        and each removed node's pods are placed on new capacity when simulated alone (so
        each pod can always have a node of its own). The alone simulations are made once
        per pass and node, and only when the bound is reached.
        """
        pods, existing = inputs
        if not pods or count < 1 or any(item.in_flight for item in existing):
            return None
        if any(pool.remaining is not None for pool in self.pools):
            return None
        if any(_has_inter_pod_terms(pod) or self.volume_terms.get(pod.key) for pod in pods):
            return None
        at_least = self._new_nodes_at_least(pods, existing)
        if at_least < count:
            return None
        for candidate in removed:
            name = candidate.nodeclaim.name
            alone = self._placeable_afresh.get(name)
            if alone is None:
                moving = [pod for pod in candidate.pods if reschedulable(pod)]
                alone = not solve(
                    moving, [], self.pools, self.volume_terms, self.namespace_labels
                ).unschedulable
                self._placeable_afresh[name] = alone
            if not alone:
                return None
        return at_least

    def _new_nodes_at_least(self, pods: Sequence[Pod], existing: Sequence[ExistingCapacity]) -> int:
        shapes = {tuple(sorted(pod_requests(pod).items())) for pod in pods}
        if len(shapes) == 1:
            (key,) = shapes
            shape = dict(key)
            most = self._most_per_node.get(key)
            if most is None:
                most = self._most_per_node[key] = max(
                    (
                        _how_many(shape, _net_room(pool, instance_type))
                        for pool in self.pools
                        for instance_type in pool.instance_types
                    ),
                    default=0,
                )
            left = len(pods) - sum(_how_many(shape, item.available) for item in existing)
            return -(-left // most) if left > 0 and most > 0 else 0
        requested: ResourceAmounts = {}
        for pod in pods:
            requested = add_amounts(requested, pod_requests(pod))
        at_least = 0
        for resource, amount in requested.items():
            left = amount - sum(max(0, item.available.get(resource, 0)) for item in existing)
            if left <= 0:
                continue
            most = self._most_room.get(resource)
            if most is None:
                most = self._most_room[resource] = max(
                    (
                        _net_room(pool, instance_type).get(resource, 0)
                        for pool in self.pools
                        for instance_type in pool.instance_types
                    ),
                    default=0,
                )
            if most <= 0:
                return 0
            at_least = max(at_least, -(-left // most))
        return at_least

    def memo_key(
        self,
        removed: Sequence[Candidate],
        inputs: tuple[list[Pod], list[ExistingCapacity]],
        prices: Mapping[str, float],
        question: tuple[object, ...],
    ) -> tuple[object, ...] | None:
        """What an evaluation's answer depends on, as a hashable value; None: do not memoize.

        The removed nodes (their NodeClaim's and Node's versions and prices),
        the moving pods (their versions and volume terms), every node offered to
        the solver (its free room, labels, taints, whether it is initialized
        and, where they count, its pods), the pools (their types, by the memo
        object that stands for them, their NodePool's version, limits left)
        and the namespaces' labels, and ``question``: the rest of what the
        evaluation is asked (rules, nodes disrupted now, new nodes allowed).
        Objects without a resourceVersion cannot be told apart from a changed
        copy: their evaluations are not kept.
        """
        pass_key = self._pass_memo_key()
        if pass_key is None:
            return None
        pods, existing = inputs
        moving: list[object] = []
        for pod in pods:
            version = pod.metadata.resource_version
            if not version:
                return None
            terms = self.volume_terms.get(pod.key)
            moving.append((pod.key, version, tuple(t.identity() for t in terms) if terms else ()))
        nodes: list[object] = []
        for candidate in removed:
            claim_version = candidate.nodeclaim.metadata.resource_version
            node_version = candidate.node.metadata.resource_version
            if not claim_version or not node_version:
                return None
            nodes.append(
                (candidate.nodeclaim.name, claim_version, node_version, prices.get(candidate.nodeclaim.name))
            )
        if isinstance(existing, _OfferedNodes):
            offered_key = self._offered_key(existing)
            if offered_key is None:
                return None
            return (pass_key, question, tuple(nodes), tuple(moving), offered_key)
        offered: list[object] = []
        for item in existing:
            key = self._capacity_key(item)
            if key is None:
                return None
            offered.append(key)
        return (pass_key, question, tuple(nodes), tuple(moving), tuple(offered))

    def alike_key(
        self,
        candidate: Candidate,
        inputs: tuple[list[Pod], list[ExistingCapacity]],
        prices: Mapping[str, float],
        question: tuple[object, ...],
    ) -> tuple[object, ...] | None:
        """A single node's evaluation by what the node and its pods are, not who they are.

        Nodes that one plan launched are often alike: the same type, price
        and capacity type, full with the same mix of a few Deployments'
        replicas. Each one's evaluation (its pods against the rest of the
        cluster and the pools) then comes out the same, and a pass over a
        cluster of thousands such nodes made that same simulation thousands
        of times. This key names the node by what ``_worked_out`` reads of a
        single removed node (its NodePool, weight, capacity type, capacity
        and price), its moving pods by their placement signatures in the
        order of their keys (the solver breaks ties between pods by key, so
        the same sequence means the same choices) and, as
        :meth:`memo_key` does, the pass and the nodes offered. A node that
        is itself among those offered is named there, so it shares nothing.
        None where the pods have inter-pod or volume terms (their labels or
        volumes count), or something has no resourceVersion.

        The caller keeps only answers that name none of the node's pods: an
        answer that names a pod (one that would not schedule) is this node's
        alone.
        """
        pods, existing = inputs
        if not pods or not isinstance(existing, _OfferedNodes):
            return None
        pass_key = self._pass_memo_key()
        if pass_key is None:
            return None
        assert self.memo is not None
        signatures: list[int] = []
        for pod in sorted(pods, key=lambda pod: pod.key):
            if self.volume_terms.get(pod.key):
                return None
            signature = self.memo.pod_signature(pod)
            if signature is None:
                return None
            signatures.append(signature)
        offered_key = self._offered_key(existing)
        if offered_key is None:
            return None
        claim = candidate.nodeclaim
        capacity = claim.status.capacity or candidate.node.allocatable
        node = (
            candidate.nodepool.name,
            candidate.nodepool.weight,
            _candidate_capacity_type(candidate),
            tuple(sorted(capacity.items())),
            prices.get(claim.name),
        )
        return (pass_key, "alike", question, node, tuple(signatures), offered_key)

    def _pass_memo_key(self) -> tuple[object, ...] | None:
        """The pass's part of every memo key; None when there is no memo or it cannot be told."""
        if self.memo is None:
            return None
        pass_key = self._pass_key
        if pass_key is None:
            pass_key = self._pass_key = self._shared_key()
        return pass_key or None

    def _offered_key(self, existing: _OfferedNodes) -> _KeyPart | None:
        """The first ``taken`` nodes of the pass's list for these shapes, the removed among them
        included: a slice of keys made once per list."""
        offered = existing.offered
        if existing.taken in offered.key_parts:
            return offered.key_parts[existing.taken]
        keys = offered.memo_keys
        if keys is None:
            keys = offered.memo_keys = [self._capacity_key(item) for item in offered.items]
        part = None if None in keys[: existing.taken] else _KeyPart(tuple(keys[: existing.taken]))
        offered.key_parts[existing.taken] = part
        return part

    def _capacity_key(self, item: ExistingCapacity) -> int | None:
        if id(item) in self._capacity_keys:
            return self._capacity_keys[id(item)]
        assert self.memo is not None
        written = _capacity_key(item)
        key = self._capacity_keys[id(item)] = None if written is None else self.memo.number(written)
        return key

    def _shared_key(self) -> tuple[object, ...]:
        """The pools and namespaces as a key; () when a pool has no memo object to stand for its types."""
        assert self.memo is not None
        pools: list[object] = []
        for pool in self.pools:
            if pool.memo is None:
                return ()
            self.memo.pin(pool.memo)
            remaining = tuple(sorted(pool.remaining.items())) if pool.remaining is not None else None
            # The pool's memo stands for its types, their overheads and its template (a new
            # one whenever any of them changes); the rest of the NodePool the solver reads
            # is its weight and, through ``remaining``, its limits. Not its status, which
            # changes with every node.
            pools.append(
                (pool.nodepool.name, id(pool.memo), pool.nodepool.weight, remaining, pool.unavailable)
            )
        namespaces = tuple(
            sorted(
                (name, tuple(sorted(labels.items())))
                for name, labels in (self.namespace_labels or {}).items()
            )
        )
        return (tuple(pools), namespaces, self.give_back_limits)

    def _pools_without(self, removed: Sequence[Candidate]) -> list[NodePoolCapacity]:
        """The NodePools with the removed nodes' capacity no longer counted against their limits.

        A pool's ``remaining`` is its limits less its NodeClaims' capacity,
        the removed ones included; once they are gone, that capacity is the
        pool's again. Without this, a preferred pool at its limit looks full
        for the very pods that fill it, and they are replaced into a
        lower-weight pool.
        """
        freed: dict[str, ResourceAmounts] = {}
        for candidate in removed:
            capacity = dict(candidate.nodeclaim.status.capacity or candidate.node.allocatable)
            capacity[NODES_RESOURCE] = 1
            freed[candidate.nodepool.name] = add_amounts(freed.get(candidate.nodepool.name, {}), capacity)
        return [
            pool
            if pool.remaining is None or pool.nodepool.name not in freed
            else dataclasses.replace(
                pool,
                remaining={
                    resource: amount + freed[pool.nodepool.name].get(resource, 0)
                    for resource, amount in pool.remaining.items()
                },
            )
            for pool in self.pools
        ]

    def _existing_for(self, pods: Sequence[Pod], gone: set[str]) -> list[ExistingCapacity]:
        if any(_has_inter_pod_terms(pod) for pod in pods):
            return [item for item in self.capacity if item.name not in gone]
        shapes: list[ResourceAmounts] = []
        for pod in pods:
            requests = pod_requests(pod)
            if requests not in shapes:
                shapes.append(requests)
        # The largest pod in every resource: a node that holds k of those holds at
        # least k of the moving pods however first-fit fills it.
        largest: ResourceAmounts | None = None
        if self._first_fit_stops and not any(self._has_node_terms(pod) for pod in pods):
            largest = {}
            for shape in shapes:
                for resource, amount in shape.items():
                    largest[resource] = max(largest.get(resource, 0), amount)
        if not pods:
            return []
        offered = self._offered_list(shapes)
        if largest is None:
            return _OfferedNodes(
                [item for item, name in zip(offered.items, offered.names, strict=True) if name not in gone],
                offered,
                len(offered.items),
            )
        # First-fit offers existing nodes in name order: once the nodes so far (the removed
        # ones aside) hold as many of the largest pod as there are pods, a pod that got past
        # all of them would mean each holds at least its share. Found by bisection on the
        # running count, with the removed nodes' part taken off until it settles.
        holds = self._holding(largest)
        running = offered.running(holds)
        left_out = sorted(position for name in gone if (position := offered.positions.get(name)) is not None)
        end = len(running)
        cut = bisect.bisect_left(running, len(pods))
        while cut < end:
            taken = sum(holds[offered.indices[position]] for position in left_out if position <= cut)
            settled = bisect.bisect_left(running, len(pods) + taken)
            if settled == cut:
                break
            cut = settled
        count = min(cut + 1, end)
        kept: list[ExistingCapacity] = []
        start = 0
        for position in left_out:
            if position >= count:
                break
            kept.extend(offered.items[start:position])
            start = position + 1
        kept.extend(offered.items[start:count])
        return _OfferedNodes(kept, offered, count)

    def _offered_list(self, shapes: list[ResourceAmounts]) -> _Offered:
        """The nodes offered to pods of these shapes, as the solver sees them, once per pass."""
        key = tuple(sorted(tuple(sorted(shape.items())) for shape in shapes))
        offered = self._offered_lists.get(key)
        if offered is None:
            indices = list(self._offered(shapes))
            items = [
                item if lean is None else lean for item, lean in (self._lean[index] for index in indices)
            ]
            offered = self._offered_lists[key] = _Offered(indices, items)
        return offered

    def _prepared_for(
        self, existing: list[ExistingCapacity], removed: Sequence[Candidate]
    ) -> CapacityLeftOut | None:
        """The nodes offered to these pods, set up for the solver once per pass, less the removed.

        Only where that is the same to the solver as the list ``inputs`` gives: no bound pod
        constrains its neighbours, and the moving pods have no inter-pod terms (``inputs``
        then takes the pass's list for their shapes), so the nodes carry no pods and the
        topology reads none. The list may have been cut short where the nodes before the cut
        hold every pod; first-fit never goes past them, so the nodes after it change nothing.
        """
        if not removed or not self._all_lean or not isinstance(existing, _OfferedNodes):
            return None
        prepared = existing.offered.prepared()
        return prepared.without(name for c in removed for name in (c.node.name, c.nodeclaim.name))

    def _holding(self, largest: ResourceAmounts) -> list[int]:
        """Per node (by index in ``_lean``), how many pods of this size it holds; 0 if tainted.

        Worked out once per pass and size: every simulation of the pass counts with it.
        """
        key = tuple(sorted(largest.items()))
        holds = self._holds.get(key)
        if holds is None:
            holds = [0 if item.taints else _how_many(largest, item.available) for item, _ in self._lean]
            self._holds[key] = holds
        return holds

    def _offered(self, shapes: list[ResourceAmounts]) -> Sequence[int]:
        """In name order, the nodes offered to pods of these shapes: those with pods that
        constrain their neighbours, and those with room for one of the shapes.

        Each shape's list is worked out once per pass (simulations ask about the
        same few shapes again and again), so a simulation reads only the nodes
        it may be offered, not every node.
        """
        lists = []
        for shape in shapes:
            key = tuple(sorted(shape.items()))
            indices = self._fitting.get(key)
            if indices is None:
                indices = [
                    index
                    for index, (item, lean) in enumerate(self._lean)
                    if lean is None or fits(shape, item.available)
                ]
                self._fitting[key] = indices
            lists.append(indices)
        if len(lists) == 1:
            return lists[0]
        return sorted(set().union(*lists))

    def _has_node_terms(self, pod: Pod) -> bool:
        spec = pod.spec
        return bool(
            spec.node_selector
            or spec.required_node_terms
            or spec.preferred_node_terms
            or self.volume_terms.get(pod.key)
        )


def _net_room(pool: NodePoolCapacity, instance_type: InstanceType) -> ResourceAmounts:
    """What a new node of this type has for pods: its allocatable less its DaemonSets."""
    overhead = pool.overhead(instance_type)
    return {
        resource: amount - overhead.get(resource, 0) for resource, amount in instance_type.allocatable.items()
    }


def _how_many(requests: Mapping[str, int], room: Mapping[str, int]) -> int:
    """How many pods of ``requests`` fit in ``room`` (a large number if nothing is requested)."""
    count = 1 << 30
    for resource, amount in requests.items():
        if amount > 0:
            count = min(count, max(0, room.get(resource, 0)) // amount)
    return count


# -- pricing -------------------------------------------------------------------


def worst_launch_price(instance_type: InstanceType, requirements: Requirements) -> float:
    """The most the type may cost when launched under ``requirements`` (inf if it cannot be).

    As Karpenter: among available offerings the requirements admit, those of
    the capacity type that would be launched (reserved, then spot, then
    on-demand), and of those the most expensive.
    """
    offerings = instance_type.available_offerings(requirements)
    for capacity_type in _LAUNCH_PRECEDENCE:
        prices = [offering.price for offering in offerings if offering.capacity_type == capacity_type]
        if prices:
            return max(prices)
    return math.inf


def cheapest_price(instance_type: InstanceType, requirements: Requirements) -> float:
    offering = instance_type.cheapest_offering(requirements)
    return offering.price if offering is not None else math.inf


def _fewest_meeting_min_values(requirements: Requirements, options: Sequence[InstanceType]) -> int:
    for end in range(1, len(options) + 1):
        if min_values_met(requirements, options[:end]):
            return end
    return len(options)


def _candidate_capacity_type(candidate: Candidate) -> str:
    return candidate.nodeclaim.capacity_type or candidate.node.metadata.labels.get(LABEL_CAPACITY_TYPE, "")


def _candidate_instance_type(candidate: Candidate) -> str:
    return candidate.nodeclaim.instance_type or candidate.node.metadata.labels.get(LABEL_INSTANCE_TYPE, "")


def _offering_label(candidate: Candidate) -> str:
    parts = (
        _candidate_instance_type(candidate),
        candidate.nodeclaim.zone,
        _candidate_capacity_type(candidate),
    )
    return ", ".join(part for part in parts if part) or "no labels"


def _priced_below(
    options: Sequence[InstanceType], requirements: Requirements, ceiling: float
) -> list[InstanceType]:
    return [t for t in options if worst_launch_price(t, requirements) < ceiling]


def _cheaper_replacement(
    claim: NewNodeClaim,
    removed: Sequence[Candidate],
    ceiling: float,
    spot_to_spot: bool,
    *,
    single_spot_rule: bool = True,
) -> NewNodeClaim | str:
    """The replacement narrowed to options whose worst launch price is below ``ceiling``, or why not."""
    requirements = claim.requirements.copy()
    capacity_types = requirements.get(LABEL_CAPACITY_TYPE)
    all_spot = all(_candidate_capacity_type(c) == CAPACITY_TYPE_SPOT for c in removed)
    spot_only = Requirement.from_operator(LABEL_CAPACITY_TYPE, "In", (CAPACITY_TYPE_SPOT,))
    if all_spot and capacity_types.has(CAPACITY_TYPE_SPOT):
        if not spot_to_spot:
            return (
                "spot-to-spot consolidation is disabled: a spot node can be deleted but not replaced by spot"
            )
        requirements.add(spot_only)
        options = _priced_below(claim.instance_types, requirements, ceiling)
    elif capacity_types.has(CAPACITY_TYPE_SPOT) and capacity_types.has(CAPACITY_TYPE_ON_DEMAND):
        # Priced as spot, so launched as spot or not at all; priced under that very
        # requirement, so a type whose spot offerings are all unavailable (a capacity
        # error marked them) is not offered as spot on the strength of its on-demand
        # price: a launch that cannot succeed, rolled back and retried pass after pass.
        pinned = requirements.copy()
        pinned.add(spot_only)
        options = _priced_below(claim.instance_types, pinned, ceiling)
        if options:
            requirements = pinned
        else:
            # No spot below the ceiling: an on-demand replacement, priced as it launches.
            options = _priced_below(claim.instance_types, requirements, ceiling)
    else:
        options = _priced_below(claim.instance_types, requirements, ceiling)
    if not options:
        return f"no replacement costs less than ${ceiling:.4f}/h"
    if not min_values_met(requirements, options):
        return "the cheaper replacement options do not satisfy minValues"
    options.sort(key=lambda t: (cheapest_price(t, requirements), t.name))
    if single_spot_rule and all_spot and capacity_types.has(CAPACITY_TYPE_SPOT) and len(removed) == 1:
        if len(options) < MIN_INSTANCE_TYPES_FOR_SPOT_TO_SPOT:
            return (
                f"spot-to-spot consolidation needs {MIN_INSTANCE_TYPES_FOR_SPOT_TO_SPOT} cheaper "
                f"instance types, found {len(options)}"
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
) -> NewNodeClaim | str:
    """Karpenter's ``filterOutSameType`` for multi-node replacements.

    If the replacement may be a type one of the removed nodes already is,
    it must be cheaper than the cheapest such node; otherwise keeping that
    node and deleting the rest does as well with fewer pods disrupted.
    """
    by_type: dict[str, float] = {}
    for candidate in removed:
        type_name = _candidate_instance_type(candidate)
        price = prices[candidate.nodeclaim.name]
        by_type[type_name] = min(price, by_type.get(type_name, math.inf))
    ceiling = min((by_type[t.name] for t in claim.instance_types if t.name in by_type), default=math.inf)
    if math.isinf(ceiling):
        return claim
    options = _priced_below(claim.instance_types, claim.requirements, ceiling)
    if not options or not min_values_met(claim.requirements, options):
        return "the replacement is no cheaper than one of the nodes it replaces"
    return _narrowed(claim, claim.requirements.copy(), options)


# -- commands ------------------------------------------------------------------


def _names(candidates: Sequence[Candidate], shown: int = 3) -> str:
    names = [c.nodeclaim.name for c in candidates]
    text = ", ".join(names[:shown])
    return text + (f" and {len(names) - shown} more" if len(names) > shown else "")


def _describe_removed(candidates: Sequence[Candidate], total: float) -> str:
    if len(candidates) == 1:
        return f"{candidates[0].nodeclaim.name} ({_candidate_instance_type(candidates[0])}, ${total:.2f}/h)"
    return f"{len(candidates)} nodes ({_names(candidates)}, ${total:.2f}/h)"


class Infeasible(str):
    """Why some nodes cannot go at all: their pods would not all find a place."""

    __slots__ = ()


def _worst_price(claim: NewNodeClaim) -> float:
    return max(worst_launch_price(t, claim.requirements) for t in claim.instance_types)


def _cheapest_worst_price(claim: NewNodeClaim) -> float:
    return min((worst_launch_price(t, claim.requirements) for t in claim.instance_types), default=math.inf)


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


def _moves_up_in_weight(
    claims: Sequence[NewNodeClaim], removed: Sequence[Candidate], weights: Mapping[str, int]
) -> bool:
    """Whether every new NodeClaim is in a NodePool weighted above every removed node's."""
    highest_removed = max(candidate.nodepool.weight or 0 for candidate in removed)
    return all(weights.get(claim.nodepool, 0) > highest_removed for claim in claims)


def _evaluate(
    removed: Sequence[Candidate],
    simulator: RemovalSimulator,
    prices: Mapping[str, float],
    rules: ConsolidationRules,
    *,
    disrupt: Sequence[Candidate] | None = None,
    max_new: int = 1,
) -> ConsolidationCommand | str:
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
    if isinstance(result, str):
        if key is not None:
            assert memo is not None
            memo.put(key, result)
        if alike is not None and not any(pod.key in result for pod in inputs[0]):
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
) -> ConsolidationCommand | str:
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
        return Infeasible(f"its pods would need node {first_target}, which is not initialized yet")
    if len(removed) > 1:
        # A group is no command if it needs as many new nodes as it has (or more than allowed).
        too_many = min(len(removed), max_new + 1)
        at_least = simulator.needs_new_nodes(removed, inputs, too_many)
        if at_least is not None:
            return f"removing it needs at least {at_least} new nodes"
    plan = simulator.solve(inputs, removed)
    if plan.stopped_at is not None:
        return Infeasible(f"its pods would need node {plan.stopped_at}, which is not initialized yet")
    waiting = sorted({target for target in plan.existing.values() if target in simulator.uninitialized})
    if waiting:
        return Infeasible(f"its pods would need node {waiting[0]}, which is not initialized yet")
    if plan.unschedulable:
        key = min(plan.unschedulable)
        more = len(plan.unschedulable) - 1
        return Infeasible(
            f"pod {key} would not schedule: {plan.unschedulable[key]}"
            + (f" (and {more} more)" if more else "")
        )
    total = sum(prices[c.nodeclaim.name] for c in removed)
    claims = plan.new_nodeclaims
    later = [candidate for candidate in removed if candidate not in disrupted]
    if not claims:
        if later:
            # Deleting the ones the budgets allow is a delete of its own: judge it so.
            delete = _evaluate(disrupted, simulator, prices, rules)
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
        return f"removing it needs {len(claims)} new nodes"
    if not split and len(claims) > len(disrupted):
        return (
            f"the budgets let {len(disrupted)} of its {len(removed)} nodes go now, it needs {len(claims)} new"
        )
    weight_move = rules.weights and _moves_up_in_weight(claims, removed, simulator.weights)
    # A move to the preferred NodePool is not for price: it may cost as much as now, not more.
    margin = 0.0 if weight_move else rules.min_savings_fraction
    ceiling = math.nextafter(total, math.inf) if weight_move else total * (1.0 - margin)
    cheapest = [_cheapest_worst_price(claim) for claim in claims]
    if any(math.isinf(price) for price in cheapest) or sum(cheapest) >= ceiling:
        return f"no replacement is at least {rules.min_savings_fraction:.0%} cheaper than ${total:.4f}/h"
    replacements: list[NewNodeClaim] = []
    for claim, floor in zip(claims, cheapest, strict=True):
        # Each new NodeClaim gets its share of the ceiling, so their worst prices add up below it.
        share = ceiling * floor / sum(cheapest) if len(claims) > 1 else ceiling
        narrowed = _cheaper_replacement(
            claim, removed, share, rules.spot_to_spot, single_spot_rule=len(removed) == 1
        )
        if isinstance(narrowed, NewNodeClaim) and len(removed) > 1 and len(claims) == 1:
            narrowed = _without_same_types(narrowed, removed, prices)
        if isinstance(narrowed, str):
            return narrowed
        replacements.append(narrowed)
    worst = sum(_worst_price(claim) for claim in replacements)
    if not worst < ceiling:
        # Each option is below its share; this holds the sum to the ceiling whatever rounding did.
        return f"no replacement is at least {rules.min_savings_fraction:.0%} cheaper than ${total:.4f}/h"
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


def consolidate_multi(
    candidates: Sequence[Candidate],
    simulator: RemovalSimulator,
    prices: Mapping[str, float],
    allowed: Mapping[str, int],
    *,
    spot_to_spot: bool = False,
    rules: ConsolidationRules | None = None,
) -> ConsolidationCommand | None:
    """The largest prefix (2..100) of ``candidates`` that can be removed at once, by binary search.

    ``candidates`` in disruption order (see :func:`consolidation_candidates`);
    each NodePool contributes no more than ``allowed`` of them.
    """
    rules = rules if rules is not None else dataclasses.replace(KARPENTER_RULES, spot_to_spot=spot_to_spot)
    batchable = _within_budget(candidates, allowed)[:MAX_MULTI_NODE_CANDIDATES]
    best: ConsolidationCommand | None = None
    low, high = 2, len(batchable)
    while low <= high:
        middle = (low + high) // 2
        result = _evaluate(batchable[:middle], simulator, prices, rules)
        if isinstance(result, ConsolidationCommand):
            best = result
            low = middle + 1
        else:
            high = middle - 1
    return best


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
        by_kind.setdefault((candidate.nodepool.name, _candidate_capacity_type(candidate)), []).append(
            candidate
        )
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
    rules: ConsolidationRules,
) -> ConsolidationCommand | None:
    """Merge underused nodes: grow each group greedily, keep the command that saves the most.

    See the module docstring for the search and its bound. A group starts
    with its most wasteful node; each next node joins if the pods of the
    group with it still all find a place (two half-full nodes may need a
    node no cheaper than both, where three would not), and is skipped
    otherwise. Each try is one simulation; every try that is a valid
    command competes on its saving.
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
            result = _evaluate(trial, simulator, prices, rules, disrupt=disrupt, max_new=len(trial) - 1)
            if isinstance(result, Infeasible):
                continue
            members = trial
            if isinstance(result, str):
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


def consolidate_single(
    candidates: Sequence[Candidate],
    simulator: RemovalSimulator,
    prices: Mapping[str, float],
    allowed: Mapping[str, int],
    *,
    spot_to_spot: bool = False,
    rules: ConsolidationRules | None = None,
) -> tuple[ConsolidationCommand | None, dict[str, str]]:
    """The first candidate, in the given order, that can be deleted or replaced alone.

    Returns the command (or None) and, for each candidate tried in vain, why.
    """
    rules = rules if rules is not None else dataclasses.replace(KARPENTER_RULES, spot_to_spot=spot_to_spot)
    unconsolidatable: dict[str, str] = {}
    for candidate in candidates:
        if allowed.get(candidate.nodepool.name, 0) <= 0 or is_empty(candidate):
            continue
        result = _evaluate([candidate], simulator, prices, rules)
        if isinstance(result, ConsolidationCommand):
            return result, unconsolidatable
        unconsolidatable[candidate.nodeclaim.name] = result
    return None, unconsolidatable


def savings_given_up(
    held_back: Sequence[Candidate],
    simulator: RemovalSimulator,
    prices: Mapping[str, float],
    *,
    spot_to_spot: bool = False,
    rules: ConsolidationRules | None = None,
) -> dict[str, float]:
    """What each held-back node would save ($/h) if it alone were deleted or replaced.

    The same evaluation single-node consolidation makes, as if the blocker
    (do-not-disrupt, a PDB, a pod without owner, a budget) were not there:
    the node's price for a delete, its price less the replacement's worst
    launch price for a replace. A node whose pods would not fit elsewhere, or
    that no cheaper replacement exists for, gives up nothing: 0.
    """
    rules = rules if rules is not None else dataclasses.replace(KARPENTER_RULES, spot_to_spot=spot_to_spot)
    given_up: dict[str, float] = {}
    for candidate in held_back:
        result = _evaluate([candidate], simulator, prices, rules)
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
    spot_to_spot: bool = False,
    volume_terms: Mapping[str, Sequence[Requirements]] | None = None,
    namespace_labels: NamespaceLabels | None = None,
    savings_known: Container[str] = frozenset(),
    rules: ConsolidationRules | None = None,
    memo: EvaluationMemo | None = None,
) -> ConsolidationDecision:
    """Multi-node consolidation, then single-node: the command to run now, if any.

    ``other_capacity`` is every node's and in-flight NodeClaim's capacity as
    the provisioner sees it (candidates included: each simulation leaves out
    the ones it removes; nodes already being disrupted must be left out by
    the caller). ``allowed`` is how many more nodes of each NodePool may be
    disrupted for Underutilized; a NodePool missing from it gets none.
    ``rules`` are the rules to decide by; without them, Karpenter's with
    ``spot_to_spot`` as given.

    The decision also says what the nodes held back by do-not-disrupt, a PDB
    or a budget would have saved (:func:`savings_given_up`), except for those
    in ``savings_known``: a caller that keeps the figure of a node while it
    stays blocked passes them, so each blocked node costs one simulation, not
    one per pass (a budget of zero over a large pool would otherwise simulate
    every node on every pass for a figure nobody acts on).
    """
    rules = rules if rules is not None else dataclasses.replace(KARPENTER_RULES, spot_to_spot=spot_to_spot)
    selection = consolidation_candidates(candidates, price_of, pdb_blocked, now)
    decision = ConsolidationDecision(blocked=selection.blocked, next_due=selection.next_due)
    held_back = list(selection.held_back)
    for candidate in selection.eligible:
        pool = candidate.nodepool.name
        if allowed.get(pool, 0) <= 0:
            decision.blocked[candidate.nodeclaim.name] = (
                f"disruption budget of NodePool {pool} allows no more {REASON_UNDERUTILIZED} disruptions now"
            )
            held_back.append(candidate)
    eligible = [c for c in selection.eligible if c.nodeclaim.name not in decision.blocked]
    simulator = RemovalSimulator(
        other_capacity, pools, volume_terms, namespace_labels, give_back_limits=rules.weights, memo=memo
    )
    decision.savings_given_up = savings_given_up(
        [c for c in held_back if c.nodeclaim.name not in savings_known],
        simulator,
        selection.prices,
        rules=rules,
    )
    command = consolidate_multi(eligible, simulator, selection.prices, allowed, rules=rules)
    if rules.multi_node == MULTI_NODE_MERGE:
        # Merging also keeps Karpenter's largest prefix (up to 100 nodes at once, where a
        # merge group stops at 20): whichever saves more.
        merged = consolidate_merge(eligible, simulator, selection.prices, allowed, rules)
        if merged is not None and (command is None or merged.savings_per_hour > command.savings_per_hour):
            command = merged
    if command is None:
        command, decision.unconsolidatable = consolidate_single(
            eligible, simulator, selection.prices, allowed, rules=rules
        )
    if command is not None:
        command.blocked = dict(decision.blocked)
    decision.command = command
    return decision
