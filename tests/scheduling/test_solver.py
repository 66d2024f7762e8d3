"""The first-fit-decreasing solver: where pods go, and why the ones left over stay pending."""

from __future__ import annotations

import dataclasses
import gc

from benchmarks.scheduling.workloads import diverse_pods, karpenter_pools
from tests.support import make_instance_type, make_nodepool, make_pod

from karpy.api.core import Pod, PodSpec
from karpy.api.instancetype import InstanceType
from karpy.api.meta import ObjectMeta
from karpy.api.quantity import ResourceAmounts
from karpy.api.requirements import LABEL_INSTANCE_TYPE, LABEL_NODEPOOL, Requirement, Requirements
from karpy.api.taints import Taint
from karpy.scheduling._groups import alike_groups, labels_matter
from karpy.scheduling.solver import ExistingCapacity, NodePoolCapacity, Plan, solve

SMALL = make_instance_type("small.2x", 2, 4, 0.10)
LARGE = make_instance_type("large.4x", 4, 8, 0.18)
ARM = make_instance_type("arm.4x", 4, 8, 0.15, arch="arm64")
TYPES = [SMALL, LARGE, ARM]


def pool(
    name: str = "default",
    *,
    spec: str = "",
    template_spec: str = "",
    types: list[InstanceType] | None = None,
    remaining: ResourceAmounts | None = None,
) -> NodePoolCapacity:
    return NodePoolCapacity(make_nodepool(name, spec, template_spec), types or TYPES, {}, remaining)


def test_pods_are_packed_onto_as_few_new_nodeclaims_as_the_largest_type_allows() -> None:
    pods = [make_pod(f"p{i}", "1", "1Gi") for i in range(6)]
    plan = solve(pods, [], [pool()])
    assert plan.unschedulable == {}
    assert [len(claim.pods) for claim in plan.new_nodeclaims] == [4, 2]
    # Options are every type that fits, cheapest first; the price is the cheapest offering.
    first = plan.new_nodeclaims[0]
    assert [t.name for t in first.instance_types] == ["arm.4x", "large.4x"]
    assert first.requirements.get(LABEL_INSTANCE_TYPE).has("arm.4x")
    assert first.requirements.get(LABEL_NODEPOOL).has("default")
    second = plan.new_nodeclaims[1]
    assert [t.name for t in second.instance_types] == ["small.2x", "arm.4x", "large.4x"]
    assert abs(second.price - 0.04) < 1e-9


def test_existing_capacity_is_used_before_new_nodeclaims() -> None:
    node = ExistingCapacity(
        name="node-1",
        nodepool="default",
        requirements=Requirements.from_labels({"kubernetes.io/arch": "amd64"}),
        taints=(),
        available={"cpu": 2000, "memory": 8 * 1024**3, "pods": 10},
    )
    pods = [make_pod(f"p{i}", "1", "1Gi") for i in range(3)]
    plan = solve(pods, [node], [pool()])
    assert sorted(plan.existing.values()) == ["node-1", "node-1"]
    assert sum(len(claim.pods) for claim in plan.new_nodeclaims) == 1


def test_node_selector_narrows_the_instance_types() -> None:
    pod = make_pod("p", extra_spec="  nodeSelector: {kubernetes.io/arch: arm64}")
    plan = solve([pod], [], [pool()])
    assert [t.name for t in plan.new_nodeclaims[0].instance_types] == ["arm.4x"]


def test_a_pod_that_does_not_tolerate_the_pool_taint_stays_pending_with_the_reason() -> None:
    tainted = pool(template_spec="      taints: [{key: dedicated, value: gpu, effect: NoSchedule}]")
    plan = solve([make_pod("p")], [], [tainted])
    assert plan.new_nodeclaims == []
    assert "does not tolerate taint dedicated=gpu:NoSchedule" in plan.unschedulable["default/p"]


def test_a_tolerating_pod_lands_on_the_tainted_pool() -> None:
    tainted = pool(template_spec="      taints: [{key: dedicated, value: gpu, effect: NoSchedule}]")
    pod = make_pod("p", extra_spec="  tolerations: [{key: dedicated, operator: Equal, value: gpu}]")
    plan = solve([pod], [], [tainted])
    assert len(plan.new_nodeclaims) == 1


