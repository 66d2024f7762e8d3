"""Capacity reservations on the local EC2 endpoint: resolved, offered, launched into, used up, interrupted.

moto has no capacity reservation API (no DescribeCapacityReservations, and
its CreateFleet ignores a launch template's ``CapacityReservationTarget``), so
the fault proxy in front of it plays EC2 for reservations
(:meth:`tests.aws.fault_proxy.FaultProxy.add_capacity_reservation`): it
answers DescribeCapacityReservations, refuses an override of a template
targeting a reservation with no room with EC2's ``ReservationCapacityExceeded``,
counts the instances moto launches into a reservation, names the reservation
in DescribeInstances and frees the slot on TerminateInstances. The proxy was
chosen over botocore's Stubber so the provider's calls go through the real
SDK over HTTP and the instance launched into a reservation is moto's, like
every other launch of these tests; only what moto lacks is played.
"""

from __future__ import annotations

import dataclasses
import json
import queue
import time
from collections.abc import Iterator

import boto3
import pytest
from tests.aws.fault_proxy import FaultProxy
from tests.aws.world import CLUSTER, KUBERNETES_VERSION, QUEUE, REGION, SSM_PREFIX, AwsWorld
from tests.cloud.aws.test_launch import Harness, RecordingClient, _template_data, nodepool_for, proxy
from tests.support import parse_object

from karpy.api.conditions import find_condition
from karpy.api.core import Node
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import LABEL_REGISTERED
from karpy.api.nodeclass import EC2NodeClass, StatusCapacityReservation
from karpy.api.requirements import (
    AWS_LABEL_CAPACITY_RESERVATION_ID,
    AWS_LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE,
    AWS_LABEL_CAPACITY_RESERVATION_TYPE,
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    LABEL_ZONE,
    Requirement,
)
from karpy.cloud.aws.client import AwsClient
from karpy.cloud.aws.interruption import SqsInterruptionQueue
from karpy.cloud.aws.nodeclass_status import RESERVATION_INTERVAL, EC2NodeClassStatusController
from karpy.cloud.aws.resolution import (
    CONDITION_CAPACITY_RESERVATIONS_READY,
    capacity_reservations,
    dependents,
)
from karpy.cloud.aws.settings import AwsSettings
from karpy.cloud.provider import InsufficientCapacityError
from karpy.cloud.reservations import RESERVED_PRICE_DIVISOR
from karpy.controllers.interruption import InterruptionController
from karpy.controllers.reservation_capacity_type import CapacityTypeSync
from karpy.controllers.reservation_expiration import CapacityBlockExpiration
from karpy.disruption.nodeclass_drift import CAPACITY_RESERVATION_DRIFT
from karpy.operator.interruption import KIND_CAPACITY_RESERVATION_INTERRUPTION, InterruptionMessage
from karpy.sim.clock import VirtualClock
from karpy.sim.store import InMemoryCluster

__all__ = ["proxy"]  # the fixture, shared with test_launch

TERMS = """\
  capacityReservationSelectorTerms:
  - id: cr-0aaa
  - tags: {team: ml}
  - id: cr-0404
"""
RESERVED = ("spot", "on-demand", "reserved")


def _class_with_terms(aws: AwsWorld) -> EC2NodeClass:
    from tests.cloud.aws.test_launch import node_class_manifest

    node_class = parse_object(node_class_manifest(aws).replace("status:\n", TERMS + "status:\n", 1))
    assert isinstance(node_class, EC2NodeClass)
    return node_class


def test_selector_terms_resolve_to_active_reservations_as_karpenter_lists_them(
    aws: AwsWorld, proxy: FaultProxy
) -> None:
    now = time.time()
    proxy.add_capacity_reservation("cr-0aaa", "m5.large", "us-east-1a", 2)
    proxy.add_capacity_reservation(
        "cr-0bbb", "c5.xlarge", "us-east-1b", 3, tags={"team": "ml"}, interruptible=True
    )
    proxy.add_capacity_reservation(
        "cr-0ccc",
        "m5.xlarge",
        "us-east-1a",
        1,
        tags={"team": "ml"},
        reservation_type="capacity-block",
        end=now + 30 * 60,
    )
    proxy.add_capacity_reservation("cr-0ddd", "m5.large", "us-east-1b", 1, tags={"team": "web"})
    proxy.add_capacity_reservation(
        "cr-0eee", "m5.large", "us-east-1b", 1, tags={"team": "ml"}, state="expired"
    )

    found = capacity_reservations(_class_with_terms(aws), AwsClient.for_region(REGION), now)

    # cr-0404 does not exist (none, not an error); cr-0ddd has other tags; cr-0eee is not active.
    assert [(reservation.id, available) for reservation, available in found] == [
        ("cr-0aaa", 2),
        ("cr-0bbb", 3),
        ("cr-0ccc", 1),
    ]
    by_id = {reservation.id: reservation for reservation, _ in found}
    assert by_id["cr-0aaa"] == StatusCapacityReservation(
        id="cr-0aaa", instance_type="m5.large", zone="us-east-1a", owner_id="123456789012"
    )
    assert by_id["cr-0bbb"].interruptible
    # A Capacity Block within 40 minutes of its end is expiring: EC2 reclaims it soon.
    assert (by_id["cr-0ccc"].reservation_type, by_id["cr-0ccc"].state) == ("capacity-block", "expiring")


