"""KwokCloudProvider: "instances" that are Node objects, for a real control plane with no cloud.

Karpenter's kwok provider launches nothing: creating an instance for a NodeClaim
means creating the Node object the instance's kubelet would register, annotated
so that kwok (here: :mod:`karpy.cloud.kwok.fake_kubelet`) keeps it Ready and runs
the pods bound to it. This module is that provider for ``karpy run``. It lets the
real kube-apiserver, kube-scheduler and kube-controller-manager see exactly what
they would see on a cloud, while nothing costs money and a node joins in well
under a second.

Why Node objects and not a private table of instances: the Node *is* the whole
state of a kwok instance, so the provider keeps no state of its own that a
restart could lose; ``get`` and ``list`` read the Nodes carrying the
``kwok://`` providerID prefix (``list`` only those a NodePool launched, each
created when its Node was, so that garbage collection can tell a leaked
instance from one just launched), and ``delete`` deletes the Node.

It serves ``KWOKNodeClass`` only: ``node_class_problem`` says so of any other
class (an EC2NodeClass), which marks the NodePools using it
``NodeClassReady=False`` and tells their pods why they stay pending.

What a KWOKNodeClass offers is the bundled AWS catalog (every type, every zone),
so plans and prices match what the simulator and Karpenter on AWS would produce,
or Karpenter's own kwok types (``c-16x-amd64-linux``...), so Karpenter's manifests
and suites apply unchanged: the class' ``karpy.dev/kwok-instance-types``
annotation chooses, else the provider's default (:mod:`karpy.cloud.kwok_catalog`). ``create``
chooses the way the simulated cloud does: spot whenever the NodeClaim allows it
and a spot offering is available, on-demand otherwise, and within that capacity
type the cheapest offering (ties broken by type name, then zone).

Drift: each launch is annotated with the class' hash
(:func:`karpy.api.nodeclass_hash.kwoknodeclass_hash`, the catalog the class
offers), and ``is_drifted`` says ``NodeClassDrift`` when it changed, by the
rule every karpy cloud shares (:mod:`karpy.disruption.nodeclass_drift`).

The Node is created the way a kubelet registers: the instance type's labels,
the zone and capacity type, the NodeClaim's labels and ``kubernetes.io/hostname``;
the NodeClaim's taints and startup taints plus ``karpenter.sh/unregistered``
(which the NodeClaim lifecycle controller lifts on registration). Its capacity
and allocatable are the instance type's, plus the extended resources
NodeOverlays give the type in the NodeClaim's pool (``extended_resources``,
set by ``karpy run`` with the NodeOverlay gate): on a real instance a device
plugin reports those, and a kwok node has none, so without them kube-scheduler
would never bind the pods karpy launched the node for. (Karpenter's kwok
provider puts the NodeClaim's requested resources on the Node instead, which
covers the extended resources its pods asked for, not the overlay's amount.) A Node's
capacity and allocatable live in its status, which the cluster writer sends
with the Node in one request, as a kubelet registers (written afterwards, it
would race the fake kubelet, which fills in a default capacity for a Node it
sees without one).

An optional ``registration_delay`` postpones the Node's creation, as an instance
takes time to boot; the delay runs on a timer thread, and without one the Node
is created by a small pool of threads, so ``create`` never blocks the reconcile
loop. While a creation is pending, ``get`` and ``delete`` know the
instance from the pending table (``delete`` cancels the timer). That table is
the one piece of state a process can lose: when the replica that launched an
instance stops while it boots (a leader change), the next replica's ``get``
finds neither a Node nor a pending entry. The launched NodeClaim still says
what was launched (its providerID, its instance-type, zone and capacity-type
labels, its Launched time), so the instance is *adopted*: its boot is resumed
for what is left of the delay, instead of the instance being reported gone and
launched again.
"""

from __future__ import annotations

