"""Drift: when a node no longer is what its NodePool asks for.

A NodeClaim is **drifted** (Karpenter v1) when:

- its ``karpenter.sh/nodepool-hash`` annotation differs from the NodePool's
  current template hash (same hash version): labels, annotations, taints,
  startup taints, the node class reference, expireAfter or
  terminationGracePeriod changed;
- its labels no longer satisfy the NodePool's requirements (a requirement was
  narrowed; widening one drifts nothing, which is why requirements are not
  part of the hash);
- the cloud provider says its node class drifted, passed in as
  ``provider_reason`` and kept as the condition's reason, as Karpenter keeps
  it (``NodeClassDrift``, ``AMIDrift``, ``SecurityGroupDrift``,
  ``SubnetDrift``: :mod:`karpy.disruption.nodeclass_drift`).

:func:`drift_reason` is the rule the NodeClaim disruption controller marks
``Drifted`` by. :class:`Drift` is the disruption method (Karpenter's Drift):
each drifted node in name order, unless do-not-disrupt (on the node or a
pod) or the ``Drifted`` budget holds it back, is replaced by what its pods
need elsewhere, worked out by the controller's ``place_elsewhere`` (a solve
on a snapshot without the node). As in Karpenter, drift is graceful: a node
whose pods a PodDisruptionBudget holds, or whose pods would land on a node
not initialized yet, stays. With TerminateFirstDrift, a node whose pods fit
only in the full capacity reservation slot it holds is deleted first instead
(:mod:`karpy.disruption.terminate_first`). Pure; expiration is
:mod:`karpy.disruption.expiration`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from karpy.api.core import DO_NOT_DISRUPT_ANNOTATION, Pod
from karpy.api.nodeclaim import CONDITION_DRIFTED, NodeClaim
from karpy.api.nodepool import (
    NODEPOOL_HASH_ANNOTATION,
    NODEPOOL_HASH_VERSION,
    NODEPOOL_HASH_VERSION_ANNOTATION,
    REASON_DRIFTED,
    NodePool,
)
from karpy.disruption.candidates import do_not_disrupt_rejection, waiting_on_uninitialized
from karpy.disruption.emptiness import reschedulable
from karpy.disruption.method import Candidate, MethodResult, RemovalCommand, TerminateFirstReason
from karpy.disruption.nodeclass_drift import (
    AMI_DRIFT,
    CAPACITY_RESERVATION_DRIFT,
    NODECLASS_DRIFT,
    SECURITY_GROUP_DRIFT,
    SUBNET_DRIFT,
)
from karpy.disruption.rejection import Rejection, RejectionKind
from karpy.disruption.terminate_first import AfterTermination, held_reservation
from karpy.scheduling.solver import Plan

REASON_NODEPOOL_DRIFTED = "NodePoolDrifted"
REASON_REQUIREMENTS_DRIFTED = "RequirementsDrifted"
# What each of the node class drift reasons means, for the Drifted condition's message.
NODECLASS_DRIFT_MESSAGES = {
    NODECLASS_DRIFT: "a static field of its node class changed (the node class hash differs)",
    AMI_DRIFT: "its AMI is no longer one its node class resolves for its instance type",
    SECURITY_GROUP_DRIFT: "its security groups are no longer those its node class resolves",
    SUBNET_DRIFT: "its subnet is no longer one its node class resolves",
    CAPACITY_RESERVATION_DRIFT: "it runs in a capacity reservation its node class no longer selects",
}


def drift_reason(nodeclaim: NodeClaim, nodepool: NodePool, provider_reason: str = "") -> tuple[str, str]:
    """(reason, message) if the NodeClaim drifted from its NodePool, else ("", "")."""
    annotations = nodeclaim.metadata.annotations
    claimed = annotations.get(NODEPOOL_HASH_ANNOTATION)
    # A hash of another version was computed differently: comparing it means nothing.
    same_version = annotations.get(NODEPOOL_HASH_VERSION_ANNOTATION) == NODEPOOL_HASH_VERSION
    if claimed is not None and same_version and claimed != nodepool.template_hash():
        return REASON_NODEPOOL_DRIFTED, f"NodePool {nodepool.name}'s template changed"
    labels = nodeclaim.metadata.labels
    requirements = nodepool.template.requirement_set()
    for requirement in requirements:
        value = labels.get(requirement.key)
        if value is None:
            continue  # a label the node never had cannot have drifted
        if not requirement.has(value):
            message = f"label {requirement.key}={value} no longer satisfies {requirement}"
            return REASON_REQUIREMENTS_DRIFTED, message
    for key, value in nodepool.template.labels.items():
        if labels.get(key) != value:
            return REASON_REQUIREMENTS_DRIFTED, f"label {key} should be {value!r}"
    if provider_reason:
        return provider_reason, NODECLASS_DRIFT_MESSAGES.get(provider_reason, provider_reason)
    return "", ""


# Where a drifted node's pods would go were the node gone: the new NodeClaims to launch,
# and the pods that would find no place (the controller solves on a snapshot without it).
PlaceElsewhere = Callable[[Candidate, Sequence[Pod]], Plan]


def blocking_pod(pods: Sequence[Pod], now: float) -> Rejection | None:
    """The first pod (in the node's order) that do-not-disrupt keeps where it is at ``now``, if any."""
    for pod in pods:
        if reschedulable(pod):
            protected = do_not_disrupt_rejection(pod, now)
            if protected is not None:
                return protected
    return None


def do_not_disrupt_blocker(candidate: Candidate, now: float) -> Rejection | None:
    """What do-not-disrupt holds a drifted node back by at ``now``: its own annotation, or a pod's."""
    if candidate.node.metadata.annotations.get(DO_NOT_DISRUPT_ANNOTATION) == "true":
        return Rejection(RejectionKind.NODE_DO_NOT_DISRUPT, f"node has {DO_NOT_DISRUPT_ANNOTATION}")
    return blocking_pod(candidate.pods, now)


@dataclass(frozen=True, slots=True)
class Drift:
    """Karpenter's Drift: replace the first drifted node that may go (a :class:`Method`).

    ``place_elsewhere`` is None when there is no cloud to launch from: then
    drifted nodes are only checked for what holds them back.
    """

    place_elsewhere: PlaceElsewhere | None
    # The pass's time: a pod's timed do-not-disrupt holds its node only until it lapses.
    now: float
    reason: str = REASON_DRIFTED
    # Nodes and NodeClaims not initialized yet: a plan putting pods on one is no plan, as in
    # Karpenter (a replacement that never comes up would take the pods of the node it replaces).
    uninitialized: frozenset[str] = frozenset()
    # Pods a PodDisruptionBudget lets go nowhere now, with why: drift is a graceful disruption,
    # so as in Karpenter it does not start on a node it could not drain.
    pdb_blocked: Mapping[str, str] = field(default_factory=dict)
    # TerminateFirstDrift: where the pods of a node holding a full reservation's slot would go once
    # it is deleted (karpy.disruption.terminate_first); None: the gate is off, nodes are replaced first.
    after_termination: AfterTermination | None = None

    def considers(self, candidate: Candidate) -> bool:
        # A static pool's drifted nodes are replaced by karpy.disruption.static's StaticDrift.
        return not candidate.nodepool.is_static and candidate.nodeclaim.is_true(CONDITION_DRIFTED)

    def compute(self, candidates: Sequence[Candidate], allowed: Mapping[str, int]) -> MethodResult:
        result = MethodResult()
        for candidate in sorted(candidates, key=lambda c: c.nodeclaim.name):
            name = candidate.nodeclaim.name
            blocker = do_not_disrupt_blocker(candidate, self.now)
            if blocker is not None:
                result.rejected[name] = blocker
                continue
            guarded = sorted(
                pod.key for pod in candidate.pods if reschedulable(pod) and pod.key in self.pdb_blocked
            )
            if guarded:
                result.rejected[name] = Rejection(
                    RejectionKind.POD_DISRUPTION_BUDGET,
                    f"pod {guarded[0]}: {self.pdb_blocked[guarded[0]]}",
                    pods=(guarded[0],),
                )
                continue
            pool = candidate.nodepool.name
            if allowed.get(pool, 0) <= 0:
                result.rejected[name] = Rejection(
                    RejectionKind.BUDGET,
                    f"disruption budget of NodePool {pool} allows no more {REASON_DRIFTED} disruptions now",
                )
                continue
            if self.place_elsewhere is None:
                continue
            plan = self.place_elsewhere(candidate, [pod for pod in candidate.pods if reschedulable(pod)])
            waiting = waiting_on_uninitialized(plan, self.uninitialized)
            if waiting is not None:
                key, target = waiting
                result.rejected[name] = Rejection(
                    RejectionKind.POD_UNSCHEDULABLE,
                    f"pod {key} would schedule against {target}, not initialized yet",
                    pods=(key,),
                )
                continue
            if plan.unschedulable:
                if self._terminates_first(candidate):
                    result.command = RemovalCommand(
                        REASON_DRIFTED,
                        [candidate],
                        [],
                        f"terminate drifted {name} first: its pods fit only in the slot it holds in "
                        f"capacity reservation {held_reservation(candidate)}",
                        terminate_first=TerminateFirstReason.NO_RESERVED_CAPACITY,
                    )
                    return result
                key, why = next(iter(sorted(plan.unschedulable.items())))
                result.rejected[name] = Rejection(
                    RejectionKind.POD_UNSCHEDULABLE,
                    f"pod {key} would not schedule elsewhere: {why}",
                    pods=(key,),
                )
                continue
            result.command = RemovalCommand(
                REASON_DRIFTED,
                [candidate],
                list(plan.new_nodeclaims),
                f"replace drifted {name} with {len(plan.new_nodeclaims)} new NodeClaims",
            )
            return result
        return result

    def _terminates_first(self, candidate: Candidate) -> bool:
        """Whether every pod places once the node is gone and its reservation slot is freed (Karpenter's
        second simulation)."""
        reservation = held_reservation(candidate)
        if self.after_termination is None or not reservation:
            return False
        pods = [pod for pod in candidate.pods if reschedulable(pod)]
        plan = self.after_termination(candidate, pods, reservation)
        return not plan.unschedulable and waiting_on_uninitialized(plan, self.uninitialized) is None


__all__ = [
    "NODECLASS_DRIFT_MESSAGES",
    "REASON_NODEPOOL_DRIFTED",
    "REASON_REQUIREMENTS_DRIFTED",
    "Drift",
    "PlaceElsewhere",
    "blocking_pod",
    "do_not_disrupt_blocker",
    "drift_reason",
]
