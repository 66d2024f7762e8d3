"""Disruption orchestration: carry out a disruption command safely (Karpenter's orchestration queue).

The disruption pass (:mod:`karpy.controllers.disruption`) decides; this
module acts. A command is not carried out at once: it is re-checked after
15 s (the cluster may have changed: a pod landed on the empty node, a new pod
needs the capacity), and dropped if it no longer holds. An empty node that a
budget held back has been re-checked by then, pass after pass, so when the
budget frees up it goes without a fresh wait (see
``_checked_while_waiting``). Then the candidates are tainted
``karpenter.sh/disrupted:NoSchedule`` so nothing new lands on them, the
replacements are launched, and only when every replacement is initialized
are the candidates deleted (the termination controller drains them). If a
replacement fails (it never launches or registers and its NodeClaim is
deleted) or the replacements are not initialized within 10 minutes
(``REPLACEMENT_INITIALIZATION_TIMEOUT``, as in Karpenter), the command is
rolled back: the taints come off and the old nodes keep serving.

When the budgets let a consolidation plan remove only some of its nodes now,
the others (``ConsolidationCommand.planned``) are tainted
``karpy.dev/consolidation-planned:PreferNoSchedule`` until the plan changes
or ends, so kube-scheduler puts the pods evicted meanwhile on the nodes that
stay (see ``mark_planned``).

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
for that reason. The pass reads the back-off (``backed_off``) to hold back
only what failed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from karpy.api.core import Node
from karpy.api.meta import format_timestamp, parse_timestamp
from karpy.api.nodeclaim import TERMINATION_TIMESTAMP_ANNOTATION, NodeClaim
from karpy.api.nodepool import REASON_EMPTY, REASON_UNDERUTILIZED
from karpy.api.taints import (
    CONSOLIDATION_PLANNED_TAINT_KEY,
    DISRUPTED_TAINT_KEY,
    NO_SCHEDULE,
    PREFER_NO_SCHEDULE,
    Taint,
)
from karpy.controllers.provisioning import build_nodeclaim
from karpy.disruption.consolidation import KIND_PRICE, KIND_WEIGHT
from karpy.disruption.emptiness import EmptinessDecision, reschedulable
from karpy.disruption.method import TerminateFirstReason
from karpy.logs import about
from karpy.operator.cluster import (
    EVENT_NORMAL,
    EVENT_WARNING,
    Clock,
    Cluster,
    ConflictError,
    NotFoundError,
)
from karpy.operator.karpenter_metrics import Metrics
from karpy.scheduling.solver import NewNodeClaim

# The disruption controller's logger: the sequence is part of its pass.
log = logging.getLogger("karpy.disruption")

REPLACEMENT_BACKOFF_START = 60.0
# How long replacements may take to initialize before the command is rolled back (Karpenter's
# orchestration queue gives up after 10 minutes).
REPLACEMENT_INITIALIZATION_TIMEOUT = 600.0
REPLACEMENT_BACKOFF_CAP = 600.0
# The longest consolidation waits for the pods of the nodes it just deleted to land (see ``evicting``).
EVICTION_SETTLE_BOUND = 60.0
DISRUPTED_TAINT = Taint(DISRUPTED_TAINT_KEY, NO_SCHEDULE)
PLANNED_TAINT = Taint(CONSOLIDATION_PLANNED_TAINT_KEY, PREFER_NO_SCHEDULE)


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
    # Node repair: the condition repaired, and the drain bound stamped on the candidates as they are
    # deleted (None: their own terminationGracePeriod).
    repair_condition: str = ""
    repair_reason: str = ""
    drain_bound: float | None = None
    # Node repair's in-place reboot: handed to the reboot controller, nothing deleted or launched.
    reboot: bool = False
    # A delete-only command going before any replacement can exist, with why (TerminateFirstDrift,
    # TerminateFirstRepair): the provisioner or the static capacity controller refills afterwards.
    terminate_first: TerminateFirstReason | None = None

    @property
    def why(self) -> str:
        """The reason as Events say it: a weight consolidation says so."""
        return f"{self.reason} (weight consolidation)" if self.kind == KIND_WEIGHT else self.reason


def command_consolidation_type(command: Command) -> str:
    """The ``consolidation_type`` label of a command, as Karpenter's: ``empty``, ``single`` or ``multi``
    for the consolidating reasons, empty for drift and repair."""
    if command.reason == REASON_EMPTY:
        return "empty"
    if command.reason != REASON_UNDERUTILIZED:
        return ""
    return "multi" if len(command.candidates) > 1 else "single"


def reschedulable_pods(cluster: Cluster, nodeclaim: NodeClaim) -> int:
    """The pods that have to move if ``nodeclaim``'s node goes (for the pods disruption metric)."""
    node_name = nodeclaim.status.node_name
    return sum(1 for pod in cluster.pods_on_node(node_name) if reschedulable(pod)) if node_name else 0


