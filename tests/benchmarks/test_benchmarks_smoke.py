"""The scheduling benchmarks still generate what they claim and still run, at their smallest sizes.

No timing is asserted: a unit test on a shared machine cannot say anything
reliable about speed. What is checked is the part a refactoring could
silently break: the shapes of Karpenter's benchmark (the i+1 rule of its
instance types, the fifths of pod kinds), the determinism of the seeded
generators, that a case measures end to end, and that the LP bounds are
ordered as the theory says (single resource ≤ aggregate ≤ assignment ≤ any
plan's price).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import pytest
from benchmarks.compare import FIGURES, SCENARIOS, config_lines, markdown, run_one, scenario_file
from benchmarks.convergence import RULES as CONVERGENCE_RULES
from benchmarks.convergence import run_one as run_convergence
from benchmarks.convergence import table as convergence_table
from benchmarks.decode import list_body
from benchmarks.decode import measure as measure_decode
from benchmarks.node_counts import karpenter_packing, pods_for
from benchmarks.scheduling.checks import plan_violations
from benchmarks.scheduling.lower_bound import (
    assignment_lower_bound,
    configuration_lower_bound,
    lp_lower_bound,
    single_resource_bound,
)
from benchmarks.scheduling.measure import Case, Suite, measure_case, plan_price
from benchmarks.scheduling.report import existing_table, judge_targets, lp_table, speed_table
from benchmarks.scheduling.workloads import (
    GIB,
    KARPENTER_AFFINITY_LABEL_KEY,
    KARPENTER_INSTANCE_TYPE_COUNT,
    KARPENTER_LABEL_KEY,
    KARPENTER_ZONES,
    KIND_LABEL,
    PodKind,
    catalog_pools,
    diverse_pods,
    generic_pods,
    karpenter_diverse_pods,
    karpenter_exact_pools,
    karpenter_instance_types,
    karpenter_pools,
    make_pod,
    mixed_pods,
    mixed_tier_counts,
    spread_constraint,
)
from tests.support import make_instance_type, make_nodepool

from benchmarks import node_counts
from karpy.api.core import Pod
from karpy.api.requirements import LABEL_HOSTNAME, LABEL_ZONE, Requirement
from karpy.scheduling.solver import NewNodeClaim, NodePoolCapacity, Plan, solve


def kind_of(pod: Pod) -> PodKind:
    """A diverse pod's kind, read from its spec (not from the label the generator wrote)."""
    spec = pod.spec
    if spec.topology_spread_constraints:
        (constraint,) = spec.topology_spread_constraints
        assert constraint["maxSkew"] == 1 and constraint["whenUnsatisfiable"] == "DoNotSchedule"
        return PodKind.ZONAL_SPREAD if constraint["topologyKey"] == LABEL_ZONE else PodKind.HOSTNAME_SPREAD
    if spec.pod_affinity:
        assert only_required_term(spec.pod_affinity)["topologyKey"] == LABEL_ZONE
        return PodKind.ZONAL_AFFINITY
    if spec.pod_anti_affinity:
        assert only_required_term(spec.pod_anti_affinity)["topologyKey"] == LABEL_HOSTNAME
        return PodKind.HOSTNAME_ANTI_AFFINITY
    return PodKind.GENERIC


def only_required_term(affinity: Mapping[str, object]) -> Mapping[str, object]:
    terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]
    assert isinstance(terms, list) and len(terms) == 1 and isinstance(terms[0], Mapping)
    return terms[0]


def test_karpenter_instance_types_follow_the_i_plus_one_rule() -> None:
    types = karpenter_instance_types()
    assert len(types) == KARPENTER_INSTANCE_TYPE_COUNT
    for index, instance_type in enumerate(types):
        size = index + 1
        assert instance_type.capacity == {"cpu": size * 1000, "memory": 2 * size * GIB, "pods": 10 * size}
        assert {o.zone for o in instance_type.offerings} == set(KARPENTER_ZONES)
        assert {o.capacity_type for o in instance_type.offerings} == {"spot", "on-demand"}
    prices = [min(o.price for o in t.offerings) for t in types]
    assert abs(prices[99] - 100 * prices[0]) < 1e-9  # proportional to size


