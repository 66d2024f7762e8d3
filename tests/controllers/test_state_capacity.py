"""What the scheduling snapshot counts as existing capacity while a launch is half recorded.

A cloud provider creates the instance (for kwok: the Node) before the
NodeClaim's launch is written, and a cache sees the two changes apart. After
a leader dies between the two, its successor sees exactly that: a Node
tainted ``karpenter.sh/unregistered`` and a NodeClaim with no providerID.
That is one node's worth of room, not two.

And a Node that has just been created may have no allocatable yet (a kwok
Node is posted without a status, which the kubelet fills in a moment later):
until its NodeClaim is initialized, the room is the NodeClaim's, as
Karpenter counts it, or the pods meant for it would get a node of their own.
"""

from __future__ import annotations

import dataclasses

from tests.kube.test_unreadable_objects import GOOD_POOL, kwok_class, loaded
from tests.kube.test_unreadable_objects import node as unreadable_node
from tests.kube.test_unreadable_objects import nodeclaim as unreadable_nodeclaim
from tests.kube.test_unreadable_objects import nodepool as unreadable_nodepool
from tests.kube.test_unreadable_objects import pod as unreadable_pod
from tests.support import make_instance_type, make_nodepool

from karpy.api.conditions import Condition
from karpy.api.core import Node
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import CONDITION_INITIALIZED, NodeClaim, NodeClaimSpec, NodeClaimStatus
from karpy.api.nodepool import NodeClassRef
from karpy.api.requirements import LABEL_INSTANCE_TYPE, LABEL_NODEPOOL, Requirement
from karpy.api.taints import NO_EXECUTE, UNREGISTERED_TAINT_KEY, Taint
from karpy.cloud.kwok.provider import KwokCloudProvider
from karpy.controllers.state import existing_capacity, scheduling_snapshot
from karpy.sim.clock import VirtualClock
from karpy.sim.store import InMemoryCluster

INSTANCE_TYPE = make_instance_type("c.4x", cpu=4, memory_gib=8, price=0.2)
LABELS = {LABEL_NODEPOOL: "default", LABEL_INSTANCE_TYPE: "c.4x"}


def nodeclaim(name: str, provider_id: str = "") -> NodeClaim:
    return NodeClaim(
        metadata=ObjectMeta(name=name, labels={LABEL_NODEPOOL: "default"}),
        spec=NodeClaimSpec(
            node_class_ref=NodeClassRef("karpenter.kwok.sh", "KWOKNodeClass", "default"),
            requirements=(Requirement.from_operator(LABEL_INSTANCE_TYPE, "In", ["c.4x"]),),
            requests={"cpu": 3000},
        ),
        status=NodeClaimStatus(provider_id=provider_id),
    )


def node(name: str, *, registered: bool) -> Node:
    return Node(
        metadata=ObjectMeta(name=name, labels=dict(LABELS)),
        provider_id=f"kwok://{name}",
        taints=() if registered else (Taint(UNREGISTERED_TAINT_KEY, NO_EXECUTE),),
        capacity=dict(INSTANCE_TYPE.capacity),
        allocatable=dict(INSTANCE_TYPE.allocatable),
    )


def capacity_of(cluster: InMemoryCluster) -> list[tuple[str, bool]]:
    found = existing_capacity(cluster, {"default": [INSTANCE_TYPE]}, {})
    return sorted((entry.name, entry.in_flight) for entry in found)


def cluster() -> InMemoryCluster:
    store = InMemoryCluster(VirtualClock())
    store.create(make_nodepool())
    return store


def test_an_unregistered_node_whose_nodeclaim_launch_is_not_recorded_is_counted_once() -> None:
    store = cluster()
    store.create(nodeclaim("default-a"))  # the launch not recorded: no providerID yet
    store.create(node("default-a", registered=False))
    assert capacity_of(store) == [("default-a", True)]


