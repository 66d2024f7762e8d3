"""Feature gates in a Scenario (``spec.settings.featureGates``) and on ``karpy simulate --feature-gates``.

Both are read by the parser of ``karpy run``'s ``FEATURE_GATES``; the flag
wins over the Scenario. The effect is checked end to end: a spot node left
underused by a scale-down is replaced by a cheaper spot node only when
SpotToSpotConsolidation is on.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from karpy.cli import EXIT_BAD_INPUT, EXIT_OK, main
from karpy.settings import FeatureGates
from karpy.sim.scenario import parse_scenario

SCENARIO = """
apiVersion: karpy.dev/v1alpha1
kind: Scenario
metadata: {name: spot-scale-down}
spec:
  duration: 2h
  settings:
    featureGates: GATES
  steps:
    - at: 0s
      apply:
        objects:
          - apiVersion: karpenter.k8s.aws/v1
            kind: EC2NodeClass
            metadata: {name: default}
            spec:
              amiSelectorTerms: [{alias: al2023@latest}]
              role: KarpenterNodeRole-demo
              subnetSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
              securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
          - apiVersion: karpenter.sh/v1
            kind: NodePool
            metadata: {name: default}
            spec:
              template:
                spec:
                  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
                  requirements:
                    - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}
                    - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}
                    - {key: karpenter.k8s.aws/instance-generation, operator: Gt, values: ["4"]}
              disruption: {consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 30s}
          - apiVersion: apps/v1
            kind: Deployment
            metadata: {name: app, namespace: default}
            spec:
              replicas: 12
              selector: {matchLabels: {app: app}}
              template:
                metadata: {labels: {app: app}}
                spec:
                  containers: [{name: app, image: pause, resources: {requests: {cpu: "1", memory: 2Gi}}}]
    - at: 10m
      scale: {kind: Deployment, namespace: default, name: app, replicas: 2}
"""


def scenario_text(gates: str | None) -> str:
    if gates is None:
        return SCENARIO.replace("  settings:\n    featureGates: GATES\n", "")
    return SCENARIO.replace("GATES", gates)


def parse(gates: str | None) -> tuple[FeatureGates | None, int, list[str]]:
    scenario, errors = parse_scenario(yaml.safe_load(scenario_text(gates)), "scenario.yaml", None)
    return scenario.feature_gates, len(scenario.steps), errors


def test_feature_gates_are_read_in_karpenters_syntax() -> None:
    assert parse("SpotToSpotConsolidation=true") == (FeatureGates(spot_to_spot_consolidation=True), 2, [])
    off = FeatureGates(spot_to_spot_consolidation=False)
    assert parse(" SpotToSpotConsolidation = False ,") == (off, 2, [])
    assert parse('""') == (FeatureGates(), 2, [])  # empty: every gate keeps its default
    assert parse(None) == (None, 2, [])


@pytest.mark.parametrize(
    ("gates", "message"),
    [
        (
            "Drift=true",
            "unknown feature gate 'Drift'"
            " (karpy knows SpotToSpotConsolidation, CapacityBuffer, StaticCapacity, NodeRepair, NodeOverlay,"
            " ReservedCapacity, TerminateFirstDrift, TerminateFirstRepair)",
        ),
        ("SpotToSpotConsolidation", "'SpotToSpotConsolidation' is not Name=true or Name=false"),
        ("SpotToSpotConsolidation=maybe", "SpotToSpotConsolidation: expected true or false, got 'maybe'"),
        ("true", "expected a string, got boolean"),
    ],
)
def test_a_bad_feature_gate_is_a_scenario_error_naming_the_field(gates: str, message: str) -> None:
    _, steps, errors = parse(gates)
    assert errors == [f'scenario.yaml: Scenario "spot-scale-down": spec.settings.featureGates: {message}']
    assert steps == 0  # a Scenario with a bad field is not run


def simulate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], gates: str | None, *flags: str
) -> dict[str, object]:
    path = tmp_path / "scenario.yaml"
    path.write_text(scenario_text(gates))
    assert main(["simulate", str(path), "-o", "json", *flags]) == EXIT_OK
    result = json.loads(capsys.readouterr().out)
    assert isinstance(result, dict)
    return result


def launched(result: dict[str, object]) -> int:
    summary = result["summary"]
    assert isinstance(summary, dict)
    count = summary["nodeclaimsLaunched"]
    assert isinstance(count, int)
    return count


def test_spot_to_spot_consolidation_follows_the_scenario_and_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Off in the Scenario (Karpenter's default): the underused spot node can only be
    # deleted, and its pods need a node.
    off = simulate(tmp_path, capsys, "SpotToSpotConsolidation=false")
    assert launched(off) == 1
    # On (karpy's default): it is replaced by a cheaper spot node.
    on = simulate(tmp_path, capsys, None)
    assert launched(on) == 2
    assert launched(simulate(tmp_path, capsys, "SpotToSpotConsolidation=true")) == 2
    cost_on, cost_off = on["cost"], off["cost"]
    assert isinstance(cost_on, dict) and isinstance(cost_off, dict)
    assert cost_on["perHour"] < cost_off["perHour"]
    # The flag wins over the Scenario, either way.
    off_by_flag = simulate(
        tmp_path, capsys, "SpotToSpotConsolidation=true", "--feature-gates", "SpotToSpotConsolidation=false"
    )
    assert launched(off_by_flag) == 1
    assert launched(simulate(tmp_path, capsys, None, "--feature-gates", "SpotToSpotConsolidation=false")) == 1
    on_by_flag = simulate(
        tmp_path, capsys, "SpotToSpotConsolidation=false", "--feature-gates", "SpotToSpotConsolidation=true"
    )
    assert launched(on_by_flag) == 2


def test_an_unknown_gate_on_the_flag_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(scenario_text(None))
    assert main(["simulate", str(path), "--feature-gates", "Drift=false"]) == EXIT_BAD_INPUT
    assert "karpy: --feature-gates: unknown feature gate 'Drift'" in capsys.readouterr().err