def test_diverse_pods_come_in_fifths_with_the_remainder_generic() -> None:
    pods = diverse_pods(103)
    kinds = Counter(kind_of(pod) for pod in pods)
    assert kinds == {
        PodKind.GENERIC: 20 + 3,
        PodKind.ZONAL_SPREAD: 20,
        PodKind.HOSTNAME_SPREAD: 20,
        PodKind.ZONAL_AFFINITY: 20,
        PodKind.HOSTNAME_ANTI_AFFINITY: 20,
    }
    assert all(pod.metadata.labels[KIND_LABEL] == kind_of(pod) for pod in pods)
    assert len({pod.key for pod in pods}) == len(pods)
    assert {pod.spec.requests["cpu"] for pod in pods} <= {100, 250, 500, 1000, 1500}
    # Each constrained pod selects its own group.
    for pod in pods:
        for constraint in pod.spec.topology_spread_constraints:
            selector = constraint["labelSelector"]
            assert isinstance(selector, Mapping)
            assert selector == {"matchLabels": {"group": pod.metadata.labels["group"]}}


def test_karpenters_exact_pods_come_in_fifths_with_its_labels_and_selectors() -> None:
    pods = karpenter_diverse_pods(1003)
    kinds = Counter(kind_of(pod) for pod in pods)
    assert kinds == {kind: 200 + (3 if kind is PodKind.GENERIC else 0) for kind in PodKind}
    assert karpenter_diverse_pods(50) == karpenter_diverse_pods(50)
    spreads = [pod for pod in pods if pod.spec.topology_spread_constraints]
    own = [pod.metadata.labels[KARPENTER_LABEL_KEY] for pod in spreads]
    selected = [
        dict(pod.spec.topology_spread_constraints[0]["labelSelector"]["matchLabels"])[KARPENTER_LABEL_KEY]  # type: ignore[index]
        for pod in spreads
    ]
    # Drawn independently of seven values: about one spread pod in seven selects itself.
    matching = sum(a == b for a, b in zip(own, selected, strict=True))
    assert 0.08 < matching / len(spreads) < 0.22
    generic = [pod for pod in pods if kind_of(pod) is PodKind.GENERIC]
    assert all(set(pod.metadata.labels) == {KARPENTER_LABEL_KEY} for pod in generic)
    for pod in pods:
        if kind_of(pod) is PodKind.ZONAL_AFFINITY:
            term = only_required_term(pod.spec.pod_affinity)
            assert term["labelSelector"] == {"matchLabels": pod.metadata.labels}
            assert set(pod.metadata.labels) == {KARPENTER_AFFINITY_LABEL_KEY}
        if kind_of(pod) is PodKind.HOSTNAME_ANTI_AFFINITY:
            assert pod.metadata.labels == {"app": "nginx"}


def test_karpenters_fake_types_carry_its_three_extra_keys() -> None:
    (pool,) = karpenter_exact_pools()
    by_name = {t.name: t for t in pool.instance_types}
    small, large = by_name["fake-it-3"], by_name["fake-it-4"]  # 4 CPUs / 8Gi, 5 CPUs / 10Gi
    assert small.requirements.get("size").values == frozenset({"small"})
    assert large.requirements.get("size").values == frozenset({"large"})
    assert large.requirements.get("special").values == frozenset({"optional"})
    assert not small.requirements.get("special").values and not small.requirements.get("special").complement
    assert large.requirements.get("integer").values == frozenset({"5"})


def test_karpenters_exact_shapes_are_planned_without_breaking_a_constraint() -> None:
    result = measure_case(Case(Suite.KARPENTER, "karpenter-diverse", "karpenter-exact-400", 700, max_runs=1))
    assert not result.error and result.unschedulable == 0
    assert result.constraints_checked > 0 and result.constraints_broken == 0


def test_a_spread_that_counts_pods_it_does_not_carry_is_checked_as_the_pods_bind() -> None:
    pool = karpenter_pools()[0]
    options = list(pool.instance_types[:4])
    base = pool.nodepool.template.requirement_set()

    def in_zone(zone: str, *on_it: Pod) -> NewNodeClaim:
        requirements = base.copy()
        requirements.add(Requirement.from_operator(LABEL_ZONE, "In", (zone,)))
        return NewNodeClaim("default", requirements, options, list(on_it), {}, {})

    spread = (spread_constraint(LABEL_ZONE, {KARPENTER_LABEL_KEY: "a"}),)
    carriers = [
        make_pod(f"spread-{i}", {KARPENTER_LABEL_KEY: "a"}, 100, GIB, topology_spread_constraints=spread)
        for i in range(3)
    ]
    others = [make_pod(f"generic-{i}", {KARPENTER_LABEL_KEY: "a"}, 100, GIB) for i in range(3)]
    pods = [*carriers, *others]
    # One carrier per zone, the generic pods all in the first: uneven at the end (4, 1, 1),
    # but every carrier kept the rule when it bound, before the generic pods did.
    even_carriers = Plan(
        new_nodeclaims=[
            in_zone(KARPENTER_ZONES[0], carriers[0], *others),
            in_zone(KARPENTER_ZONES[1], carriers[1]),
            in_zone(KARPENTER_ZONES[2], carriers[2]),
        ]
    )
    assert plan_violations(pods, even_carriers, KARPENTER_ZONES).total == 0
    # Two carriers in one zone and none in another: no binding order saves that.
    crowded = Plan(
        new_nodeclaims=[
            in_zone(KARPENTER_ZONES[0], carriers[0], carriers[1], *others),
            in_zone(KARPENTER_ZONES[1], carriers[2]),
        ]
    )
    assert plan_violations(pods, crowded, KARPENTER_ZONES).broken == {"topology spread (zone)": 1}


