"""The interruption queue against moto's SQS, over HTTP, through the SDK's own configuration.

EventBridge events in the shapes AWS sends them are put on the seeded queue
``my-k3s-karpy``; the queue thread must hand each over as a parsed message,
leave it on the queue (in flight) until it is acknowledged, delete it then,
delete and log an unparseable one at once, survive SQS errors, and stop
promptly even in the middle of a long poll.
"""

from __future__ import annotations

import json
import logging
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import boto3
import pytest
from mypy_boto3_sqs import SQSClient
from tests.aws.world import QUEUE, REGION, AwsWorld
from tests.support import deployment_manifest, load_objects, spot_ec2_cluster

from karpy.cloud.aws.interruption import SqsInterruptionQueue, UnparseableMessageError, parse_event
from karpy.controllers.interruption import InterruptionController
from karpy.operator.interruption import (
    INTERRUPTION,
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
from karpy.operator.runtime import Runtime
from karpy.sim.simulation import Simulation

EVENT_TIME = "2026-12-03T16:00:00Z"


def ec2_event(detail_type: str, detail: dict[str, object], instance: str) -> dict[str, object]:
    """An EventBridge event from aws.ec2, as EC2 sends it."""
    return {
        "version": "0",
        "id": f"evt-{instance}-{len(detail)}",
        "detail-type": detail_type,
        "source": "aws.ec2",
        "account": "123456789012",
        "time": EVENT_TIME,
        "region": REGION,
        "resources": [f"arn:aws:ec2:{REGION}b:instance/{instance}"],
        "detail": detail,
    }


def spot_warning(instance: str) -> dict[str, object]:
    return ec2_event(
        "EC2 Spot Instance Interruption Warning",
        {"instance-id": instance, "instance-action": "terminate"},
        instance,
    )


def rebalance(instance: str) -> dict[str, object]:
    return ec2_event("EC2 Instance Rebalance Recommendation", {"instance-id": instance}, instance)


def state_change(instance: str, state: str) -> dict[str, object]:
    return ec2_event(
        "EC2 Instance State-change Notification", {"instance-id": instance, "state": state}, instance
    )


def scheduled_change(*instances: str) -> dict[str, object]:
    return {
        "version": "0",
        "id": "7fb65329-1628-4cf3-a740-95fg457h1402",
        "detail-type": "AWS Health Event",
        "source": "aws.health",
        "account": "123456789012",
        "time": EVENT_TIME,
        "region": REGION,
        "resources": list(instances),
        "detail": {
            "eventArn": f"arn:aws:health:{REGION}::event/EC2/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED/x",
            "service": "EC2",
            "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
            "eventTypeCategory": "scheduledChange",
            "startTime": "Thu, 03 Dec 2026 16:00:00 GMT",
            "eventDescription": [{"language": "en_US", "latestDescription": "retirement"}],
            "affectedEntities": [{"entityValue": instance} for instance in instances],
        },
    }


@pytest.fixture
def sqs(aws: AwsWorld) -> Iterator[SQSClient]:
    """An SQS client of the test's environment, the shared queue emptied of what earlier tests left."""
    client = boto3.session.Session().client("sqs")
    url = client.get_queue_url(QueueName=QUEUE)["QueueUrl"]
    # PurgeQueue is allowed once a minute: receive and delete instead.
    while left := client.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
        for message in left:
            client.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    yield client


def queue_url(sqs: SQSClient) -> str:
    return sqs.get_queue_url(QueueName=QUEUE)["QueueUrl"]


def on_queue(sqs: SQSClient, url: str = "") -> tuple[int, int]:
    """(visible, in flight) messages on the queue (the shared one unless ``url`` names another)."""
    attributes = sqs.get_queue_attributes(
        QueueUrl=url or queue_url(sqs),
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]), int(
        attributes["ApproximateNumberOfMessagesNotVisible"]
    )


def send(sqs: SQSClient, body: object) -> str:
    text = body if isinstance(body, str) else json.dumps(body)
    return sqs.send_message(QueueUrl=queue_url(sqs), MessageBody=text)["MessageId"]


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


class Inbox:
    def __init__(self) -> None:
        self.messages: list[InterruptionMessage] = []
        self.lock = threading.Lock()

    def __call__(self, message: InterruptionMessage) -> None:
        with self.lock:
            self.messages.append(message)

    def __len__(self) -> int:
        with self.lock:
            return len(self.messages)


@pytest.fixture
def inbox() -> Inbox:
    return Inbox()


