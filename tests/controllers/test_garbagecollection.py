"""Garbage collection in the simulator: leaked instances, NodeClaims whose instance vanished.

The simulated cloud stands in for a provider: an instance launched with no
NodeClaim is what a process killed between the launch and the NodeClaim's
status write leaves (or a NodeClaim deleted while its launch was in flight),
and an instance removed from the cloud is one terminated behind karpy's back.
"""

from __future__ import annotations

import dataclasses
import logging

import pytest
from tests.support import KWOK_NODE_CLASS, deployment_manifest, kwok_nodepool, load_objects

from karpy.api.conditions import set_condition
from karpy.api.core import POD_RUNNING, NodeCondition
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import CONDITION_LAUNCHED, NodeClaim, NodeClaimSpec
from karpy.api.nodepool import NodeClassRef
from karpy.api.requirements import Requirement
from karpy.cloud.provider import CloudProviderError
from karpy.controllers.garbagecollection import (
    EVENT_GARBAGE_COLLECTED,
    FIRST_INTERVAL,
    INSTANCE_GRACE,
    INTERVAL,
    PASS_KEY,
    REASON_GARBAGE_COLLECTED,
    GarbageCollector,
)
from karpy.operator.karpenter_metrics import Metrics
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
        GarbageCollector(simulation.cluster, simulation.cloud, simulation.clock, metrics=metrics)
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


def not_ready(simulation: Simulation, claim: NodeClaim) -> None:
    """The node lifecycle controller's mark on a Node whose kubelet stopped reporting."""
    node = simulation.cluster.node(claim.status.node_name)
    assert node is not None
    simulation.cluster.update(node.with_changes(conditions=(NodeCondition("Ready", "Unknown"),)))


def test_a_nodeclaim_whose_instance_vanished_is_deleted_and_replaced() -> None:
    simulation, metrics = simulation_with_gc(replicas=3)
    simulation.run(300)
    claims = simulation.nodeclaims()
    assert claims and all(claim.registered for claim in claims)
    gone = claims[0]
    del simulation.cloud.instances[gone.status.provider_id]  # terminated behind karpy's back
    not_ready(simulation, gone)
    simulation.run(INTERVAL, until_steady=False)
    remaining = simulation.cluster.nodeclaim(gone.name)
    assert remaining is None or remaining.metadata.deleting
    events = [event for event in simulation.cluster.events if event.reason == EVENT_GARBAGE_COLLECTED]
    assert [(event.kind, event.name) for event in events] == [("NodeClaim", gone.name)]
    assert gone.status.provider_id in events[0].message
    assert (
        metrics.nodeclaims_disrupted.value(
            reason=REASON_GARBAGE_COLLECTED,
            nodepool=gone.nodepool,
            capacity_type=gone.capacity_type,
            consolidation_policy="",
            termination_mode="graceful",
        )
        == 1
    )
    # The others are untouched, and the pods run again on a replacement.
    simulation.run(600)
    names = {claim.name for claim in simulation.nodeclaims()}
    assert gone.name not in names and {claim.name for claim in claims[1:]} <= names
    assert all(pod.phase == POD_RUNNING for pod in simulation.pods())


def launched_and_registered(replicas: int = 1) -> tuple[Simulation, GarbageCollector, NodeClaim]:
    """One registered NodeClaim, and a collector that has not run yet (reconciled by hand)."""
    simulation = Simulation()
    simulation.apply(load_objects(KWOK_NODE_CLASS, kwok_nodepool(), deployment_manifest(replicas=replicas)))
    simulation.run(300)
    (claim,) = simulation.nodeclaims()
    assert claim.registered
    return simulation, GarbageCollector(simulation.cluster, simulation.cloud, simulation.clock), claim


# Karpenter's nodeclaim.garbagecollection cases, each on one pass as Karpenter reconciles them.