def test_once_the_launch_is_recorded_the_node_stands_for_its_nodeclaim() -> None:
    store = cluster()
    store.create(nodeclaim("default-a", provider_id="kwok://default-a"))
    store.create(node("default-a", registered=False))
    entries = existing_capacity(store, {"default": [INSTANCE_TYPE]}, {})
    assert [(entry.name, entry.in_flight) for entry in entries] == [("default-a", True)]
    assert entries[0].available["cpu"] == 4000  # the Node's allocatable, nothing on it yet


def test_a_node_karpy_did_not_launch_is_still_capacity() -> None:
    store = cluster()
    store.create(node("static-1", registered=True))
    assert [name for name, _ in capacity_of(store)] == ["static-1"]


def test_a_node_left_by_a_gone_nodeclaim_is_room_but_no_pools_own() -> None:
    # Its NodeClaim was deleted with the finalizer stripped: the Node keeps karpy's labels.
    store = cluster()
    store.create(nodeclaim("default-b", provider_id="kwok://default-b"))
    store.create(node("default-a", registered=True))
    store.create(node("default-b", registered=True))
    entries = {entry.name: entry for entry in existing_capacity(store, {"default": [INSTANCE_TYPE]}, {})}
    assert set(entries) == {"default-a", "default-b"}  # room, as Karpenter counts every active node
    assert entries["default-a"].nodepool == ""
    assert entries["default-b"].nodepool == "default"


def test_a_node_counts_its_nodeclaims_allocatable_until_the_nodeclaim_is_initialized() -> None:
    def room(*, initialized: bool) -> int:
        store = cluster()
        conditions = (Condition(CONDITION_INITIALIZED, "True"),) if initialized else ()
        launched = nodeclaim("default-a", provider_id="kwok://default-a")
        store.create(launched.with_status(allocatable={"cpu": 3920, "pods": 58}, conditions=conditions))
        # As posted, the kubelet not reported yet: no allocatable; once initialized, its own.
        reported = dataclasses.replace(
            node("default-a", registered=initialized),
            allocatable={"cpu": 3500, "pods": 58} if initialized else {},
        )
        store.create(reported)
        (entry,) = existing_capacity(store, {"default": [INSTANCE_TYPE]}, {})
        return entry.available.get("cpu", 0)

    assert room(initialized=False) == 3920
    assert room(initialized=True) == 3500


def test_a_new_nodes_not_ready_taint_does_not_send_its_pods_to_another_node() -> None:
    """The API server taints every new Node not-ready; its pods still have their room there.

    What the new leader sees when it posts the Nodes of the instances its
    predecessor launched and provisions at once: four launched NodeClaims, their
    Nodes just created (tainted ``karpenter.sh/unregistered`` and, by the API
    server's admission, ``node.kubernetes.io/not-ready``), twelve pending pods
    that fill them. Before, every pod got a second node.
    """
    objects = [kwok_class("default"), unreadable_nodepool(GOOD_POOL)]
    for index in range(12):
        pending = unreadable_pod(f"pending-{index}")
        pending["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1", "memory": "256Mi"}
        objects.append(pending)
    for index in range(4):
        name = f"launched-{index}"
        claim = unreadable_nodeclaim(name)
        claim["status"]["conditions"] = [c for c in claim["status"]["conditions"] if c["type"] == "Launched"]
        del claim["status"]["nodeName"]
        posted = unreadable_node(name)
        posted["spec"]["taints"] = [
            {"key": UNREGISTERED_TAINT_KEY, "effect": NO_EXECUTE},
            {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
        ]
        posted["status"] = {}  # posted without one: the kubelet has not reported yet
        objects += [claim, posted]
    cluster = loaded(objects)
    plan = scheduling_snapshot(cluster, KwokCloudProvider(cluster)).solve(cluster.pending_pods())
    assert len(cluster.pending_pods()) == 12
    assert plan.new_nodeclaims == [] and not plan.unschedulable
