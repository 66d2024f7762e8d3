"""Interruption handling: act on a cloud's warnings before it takes an instance away.

A cloud tells of what is about to happen to an instance: on AWS, EventBridge
puts EC2 and AWS Health events on an SQS queue (``INTERRUPTION_QUEUE``), read
by :class:`karpy.cloud.aws.interruption.SqsInterruptionQueue`; in the
simulator, the simulated cloud sends the same records at a scenario's times.
Either way a parsed :class:`~karpy.operator.interruption.InterruptionMessage`
arrives as a change of kind :data:`~karpy.operator.interruption.INTERRUPTION`
(the change's ``new`` is the message) and this controller
acts on it as Karpenter's interruption controller does:

- **spot interruption warning** (the instance is reclaimed in two minutes):
  its spot offering (instance type, zone, ``spot``) is marked unavailable
  (for 3 minutes, in the cloud provider's unavailable-offerings cache) and the
  NodeClaim is deleted;
- **scheduled change** (AWS Health, EC2 maintenance) and **state change**
  to stopping, stopped, shutting-down or terminated: the NodeClaim is deleted;
- **rebalance recommendation**: an Event only (Karpenter does not act on it);
- anything else (a state change to ``running``, say) is a no-op.

Deleting the NodeClaim is all the action there is: its termination finalizer
cordons and drains the node through the Eviction API (PodDisruptionBudgets
respected) and the evicted pods' pending state makes the provisioner launch
replacements at once, on another offering for a spot warning. The Events
use Karpenter's reasons (``SpotInterrupted``, ``SpotRebalanceRecommendation``,
``InstanceStopping``, ``InstanceTerminating``, ``InstanceUnhealthy`` and
``TerminatingOnInterruption``) on the NodeClaim and its Node; the metrics use
Karpenter's names: ``karpenter_interruption_received_messages_total{message_type}``
(the kinds below), ``karpenter_interruption_deleted_messages_total`` and
``karpenter_interruption_message_queue_duration_seconds`` (from the event's
time to its handling, for every message but no-ops); deleted NodeClaims count in
``karpenter_nodeclaims_disrupted_total`` with the message kind as reason.

The instance is matched by the id part of a provider ID, what follows the
last ``/`` (``aws:///us-east-1a/i-0abc`` is ``i-0abc``), on the NodeClaim's
``status.providerID`` and, for a NodeClaim whose status trails, on its Node's
``spec.providerID``: the same code serves AWS and the simulator, whose
instances have provider IDs of the same shape. A message about an instance
karpy does not know (not one of its NodeClaims) is counted and acknowledged,
nothing else. Every handled message is acknowledged (``ack``: the SQS
adapter deletes it from the queue), once handled, so a crash in between makes
the queue deliver it again; handling again is harmless: a NodeClaim already
being deleted is not deleted again, so a message delivered twice deletes
once. Its Events are recorded and, for a spot warning, its offering is marked
unavailable all the same, as Karpenter does: a node that consolidation or a
user is deleting is still reclaimed, and its pods, moving now, must not be
sent to another instance of the same offering.

Why an inbox: the :class:`~karpy.operator.runtime.Runtime` reconciles
string keys, and a message is not an object in the cluster to be read back
by key. The watch's mapper puts each message in ``_inbox`` under its id and
returns the id as the key; the reconcile takes it out once handled. That is
safe because the mapper and the reconciles run on the same thread in both
worlds (``karpy run``'s reconcile thread feeds changes from its queue to
``Runtime.on_change`` itself; the simulator is single-threaded), so the inbox
is never touched concurrently; a message whose handling raised stays in the
inbox for the Runtime's retry.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from karpy.api.core import Node
from karpy.api.nodeclaim import NodeClaim
from karpy.api.requirements import AWS_LABEL_CAPACITY_RESERVATION_ID, CAPACITY_TYPE_SPOT
from karpy.cloud.provider import CloudProvider, ReservationMarking
from karpy.logs import about
from karpy.operator.cluster import EVENT_NORMAL, EVENT_WARNING, Clock, Cluster, NotFoundError
from karpy.operator.interruption import (
    ACTIONABLE_KINDS,
    INTERRUPTION,
    KIND_CAPACITY_RESERVATION_INTERRUPTION,
    KIND_INSTANCE_STOPPED,
    KIND_INSTANCE_TERMINATED,
    KIND_NO_OP,
    KIND_REBALANCE_RECOMMENDATION,
    KIND_SCHEDULED_CHANGE,
    KIND_SPOT_INTERRUPTION,
    InterruptionMessage,
    InterruptionMetrics,
    instance_id,
)
from karpy.operator.karpenter_metrics import Metrics
from karpy.operator.runtime import Watch

log = logging.getLogger("karpy.interruption")

# (Event type, reason, message) per kind, as Karpenter words them.
_EVENTS: dict[str, tuple[str, str, str]] = {
    KIND_SPOT_INTERRUPTION: (EVENT_WARNING, "SpotInterrupted", "Spot interruption warning was triggered"),
    KIND_REBALANCE_RECOMMENDATION: (
        EVENT_NORMAL,
        "SpotRebalanceRecommendation",
        "Spot rebalance recommendation was triggered",
    ),
    KIND_SCHEDULED_CHANGE: (
        EVENT_WARNING,
        "InstanceUnhealthy",
        "An unhealthy warning was triggered for the instance",
    ),
    KIND_INSTANCE_STOPPED: (EVENT_WARNING, "InstanceStopping", "Instance is stopping"),
    KIND_INSTANCE_TERMINATED: (EVENT_WARNING, "InstanceTerminating", "Instance is terminating"),
    KIND_CAPACITY_RESERVATION_INTERRUPTION: (
        EVENT_WARNING,
        "CapacityReservationInstanceInterrupted",
        "Capacity Reservation interruption warning was triggered",
    ),
}
REASON_TERMINATING_ON_INTERRUPTION = "TerminatingOnInterruption"


class InterruptionController:
    name = "interruption"

    def __init__(
        self, cluster: Cluster, cloud: CloudProvider, clock: Clock, *, metrics: Metrics | None = None
    ) -> None:
        self.cluster = cluster
        self.cloud = cloud
        self.clock = clock
        self.metrics = metrics if metrics is not None else Metrics()
        self.interruption_metrics = InterruptionMetrics.of(self.metrics)
        self._inbox: dict[str, InterruptionMessage] = {}

    def watches(self) -> list[Watch]:
        return [Watch(INTERRUPTION, self._on_message)]

    def _on_message(self, old: object | None, new: object | None) -> Iterable[str]:
        if not isinstance(new, InterruptionMessage):
            return []
        # A redelivery replaces the waiting copy: its ack is the one that still works.
        self._inbox[new.id] = new
        return [new.id]

    def reconcile(self, key: str) -> float | None:
        message = self._inbox.get(key)
        if message is None:
            return None
        if message.kind in _EVENTS:  # a kind this controller does not know is a no-op
            for found in message.instance_ids:
                nodeclaim, node = self._find(found)
                if nodeclaim is None:
                    log.debug(
                        "interruption message %s (%s) about %s: not an instance of this cluster",
                        message.id,
                        message.kind,
                        found,
                        extra=about(controller=self.name),
                    )
                    continue
                self._handle(message, nodeclaim, node)
        # Counted once handled: a handling that raised is retried with the message, not counted twice.
        self.interruption_metrics.received.labels(message_type=message.kind).inc()
        if message.kind != KIND_NO_OP:
            # As Karpenter times them: the EC2 state changes to pending and running that every
            # launch sends would otherwise swamp the time interruptions wait on the queue.
            self.interruption_metrics.queue_duration.observe(max(0.0, self.clock.now() - message.time))
        del self._inbox[key]
        if message.ack():
            self.interruption_metrics.deleted.inc()
        return None

    def _find(self, wanted: str) -> tuple[NodeClaim | None, Node | None]:
        """The NodeClaim and Node of instance ``wanted``, by the id part of their provider IDs."""
        node = next(
            (
                node
                for node in self.cluster.nodes()
                if node.provider_id and instance_id(node.provider_id) == wanted
            ),
            None,
        )
        for nodeclaim in self.cluster.nodeclaims():
            if nodeclaim.status.provider_id and instance_id(nodeclaim.status.provider_id) == wanted:
                return nodeclaim, node
            if node is not None and nodeclaim.status.node_name == node.name:
                return nodeclaim, node
        return None, node

    def _handle(self, message: InterruptionMessage, nodeclaim: NodeClaim, node: Node | None) -> None:
        event_type, reason, text = _EVENTS[message.kind]
        for involved in (nodeclaim, node):
            if involved is not None:
                self.cluster.record_event(involved, event_type, reason, text)
        if message.kind == KIND_SPOT_INTERRUPTION and nodeclaim.instance_type and nodeclaim.zone:
            # Launching the same offering again would only be reclaimed again; that holds for a
            # node already being deleted too (by consolidation, say), whose pods are moving now.
            self.cloud.mark_offering_unavailable(nodeclaim.instance_type, nodeclaim.zone, CAPACITY_TYPE_SPOT)
        reservation_id = nodeclaim.metadata.labels.get(AWS_LABEL_CAPACITY_RESERVATION_ID, "")
        if (
            message.kind == KIND_CAPACITY_RESERVATION_INTERRUPTION
            and reservation_id
            and isinstance(self.cloud, ReservationMarking)
        ):
            # The reservation's capacity is being reclaimed: launch nothing more into it (Karpenter's).
            self.cloud.mark_reservation_unavailable(reservation_id)
        if message.kind not in ACTIONABLE_KINDS or nodeclaim.metadata.deleting:
            # Already on its way out (a redelivery, or another reason): it is not deleted again.
            return
        try:
            self.cluster.delete(nodeclaim)
        except NotFoundError:
            return
        self.metrics.nodeclaim_disrupted(nodeclaim, message.kind)
        log.info(
            "deleting nodeclaim %s on interruption message %s (%s%s)",
            nodeclaim.name,
            message.id,
            message.kind,
            f": {message.detail}" if message.detail else "",
            extra=about(nodeclaim, node, controller=self.name),
        )
        for involved in (nodeclaim, node):
            if involved is not None:
                self.cluster.record_event(
                    involved,
                    EVENT_WARNING,
                    REASON_TERMINATING_ON_INTERRUPTION,
                    f"Interruption triggered termination for the {type(involved).__name__}",
                )
