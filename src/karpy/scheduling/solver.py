"""Where pending pods go: existing capacity first, then new NodeClaims.

This is the decision core of provisioning and a pure function: a snapshot in,
a :class:`Plan` out. No client, no clock, no cloud.

The algorithm is first-fit decreasing over flexible bins, the same shape as
Karpenter's scheduler:

1. Pods are taken largest first (CPU, then memory, then name, so the plan is
   deterministic).
2. Each pod tries the existing nodes and the NodeClaims already in flight,
   in name order, and takes the first one whose labels, taints and free
   resources admit it.
3. Otherwise it tries the new NodeClaims opened so far in this plan. A new
   NodeClaim is a *bin of instance-type options*: it keeps every instance
   type of its NodePool that is compatible with its pods' requirements, is
   offered somewhere its requirements allow, and still fits the summed
   requests plus the DaemonSet overhead. A pod joins a bin if at least one
   option survives the join.
4. Otherwise it opens a bin in the first NodePool, by descending weight, that
   it tolerates, is compatible with, and whose limits leave room (counting
   the largest option of every bin already opened, as Karpenter does, so a
   limit is never exceeded whatever type the cloud picks).

Each bin becomes one NodeClaim whose requirements list its options, cheapest
first and at most 60, so the cloud provider can still choose by price and
capacity; the plan's price for it is the cheapest available offering.

Pods that fit nowhere get a reason a human can act on, per NodePool.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from karpy.api.core import Pod
from karpy.api.instancetype import InstanceType
from karpy.api.nodepool import NodePool
from karpy.api.quantity import ResourceAmounts, add_amounts, exceeded_resources, fits, format_amount
from karpy.api.requirements import LABEL_INSTANCE_TYPE, LABEL_NODEPOOL, Requirement, Requirements
from karpy.api.taints import UNREGISTERED_TAINT_KEY, Taint, untolerated

MAX_INSTANCE_TYPES = 60
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


@dataclass(frozen=True, slots=True)
class NodePoolCapacity:
    """What one NodePool can launch, as the provisioner sees it right now."""

    nodepool: NodePool
    instance_types: Sequence[InstanceType]
    daemon_overhead: ResourceAmounts = field(default_factory=dict)
    # limits minus the capacity of the pool's existing NodeClaims; None = unlimited.
    remaining: ResourceAmounts | None = None


@dataclass(slots=True)
class NewNodeClaim:
    """A NodeClaim the plan asks for: a NodePool, its options, and the pods it is for."""

    nodepool: str
    requirements: Requirements
    instance_types: list[InstanceType]
    pods: list[Pod]
    requests: ResourceAmounts
    daemon_overhead: ResourceAmounts

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


def pod_requests(pod: Pod) -> ResourceAmounts:
    requests = dict(pod.spec.requests)
    requests[POD_RESOURCE] = requests.get(POD_RESOURCE, 0) + 1
    return requests


def _sort_key(pod: Pod) -> tuple[int, int, str]:
    requests = pod.spec.requests
    return (-requests.get("cpu", 0), -requests.get("memory", 0), pod.key)


@dataclass(slots=True)
class _Bin:
    pool: NodePoolCapacity
    requirements: Requirements
    options: list[InstanceType]
    pods: list[Pod]
    requests: ResourceAmounts
    reserved: ResourceAmounts


def _viable_options(
    options: Sequence[InstanceType], requirements: Requirements, requests: ResourceAmounts
) -> list[InstanceType]:
    return [
        instance_type
        for instance_type in options
        if instance_type.requirements.intersects(requirements) is None
        and fits(requests, instance_type.allocatable)
        and instance_type.available_offerings(requirements)
    ]


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


def _within(reserved: ResourceAmounts, remaining: ResourceAmounts | None) -> bool:
    if remaining is None:
        return True
    return all(reserved.get(resource, 0) <= limit for resource, limit in remaining.items())


class _Scheduler:
    def __init__(
        self,
        existing: Sequence[ExistingCapacity],
        pools: Sequence[NodePoolCapacity],
    ) -> None:
        self.existing = sorted(existing, key=lambda capacity: capacity.name)
        self.available = {capacity.name: dict(capacity.available) for capacity in self.existing}
        self.pools = sorted(pools, key=lambda pool: (-(pool.nodepool.weight or 0), pool.nodepool.name))
        self.pool_requirements = {pool.nodepool.name: self._pool_requirements(pool) for pool in self.pools}
        self.bins: list[_Bin] = []

    @staticmethod
    def _pool_requirements(pool: NodePoolCapacity) -> Requirements:
        requirements = pool.nodepool.template.requirement_set()
        requirements.add(Requirement.from_operator(LABEL_NODEPOOL, "In", (pool.nodepool.name,)))
        return requirements

    def place(self, pod: Pod, plan: Plan) -> None:
        requests = pod_requests(pod)
        alternatives = pod.spec.node_requirements()
        if self._place_existing(pod, requests, alternatives, plan):
            return
        if self._place_in_bin(pod, requests, alternatives):
            return
        reasons: list[str] = []
        for pool in self.pools:
            reason = self._open_bin(pool, pod, requests, alternatives)
            if reason is None:
                return
            reasons.append(f"NodePool {pool.nodepool.name}: {reason}")
        plan.unschedulable[pod.key] = "; ".join(reasons) if reasons else "no NodePool exists"

    def _place_existing(
        self,
        pod: Pod,
        requests: ResourceAmounts,
        alternatives: Sequence[Requirements],
        plan: Plan,
    ) -> bool:
        for capacity in self.existing:
            available = self.available[capacity.name]
            if not fits(requests, available):
                continue
            taints = [
                taint
                for taint in capacity.taints
                if taint.key != UNREGISTERED_TAINT_KEY and taint not in capacity.ephemeral_taints
            ]
            if untolerated(taints, pod.spec.tolerations) is not None:
                continue
            if not any(capacity.requirements.compatible(option) is None for option in alternatives):
                continue
            for resource, amount in requests.items():
                available[resource] = available.get(resource, 0) - amount
            plan.existing[pod.key] = capacity.name
            return True
        return False

    def _place_in_bin(
        self, pod: Pod, requests: ResourceAmounts, alternatives: Sequence[Requirements]
    ) -> bool:
        for candidate in self.bins:
            if untolerated(candidate.pool.nodepool.template.taints, pod.spec.tolerations) is not None:
                continue
            for option in alternatives:
                if candidate.requirements.compatible(option) is not None:
                    continue
                merged = candidate.requirements.intersection(option)
                total = add_amounts(candidate.requests, requests)
                options = _viable_options(
                    candidate.options, merged, add_amounts(total, candidate.pool.daemon_overhead)
                )
                if not options:
                    continue
                reserved = max_capacity(options)
                elsewhere = self._reserved_in_pool(candidate.pool, excluding=candidate)
                if not _within(add_amounts(elsewhere, reserved), candidate.pool.remaining):
                    continue
                candidate.requirements = merged
                candidate.options = options
                candidate.pods.append(pod)
                candidate.requests = total
                candidate.reserved = reserved
                return True
        return False

    def _open_bin(
        self,
        pool: NodePoolCapacity,
        pod: Pod,
        requests: ResourceAmounts,
        alternatives: Sequence[Requirements],
    ) -> str | None:
        """Open a bin for ``pod`` in ``pool``, or say why it cannot be done."""
        taint = untolerated(pool.nodepool.template.taints, pod.spec.tolerations)
        if taint is not None:
            return f"the pod does not tolerate taint {taint}"
        base = self.pool_requirements[pool.nodepool.name]
        reason = "incompatible requirements"
        for option in alternatives:
            incompatible = base.compatible(option)
            if incompatible is not None:
                reason = f"incompatible requirements: {incompatible}"
                continue
            merged = base.intersection(option)
            compatible = [t for t in pool.instance_types if t.requirements.intersects(merged) is None]
            if not compatible:
                reason = f"no instance type satisfies {_describe(option) or 'the pool requirements'}"
                continue
            offered = [t for t in compatible if t.available_offerings(merged)]
            if not offered:
                reason = "no available offering (zone and capacity type) for the compatible instance types"
                continue
            needed = add_amounts(requests, pool.daemon_overhead)
            options = [t for t in offered if fits(needed, t.allocatable)]
            if not options:
                largest = max(
                    offered, key=lambda t: (t.allocatable.get("cpu", 0), t.allocatable.get("memory", 0))
                )
                short = exceeded_resources(needed, largest.allocatable)
                reason = (
                    "no instance type has room for the pod's requests "
                    + _format_resources(requests, short)
                    + f" (largest option {largest.name})"
                )
                continue
            if pool.remaining is not None:
                reserved_elsewhere = self._reserved_in_pool(pool)
                within = [
                    t
                    for t in options
                    if _within(add_amounts(reserved_elsewhere, max_capacity([t])), pool.remaining)
                ]
                if not within:
                    smallest = add_amounts(
                        reserved_elsewhere, max_capacity([min(options, key=_capacity_key)])
                    )
                    over = sorted(
                        resource
                        for resource, limit in pool.remaining.items()
                        if smallest.get(resource, 0) > limit
                    )
                    reason = f"NodePool {pool.nodepool.name} is at its {', '.join(over) or 'resource'} limit"
                    continue
                options = within
            self.bins.append(_Bin(pool, merged, options, [pod], requests, max_capacity(options)))
            return None
        return reason

    def _reserved_in_pool(self, pool: NodePoolCapacity, excluding: _Bin | None = None) -> ResourceAmounts:
        """What the bins opened in ``pool`` so far may add to its usage, at most."""
        total: ResourceAmounts = {}
        for candidate in self.bins:
            if candidate.pool is pool and candidate is not excluding:
                total = add_amounts(total, candidate.reserved)
        return total


def _capacity_key(instance_type: InstanceType) -> tuple[int, int]:
    return (instance_type.capacity.get("cpu", 0), instance_type.capacity.get("memory", 0))


def _describe(requirements: Requirements) -> str:
    return ", ".join(str(requirement) for requirement in requirements)


def _format_resources(requests: Mapping[str, int], names: Sequence[str]) -> str:
    shown = names or sorted(requests)
    return "(" + ", ".join(f"{name} {format_amount(name, requests.get(name, 0))}" for name in shown) + ")"


def _finish(candidate: _Bin) -> NewNodeClaim:
    requirements = candidate.requirements
    ranked = sorted(
        candidate.options,
        key=lambda instance_type: (
            min(
                (offering.price for offering in instance_type.available_offerings(requirements)), default=0.0
            ),
            instance_type.name,
        ),
    )[:MAX_INSTANCE_TYPES]
    requirements = requirements.copy()
    requirements.add(Requirement.from_operator(LABEL_INSTANCE_TYPE, "In", [t.name for t in ranked]))
    return NewNodeClaim(
        nodepool=candidate.pool.nodepool.name,
        requirements=requirements,
        instance_types=ranked,
        pods=candidate.pods,
        requests=add_amounts(candidate.requests, candidate.pool.daemon_overhead),
        daemon_overhead=dict(candidate.pool.daemon_overhead),
    )


def solve(
    pods: Sequence[Pod],
    existing: Sequence[ExistingCapacity],
    pools: Sequence[NodePoolCapacity],
) -> Plan:
    """Place ``pods`` on ``existing`` capacity or on new NodeClaims from ``pools``."""
    plan = Plan()
    scheduler = _Scheduler(existing, pools)
    for pod in sorted(pods, key=_sort_key):
        scheduler.place(pod, plan)
    plan.new_nodeclaims = [_finish(candidate) for candidate in scheduler.bins]
    return plan
