"""The core controllers, built in one place for ``karpy run`` and ``karpy simulate``.

Karpenter builds its controllers in one function (``controllers.NewControllers``)
and the cloud provider adds its own; karpy does the same, so that the simulator
runs exactly the controllers a real cluster gets, in the same order, with the
same settings. Each caller adds only what is its own: ``karpy run`` the
provider's controllers (:mod:`karpy.cloud.providers`) and its leader and
readiness machinery, ``karpy simulate`` the stand-ins for the rest of a cluster
(kube-scheduler, kubelets, workload controllers) and, for its Cluster Autoscaler
baseline, a replacement for the deciders.

The order of the list is the order of registration, which is the order in which a
change's keys are queued and so the order reconciles run at one instant: the
simulator's output depends on it, so it is kept as it was.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from karpy.api.capacitybuffer import KIND as BUFFER_KIND
from karpy.cloud.provider import CloudProvider, NodeClassHashing, ReservationMarking
from karpy.controllers.capacitybuffer import BufferRoom, CapacityBufferController
from karpy.controllers.disruption import DisruptionController
from karpy.controllers.disruption_conditions import NodeClaimDisruptionConditions
from karpy.controllers.garbagecollection import GarbageCollector
from karpy.controllers.metering import STATUS_RESYNC, StatusConditionMetricsController, metrics_controllers
from karpy.controllers.nodeclaim import NodeClaimLifecycle, NodeClaimPodEvents
from karpy.controllers.nodeclass_hash import NodeClassHashController
from karpy.controllers.nodeoverlay import NodeOverlayController, OverlayStore, overlaid
from karpy.controllers.nodepool import NodePoolStatusController
from karpy.controllers.nodepool_hash import NodePoolHashController
from karpy.controllers.provisioning import Provisioner, ProvisioningSettings
from karpy.controllers.reboot import RebootController
from karpy.controllers.reservation_capacity_type import CapacityTypeSync
from karpy.controllers.reservation_expiration import CapacityBlockExpiration
from karpy.controllers.static import StaticCapacity
from karpy.controllers.termination import Terminator
from karpy.disruption.consolidation import ConsolidationRules
from karpy.operator.cluster import Clock, Cluster
from karpy.operator.karpenter_metrics import Metrics
from karpy.operator.runtime import Controller
from karpy.settings import FeatureGates

# The cloud each controller calls, given the controller's name (``karpy run`` counts each one's calls
# under its name, karpenter_cloudprovider_*).
CloudFor = Callable[[str], CloudProvider]


@dataclass(frozen=True, slots=True)
class CoreControllers:
    """The core controllers, in registration order: :attr:`deciders`, then :attr:`rest`."""

    provisioner: Provisioner
    disruption: DisruptionController
    # Provisioning, disruption conditions and disruption: what decides which nodes come and go (the
    # simulator's Cluster Autoscaler baseline takes their place, and everything else stays).
    deciders: tuple[Controller, ...]
    # NodeClaim lifecycle and pod events, termination, NodePool status, garbage collection (if asked),
    # the metrics recorders (if asked), static capacity (if its gate is on: static pools keep
    # their replicas under either autoscaler) and the node class hash annotations.
    rest: tuple[Controller, ...]
    # The cloud each controller calls, NodeOverlays applied when their gate is on: what a caller's own
    # controllers (the Cluster Autoscaler baseline, the provider's) are given too.
    cloud_for: CloudFor
    # The NodeOverlays' last evaluation (None: the NodeOverlay gate is off).
    overlays: OverlayStore | None = None

    @property
    def controllers(self) -> tuple[Controller, ...]:
        return (*self.deciders, *self.rest)


def consolidation_rules(gates: FeatureGates) -> ConsolidationRules:
    """karpy's consolidation rules with what the feature gates turn on or off (run and simulate)."""
    return dataclasses.replace(ConsolidationRules(), spot_to_spot=gates.spot_to_spot_consolidation)


