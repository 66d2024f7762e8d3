"""Capacity reservations spent per plan: no more reserved NodeClaims than a reservation has instances.

A ``reserved`` offering is priced near zero (``karpy.cloud.reservations``),
so every bin whose options include a reserved type ranks it first; left at
that, a plan of ten NodeClaims would count on a reservation of two. As
Karpenter's scheduler does with its ``ReservationManager``, each
reservation's room (the least ``reservation_capacity`` any of its offerings
states) is spent once per plan, NodeClaim by NodeClaim in the order they
were opened:

- a NodeClaim with a compatible reserved offering whose reservation has room
  takes one instance of every such reservation (Karpenter's pessimistic
  reservation: it may launch into any of them) and is pinned to them,
  ``karpenter.sh/capacity-type In [reserved]`` and
  ``karpenter.k8s.aws/capacity-reservation-id In [...]``, so the launch goes
  into one it holds; its options are those the pin still offers;
- a NodeClaim whose reservations are all spent falls back to its next
  offering: ``reserved`` is dropped from its capacity types and its options
  are ranked again without it (Karpenter's fallback mode; its provisioner's
  strict mode would instead leave the pods for the next pass);
- a NodeClaim with no other offering is not made, and its pods stay pending
  with a reason, to be planned again once the reservations are read again.

Plans without reserved offerings are returned as they are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from karpy.api.instancetype import InstanceType, Offering
from karpy.api.requirements import (
    AWS_LABEL_CAPACITY_RESERVATION_ID,
    CAPACITY_TYPE_RESERVED,
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    Requirement,
    Requirements,
)
from karpy.scheduling._model import NewNodeClaim, NodePoolCapacity

RESERVATIONS_SPENT = "its capacity reservations are used up by this plan and it has no other offering"


def reservation_room(pools: Sequence[NodePoolCapacity]) -> dict[str, int]:
    """Instances left per reservation id, the least any of its offerings states (Karpenter's)."""
    room: dict[str, int] = {}
    for pool in pools:
        for reservation_id, left in _pool_room(pool).items():
            room[reservation_id] = min(room.get(reservation_id, left), left)
    return room


def _pool_room(pool: NodePoolCapacity) -> dict[str, int]:
    # Kept on the pool's memo: a consolidation pass solves many times over the same types.
    if pool.memo is not None and pool.memo.reservation_room is not None:
        return pool.memo.reservation_room
    room: dict[str, int] = {}
    for instance_type in pool.instance_types:
        for offering in instance_type.offerings:
            if offering.capacity_type == CAPACITY_TYPE_RESERVED and offering.reservation_id:
                left = offering.reservation_capacity if offering.available else 0
                room[offering.reservation_id] = min(room.get(offering.reservation_id, left), left)
    if pool.memo is not None:
        pool.memo.reservation_room = room
    return room


def spend_reservations(
    nodeclaims: Sequence[NewNodeClaim], pools: Sequence[NodePoolCapacity]
) -> tuple[list[NewNodeClaim], list[NewNodeClaim]]:
    """The NodeClaims as the reservations' room allows them, and those that cannot be made (docstring)."""
    room = reservation_room(pools)
    if not room:
        return list(nodeclaims), []
    kept: list[NewNodeClaim] = []
    dropped: list[NewNodeClaim] = []
    for nodeclaim in nodeclaims:
        reserved = _reserved_offerings(nodeclaim)
        if not reserved:
            kept.append(nodeclaim)
            continue
        held = sorted({o.reservation_id for o in reserved if room.get(o.reservation_id, 0) > 0})
        if held:
            for reservation_id in held:
                room[reservation_id] -= 1
            kept.append(
                _narrowed(
                    nodeclaim,
                    Requirement.from_operator(LABEL_CAPACITY_TYPE, "In", (CAPACITY_TYPE_RESERVED,)),
                    Requirement.from_operator(AWS_LABEL_CAPACITY_RESERVATION_ID, "In", held),
                )
            )
            continue
        others = sorted(
            {
                offering.capacity_type
                for instance_type in nodeclaim.instance_types
                for offering in instance_type.available_offerings(nodeclaim.requirements)
                if offering.capacity_type != CAPACITY_TYPE_RESERVED
            }
        )
        if not others:
            dropped.append(nodeclaim)
            continue
        kept.append(_narrowed(nodeclaim, Requirement.from_operator(LABEL_CAPACITY_TYPE, "In", others)))
    return kept, dropped


def _reserved_offerings(nodeclaim: NewNodeClaim) -> list[Offering]:
    return [
        offering
        for instance_type in nodeclaim.instance_types
        for offering in instance_type.available_offerings(nodeclaim.requirements)
        if offering.capacity_type == CAPACITY_TYPE_RESERVED and offering.reservation_id
    ]


def _narrowed(nodeclaim: NewNodeClaim, *narrowing: Requirement) -> NewNodeClaim:
    """``nodeclaim`` with ``narrowing`` added and its options, cheapest first, those still offered."""
    requirements = Requirements(*(r for r in nodeclaim.requirements if r.key != LABEL_INSTANCE_TYPE))
    for requirement in narrowing:
        requirements.add(requirement)

    def price(instance_type: InstanceType) -> float:
        return min(o.price for o in instance_type.available_offerings(requirements))

    options = sorted(
        (t for t in nodeclaim.instance_types if t.available_offerings(requirements)),
        key=lambda t: (price(t), t.name),
    )
    previous = (
        nodeclaim.requirements.get(LABEL_INSTANCE_TYPE).min_values
        if LABEL_INSTANCE_TYPE in nodeclaim.requirements
        else None
    )
    if previous is not None:
        previous = min(previous, len(options))
    requirements.add(
        Requirement.from_operator(LABEL_INSTANCE_TYPE, "In", [t.name for t in options], previous)
    )
    return dataclasses.replace(nodeclaim, requirements=requirements, instance_types=options)
