"""Where pending pods go: existing capacity first, then new NodeClaims.

This is the decision core of provisioning and a pure function: a snapshot in,
a :class:`Plan` out. No client, no clock, no cloud.

The algorithm is first-fit decreasing over flexible bins, the shape of
Karpenter's scheduler:

1. Pods are taken by priority (``spec.priority``, highest first), then
   largest first (CPU, then memory, then name, so the plan is deterministic
   whatever the input order), as groups of alike pods
   (:mod:`karpy.scheduling._groups`). When capacity or a limit runs short,
   it is the low-priority pods that stay pending; no running pod is
   preempted.
2. Each pod tries the existing nodes and the NodeClaims already in flight,
   in name order, and takes the first whose labels, taints, free resources,
   host ports and topology admit it.
3. Otherwise it tries the new NodeClaims opened so far in this plan. A new
   NodeClaim is a *bin of instance-type options*: it keeps every instance
   type of its NodePool that is compatible with its pods' requirements, is
   offered somewhere its requirements allow, keeps ``minValues``, and still
   fits the summed requests plus the DaemonSets that would run on that type.
   A pod joins a bin if at least one option survives the join
   (:mod:`karpy.scheduling._options`).
4. Otherwise it opens a bin in the first NodePool, by descending weight, that
   it tolerates, is compatible with, and whose limits leave room. As in
   Karpenter, every bin of a pool with limits counts its largest option
   against them, so a limit is never exceeded whatever type the cloud picks,
   and a new bin keeps only the options that fit what the limits leave and
   opens with those. A bin opened while the pool had room keeps options far
   larger than its pods need, so when no option fits, the pool's bins first
   give up their largest options (their pods fit every option they keep;
   see ``_make_room``). Only when even their smallest leave no room is the
   pod refused there, with the reason naming the limit, and the next pool
   tried. If a limit leaves pods pending, the plan is made once more with
   the bins of limited pools growing whatever it costs, and the plan running
   more pods is kept (see ``_solve``).
5. A pod that fits nowhere gives up one preference (see
   :mod:`karpy.scheduling.constraints`) and tries again; when none is left it
   stays pending with a reason per NodePool.

6. Last, the NodeClaims that hold only pods constraining nothing but
   resources are packed again by patterns (:mod:`karpy.scheduling._patterns`),
   pairing complementary pods on the types cheapest per pod; the result
   replaces them only when it is cheaper. First-fit with the growth rule
   of step 3 stays 14–20% above the configuration LP bound on a real
   catalog; with this step the plans of the benchmarks are within 5% of it.

Each bin then becomes one NodeClaim listing its options cheapest first
(:mod:`karpy.scheduling._pricing`), and capacity reservations are spent no
further than they have instances (:mod:`karpy.scheduling._reservations`).

Topology spread and pod (anti-)affinity are checked by
:class:`~karpy.scheduling.topology.Topology`; when a bin's zone is still open
and a constraint allows only some zones, the bin's requirements are narrowed
to the least crowded allowed zone.

First-fit asks targets in order, and a plan of 20,000 pods has thousands of
them, nearly all full; what keeps it from asking each one for each pod:

- room indexes over existing capacity and over new NodeClaims, by the CPU
  and memory each may still take, so a walk jumps to the next target with
  room for the pod (:mod:`karpy.scheduling._rooms`);
- per kind of pod, the NodeClaims closed to it for good, and alike pods
  resuming the walk where the last one allowed the same domains went
  (:mod:`karpy.scheduling._bins`);
- a pod whose terms are all zone-like is admitted from where it may go at
  all, narrowed to each target, instead of a full topology check per target
  (``_narrowed_to``);
- NodeClaims opened and finished alike are worked out once (``_opening``,
  :class:`~karpy.scheduling._pricing.Prices`).

Each of these only skips asking a target that would say no (each module
says why), with one exception that is the intent of step 3: a NodeClaim
outside the growth window is offered a pod only if its cheapest options
have the memory too. Indexed by CPU alone, such NodeClaims were asked by
every memory-hungry pod and grew to dearer types to take it, and
Karpenter's diverse pods cost 19% more. Measured with ``python -m
benchmarks.scheduling``.

What a solve is given and what it returns (:class:`ExistingCapacity`,
:class:`NodePoolCapacity`, :class:`Plan`, :class:`NewNodeClaim`) are defined
in :mod:`karpy.scheduling._model` with the arithmetic callers share
(:func:`pod_requests`, :func:`max_capacity`, :func:`min_values_met`); this
module re-exports them, and code outside the package imports them from here.

Why this module stays large (about 1,700 lines) when the rest of the package
is split into small ones: what is left here is the one loop of steps 1 to 5
and the state it threads through a solve (the open NodeClaims, the room
indexes, the topology counts, the limits left, the resumption points), which
every step reads and writes. Cut into modules, that state would travel as
arguments or a shared object through every call of the hottest path, which
the benchmark pays for, and each part would be readable only with the others
open. What stands alone with a contract of its own is already apart (the
private modules above); what remains is read top to bottom as one algorithm.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import overload

import numpy as np
import numpy.typing as npt

from karpy.api.core import Pod
from karpy.api.instancetype import InstanceType
from karpy.api.quantity import (
    ResourceAmounts,
    add_amounts,
    exceeded_resources,
    fits,
    format_amount,
    how_many_fit,
)
from karpy.api.requirements import LABEL_HOSTNAME, Requirement, Requirements
from karpy.api.storage import UNLIMITED_VOLUMES
from karpy.api.taints import PREFER_NO_SCHEDULE, UNREGISTERED_TAINT_KEY, Taint
from karpy.scheduling._bins import DomainsKey, OpenBins, walk_resumes_at, walk_skips_existing
from karpy.scheduling._groups import (
    alike_groups,
    constrains_only_resources,
    hostname_limits,
    labels_matter,
    placement_bucket,
    same_placement_spec,
    topology_signature,
)
from karpy.scheduling._matrix import PoolMatrix
from karpy.scheduling._model import (
    NODES_RESOURCE,
    POD_RESOURCE,
    ExistingCapacity,
    NewNodeClaim,
    NodePoolCapacity,
    PackedPlan,
    Plan,
    TypeMemo,
    launchable_types,
    max_capacity,
    min_values_met,
    min_values_shortfall,
    pod_requests,
    pool_requirements,
)
from karpy.scheduling._options import Opening, Target
from karpy.scheduling._patterns import CHUNK_DIVISORS, pack
from karpy.scheduling._pricing import MAX_INSTANCE_TYPES, Prices, finish
from karpy.scheduling._reservations import RESERVATIONS_SPENT, spend_reservations
from karpy.scheduling._rooms import UNBOUNDED_ROOM, RoomIndex, room_asked_by, room_free_on
from karpy.scheduling.constraints import (
    ConstraintError,
    NamespaceLabels,
    PodConstraints,
    PodSelector,
    pod_constraints,
)
from karpy.scheduling.policy import SchedulingPolicy
from karpy.scheduling.topology import Admission, Domain, Topology
from karpy.scheduling.zones import NO_ZONE, effective_zone

# PREFERENCE_POLICY=Respect and MIN_VALUES_POLICY=Strict, Karpenter's defaults.
DEFAULT_POLICY = SchedulingPolicy()

__all__ = [
    "GROWTH_WINDOW",
    "MAX_INSTANCE_TYPES",
    "NODES_RESOURCE",
    "POD_RESOURCE",
    "CapacityLeftOut",
    "ExistingCapacity",
    "NewNodeClaim",
    "NodePoolCapacity",
    "Plan",
    "PreparedCapacity",
    "TypeMemo",
    "launchable_types",
    "max_capacity",
    "min_values_met",
    "min_values_shortfall",
    "placement_bucket",
    "pod_requests",
    "pool_requirements",
    "same_placement_spec",
    "solve",
]

# How many of the most recent new NodeClaims a pod may make grow to a bigger type.
GROWTH_WINDOW = 8

# What a target says to a pod: yes; no, and no to every pod alike; no for now.
_ACCEPTED = object()
_REFUSED = object()
_NOT_NOW = object()


def _within(reserved: ResourceAmounts, remaining: ResourceAmounts | None) -> bool:
    if remaining is None:
        return True
    return all(reserved.get(resource, 0) <= limit for resource, limit in remaining.items())


# A node's topology domains by its requirements' identity: a consolidation pass solves
# hundreds of times against the same nodes, whose requirements are parsed once per label set.
_DOMAINS: dict[frozenset[Requirement], dict[str, str]] = {}
_DOMAINS_KEPT = 50_000


def _node_domains(capacity: ExistingCapacity) -> dict[str, str]:
    """The one value each single-valued requirement of a node gives, and its hostname.

    Shared between solves: nothing may change the dict (the topology copies a target's
    domains before it narrows them).
    """
    key = capacity.requirements.identity()
    domains = _DOMAINS.get(key)
    if domains is None or domains.get(LABEL_HOSTNAME, capacity.name) != capacity.name:
        domains = {
            requirement.key: value
            for requirement in capacity.requirements
            if not requirement.complement and len(requirement.values) == 1
            for value in requirement.values
        }
        domains.setdefault(LABEL_HOSTNAME, capacity.name)
        if len(_DOMAINS) >= _DOMAINS_KEPT:
            _DOMAINS.clear()
        _DOMAINS[key] = domains
    return domains


class _ExistingTargets:
    """The existing capacity as targets, each made when first asked for.

    A consolidation simulation offers hundreds or thousands of nodes, of which
    first-fit visits the few the room index points it to: making a target for
    every node offered was a third of a simulation on a 3,000-node cluster.
    """

    __slots__ = ("_targets", "capacity", "volume_resources")

    def __init__(self, capacity: list[ExistingCapacity], volume_resources: Sequence[str] = ()) -> None:
        self.capacity = capacity
        self._targets: list[Target | None] = [None] * len(capacity)
        # The pods' volume drivers: a node whose CSINode sets no limit for one attaches any number.
        self.volume_resources = volume_resources

    def __len__(self) -> int:
        return len(self.capacity)

    def __getitem__(self, position: int) -> Target:
        target = self._targets[position]
        if target is None:
            capacity = self.capacity[position]
            blocking = tuple(
                taint
                for taint in capacity.taints
                if taint.key != UNREGISTERED_TAINT_KEY and taint not in capacity.ephemeral_taints
            )
            available = dict(capacity.available)
            for resource in self.volume_resources:
                available.setdefault(resource, UNLIMITED_VOLUMES)
            target = Target(capacity.name, capacity.requirements, blocking, available=available)
            target.position = position
            for pod in capacity.pods:
                target.host_ports.update(pod.spec.host_ports)
            self._targets[position] = target
        return target


# Pattern packings kept per pool's types (``TypeMemo.packs``) before they are dropped.
MAX_KEPT_PACKS = 20_000


class PreparedCapacity:
    """Existing capacity set up once for many solves, each leaving some of it out.

    A consolidation pass simulates the removal of hundreds of nodes, each
    against the same other nodes: setting up the solver's view of them (the
    room index, their topology domains) for every simulation was most of a
    simulation on a 3,000-node cluster. Built only from capacity whose bound
    pods count for nothing (no pods carried), for pods without inter-pod
    terms: the topology then never reads a node's pods, and a node left out
    is one its room index never offers (see :meth:`without`).
    """

    __slots__ = ("capacity", "domains", "positions", "rooms")

    def __init__(self, capacity: Sequence[ExistingCapacity]) -> None:
        self.capacity = sorted(capacity, key=lambda item: item.name)
        if any(item.pods for item in self.capacity):
            raise ValueError("prepared capacity carries no pods")
        self.rooms = RoomIndex.of([room_free_on(item.available) for item in self.capacity])
        self.domains = {item.name: _node_domains(item) for item in self.capacity}
        self.positions = {item.name: position for position, item in enumerate(self.capacity)}

    def without(self, names: Iterable[str]) -> CapacityLeftOut:
        """This capacity with the named nodes (those a simulation removes) left out."""
        return CapacityLeftOut(self, frozenset(names) & self.positions.keys())


class CapacityLeftOut(Sequence[ExistingCapacity]):
    """Prepared capacity less some of it, as :func:`solve` takes it."""

    __slots__ = ("left_out", "prepared")

    def __init__(self, prepared: PreparedCapacity, left_out: frozenset[str]) -> None:
        self.prepared = prepared
        self.left_out = left_out

    def __len__(self) -> int:
        return len(self.prepared.capacity) - len(self.left_out)

    @overload
    def __getitem__(self, index: int) -> ExistingCapacity: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[ExistingCapacity]: ...

    def __getitem__(self, index: int | slice) -> ExistingCapacity | Sequence[ExistingCapacity]:
        kept = [item for item in self.prepared.capacity if item.name not in self.left_out]
        return kept[index]

    def __iter__(self) -> Iterator[ExistingCapacity]:
        return (item for item in self.prepared.capacity if item.name not in self.left_out)


class _StoppedError(Exception):
    """A pod was placed on existing capacity the caller asked to stop at."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def _blocking_taint(taints: Iterable[Taint], constraints: PodConstraints) -> Taint | None:
    """The first taint the pod does not tolerate; PreferNoSchedule counts until relaxed."""
    tolerations = constraints.effective_tolerations()
    for taint in taints:
        if taint.effect == PREFER_NO_SCHEDULE and constraints.tolerate_prefer_no_schedule:
            continue
        if not any(toleration.tolerates(taint) for toleration in tolerations):
            return taint
    return None


