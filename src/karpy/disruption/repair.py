"""Node repair: replacing (or rebooting) a node whose conditions stay unhealthy (Karpenter v1.15).

The cloud provider says which node conditions mean a node is broken, as
:class:`RepairPolicy` values: a condition type and status, a reason regex
(exactly one policy of the set has none: the *default fallback*, applied to
any covered type and status no reason-specific policy matches), how long the
condition must have held (from its ``lastTransitionTime``), the drain bound
(None: the NodeClaim's own ``terminationGracePeriod``; more than 0: the
lesser of the two; 0: no drain at all), a priority and an action
(``ReplaceNode`` or ``RebootNode``).

:class:`RepairPolicyMatcher` validates the set once and matches a Node's
conditions against it; :func:`resolve` merges the policies eligible at a time
into one :class:`RepairDecision`: the most disruptive action wins, then the
higher priority, the earlier eligibility, the lower condition type; the drain
bound is the shortest any eligible policy sets. Candidates are repaired in
order of a score (the dense rank of the priority plus the time past
eligibility over 30 minutes), so a long-waiting node overtakes a fresher one
of a higher priority.

:class:`Repair` is the disruption method (reason ``Unhealthy``, the budgets'
reason for repair since v1.15), run before all others. A node is left alone
when its Node carries ``karpenter.sh/do-not-repair: "true"``, when more than
20% (rounded up) of its NodePool's Nodes match a policy at all (the breaker:
a correlated failure is no node's fault), when the budget allows no more, or
when a pod that cannot be evicted (do-not-disrupt, a PodDisruptionBudget)
would hold the drain with no bound to end it. do-not-disrupt on the node
itself does not hold repair back. A node is replaced first: its pods'
new capacity is launched and initialized before it is deleted, as drift
does; a static pool's node is replaced one for one. With
``TerminateFirstRepair``, a node whose replacement cannot be staged (its pods
fit only in the full reservation slot it holds; its static pool is at its
node limit or has only full reservations) is deleted first
(:mod:`karpy.disruption.terminate_first`). Pure: the controller hands in
where pods would go and the Nodes per pool.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from karpy.api.core import Node, Pod
from karpy.api.nodepool import REASON_UNHEALTHY
from karpy.disruption.candidates import waiting_on_uninitialized
from karpy.disruption.emptiness import reschedulable
from karpy.disruption.method import Candidate, MethodResult, TerminateFirstReason
from karpy.disruption.rejection import Rejection, RejectionKind
from karpy.disruption.static import StaticCount, room_under_limit, static_nodeclaim
from karpy.disruption.terminate_first import (
    AfterTermination,
    StaticReservations,
    held_reservation,
    refillable,
)
from karpy.scheduling.solver import NewNodeClaim, Plan

DO_NOT_REPAIR_ANNOTATION = "karpenter.sh/do-not-repair"
# More unhealthy Nodes than this share of a NodePool (rounded up) stops its repair.
UNHEALTHY_THRESHOLD = 0.20
# A node rebooted this many times within REBOOT_HISTORY_WINDOW is replaced instead of rebooted again.
REBOOTS_BEFORE_REPLACEMENT = 2
REBOOT_HISTORY_WINDOW = 24 * 3600.0
# Past eligibility, a node gains one rank of priority per this many seconds.
AGING_SECONDS = 30 * 60.0
MIN_PRIORITY = 0
MAX_PRIORITY = 100
CONDITION_STATUSES = ("True", "False", "Unknown")


class RepairAction(enum.Enum):
    """What a policy asks for; the more disruptive action wins when several are eligible."""

    REBOOT = "RebootNode"
    REPLACE = "ReplaceNode"

    @property
    def rank(self) -> int:
        return 1 if self is RepairAction.REPLACE else 0


@dataclass(frozen=True, slots=True)
class RepairPolicy:
    """A node condition that, held for ``toleration_seconds``, means the node is to be repaired."""

    condition_type: str
    condition_status: str
    toleration_seconds: float
    # A regular expression searched in the condition's reason; "" is the set's default fallback.
    reason_regex: str = field(default="", kw_only=True)
    # The drain bound: None inherits the NodeClaim's terminationGracePeriod, 0 skips the drain.
    termination_grace_period: float | None = field(default=None, kw_only=True)
    priority: int = field(default=0, kw_only=True)
    action: RepairAction = field(default=RepairAction.REPLACE, kw_only=True)

    @property
    def is_fallback(self) -> bool:
        return self.reason_regex == ""


class InvalidRepairPoliciesError(ValueError):
    """A provider's policy set Karpenter v1.15 would refuse; the message lists every problem."""