def test_one_pass_deletes_a_registered_nodeclaim_whose_instance_is_gone_and_node_not_ready() -> None:
    simulation, collector, claim = launched_and_registered()
    simulation.cloud.instances.pop(claim.status.provider_id)
    not_ready(simulation, claim)
    collector.reconcile(PASS_KEY)
    remaining = simulation.cluster.nodeclaim(claim.name)
    assert remaining is None or remaining.metadata.deleting


def test_a_nodeclaim_whose_instance_is_gone_is_kept_while_its_node_is_ready() -> None:
    simulation, collector, claim = launched_and_registered()
    simulation.cloud.instances.pop(claim.status.provider_id)
    collector.reconcile(PASS_KEY)  # a kubelet still reports: the machine runs, whatever the cloud says
    assert simulation.cluster.nodeclaim(claim.name) == claim


def test_a_nodeclaim_not_registered_is_left_to_the_registration_timeout() -> None:
    clock = VirtualClock()
    cluster = InMemoryCluster(clock)
    for item in load_objects(KWOK_NODE_CLASS):
        cluster.create(item.obj)
    cloud = SimulatedCloud(cluster, clock)
    claim = cluster.create(unowned_claim("unregistered"))
    launched = cloud.create(claim)
    conditions = set_condition((), CONDITION_LAUNCHED, "True", clock.now())
    claim = cluster.update(claim.with_status(provider_id=launched.status.provider_id, conditions=conditions))
    cloud.instances.pop(launched.status.provider_id)
    clock.advance_to(clock.now() + 10 * INTERVAL)
    GarbageCollector(cluster, cloud, clock).reconcile(PASS_KEY)
    assert cluster.nodeclaim(claim.name) == claim


def test_a_nodeclaim_whose_node_is_gone_but_instance_runs_is_kept() -> None:
    simulation, collector, claim = launched_and_registered()
    node = simulation.cluster.node(claim.status.node_name)
    assert node is not None
    simulation.cluster.update(node.with_changes(metadata=node.metadata.with_changes(finalizers=())))
    simulation.cluster.delete(node)
    collector.reconcile(PASS_KEY)
    assert simulation.cluster.nodeclaim(claim.name) == claim


def test_a_nodeclaim_with_a_provider_id_no_instance_has_is_deleted() -> None:
    simulation, collector, claim = launched_and_registered()
    bogus = claim.with_status(provider_id="aws:///us-east-1a/i-0000000000bogus")
    simulation.cluster.update(bogus)
    collector.reconcile(PASS_KEY)
    remaining = simulation.cluster.nodeclaim(claim.name)
    assert remaining is None or remaining.metadata.deleting


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
        not_ready(simulation, claim)  # not even a Ready Node keeps it: the direct lookup does
        claim = simulation.cluster.nodeclaim(claim.name) or claim
        cloud = cloud_type(simulation.cluster, simulation.clock)
        cloud.instances = simulation.cloud.instances
        collector = GarbageCollector(simulation.cluster, cloud, simulation.clock)
        for _ in range(3):
            collector.reconcile(PASS_KEY)
        assert simulation.cluster.nodeclaim(claim.name) == claim, cloud_type.__name__


# Ownership is the provider ID: a second instance tagged for a launched NodeClaim is a duplicate.


def duplicate_of(simulation: Simulation, claim: NodeClaim) -> str:
    """A second instance for ``claim``, launched now, as a late CreateFleet makes it; its provider ID.

    Its kubelet registers a Node of its own (another host name), as the duplicate EC2 instance did.
    """
    original = simulation.cloud.instances[claim.status.provider_id]
    duplicate = dataclasses.replace(
        original,
        provider_id="aws:///us-east-1a/i-0000000000duplicate",
        node_name="ip-10-0-9-9.ec2.internal",
        launched_at=simulation.clock.now(),
    )
    simulation.cloud.instances[duplicate.provider_id] = duplicate
    simulation.runtime.enqueue(simulation.kubelet.name, f"register/{duplicate.provider_id}", 1.0)
    return duplicate.provider_id


