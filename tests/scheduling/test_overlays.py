"""NodeOverlays against NodePool catalogs (karpy.scheduling.overlays): Karpenter's store, as pure functions.

Each case is one of Karpenter's rules: weights then names order the overlays,
the first price overlay taken on an offering wins, a second of the same weight
on it is a conflict that leaves the whole overlay out, capacity merges per
resource, and an overlay matches by the type's requirements, the pool's name
and template labels, then by zone and capacity type per offering.
"""

from __future__ import annotations

import pytest
from tests.support import make_instance_type, parse_object

from karpy.api.instancetype import InstanceType
from karpy.api.nodeoverlay import NodeOverlay
from karpy.api.nodepool import NodePool
from karpy.scheduling.overlays import OverlayEvaluation, apply_updates, evaluate

SMALL = make_instance_type("c5.large", 2, 4, 0.10)
BIG = make_instance_type("c5.4xlarge", 16, 32, 0.80)
CATALOG = [SMALL, BIG]


def pool(name: str = "default", labels: str = "{}") -> NodePool:
    found = parse_object(f"""
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {name}}}
spec:
  template:
    metadata: {{labels: {labels}}}
    spec:
      nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}}
      requirements: []
""")
    assert isinstance(found, NodePool)
    return found


def overlay(name: str, spec: str) -> NodeOverlay:
    found = parse_object(f"""
apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {{name: {name}}}
spec: {spec}
""")
    assert isinstance(found, NodeOverlay)
    return found


def for_type(name: str) -> str:
    return f"[{{key: node.kubernetes.io/instance-type, operator: In, values: [{name}]}}]"


def catalog_of(evaluation: OverlayEvaluation, pool_name: str = "default") -> dict[str, InstanceType]:
    updates = evaluation.updates.get(pool_name, {})
    return {t.name: t for t in apply_updates(CATALOG, updates)}


def prices(instance_type: InstanceType) -> dict[tuple[str, str], float]:
    return {(o.zone, o.capacity_type): round(o.price, 6) for o in instance_type.offerings}


def test_an_absolute_price_replaces_every_matching_offering_and_marks_it() -> None:
    evaluation = evaluate(
        [overlay("sp", f"{{requirements: {for_type('c5.4xlarge')}, price: '0.05'}}")], [(pool(), CATALOG)]
    )
    types = catalog_of(evaluation)
    assert set(prices(types["c5.4xlarge"]).values()) == {0.05}
    assert types["c5.4xlarge"].price_overlaid
    assert types["c5.large"] is SMALL and not SMALL.price_overlaid
    assert evaluation.verdict("sp").status == "True"


@pytest.mark.parametrize(
    ("adjustment", "on_demand", "spot"),
    [
        ("-0.05", 0.75, 0.27),
        ("+0.1", 0.9, 0.42),
        ("-25%", 0.6, 0.24),
        ("+10%", 0.88, 0.352),
        ("-1", 0.0, 0.0),
    ],
)
def test_a_price_adjustment_adds_or_scales_and_never_goes_below_zero(
    adjustment: str, on_demand: float, spot: float
) -> None:
    spec = f"{{requirements: {for_type('c5.4xlarge')}, priceAdjustment: '{adjustment}'}}"
    types = catalog_of(evaluate([overlay("adjust", spec)], [(pool(), CATALOG)]))
    assert prices(types["c5.4xlarge"])[("zone-a", "on-demand")] == on_demand
    assert prices(types["c5.4xlarge"])[("zone-a", "spot")] == spot


def test_offerings_are_matched_by_capacity_type_and_zone() -> None:
    spec = (
        "{requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]},"
        " {key: topology.kubernetes.io/zone, operator: NotIn, values: [zone-b]}], priceAdjustment: '-50%'}"
    )
    types = catalog_of(evaluate([overlay("od-a", spec)], [(pool(), CATALOG)]))
    assert prices(types["c5.large"]) == {
        ("zone-a", "spot"): 0.04,
        ("zone-a", "on-demand"): 0.05,
        ("zone-b", "spot"): 0.04,
        ("zone-b", "on-demand"): 0.1,
    }
    assert [o.price_overlaid for o in types["c5.large"].offerings] == [False, True, False, False]


def test_the_heavier_overlay_wins_an_offering_whatever_the_names() -> None:
    light = overlay("a-light", f"{{requirements: {for_type('c5.large')}, price: '0.01', weight: 1}}")
    heavy = overlay("b-heavy", f"{{requirements: {for_type('c5.large')}, price: '0.02', weight: 50}}")
    for order in ([light, heavy], [heavy, light]):
        evaluation = evaluate(order, [(pool(), CATALOG)])
        assert set(prices(catalog_of(evaluation)["c5.large"]).values()) == {0.02}
        assert evaluation.rejected == {}


