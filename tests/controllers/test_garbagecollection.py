"""Garbage collection in the simulator: leaked instances, NodeClaims whose instance vanished.

The simulated cloud stands in for a provider: an instance launched with no
NodeClaim is what a process killed between the launch and the NodeClaim's
status write leaves (or a NodeClaim deleted while its launch was in flight),
and an instance removed from the cloud is one terminated behind karpy's back.
"""

from __future__ import annotations

from tests.support import KWOK_NODE_CLASS, deployment_manifest, kwok_nodepool, load_objects

from karpy.api.core import POD_RUNNING
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import NodeClaim, NodeClaimSpec
from karpy.api.nodepool import NodeClassRef
from karpy.api.requirements import Requirement
from karpy.cloud.provider import CloudProviderError
from karpy.controllers.garbagecollection import (
    EVENT_GARBAGE_COLLECTED,
    INSTANCE_GRACE,
    INTERVAL,
    REASON_GARBAGE_COLLECTED,
    GarbageCollector,
)
from karpy.controllers.karpenter_metrics import Metrics
from karpy.sim.clock import VirtualClock
from karpy.sim.cloud import SimulatedCloud
from karpy.sim.simulation import Simulation
from karpy.sim.store import InMemoryCluster


def unowned_claim(name: str) -> NodeClaim:
    return NodeClaim(
        metadata=ObjectMeta(name=name),
        spec=NodeClaimSpec(
            node_class_ref=NodeClassRef("karpenter.kwok.sh", "KWOKNodeClass", "default"),
            requirements=(
                Requirement.from_operator("node.kubernetes.io/instance-type", "In", ("c5.large",)),
            ),
        ),
    )


def simulation_with_gc(replicas: int = 0) -> tuple[Simulation, Metrics]:
    metrics = Metrics()
    simulation = Simulation(metrics=metrics)
    simulation.runtime.register(
        GarbageCollector(simulation.cluster, simulation.cloud, simulation.clock, metrics)
    )
    manifests = [KWOK_NODE_CLASS, kwok_nodepool()]
    if replicas:
        manifests.append(deployment_manifest(replicas=replicas))
    simulation.apply(load_objects(*manifests))
    return simulation, metrics


def test_a_leaked_instance_and_its_node_are_deleted_once_older_than_the_window() -> None:
    simulation, _ = simulation_with_gc()
    leaked = simulation.cloud.create(unowned_claim("leaked"))
    provider_id = leaked.status.provider_id
    simulation.run(INSTANCE_GRACE - 1, until_steady=False)
    assert provider_id in simulation.cloud.instances, "collected before the 30 s window passed"
    simulation.run(INSTANCE_GRACE + INTERVAL, until_steady=False)
    assert provider_id not in simulation.cloud.instances
    assert provider_id in simulation.cloud.terminated
    assert not [node for node in simulation.cluster.nodes() if node.provider_id == provider_id]


def test_a_leaked_instance_whose_node_registered_loses_its_node_too() -> None:
    simulation, _ = simulation_with_gc()
    # The collector runs once; the instance registers its Node before the next pass.
    simulation.run(1, until_steady=False)
    leaked = simulation.cloud.create(unowned_claim("leaked"))
    provider_id = leaked.status.provider_id
    registered = False
    for _ in range(6):
        simulation.run(INTERVAL / 3, until_steady=False)
        registered = registered or any(node.provider_id == provider_id for node in simulation.cluster.nodes())
    assert registered, "the leaked instance never registered a Node"
    simulation.run(2 * INTERVAL, until_steady=False)
    assert provider_id not in simulation.cloud.instances
    assert not [
        node
        for node in simulation.cluster.nodes()
        if node.provider_id == provider_id and not node.metadata.deleting
    ]


def test_a_node_left_without_its_nodeclaim_goes_with_its_instance() -> None:
    simulation, _ = simulation_with_gc(replicas=1)
    simulation.run(4 * INTERVAL, until_steady=False)
    [claim] = simulation.nodeclaims()
    provider_id = claim.status.provider_id
    node = simulation.cluster.node(claim.status.node_name)
    assert node is not None and node.metadata.finalizers
    # Somebody stripped the NodeClaim's finalizer and deleted it: its Node and instance stay behind.
    simulation.cluster.update(claim.with_metadata(finalizers=()))
    simulation.cluster.delete(claim)
    simulation.run(INSTANCE_GRACE + 2 * INTERVAL, until_steady=False)
    assert provider_id not in simulation.cloud.instances
    assert [node for node in simulation.cluster.nodes() if node.provider_id == provider_id] == []
    pods = [pod for pod in simulation.cluster.pods() if not pod.is_daemonset_pod]
    assert [pod.phase for pod in pods] == [POD_RUNNING]


