"""What a solve is given and what it returns: capacity, NodePools, and the plan.

A solve reads a snapshot of the cluster as two kinds of capacity:
:class:`ExistingCapacity`, the registered nodes and in-flight NodeClaims pods
may be placed on as they are, and :class:`NodePoolCapacity`, what each
NodePool may still launch (its instance types, the DaemonSets that would run
on each, what its limits leave). It returns a :class:`Plan`: the pods placed
on existing capacity, the new NodeClaims to create with the pods each is for,
the pods left pending with a reason, and the preferences given up.

Here too is the arithmetic the solver and its callers (provisioning,
consolidation, the simulator) must count alike, or a plan the solver makes
would be judged by other rules than it was made by:

- a pod's requests include one of its node's ``pods`` (:func:`pod_requests`),
  so the kubelet's pod limit is a resource like any other;
- a NodeClaim counts its largest option against its NodePool's limits, with
  ``nodes: 1`` (:func:`max_capacity`), because the cloud may launch any of
  its options;
- ``minValues`` is met when the options still offer that many distinct
  values of the key (:func:`min_values_met`);
- a NodePool launches only instance types its requirements admit
  (:func:`pool_requirements`, :func:`launchable_types`): the snapshot keeps
  only those in :attr:`NodePoolCapacity.instance_types`, once per pass, so
  each of the many solves a consolidation pass makes scans the pool's types,
  not the whole catalog.

Pure data and pure functions; :mod:`karpy.scheduling.solver` re-exports every
name, and that is where code outside the package imports them from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from karpy.api.core import Pod
from karpy.api.instancetype import InstanceType
from karpy.api.nodepool import NodePool
from karpy.api.quantity import ResourceAmounts
from karpy.api.requirements import LABEL_NODEPOOL, Requirement, Requirements
from karpy.api.taints import Taint
from karpy.scheduling._matrix import PoolMatrix
from karpy.scheduling._patterns import Pattern

POD_RESOURCE = "pods"
NODES_RESOURCE = "nodes"


@dataclass(frozen=True, slots=True)
class ExistingCapacity:
    """A registered node or an in-flight NodeClaim that pods may be placed on."""

    name: str
    nodepool: str
    requirements: Requirements
    taints: tuple[Taint, ...]
    available: ResourceAmounts
    in_flight: bool = False
    # Taints that go away by themselves (startup taints, karpenter.sh/unregistered).
    ephemeral_taints: tuple[Taint, ...] = ()
    # Pods already bound there (they count for topology and host ports).
    pods: tuple[Pod, ...] = ()


# The pattern packer's plan: its price, and each pattern with its options and summed requests.
PackedPlan = tuple[float, list[tuple[Pattern, npt.NDArray[np.intp], npt.NDArray[np.int64]]]]


@dataclass(slots=True)
class TypeMemo:
    """What solves work out from a NodePool's instance types alone, kept for the next solve.

    A consolidation pass solves once per candidate, each time for the same
    pools: the pool's matrix of types (:class:`PoolMatrix`), its types ranked
    by price under a zone and capacity-type requirement, and its types
    compatible with a requirement are the same answers every time. They
    depend only on the types (their offerings' availability and prices
    included), the DaemonSets' overhead on each, and the key they are kept
    under; so a memo belongs to one list of types and one overhead, and a
    caller makes a new one when either changes (``PoolTypesCache`` in the
    controllers does).
    """

    matrices: dict[tuple[tuple[str, ...], frozenset[Requirement]], PoolMatrix] = field(default_factory=dict)
    ranks: dict[tuple[Requirement, Requirement], npt.NDArray[np.intp]] = field(default_factory=dict)
    compatible: dict[frozenset[Requirement], tuple[list[InstanceType], list[InstanceType]]] = field(
        default_factory=dict
    )
    # Per type, whether it is compatible with a requirement and offered under it, by the requirement.
    allowed: dict[frozenset[Requirement], npt.NDArray[np.bool_]] = field(default_factory=dict)
    # The pattern packer's answers (``solver._Scheduler._pack``), by matrix, types and pod classes.
    packs: dict[tuple[object, ...], PackedPlan | None] = field(default_factory=dict)
    # Instances left per capacity reservation the types offer (``_reservations.reservation_room``).
    reservation_room: dict[str, int] | None = None


@dataclass(frozen=True, slots=True)
class NodePoolCapacity:
    """What one NodePool can launch, as the provisioner sees it right now."""

    nodepool: NodePool
    # The types the pool may launch; a type its requirements exclude is never an option
    # of its NodeClaims, so callers may leave it out (``launchable_types``).
    instance_types: Sequence[InstanceType]
    daemon_overhead: ResourceAmounts = field(default_factory=dict)
    # limits minus the capacity of the pool's existing NodeClaims; None = unlimited.
    remaining: ResourceAmounts | None = None
    # DaemonSet overhead per instance type name where it differs from daemon_overhead
    # (a DaemonSet that runs only on arm64 costs nothing on an amd64 type).
    type_overhead: Mapping[str, ResourceAmounts] = field(default_factory=dict)
    # Why the pool can launch nothing now (its node class is not ready); "" when it can.
    unavailable: str = ""
    # Answers worked out from ``instance_types`` and the overheads alone, shared with other
    # solves over the same ones; None: each solve works them out afresh.
    memo: TypeMemo | None = field(default=None, compare=False, repr=False)

    def overhead(self, instance_type: InstanceType) -> ResourceAmounts:
        return self.type_overhead.get(instance_type.name, self.daemon_overhead)


@dataclass(slots=True)
class NewNodeClaim:
    """A NodeClaim the plan asks for: a NodePool, its options, and the pods it is for."""

    nodepool: str
    requirements: Requirements
    instance_types: list[InstanceType]
    pods: list[Pod]
    requests: ResourceAmounts
    daemon_overhead: ResourceAmounts
    # MIN_VALUES_POLICY=BestEffort lowered a minValues its options could not meet.
    min_values_relaxed: bool = False

    @property
    def price(self) -> float:
        prices = [
            offering.price
            for instance_type in self.instance_types
            for offering in instance_type.available_offerings(self.requirements)
        ]
        return min(prices) if prices else 0.0


@dataclass(slots=True)
class Plan:
    existing: dict[str, str] = field(default_factory=dict)
    new_nodeclaims: list[NewNodeClaim] = field(default_factory=list)
    unschedulable: dict[str, str] = field(default_factory=dict)
    # Preferences given up for pods that were placed only after relaxing them.
    relaxed: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # The existing capacity in ``solve``'s ``stop_at`` that a pod was placed on, ending
    # the plan there: the rest of it is not worked out.
    stopped_at: str | None = None
    # Each pod's effective zone before the plan placed anything (a zone, ``flexible`` or ``none``;
    # :mod:`karpy.scheduling.zones`), when ``solve`` is asked for it.
    effective_zones: dict[str, str] = field(default_factory=dict)


def pool_requirements(nodepool: NodePool) -> Requirements:
    """What every NodeClaim of ``nodepool`` requires: its template's requirements and its name label."""
    requirements = nodepool.template.requirement_set()
    requirements.add(Requirement.from_operator(LABEL_NODEPOOL, "In", (nodepool.name,)))
    return requirements


