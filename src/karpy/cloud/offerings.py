"""Offerings that recently failed, kept unavailable for a while (Karpenter's unavailable-offerings cache).

An offering is an (instance type, zone, capacity type) triple. When a launch
fails for capacity (``InsufficientInstanceCapacity`` and its kin) or a spot
instance of that offering is reclaimed, launching there again at once would
most likely fail again, so the offering is reported unavailable for
:data:`UNAVAILABLE_OFFERING_TTL` (3 minutes, as Karpenter does) and the next
scheduling pass falls back to other types, zones or on-demand. After the TTL
the offering is tried again: capacity comes back, and a cache that never
forgot would strand a pool on its dearer fallbacks.

The cache reads the injected clock, so the simulator's virtual time and the
wall clock of ``karpy run`` age it the same way. It is not thread-safe on its
own; the providers that mark from other threads hold their own lock.
"""

from __future__ import annotations

from collections.abc import Iterable

from karpy.api.requirements import CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_SPOT
from karpy.operator.cluster import Clock

UNAVAILABLE_OFFERING_TTL = 180.0

Offering = tuple[str, str, str]  # (instance type, zone, capacity type)


def launch_capacity_type(capacity_types: Iterable[str]) -> str:
    """The capacity type a launch asks for, given the capacity types of its admissible, available offerings.

    Karpenter's rule, shared by every provider: reserved whenever a reserved
    offering is there, else spot whenever a spot offering is there (the
    NodeClaim allowed it, or it would not be among the admissible ones),
    on-demand otherwise.
    """
    offered = set(capacity_types)
    for capacity_type in (CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_SPOT):
        if capacity_type in offered:
            return capacity_type
    return CAPACITY_TYPE_ON_DEMAND


class UnavailableOfferings:
    def __init__(self, clock: Clock, ttl: float = UNAVAILABLE_OFFERING_TTL) -> None:
        self.clock = clock
        self.ttl = ttl
        self._until: dict[Offering, float] = {}

    def mark(self, instance_type: str, zone: str, capacity_type: str) -> None:
        """Make the offering unavailable for ``ttl`` seconds from now (again, if it already was)."""
        self._until[(instance_type, zone, capacity_type)] = self.clock.now() + self.ttl

    def now(self) -> frozenset[Offering]:
        """The offerings unavailable at this moment (expired ones are forgotten)."""
        now = self.clock.now()
        for offering, until in list(self._until.items()):
            if until <= now:
                self._until.pop(offering, None)  # another thread may have forgotten it first
        return frozenset(self._until)

    def expiries(self) -> dict[Offering, float]:
        """Each offering now unavailable, with when it becomes available again."""
        self.now()  # forget the expired ones
        return dict(self._until)

    def __contains__(self, offering: object) -> bool:
        return offering in self.now()