import builtins
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from karpy.api.conditions import FALSE, find_condition
from karpy.api.core import Node
from karpy.api.instancetype import InstanceType
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import (
    CONDITION_LAUNCHED,
    CONDITION_READY,
    CONDITION_REGISTERED,
    NodeClaim,
    NodeClaimSpec,
    NodeClaimStatus,
)
from karpy.api.nodeclass import KWOKNodeClass, NodeClass
from karpy.api.nodeclass_hash import NodeClassHash, kwoknodeclass_hash
from karpy.api.nodepool import NodeClassRef, NodePool
from karpy.api.quantity import ResourceAmounts
from karpy.api.requirements import (
    LABEL_CAPACITY_TYPE,
    LABEL_HOSTNAME,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    LABEL_ZONE,
)
from karpy.api.taints import NO_EXECUTE, UNREGISTERED_TAINT_KEY, Taint
from karpy.cloud.aws_catalog import Catalog, instance_type_from_entry, load_catalog
from karpy.cloud.kwok.fake_kubelet import FAKE_NODE_ANNOTATION, FAKE_NODE_VALUE
from karpy.cloud.kwok_catalog import KwokInstanceTypes, instance_types_of, load_kwok_catalog
from karpy.cloud.offerings import UnavailableOfferings, launch_capacity_type
from karpy.cloud.provider import (
    REASON_NODECLASS_NOT_SERVED,
    InsufficientCapacityError,
    NodeClaimNotFoundError,
    NodeClassNotReadyError,
    NodeClassProblem,
    RepairPolicy,
)
from karpy.cloud.repair_policies import KWOK_REPAIR_POLICIES
from karpy.disruption.nodeclass_drift import LaunchedWith, Resolved, nodeclass_drift
from karpy.operator.cluster import (
    AlreadyExistsError,
    Clock,
    Cluster,
    NotFoundError,
    NotLeaderError,
    WallClock,
)

log = logging.getLogger("karpy.cloud.kwok")

PROVIDER_ID_PREFIX = "kwok://"
# Why an EC2NodeClass (the only other kind karpy reads) launches nothing here.
NOT_SERVED_MESSAGE = "karpy run serves KWOKNodeClass only; no AWS provider is configured"
KWOK_IMAGE_ID = "kwok"


# Nodes created at once for launches without a registration delay (see ``_boot``).
BOOT_CONCURRENCY = 16


class _Cancellable(Protocol):
    def cancel(self) -> bool | None: ...


# Creates a Node with its status (capacity, allocatable) in one request.
def provider_id_for(name: str) -> str:
    return f"{PROVIDER_ID_PREFIX}{name}"


@dataclass(frozen=True, slots=True)
class KwokLaunch:
    """What ``create`` chose for a NodeClaim: the Node it makes, and the type behind it."""

    node: Node
    instance_type: InstanceType
    labels: dict[str, str]


