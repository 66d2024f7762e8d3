"""Interruption messages: what a cloud warns is about to happen to its instances.

A cloud's warnings (on AWS, the EC2 and AWS Health events EventBridge puts on
an SQS queue, read by :class:`karpy.cloud.aws.interruption.SqsInterruptionQueue`;
in the simulator, the records a scenario schedules) are parsed into an
:class:`InterruptionMessage` of one of Karpenter's message kinds and handed to
the runtime as a change of kind :data:`INTERRUPTION`, which
:class:`karpy.controllers.interruption.InterruptionController` acts on.
:class:`InterruptionMetrics` holds Karpenter's interruption metric families,
which the controller and the SQS adapter both record into.

The message types live below the cloud providers and the controllers
because both speak them: a provider produces messages, a controller handles
them.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from karpy.operator.karpenter_metrics import NAMESPACE, Metrics
from karpy.operator.metrics import Counter, Histogram, Registry

# The change kind a message arrives as; the change's ``new`` is the InterruptionMessage.
INTERRUPTION = "Interruption"

# Message kinds, as Karpenter labels them in karpenter_interruption_received_messages_total.
KIND_SPOT_INTERRUPTION = "spot_interrupted"
KIND_REBALANCE_RECOMMENDATION = "rebalance_recommendation"
KIND_SCHEDULED_CHANGE = "scheduled_change"
KIND_INSTANCE_STOPPED = "instance_stopped"
KIND_INSTANCE_TERMINATED = "instance_terminated"
KIND_CAPACITY_RESERVATION_INTERRUPTION = "capacity_reservation_interrupted"
KIND_NO_OP = "no_op"

# Kinds whose NodeClaim is deleted (cordoned, drained and replaced); a rebalance recommendation is not.
ACTIONABLE_KINDS = frozenset(
    {
        KIND_SPOT_INTERRUPTION,
        KIND_SCHEDULED_CHANGE,
        KIND_INSTANCE_STOPPED,
        KIND_INSTANCE_TERMINATED,
        KIND_CAPACITY_RESERVATION_INTERRUPTION,
    }
)

# What an EC2 instance state change means; a state not named here (pending, running) is a no-op.
_STATE_KINDS = {
    "stopping": KIND_INSTANCE_STOPPED,
    "stopped": KIND_INSTANCE_STOPPED,
    "shutting-down": KIND_INSTANCE_TERMINATED,
    "terminated": KIND_INSTANCE_TERMINATED,
}
STATES = tuple(_STATE_KINDS)


def kind_of_state(state: str) -> str:
    """The message kind of a change to EC2 instance state ``state``."""
    return _STATE_KINDS.get(state.lower(), KIND_NO_OP)


def instance_id(provider_id: str) -> str:
    """The instance part of a provider ID: ``aws:///us-east-1a/i-0abc`` -> ``i-0abc``."""
    return provider_id.rstrip("/").rsplit("/", 1)[-1]


def _acknowledged() -> bool:
    return True


@dataclass(frozen=True, slots=True)
class InterruptionMessage:
    """One parsed message: what is about to happen to which instances, and how to acknowledge it."""

    # The queue's id of the message; a redelivery carries the same id.
    id: str
    kind: str
    # The instances it is about (a Health event may name several), by instance id.
    instance_ids: tuple[str, ...]
    # When the event happened (seconds since the epoch): the queue duration is measured from it.
    time: float
    # Deletes the message from its queue; True once done. It never raises (a failure is logged
    # by the queue and the message comes again after its visibility timeout).
    ack: Callable[[], bool] = _acknowledged
    # What the message said, for logs (the instance's new state, the Health event type...).
    detail: str = ""


class InterruptionMetrics:
    """Karpenter's interruption metrics, declared once per registry.

    The controller counts what it handles and the SQS adapter the messages it
    deletes unread (unparseable ones): both get the same families through
    :meth:`of`, as a registry refuses a name declared twice.
    """

    _by_registry: ClassVar[weakref.WeakKeyDictionary[Registry, InterruptionMetrics]] = (
        weakref.WeakKeyDictionary()
    )

    def __init__(self, registry: Registry) -> None:
        self.received: Counter = registry.counter(
            f"{NAMESPACE}_interruption_received_messages_total",
            "Count of messages received from the SQS queue. Broken down by message type.",
            ["message_type"],
        )
        self.deleted: Counter = registry.counter(
            f"{NAMESPACE}_interruption_deleted_messages_total",
            "Count of messages deleted from the SQS queue.",
        )
        self.queue_duration: Histogram = registry.histogram(
            f"{NAMESPACE}_interruption_message_queue_duration_seconds",
            "Amount of time an interruption message is on the queue before it is processed by karpy.",
        )

    @classmethod
    def of(cls, metrics: Metrics) -> InterruptionMetrics:
        found = cls._by_registry.get(metrics.registry)
        if found is None:
            found = cls._by_registry[metrics.registry] = cls(metrics.registry)
        return found
