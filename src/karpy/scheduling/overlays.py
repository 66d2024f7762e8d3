"""NodeOverlays against the NodePools' catalogs: which prices and capacities change, which overlays conflict.

Karpenter's nodeoverlay controller and instance-type store, as pure functions:

- :func:`evaluate` takes the NodeOverlays and each NodePool's catalog (as the
  cloud provider lists it) and works out, per pool and instance type, the
  price change of each offering and the extended capacity added. Overlays are
  taken highest weight first, then by name (later in the alphabet first). An
  overlay applies to an instance type of a pool when the type's requirements,
  ``karpenter.sh/nodepool=<pool>`` and the pool template's labels are
  compatible with its requirements, and then to the offerings (zone, capacity
  type) its requirements admit. On an offering the first price overlay taken
  wins; an overlay of the same weight as the last one taken on an offering it
  touches is a conflict. Capacity merges per resource, the first overlay
  taken for a resource winning; an overlay of the same weight as the last
  capacity overlay of a type, naming one of its resources, is a conflict. A
  conflicting overlay is left out whole, and so is one that fails
  :func:`~karpy.api.nodeoverlay.runtime_problem`.
- :func:`apply_updates` gives a catalog with those changes made; the
  instance types and offerings changed are marked (``capacity_overlaid``,
  ``price_overlaid``) so a NodeClaim launched from them can say so.

The result is a value: the controller publishes it, and whatever lists
instance types (provisioning, consolidation, the Cluster Autoscaler baseline,
the simulator's bill) applies it to the catalog the provider gives then, so an
offering's availability stays the provider's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from karpy.api.conditions import FALSE, TRUE
from karpy.api.instancetype import InstanceType, Offering
from karpy.api.nodeoverlay import (
    CONFLICT_MESSAGE,
    REASON_CONFLICT,
    REASON_RUNTIME_VALIDATION,
    NodeOverlay,
    adjusted_price,
    by_weight,
    runtime_problem,
)
from karpy.api.nodepool import NodePool
from karpy.api.quantity import ResourceAmounts
from karpy.api.requirements import (
    LABEL_CAPACITY_TYPE,
    LABEL_NODEPOOL,
    LABEL_ZONE,
    Requirement,
    Requirements,
)

# An offering as overlays select it: (zone, capacity type).
OfferingKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class TypeUpdate:
    """What overlays change on one instance type of one pool."""

    prices: Mapping[OfferingKey, str] = field(default_factory=dict)
    capacity: ResourceAmounts = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Verdict:
    """An overlay's ValidationSucceeded condition: its status, reason and message."""

    status: str
    reason: str = ""
    message: str = ""


@dataclass(frozen=True, slots=True)
class OverlayEvaluation:
    """The overlays worked out against the pools' catalogs."""

    # Pool name -> instance type name -> its changes (only types something changed).
    updates: Mapping[str, Mapping[str, TypeUpdate]] = field(default_factory=dict)
    # The pools whose catalogs were read: the others await an evaluation.
    evaluated: frozenset[str] = frozenset()
    # Overlay name -> why it was left out (runtime validation or a conflict), as its condition says.
    rejected: Mapping[str, Verdict] = field(default_factory=dict)

    def verdict(self, name: str) -> Verdict:
        return self.rejected.get(name, Verdict(TRUE))

    def price(self, nodepool: str, instance_type: str, zone: str, capacity_type: str, price: float) -> float:
        """``price`` of that offering once the overlays are applied."""
        update = self.updates.get(nodepool, {}).get(instance_type)
        change = update.prices.get((zone, capacity_type)) if update is not None else None
        return adjusted_price(price, change) if change is not None else price


@dataclass(slots=True)
class _PriceEntry:
    change: str
    last_weight: int


@dataclass(slots=True)
class _CapacityEntry:
    merged: dict[str, int]
    last_resources: frozenset[str]
    last_weight: int


@dataclass(slots=True)
class _TypeEntry:
    prices: dict[OfferingKey, _PriceEntry] = field(default_factory=dict)
    capacity: _CapacityEntry | None = None


@dataclass(slots=True)
class _Match:
    pool: str
    instance_type: str
    offerings: tuple[OfferingKey, ...]


