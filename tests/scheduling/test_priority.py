"""Pending pods are placed in priority order (``spec.priority``), largest first within a priority.

No running pod is preempted: priority only decides which pending pods get
the room there is, so when capacity or a NodePool limit runs short it is the
low-priority ones that stay pending.
"""

from __future__ import annotations

import dataclasses
import random

from tests.support import make_instance_type, make_nodepool, make_pod

from karpy.api.core import Pod
from karpy.api.requirements import Requirements
from karpy.scheduling.solver import ExistingCapacity, NodePoolCapacity, solve

LARGE = make_instance_type("large.4x", 4, 16, 0.18)


def with_priority(pod: Pod, priority: int) -> Pod:
    return pod.with_changes(spec=dataclasses.replace(pod.spec, priority=priority))


def one_node_pool() -> NodePoolCapacity:
    """A NodePool whose limit allows one 4-CPU node."""
    return NodePoolCapacity(make_nodepool("default"), [LARGE], {}, {"cpu": 4_000})


def test_under_a_limit_the_high_priority_pods_get_the_room_whatever_their_size_and_order() -> None:
    # Largest first alone would give the node to the two 2-CPU pods.
    low = [with_priority(make_pod(f"low-{index}", "2", "1Gi"), 0) for index in range(2)]
    high = [with_priority(make_pod(f"high-{index}", "1", "1Gi"), 1000) for index in range(3)]
    shuffled = low + high
    random.Random(7).shuffle(shuffled)
    for pods in (low + high, high + low, shuffled):
        plan = solve(pods, [], [one_node_pool()])
        assert [sorted(pod.key for pod in claim.pods) for claim in plan.new_nodeclaims] == [
            ["default/high-0", "default/high-1", "default/high-2"]
        ]
        assert sorted(plan.unschedulable) == ["default/low-0", "default/low-1"]


def test_existing_room_goes_to_the_high_priority_pods_first() -> None:
    node = ExistingCapacity(
        "node-1", "default", Requirements(), (), {"cpu": 2_000, "memory": 8 * 1024**3, "pods": 10}
    )
    pods = [
        with_priority(make_pod("batch", "2", "1Gi"), -10),
        with_priority(make_pod("web", "1", "1Gi"), 100),
        make_pod("plain", "1", "1Gi"),
    ]
    plan = solve(pods, [node], [])
    assert plan.existing == {"default/web": "node-1", "default/plain": "node-1"}
    assert list(plan.unschedulable) == ["default/batch"]


def test_within_one_priority_the_largest_pods_go_first() -> None:
    pods = [
        with_priority(make_pod(name, cpu, "1Gi"), 5)
        for name, cpu in (("two-a", "2"), ("three", "3"), ("two-b", "2"))
    ]
    plan = solve(pods, [], [one_node_pool()])
    assert [[pod.key for pod in claim.pods] for claim in plan.new_nodeclaims] == [["default/three"]]
    assert sorted(plan.unschedulable) == ["default/two-a", "default/two-b"]