def test_a_pod_too_large_for_any_type_is_explained() -> None:
    plan = solve([make_pod("huge", "64", "1Gi")], [], [pool()])
    reason = plan.unschedulable["default/huge"]
    assert "no instance type has room" in reason and "cpu 64" in reason


def test_incompatible_requirements_name_the_requirement() -> None:
    pod = make_pod("p", extra_spec="  nodeSelector: {kubernetes.io/arch: s390x}")
    plan = solve([pod], [], [pool()])
    assert "kubernetes.io/arch" in plan.unschedulable["default/p"]


def test_heavier_pools_are_tried_first_and_lighter_ones_take_what_they_cannot() -> None:
    heavy = pool(
        "heavy",
        spec="  weight: 50",
        template_spec="      requirements: [{key: kubernetes.io/arch, operator: In, values: [arm64]}]",
    )
    light = pool("light", spec="  weight: 10")
    unconstrained = solve([make_pod("any")], [], [light, heavy])
    assert [claim.nodepool for claim in unconstrained.new_nodeclaims] == ["heavy"]
    amd_pod = make_pod("amd", extra_spec="  nodeSelector: {kubernetes.io/arch: amd64}")
    constrained = solve([amd_pod], [], [light, heavy])
    assert [claim.nodepool for claim in constrained.new_nodeclaims] == ["light"]


def test_a_nodeclaim_already_planned_is_filled_before_a_heavier_pool_is_opened() -> None:
    # Karpenter's order: pods join NodeClaims planned in this pass before new ones
    # are opened, whatever the weights; fewer, fuller nodes are cheaper.
    heavy = pool(
        "heavy",
        spec="  weight: 50",
        template_spec="      requirements: [{key: kubernetes.io/arch, operator: In, values: [arm64]}]",
    )
    light = pool("light", spec="  weight: 10")
    amd_pod = make_pod("amd", extra_spec="  nodeSelector: {kubernetes.io/arch: amd64}")
    plan = solve([amd_pod, make_pod("any")], [], [light, heavy])
    assert [(c.nodepool, len(c.pods)) for c in plan.new_nodeclaims] == [("light", 2)]


def test_a_pool_at_its_limit_falls_back_to_the_next_pool() -> None:
    limited = pool("limited", spec="  weight: 50", remaining={"cpu": 2000})
    fallback = pool("fallback", spec="  weight: 1")
    pods = [make_pod(f"p{i}", "1", "1Gi") for i in range(3)]
    plan = solve(pods, [], [limited, fallback])
    placed = {claim.nodepool: len(claim.pods) for claim in plan.new_nodeclaims}
    assert placed == {"limited": 2, "fallback": 1}
    limited_claim = next(claim for claim in plan.new_nodeclaims if claim.nodepool == "limited")
    assert [t.name for t in limited_claim.instance_types] == ["small.2x"]


def test_a_pool_at_its_limit_with_no_fallback_reports_the_limit() -> None:
    limited = pool("limited", remaining={"cpu": 0})
    plan = solve([make_pod("p")], [], [limited])
    assert "at its cpu limit" in plan.unschedulable["default/p"]


def test_daemonset_overhead_is_reserved_on_every_new_nodeclaim() -> None:
    with_daemons = NodePoolCapacity(make_nodepool(), TYPES, {"cpu": 1000, "memory": 1024**3, "pods": 1}, None)
    pods = [make_pod(f"p{i}", "1", "1Gi") for i in range(3)]
    plan = solve(pods, [], [with_daemons])
    assert [len(claim.pods) for claim in plan.new_nodeclaims] == [3]
    assert plan.new_nodeclaims[0].requests["cpu"] == 4000
    assert [t.name for t in plan.new_nodeclaims[0].instance_types] == ["arm.4x", "large.4x"]


def test_startup_and_unregistered_taints_do_not_keep_pods_off_in_flight_capacity() -> None:
    startup = Taint("node.cilium.io/agent-not-ready", "NoSchedule")
    node = ExistingCapacity(
        name="node-1",
        nodepool="default",
        requirements=Requirements(),
        taints=(startup, Taint("karpenter.sh/unregistered", "NoExecute")),
        available={"cpu": 4000, "memory": 8 * 1024**3, "pods": 10},
        in_flight=True,
        ephemeral_taints=(startup,),
    )
    plan = solve([make_pod("p")], [node], [pool()])
    assert plan.existing == {"default/p": "node-1"}


