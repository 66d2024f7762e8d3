"""The interruption queue: EventBridge's EC2 and AWS Health events, read from SQS.

With ``INTERRUPTION_QUEUE`` set, Karpenter's install routes five kinds of
EventBridge events to an SQS queue, and karpy reads them the same way:

- ``EC2 Spot Instance Interruption Warning`` (source ``aws.ec2``):
  ``spot_interrupted`` for ``detail.instance-id`` (``detail.instance-action``
  is logged);
- ``EC2 Capacity Reservation Instance Interruption Warning`` (``aws.ec2``):
  ``capacity_reservation_interrupted`` for ``detail.instance-id``: an
  interruptible reservation reclaims the instance; its NodeClaim is deleted
  and the reservation marked used up (Karpenter v1.10);
- ``EC2 Instance Rebalance Recommendation`` (``aws.ec2``):
  ``rebalance_recommendation`` for ``detail.instance-id``;
- ``EC2 Instance State-change Notification`` (``aws.ec2``): by
  ``detail.state``, ``instance_stopped`` (stopping, stopped),
  ``instance_terminated`` (shutting-down, terminated) or ``no_op`` (other
  states) for ``detail.instance-id``;
- ``AWS Health Event`` (``aws.health``): ``scheduled_change`` for every
  ``detail.affectedEntities[].entityValue`` when ``detail.service`` is
  ``EC2`` and ``detail.eventTypeCategory`` is ``scheduledChange``; other
  Health events are no-ops.

The event's ``time`` is when it happened (the queue duration is measured
from it). A well-formed event of another type is a no-op message (counted,
deleted), as in Karpenter; a body that is not such an event (not JSON, no
``detail-type``, a known type without its instance id) is unparseable: it is
deleted at once and logged as one warning line with the message id and why,
so a bad message cannot come back forever.

:class:`SqsInterruptionQueue` is a daemon thread: it resolves the queue's URL
(``GetQueueUrl``; a full ``https://`` URL is taken as it is), long-polls
``ReceiveMessage`` (up to 10 messages, ``WaitTimeSeconds`` 20: one request per
20 s when the queue is idle), and hands each parsed message to ``deliver``
with an ``ack`` that deletes it (``DeleteMessage``): the controller calls it
once it has acted, so a message karpy dies holding is delivered again after
the queue's visibility timeout, and handling it again is harmless. ``deliver``
is called on this thread; ``karpy run`` puts the message on its change queue,
so the controller handles it on the reconcile thread.

Errors from SQS (throttling, a 5xx, connection refused) never end the
thread: the first of a streak is a warning (the rest debug lines, as
:class:`~karpy.logs.FailureStreak` logs them) and the call is retried after a
backoff that doubles from 1 s to 30 s and is reset by a success (botocore's standard retries have
already tried a few times by then). ``stop()`` returns promptly: it sets a flag
and waits at most :data:`STOP_WAIT` seconds for the thread; a long poll in
flight is not waited for (the thread is a daemon and delivers nothing once
stopping; what that poll receives becomes visible again after the visibility
timeout, so nothing is lost). Tests may pass a smaller ``wait_seconds``.

Configuration is the SDK's own, as for every AWS call of karpy
(:mod:`karpy.cloud.aws.client`): credentials from the standard chain, the
endpoint from ``AWS_ENDPOINT_URL``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING

import boto3

from karpy.cloud.aws.client import _RETRIES, AwsApiError, _translated
from karpy.logs import FailureStreak
from karpy.operator.interruption import (
    KIND_CAPACITY_RESERVATION_INTERRUPTION,
    KIND_NO_OP,
    KIND_REBALANCE_RECOMMENDATION,
    KIND_SCHEDULED_CHANGE,
    KIND_SPOT_INTERRUPTION,
    InterruptionMessage,
    InterruptionMetrics,
    kind_of_state,
)
from karpy.operator.karpenter_metrics import Metrics

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

log = logging.getLogger("karpy.interruption.sqs")

MAX_MESSAGES = 10
WAIT_SECONDS = 20
# How long stop() waits for the thread before returning (a long poll in flight is not waited for).
STOP_WAIT = 1.0
BACKOFF_FIRST = 1.0
BACKOFF_MAX = 30.0

SPOT_INTERRUPTION = "EC2 Spot Instance Interruption Warning"
REBALANCE_RECOMMENDATION = "EC2 Instance Rebalance Recommendation"
STATE_CHANGE = "EC2 Instance State-change Notification"
HEALTH_EVENT = "AWS Health Event"
CAPACITY_RESERVATION_INTERRUPTION = "EC2 Capacity Reservation Instance Interruption Warning"


class UnparseableMessageError(ValueError):
    """A body that is not an EventBridge event karpy can read; the message says why."""


def _field(mapping: Mapping[str, object], key: str, where: str) -> str:
    value = mapping.get(key)
    if not isinstance(value, str) or not value:
        raise UnparseableMessageError(f"{where}{key} is missing or not a string")
    return value


def _event_time(event: Mapping[str, object], received: float) -> float:
    text = event.get("time")
    if isinstance(text, str):
        try:
            return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    return received


def parse_event(message_id: str, body: str, received: float) -> InterruptionMessage:
    """The message an EventBridge event body stands for; :class:`UnparseableMessageError` if none.

    ``received`` stands for the event's time when its ``time`` is missing or unreadable.
    """
    try:
        event = json.loads(body)
    except ValueError as error:
        raise UnparseableMessageError(f"not JSON: {error}") from error
    if not isinstance(event, dict):
        raise UnparseableMessageError("not a JSON object")
    detail_type = _field(event, "detail-type", "")
    source = event.get("source")
    detail = event.get("detail")
    if not isinstance(detail, dict):
        raise UnparseableMessageError("detail is missing or not an object")
    kind, said = KIND_NO_OP, detail_type
    instance_ids: tuple[str, ...] = ()
    ec2_types = (SPOT_INTERRUPTION, REBALANCE_RECOMMENDATION, STATE_CHANGE, CAPACITY_RESERVATION_INTERRUPTION)
    if source == "aws.ec2" and detail_type in ec2_types:
        instance_ids = (_field(detail, "instance-id", "detail."),)
        if detail_type == SPOT_INTERRUPTION:
            kind, said = KIND_SPOT_INTERRUPTION, f"instance-action {detail.get('instance-action', '')}"
        elif detail_type == CAPACITY_RESERVATION_INTERRUPTION:
            kind = KIND_CAPACITY_RESERVATION_INTERRUPTION
            said = f"instance-action {detail.get('instance-action', '')}"
        elif detail_type == REBALANCE_RECOMMENDATION:
            kind = KIND_REBALANCE_RECOMMENDATION
        else:
            state = _field(detail, "state", "detail.")
            kind, said = kind_of_state(state), f"state {state}"
    elif source == "aws.health" and detail_type == HEALTH_EVENT:
        said = str(detail.get("eventTypeCode", ""))
        if detail.get("service") == "EC2" and detail.get("eventTypeCategory") == "scheduledChange":
            entities = detail.get("affectedEntities")
            if not isinstance(entities, list):
                raise UnparseableMessageError("detail.affectedEntities is missing or not a list")
            kind = KIND_SCHEDULED_CHANGE
            instance_ids = tuple(
                _field(entity, "entityValue", "detail.affectedEntities[].")
                if isinstance(entity, dict)
                else ""
                for entity in entities
            )
            if not all(instance_ids):
                raise UnparseableMessageError(
                    "detail.affectedEntities[] holds an entry that is not an object"
                )
    return InterruptionMessage(
        id=message_id,
        kind=kind,
        instance_ids=instance_ids if kind != KIND_NO_OP else (),
        time=_event_time(event, received),
        detail=said,
    )


class SqsInterruptionQueue:
    """A thread that long-polls the interruption queue and hands parsed messages to ``deliver``."""

    def __init__(
        self,
        queue: str,
        deliver: Callable[[InterruptionMessage], None],
        *,
        client: SQSClient | None = None,
        session: boto3.session.Session | None = None,
        wait_seconds: int = WAIT_SECONDS,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.queue = queue
        self.deliver = deliver
        if client is None:
            client = (session or boto3.session.Session()).client("sqs", config=_RETRIES)
        self._sqs: SQSClient = client
        self.wait_seconds = wait_seconds
        self.metrics = InterruptionMetrics.of(metrics if metrics is not None else Metrics())
        self.clock = clock
        self._url = queue if queue.startswith(("https://", "http://")) else ""
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="interruption-queue", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop polling; returns within :data:`STOP_WAIT` seconds (see the module's docstring)."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(STOP_WAIT)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        # AWS failing is one warning per streak of failures (karpy.logs.FailureStreak); a bug is a traceback.
        failures = FailureStreak(log, first=BACKOFF_FIRST, cap=BACKOFF_MAX)
        polling = f"polling interruption queue {self.queue}"
        while not self._stopping.is_set():
            try:
                self._poll()
            except AwsApiError as error:
                backoff = failures.failed(polling, error)
            except Exception:  # a bug must not end the handling of interruptions for good
                backoff = BACKOFF_MAX
                log.exception("interruption queue %s: polling failed; retrying in %gs", self.queue, backoff)
            else:
                failures.succeeded(f"interruption queue {self.queue} polled again")
                continue
            self._stopping.wait(backoff)

    def _poll(self) -> None:
        with _translated():
            if not self._url:
                self._url = self._sqs.get_queue_url(QueueName=self.queue)["QueueUrl"]
                log.info("watching interruption queue %s", self._url)
            received = self._sqs.receive_message(
                QueueUrl=self._url, MaxNumberOfMessages=MAX_MESSAGES, WaitTimeSeconds=self.wait_seconds
            )
        for raw in received.get("Messages", []):
            if self._stopping.is_set():
                return  # not deleted: visible again after the visibility timeout
            message_id = raw.get("MessageId", "")
            handle = raw.get("ReceiptHandle", "")
            try:
                message = parse_event(message_id, raw.get("Body", ""), self.clock())
            except UnparseableMessageError as error:
                log.warning("interruption message %s is unparseable, deleting it: %s", message_id, error)
                if self._delete(message_id, handle):
                    self.metrics.deleted.inc()
                continue
            self.deliver(dataclasses.replace(message, ack=self._deleter(message_id, handle)))

    def _deleter(self, message_id: str, handle: str) -> Callable[[], bool]:
        return lambda: self._delete(message_id, handle)

    def _delete(self, message_id: str, handle: str) -> bool:
        """DeleteMessage; False (logged) when SQS refused, the message then comes again later."""
        try:
            with _translated():
                self._sqs.delete_message(QueueUrl=self._url, ReceiptHandle=handle)
        except AwsApiError as error:
            log.warning("interruption message %s: cannot delete it: %s", message_id, error)
            return False
        return True