def test_the_status_controller_writes_the_reservations_and_sets_the_providers_counts(
    aws: AwsWorld, proxy: FaultProxy
) -> None:
    proxy.add_capacity_reservation("cr-0aaa", "m5.large", "us-east-1a", 2)
    clock = VirtualClock(start=time.time())
    cluster = InMemoryCluster(clock)
    node_class = _class_with_terms(aws)
    cluster.create(
        dataclasses.replace(node_class, status=dataclasses.replace(node_class.status, conditions=()))
    )
    settings = AwsSettings(
        cluster_name=CLUSTER, region=REGION, kubernetes_version=KUBERNETES_VERSION, ssm_prefix=SSM_PREFIX
    )
    harness = Harness(aws, proxy)
    try:
        controller = EC2NodeClassStatusController(
            cluster,
            AwsClient.for_region(REGION),
            clock,
            settings=settings,
            reservations=harness.provider.reservations,
        )
        assert controller.reconcile("default") == RESERVATION_INTERVAL
        stored = cluster.node_class("karpenter.k8s.aws", "EC2NodeClass", "default")
        assert isinstance(stored, EC2NodeClass)
        assert [r.id for r in stored.status.capacity_reservations] == ["cr-0aaa"]
        assert harness.provider.reservations.count("cr-0aaa") == 2
        # Karpenter's CapacityReservationsReady: true once read, and one of what Ready summarizes.
        ready = find_condition(stored.status.conditions, CONDITION_CAPACITY_RESERVATIONS_READY)
        assert ready is not None and ready.status == "True"
        assert CONDITION_CAPACITY_RESERVATIONS_READY in dependents(True)
        assert CONDITION_CAPACITY_RESERVATIONS_READY not in dependents(False)

        # Read again after it is cancelled: none listed, and still ready (none is an answer).
        proxy.end_capacity_reservation("cr-0aaa")
        controller.reconcile("default")
        stored = cluster.node_class("karpenter.k8s.aws", "EC2NodeClass", "default")
        assert isinstance(stored, EC2NodeClass) and stored.status.capacity_reservations == ()
        ready = find_condition(stored.status.conditions, CONDITION_CAPACITY_RESERVATIONS_READY)
        assert ready is not None and ready.status == "True"

        # With the ReservedCapacity gate off nothing is read and nothing listed.
        off = EC2NodeClassStatusController(
            cluster,
            AwsClient.for_region(REGION),
            clock,
            settings=dataclasses.replace(settings, reserved_capacity=False),
        )
        calls = proxy.count("DescribeCapacityReservations")
        off.reconcile("default")
        assert proxy.count("DescribeCapacityReservations") == calls
        stored = cluster.node_class("karpenter.k8s.aws", "EC2NodeClass", "default")
        assert isinstance(stored, EC2NodeClass) and stored.status.capacity_reservations == ()
    finally:
        harness.provider.close()


def _reserved_harness(
    aws: AwsWorld,
    proxy: FaultProxy,
    *,
    count: int = 2,
    known: int | None = None,
    block_ends: float | None = None,
) -> Harness:
    """A harness whose class lists reservation cr-0aaa (m5.large, us-east-1a); EC2 holds ``count`` free.

    Interruptible, or with ``block_ends`` a Capacity Block ending then.
    """
    kind = "default" if block_ends is None else "capacity-block"
    interruptible = block_ends is None
    proxy.add_capacity_reservation(
        "cr-0aaa",
        "m5.large",
        "us-east-1a",
        count,
        interruptible=interruptible,
        reservation_type=kind,
        end=block_ends,
    )
    harness = Harness(aws, proxy)
    reservation = StatusCapacityReservation(
        id="cr-0aaa",
        instance_type="m5.large",
        zone="us-east-1a",
        owner_id="123456789012",
        interruptible=interruptible,
        reservation_type=kind,
        end_time=block_ends,
    )
    node_class = harness.node_class
    harness.node_class = harness.cluster.update_status(
        dataclasses.replace(
            node_class, status=dataclasses.replace(node_class.status, capacity_reservations=(reservation,))
        )
    )
    harness.provider.reservations.sync({"cr-0aaa": count if known is None else known})
    return harness


