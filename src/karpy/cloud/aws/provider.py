"""AwsCloudProvider: EC2 instances for EC2NodeClass pools (``karpy run --cloud-provider aws``).

**What it offers** (``get_instance_types``): the bundled catalog
(:mod:`karpy.cloud.aws_catalog`), each type offered in the zones of the
class' resolved subnets only, priced with the latest prices
(:meth:`update_prices`), sized with the class' kubelet settings as the
simulator sizes them, and only the types some resolved AMI serves (an arm64
AMI alone offers no x86 type). Offerings that failed for capacity in the
last 3 minutes are reported unavailable (:class:`UnavailableOfferings`), so
the next scheduling pass falls back to other types, zones or on-demand. The
class' capacity reservations (``status.capacityReservations``, gate
ReservedCapacity) add ``reserved`` offerings priced near zero
(:mod:`karpy.cloud.reservations`); a reserved launch targets its reservation,
takes one off its count (a termination gives it back) and a refusal for
capacity marks it used up, so the next pass falls back. A
class that is missing or not Ready raises :class:`NodeClassNotReadyError`:
nothing is planned for it, so no CreateFleet is ever attempted with a
half-resolved class.

**Launching never blocks the reconcile loop.** ``create`` hands the launch to
a bounded pool (:mod:`karpy.cloud.aws.launcher`) and raises
:class:`LaunchInProgressError`; when the launch is done the pool calls
``wake(name)`` and the next ``create`` returns the hydrated NodeClaim or
raises the launch's error. One launch is:

1. for a NodeClaim older than this provider (karpy restarted, maybe between
   CreateFleet and the NodeClaim's status write), look for an instance
   already tagged ``karpenter.sh/nodeclaim=<name>`` and adopt it: no second
   instance after a crash;
2. plan the fleet (:mod:`karpy.cloud.aws.fleet`), make sure the launch
   templates exist (:mod:`karpy.cloud.aws.launchtemplates`) with the user
   data of the class' AMI family (:mod:`karpy.cloud.aws.userdata`: the
   NodeClaim's labels, its taints and startup taints, and
   ``karpenter.sh/unregistered:NoExecute``), call CreateFleet;
3. when a launch template is missing (deleted behind karpy's back), forget
   it, recreate it and call once more, as Karpenter does;
4. mark every offering a capacity error names unavailable (every spot
   offering when the account cannot run spot at all); raise
   :class:`InsufficientCapacityError` naming them when nothing launched, or a
   :class:`CloudProviderError` with AWS' message for any other error.

A launched NodeClaim is remembered until it is deleted, so a ``create``
repeated after a failed status write returns the same instance instead of
launching another one.

Throttling and 5xx answers are retried by botocore (standard mode, backoff
with jitter) inside the client; what still fails becomes the launch's error
and the NodeClaim lifecycle controller retries later.

**Threads.** Launch jobs run on the pool, the rest on the reconcile thread.
They share the unavailable offerings and the prices, both behind one lock;
the cluster cache is read on the reconcile thread only (the job gets the
node class and instance types read before it starts).

**Terminating** (``delete``) calls TerminateInstances at once: it is quick,
and the termination controller needs to know it happened before it lets the
NodeClaim go. An instance already gone is :class:`NodeClaimNotFoundError`.
EC2 lists a terminated instance as ``shutting-down`` for a minute or so after
that; ``get`` and ``list`` mark such an instance as being deleted (a deletion
timestamp, as Karpenter does), so garbage collection, which runs soon after
every termination has lifted the NodeClaim's finalizer, leaves it to finish
instead of terminating it a second time and logging it as leaked.

**Drift** (:mod:`karpy.disruption.nodeclass_drift`, Karpenter's rule and
reasons): a launched NodeClaim carries the class' hash
(``karpenter.k8s.aws/ec2nodeclass-hash`` and its version, over the fields
:mod:`karpy.api.nodeclass_hash` lists, the cluster CA bundle among them);
``NodeClassDrift`` when the class' hash now differs, else ``AMIDrift`` when
the instance's AMI (the NodeClaim's ``status.imageID``) is no longer among
the class' resolved AMIs for its type, else ``SecurityGroupDrift`` or
``SubnetDrift`` when the instance's security groups or subnet (read with
DescribeInstances once per instance, then remembered: they do not change)
are not the class' resolved ones.
"""

