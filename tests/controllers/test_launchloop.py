"""The launch loop guard's own rules (karpy.controllers.launchloop), on the simulator's store.

Whose demand a pod is (its controller, so a pod preempted and recreated under
a new name is the same demand), which launches are futile (the node came up
and kept none of the workload's pods) and which are not (a node still holding
one, a node launched for another workload).
"""

from __future__ import annotations

import dataclasses

from tests.support import make_pod

from karpy.api.conditions import Condition
from karpy.api.core import POD_RUNNING, Pod
from karpy.api.meta import ObjectMeta, OwnerReference
from karpy.api.nodeclaim import CONDITION_INITIALIZED, NodeClaim, NodeClaimSpec, NodeClaimStatus
from karpy.api.nodepool import NodeClassRef
from karpy.controllers.launchloop import (
    FUTILE_LAUNCHES,
    HOLD,
    SETTLE,
    UNREFUSED_AFTER,
    LaunchLoopGuard,
    workload_of,
)
from karpy.sim.clock import VirtualClock
from karpy.sim.store import InMemoryCluster

OWNER = OwnerReference("apps/v1", "ReplicaSet", "web-abc", "uid-web-abc", controller=True)


def replica(name: str) -> Pod:
    pod = make_pod(name)
    return pod.with_changes(metadata=dataclasses.replace(pod.metadata, owner_references=(OWNER,)))


def initialized(name: str) -> NodeClaim:
    return NodeClaim(
        metadata=ObjectMeta(name=name),
        spec=NodeClaimSpec(node_class_ref=NodeClassRef("karpenter.kwok.sh", "KWOKNodeClass", "default")),
        status=NodeClaimStatus(node_name=name, conditions=(Condition(CONDITION_INITIALIZED, "True"),)),
    )


def setup() -> tuple[InMemoryCluster, VirtualClock, LaunchLoopGuard]:
    clock = VirtualClock()
    cluster = InMemoryCluster(clock)
    return cluster, clock, LaunchLoopGuard(cluster, clock)


def launch_that_came_up_empty(guard: LaunchLoopGuard, clock: VirtualClock, name: str, pod: Pod) -> None:
    claim = initialized(name)
    guard.record(claim, [pod])
    clock.advance(60)
    guard.on_nodeclaim(None, claim)
    clock.advance(SETTLE)  # up long enough for kube-scheduler to have placed the pod there
    refused(guard, pod, name)


def refused(guard: LaunchLoopGuard, pod: Pod, seen: str) -> None:
    """kube-scheduler tried the pod again, with the node ``seen`` counted, and refused it."""
    guard.on_pod(
        pod, pod.with_changes(unschedulable_reason=f"0/{seen} nodes are available: Insufficient cpu")
    )


def test_a_recreated_replica_is_the_same_demand_and_a_bare_pod_its_own() -> None:
    assert workload_of(replica("web-abc-1")) == workload_of(replica("web-abc-2"))
    assert workload_of(make_pod("a")) != workload_of(make_pod("b"))


def test_a_replicas_pods_are_held_after_futile_launches_even_under_new_names() -> None:
    _, clock, guard = setup()
    # Each launch was for a different pod of the ReplicaSet: the one before was preempted.
    for index in range(FUTILE_LAUNCHES):
        pending = [replica(f"web-abc-{index}")]
        assert guard.admit(pending) == (pending, {})
        launch_that_came_up_empty(guard, clock, f"node-{index}", pending[0])
    pending = [replica("web-abc-next"), make_pod("other")]
    allowed, held = guard.admit(pending)
    assert [pod.metadata.name for pod in allowed] == ["other"]
    assert list(held) == ["default/web-abc-next"]
    assert f"no node launched for it for {HOLD / 60:g}m" in held["default/web-abc-next"]
    clock.advance(HOLD)
    assert guard.admit(pending)[0] == pending


def test_a_node_that_holds_a_pod_of_the_workload_is_no_futile_launch() -> None:
    cluster, clock, guard = setup()
    for index in range(FUTILE_LAUNCHES):
        pod = replica(f"web-abc-{index}")
        launch_that_came_up_empty(guard, clock, f"node-{index}", pod)
        # A scale-up: the pod landed on the node launched for it.
        cluster.create(pod.with_changes(spec=dataclasses.replace(pod.spec, node_name=f"node-{index}")))
    pending = [replica("web-abc-next")]
    assert guard.admit(pending) == (pending, {})


def test_a_launch_whose_pods_ran_on_other_nodes_is_no_futile_launch() -> None:
    _, clock, guard = setup()
    # kube-scheduler spread the pods onto nodes launched before: each node launched for one
    # came up and kept none of the workload's pods, then went as empty, but the pods ran.
    for index in range(FUTILE_LAUNCHES):
        pod = replica(f"web-abc-{index}")
        launch_that_came_up_empty(guard, clock, f"node-{index}", pod)
        ran = pod.with_changes(spec=dataclasses.replace(pod.spec, node_name="older-node"), phase=POD_RUNNING)
        guard.on_pod(pod, ran)
    pending = [replica("web-abc-evicted")]
    assert guard.admit(pending) == (pending, {})


def test_nodes_that_came_up_moments_ago_are_not_judged_before_kube_scheduler_binds_to_them() -> None:
    # A pass's nodes initialize within a second or two of each other; a pass reopened by a bind
    # then finds the workload's pods planned for three of them still pending: not refused, only
    # not bound yet. Held then, they waited 15 minutes.
    _, clock, guard = setup()
    pods = [replica(f"web-abc-{index}") for index in range(FUTILE_LAUNCHES)]
    claims = [initialized(f"node-{index}") for index in range(FUTILE_LAUNCHES)]
    for claim, pod in zip(claims, pods, strict=True):
        guard.record(claim, [pod])
    clock.advance(3)
    for claim in claims:
        guard.on_nodeclaim(None, claim)
    clock.advance(1)
    assert guard.admit(pods) == (pods, {})
    # Still kept by none of them once they have been up a while and kube-scheduler refused the
    # pods with the nodes counted: a loop, held.
    clock.advance(SETTLE)
    refused(guard, pods[0], "3")
    allowed, held = guard.admit(pods)
    assert allowed == [] and len(held) == FUTILE_LAUNCHES


def test_nodes_kube_scheduler_has_not_tried_the_pods_against_are_not_judged() -> None:
    # A 1,000-pod scale-out on a loaded control plane: kube-scheduler had not reached the pods
    # 20 s after the first nodes came up. Judged then, 546 pods were held for 15 minutes.
    _, clock, guard = setup()
    pods = [replica(f"web-abc-{index}") for index in range(FUTILE_LAUNCHES)]
    refused(guard, pods[0], "0")  # refused before the launches: kube-scheduler saw no node yet
    for index, pod in enumerate(pods):
        guard.record(initialized(f"node-{index}"), [pod])
    clock.advance(3)
    for index in range(FUTILE_LAUNCHES):
        guard.on_nodeclaim(None, initialized(f"node-{index}"))
    clock.advance(SETTLE * 3)
    assert guard.admit(pods) == (pods, {})
    # kube-scheduler retries unschedulable pods every five minutes: past that, judged anyway.
    clock.advance(UNREFUSED_AFTER)
    allowed, held = guard.admit(pods)
    assert allowed == [] and len(held) == FUTILE_LAUNCHES
