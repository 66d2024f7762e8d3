"""Where pending pods go: existing capacity first, then new NodeClaims.

This is the decision core of provisioning and a pure function: a snapshot in,
a :class:`Plan` out. No client, no clock, no cloud.

The algorithm is first-fit decreasing over flexible bins, the shape of
Karpenter's scheduler:

1. Pods are taken largest first (CPU, then memory, then name, so the plan is
   deterministic whatever the input order).
2. Each pod tries the existing nodes and the NodeClaims already in flight,
   in name order, and takes the first whose labels, taints, free resources,
   host ports and topology admit it.
3. Otherwise it tries the new NodeClaims opened so far in this plan. A new
   NodeClaim is a *bin of instance-type options*: it keeps every instance
   type of its NodePool that is compatible with its pods' requirements, is
   offered somewhere its requirements allow, keeps ``minValues``, and still
   fits the summed requests plus the DaemonSets that would run on that type.
   A pod joins a bin if at least one option survives the join.
4. Otherwise it opens a bin in the first NodePool, by descending weight, that
   it tolerates, is compatible with, and whose limits leave room (counting
   the largest option of every bin already opened, as Karpenter does, so a
   limit is never exceeded whatever type the cloud picks).
5. A pod that fits nowhere gives up one preference (see
   :mod:`karpy.scheduling.constraints`) and tries again; when none is left it
   stays pending with a reason per NodePool.

Topology spread and pod (anti-)affinity are checked by
:class:`~karpy.scheduling.topology.Topology`; when a bin's zone is still open
and a constraint allows only some zones, the bin's requirements are narrowed
to the least crowded allowed zone.

Each bin becomes one NodeClaim whose requirements list its options, cheapest
first and at most 60 (more only if ``minValues`` needs them), so the cloud
provider can still choose by price and capacity; the plan's price for it is
the cheapest available offering.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from karpy.api.core import Pod
from karpy.api.instancetype import InstanceType
from karpy.api.nodepool import NodePool
from karpy.api.quantity import ResourceAmounts, add_amounts, exceeded_resources, fits, format_amount
from karpy.api.requirements import (
    LABEL_HOSTNAME,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    Requirement,
    Requirements,
)
from karpy.api.taints import PREFER_NO_SCHEDULE, UNREGISTERED_TAINT_KEY, Taint
from karpy.scheduling.constraints import ConstraintError, PodConstraints, pod_constraints
from karpy.scheduling.topology import Admission, Domain, Topology

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
    # Pods already bound there (they count for topology and host ports).
    pods: tuple[Pod, ...] = ()


@dataclass(frozen=True, slots=True)
class NodePoolCapacity:
    """What one NodePool can launch, as the provisioner sees it right now."""

    nodepool: NodePool
    instance_types: Sequence[InstanceType]
    daemon_overhead: ResourceAmounts = field(default_factory=dict)
    # limits minus the capacity of the pool's existing NodeClaims; None = unlimited.
    remaining: ResourceAmounts | None = None
    # DaemonSet overhead per instance type name where it differs from daemon_overhead
    # (a DaemonSet that runs only on arm64 costs nothing on an amd64 type).
    type_overhead: Mapping[str, ResourceAmounts] = field(default_factory=dict)

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


def pod_requests(pod: Pod) -> ResourceAmounts:
    requests = dict(pod.spec.requests)
    requests[POD_RESOURCE] = requests.get(POD_RESOURCE, 0) + 1
    return requests


def _sort_key(pod: Pod) -> tuple[int, int, str]:
    requests = pod.spec.requests
    return (-requests.get("cpu", 0), -requests.get("memory", 0), pod.key)


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


def _blocking_taint(taints: Iterable[Taint], constraints: PodConstraints) -> Taint | None:
    """The first taint the pod does not tolerate; PreferNoSchedule counts until relaxed."""
    tolerations = constraints.effective_tolerations()
    for taint in taints:
        if taint.effect == PREFER_NO_SCHEDULE and constraints.tolerate_prefer_no_schedule:
            continue
        if not any(toleration.tolerates(taint) for toleration in tolerations):
            return taint
    return None


def _min_values_met(requirements: Requirements, options: Sequence[InstanceType]) -> bool:
    for requirement in requirements:
        if requirement.min_values is None:
            continue
        values = {
            value
            for instance_type in options
            if (value := instance_type.requirements.get(requirement.key).any()) is not None
            and requirement.has(value)
        }
        if len(values) < requirement.min_values:
            return False
    return True


@dataclass(slots=True)
class _Target:
    name: str
    requirements: Requirements
    taints: tuple[Taint, ...]
    pool: NodePoolCapacity | None = None
    available: ResourceAmounts | None = None  # existing capacity
    options: list[InstanceType] = field(default_factory=list)  # new NodeClaims
    requests: ResourceAmounts = field(default_factory=dict)
    reserved: ResourceAmounts = field(default_factory=dict)
    pods: list[Pod] = field(default_factory=list)
    host_ports: set[int] = field(default_factory=set)

    @property
    def is_new(self) -> bool:
        return self.available is None


class _Scheduler:
    def __init__(self, existing: Sequence[ExistingCapacity], pools: Sequence[NodePoolCapacity]) -> None:
        self.pools = sorted(pools, key=lambda pool: (-(pool.nodepool.weight or 0), pool.nodepool.name))
        self.pool_requirements = {pool.nodepool.name: self._pool_requirements(pool) for pool in self.pools}
        universe: dict[str, set[str]] = {}
        for pool in self.pools:
            base = self.pool_requirements[pool.nodepool.name]
            for instance_type in pool.instance_types:
                for requirement in instance_type.requirements:
                    if requirement.complement or not base.get(requirement.key).has_intersection(requirement):
                        continue
                    universe.setdefault(requirement.key, set()).update(
                        value for value in requirement.values if base.get(requirement.key).has(value)
                    )
        self.topology = Topology(universe)
        self.existing: list[_Target] = []
        for capacity in sorted(existing, key=lambda capacity: capacity.name):
            blocking = tuple(
                taint
                for taint in capacity.taints
                if taint.key != UNREGISTERED_TAINT_KEY and taint not in capacity.ephemeral_taints
            )
            target = _Target(
                capacity.name, capacity.requirements, blocking, available=dict(capacity.available)
            )
            self.existing.append(target)
            domains = {
                requirement.key: value
                for requirement in capacity.requirements
                if not requirement.complement and len(requirement.values) == 1
                for value in requirement.values
            }
            domains.setdefault(LABEL_HOSTNAME, capacity.name)
            self.topology.add_target(capacity.name, domains)
            for pod in capacity.pods:
                for port in pod.spec.host_ports:
                    target.host_ports.add(port)
                try:
                    anti = pod_constraints(pod).anti_affinity
                except ConstraintError:
                    anti = ()
                self.topology.add_existing_pod(pod, capacity.name, anti)
        self.bins: list[_Target] = []

    @staticmethod
    def _pool_requirements(pool: NodePoolCapacity) -> Requirements:
        requirements = pool.nodepool.template.requirement_set()
        requirements.add(Requirement.from_operator(LABEL_NODEPOOL, "In", (pool.nodepool.name,)))
        return requirements

    # -- one pod ---------------------------------------------------------------

    def place(self, pod: Pod, plan: Plan) -> None:
        try:
            constraints: PodConstraints | None = pod_constraints(pod)
        except ConstraintError as error:
            plan.unschedulable[pod.key] = f"invalid pod constraint: {error}"
            return
        requests = pod_requests(pod)
        reasons: list[str] = []
        while constraints is not None:
            reasons = []
            if self._try(constraints, requests, plan, reasons):
                if constraints.relaxed:
                    plan.relaxed[pod.key] = constraints.relaxed
                return
            constraints = constraints.relax()
        plan.unschedulable[pod.key] = "; ".join(reasons) if reasons else "no NodePool exists"

    def _try(
        self, constraints: PodConstraints, requests: ResourceAmounts, plan: Plan, reasons: list[str]
    ) -> bool:
        for target in self.existing:
            if self._join_existing(constraints, requests, target):
                plan.existing[constraints.pod.key] = target.name
                return True
        for target in self.bins:
            if self._join_bin(constraints, requests, target):
                return True
        for pool in self.pools:
            reason = self._open_bin(pool, constraints, requests)
            if reason is None:
                return True
            reasons.append(f"NodePool {pool.nodepool.name}: {reason}")
        return False

    def _domains(self, target: _Target, requirements: Requirements, keys: Iterable[str]) -> dict[str, Domain]:
        """Each key's domain on ``target``: known, open (a bin's possible values) or absent."""
        domains: dict[str, Domain] = {}
        for key in keys:
            if key == LABEL_HOSTNAME:
                domains[key] = target.name
                continue
            requirement = requirements.get(key) if key in requirements else None
            if requirement is None:
                domains[key] = frozenset(self.topology.universe.get(key, ())) if target.is_new else None
                continue
            possible = frozenset(v for v in self.topology.universe.get(key, ()) if requirement.has(v))
            if not requirement.complement:
                possible = frozenset(v for v in requirement.values if requirement.has(v))
            domains[key] = next(iter(possible)) if len(possible) == 1 and not target.is_new else possible
        return domains

    @staticmethod
    def _topology_keys(constraints: PodConstraints) -> set[str]:
        keys = {spread.topology_key for spread in constraints.all_spread()}
        keys.update(term.topology_key for term in constraints.all_affinity())
        keys.update(term.topology_key for term in constraints.all_anti_affinity())
        return keys

    def _admit(self, constraints: PodConstraints, target: _Target, requirements: Requirements) -> Admission:
        keys = self._topology_keys(constraints)
        keys.update(self.topology.inverse_keys(constraints))
        if not keys:
            return Admission()
        return self.topology.admit(constraints, target.name, self._domains(target, requirements, keys))

    def _join_existing(self, constraints: PodConstraints, requests: ResourceAmounts, target: _Target) -> bool:
        assert target.available is not None
        if not fits(requests, target.available):
            return False
        if constraints.host_ports and target.host_ports.intersection(constraints.host_ports):
            return False
        if _blocking_taint(target.taints, constraints) is not None:
            return False
        if not any(target.requirements.compatible(option) is None for option in constraints.node_options()):
            return False
        admission = self._admit(constraints, target, target.requirements)
        if not admission.ok:
            return False
        admission_keys = admission.allowed
        for resource, amount in requests.items():
            target.available[resource] = target.available.get(resource, 0) - amount
        self._commit(constraints, target, admission_keys)
        return True

    def _join_bin(self, constraints: PodConstraints, requests: ResourceAmounts, target: _Target) -> bool:
        pool = target.pool
        assert pool is not None
        if constraints.host_ports and target.host_ports.intersection(constraints.host_ports):
            return False
        if _blocking_taint(pool.nodepool.template.taints, constraints) is not None:
            return False
        for option in constraints.node_options():
            if target.requirements.compatible(option) is not None:
                continue
            merged = target.requirements.intersection(option)
            admission = self._admit(constraints, target, merged)
            if not admission.ok:
                continue
            total = add_amounts(target.requests, requests)
            for narrowed in self._narrowings(constraints, merged, admission):
                options = self._viable(pool, target.options, narrowed, total)
                if not options:
                    continue
                # Options only ever shrink as pods join, so the bin's largest option,
                # and with it the pool's reserved capacity, cannot grow: no limit check.
                target.requirements = narrowed
                target.options = options
                target.requests = total
                target.reserved = max_capacity(options)
                self._commit(constraints, target, admission.allowed)
                return True
        return False

    def _narrowings(
        self, constraints: PodConstraints, requirements: Requirements, admission: Admission
    ) -> list[Requirements]:
        """Ways to commit an open bin to the domains a constraint allows, best first."""
        if not admission.allowed:
            return [requirements]
        open_keys = [
            key
            for key, allowed in sorted(admission.allowed.items())
            if key != LABEL_HOSTNAME and not (key in requirements and requirements.get(key).values == allowed)
        ]
        if not open_keys:
            return [requirements]
        # Narrow one key at a time; with several keys, the first choice of each.
        narrowed = requirements.copy()
        candidates: list[Requirements] = []
        for index, key in enumerate(open_keys):
            allowed = admission.allowed[key]
            ordered = [self.topology.least_crowded(constraints, key, allowed)]
            ordered += [value for value in sorted(allowed) if value not in ordered]
            if index == len(open_keys) - 1:
                for value in ordered:
                    attempt = narrowed.copy()
                    attempt.add(Requirement.from_operator(key, "In", (value,)))
                    candidates.append(attempt)
            else:
                narrowed.add(Requirement.from_operator(key, "In", (ordered[0],)))
        return candidates

    def _commit(self, constraints: PodConstraints, target: _Target, keys: Iterable[str]) -> None:
        # Tell the topology every domain the target is now committed to, whether this
        # pod narrowed it or the requirements fixed it from the start.
        for key in keys:
            if key == LABEL_HOSTNAME or key not in target.requirements:
                continue
            requirement = target.requirements.get(key)
            if not requirement.complement and len(requirement.values) == 1:
                self.topology.narrow(target.name, key, next(iter(requirement.values)))
        target.pods.append(constraints.pod)
        target.host_ports.update(constraints.host_ports)
        self.topology.place(constraints, target.name)

    @staticmethod
    def _viable(
        pool: NodePoolCapacity,
        options: Sequence[InstanceType],
        requirements: Requirements,
        requests: ResourceAmounts,
    ) -> list[InstanceType]:
        viable = [
            instance_type
            for instance_type in options
            if fits(add_amounts(requests, pool.overhead(instance_type)), instance_type.allocatable)
            and instance_type.requirements.intersects(requirements) is None
            and instance_type.available_offerings(requirements)
        ]
        return viable if _min_values_met(requirements, viable) else []

    def _reserved_in_pool(self, pool: NodePoolCapacity) -> ResourceAmounts:
        """What the bins opened in ``pool`` so far may add to its usage, at most."""
        total: ResourceAmounts = {}
        for candidate in self.bins:
            if candidate.pool is pool:
                total = add_amounts(total, candidate.reserved)
        return total

    def _open_bin(
        self, pool: NodePoolCapacity, constraints: PodConstraints, requests: ResourceAmounts
    ) -> str | None:
        """Open a bin for the pod in ``pool``, or say why it cannot be done."""
        taint = _blocking_taint(pool.nodepool.template.taints, constraints)
        if taint is not None:
            return f"the pod does not tolerate taint {taint}"
        base = self.pool_requirements[pool.nodepool.name]
        reason = "incompatible requirements"
        target = _Target(
            f"{pool.nodepool.name}/new-{len(self.bins)}", base, pool.nodepool.template.taints, pool=pool
        )
        for option in constraints.node_options():
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
            fitting = [t for t in offered if fits(add_amounts(requests, pool.overhead(t)), t.allocatable)]
            if not fitting:
                largest = max(offered, key=_capacity_key)
                short = exceeded_resources(add_amounts(requests, pool.overhead(largest)), largest.allocatable)
                reason = (
                    "no instance type has room for the pod's requests "
                    + _format_resources(requests, short)
                    + f" (largest option {largest.name})"
                )
                continue
            admission = self._admit(constraints, target, merged)
            if not admission.ok:
                reason = admission.reason
                continue
            reserved_elsewhere = self._reserved_in_pool(pool)
            for narrowed in self._narrowings(constraints, merged, admission):
                options = self._viable(pool, fitting, narrowed, requests)
                if not options:
                    reason = "no instance type is offered in the domain its topology constraints allow"
                    continue
                if pool.remaining is not None:
                    within = [
                        t
                        for t in options
                        if _within(add_amounts(reserved_elsewhere, max_capacity([t])), pool.remaining)
                    ]
                    if not within:
                        smallest = add_amounts(
                            reserved_elsewhere, max_capacity([min(options, key=_capacity_key)])
                        )
                        over = sorted(r for r, limit in pool.remaining.items() if smallest.get(r, 0) > limit)
                        reason = (
                            f"NodePool {pool.nodepool.name} is at its {', '.join(over) or 'resource'} limit"
                        )
                        continue
                    options = within
                    if not _min_values_met(narrowed, options):
                        reason = "the instance types within the NodePool's limits do not satisfy minValues"
                        continue
                target.requirements = narrowed
                target.options = options
                target.requests = dict(requests)
                target.reserved = max_capacity(options)
                self.bins.append(target)
                self.topology.add_target(target.name, {LABEL_HOSTNAME: target.name})
                self._commit(constraints, target, admission.allowed)
                return None
        return reason


def _capacity_key(instance_type: InstanceType) -> tuple[int, int]:
    return (instance_type.allocatable.get("cpu", 0), instance_type.allocatable.get("memory", 0))


def _describe(requirements: Requirements) -> str:
    return ", ".join(str(requirement) for requirement in requirements)


def _format_resources(requests: Mapping[str, int], names: Sequence[str]) -> str:
    shown = names or sorted(requests)
    return "(" + ", ".join(f"{name} {format_amount(name, requests.get(name, 0))}" for name in shown) + ")"


def _cheapest_price(instance_type: InstanceType, requirements: Requirements) -> float:
    return min((offering.price for offering in instance_type.available_offerings(requirements)), default=0.0)


def _finish(target: _Target) -> NewNodeClaim:
    pool = target.pool
    assert pool is not None
    requirements = target.requirements
    ranked = sorted(target.options, key=lambda t: (_cheapest_price(t, requirements), t.name))
    kept = ranked[:MAX_INSTANCE_TYPES]
    if not _min_values_met(requirements, kept):
        # minValues asks for more variety than the 60 cheapest give: keep the fewest that do.
        for end in range(MAX_INSTANCE_TYPES + 1, len(ranked) + 1):
            kept = ranked[:end]
            if _min_values_met(requirements, kept):
                break
    requirements = requirements.copy()
    previous = (
        requirements.get(LABEL_INSTANCE_TYPE).min_values if LABEL_INSTANCE_TYPE in requirements else None
    )
    requirements.add(Requirement.from_operator(LABEL_INSTANCE_TYPE, "In", [t.name for t in kept], previous))
    overhead = pool.overhead(kept[0])
    return NewNodeClaim(
        nodepool=pool.nodepool.name,
        requirements=requirements,
        instance_types=kept,
        pods=target.pods,
        requests=add_amounts(target.requests, overhead),
        daemon_overhead=dict(overhead),
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
    plan.new_nodeclaims = [_finish(target) for target in scheduler.bins]
    return plan
