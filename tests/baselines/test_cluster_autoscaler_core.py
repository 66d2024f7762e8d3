"""The baseline's pure decisions: the estimator, the expanders and what blocks a drain."""

from __future__ import annotations

import dataclasses
import random

import pytest
from tests.support import make_pod

from karpy.api.core import Node, Pod
from karpy.api.meta import ObjectMeta, OwnerReference
from karpy.baselines.cluster_autoscaler import (
    SAFE_TO_EVICT_ANNOTATION,
    SCALE_DOWN_DISABLED_ANNOTATION,
    ClusterAutoscalerFlags,
    GroupState,
    NodeGroup,
    NodeGroupError,
    NodeView,
    Template,
    decide_scale_up,
    drain_blocker,
    estimate,
    unneeded_nodes,
)

GIB = 1024**3


def template(name: str, cpu: int, price: float, memory_gib: int = 16) -> Template:
    group = NodeGroup(name=name, instance_types=(f"{name}-type",), max_size=10)
    return Template(
        group=group,
        instance_type=f"{name}-type",
        labels={"karpy.dev/node-group": name},
        taints=(),
        allocatable={"cpu": cpu * 1000, "memory": memory_gib * GIB, "pods": 110},
        price=price,
    )


def pending(count: int, cpu: str = "1") -> list[Pod]:
    pods = [make_pod(f"p{index}", cpu=cpu) for index in range(count)]
    return [pod.with_changes(unschedulable_reason="0/0 nodes are available") for pod in pods]


def owned(pod: Pod) -> Pod:
    owner = OwnerReference(api_version="apps/v1", kind="ReplicaSet", name="rs", uid="u", controller=True)
    return pod.with_changes(metadata=pod.metadata.with_changes(owner_references=(owner,)))


def test_the_estimator_packs_first_fit_decreasing() -> None:
    # 3 + 1 + 2 + 2 CPUs on 4-CPU nodes: decreasing order gives {3, 1}, {2, 2}: two nodes.
    pods = [make_pod("a", cpu="3"), make_pod("b", cpu="1"), make_pod("c", cpu="2"), make_pod("d", cpu="2")]
    count, placed = estimate(pods, template("t", 4, 1.0), limit=10)
    assert count == 2 and len(placed) == 4
    assert estimate(pods, template("t", 4, 1.0), limit=1)[0] == 1


def test_least_waste_scores_idle_cpu_and_memory() -> None:
    groups = [GroupState(template("big", 16, 0.5), 0), GroupState(template("fit", 4, 1.0), 0)]
    decision = decide_scale_up(pending(4), groups, [], ClusterAutoscalerFlags(), random.Random(0))
    assert decision is not None and (decision.group, decision.count) == ("fit", 1)


def test_price_picks_the_cheapest_per_pod() -> None:
    groups = [GroupState(template("big", 16, 0.5), 0), GroupState(template("fit", 4, 1.0), 0)]
    flags = ClusterAutoscalerFlags(expander="price")
    decision = decide_scale_up(pending(4), groups, [], flags, random.Random(0))
    assert decision is not None and decision.group == "big"


def test_priority_picks_the_highest_matching_pattern() -> None:
    groups = [GroupState(template("spot-a", 4, 1.0), 0), GroupState(template("od-a", 4, 1.0), 0)]
    flags = ClusterAutoscalerFlags(expander="priority", priorities={10: ("od-.*",), 50: ("spot-.*",)})
    decision = decide_scale_up(pending(2), groups, [], flags, random.Random(0))
    assert decision is not None and decision.group == "spot-a"


def test_random_is_repeatable_with_a_seed() -> None:
    groups = [GroupState(template(name, 4, 1.0), 0) for name in ("a", "b", "c", "d")]
    flags = ClusterAutoscalerFlags(expander="random", seed=7)

    def picks(seed: int) -> list[str]:
        rng = random.Random(seed)
        return [
            decision.group
            for _ in range(8)
            if (decision := decide_scale_up(pending(1), groups, [], flags, rng)) is not None
        ]

    assert picks(7) == picks(7)
    assert len(set(picks(7))) > 1


def test_pods_that_fit_upcoming_nodes_order_nothing_more() -> None:
    groups = [GroupState(template("fit", 4, 1.0), 1)]
    flags = ClusterAutoscalerFlags()
    assert decide_scale_up(pending(3), groups, [template("fit", 4, 1.0)], flags, random.Random(0)) is None
    decision = decide_scale_up(pending(6), groups, [template("fit", 4, 1.0)], flags, random.Random(0))
    assert decision is not None and decision.count == 1


