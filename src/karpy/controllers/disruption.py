"""Disruption orchestration: carry out what the decision core decides, safely.

Every pass (every 10 s, Karpenter's polling period, or sooner when a node is
known to become due) builds the candidates from the cluster and asks
:mod:`karpy.disruption` for one command, trying the methods in Karpenter's
order and stopping at the first that acts:

1. **emptiness** — empty nodes past consolidateAfter are deleted;
2. **drift** — a drifted node is replaced: the pods' new home is simulated
   and launched first;
3. **consolidation** — underused nodes are deleted or replaced by cheaper
   NodeClaims (multi-node first, then single-node), by the controller's
   :class:`~karpy.disruption.consolidation.ConsolidationRules` (karpy's by
   default, or Karpenter's; docs/consolidation.md). A *weight
   consolidation*, which moves pods to a preferred NodePool at no higher
   price, says so in its Events and log line and counts against the
   Underutilized budget.

A command is not carried out at once: it is re-checked after 15 s (the
cluster may have changed: a pod landed on the empty node, a new pod needs the
capacity), and dropped if it no longer holds. An empty node that a budget
held back has been re-checked by then, pass after pass, so when the budget
frees up it goes without a fresh wait (see ``_checked_while_waiting``).
Then the candidates are tainted ``karpenter.sh/disrupted:NoSchedule`` so
nothing new lands on them, the replacements are launched, and only when every
replacement is initialized are the candidates deleted (the termination
controller drains them). If a
replacement fails (it never launches or registers and its NodeClaim is
deleted), the command is rolled back: the taints come off and the old nodes
keep serving.

When the budgets let a consolidation plan remove only some of its nodes now,
the others (``ConsolidationCommand.planned``) are tainted
``karpy.dev/consolidation-planned:PreferNoSchedule`` until the plan changes
or ends, so kube-scheduler puts the pods evicted meanwhile on the nodes that
stay (see ``_mark_planned``).

A consolidation whose replacement failed is backed off: its candidates are
not offered a replacement again for ``REPLACEMENT_BACKOFF_START`` (1 minute),
doubled per consecutive failure up to ``REPLACEMENT_BACKOFF_CAP`` (10
minutes). Why: a replacement fails mostly when the cloud refuses the offering
it was priced on (insufficient capacity); until the refusal has been recorded
as an unavailable offering (the cache keeps it a few minutes) the same
cheapest offering is chosen again, launched, refused and rolled back, pass
after pass, each time tainting the old node for nothing. One minute covers
the usual lag before the refusal is known; doubling keeps a persistent
refusal (a whole capacity type gone for half an hour) down to a handful of
attempts; ten minutes bounds how long a real saving waits once capacity is
back. Deletes are not backed off: they launch nothing, so they cannot fail
for that reason. While a candidate is backed off, the pass first looks for a
delete among all candidates (no new capacity offered) and then for any
command among the others, so the back-off holds back only what failed.

A consolidation that finds nothing to do is not worked out again while
nothing it reads has changed: no object's resourceVersion (pods, nodes,
NodeClaims, NodePools, DaemonSets, PDBs, Namespaces, node classes), no
catalog the provider returns, no budget, back-off or known saving, and no
node has become due (``next_due``). Karpenter does the same (its cluster
state records that it is consolidated, and any change marks it not), and
like Karpenter the answer is kept at most ``QUIET_PASS_TTL`` (5 minutes):
the disruption order weighs a node's remaining lifetime, which moves with
the clock alone. Why: on a cluster that is already as cheap as it gets, a
pass simulates the removal of every node every 10 seconds for nothing; a
quiet cluster (nights, idle virtual time in the simulator) spent nearly all
its time there.

Expiration is not here: in Karpenter v1 it is forceful and handled by the
NodeClaim expiration controller, not subject to budgets.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from karpy.api.conditions import TRUE, remove_condition, set_condition
from karpy.api.core import DO_NOT_DISRUPT_ANNOTATION, Node, Pod
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import CONDITION_DRIFTED, NodeClaim
from karpy.api.nodeclass import EC2_KIND, KWOK_KIND, EC2NodeClass, KWOKNodeClass
from karpy.api.nodecost import DEFAULT_EXTRA_COST
from karpy.api.nodepool import (
    REASON_DRIFTED,
    REASON_EMPTY,
    REASON_UNDERUTILIZED,
    WHEN_EMPTY_OR_UNDERUTILIZED,
    NodePool,
    status_only_change,
)
from karpy.api.taints import (
    CONSOLIDATION_PLANNED_TAINT_KEY,
    DISRUPTED_TAINT_KEY,
    NO_SCHEDULE,
    PREFER_NO_SCHEDULE,
    Taint,
)
from karpy.cloud.provider import CloudProvider, CloudProviderError
from karpy.controllers.provisioning import build_nodeclaim
from karpy.controllers.state import (
    PoolTypesCache,
    invalid_nodepools,
    launched_price,
    pdb_blocked_pods,
    scheduling_snapshot,
    volume_terms,
)
from karpy.disruption.budgets import allowed_disruptions
from karpy.disruption.consolidation import (
    KIND_PRICE,
    KIND_WEIGHT,
    ConsolidationDecision,
    ConsolidationRules,
    EvaluationMemo,
    any_consolidatable,
    decide_consolidation,
)
from karpy.disruption.drift import drift_reason, expires_at, is_expired
from karpy.disruption.emptiness import Candidate, EmptinessDecision, decide_emptiness, reschedulable
from karpy.logs import about
from karpy.operator.cluster import (
    EVENT_NORMAL,
    EVENT_WARNING,
    Clock,
    Cluster,
    ConflictError,
    NotFoundError,
)
from karpy.operator.karpenter_metrics import REASON_EXPIRED, Metrics
from karpy.operator.runtime import Watch
from karpy.scheduling.solver import NewNodeClaim, NodePoolCapacity

log = logging.getLogger("karpy.disruption")

PASS_KEY = "pass"
POLL_PERIOD = 10.0
VALIDATION_DELAY = 15.0
REPLACEMENT_BACKOFF_START = 60.0
REPLACEMENT_BACKOFF_CAP = 600.0
QUIET_PASS_TTL = 300.0
DISRUPTED_TAINT = Taint(DISRUPTED_TAINT_KEY, NO_SCHEDULE)
PLANNED_TAINT = Taint(CONSOLIDATION_PLANNED_TAINT_KEY, PREFER_NO_SCHEDULE)
# Reasons a node is not a consolidation candidate *yet*: not worth an Event.
_TRANSIENT = (
    "node is being deleted",
    "node is not initialized",
    "consolidateAfter has not elapsed",
    "NodePool ",
)


@dataclass(slots=True)
class Command:
    """One disruption: which NodeClaims go, why, and what is launched first."""

    reason: str
    candidates: list[str]
    replacements: list[NewNodeClaim] = field(default_factory=list)
    description: str = ""
    # For Underutilized: KIND_PRICE, or KIND_WEIGHT when the pods move to a preferred NodePool
    # (counted against the Underutilized budget: budgets know no other reason for it).
    kind: str = KIND_PRICE
    # NodeClaims the consolidation plan removes in later passes (budgets), to be marked.
    planned: list[str] = field(default_factory=list)

    @property
    def why(self) -> str:
        """The reason as Events say it: a weight consolidation says so."""
        return f"{self.reason} (weight consolidation)" if self.kind == KIND_WEIGHT else self.reason


class _Versioned(Protocol):
    @property
    def metadata(self) -> ObjectMeta: ...


@dataclass(frozen=True, slots=True)
class _QuietPass:
    """A consolidation that found nothing, kept to answer the same question again until ``until``."""

    inputs: tuple[object, ...]
    decision: ConsolidationDecision
    until: float


@dataclass(slots=True)
class _Pending:
    command: Command
    validate_at: float


@dataclass(slots=True)
class _InFlight:
    command: Command
    replacement_names: list[str]


class DisruptionController:
    name = "disruption"

    def __init__(
        self,
        cluster: Cluster,
        clock: Clock,
        cloud: CloudProvider | None = None,
        poll_period: float = POLL_PERIOD,
        validation_delay: float = VALIDATION_DELAY,
        spot_to_spot: bool | None = None,
        metrics: Metrics | None = None,
        rules: ConsolidationRules | None = None,
        quiet_pass_ttl: float = QUIET_PASS_TTL,
        extra_node_cost: float = DEFAULT_EXTRA_COST,
    ) -> None:
        self.cluster = cluster
        self.clock = clock
        self.cloud = cloud
        self.metrics = metrics if metrics is not None else Metrics()
        self.poll_period = poll_period
        self.validation_delay = validation_delay
        self.last = EmptinessDecision()
        self.blocked: dict[str, str] = {}
        self.pending: _Pending | None = None
        self.in_flight: _InFlight | None = None
        self.executed: list[Command] = []
        self.unconsolidatable: dict[str, str] = {}
        # What each node consolidation holds back (do-not-disrupt, PDB, budget) would
        # save, $/h, with the reason it was worked out under: kept while that reason
        # stands, so a blocked node is simulated once, not on every pass.
        self._given_up: dict[str, tuple[str, float]] = {}
        self.consolidation_due: float | None = None
        rules = rules if rules is not None else ConsolidationRules()
        if spot_to_spot is not None:
            rules = dataclasses.replace(rules, spot_to_spot=spot_to_spot)
        self.rules = rules
        self._reported: dict[str, str] = {}
        # Empty nodes past consolidateAfter, by NodeClaim name: (when it became due,
        # the first pass that saw it due). Kept while the first stays the same.
        self._watched_empty: dict[str, tuple[float, float]] = {}
        # NodeClaims this controller deleted: marked for deletion even before the cache
        # shows their deletionTimestamp.
        self._deleted: set[str] = set()
        # NodeClaims whose consolidation replacement failed: (consecutive failures,
        # until when they are offered no replacement).
        self._replacement_backoff: dict[str, tuple[int, float]] = {}
        # Nodes are priced as the provisioner prices them, per-node costs included.
        self._pool_types = PoolTypesCache(extra_node_cost)
        # Evaluations that found nothing, kept while what they read stays (see EvaluationMemo);
        # None: every evaluation worked out afresh.
        self.evaluations: EvaluationMemo | None = EvaluationMemo()
        # The last consolidation that found nothing to do, with what it was worked out from.
        self._quiet: _QuietPass | None = None
        self.quiet_pass_ttl = quiet_pass_ttl
        self.passes = 0
        # Consolidations answered from the last one that found nothing (inputs unchanged).
        self.quiet_passes = 0
        # The NodeClaims the last consolidation plans to remove later; None when the pass
        # did not get as far as consolidation (an emptiness or drift command came first).
        self._planned: set[str] | None = None
        # Replacements launched for a plan the budgets cut short, by name, with the plan's
        # nodes still to go: where those nodes' pods are to land (see ``_landing_nodes``).
        self._landing: dict[str, frozenset[str]] = {}

    @property
    def spot_to_spot(self) -> bool:
        return self.rules.spot_to_spot

    def watches(self) -> list[Watch]:
        return [Watch("NodePool", self._start), Watch("NodeClaim", self._start)]

    def _start(self, old: object | None, new: object | None) -> Iterable[str]:
        # The pass keeps itself going by requeueing; a change only makes sure it runs.
        if old is None or new is None or self.in_flight is not None:
            return [PASS_KEY]
        return []

    # -- snapshot --------------------------------------------------------------

    def candidates(self) -> tuple[list[Candidate], dict[str, int], dict[str, int]]:
        candidates: list[Candidate] = []
        pool_sizes: dict[str, int] = {}
        disrupting: dict[str, int] = {}
        tainted = set(self.in_flight.command.candidates) if self.in_flight else set()
        for nodeclaim in self.cluster.nodeclaims():
            pool_name = nodeclaim.nodepool
            pool_sizes[pool_name] = pool_sizes.get(pool_name, 0) + 1
            if nodeclaim.metadata.deleting or nodeclaim.name in tainted:
                disrupting[pool_name] = disrupting.get(pool_name, 0) + 1
                continue
            if not nodeclaim.initialized or not nodeclaim.status.node_name:
                continue
            nodepool = self.cluster.nodepool(pool_name)
            node = self.cluster.node(nodeclaim.status.node_name)
            if nodepool is None or node is None or node.metadata.deleting:
                continue
            candidates.append(Candidate(nodeclaim, node, nodepool, self.cluster.pods_on_node(node.name)))
        return candidates, pool_sizes, disrupting

    # -- decisions -------------------------------------------------------------

    def decide(self) -> tuple[Command | None, EmptinessDecision, bool]:
        """The command the cluster calls for now (no writes), the emptiness view, and
        whether any NodeClaim exists at all."""
        now = self.clock.now()
        self._planned = None
        candidates, pool_sizes, disrupting = self.candidates()
        emptiness = decide_emptiness(candidates, pool_sizes, disrupting, now)
        self.blocked = dict(emptiness.blocked)
        if emptiness.delete:
            names = [candidate.nodeclaim.name for candidate in emptiness.delete]
            return (
                Command(REASON_EMPTY, names, description=f"delete empty {', '.join(names)}"),
                emptiness,
                True,
            )
        command = self._drift(candidates, pool_sizes, disrupting, now)
        if command is None:
            command = self._consolidate(candidates, pool_sizes, disrupting, now)
        return command, emptiness, bool(pool_sizes)

    def _consolidate(
        self,
        candidates: list[Candidate],
        pool_sizes: dict[str, int],
        disrupting: dict[str, int],
        now: float,
    ) -> Command | None:
        self.unconsolidatable = {}
        self.consolidation_due = None
        self._planned = set()
        if self.cloud is None:
            self._given_up = {}
            return None
        underused = [
            c
            for c in candidates
            if c.nodepool.disruption.consolidation_policy == WHEN_EMPTY_OR_UNDERUTILIZED
            and c.nodepool.disruption.consolidate_after is not None
        ]
        landing = self._landing_nodes()
        if landing:
            self._note_waiting(
                {
                    name: "it is the capacity a consolidation launched for the pods of "
                    f"{_few(sorted(waiting))}, still to go as the budgets allow"
                    for name, waiting in landing.items()
                    if any(c.nodeclaim.name == name for c in underused)
                }
            )
            underused = [c for c in underused if c.nodeclaim.name not in landing]
        if not underused:
            self._given_up = {}
            return None
        if not any_consolidatable(underused, now):
            # Only why each waits, and until when: no capacity to simulate removals against.
            decision = decide_consolidation(underused, [], [], {}, {}, {}, now)
            self._keep_savings_given_up(decision.blocked, decision.savings_given_up)
            self._note_waiting(decision.blocked)
            self.consolidation_due = decision.next_due
            return None
        backed_off = self._backed_off(now)
        nodepools = [pool for pool in self.cluster.nodepools() if not pool.metadata.deleting]
        allowed = {
            pool.name: allowed_disruptions(
                pool, REASON_UNDERUTILIZED, pool_sizes.get(pool.name, 0), disrupting.get(pool.name, 0), now
            )
            for pool in nodepools
        }
        state = self._consolidation_state(nodepools, allowed, backed_off)
        quiet = self._quiet
        if (
            quiet is not None
            and state is not None
            and quiet.inputs == (state, self._savings_known())
            and now < quiet.until
        ):
            self._conclude(quiet.decision)
            self.quiet_passes += 1
            return None
        snapshot = scheduling_snapshot(
            self.cluster, self.cloud, pool_types=self._pool_types, unavailable=invalid_nodepools(self.cluster)
        )
        prices = {
            c.nodeclaim.name: launched_price(c.nodeclaim, snapshot.instance_types.get(c.nodepool.name, ()))
            for c in underused
        }
        pods = [pod for c in underused for pod in c.pods if reschedulable(pod)]
        priced = {name: price for name, price in prices.items() if price > 0}
        pdb_blocked = pdb_blocked_pods(self.cluster)
        terms = volume_terms(self.cluster, pods)

        def consolidation(among: list[Candidate], pools: Sequence[NodePoolCapacity]) -> ConsolidationDecision:
            return decide_consolidation(
                among,
                snapshot.existing,
                pools,
                priced,
                allowed,
                pdb_blocked,
                now,
                self.rules.spot_to_spot,
                terms,
                snapshot.namespace_labels,
                savings_known=self._given_up.keys(),
                rules=self.rules,
                memo=self.evaluations,
            )

        decision = consolidation(underused, snapshot.pools)
        command = decision.command
        if command is not None and command.replacements and backed_off & set(command.nodeclaim_names):
            # Deletes first (no new capacity offered, so nothing can be launched),
            # then anything among the candidates that are not backed off.
            deletes_only = consolidation(underused, ())
            if deletes_only.command is not None:
                decision = deletes_only
            else:
                others = [c for c in underused if c.nodeclaim.name not in backed_off]
                decision = consolidation(others, snapshot.pools)
        if backed_off:
            until = min(self._replacement_backoff[name][1] for name in backed_off)
            due = decision.next_due
            decision = dataclasses.replace(decision, next_due=until if due is None else min(due, until))
        self._conclude(decision)
        command = decision.command
        if command is None:
            if state is not None:
                # Kept with the savings as this pass left them: a pass that changed them is
                # followed by one worked out again, and only a pass that changes nothing is
                # answered again.
                until = now + self.quiet_pass_ttl
                if decision.next_due is not None:
                    until = min(until, decision.next_due)
                self._quiet = _QuietPass((state, self._savings_known()), decision, until)
            return None
        self._quiet = None
        planned = [c.nodeclaim.name for c in command.planned] if self.rules.mark_planned else []
        self._planned = set(planned)
        return Command(
            REASON_UNDERUTILIZED,
            command.nodeclaim_names,
            command.replacements,
            command.description,
            command.kind,
            planned,
        )

    @property
    def savings_given_up(self) -> dict[str, float]:
        """$/h each node consolidation holds back would save if deleted or replaced alone."""
        return {name: saving for name, (_, saving) in self._given_up.items()}

    def _keep_savings_given_up(self, blocked: dict[str, str], fresh: dict[str, float]) -> None:
        """Keep a blocked node's figure while it is blocked for the same reason.

        A node whose reason changed is left without one for this pass and
        worked out afresh on the next (the decision skipped it as known).
        """
        kept: dict[str, tuple[str, float]] = {}
        for name, reason in blocked.items():
            known = self._given_up.get(name)
            if known is not None and known[0] == reason:
                kept[name] = known
            elif name in fresh:
                kept[name] = (reason, fresh[name])
        self._given_up = kept

    def _conclude(self, decision: ConsolidationDecision) -> None:
        """Take in what a consolidation decision says of every node (the command aside)."""
        self._keep_savings_given_up(decision.blocked, decision.savings_given_up)
        self._note_waiting(decision.blocked)
        self.unconsolidatable = dict(decision.unconsolidatable)
        self.consolidation_due = decision.next_due

    def _consolidation_state(
        self, nodepools: Sequence[NodePool], allowed: dict[str, int], backed_off: set[str]
    ) -> tuple[object, ...] | None:
        """What a consolidation decision is worked out from, the savings known aside, as a value.

        Objects count by kind and resourceVersion (every write gives a new
        one); the catalog each NodePool may launch from by the provider's list
        (a new list when an offering's availability or price changes); the
        budgets and back-offs by value. Time counts through ``next_due`` and
        the five-minute bound (see ``QUIET_PASS_TTL``). None when an object has
        no resourceVersion (nothing to tell its changes by): then every pass is
        worked out.
        """
        assert self.cloud is not None
        versions: list[tuple[str, str]] = []
        groups: tuple[tuple[str, Iterable[_Versioned]], ...] = (
            ("Pod", self.cluster.pods()),
            ("Node", self.cluster.nodes()),
            ("NodeClaim", self.cluster.nodeclaims()),
            ("NodePool", self.cluster.nodepools()),
            ("DaemonSet", self.cluster.daemonsets()),
            ("PodDisruptionBudget", self.cluster.pod_disruption_budgets()),
            ("Namespace", self.cluster.namespaces()),
            ("LimitRange", self.cluster.limit_ranges()),
            ("RuntimeClass", self.cluster.runtime_classes()),
        )
        for kind, objects in groups:
            for obj in objects:
                meta = obj.metadata
                if not meta.resource_version:
                    return None
                versions.append((kind, meta.resource_version))
        catalogs: list[object] = []
        for pool in nodepools:
            ref = pool.template.node_class_ref
            node_class = self.cluster.node_class(ref.group, ref.kind, ref.name)
            catalogs.append(node_class.metadata.resource_version if node_class is not None else "")
            try:
                catalogs.append(self.cloud.get_instance_types(pool))
            except CloudProviderError as error:
                catalogs.append(str(error))
        return (
            tuple(versions),
            tuple(catalogs),
            tuple(sorted(allowed.items())),
            frozenset(backed_off),
            frozenset(self._deleted),
        )

    def _savings_known(self) -> tuple[tuple[str, tuple[str, float]], ...]:
        """The savings held back that the next decision will not work out again, as a value."""
        return tuple(sorted(self._given_up.items()))

    def _note_waiting(self, blocked: dict[str, str]) -> None:
        for name, reason in blocked.items():
            if not reason.startswith(_TRANSIENT):
                self.blocked.setdefault(name, reason)

    def _blocking_pod(self, pods: Iterable[Pod]) -> str:
        for pod in pods:
            if reschedulable(pod) and pod.do_not_disrupt:
                return f"pod {pod.key} has {DO_NOT_DISRUPT_ANNOTATION}"
        return ""

    def _drift(
        self,
        candidates: list[Candidate],
        pool_sizes: dict[str, int],
        disrupting: dict[str, int],
        now: float,
    ) -> Command | None:
        drifted = [c for c in candidates if c.nodeclaim.is_true(CONDITION_DRIFTED)]
        for candidate in sorted(drifted, key=lambda c: c.nodeclaim.name):
            name = candidate.nodeclaim.name
            if candidate.node.metadata.annotations.get(DO_NOT_DISRUPT_ANNOTATION) == "true":
                self.blocked[name] = f"node has {DO_NOT_DISRUPT_ANNOTATION}"
                continue
            blocker = self._blocking_pod(candidate.pods)
            if blocker:
                self.blocked[name] = blocker
                continue
            pool = candidate.nodepool
            allowed = allowed_disruptions(
                pool, REASON_DRIFTED, pool_sizes.get(pool.name, 0), disrupting.get(pool.name, 0), now
            )
            if allowed <= 0:
                self.blocked[name] = (
                    f"disruption budget of NodePool {pool.name} allows no more Drifted disruptions now"
                )
                continue
            if self.cloud is None:
                continue
            pods = [pod for pod in candidate.pods if reschedulable(pod)]
            snapshot = scheduling_snapshot(
                self.cluster,
                self.cloud,
                frozenset((name,)),
                self._pool_types,
                unavailable=invalid_nodepools(self.cluster),
            )
            plan = snapshot.solve(pods)
            if plan.unschedulable:
                key, reason = next(iter(sorted(plan.unschedulable.items())))
                self.blocked[name] = f"pod {key} would not schedule elsewhere: {reason}"
                continue
            return Command(
                REASON_DRIFTED,
                [name],
                list(plan.new_nodeclaims),
                f"replace drifted {name} with {len(plan.new_nodeclaims)} new NodeClaims",
            )
        return None

    # -- the pass --------------------------------------------------------------

    def reconcile(self, key: str) -> float | None:
        self.passes += 1
        now = self.clock.now()
        if self.in_flight is not None:
            return self._follow(self.in_flight, now)
        self._untaint_leftovers()
        command, emptiness, any_nodeclaims = self.decide()
        if self._planned is not None:
            self._mark_planned(self._planned)
        self.last = emptiness
        self._watch_empty(emptiness, now)
        self._report_blocked()
        if self.pending is not None:
            pending = self.pending
            if now < pending.validate_at:
                return pending.validate_at - now
            self.pending = None
            if command is not None and set(command.candidates) == set(pending.command.candidates):
                self._execute(command, now)
                return 1.0 if self.in_flight else self.poll_period
            log.info("disruption command no longer valid: %s", pending.command.description)
        if command is not None:
            if self._checked_while_waiting(command, now):
                self._execute(command, now)
                return 1.0 if self.in_flight else self.poll_period
            self.pending = _Pending(command, now + self.validation_delay)
            return self.validation_delay
        if not any_nodeclaims:
            return None  # nothing to watch over until a NodeClaim appears
        dues = [due for due in (emptiness.next_due, self.consolidation_due) if due is not None]
        if dues:
            return max(0.0, min(self.poll_period, min(dues) - now))
        return self.poll_period

    def _untaint_leftovers(self) -> None:
        """Remove the disrupted taint from nodes no disruption is under way for.

        The taint is put on when a command executes and stays until the node is
        gone; with no command in flight, a node that has it while its NodeClaim
        is not being deleted was left behind: by a replica that lost its
        leadership (or crashed) mid-command, or by a rollback that failed. Left
        alone, the node would take no new pods for ever. Karpenter clears such
        taints on every disruption pass too.
        """
        existing: set[str] = set()
        for nodeclaim in self.cluster.nodeclaims():
            existing.add(nodeclaim.name)
            if nodeclaim.metadata.deleting or nodeclaim.name in self._deleted:
                continue
            node = self.cluster.node(nodeclaim.status.node_name) if nodeclaim.status.node_name else None
            if node is not None and DISRUPTED_TAINT in node.taints:
                log.info("removing a left-over disrupted taint", extra=about(nodeclaim, node))
                self._taint(nodeclaim, add=False)
        self._deleted &= existing

    def _mark_planned(self, planned: set[str]) -> None:
        """Taint the nodes of ``planned`` PLANNED_TAINT, and no other.

        Why: when a budget lets consolidation remove one node per pass (10%
        of a small pool), the pods of each node it drains are rescheduled by
        kube-scheduler, whose default profile puts them on the least
        allocated nodes: the emptiest, which are the ones consolidation
        removes next, so the same pods are evicted again and again (92
        evictions for 51 pods that had to move, scaling 300 pods down to 60).
        kube-scheduler scores PreferNoSchedule taints (TaintToleration,
        weight 3, against 1 for allocation), so with the nodes still to go
        marked, the pods go to the nodes that stay. A preference, not a
        fence: where nothing else fits the pods still land there, which is
        why karpy's own scheduling ignores the taint. Marks follow the
        latest plan; a plan that changes or ends takes them off.

        A write refused because the Node changed meanwhile is left to the
        next pass: the mark is a hint, and one pass late costs nothing.
        """
        for nodeclaim in self.cluster.nodeclaims():
            if not nodeclaim.status.node_name:
                continue
            node = self.cluster.node(nodeclaim.status.node_name)
            if node is None or node.metadata.deleting:
                continue
            changed = _with_taint(
                node, PLANNED_TAINT, nodeclaim.name in planned and not nodeclaim.metadata.deleting
            )
            if changed is None:
                continue
            try:
                self.cluster.update(changed)
            except ConflictError:
                continue

    def _watch_empty(self, emptiness: EmptinessDecision, now: float) -> None:
        """Note which empty nodes are due now, keeping when each was first seen due with this due time."""
        watched: dict[str, tuple[float, float]] = {}
        for name, due_at in emptiness.due_at.items():
            previous = self._watched_empty.get(name)
            watched[name] = previous if previous is not None and previous[0] == due_at else (due_at, now)
        self._watched_empty = watched

    def _checked_while_waiting(self, command: Command, now: float) -> bool:
        """Whether an emptiness command's re-check has in effect been done already.

        The re-check asks: is every candidate still empty and still due
        ``validation_delay`` after it was first found so? A node the budget held
        back was found so when it became due, and every pass that looked since
        saw the same due time, which a pod landing on it (or leaving it) would
        have moved on. Once that has lasted ``validation_delay``, a fresh
        wait would only re-ask a question already answered. Karpenter waits
        anew for every emptiness command, so with the default budget (one node
        at a time in a small pool) karpy removes a set of empty nodes one
        re-check earlier per node. Pending pods make it wait as usual: one of
        them may be about to land on the node.
        """
        if command.reason != REASON_EMPTY:
            return False
        if any(pod.is_provisionable() for pod in self.cluster.pending_pods()):
            return False
        for name in command.candidates:
            watched = self._watched_empty.get(name)
            if watched is None or watched[1] + self.validation_delay > now:
                return False
        return True

    def _report_blocked(self) -> None:
        """One Event per NodeClaim and reason it is not disrupted for (not one per pass)."""
        for name, reason in sorted(self.blocked.items()):
            if self._reported.get(name) == reason:
                continue
            self._reported[name] = reason
            nodeclaim = self.cluster.nodeclaim(name)
            if nodeclaim is not None:
                self.cluster.record_event(
                    nodeclaim, EVENT_NORMAL, "DisruptionBlocked", f"Cannot disrupt NodeClaim: {reason}"
                )
                # And on its Node, where `kubectl describe node` shows it, as Karpenter does.
                node = self.cluster.node(nodeclaim.status.node_name) if nodeclaim.status.node_name else None
                if node is not None:
                    self.cluster.record_event(
                        node, EVENT_NORMAL, "DisruptionBlocked", f"Cannot disrupt Node: {reason}"
                    )
        for name in [name for name in self._reported if name not in self.blocked]:
            del self._reported[name]

    def _execute(self, command: Command, now: float) -> None:
        log.info("disrupting (%s): %s", command.why, command.description)
        for name in command.candidates:
            nodeclaim = self.cluster.nodeclaim(name)
            if nodeclaim is None:
                continue
            self._taint(nodeclaim, add=True)
            node = self.cluster.node(nodeclaim.status.node_name) if nodeclaim.status.node_name else None
            message = f"Disrupting NodeClaim: {command.why}"
            self.cluster.record_event(nodeclaim, EVENT_NORMAL, "DisruptionTerminating", message)
            if node is not None:
                self.cluster.record_event(
                    node, EVENT_NORMAL, "DisruptionTerminating", f"Disrupting Node: {command.why}"
                )
        if not command.replacements:
            self._delete_candidates(command)
            return
        names: list[str] = []
        for replacement in command.replacements:
            nodepool = self.cluster.nodepool(replacement.nodepool)
            if nodepool is None:
                continue
            created = self.cluster.create(build_nodeclaim(nodepool, replacement))
            names.append(created.name)
            self.metrics.nodeclaim_created(created, command.reason)
            self.cluster.record_event(
                created, EVENT_NORMAL, "DisruptionLaunching", f"Launching NodeClaim: {command.why}"
            )
        self.in_flight = _InFlight(command, names)
        if command.planned:
            for name in names:
                self._landing[name] = frozenset(command.planned)

    def _landing_nodes(self) -> dict[str, frozenset[str]]:
        """Replacements a consolidation plan launched, with its nodes still to go; forgets the rest.

        A merge the budgets cut short launches the capacity for the whole group
        and removes the rest of the group on later passes, once their pods fit
        on it. Until then the new nodes are nearly empty, the most wasteful
        nodes of the pool, and a merge search would start its next group with
        them: disrupting the capacity just launched, launching more for the
        same group, pass after pass, and never removing the rest (measured: a
        20-node pool replaced 12 nodes every 5 minutes for an hour). So they are
        no candidates while a node of their plan is still there; once the plan
        is carried out (or its nodes are gone otherwise) they are nodes like
        any other. Kept in memory: after a restart or a change of leader the
        next plan is worked out afresh.
        """
        live = {claim.name for claim in self.cluster.nodeclaims() if not claim.metadata.deleting}
        self._landing = {
            name: planned & live for name, planned in self._landing.items() if name in live and planned & live
        }
        return dict(self._landing)

    def _follow(self, in_flight: _InFlight, now: float) -> float | None:
        """Wait for the replacements; delete the candidates once all are initialized."""
        replacements = [self.cluster.nodeclaim(name) for name in in_flight.replacement_names]
        if any(claim is None or claim.metadata.deleting for claim in replacements):
            failed = [
                name
                for name, claim in zip(in_flight.replacement_names, replacements, strict=True)
                if claim is None
            ]
            self._roll_back(in_flight.command, f"replacement {', '.join(failed) or 'NodeClaim'} failed")
            self.in_flight = None
            return self.poll_period
        if all(claim is not None and claim.initialized for claim in replacements):
            self._delete_candidates(in_flight.command)
            self.in_flight = None
            return self.poll_period
        return 1.0

    def _delete_candidates(self, command: Command) -> None:
        for name in command.candidates:
            nodeclaim = self.cluster.nodeclaim(name)
            if nodeclaim is None or nodeclaim.metadata.deleting:
                continue
            try:
                self.cluster.delete(nodeclaim)
            except NotFoundError:
                continue
            self._deleted.add(name)
            self.metrics.nodeclaim_disrupted(nodeclaim, command.reason)
        self.executed.append(command)

    def _backed_off(self, now: float) -> set[str]:
        """NodeClaims offered no consolidation replacement now; forgets those that are gone."""
        existing = {claim.name for claim in self.cluster.nodeclaims()}
        self._replacement_backoff = {
            name: entry for name, entry in self._replacement_backoff.items() if name in existing
        }
        return {name for name, (_, until) in self._replacement_backoff.items() if until > now}

    def _back_off(self, command: Command, now: float) -> None:
        """Hold back a new replacement for the candidates of a consolidation that failed."""
        if command.reason != REASON_UNDERUTILIZED or not command.replacements:
            return
        for name in command.candidates:
            failures = self._replacement_backoff.get(name, (0, now))[0] + 1
            wait = min(REPLACEMENT_BACKOFF_CAP, REPLACEMENT_BACKOFF_START * 2 ** (failures - 1))
            self._replacement_backoff[name] = (failures, now + wait)

    def _roll_back(self, command: Command, why: str) -> None:
        log.warning("disruption rolled back (%s): %s", command.description, why)
        self._back_off(command, self.clock.now())
        for name in command.candidates:
            nodeclaim = self.cluster.nodeclaim(name)
            if nodeclaim is None:
                continue
            self._taint(nodeclaim, add=False)
            self.cluster.record_event(
                nodeclaim, EVENT_WARNING, "DisruptionFailed", f"Disruption rolled back: {why}; the node stays"
            )

    def _taint(self, nodeclaim: NodeClaim, *, add: bool) -> None:
        node = self.cluster.node(nodeclaim.status.node_name) if nodeclaim.status.node_name else None
        changed = _with_taint(node, DISRUPTED_TAINT, add) if node is not None else None
        if changed is not None:
            self.cluster.update(changed)

    def has_work(self) -> bool:
        """Whether disruption would act now or later, judged on the current cluster."""
        if self.pending is not None or self.in_flight is not None:
            return True
        command, emptiness, _ = self.decide()
        return command is not None or emptiness.has_work or self.consolidation_due is not None


class NodeClaimDisruptionConditions:
    """Marks NodeClaims Drifted (or not) and deletes expired ones.

    Karpenter's nodeclaim disruption controller: drift is a condition the
    disruption pass reads; expiration in v1 is forceful, so an expired
    NodeClaim is deleted here directly, budgets notwithstanding.
    """

    name = "nodeclaim.disruption"

    def __init__(
        self,
        cluster: Cluster,
        clock: Clock,
        cloud: CloudProvider | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.cluster = cluster
        self.clock = clock
        self.cloud = cloud
        self.metrics = metrics if metrics is not None else Metrics()

    def watches(self) -> list[Watch]:
        return [
            Watch("NodeClaim", self._on_nodeclaim),
            Watch("NodePool", self._on_nodepool),
            Watch(EC2_KIND, self._on_node_class),
            Watch(KWOK_KIND, self._on_node_class),
        ]

    def _on_node_class(self, old: object | None, new: object | None) -> Iterable[str]:
        changed = new if new is not None else old
        if not isinstance(changed, EC2NodeClass | KWOKNodeClass):
            return []
        return [
            claim.name
            for claim in self.cluster.nodeclaims()
            if claim.spec.node_class_ref.kind == changed.kind
            and claim.spec.node_class_ref.name == changed.name
        ]

    def _on_nodeclaim(self, old: object | None, new: object | None) -> Iterable[str]:
        # On creation (to schedule its expiry) and once initialized (drift is judged from then on).
        if not isinstance(new, NodeClaim):
            return []
        became_initialized = new.initialized and not (isinstance(old, NodeClaim) and old.initialized)
        return [new.name] if old is None or became_initialized else []

    def _on_nodepool(self, old: object | None, new: object | None) -> Iterable[str]:
        pool = new if isinstance(new, NodePool) else None
        if pool is None or status_only_change(old, new):
            return []
        return [claim.name for claim in self.cluster.nodeclaims() if claim.nodepool == pool.name]

    def reconcile(self, key: str) -> float | None:
        nodeclaim = self.cluster.nodeclaim(key)
        if nodeclaim is None or nodeclaim.metadata.deleting:
            return None
        now = self.clock.now()
        if is_expired(nodeclaim, now):
            log.info("nodeclaim %s expired", nodeclaim.name, extra=about(nodeclaim, controller=self.name))
            self.cluster.record_event(
                nodeclaim, EVENT_NORMAL, "DisruptionTerminating", "Disrupting NodeClaim: Expired"
            )
            self.cluster.delete(nodeclaim)
            self.metrics.nodeclaim_disrupted(nodeclaim, REASON_EXPIRED)
            return None
        nodepool = self.cluster.nodepool(nodeclaim.nodepool)
        if nodepool is not None and nodeclaim.initialized:
            provider = ""
            if self.cloud is not None:
                try:
                    provider = self.cloud.is_drifted(nodeclaim)
                except CloudProviderError:
                    provider = ""
            reason, message = drift_reason(nodeclaim, nodepool, provider)
            # As Karpenter: Drifted is true with its reason, or not there at all (never a reasonless False).
            conditions = (
                set_condition(nodeclaim.status.conditions, CONDITION_DRIFTED, TRUE, now, reason, message)
                if reason
                else remove_condition(nodeclaim.status.conditions, CONDITION_DRIFTED)
            )
            if conditions != nodeclaim.status.conditions:
                if reason:
                    self.cluster.record_event(nodeclaim, EVENT_NORMAL, "Drifted", message)
                self.cluster.update(nodeclaim.with_status(conditions=conditions))
        deadline = expires_at(nodeclaim)
        return None if deadline is None else max(0.0, deadline - now)


def _few(names: Sequence[str], shown: int = 3) -> str:
    """Names as a sentence lists them: the first few, and how many more."""
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")


__all__ = ["Command", "DisruptionController", "NodeClaimDisruptionConditions", "launched_price"]


def _with_taint(node: Node, taint: Taint, wanted: bool) -> Node | None:
    """``node`` with ``taint`` put on (``wanted``) or taken off; None when it already is so."""
    if (taint in node.taints) == wanted:
        return None
    taints = (*node.taints, taint) if wanted else tuple(t for t in node.taints if t != taint)
    return node.with_changes(taints=taints)