@pytest.fixture
def reserved(aws: AwsWorld, proxy: FaultProxy) -> Iterator[Harness]:
    harness = _reserved_harness(aws, proxy)
    yield harness
    harness.provider.close()


def test_a_reservation_is_a_reserved_offering_priced_near_zero(reserved: Harness) -> None:
    types = {t.name: t for t in reserved.provider.get_instance_types(nodepool_for())}
    m5 = types["m5.large"]
    [offering] = [o for o in m5.offerings if o.capacity_type == "reserved"]
    on_demand = next(o.price for o in m5.offerings if o.capacity_type == "on-demand")
    assert (offering.zone, offering.available) == ("us-east-1a", True)
    assert offering.price == pytest.approx(on_demand / RESERVED_PRICE_DIVISOR)
    assert m5.requirements.get(LABEL_CAPACITY_TYPE).has("reserved")
    assert not any(o.capacity_type == "reserved" for o in types["c5.large"].offerings)

    # The gate off: no reserved offering.
    reserved.settings = dataclasses.replace(reserved.settings, reserved_capacity=False)
    provider = reserved.new_provider()
    try:
        types = {t.name: t for t in provider.get_instance_types(nodepool_for())}
        assert not any(o.capacity_type == "reserved" for o in types["m5.large"].offerings)
    finally:
        provider.close()


def test_a_reserved_launch_targets_its_reservation_and_frees_it_on_termination(reserved: Harness) -> None:
    claim = reserved.nodeclaim("reserved", types=("c5.large", "m5.large"), capacity_types=RESERVED)
    launched = reserved.launch(claim)

    assert launched.metadata.labels[LABEL_INSTANCE_TYPE] == "m5.large"  # not the cheaper spot c5.large
    assert launched.metadata.labels[LABEL_ZONE] == "us-east-1a"
    assert launched.metadata.labels[LABEL_CAPACITY_TYPE] == "reserved"
    assert launched.metadata.labels[AWS_LABEL_CAPACITY_RESERVATION_ID] == "cr-0aaa"
    assert launched.metadata.labels[AWS_LABEL_CAPACITY_RESERVATION_TYPE] == "default"
    assert launched.metadata.labels[AWS_LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE] == "true"
    assert isinstance(reserved.client, RecordingClient)
    request = reserved.client.fleets[claim.name]
    assert request["TargetCapacitySpecification"]["DefaultTargetCapacityType"] == "on-demand"
    [config] = request["LaunchTemplateConfigs"]
    assert [(o["InstanceType"], o["AvailabilityZone"]) for o in config["Overrides"]] == [
        ("m5.large", "us-east-1a")
    ]
    data = _template_data(reserved, claim)
    assert data["CapacityReservationSpecification"] == {
        "CapacityReservationPreference": "capacity-reservations-only",
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0aaa"},
    }
    assert data["InstanceMarketOptions"] == {"MarketType": "interruptible-capacity-reservation"}
    assert reserved.proxy.reservations["cr-0aaa"].available == 1
    assert reserved.provider.reservations.count("cr-0aaa") == 1

    # EC2 names the reservation of the instance: get and list read it back.
    found = reserved.provider.get(launched.status.provider_id)
    assert found.metadata.labels[LABEL_CAPACITY_TYPE] == "reserved"
    assert found.metadata.labels[AWS_LABEL_CAPACITY_RESERVATION_ID] == "cr-0aaa"

    reserved.provider.delete(launched)
    assert reserved.proxy.reservations["cr-0aaa"].available == 2
    assert reserved.provider.reservations.count("cr-0aaa") == 2


def test_a_spot_or_on_demand_launch_opts_out_of_open_reservations(reserved: Harness) -> None:
    claim = reserved.nodeclaim("spot", types=("c5.large",), capacity_types=RESERVED)
    launched = reserved.launch(claim)
    assert launched.metadata.labels[LABEL_CAPACITY_TYPE] == "spot"
    assert AWS_LABEL_CAPACITY_RESERVATION_ID not in launched.metadata.labels
    assert _template_data(reserved, claim)["CapacityReservationSpecification"] == {
        "CapacityReservationPreference": "none"
    }


