"""Capacity reservations as offerings: Karpenter's ``reserved`` capacity type (gate ``ReservedCapacity``).

A node class' capacity reservations (On-Demand Capacity Reservations and
Capacity Blocks, from ``EC2NodeClass.status.capacityReservations``, or the
simulator's ``cloud.capacityReservations``) become offerings of their
instance type: capacity type ``reserved``, in the reservation's zone, as the
AWS provider's ``ReservedCapacityResolver`` makes them. One code path serves
``karpy run`` and the simulator: both providers call
:func:`with_reserved_offerings` and :func:`reservation_to_launch`.

- **Price.** The type's on-demand price divided by 10,000,000: the instances
  are paid for whether used or not, so a reserved offering is all but free
  and wins every price comparison, while types keep their relative order for
  consolidation (Karpenter's constant).
- **Available** while the reservation is not ``expiring`` (a Capacity Block
  in its reclaim window) and has not ended; the zone must be one the class
  offers the type in. As in Karpenter's AWS provider, availability is health
  alone: a full reservation stays available with no instance left, and is
  not *launchable* (``Offering.launchable``) until one is freed, which is
  what terminate-first reads (:mod:`karpy.disruption.terminate_first`).
- **Counting.** Each reserved offering carries its reservation's id and
  the instances it has left; the solver takes one per NodeClaim it plans
  into it and falls back to the next offering when none is left
  (:mod:`karpy.scheduling._reservations`). The count is EC2's ``AvailableInstanceCount`` at the last
  resolution; a launch into the reservation takes one off until EC2 is read
  again (a launch before that read already counts in it), a termination
  gives one back, and a launch refused for capacity (EC2's
  ``ReservationCapacityExceeded`` and the other capacity codes) or an
  interruption of an interruptible reservation sets it to 0: the offering is
  then not launchable and the next pass falls back to spot or on-demand, as
  Karpenter's ``MarkUnavailable`` does.
- **Labels.** A node launched into a reservation carries
  ``karpenter.sh/capacity-type: reserved`` and Karpenter's
  ``karpenter.k8s.aws/capacity-reservation-id``, ``-type`` (``default`` or
  ``capacity-block``) and ``-interruptible``.

A planned NodeClaim names the reservations it took a slot in
(``karpenter.k8s.aws/capacity-reservation-id In ...``, as Karpenter's
scheduler pins them); the launch takes the first of those with instances
left (:func:`reservation_to_launch`).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable, Mapping, Sequence

from karpy.api.instancetype import InstanceType, Offering
from karpy.api.nodeclass import CapacityReservationSelectorTerm, StatusCapacityReservation
from karpy.api.requirements import (
    AWS_LABEL_CAPACITY_RESERVATION_ID,
    AWS_LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE,
    AWS_LABEL_CAPACITY_RESERVATION_TYPE,
    CAPACITY_TYPE_ON_DEMAND,
    CAPACITY_TYPE_RESERVED,
    LABEL_CAPACITY_TYPE,
    Requirement,
    Requirements,
)
from karpy.operator.cluster import Clock

# Karpenter's divisor: a reserved offering costs the on-demand price over this.
RESERVED_PRICE_DIVISOR = 10_000_000.0
RESERVATION_TYPE_DEFAULT = "default"
RESERVATION_TYPE_CAPACITY_BLOCK = "capacity-block"
RESERVATION_TYPES = (RESERVATION_TYPE_DEFAULT, RESERVATION_TYPE_CAPACITY_BLOCK)
# A Capacity Block is expiring this long before its end (Karpenter's 40 minutes; EC2 reclaims at 30).
CAPACITY_BLOCK_EXPIRING_WINDOW = 40 * 60.0
STATE_ACTIVE = "active"
STATE_EXPIRING = "expiring"
MATCH_OPEN = "open"
MATCH_TARGETED = "targeted"


# A reservation as the node class' status lists it.
Reservation = StatusCapacityReservation


def reservation_labels(reservation: Reservation) -> dict[str, str]:
    """The labels of a node launched into ``reservation`` (Karpenter's)."""
    return {
        LABEL_CAPACITY_TYPE: CAPACITY_TYPE_RESERVED,
        AWS_LABEL_CAPACITY_RESERVATION_ID: reservation.id,
        AWS_LABEL_CAPACITY_RESERVATION_TYPE: reservation.reservation_type,
        AWS_LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE: "true" if reservation.interruptible else "false",
    }


# Karpenter's ReservedCapacityLabels: what a node that leaves its reservation loses.
RESERVED_CAPACITY_LABELS = (AWS_LABEL_CAPACITY_RESERVATION_ID, AWS_LABEL_CAPACITY_RESERVATION_TYPE)


def demoted(labels: Mapping[str, str]) -> dict[str, str]:
    """``labels`` of a node that left its reservation: on-demand, without the reservation's labels."""
    result = {key: value for key, value in labels.items() if key not in RESERVED_CAPACITY_LABELS}
    result[LABEL_CAPACITY_TYPE] = CAPACITY_TYPE_ON_DEMAND
    return result


class ReservationAvailability:
    """Instances left per reservation id: EC2's count, less launches, more terminations (thread-safe)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._count: dict[str, int] = {}
        self._synced: dict[str, float] = {}

    def sync(self, counts: Mapping[str, int]) -> None:
        """EC2's ``AvailableInstanceCount`` of each reservation, just read."""
        now = self.clock.now()
        with self._lock:
            for reservation_id, count in counts.items():
                self._count[reservation_id] = max(0, count)
                self._synced[reservation_id] = now

    def count(self, reservation_id: str) -> int:
        with self._lock:
            return self._count.get(reservation_id, 0)

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._count)

    def mark_launched(self, reservation_id: str) -> None:
        with self._lock:
            if reservation_id in self._count and self._count[reservation_id] > 0:
                self._count[reservation_id] -= 1

    def mark_terminated(self, reservation_id: str) -> None:
        with self._lock:
            if reservation_id in self._count:
                self._count[reservation_id] += 1

    def mark_unavailable(self, *reservation_ids: str) -> None:
        with self._lock:
            for reservation_id in reservation_ids:
                if reservation_id in self._count:
                    self._count[reservation_id] = 0