def test_the_plan_is_deterministic_whatever_the_input_order() -> None:
    pods = [make_pod(f"p{i}", str(1 + i % 3), f"{1 + i % 2}Gi") for i in range(12)]
    first = solve(pods, [], [pool()])
    second = solve(list(reversed(pods)), [], [pool()])

    def shape(plan: Plan) -> list[tuple[list[str], list[str]]]:
        return [([p.key for p in c.pods], [t.name for t in c.instance_types]) for c in plan.new_nodeclaims]

    assert shape(first) == shape(second)


def test_a_nodes_limit_caps_the_number_of_new_nodeclaims() -> None:
    limited = pool(remaining={"nodes": 1})
    pods = [make_pod(f"p{i}", "3", "1Gi") for i in range(2)]
    plan = solve(pods, [], [limited])
    assert len(plan.new_nodeclaims) == 1
    assert len(plan.unschedulable) == 1
    assert "nodes limit" in next(iter(plan.unschedulable.values()))


def test_a_solve_makes_no_reference_cycles_and_leaves_the_cycle_collector_as_it_was() -> None:
    """The solver pauses the cycle collector while it works (see ``_cycle_collection_paused``),
    which is only sound while everything it allocates is freed by reference counting alone."""
    pools = karpenter_pools()
    # Every kind of diverse pod: spread, (anti-)affinity, zonal narrowing, relaxation-free.
    pods = diverse_pods(500)
    existing = [
        ExistingCapacity(
            "node-a", "default", Requirements(), (), {"cpu": 4000, "memory": 8 * 1024**3, "pods": 10}
        )
    ]
    gc.collect()
    gc.disable()
    try:
        plan = solve(pods, existing, pools)
        assert not gc.isenabled()
        assert plan.unschedulable == {}
        del plan
        assert gc.collect() == 0
    finally:
        gc.enable()
    solve(pods[:10], [], pools)
    assert gc.isenabled()


def test_the_plan_does_not_depend_on_the_input_order_when_specs_read_alike() -> None:
    """Two pods whose node terms differ only past what a written-out requirement shows (five
    values): the groups are still ordered the same whatever order the pods come in."""

    def pod(name: str, allowed: list[str]) -> Pod:
        term = Requirements(Requirement.from_operator(LABEL_INSTANCE_TYPE, "In", allowed))
        return Pod(
            metadata=ObjectMeta(name=name, namespace="default", labels={"app": "a"}),
            spec=PodSpec(requests={"cpu": 1000}, required_node_terms=(term,)),
        )

    pods = [
        pod("a-1", ["t1", "t2", "t3", "t4", "t5", "t6"]),
        pod("a-2", ["t1", "t2", "t3", "t4", "t5", "t7"]),
    ]
    node = ExistingCapacity(
        "n", "p", Requirements.from_labels({LABEL_INSTANCE_TYPE: "t1"}), (), {"cpu": 1000, "pods": 5}
    )
    assert solve(pods, [node], []).existing == solve(pods[::-1], [node], []).existing == {"default/a-1": "n"}


def test_a_pod_kept_out_by_daemonset_overhead_is_told_so_and_one_too_big_alone_is_not() -> None:
    pool = NodePoolCapacity(
        make_nodepool(), [make_instance_type("c.4x", cpu=4, memory_gib=8, price=0.2)], {"cpu": 500_000}
    )
    plan = solve([make_pod("small", cpu="100m"), make_pod("huge", cpu="8")], [], [pool])
    assert "with the DaemonSets' (cpu 500)" in plan.unschedulable["default/small"]
    assert "(largest option c.4x)" in plan.unschedulable["default/small"]
    assert "DaemonSets" not in plan.unschedulable["default/huge"]


def _replica(app: str, index: int, node_name: str = "", extra_spec: str = "") -> Pod:
    pod = make_pod(f"{app}-{index}", "1", "1Gi", labels=f"{{app: {app}}}", extra_spec=extra_spec)
    return pod.with_changes(spec=dataclasses.replace(pod.spec, node_name=node_name))


