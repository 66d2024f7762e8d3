"""Each pending pod's effective zone, as Karpenter's ``pending_pods_by_effective_zone_count`` counts it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tests.support import make_instance_type, make_nodepool, make_pod

from karpy.api.core import Pod
from karpy.api.requirements import LABEL_ZONE, Requirement, Requirements
from karpy.scheduling.solver import ExistingCapacity, NodePoolCapacity, solve
from karpy.scheduling.zones import FLEXIBLE, NO_ZONE, effective_zone

TYPES = [make_instance_type("large.4x", 4, 8, 0.18, zones=("zone-a", "zone-b", "zone-c"))]
POOL = NodePoolCapacity(make_nodepool(), TYPES, {}, None)


def zone_term(*zones: str) -> Requirements:
    return Requirements(Requirement.from_operator(LABEL_ZONE, "In", zones))


def zones_of(
    pods: list[Pod],
    existing: list[ExistingCapacity] | None = None,
    volume_terms: Mapping[str, Sequence[Requirements]] | None = None,
) -> dict[str, str]:
    plan = solve(pods, existing or [], [POOL], volume_terms, effective_zones=True)
    return {key.split("/", 1)[1]: zone for key, zone in plan.effective_zones.items()}


def test_a_pods_required_zone_is_its_effective_zone_and_no_zone_constraint_is_flexible() -> None:
    pods = [
        make_pod("free"),
        make_pod("pinned", extra_spec="  nodeSelector: {topology.kubernetes.io/zone: zone-b}"),
        make_pod(
            "either",
            extra_spec="""  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
          - matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [zone-a, zone-c]}]""",
        ),
        make_pod(
            "not-a",
            extra_spec="""  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
          - matchExpressions: [{key: topology.kubernetes.io/zone, operator: NotIn, values: [zone-a]}]""",
        ),
    ]
    assert zones_of(pods) == {"free": FLEXIBLE, "pinned": "zone-b", "either": FLEXIBLE, "not-a": FLEXIBLE}


def test_volume_zones_intersect_the_pods_own() -> None:
    pinned = make_pod("pinned", extra_spec="  nodeSelector: {topology.kubernetes.io/zone: zone-a}")
    free = make_pod("free")
    terms = {pinned.key: (zone_term("zone-c"),), free.key: (zone_term("zone-c"),)}
    assert zones_of([pinned, free], volume_terms=terms) == {"pinned": NO_ZONE, "free": "zone-c"}


def test_a_zonal_spread_admits_only_the_zones_within_its_skew_given_the_pods_running() -> None:
    spec = """  topologySpreadConstraints:
    - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule,
       labelSelector: {matchLabels: {app: web}}}"""
    running = [make_pod(f"run-{zone}", labels="{app: web}", extra_spec=spec) for zone in ("a", "b")]
    nodes = [
        ExistingCapacity(
            name=f"node-{zone}",
            nodepool="default",
            requirements=Requirements.from_labels({LABEL_ZONE: f"zone-{zone}"}),
            taints=(),
            available={"cpu": 0, "memory": 0, "pods": 0},
            pods=(pod,),
        )
        for zone, pod in zip("ab", running, strict=True)
    ]
    pending = make_pod("web-1", labels="{app: web}", extra_spec=spec)
    # zone-a and zone-b run one each, zone-c none: within maxSkew 1 only zone-c takes the next.
    assert zones_of([pending], nodes) == {"web-1": "zone-c"}


def test_the_three_signals_intersect_as_karpenter_intersects_them() -> None:
    assert effective_zone(Requirements(), (), {}) == FLEXIBLE
    assert effective_zone(Requirements(), (), None) == NO_ZONE  # the topology admits it nowhere
    assert effective_zone(zone_term("zone-a", "zone-b"), (), {LABEL_ZONE: frozenset({"zone-b"})}) == "zone-b"
    assert effective_zone(zone_term("zone-a"), (), {LABEL_ZONE: frozenset({"zone-b"})}) == NO_ZONE
    # Any of a volume's terms: the union of their zones; a term without a zone leaves it open.
    assert effective_zone(Requirements(), (zone_term("zone-a"), zone_term("zone-b")), {}) == FLEXIBLE
    assert effective_zone(Requirements(), (zone_term("zone-a"), Requirements()), {}) == FLEXIBLE
    spread = {LABEL_ZONE: frozenset({"zone-a", "zone-c"})}
    assert effective_zone(Requirements(), (zone_term("zone-a", "zone-b"),), spread) == "zone-a"


def test_plans_work_it_out_only_when_asked() -> None:
    assert solve([make_pod("free")], [], [POOL]).effective_zones == {}