def test_generators_are_deterministic_for_a_seed() -> None:
    assert diverse_pods(50) == diverse_pods(50)
    assert mixed_pods(50) == mixed_pods(50)
    assert generic_pods(50, seed=1) != generic_pods(50, seed=2)
    assert sum(mixed_tier_counts(1000).values()) == 1000


def test_the_check_catches_anti_affinity_pods_sharing_a_node() -> None:
    pods = [pod for pod in diverse_pods(10) if kind_of(pod) is PodKind.HOSTNAME_ANTI_AFFINITY]
    assert len(pods) == 2
    pool = karpenter_pools()[0]
    requirements = pool.nodepool.template.requirement_set()
    options = list(pool.instance_types[:1])

    def claim(*on_it: Pod) -> NewNodeClaim:
        return NewNodeClaim("default", requirements, options, list(on_it), {}, {})

    apart = Plan(new_nodeclaims=[claim(pods[0]), claim(pods[1])])
    together = Plan(new_nodeclaims=[claim(*pods)])
    assert plan_violations(pods, apart, KARPENTER_ZONES).total == 0
    assert plan_violations(pods, together, KARPENTER_ZONES).broken == {"pod anti-affinity (hostname)": 1}


def test_lp_bounds_are_ordered_below_the_plan_price() -> None:
    pools = catalog_pools()
    for pods in (generic_pods(40), mixed_pods(40)):
        plan = solve(pods, [], pools)
        assert not plan.unschedulable
        single = single_resource_bound(pods, pools)
        aggregate = lp_lower_bound(pods, pools).price
        assignment = assignment_lower_bound(pods, pools).price
        assert 0 < single <= aggregate * (1 + 1e-9)
        configuration = configuration_lower_bound(pods, pools).price
        assert aggregate <= assignment * (1 + 1e-9)
        # The configuration LP is the tightest: its patterns are the assignment LP's with whole pods.
        assert assignment <= configuration * (1 + 1e-6)
        assert configuration <= plan_price(plan) * (1 + 1e-9)


def test_each_suite_measures_its_smallest_case_end_to_end() -> None:
    karpenter = measure_case(Case(Suite.KARPENTER, "diverse", "karpenter-400", 1, max_runs=2))
    catalog = measure_case(Case(Suite.CATALOG, "mixed", "aws-catalog", 1, trace_memory=True, max_runs=2))
    bounded = measure_case(Case(Suite.LP, "generic", "aws-catalog", 5, lower_bound=True, max_runs=2))
    for result in (karpenter, catalog, bounded):
        assert not result.error
        assert result.seconds is not None and result.runs == 2
        assert result.nodeclaims >= 1 and result.unschedulable == 0
        assert result.price > 0
    assert karpenter.nodeclaims == 1 and catalog.nodeclaims == 1  # one pod each
    assert catalog.tracemalloc_peak_bytes is not None and catalog.peak_rss_bytes is not None
    assert bounded.gap is not None and bounded.gap >= 0
    assert bounded.assignment_gap is not None and 0 <= bounded.assignment_gap <= bounded.gap
    assert bounded.configuration_gap is not None and 0 <= bounded.configuration_gap <= bounded.assignment_gap
    assert len(speed_table([karpenter])) == 3
    assert "generic" in lp_table([bounded])[2]
    verdicts = {verdict.name: verdict.verdict for verdict in judge_targets([karpenter, catalog, bounded])}
    assert verdicts["speed"] == "NOT RUN" and verdicts["memory"] == "NOT RUN"


def test_the_existing_suite_puts_pods_on_the_nodes_with_room_first() -> None:
    # 10 nodes: node-00000 has room (4 CPUs, 16Gi), the others are all but full.
    result = measure_case(Case(Suite.EXISTING, "diverse", "karpenter-400", 5, existing=10, max_runs=1))
    assert not result.error and result.unschedulable == 0
    # Five diverse pods, one of each kind, each in a group of its own: all fit the roomy node.
    assert (result.on_existing, result.nodeclaims) == (5, 0)
    assert result.constraints_checked == 4 and result.constraints_broken == 0
    lines = existing_table([result])
    assert lines[2].split()[:2] == ["10", "5"]


