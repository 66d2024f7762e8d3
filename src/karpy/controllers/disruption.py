"""The disruption pass: what to disrupt now, asked of the decision core, handed over to be carried out.

Every pass (every 10 s, Karpenter's polling period, or sooner when a node is
known to become due) builds the candidates from the cluster and runs the
disruption methods of :mod:`karpy.disruption` (:class:`~karpy.disruption.method.Method`)
in Karpenter's order, node repair (with the NodeRepair gate: the cloud's repair
policies, validated once here), emptiness, drift, then consolidation (multi-node, then
single-node, by the controller's
:class:`~karpy.disruption.consolidation.ConsolidationRules`), each within the
budgets of its reason, until one gives a command. What a method needs of the
cluster or the cloud it is handed: drift, where a node's pods would go
(``_place_elsewhere``), and with the TerminateFirstDrift or TerminateFirstRepair
gate where they would go once the node is gone and its capacity reservation slot
freed (``_after_termination``); consolidation, its snapshot (``_consolidate``).

A command is carried out by :class:`~karpy.controllers.orchestration.Orchestrator`
(re-checked after ``VALIDATION_DELAY``, then taint, launch, wait for the
replacements to initialize, delete or roll back), which also keeps the
replacement back-off the pass reads. A consolidation that found nothing is
answered again while nothing it reads has changed, for at most
``QUIET_PASS_TTL``.

Each consolidation move a fresh decision works out is counted per NodePool
(Karpenter's ``karpenter_consolidation_moves_total`` and, for Balanced pools,
``karpenter_consolidation_score``), and a Balanced move approved is told in a
``ConsolidationApproved`` Event: on the Node and NodeClaim for a single
node's, on the NodePool for a multi-node move's; a rejected one in no Event
(Karpenter's rule: rejections are many), only in the node's reason.

A node left alone gets a ``DisruptionBlocked`` Event unless it is only
waiting, chosen by the kind of the core's reason (:func:`worth_an_event`),
never by its wording. Expiration is not here: in Karpenter v1 it is forceful
(:mod:`karpy.controllers.disruption_conditions`).

docs/consolidation.md says what each step does and why, and the rules.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from karpy.api.conditions import FALSE, TRUE, set_condition
from karpy.api.core import Node, Pod
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import (
    CONDITION_DISRUPTION_REASON,
    CONDITION_DRIFTED,
    CONDITION_INSTANCE_TERMINATING,
    CONDITION_REBOOTING,
    REBOOT_REQUESTED,
    REBOOT_TERMINATION_GRACE_PERIOD_ANNOTATION,
)
from karpy.api.nodecost import DEFAULT_NODE_OVERHEAD_COST
from karpy.api.nodepool import (
    CONSOLIDATES_UNDERUTILIZED,
    REASON_UNDERUTILIZED,
    REASON_UNHEALTHY,
    NodePool,
)
from karpy.api.requirements import LABEL_NODEPOOL
from karpy.api.schedulerconfig import SchedulerConfiguration
from karpy.cloud.provider import CloudProvider, CloudProviderError
from karpy.controllers.capacitybuffer import BufferRoom, with_buffer_room
from karpy.controllers.orchestration import (
    Command,
    Orchestrator,
    Pending,
    command_consolidation_type,
    reschedulable_pods,
)
from karpy.controllers.reboot import go_duration
from karpy.controllers.state import (
    PoolTypesCache,
    invalid_nodepools,
    launched_price,
    pdb_blocked_pods,
    scheduling_snapshot,
    static_counts,
    volume_counts,
    volume_terms,
)
from karpy.disruption.balanced import MOVE_APPROVED, MOVE_REJECTED, ScoredMove
from karpy.disruption.budgets import allowed_disruptions
from karpy.disruption.candidates import any_consolidatable
from karpy.disruption.consolidation import ConsolidationCommand, ConsolidationRules
from karpy.disruption.decision import ConsolidationDecision, decide_consolidation
from karpy.disruption.drift import Drift
from karpy.disruption.emptiness import Emptiness, EmptinessDecision, reschedulable
from karpy.disruption.memo import EvaluationMemo
from karpy.disruption.method import Candidate, Method, MethodCommand, MethodResult, RemovalCommand
from karpy.disruption.rejection import WAITING, Rejection, RejectionKind
from karpy.disruption.repair import (
    REBOOT_HISTORY_WINDOW,
    REBOOTS_BEFORE_REPLACEMENT,
    Repair,
    RepairCommand,
    RepairPolicyMatcher,
)
from karpy.disruption.simulator import RemovalSimulator
from karpy.disruption.static import StaticDrift
from karpy.disruption.terminate_first import StaticReservations, credit_reservation, static_reservations
from karpy.operator.cluster import EVENT_NORMAL, Clock, Cluster, ClusterReader
from karpy.operator.karpenter_metrics import Metrics
from karpy.operator.runtime import Watch
from karpy.scheduling.policy import SchedulingPolicy
from karpy.scheduling.solver import DEFAULT_POLICY, NodePoolCapacity, Plan

log = logging.getLogger("karpy.disruption")

PASS_KEY = "pass"
POLL_PERIOD = 10.0
VALIDATION_DELAY = 15.0
QUIET_PASS_TTL = 300.0
# The Event a node repair's breaker holds a node back with (Karpenter's).
NODE_REPAIR_BLOCKED = "NodeRepairBlocked"
# The Event a Balanced consolidation move approved is told in (Karpenter's).
CONSOLIDATION_APPROVED = "ConsolidationApproved"


def approval_message(move: ScoredMove) -> str:
    """Karpenter's ConsolidationApproved message for a Balanced pool's part of a move."""
    score = move.score
    assert score is not None
    return (
        f"score {score.score:.2f} >= threshold {score.threshold:.2f} (k: {score.k}, "
        f"savings {score.savings_fraction * 100:.1f}%, disruption {score.disruption_fraction * 100:.1f}%)"
    )


def uninitialized(cluster: ClusterReader) -> frozenset[str]:
    """The NodeClaims not initialized yet and their Nodes, by name (pods must not be planned there)."""
    names: set[str] = set()
    for claim in cluster.nodeclaims():
        if not claim.initialized and not claim.metadata.deleting:
            names.add(claim.name)
            if claim.status.node_name:
                names.add(claim.status.node_name)
    return frozenset(names)


def worth_an_event(reason: Rejection) -> bool:
    """Whether a node left alone for this reason gets a DisruptionBlocked Event: chosen by the
    reason's kind, whatever its wording; a node only waiting to be a candidate gets none."""
    return reason.kind not in WAITING


