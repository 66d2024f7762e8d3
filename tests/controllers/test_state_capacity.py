"""What the scheduling snapshot counts as existing capacity while a launch is half recorded.

A cloud provider creates the instance (for kwok: the Node) before the
NodeClaim's launch is written, and a cache sees the two changes apart. After
a leader dies between the two, its successor sees exactly that: a Node
tainted ``karpenter.sh/unregistered`` and a NodeClaim with no providerID.
That is one node's worth of room, not two.
"""

from __future__ import annotations

from tests.support import make_instance_type, make_nodepool

from karpy.api.core import Node
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import NodeClaim, NodeClaimSpec, NodeClaimStatus
from karpy.api.nodepool import NodeClassRef
from karpy.api.requirements import LABEL_INSTANCE_TYPE, LABEL_NODEPOOL, Requirement
from karpy.api.taints import NO_EXECUTE, UNREGISTERED_TAINT_KEY, Taint
from karpy.controllers.state import existing_capacity
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