@dataclass(frozen=True, slots=True)
class PolicyMatch:
    """A policy one of a Node's conditions matches, and when it becomes eligible."""

    policy: RepairPolicy
    condition_type: str
    condition_status: str
    reason: str
    rank: int
    eligible_at: float


@dataclass(frozen=True, slots=True)
class RepairDecision:
    """The eligible policies of one Node merged: what to do, on which condition's account."""

    action: RepairAction
    condition_type: str
    condition_status: str
    reason: str
    fallback: bool
    eligible_at: float
    # The shortest drain bound any eligible policy sets (None: none sets one), and whose.
    termination_grace_period: float | None
    termination_grace_period_condition: str
    # The highest-scoring eligible policy's rank and eligibility (see score_at).
    score_rank: int
    score_eligible_at: float
    # The selected policy's priority (ties between policies of one action).
    priority: int = 0

    def score_at(self, now: float) -> float:
        return self.score_rank + (now - self.score_eligible_at) / AGING_SECONDS


class RepairPolicyMatcher:
    """A provider's policy set, validated and grouped by condition type and status."""

    def __init__(self, policies: Sequence[RepairPolicy]) -> None:
        problems: list[str] = []
        self.groups: dict[tuple[str, str], list[tuple[RepairPolicy, re.Pattern[str]]]] = {}
        fallback: RepairPolicy | None = None
        for index, policy in enumerate(policies):
            problems.extend(_problems(index, policy))
            key = (policy.condition_type, policy.condition_status)
            specific = self.groups.setdefault(key, [])
            if policy.is_fallback:
                if fallback is not None:
                    problems.append(f"policies {fallback} and {policy} are both default fallbacks")
                else:
                    fallback = policy
                continue
            try:
                specific.append((policy, re.compile(policy.reason_regex)))
            except re.error as error:
                problems.append(f"policy[{index}] has an invalid reason regex: {error}")
        if fallback is None:
            problems.append("the policy set has no default fallback (a policy without a reason regex)")
        elif fallback.action is not RepairAction.REPLACE:
            problems.append(f"the default fallback {fallback} must replace the node")
        if problems:
            raise InvalidRepairPoliciesError("; ".join(problems))
        assert fallback is not None
        self.fallback = fallback
        priorities = sorted({policy.priority for policy in policies})
        self.ranks = {priority: rank for rank, priority in enumerate(priorities)}

    def covers(self, condition_type: str, condition_status: str) -> bool:
        """Whether a condition is one the set repairs, whatever its reason or age."""
        return (condition_type, condition_status) in self.groups

    def is_unhealthy(self, node: Node) -> bool:
        """Whether any of the Node's conditions matches a policy, toleration aside (the breaker's count)."""
        return any(self.covers(c.type, c.status) for c in node.conditions)

    def match(self, node: Node) -> list[PolicyMatch]:
        """Every policy one of the Node's conditions matches, whenever it becomes eligible."""
        created = node.metadata.creation_timestamp or 0.0
        matches: list[PolicyMatch] = []
        for condition in node.conditions:
            specific = self.groups.get((condition.type, condition.status))
            if specific is None:
                continue
            # A condition cannot predate its Node: that also bounds one without a transition time.
            since = max(condition.last_transition_time or created, created)
            matched = [policy for policy, regex in specific if regex.search(condition.reason)]
            for policy in matched or [self.fallback]:
                matches.append(
                    PolicyMatch(
                        policy,
                        condition.type,
                        condition.status,
                        condition.reason,
                        self.ranks[policy.priority],
                        since + policy.toleration_seconds,
                    )
                )
        return matches


