"""A node that leaves its capacity reservation is relabelled on-demand (capacityreservation.capacitytype).

When a reservation ends (an On-Demand Capacity Reservation expires or is
cancelled) EC2 keeps its instances running as plain on-demand instances and
stops naming the reservation on them. Karpenter's AWS provider then relabels
the NodeClaim and its registered Node from ``karpenter.sh/capacity-type:
reserved`` to ``on-demand`` and drops ``karpenter.k8s.aws/capacity-reservation-id``
and ``-type`` (its ``ReservedCapacityLabels``), so the bill, consolidation
(an on-demand node is worth replacing, a reserved one rarely) and drift see
what the node now is. This controller does the same, in ``karpy run`` and in
the simulator alike: it asks the cloud for its instances (``list``, one
DescribeInstances on AWS) once a minute while some NodeClaim is labelled
reserved, and never otherwise. Deleting NodeClaims are left alone, and a Node
not yet registered is relabelled on a later pass (as Karpenter's).

Only reserved to on-demand: Karpenter never promotes a node into a reservation.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from karpy.api.nodeclaim import LABEL_REGISTERED, NodeClaim
from karpy.api.requirements import (
    AWS_LABEL_CAPACITY_RESERVATION_ID,
    CAPACITY_TYPE_ON_DEMAND,
    CAPACITY_TYPE_RESERVED,
    LABEL_CAPACITY_TYPE,
)
from karpy.cloud.provider import CloudProvider, CloudProviderError
from karpy.cloud.reservations import demoted
from karpy.controllers.state import node_of
from karpy.logs import about
from karpy.operator.cluster import Clock, Cluster, ConflictError, NotFoundError
from karpy.operator.runtime import Watch

log = logging.getLogger("karpy.capacityreservation")

SYNC_PERIOD = 60.0


class CapacityTypeSync:
    name = "capacityreservation.capacitytype"
    KEY = "pass"

    def __init__(self, cluster: Cluster, cloud: CloudProvider, clock: Clock) -> None:
        self.cluster = cluster
        self.cloud = cloud
        self.clock = clock

    def watches(self) -> list[Watch]:
        return [Watch("NodeClaim", self._on_nodeclaim)]

    def _on_nodeclaim(self, old: object | None, new: object | None) -> Iterable[str]:
        if isinstance(new, NodeClaim) and _reserved(new):
            return [self.KEY]
        return []

    def reconcile(self, key: str) -> float | None:
        reserved = [nc for nc in self.cluster.nodeclaims() if _reserved(nc) and not nc.metadata.deleting]
        if not reserved:
            return None
        try:
            listed = self.cloud.list()
        except CloudProviderError as error:
            log.info("listing instances failed: %s", error, extra={"controller": self.name})
            return SYNC_PERIOD
        capacity_types = {
            found.status.provider_id: found.metadata.labels.get(LABEL_CAPACITY_TYPE, "") for found in listed
        }
        retry = False
        for nodeclaim in reserved:
            if capacity_types.get(nodeclaim.status.provider_id) != CAPACITY_TYPE_ON_DEMAND:
                continue
            try:
                self._demote(nodeclaim)
            except ConflictError:
                retry = True
        return 0.0 if retry else SYNC_PERIOD

    def _demote(self, nodeclaim: NodeClaim) -> None:
        reservation_id = nodeclaim.metadata.labels.get(AWS_LABEL_CAPACITY_RESERVATION_ID, "")
        try:
            self.cluster.update(nodeclaim.with_metadata(labels=demoted(nodeclaim.metadata.labels)))
        except NotFoundError:
            return
        log.info(
            "nodeclaim %s left capacity reservation %s; it is on-demand now",
            nodeclaim.name,
            reservation_id,
            extra=about(nodeclaim, controller=self.name),
        )
        # A reservation that ended before the node registered leaves no Node to relabel yet.
        node = node_of(self.cluster, nodeclaim)
        if (
            node is None
            or node.metadata.deleting
            or node.metadata.labels.get(LABEL_REGISTERED) != "true"
            or node.metadata.labels.get(LABEL_CAPACITY_TYPE) != CAPACITY_TYPE_RESERVED
        ):
            return
        try:
            self.cluster.update(
                node.with_changes(metadata=node.metadata.with_changes(labels=demoted(node.metadata.labels)))
            )
        except NotFoundError:
            pass  # gone meanwhile: nothing left to relabel


def _reserved(nodeclaim: NodeClaim) -> bool:
    return nodeclaim.metadata.labels.get(LABEL_CAPACITY_TYPE) == CAPACITY_TYPE_RESERVED and bool(
        nodeclaim.status.provider_id
    )
