"""Instance types and their offerings: what a cloud can launch, and at what price.

An instance type is a set of labels (expressed as requirements, so zone and
capacity type can list every value it is offered with), a capacity, and the
overhead the node reserves for itself (kube-reserved, system-reserved and
the eviction threshold). What pods can use is ``allocatable = capacity −
overhead``; the scheduler packs against that figure, which is why getting the
overhead right matters as much as getting the capacity right.

An offering is one (zone, capacity type) in which the type can be bought, with
its hourly price and whether it is available right now (a spot pool that just
returned insufficient capacity is marked unavailable for a while, so the next
pass falls back to another offering). A ``reserved`` offering is one capacity
reservation: its id and how many instances it had left when the offerings
were made, which the solver spends per pass (Karpenter's
``ReservationCapacity``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from karpy.api.quantity import ResourceAmounts, add_amounts, subtract_amounts
from karpy.api.requirements import (
    AWS_LABEL_CAPACITY_RESERVATION_ID,
    CAPACITY_TYPE_ON_DEMAND,
    CAPACITY_TYPE_RESERVED,
    CAPACITY_TYPE_SPOT,
    LABEL_CAPACITY_TYPE,
    LABEL_ZONE,
    Requirements,
)

# Launch precedence of capacity types, as in Karpenter's WorstLaunchPrice.
_LAUNCH_PRECEDENCE = (CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_SPOT, CAPACITY_TYPE_ON_DEMAND)


@dataclass(frozen=True, slots=True)
class Offering:
    zone: str
    capacity_type: str
    price: float
    available: bool = True
    # A NodeOverlay set or adjusted the price (karpy.scheduling.overlays).
    price_overlaid: bool = False
    # A reserved offering's capacity reservation and the instances it had left ("" and 0 otherwise).
    reservation_id: str = ""
    reservation_capacity: int = 0

    @property
    def launchable(self) -> bool:
        """Whether a node can be launched into it now (Karpenter's ``Launchable``).

        ``available`` is health alone: a full reservation that is otherwise fine
        stays available with no instance left, as in Karpenter's AWS provider,
        so terminate-first can tell it from one that is gone.
        """
        return self.available and (
            self.capacity_type != CAPACITY_TYPE_RESERVED or self.reservation_capacity > 0
        )


@dataclass(frozen=True, slots=True)
class Overhead:
    kube_reserved: ResourceAmounts = field(default_factory=dict)
    system_reserved: ResourceAmounts = field(default_factory=dict)
    eviction_threshold: ResourceAmounts = field(default_factory=dict)

    def total(self) -> ResourceAmounts:
        return add_amounts(add_amounts(self.kube_reserved, self.system_reserved), self.eviction_threshold)


@dataclass(frozen=True, slots=True)
class InstanceType:
    name: str
    requirements: Requirements
    offerings: tuple[Offering, ...]
    capacity: ResourceAmounts
    overhead: Overhead = field(default_factory=Overhead)
    allocatable: ResourceAmounts = field(default_factory=dict)
    # A NodeOverlay added to the capacity (karpy.scheduling.overlays).
    capacity_overlaid: bool = False
    # How many volumes of each CSI driver a node of this type can attach (karpy.api.storage);
    # a driver not named takes any number.
    volume_limits: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        name: str,
        requirements: Requirements,
        offerings: tuple[Offering, ...],
        capacity: ResourceAmounts,
        overhead: Overhead,
    ) -> InstanceType:
        allocatable = {
            resource: max(0, amount)
            for resource, amount in subtract_amounts(capacity, overhead.total()).items()
        }
        return cls(name, requirements, offerings, capacity, overhead, allocatable)

    @property
    def price_overlaid(self) -> bool:
        """Whether a NodeOverlay set the price of any of its offerings."""
        return any(offering.price_overlaid for offering in self.offerings)

    def available_offerings(self, requirements: Requirements | None = None) -> list[Offering]:
        """Launchable offerings whose zone and capacity type ``requirements`` admit."""
        if requirements is None:
            return [offering for offering in self.offerings if offering.launchable]
        zone = requirements.get(LABEL_ZONE)
        capacity_type = requirements.get(LABEL_CAPACITY_TYPE)
        offerings = [
            offering
            for offering in self.offerings
            if offering.launchable and zone.has(offering.zone) and capacity_type.has(offering.capacity_type)
        ]
        if AWS_LABEL_CAPACITY_RESERVATION_ID in requirements:
            # A NodeClaim that holds slots in some reservations launches into those alone.
            reservation = requirements.get(AWS_LABEL_CAPACITY_RESERVATION_ID)
            offerings = [o for o in offerings if not o.reservation_id or reservation.has(o.reservation_id)]
        return offerings

    def cheapest_offering(self, requirements: Requirements | None = None) -> Offering | None:
        offerings = self.available_offerings(requirements)
        if not offerings:
            return None
        return min(offerings, key=lambda offering: (offering.price, offering.capacity_type, offering.zone))


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


def offering_price(
    instance_types: Iterable[InstanceType], name: str, zone: str, capacity_type: str
) -> float | None:
    """The hourly price of type ``name``'s offering in ``zone`` and ``capacity_type`` (None if not listed)."""
    for instance_type in instance_types:
        if instance_type.name != name:
            continue
        for offering in instance_type.offerings:
            if offering.zone == zone and offering.capacity_type == capacity_type:
                return offering.price
    return None


def cheapest_price(instance_type: InstanceType, requirements: Requirements) -> float:
    offering = instance_type.cheapest_offering(requirements)
    return offering.price if offering is not None else math.inf


def priced_below(
    options: Sequence[InstanceType], requirements: Requirements, ceiling: float
) -> list[InstanceType]:
    return [t for t in options if worst_launch_price(t, requirements) < ceiling]
