"""Static NodePools: how many NodeClaims to launch or remove, which ones, and how drift replaces them.

A NodePool with ``spec.replicas`` (Karpenter's static capacity) keeps that many
NodeClaims whatever the pods ask for. The rules, as Karpenter v1.15 keeps them:

- **Counts.** A pool's NodeClaims are *active*, *pending disruption* (a
  disruption command has tainted their node and launches their replacement) or
  *deleting*. ``limits.nodes`` caps all three together.
- **Scale up** (:func:`to_launch`): nothing while active plus pending
  disruption reach ``replicas`` (a drifted node being replaced counts, or its
  replacement would be launched twice); otherwise ``replicas`` less the active
  ones, within what ``limits.nodes`` leaves.
- **Scale down** (:func:`to_remove`, :func:`scale_down_order`): the active
  NodeClaims beyond ``replicas``; first those not launched yet, then the empty
  ones (no pod that would have to move), then the cheapest to disrupt (the
  eviction cost of their pods scaled by the lifetime left), nodes with a
  do-not-disrupt pod last. No budget applies: the user asked for fewer nodes.
- **Drift** (:class:`StaticDrift`): drifted nodes are replaced one for one by a
  NodeClaim stamped from the pool's template (no scheduling: a static pool
  launches for no pod), within the ``Drifted`` budget and the room
  ``limits.nodes`` leaves for the replacements; not while a scale-down is
  still to finish. With ``TerminateFirstDrift``, a pool at its node limit
  deletes its drifted nodes first (as many as the budget allows) and the
  static capacity controller launches their successors as the count frees;
  a pool whose every offering is a full capacity reservation does so for the
  nodes holding a slot of one (:mod:`karpy.disruption.terminate_first`).
  Consolidation and emptiness leave static pools alone.

Pure: the static capacity controller (:mod:`karpy.controllers.static`) counts
and writes, the disruption controller runs :class:`StaticDrift`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from karpy.api.core import Pod
from karpy.api.instancetype import InstanceType
from karpy.api.nodeclaim import CONDITION_DRIFTED
from karpy.api.nodepool import REASON_DRIFTED, NodePool
from karpy.disruption.candidates import eviction_cost
from karpy.disruption.drift import do_not_disrupt_blocker
from karpy.disruption.emptiness import reschedulable
from karpy.disruption.method import Candidate, MethodResult, RemovalCommand, TerminateFirstReason
from karpy.disruption.rejection import Rejection, RejectionKind
from karpy.disruption.terminate_first import StaticReservations, refillable
from karpy.scheduling.solver import NewNodeClaim, pool_requirements


@dataclass(frozen=True, slots=True)
class StaticCount:
    """A static pool's NodeClaims by state."""

    active: int = 0
    pending_disruption: int = 0
    deleting: int = 0

    @property
    def total(self) -> int:
        """What ``limits.nodes`` counts: every NodeClaim of the pool still there."""
        return self.active + self.pending_disruption + self.deleting


def room_under_limit(pool: NodePool, count: StaticCount) -> int | None:
    """How many more NodeClaims ``limits.nodes`` lets the pool have; None without a limit."""
    limit = pool.node_limit
    return None if limit is None else max(0, limit - count.total)


def to_launch(pool: NodePool, count: StaticCount) -> int:
    """How many NodeClaims the pool launches now to reach ``replicas``."""
    replicas = pool.replicas or 0
    if count.active + count.pending_disruption >= replicas:
        return 0
    wanted = replicas - count.active
    room = room_under_limit(pool, count)
    return wanted if room is None else min(wanted, room)


def to_remove(pool: NodePool, count: StaticCount) -> int:
    """How many active NodeClaims the pool removes now to come down to ``replicas``.

    Pending disruption ones are not counted: their replacements are active
    already, and counting both would remove a node too many meanwhile.
    """
    return max(0, count.active - (pool.replicas or 0))


@dataclass(frozen=True, slots=True)
class StaticMember:
    """An active NodeClaim of a static pool, as the scale-down ranks it."""

    name: str
    launched: bool
    # The pods on its node (none before it registers).
    pods: Sequence[Pod] = ()
    # The fraction of its expireAfter still ahead (1 when it never expires).
    lifetime_remaining: float = 1.0


def _is_empty(member: StaticMember) -> bool:
    return not any(reschedulable(pod) for pod in member.pods)


def _holds_do_not_disrupt(member: StaticMember) -> bool:
    return any(pod.do_not_disrupt for pod in member.pods if not pod.is_terminal)


def scale_down_order(members: Sequence[StaticMember]) -> list[StaticMember]:
    """``members`` in the order a scale-down removes them (ties by name)."""

    def rank(member: StaticMember) -> tuple[int, bool, float, str]:
        if not member.launched:
            return (0, False, 0.0, member.name)
        if _is_empty(member) and not _holds_do_not_disrupt(member):
            return (1, False, 0.0, member.name)
        cost = sum(eviction_cost(pod) for pod in member.pods if reschedulable(pod))
        return (2, _holds_do_not_disrupt(member), cost * member.lifetime_remaining, member.name)

    return sorted(members, key=rank)


def static_nodeclaim(pool: NodePool, instance_types: Sequence[InstanceType] = ()) -> NewNodeClaim:
    """A NodeClaim stamped from the pool's template alone: its requirements, no pods, no requests.

    The cloud provider picks the offering (the cheapest its requirements
    admit), as Karpenter leaves it to ``Create`` for static NodeClaims;
    ``instance_types`` only price it for logs and reports.
    """
    return NewNodeClaim(
        nodepool=pool.name,
        requirements=pool_requirements(pool),
        instance_types=list(instance_types),
        pods=[],
        requests={},
        daemon_overhead={},
    )


