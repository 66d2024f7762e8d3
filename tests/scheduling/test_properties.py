"""Properties every plan must have, whatever the input (hypothesis)."""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support import make_instance_type, make_nodepool, make_pod

from karpy.api.core import Pod
from karpy.api.instancetype import InstanceType
from karpy.api.quantity import add_amounts, fits
from karpy.api.taints import NO_SCHEDULE, Taint, Toleration
from karpy.scheduling.solver import NodePoolCapacity, Plan, max_capacity, pod_requests, solve

ARCHES = ("amd64", "arm64")
ANTI = {
    "requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"group": "solo"}}}
    ]
}


@st.composite
def instance_types(draw: st.DrawFn) -> list[InstanceType]:
    count = draw(st.integers(1, 5))
    result = []
    for index in range(count):
        cpu = draw(st.integers(1, 16))
        result.append(
            make_instance_type(
                f"t{index}.{cpu}x",
                cpu,
                draw(st.integers(1, 64)),
                draw(st.floats(0.01, 2.0)),
                arch=draw(st.sampled_from(ARCHES)),
                pods=draw(st.integers(1, 30)),
            )
        )
    return result


@st.composite
def pods(draw: st.DrawFn) -> list[Pod]:
    count = draw(st.integers(1, 25))
    result = []
    for index in range(count):
        pod = make_pod(f"p{index}", f"{draw(st.integers(50, 6000))}m", f"{draw(st.integers(16, 8192))}Mi")
        labels = {"group": draw(st.sampled_from(["solo", "web", "batch"]))}
        spec = pod.spec
        if draw(st.booleans()):
            spec = dataclasses.replace(
                spec, node_selector={"kubernetes.io/arch": draw(st.sampled_from(ARCHES))}
            )
        if labels["group"] == "solo":
            spec = dataclasses.replace(spec, pod_anti_affinity=ANTI)
        if draw(st.booleans()):
            spec = dataclasses.replace(spec, tolerations=(Toleration(key="dedicated", operator="Exists"),))
        result.append(pod.with_changes(metadata=dataclasses.replace(pod.metadata, labels=labels), spec=spec))
    return result


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[Pod], list[NodePoolCapacity]]:
    pools = []
    for index in range(draw(st.integers(1, 3))):
        tainted = draw(st.booleans())
        template = "      taints: [{key: dedicated, effect: NoSchedule}]" if tainted else ""
        nodepool = make_nodepool(f"pool{index}", f"  weight: {draw(st.integers(1, 100))}", template)
        remaining = draw(
            st.one_of(
                st.none(),
                st.fixed_dictionaries(
                    {"cpu": st.integers(0, 40).map(lambda cpus: cpus * 1000)},
                    optional={
                        "memory": st.integers(0, 128).map(lambda gib: gib * 1024**3),
                        "nodes": st.integers(0, 8),
                    },
                ),
            )
        )
        overhead = {"cpu": draw(st.integers(0, 500)), "pods": draw(st.integers(0, 2))}
        pools.append(NodePoolCapacity(nodepool, draw(instance_types()), overhead, remaining))
    return draw(pods()), pools


def check_plan(plan: Plan, all_pods: list[Pod], pools: list[NodePoolCapacity]) -> None:
    by_pool = {pool.nodepool.name: pool for pool in pools}
    placed: list[str] = list(plan.existing)
    reserved: dict[str, dict[str, int]] = {}
    for claim in plan.new_nodeclaims:
        pool = by_pool[claim.nodepool]
        assert claim.instance_types, "a NodeClaim without options"
        total: dict[str, int] = {}
        for pod in claim.pods:
            total = add_amounts(total, pod_requests(pod))
            placed.append(pod.key)
            # Taints: every pod tolerates the pool's NoSchedule taints.
            for taint in pool.nodepool.template.taints:
                if taint.effect == NO_SCHEDULE:
                    assert any(t.tolerates(taint) for t in pod.spec.tolerations)
            # Node selector: every option carries the label the pod asks for.
            for key, value in pod.spec.node_selector.items():
                assert all(t.requirements.get(key).has(value) for t in claim.instance_types)
        for instance_type in claim.instance_types:
            # Resources: every option fits all its pods plus the DaemonSets.
            assert fits(add_amounts(total, pool.overhead(instance_type)), instance_type.allocatable)
        solos = [pod for pod in claim.pods if pod.metadata.labels["group"] == "solo"]
        assert len(solos) <= 1, "hostname anti-affinity broken"
        reserved[claim.nodepool] = add_amounts(
            reserved.get(claim.nodepool, {}), max_capacity(claim.instance_types)
        )
    # Limits: the largest option of every NodeClaim together stays within the pool's limit.
    for name, amounts in reserved.items():
        remaining = by_pool[name].remaining
        if remaining is not None:
            for resource, limit in remaining.items():
                assert amounts.get(resource, 0) <= limit
    # Every pod is accounted for exactly once.
    assert sorted(placed + list(plan.unschedulable)) == sorted(pod.key for pod in all_pods)


def shape(plan: Plan) -> object:
    return (
        sorted(plan.existing.items()),
        [
            (c.nodepool, [p.key for p in c.pods], [t.name for t in c.instance_types])
            for c in plan.new_nodeclaims
        ],
        sorted(plan.unschedulable.items()),
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.randoms(use_true_random=False))
def test_every_plan_respects_every_hard_constraint_and_is_deterministic(
    scenario: tuple[list[Pod], list[NodePoolCapacity]], shuffler: object
) -> None:
    all_pods, pools = scenario
    plan = solve(all_pods, [], pools)
    check_plan(plan, all_pods, pools)
    shuffled = list(all_pods)
    shuffler.shuffle(shuffled)  # type: ignore[attr-defined]
    assert shape(solve(shuffled, [], list(reversed(pools)))) == shape(plan)


def test_taint_helper_is_consistent() -> None:
    # The property above relies on Toleration.tolerates for its taint check.
    assert Toleration(key="dedicated", operator="Exists").tolerates(Taint("dedicated", NO_SCHEDULE))