from __future__ import annotations

import builtins
import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping

from karpy.api.instancetype import InstanceType
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import NodeClaim, NodeClaimSpec, NodeClaimStatus
from karpy.api.nodeclass import (
    EC2_GROUP,
    EC2_KIND,
    INSTANCE_STORE_RAID0,
    EC2NodeClass,
    KWOKNodeClass,
    NodeClass,
)
from karpy.api.nodeclass_hash import NodeClassHash, ec2nodeclass_hash
from karpy.api.nodepool import NodeClassRef, NodePool
from karpy.api.requirements import (
    AWS_LABEL_CAPACITY_RESERVATION_ID,
    AWS_LABEL_TOPOLOGY_ZONE_ID,
    CAPACITY_TYPE_RESERVED,
    CAPACITY_TYPE_SPOT,
    LABEL_CAPACITY_TYPE,
    LABEL_NODEPOOL,
    LABEL_ZONE,
)
from karpy.api.taints import NO_EXECUTE, UNREGISTERED_TAINT_KEY, Taint
from karpy.cloud.aws.client import AwsApiError, AwsClient, Ec2Instance
from karpy.cloud.aws.fleet import (
    LAUNCH_TEMPLATE_NOT_FOUND_CODES,
    TAG_NODECLAIM,
    TAG_NODECLASS,
    FleetOutcome,
    LaunchPlan,
    ami_requirements,
    cluster_tag,
    fleet_request,
    image_for,
    launch_error,
    launch_failure_reason,
    launch_tags,
    parse_fleet_response,
    plan_launch,
    pool_launch_tags,
)
from karpy.cloud.aws.launcher import Launcher
from karpy.cloud.aws.launchtemplates import LaunchTemplates, launch_options
from karpy.cloud.aws.resolution import node_class_problem_from_status
from karpy.cloud.aws.settings import AwsSettings
from karpy.cloud.aws.userdata import ClusterInfo, UserDataError, user_data
from karpy.cloud.aws_catalog import (
    Catalog,
    CatalogEntry,
    ephemeral_storage_bytes,
    instance_type_from_entry,
    load_catalog,
)
from karpy.cloud.offerings import UnavailableOfferings
from karpy.cloud.provider import (
    REASON_NODECLASS_NOT_SERVED,
    CloudProviderError,
    LaunchInProgressError,
    NodeClaimNotFoundError,
    NodeClassNotReadyError,
    NodeClassProblem,
    NodeRebootFailedError,
    RepairPolicy,
)
from karpy.cloud.repair_policies import AWS_REPAIR_POLICIES
from karpy.cloud.reservations import (
    CAPACITY_BLOCK_EXPIRING_WINDOW,
    RESERVATION_TYPE_CAPACITY_BLOCK,
    Reservation,
    ReservationAvailability,
    reservation_labels,
    reservation_of,
    reservation_to_launch,
    with_reserved_offerings,
)
from karpy.disruption.nodeclass_drift import LaunchedWith, Resolved, nodeclass_drift
from karpy.operator.cluster import Clock, ClusterReader
from karpy.operator.karpenter_metrics import Metrics

log = logging.getLogger("karpy.cloud.aws")

PROVIDER_ID_PREFIX = "aws:///"
NOT_SERVED_MESSAGE = "the AWS provider serves EC2NodeClass only"
# EC2 states of an instance that is terminating: listed, but already being deleted.
SHUTTING_DOWN_STATES = ("shutting-down", "terminated")

# The user data of a NodeClaim's instances, from its node class.
UserData = Callable[[EC2NodeClass, NodeClaim], str]


def provider_id(zone: str, instance_id: str) -> str:
    return f"{PROVIDER_ID_PREFIX}{zone}/{instance_id}"


def instance_id_of(provider_id: str) -> str:
    """``aws:///us-east-1a/i-0abc`` → ``i-0abc``; "" for anything else."""
    if not provider_id.startswith(PROVIDER_ID_PREFIX):
        return ""
    return provider_id.rpartition("/")[2]


