"""Table-driven tests for every kind of pod constraint the solver honours.

Each test states what must be placed where, or what must stay pending and why.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
from tests.support import make_instance_type, make_nodepool, make_pod

from karpy.api.core import Pod
from karpy.api.instancetype import InstanceType
from karpy.api.quantity import ResourceAmounts
from karpy.api.requirements import LABEL_HOSTNAME, LABEL_ZONE, Requirements
from karpy.scheduling.constraints import pod_constraints
from karpy.scheduling.solver import ExistingCapacity, NodePoolCapacity, Plan, solve

ZONES = ("zone-a", "zone-b", "zone-c")
TYPES = [
    make_instance_type("small.2x", 2, 4, 0.10, zones=ZONES),
    make_instance_type("large.8x", 8, 32, 0.40, zones=ZONES),
    make_instance_type("arm.8x", 8, 32, 0.32, arch="arm64", zones=ZONES),
]


def pool(
    name: str = "default",
    *,
    spec: str = "",
    template_spec: str = "",
    types: list[InstanceType] | None = None,
    overhead: ResourceAmounts | None = None,
    type_overhead: dict[str, ResourceAmounts] | None = None,
) -> NodePoolCapacity:
    return NodePoolCapacity(
        make_nodepool(name, spec, template_spec), types or TYPES, overhead or {}, None, type_overhead or {}
    )


def app_pods(count: int, spec: str, app: str = "web", cpu: str = "500m") -> list[Pod]:
    return [
        make_pod(f"{app}-{i}", cpu, "512Mi", labels=f"{{app: {app}}}", extra_spec=spec) for i in range(count)
    ]


def zone_of(plan: Plan, pod: Pod) -> str:
    for claim in plan.new_nodeclaims:
        if pod in claim.pods:
            zone = claim.requirements.get(LABEL_ZONE)
            assert not zone.complement and len(zone.values) == 1, f"zone not pinned: {zone}"
            return next(iter(zone.values))
    raise AssertionError(f"{pod.key} not on a new NodeClaim")


def node(name: str, zone: str, pods: tuple[Pod, ...] = (), cpu: int = 8000) -> ExistingCapacity:
    return ExistingCapacity(
        name=name,
        nodepool="default",
        requirements=Requirements.from_labels(
            {
                LABEL_ZONE: zone,
                LABEL_HOSTNAME: name,
                "kubernetes.io/arch": "amd64",
                "karpenter.sh/nodepool": "default",
            }
        ),
        taints=(),
        available={"cpu": cpu, "memory": 32 * 1024**3, "pods": 100},
        pods=pods,
    )


ZONE_SPREAD = """  topologySpreadConstraints:
    - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule,
       labelSelector: {matchLabels: {app: web}}}"""


def test_zonal_spread_puts_pods_evenly_across_zones() -> None:
    pods = app_pods(6, ZONE_SPREAD)
    plan = solve(pods, [], [pool()])
    assert plan.unschedulable == {}
    assert Counter(zone_of(plan, pod) for pod in pods) == {"zone-a": 2, "zone-b": 2, "zone-c": 2}


@pytest.mark.parametrize("zones", ["[zone-a, zone-b, zone-c]", "[zone-a, zone-b]"])
def test_zonal_spread_is_kept_when_the_pool_lists_its_zones(zones: str) -> None:
    # Karpenter's docs list the zones in the NodePool; each NodeClaim must still be pinned to one
    # zone, or several pods share a NodeClaim whose zone the cloud picks.
    requirement = f"{{key: topology.kubernetes.io/zone, operator: In, values: {zones}}}"
    listed = pool(template_spec=f"      requirements: [{requirement}]")
    pods = app_pods(6, ZONE_SPREAD)
    plan = solve(pods, [], [listed])
    counts = Counter(zone_of(plan, pod) for pod in pods)
    assert sorted(counts.values()) == [6 // len(counts)] * len(counts)
    assert len(counts) == zones.count("zone")


def test_zonal_spread_counts_pods_already_running() -> None:
    running = tuple(app_pods(2, ""))
    pods = [
        make_pod(f"new-{i}", "500m", "512Mi", labels="{app: web}", extra_spec=ZONE_SPREAD) for i in range(4)
    ]
    plan = solve(pods, [node("node-a", "zone-a", running, cpu=0)], [pool()])
    zones = Counter(zone_of(plan, pod) for pod in pods)
    # zone-a already has 2: the new pods go to b and c first.
    assert zones == {"zone-b": 2, "zone-c": 2}


def test_zonal_spread_respects_the_pods_own_zone_requirement() -> None:
    spec = ZONE_SPREAD + "\n  nodeSelector: {topology.kubernetes.io/zone: zone-c}"
    pods = app_pods(3, spec)
    plan = solve(pods, [], [pool()])
    # nodeAffinityPolicy Honor: only zone-c is eligible, so skew is measured there alone.
    assert plan.unschedulable == {}
    assert {zone_of(plan, pod) for pod in pods} == {"zone-c"}


def test_hostname_spread_puts_one_pod_per_node() -> None:
    spec = """  topologySpreadConstraints:
    - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule,
       labelSelector: {matchLabels: {app: web}}}"""
    plan = solve(app_pods(4, spec), [], [pool()])
    assert [len(claim.pods) for claim in plan.new_nodeclaims] == [1, 1, 1, 1]


def test_hostname_anti_affinity_puts_one_pod_per_node() -> None:
    spec = """  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: web}}}"""
    plan = solve(app_pods(3, spec), [], [pool()])
    assert [len(claim.pods) for claim in plan.new_nodeclaims] == [1, 1, 1]
    # The cheapest option fits each one-pod node.
    assert all(claim.instance_types[0].name == "small.2x" for claim in plan.new_nodeclaims)


def test_anti_affinity_keeps_pods_off_a_node_running_a_selected_pod() -> None:
    running = (make_pod("db-0", labels="{app: db}"),)
    spec = """  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: db}}}"""
    plan = solve(app_pods(1, spec), [node("node-a", "zone-a", running)], [pool()])
    assert plan.existing == {}
    assert len(plan.new_nodeclaims) == 1


def test_inverse_anti_affinity_of_a_running_pod_is_respected() -> None:
    # The running pod refuses company; the new pod has no constraint of its own.
    running = (
        make_pod(
            "loner",
            labels="{app: loner}",
            extra_spec="""  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: web}}}""",
        ),
    )
    plan = solve(app_pods(1, ""), [node("node-a", "zone-a", running)], [pool()])
    assert plan.existing == {}
    assert len(plan.new_nodeclaims) == 1


def test_zonal_self_affinity_keeps_a_group_in_one_zone() -> None:
    spec = """  affinity:
    podAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - {topologyKey: topology.kubernetes.io/zone, labelSelector: {matchLabels: {app: web}}}"""
    pods = app_pods(20, spec, cpu="1")
    plan = solve(pods, [], [pool()])
    assert plan.unschedulable == {}
    assert len({zone_of(plan, pod) for pod in pods}) == 1


def test_pod_affinity_follows_a_running_pod_into_its_zone() -> None:
    running = (make_pod("cache-0", labels="{app: cache}"),)
    spec = """  affinity:
    podAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - {topologyKey: topology.kubernetes.io/zone, labelSelector: {matchLabels: {app: cache}}}"""
    pods = app_pods(2, spec, cpu="4")
    plan = solve(pods, [node("node-b", "zone-b", running, cpu=0)], [pool()])
    assert {zone_of(plan, pod) for pod in pods} == {"zone-b"}


def test_pod_affinity_to_a_pod_that_runs_nowhere_stays_pending() -> None:
    spec = """  affinity:
    podAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - {topologyKey: topology.kubernetes.io/zone, labelSelector: {matchLabels: {app: ghost}}}"""
    plan = solve(app_pods(1, spec), [], [pool()])
    assert "pod affinity" in plan.unschedulable["default/web-0"]


def test_host_ports_keep_two_pods_off_one_node() -> None:
    pods = [_with_host_port(make_pod(f"proxy-{i}"), 8080) for i in range(2)]
    plan = solve(pods, [], [pool()])
    assert [len(claim.pods) for claim in plan.new_nodeclaims] == [1, 1]
    other_port = solve([pods[0], _with_host_port(make_pod("other"), 9090)], [], [pool()])
    assert [len(claim.pods) for claim in other_port.new_nodeclaims] == [2]


def _with_host_port(pod: Pod, port: int) -> Pod:
    return pod.with_changes(spec=dataclasses.replace(pod.spec, host_ports=(port,)))


def test_preferred_node_affinity_is_honoured_when_possible() -> None:
    spec = """  affinity:
    nodeAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
        - weight: 50
          preference: {matchExpressions: [{key: kubernetes.io/arch, operator: In, values: [arm64]}]}"""
    plan = solve(app_pods(1, spec), [], [pool()])
    assert [t.name for t in plan.new_nodeclaims[0].instance_types] == ["arm.8x"]
    assert plan.relaxed == {}


def test_preferred_node_affinity_is_given_up_when_it_cannot_be_met() -> None:
    spec = """  affinity:
    nodeAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
        - weight: 50
          preference: {matchExpressions: [{key: kubernetes.io/arch, operator: In, values: [s390x]}]}"""
    plan = solve(app_pods(1, spec), [], [pool()])
    assert plan.unschedulable == {}
    assert plan.relaxed["default/web-0"] == ("a preferred node affinity term",)


def test_schedule_anyway_spread_is_relaxed_rather_than_leaving_pods_pending() -> None:
    # nodeAffinityPolicy Ignore: skew is measured over every zone, not just the pod's.
    spec = """  topologySpreadConstraints:
    - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway,
       nodeAffinityPolicy: Ignore, labelSelector: {matchLabels: {app: web}}}
  nodeSelector: {topology.kubernetes.io/zone: zone-a}"""
    running = tuple(app_pods(3, ""))
    plan = solve(app_pods(1, spec, app="web"), [node("node-a", "zone-a", running, cpu=0)], [pool()])
    # Honouring the preference would need zone-b or zone-c, which the nodeSelector forbids.
    assert plan.unschedulable == {}
    assert "a ScheduleAnyway topology spread constraint" in plan.relaxed["default/web-0"]


def test_do_not_schedule_spread_with_node_affinity_ignored_leaves_the_pod_pending() -> None:
    spec = """  topologySpreadConstraints:
    - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule,
       nodeAffinityPolicy: Ignore, labelSelector: {matchLabels: {app: web}}}
  nodeSelector: {topology.kubernetes.io/zone: zone-a}"""
    running = tuple(app_pods(3, ""))
    plan = solve(app_pods(1, spec, app="web"), [node("node-a", "zone-a", running, cpu=0)], [pool()])
    assert "topology spread" in plan.unschedulable["default/web-0"]


def test_min_domains_treats_missing_domains_as_empty() -> None:
    # Only zone-a is eligible, but minDomains 3 makes the global minimum 0.
    spec = """  topologySpreadConstraints:
    - {maxSkew: 1, minDomains: 3, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule,
       labelSelector: {matchLabels: {app: web}}}
  nodeSelector: {topology.kubernetes.io/zone: zone-a}"""
    plan = solve(app_pods(3, spec), [], [pool()])
    assert len(plan.unschedulable) == 2


def test_the_first_of_several_required_node_terms_is_dropped_when_it_cannot_be_met() -> None:
    spec = """  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
          - matchExpressions: [{key: kubernetes.io/arch, operator: In, values: [s390x]}]
          - matchExpressions: [{key: kubernetes.io/arch, operator: In, values: [arm64]}]"""
    plan = solve(app_pods(1, spec), [], [pool()])
    assert [t.name for t in plan.new_nodeclaims[0].instance_types] == ["arm.8x"]


def test_prefer_no_schedule_taints_are_avoided_while_another_pool_can_take_the_pod() -> None:
    tainted = pool(
        "tainted",
        spec="  weight: 90",
        template_spec="      taints: [{key: spot-heavy, effect: PreferNoSchedule}]",
    )
    plain = pool("plain", spec="  weight: 10")
    plan = solve(app_pods(1, ""), [], [tainted, plain])
    assert [claim.nodepool for claim in plan.new_nodeclaims] == ["plain"]
    only_tainted = solve(app_pods(1, ""), [], [tainted])
    assert [claim.nodepool for claim in only_tainted.new_nodeclaims] == ["tainted"]
    assert only_tainted.relaxed["default/web-0"] == ("PreferNoSchedule taints",)


def test_no_execute_taints_keep_intolerant_pods_off() -> None:
    tainted = pool(template_spec="      taints: [{key: maintenance, effect: NoExecute}]")
    plan = solve(app_pods(1, ""), [], [tainted])
    assert "does not tolerate taint maintenance:NoExecute" in plan.unschedulable["default/web-0"]


def test_spread_over_a_custom_label_the_node_pools_set_counts_their_values_as_domains() -> None:
    # Karpenter's on-demand/spot ratio split: no instance type has the label, the pools'
    # requirements give its values, and the pods spread over all five.
    spread = """  topologySpreadConstraints:
    - {maxSkew: 1, topologyKey: capacity-spread, whenUnsatisfiable: DoNotSchedule,
       labelSelector: {matchLabels: {app: web}}}"""
    pools = [
        pool(
            name,
            template_spec=f"      requirements: [{{key: capacity-spread, operator: In, values: {values}}}]",
        )
        for name, values in (("on-demand", '["1"]'), ("spot", '["2", "3", "4", "5"]'))
    ]
    plan = solve(app_pods(10, spread), [], pools)
    assert plan.unschedulable == {}
    domains = Counter(
        next(iter(claim.requirements.get("capacity-spread").values))
        for claim in plan.new_nodeclaims
        for _ in claim.pods
    )
    assert domains == {"1": 2, "2": 2, "3": 2, "4": 2, "5": 2}


def test_min_values_keeps_enough_instance_types() -> None:
    spec_pool = pool(
        template_spec=(
            "      requirements:\n"
            "        - {key: node.kubernetes.io/instance-type, operator: Exists, minValues: 2}"
        )
    )
    plan = solve(app_pods(1, "", cpu="4"), [], [spec_pool])
    claim = plan.new_nodeclaims[0]
    assert len(claim.instance_types) >= 2
    # Too big for all but one type: minValues cannot be met, the pod stays pending.
    big = solve(app_pods(1, "", cpu="7900m"), [], [spec_pool])
    assert big.new_nodeclaims == [] or len(big.new_nodeclaims[0].instance_types) >= 2


def test_min_values_the_fitting_types_cannot_meet_is_the_reason_given() -> None:
    # Two types have room for a 4-CPU pod and the pool wants three: the pod stays pending
    # because of minValues, which is what its reason must say (it has no topology constraint).
    spec_pool = pool(
        template_spec=(
            "      requirements:\n"
            "        - {key: node.kubernetes.io/instance-type, operator: Exists, minValues: 3}"
        )
    )
    assert solve(app_pods(1, "", cpu="1"), [], [spec_pool]).unschedulable == {}
    plan = solve(app_pods(1, "", cpu="4"), [], [spec_pool])
    assert plan.new_nodeclaims == []
    assert list(plan.unschedulable.values()) == [
        "NodePool default: the instance types that fit the pod do not satisfy minValues"
        " (node.kubernetes.io/instance-type: 2 values, minValues 3)"
    ]


def test_daemonset_overhead_counts_only_on_the_types_the_daemonset_runs_on() -> None:
    arm_agent = {"cpu": 4000, "memory": 1024**3, "pods": 1}
    with_agent = pool(overhead=arm_agent, type_overhead={"small.2x": {}, "large.8x": {}})
    plan = solve(app_pods(1, "", cpu="5"), [], [with_agent])
    # 5 CPUs + the 4-CPU arm64-only agent do not fit arm.8x; on large.8x the agent does not run.
    assert [t.name for t in plan.new_nodeclaims[0].instance_types] == ["large.8x"]


def test_extended_resources_need_a_type_that_offers_them() -> None:
    gpu = make_instance_type("gpu.4x", 4, 16, 1.2, zones=ZONES)
    gpu = InstanceType.build(
        gpu.name, gpu.requirements, gpu.offerings, {**gpu.capacity, "nvidia.com/gpu": 1}, gpu.overhead
    )
    pod = make_pod("trainer", "1", "1Gi")
    pod = pod.with_changes(spec=_with_requests(pod, {"nvidia.com/gpu": 1}))
    plan = solve([pod], [], [pool(types=[*TYPES, gpu])])
    assert [t.name for t in plan.new_nodeclaims[0].instance_types] == ["gpu.4x"]


def _with_requests(pod: Pod, extra: ResourceAmounts) -> object:
    return dataclasses.replace(pod.spec, requests={**pod.spec.requests, **extra})


def test_malformed_constraints_leave_the_pod_pending_with_a_reason_not_a_crash() -> None:
    # Built directly: the manifest reader would already refuse most of these.
    def raw(name: str, **spec_changes: object) -> Pod:
        pod = make_pod(name)
        return pod.with_changes(spec=dataclasses.replace(pod.spec, **spec_changes))  # type: ignore[arg-type]

    zone = "topology.kubernetes.io/zone"
    pods = [
        raw("a", topology_spread_constraints=({"maxSkew": 0, "topologyKey": zone},)),
        raw(
            "b",
            pod_affinity={
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "topologyKey": zone,
                        "labelSelector": {"matchExpressions": [{"key": "app", "operator": "Near"}]},
                    }
                ]
            },
        ),
        raw(
            "c", pod_anti_affinity={"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {}}]}
        ),
        raw("d", pod_affinity={"requiredDuringSchedulingIgnoredDuringExecution": "not-a-list"}),
        raw(
            "e",
            topology_spread_constraints=({"maxSkew": 1, "topologyKey": zone, "whenUnsatisfiable": "Maybe"},),
        ),
        make_pod("fine"),
    ]
    plan = solve(pods, [], [pool()])
    assert "maxSkew" in plan.unschedulable["default/a"]
    assert "unknown operator" in plan.unschedulable["default/b"]
    assert "topologyKey" in plan.unschedulable["default/c"]
    assert "expected a list" in plan.unschedulable["default/d"]
    assert "whenUnsatisfiable" in plan.unschedulable["default/e"]
    assert "default/fine" not in plan.unschedulable


def test_a_topology_key_no_node_has_leaves_the_pod_pending() -> None:
    spec = """  topologySpreadConstraints:
    - {maxSkew: 1, topologyKey: example.com/rack, whenUnsatisfiable: DoNotSchedule,
       labelSelector: {matchLabels: {app: web}}}"""
    plan = solve(app_pods(1, spec), [], [pool()])
    assert "example.com/rack" in plan.unschedulable["default/web-0"]


def test_a_zonal_volume_pins_the_pods_zone() -> None:
    volume_zone = Requirements.from_labels({LABEL_ZONE: "zone-b"})
    pods = app_pods(2, "")
    plan = solve(pods, [], [pool()], {pods[0].key: (volume_zone,)})
    assert zone_of(plan, pods[0]) == "zone-b"
    # The other pod has no volume; it is free to go anywhere (and joins the same NodeClaim).
    assert plan.unschedulable == {}


def test_a_volume_in_a_zone_the_pod_cannot_use_leaves_it_pending() -> None:
    pods = app_pods(1, "  nodeSelector: {topology.kubernetes.io/zone: zone-a}")
    plan = solve(pods, [], [pool()], {pods[0].key: (Requirements.from_labels({LABEL_ZONE: "zone-c"}),)})
    assert "default/web-0" in plan.unschedulable


ANTI_AFFINITY_TO_TEAM_WEB = """  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - topologyKey: kubernetes.io/hostname
          labelSelector: {matchLabels: {app: cache}}
          namespaceSelector: {matchExpressions: [{key: team, operator: In, values: [web]}]}
          namespaces: [ops]"""


def test_a_namespace_selector_selects_namespaces_by_their_labels_and_adds_the_named_ones() -> None:
    pod = make_pod("loner", namespace="batch", extra_spec=ANTI_AFFINITY_TO_TEAM_WEB)
    namespaces = {
        "shop": {"team": "web", "kubernetes.io/metadata.name": "shop"},
        "batch": {"team": "data", "kubernetes.io/metadata.name": "batch"},
        "ops": {"kubernetes.io/metadata.name": "ops"},
    }
    (term,) = pod_constraints(pod, namespace_labels=namespaces).anti_affinity
    assert term.selects.namespaces == frozenset({"shop", "ops"})
    assert term.selects.matches_labels("shop", {"app": "cache"})
    assert not term.selects.matches_labels("batch", {"app": "cache"})
    # Without the namespaces' labels only the name label is known: no namespace is team=web.
    (unresolved,) = pod_constraints(pod).anti_affinity
    assert not unresolved.selects.matches_labels("shop", {"app": "cache"})
    assert unresolved.selects.matches_labels("ops", {"app": "cache"})


def test_plans_keep_pods_apart_from_the_pods_of_selected_namespaces() -> None:
    cache = make_pod("web-cache", "100m", "128Mi", namespace="shop", labels="{app: cache}")
    loner = make_pod("loner", "100m", "128Mi", namespace="batch", extra_spec=ANTI_AFFINITY_TO_TEAM_WEB)
    labelled = {"shop": {"team": "web"}, "batch": {"team": "data"}}
    assert len(solve([cache, loner], [], [pool()], namespace_labels=labelled).new_nodeclaims) == 2
    unlabelled = {"shop": {"team": "data"}, "batch": {"team": "data"}}
    assert len(solve([cache, loner], [], [pool()], namespace_labels=unlabelled).new_nodeclaims) == 1