def _problems(index: int, policy: RepairPolicy) -> Iterable[str]:
    where = f"policy[{index}] ({policy.condition_type}={policy.condition_status})"
    if not policy.condition_type:
        yield f"{where} has an empty condition type"
    if policy.condition_status not in CONDITION_STATUSES:
        yield f"{where} has an invalid condition status {policy.condition_status!r}"
    if policy.toleration_seconds < 0:
        yield f"{where} has a negative toleration"
    if policy.termination_grace_period is not None and policy.termination_grace_period < 0:
        yield f"{where} has a negative termination grace period"
    if not MIN_PRIORITY <= policy.priority <= MAX_PRIORITY:
        yield f"{where} has priority {policy.priority} outside [{MIN_PRIORITY}, {MAX_PRIORITY}]"


def resolve(matches: Iterable[PolicyMatch], now: float, not_before: float = 0.0) -> RepairDecision | None:
    """The matches eligible at ``now`` merged into one decision (None: none is eligible yet).

    Each toleration counts from ``not_before`` at the earliest (the end of the
    node's last reboot: a condition that outlived it must hold again).
    """
    decision: RepairDecision | None = None
    for match in matches:
        policy = match.policy
        eligible_at = max(match.eligible_at, not_before + policy.toleration_seconds)
        if eligible_at > now:
            continue
        if decision is None:
            decision = RepairDecision(
                policy.action,
                match.condition_type,
                match.condition_status,
                match.reason,
                policy.is_fallback,
                eligible_at,
                policy.termination_grace_period,
                match.condition_type if policy.termination_grace_period is not None else "",
                match.rank,
                eligible_at,
                policy.priority,
            )
        else:
            decision = _merge(decision, match, eligible_at, now)
    return decision


def _merge(decision: RepairDecision, match: PolicyMatch, eligible_at: float, now: float) -> RepairDecision:
    policy = match.policy
    merged = decision
    if match.rank + (now - eligible_at) / AGING_SECONDS > decision.score_at(now):
        merged = dataclasses.replace(merged, score_rank=match.rank, score_eligible_at=eligible_at)
    bound = policy.termination_grace_period
    current = decision.termination_grace_period
    if bound is not None and (
        current is None
        or bound < current
        or (bound == current and match.condition_type < decision.termination_grace_period_condition)
    ):
        merged = dataclasses.replace(
            merged, termination_grace_period=bound, termination_grace_period_condition=match.condition_type
        )
    if policy.action is decision.action:
        if policy.priority != decision.priority:
            selected = policy.priority > decision.priority
        elif eligible_at != decision.eligible_at:
            selected = eligible_at < decision.eligible_at
        else:
            selected = match.condition_type < decision.condition_type
    else:
        selected = policy.action.rank > decision.action.rank
    if not selected:
        return merged
    return dataclasses.replace(
        merged,
        action=policy.action,
        condition_type=match.condition_type,
        condition_status=match.condition_status,
        reason=match.reason,
        fallback=policy.is_fallback,
        eligible_at=eligible_at,
        priority=policy.priority,
    )


def tripped_pools(
    nodes_by_pool: Mapping[str, Sequence[Node]], matcher: RepairPolicyMatcher
) -> frozenset[str]:
    """The NodePools with more unhealthy Nodes than 20% of their Nodes, rounded up (the breaker).

    Rounding up keeps one unhealthy node of a small pool repairable: 1 of 1..5 is
    not over the threshold, 2 of 5 is.
    """
    tripped: set[str] = set()
    for pool, nodes in nodes_by_pool.items():
        threshold = math.ceil(len(nodes) * UNHEALTHY_THRESHOLD - 1e-9)
        if sum(1 for node in nodes if matcher.is_unhealthy(node)) > threshold:
            tripped.add(pool)
    return frozenset(tripped)


