"""Marks NodeClaims Drifted and Consolidatable (or not) and deletes expired ones: Karpenter's
nodeclaim disruption controller.

The disruption pass (:mod:`karpy.controllers.disruption`) reads the Drifted
condition this controller keeps; expiration in Karpenter v1 is forceful, so
an expired NodeClaim is deleted here directly, budgets notwithstanding.
Consolidatable says what the disruption pass decides from the same rule
(:func:`karpy.disruption.emptiness.consolidatable_at`): true once
``consolidateAfter`` has passed since the node went quiet, absent otherwise,
so a user (and Karpenter's e2e suites) can see which nodes consolidation
may take.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from karpy.api.conditions import TRUE, find_condition, remove_condition, set_condition
from karpy.api.nodeclaim import CONDITION_CONSOLIDATABLE, CONDITION_DRIFTED, NodeClaim
from karpy.api.nodeclass import EC2_KIND, KWOK_KIND, EC2NodeClass, KWOKNodeClass
from karpy.api.nodepool import NodePool, status_only_change
from karpy.cloud.provider import CloudProvider, CloudProviderError
from karpy.controllers.orchestration import reschedulable_pods
from karpy.disruption.drift import drift_reason
from karpy.disruption.emptiness import consolidatable_at
from karpy.disruption.expiration import expires_at, is_expired
from karpy.logs import about
from karpy.operator.cluster import EVENT_NORMAL, Clock, Cluster
from karpy.operator.karpenter_metrics import REASON_EXPIRED, Metrics
from karpy.operator.runtime import Watch

# The disruption controller's logger, as before this controller had its own module.
log = logging.getLogger("karpy.disruption")


class NodeClaimDisruptionConditions:
    """Marks NodeClaims Drifted (or not) and deletes expired ones.

    Karpenter's nodeclaim disruption controller: drift is a condition the
    disruption pass reads; expiration in v1 is forceful, so an expired
    NodeClaim is deleted here directly, budgets notwithstanding.
    """

    name = "nodeclaim.disruption"

    def __init__(
        self,
        cluster: Cluster,
        cloud: CloudProvider,
        clock: Clock,
        *,
        metrics: Metrics | None = None,
    ) -> None:
        self.cluster = cluster
        self.clock = clock
        self.cloud = cloud
        self.metrics = metrics if metrics is not None else Metrics()

    def watches(self) -> list[Watch]:
        return [
            Watch("NodeClaim", self._on_nodeclaim),
            Watch("NodePool", self._on_nodepool),
            Watch(EC2_KIND, self._on_node_class),
            Watch(KWOK_KIND, self._on_node_class),
        ]

    def _on_node_class(self, old: object | None, new: object | None) -> Iterable[str]:
        changed = new if new is not None else old
        if not isinstance(changed, EC2NodeClass | KWOKNodeClass):
            return []
        return [
            claim.name
            for claim in self.cluster.nodeclaims()
            if claim.spec.node_class_ref.kind == changed.kind
            and claim.spec.node_class_ref.name == changed.name
        ]

    def _on_nodeclaim(self, old: object | None, new: object | None) -> Iterable[str]:
        # On creation (to schedule its expiry), once initialized (drift is judged from then on)
        # and on a pod event (which puts off Consolidatable).
        if not isinstance(new, NodeClaim):
            return []
        if not isinstance(old, NodeClaim):
            return [new.name]
        became_initialized = new.initialized and not old.initialized
        pod_event = new.status.last_pod_event_time != old.status.last_pod_event_time
        return [new.name] if became_initialized or pod_event else []

    def _on_nodepool(self, old: object | None, new: object | None) -> Iterable[str]:
        pool = new if isinstance(new, NodePool) else None
        if pool is None or status_only_change(old, new):
            return []
        return [claim.name for claim in self.cluster.nodeclaims() if claim.nodepool == pool.name]

    def reconcile(self, key: str) -> float | None:
        nodeclaim = self.cluster.nodeclaim(key)
        if nodeclaim is None or nodeclaim.metadata.deleting:
            return None
        now = self.clock.now()
        if is_expired(nodeclaim, now):
            log.info("nodeclaim %s expired", nodeclaim.name, extra=about(nodeclaim, controller=self.name))
            self.cluster.record_event(
                nodeclaim, EVENT_NORMAL, "DisruptionTerminating", "Disrupting NodeClaim: Expired"
            )
            moving = reschedulable_pods(self.cluster, nodeclaim)  # before the drain starts moving them
            self.cluster.delete(nodeclaim)
            self.metrics.nodeclaim_disrupted(nodeclaim, REASON_EXPIRED)
            self.metrics.pods_disrupted(nodeclaim, REASON_EXPIRED, moving)
            return None
        nodepool = self.cluster.nodepool(nodeclaim.nodepool)
        conditions = nodeclaim.status.conditions
        consolidatable = None if nodepool is None else consolidatable_at(nodeclaim, nodepool)
        # As Karpenter: true once due, and absent (never False) before or without consolidation.
        conditions = (
            set_condition(conditions, CONDITION_CONSOLIDATABLE, TRUE, now)
            if consolidatable is not None and consolidatable <= now
            else remove_condition(conditions, CONDITION_CONSOLIDATABLE)
        )
        if nodepool is not None and nodeclaim.initialized:
            try:
                provider = self.cloud.is_drifted(nodeclaim)
            except CloudProviderError:
                provider = ""
            reason, message = drift_reason(nodeclaim, nodepool, provider)
            # As Karpenter: Drifted is true with its reason, or not there at all (never a reasonless False).
            conditions = (
                set_condition(conditions, CONDITION_DRIFTED, TRUE, now, reason, message)
                if reason
                else remove_condition(conditions, CONDITION_DRIFTED)
            )
            if reason and find_condition(conditions, CONDITION_DRIFTED) != nodeclaim.condition(
                CONDITION_DRIFTED
            ):
                self.cluster.record_event(nodeclaim, EVENT_NORMAL, "Drifted", message)
        if conditions != nodeclaim.status.conditions:
            self.cluster.update(nodeclaim.with_status(conditions=conditions))
        wake_at = [
            moment
            for moment in (expires_at(nodeclaim), consolidatable)
            if moment is not None and moment > now
        ]
        return max(0.0, min(wake_at) - now) if wake_at else None


__all__ = ["NodeClaimDisruptionConditions"]