def _healthy(reservation: Reservation, now: float) -> bool:
    return reservation.state != STATE_EXPIRING and not reservation.ended(now)


def _launchable(reservation: Reservation, availability: ReservationAvailability, now: float) -> bool:
    return availability.count(reservation.id) > 0 and _healthy(reservation, now)


def with_reserved_offerings(
    instance_type: InstanceType,
    reservations: Sequence[Reservation],
    availability: ReservationAvailability,
    now: float,
) -> InstanceType:
    """``instance_type`` with a ``reserved`` offering per reservation of it (module docstring)."""
    mine = [reservation for reservation in reservations if reservation.instance_type == instance_type.name]
    if not mine:
        return instance_type
    on_demand = [o.price for o in instance_type.offerings if o.capacity_type == CAPACITY_TYPE_ON_DEMAND]
    price = min(on_demand) / RESERVED_PRICE_DIVISOR if on_demand else 0.0
    zones = {offering.zone for offering in instance_type.offerings}
    reserved = tuple(
        Offering(
            reservation.zone,
            CAPACITY_TYPE_RESERVED,
            price,
            reservation.zone in zones and _healthy(reservation, now),
            reservation_id=reservation.id,
            reservation_capacity=availability.count(reservation.id),
        )
        for reservation in mine
    )
    offerings = instance_type.offerings + reserved
    capacity_types = sorted({offering.capacity_type for offering in offerings})
    requirements = Requirements(
        *(
            requirement
            for requirement in instance_type.requirements
            if requirement.key != LABEL_CAPACITY_TYPE
        ),
        Requirement.from_operator(LABEL_CAPACITY_TYPE, "In", capacity_types),
    )
    return dataclasses.replace(instance_type, requirements=requirements, offerings=offerings)


def reservation_to_launch(
    reservations: Iterable[Reservation],
    availability: ReservationAvailability,
    instance_type: str,
    zone: str,
    now: float,
    allowed: Requirement | None = None,
) -> Reservation | None:
    """The reservation a reserved launch of ``instance_type`` in ``zone`` goes into; None if none has room.

    ``allowed``: the NodeClaim's ``capacity-reservation-id`` requirement, the
    reservations the plan took a slot in for it (``karpy.scheduling._reservations``).
    """
    for reservation in reservations:
        if (
            reservation.instance_type == instance_type
            and reservation.zone == zone
            and (allowed is None or allowed.has(reservation.id))
            and _launchable(reservation, availability, now)
        ):
            return reservation
    return None


def reservation_of(reservations: Iterable[Reservation], reservation_id: str) -> Reservation | None:
    return next((reservation for reservation in reservations if reservation.id == reservation_id), None)


def selected_by(
    terms: Sequence[CapacityReservationSelectorTerm], reservation: Reservation, tags: Mapping[str, str]
) -> bool:
    """Whether a term picks ``reservation`` (tagged ``tags``), as the EC2 filters Karpenter sends pick it.

    An id term picks that id alone; any other term picks by owner, tags
    (``*``: any value of the key) and instance match criteria, all of those set.
    """
    for term in terms:
        if term.id:
            if term.id == reservation.id:
                return True
            continue
        if term.owner_id and term.owner_id != reservation.owner_id:
            continue
        if (
            term.instance_match_criteria
            and term.instance_match_criteria != reservation.instance_match_criteria
        ):
            continue
        if all(key in tags and (value == "*" or tags[key] == value) for key, value in term.tags.items()):
            return True
    return False


def reservation_state(reservation_type: str, end_time: float | None, now: float) -> str:
    """``expiring`` for a Capacity Block near its end (40 minutes, Karpenter's), else ``active``."""
    if (
        reservation_type == RESERVATION_TYPE_CAPACITY_BLOCK
        and end_time is not None
        and now >= end_time - CAPACITY_BLOCK_EXPIRING_WINDOW
    ):
        return STATE_EXPIRING
    return STATE_ACTIVE
