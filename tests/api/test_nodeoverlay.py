"""The NodeOverlay model: what its CRD and Karpenter's runtime validation refuse, and a price's arithmetic."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support import parse_object, run_cli

from karpy.api.manifest import parse_manifests
from karpy.api.nodeoverlay import NodeOverlay, adjusted_price, by_weight, runtime_problem


def manifest(spec: str, name: str = "savings") -> str:
    return f"""
apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {{name: {name}}}
spec: {spec}
"""


def errors(spec: str) -> list[str]:
    return parse_manifests(manifest(spec), "overlay.yaml").errors


def test_the_fields_are_read_as_karpenter_names_them() -> None:
    overlay = parse_object(
        manifest(
            "{requirements: [{key: karpenter.k8s.aws/instance-cpu, operator: Gte, values: ['4']}],"
            " priceAdjustment: '-15%', capacity: {hugepages-2Mi: 1Gi}, weight: 7}"
        )
    )
    assert isinstance(overlay, NodeOverlay)
    assert overlay.spec.price_change == "-15%"
    assert overlay.spec.capacity == {"hugepages-2Mi": 1024**3}
    assert overlay.weight == 7
    assert overlay.spec.requirement_set().get("karpenter.k8s.aws/instance-cpu").has("4")
    assert not overlay.spec.requirement_set().get("karpenter.k8s.aws/instance-cpu").has("3")


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("{price: '1'}", "spec.requirements: Required value"),
        ("{requirements: [], price: '-1'}", "spec.price: should match"),
        ("{requirements: [], price: '$1'}", "spec.price: should match"),
        ("{requirements: [], priceAdjustment: '10%'}", "spec.priceAdjustment: should match"),
        ("{requirements: [], priceAdjustment: '-101%'}", "spec.priceAdjustment: should match"),
        (
            "{requirements: [], price: '1', priceAdjustment: '+1'}",
            "cannot set both 'price' and 'priceAdjustment'",
        ),
        ("{requirements: [], capacity: {memory: 1Gi}}", "invalid resource restricted"),
        ("{requirements: [], weight: 0}", "spec.weight: must be between 1 and 10000"),
        ("{requirements: [], weight: 10001}", "spec.weight: must be between 1 and 10000"),
        ("{requirements: [{key: a, operator: Foo}]}", 'Unsupported value: "Foo"'),
        ("{requirements: [{key: karpenter.sh/team, operator: Exists}]}", 'label domain "karpenter.sh"'),
        ("{requirements: [{key: a, operator: Lt, values: ['1.5']}]}", "single positive integer"),
    ],
)
def test_the_loader_refuses_what_the_crd_refuses(spec: str, expected: str) -> None:
    (error,) = errors(spec)
    assert expected in error


@pytest.mark.parametrize("adjustment", ["+0.5", "-0.5", "+.5", "+10%", "-15%", "-99.5%", "-100%", "+250%"])
def test_every_form_of_adjustment_karpenter_takes_is_read(adjustment: str) -> None:
    assert errors(f"{{requirements: [], priceAdjustment: '{adjustment}'}}") == []


@pytest.mark.parametrize(
    ("price", "change", "expected"),
    [
        (1.0, None, 1.0),
        (1.0, "0.25", 0.25),
        (1.0, "+0.5", 1.5),
        (1.0, "-0.25", 0.75),
        (1.0, "-1.5", 0.0),
        (2.0, "+10%", 2.2),
        (2.0, "-15%", 1.7),
        (2.0, "-100%", 0.0),
    ],
)
def test_adjusted_price_is_karpenters(price: float, change: str | None, expected: float) -> None:
    assert adjusted_price(price, change) == pytest.approx(expected)


def test_overlays_are_ordered_by_weight_then_by_name_later_first() -> None:
    overlays = [
        parse_object(manifest("{requirements: []}", "a")),
        parse_object(manifest("{requirements: [], weight: 5}", "b")),
        parse_object(manifest("{requirements: [], weight: 5}", "c")),
        parse_object(manifest("{requirements: []}", "d")),
    ]
    assert [overlay.name for overlay in by_weight(overlays)] == ["c", "b", "d", "a"]


def test_runtime_validation_refuses_restricted_labels_and_unknown_capacity_types() -> None:
    overlay = parse_object(
        manifest(
            "{requirements: [{key: kubernetes.io/team, operator: Exists},"
            " {key: karpenter.sh/capacity-type, operator: In, values: [cheap]}]}"
        )
    )
    problem = runtime_problem(overlay)
    assert problem is not None
    assert "label kubernetes.io/team is restricted" in problem
    assert "no valid values found for karpenter.sh/capacity-type" in problem
    assert runtime_problem(parse_object(manifest("{requirements: [{key: team, operator: Exists}]}"))) is None


def test_karpy_validate_reads_a_good_overlay_and_refuses_a_bad_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(manifest("{requirements: [], priceAdjustment: '-20%'}"))
    code, _, err = run_cli(capsys, "validate", str(good))
    assert code == 0, err
    restricted = tmp_path / "restricted.yaml"
    restricted.write_text(manifest("{requirements: [{key: kubernetes.io/team, operator: Exists}]}"))
    code, _, err = run_cli(capsys, "validate", str(restricted))
    assert code != 0
    assert 'NodeOverlay "savings": invalid value: label kubernetes.io/team is restricted' in err
    both = tmp_path / "both.yaml"
    both.write_text(manifest("{requirements: [], price: '1', priceAdjustment: '-1'}"))
    code, _, err = run_cli(capsys, "validate", str(both))
    assert code != 0
    assert "cannot set both 'price' and 'priceAdjustment'" in err
