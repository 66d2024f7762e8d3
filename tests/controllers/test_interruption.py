"""The interruption controller against the simulator's in-memory cluster and cloud.

A cluster of spot nodes is built by the real controllers in virtual time;
then messages are fed to a fresh :class:`InterruptionController` through its
own :class:`Runtime`, as ``karpy run`` feeds those of the SQS queue, and what
it did is read back from the cluster, the cloud and the metrics.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from tests.support import deployment_manifest, load_objects, spot_ec2_cluster

from karpy.api.nodeclaim import NodeClaim
from karpy.api.requirements import CAPACITY_TYPE_SPOT
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


class Acks:
    """Counts the acknowledgements of each message id; ``ok`` says what they return."""

    def __init__(self, ok: bool = True) -> None:
        self.ok = ok
        self.count: dict[str, int] = {}

    def of(self, message_id: str) -> Callable[[], bool]:
        def ack() -> bool:
            self.count[message_id] = self.count.get(message_id, 0) + 1
            return self.ok

        return ack


class World:
    def __init__(self) -> None:
        self.sim = Simulation()
        self.sim.apply(load_objects(spot_ec2_cluster(), deployment_manifest(replicas=3, cpu="1500m")))
        self.sim.run(3600)
        self.metrics = Metrics()
        self.controller = InterruptionController(
            self.sim.cluster, self.sim.cloud, self.sim.clock, metrics=self.metrics
        )
        self.runtime = Runtime(self.sim.clock)
        self.runtime.register(self.controller)
        self.acks = Acks()
        # Events before this moment are the building's.
        self.since = self.sim.clock.now()

    def claims(self) -> list[NodeClaim]:
        return self.sim.nodeclaims()

    def send(self, message_id: str, kind: str, *instances: str, detail: str = "") -> None:
        message = InterruptionMessage(
            message_id, kind, instances, self.sim.clock.now() - 4.0, self.acks.of(message_id), detail
        )
        self.runtime.on_change(INTERRUPTION, None, message)
        self.runtime.run_due()

    def reasons(self, name: str) -> list[str]:
        return [
            event.reason
            for event in self.sim.cluster.events
            if event.name == name and event.time >= self.since
        ]

    @property
    def interruption_metrics(self) -> InterruptionMetrics:
        return InterruptionMetrics.of(self.metrics)


@pytest.fixture
def world() -> World:
    world = World()
    claims = world.claims()
    assert len(claims) == 3
    assert {claim.capacity_type for claim in claims} == {CAPACITY_TYPE_SPOT}
    assert all(claim.status.provider_id.startswith("aws:///") for claim in claims)
    return world


def test_instance_id_is_the_last_part_of_a_provider_id() -> None:
    assert instance_id("aws:///us-east-1a/i-0123456789abcdef0") == "i-0123456789abcdef0"
    assert instance_id("kwok://default-abcde") == "default-abcde"


def test_a_spot_warning_deletes_the_nodeclaim_and_marks_its_offering_unavailable(world: World) -> None:
    claim = world.claims()[0]
    world.send("m-1", KIND_SPOT_INTERRUPTION, instance_id(claim.status.provider_id))
    deleted = world.sim.cluster.nodeclaim(claim.name)
    assert deleted is None or deleted.metadata.deleting
    others = [c for c in world.claims() if c.name != claim.name]
    assert all(not c.metadata.deleting for c in others)
    assert (claim.instance_type, claim.zone, CAPACITY_TYPE_SPOT) in world.sim.cloud.unavailable.now()
    assert world.reasons(claim.name) == ["SpotInterrupted", "TerminatingOnInterruption"]
    assert world.reasons(claim.status.node_name) == ["SpotInterrupted", "TerminatingOnInterruption"]
    assert world.acks.count == {"m-1": 1}
    metrics = world.interruption_metrics
    assert metrics.received.value(message_type=KIND_SPOT_INTERRUPTION) == 1
    assert metrics.deleted.value() == 1
    assert metrics.queue_duration.count() == 1
    assert (
        world.metrics.nodeclaims_disrupted.value(
            reason="spot_interrupted",
            nodepool="default",
            capacity_type=CAPACITY_TYPE_SPOT,
            consolidation_policy="",
            termination_mode="graceful",
        )
        == 1
    )


def test_a_message_delivered_twice_deletes_once(world: World) -> None:
    claim = world.claims()[0]
    wanted = instance_id(claim.status.provider_id)
    world.send("m-1", KIND_SPOT_INTERRUPTION, wanted)
    first = world.sim.cluster.nodeclaim(claim.name)
    world.send("m-1", KIND_SPOT_INTERRUPTION, wanted)
    again = world.sim.cluster.nodeclaim(claim.name)
    if first is not None and again is not None:
        assert again.metadata.deletion_timestamp == first.metadata.deletion_timestamp
    assert world.reasons(claim.name).count("TerminatingOnInterruption") == 1
    assert world.acks.count == {"m-1": 2}
    assert world.interruption_metrics.deleted.value() == 2
    assert (
        world.metrics.nodeclaims_disrupted.value(
            reason="spot_interrupted",
            nodepool="default",
            capacity_type=CAPACITY_TYPE_SPOT,
            consolidation_policy="",
            termination_mode="graceful",
        )
        == 1
    )


def test_a_spot_warning_for_a_node_already_being_deleted_still_marks_its_offering_unavailable(
    world: World,
) -> None:
    claim = world.claims()[0]
    # Consolidation (say) deleted it a moment ago: it drains, and its pods need a new home.
    world.sim.cluster.delete(claim)
    world.send("m-1", KIND_SPOT_INTERRUPTION, instance_id(claim.status.provider_id))
    assert (claim.instance_type, claim.zone, CAPACITY_TYPE_SPOT) in world.sim.cloud.unavailable.now()
    assert world.reasons(claim.name) == ["SpotInterrupted"]
    assert world.acks.count == {"m-1": 1}
    assert (
        world.metrics.nodeclaims_disrupted.value(
            reason="spot_interrupted",
            nodepool="default",
            capacity_type=CAPACITY_TYPE_SPOT,
            consolidation_policy="",
            termination_mode="graceful",
        )
        == 0
    )


def test_a_rebalance_recommendation_is_an_event_only(world: World) -> None:
    claim = world.claims()[0]
    world.send("m-1", KIND_REBALANCE_RECOMMENDATION, instance_id(claim.status.provider_id))
    current = world.sim.cluster.nodeclaim(claim.name)
    assert current is not None and not current.metadata.deleting
    assert world.reasons(claim.name) == ["SpotRebalanceRecommendation"]
    assert not world.sim.cloud.unavailable.now()
    assert world.acks.count == {"m-1": 1}


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        (KIND_INSTANCE_STOPPED, "InstanceStopping"),
        (KIND_INSTANCE_TERMINATED, "InstanceTerminating"),
        (KIND_SCHEDULED_CHANGE, "InstanceUnhealthy"),
    ],
)
def test_state_changes_and_scheduled_changes_delete_the_nodeclaim(
    world: World, kind: str, reason: str
) -> None:
    claim = world.claims()[1]
    world.send("m-1", kind, instance_id(claim.status.provider_id))
    current = world.sim.cluster.nodeclaim(claim.name)
    assert current is None or current.metadata.deleting
    assert world.reasons(claim.name) == [reason, "TerminatingOnInterruption"]
    # Only a spot warning says the spot pool is short.
    assert not world.sim.cloud.unavailable.now()


def test_a_scheduled_change_names_several_instances(world: World) -> None:
    first, second, third = world.claims()
    world.send(
        "m-1",
        KIND_SCHEDULED_CHANGE,
        instance_id(first.status.provider_id),
        instance_id(third.status.provider_id),
    )
    deleting = {claim.name for claim in world.claims() if claim.metadata.deleting}
    gone = {first.name, third.name} - {claim.name for claim in world.claims()}
    assert deleting | gone == {first.name, third.name}
    assert second.name not in deleting


def test_messages_about_unknown_instances_are_acknowledged_and_counted_only(world: World) -> None:
    world.send("m-1", KIND_SPOT_INTERRUPTION, "i-0ffffffffffffffff")
    world.send("m-2", KIND_NO_OP)
    assert all(not claim.metadata.deleting for claim in world.claims())
    assert [event for event in world.sim.cluster.events if event.time >= world.since] == []
    assert not world.sim.cloud.unavailable.now()
    assert world.acks.count == {"m-1": 1, "m-2": 1}
    assert world.interruption_metrics.received.value(message_type=KIND_SPOT_INTERRUPTION) == 1
    assert world.interruption_metrics.received.value(message_type=KIND_NO_OP) == 1
    assert world.interruption_metrics.deleted.value() == 2


def test_a_nodeclaim_is_found_by_its_nodes_provider_id_when_its_own_is_not_written(world: World) -> None:
    claim = world.claims()[2]
    stored = world.sim.cluster.update(claim.with_status(provider_id=""))
    assert stored.status.node_name
    world.send("m-1", KIND_INSTANCE_TERMINATED, instance_id(claim.status.provider_id))
    current = world.sim.cluster.nodeclaim(claim.name)
    assert current is None or current.metadata.deleting


def test_a_failed_acknowledgement_is_not_counted_as_deleted(world: World) -> None:
    world.acks.ok = False
    world.send("m-1", KIND_REBALANCE_RECOMMENDATION, instance_id(world.claims()[0].status.provider_id))
    assert world.acks.count == {"m-1": 1}
    assert world.interruption_metrics.deleted.value() == 0


def test_no_op_messages_are_counted_but_not_timed(world: World) -> None:
    # Every launch sends EC2 state changes to pending and running: they must not swamp the histogram.
    world.send("m-1", KIND_NO_OP)
    world.send("m-2", KIND_NO_OP)
    metrics = world.interruption_metrics
    assert metrics.received.value(message_type=KIND_NO_OP) == 2
    assert metrics.queue_duration.count() == 0
    world.send("m-3", KIND_REBALANCE_RECOMMENDATION, instance_id(world.claims()[0].status.provider_id))
    assert metrics.queue_duration.count() == 1


def test_a_kind_the_controller_does_not_know_is_a_no_op(world: World) -> None:
    claim = world.claims()[0]
    world.send("m-1", "instance_status_failure", instance_id(claim.status.provider_id))
    current = world.sim.cluster.nodeclaim(claim.name)
    assert current is not None and not current.metadata.deleting
    assert world.acks.count == {"m-1": 1}
    assert world.runtime.errors == []
    assert world.interruption_metrics.received.value(message_type="instance_status_failure") == 1
