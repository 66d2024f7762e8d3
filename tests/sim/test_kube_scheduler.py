"""The simulator's stand-in for kube-scheduler: filters, PreferNoSchedule taints then
least-allocated scoring, ties to the first node.

It keeps each kind of pod's nodes in a heap instead of scoring every node
for every pod; the property test checks it binds exactly as scoring them all
would, over random nodes (some tainted, some labelled) and pods.
"""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support import make_pod

from karpy.api.core import Node, NodeCondition, Pod
from karpy.api.meta import ObjectMeta
from karpy.api.quantity import fits, subtract_amounts
from karpy.api.taints import CONSOLIDATION_PLANNED_TAINT_KEY, Taint, untolerated, untolerated_preferences
from karpy.scheduling.solver import pod_requests
from karpy.sim.clock import VirtualClock
from karpy.sim.scheduler import UNSCHEDULABLE_MESSAGE, SimulatedKubeScheduler, _free_fraction
from karpy.sim.store import InMemoryCluster

GIB = 1024**3
TOLERATES_GPU = """  tolerations: [{key: gpu, operator: Exists, effect: NoSchedule}]"""
WANTS_FAST = """  nodeSelector: {disk: fast}"""
TOLERATES_PLANNED = (
    f"  tolerations: [{{key: {CONSOLIDATION_PLANNED_TAINT_KEY}, operator: Exists, effect: PreferNoSchedule}}]"
)
PLANNED = Taint(CONSOLIDATION_PLANNED_TAINT_KEY, "PreferNoSchedule")


def node(
    name: str, cpu: int, memory_gib: int, *, fast: bool = False, gpu: bool = False, planned: bool = False
) -> Node:
    taints = ((Taint("gpu", "NoSchedule"),) if gpu else ()) + ((PLANNED,) if planned else ())
    return Node(
        metadata=ObjectMeta(name=name, labels={"disk": "fast"} if fast else {}),
        taints=taints,
        allocatable={"cpu": cpu * 1000, "memory": memory_gib * GIB, "pods": 110},
        conditions=(NodeCondition("Ready", "True"),),
    )


def bind_all(nodes: list[Node], pods: list[Pod]) -> dict[str, str | None]:
    cluster = InMemoryCluster(VirtualClock())
    for item in [*nodes, *pods]:
        cluster.create(item)
    SimulatedKubeScheduler(cluster).reconcile("schedule")
    return {pod.metadata.name: pod.spec.node_name or None for pod in cluster.pods()}


def scored_one_by_one(nodes: list[Node], pods: list[Pod]) -> dict[str, str | None]:
    """What scoring every node for every pod gives: the reference the heap must agree with.

    A node's rank: fewer untolerated PreferNoSchedule taints first (TaintToleration,
    weighted 3, outweighs least-allocated, weighted 1), then more free, then the first
    registered; a node used beyond its size (free fraction -1 or below) is never chosen.
    """
    free = {item.metadata.name: dict(item.allocatable) for item in nodes}
    result: dict[str, str | None] = {}
    for pod in sorted(pods, key=lambda pod: pod.key):
        requests = pod_requests(pod)
        ranked: list[tuple[int, float, int, str]] = []
        for position, candidate in enumerate(nodes):
            name = candidate.metadata.name
            if not fits(requests, free[name]) or untolerated(candidate.taints, pod.spec.tolerations):
                continue
            if not any(
                option.is_satisfied_by_labels(candidate.metadata.labels) is None
                for option in pod.spec.node_requirements()
            ):
                continue
            score = _free_fraction(free[name], candidate.allocatable)
            if score > -1.0:
                penalty = untolerated_preferences(candidate.taints, pod.spec.tolerations)
                ranked.append((penalty, -score, position, name))
        best = min(ranked)[3] if ranked else None
        result[pod.metadata.name] = best
        if best is not None:
            free[best] = subtract_amounts(free[best], requests)
    return result


def test_the_least_allocated_node_wins_and_ties_go_to_the_node_registered_first() -> None:
    nodes = [node("b", 4, 8), node("a", 4, 8), node("c", 8, 16)]
    pods = [make_pod(f"p{index}", "1", "1Gi") for index in range(1, 6)]
    # All equally free at first: b, registered first, takes p1, then a takes p2. c, the least
    # allocated (8/8 then 7/8 free, against 3/4), takes p3 and p4. Then all are 3/4 free: b.
    assert bind_all(nodes, pods) == {"p1": "b", "p2": "a", "p3": "c", "p4": "c", "p5": "b"}