@dataclass(slots=True)
class Pending:
    """A command waiting for its re-check at ``validate_at``."""

    command: Command
    validate_at: float


@dataclass(slots=True)
class InFlight:
    """A command whose candidates are tainted and whose replacements are launching."""

    command: Command
    replacement_names: list[str]
    # When the replacements were launched: they have REPLACEMENT_INITIALIZATION_TIMEOUT to initialize.
    launched_at: float = 0.0


@dataclass(slots=True)
class Orchestrator:
    """The taint, launch, wait, delete or roll back sequence of the disruption pass, and its state."""

    cluster: Cluster
    clock: Clock
    metrics: Metrics
    poll_period: float
    validation_delay: float
    pending: Pending | None = None
    in_flight: InFlight | None = None
    # Every command carried out, in order.
    executed: list[Command] = field(default_factory=list)
    # The reason each NodeClaim's DisruptionBlocked Event gave, so each is given once.
    reported: dict[str, str] = field(default_factory=dict)
    # Empty nodes past consolidateAfter, by NodeClaim name: (when it became due,
    # the first pass that saw it due). Kept while the first stays the same.
    watched_empty: dict[str, tuple[float, float]] = field(default_factory=dict)
    # NodeClaims this controller deleted: marked for deletion even before the cache
    # shows their deletionTimestamp.
    deleted: set[str] = field(default_factory=set)
    # NodeClaims whose consolidation replacement failed: (consecutive failures,
    # until when they are offered no replacement).
    replacement_backoff: dict[str, tuple[int, float]] = field(default_factory=dict)
    # When the candidates last deleted had pods to move (see ``evicting``).
    evicted_at: float | None = None
    # Replacements launched for a plan the budgets cut short, by name, with the plan's
    # nodes still to go: where those nodes' pods are to land (see ``landing_nodes``).
    landing: dict[str, frozenset[str]] = field(default_factory=dict)

    def follow(self, in_flight: InFlight, now: float) -> float | None:
        """Wait for the replacements; delete the candidates once all are initialized."""
        replacements = [self.cluster.nodeclaim(name) for name in in_flight.replacement_names]
        if any(claim is None or claim.metadata.deleting for claim in replacements):
            failed = [
                name
                for name, claim in zip(in_flight.replacement_names, replacements, strict=True)
                if claim is None
            ]
            self._queue_failed(in_flight.command, replacements)
            self._roll_back(in_flight.command, f"replacement {', '.join(failed) or 'NodeClaim'} failed")
            self.in_flight = None
            return self.poll_period
        if all(claim is not None and claim.initialized for claim in replacements):
            self._delete_candidates(in_flight.command)
            self.in_flight = None
            return self.poll_period
        if now >= in_flight.launched_at + REPLACEMENT_INITIALIZATION_TIMEOUT:
            # As Karpenter's orchestration queue: the old nodes keep serving; the replacements
            # stay, for the pods to use should they come up after all.
            waiting = [claim.name for claim in replacements if claim is not None and not claim.initialized]
            self._queue_failed(in_flight.command, replacements)
            self._roll_back(
                in_flight.command,
                f"replacement {', '.join(waiting)} not initialized within "
                f"{REPLACEMENT_INITIALIZATION_TIMEOUT:.0f}s",
            )
            self.in_flight = None
            return self.poll_period
        return 1.0

    def _queue_failed(self, command: Command, replacements: list[NodeClaim | None]) -> None:
        """A command given up after it started: its replacements that did not come up, counted as
        Karpenter's orchestration queue counts a failed command."""
        failed = sum(1 for claim in replacements if claim is None or not claim.initialized)
        self.metrics.disruption_queue_failed(
            "replace", command.reason, command_consolidation_type(command), failed
        )

    def carry_out(self, command: Command | None, now: float) -> float | None:
        """Re-check the pending command, or carry ``command`` out, or hold it for its re-check.

        Returns when to run the pass again, or None when there is no command,
        pending or new (the pass then chooses).
        """
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
            self.pending = Pending(command, now + self.validation_delay)
            return self.validation_delay
        return None

    def untaint_leftovers(self) -> None:
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
            if nodeclaim.metadata.deleting or nodeclaim.name in self.deleted:
                continue
            node = self.cluster.node(nodeclaim.status.node_name) if nodeclaim.status.node_name else None
            if node is not None and DISRUPTED_TAINT in node.taints:
                log.info("removing a left-over disrupted taint", extra=about(nodeclaim, node))
                self._taint(nodeclaim, add=False)
        self.deleted &= existing

    def mark_planned(self, planned: set[str]) -> None:
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

    def watch_empty(self, emptiness: EmptinessDecision, now: float) -> None:
        """Note which empty nodes are due now, keeping when each was first seen due with this due time."""
        watched: dict[str, tuple[float, float]] = {}
        for name, due_at in emptiness.due_at.items():
            previous = self.watched_empty.get(name)
            watched[name] = previous if previous is not None and previous[0] == due_at else (due_at, now)
        self.watched_empty = watched

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
            watched = self.watched_empty.get(name)
            if watched is None or watched[1] + self.validation_delay > now:
                return False
        return True

    def report_blocked(
        self, blocked: Mapping[str, str], event_reasons: Mapping[str, str] | None = None
    ) -> None:
        """One Event per NodeClaim and reason it is not disrupted for (not one per pass).

        Its reason is ``DisruptionBlocked`` unless ``event_reasons`` names another for the
        NodeClaim (``NodeRepairBlocked``, a Warning, when the repair breaker holds it, as in Karpenter).
        """
        for name, reason in sorted(blocked.items()):
            if self.reported.get(name) == reason:
                continue
            self.reported[name] = reason
            event = (event_reasons or {}).get(name, "DisruptionBlocked")
            kind = EVENT_NORMAL if event == "DisruptionBlocked" else EVENT_WARNING
            nodeclaim = self.cluster.nodeclaim(name)
            if nodeclaim is not None:
                self.cluster.record_event(nodeclaim, kind, event, f"Cannot disrupt NodeClaim: {reason}")
                # And on its Node, where `kubectl describe node` shows it, as Karpenter does.
                node = self.cluster.node(nodeclaim.status.node_name) if nodeclaim.status.node_name else None
                if node is not None:
                    self.cluster.record_event(node, kind, event, f"Cannot disrupt Node: {reason}")
        for name in [name for name in self.reported if name not in blocked]:
            del self.reported[name]

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
        self.in_flight = InFlight(command, names, launched_at=now)
        if command.planned:
            for name in names:
                self.landing[name] = frozenset(command.planned)

    def landing_nodes(self) -> dict[str, frozenset[str]]:
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
        self.landing = {
            name: planned & live for name, planned in self.landing.items() if name in live and planned & live
        }
        return dict(self.landing)

    def evicting(self, now: float) -> bool:
        """Whether pods of the nodes deleted last are still on their way to other nodes.

        Until they have landed, the next consolidation would be worked out on
        room those pods are about to take, and kube-scheduler puts them by
        least allocation, not where the last plan packed them: a command
        computed meanwhile fails its validation or strands pods that the
        command after it merges again (both seen on the real cluster). So
        consolidation waits while a node being deleted still has pods to move
        or a pod is pending, for at most ``EVICTION_SETTLE_BOUND`` after the
        deletion (a pod that never schedules holds nothing longer).
        """
        if self.evicted_at is None or now >= self.evicted_at + EVICTION_SETTLE_BOUND:
            return False
        if any(pod.is_provisionable() for pod in self.cluster.pending_pods()):
            return True
        for nodeclaim in self.cluster.nodeclaims():
            node_name = nodeclaim.status.node_name
            leaving = nodeclaim.metadata.deleting or nodeclaim.name in self.deleted
            if node_name and leaving and any(reschedulable(p) for p in self.cluster.pods_on_node(node_name)):
                return True
        return False

    def _delete_candidates(self, command: Command) -> None:
        for name in command.candidates:
            nodeclaim = self.cluster.nodeclaim(name)
            if nodeclaim is None or nodeclaim.metadata.deleting:
                continue
            moving = reschedulable_pods(self.cluster, nodeclaim)
            if moving:
                self.evicted_at = self.clock.now()
            try:
                if command.drain_bound is not None:
                    nodeclaim = self._bound_drain(nodeclaim, command.drain_bound)
                self.cluster.delete(nodeclaim)
            except NotFoundError:
                continue
            self.deleted.add(name)
            # A consolidation names its pool's policy (drift, repair: none), as Karpenter's queue does.
            nodepool = self.cluster.nodepool(nodeclaim.nodepool)
            consolidating = command_consolidation_type(command) != "" and nodepool is not None
            policy = nodepool.disruption.consolidation_policy if consolidating and nodepool else ""
            self.metrics.nodeclaim_disrupted(nodeclaim, command.reason, policy)
            self.metrics.pods_disrupted(nodeclaim, command.reason, moving, policy)
            if command.repair_condition:
                self.metrics.nodeclaim_repaired(nodeclaim, command.repair_condition, command.drain_bound)
        self.executed.append(command)

    def _bound_drain(self, nodeclaim: NodeClaim, bound: float) -> NodeClaim:
        """Stamp the drain's deadline, ``bound`` from now, unless an earlier one is stamped already."""
        deadline = self.clock.now() + bound
        written = nodeclaim.metadata.annotations.get(TERMINATION_TIMESTAMP_ANNOTATION)
        try:
            if written and parse_timestamp(written) <= deadline:
                return nodeclaim
        except ValueError:
            pass
        annotations = {
            **nodeclaim.metadata.annotations,
            TERMINATION_TIMESTAMP_ANNOTATION: format_timestamp(deadline),
        }
        return self.cluster.update(nodeclaim.with_metadata(annotations=annotations))

    def backed_off(self, now: float) -> set[str]:
        """NodeClaims offered no consolidation replacement now; forgets those that are gone."""
        existing = {claim.name for claim in self.cluster.nodeclaims()}
        self.replacement_backoff = {
            name: entry for name, entry in self.replacement_backoff.items() if name in existing
        }
        return {name for name, (_, until) in self.replacement_backoff.items() if until > now}

    def _back_off(self, command: Command, now: float) -> None:
        """Hold back a new replacement for the candidates of a consolidation that failed."""
        if command.reason != REASON_UNDERUTILIZED or not command.replacements:
            return
        for name in command.candidates:
            failures = self.replacement_backoff.get(name, (0, now))[0] + 1
            wait = min(REPLACEMENT_BACKOFF_CAP, REPLACEMENT_BACKOFF_START * 2 ** (failures - 1))
            self.replacement_backoff[name] = (failures, now + wait)

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


def _with_taint(node: Node, taint: Taint, wanted: bool) -> Node | None:
    """``node`` with ``taint`` put on (``wanted``) or taken off; None when it already is so."""
    if (taint in node.taints) == wanted:
        return None
    taints = (*node.taints, taint) if wanted else tuple(t for t in node.taints if t != taint)
    return node.with_changes(taints=taints)


__all__ = [
    "DISRUPTED_TAINT",
    "PLANNED_TAINT",
    "REPLACEMENT_BACKOFF_CAP",
    "REPLACEMENT_BACKOFF_START",
    "Command",
    "InFlight",
    "Orchestrator",
    "Pending",
]