def test_a_used_up_reservation_falls_back_to_spot(aws: AwsWorld, proxy: FaultProxy) -> None:
    harness = _reserved_harness(aws, proxy, count=1)
    try:
        first = harness.launch(harness.nodeclaim("first", types=("m5.large",), capacity_types=RESERVED))
        assert first.metadata.labels[LABEL_CAPACITY_TYPE] == "reserved"
        m5 = next(t for t in harness.provider.get_instance_types(nodepool_for()) if t.name == "m5.large")
        reserved = [o for o in m5.offerings if o.capacity_type == "reserved"]
        # Full, not gone: still available (health, as Karpenter's AWS provider has it), not launchable.
        assert [(o.available, o.launchable, o.reservation_capacity) for o in reserved] == [(True, False, 0)]

        second = harness.launch(harness.nodeclaim("second", types=("m5.large",), capacity_types=RESERVED))
        assert second.metadata.labels[LABEL_CAPACITY_TYPE] == "spot"
        assert proxy.reservations["cr-0aaa"].available == 0
    finally:
        harness.provider.close()


def test_a_reservation_ec2_says_is_full_is_marked_used_up_and_the_next_launch_falls_back(
    aws: AwsWorld, proxy: FaultProxy
) -> None:
    # karpy's count says 1 is left; EC2 has none (used by an instance karpy does not own).
    harness = _reserved_harness(aws, proxy, count=0, known=1)
    try:
        claim = harness.nodeclaim("full", types=("m5.large",), capacity_types=RESERVED)
        with pytest.raises(InsufficientCapacityError, match="ReservationCapacityExceeded"):
            harness.launch(claim)
        assert harness.provider.reservations.count("cr-0aaa") == 0
        # The pool's next pass: the reserved offering is out, spot is launched.
        retried = harness.launch(harness.nodeclaim("retried", types=("m5.large",), capacity_types=RESERVED))
        assert retried.metadata.labels[LABEL_CAPACITY_TYPE] == "spot"

        # A NodePool that allows reserved capacity only gets nothing.
        only = harness.nodeclaim("only", types=("m5.large",), capacity_types=("reserved",))
        with pytest.raises(InsufficientCapacityError):
            harness.launch(only)
    finally:
        harness.provider.close()


def test_an_interruptible_reservations_warning_on_the_queue_deletes_the_node_and_marks_it_used_up(
    reserved: Harness,
) -> None:
    launched = reserved.launch(reserved.nodeclaim("reclaimed", types=("m5.large",), capacity_types=RESERVED))
    # As the lifecycle controller records it: the labels, then the status.
    reserved.cluster.update_status(reserved.cluster.update(launched))
    instance = launched.status.provider_id.rpartition("/")[2]
    sqs = boto3.session.Session(region_name=REGION).client("sqs")
    url = sqs.get_queue_url(QueueName=QUEUE)["QueueUrl"]
    event = {
        "version": "0",
        "id": f"evt-{instance}",
        "detail-type": "EC2 Capacity Reservation Instance Interruption Warning",
        "source": "aws.ec2",
        "account": "123456789012",
        "time": "2026-12-07T16:00:00Z",
        "region": REGION,
        "resources": [f"arn:aws:ec2:{REGION}a:instance/{instance}"],
        "detail": {"instance-id": instance, "instance-action": "terminate"},
    }
    sqs.send_message(QueueUrl=url, MessageBody=json.dumps(event))
    received: queue.Queue[InterruptionMessage] = queue.Queue()
    reader = SqsInterruptionQueue(QUEUE, received.put, wait_seconds=1)
    reader.start()
    try:
        message = received.get(timeout=30)
        while instance not in message.instance_ids:  # left over by another test
            message = received.get(timeout=30)
    finally:
        reader.stop()
    assert message.kind == KIND_CAPACITY_RESERVATION_INTERRUPTION

    controller = InterruptionController(reserved.cluster, reserved.provider, reserved.clock)
    assert list(controller._on_message(None, message)) == [message.id]
    controller.reconcile(message.id)
    assert reserved.provider.reservations.count("cr-0aaa") == 0
    left = reserved.cluster.nodeclaim(launched.name)
    assert left is None or left.metadata.deleting


