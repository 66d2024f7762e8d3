"""The termination controller on its own: an in-memory cluster, the simulated cloud, no kubelet.

With no kubelet to finish them, pods marked for deletion stay Terminating, as
on a node whose instance stopped or whose kubelet died: what the drain does
about them is what these tests read.
"""

from __future__ import annotations

from tests.support import make_pod

from karpy.api.core import Node, NodeCondition
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import TERMINATION_FINALIZER, NodeClaim, NodeClaimSpec, NodeClaimStatus
from karpy.api.nodepool import NodeClassRef
from karpy.controllers.termination import STUCK_TERMINATING_AFTER, Terminator
from karpy.sim.clock import VirtualClock
from karpy.sim.cloud import SimulatedCloud
from karpy.sim.store import InMemoryCluster

PROVIDER_ID = "aws:///us-east-1a/i-0000000000000001"


def test_a_pod_stuck_terminating_does_not_hold_the_drain_for_ever() -> None:
    clock = VirtualClock()
    cluster = InMemoryCluster(clock)
    terminator = Terminator(cluster, SimulatedCloud(cluster, clock), clock)
    cluster.create(
        Node(
            metadata=ObjectMeta(name="node-1", finalizers=(TERMINATION_FINALIZER,)),
            provider_id=PROVIDER_ID,
            conditions=(NodeCondition("Ready", "True", "KubeletReady"),),
        )
    )
    claim = cluster.create(
        NodeClaim(
            metadata=ObjectMeta(name="claim-1", finalizers=(TERMINATION_FINALIZER,)),
            spec=NodeClaimSpec(node_class_ref=NodeClassRef("karpenter.k8s.aws", "EC2NodeClass", "default")),
            status=NodeClaimStatus(node_name="node-1", provider_id=PROVIDER_ID),
        )
    )
    pod = make_pod("web")
    cluster.create(pod)
    cluster.bind(pod, "node-1")
    cluster.delete(claim)
    # The drain evicts the pod; no kubelet ever stops it.
    assert terminator.reconcile(claim.name) is not None
    stuck = cluster.pod("default", "web")
    assert stuck is not None and stuck.metadata.deleting
    clock.advance_to(clock.now() + STUCK_TERMINATING_AFTER - 1)
    assert terminator.reconcile(claim.name) is not None, "the pod's own shutdown is waited for"
    clock.advance_to(clock.now() + 2)
    assert terminator.reconcile(claim.name) is None
    assert cluster.nodeclaim(claim.name) is None
    assert cluster.node("node-1") is None
