"""A simulated cloud that stands in for AWS (EC2NodeClass) and kwok (KWOKNodeClass).

It serves the bundled catalog of real AWS instance types, so plans and prices
are those Karpenter would produce on AWS, and it behaves like a cloud where
the controllers can tell:

- ``create`` picks the capacity type the way Karpenter's AWS provider does
  (spot whenever the NodeClaim allows it and a spot offering is available,
  on-demand otherwise) and, within it, the cheapest offering; the instance
  joins the cluster as a Node after ``registration_delay``;
- injected insufficient-capacity failures (by type, zone and capacity type,
  wildcards allowed, within a time window) make an offering fail; failed
  offerings are reported unavailable for 3 minutes, as Karpenter's
  unavailable-offerings cache does, so the next pass falls back;
- EC2NodeClass subnet selector terms resolve to simulated zones: a term with
  tags selects every zone's subnet, a term with an id selects one zone;
- node class drift follows the rule of ``karpy run``
  (:mod:`karpy.disruption.nodeclass_drift`): each NodeClaim carries its class'
  hash (:mod:`karpy.api.nodeclass_hash`), and each instance the AMI, subnet
  and security groups its class resolved at launch. A selector term stands
  for the resources it names (an id for itself, tags or a name or an alias
  for resources named after them), so changing a term selects other
  resources and drifts the nodes on them, as a real selector that now
  matches other resources does;
- capacity reservations (:class:`SimulatedReservation`, a Scenario's
  ``cloud.capacityReservations``) that an EC2NodeClass's
  ``capacityReservationSelectorTerms`` select become ``reserved`` offerings
  and launches through :mod:`karpy.cloud.reservations`, the code ``karpy run``
  uses; they are billed used or not (:meth:`SimulatedCloud.reservation_fees`);
- scheduled interruptions (:class:`Interruption`) pick some of its instances
  at a given time and warn of them as EC2 would through EventBridge (a spot
  interruption warning, a rebalance recommendation, a state change, a
  scheduled change); a spot instance warned of is reclaimed two minutes later
  (:meth:`SimulatedCloud.terminate`). :mod:`karpy.sim.interruptions` delivers
  the warnings to the interruption controller and keeps the time.
"""

from __future__ import annotations

import builtins
import dataclasses
import hashlib
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from karpy.api.instancetype import InstanceType
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import NodeClaim, NodeClaimSpec, NodeClaimStatus
from karpy.api.nodeclass import (
    INSTANCE_STORE_RAID0,
    EC2NodeClass,
    KWOKNodeClass,
    NodeClass,
    StatusCapacityReservation,
)
from karpy.api.nodeclass_hash import NodeClassHash, ec2nodeclass_hash, kwoknodeclass_hash
from karpy.api.nodepool import NodeClassRef, NodePool
from karpy.api.requirements import (
    AWS_LABEL_CAPACITY_RESERVATION_ID,
    AWS_LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE,
    CAPACITY_TYPE_RESERVED,
    CAPACITY_TYPE_SPOT,
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    LABEL_ZONE,
    Requirements,
)
from karpy.cloud.aws_catalog import Catalog, ephemeral_storage_bytes, instance_type_from_entry, load_catalog
from karpy.cloud.kwok_catalog import KwokInstanceTypes, instance_types_of, load_kwok_catalog
from karpy.cloud.offerings import UnavailableOfferings, launch_capacity_type
from karpy.cloud.provider import (
    CloudProviderError,
    InsufficientCapacityError,
    NodeClaimNotFoundError,
    NodeClassNotReadyError,
    NodeClassProblem,
    RepairPolicy,
)
from karpy.cloud.repair_policies import AWS_REPAIR_POLICIES
from karpy.cloud.reservations import (
    CAPACITY_BLOCK_EXPIRING_WINDOW,
    RESERVATION_TYPE_CAPACITY_BLOCK,
    ReservationAvailability,
    demoted,
    reservation_labels,
    reservation_state,
    reservation_to_launch,
    selected_by,
    with_reserved_offerings,
)
from karpy.disruption.nodeclass_drift import LaunchedWith, Resolved, nodeclass_drift
from karpy.operator.cluster import Clock, Cluster