def test_a_duplicate_instance_of_a_launched_nodeclaim_is_terminated_after_the_window() -> None:
    simulation, collector, claim = launched_and_registered()
    duplicate = duplicate_of(simulation, claim)
    listed = {instance.status.provider_id: instance.name for instance in simulation.cloud.list()}
    assert listed[duplicate] == listed[claim.status.provider_id] == claim.name
    collector.reconcile(PASS_KEY)
    assert duplicate in simulation.cloud.instances, "a fresh launch was terminated"
    simulation.clock.advance_to(simulation.clock.now() + INSTANCE_GRACE + 1)
    collector.reconcile(PASS_KEY)
    assert duplicate not in simulation.cloud.instances
    assert claim.status.provider_id in simulation.cloud.instances
    assert simulation.cluster.nodeclaim(claim.name) == claim


def test_a_duplicate_that_registered_a_node_loses_it_and_the_pods_stay_on_the_original() -> None:
    simulation, _ = simulation_with_gc(replicas=1)
    simulation.run(300)
    (claim,) = simulation.nodeclaims()
    duplicate = duplicate_of(simulation, claim)
    simulation.run(INSTANCE_GRACE + 2 * FIRST_INTERVAL, until_steady=False)
    assert duplicate not in simulation.cloud.instances
    assert [node.provider_id for node in simulation.cluster.nodes() if not node.metadata.deleting] == [
        claim.status.provider_id
    ]
    assert simulation.cluster.nodeclaim(claim.name) is not None


def test_an_instance_of_a_nodeclaim_still_launching_is_kept_past_the_window() -> None:
    clock = VirtualClock()
    cluster = InMemoryCluster(clock)
    for item in load_objects(KWOK_NODE_CLASS):
        cluster.create(item.obj)
    cloud = SimulatedCloud(cluster, clock)
    launching = cluster.create(unowned_claim("launching"))
    first = cloud.create(launching).status.provider_id
    # A second instance tagged for it (a late CreateFleet): adoption will pick one of them.
    second = "aws:///us-east-1a/i-0000000000duplicate"
    cloud.instances[second] = dataclasses.replace(cloud.instances[first], provider_id=second)
    clock.advance_to(clock.now() + 10 * INSTANCE_GRACE)
    collector = GarbageCollector(cluster, cloud, clock)
    collector.reconcile(PASS_KEY)
    assert {first, second} <= set(cloud.instances)
    # The launch records the first: the second is a duplicate now.
    cluster.update(launching.with_status(provider_id=first))
    collector.reconcile(PASS_KEY)
    assert first in cloud.instances and second not in cloud.instances


# A cloud that does not answer: one warning per streak, backoff, nothing raised.


class Unreachable(SimulatedCloud):
    def list(self) -> list[NodeClaim]:
        raise CloudProviderError("DescribeInstances failed: EndpointConnectionError: Could not connect")


def test_an_unreachable_cloud_is_one_warning_and_a_growing_delay(caplog: pytest.LogCaptureFixture) -> None:
    clock = VirtualClock()
    cluster = InMemoryCluster(clock)
    cloud = Unreachable(cluster, clock)
    collector = GarbageCollector(cluster, cloud, clock)
    caplog.set_level(logging.DEBUG, logger="karpy.garbagecollection")
    delays = [collector.reconcile(PASS_KEY) or 0.0 for _ in range(8)]
    assert delays == sorted(delays) and delays[0] >= 1 and delays[-1] >= 8 * delays[0], delays
    warnings = [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "Could not connect" in warnings[0].getMessage()
    assert not [record for record in caplog.records if record.exc_info]
    # It answers again: one info line, and the usual cadence.
    cloud.list = lambda: []  # type: ignore[method-assign]
    assert collector.reconcile(PASS_KEY) == FIRST_INTERVAL
    infos = [record.getMessage() for record in caplog.records if record.levelno == logging.INFO]
    assert len(infos) == 1 and "listed again after 8 failures" in infos[0]