def launchable_types(nodepool: NodePool, instance_types: Sequence[InstanceType]) -> list[InstanceType]:
    """The instance types ``nodepool``'s requirements admit, in their order.

    Safe to hand the solver instead of the whole catalog: it only ever offers
    a type compatible with the pool's requirements intersected with a pod's,
    which a type incompatible with the pool's alone never is. Karpenter too
    counts topology domains only from the types a NodePool admits.
    """
    requirements = pool_requirements(nodepool)
    return [t for t in instance_types if t.requirements.intersects(requirements) is None]


def pod_requests(pod: Pod) -> ResourceAmounts:
    requests = dict(pod.spec.requests)
    requests[POD_RESOURCE] = requests.get(POD_RESOURCE, 0) + 1
    return requests


def max_capacity(options: Sequence[InstanceType]) -> ResourceAmounts:
    """The most a NodeClaim with these options can add to its NodePool's usage.

    Includes ``nodes: 1`` so a ``nodes`` limit is counted like any resource.
    """
    result: ResourceAmounts = {}
    for instance_type in options:
        for resource, amount in instance_type.capacity.items():
            result[resource] = max(result.get(resource, 0), amount)
    if options:
        result[NODES_RESOURCE] = 1
    return result


def min_values_met(requirements: Requirements, options: Sequence[InstanceType]) -> bool:
    """Whether ``options`` offer as many distinct values as each requirement's minValues asks."""
    return min_values_shortfall(requirements, options) is None


def relaxed_min_values(requirements: Requirements, options: Sequence[InstanceType]) -> Requirements | None:
    """``requirements`` with each minValues ``options`` do not meet lowered to the values they
    offer (Karpenter's BestEffort), or None when every minValues is met."""
    relaxed: list[Requirement] = []
    for requirement in requirements:
        lowered = requirement
        if requirement.min_values is not None:
            offered = len(_offered_values(requirement, options))
            if offered < requirement.min_values:
                lowered = dataclasses.replace(requirement, min_values=offered or None)
        relaxed.append(lowered)
    if all(a is b for a, b in zip(relaxed, requirements, strict=True)):
        return None
    return Requirements(*relaxed)


def _offered_values(requirement: Requirement, options: Sequence[InstanceType]) -> set[str]:
    return {
        value
        for instance_type in options
        if (value := instance_type.requirements.get(requirement.key).any()) is not None
        and requirement.has(value)
    }


def min_values_shortfall(requirements: Requirements, options: Sequence[InstanceType]) -> str | None:
    """The first requirement whose minValues ``options`` do not meet, as a message; None if all are met."""
    for requirement in requirements:
        if requirement.min_values is None:
            continue
        values = _offered_values(requirement, options)
        if len(values) < requirement.min_values:
            return f"{requirement.key}: {len(values)} values, minValues {requirement.min_values}"
    return None