@dataclass(frozen=True, slots=True)
class CapacityFailure:
    """Offerings that fail with insufficient capacity while ``start <= t < end``."""

    instance_type: str = "*"
    zone: str = "*"
    capacity_type: str = "*"
    start: float = 0.0
    end: float = float("inf")

    def matches(self, instance_type: str, zone: str, capacity_type: str, elapsed: float) -> bool:
        return (
            self.instance_type in ("*", instance_type)
            and self.zone in ("*", zone)
            and self.capacity_type in ("*", capacity_type)
            and self.start <= elapsed < self.end
        )


@dataclass(frozen=True, slots=True)
class LaunchError:
    """Every launch fails with ``message`` while ``start <= t < end`` (an API outage, say)."""

    message: str = "simulated cloud API error"
    start: float = 0.0
    end: float = float("inf")


@dataclass(frozen=True, slots=True)
class RegistrationFailure:
    """Instances launched while ``start <= t < end`` never join the cluster (a broken AMI, say)."""

    start: float = 0.0
    end: float = float("inf")


# The kinds of scenario interruptions, as a scenario spells them.
SPOT_INTERRUPTION = "spot-interruption"
REBALANCE = "rebalance"
STATE_CHANGE = "state-change"
SCHEDULED_CHANGE = "scheduled-change"
RESERVATION_INTERRUPTION = "capacity-reservation-interruption"
INTERRUPTION_KINDS = (SPOT_INTERRUPTION, REBALANCE, STATE_CHANGE, SCHEDULED_CHANGE, RESERVATION_INTERRUPTION)
# Kinds whose instances the cloud takes back after the notice (a spot instance, or one in an
# interruptible capacity reservation).
RECLAIMING_KINDS = (SPOT_INTERRUPTION, RESERVATION_INTERRUPTION)
# A spot instance is reclaimed this long after its interruption warning, as on EC2.
SPOT_INTERRUPTION_NOTICE = 120.0


@dataclass(frozen=True, slots=True)
class Interruption:
    """At ``at``, the cloud warns of what is about to happen to some of its instances.

    The instances are those of ``instance_types`` in ``zones`` (empty: any),
    spot ones only for a spot interruption or a rebalance recommendation
    (EC2 sends those for spot instances alone), instances in an interruptible
    capacity reservation only for a capacity reservation interruption; of these, the ``count
    oldest, or the oldest ``fraction`` of them rounded up (all of them when
    neither is given): a fixed choice, so a run is repeatable.
    """

    at: float
    kind: str = SPOT_INTERRUPTION
    instance_types: tuple[str, ...] = ()
    zones: tuple[str, ...] = ()
    fraction: float | None = None
    count: int | None = None
    # The new state of a state change (stopping, stopped, shutting-down or terminated).
    state: str = "stopping"

    @property
    def spot_only(self) -> bool:
        return self.kind in (SPOT_INTERRUPTION, REBALANCE)

    def describe_instances(self) -> str:
        """Which instances it is about, in words: ``spot instance of m5.large in us-east-1a``."""
        words = "spot instance" if self.spot_only else "instance"
        if self.kind == RESERVATION_INTERRUPTION:
            words = "instance in an interruptible capacity reservation"
        if self.instance_types:
            words += f" of {', '.join(self.instance_types)}"
        if self.zones:
            words += f" in {', '.join(self.zones)}"
        return words

    def select(self, instances: Iterable[Instance]) -> list[Instance]:
        matching = sorted(
            (
                instance
                for instance in instances
                if (not self.instance_types or instance.instance_type.name in self.instance_types)
                and (not self.zones or instance.zone in self.zones)
                and (instance.capacity_type == CAPACITY_TYPE_SPOT or not self.spot_only)
                and (
                    self.kind != RESERVATION_INTERRUPTION
                    or instance.labels.get(AWS_LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE) == "true"
                )
            ),
            key=lambda instance: (instance.launched_at, instance.provider_id),
        )
        if self.count is not None:
            return matching[: self.count]
        fraction = 1.0 if self.fraction is None else self.fraction
        return matching[: math.ceil(fraction * len(matching))]