class _Versioned(Protocol):
    @property
    def metadata(self) -> ObjectMeta: ...


@dataclass(frozen=True, slots=True)
class _QuietPass:
    """A consolidation that found nothing, kept to answer the same question again until ``until``."""

    inputs: tuple[object, ...]
    decision: ConsolidationDecision
    until: float


class DisruptionController:
    name = "disruption"

    def __init__(
        self,
        cluster: Cluster,
        cloud: CloudProvider | None,
        clock: Clock,
        *,
        rules: ConsolidationRules,
        metrics: Metrics | None = None,
        node_overhead_cost: float = DEFAULT_NODE_OVERHEAD_COST,
        poll_period: float = POLL_PERIOD,
        validation_delay: float = VALIDATION_DELAY,
        quiet_pass_ttl: float = QUIET_PASS_TTL,
        buffers: BufferRoom | None = None,
        node_repair: bool = False,
        scheduling: SchedulingPolicy = DEFAULT_POLICY,
        scheduler_config: SchedulerConfiguration | None = None,
        terminate_first_drift: bool = False,
        terminate_first_repair: bool = False,
    ) -> None:
        self.cluster = cluster
        # TerminateFirstDrift and TerminateFirstRepair: a node whose replacement cannot be staged
        # first (a full capacity reservation, a static pool at its limit) is deleted first.
        self.terminate_first_drift = terminate_first_drift
        self.terminate_first_repair = terminate_first_repair
        # MIN_VALUES_POLICY and PREFERENCE_POLICY: where evicted pods would go is where provisioning
        # would put them (Karpenter's disruption simulations take both too).
        self.scheduling = scheduling
        # The cluster's default spread constraints, which a drifted node's pods are replanned with,
        # and consolidation's simulations plan the moving pods with.
        self.scheduler_config = scheduler_config
        # The cloud's repair policies, validated once (the NodeRepair gate; None: no repair). A set
        # Karpenter would refuse stops the controller here, as it stops Karpenter at start.
        self.repair_policies: RepairPolicyMatcher | None = (
            RepairPolicyMatcher(cloud.repair_policies()) if node_repair and cloud is not None else None
        )
        # The CapacityBuffers' room: the virtual pods placed on a node count as its pods (None: gate off).
        self.buffers = buffers
        self.clock = clock
        self.cloud = cloud
        self.metrics = metrics if metrics is not None else Metrics()
        # Carries out the commands this pass decides, and keeps their state.
        self.orchestrator = Orchestrator(
            cluster, clock, self.metrics, poll_period=poll_period, validation_delay=validation_delay
        )
        self.last = EmptinessDecision()
        # Why the last pass left each node alone, and why consolidation could not remove
        # the nodes it tried (NodeClaim name -> reason); Events and logs say the message.
        self.blocked: dict[str, Rejection] = {}
        self.unconsolidatable: dict[str, Rejection] = {}
        # What each node consolidation holds back (do-not-disrupt, PDB, budget) would
        # save, $/h, with the reason it was worked out under: kept while that reason
        # stands, so a blocked node is simulated once, not on every pass.
        self._given_up: dict[str, tuple[str, float]] = {}
        self.consolidation_due: float | None = None
        # When the next unhealthy node's repair policy becomes eligible (None: no node is waiting).
        self.repair_due: float | None = None
        # When node repair committed each NodeClaim's reboots (within REBOOT_HISTORY_WINDOW).
        self.reboots: dict[str, list[float]] = {}
        self.rules = rules
        # Nodes are priced as the provisioner prices them, per-node costs included.
        self._pool_types = PoolTypesCache(node_overhead_cost)
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
        # Drift's and repair's removals in this pass, simulated on one view of the cluster.
        self._pass_simulator: RemovalSimulator | None = None
        # The moves the pass's consolidation worked out afresh (none when it was answered
        # from the last), for the pass to publish.
        self._moves: list[ScoredMove] = []
        # The ConsolidationApproved Events told, by object (kind, name), so a move approved
        # again at its re-check is not told twice.
        self._approvals: dict[tuple[str, str], str] = {}
        # What the consolidation commands decided save, $/h, by their candidates: counted once carried out.
        self._savings: dict[frozenset[str], float] = {}

    def watches(self) -> list[Watch]:
        return [Watch("NodePool", self._start), Watch("NodeClaim", self._start)]

    def _start(self, old: object | None, new: object | None) -> Iterable[str]:
        # The pass keeps itself going by requeueing; a change only makes sure it runs.
        if old is None or new is None or self.orchestrator.in_flight is not None:
            return [PASS_KEY]
        return []

    # -- snapshot --------------------------------------------------------------

    def candidates(self) -> tuple[list[Candidate], dict[str, int], dict[str, int]]:
        candidates: list[Candidate] = []
        pool_sizes: dict[str, int] = {}
        disrupting: dict[str, int] = {}
        in_flight = self.orchestrator.in_flight
        tainted = set(in_flight.command.candidates) if in_flight else set()
        for nodeclaim in self.cluster.nodeclaims():
            if nodeclaim.is_true(CONDITION_INSTANCE_TERMINATING):
                continue  # drained and its instance gone: no longer the pool's, as in Karpenter
            pool_name = nodeclaim.nodepool
            pool_sizes[pool_name] = pool_sizes.get(pool_name, 0) + 1
            # A node rebooting in place is being disrupted too (the budgets count it, as Karpenter's).
            if nodeclaim.metadata.deleting or nodeclaim.name in tainted or nodeclaim.rebooting:
                disrupting[pool_name] = disrupting.get(pool_name, 0) + 1
                continue
            if not nodeclaim.initialized or not nodeclaim.status.node_name:
                continue
            nodepool = self.cluster.nodepool(pool_name)
            node = self.cluster.node(nodeclaim.status.node_name)
            if nodepool is None or node is None or node.metadata.deleting:
                continue
            pods = self.cluster.pods_on_node(node.name)
            if self.buffers is not None:
                pods = [*pods, *self.buffers.on(node.name, nodeclaim.name)]
            candidates.append(Candidate(nodeclaim, node, nodepool, pods))
        return candidates, pool_sizes, disrupting

    # -- decisions -------------------------------------------------------------

    def decide(self) -> tuple[Command | None, EmptinessDecision, bool]:
        """The command the cluster calls for now (no writes), the emptiness view, and
        whether any NodeClaim exists at all."""
        now = self.clock.now()
        self._planned = None
        self._moves = []
        self._pass_simulator = None
        candidates, pool_sizes, disrupting = self.candidates()
        repair = self._repair(candidates, now) if self.repair_policies is not None else None
        self.repair_due = repair.next_due(candidates) if repair is not None else None
        self.blocked = {}
        emptiness = EmptinessDecision()
        # Karpenter's order; the first method with a command ends the pass.
        methods: tuple[Method, ...] = (
            *((repair,) if repair is not None else ()),
            Emptiness(now),
            self._static_drift(candidates, now),
            self._drift(candidates, now),
            _Consolidation(self, now),
        )
        for method in methods:
            considered = [c for c in candidates if method.considers(c)]
            allowed = self._allowed(method.reason, pool_sizes, disrupting, now) if considered else {}
            started = time.perf_counter()
            result = method.compute(considered, allowed)
            seconds = time.perf_counter() - started
            self.metrics.disruption_evaluated(
                method.reason, method_consolidation_type(method), len(considered), seconds
            )
            if isinstance(result, EmptinessDecision):
                emptiness = result
            # A later method's reason for a node replaces an earlier one's (consolidation's
            # step only adds reasons for nodes left without one: see _consolidate).
            self.blocked.update({name: why for name, why in result.rejected.items() if worth_an_event(why)})
            if result.command is not None:
                return self._command(result.command), emptiness, bool(pool_sizes)
        return None, emptiness, bool(pool_sizes)

    def _drift(self, candidates: Sequence[Candidate], now: float) -> Drift:
        """The drift method, with what holds drifted nodes back read only when there are any."""
        place = self._place_elsewhere if self.cloud is not None else None
        if not any(candidate.nodeclaim.is_true(CONDITION_DRIFTED) for candidate in candidates):
            return Drift(place, now)
        return Drift(
            place,
            now,
            uninitialized=uninitialized(self.cluster),
            pdb_blocked=pdb_blocked_pods(self.cluster),
            after_termination=self._after_termination if self.terminate_first_drift and place else None,
        )

    def _static_drift(self, candidates: Sequence[Candidate], now: float) -> StaticDrift:
        """Static drift, with the static pools' reservations read only when terminate-first may use them."""
        counts = static_counts(self.cluster)
        if not self.terminate_first_drift:
            return StaticDrift(counts, now)
        drifted = [c for c in candidates if c.nodepool.is_static and c.nodeclaim.is_true(CONDITION_DRIFTED)]
        return StaticDrift(counts, now, terminate_first=True, reservations=self._static_reservations(drifted))

    def _static_reservations(self, candidates: Sequence[Candidate]) -> dict[str, StaticReservations]:
        """Whether each static pool of ``candidates`` launches only into full capacity reservations."""
        found: dict[str, StaticReservations] = {}
        if self.cloud is None:
            return found
        for candidate in candidates:
            pool = candidate.nodepool
            if not pool.is_static or pool.name in found:
                continue
            try:
                found[pool.name] = static_reservations(pool, self.cloud.get_instance_types(pool))
            except CloudProviderError as error:
                log.warning("NodePool %s: cannot read its capacity reservations: %s", pool.name, error)
        return found

    def _repair(self, candidates: Sequence[Candidate], now: float) -> Repair:
        """The repair method (run first: fixing a fault outranks any rebalance), with the Nodes of
        each NodePool for its breaker; what it reads of the cluster is read only when a candidate
        matches a policy (most passes of a healthy cluster)."""
        assert self.repair_policies is not None
        if not any(self.repair_policies.is_unhealthy(candidate.node) for candidate in candidates):
            return Repair(self.repair_policies, now, {}, None)
        nodes_by_pool: dict[str, list[Node]] = {}
        for node in self.cluster.nodes():
            pool = node.metadata.labels.get(LABEL_NODEPOOL)
            if pool:
                nodes_by_pool.setdefault(pool, []).append(node)
        rebooted_at: dict[str, float] = {}
        for claim in self.cluster.nodeclaims():
            rebooting = claim.condition(CONDITION_REBOOTING)
            if rebooting is not None and rebooting.status == FALSE:
                rebooted_at[claim.name] = rebooting.last_transition_time
        live = {claim.name for claim in self.cluster.nodeclaims()}
        self.reboots = {
            name: [t for t in times if t > now - REBOOT_HISTORY_WINDOW]
            for name, times in self.reboots.items()
            if name in live
        }
        terminate_first = self.terminate_first_repair and self.cloud is not None
        unhealthy = [c for c in candidates if self.repair_policies.is_unhealthy(c.node)]
        return Repair(
            self.repair_policies,
            now,
            nodes_by_pool,
            self._place_elsewhere if self.cloud is not None else None,
            static_counts(self.cluster),
            uninitialized=uninitialized(self.cluster),
            pdb_blocked=pdb_blocked_pods(self.cluster),
            rebooted_at=rebooted_at,
            can_reboot=self.cloud is not None and self.cloud.supports_reboot,
            reboots_exhausted=frozenset(
                name for name, times in self.reboots.items() if len(times) >= REBOOTS_BEFORE_REPLACEMENT
            ),
            after_termination=self._after_termination if terminate_first else None,
            static_reservations=self._static_reservations(unhealthy) if terminate_first else {},
        )

    def _commit_reboot(self, command: Command, now: float) -> None:
        """Hand a reboot to the reboot controller: the Rebooting condition, and the drain bound."""
        for name in command.candidates:
            nodeclaim = self.cluster.nodeclaim(name)
            if nodeclaim is None or nodeclaim.rebooting or nodeclaim.metadata.deleting:
                continue
            bound = command.drain_bound
            if bound is None:
                bound = nodeclaim.spec.termination_grace_period
            annotations = {
                k: v
                for k, v in nodeclaim.metadata.annotations.items()
                if k != REBOOT_TERMINATION_GRACE_PERIOD_ANNOTATION
            }
            if bound is not None:
                annotations[REBOOT_TERMINATION_GRACE_PERIOD_ANNOTATION] = go_duration(bound)
            if annotations != nodeclaim.metadata.annotations:
                nodeclaim = self.cluster.update(nodeclaim.with_metadata(annotations=annotations))
            conditions = set_condition(
                nodeclaim.status.conditions, CONDITION_DISRUPTION_REASON, TRUE, now, REASON_UNHEALTHY
            )
            conditions = set_condition(
                conditions,
                CONDITION_REBOOTING,
                TRUE,
                now,
                REBOOT_REQUESTED,
                f"rebooting for {command.repair_condition}/{command.repair_reason}",
            )
            stored = self.cluster.update(nodeclaim.with_status(conditions=conditions))
            self.reboots.setdefault(name, []).append(now)
            self.metrics.nodeclaim_disrupted(stored, command.reason)
            self.metrics.pods_disrupted(stored, command.reason, reschedulable_pods(self.cluster, stored))
            self.metrics.nodeclaim_repaired(stored, command.repair_condition, bound)
            self.metrics.disruption_performed("reboot", command.reason, "", [stored.nodepool])
            self.cluster.record_event(
                stored, EVENT_NORMAL, "RebootRequested", f"Rebooting NodeClaim: {command.description}"
            )
            log.info("committed node reboot: %s", command.description)

    def _allowed(
        self, reason: str, pool_sizes: dict[str, int], disrupting: dict[str, int], now: float
    ) -> dict[str, int]:
        """How many more nodes of each NodePool the budgets let go now for ``reason``."""
        allowed: dict[str, int] = {}
        for pool in self.cluster.nodepools():
            size, busy = pool_sizes.get(pool.name, 0), disrupting.get(pool.name, 0)
            allowed[pool.name] = allowed_disruptions(pool, reason, size, busy, now)
            self.metrics.disruption_budget(
                pool.name, reason, allowed_disruptions(pool, reason, size, 0, now), busy
            )
        return allowed

    def _command(self, command: MethodCommand) -> Command:
        """The orchestration's command for a method's."""
        if isinstance(command, RepairCommand):
            return Command(
                command.reason,
                command.nodeclaim_names,
                command.replacements,
                command.description,
                repair_condition=command.decision.condition_type,
                repair_reason=command.decision.reason,
                drain_bound=command.drain_bound,
                reboot=command.reboot,
                terminate_first=command.terminate_first,
            )
        if isinstance(command, RemovalCommand):
            return Command(
                command.reason,
                command.nodeclaim_names,
                command.replacements,
                command.description,
                terminate_first=command.terminate_first,
            )
        if not isinstance(command, ConsolidationCommand):
            return Command(command.reason, command.nodeclaim_names, command.replacements, command.description)
        self._savings[frozenset(command.nodeclaim_names)] = command.savings_per_hour
        planned = [c.nodeclaim.name for c in command.planned] if self.rules.mark_planned else []
        return Command(
            command.reason,
            command.nodeclaim_names,
            command.replacements,
            command.description,
            command.kind,
            planned,
        )

    def _place_elsewhere(self, candidate: Candidate, pods: Sequence[Pod]) -> Plan:
        """Where ``pods`` would go were ``candidate``'s node gone (drift's and repair's question of
        the cluster): what a solve on a snapshot without the node plans, asked of the pass's
        removal simulator, which sets up the cluster's nodes and their pods once for every
        candidate of the pass."""
        simulator = self._pass_simulator
        if simulator is None:
            simulator = self._pass_simulator = self._removal_simulator()
        return simulator.place_elsewhere(
            candidate, pods, volume_terms(self.cluster, pods), volume_counts(self.cluster, pods)
        )

    def _removal_simulator(self) -> RemovalSimulator:
        """The cluster's nodes (none left out) and NodePools, as the pass's removals are simulated on."""
        assert self.cloud is not None
        snapshot = scheduling_snapshot(
            self.cluster,
            self.cloud,
            pool_types=self._pool_types,
            unavailable=invalid_nodepools(self.cluster),
            policy=self.scheduling,
            scheduler_config=self.scheduler_config,
        )
        if self.buffers is not None:
            snapshot.existing = with_buffer_room(snapshot.existing, self.buffers)
        return RemovalSimulator(
            snapshot.existing,
            snapshot.pools,
            namespace_labels=snapshot.namespace_labels,
            policy=snapshot.policy,
            default_spread=snapshot.default_spread,
        )

    def _after_termination(self, candidate: Candidate, pods: Sequence[Pod], reservation: str) -> Plan:
        """Where ``pods`` would go were ``candidate``'s node gone and its slot in ``reservation`` free
        (terminate-first's question of the cluster: Karpenter's second, credited simulation)."""
        assert self.cloud is not None
        snapshot = scheduling_snapshot(
            self.cluster,
            self.cloud,
            frozenset((candidate.nodeclaim.name,)),
            self._pool_types,
            unavailable=invalid_nodepools(self.cluster),
            policy=self.scheduling,
            scheduler_config=self.scheduler_config,
        )
        snapshot.pools = credit_reservation(snapshot.pools, reservation)
        if self.buffers is not None:
            snapshot.existing = with_buffer_room(snapshot.existing, self.buffers)
        return snapshot.solve(pods)

    def _consolidate(
        self, underused: list[Candidate], allowed: dict[str, int], now: float
    ) -> ConsolidationCommand | None:
        """Multi-node, then single-node consolidation (:func:`decide_consolidation`) of
        ``underused``, answered from the last pass that found nothing while nothing it reads
        changed, and worked out again without the replacements of candidates backed off."""
        self.unconsolidatable = {}
        self.consolidation_due = None
        self._planned = set()
        if self.cloud is None:
            self._given_up = {}
            return None
        if self.orchestrator.evicting(now):
            # The pods of the nodes just deleted are still moving (see Orchestrator.evicting).
            self._planned = None  # the last plan's marks stay
            self.consolidation_due = now + 1.0
            return None
        landing = self.orchestrator.landing_nodes()
        if landing:
            for name, waiting in landing.items():
                if any(c.nodeclaim.name == name for c in underused):
                    self.blocked.setdefault(
                        name,
                        Rejection(
                            RejectionKind.LANDING_CAPACITY,
                            "it is the capacity a consolidation launched for the pods of "
                            f"{_few(sorted(waiting))}, still to go as the budgets allow",
                            nodes=tuple(sorted(waiting)),
                        ),
                    )
            underused = [c for c in underused if c.nodeclaim.name not in landing]
        if not underused:
            self._given_up = {}
            return None
        if not any_consolidatable(underused, now):
            # Only why each waits, and until when: no capacity to simulate removals against.
            decision = decide_consolidation(underused, [], [], {}, {}, {}, now, rules=self.rules)
            self._keep_savings_given_up(decision.blocked, decision.savings_given_up)
            self._note_waiting(decision.blocked)
            self.consolidation_due = decision.next_due
            return None
        backed_off = self.orchestrator.backed_off(now)
        # Nodes of a NodePool being deleted are not consolidated: their budget is none.
        nodepools = [pool for pool in self.cluster.nodepools() if not pool.metadata.deleting]
        allowed = {pool.name: allowed[pool.name] for pool in nodepools}
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
            self.cluster,
            self.cloud,
            pool_types=self._pool_types,
            unavailable=invalid_nodepools(self.cluster),
            policy=self.scheduling,
            scheduler_config=self.scheduler_config,
        )
        if self.buffers is not None:
            snapshot.existing = with_buffer_room(snapshot.existing, self.buffers)
        prices = {
            c.nodeclaim.name: launched_price(c.nodeclaim, snapshot.instance_types.get(c.nodepool.name, ()))
            for c in underused
        }
        pods = [pod for c in underused for pod in c.pods if reschedulable(pod)]
        priced = {name: price for name, price in prices.items() if price > 0}
        pdb_blocked = pdb_blocked_pods(self.cluster)
        terms = volume_terms(self.cluster, pods)
        # The volumes each attaches, counted against the nodes' attach limits as provisioning counts them.
        counts = volume_counts(self.cluster, pods)

        def consolidation(among: list[Candidate], pools: Sequence[NodePoolCapacity]) -> ConsolidationDecision:
            return decide_consolidation(
                among,
                snapshot.existing,
                pools,
                priced,
                allowed,
                pdb_blocked,
                now,
                rules=self.rules,
                volume_terms=terms,
                namespace_labels=snapshot.namespace_labels,
                savings_known=self._given_up.keys(),
                memo=self.evaluations,
                policy=self.scheduling,
                volume_counts=counts,
                default_spread=snapshot.default_spread,
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
            until = min(self.orchestrator.replacement_backoff[name][1] for name in backed_off)
            due = decision.next_due
            decision = dataclasses.replace(decision, next_due=until if due is None else min(due, until))
        self._conclude(decision)
        self._moves = decision.moves
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
        if self.rules.mark_planned:
            self._planned = {c.nodeclaim.name for c in command.planned}
        return command

    @property
    def savings_given_up(self) -> dict[str, float]:
        """$/h each node consolidation holds back would save if deleted or replaced alone."""
        return {name: saving for name, (_, saving) in self._given_up.items()}

    def _keep_savings_given_up(self, blocked: dict[str, Rejection], fresh: dict[str, float]) -> None:
        """Keep a blocked node's figure while it is blocked for the same reason.

        A node whose reason changed is left without one for this pass and
        worked out afresh on the next (the decision skipped it as known).
        """
        kept: dict[str, tuple[str, float]] = {}
        for name, reason in blocked.items():
            known = self._given_up.get(name)
            if known is not None and known[0] == reason.message:
                kept[name] = known
            elif name in fresh:
                kept[name] = (reason.message, fresh[name])
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
        one), the PersistentVolumeClaims, PersistentVolumes, StorageClasses
        and CSINodes among them; the catalog each NodePool may launch from by
        the provider's list (a new list when an offering's availability or
        price changes); the
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
            # What the default spread constraints are deduced from (watched only when configured).
            ("Service", self.cluster.services()),
            # The claims, volumes and classes the moving pods' attach counts and volume topology
            # come from, and the CSINodes the nodes' attach limits do: a limit grown or a claim
            # gone may free a node whose pods had nowhere to go.
            ("Storage", self.cluster.storage_objects()),
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
            frozenset(self.orchestrator.deleted),
            self.buffers.version if self.buffers is not None else None,
        )

    def _savings_known(self) -> tuple[tuple[str, tuple[str, float]], ...]:
        """The savings held back that the next decision will not work out again, as a value."""
        return tuple(sorted(self._given_up.items()))

    def _note_waiting(self, blocked: dict[str, Rejection]) -> None:
        for name, reason in blocked.items():
            if worth_an_event(reason):
                self.blocked.setdefault(name, reason)

    # -- the pass --------------------------------------------------------------

    def reconcile(self, key: str) -> float | None:
        self.passes += 1
        now = self.clock.now()
        in_flight = self.orchestrator.in_flight
        if in_flight is not None:
            return self.orchestrator.follow(in_flight, now)
        self.orchestrator.untaint_leftovers()
        command, emptiness, any_nodeclaims = self.decide()
        self._publish_moves()
        if self._planned is not None:
            self.orchestrator.mark_planned(self._planned)
        self.last = emptiness
        self.orchestrator.watch_empty(emptiness, now)
        if command is not None and command.reboot:
            # Handed over at once: the reboot controller drains and reboots, nothing is launched.
            self._commit_reboot(command, now)
            return self.orchestrator.poll_period
        self.orchestrator.report_blocked(
            {name: reason.message for name, reason in self.blocked.items()},
            {
                name: NODE_REPAIR_BLOCKED
                for name, reason in self.blocked.items()
                if reason.kind is RejectionKind.REPAIR_BREAKER
            },
        )
        pending = self.orchestrator.pending
        wait = self.orchestrator.carry_out(command, now)
        self._record_outcome(command, pending, now)
        if wait is not None:
            return wait
        if not any_nodeclaims:
            return None  # nothing to watch over until a NodeClaim appears
        dues = [
            due for due in (emptiness.next_due, self.consolidation_due, self.repair_due) if due is not None
        ]
        if dues:
            return max(0.0, min(self.orchestrator.poll_period, min(dues) - now))
        return self.orchestrator.poll_period

    def _publish_moves(self) -> None:
        """Count the moves the pass worked out; tell each Balanced approval once (Karpenter's
        Event, deduplicated by object as its recorder does)."""
        if not self._moves:
            return
        approvals: dict[tuple[str, str], str] = {}
        for move in self._moves:
            score = move.score
            self.metrics.consolidation_move(
                move.decision,
                move.nodepool,
                move.policy,
                None if score is None else score.score,
                "" if score is None else (MOVE_APPROVED if score.approved else MOVE_REJECTED),
            )
            if score is None or not score.approved or not move.approved:
                continue
            message = approval_message(move)
            if move.multi_node:
                approvals[("NodePool", move.nodepool)] = message
            else:
                for name in move.nodeclaims:
                    approvals[("NodeClaim", name)] = message
        for (kind, name), message in approvals.items():
            if self._approvals.get((kind, name)) == message:
                continue
            if kind == "NodePool":
                nodepool = self.cluster.nodepool(name)
                if nodepool is not None:
                    self.cluster.record_event(nodepool, EVENT_NORMAL, CONSOLIDATION_APPROVED, message)
                continue
            nodeclaim = self.cluster.nodeclaim(name)
            if nodeclaim is None:
                continue
            node = self.cluster.node(nodeclaim.status.node_name) if nodeclaim.status.node_name else None
            if node is not None:
                self.cluster.record_event(node, EVENT_NORMAL, CONSOLIDATION_APPROVED, message)
            self.cluster.record_event(nodeclaim, EVENT_NORMAL, CONSOLIDATION_APPROVED, message)
        self._approvals = approvals

    def _record_outcome(self, command: Command | None, pending: Pending | None, now: float) -> None:
        """Count the command :meth:`Orchestrator.carry_out` just executed, or the pending one it dropped."""
        if pending is not None and now >= pending.validate_at:
            kept = command is not None and set(command.candidates) == set(pending.command.candidates)
            if not kept:
                self.metrics.disruption_validation_failed(
                    command_consolidation_type(pending.command), len(pending.command.candidates)
                )
        if command is None:
            self._savings.clear()
            return
        if self.orchestrator.pending is not None:
            return  # held for its re-check
        names = frozenset(command.candidates)
        savings = self._savings.pop(names, 0.0)
        self._savings.clear()
        pools = [claim.nodepool for name in names if (claim := self.cluster.nodeclaim(name)) is not None]
        self.metrics.disrupting(names, command.reason)
        decision = "replace" if command.replacements else "delete"
        if command.terminate_first is not None:
            decision = "terminate-first"
            self.metrics.terminate_first_performed(command.reason, command.terminate_first.value, pools)
        self.metrics.disruption_performed(
            decision,
            command.reason,
            command_consolidation_type(command),
            pools,
            savings,
        )

    def has_work(self) -> bool:
        """Whether disruption would act now or later, judged on the current cluster."""
        if self.orchestrator.pending is not None or self.orchestrator.in_flight is not None:
            return True
        command, emptiness, _ = self.decide()
        return (
            command is not None
            or emptiness.has_work
            or self.consolidation_due is not None
            or self.repair_due is not None
        )


