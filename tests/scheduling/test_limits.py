"""NodePool limits: what a new NodeClaim may keep of its options, and when a pod is refused.

Karpenter's own behaviour here is to filter options: it counts the largest
option of every NodeClaim it plans against the NodePool's limits, so a limit
holds whatever type the cloud then picks, and it drops the options of a new
NodeClaim that would break what the limits leave and launches with the
rest. karpy does the same. It also goes further, and says so: a NodeClaim
planned earlier in the same pass gives up the large options its pods do not
need when a later pod needs the room (Karpenter keeps what it counted when
the NodeClaim was made), and when a limit still leaves pods pending the plan
is made again with bigger, fuller nodes and kept if it runs more pods. These
tests pin down that a limit the cluster is far from leaves no pod pending,
that the limit still holds for every option kept, and that a pod is refused,
naming the limit, only when no option fits what is left.
"""

from __future__ import annotations

import dataclasses

from benchmarks.scheduling.workloads import catalog_instance_types
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support import make_instance_type, make_nodepool, make_pod

from karpy.api.core import Pod
from karpy.api.instancetype import InstanceType
from karpy.api.quantity import ResourceAmounts, add_amounts
from karpy.scheduling.solver import NodePoolCapacity, Plan, max_capacity, solve

GIB = 1024**3
SMALL = make_instance_type("small.2x", 2, 4, 0.10)
LARGE = make_instance_type("large.4x", 4, 8, 0.18)
ARM = make_instance_type("arm.4x", 4, 8, 0.15, arch="arm64")
SOLO_SPEC = """
  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - topologyKey: kubernetes.io/hostname
          labelSelector: {matchLabels: {app: solo}}
"""


def catalog_pool(remaining: ResourceAmounts | None) -> NodePoolCapacity:
    """A NodePool with no requirements over the bundled AWS catalog."""
    return NodePoolCapacity(make_nodepool("default"), catalog_instance_types(), {}, remaining)


def reserved(plan: Plan, pool: str) -> ResourceAmounts:
    """The largest option of every NodeClaim of ``pool``, summed: what the limits must hold."""
    total: ResourceAmounts = {}
    for claim in plan.new_nodeclaims:
        if claim.nodepool == pool:
            total = add_amounts(total, max_capacity(claim.instance_types))
    return total


def within(amounts: ResourceAmounts, remaining: ResourceAmounts) -> bool:
    return all(amounts.get(resource, 0) <= limit for resource, limit in remaining.items())


def test_a_limit_the_cluster_is_far_from_leaves_no_pod_pending() -> None:
    """Five 1-CPU pods under ``limits: {cpu: 100, memory: 400Gi}`` with every type allowed.

    Each pod gets a node of its own (a 2-vCPU node takes one such pod, and
    that is cheaper than a bigger node for several). The first NodeClaim's
    options went up to a 96-CPU type, which left 4 CPUs of the limit for the
    rest: two small nodes were launched and three pods stayed pending "at its
    cpu limit" for good. Now the NodeClaims give up options they do not need,
    and the plan is the one made without a limit.
    """
    limits = {"cpu": 100_000, "memory": 400 * GIB}
    pods = [make_pod(f"p{index}", "1", "1Gi") for index in range(5)]
    plan = solve(pods, [], [catalog_pool(limits)])
    assert plan.unschedulable == {}
    assert sum(len(claim.pods) for claim in plan.new_nodeclaims) == 5
    assert within(reserved(plan, "default"), limits)
    unlimited = solve(pods, [], [catalog_pool(None)])

    def placements(plan: Plan) -> list[tuple[list[str], str]]:
        return [
            ([pod.key for pod in claim.pods], claim.instance_types[0].name) for claim in plan.new_nodeclaims
        ]

    assert placements(plan) == placements(unlimited)


def test_under_a_limit_that_binds_the_pods_share_bigger_nodes() -> None:
    """Ten 1-CPU pods under ``limits: {cpu: 8}``: one 8-CPU node takes seven.

    Left to the cost rule, each pod would take a 2-CPU node of its own and
    the limit would be spent on four of them (before that, the first
    NodeClaim's 8-CPU options alone took the whole limit and one pod ran).
    """
    limits = {"cpu": 8_000}
    pods = [make_pod(f"p{index}", "1", "1Gi") for index in range(10)]
    plan = solve(pods, [], [catalog_pool(limits)])
    assert len(plan.unschedulable) == 3
    assert [len(claim.pods) for claim in plan.new_nodeclaims] == [7]
    assert within(reserved(plan, "default"), limits)
    assert all("NodePool default is at its cpu limit" in reason for reason in plan.unschedulable.values())