@dataclass(frozen=True, slots=True)
class NodeFailure:
    """At ``at``, some instances' Nodes get ``condition_type=condition_status`` (their kubelet
    stopped posting, a disk failed...), as node repair would find them.

    The instances are chosen as an :class:`Interruption`'s are (of ``instance_types`` in
    ``zones``; the ``count`` oldest, or the oldest ``fraction`` rounded up, or all), spot
    and on-demand alike. The condition stays until the node goes.
    """

    at: float
    condition_type: str = "Ready"
    condition_status: str = "Unknown"
    reason: str = "NodeStatusUnknown"
    instance_types: tuple[str, ...] = ()
    zones: tuple[str, ...] = ()
    fraction: float | None = None
    count: int | None = None

    def select(self, instances: Iterable[Instance]) -> list[Instance]:
        chosen = Interruption(
            self.at,
            STATE_CHANGE,
            self.instance_types,
            self.zones,
            self.fraction,
            self.count,
        )
        return chosen.select(instances)


# The account that owns the simulated cloud's reservations (a reservation's ownerID by default).
SIMULATED_OWNER_ID = "123456789012"


@dataclass(frozen=True, slots=True)
class SimulatedReservation:
    """A capacity reservation the simulated cloud holds (a Scenario's ``cloud.capacityReservations``).

    ``reservation.end_time`` is seconds after the start of the run (None: no
    end); ``count`` instances of its type in its zone, selected by an
    EC2NodeClass's ``capacityReservationSelectorTerms`` by id, or by ``tags``,
    owner and instance match criteria, as EC2's filters select them.
    """

    reservation: StatusCapacityReservation
    count: int
    tags: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class SimulatedCloudSettings:
    registration_delay: float = 30.0
    # What a KWOKNodeClass without the karpy.dev/kwok-instance-types annotation offers.
    kwok_instance_types: KwokInstanceTypes = KwokInstanceTypes.AWS
    registration_failures: list[RegistrationFailure] = field(default_factory=list)
    capacity_failures: list[CapacityFailure] = field(default_factory=list)
    launch_errors: list[LaunchError] = field(default_factory=list)
    interruptions: list[Interruption] = field(default_factory=list)
    node_failures: list[NodeFailure] = field(default_factory=list)
    capacity_reservations: list[SimulatedReservation] = field(default_factory=list)
    # The ReservedCapacity gate: capacity reservations are offered and launched into.
    reserved_capacity: bool = True


@dataclass(frozen=True, slots=True)
class Instance:
    provider_id: str
    node_name: str
    nodeclaim: str
    instance_type: InstanceType
    zone: str
    capacity_type: str
    price: float
    launched_at: float
    labels: dict[str, str]
    # The AMI, subnet and security groups it was launched with, and its NodeClaim's
    # annotations from the launch (the node class hash): what drift compares.
    launched_with: LaunchedWith = field(default_factory=LaunchedWith)
    annotations: dict[str, str] = field(default_factory=dict)
    # The capacity reservation it runs in ("" : none).
    reservation_id: str = ""


