"""Where a pod may go: existing capacity, or a new NodeClaim as a bin of instance-type options.

A :class:`Target` is either an existing node (or in-flight NodeClaim),
which has a fixed amount free, or a bin the plan opened in a NodePool: a
NodeClaim that keeps every instance type of its pool still compatible with
its pods' requirements, offered where those allow, meeting ``minValues``,
and with room for the summed requests plus the DaemonSets that would run on
that type. A pod joins a bin if at least one option survives the join, so a
bin's options only ever drop out as pods join.

A bin's options are rows of its pool's matrix
(:class:`~karpy.scheduling._matrix.PoolMatrix`), one row per instance type
and one column per resource, valued allocatable less DaemonSets, so whether
a bin's summed requests still fit each of its options, and how many more
alike pods each takes, are one vectorised comparison over all options.

Why the quick answers are safe: a bin's ``headroom`` is the most any option
had for pods when the bin opened, and options only drop out later, so a pod
that does not fit under it fits no option (:meth:`Target.has_room_for` says
no only then); and a bin of a pool with limits counts its largest option
(``reserved``), which can only shrink as options drop out, so joining a bin
never needs a limit check.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from karpy.api.core import Pod
from karpy.api.instancetype import InstanceType
from karpy.api.quantity import ResourceAmounts
from karpy.api.requirements import Requirements
from karpy.api.taints import Taint
from karpy.scheduling._model import NodePoolCapacity, max_capacity


@dataclass(slots=True)
class Target:
    """An existing node or in-flight NodeClaim (``available`` set), or a new NodeClaim of ``pool``."""

    name: str
    requirements: Requirements
    taints: tuple[Taint, ...]
    pool: NodePoolCapacity | None = None
    available: ResourceAmounts | None = None  # existing capacity

    requests: ResourceAmounts = field(default_factory=dict)
    reserved: ResourceAmounts = field(default_factory=dict)
    pods: list[Pod] = field(default_factory=list)
    host_ports: set[int] = field(default_factory=set)
    # New NodeClaims: the most any option had for pods when the bin opened (its
    # allocatable less DaemonSets), per resource. Options only drop out later, so
    # this stays an upper bound: a pod that does not fit under it fits no option,
    # which most full bins show in a few comparisons instead of a scan of options.
    headroom: ResourceAmounts = field(default_factory=dict)
    # Position among the plan's new NodeClaims (its slot in the room index).
    position: int = -1
    # The price of its cheapest option, kept with the room indexes.
    cheapest_price: float = 0.0
    # Rows of ``options`` in the pool's matrix, kept in step with them.
    rows: npt.NDArray[np.intp] = field(default_factory=lambda: np.zeros(0, dtype=np.intp))
    # The matrix's rows and prices at ``rows``, and ``requests`` as a vector: worked out
    # when first needed after an update (most bins are asked far more often than joined).
    net: npt.NDArray[np.int64] | None = None
    prices: npt.NDArray[np.float64] | None = None
    demand: npt.NDArray[np.int64] | None = None

    @property
    def is_new(self) -> bool:
        return self.available is None

    @property
    def options(self) -> list[InstanceType]:
        """A new NodeClaim's instance-type options (its ``rows`` of the pool)."""
        assert self.pool is not None
        types = self.pool.instance_types
        return [types[row] for row in self.rows.tolist()]

    def update(
        self, requirements: Requirements, rows: npt.NDArray[np.intp], requests: ResourceAmounts
    ) -> None:
        pool = self.pool
        assert pool is not None
        self.requirements = requirements
        self.rows = rows
        self.requests = requests
        self.net = self.prices = self.demand = None
        # Only a pool with limits needs to know the most this bin can add to its usage.
        self.reserved = max_capacity(self.options) if pool.remaining is not None else {}

    def has_room_for(self, requests: ResourceAmounts) -> bool:
        """False when no option can hold ``requests`` more (true may still be a no)."""
        bin_requests = self.requests
        headroom = self.headroom
        for resource, amount in requests.items():
            if amount > headroom.get(resource, 0) - bin_requests.get(resource, 0):
                return False
        return True


@dataclass(frozen=True, slots=True)
class Opening:
    """What a fresh NodeClaim for one pod starts with: options, their most room, cheapest price."""

    rows: npt.NDArray[np.intp]
    headroom: ResourceAmounts
    prices: npt.NDArray[np.float64]
    price: float
    room: tuple[int, int]