def test_an_instance_owned_by_name_is_kept_while_its_nodeclaim_has_no_provider_id() -> None:
    clock = VirtualClock()
    cluster = InMemoryCluster(clock)
    for item in load_objects(KWOK_NODE_CLASS):
        cluster.create(item.obj)
    cloud = SimulatedCloud(cluster, clock)
    collector = GarbageCollector(cluster, cloud, clock)
    # A NodeClaim whose launch finished but whose status write has not happened yet.
    in_flight = cluster.create(unowned_claim("in-flight"))
    provider_id = cloud.create(in_flight).status.provider_id
    clock.advance_to(clock.now() + 10 * INSTANCE_GRACE)
    collector.reconcile("pass")
    assert provider_id in cloud.instances
    # The NodeClaim goes (deleted while its launch was in flight): the instance is a leak now.
    cluster.delete(cluster.nodeclaim("in-flight"))
    collector.reconcile("pass")
    assert provider_id not in cloud.instances


def test_a_nodeclaim_whose_instance_vanished_is_deleted_and_replaced() -> None:
    simulation, metrics = simulation_with_gc(replicas=3)
    simulation.run(300)
    claims = simulation.nodeclaims()
    assert claims and all(claim.launched for claim in claims)
    gone = claims[0]
    del simulation.cloud.instances[gone.status.provider_id]  # terminated behind karpy's back
    simulation.run(INTERVAL, until_steady=False)
    assert simulation.cluster.nodeclaim(gone.name) == gone, "deleted on the first pass that missed it"
    simulation.run(INTERVAL + 1, until_steady=False)
    remaining = simulation.cluster.nodeclaim(gone.name)
    assert remaining is None or remaining.metadata.deleting
    events = [event for event in simulation.cluster.events if event.reason == EVENT_GARBAGE_COLLECTED]
    assert [(event.kind, event.name) for event in events] == [("NodeClaim", gone.name)]
    assert gone.status.provider_id in events[0].message
    assert (
        metrics.nodeclaims_disrupted.value(
            reason=REASON_GARBAGE_COLLECTED, nodepool=gone.nodepool, capacity_type=gone.capacity_type
        )
        == 1
    )
    # The others are untouched, and the pods run again on a replacement.
    simulation.run(600)
    names = {claim.name for claim in simulation.nodeclaims()}
    assert gone.name not in names and {claim.name for claim in claims[1:]} <= names
    assert all(pod.phase == POD_RUNNING for pod in simulation.pods())


class ListTrailsLaunches(SimulatedCloud):
    """A cloud whose list misses every instance (as an eventually consistent listing can)."""

    def list(self) -> list[NodeClaim]:
        return []


class LookupFails(ListTrailsLaunches):
    def get(self, provider_id: str) -> NodeClaim:
        raise CloudProviderError("RequestLimitExceeded")


def test_a_nodeclaim_is_kept_when_only_the_listing_misses_its_instance() -> None:
    for cloud_type in (ListTrailsLaunches, LookupFails):
        simulation = Simulation()
        simulation.apply(load_objects(KWOK_NODE_CLASS, kwok_nodepool(), deployment_manifest(replicas=1)))
        simulation.run(300)
        (claim,) = simulation.nodeclaims()
        cloud = cloud_type(simulation.cluster, simulation.clock)
        cloud.instances = simulation.cloud.instances
        collector = GarbageCollector(simulation.cluster, cloud, simulation.clock)
        for _ in range(3):
            collector.reconcile("pass")
        assert simulation.cluster.nodeclaim(claim.name) == claim, cloud_type.__name__


def test_an_instance_missing_for_one_pass_only_keeps_its_nodeclaim() -> None:
    simulation, _ = simulation_with_gc(replicas=1)
    simulation.run(300)
    (claim,) = simulation.nodeclaims()
    collector = GarbageCollector(simulation.cluster, simulation.cloud, simulation.clock)
    instance = simulation.cloud.instances.pop(claim.status.provider_id)
    collector.reconcile("pass")  # a gap in the provider's view...
    simulation.cloud.instances[instance.provider_id] = instance
    collector.reconcile("pass")  # ...that is over by the next pass
    simulation.cloud.instances.pop(claim.status.provider_id)
    collector.reconcile("pass")
    assert simulation.cluster.nodeclaim(claim.name) == claim
