"""Volume attach limits: a node takes no more of a CSI driver's volumes than it can attach (v1.15)."""

from __future__ import annotations

import dataclasses

from tests.support import make_instance_type, make_nodepool, make_pod

from karpy.api.core import Pod
from karpy.api.instancetype import InstanceType
from karpy.api.requirements import Requirements
from karpy.api.storage import EBS_CSI_DRIVER, volume_resource
from karpy.scheduling.solver import ExistingCapacity, NodePoolCapacity, solve

EBS = volume_resource(EBS_CSI_DRIVER)


def limited(instance_type: InstanceType, limit: int) -> InstanceType:
    return dataclasses.replace(instance_type, volume_limits={EBS_CSI_DRIVER: limit})


def pool(types: list[InstanceType]) -> NodePoolCapacity:
    return NodePoolCapacity(make_nodepool("default"), types, {}, None)


def one_volume_each(count: int) -> tuple[list[Pod], dict[str, dict[str, int]]]:
    pods = [make_pod(f"db-{i}", "100m", "128Mi") for i in range(count)]
    return pods, {pod.key: {EBS: 1} for pod in pods}


def test_new_nodeclaims_hold_no_more_volumes_than_their_types_attach() -> None:
    pods, volumes = one_volume_each(10)
    plan = solve(
        pods, [], [pool([limited(make_instance_type("big.8x", 8, 32, 0.4), 4)])], volume_counts=volumes
    )
    assert plan.unschedulable == {}
    assert sorted(len(claim.pods) for claim in plan.new_nodeclaims) == [2, 4, 4]
    # The count steers the plan; it is no request of the NodeClaim's.
    assert all(EBS not in claim.requests for claim in plan.new_nodeclaims)


def test_without_volume_counts_the_same_pods_share_one_node() -> None:
    pods, _ = one_volume_each(10)
    plan = solve(pods, [], [pool([limited(make_instance_type("big.8x", 8, 32, 0.4), 4)])])
    assert [len(claim.pods) for claim in plan.new_nodeclaims] == [10]


def test_a_bin_drops_the_types_that_cannot_attach_its_volumes() -> None:
    few = limited(make_instance_type("few.8x", 8, 32, 0.30), 2)
    many = limited(make_instance_type("many.8x", 8, 32, 0.40), 26)
    pods, volumes = one_volume_each(3)
    plan = solve(pods, [], [pool([few, many])], volume_counts=volumes)
    assert [[t.name for t in claim.instance_types] for claim in plan.new_nodeclaims] == [["many.8x"]]


def test_a_type_with_no_limit_for_the_driver_takes_any_number() -> None:
    pods, volumes = one_volume_each(30)
    plan = solve(pods, [], [pool([make_instance_type("big.8x", 8, 32, 0.4)])], volume_counts=volumes)
    assert [len(claim.pods) for claim in plan.new_nodeclaims] == [30]


def test_an_existing_node_takes_only_what_its_csinode_has_left() -> None:
    node = ExistingCapacity(
        name="node-1",
        nodepool="default",
        requirements=Requirements.from_labels({"kubernetes.io/arch": "amd64"}),
        taints=(),
        available={"cpu": 8000, "memory": 32 * 1024**3, "pods": 100, EBS: 1},
    )
    pods, volumes = one_volume_each(3)
    plan = solve(
        pods, [node], [pool([limited(make_instance_type("big.8x", 8, 32, 0.4), 26)])], volume_counts=volumes
    )
    assert list(plan.existing.values()) == ["node-1"]
    assert [len(claim.pods) for claim in plan.new_nodeclaims] == [2]


def test_an_existing_node_without_a_limit_for_the_driver_takes_any_number() -> None:
    node = ExistingCapacity(
        name="node-1",
        nodepool="default",
        requirements=Requirements.from_labels({"kubernetes.io/arch": "amd64"}),
        taints=(),
        available={"cpu": 8000, "memory": 32 * 1024**3, "pods": 100},
    )
    pods, volumes = one_volume_each(3)
    plan = solve(pods, [node], [pool([make_instance_type("big.8x", 8, 32, 0.4)])], volume_counts=volumes)
    assert sorted(plan.existing.values()) == ["node-1"] * 3