def test_the_decode_benchmark_fills_a_cache_under_karpys_gc_setting() -> None:
    seconds, collections, _, peak, cached = measure_decode("karpy", list_body(200))
    assert cached == 200 and seconds > 0 and peak > 0 and collections >= 0


def test_the_convergence_benchmark_measures_a_scenario_under_both_rules() -> None:
    results = [run_convergence("scale-down-30-6", rules) for rules in CONVERGENCE_RULES]
    for result in results:
        assert result.steady and result.running_pods == 6
        assert result.fresh_plan_cost_per_hour > 0 and result.fresh_plan_unschedulable == 0
        # Nothing can be cheaper than a plan made from nothing, but for weights this
        # scenario does not have.
        assert result.cost_ratio is not None and result.cost_ratio >= 1.0 - 1e-9
        assert result.last_change_seconds == 15 * 60
        assert result.evicted_since_last_change <= result.evicted
        assert result.replacements_launched >= 0 and result.commands >= result.commands_rolled_back
        ratio = result.eviction_ratio
        assert ratio is None or ratio >= 1.0 - 1e-9  # the minimum is a lower bound
    assert {result.rules for result in results} == {"karpy", "karpenter"}
    lines = convergence_table(results).splitlines()
    assert len(lines) == 4 and lines[2].startswith("| scale-down-30-6 | karpy |")


def test_the_comparison_runs_both_autoscalers_and_counts_their_configuration() -> None:
    for name, path in SCENARIOS.items():
        lines = config_lines(path)
        assert lines["karpy"] and lines["karpy"] > 10, name
        declared = "clusterAutoscaler:" in scenario_file(path).read_text()
        assert (lines["cluster-autoscaler"] is not None) == declared, name
    result = run_one("walkthrough")
    for autoscaler in ("karpy", "cluster-autoscaler"):
        figures = result.figures[autoscaler]
        assert set(FIGURES) <= set(figures)
        assert figures["scale-up events"] == "1" and figures["pods evicted"] == "0"
    assert "| walkthrough |" in markdown([result])


def test_the_node_count_benchmark_compares_karpys_plans_with_karpenters_packing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(node_counts.WORKLOADS, "small", ((300, "500m", "1Gi"), (40, "2", "8Gi")))
    figures = node_counts.measure("small", "EC2NodeClass maxPods 110")
    bare, default, karpenter = (
        figures["karpy, extra cost 0"],
        figures["karpy, default"],
        figures["Karpenter's packing"],
    )
    assert bare.unschedulable == default.unschedulable == karpenter.unschedulable == 0
    # Karpenter packs each NodeClaim until no type holds more: at most 110 pods each, and
    # never fewer nodes than 340 pods need at 110 a node.
    assert karpenter.nodes >= 4
    assert sum(karpenter.types.values()) == karpenter.nodes
    # Counting each node's cost, karpy's plan has fewer nodes and costs less in all than the
    # plan made without the extra cost (both priced with it), and no more than Karpenter's.
    assert default.nodes < bare.nodes
    assert default.total < bare.total
    assert default.total <= karpenter.total
    lines = node_counts.table({("small", "EC2NodeClass maxPods 110"): figures}).splitlines()
    assert len(lines) == 5 and lines[2].startswith(
        "| small | EC2NodeClass maxPods 110 | karpy, extra cost 0 |"
    )


def test_karpenters_packing_fills_one_nodeclaim_before_opening_the_next_and_launches_the_cheapest_type() -> (
    None
):
    small = make_instance_type("small", cpu=2, memory_gib=8, price=0.10)
    large = make_instance_type("large", cpu=8, memory_gib=32, price=0.35)
    pool = NodePoolCapacity(make_nodepool(), [small, large])
    # Ten 1-CPU pods: the first NodeClaim takes pods until no type holds more (8), the
    # other two open a second, small enough for the cheap type.
    chosen = karpenter_packing(pods_for(((10, "1", "1Gi"),)), pool)
    assert sorted(t.name for t in chosen if t is not None) == ["large", "small"]
    assert None not in chosen
    # A pod no type holds is left out, and counted.
    assert karpenter_packing(pods_for(((1, "16", "1Gi"),)), pool) == [None]


def test_the_from_cluster_benchmark_loads_its_cluster_and_runs_it_to_steady() -> None:
    from benchmarks.from_cluster import measure as measure_from_cluster

    figures = measure_from_cluster(nodes=4, pods_per_node=5)
    assert (figures["nodes"], figures["pods"]) == (4, 20)
    assert figures["nodeclaimsAfterFirstPass"] == 4  # the first pass launches nothing
    assert figures["steady"]