def drain_bound(decision: RepairDecision, nodeclaim_grace_period: float | None) -> float | None:
    """How long the drain may take: the policy's bound, capped by the NodeClaim's (None: its own)."""
    bound = decision.termination_grace_period
    if bound is None:
        return None
    return bound if nodeclaim_grace_period is None else min(bound, nodeclaim_grace_period)


@dataclass(slots=True)
class RepairCommand:
    """Replace (or reboot) one unhealthy node: a :class:`~karpy.disruption.method.MethodCommand`."""

    candidate: Candidate
    decision: RepairDecision
    replacements: list[NewNodeClaim]
    # The drain bound to stamp on the NodeClaim when it is deleted (None: its own grace period).
    drain_bound: float | None
    # Reboot in place (the cloud can, and the node has reboots left) rather than replace.
    reboot: bool = False
    reason: str = REASON_UNHEALTHY
    # Set when the node is deleted before any replacement can exist, with why (TerminateFirstRepair).
    terminate_first: TerminateFirstReason | None = None

    @property
    def nodeclaim_names(self) -> list[str]:
        return [self.candidate.nodeclaim.name]

    @property
    def description(self) -> str:
        d = self.decision
        if self.reboot:
            what = "reboot"
        elif self.terminate_first is not None:
            what = f"terminate first ({self.terminate_first.value})"
        else:
            what = f"replace with {len(self.replacements)} new NodeClaims"
        return (
            f"{what} unhealthy {self.candidate.nodeclaim.name} "
            f"({d.condition_type}={d.condition_status}{'/' + d.reason if d.reason else ''})"
        )


# Where an unhealthy node's pods would go were the node gone (the controller solves on a
# snapshot without it); a static pool's replacement is stamped from its template instead.
PlaceElsewhere = Callable[[Candidate, Sequence[Pod]], Plan]


