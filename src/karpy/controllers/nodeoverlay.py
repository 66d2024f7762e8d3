"""NodeOverlays in ``karpy run`` and the simulator: evaluated, their status written, applied to every catalog.

Karpenter's nodeoverlay controller, instance-type store and overlay
decorator over karpy's protocols (``NodeOverlay`` feature gate):

- :class:`NodeOverlayController` reads every NodePool's catalog from the
  undecorated provider, works the NodeOverlays out against them
  (:func:`karpy.scheduling.overlays.evaluate`), writes each overlay's
  ``ValidationSucceeded`` (and ``Ready``) condition, and publishes the result
  to the :class:`OverlayStore`. It runs when an overlay's spec, a NodePool or
  a node class changes, and every 6 hours, as Karpenter's does.
- :class:`OverlayStore` holds the last evaluation and announces a new one
  (under :data:`OVERLAYS_EVALUATED`), which opens a provisioning batch.
- :class:`OverlaidCloudProvider` is what every controller is given instead of
  the provider: its ``get_instance_types`` is the provider's with the
  evaluation applied, so provisioning, consolidation, NodePool status and the
  Cluster Autoscaler baseline all price and size nodes the same way. A pool
  not evaluated yet raises :class:`~karpy.cloud.provider.NodePoolNotEvaluatedError`:
  nothing is launched for it until the controller has run, as Karpenter's
  provisioner skips it "awaiting nodeoverlay evaluation".

Only prices and sizes karpy plans with change: the cloud still launches
among the NodeClaim's instance types by its own criteria, as Karpenter's
providers do (the NodeClaim lists its options by overlaid price, and a
pool's options are those overlaid capacity fits).
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from karpy.api.conditions import TRUE, set_condition
from karpy.api.instancetype import InstanceType
from karpy.api.nodeclaim import NodeClaim
from karpy.api.nodeclass import EC2_KIND, KWOK_KIND, NodeClass
from karpy.api.nodeoverlay import (
    CONDITION_READY,
    CONDITION_VALIDATION_SUCCEEDED,
    NodeOverlay,
    NodeOverlayStatus,
)
from karpy.api.nodepool import NodePool, status_only_change
from karpy.api.quantity import ResourceAmounts
from karpy.cloud.provider import (
    CloudProvider,
    CloudProviderError,
    NodeClassProblem,
    NodePoolNotEvaluatedError,
    RepairPolicy,
    ReservationMarking,
)
from karpy.operator.cluster import Clock, Cluster, KubeError
from karpy.operator.runtime import Watch
from karpy.scheduling.overlays import OverlayEvaluation, Verdict, apply_updates, evaluate

log = logging.getLogger("karpy.nodeoverlay")

# The kind a new evaluation is announced under: (OVERLAYS_EVALUATED, None, None).
OVERLAYS_EVALUATED = "NodeOverlaysEvaluated"
Listener = Callable[[str, object | None, object | None], None]

# Seconds between two evaluations nothing asked for (Karpenter's requeue).
RESYNC = 6 * 3600.0
# Seconds before trying again when a status write was refused (Karpenter requeues at once).
RETRY = 1.0
PASS_KEY = "overlays"


class OverlayStore:
    """The last evaluation of the NodeOverlays, applied to the catalogs controllers list."""

    def __init__(self) -> None:
        self.evaluation: OverlayEvaluation | None = None
        self.version = 0
        self._listeners: list[Listener] = []
        # Pool -> (the provider's catalog, the version applied, the result): the same list while
        # neither changes, so what is keyed by the list's identity downstream stays.
        self._applied: dict[str, tuple[list[InstanceType], int, list[InstanceType]]] = {}

    def subscribe(self, listener: Listener) -> None:
        """Be told when a new evaluation is published (the provisioner plans again then)."""
        self._listeners.append(listener)

    def publish(self, evaluation: OverlayEvaluation) -> None:
        if evaluation == self.evaluation:
            return
        self.evaluation = evaluation
        self.version += 1
        self._applied.clear()
        for listener in list(self._listeners):
            listener(OVERLAYS_EVALUATED, None, None)

    def apply(self, nodepool: str, catalog: list[InstanceType]) -> list[InstanceType]:
        """``catalog`` as the overlays make it for ``nodepool``: the same list while neither changes."""
        evaluation = self.evaluation
        if evaluation is None or nodepool not in evaluation.evaluated:
            raise NodePoolNotEvaluatedError(f"NodePool {nodepool} is awaiting nodeoverlay evaluation")
        updates = evaluation.updates.get(nodepool)
        if not updates:
            return catalog
        cached = self._applied.get(nodepool)
        if cached is not None and cached[0] is catalog and cached[1] == self.version:
            return cached[2]
        applied = apply_updates(catalog, updates)
        self._applied[nodepool] = (catalog, self.version, applied)
        return applied

    def price(self, nodepool: str, instance_type: str, zone: str, capacity_type: str, price: float) -> float:
        """What an offering launched for ``nodepool`` costs, overlaid (as is before any evaluation)."""
        if self.evaluation is None:
            return price
        return self.evaluation.price(nodepool, instance_type, zone, capacity_type, price)

    def extended_capacity(self, nodepool: str, instance_type: str) -> ResourceAmounts:
        """The extended resources the overlays add to ``instance_type`` in ``nodepool`` (none before any)."""
        if self.evaluation is None:
            return {}
        update = self.evaluation.updates.get(nodepool, {}).get(instance_type)
        return dict(update.capacity) if update is not None else {}


class OverlaidCloudProvider:
    """A cloud provider whose instance types carry the NodeOverlays (Karpenter's overlay decorator)."""

    def __init__(self, cloud: CloudProvider, store: OverlayStore) -> None:
        self.cloud = cloud
        self.store = store
        self.name = cloud.name
        # A stand-in cloud of a test may not say; one that does not say cannot reboot.
        self.supports_reboot: bool = getattr(cloud, "supports_reboot", False)

    def get_instance_types(self, nodepool: NodePool) -> builtins.list[InstanceType]:
        return self.store.apply(nodepool.name, self.cloud.get_instance_types(nodepool))

    def create(self, nodeclaim: NodeClaim) -> NodeClaim:
        return self.cloud.create(nodeclaim)

    def delete(self, nodeclaim: NodeClaim) -> None:
        self.cloud.delete(nodeclaim)

    def get(self, provider_id: str) -> NodeClaim:
        return self.cloud.get(provider_id)

    def list(self) -> builtins.list[NodeClaim]:
        return self.cloud.list()

    def is_drifted(self, nodeclaim: NodeClaim) -> str:
        return self.cloud.is_drifted(nodeclaim)

    def repair_policies(self) -> builtins.list[RepairPolicy]:
        return self.cloud.repair_policies()

    def reboot(self, nodeclaim: NodeClaim, operation_id: str) -> None:
        self.cloud.reboot(nodeclaim, operation_id)

    def node_class_problem(self, node_class: NodeClass) -> NodeClassProblem | None:
        return self.cloud.node_class_problem(node_class)

    def mark_offering_unavailable(self, instance_type: str, zone: str, capacity_type: str) -> None:
        self.cloud.mark_offering_unavailable(instance_type, zone, capacity_type)

    def mark_reservation_unavailable(self, reservation_id: str) -> None:
        if isinstance(self.cloud, ReservationMarking):
            self.cloud.mark_reservation_unavailable(reservation_id)

    def reservations_expiring_at(self) -> dict[str, float]:
        if isinstance(self.cloud, ReservationMarking):
            return self.cloud.reservations_expiring_at()
        return {}


class NodeOverlayController:
    """Evaluates the NodeOverlays, writes their conditions and publishes the result (one key for all)."""

    name = "nodeoverlay"

    def __init__(
        self,
        cluster: Cluster,
        cloud: CloudProvider,
        clock: Clock,
        store: OverlayStore,
        *,
        resync: float = RESYNC,
    ) -> None:
        self.cluster = cluster
        # The provider without the overlays: they are worked out against its catalogs.
        self.cloud = cloud
        self.clock = clock
        self.store = store
        self.resync = resync

    def watches(self) -> list[Watch]:
        return [
            Watch("NodeOverlay", self._on_overlay),
            Watch("NodePool", self._on_nodepool),
            Watch(EC2_KIND, self._on_node_class),
            Watch(KWOK_KIND, self._on_node_class),
        ]

    @staticmethod
    def _on_overlay(old: object | None, new: object | None) -> Iterable[str]:
        if isinstance(old, NodeOverlay) and isinstance(new, NodeOverlay) and old.spec == new.spec:
            return ()  # its status (ours) or metadata
        return (PASS_KEY,)

    @staticmethod
    def _on_nodepool(old: object | None, new: object | None) -> Iterable[str]:
        if status_only_change(old, new):
            return ()
        return (PASS_KEY,)

    @staticmethod
    def _on_node_class(old: object | None, new: object | None) -> Iterable[str]:
        if old is not None and new is not None and getattr(old, "spec", None) == getattr(new, "spec", None):
            return ()
        return (PASS_KEY,)

    def reconcile(self, key: str) -> float | None:
        catalogs: list[tuple[NodePool, Sequence[InstanceType]]] = []
        for pool in sorted(self.cluster.nodepools(), key=lambda pool: pool.name):
            try:
                catalogs.append((pool, self.cloud.get_instance_types(pool)))
            except CloudProviderError as error:
                log.debug("nodeoverlay: NodePool %s has no instance types yet: %s", pool.name, error)
        overlays = list(self.cluster.node_overlays())
        evaluation = evaluate(overlays, catalogs)
        if not self._write_statuses(overlays, evaluation):
            return RETRY
        self.store.publish(evaluation)
        return self.resync

    def _write_statuses(self, overlays: Sequence[NodeOverlay], evaluation: OverlayEvaluation) -> bool:
        """Write each overlay's conditions; False when a write was refused (evaluated again shortly)."""
        written = True
        for overlay in overlays:
            if overlay.metadata.deleting:
                continue
            status = _status(overlay.status, evaluation.verdict(overlay.name), self.clock.now())
            if status == overlay.status:
                continue
            try:
                self.cluster.update_status(overlay.with_status(status))
            except KubeError as error:
                log.debug("nodeoverlay %s: status not written: %s", overlay.name, error)
                written = False
        return written


def _status(status: NodeOverlayStatus, verdict: Verdict, now: float) -> NodeOverlayStatus:
    conditions = set_condition(
        status.conditions,
        CONDITION_VALIDATION_SUCCEEDED,
        verdict.status,
        now,
        verdict.reason,
        verdict.message,
    )
    if verdict.status == TRUE:
        conditions = set_condition(conditions, CONDITION_READY, TRUE, now)
    else:
        conditions = set_condition(
            conditions, CONDITION_READY, verdict.status, now, verdict.reason, verdict.message
        )
    return replace(status, conditions=conditions)


def overlaid(
    cloud_for: Callable[[str], CloudProvider], store: OverlayStore
) -> Callable[[str], CloudProvider]:
    """``cloud_for`` with the overlays applied to every controller's catalogs."""
    return lambda controller: OverlaidCloudProvider(cloud_for(controller), store)