def test_a_nodeclaim_gives_up_options_it_does_not_need_so_another_can_open() -> None:
    """Under 4 CPUs, two pods that may not share a node each get a 2-CPU node.

    The first NodeClaim, opened alone, could be any of the three types (4
    CPUs at most); the second pod needs a node of its own, so the first
    keeps only the 2-CPU type and the second gets it too. A third finds no
    option within what is left even then: the limited pool refuses it and
    the next pool by weight takes it.
    """
    limited = NodePoolCapacity(
        make_nodepool("limited", "  weight: 50"), [SMALL, LARGE, ARM], {}, {"cpu": 4_000}
    )
    fallback = NodePoolCapacity(make_nodepool("fallback", "  weight: 1"), [SMALL, LARGE, ARM], {}, None)
    pods = [
        make_pod(f"p{index}", "500m", "1Gi", labels="{app: solo}", extra_spec=SOLO_SPEC) for index in range(3)
    ]
    plan = solve(pods, [], [limited, fallback])
    assert plan.unschedulable == {}
    by_pool = [(claim.nodepool, [t.name for t in claim.instance_types]) for claim in plan.new_nodeclaims]
    assert by_pool == [
        ("limited", ["small.2x"]),
        ("limited", ["small.2x"]),
        ("fallback", ["small.2x", "arm.4x", "large.4x"]),
    ]
    assert within(reserved(plan, "limited"), {"cpu": 4_000})

    alone = solve(pods, [], [limited])
    assert len(alone.new_nodeclaims) == 2
    (reason,) = alone.unschedulable.values()
    assert reason == "NodePool limited: NodePool limited is at its cpu limit"


def test_a_nodes_limit_is_not_helped_by_giving_up_options() -> None:
    """Every NodeClaim is one node whatever its options: two solo pods under ``nodes: 1``."""
    limited = NodePoolCapacity(make_nodepool("limited"), [SMALL, LARGE, ARM], {}, {"nodes": 1})
    pods = [
        make_pod(f"p{index}", "500m", "1Gi", labels="{app: solo}", extra_spec=SOLO_SPEC) for index in range(2)
    ]
    plan = solve(pods, [], [limited])
    assert len(plan.new_nodeclaims) == 1
    assert "at its nodes limit" in next(iter(plan.unschedulable.values()))


@st.composite
def limited_scenarios(draw: st.DrawFn) -> tuple[list[Pod], list[InstanceType], ResourceAmounts]:
    types = [
        make_instance_type(
            f"t{index}.{cpu}x",
            cpu,
            draw(st.integers(1, 64)),
            draw(st.floats(0.01, 2.0)),
            pods=draw(st.integers(1, 30)),
        )
        for index, cpu in enumerate(draw(st.lists(st.integers(1, 32), min_size=1, max_size=6)))
    ]
    pods = []
    for index in range(draw(st.integers(1, 20))):
        pod = make_pod(f"p{index}", f"{draw(st.integers(50, 4000))}m", f"{draw(st.integers(16, 8192))}Mi")
        if draw(st.booleans()):
            pod = pod.with_changes(
                spec=dataclasses.replace(pod.spec, priority=draw(st.sampled_from([0, 100, 1000])))
            )
        pods.append(pod)
    remaining: ResourceAmounts = {}
    if draw(st.booleans()):
        remaining["cpu"] = draw(st.integers(0, 80)) * 1000
    if draw(st.booleans()):
        remaining["memory"] = draw(st.integers(0, 256)) * GIB
    if draw(st.booleans()):
        remaining["nodes"] = draw(st.integers(0, 12))
    return pods, types, remaining


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(limited_scenarios())
def test_every_option_kept_stays_within_the_limits_and_a_limit_far_off_changes_nothing(
    scenario: tuple[list[Pod], list[InstanceType], ResourceAmounts],
) -> None:
    pods, types, remaining = scenario
    plan = solve(pods, [], [NodePoolCapacity(make_nodepool("default"), types, {}, remaining)])
    # Whatever type the cloud picks for each NodeClaim, the limits hold.
    assert within(reserved(plan, "default"), remaining)
    assert sorted(
        [pod.key for claim in plan.new_nodeclaims for pod in claim.pods] + list(plan.unschedulable)
    ) == sorted(pod.key for pod in pods)
    for reason in plan.unschedulable.values():
        assert "limit" in reason or "no instance type has room" in reason
    # Limits that no plan can reach (a NodeClaim of the largest type for every pod): the same plan.
    largest = max_capacity(types)
    far = {resource: len(pods) * largest.get(resource, 0) for resource in remaining}
    far_plan = solve(pods, [], [NodePoolCapacity(make_nodepool("default"), types, {}, far)])
    unlimited = solve(pods, [], [NodePoolCapacity(make_nodepool("default"), types, {}, None)])

    def shape(plan: Plan) -> object:
        return (
            [([p.key for p in c.pods], [t.name for t in c.instance_types]) for c in plan.new_nodeclaims],
            sorted(plan.unschedulable),
        )

    assert shape(far_plan) == shape(unlimited)