def core_controllers(
    cluster: Cluster,
    cloud_for: CloudFor,
    clock: Clock,
    *,
    provisioning: ProvisioningSettings,
    rules: ConsolidationRules,
    metrics: Metrics,
    garbage_collection: bool = True,
    record_metrics: bool = True,
    capacity_buffers: bool = False,
    static_capacity: bool = True,
    node_repair: bool = False,
    node_overlays: bool = False,
    periodic_metrics: bool = True,
    terminate_first_drift: bool = False,
    terminate_first_repair: bool = False,
) -> CoreControllers:
    """Build the core controllers over ``cluster``; nothing is registered yet.

    ``garbage_collection`` False leaves the garbage collector out (the
    simulator, whose instances cannot leak: see :mod:`karpy.run`);
    ``record_metrics`` False leaves out the controllers that only record
    metrics (the simulator, unless its caller reads them); ``capacity_buffers``
    True (the CapacityBuffer feature gate) adds the CapacityBuffer controller,
    after the others, and has provisioning and disruption keep the room buffers
    ask for.
    ``static_capacity`` False (the ``StaticCapacity`` gate off) leaves static NodePools
    without nodes. ``node_repair`` True (the ``NodeRepair`` gate) has disruption
    repair unhealthy nodes by the cloud provider's repair policies.
    ``terminate_first_drift`` and ``terminate_first_repair`` (the TerminateFirstDrift and
    TerminateFirstRepair gates) have drift and repair delete a node first when no replacement can be
    staged (:mod:`karpy.disruption.terminate_first`).
    ``node_overlays`` True (the NodeOverlay gate) adds the NodeOverlay controller, last, and
    gives every controller the catalogs with the overlays applied (``CoreControllers.cloud_for``).
    ``periodic_metrics`` False has the metrics recorders pass only on changes, never on a timer
    (the simulator, whose virtual clock a timer would keep from settling).
    """
    plain_cloud_for = cloud_for
    overlays = OverlayStore() if node_overlays else None
    if overlays is not None:
        cloud_for = overlaid(plain_cloud_for, overlays)
    room = BufferRoom(cluster, clock) if capacity_buffers else None
    provisioner = Provisioner(
        cluster, cloud_for(Provisioner.name), clock, settings=provisioning, metrics=metrics, buffers=room
    )
    disruption = DisruptionController(
        cluster,
        cloud_for(DisruptionController.name),
        clock,
        rules=rules,
        metrics=metrics,
        node_overhead_cost=provisioning.node_overhead_cost,
        buffers=room,
        node_repair=node_repair,
        scheduling=provisioning.scheduling,
        scheduler_config=provisioning.scheduler_config,
        terminate_first_drift=terminate_first_drift,
        terminate_first_repair=terminate_first_repair,
    )
    conditions = NodeClaimDisruptionConditions(
        cluster, cloud_for(NodeClaimDisruptionConditions.name), clock, metrics=metrics
    )
    rest: list[Controller] = [
        NodeClaimLifecycle(cluster, cloud_for(NodeClaimLifecycle.name), clock, metrics=metrics),
        NodeClaimPodEvents(cluster, clock),
        Terminator(cluster, cloud_for(Terminator.name), clock, metrics=metrics),
        NodePoolStatusController(
            cluster, cloud_for(NodePoolStatusController.name), clock, refusals=provisioner.refusals
        ),
    ]
    if garbage_collection:
        rest.append(GarbageCollector(cluster, cloud_for(GarbageCollector.name), clock, metrics=metrics))
    if record_metrics:
        rest += metrics_controllers(cluster, clock, metrics, cloud_for, periodic=periodic_metrics)
    if node_repair:
        rest.append(RebootController(cluster, cloud_for(RebootController.name), clock, metrics=metrics))
    if static_capacity:  # after the others: it acts on static pools alone, so their order stays
        rest.append(StaticCapacity(cluster, cloud_for(StaticCapacity.name), clock, metrics=metrics))
    if room is not None:
        rest.append(CapacityBufferController(cluster, clock, room))
        if record_metrics:  # Karpenter's CapacityBuffer status controller comes with the gate
            rest.append(
                StatusConditionMetricsController(
                    cluster, clock, metrics, BUFFER_KIND, STATUS_RESYNC if periodic_metrics else None
                )
            )
    if overlays is not None:
        rest.append(
            NodeOverlayController(cluster, plain_cloud_for(NodeOverlayController.name), clock, overlays)
        )
    # Only a cloud that launches into capacity reservations: a Capacity Block's nodes go before its end.
    reserving = plain_cloud_for(CapacityBlockExpiration.name)
    if isinstance(reserving, ReservationMarking):
        rest.append(CapacityBlockExpiration(cluster, reserving, clock))
        # A node whose reservation ended is relabelled on-demand.
        rest.append(CapacityTypeSync(cluster, plain_cloud_for(CapacityTypeSync.name), clock))
    # Last, so the others keep their order; only a cloud whose NodeClaims carry the class' hash.
    hashing = plain_cloud_for(NodeClassHashController.name)
    if isinstance(hashing, NodeClassHashing):
        rest.append(NodeClassHashController(cluster, hashing))
    rest.append(NodePoolHashController(cluster))
    return CoreControllers(
        provisioner=provisioner,
        disruption=disruption,
        deciders=(provisioner, conditions, disruption),
        rest=tuple(rest),
        cloud_for=cloud_for,
        overlays=overlays,
    )
