"""A pending pod's effective zone: the one zone its constraints leave it, if they leave one.

Karpenter's ``karpenter_scheduler_pending_pods_by_effective_zone_count`` counts
the pending pods of each scheduling simulation by this value, worked out before
the simulation places anything (its ``computeEffectiveZoneFromPod``): the
intersection of three zone signals,

- the pod's own required zone (nodeSelector and its first required node
  affinity term, preferences left out),
- the zones of the persistent volumes it mounts (any of a volume's node
  affinity terms),
- the zones its topology terms on ``topology.kubernetes.io/zone`` admit it to
  given the pods already running (spread within maxSkew, affinity,
  anti-affinity),

taken from the first signal that lists zones. The value is that zone when
exactly one is left, ``flexible`` when several are (or no signal names any)
and ``none`` when none is, or the topology admits the pod nowhere.

Pure: the solver hands in what it worked out (see ``solve(effective_zones=True)``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from karpy.api.requirements import LABEL_ZONE, Operator, Requirement, Requirements

FLEXIBLE = "flexible"
NO_ZONE = "none"


def volume_zones(volume_terms: Sequence[Requirements]) -> Requirement | None:
    """The zones the pod's volumes allow (any of their terms), or None when they do not bound the zone."""
    zones: set[str] = set()
    for term in volume_terms:
        requirement = term.get(LABEL_ZONE)
        if requirement.operator() is not Operator.IN:
            return None  # one term allows any zone: the volumes do not narrow it
        zones.update(requirement.values)
    if not volume_terms:
        return None
    return Requirement(LABEL_ZONE, False, frozenset(zones))


def effective_zone(
    required: Requirements,
    volume_terms: Sequence[Requirements],
    topology_allowed: Mapping[str, frozenset[str]] | None,
) -> str:
    """The effective zone of a pod whose strict node requirements are ``required``, whose volumes'
    terms are ``volume_terms`` and whose topology admits it to ``topology_allowed`` per key (as
    :meth:`~karpy.scheduling.topology.Topology.allowed_anywhere` says before the plan: None for
    nowhere, no zone key for no zonal term)."""
    if topology_allowed is None:
        return NO_ZONE
    zone_requirement = required.get(LABEL_ZONE)
    volumes = volume_zones(volume_terms)
    spread = topology_allowed.get(LABEL_ZONE)
    if spread is not None and not spread:
        return NO_ZONE
    if not zone_requirement.complement and zone_requirement.values:
        candidates: frozenset[str] = zone_requirement.values
    elif volumes is not None:
        candidates = volumes.values
    elif spread:
        candidates = spread
    else:
        return FLEXIBLE
    matched = [
        zone
        for zone in sorted(candidates)
        if zone_requirement.has(zone)
        and (volumes is None or volumes.has(zone))
        and (spread is None or zone in spread)
    ]
    if len(matched) == 1:
        return matched[0]
    return FLEXIBLE if matched else NO_ZONE
