"""Terminate-first disruption: deleting a node before its replacement exists, when nothing else can be done.

Drift and repair replace first: the new capacity is launched and initialized
before the old node goes. That cannot work when the only capacity the pods
may use is the node's own, which Karpenter v1.15 handles behind two alpha
gates, ``TerminateFirstDrift`` and ``TerminateFirstRepair`` (off by
default; RFC kubernetes-sigs/karpenter#3203):

- **A full capacity reservation** (:attr:`TerminateFirstReason.NO_RESERVED_CAPACITY`).
  The node holds a slot of a reservation with no instance left, and its pods
  fit nowhere else. Planned again with that slot given back
  (:func:`credit_reservation`), every pod places: deleting the node is what
  lets its replacement launch, so the command deletes it alone and the
  provisioner refills the freed slot once the pods are pending. Only a node
  of capacity type ``reserved`` with a reservation id frees such a slot.
- **A static NodePool at its node limit** (:attr:`TerminateFirstReason.STATIC_AT_LIMIT`),
  or one whose every offering is a full reservation (:func:`static_reservations`):
  the replacement would be a node over ``limits.nodes``, so the node goes
  first and the static capacity controller launches its successor once the
  deletion frees the count. Never in a pool that is not Ready or is being
  deleted (:func:`refillable`): nothing would launch the successor.

A terminate-first command is a delete-only command marked with its reason,
counted as decision ``terminate-first`` and in
``karpenter_voluntary_disruption_terminate_first_decisions_total``. The drain
still honours PodDisruptionBudgets and the termination grace period.
Pure: the disruption methods decide with it, the controller supplies the
plans.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from karpy.api.conditions import TRUE, find_condition
from karpy.api.core import Pod
from karpy.api.instancetype import InstanceType
from karpy.api.nodepool import CONDITION_READY, NodePool
from karpy.api.requirements import (
    AWS_LABEL_CAPACITY_RESERVATION_ID,
    CAPACITY_TYPE_RESERVED,
    LABEL_CAPACITY_TYPE,
    LABEL_ZONE,
)
from karpy.disruption.method import Candidate, TerminateFirstReason
from karpy.scheduling.solver import NodePoolCapacity, Plan, pool_requirements

# Where a node's pods would go once it is deleted and its slot in the reservation (the id) is freed:
# the controller plans on a snapshot without the node, that reservation credited one instance.
AfterTermination = Callable[["Candidate", Sequence[Pod], str], Plan]


def held_reservation(candidate: Candidate) -> str:
    """The capacity reservation whose slot the candidate's node holds; "" when none."""
    labels = candidate.nodeclaim.metadata.labels
    if labels.get(LABEL_CAPACITY_TYPE) != CAPACITY_TYPE_RESERVED:
        return ""
    return labels.get(AWS_LABEL_CAPACITY_RESERVATION_ID, "")


def credit_reservation(
    pools: Sequence[NodePoolCapacity], reservation_id: str, slots: int = 1
) -> list[NodePoolCapacity]:
    """``pools`` with ``slots`` more instances left in ``reservation_id``: the slot a deletion frees.

    An offering the cloud marks unavailable stays so (a reservation that is
    unavailable for another reason is not freed by deleting a node of it).
    """
    credited: list[NodePoolCapacity] = []
    for pool in pools:
        types = [_credited_type(t, reservation_id, slots) for t in pool.instance_types]
        if all(new is old for new, old in zip(types, pool.instance_types, strict=True)):
            credited.append(pool)
        else:
            # The memo holds the reservation room worked out from the old offerings.
            credited.append(dataclasses.replace(pool, instance_types=types, memo=None))
    return credited


def _credited_type(instance_type: InstanceType, reservation_id: str, slots: int) -> InstanceType:
    if not any(o.reservation_id == reservation_id for o in instance_type.offerings):
        return instance_type
    offerings = tuple(
        dataclasses.replace(o, reservation_capacity=o.reservation_capacity + slots)
        if o.reservation_id == reservation_id
        else o
        for o in instance_type.offerings
    )
    return dataclasses.replace(instance_type, offerings=offerings)


@dataclass(frozen=True, slots=True)
class StaticReservations:
    """Whether a static pool can launch only into full capacity reservations, and which are offered."""

    full: bool = False
    # The reservations (ids) of its offerings that are offered, though full.
    offered: frozenset[str] = frozenset()

    def freed_by(self, candidate: Candidate) -> bool:
        """Whether deleting the candidate frees a slot its successor can launch into."""
        held = held_reservation(candidate)
        return bool(held) and held in self.offered


def static_reservations(pool: NodePool, instance_types: Sequence[InstanceType]) -> StaticReservations:
    """Karpenter's check: every offering the pool's template admits is reserved and has no room.

    A pool with any offering it could launch into now (on-demand, spot, or a
    reservation with instances left) is not full.
    """
    requirements = pool_requirements(pool)
    zone, capacity_type = requirements.get(LABEL_ZONE), requirements.get(LABEL_CAPACITY_TYPE)
    offered: set[str] = set()
    for instance_type in instance_types:
        if instance_type.requirements.intersects(requirements) is not None:
            continue
        for offering in instance_type.offerings:
            if not zone.has(offering.zone) or not capacity_type.has(offering.capacity_type):
                continue
            launchable = offering.available and offering.reservation_capacity > 0
            if offering.capacity_type != CAPACITY_TYPE_RESERVED or launchable:
                return StaticReservations()
            if offering.available:
                offered.add(offering.reservation_id)
    return StaticReservations(full=True, offered=frozenset(offered))


def refillable(pool: NodePool) -> bool:
    """Whether the static capacity controller would launch the pool's successor node (Ready, not deleting)."""
    ready = find_condition(pool.status.conditions, CONDITION_READY)
    return ready is not None and ready.status == TRUE and not pool.metadata.deleting


__all__ = [
    "AfterTermination",
    "StaticReservations",
    "TerminateFirstReason",
    "credit_reservation",
    "held_reservation",
    "refillable",
    "static_reservations",
]