@dataclass(frozen=True, slots=True)
class Repair:
    """Karpenter's Repair: the first unhealthy node by score that may go (a ``Method``)."""

    matcher: RepairPolicyMatcher
    now: float
    # Each NodePool's Nodes (the breaker counts them), by pool name.
    nodes_by_pool: Mapping[str, Sequence[Node]]
    place_elsewhere: PlaceElsewhere | None
    # The static pools' NodeClaims by state, for their one-for-one replacements (None: none is made).
    static_counts: Mapping[str, StaticCount] | None = None
    # Nodes and NodeClaims not initialized yet (pods must not be planned there).
    uninitialized: frozenset[str] = frozenset()
    # Pods a PodDisruptionBudget lets go nowhere now.
    pdb_blocked: Mapping[str, str] = field(default_factory=dict)
    # When each NodeClaim's last reboot ended: its tolerations count from then.
    rebooted_at: Mapping[str, float] = field(default_factory=dict)
    # Whether the cloud reboots in place; without it a reboot policy escalates to replacement.
    can_reboot: bool = False
    # NodeClaims rebooted REBOOTS_BEFORE_REPLACEMENT times within a day: a reboot is a replacement now.
    reboots_exhausted: frozenset[str] = frozenset()
    # TerminateFirstRepair (karpy.disruption.terminate_first): where a node's pods would go once it
    # is deleted and its reservation slot freed (None: the gate is off), and each static pool's
    # reservations (a pool missing here is not full).
    after_termination: AfterTermination | None = None
    static_reservations: Mapping[str, StaticReservations] = field(default_factory=dict)
    reason: str = REASON_UNHEALTHY

    @property
    def terminate_first(self) -> bool:
        return self.after_termination is not None

    def decision(self, candidate: Candidate) -> RepairDecision | None:
        not_before = self.rebooted_at.get(candidate.nodeclaim.name, 0.0)
        return resolve(self.matcher.match(candidate.node), self.now, not_before)

    def considers(self, candidate: Candidate) -> bool:
        return self.decision(candidate) is not None

    def next_due(self, candidates: Sequence[Candidate]) -> float | None:
        """When the first policy a candidate matches, not yet held long enough, becomes eligible."""
        moments = []
        for candidate in candidates:
            not_before = self.rebooted_at.get(candidate.nodeclaim.name, 0.0)
            for match in self.matcher.match(candidate.node):
                eligible_at = max(match.eligible_at, not_before + match.policy.toleration_seconds)
                if eligible_at > self.now:
                    moments.append(eligible_at)
        return min(moments, default=None)

    def compute(self, candidates: Sequence[Candidate], allowed: Mapping[str, int]) -> MethodResult:
        result = MethodResult()
        decided = [(c, d) for c in candidates if (d := self.decision(c)) is not None]
        decided.sort(key=lambda cd: (-cd[1].score_at(self.now), cd[0].nodeclaim.name))
        tripped = tripped_pools(self.nodes_by_pool, self.matcher)
        for candidate, decision in decided:
            name = candidate.nodeclaim.name
            pool = candidate.nodepool.name
            if candidate.node.metadata.annotations.get(DO_NOT_REPAIR_ANNOTATION) == "true":
                result.rejected[name] = Rejection(
                    RejectionKind.DO_NOT_REPAIR,
                    f"repair is blocked by the {DO_NOT_REPAIR_ANNOTATION} annotation",
                )
                continue
            if pool in tripped:
                result.rejected[name] = Rejection(
                    RejectionKind.REPAIR_BREAKER,
                    f"more than {UNHEALTHY_THRESHOLD:.0%} of nodes in NodePool {pool} are unhealthy",
                )
                continue
            bound = drain_bound(decision, candidate.nodeclaim.spec.termination_grace_period)
            blocker = self._unbounded_blocker(candidate, bound)
            if blocker is not None:
                result.rejected[name] = blocker
                continue
            if allowed.get(pool, 0) <= 0:
                result.rejected[name] = Rejection(
                    RejectionKind.BUDGET,
                    f"disruption budget of NodePool {pool} allows no more {REASON_UNHEALTHY} disruptions now",
                )
                continue
            if (
                decision.action is RepairAction.REBOOT
                and self.can_reboot
                and name not in self.reboots_exhausted
            ):
                result.command = RepairCommand(candidate, decision, [], bound, reboot=True)
                return result
            if candidate.nodepool.is_static:
                command = self._static_command(candidate, decision, bound, result)
                if command is None:
                    continue
                result.command = command
                return result
            replacements = self._replacements(candidate, result)
            if replacements is None:
                if self._terminates_first(candidate):
                    result.rejected.pop(name, None)
                    result.command = RepairCommand(
                        candidate,
                        decision,
                        [],
                        bound,
                        terminate_first=TerminateFirstReason.NO_RESERVED_CAPACITY,
                    )
                    return result
                continue
            result.command = RepairCommand(candidate, decision, replacements, bound)
            return result
        return result

    def _unbounded_blocker(self, candidate: Candidate, bound: float | None) -> Rejection | None:
        """A pod no drain would move, when nothing bounds the drain (repair would wait for ever)."""
        if bound is not None or candidate.nodeclaim.spec.termination_grace_period is not None:
            return None
        for pod in candidate.pods:
            if not reschedulable(pod):
                continue
            if pod.do_not_disrupt_at(self.now) or pod.key in self.pdb_blocked:
                return Rejection(
                    RejectionKind.POD_DO_NOT_DISRUPT,
                    f"pod {pod.key} cannot be evicted and repair has no termination grace period "
                    "to bypass it",
                    pods=(pod.key,),
                )
        return None

    def _replacements(self, candidate: Candidate, result: MethodResult) -> list[NewNodeClaim] | None:
        """What to launch before the node goes, or None (with why) when its pods have no place."""
        name = candidate.nodeclaim.name
        if self.place_elsewhere is None:
            return None
        # Every pod that has to move, those eviction will hold until the drain bound included.
        plan = self.place_elsewhere(candidate, [pod for pod in candidate.pods if reschedulable(pod)])
        waiting = waiting_on_uninitialized(plan, self.uninitialized)
        if waiting is not None:
            key, target = waiting
            result.rejected[name] = Rejection(
                RejectionKind.TARGET_NOT_INITIALIZED,
                f"pod {key} would schedule against {target}, not initialized yet",
                pods=(key,),
            )
            return None
        if plan.unschedulable:
            key, why = next(iter(sorted(plan.unschedulable.items())))
            result.rejected[name] = Rejection(
                RejectionKind.POD_UNSCHEDULABLE, f"pod {key} would not schedule elsewhere: {why}", pods=(key,)
            )
            return None
        return list(plan.new_nodeclaims)

    def _terminates_first(self, candidate: Candidate) -> bool:
        """Whether the node's pods all place once it is gone and its full reservation's slot freed."""
        reservation = held_reservation(candidate)
        if self.after_termination is None or not reservation or self.place_elsewhere is None:
            return False
        pods = [pod for pod in candidate.pods if reschedulable(pod)]
        plan = self.after_termination(candidate, pods, reservation)
        return not plan.unschedulable and waiting_on_uninitialized(plan, self.uninitialized) is None

    def _static_command(
        self, candidate: Candidate, decision: RepairDecision, bound: float | None, result: MethodResult
    ) -> RepairCommand | None:
        """A static pool's node: replaced one for one, terminated first (the gate), or held (with why)."""
        name = candidate.nodeclaim.name
        pool = candidate.nodepool
        if self.static_counts is None:
            return None
        count = self.static_counts.get(pool.name, StaticCount())
        if count.active + count.pending_disruption > (pool.replicas or 0):
            # A scale-down is under way: a replacement would only be surplus it removes.
            result.rejected[name] = Rejection(
                RejectionKind.STATIC_SCALING_DOWN,
                f"static NodePool {pool.name} is scaling down to {pool.replicas} nodes",
            )
            return None
        reservations = self.static_reservations.get(pool.name, StaticReservations())
        full = self.terminate_first and reservations.full
        full_message = (
            f"static NodePool {pool.name}'s capacity reservations are full and cannot stage a replacement"
        )
        if full and not reservations.freed_by(candidate):
            result.rejected[name] = Rejection(RejectionKind.STATIC_RESERVATIONS_FULL, full_message)
            return None
        room = room_under_limit(pool, count)
        if full or (room is not None and room <= 0):
            if not self.terminate_first or not refillable(pool):
                result.rejected[name] = Rejection(
                    RejectionKind.STATIC_RESERVATIONS_FULL if full else RejectionKind.STATIC_AT_NODE_LIMIT,
                    full_message
                    if full
                    else f"static NodePool {pool.name} is at its node limit and cannot stage a replacement",
                )
                return None
            why = TerminateFirstReason.NO_RESERVED_CAPACITY if full else TerminateFirstReason.STATIC_AT_LIMIT
            return RepairCommand(candidate, decision, [], bound, terminate_first=why)
        return RepairCommand(candidate, decision, [static_nodeclaim(pool)], bound)


__all__ = [
    "DO_NOT_REPAIR_ANNOTATION",
    "REBOOTS_BEFORE_REPLACEMENT",
    "REBOOT_HISTORY_WINDOW",
    "UNHEALTHY_THRESHOLD",
    "InvalidRepairPoliciesError",
    "PolicyMatch",
    "Repair",
    "RepairAction",
    "RepairCommand",
    "RepairDecision",
    "RepairPolicy",
    "RepairPolicyMatcher",
    "drain_bound",
    "resolve",
    "tripped_pools",
]
