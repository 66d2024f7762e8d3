"""The termination controller on its own: an in-memory cluster, the simulated cloud, no kubelet.

With no kubelet to finish them, pods marked for deletion stay Terminating, as
on a node whose instance stopped or whose kubelet died: what the drain does
about them is what these tests read.
"""

from __future__ import annotations

import dataclasses

from tests.support import make_pod, parse_object

from karpy.api.core import DO_NOT_DISRUPT_ANNOTATION, Node, NodeCondition, Pod
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import (
    CONDITION_INSTANCE_TERMINATING,
    TERMINATION_FINALIZER,
    NodeClaim,
    NodeClaimSpec,
    NodeClaimStatus,
)
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


def owned_pod(name: str, owner: str = "", priority_class: str = "", tolerations: str = "") -> Pod:
    """A pod controlled by a ``owner`` (a kind) if given, in ``priority_class``."""
    owners = (
        "ownerReferences: [{apiVersion: apps/v1, "
        f"kind: {owner}, name: {name}, uid: u-{name}, controller: true}}]"
        if owner
        else ""
    )
    spec = [f"  priorityClassName: {priority_class}" if priority_class else "", tolerations]
    pod = parse_object(
        f"""
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
  {owners}
spec:
  containers: [{{name: main, resources: {{requests: {{cpu: 100m}}}}}}]
{chr(10).join(line for line in spec if line)}
"""
    )
    assert isinstance(pod, Pod)
    return pod


def test_the_drain_evicts_group_by_group_in_karpenters_order_daemonset_pods_included() -> None:
    """Karpenter's order (its e2e "should drain pods on a node in order"): non-critical pods,
    non-critical DaemonSet pods, critical pods, critical DaemonSet pods, each group gone
    before the next; a pod tolerating the disrupted taint is not waited for."""
    _, cluster, terminator, claim = deleted_claim_with_a_pod(owned_pod("web", "ReplicaSet"))
    groups = [
        ["web"],
        ["daemon"],
        ["critical-web", "critical-web-2"],
        ["critical-daemon"],
    ]
    for pod in (
        owned_pod("daemon", "DaemonSet"),
        owned_pod("critical-web", "ReplicaSet", "system-cluster-critical"),
        owned_pod("critical-web-2", "ReplicaSet", "system-node-critical"),
        owned_pod("critical-daemon", "DaemonSet", "system-node-critical"),
        owned_pod("stays", "DaemonSet", tolerations="  tolerations: [{operator: Exists}]"),
    ):
        cluster.create(pod)
        cluster.bind(pod, "node-1")
    for number, group in enumerate(groups):
        assert terminator.reconcile(claim.name) is not None
        terminating = {pod.metadata.name for pod in cluster.pods() if pod.metadata.deleting}
        assert terminating == set(group), f"group {number}"
        for name in group:  # their kubelet stops them
            stopped = cluster.pod("default", name)
            assert stopped is not None
            cluster.delete(stopped)
    assert terminator.reconcile(claim.name) is None, "drained: the tolerating pod goes with the node"
    assert cluster.node("node-1") is None


def test_the_nodeclaim_waits_for_a_node_another_finalizer_holds_marked_instance_terminating() -> None:
    """As Karpenter: once drained and its instance deleted the NodeClaim is InstanceTerminating
    (out of its pool's budgets) and stays until its Node is gone (Karpenter's e2e drift budget
    specs hold Nodes with a finalizer of their own and count the NodeClaims left)."""
    _, cluster, terminator, claim = deleted_claim_with_a_pod(owned_pod("web", "ReplicaSet"))
    node = cluster.node("node-1")
    assert node is not None
    cluster.update(
        node.with_changes(
            metadata=node.metadata.with_changes(finalizers=(*node.metadata.finalizers, "test/hold"))
        )
    )
    terminator.reconcile(claim.name)
    web = cluster.pod("default", "web")
    assert web is not None
    cluster.delete(web)  # its kubelet stops it
    assert terminator.reconcile(claim.name) is not None, "waits for the Node"
    held = cluster.nodeclaim(claim.name)
    assert held is not None and held.is_true(CONDITION_INSTANCE_TERMINATING)
    node = cluster.node("node-1")
    assert (
        node is not None and node.metadata.deleting and TERMINATION_FINALIZER not in node.metadata.finalizers
    )
    woken = list(terminator.watches()[2].mapper(node, None))
    assert woken == [claim.name]
    cluster.update(node.with_changes(metadata=node.metadata.with_changes(finalizers=())))
    assert cluster.node("node-1") is None
    assert terminator.reconcile(claim.name) is None
    assert cluster.nodeclaim(claim.name) is None


def test_past_the_grace_period_the_node_goes_without_waiting_for_pods_still_shutting_down() -> None:
    """Karpenter's e2e "should delete pod that has a pre-stop hook after termination grace period
    seconds": a pod evicted at once whose pre-stop hook outlasts the NodeClaim's grace period does
    not hold the node past it."""
    clock, cluster, terminator, claim = deleted_claim_with_a_pod(
        owned_pod("web", "ReplicaSet"), grace_period=60
    )
    assert terminator.reconcile(claim.name) is not None
    web = cluster.pod("default", "web")
    assert web is not None and web.metadata.deleting, "evicted at once"
    clock.advance_to(clock.now() + 59)
    assert terminator.reconcile(claim.name) is not None, "its shutdown is waited for until the deadline"
    clock.advance_to(clock.now() + 1)
    assert terminator.reconcile(claim.name) is None
    assert cluster.nodeclaim(claim.name) is None and cluster.node("node-1") is None