@dataclass(frozen=True, slots=True)
class StaticDrift:
    """Karpenter's StaticDrift: replace a static pool's drifted nodes one for one (a ``Method``).

    ``counts`` are the static pools' NodeClaims by state.
    """

    counts: Mapping[str, StaticCount]
    # The pass's time: a pod's timed do-not-disrupt holds its node only until it lapses.
    now: float
    reason: str = REASON_DRIFTED
    # TerminateFirstDrift: a pool that cannot stage a replacement deletes its drifted nodes first.
    terminate_first: bool = False
    # With the gate, each static pool's reservations (a pool missing here is not full).
    reservations: Mapping[str, StaticReservations] = field(default_factory=dict)

    def considers(self, candidate: Candidate) -> bool:
        return candidate.nodepool.is_static and candidate.nodeclaim.is_true(CONDITION_DRIFTED)

    def compute(self, candidates: Sequence[Candidate], allowed: Mapping[str, int]) -> MethodResult:
        result = MethodResult()
        by_pool: dict[str, list[Candidate]] = {}
        for candidate in sorted(candidates, key=lambda c: c.nodeclaim.name):
            name = candidate.nodeclaim.name
            blocker = do_not_disrupt_blocker(candidate, self.now)
            if blocker is not None:
                result.rejected[name] = blocker
                continue
            by_pool.setdefault(candidate.nodepool.name, []).append(candidate)
        for pool_name, drifted in sorted(by_pool.items()):
            pool = drifted[0].nodepool
            count = self.counts.get(pool_name, StaticCount())
            budget = min(allowed.get(pool_name, 0), len(drifted))
            if budget <= 0:
                self._reject(
                    result,
                    drifted,
                    RejectionKind.BUDGET,
                    f"disruption budget of NodePool {pool_name} "
                    f"allows no more {REASON_DRIFTED} disruptions now",
                )
                continue
            if count.active + count.pending_disruption > (pool.replicas or 0):
                self._reject(
                    result,
                    drifted,
                    RejectionKind.STATIC_SCALING_DOWN,
                    f"static NodePool {pool_name} is scaling down to {pool.replicas} nodes",
                )
                continue
            reservations = self.reservations.get(pool_name, StaticReservations())
            if self.terminate_first and reservations.full:
                # Those freeing a slot their successor can take go first; the rest cannot be replaced.
                ordered = sorted(drifted, key=lambda c: not reservations.freed_by(c))[:budget]
                if self._terminate_first(
                    result,
                    pool,
                    ordered,
                    reservations.freed_by,
                    TerminateFirstReason.NO_RESERVED_CAPACITY,
                    f"static NodePool {pool_name}'s capacity reservations are full and cannot "
                    "stage a replacement",
                ):
                    return result
                continue
            room = room_under_limit(pool, count)
            replaced = budget if room is None else min(budget, room)
            if replaced <= 0:
                message = f"static NodePool {pool_name} is at its node limit and cannot stage a replacement"
                if self.terminate_first:
                    if self._terminate_first(
                        result,
                        pool,
                        drifted[:budget],
                        lambda _: True,
                        TerminateFirstReason.STATIC_AT_LIMIT,
                        message,
                    ):
                        return result
                    continue
                self._reject(result, drifted, RejectionKind.STATIC_AT_NODE_LIMIT, message)
                continue
            chosen = drifted[:replaced]
            result.command = RemovalCommand(
                REASON_DRIFTED,
                chosen,
                [static_nodeclaim(pool) for _ in chosen],
                f"replace drifted {', '.join(c.nodeclaim.name for c in chosen)} of static NodePool "
                f"{pool_name} with {len(chosen)} new NodeClaims",
            )
            return result
        return result

    def _terminate_first(
        self,
        result: MethodResult,
        pool: NodePool,
        candidates: Sequence[Candidate],
        can_go_first: Callable[[Candidate], bool],
        why: TerminateFirstReason,
        blocked: str,
    ) -> bool:
        """A delete-only command for the candidates that may go first (the rest rejected); whether one was."""
        # A pool not Ready or being deleted launches no successor: terminating first would strand the pods.
        chosen = [c for c in candidates if can_go_first(c)] if refillable(pool) else []
        kind = (
            RejectionKind.STATIC_AT_NODE_LIMIT
            if why is TerminateFirstReason.STATIC_AT_LIMIT
            else RejectionKind.STATIC_RESERVATIONS_FULL
        )
        self._reject(result, [c for c in candidates if c not in chosen], kind, blocked)
        if not chosen:
            return False
        result.command = RemovalCommand(
            REASON_DRIFTED,
            chosen,
            [],
            f"terminate drifted {', '.join(c.nodeclaim.name for c in chosen)} of static NodePool "
            f"{pool.name} first ({why.value}): no replacement can be staged",
            terminate_first=why,
        )
        return True

    @staticmethod
    def _reject(
        result: MethodResult, candidates: Sequence[Candidate], kind: RejectionKind, message: str
    ) -> None:
        for candidate in candidates:
            result.rejected[candidate.nodeclaim.name] = Rejection(kind, message)


__all__ = [
    "StaticCount",
    "StaticDrift",
    "StaticMember",
    "room_under_limit",
    "scale_down_order",
    "static_nodeclaim",
    "to_launch",
    "to_remove",
]