class KwokCloudProvider:
    name = "kwok"

    def __init__(
        self,
        cluster: Cluster,
        *,
        registration_delay: float = 0.0,
        catalog: Catalog | None = None,
        clock: Clock | None = None,
        default_instance_types: KwokInstanceTypes = KwokInstanceTypes.AWS,
    ) -> None:
        self.cluster = cluster
        self.registration_delay = registration_delay
        self.catalog = catalog or load_catalog()
        self.instance_types = [
            instance_type_from_entry(entry, self.catalog.region, self.catalog.zones)
            for entry in self.catalog.entries
        ]
        self.default_instance_types = default_instance_types
        self.karpenter_catalog = load_kwok_catalog()
        self.karpenter_instance_types = self.karpenter_catalog.instance_types()
        # The two catalogs' names do not overlap (``c5.large``, ``c-2x-amd64-linux``).
        self._types_by_name = {
            instance_type.name: instance_type
            for instance_type in (*self.instance_types, *self.karpenter_instance_types)
        }
        self.unavailable = UnavailableOfferings(clock or WallClock())
        # Per catalog, the instance types for the last set of unavailable offerings, rebuilt only
        # when it changes.
        self._types_for: dict[
            KwokInstanceTypes, tuple[frozenset[tuple[str, str, str]], builtins.list[InstanceType]]
        ] = {
            KwokInstanceTypes.AWS: (frozenset(), self.instance_types),
            KwokInstanceTypes.KARPENTER: (frozenset(), self.karpenter_instance_types),
        }
        # The extended resources NodeOverlays add to an instance type of a NodePool (pool, type):
        # what its device plugins would report, put on the Node it registers (None: the gate is off).
        self.extended_resources: Callable[[str, str], ResourceAmounts] | None = None
        self._lock = threading.Lock()
        # Boots not done yet, with what cancels each (a delayed boot's timer, a pool job).
        self._pending: dict[str, tuple[KwokLaunch, _Cancellable]] = {}
        self._boots: ThreadPoolExecutor | None = None

    # -- node classes ------------------------------------------------------

    def node_class_problem(self, node_class: NodeClass) -> NodeClassProblem | None:
        if isinstance(node_class, KWOKNodeClass):
            return None
        return NodeClassProblem(REASON_NODECLASS_NOT_SERVED, NOT_SERVED_MESSAGE)

    def _check_node_class(self, ref: NodeClassRef) -> KwokInstanceTypes:
        """Which catalog the referenced class offers; NodeClassNotReadyError if it is not served."""
        node_class = self.cluster.node_class(ref.group, ref.kind, ref.name)
        if node_class is None:
            raise NodeClassNotReadyError(f"{ref.kind} {ref.name!r} ({ref.group}) not found")
        problem = self.node_class_problem(node_class)
        if problem is not None or not isinstance(node_class, KWOKNodeClass):
            raise NodeClassNotReadyError(f"{ref}: {problem.message if problem else NOT_SERVED_MESSAGE}")
        # As Karpenter's kwok provider: a class whose stored Ready condition is False (written by
        # whoever manages it) launches nothing; no condition yet is no verdict.
        ready = find_condition(node_class.status.conditions, CONDITION_READY)
        if ready is not None and ready.status == FALSE:
            raise NodeClassNotReadyError(f"{ref}: {ready.message or ready.reason or 'not Ready'}")
        return instance_types_of(node_class, self.default_instance_types)

    # -- CloudProvider -----------------------------------------------------

    def get_instance_types(self, nodepool: NodePool) -> builtins.list[InstanceType]:
        return self._current_types(self._check_node_class(nodepool.template.node_class_ref))

    def _current_types(self, offered: KwokInstanceTypes) -> builtins.list[InstanceType]:
        """The catalog's types, with the offerings marked unavailable reported so."""
        unavailable = self.unavailable.now()
        cached_for, types = self._types_for[offered]
        if unavailable == cached_for:
            return types
        if offered is KwokInstanceTypes.KARPENTER:
            types = self.karpenter_catalog.instance_types(unavailable)
        else:
            types = [
                instance_type_from_entry(entry, self.catalog.region, self.catalog.zones, None, unavailable)
                for entry in self.catalog.entries
            ]
        self._types_for[offered] = (unavailable, types)
        return types

    def mark_offering_unavailable(self, instance_type: str, zone: str, capacity_type: str) -> None:
        """kwok has no capacity to run out of: an offering is unavailable only when marked."""
        self.unavailable.mark(instance_type, zone, capacity_type)

    def create(self, nodeclaim: NodeClaim) -> NodeClaim:
        name = nodeclaim.metadata.name
        with self._lock:
            pending = self._pending.get(name)
        if pending is not None:
            return self._hydrate(name, nodeclaim.spec, pending[0])
        existing = self.cluster.node(name)
        if existing is not None and existing.provider_id == provider_id_for(name):
            return self._hydrate_node(existing, nodeclaim.spec)
        offered = self._check_node_class(nodeclaim.spec.node_class_ref)
        launch = self._choose(nodeclaim, offered)
        self._boot(name, launch, self._registration_delay_of(nodeclaim.spec.node_class_ref))
        launched = self._hydrate(name, nodeclaim.spec, launch)
        # The class' hash as it was launched from, as Karpenter's AWS provider annotates.
        return launched.with_metadata(annotations=kwoknodeclass_hash(offered.value).annotations())

    def _registration_delay_of(self, ref: NodeClassRef) -> float:
        """The class' ``nodeRegistrationDelay`` when it sets one, else the provider's delay."""
        node_class = self.cluster.node_class(ref.group, ref.kind, ref.name)
        if isinstance(node_class, KWOKNodeClass) and node_class.node_registration_delay is not None:
            return node_class.node_registration_delay
        return self.registration_delay

    def _boot(self, name: str, launch: KwokLaunch, delay: float) -> None:
        """Create the launch's Node after ``delay`` seconds, off the reconcile thread either way.

        Without a delay the Node is created by a pool of BOOT_CONCURRENCY
        threads: made by the lifecycle reconcile itself, each launch held the
        one reconcile thread for a round trip (a few hundred milliseconds with
        10,000 pods arriving), so a thousand launches kept it busy for minutes
        and some NodeClaims were not launched within their launch TTL. The
        boot is pending until the Node is created, as a delayed one is.
        """
        with self._lock:
            if delay > 0:
                timer = threading.Timer(delay, self._finish_boot, args=(name,))
                timer.daemon = True
                self._pending[name] = (launch, timer)
                timer.start()
                return
            if self._boots is None:
                self._boots = ThreadPoolExecutor(max_workers=BOOT_CONCURRENCY, thread_name_prefix="kwok-boot")
            # The job takes the lock first, so it finds the boot pending (unless deleted meanwhile).
            self._pending[name] = (launch, self._boots.submit(self._finish_boot, name))

    def resume_boots(self) -> builtins.list[str]:
        """Adopt every instance another process launched and left booting (see above).

        Called once the caches are synced and this process leads; returns the
        names of the NodeClaims whose boot was resumed.
        """
        resumed = []
        for claim in self.cluster.nodeclaims():
            name = self._name_of(claim.status.provider_id)
            with self._lock:
                pending = name in self._pending
            if name and not pending and self.cluster.node(name) is None and self._adopt(name, claim):
                resumed.append(name)
        return sorted(resumed)

    def _adopt(self, name: str, claim: NodeClaim) -> bool:
        """Resume the boot of the instance of a launched, unregistered NodeClaim with no Node."""
        if claim.metadata.deleting or claim.is_true(CONDITION_REGISTERED):
            return False
        launched = claim.condition(CONDITION_LAUNCHED)
        labels = claim.metadata.labels
        instance_type = self._types_by_name.get(labels.get(LABEL_INSTANCE_TYPE, ""))
        zone, capacity_type = labels.get(LABEL_ZONE), labels.get(LABEL_CAPACITY_TYPE)
        if launched is None or launched.status != "True" or instance_type is None:
            return False
        if not zone or not capacity_type:
            return False
        launch = self._launch(claim, instance_type, zone, capacity_type)
        delay = self._registration_delay_of(claim.spec.node_class_ref)
        left = launched.last_transition_time + delay - time.time()
        log.info("resuming the boot of kwok instance %s (%.0fs left)", name, max(0.0, left))
        self._boot(name, launch, left)
        return True

    def _choose(self, nodeclaim: NodeClaim, offered: KwokInstanceTypes) -> KwokLaunch:
        requirements = nodeclaim.requirement_set()
        offerings = [
            (offering.price, instance_type.name, offering.zone, instance_type, offering.capacity_type)
            for instance_type in self._current_types(offered)
            if instance_type.requirements.intersects(requirements) is None
            for offering in instance_type.available_offerings(requirements)
        ]
        if not offerings:
            raise InsufficientCapacityError(
                f"no available offering satisfies the requirements of NodeClaim {nodeclaim.name}"
            )
        capacity_type = launch_capacity_type(offered for *_, offered in offerings)
        _, _, zone, instance_type, _ = min(
            (item for item in offerings if item[4] == capacity_type), key=lambda item: item[:3]
        )
        return self._launch(nodeclaim, instance_type, zone, capacity_type)

    def _launch(
        self, nodeclaim: NodeClaim, instance_type: InstanceType, zone: str, capacity_type: str
    ) -> KwokLaunch:
        """The Node that an instance of ``instance_type`` in ``zone`` registers for ``nodeclaim``."""
        labels = instance_type.requirements.labels(include_well_known=True)
        labels[LABEL_ZONE] = zone
        labels[LABEL_CAPACITY_TYPE] = capacity_type
        node_labels = {**labels, **nodeclaim.metadata.labels, LABEL_HOSTNAME: nodeclaim.name}
        taints = (
            *nodeclaim.spec.taints,
            *nodeclaim.spec.startup_taints,
            Taint(UNREGISTERED_TAINT_KEY, NO_EXECUTE),
        )
        extended: ResourceAmounts = {}
        if self.extended_resources is not None:
            extended = self.extended_resources(nodeclaim.nodepool, instance_type.name)
        node = Node(
            metadata=ObjectMeta(
                name=nodeclaim.name,
                labels=node_labels,
                annotations={FAKE_NODE_ANNOTATION: FAKE_NODE_VALUE},
            ),
            provider_id=provider_id_for(nodeclaim.name),
            taints=taints,
            capacity={**instance_type.capacity, **extended},
            allocatable={**instance_type.allocatable, **extended},
        )
        return KwokLaunch(node=node, instance_type=instance_type, labels=labels)

    def _finish_boot(self, name: str) -> None:
        with self._lock:
            pending = self._pending.pop(name, None)
        if pending is None:
            return  # deleted while it was booting
        try:
            self._create_node(pending[0].node)
        except NotLeaderError:
            # The write fence: this process lost the lease while the instance booted. The
            # next leader resumes the boot from the launched NodeClaim (resume_boots).
            log.info("kwok Node %s not created: not leading; its boot is left to the leader", name)
        except Exception:  # a boot thread has nobody to raise to; the registration TTL catches it
            log.exception("creating kwok Node %s failed", name)

    def _create_node(self, node: Node) -> None:
        try:
            self.cluster.create(node)
        except AlreadyExistsError:
            log.info("kwok Node %s already exists", node.name)
            return
        log.info("created kwok Node %s", node.name)

    def _hydrate(self, name: str, spec: NodeClaimSpec, launch: KwokLaunch) -> NodeClaim:
        return NodeClaim(
            metadata=ObjectMeta(name=name, labels=dict(launch.labels)),
            spec=spec,
            status=NodeClaimStatus(
                provider_id=provider_id_for(name),
                image_id=KWOK_IMAGE_ID,
                capacity=dict(launch.instance_type.capacity),
                allocatable=dict(launch.instance_type.allocatable),
            ),
        )

    def _hydrate_node(self, node: Node, spec: NodeClaimSpec) -> NodeClaim:
        instance_type = self._types_by_name.get(node.metadata.labels.get(LABEL_INSTANCE_TYPE, ""))
        labels = dict(instance_type.requirements.labels(include_well_known=True)) if instance_type else {}
        for key in (LABEL_ZONE, LABEL_CAPACITY_TYPE):
            if key in node.metadata.labels:
                labels[key] = node.metadata.labels[key]
        capacity = dict(instance_type.capacity) if instance_type else dict(node.capacity)
        allocatable = dict(instance_type.allocatable) if instance_type else dict(node.allocatable)
        return NodeClaim(
            # The Node's creation is the instance's launch, as garbage collection reads it.
            metadata=ObjectMeta(
                name=node.name, labels=labels, creation_timestamp=node.metadata.creation_timestamp
            ),
            spec=spec,
            status=NodeClaimStatus(
                provider_id=node.provider_id,
                image_id=KWOK_IMAGE_ID,
                capacity=capacity,
                allocatable=allocatable,
            ),
        )

    def delete(self, nodeclaim: NodeClaim) -> None:
        name = self._name_of(nodeclaim.status.provider_id) or nodeclaim.name
        with self._lock:
            pending = self._pending.pop(name, None)
        if pending is not None:
            pending[1].cancel()
            return
        node = self.cluster.node(name)
        if node is None:
            node = Node(metadata=ObjectMeta(name=name))  # maybe not in the cache yet: ask the server
        elif node.metadata.deleting:
            return
        try:
            self.cluster.delete(node)
        except NotFoundError as error:
            raise NodeClaimNotFoundError(f"kwok Node {name!r} not found") from error

    def get(self, provider_id: str) -> NodeClaim:
        name = self._name_of(provider_id)
        with self._lock:
            pending = self._pending.get(name) if name else None
        if pending is not None:
            return self._hydrate(name, _EMPTY_SPEC, pending[0])
        node = self.cluster.node(name) if name else None
        if node is None or node.provider_id != provider_id:
            raise NodeClaimNotFoundError(f"instance {provider_id!r} not found")
        return self._hydrate_node(node, _EMPTY_SPEC)

    def list(self) -> builtins.list[NodeClaim]:
        """The kwok Nodes a NodePool launched (``kwok://`` provider ID and a NodePool label).

        Garbage collection deletes what this lists and no NodeClaim owns, so a
        kwok Node made by hand or by kwok's own tooling (no NodePool label) is
        never listed, as the AWS provider lists only instances tagged with a
        NodePool.
        """
        nodes = sorted(
            (
                node
                for node in self.cluster.nodes()
                if node.provider_id.startswith(PROVIDER_ID_PREFIX) and LABEL_NODEPOOL in node.metadata.labels
            ),
            key=lambda node: node.name,
        )
        return [self._hydrate_node(node, _EMPTY_SPEC) for node in nodes]

    def node_class_hash(self, node_class: NodeClass) -> NodeClassHash | None:
        if not isinstance(node_class, KWOKNodeClass):
            return None
        return kwoknodeclass_hash(instance_types_of(node_class, self.default_instance_types).value)

    def is_drifted(self, nodeclaim: NodeClaim) -> str:
        """``NodeClassDrift`` when the class' hash changed; kwok has no AMIs, subnets or security groups."""
        ref = nodeclaim.spec.node_class_ref
        node_class = self.cluster.node_class(ref.group, ref.kind, ref.name)
        current = None if node_class is None else self.node_class_hash(node_class)
        return nodeclass_drift(nodeclaim.metadata.annotations, current, LaunchedWith(), Resolved())

    def repair_policies(self) -> builtins.list[RepairPolicy]:
        return list(KWOK_REPAIR_POLICIES)

    supports_reboot = True

    def reboot(self, nodeclaim: NodeClaim, operation_id: str) -> None:
        """As Karpenter's kwok provider reboots: the Node's boot ID becomes ``kwok-<operation>``."""
        name = self._name_of(nodeclaim.status.provider_id) or nodeclaim.status.node_name
        node = self.cluster.node(name) if name else None
        if node is None:
            raise NodeClaimNotFoundError(f"kwok Node {name!r} not found")
        boot_id = f"kwok-{operation_id}"
        if node.boot_id != boot_id:
            self.cluster.update(node.with_changes(boot_id=boot_id))

    @staticmethod
    def _name_of(provider_id: str) -> str:
        return (
            provider_id.removeprefix(PROVIDER_ID_PREFIX) if provider_id.startswith(PROVIDER_ID_PREFIX) else ""
        )


_EMPTY_SPEC = NodeClaimSpec(node_class_ref=NodeClassRef("", "", ""))