class _Scheduler:
    def __init__(
        self,
        existing: Sequence[ExistingCapacity],
        pools: Sequence[NodePoolCapacity],
        requested_resources: Iterable[str] = (),
        volume_terms: Mapping[str, Sequence[Requirements]] | None = None,
        namespace_labels: NamespaceLabels | None = None,
        *,
        fill_limited_pools: bool = False,
        stop_at: Container[str] = (),
        policy: SchedulingPolicy = DEFAULT_POLICY,
        volume_counts: Mapping[str, ResourceAmounts] | None = None,
    ) -> None:
        self.volume_terms = volume_terms or {}
        self.policy = policy
        # Set while the pods that no NodeClaim could take with every minValues met are placed
        # again under MIN_VALUES_POLICY=BestEffort (see ``place_group``).
        self._relaxing_min_values = False
        # Per pod, how many volumes of each driver it attaches, as resources (karpy.api.storage).
        self.volume_counts = volume_counts or {}
        volume_resources = sorted({r for counts in self.volume_counts.values() for r in counts})
        self.stop_at = stop_at
        self.namespace_labels = namespace_labels
        # NodeClaims of pools with limits grow whatever growing costs (see ``_solve``).
        self.fill_limited_pools = fill_limited_pools
        # Whether a limit turned away a pod that was then left pending.
        self.left_at_limit = False
        self._limit_refusals = 0
        self.pools = sorted(pools, key=lambda pool: (-(pool.nodepool.weight or 0), pool.nodepool.name))
        self.pool_requirements = {pool.nodepool.name: pool_requirements(pool.nodepool) for pool in self.pools}
        # A function of the pools, not a bound method: the scheduler and its topology must not
        # refer to each other, so that a plan's working state is freed as soon as it is made.
        self.topology = Topology(discover=_offered_values(self.pools, self.pool_requirements))
        # Existing capacity by what it has free, as the new NodeClaims are by room (a cluster
        # may have thousands of nodes, nearly all of them full).
        if isinstance(existing, CapacityLeftOut):
            prepared = existing.prepared
            self.existing = _ExistingTargets(prepared.capacity, volume_resources)
            self.existing_rooms = prepared.rooms.copy()
            for name in existing.left_out:
                self.existing_rooms.close(prepared.positions[name])
            self.topology.add_targets(prepared.domains)
        else:
            self.existing = _ExistingTargets(
                sorted(existing, key=lambda capacity: capacity.name), volume_resources
            )
            rooms: list[tuple[int, int]] = []
            for capacity in self.existing.capacity:
                rooms.append(room_free_on(capacity.available))
                self.topology.add_target(capacity.name, _node_domains(capacity))
                for pod in capacity.pods:
                    try:
                        anti = pod_constraints(pod, namespace_labels=namespace_labels).anti_affinity
                    except ConstraintError:
                        anti = ()
                    self.topology.add_existing_pod(pod, capacity.name, anti)
            self.existing_rooms = RoomIndex.of(rooms)
        self.bins: list[Target] = []
        self.cheap_rooms = RoomIndex()
        self._topology_refusals: dict[str, set[int]] = {}
        self._open_by_signature: dict[str, OpenBins] = {}
        self._open_by_domains: dict[DomainsKey, OpenBins] = {}
        self._last_keys: tuple[PodConstraints | None, set[str]] = (None, set())
        # Where the pod being placed may go at all, when that alone decides (see ``_narrowed_to``).
        self._allowed_anywhere: tuple[PodConstraints | None, Mapping[str, frozenset[str]]] = (None, {})
        self._rows_cache: dict[int, npt.NDArray[np.intp]] = {}
        self._label_cache: dict[tuple[int, frozenset[Requirement]], npt.NDArray[np.bool_]] = {}
        self._alone_cache: dict[tuple[int, frozenset[Requirement], int, int], float] = {}
        # What a NodeClaim opened for one group's pod starts with, per pool, requirements and
        # narrowing: alike pods that each open one (anti-affinity) start alike.
        self._opening_cache: dict[tuple[int, frozenset[Requirement], int], npt.NDArray[np.intp]] = {}
        self._opened_cache: dict[
            tuple[int, frozenset[Requirement], int, frozenset[Requirement]], Opening | None
        ] = {}
        self._vector_cache: dict[tuple[int, int], tuple[ResourceAmounts, npt.NDArray[np.int64]]] = {}
        self._type_cache: dict[
            tuple[str, frozenset[Requirement]], tuple[list[InstanceType], list[InstanceType]]
        ] = {}
        self.resources = sorted(
            {POD_RESOURCE}
            | {resource for pool in pools for t in pool.instance_types for resource in t.allocatable}
            | set(requested_resources)
            | set(volume_resources)
        )
        self._matrices: dict[int, PoolMatrix] = {}
        # Pods that constrain nothing but resources: which new NodeClaim holds them is free.
        self._movable: set[str] = set()

    def note_effective_zones(self, groups: Iterable[Sequence[Pod]], plan: Plan) -> None:
        """Each pod's effective zone, from the topology as it stands before anything is placed
        (alike pods share it, as they share their constraints)."""
        for pods in groups:
            volume_terms = self.volume_terms.get(pods[0].key, ())
            try:
                strict = pod_constraints(pods[0], (), self.namespace_labels).node_alternatives
                constraints = pod_constraints(pods[0], volume_terms, self.namespace_labels)
            except ConstraintError:
                zone = NO_ZONE
            else:
                if self.policy.ignores_preferences:
                    constraints = constraints.without_preferences()
                zone = effective_zone(
                    strict[0] if strict else Requirements(),
                    volume_terms,
                    self.topology.allowed_anywhere(constraints),
                )
            for pod in pods:
                plan.effective_zones[pod.key] = zone

    # -- one pod ---------------------------------------------------------------

    def place_group(self, pods: Sequence[Pod], plan: Plan) -> None:
        """Place pods that are alike (same namespace, labels and spec), in order.

        Alike pods share one parse of their constraints, and a target that
        turned one of them away for good (no room, wrong labels, a taint, an
        anti-affinity that only grows) is not asked again for the next. Pods
        without inter-pod constraints are placed in bulk: as many as fit at
        once on each target, which is what first-fit would do one by one.
        """
        self._alone_cache.clear()
        self._vector_cache.clear()
        self._opening_cache.clear()
        self._opened_cache.clear()
        try:
            constraints: PodConstraints | None = pod_constraints(
                pods[0], self.volume_terms.get(pods[0].key, ()), self.namespace_labels
            )
        except ConstraintError as error:
            for pod in pods:
                plan.unschedulable[pod.key] = f"invalid pod constraint: {error}"
            return
        if self.policy.ignores_preferences and constraints is not None:
            constraints = constraints.without_preferences()
        requests = pod_requests(pods[0])
        attached = self.volume_counts.get(pods[0].key)
        if attached:
            requests = add_amounts(requests, attached)
        if (
            constraints is not None
            and constrains_only_resources(constraints)
            and not self.volume_terms.get(pods[0].key)
            and not attached
        ):
            self._movable.update(pod.key for pod in pods)
        remaining = list(pods)
        reasons: list[str] = []
        limit_refusals = self._limit_refusals
        first = constraints
        while remaining and constraints is not None:
            reasons = []
            if self._is_topology_free(constraints):
                remaining = self._place_bulk(constraints, requests, remaining, plan, reasons)
            else:
                remaining = self._place_each(constraints, requests, remaining, plan, reasons)
            if remaining:
                constraints = constraints.relax()
                if constraints is None and self.policy.relaxes_min_values and not self._relaxing_min_values:
                    # BestEffort: only pods no NodeClaim takes with minValues met go where it is not.
                    self._relaxing_min_values = True
                    constraints = first
                    self._opening_cache.clear()
                    self._opened_cache.clear()
        self._relaxing_min_values = False
        reason = "; ".join(reasons) if reasons else "no NodePool exists"
        if remaining and self._limit_refusals > limit_refusals:
            self.left_at_limit = True
        for pod in remaining:
            plan.unschedulable[pod.key] = reason

    def _min_values_met(self, requirements: Requirements, options: Sequence[InstanceType]) -> bool:
        """Whether ``options`` meet every minValues, or need not (BestEffort's second try)."""
        return self._relaxing_min_values or min_values_met(requirements, options)

    def _is_topology_free(self, constraints: PodConstraints) -> bool:
        return not (
            constraints.all_spread()
            or constraints.all_affinity()
            or constraints.all_anti_affinity()
            or constraints.host_ports
            or self.topology.inverse_keys(constraints)
        )

    @staticmethod
    def _for(constraints: PodConstraints, pod: Pod) -> PodConstraints:
        return constraints.for_pod(pod)

    def _note_placed(self, constraints: PodConstraints, pod: Pod, plan: Plan) -> None:
        if constraints.relaxed:
            plan.relaxed[pod.key] = constraints.relaxed

    def _place_each(
        self,
        constraints: PodConstraints,
        requests: ResourceAmounts,
        pods: list[Pod],
        plan: Plan,
        reasons: list[str],
    ) -> list[Pod]:
        """One pod at a time; returns the pods left when one fits nowhere."""
        # Rejections that stay rejections for the next alike pod: room only shrinks,
        # labels and taints do not change, anti-affinity and hostname spread only tighten.
        retry_topology = bool(constraints.all_affinity()) or any(
            spread.topology_key != LABEL_HOSTNAME for spread in constraints.all_spread()
        )
        refused: set[int] = set()
        # Targets turned away by topology that only tightens are out for every pod with
        # the same labels and inter-pod constraints, whatever it requests: shared.
        signature = topology_signature(constraints) if not retry_topology else ""
        out_for_topology = self._topology_refusals.setdefault(signature, set()) if signature else set()
        signature_open = self._open_by_signature.setdefault(signature, OpenBins()) if signature else None
        # A pod whose hostname terms count its own kind fills its node for the rest of its
        # group after so many: say so at once rather than have the next pod ask and be refused.
        limits = hostname_limits(constraints) if signature else []
        # Zone-like terms only (spread, affinity), and no anti-affinity either way: a pod's
        # verdict on a target is then what it may have anywhere, narrowed to the target.
        keys = self._topology_keys(constraints)
        zonal_only = (
            retry_topology
            and not constraints.all_anti_affinity()
            and LABEL_HOSTNAME not in keys
            and not self.topology.inverse_keys(constraints)
        )
        # Where each pod's first-fit walk over new NodeClaims (and over existing capacity) may
        # start, by the domains it may go to. Those before where an alike pod went turned it
        # away, and nothing has changed them since but where pods went after it (``walk_resumes_at``).
        walk_from: dict[DomainsKey, int] = {}
        existing_from: dict[DomainsKey, int] = {}
        for index, pod in enumerate(pods):
            current = self._for(constraints, pod)
            # Zones (or other non-hostname domains) the pod may go to at all: a target
            # already committed elsewhere needs no full admission to say no, and stays
            # out for every pod allowed the same domains (a commitment is for good).
            anywhere = self.topology.allowed_anywhere(current) if retry_topology else {}
            # No answer (a hostname term beside the zone terms: ``allowed_anywhere`` cannot say),
            # so nothing says which alike pod went where for the same reasons: walk from the start.
            domains_key = None if anywhere is None else frozenset(anywhere.items())
            open_bins = signature_open
            if anywhere and domains_key is not None:
                open_bins = self._open_by_domains.setdefault(domains_key, OpenBins())
                if zonal_only and anywhere.keys() == keys:
                    self._allowed_anywhere = (current, anywhere)
            start = walk_from.get(domains_key, 0) if domains_key is not None else 0
            existing_start = existing_from.get(domains_key, 0) if domains_key is not None else 0
            chosen: Target | None = None
            for target in self._candidates(requests, open_bins, out_for_topology, start, existing_start):
                if id(target) in refused or id(target) in out_for_topology:
                    continue
                if anywhere and not self._could_be_in(target, anywhere):
                    if open_bins is not None and target.is_new:
                        open_bins.close(target.position)
                    continue
                verdict = self._join(current, requests, target)
                if verdict is _ACCEPTED:
                    chosen = target
                    break
                if verdict is _REFUSED:
                    refused.add(id(target))
                elif signature:
                    self._rule_out(signature, target)
            if chosen is None and self._open_in_first_pool(current, requests, reasons):
                chosen = self.bins[-1]
            if chosen is None:
                return pods[index:]
            if not chosen.is_new:
                if chosen.name in self.stop_at:
                    raise _StoppedError(chosen.name)
                plan.existing[pod.key] = chosen.name
                walk_resumes_at(existing_from, domains_key, chosen.position)
            else:
                # Every existing node with room turned the pod away first.
                walk_skips_existing(existing_from, domains_key, len(self.existing))
                walk_resumes_at(walk_from, domains_key, chosen.position)
                if limits and self._is_full_for(limits, chosen):
                    self._rule_out(signature, chosen)
            reasons.clear()
            self._note_placed(current, pod, plan)
        return []

    def _is_full_for(self, limits: Sequence[tuple[PodSelector, int]], target: Target) -> bool:
        """Whether ``target`` holds as many pods as one of ``limits`` (see ``hostname_limits``) allows."""
        count = self.topology.count
        return any(count(LABEL_HOSTNAME, selects, target.name) >= most for selects, most in limits)

    def _bins_with_room(
        self, requests: ResourceAmounts, open_bins: OpenBins | None, start: int = 0
    ) -> Iterator[Target]:
        """The plan's new NodeClaims from ``start`` the room index says may have room, and open."""
        rooms = self.cheap_rooms
        cpu, memory = room_asked_by(requests)
        position = rooms.first_fit(start, cpu, memory)
        while position >= 0:
            if open_bins is not None:
                following = open_bins.first_open(position)
                if following != position:
                    position = rooms.first_fit(following, cpu, memory)
                    continue
            yield self.bins[position]
            position = rooms.first_fit(position + 1, cpu, memory)

    def _candidates(
        self,
        requests: ResourceAmounts,
        open_bins: OpenBins | None = None,
        ruled_out: set[int] | None = None,
        start: int = 0,
        existing_start: int = 0,
    ) -> Iterator[Target]:
        """Existing capacity with room, then new NodeClaims whose cheapest option has room,
        then the most recent NodeClaims that could take the pod by growing to a bigger type.

        Growing is weighed against a NodeClaim of the pod's own (``_alone``);
        asking only the last few NodeClaims keeps that from costing a pass over all.
        ``start`` and ``existing_start``: the first of each that may say yes.
        """
        yield from self._existing_with_room(requests, existing_start)
        yield from self._new_candidates(requests, open_bins, ruled_out, start)

    def _existing_with_room(self, requests: ResourceAmounts, start: int = 0) -> Iterator[Target]:
        """Existing nodes and in-flight NodeClaims from ``start`` with the CPU and memory ``requests`` ask."""
        rooms = self.existing_rooms
        cpu, memory = room_asked_by(requests)
        position = rooms.first_fit(start, cpu, memory)
        while position >= 0:
            yield self.existing[position]
            position = rooms.first_fit(position + 1, cpu, memory)

    def _new_candidates(
        self,
        requests: ResourceAmounts,
        open_bins: OpenBins | None = None,
        ruled_out: set[int] | None = None,
        start: int = 0,
    ) -> Iterator[Target]:
        """The plan's new NodeClaims worth asking, in first-fit order (see ``_candidates``).

        ``start``: the first that may say yes; those before it said no to an alike pod.
        """
        asked: set[int] = set()
        for target in self._bins_with_room(requests, open_bins, start):
            asked.add(target.position)
            yield target
        # So few that asking each is cheaper than keeping an index of what they could grow to.
        for target in self.bins[-GROWTH_WINDOW:]:
            if (
                target.position not in asked
                and (ruled_out is None or id(target) not in ruled_out)
                and target.has_room_for(requests)
            ):
                yield target

    def _could_be_in(self, target: Target, allowed: Mapping[str, frozenset[str]]) -> bool:
        for key, domains in allowed.items():
            known = self.topology.known_domain(target.name, key)
            if known is not None and known not in domains:
                return False
        return True

    def _rule_out(self, signature: str, target: Target) -> None:
        self._topology_refusals.setdefault(signature, set()).add(id(target))
        if target.is_new:
            self._open_by_signature.setdefault(signature, OpenBins()).close(target.position)

    def _refresh_rooms(self, target: Target) -> None:
        cheap = self._cheap_room(target)
        self.cheap_rooms.set(target.position, cheap)

    def _cheap_room(self, target: Target) -> tuple[int, int]:
        """CPU and memory room left in the target's cheapest options: what it takes without growing.

        Also keeps ``target.cheapest_price`` up to date, from the same prices.
        """
        assert target.pool is not None
        matrix = self._matrix(target.pool)
        if target.prices is None:  # kept for the next pod that asks (see ``_join_bin``)
            target.prices = matrix.price[target.rows]
        prices = target.prices
        lowest = prices.min()
        target.cheapest_price = float(lowest)
        most = matrix.net[target.rows[prices == lowest]].max(axis=0)
        requests = target.requests
        cpu, memory = matrix.cpu_column, matrix.memory_column
        return (
            int(most[cpu]) - requests.get("cpu", 0) if cpu is not None else UNBOUNDED_ROOM,
            int(most[memory]) - requests.get("memory", 0) if memory is not None else UNBOUNDED_ROOM,
        )

    def _place_bulk(
        self,
        constraints: PodConstraints,
        requests: ResourceAmounts,
        pods: list[Pod],
        plan: Plan,
        reasons: list[str],
    ) -> list[Pod]:
        """As many alike pods as fit on each target in turn, then on new NodeClaims."""
        remaining = pods
        for target in self._existing_with_room(requests):
            if not remaining:
                return []
            count = self._room_on_existing(constraints, requests, target, len(remaining))
            if count and target.name in self.stop_at:
                raise _StoppedError(target.name)
            if count:
                for pod in remaining[:count]:
                    plan.existing[pod.key] = target.name
                    self._place_on(self._for(constraints, pod), target, requests, plan)
                remaining = remaining[count:]
        for target in self._new_candidates(requests):
            if not remaining:
                return []
            remaining = self._fill_bin(constraints, requests, target, remaining, plan)
        while remaining:
            first = remaining[0]
            current = self._for(constraints, first)
            if not self._open_in_first_pool(current, requests, reasons):
                return remaining
            reasons.clear()
            self._note_placed(current, first, plan)
            remaining = self._fill_bin(constraints, requests, self.bins[-1], remaining[1:], plan)
        return []

    def _place_on(
        self, constraints: PodConstraints, target: Target, requests: ResourceAmounts, plan: Plan
    ) -> None:
        assert target.available is not None
        for resource, amount in requests.items():
            target.available[resource] = target.available.get(resource, 0) - amount
        self.existing_rooms.set(target.position, room_free_on(target.available))
        self._commit(constraints, target, ())
        self._note_placed(constraints, constraints.pod, plan)

    def _room_on_existing(
        self, constraints: PodConstraints, requests: ResourceAmounts, target: Target, wanted: int
    ) -> int:
        assert target.available is not None
        if _blocking_taint(target.taints, constraints) is not None:
            return 0
        if not any(target.requirements.compatible(option) is None for option in constraints.node_options()):
            return 0
        return min(wanted, how_many_fit(requests, target.available))

    def _fill_bin(
        self,
        constraints: PodConstraints,
        requests: ResourceAmounts,
        target: Target,
        pods: list[Pod],
        plan: Plan,
    ) -> list[Pod]:
        """Add as many of ``pods`` to a new NodeClaim as one of its options can hold."""
        pool = target.pool
        assert pool is not None
        if not pods or not target.has_room_for(requests):
            return pods
        if _blocking_taint(pool.nodepool.template.taints, constraints) is not None:
            return pods
        for option in constraints.node_options():
            if target.requirements.compatible(option) is not None:
                continue
            merged = target.requirements.intersection(option)
            narrowed_further = merged != target.requirements
            rows = target.rows
            if narrowed_further:
                rows = rows[self._labels_allow(pool, merged)[rows]]
            if len(rows) == 0:
                continue
            # How many more alike pods each option takes: the fewest over the requested resources.
            matrix = self._matrix(pool)
            room = matrix.net[rows] - matrix.vector(target.requests)
            per_pod = matrix.vector(requests)
            requested = per_pod > 0
            if requested.any():
                takes = (np.maximum(room[:, requested], 0) // per_pod[requested]).min(axis=1)
            else:
                takes = np.full(len(rows), len(pods), dtype=np.int64)
            # Between two distinct values of ``takes`` the surviving options, and so the
            # price after, stay the same while fresh nodes for the pods only get dearer
            # with their number: the most pods of each such range is the one to try.
            count = 0
            keep = np.flatnonzero(takes > 0)
            # Options by how many pods they take, most first; the cheapest price among
            # the first i of them is then what the NodeClaim costs holding takes[i] more.
            order = np.argsort(-takes, kind="stable")
            ranked_takes = takes[order]
            cheapest = np.minimum.accumulate(matrix.price[rows][order])
            checks_min_values = any(requirement.min_values for requirement in merged)
            clipped = np.minimum(ranked_takes, len(pods))
            # The last option of each run of equal counts: it has the most options behind it.
            ends = np.append(np.flatnonzero(clipped[1:] != clipped[:-1]), len(clipped) - 1)
            for index in ends.tolist():
                most = int(clipped[index])
                if most <= 0:
                    break
                after = float(cheapest[index])
                if self._growing_costs_more(pool, target, after, option, requests, most):
                    continue
                keep = np.flatnonzero(takes >= most)
                if checks_min_values and not self._min_values_met(merged, self._types(pool, rows[keep])):
                    continue
                count = most
                break
            if count <= 0:
                continue
            target.update(
                merged,
                rows[keep],
                add_amounts(target.requests, {r: amount * count for r, amount in requests.items()}),
            )
            self._refresh_rooms(target)
            for pod in pods[:count]:
                current = self._for(constraints, pod)
                self._commit(current, target, ())
                self._note_placed(current, pod, plan)
            return pods[count:]
        return pods

    def _join(self, constraints: PodConstraints, requests: ResourceAmounts, target: Target) -> object:
        if target.is_new:
            return self._join_bin(constraints, requests, target)
        return self._join_existing(constraints, requests, target)

    def _domains(self, target: Target, requirements: Requirements, keys: Iterable[str]) -> dict[str, Domain]:
        """Each key's domain on ``target``: known, open (a bin's possible values) or absent."""
        domains: dict[str, Domain] = {}
        for key in keys:
            if key == LABEL_HOSTNAME:
                domains[key] = target.name
                continue
            requirement = requirements.get(key) if key in requirements else None
            if requirement is None:
                domains[key] = frozenset(self.topology.domains(key)) if target.is_new else None
                continue
            possible = frozenset(v for v in self.topology.domains(key) if requirement.has(v))
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

    def _admit(self, constraints: PodConstraints, target: Target, requirements: Requirements) -> Admission:
        known, anywhere = self._allowed_anywhere
        if known is constraints:
            admission = self._narrowed_to(target, requirements, anywhere)
            if admission.ok:
                return admission
            # Say no in the topology's own words.
        # A pod asks target after target with nothing placed in between: its keys hold.
        last_constraints, keys = self._last_keys
        if last_constraints is not constraints:
            keys = self._topology_keys(constraints)
            keys.update(self.topology.inverse_keys(constraints))
            self._last_keys = (constraints, keys)
        if not keys:
            return Admission()
        return self.topology.admit(constraints, target.name, self._domains(target, requirements, keys))

    def _narrowed_to(
        self, target: Target, requirements: Requirements, anywhere: Mapping[str, frozenset[str]]
    ) -> Admission:
        """The admission of a pod whose terms are all zone-like, from where it may go at all.

        Spread counts and affinity's occupied domains do not depend on the
        target when no term is per node, so the domains a target allows are
        the ones it can be in among ``anywhere`` (``Topology.allowed_anywhere``
        of the same pod, with nothing placed since): one set intersection per
        key instead of the full admission for every target asked.
        """
        admission = Admission()
        domains = self._domains(target, requirements, anywhere)
        for key, allowed in anywhere.items():
            domain = self.topology.known_domain(target.name, key) or domains[key]
            if domain is None:
                admission.reason = f"the node would have no {key} label"
                return admission
            remaining = (frozenset((domain,)) if isinstance(domain, str) else domain) & allowed
            if not remaining:
                admission.reason = f"no allowed {key} domain on this node"
                return admission
            admission.allowed[key] = remaining
        return admission

    def _join_existing(
        self, constraints: PodConstraints, requests: ResourceAmounts, target: Target
    ) -> object:
        assert target.available is not None
        if not fits(requests, target.available):
            return _REFUSED
        if constraints.host_ports and target.host_ports.intersection(constraints.host_ports):
            return _REFUSED
        if _blocking_taint(target.taints, constraints) is not None:
            return _REFUSED
        if not any(target.requirements.compatible(option) is None for option in constraints.node_options()):
            return _REFUSED
        admission = self._admit(constraints, target, target.requirements)
        if not admission.ok:
            return _NOT_NOW
        for resource, amount in requests.items():
            target.available[resource] = target.available.get(resource, 0) - amount
        self.existing_rooms.set(target.position, room_free_on(target.available))
        self._commit(constraints, target, admission.allowed)
        return _ACCEPTED

    def _join_bin(self, constraints: PodConstraints, requests: ResourceAmounts, target: Target) -> object:
        pool = target.pool
        assert pool is not None
        if not target.has_room_for(requests):
            return _REFUSED
        if constraints.host_ports and target.host_ports.intersection(constraints.host_ports):
            return _REFUSED
        if _blocking_taint(pool.nodepool.template.taints, constraints) is not None:
            return _REFUSED
        # _NOT_NOW only when topology alone said no: a verdict shared by pods that
        # differ in size must not hide a bin that was merely too full for this one.
        topology_said_no = False
        too_full = False
        for option in constraints.node_options():
            if target.requirements.compatible(option) is not None:
                continue
            # Room and price first, over every option at once (and before the dearer
            # topology check, since most refusals are here): narrowing the zone
            # afterwards only removes options, so it cannot make either better.
            matrix = self._matrix(pool)
            if target.net is None:
                target.net = matrix.net[target.rows]
            if target.prices is None:
                target.prices = matrix.price[target.rows]
            if target.demand is None:
                target.demand = matrix.vector(target.requests)
            demand = target.demand + self._vector(matrix, requests)
            roomy_mask: npt.NDArray[np.bool_] = np.asarray((target.net >= demand).all(axis=1), dtype=np.bool_)
            if not roomy_mask.any():
                too_full = True
                continue
            after = float(target.prices[roomy_mask].min())
            if self._growing_costs_more(pool, target, after, option, requests, 1):
                too_full = True
                continue
            total = add_amounts(target.requests, requests)
            merged = target.requirements.intersection(option)
            admission = self._admit(constraints, target, merged)
            if not admission.ok:
                topology_said_no = True
                continue
            for narrowed in self._narrowings(constraints, merged, admission):
                rows = self._viable(
                    pool,
                    target.rows,
                    narrowed,
                    total,
                    narrowed_further=narrowed != target.requirements,
                    fitting=roomy_mask,
                )
                if len(rows) == 0:
                    continue
                # Options only ever shrink as pods join, so the bin's largest option,
                # and with it the pool's reserved capacity, cannot grow: no limit check.
                target.update(narrowed, rows, total)
                target.demand = demand
                self._refresh_rooms(target)
                self._commit(constraints, target, admission.allowed)
                return _ACCEPTED
            too_full = True
        return _NOT_NOW if topology_said_no and not too_full else _REFUSED

    def _narrowings(
        self, constraints: PodConstraints, requirements: Requirements, admission: Admission
    ) -> list[Requirements]:
        """Ways to commit an open bin to the domains a constraint allows, best first."""
        if not admission.allowed:
            return [requirements]
        # A key is settled only once its requirement is the one allowed domain: a requirement that
        # lists several (a pool's zones) still leaves the domain open, and it must be chosen here for
        # the topology to count the pod in it.
        open_keys = [
            key
            for key, allowed in sorted(admission.allowed.items())
            if key != LABEL_HOSTNAME
            and not (len(allowed) == 1 and key in requirements and requirements.get(key).values == allowed)
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

    def _commit(self, constraints: PodConstraints, target: Target, keys: Iterable[str]) -> None:
        self._last_keys = (None, set())
        self._allowed_anywhere = (None, {})
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

    def _viable(
        self,
        pool: NodePoolCapacity,
        rows: npt.NDArray[np.intp],
        requirements: Requirements,
        requests: ResourceAmounts,
        *,
        narrowed_further: bool = True,
        fitting: npt.NDArray[np.bool_] | None = None,
    ) -> npt.NDArray[np.intp]:
        """The options (rows of the pool) that still fit ``requests``; labels rechecked only if narrowed.

        ``fitting``, when the caller has it, is the fit of ``rows`` already worked out.
        """
        matrix = self._matrix(pool)
        if fitting is None:
            fits_all = (matrix.net[rows] >= matrix.vector(requests)).all(axis=1)
        else:
            fits_all = fitting.copy()
        if narrowed_further:
            fits_all &= self._labels_allow(pool, requirements)[rows]
        kept_rows = rows[fits_all]
        if any(requirement.min_values for requirement in requirements) and not self._min_values_met(
            requirements, self._types(pool, kept_rows)
        ):
            return kept_rows[:0]
        return kept_rows

    @staticmethod
    def _types(pool: NodePoolCapacity, rows: npt.NDArray[np.intp]) -> list[InstanceType]:
        types = pool.instance_types
        return [types[row] for row in rows.tolist()]

    def _reserved_in_pool(self, pool: NodePoolCapacity) -> ResourceAmounts:
        """What the bins opened in ``pool`` so far may add to its usage, at most."""
        total: ResourceAmounts = {}
        for candidate in self.bins:
            if candidate.pool is pool:
                total = add_amounts(total, candidate.reserved)
        return total

    def _labels_allow(self, pool: NodePoolCapacity, requirements: Requirements) -> npt.NDArray[np.bool_]:
        """Per type of the pool: compatible with ``requirements`` and offered under them (cached)."""
        key = (id(pool), requirements.identity())
        allowed = self._label_cache.get(key)
        if allowed is None and pool.memo is not None:
            # A function of the pool's types and the requirement: kept with the types.
            allowed = pool.memo.allowed.get(key[1])
        if allowed is None:
            allowed = np.fromiter(
                (
                    t.requirements.intersects(requirements) is None
                    and bool(t.available_offerings(requirements))
                    for t in pool.instance_types
                ),
                dtype=np.bool_,
                count=len(pool.instance_types),
            )
            if not len(allowed):
                allowed = np.zeros(1, dtype=np.bool_)
            allowed.setflags(write=False)
            if pool.memo is not None:
                pool.memo.allowed[key[1]] = allowed
        self._label_cache[key] = allowed
        return allowed

    def _vector(self, matrix: PoolMatrix, requests: ResourceAmounts) -> npt.NDArray[np.int64]:
        """``requests`` as a row of ``matrix`` (cached per group: alike pods share one dict)."""
        key = (id(matrix), id(requests))
        cached = self._vector_cache.get(key)
        if cached is None or cached[0] is not requests:
            cached = (requests, matrix.vector(requests))
            self._vector_cache[key] = cached
        return cached[1]

    def _growing_costs_more(
        self,
        pool: NodePoolCapacity,
        target: Target,
        after: float,
        option: Requirements,
        requests: ResourceAmounts,
        count: int,
    ) -> bool:
        """Whether taking ``count`` more pods at price ``after`` costs more than fresh nodes for them."""
        if self.fill_limited_pools and pool.remaining is not None:
            return False
        step = after - target.cheapest_price
        return step > 0 and step > self._alone(pool, option, requests, count)

    def _alone(
        self, pool: NodePoolCapacity, option: Requirements, requests: ResourceAmounts, count: int
    ) -> float:
        """The least ``count`` such pods cost on fresh nodes of the pool (see ``cost_alone``).

        This is what a NodeClaim's growth is weighed against. First-fit alone
        keeps growing a NodeClaim towards the largest type, and on a real
        catalog the largest types are rarely the cheapest per pod. Adding pods
        is free while the cheapest option still fits them; once they force a
        bigger type, the price step must not exceed what they would cost on
        fresh nodes of the best type for them. So a NodeClaim grows while
        growing is the cheaper way to place its next pods, and no further.
        """
        # Within one group of alike pods ``requests`` is one object, alive all along: its id is
        # a safe key (the cache is emptied per group). Options may be rebuilt: keyed by content.
        key = (id(pool), option.identity(), id(requests), count)
        price = self._alone_cache.get(key)
        if price is None:
            _, offered = self._compatible_types(
                pool, self.pool_requirements[pool.nodepool.name].intersection(option)
            )
            matrix = self._matrix(pool)
            price = matrix.cost_alone(self._rows_of(pool, offered), matrix.vector(requests), count)
            self._alone_cache[key] = price
        return price

    def _matrix(self, pool: NodePoolCapacity) -> PoolMatrix:
        matrix = self._matrices.get(id(pool))
        if matrix is None:
            requirements = self.pool_requirements[pool.nodepool.name]
            key = (tuple(self.resources), requirements.identity())
            matrix = pool.memo.matrices.get(key) if pool.memo is not None else None
            if matrix is None:
                matrix = PoolMatrix(pool.instance_types, pool.overhead, self.resources, requirements)
                if pool.memo is not None:
                    pool.memo.matrices[key] = matrix
            self._matrices[id(pool)] = matrix
        return matrix

    def _most_room(self, pool: NodePoolCapacity, rows: npt.NDArray[np.intp]) -> ResourceAmounts:
        most = self._matrix(pool).net[rows].max(axis=0)
        return {resource: int(most[column]) for resource, column in self._matrix(pool).columns.items()}

    def _rows_of(self, pool: NodePoolCapacity, options: list[InstanceType]) -> npt.NDArray[np.intp]:
        """Matrix rows of a (cached, so long-lived) list of options."""
        key = id(options)
        rows = self._rows_cache.get(key)
        if rows is None:
            rows = self._matrix(pool).rows(options)
            self._rows_cache[key] = rows
        return rows

    def _compatible_types(
        self, pool: NodePoolCapacity, requirements: Requirements
    ) -> tuple[list[InstanceType], list[InstanceType]]:
        """The pool's types compatible with ``requirements``, and those of them offered; cached."""
        identity = requirements.identity()
        key = (pool.nodepool.name, identity)
        cached = self._type_cache.get(key)
        if cached is None:
            cached = pool.memo.compatible.get(identity) if pool.memo is not None else None
            if cached is None:
                types = pool.instance_types
                compatible = [t for t in types if t.requirements.intersects(requirements) is None]
                cached = (compatible, [t for t in compatible if t.available_offerings(requirements)])
                if pool.memo is not None:
                    pool.memo.compatible[identity] = cached
            self._type_cache[key] = cached
        return cached

    def _open_in_first_pool(
        self, constraints: PodConstraints, requests: ResourceAmounts, reasons: list[str]
    ) -> bool:
        """Open a NodeClaim in the first pool (by weight) that takes the pod; else say why each cannot."""
        for pool in self.pools:
            reason = self._open_bin(pool, constraints, requests)
            if reason is None:
                return True
            reasons.append(f"NodePool {pool.nodepool.name}: {reason}")
        return False

    def _open_bin(
        self, pool: NodePoolCapacity, constraints: PodConstraints, requests: ResourceAmounts
    ) -> str | None:
        """Open a bin for the pod in ``pool``, or say why it cannot be done."""
        if pool.unavailable:
            return pool.unavailable
        taint = _blocking_taint(pool.nodepool.template.taints, constraints)
        if taint is not None:
            return f"the pod does not tolerate taint {taint}"
        base = self.pool_requirements[pool.nodepool.name]
        reason = "incompatible requirements"
        target = Target(
            f"{pool.nodepool.name}/new-{len(self.bins)}", base, pool.nodepool.template.taints, pool=pool
        )
        for option in constraints.node_options():
            incompatible = base.compatible(option)
            if incompatible is not None:
                reason = f"incompatible requirements: {incompatible}"
                continue
            merged = base.intersection(option)
            compatible, offered = self._compatible_types(pool, merged)
            if not compatible:
                reason = f"no instance type satisfies {_describe(option) or 'the pool requirements'}"
                continue
            if not offered:
                reason = "no available offering (zone and capacity type) for the compatible instance types"
                continue
            fitting_rows = self._fitting_rows(pool, merged, offered, requests)
            if len(fitting_rows) == 0:
                largest = max(offered, key=_capacity_key)
                overhead = pool.overhead(largest)
                short = exceeded_resources(add_amounts(requests, overhead), largest.allocatable)
                reason = "no instance type has room for the pod's requests " + _format_resources(
                    requests, short
                )
                if not exceeded_resources(requests, largest.allocatable):
                    # The pod alone would fit: it is the DaemonSets that fill the node.
                    reason += " with the DaemonSets' " + _format_resources(overhead, short)
                reason += f" (largest option {largest.name})"
                continue
            admission = self._admit(constraints, target, merged)
            if not admission.ok:
                reason = admission.reason
                continue
            for narrowed in self._narrowings(constraints, merged, admission):
                opening = self._opening(pool, merged, narrowed, fitting_rows, requests)
                if opening is None:
                    reason = self._no_opening_reason(pool, merged, narrowed, fitting_rows)
                    continue
                rows = opening.rows
                if pool.remaining is not None:
                    within = self._within_limits(pool, rows)
                    if isinstance(within, str):
                        reason = within
                        continue
                    rows = within
                    if not self._min_values_met(narrowed, self._types(pool, rows)):
                        reason = "the instance types within the NodePool's limits do not satisfy minValues"
                        continue
                target.update(narrowed, rows, dict(requests))
                if rows is opening.rows:
                    target.headroom = opening.headroom
                    target.prices, target.cheapest_price, cheap = opening.prices, opening.price, opening.room
                else:
                    target.headroom = self._most_room(pool, rows)
                    cheap = self._cheap_room(target)
                target.position = self.cheap_rooms.append(cheap)
                self.bins.append(target)
                self.topology.add_target(target.name, {LABEL_HOSTNAME: target.name})
                self._commit(constraints, target, admission.allowed)
                return None
        return reason

    def _within_limits(
        self, pool: NodePoolCapacity, rows: npt.NDArray[np.intp]
    ) -> npt.NDArray[np.intp] | str:
        """The options at ``rows`` a new NodeClaim of ``pool`` may have under its limits, or why none.

        An option is kept when, counted at its capacity beside the largest option
        of every NodeClaim of the pool this plan has opened, it stays within what
        the limits leave: whatever type the cloud then picks for each, the limit
        holds. If none is, those NodeClaims first give up the options they do not
        need (``_make_room``); the pod is refused, naming the limit, only when
        even their smallest options leave no room for the smallest of these.
        """
        remaining = pool.remaining
        assert remaining is not None
        options = self._types(pool, rows)
        smallest = max_capacity([min(options, key=_capacity_key)])
        reserved = self._reserved_in_pool(pool)
        if not _within(add_amounts(reserved, smallest), remaining) and self._make_room(pool, smallest):
            reserved = self._reserved_in_pool(pool)
        within_at = [
            index
            for index, option in enumerate(options)
            if _within(add_amounts(reserved, max_capacity([option])), remaining)
        ]
        if not within_at:
            at_smallest = add_amounts(reserved, smallest)
            over = sorted(r for r, limit in remaining.items() if at_smallest.get(r, 0) > limit)
            self._limit_refusals += 1
            return f"NodePool {pool.nodepool.name} is at its {', '.join(over) or 'resource'} limit"
        return rows[np.asarray(within_at, dtype=np.intp)]

    def _make_room(self, pool: NodePoolCapacity, needed: ResourceAmounts) -> bool:
        """Cut this plan's NodeClaims of ``pool`` down to smaller options until ``needed`` fits its limits.

        Each NodeClaim counts its largest option against the limits, and one
        opened while the pool had room keeps options far larger than its pods
        need (up to a 96-CPU type for one 1-CPU pod). Left so, a few such
        NodeClaims would turn every later pod away at a limit the cluster is
        far from. So, the largest reservations first, a NodeClaim drops the
        options that the shortfall says it cannot keep, or, when that would
        leave none, every option larger than its smallest. Its pods fit every
        option it keeps (it only ever had options that fit them), its
        requirements do not change, and a cut that would break its
        ``minValues`` is not made. Nothing is cut unless the shortfall is
        covered in full (returns whether it was). A ``nodes`` limit cannot be
        helped this way: each NodeClaim is one node whatever its options.
        """
        remaining = pool.remaining
        assert remaining is not None
        reserved = self._reserved_in_pool(pool)
        short = {
            resource: reserved.get(resource, 0) + needed.get(resource, 0) - limit
            for resource, limit in remaining.items()
            if reserved.get(resource, 0) + needed.get(resource, 0) > limit
        }
        if NODES_RESOURCE in short:
            return False
        resources = sorted(short)
        targets = sorted(
            (target for target in self.bins if target.pool is pool),
            key=lambda target: [-target.reserved.get(resource, 0) for resource in resources],
        )
        cuts: list[tuple[Target, npt.NDArray[np.intp]]] = []
        for target in targets:
            if not short:
                break
            rows = self._cut(target, short)
            if rows is None:
                continue
            cuts.append((target, rows))
            after = max_capacity(self._types(pool, rows))
            for resource in list(short):
                short[resource] -= target.reserved.get(resource, 0) - after.get(resource, 0)
                if short[resource] <= 0:
                    del short[resource]
        if short:
            return False
        for target, rows in cuts:
            target.update(target.requirements, rows, target.requests)
            target.headroom = self._most_room(pool, rows)
            self._refresh_rooms(target)
        return True

    def _cut(self, target: Target, short: Mapping[str, int]) -> npt.NDArray[np.intp] | None:
        """The options ``target`` keeps to free ``short`` of its reservation, or as much as it can.

        None when it cannot free any (its options are already its smallest) or
        when what is left would not satisfy its ``minValues``.
        """
        options = target.options
        ceiling = {resource: target.reserved.get(resource, 0) - amount for resource, amount in short.items()}
        keep = [index for index, option in enumerate(options) if _within(option.capacity, ceiling)]
        if not keep:
            smallest = min(options, key=_capacity_key).capacity
            ceiling = {resource: smallest.get(resource, 0) for resource in short}
            keep = [index for index, option in enumerate(options) if _within(option.capacity, ceiling)]
        if len(keep) == len(options) or not min_values_met(target.requirements, [options[i] for i in keep]):
            return None
        return target.rows[np.asarray(keep, dtype=np.intp)]

    def _fitting_rows(
        self,
        pool: NodePoolCapacity,
        merged: Requirements,
        offered: list[InstanceType],
        requests: ResourceAmounts,
    ) -> npt.NDArray[np.intp]:
        """The pool's offered types (rows) with room for one pod of ``requests``; cached per group."""
        key = (id(pool), merged.identity(), id(requests))
        rows = self._opening_cache.get(key)
        if rows is None:
            matrix = self._matrix(pool)
            offered_rows = self._rows_of(pool, offered)
            rows = offered_rows[
                np.flatnonzero((matrix.net[offered_rows] >= matrix.vector(requests)).all(axis=1))
            ]
            self._opening_cache[key] = rows
        return rows

    def _opening(
        self,
        pool: NodePoolCapacity,
        merged: Requirements,
        narrowed: Requirements,
        fitting_rows: npt.NDArray[np.intp],
        requests: ResourceAmounts,
    ) -> Opening | None:
        """The options a NodeClaim opened under ``narrowed`` for one pod starts with (None: none).

        Cached per group with what the room index needs of them, since every
        pod of a group that opens a NodeClaim opens it the same way.
        """
        key = (id(pool), merged.identity(), id(requests), narrowed.identity())
        if key in self._opened_cache:
            return self._opened_cache[key]
        rows = self._viable(
            pool,
            fitting_rows,
            narrowed,
            requests,
            narrowed_further=narrowed != merged,
            fitting=np.ones(len(fitting_rows), dtype=np.bool_),  # worked out by _fitting_rows
        )
        opening = None
        if len(rows):
            probe = Target("", narrowed, (), pool=pool)
            probe.update(narrowed, rows, dict(requests))
            room = self._cheap_room(probe)
            assert probe.prices is not None
            opening = Opening(rows, self._most_room(pool, rows), probe.prices, probe.cheapest_price, room)
        self._opened_cache[key] = opening
        return opening

    def _no_opening_reason(
        self,
        pool: NodePoolCapacity,
        merged: Requirements,
        narrowed: Requirements,
        fitting_rows: npt.NDArray[np.intp],
    ) -> str:
        """Why :meth:`_opening` found no options: minValues the fitting types miss, or topology.

        ``_viable`` drops every option when minValues is not met, so an empty
        opening with types left in the domain is minValues' doing, not the
        topology's.
        """
        rows = fitting_rows
        if narrowed != merged:
            rows = rows[self._labels_allow(pool, narrowed)[rows]]
        shortfall = min_values_shortfall(narrowed, self._types(pool, rows)) if len(rows) else None
        if shortfall is not None:
            return f"the instance types that fit the pod do not satisfy minValues ({shortfall})"
        return "no instance type is offered in the domain its topology constraints allow"

    # -- cost -------------------------------------------------------------------

    def repack(self) -> None:
        """Re-place the pods of new NodeClaims that hold only movable pods, by patterns, if cheaper.

        First-fit keeps alike pods together; for pods that constrain nothing
        but resources a cost-aware packing (:mod:`karpy.scheduling._patterns`)
        finds plans 10–15% cheaper on a real catalog. It only ever takes
        NodeClaims whose requirements are still exactly their NodePool's and
        whose pods are movable and counted by no topology constraint of any
        other pod, so no other pod's verdict changes; and the result replaces
        them only if it is cheaper, stays within the NodePool's limits and
        keeps minValues.
        """
        selected: dict[tuple[str, frozenset[tuple[str, str]]], bool] = {}

        def movable(pod: Pod) -> bool:
            if pod.key not in self._movable:
                return False
            labels = (pod.metadata.namespace, frozenset(pod.metadata.labels.items()))
            counted = selected.get(labels)
            if counted is None:
                counted = self.topology.selects(pod.metadata.namespace, pod.metadata.labels)
                selected[labels] = counted
            return not counted

        for pool in self.pools:
            base = self.pool_requirements[pool.nodepool.name]
            chosen = [
                target
                for target in self.bins
                if target.pool is pool and target.requirements == base and all(map(movable, target.pods))
            ]
            if len(chosen) < 2:
                continue
            replacement = self._pack(pool, base, [pod for target in chosen for pod in target.pods])
            if replacement is None:
                continue
            matrix = self._matrix(pool)
            before = sum(float(matrix.price[target.rows].min()) for target in chosen)
            after = sum(float(matrix.price[target.rows].min()) for target in replacement)
            if after >= before * (1 - 1e-9):
                continue
            removed = {id(target) for target in chosen}
            kept = [target for target in self.bins if id(target) not in removed]
            if pool.remaining is not None:
                reserved: ResourceAmounts = {}
                for target in kept + replacement:
                    if target.pool is pool:
                        reserved = add_amounts(reserved, target.reserved)
                if not _within(reserved, pool.remaining):
                    continue
            self.bins = kept + replacement

    @staticmethod
    def _patterns_for(
        matrix: PoolMatrix,
        rows: npt.NDArray[np.intp],
        requests: npt.NDArray[np.int64],
        counts: npt.NDArray[np.int64],
    ) -> PackedPlan | None:
        """The cheapest of the packer's plans over its chunk sizes, each pattern with its options."""
        # Only what the pods ask for matters: a type's other resources never decide a pattern.
        asked = requests.any(axis=0)
        best: PackedPlan | None = None
        for divisor in CHUNK_DIVISORS:
            patterns = pack(
                requests[:, asked], counts, matrix.net[rows][:, asked], matrix.price[rows], divisor
            )
            if patterns is None:
                return None
            priced = []
            total_price = 0.0
            for pattern in patterns:
                total = pattern.pods @ requests
                options = rows[(matrix.net[rows] >= total).all(axis=1)]
                # Kept and shared between plans (``TypeMemo.packs``): never to be changed in place.
                for array in (pattern.pods, options, total):
                    array.setflags(write=False)
                priced.append((pattern, options, total))
                total_price += float(matrix.price[options].min()) * pattern.repeat
            if best is None or total_price < best[0]:
                best = (total_price, priced)
        return best

    def _pack(self, pool: NodePoolCapacity, base: Requirements, pods: list[Pod]) -> list[Target] | None:
        """New NodeClaims for ``pods`` from the pattern packer, or None if it has no answer."""
        matrix = self._matrix(pool)
        rows = np.flatnonzero(self._labels_allow(pool, base)[: len(pool.instance_types)])
        rows = rows[np.isfinite(matrix.price[rows])]
        if len(rows) == 0:
            return None
        by_class: dict[tuple[int, ...], list[Pod]] = {}
        for pod in sorted(pods, key=lambda pod: pod.key):
            by_class.setdefault(tuple(matrix.vector(pod_requests(pod)).tolist()), []).append(pod)
        classes = sorted(by_class, reverse=True)
        requests = np.array(classes, dtype=np.int64)
        counts = np.array([len(by_class[vector]) for vector in classes], dtype=np.int64)
        # A function of the pool's matrix, the types allowed and how many pods of each class:
        # kept with the pool's types, since a consolidation pass packs the same leftovers often.
        key = (id(matrix), rows.tobytes(), requests.tobytes(), counts.tobytes())
        packs = pool.memo.packs if pool.memo is not None else {}
        if key in packs:
            best = packs[key]
        else:
            best = self._patterns_for(matrix, rows, requests, counts)
            if len(packs) >= MAX_KEPT_PACKS:
                packs.clear()
            packs[key] = best
        if best is None:
            return None
        checks_min_values = any(requirement.min_values for requirement in base)
        queues = [iter(by_class[vector]) for vector in classes]
        targets: list[Target] = []
        for pattern, options, total in best[1]:
            if checks_min_values and not min_values_met(base, self._types(pool, options)):
                return None
            summed = {
                resource: int(total[column]) for resource, column in matrix.columns.items() if total[column]
            }
            for _ in range(pattern.repeat):
                target = Target(
                    f"{pool.nodepool.name}/packed-{len(targets)}",
                    base,
                    pool.nodepool.template.taints,
                    pool=pool,
                )
                target.update(base, options, dict(summed))
                target.pods = [
                    next(queues[index])
                    for index, count in enumerate(pattern.pods.tolist())
                    for _ in range(count)
                ]
                targets.append(target)
        return targets


def _capacity_key(instance_type: InstanceType) -> tuple[int, int]:
    return (instance_type.allocatable.get("cpu", 0), instance_type.allocatable.get("memory", 0))


def _describe(requirements: Requirements) -> str:
    return ", ".join(str(requirement) for requirement in requirements)


def _format_resources(requests: Mapping[str, int], names: Sequence[str]) -> str:
    shown = names or sorted(requests)
    return "(" + ", ".join(f"{name} {format_amount(name, requests.get(name, 0))}" for name in shown) + ")"


def _offered_values(
    pools: Sequence[NodePoolCapacity], pool_requirements: Mapping[str, Requirements]
) -> Callable[[str], set[str]]:
    """Every value of a key (a zone, say) some pool's instance types can be launched with.

    A key no instance type of a pool defines (a label of the user's own, such
    as the ``capacity-spread`` of Karpenter's on-demand/spot split) takes its
    values from the pool's requirements, as in Karpenter: each is a domain a
    node of that pool may be given. Asked for only for the keys pods'
    topology constraints use, so a plan without zonal constraints never scans
    the catalog for zones.
    """

    def offered(key: str) -> set[str]:
        values: set[str] = set()
        for pool in pools:
            allowed = pool_requirements[pool.nodepool.name].get(key)
            defined = False
            for instance_type in pool.instance_types:
                if key not in instance_type.requirements:
                    continue
                defined = True
                requirement = instance_type.requirements[key]
                if not requirement.complement:
                    values.update(value for value in requirement.values if allowed.has(value))
            if not defined and not allowed.complement:
                values.update(allowed.values)
        return values

    return offered


def solve(
    pods: Sequence[Pod],
    existing: Sequence[ExistingCapacity],
    pools: Sequence[NodePoolCapacity],
    volume_terms: Mapping[str, Sequence[Requirements]] | None = None,
    namespace_labels: NamespaceLabels | None = None,
    *,
    stop_at: Container[str] = (),
    policy: SchedulingPolicy = DEFAULT_POLICY,
    volume_counts: Mapping[str, ResourceAmounts] | None = None,
    effective_zones: bool = False,
) -> Plan:
    """Place ``pods`` on ``existing`` capacity or on new NodeClaims from ``pools``.

    ``volume_terms`` maps a pod's key to the node affinity terms of the
    persistent volumes it mounts (a zonal volume's zone); ``volume_counts``
    maps it to how many volumes of each CSI driver it attaches, as resources
    (:func:`karpy.api.storage.volume_resource`), counted against each
    existing node's ``available`` (a driver it does not name is unlimited
    there) and each instance type's ``volume_limits``; ``namespace_labels``
    gives every namespace's labels, for pod affinity's namespaceSelectors.
    ``stop_at`` names existing capacity whose use ends the plan: the first
    pod placed on one of them returns a plan with ``stopped_at`` set and
    nothing else worked out (a consolidation simulation that would count on
    a node not yet initialized is no command, whatever the rest says).
    ``policy`` is MIN_VALUES_POLICY and PREFERENCE_POLICY (:mod:`karpy.scheduling.policy`).
    ``effective_zones`` fills the plan's ``effective_zones`` (:mod:`karpy.scheduling.zones`), which
    provisioning reports and the many simulations of disruption have no use for.
    """
    with _cycle_collection_paused():
        return _solve(
            pods,
            existing,
            pools,
            volume_terms or {},
            namespace_labels,
            stop_at,
            policy,
            volume_counts or {},
            effective_zones,
        )


@contextmanager
def _cycle_collection_paused() -> Iterator[None]:
    """Hold off CPython's cycle collector while a plan is made, then let it run again.

    A solve allocates millions of short-lived objects, every one of them
    freed by reference counting: the solver makes no reference cycles
    (``tests/scheduling/test_solver.py`` checks it). The cycle collector,
    triggered by allocations alone, would still rescan everything alive,
    the caller's snapshot of the cluster with every pod included: about a
    tenth of a 20,000-pod solve, spent finding nothing.
    """
    was_enabled = gc.isenabled()
    if was_enabled:
        gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _solve(
    pods: Sequence[Pod],
    existing: Sequence[ExistingCapacity],
    pools: Sequence[NodePoolCapacity],
    volume_terms: Mapping[str, Sequence[Requirements]],
    namespace_labels: NamespaceLabels | None,
    stop_at: Container[str] = (),
    policy: SchedulingPolicy = DEFAULT_POLICY,
    volume_counts: Mapping[str, ResourceAmounts] | None = None,
    effective_zones: bool = False,
) -> Plan:
    """The plan for ``pods``; made a second time, filling limited pools, if a limit left pods pending.

    A NodeClaim grows to a bigger type only when that is cheaper than fresh
    nodes (step 3), which spreads pods over many small NodeClaims. Under a
    limit that binds, fresh nodes are not to be had and small nodes spend the
    limit worst (each loses its reserved CPU and memory, and a 2-CPU node
    takes one 1-CPU pod): ten such pods under an 8-CPU limit get four nodes of
    one pod, where one 8-CPU node takes seven. So when a limit leaves pods
    pending, the plan is made again with the NodeClaims of limited pools
    growing whatever it costs (first-fit as Karpenter does it), and the plan
    that runs more pods, the highest priorities first, is kept. Plans that
    no limit cuts short are made once, as before.
    """
    # Replicas of several Deployments alike but for their labels are one group when no label
    # counts and no pool has limits (see ``alike_groups``).
    # Prepared capacity carries no pods (see ``PreparedCapacity``).
    bound = (
        ()
        if isinstance(existing, CapacityLeftOut)
        else (pod for capacity in existing for pod in capacity.pods)
    )
    limited = any(pool.remaining is not None for pool in pools)
    groups = alike_groups(
        pods, volume_terms, by_labels=limited or labels_matter(pods, bound), volume_counts=volume_counts
    )
    if limited:
        # The plan kept may be the second one, which need not use what the first stopped at.
        stop_at = ()
    plan, left_at_limit = _plan(
        groups,
        existing,
        pools,
        volume_terms,
        namespace_labels,
        fill_limited_pools=False,
        stop_at=stop_at,
        policy=policy,
        volume_counts=volume_counts,
        effective_zones=effective_zones,
    )
    if left_at_limit:
        fuller, _ = _plan(
            groups,
            existing,
            pools,
            volume_terms,
            namespace_labels,
            fill_limited_pools=True,
            policy=policy,
            volume_counts=volume_counts,
        )
        if _placed_by_priority(fuller, pods) > _placed_by_priority(plan, pods):
            fuller.effective_zones = plan.effective_zones
            plan = fuller
    return plan


def _plan(
    groups: Sequence[Sequence[Pod]],
    existing: Sequence[ExistingCapacity],
    pools: Sequence[NodePoolCapacity],
    volume_terms: Mapping[str, Sequence[Requirements]],
    namespace_labels: NamespaceLabels | None,
    *,
    fill_limited_pools: bool,
    stop_at: Container[str] = (),
    policy: SchedulingPolicy = DEFAULT_POLICY,
    volume_counts: Mapping[str, ResourceAmounts] | None = None,
    effective_zones: bool = False,
) -> tuple[Plan, bool]:
    """One plan for the ``groups`` of alike pods, and whether a limit left some pending (with each
    pod's effective zone when asked)."""
    plan = Plan()
    requested = {resource for group in groups for pod in group for resource in pod.spec.requests}
    scheduler = _Scheduler(
        existing,
        pools,
        requested,
        volume_terms,
        namespace_labels,
        fill_limited_pools=fill_limited_pools,
        stop_at=stop_at,
        policy=policy,
        volume_counts=volume_counts,
    )
    if effective_zones:
        scheduler.note_effective_zones(groups, plan)
    try:
        for group in groups:
            scheduler.place_group(group, plan)
    except _StoppedError as stopped:
        return Plan(stopped_at=stopped.name, effective_zones=plan.effective_zones), False
    scheduler.repack()
    prices = Prices()
    plan.new_nodeclaims, spent = spend_reservations(
        [finish(target, prices, relax_min_values=policy.relaxes_min_values) for target in scheduler.bins],
        pools,
    )
    for nodeclaim in spent:
        for pod in nodeclaim.pods:
            plan.unschedulable[pod.key] = f"nodepool {nodeclaim.nodepool}: {RESERVATIONS_SPENT}"
    return plan, scheduler.left_at_limit


def _placed_by_priority(plan: Plan, pods: Sequence[Pod]) -> list[int]:
    """How many pods the plan places at each priority, highest first (compared as a whole)."""
    placed: dict[int, int] = {}
    for pod in pods:
        placed.setdefault(pod.spec.priority, 0)
        if pod.key not in plan.unschedulable:
            placed[pod.spec.priority] += 1
    return [placed[priority] for priority in sorted(placed, reverse=True)]