@dataclass(frozen=True, slots=True)
class _Consolidation:
    """Consolidation as the pass runs it (a :class:`~karpy.disruption.method.Method`).

    Multi-node, then single-node (the core's
    :func:`~karpy.disruption.decision.decide_consolidation`), with what needs
    the controller's state: the quiet-pass cache, the landing nodes, the
    replacement back-off and the savings given up. Why it leaves nodes alone
    goes to the controller's bookkeeping directly (the quiet pass replays it),
    adding a reason only for a node the earlier methods gave none.
    """

    controller: DisruptionController
    now: float
    reason: str = REASON_UNDERUTILIZED

    def considers(self, candidate: Candidate) -> bool:
        disruption = candidate.nodepool.disruption
        return (
            not candidate.nodepool.is_static  # a static pool ignores its consolidation policy
            and disruption.consolidation_policy in CONSOLIDATES_UNDERUTILIZED
            and disruption.consolidate_after is not None
        )

    def compute(self, candidates: Sequence[Candidate], allowed: Mapping[str, int]) -> MethodResult:
        return MethodResult(self.controller._consolidate(list(candidates), dict(allowed), self.now))


def method_consolidation_type(method: Method) -> str:
    """The ``consolidation_type`` label of a method's evaluation: ``empty`` for emptiness, ``multi`` for
    consolidation (karpy's evaluates multi-node, then single-node, in one go), empty otherwise."""
    if isinstance(method, Emptiness):
        return "empty"
    return "multi" if isinstance(method, _Consolidation) else ""


def _few(names: Sequence[str], shown: int = 3) -> str:
    """Names as a sentence lists them: the first few, and how many more."""
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")


__all__ = ["DisruptionController", "launched_price"]
