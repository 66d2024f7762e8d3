"""What a bin becomes: a NodeClaim listing its options cheapest first, and the ranking that orders them.

Once every pod is placed, each bin becomes one NodeClaim (:func:`finish`)
whose requirements list its options, cheapest first and at most
:data:`MAX_INSTANCE_TYPES` (more only if ``minValues`` needs them), so the
cloud provider can still choose by price and capacity; the plan's price for
it is the cheapest available offering. The requests it states are its pods'
plus the DaemonSets that would run on its cheapest option.

An option's price is its cheapest available offering under the NodeClaim's
requirements, ties broken by name so the order is deterministic. Offerings
differ only by zone and capacity type, so a ranking is worked out once per
pool and pair of those two requirements, and NodeClaims of a plan, which
share a few dozen distinct option sets among thousands, have what each set
becomes worked out once too (:class:`Prices`). Both caches are keyed by
everything the answer reads, so they return what the work would.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from karpy.api.instancetype import InstanceType
from karpy.api.quantity import add_amounts
from karpy.api.requirements import (
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    LABEL_ZONE,
    Requirement,
    Requirements,
)
from karpy.api.storage import is_volume_resource
from karpy.scheduling._model import NewNodeClaim, NodePoolCapacity, min_values_met, relaxed_min_values
from karpy.scheduling._options import Target

MAX_INSTANCE_TYPES = 60


class Prices:
    """Cheapest available offering per instance type, per zone and capacity-type requirement.

    Every new NodeClaim ranks its options by price; they share a handful of
    zone and capacity-type requirements, so each price is worked out once.
    NodeClaims of a plan also share a few dozen distinct option sets among
    thousands, so what each set becomes is worked out once too.
    """

    def __init__(self) -> None:
        self._ranks: dict[tuple[int, Requirement, Requirement], npt.NDArray[np.intp]] = {}
        self._kept: dict[
            tuple[int, bytes, frozenset[Requirement]], tuple[list[InstanceType], Requirement]
        ] = {}

    def ranked(
        self, pool: NodePoolCapacity, rows: npt.NDArray[np.intp], requirements: Requirements
    ) -> npt.NDArray[np.intp]:
        """The options at ``rows`` of the pool, cheapest first (then by name), as rows."""
        zone, capacity_type = requirements.get(LABEL_ZONE), requirements.get(LABEL_CAPACITY_TYPE)
        key = (id(pool), zone, capacity_type)
        rank = self._ranks.get(key)
        if rank is None and pool.memo is not None:
            rank = pool.memo.ranks.get((zone, capacity_type))
        if rank is None:

            def price(row: int) -> tuple[float, str]:
                instance_type = pool.instance_types[row]
                offerings = instance_type.available_offerings(requirements)
                return (min((offering.price for offering in offerings), default=0.0), instance_type.name)

            order = sorted(range(len(pool.instance_types)), key=price)
            rank = np.empty(max(1, len(order)), dtype=np.intp)
            rank[np.asarray(order, dtype=np.intp)] = np.arange(len(order), dtype=np.intp)
            if pool.memo is not None:
                pool.memo.ranks[(zone, capacity_type)] = rank
        self._ranks[key] = rank
        ordered: npt.NDArray[np.intp] = rows[np.argsort(rank[rows], kind="stable")]
        return ordered

    def kept(self, target: Target) -> tuple[list[InstanceType], Requirement]:
        """The options a NodeClaim lists, cheapest first, and its instance-type requirement."""
        pool = target.pool
        assert pool is not None
        requirements = target.requirements
        key = (id(pool), target.rows.tobytes(), requirements.identity())
        cached = self._kept.get(key)
        if cached is None:
            ranked = self.ranked(pool, target.rows, requirements)
            types = pool.instance_types
            kept = [types[row] for row in ranked[:MAX_INSTANCE_TYPES].tolist()]
            if len(ranked) > MAX_INSTANCE_TYPES and not min_values_met(requirements, kept):
                # minValues asks for more variety than the 60 cheapest give: keep the fewest that do.
                every = [types[row] for row in ranked.tolist()]
                for end in range(MAX_INSTANCE_TYPES + 1, len(every) + 1):
                    kept = every[:end]
                    if min_values_met(requirements, kept):
                        break
            previous = (
                requirements.get(LABEL_INSTANCE_TYPE).min_values
                if LABEL_INSTANCE_TYPE in requirements
                else None
            )
            names = [t.name for t in kept]
            if previous is not None and previous > len(names):
                previous = len(names)  # BestEffort's NodeClaim, whose minValues ``finish`` lowers
            cached = (kept, Requirement.from_operator(LABEL_INSTANCE_TYPE, "In", names, previous))
            self._kept[key] = cached
        return cached


def finish(target: Target, prices: Prices, *, relax_min_values: bool = False) -> NewNodeClaim:
    """The NodeClaim ``target`` becomes: its requirements with the options it lists, its pods.

    ``relax_min_values`` (MIN_VALUES_POLICY=BestEffort) lowers each minValues
    the options listed do not meet to what they offer.
    """
    pool = target.pool
    assert pool is not None
    kept, instance_types = prices.kept(target)
    requirements = target.requirements.copy()
    relaxed = relaxed_min_values(requirements, kept) if relax_min_values else None
    if relaxed is not None:
        requirements = relaxed
        # The listed options carry the minValues before it was lowered: list them again with
        # the lowered one (an intersection keeps the larger of the two).
        lowered = None
        if LABEL_INSTANCE_TYPE in requirements:
            lowered = requirements.get(LABEL_INSTANCE_TYPE).min_values
        instance_types = Requirement.from_operator(LABEL_INSTANCE_TYPE, "In", [t.name for t in kept], lowered)
    requirements.add(instance_types)
    overhead = pool.overhead(kept[0])
    return NewNodeClaim(
        nodepool=pool.nodepool.name,
        requirements=requirements,
        instance_types=list(kept),
        pods=target.pods,
        # Attached volumes are counted as a resource while planning, but are none of the node's.
        requests={
            resource: amount
            for resource, amount in add_amounts(target.requests, overhead).items()
            if not is_volume_resource(resource)
        },
        daemon_overhead=dict(overhead),
        min_values_relaxed=relaxed is not None,
    )