def test_a_backed_off_or_full_group_is_not_an_option() -> None:
    full = GroupState(template("full", 4, 1.0), 10)
    backed_off = GroupState(template("off", 4, 1.0), 0, backed_off=True)
    decision = decide_scale_up(pending(2), [full, backed_off], [], ClusterAutoscalerFlags(), random.Random(0))
    assert decision is not None and decision.count == 0 and len(decision.waiting) == 2


FLAGS = ClusterAutoscalerFlags()


@pytest.mark.parametrize(
    ("pod", "reason"),
    [
        (owned(make_pod("a")).with_changes(), None),
        (make_pod("bare"), "has no controller"),
        (
            owned(make_pod("sys", namespace="kube-system")),
            "kube-system pod kube-system/sys has no PodDisruptionBudget",
        ),
    ],
)
def test_what_blocks_a_drain(pod: Pod, reason: str | None) -> None:
    found = drain_blocker(pod, {}, set(), FLAGS)
    assert (found is None) if reason is None else (found is not None and reason in found)


def test_annotations_block_a_drain_and_safe_to_evict_true_unblocks_a_bare_pod() -> None:
    pod = owned(make_pod("a"))

    def annotated(base: Pod, key: str, value: str) -> Pod:
        return base.with_changes(metadata=base.metadata.with_changes(annotations={key: value}))

    assert drain_blocker(annotated(pod, SAFE_TO_EVICT_ANNOTATION, "false"), {}, set(), FLAGS) is not None
    assert drain_blocker(annotated(pod, "karpenter.sh/do-not-disrupt", "true"), {}, set(), FLAGS) is not None
    assert drain_blocker(annotated(make_pod("b"), SAFE_TO_EVICT_ANNOTATION, "true"), {}, set(), FLAGS) is None
    assert drain_blocker(pod, {pod.key: "PodDisruptionBudget x allows none"}, set(), FLAGS) is not None
    system = owned(make_pod("sys", namespace="kube-system"))
    assert drain_blocker(system, {}, {system.key}, FLAGS) is None
    assert (
        drain_blocker(system, {}, set(), dataclasses.replace(FLAGS, skip_nodes_with_system_pods=False))
        is None
    )


def test_node_group_checks_name_the_field() -> None:
    with pytest.raises(NodeGroupError) as raised:
        NodeGroup("g", ("c5.large",), min_size=3, max_size=1).check()
    assert raised.value.field_name == "maxSize"
    with pytest.raises(NodeGroupError) as raised:
        NodeGroup("g", ("c5.large",), capacity_type="reserved").check()
    assert raised.value.field_name == "capacityType"


def test_a_node_annotated_scale_down_disabled_is_kept() -> None:
    def node(name: str, annotations: dict[str, str]) -> Node:
        return Node(
            metadata=ObjectMeta(name=name, annotations=annotations),
            allocatable={"cpu": 4000, "memory": 16 * GIB, "pods": 110},
        )

    group = NodeGroup("g", ("t",), max_size=5)
    pods = (owned(make_pod("a")).with_changes(spec=dataclasses.replace(make_pod("a").spec, node_name="n1")),)
    views = [NodeView(node("n1", {}), "g", pods), NodeView(node("n2", {}), "g", ())]
    found, _ = unneeded_nodes(views, {"g": 2}, {"g": group}, {}, set(), FLAGS)
    # The empty node goes; the other's pod would have had only the empty node to move to.
    assert [item.node for item in found] == ["n2"]
    disabled = {SCALE_DOWN_DISABLED_ANNOTATION: "true"}
    views = [NodeView(node("n1", disabled), "g", pods), NodeView(node("n2", disabled), "g", ())]
    found, kept = unneeded_nodes(views, {"g": 2}, {"g": group}, {}, set(), FLAGS)
    assert found == []
    assert all("scale-down-disabled" in reason for reason in kept.values())


def test_least_waste_breaks_ties_at_random_repeatably() -> None:
    groups = [GroupState(template("a-spot", 4, 0.5), 0), GroupState(template("a-od", 4, 1.0), 0)]

    def pick(seed: int) -> str:
        decision = decide_scale_up(pending(3), groups, [], ClusterAutoscalerFlags(), random.Random(seed))
        assert decision is not None
        return decision.group

    assert {pick(seed) for seed in range(20)} == {"a-spot", "a-od"}
    assert [pick(seed) for seed in range(5)] == [pick(seed) for seed in range(5)]