def test_filters_taints_and_node_selector_and_reports_pods_that_fit_nowhere() -> None:
    nodes = [node("plain", 8, 16), node("gpu", 16, 64, gpu=True), node("fast", 2, 4, fast=True)]
    pods = [
        make_pod("any", "1", "1Gi"),
        make_pod("gpu-ok", "1", "1Gi", extra_spec=TOLERATES_GPU),
        make_pod("fast-only", "1", "1Gi", extra_spec=WANTS_FAST),
        make_pod("too-big", "32", "1Gi"),
    ]
    cluster = InMemoryCluster(VirtualClock())
    for item in [*nodes, *pods]:
        cluster.create(item)
    SimulatedKubeScheduler(cluster).reconcile("schedule")
    bound = {pod.metadata.name: pod.spec.node_name for pod in cluster.pods()}
    assert bound["any"] == "plain" and bound["gpu-ok"] == "gpu" and bound["fast-only"] == "fast"
    assert bound["too-big"] == ""
    too_big = cluster.pod("default", "too-big")
    assert too_big is not None and too_big.unschedulable_reason == UNSCHEDULABLE_MESSAGE.format(nodes=3)


def test_a_node_used_beyond_its_size_is_never_chosen() -> None:
    """A node whose bound pods ask for twice what it has scores below -1: even a pod asking
    for nothing is not put there (the least-allocated score starts from a floor of -1)."""
    cluster = InMemoryCluster(VirtualClock())
    cluster.create(node("n1", 1, 1))
    hog = make_pod("hog", "2", "2Gi")
    cluster.create(hog.with_changes(spec=dataclasses.replace(hog.spec, node_name="n1")))
    tiny = make_pod("tiny", "1", "1Gi")
    cluster.create(tiny.with_changes(spec=dataclasses.replace(tiny.spec, requests={})))
    SimulatedKubeScheduler(cluster).reconcile("schedule")
    placed = cluster.pod("default", "tiny")
    assert placed is not None and placed.spec.node_name == ""


def test_a_node_marked_for_a_planned_consolidation_takes_pods_only_when_no_other_fits() -> None:
    # "empty" is the least allocated but marked: the fuller, unmarked node wins, as
    # kube-scheduler's TaintToleration score (weight 3) outweighs least-allocated (weight 1).
    nodes = [node("busy", 4, 8), node("empty", 16, 32, planned=True)]
    cluster = InMemoryCluster(VirtualClock())
    for item in nodes:
        cluster.create(item)
    resident = make_pod("resident", "2", "4Gi")
    cluster.create(resident.with_changes(spec=dataclasses.replace(resident.spec, node_name="busy")))
    for name in ("a", "b", "c"):
        cluster.create(make_pod(name, "1", "1Gi"))
    # Bound after a (pods go in name order here), while "busy" still has room.
    cluster.create(make_pod("aa-tolerant", "1", "1Gi", extra_spec=TOLERATES_PLANNED))
    SimulatedKubeScheduler(cluster).reconcile("schedule")
    bound = {pod.metadata.name: pod.spec.node_name for pod in cluster.pods()}
    # a and b fill "busy"; c fits only on the marked node, which is a preference, not a fence.
    assert (bound["a"], bound["b"], bound["c"]) == ("busy", "busy", "empty")
    # A pod that tolerates the taint sees two nodes alike but for use: the least allocated wins.
    assert bound["aa-tolerant"] == "empty"


node_shapes = st.lists(
    st.tuples(st.integers(1, 8), st.integers(1, 16), st.booleans(), st.booleans(), st.booleans()),
    min_size=1,
    max_size=8,
)
pod_shapes = st.lists(
    st.tuples(
        st.sampled_from(["250m", "500m", "1", "2"]),
        st.sampled_from(["256Mi", "1Gi", "3Gi"]),
        st.integers(0, 3),
    ),
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(node_shapes=node_shapes, pod_shapes=pod_shapes)
def test_binds_exactly_as_scoring_every_node_would(
    node_shapes: list[tuple[int, int, bool, bool, bool]], pod_shapes: list[tuple[str, str, int]]
) -> None:
    nodes = [
        node(f"n{index}", cpu, memory, fast=fast, gpu=gpu, planned=planned)
        for index, (cpu, memory, fast, gpu, planned) in enumerate(node_shapes)
    ]
    extras = ["", TOLERATES_GPU, WANTS_FAST, TOLERATES_PLANNED]
    pods = [
        make_pod(f"p{index:02d}", cpu, memory, extra_spec=extras[extra])
        for index, (cpu, memory, extra) in enumerate(pod_shapes)
    ]
    assert bind_all(nodes, pods) == scored_one_by_one(nodes, pods)