def test_parsed_messages_are_delivered_and_deleted_once_acknowledged(sqs: SQSClient, inbox: Inbox) -> None:
    sent = {
        send(sqs, spot_warning("i-0000000000000000a")): (KIND_SPOT_INTERRUPTION, ("i-0000000000000000a",)),
        send(sqs, rebalance("i-0000000000000000b")): (
            KIND_REBALANCE_RECOMMENDATION,
            ("i-0000000000000000b",),
        ),
        send(sqs, state_change("i-0000000000000000c", "stopping")): (
            KIND_INSTANCE_STOPPED,
            ("i-0000000000000000c",),
        ),
        send(sqs, state_change("i-0000000000000000d", "shutting-down")): (
            KIND_INSTANCE_TERMINATED,
            ("i-0000000000000000d",),
        ),
        send(sqs, state_change("i-0000000000000000e", "running")): (KIND_NO_OP, ()),
        send(sqs, scheduled_change("i-0000000000000000f", "i-00000000000000010")): (
            KIND_SCHEDULED_CHANGE,
            ("i-0000000000000000f", "i-00000000000000010"),
        ),
    }
    metrics = Metrics()
    queue = SqsInterruptionQueue(QUEUE, inbox, wait_seconds=1, metrics=metrics)
    queue.start()
    try:
        wait_until(lambda: len(inbox) == len(sent))
        got = {message.id: (message.kind, message.instance_ids) for message in inbox.messages}
        assert got == sent
        expected_time = datetime(2026, 12, 3, 16, 0, tzinfo=UTC).timestamp()
        assert {message.time for message in inbox.messages} == {expected_time}
        # Delivered, not yet handled: still on the queue, in flight.
        assert on_queue(sqs) == (0, len(sent))
        assert all(message.ack() for message in inbox.messages)
        assert on_queue(sqs) == (0, 0)
        # Acknowledging is counted by the controller, not by the queue.
        assert InterruptionMetrics.of(metrics).deleted.value() == 0
    finally:
        queue.stop()


def test_a_full_queue_url_is_taken_as_it_is(sqs: SQSClient, inbox: Inbox) -> None:
    message_id = send(sqs, spot_warning("i-0000000000000000a"))
    queue = SqsInterruptionQueue(queue_url(sqs), inbox, wait_seconds=1)
    queue.start()
    try:
        wait_until(lambda: len(inbox) == 1)
        assert inbox.messages[0].id == message_id
        assert inbox.messages[0].ack()
        assert on_queue(sqs) == (0, 0)
    finally:
        queue.stop()


def test_unparseable_messages_are_deleted_at_once_and_logged(
    sqs: SQSClient, inbox: Inbox, caplog: pytest.LogCaptureFixture
) -> None:
    not_json = send(sqs, "this is not an event")
    no_instance = send(
        sqs, ec2_event("EC2 Spot Instance Interruption Warning", {"instance-action": "terminate"}, "x")
    )
    good = send(sqs, spot_warning("i-0000000000000000a"))
    metrics = Metrics()
    caplog.set_level(logging.WARNING, logger="karpy.interruption.sqs")
    queue = SqsInterruptionQueue(QUEUE, inbox, wait_seconds=1, metrics=metrics)
    queue.start()
    try:
        wait_until(lambda: len(inbox) == 1 and on_queue(sqs) == (0, 1))
        assert [message.id for message in inbox.messages] == [good]
        warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
        assert len(warnings) == 2
        (about_not_json,) = [line for line in warnings if not_json in line]
        assert "not JSON" in about_not_json
        (about_no_instance,) = [line for line in warnings if no_instance in line]
        assert "detail.instance-id" in about_no_instance
        assert InterruptionMetrics.of(metrics).deleted.value() == 2
        assert inbox.messages[0].ack()
    finally:
        queue.stop()


