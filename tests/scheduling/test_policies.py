"""MIN_VALUES_POLICY and PREFERENCE_POLICY (karpy.scheduling.policy): what the solver plans under each."""

from __future__ import annotations

from tests.scheduling.test_constraints import ZONES, app_pods, pool, zone_of
from tests.support import make_instance_type

from karpy.api.requirements import LABEL_ARCH, LABEL_INSTANCE_TYPE
from karpy.scheduling.policy import SchedulingPolicy
from karpy.scheduling.solver import MAX_INSTANCE_TYPES, solve

IGNORE = SchedulingPolicy(preferences="Ignore")
BEST_EFFORT = SchedulingPolicy(min_values="BestEffort")

PREFER_ZONE_C = """  affinity:
    nodeAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
        - weight: 50
          preference:
            matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [zone-c]}]"""
SOFT_ZONE_SPREAD = """  topologySpreadConstraints:
    - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway,
       labelSelector: {matchLabels: {app: web}}}"""
SOFT_HOST_ANTI_AFFINITY = """  affinity:
    podAntiAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
        - weight: 100
          podAffinityTerm: {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: web}}}"""
REQUIRED_HOST_ANTI_AFFINITY = """  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: web}}}"""


def test_ignore_drops_a_preferred_node_affinity() -> None:
    pods = app_pods(1, PREFER_ZONE_C)
    assert zone_of(solve(pods, [], [pool()]), pods[0]) == "zone-c"
    ignored = solve(pods, [], [pool()], policy=IGNORE)
    claim = ignored.new_nodeclaims[0]
    # Any zone will do: the NodeClaim is not pinned to the preferred one, and nothing counts as relaxed.
    assert claim.requirements.get("topology.kubernetes.io/zone").has("zone-a")
    assert ignored.relaxed == {}


def test_ignore_drops_schedule_anyway_spreads_and_preferred_anti_affinity() -> None:
    for spec in (SOFT_ZONE_SPREAD, SOFT_HOST_ANTI_AFFINITY):
        pods = app_pods(3, spec)
        assert len(solve(pods, [], [pool()]).new_nodeclaims) == 3
        assert len(solve(pods, [], [pool()], policy=IGNORE).new_nodeclaims) == 1


def test_ignore_keeps_what_is_required() -> None:
    pods = app_pods(3, REQUIRED_HOST_ANTI_AFFINITY)
    assert len(solve(pods, [], [pool()], policy=IGNORE).new_nodeclaims) == 3


MIN_THREE_TYPES = (
    "      requirements:\n        - {key: node.kubernetes.io/instance-type, operator: Exists, minValues: 3}"
)


def test_best_effort_launches_with_fewer_values_and_lowers_min_values_to_what_is_offered() -> None:
    # Two types have room for a 4-CPU pod and the pool wants three.
    pods = app_pods(1, "", cpu="4")
    assert solve(pods, [], [pool(template_spec=MIN_THREE_TYPES)]).new_nodeclaims == []
    plan = solve(pods, [], [pool(template_spec=MIN_THREE_TYPES)], policy=BEST_EFFORT)
    assert plan.unschedulable == {}
    claim = plan.new_nodeclaims[0]
    assert claim.min_values_relaxed
    assert sorted(t.name for t in claim.instance_types) == ["arm.8x", "large.8x"]
    assert claim.requirements.get(LABEL_INSTANCE_TYPE).min_values == 2


def test_best_effort_relaxes_nothing_that_can_be_met() -> None:
    # Small pods: all three types fit, and a NodeClaim keeps them all rather than relax.
    plan = solve(app_pods(4, ""), [], [pool(template_spec=MIN_THREE_TYPES)], policy=BEST_EFFORT)
    assert [claim.min_values_relaxed for claim in plan.new_nodeclaims] == [False]
    assert plan.new_nodeclaims[0].requirements.get(LABEL_INSTANCE_TYPE).min_values == 3


def test_a_big_pod_relaxed_does_not_drag_small_ones_below_min_values() -> None:
    # The small pods find a NodeClaim meeting minValues first; only the big one is relaxed.
    pods = [*app_pods(2, "", app="small"), *app_pods(1, "", app="big", cpu="4")]
    plan = solve(pods, [], [pool(template_spec=MIN_THREE_TYPES)], policy=BEST_EFFORT)
    assert plan.unschedulable == {}
    relaxed = {claim.min_values_relaxed for claim in plan.new_nodeclaims for _ in claim.pods}
    assert relaxed == {False, True}
    for claim in plan.new_nodeclaims:
        big = any(pod.metadata.name.startswith("big") for pod in claim.pods)
        assert claim.min_values_relaxed == big


def test_best_effort_lists_more_than_the_cheapest_sixty_types_before_relaxing() -> None:
    # Karpenter's BestEffort cuts a NodeClaim to its 60 cheapest types and relaxes the minValues
    # that cut breaks (here: every cheap type is amd64, so kubernetes.io/arch would drop to one
    # value). karpy keeps the fewest cheapest types that still meet it, and relaxes nothing.
    amd = [make_instance_type(f"amd-{i:02}.2x", 2, 8, 0.10 + i / 1000, zones=ZONES) for i in range(65)]
    arm = [
        make_instance_type(f"arm-{i}.2x", 2, 8, 0.20 + i / 1000, arch="arm64", zones=ZONES) for i in range(3)
    ]
    both = "values: [amd64, arm64], minValues: 2"
    spec = f"      requirements:\n        - {{key: kubernetes.io/arch, operator: In, {both}}}"
    plan = solve(app_pods(1, ""), [], [pool(template_spec=spec, types=[*amd, *arm])], policy=BEST_EFFORT)
    claim = plan.new_nodeclaims[0]
    assert not claim.min_values_relaxed
    assert len(claim.instance_types) > MAX_INSTANCE_TYPES
    assert {t.requirements.get(LABEL_ARCH).any() for t in claim.instance_types} == {"amd64", "arm64"}
