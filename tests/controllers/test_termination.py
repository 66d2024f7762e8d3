"""The termination controller on its own: an in-memory cluster, the simulated cloud, no kubelet.

With no kubelet to finish them, pods marked for deletion stay Terminating, as
on a node whose instance stopped or whose kubelet died: what the drain does
about them is what these tests read.
"""

from __future__ import annotations

import dataclasses

from tests.support import make_pod

from karpy.api.core import DO_NOT_DISRUPT_ANNOTATION, Node, NodeCondition, Pod
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import TERMINATION_FINALIZER, NodeClaim, NodeClaimSpec, NodeClaimStatus
from karpy.api.nodepool import NodeClassRef
from karpy.controllers.termination import STUCK_TERMINATING_AFTER, Terminator
from karpy.sim.clock import VirtualClock
from karpy.sim.cloud import SimulatedCloud
from karpy.sim.store import InMemoryCluster

PROVIDER_ID = "aws:///us-east-1a/i-0000000000000001"


def deleted_claim_with_a_pod(
    pod: Pod, grace_period: float | None = None
) -> tuple[VirtualClock, InMemoryCluster, Terminator, NodeClaim]:
    """A Ready node running ``pod``, its NodeClaim just deleted."""
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
            spec=NodeClaimSpec(
                node_class_ref=NodeClassRef("karpenter.k8s.aws", "EC2NodeClass", "default"),
                termination_grace_period=grace_period,
            ),
            status=NodeClaimStatus(node_name="node-1", provider_id=PROVIDER_ID),
        )
    )
    cluster.create(pod)
    cluster.bind(pod, "node-1")
    cluster.delete(claim)
    return clock, cluster, terminator, claim


def test_a_pod_stuck_terminating_does_not_hold_the_drain_for_ever() -> None:
    clock, cluster, terminator, claim = deleted_claim_with_a_pod(make_pod("web"))
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


def test_a_do_not_disrupt_pod_is_not_evicted_until_the_grace_period_runs_out() -> None:
    """Karpenter v1: the drain respects do-not-disrupt pods until terminationGracePeriod."""
    pinned = make_pod("batch")
    pinned = dataclasses.replace(
        pinned, metadata=pinned.metadata.with_changes(annotations={DO_NOT_DISRUPT_ANNOTATION: "true"})
    )
    clock, cluster, terminator, claim = deleted_claim_with_a_pod(pinned, grace_period=600)
    for _ in range(3):
        assert terminator.reconcile(claim.name) is not None
        waiting = cluster.pod("default", "batch")
        assert waiting is not None and not waiting.metadata.deleting, "evicted before the grace period"
        clock.advance_to(clock.now() + 120)
    clock.advance_to(clock.now() + 300)  # past the 600 s grace period
    terminator.reconcile(claim.name)
    gone = cluster.pod("default", "batch")
    assert gone is None or gone.metadata.deleting


def test_a_pod_with_a_timed_do_not_disrupt_is_drained_once_it_lapses() -> None:
    """Karpenter v1.12+: "1m" keeps the pod from the drain for a minute from its start, then no longer."""
    timed = make_pod("batch")
    timed = dataclasses.replace(
        timed,
        metadata=timed.metadata.with_changes(annotations={DO_NOT_DISRUPT_ANNOTATION: "1m"}),
        start_time=VirtualClock().now(),  # the clock's start: the pod started as the test begins
    )
    clock, cluster, terminator, claim = deleted_claim_with_a_pod(timed)
    started = clock.now()
    clock.advance_to(started + 30)
    assert terminator.reconcile(claim.name) is not None
    waiting = cluster.pod("default", "batch")
    assert waiting is not None and not waiting.metadata.deleting, "evicted while still protected"
    clock.advance_to(started + 60)
    terminator.reconcile(claim.name)
    evicted = cluster.pod("default", "batch")
    assert evicted is None or evicted.metadata.deleting


def test_a_deleted_node_whose_nodeclaim_vanished_loses_its_finalizer() -> None:
    """Someone lifts the deleted NodeClaim's finalizer before karpy is done: its Node must not stay."""
    _clock, cluster, terminator, claim = deleted_claim_with_a_pod(make_pod("web"))
    node = cluster.node("node-1")
    assert node is not None
    cluster.delete(node)  # both deleted at once, as a cleanup deletes everything
    stored = cluster.nodeclaim(claim.name)
    assert stored is not None
    cluster.update(stored.with_metadata(finalizers=()))  # ...and strips the NodeClaim's finalizer
    assert cluster.nodeclaim(claim.name) is None
    keys = list(terminator._on_nodeclaim(stored, None))
    assert keys == ["node/node-1"], "the NodeClaim's going looks at its Node again"
    for key in keys:
        terminator.reconcile(key)
    assert cluster.node("node-1") is None