def test_replicas_of_deployments_alike_but_for_labels_and_node_are_one_group_when_no_label_counts() -> None:
    """Pods a removal moves carry their labels and the node they leave; when no pod's
    terms read labels, neither says anything of where a pod may go, and the twenty
    Deployments of one shape are placed as one group, in bulk."""
    pods = [
        _replica(app, index, node_name=f"node-{index % 3}") for app in ("a", "b", "c") for index in range(4)
    ]
    assert not labels_matter(pods, [])
    assert len(alike_groups(pods, {}, by_labels=False)) == 1
    assert len(alike_groups(pods, {})) == 3
    assert len(solve(pods, [], [pool(types=[LARGE])]).new_nodeclaims) == 3


def test_labels_count_when_a_moving_pod_or_a_bound_pods_anti_affinity_reads_them() -> None:
    spread = """  topologySpreadConstraints:
    - maxSkew: 1
      topologyKey: kubernetes.io/hostname
      whenUnsatisfiable: DoNotSchedule
      labelSelector: {matchLabels: {app: a}}"""
    anti = """  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - {labelSelector: {matchLabels: {app: b}}, topologyKey: kubernetes.io/hostname}"""
    plain = [_replica("a", 0), _replica("b", 0)]
    assert labels_matter([*plain, _replica("a", 1, extra_spec=spread)], [])
    assert labels_matter(plain, [_replica("c", 0, node_name="n", extra_spec=anti)])
    # A bound pod's own spread constrains only that pod, which is placed already.
    assert not labels_matter(plain, [_replica("c", 0, node_name="n", extra_spec=spread)])


def test_a_bound_pods_anti_affinity_still_keeps_the_pods_it_selects_off_its_node() -> None:
    anti = """  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - {labelSelector: {matchLabels: {app: b}}, topologyKey: kubernetes.io/hostname}"""
    guard = _replica("guard", 0, node_name="n", extra_spec=anti)
    node = ExistingCapacity(
        "n",
        "default",
        Requirements.from_labels({LABEL_INSTANCE_TYPE: "large.4x"}),
        (),
        {"cpu": 3000, "memory": 8 * 1024**3, "pods": 20},
        pods=(guard,),
    )
    pods = [_replica("a", 0), _replica("b", 0)]
    plan = solve(pods, [node], [pool()])
    assert plan.existing == {"default/a-0": "n"}
    assert [[p.key for p in claim.pods] for claim in plan.new_nodeclaims] == [["default/b-0"]]


def _node(name: str, cpu: int, *, in_flight: bool = False) -> ExistingCapacity:
    return ExistingCapacity(
        name=name,
        nodepool="default",
        requirements=Requirements(),
        taints=(),
        available={"cpu": cpu * 1000, "memory": 8 * 1024**3, "pods": 10},
        in_flight=in_flight,
    )


def test_a_plan_asked_to_stop_at_a_node_stops_where_the_whole_plan_uses_it_and_only_there() -> None:
    pods = [make_pod(f"p{i}", "1", "1Gi") for i in range(5)]
    nodes = [_node("node-a", 2), _node("node-b", 2, in_flight=True), _node("node-c", 4)]
    whole = solve(pods, nodes, [pool()])
    assert "node-b" in whole.existing.values() and whole.stopped_at is None
    stopped = solve(pods, nodes, [pool()], stop_at={"node-b"})
    assert stopped.stopped_at == "node-b"
    # A node the plan does not use stops nothing: the plan is the whole one.
    unused = solve(pods[:2], nodes, [pool()], stop_at={"node-b"})
    assert unused.stopped_at is None
    assert unused.existing == solve(pods[:2], nodes, [pool()]).existing


def test_under_a_limit_a_plan_does_not_stop_early() -> None:
    # The plan kept under a binding limit may be the second one made, which need not use the node.
    pods = [make_pod(f"p{i}", "1", "1Gi") for i in range(5)]
    nodes = [_node("node-a", 2), _node("node-b", 2, in_flight=True)]
    limited = pool(remaining={"cpu": 8000})
    plan = solve(pods, nodes, [limited], stop_at={"node-b"})
    assert plan.stopped_at is None
    assert plan.existing == solve(pods, nodes, [limited]).existing
