"""``status.lastPodEventTime``: at most one write per NodeClaim per ten seconds, none for DaemonSet pods.

A node filling up binds a pod every few hundred milliseconds, and each bind used to
cost a NodeClaim status write. Karpenter writes the time at most once per ten
seconds and drops the events in between; karpy writes the last of them when the
window ends, so a node never looks quiet before its last pod event.
"""

from __future__ import annotations

from tests.support import make_nodepool

from karpy.api.core import Node, Pod, PodSpec
from karpy.api.meta import ObjectMeta, OwnerReference
from karpy.api.nodeclaim import NodeClaim, NodeClaimSpec
from karpy.api.nodeclass import KWOKNodeClass
from karpy.api.nodepool import NodeClassRef
from karpy.controllers.nodeclaim import POD_EVENT_DEDUPE_SECONDS, NodeClaimPodEvents
from karpy.sim.clock import VirtualClock
from karpy.sim.store import InMemoryCluster

KWOK_CLASS = NodeClassRef("karpenter.kwok.sh", "KWOKNodeClass", "default")


def cluster_with_node(clock: VirtualClock) -> InMemoryCluster:
    cluster = InMemoryCluster(clock)
    cluster.create(make_nodepool())
    cluster.create(KWOKNodeClass(metadata=ObjectMeta(name="default")))
    claim = cluster.create(
        NodeClaim(metadata=ObjectMeta(name="claim"), spec=NodeClaimSpec(node_class_ref=KWOK_CLASS))
    )
    cluster.create(Node(metadata=ObjectMeta(name="node")))
    cluster.update(claim.with_status(node_name="node"))
    return cluster


def last_pod_event(cluster: InMemoryCluster) -> float | None:
    (claim,) = cluster.nodeclaims()
    return claim.status.last_pod_event_time


def test_pod_events_within_the_window_are_written_once_when_it_ends() -> None:
    clock = VirtualClock()
    cluster = cluster_with_node(clock)
    controller = NodeClaimPodEvents(cluster, clock)
    first = clock.now()
    assert controller.reconcile("node") is None
    assert last_pod_event(cluster) == first
    # Two more pods land 3 s and 7 s later: no write, one requeue to the window's end.
    clock.advance(3)
    assert controller.reconcile("node") == POD_EVENT_DEDUPE_SECONDS - 3
    clock.advance(4)
    assert controller.reconcile("node") == POD_EVENT_DEDUPE_SECONDS - 7
    assert last_pod_event(cluster) == first
    # The requeue at the window's end writes the time: no earlier than the last event.
    clock.advance(3)
    assert controller.reconcile("node") is None
    assert last_pod_event(cluster) == first + POD_EVENT_DEDUPE_SECONDS


def test_daemonset_pods_are_no_pod_events() -> None:
    controller = NodeClaimPodEvents(InMemoryCluster(VirtualClock()), VirtualClock())

    def pod(owner: str, node: str) -> Pod:
        reference = OwnerReference("apps/v1", owner, "web", "u1", controller=True)
        meta = ObjectMeta(name="p", namespace="default", owner_references=(reference,))
        return Pod(metadata=meta, spec=PodSpec(node_name=node))

    assert list(controller._on_pod(pod("ReplicaSet", ""), pod("ReplicaSet", "node"))) == ["node"]
    assert list(controller._on_pod(pod("DaemonSet", ""), pod("DaemonSet", "node"))) == []
    assert list(controller._on_pod(pod("DaemonSet", "node"), None)) == []