def test_stop_returns_promptly_in_the_middle_of_a_long_poll(sqs: SQSClient, inbox: Inbox) -> None:
    # A queue of its own: what the stopped poll takes in stays in flight there for 30 s.
    url = sqs.create_queue(QueueName=f"karpy-stop-{time.monotonic_ns()}")["QueueUrl"]
    reader = SqsInterruptionQueue(url, inbox)  # the real 20 s long poll
    reader.start()
    try:
        time.sleep(1.0)  # the poll is waiting on the empty queue now
        started = time.monotonic()
        reader.stop()
        assert time.monotonic() - started < 1.5
        # A message that arrives after stopping is not handed over (nor deleted): the next karpy gets it.
        sqs.send_message(QueueUrl=url, MessageBody=json.dumps(spot_warning("i-0000000000000000a")))
        time.sleep(0.5)
        assert len(inbox) == 0
        assert sum(on_queue(sqs, url)) == 1
    finally:
        sqs.delete_queue(QueueUrl=url)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_sqs_errors_are_logged_and_retried(
    aws: AwsWorld, inbox: Inbox, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nothing listens there: every call is refused, as when the endpoint is down.
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    caplog.set_level(logging.WARNING, logger="karpy.interruption.sqs")
    queue = SqsInterruptionQueue(QUEUE, inbox, wait_seconds=1)
    queue.start()
    try:
        wait_until(lambda: sum("retrying in" in r.getMessage() for r in caplog.records) >= 1, timeout=20)
        assert queue.running
    finally:
        queue.stop()
    assert not queue.running


def test_a_missing_queue_is_retried_until_it_exists(
    sqs: SQSClient, inbox: Inbox, caplog: pytest.LogCaptureFixture
) -> None:
    name = f"karpy-late-{time.monotonic_ns()}"
    caplog.set_level(logging.WARNING, logger="karpy.interruption.sqs")
    queue = SqsInterruptionQueue(name, inbox, wait_seconds=1)
    queue.start()
    try:
        wait_until(lambda: any("retrying in" in r.getMessage() for r in caplog.records))
        url = sqs.create_queue(QueueName=name)["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody=json.dumps(spot_warning("i-0000000000000000a")))
        wait_until(lambda: len(inbox) == 1, timeout=15)
    finally:
        queue.stop()
        sqs.delete_queue(QueueUrl=sqs.get_queue_url(QueueName=name)["QueueUrl"])


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ("[1, 2]", "not a JSON object"),
        ('{"source": "aws.ec2", "detail": {}}', "detail-type"),
        (
            '{"detail-type": "EC2 Spot Instance Interruption Warning", "source": "aws.ec2"}',
            "detail is missing",
        ),
        (json.dumps(state_change("i-1", "stopping") | {"detail": {"instance-id": "i-1"}}), "detail.state"),
        (
            json.dumps(
                scheduled_change("i-1")
                | {"detail": {"service": "EC2", "eventTypeCategory": "scheduledChange"}}
            ),
            "affectedEntities",
        ),
    ],
)
def test_bodies_that_are_not_interruption_events_are_unparseable(body: str, why: str) -> None:
    with pytest.raises(UnparseableMessageError, match=why):
        parse_event("m-1", body, 0.0)


def test_other_events_are_no_ops_and_a_missing_time_is_the_receive_time() -> None:
    other_health = scheduled_change("i-1")
    detail = other_health["detail"]
    assert isinstance(detail, dict)
    other_health["detail"] = detail | {"eventTypeCategory": "issue"}
    del other_health["time"]
    message = parse_event("m-1", json.dumps(other_health), 1234.0)
    assert (message.kind, message.instance_ids, message.time) == (KIND_NO_OP, (), 1234.0)
    unknown = ec2_event("EC2 AMI State Change", {"ImageId": "ami-1"}, "x")
    assert parse_event("m-2", json.dumps(unknown), 0.0).kind == KIND_NO_OP


def test_a_spot_warning_on_the_queue_deletes_the_nodeclaim_and_then_the_message(sqs: SQSClient) -> None:
    """The two halves together: the queue thread hands over, the controller acts and acknowledges.

    As in ``karpy run``, messages cross from the queue's thread to the reconcile
    thread through a change queue; the cluster is the simulator's, whose
    instances have AWS provider IDs.
    """
    simulation = Simulation()
    simulation.apply(load_objects(spot_ec2_cluster(), deployment_manifest(replicas=2, cpu="1500m")))
    simulation.run(3600)
    claim = simulation.nodeclaims()[0]
    metrics = Metrics()
    controller = InterruptionController(
        simulation.cluster, simulation.cloud, simulation.clock, metrics=metrics
    )
    runtime = Runtime(simulation.clock)
    runtime.register(controller)
    changes: queue.Queue[InterruptionMessage] = queue.Queue()
    reader = SqsInterruptionQueue(QUEUE, changes.put, wait_seconds=1, metrics=metrics)
    reader.start()
    try:
        send(sqs, spot_warning(instance_id(claim.status.provider_id)))
        runtime.on_change(INTERRUPTION, None, changes.get(timeout=10))
        runtime.run_due()
        deleted = simulation.cluster.nodeclaim(claim.name)
        assert deleted is None or deleted.metadata.deleting
        assert (claim.instance_type, claim.zone, "spot") in simulation.cloud.unavailable.now()
        assert on_queue(sqs) == (0, 0)
        assert InterruptionMetrics.of(metrics).deleted.value() == 1
        assert InterruptionMetrics.of(metrics).received.value(message_type=KIND_SPOT_INTERRUPTION) == 1
    finally:
        reader.stop()