class AwsCloudProvider:
    name = "aws"

    def __init__(
        self,
        cluster: ClusterReader,
        client: AwsClient,
        settings: AwsSettings,
        clock: Clock,
        *,
        wake: Callable[[str], None] = lambda name: None,
        catalog: Catalog | None = None,
        user_data: UserData | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.cluster = cluster
        self.metrics = metrics if metrics is not None else Metrics()
        self.client = client
        self.settings = settings
        self.clock = clock
        self.user_data = user_data or self.node_user_data
        self.started = clock.now()
        self.catalog = catalog or load_catalog()
        self.region = settings.region or self.catalog.region
        self.templates = LaunchTemplates(client, settings.cluster_name)
        self.launcher: Launcher[NodeClaim] = Launcher(settings.launch_concurrency, wake)
        # Shared with the launch threads: the unavailable offerings and the prices.
        self._lock = threading.Lock()
        self.unavailable = UnavailableOfferings(clock)
        # Instances left per capacity reservation (its own lock; the status controller sets EC2's counts).
        self.reservations = ReservationAvailability(clock)
        self._entries = {entry.name: entry for entry in self.catalog.entries}
        self._prices_version = 0
        self._types_cache: tuple[object, builtins.list[InstanceType]] | None = None
        # NodeClaim name → what was launched for it, until it is deleted (see the module docstring).
        self._launched: dict[str, NodeClaim] = {}
        # Instance id → its subnet and security groups, read once for drift (reconcile thread only).
        self._networks: dict[str, LaunchedWith] = {}

    # -- node classes ------------------------------------------------------

    def node_class_problem(self, node_class: NodeClass) -> NodeClassProblem | None:
        if isinstance(node_class, KWOKNodeClass):
            return NodeClassProblem(REASON_NODECLASS_NOT_SERVED, NOT_SERVED_MESSAGE)
        return node_class_problem_from_status(node_class)

    def _node_class(self, ref: NodeClassRef) -> EC2NodeClass:
        node_class = self.cluster.node_class(ref.group, ref.kind, ref.name)
        if node_class is None:
            raise NodeClassNotReadyError(f"{ref.kind} {ref.name!r} ({ref.group}) not found")
        problem = self.node_class_problem(node_class)
        if problem is not None or not isinstance(node_class, EC2NodeClass):
            raise NodeClassNotReadyError(f"{ref}: {problem.message if problem else NOT_SERVED_MESSAGE}")
        return node_class

    # -- instance types ----------------------------------------------------

    def get_instance_types(self, nodepool: NodePool) -> builtins.list[InstanceType]:
        return self._instance_types(self._node_class(nodepool.template.node_class_ref))

    def _reservations(self, node_class: EC2NodeClass) -> tuple[Reservation, ...]:
        """The class' resolved capacity reservations; none with the ReservedCapacity gate off."""
        return node_class.status.capacity_reservations if self.settings.reserved_capacity else ()

    def _instance_types(self, node_class: EC2NodeClass) -> builtins.list[InstanceType]:
        zones = tuple(sorted({subnet.zone for subnet in node_class.status.subnets}))
        amis = node_class.status.amis
        reservations = self._reservations(node_class)
        now = self.clock.now()
        # What the reserved offerings depend on: the reservations, the room each has, which are over.
        reserved_key = tuple(
            (reservation, self.reservations.count(reservation.id), reservation.ended(now))
            for reservation in reservations
        )
        with self._lock:
            unavailable = self.unavailable.now()
            entries = builtins.list(self._entries.values())
            root_volume = ephemeral_storage_bytes(node_class)
            key = (
                unavailable,
                zones,
                repr(node_class.kubelet),
                root_volume,
                node_class.instance_store_policy,
                repr(amis),
                self._prices_version,
                reserved_key,
            )
            if self._types_cache is not None and self._types_cache[0] == key:
                return self._types_cache[1]
        types = []
        for entry in entries:
            if not set(entry.zones) & set(zones):
                continue
            instance_type = instance_type_from_entry(
                entry,
                self.region,
                zones,
                node_class.kubelet,
                unavailable,
                root_volume,
                instance_store_raid0=node_class.instance_store_policy == INSTANCE_STORE_RAID0,
            )
            if image_for(instance_type, amis) is not None:
                types.append(with_reserved_offerings(instance_type, reservations, self.reservations, now))
        with self._lock:
            self._types_cache = (key, types)
        return types

    def _entry(self, name: str) -> CatalogEntry | None:
        with self._lock:
            return self._entries.get(name)

    def mark_offering_unavailable(self, instance_type: str, zone: str, capacity_type: str) -> None:
        with self._lock:
            self.unavailable.mark(instance_type, zone, capacity_type)

    def _mark_spot_unavailable(self, instance_types: builtins.list[InstanceType]) -> None:
        """Every spot offering of the class' types: the account cannot launch spot (see fleet.py)."""
        with self._lock:
            for instance_type in instance_types:
                for offering in instance_type.offerings:
                    if offering.capacity_type == CAPACITY_TYPE_SPOT:
                        self.unavailable.mark(instance_type.name, offering.zone, CAPACITY_TYPE_SPOT)

    def update_prices(self, on_demand: Mapping[str, float], spot: Mapping[tuple[str, str], float]) -> None:
        """Replace the prices the instance types carry (a pricing refresh); unknown types are ignored."""
        with self._lock:
            for name, entry in builtins.list(self._entries.items()):
                spot_prices = {
                    zone: spot.get((name, zone), price) for zone, price in entry.spot_prices.items()
                }
                spot_prices.update({zone: price for (type_, zone), price in spot.items() if type_ == name})
                self._entries[name] = dataclasses.replace(
                    entry, on_demand_price=on_demand.get(name, entry.on_demand_price), spot_prices=spot_prices
                )
            self._prices_version += 1

    # -- launching ---------------------------------------------------------

    def create(self, nodeclaim: NodeClaim) -> NodeClaim:
        name = nodeclaim.name
        finished = self.launcher.take(name)
        if finished is not None:
            launched = finished.get()
            self._launched[name] = launched
            return launched
        if name in self._launched:
            return self._launched[name]
        if self.launcher.in_flight(name):
            raise LaunchInProgressError(f"the launch for NodeClaim {name} is in progress")
        node_class = self._node_class(nodeclaim.spec.node_class_ref)
        instance_types = self._instance_types(node_class)
        created = nodeclaim.metadata.creation_timestamp
        adopt = created is not None and created < self.started

        launched_from = ec2nodeclass_hash(node_class, self.settings.cluster_ca_bundle)

        def launch() -> NodeClaim:
            try:
                launched = self._launch(nodeclaim, node_class, instance_types, adopt)
                # As Karpenter's Create: the class' hash as it was launched from.
                return launched.with_metadata(
                    annotations={**launched.metadata.annotations, **launched_from.annotations()}
                )
            except AwsApiError as error:  # a template or lookup call failed: still the launch's error
                raise CloudProviderError(f"launching NodeClaim {name}: {error}") from error

        self.launcher.submit(name, launch)
        raise LaunchInProgressError(f"launching an instance for NodeClaim {name}")

    def _launch(
        self,
        nodeclaim: NodeClaim,
        node_class: EC2NodeClass,
        instance_types: builtins.list[InstanceType],
        adopt: bool,
    ) -> NodeClaim:
        """One launch, on a pool thread (see the module docstring)."""
        if adopt:
            found = self.client.describe_instances(
                filters=(
                    (f"tag:{TAG_NODECLAIM}", (nodeclaim.name,)),
                    ("tag-key", (cluster_tag(self.settings.cluster_name),)),
                )
            )
            if found:
                log.info(
                    "adopting instance %s, launched earlier for NodeClaim %s", found[0].id, nodeclaim.name
                )
                return self._hydrate(found[0], node_class, nodeclaim.spec)
        reservations = self._reservations(node_class)
        now = self.clock.now()
        requirements = nodeclaim.requirement_set()
        pinned = (
            requirements.get(AWS_LABEL_CAPACITY_RESERVATION_ID)
            if AWS_LABEL_CAPACITY_RESERVATION_ID in requirements
            else None
        )
        reservation_ids = {
            (name, zone): into.id
            for name, zone in {(r.instance_type, r.zone) for r in reservations}
            if (into := reservation_to_launch(reservations, self.reservations, name, zone, now, pinned))
            is not None
        }
        plan = plan_launch(
            requirements,
            instance_types,
            node_class.status.subnets,
            node_class.status.amis,
            reservation_ids,
        )
        tags = launch_tags(
            cluster_name=self.settings.cluster_name,
            nodepool=nodeclaim.nodepool,
            nodeclaim=nodeclaim.name,
            node_class=node_class.name,
            class_tags=node_class.tags,
        )
        outcome = self._create_fleet(plan, node_class, nodeclaim, tags)
        if outcome.launch_template_missing:
            log.info("a launch template of NodeClaim %s is gone; recreating it", nodeclaim.name)
            outcome = self._create_fleet(plan, node_class, nodeclaim, tags)
        zone_ids = {subnet.zone: subnet.zone_id for subnet in node_class.status.subnets}
        for error in outcome.errors:
            # Per offering, as Karpenter counts them (one CreateFleet can fail several).
            self.metrics.instance_launch_failures.labels(
                zone=error.zone,
                zone_id=zone_ids.get(error.zone, ""),
                capacity_type=error.capacity_type,
                reason=launch_failure_reason(error),
            ).inc()
            if error.refuses_spot:
                self._mark_spot_unavailable(instance_types)
            elif error.is_capacity and error.capacity_type == CAPACITY_TYPE_RESERVED:
                # The reservation is used up (Karpenter's MarkUnavailable): the next pass falls back.
                reservation_id = reservation_ids.get((error.instance_type, error.zone), "")
                log.info(
                    "capacity reservation %s has no room (%s); marking it used up", reservation_id, error.code
                )
                self.reservations.mark_unavailable(reservation_id)
            elif error.is_capacity:
                self.mark_offering_unavailable(*error.offering)
        if outcome.instance is None:
            raise launch_error(outcome.errors)
        launched = outcome.instance
        reservation_id = ""
        if launched.capacity_type == CAPACITY_TYPE_RESERVED:
            reservation_id = reservation_ids.get((launched.instance_type, launched.zone), "")
            self.reservations.mark_launched(reservation_id)
        return self._hydrate(
            Ec2Instance(
                id=launched.id,
                instance_type=launched.instance_type,
                zone=launched.zone,
                capacity_type=launched.capacity_type,
                image_id=launched.image_id,
                state="pending",
                launch_time=self.clock.now(),
                tags=tags,
                capacity_reservation_id=reservation_id,
            ),
            node_class,
            nodeclaim.spec,
        )

    def node_user_data(self, node_class: EC2NodeClass, nodeclaim: NodeClaim) -> str:
        """The user data by the class' AMI family, with the NodeClaim's labels and taints to register with."""
        taints = (
            *nodeclaim.spec.taints,
            *nodeclaim.spec.startup_taints,
            Taint(UNREGISTERED_TAINT_KEY, NO_EXECUTE),
        )
        cluster = ClusterInfo(
            name=self.settings.cluster_name,
            endpoint=self.settings.cluster_endpoint,
            ca_bundle=self.settings.cluster_ca_bundle,
        )
        return user_data(node_class, cluster=cluster, labels=nodeclaim.metadata.labels, taints=taints)

    def _create_fleet(
        self, plan: LaunchPlan, node_class: EC2NodeClass, nodeclaim: NodeClaim, tags: Mapping[str, str]
    ) -> FleetOutcome:
        """One CreateFleet call; a missing launch template is an outcome (to retry), other errors raise."""
        try:
            document = self.user_data(node_class, nodeclaim)
        except UserDataError as error:
            raise CloudProviderError(f"user data of EC2NodeClass {node_class.name}: {error}") from error
        self.metrics.userdata_bytes.labels(nodeclass=node_class.name).set(len(document.encode()))
        template_tags = pool_launch_tags(tags)
        spot = plan.capacity_type == CAPACITY_TYPE_SPOT
        targeted = self.settings.reserved_capacity
        reservations = self._reservations(node_class)
        templates = {
            key: self.templates.ensure(
                launch_options(
                    node_class,
                    image_id,
                    document,
                    template_tags,
                    spot=spot,
                    targeted=targeted,
                    reservation=reservation_of(reservations, reservation_id) if reservation_id else None,
                ),
                node_class,
            )
            for key, image_id, reservation_id in plan.templates
        }
        try:
            response = self.client.create_fleet(fleet_request(plan, templates, tags))
        except AwsApiError as error:
            if error.code not in LAUNCH_TEMPLATE_NOT_FOUND_CODES:
                raise CloudProviderError(f"CreateFleet failed: {error}") from error
            response = {"Errors": [{"ErrorCode": error.code, "ErrorMessage": error.message}]}
        outcome = parse_fleet_response(response, plan)
        if outcome.launch_template_missing:
            self.templates.forget(templates.values())
        return outcome

    def _hydrate(
        self, instance: Ec2Instance, node_class: EC2NodeClass | None, spec: NodeClaimSpec
    ) -> NodeClaim:
        """The NodeClaim the instance makes: type, zone and capacity-type labels, capacity, providerID."""
        entry = self._entry(instance.instance_type)
        labels: dict[str, str] = {}
        capacity: dict[str, int] = {}
        allocatable: dict[str, int] = {}
        if entry is not None:
            kubelet = node_class.kubelet if node_class is not None else None
            instance_type = instance_type_from_entry(
                entry,
                self.region,
                (instance.zone,),
                kubelet,
                root_volume_bytes=ephemeral_storage_bytes(node_class),
                instance_store_raid0=node_class is not None
                and node_class.instance_store_policy == INSTANCE_STORE_RAID0,
            )
            labels = instance_type.requirements.labels(include_well_known=True)
            capacity, allocatable = dict(instance_type.capacity), dict(instance_type.allocatable)
        labels[LABEL_ZONE] = instance.zone
        labels[LABEL_CAPACITY_TYPE] = instance.capacity_type
        if instance.capacity_reservation_id:
            known = reservation_of(
                node_class.status.capacity_reservations if node_class is not None else (),
                instance.capacity_reservation_id,
            )
            labels.update(
                reservation_labels(known)
                if known is not None
                else {
                    LABEL_CAPACITY_TYPE: CAPACITY_TYPE_RESERVED,
                    AWS_LABEL_CAPACITY_RESERVATION_ID: instance.capacity_reservation_id,
                }
            )
        nodepool = instance.tags.get(LABEL_NODEPOOL, "")
        if nodepool:
            labels[LABEL_NODEPOOL] = nodepool
        return NodeClaim(
            metadata=ObjectMeta(
                name=instance.tags.get(TAG_NODECLAIM, ""),
                labels=labels,
                creation_timestamp=instance.launch_time or None,
                # Already on its way out, as Karpenter reads it: nobody is to terminate it again.
                deletion_timestamp=self.clock.now() if instance.state in SHUTTING_DOWN_STATES else None,
            ),
            spec=spec,
            status=NodeClaimStatus(
                provider_id=provider_id(instance.zone, instance.id),
                image_id=instance.image_id,
                capacity=capacity,
                allocatable=allocatable,
            ),
        )

    # -- finding and terminating -------------------------------------------

    def _hydrate_found(self, instance: Ec2Instance) -> NodeClaim:
        class_name = instance.tags.get(TAG_NODECLASS, "")
        node_class = self.cluster.node_class(EC2_GROUP, EC2_KIND, class_name) if class_name else None
        spec = NodeClaimSpec(node_class_ref=NodeClassRef(EC2_GROUP, EC2_KIND, class_name))
        return self._hydrate(instance, node_class if isinstance(node_class, EC2NodeClass) else None, spec)

    def get(self, provider_id: str) -> NodeClaim:
        instance_id = instance_id_of(provider_id)
        try:
            found = self.client.describe_instances(ids=(instance_id,)) if instance_id else []
        except AwsApiError as error:
            raise CloudProviderError(f"DescribeInstances failed: {error}") from error
        if not found:
            raise NodeClaimNotFoundError(f"instance {provider_id!r} not found")
        return self._hydrate_found(found[0])

    def list(self) -> builtins.list[NodeClaim]:
        """The cluster's instances that a NodePool launched, in a live state.

        Garbage collection terminates what this lists and no NodeClaim owns, so
        it must never hold another cluster's instance: the filters have distinct
        names (two filters of one name are not ANDed by every EC2 implementation;
        moto keeps the last), and the tags are checked again on what comes back.
        """
        owned = cluster_tag(self.settings.cluster_name)
        try:
            found = self.client.describe_instances(
                filters=((f"tag:{owned}", ("owned",)), ("tag-key", (LABEL_NODEPOOL,)))
            )
        except AwsApiError as error:
            raise CloudProviderError(f"DescribeInstances failed: {error}") from error
        listed = [
            instance
            for instance in found
            if instance.tags.get(owned) == "owned" and LABEL_NODEPOOL in instance.tags
        ]
        for instance in listed:
            self._remember_network(instance)  # drift needs no call of its own for these
        return [self._hydrate_found(instance) for instance in listed]

    def delete(self, nodeclaim: NodeClaim) -> None:
        reservation_id = nodeclaim.metadata.labels.get(AWS_LABEL_CAPACITY_RESERVATION_ID, "")
        self._launched.pop(nodeclaim.name, None)
        self._networks.pop(instance_id_of(nodeclaim.status.provider_id), None)
        self.launcher.take(nodeclaim.name)  # a result nobody will collect now
        instance_id = instance_id_of(nodeclaim.status.provider_id)
        if not instance_id:
            raise NodeClaimNotFoundError(f"NodeClaim {nodeclaim.name} has no EC2 instance")
        try:
            before = self.client.terminate_instances((instance_id,))
        except AwsApiError as error:
            self.metrics.instance_termination_failures.labels(
                zone=nodeclaim.zone, zone_id=nodeclaim.metadata.labels.get(AWS_LABEL_TOPOLOGY_ZONE_ID, "")
            ).inc()
            raise CloudProviderError(f"TerminateInstances failed: {error}") from error
        if before.get(instance_id, "terminated") == "terminated":
            raise NodeClaimNotFoundError(f"instance {instance_id} is already terminated")
        if reservation_id:
            self.reservations.mark_terminated(reservation_id)  # its slot is free again
        log.info("terminating instance %s of NodeClaim %s", instance_id, nodeclaim.name)

    def reservations_expiring_at(self) -> dict[str, float]:
        """Each Capacity Block some NodeClaim runs in, with when it is expiring (reconcile thread)."""
        expiring: dict[str, float] = {}
        if not self.settings.reserved_capacity:
            return expiring
        refs = {
            nodeclaim.spec.node_class_ref
            for nodeclaim in self.cluster.nodeclaims()
            if AWS_LABEL_CAPACITY_RESERVATION_ID in nodeclaim.metadata.labels
        }
        for ref in refs:
            node_class = self.cluster.node_class(ref.group, ref.kind, ref.name)
            if not isinstance(node_class, EC2NodeClass):
                continue
            for reservation in node_class.status.capacity_reservations:
                if reservation.reservation_type == RESERVATION_TYPE_CAPACITY_BLOCK and reservation.end_time:
                    expiring[reservation.id] = reservation.end_time - CAPACITY_BLOCK_EXPIRING_WINDOW
        return expiring

    def mark_reservation_unavailable(self, reservation_id: str) -> None:
        """An interruptible reservation reclaims its capacity: nothing more goes into it until EC2 says so."""
        self.reservations.mark_unavailable(reservation_id)

    # -- drift and repair --------------------------------------------------

    def node_class_hash(self, node_class: NodeClass) -> NodeClassHash | None:
        if not isinstance(node_class, EC2NodeClass):
            return None
        return ec2nodeclass_hash(node_class, self.settings.cluster_ca_bundle)

    def is_drifted(self, nodeclaim: NodeClaim) -> str:
        ref = nodeclaim.spec.node_class_ref
        node_class = self.cluster.node_class(ref.group, ref.kind, ref.name)
        if not isinstance(node_class, EC2NodeClass):
            return ""
        current = ec2nodeclass_hash(node_class, self.settings.cluster_ca_bundle)
        entry = self._entry(nodeclaim.instance_type)
        served: frozenset[str] = frozenset()
        if entry is not None:
            instance_type = instance_type_from_entry(entry, self.region)
            served = frozenset(
                ami.id
                for ami in node_class.status.amis
                if instance_type.requirements.intersects(ami_requirements(ami)) is None
            )
        image = LaunchedWith(image_id=nodeclaim.status.image_id)
        # The static fields and the AMI first: they need no call to EC2.
        reason = nodeclass_drift(nodeclaim.metadata.annotations, current, image, Resolved(image_ids=served))
        if reason:
            return reason
        instance_id = instance_id_of(nodeclaim.status.provider_id)
        network = self._network(instance_id)
        selected = (
            frozenset(reservation.id for reservation in node_class.status.capacity_reservations)
            if self.settings.reserved_capacity
            else None
        )
        if selected is not None and network.capacity_reservation_id not in selected | {""}:
            # What was remembered may be stale: EC2 may have taken it out since (Karpenter reads again).
            self._networks.pop(instance_id, None)
            network = self._network(instance_id)
        resolved = Resolved(
            subnet_ids=frozenset(subnet.id for subnet in node_class.status.subnets),
            security_group_ids=frozenset(group.id for group in node_class.status.security_groups),
            capacity_reservation_ids=selected,
        )
        return nodeclass_drift({}, None, network, resolved)

    def _network(self, instance_id: str) -> LaunchedWith:
        """The instance's subnet and security groups (nothing known for an instance EC2 does not list)."""
        if not instance_id:
            return LaunchedWith()
        known = self._networks.get(instance_id)
        if known is None:
            try:
                found = self.client.describe_instances(ids=(instance_id,))
            except AwsApiError as error:
                raise CloudProviderError(f"DescribeInstances failed: {error}") from error
            if not found:
                return LaunchedWith()
            known = self._remember_network(found[0])
        return known

    def _remember_network(self, instance: Ec2Instance) -> LaunchedWith:
        network = LaunchedWith(
            image_id=instance.image_id,
            subnet_id=instance.subnet_id,
            security_group_ids=frozenset(instance.security_group_ids),
            capacity_reservation_id=instance.capacity_reservation_id,
        )
        if instance.subnet_id:
            self._networks[instance.id] = network
        return network

    def repair_policies(self) -> builtins.list[RepairPolicy]:
        """Karpenter's AWS repair policies: the kubelet's Ready and the node monitoring agent's conditions."""
        return list(AWS_REPAIR_POLICIES)

    # As Karpenter's AWS provider v1.15: an in-place reboot is EC2's RebootInstances.
    supports_reboot = True

    def reboot(self, nodeclaim: NodeClaim, operation_id: str) -> None:
        """Reboot the instance in place with EC2's RebootInstances, as Karpenter's AWS provider v1.15.

        EC2 takes no client token: the reboot controller keeps a reboot from being
        issued twice (``operation_id`` only names it in the log). An instance gone
        is NodeClaimNotFoundError; a missing ``ec2:RebootInstances`` permission,
        which will not fix itself, NodeRebootFailedError; anything else is retried.
        """
        instance_id = instance_id_of(nodeclaim.status.provider_id)
        if not instance_id:
            raise NodeClaimNotFoundError(f"NodeClaim {nodeclaim.name} has no EC2 instance")
        try:
            # As Karpenter, looked up first: RebootInstances on a terminated instance is no error.
            if not self.client.describe_instances(ids=(instance_id,)):
                raise NodeClaimNotFoundError(f"instance {instance_id} not found")
            self.client.reboot_instances((instance_id,))
        except AwsApiError as error:
            if error.code in ("InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"):
                raise NodeClaimNotFoundError(f"rebooting instance {instance_id}: {error}") from error
            if error.code == "UnauthorizedOperation":
                raise NodeRebootFailedError(f"rebooting instance {instance_id}: {error}") from error
            raise CloudProviderError(f"RebootInstances failed: {error}") from error
        log.info(
            "rebooting instance %s of NodeClaim %s (operation %s)", instance_id, nodeclaim.name, operation_id
        )

    def close(self) -> None:
        """Stop the launch pool, letting running launches finish (the runner calls it at shutdown)."""
        self.launcher.close()