def evaluate(
    overlays: Iterable[NodeOverlay], catalogs: Sequence[tuple[NodePool, Sequence[InstanceType]]]
) -> OverlayEvaluation:
    """The overlays against each pool's catalog (``catalogs``: the pools whose catalogs could be read)."""
    entries: dict[str, dict[str, _TypeEntry]] = {}
    rejected: dict[str, Verdict] = {}
    bases = [(pool, _type_bases(pool, catalog)) for pool, catalog in catalogs]
    for overlay in by_weight(overlays):
        problem = runtime_problem(overlay)
        if problem is not None:
            rejected[overlay.name] = Verdict(FALSE, REASON_RUNTIME_VALIDATION, problem)
            continue
        matches = _matches(overlay, bases)
        if any(_conflicts(overlay, entries, match) for match in matches):
            rejected[overlay.name] = Verdict(FALSE, REASON_CONFLICT, CONFLICT_MESSAGE)
            continue
        for match in matches:
            _record(
                overlay,
                entries.setdefault(match.pool, {}).setdefault(match.instance_type, _TypeEntry()),
                match,
            )
    updates = {
        pool: {
            name: TypeUpdate(
                prices={key: entry.change for key, entry in type_entry.prices.items()},
                capacity=dict(type_entry.capacity.merged) if type_entry.capacity is not None else {},
            )
            for name, type_entry in types.items()
        }
        for pool, types in entries.items()
    }
    return OverlayEvaluation(updates, frozenset(pool.name for pool, _ in catalogs), rejected)


def _type_bases(pool: NodePool, catalog: Sequence[InstanceType]) -> list[tuple[InstanceType, Requirements]]:
    """Each type with what an overlay is matched against: its requirements, the pool's name and labels."""
    pool_requirements = Requirements.from_labels(pool.template.labels)
    pool_requirements.add(Requirement(LABEL_NODEPOOL, False, frozenset((pool.name,))))
    bases = []
    for instance_type in catalog:
        base = pool_requirements.copy()
        base.add(*instance_type.requirements)
        bases.append((instance_type, base))
    return bases


def _matches(
    overlay: NodeOverlay, bases: Sequence[tuple[NodePool, list[tuple[InstanceType, Requirements]]]]
) -> list[_Match]:
    requirements = overlay.spec.requirement_set()
    zone, capacity_type = requirements.get(LABEL_ZONE), requirements.get(LABEL_CAPACITY_TYPE)
    matches = []
    for pool, types in bases:
        for instance_type, base in types:
            if base.compatible(requirements, allowed_undefined=frozenset()) is not None:
                continue
            offerings = tuple(
                (offering.zone, offering.capacity_type)
                for offering in instance_type.offerings
                if zone.has(offering.zone) and capacity_type.has(offering.capacity_type)
            )
            if offerings:
                matches.append(_Match(pool.name, instance_type.name, offerings))
    return matches


def _conflicts(overlay: NodeOverlay, entries: Mapping[str, Mapping[str, _TypeEntry]], match: _Match) -> bool:
    entry = entries.get(match.pool, {}).get(match.instance_type)
    if entry is None:
        return False
    weight = overlay.weight
    if overlay.spec.price_change is not None:
        for key in match.offerings:
            taken = entry.prices.get(key)
            if taken is not None and taken.last_weight == weight:
                return True
    capacity = overlay.spec.capacity
    if capacity is not None and entry.capacity is not None and entry.capacity.last_weight == weight:
        return any(resource in entry.capacity.last_resources for resource in capacity)
    return False


def _record(overlay: NodeOverlay, entry: _TypeEntry, match: _Match) -> None:
    weight = overlay.weight
    change = overlay.spec.price_change
    if change is not None:
        for key in match.offerings:
            taken = entry.prices.get(key)
            if taken is None:
                entry.prices[key] = _PriceEntry(change, weight)
            else:
                taken.last_weight = weight  # a heavier overlay set it; this one is the last taken
    capacity = overlay.spec.capacity
    if capacity is not None:
        if entry.capacity is None:
            entry.capacity = _CapacityEntry(dict(capacity), frozenset(capacity), weight)
        else:
            for resource, amount in capacity.items():
                entry.capacity.merged.setdefault(resource, amount)
            entry.capacity.last_resources = frozenset(capacity)
            entry.capacity.last_weight = weight


def apply_updates(catalog: Sequence[InstanceType], updates: Mapping[str, TypeUpdate]) -> list[InstanceType]:
    """``catalog`` with ``updates`` made: types nothing changes are the same objects."""
    return [_applied(instance_type, updates.get(instance_type.name)) for instance_type in catalog]


def _applied(instance_type: InstanceType, update: TypeUpdate | None) -> InstanceType:
    if update is None:
        return instance_type
    changes: dict[str, object] = {}
    if update.capacity:
        overhead = instance_type.overhead.total()
        changes["capacity"] = {**instance_type.capacity, **update.capacity}
        changes["allocatable"] = {
            **instance_type.allocatable,
            **{name: max(0, amount - overhead.get(name, 0)) for name, amount in update.capacity.items()},
        }
        changes["capacity_overlaid"] = True
    if update.prices:
        changes["offerings"] = tuple(_priced(offering, update.prices) for offering in instance_type.offerings)
    return dataclasses.replace(instance_type, **changes) if changes else instance_type  # type: ignore[arg-type]


def _priced(offering: Offering, prices: Mapping[OfferingKey, str]) -> Offering:
    change = prices.get((offering.zone, offering.capacity_type))
    if change is None:
        return offering
    return dataclasses.replace(offering, price=adjusted_price(offering.price, change), price_overlaid=True)