def test_two_price_overlays_of_the_same_weight_on_an_offering_conflict_and_the_later_name_wins() -> None:
    # Same weight: the name later in the alphabet is taken first; the other is a Conflict, left out whole
    # (its change to c5.4xlarge, which nothing else touches, too).
    first = overlay("zeta", f"{{requirements: {for_type('c5.large')}, price: '0.03', weight: 5}}")
    second = overlay(
        "alpha",
        "{requirements: [{key: node.kubernetes.io/instance-type, operator: In,"
        " values: [c5.large, c5.4xlarge]}], price: '0.07', weight: 5}",
    )
    evaluation = evaluate([second, first], [(pool(), CATALOG)])
    types = catalog_of(evaluation)
    assert set(prices(types["c5.large"]).values()) == {0.03}
    assert types["c5.4xlarge"] is BIG
    verdict = evaluation.verdict("alpha")
    assert (verdict.status, verdict.reason, verdict.message) == (
        "False",
        "Conflict",
        "conflict with another overlay",
    )
    assert evaluation.verdict("zeta").status == "True"


def test_same_weight_on_different_offerings_is_no_conflict() -> None:
    spot = overlay(
        "spot",
        "{requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [spot]}], price: '0.01'}",
    )
    od = overlay(
        "od",
        "{requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}],"
        " price: '0.02'}",
    )
    evaluation = evaluate([spot, od], [(pool(), CATALOG)])
    assert evaluation.rejected == {}
    assert prices(catalog_of(evaluation)["c5.large"])[("zone-a", "spot")] == 0.01
    assert prices(catalog_of(evaluation)["c5.large"])[("zone-a", "on-demand")] == 0.02


def test_capacity_merges_per_resource_the_heavier_overlay_winning() -> None:
    heavy = overlay("heavy", "{requirements: [], capacity: {example.com/slice: '4'}, weight: 20}")
    light = overlay(
        "light", "{requirements: [], capacity: {example.com/slice: '9', hugepages-2Mi: 100Mi}, weight: 10}"
    )
    evaluation = evaluate([light, heavy], [(pool(), CATALOG)])
    big = catalog_of(evaluation)["c5.4xlarge"]
    assert big.capacity["example.com/slice"] == 4
    assert big.capacity["hugepages-2Mi"] == 100 * 1024**2
    assert big.allocatable["example.com/slice"] == 4
    assert big.capacity["cpu"] == BIG.capacity["cpu"]
    assert big.capacity_overlaid and not big.price_overlaid
    assert evaluation.rejected == {}


def test_capacity_overlays_of_the_same_weight_naming_one_resource_conflict() -> None:
    one = overlay("one", "{requirements: [], capacity: {example.com/slice: '4'}}")
    two = overlay("two", "{requirements: [], capacity: {example.com/slice: '2'}}")
    evaluation = evaluate([one, two], [(pool(), CATALOG)])
    assert evaluation.verdict("one").reason == "Conflict"  # "two" is taken first (later name)
    assert catalog_of(evaluation)["c5.large"].capacity["example.com/slice"] == 2


def test_an_overlay_matches_a_pool_by_its_name_and_its_template_labels() -> None:
    team = pool("team", "{team: payments}")
    other = pool("other", "{team: search}")
    by_label = overlay(
        "payments", "{requirements: [{key: team, operator: In, values: [payments]}], price: '0.01'}"
    )
    by_pool = overlay(
        "other-pool",
        "{requirements: [{key: karpenter.sh/nodepool, operator: In, values: [other]}], price: '0.02'}",
    )
    evaluation = evaluate([by_label, by_pool], [(team, CATALOG), (other, CATALOG)])
    assert set(prices(catalog_of(evaluation, "team")["c5.large"]).values()) == {0.01}
    assert set(prices(catalog_of(evaluation, "other")["c5.large"]).values()) == {0.02}
    assert evaluation.evaluated == {"team", "other"}


def test_a_custom_label_no_pool_has_matches_nothing() -> None:
    evaluation = evaluate(
        [overlay("nobody", "{requirements: [{key: team, operator: In, values: [payments]}], price: '0.01'}")],
        [(pool(), CATALOG)],
    )
    assert evaluation.updates == {}
    assert evaluation.verdict("nobody").status == "True"


def test_an_overlay_failing_runtime_validation_is_left_out_and_says_why() -> None:
    bad = overlay("bad", "{requirements: [{key: kubernetes.io/team, operator: Exists}], price: '0.01'}")
    evaluation = evaluate([bad], [(pool(), CATALOG)])
    verdict = evaluation.verdict("bad")
    assert (verdict.status, verdict.reason) == ("False", "RuntimeValidation")
    assert "kubernetes.io/team is restricted" in verdict.message
    assert evaluation.updates == {}


def test_the_bill_of_an_offering_is_its_overlaid_price() -> None:
    spec = f"{{requirements: {for_type('c5.large')}, priceAdjustment: '-50%'}}"
    evaluation = evaluate([overlay("half", spec)], [(pool(), CATALOG)])
    assert evaluation.price("default", "c5.large", "zone-a", "on-demand", 0.1) == 0.05
    assert evaluation.price("default", "c5.4xlarge", "zone-a", "on-demand", 0.8) == 0.8
    assert evaluation.price("elsewhere", "c5.large", "zone-a", "on-demand", 0.1) == 0.1