def test_a_nodeclaim_in_a_capacity_block_is_deleted_40_minutes_before_its_end(
    aws: AwsWorld, proxy: FaultProxy
) -> None:
    ends = time.time() + 3600
    harness = _reserved_harness(aws, proxy, block_ends=ends)
    try:
        launched = harness.launch(harness.nodeclaim("block", types=("m5.large",), capacity_types=RESERVED))
        assert launched.metadata.labels[AWS_LABEL_CAPACITY_RESERVATION_TYPE] == "capacity-block"
        assert _template_data(harness, launched)["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
        harness.cluster.update_status(harness.cluster.update(launched))
        assert harness.provider.reservations_expiring_at() == {"cr-0aaa": ends - 40 * 60}
        controller = CapacityBlockExpiration(harness.cluster, harness.provider, harness.clock)
        wait = controller.reconcile(controller.KEY)
        assert wait is not None and wait == pytest.approx(ends - 40 * 60 - harness.clock.now())
        assert harness.cluster.nodeclaim(launched.name) is not None
        harness.clock.advance(wait)
        assert controller.reconcile(controller.KEY) is None
        left = harness.cluster.nodeclaim(launched.name)
        assert left is None or left.metadata.deleting
    finally:
        harness.provider.close()


def test_a_nodeclaim_pinned_to_other_reservations_does_not_launch_into_this_one(reserved: Harness) -> None:
    # The solver pins a NodeClaim to the reservations it took a slot in (karpy.scheduling._reservations).
    pinned = Requirement.from_operator(AWS_LABEL_CAPACITY_RESERVATION_ID, "In", ("cr-0other",))
    claim = reserved.nodeclaim("pinned", types=("m5.large",), capacity_types=RESERVED, more=(pinned,))
    launched = reserved.launch(claim)
    assert launched.metadata.labels[LABEL_CAPACITY_TYPE] != "reserved"
    assert reserved.proxy.reservations["cr-0aaa"].available == 2


def test_a_node_whose_reservation_ended_is_relabelled_on_demand(reserved: Harness) -> None:
    launched = reserved.launch(reserved.nodeclaim("ends", types=("m5.large",), capacity_types=RESERVED))
    assert launched.metadata.labels[LABEL_CAPACITY_TYPE] == "reserved"
    reserved.cluster.update_status(reserved.cluster.update(launched))
    node_labels = {**launched.metadata.labels, LABEL_REGISTERED: "true"}
    reserved.cluster.create(
        Node(
            metadata=ObjectMeta(name="ends-node", labels=node_labels), provider_id=launched.status.provider_id
        )
    )
    controller = CapacityTypeSync(reserved.cluster, reserved.provider, reserved.clock)
    assert controller.reconcile(controller.KEY) == 60.0  # still in it: nothing changes
    claim = reserved.cluster.nodeclaim(launched.name)
    assert claim is not None and claim.metadata.labels[LABEL_CAPACITY_TYPE] == "reserved"

    reserved.proxy.end_capacity_reservation("cr-0aaa", "expired")
    controller.reconcile(controller.KEY)
    claim = reserved.cluster.nodeclaim(launched.name)
    node = reserved.cluster.node("ends-node")
    assert claim is not None and node is not None
    for labels in (claim.metadata.labels, node.metadata.labels):
        assert labels[LABEL_CAPACITY_TYPE] == "on-demand"
        assert AWS_LABEL_CAPACITY_RESERVATION_ID not in labels
        assert AWS_LABEL_CAPACITY_RESERVATION_TYPE not in labels
    # Nothing labelled reserved is left: the controller stops polling.
    assert controller.reconcile(controller.KEY) is None


def test_a_node_in_a_reservation_its_class_no_longer_selects_is_drifted(reserved: Harness) -> None:
    launched = reserved.launch(reserved.nodeclaim("drift", types=("m5.large",), capacity_types=RESERVED))
    reserved.cluster.update_status(reserved.cluster.update(launched))
    assert reserved.provider.is_drifted(launched) == ""
    node_class = reserved.cluster.node_class("karpenter.k8s.aws", "EC2NodeClass", "default")
    assert isinstance(node_class, EC2NodeClass)
    reserved.cluster.update_status(
        dataclasses.replace(
            node_class, status=dataclasses.replace(node_class.status, capacity_reservations=())
        )
    )
    assert reserved.provider.is_drifted(launched) == CAPACITY_RESERVATION_DRIFT
    # Once EC2 has taken it out of the reservation it is an on-demand node like any: not drifted.
    reserved.proxy.end_capacity_reservation("cr-0aaa")
    assert reserved.provider.is_drifted(launched) == ""
