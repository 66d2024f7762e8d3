"""Node class drift: whether a node is still what its node class asks for, and why not.

The rule of Karpenter's AWS provider, shared by every karpy cloud (AWS, kwok
and the simulator's), checked in its order, the first that holds named:

1. ``NodeClassDrift``: the NodeClaim's node class hash annotation differs from
   the class' hash now (:mod:`karpy.api.nodeclass_hash`). A NodeClaim without
   the annotation (launched before the hash existed) or with another hash
   version (computed another way) is not drifted by it: the hash controller
   re-annotates it instead.
2. ``AMIDrift``: the instance's AMI is not among the class' resolved AMIs
   that serve its instance type.
3. ``SecurityGroupDrift``: the instance's security groups are not exactly
   the class' resolved ones.
4. ``SubnetDrift``: the instance's subnet is not among the class' resolved
   subnets.
5. ``CapacityReservationDrift``: the instance runs in a capacity reservation
   the class no longer selects (not in ``status.capacityReservations``). Read
   from the instance, not from offerings, since a reserved instance may fall
   back to on-demand (Karpenter's reason). Not checked with the
   ReservedCapacity gate off.

What is unknown decides nothing: a class that resolved no AMIs, subnets or
security groups (yet), or an instance whose network could not be read,
drifts by none of the dynamic checks, as Karpenter reports no drift then.
Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from karpy.api.nodeclass_hash import NodeClassHash

NODECLASS_DRIFT = "NodeClassDrift"
AMI_DRIFT = "AMIDrift"
SECURITY_GROUP_DRIFT = "SecurityGroupDrift"
SUBNET_DRIFT = "SubnetDrift"
CAPACITY_RESERVATION_DRIFT = "CapacityReservationDrift"
NODECLASS_DRIFT_REASONS = (
    NODECLASS_DRIFT,
    AMI_DRIFT,
    SECURITY_GROUP_DRIFT,
    SUBNET_DRIFT,
    CAPACITY_RESERVATION_DRIFT,
)


@dataclass(frozen=True, slots=True)
class LaunchedWith:
    """What an instance runs with: AMI, subnet, security groups, reservation ("" / None: unknown)."""

    image_id: str = ""
    subnet_id: str = ""
    security_group_ids: frozenset[str] | None = None
    # The capacity reservation it runs in now ("": none).
    capacity_reservation_id: str = ""


@dataclass(frozen=True, slots=True)
class Resolved:
    """What the node class resolves to now; an empty set is "not resolved", which decides nothing."""

    # The resolved AMIs that serve the instance's type.
    image_ids: frozenset[str] = frozenset()
    subnet_ids: frozenset[str] = frozenset()
    security_group_ids: frozenset[str] = frozenset()
    # The reservations the class selects (its status); None: not checked (the gate is off).
    capacity_reservation_ids: frozenset[str] | None = None


def static_fields_drifted(annotations: Mapping[str, str], current: NodeClassHash) -> bool:
    """Whether a NodeClaim with ``annotations`` was launched from other static fields than ``current``."""
    claimed = annotations.get(current.annotation)
    if claimed is None or annotations.get(current.version_annotation) != current.version:
        return False
    return claimed != current.value


def nodeclass_drift(
    annotations: Mapping[str, str],
    current: NodeClassHash | None,
    launched: LaunchedWith,
    resolved: Resolved,
) -> str:
    """The NodeClaim's node class drift reason (see the module docstring), "" if it has not drifted."""
    if current is not None and static_fields_drifted(annotations, current):
        return NODECLASS_DRIFT
    if resolved.image_ids and launched.image_id and launched.image_id not in resolved.image_ids:
        return AMI_DRIFT
    if (
        resolved.security_group_ids
        and launched.security_group_ids is not None
        and launched.security_group_ids != resolved.security_group_ids
    ):
        return SECURITY_GROUP_DRIFT
    if resolved.subnet_ids and launched.subnet_id and launched.subnet_id not in resolved.subnet_ids:
        return SUBNET_DRIFT
    if (
        resolved.capacity_reservation_ids is not None
        and launched.capacity_reservation_id
        and launched.capacity_reservation_id not in resolved.capacity_reservation_ids
    ):
        return CAPACITY_RESERVATION_DRIFT
    return ""


__all__ = [
    "AMI_DRIFT",
    "CAPACITY_RESERVATION_DRIFT",
    "NODECLASS_DRIFT",
    "NODECLASS_DRIFT_REASONS",
    "SECURITY_GROUP_DRIFT",
    "SUBNET_DRIFT",
    "LaunchedWith",
    "Resolved",
    "nodeclass_drift",
    "static_fields_drifted",
]