class SimulatedCloud:
    name = "simulated"

    def __init__(
        self,
        # Read, and written only by ``reboot`` (a rebooted instance's Node gets a new boot ID).
        cluster: Cluster,
        clock: Clock,
        settings: SimulatedCloudSettings | None = None,
        catalog: Catalog | None = None,
        start: float | None = None,
    ) -> None:
        self.cluster = cluster
        self.clock = clock
        self.settings = settings or SimulatedCloudSettings()
        self.catalog = catalog or load_catalog()
        self.start = clock.now() if start is None else start
        self.instances: dict[str, Instance] = {}
        # The instance launched for each NodeClaim name, so a repeated launch finds it at once.
        self._launched_for: dict[str, str] = {}
        self.terminated: dict[str, Instance] = {}
        self.unavailable = UnavailableOfferings(clock)
        # Instances left per capacity reservation, kept as EC2 would (karpy.cloud.reservations).
        self.reservations = ReservationAvailability(clock)
        self._counted: set[str] = set()
        self.launch_listeners: list[Callable[[Instance], None]] = []
        self._launches = 0
        # (kind, name, zones, unavailable offerings, root volume bytes, RAID0) → the class' instance types.
        self._cache: dict[
            tuple[str, str, tuple[str, ...], frozenset[tuple[str, str, str]], int, bool], list[InstanceType]
        ] = {}

    # -- node classes ------------------------------------------------------

    def node_class(self, ref: NodeClassRef) -> NodeClass:
        node_class = self.cluster.node_class(ref.group, ref.kind, ref.name)
        if node_class is None:
            raise NodeClassNotReadyError(f"{ref.kind} {ref.name!r} ({ref.group}) not found")
        return node_class

    def node_class_problem(self, node_class: NodeClass) -> NodeClassProblem | None:
        """Both kinds of node class are served, and ready as soon as they exist."""
        return None

    def offers_karpenter_types(self, node_class: NodeClass) -> bool:
        """Whether a KWOKNodeClass offers Karpenter's kwok types rather than the AWS catalog."""
        return (
            isinstance(node_class, KWOKNodeClass)
            and instance_types_of(node_class, self.settings.kwok_instance_types)
            is KwokInstanceTypes.KARPENTER
        )

    def zones_for(self, node_class: NodeClass) -> tuple[str, ...]:
        if self.offers_karpenter_types(node_class):
            return load_kwok_catalog().zones
        if isinstance(node_class, KWOKNodeClass):
            return self.catalog.zones
        zones: set[str] = set()
        for term in node_class.subnet_selector_terms:
            if term.id:
                digest = int(hashlib.sha256(term.id.encode()).hexdigest(), 16)
                zones.add(self.catalog.zones[digest % len(self.catalog.zones)])
            else:
                zones.update(self.catalog.zones)
        return tuple(zone for zone in self.catalog.zones if zone in zones)

    def reservations_for(self, node_class: NodeClass) -> tuple[StatusCapacityReservation, ...]:
        """The reservations the class' selector terms pick, as its status would list them now.

        As ``karpy run`` resolves them: ended ones are left out and a Capacity
        Block near its end is ``expiring``; none with the ReservedCapacity gate off.
        """
        if not isinstance(node_class, EC2NodeClass) or not self.settings.reserved_capacity:
            return ()
        terms = node_class.capacity_reservation_selector_terms
        now = self.clock.now()
        picked = []
        for held in self.settings.capacity_reservations:
            reservation = held.reservation
            if not selected_by(terms, reservation, held.tags):
                continue
            if reservation.id not in self._counted:
                self._counted.add(reservation.id)
                self.reservations.sync({reservation.id: held.count})
            end = None if reservation.end_time is None else self.start + reservation.end_time
            if end is not None and end <= now:
                continue
            state = reservation_state(reservation.reservation_type, end, now)
            picked.append(dataclasses.replace(reservation, end_time=end, state=state))
        return tuple(picked)

    def reservation_fees(self) -> list[tuple[float, float, float]]:
        """(from, until, $/hour) of each reservation held: its instances at on-demand price, used or not."""
        fees = []
        for held in self.settings.capacity_reservations:
            entry = self.catalog.entry(held.reservation.instance_type)
            if entry is None:
                continue
            end = held.reservation.end_time
            fees.append(
                (
                    self.start,
                    math.inf if end is None else self.start + end,
                    held.count * entry.on_demand_price,
                )
            )
        return fees

    def mark_reservation_unavailable(self, reservation_id: str) -> None:
        self.reservations.mark_unavailable(reservation_id)

    def reservations_expiring_at(self) -> dict[str, float]:
        """Each Capacity Block held, with when it is expiring (in cluster time)."""
        if not self.settings.reserved_capacity:
            return {}
        return {
            held.reservation.id: self.start + held.reservation.end_time - CAPACITY_BLOCK_EXPIRING_WINDOW
            for held in self.settings.capacity_reservations
            if held.reservation.reservation_type == RESERVATION_TYPE_CAPACITY_BLOCK
            and held.reservation.end_time is not None
        }

    def _in_reservation(self, instance: Instance) -> bool:
        """Whether ``instance`` still runs in its reservation: one it was not taken out of, not ended."""
        if not instance.reservation_id:
            return False
        now = self.clock.now()
        return not any(
            held.reservation.id == instance.reservation_id
            and held.reservation.end_time is not None
            and self.start + held.reservation.end_time <= now
            for held in self.settings.capacity_reservations
        )

    def take_back_reserved(self, provider_id: str) -> None:
        """An interruptible reservation takes the instance's slot back: its end frees nothing."""
        instance = self.instances.get(provider_id)
        if instance is not None and instance.reservation_id:
            self.instances[provider_id] = dataclasses.replace(instance, reservation_id="")

    def instance_types_for(self, node_class: NodeClass) -> list[InstanceType]:
        reservations = self.reservations_for(node_class)
        types = self._catalog_types(node_class)
        if not reservations:
            return types
        now = self.clock.now()
        return [with_reserved_offerings(t, reservations, self.reservations, now) for t in types]

    def _catalog_types(self, node_class: NodeClass) -> list[InstanceType]:
        zones = self.zones_for(node_class)
        unavailable = self.unavailable.now()
        ec2_class = node_class if isinstance(node_class, EC2NodeClass) else None
        root_volume = ephemeral_storage_bytes(ec2_class)
        raid0 = ec2_class is not None and ec2_class.instance_store_policy == INSTANCE_STORE_RAID0
        key = (node_class.kind, node_class.name, zones, unavailable, root_volume, raid0)
        cached = self._cache.get(key)
        if cached is None:
            kubelet = ec2_class.kubelet if ec2_class is not None else None
            if self.offers_karpenter_types(node_class):
                # Karpenter's kwok types, in its test zones (the key's zones tell them apart).
                cached = load_kwok_catalog().instance_types(unavailable)
            else:
                cached = [
                    instance_type_from_entry(
                        entry,
                        self.catalog.region,
                        zones,
                        kubelet,
                        unavailable,
                        root_volume,
                        instance_store_raid0=raid0,
                    )
                    for entry in self.catalog.entries
                    if any(zone in zones for zone in entry.zones)
                ]
            if len(self._cache) > 64:
                self._cache.clear()
            self._cache[key] = cached
        return cached

    # -- CloudProvider -----------------------------------------------------

    def mark_offering_unavailable(self, instance_type: str, zone: str, capacity_type: str) -> None:
        self.unavailable.mark(instance_type, zone, capacity_type)

    def get_instance_types(self, nodepool: NodePool) -> list[InstanceType]:
        return self.instance_types_for(self.node_class(nodepool.template.node_class_ref))

    def create(self, nodeclaim: NodeClaim) -> NodeClaim:
        # Idempotent by NodeClaim name, as a launch tagged with it is: a controller
        # that crashed after launching and before recording it gets the same instance.
        launched = self.instances.get(self._launched_for.get(nodeclaim.metadata.name, ""))
        if launched is not None and launched.nodeclaim == nodeclaim.metadata.name:
            return self._launched_claim(nodeclaim, launched)
        elapsed = self.clock.now() - self.start
        for error in self.settings.launch_errors:
            if error.start <= elapsed < error.end:
                raise CloudProviderError(error.message)
        node_class = self.node_class(nodeclaim.spec.node_class_ref)
        requirements = nodeclaim.requirement_set()
        # A NodeClaim names its types (Karpenter's launch does): only those are read.
        named = requirements.get(LABEL_INSTANCE_TYPE) if LABEL_INSTANCE_TYPE in requirements else None
        candidates = [
            instance_type
            for instance_type in self.instance_types_for(node_class)
            if (named is None or named.has(instance_type.name))
            and instance_type.requirements.intersects(requirements) is None
        ]
        offerings = [
            (offering.price, instance_type.name, offering.zone, instance_type, offering)
            for instance_type in candidates
            for offering in instance_type.available_offerings(requirements)
        ]
        if not offerings:
            raise InsufficientCapacityError(
                f"no available offering satisfies the requirements of NodeClaim {nodeclaim.name}"
            )
        capacity_type = launch_capacity_type(offering.capacity_type for *_, offering in offerings)
        reservations = self.reservations_for(node_class)
        failed: list[tuple[str, str, str]] = []
        for price, _, zone, instance_type, offering in sorted(offerings, key=lambda item: item[:3]):
            if offering.capacity_type != capacity_type:
                continue
            if capacity_type == CAPACITY_TYPE_RESERVED:
                into = reservation_to_launch(
                    reservations,
                    self.reservations,
                    instance_type.name,
                    zone,
                    self.clock.now(),
                    requirements.get(AWS_LABEL_CAPACITY_RESERVATION_ID)
                    if AWS_LABEL_CAPACITY_RESERVATION_ID in requirements
                    else None,
                )
                if into is None:
                    continue
                return self._launch(nodeclaim, node_class, instance_type, zone, capacity_type, price, into)
            triple = (instance_type.name, zone, capacity_type)
            if any(failure.matches(*triple, elapsed) for failure in self.settings.capacity_failures):
                failed.append(triple)
                self.unavailable.mark(*triple)
                continue
            return self._launch(nodeclaim, node_class, instance_type, zone, capacity_type, price)
        raise InsufficientCapacityError(
            f"insufficient {capacity_type} capacity in {len(failed)} offerings for {nodeclaim.name}",
            tuple(failed),
        )

    def adopt(
        self,
        nodeclaim: NodeClaim,
        node_name: str,
        instance_type: str,
        zone: str,
        capacity_type: str,
        launched_at: float,
    ) -> Instance | None:
        """Take an instance a real cluster runs for ``nodeclaim`` as one of this cloud's (from-cluster runs).

        Priced and sized as the class' catalog has it; launched with what the class resolves to
        now (a node already drifted says so in its NodeClaim's hash annotation). None, and
        nothing taken, when the catalog has no such offering: karpy cannot price it.
        """
        node_class = self.node_class(nodeclaim.spec.node_class_ref)
        found = next((t for t in self.instance_types_for(node_class) if t.name == instance_type), None)
        offering = (
            next(
                (o for o in found.offerings if o.zone == zone and o.capacity_type == capacity_type),
                None,
            )
            if found is not None
            else None
        )
        if found is None or offering is None:
            return None
        reservation_id = (
            nodeclaim.metadata.labels.get(AWS_LABEL_CAPACITY_RESERVATION_ID, "")
            if capacity_type == CAPACITY_TYPE_RESERVED
            else ""
        )
        instance = Instance(
            provider_id=nodeclaim.status.provider_id,
            node_name=node_name,
            nodeclaim=nodeclaim.name,
            instance_type=found,
            zone=zone,
            capacity_type=capacity_type,
            price=offering.price,
            launched_at=launched_at,
            labels=dict(nodeclaim.metadata.labels),
            launched_with=self._launched_with(node_class, zone),
            annotations=dict(nodeclaim.metadata.annotations),
            reservation_id=reservation_id,
        )
        self.instances[instance.provider_id] = instance
        self._launched_for[nodeclaim.name] = instance.provider_id
        return instance

    def _aws_names(self, zone: str) -> tuple[str, str]:
        """The provider ID and node name of the instance numbered ``_launches``."""
        octets = divmod(self._launches, 250)
        return f"aws:///{zone}/i-{self._launches:017x}", f"ip-10-0-{octets[0]}-{octets[1] + 4}.ec2.internal"

    def _launch(
        self,
        nodeclaim: NodeClaim,
        node_class: NodeClass,
        instance_type: InstanceType,
        zone: str,
        capacity_type: str,
        price: float,
        reservation: StatusCapacityReservation | None = None,
    ) -> NodeClaim:
        self._launches += 1
        labels = instance_type.requirements.labels(include_well_known=True)
        labels[LABEL_ZONE] = zone
        labels[LABEL_CAPACITY_TYPE] = capacity_type
        if reservation is not None:
            labels.update(reservation_labels(reservation))
            self.reservations.mark_launched(reservation.id)
        if isinstance(node_class, KWOKNodeClass):
            provider_id = f"kwok://{nodeclaim.name}"
            node_name = nodeclaim.name
        else:
            provider_id, node_name = self._aws_names(zone)
            while provider_id in self.instances or self.cluster.node(node_name) is not None:
                # Taken by an instance adopted from a cluster the simulation started from.
                self._launches += 1
                provider_id, node_name = self._aws_names(zone)
        instance = Instance(
            provider_id=provider_id,
            node_name=node_name,
            nodeclaim=nodeclaim.name,
            instance_type=instance_type,
            zone=zone,
            capacity_type=capacity_type,
            price=price,
            launched_at=self.clock.now(),
            labels=labels,
            launched_with=self._launched_with(node_class, zone),
            annotations=self.node_class_hash(node_class).annotations(),
            reservation_id=reservation.id if reservation is not None else "",
        )
        self.instances[provider_id] = instance
        self._launched_for[nodeclaim.metadata.name] = provider_id
        for listener in self.launch_listeners:
            listener(instance)
        return self._launched_claim(nodeclaim, instance)

    def _launched_claim(self, nodeclaim: NodeClaim, instance: Instance) -> NodeClaim:
        """What ``create`` returns: the instance's NodeClaim with the class' hash it was launched from."""
        hydrated = self._hydrate(nodeclaim.metadata.name, nodeclaim.spec, instance)
        return hydrated.with_metadata(annotations=dict(instance.annotations))

    def _hydrate(self, name: str, spec: NodeClaimSpec, instance: Instance) -> NodeClaim:
        labels = dict(instance.labels)
        if labels.get(LABEL_CAPACITY_TYPE) == CAPACITY_TYPE_RESERVED and not self._in_reservation(instance):
            # Out of its reservation (ended, or taken back), EC2 runs it as on-demand and names none.
            labels = demoted(labels)
        return NodeClaim(
            metadata=ObjectMeta(name=name, labels=labels),
            spec=spec,
            status=NodeClaimStatus(
                provider_id=instance.provider_id,
                image_id=instance.launched_with.image_id or SIMULATED_IMAGE_ID,
                capacity=dict(instance.instance_type.capacity),
                allocatable=dict(instance.instance_type.allocatable),
            ),
        )

    def delete(self, nodeclaim: NodeClaim) -> None:
        if self.terminate(nodeclaim.status.provider_id) is None:
            raise NodeClaimNotFoundError(f"instance {nodeclaim.status.provider_id!r} not found")

    def terminate(self, provider_id: str) -> Instance | None:
        """Take an instance away (deleted, or a spot instance reclaimed); None if it is already gone."""
        instance = self.instances.pop(provider_id, None)
        if instance is not None:
            self.terminated[provider_id] = instance
            if instance.reservation_id:
                self.reservations.mark_terminated(instance.reservation_id)  # its slot is free again
        return instance

    def get(self, provider_id: str) -> NodeClaim:
        instance = self.instances.get(provider_id)
        if instance is None:
            raise NodeClaimNotFoundError(f"instance {provider_id!r} not found")
        found = self._hydrate(instance.nodeclaim, _EMPTY_SPEC, instance)
        # As a cloud lists it: created when launched (garbage collection goes by its age).
        return dataclasses.replace(
            found, metadata=found.metadata.with_changes(creation_timestamp=instance.launched_at)
        )

    def list(self) -> list[NodeClaim]:
        return [self.get(provider_id) for provider_id in sorted(self.instances)]

    def is_drifted(self, nodeclaim: NodeClaim) -> str:
        """The rule of ``karpy run`` (:func:`karpy.disruption.nodeclass_drift.nodeclass_drift`)."""
        instance = self.instances.get(nodeclaim.status.provider_id)
        if instance is None:
            return ""
        try:
            node_class = self.node_class(nodeclaim.spec.node_class_ref)
        except NodeClassNotReadyError:
            return ""
        resolved = self.resolved(node_class)
        if isinstance(node_class, EC2NodeClass) and self.settings.reserved_capacity:
            resolved = dataclasses.replace(
                resolved,
                capacity_reservation_ids=frozenset(r.id for r in self.reservations_for(node_class)),
            )
        launched = dataclasses.replace(
            instance.launched_with,
            capacity_reservation_id=instance.reservation_id if self._in_reservation(instance) else "",
        )
        return nodeclass_drift(
            nodeclaim.metadata.annotations, self.node_class_hash(node_class), launched, resolved
        )

    def node_class_hash(self, node_class: NodeClass) -> NodeClassHash:
        if isinstance(node_class, KWOKNodeClass):
            return kwoknodeclass_hash(instance_types_of(node_class, self.settings.kwok_instance_types).value)
        return ec2nodeclass_hash(node_class)

    def resolved(self, node_class: NodeClass) -> Resolved:
        """What the class' selectors resolve to in the simulated account (nothing for a KWOKNodeClass)."""
        if isinstance(node_class, KWOKNodeClass):
            return Resolved()
        return Resolved(
            image_ids=frozenset({simulated_image_id(node_class)}),
            subnet_ids=frozenset(self.subnets_for(node_class)),
            security_group_ids=simulated_security_groups(node_class),
        )

    def subnets_for(self, node_class: EC2NodeClass) -> dict[str, str]:
        """Subnet id → zone: an id term selects that subnet (in a zone its id picks), tags one per zone."""
        subnets: dict[str, str] = {}
        for term in node_class.subnet_selector_terms:
            if term.id:
                digest = int(hashlib.sha256(term.id.encode()).hexdigest(), 16)
                subnets[term.id] = self.catalog.zones[digest % len(self.catalog.zones)]
            else:
                named = _short_digest(sorted(term.tags.items()))
                subnets.update({f"subnet-{named}-{zone}": zone for zone in self.catalog.zones})
        return subnets

    def _launched_with(self, node_class: NodeClass, zone: str) -> LaunchedWith:
        if isinstance(node_class, KWOKNodeClass):
            return LaunchedWith()
        in_zone = sorted(subnet for subnet, where in self.subnets_for(node_class).items() if where == zone)
        return LaunchedWith(
            image_id=simulated_image_id(node_class),
            subnet_id=in_zone[0] if in_zone else "",
            security_group_ids=simulated_security_groups(node_class),
        )

    def repair_policies(self) -> builtins.list[RepairPolicy]:
        return list(AWS_REPAIR_POLICIES)

    supports_reboot = True

    def reboot(self, nodeclaim: NodeClaim, operation_id: str) -> None:
        """The instance reboots at once: its Node gets a new boot ID (its kubelet posts it back up)."""
        instance = self.instances.get(nodeclaim.status.provider_id)
        node = self.cluster.node(instance.node_name) if instance is not None else None
        if node is None:
            raise NodeClaimNotFoundError(f"instance {nodeclaim.status.provider_id} not found")
        boot_id = f"sim-{operation_id}"
        if node.boot_id != boot_id:
            self.cluster.update(node.with_changes(boot_id=boot_id))

    def compatible_instance_types(self, nodepool: NodePool) -> builtins.list[InstanceType]:
        """Instance types the pool's requirements admit (for validation and explanations)."""
        requirements: Requirements = nodepool.template.requirement_set()
        return [
            instance_type
            for instance_type in self.get_instance_types(nodepool)
            if instance_type.requirements.intersects(requirements) is None
            and instance_type.available_offerings(requirements)
        ]


_EMPTY_SPEC = NodeClaimSpec(node_class_ref=NodeClassRef("", "", ""))


SIMULATED_IMAGE_ID = "ami-simulated"


def _short_digest(material: object) -> str:
    return hashlib.sha256(repr(material).encode()).hexdigest()[:12]


def simulated_image_id(node_class: EC2NodeClass) -> str:
    """The AMI the class' AMI selector terms resolve to (one for every architecture)."""
    terms = sorted(
        (term.id, term.name, term.alias, term.owner, sorted(term.tags.items()))
        for term in node_class.ami_selector_terms
    )
    return f"ami-{_short_digest(terms)}"


def simulated_security_groups(node_class: EC2NodeClass) -> frozenset[str]:
    """The security groups the class' terms resolve to: an id itself, a name or tags one group each."""
    return frozenset(
        term.id or f"sg-{_short_digest((term.name, sorted(term.tags.items())))}"
        for term in node_class.security_group_selector_terms
    )
