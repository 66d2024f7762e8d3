"""Nodes of an expiring Capacity Block go before EC2 takes them (Karpenter's capacityreservation.expiration).

A Capacity Block ends at a fixed time and EC2 starts reclaiming its
instances 30 minutes before; Karpenter deletes the NodeClaims in one 40
minutes before the end, so their pods are drained and replaced elsewhere
while there is time, ten minutes ahead of EC2's interruption notice. This
controller does the same for every NodeClaim labelled
``karpenter.k8s.aws/capacity-reservation-id`` with a reservation the cloud
says is expiring (:class:`~karpy.cloud.provider.ReservationMarking`), in
``karpy run`` and in the simulator alike.

It runs when a NodeClaim in a reservation appears or changes, and then at
the next expiring moment of a reservation some NodeClaim is in: a cluster
without reservations never runs it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from karpy.api.nodeclaim import NodeClaim
from karpy.api.requirements import AWS_LABEL_CAPACITY_RESERVATION_ID
from karpy.cloud.provider import ReservationMarking
from karpy.logs import about
from karpy.operator.cluster import Clock, Cluster, NotFoundError
from karpy.operator.runtime import Watch

log = logging.getLogger("karpy.capacityreservation")


class CapacityBlockExpiration:
    name = "capacityreservation.expiration"
    KEY = "pass"

    def __init__(self, cluster: Cluster, cloud: ReservationMarking, clock: Clock) -> None:
        self.cluster = cluster
        self.cloud = cloud
        self.clock = clock

    def watches(self) -> list[Watch]:
        return [Watch("NodeClaim", self._on_nodeclaim)]

    def _on_nodeclaim(self, old: object | None, new: object | None) -> Iterable[str]:
        if isinstance(new, NodeClaim) and AWS_LABEL_CAPACITY_RESERVATION_ID in new.metadata.labels:
            return [self.KEY]
        return []

    def reconcile(self, key: str) -> float | None:
        expiring = self.cloud.reservations_expiring_at()
        if not expiring:
            return None
        now = self.clock.now()
        wait: float | None = None
        for nodeclaim in list(self.cluster.nodeclaims()):
            reservation_id = nodeclaim.metadata.labels.get(AWS_LABEL_CAPACITY_RESERVATION_ID, "")
            at = expiring.get(reservation_id)
            if at is None or nodeclaim.metadata.deleting:
                continue
            if at > now:
                wait = at - now if wait is None else min(wait, at - now)
                continue
            try:
                self.cluster.delete(nodeclaim)
            except NotFoundError:
                continue
            log.info(
                "deleting nodeclaim %s: its capacity block %s is expiring",
                nodeclaim.name,
                reservation_id,
                extra=about(nodeclaim, controller=self.name),
            )
        return wait
