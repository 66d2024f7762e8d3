"""MIN_VALUES_POLICY and PREFERENCE_POLICY in the simulator (a Scenario's spec.settings).

A pool asking for two instance types of which only one has room for a
large pod leaves the pod pending under Strict; under BestEffort the pod
runs and its NodeClaim says its minValues were relaxed, as Karpenter marks
it. Replicas that prefer each other's absence get a node each under
Respect and share one under Ignore.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.support import simulate_json

from karpy.controllers.provisioning import ProvisioningSettings
from karpy.scheduling.policy import MIN_VALUES_RELAXED_ANNOTATION, SchedulingPolicy
from karpy.sim.scenario import load_inputs
from karpy.sim.simulation import Simulation, SimulationSettings

POOL = """
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: default}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements:
        - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large, m5.xlarge, m5.2xlarge],
           minValues: 2}
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
  disruption: {consolidationPolicy: WhenEmpty, consolidateAfter: 1h}
"""
APP = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: app, namespace: default}
spec:
  replicas: REPLICAS
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      containers: [{name: app, resources: {requests: {cpu: CPU, memory: 1Gi}}}]
      affinity:
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
            - weight: 100
              podAffinityTerm: {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: app}}}
"""


def write(tmp_path: Path, settings: str, replicas: int, cpu: str) -> Path:
    (tmp_path / "pool.yaml").write_text(POOL)
    (tmp_path / "app.yaml").write_text(APP.replace("REPLICAS", str(replicas)).replace("CPU", cpu))
    (tmp_path / "scenario.yaml").write_text(
        "apiVersion: karpy.dev/v1alpha1\nkind: Scenario\nmetadata: {name: policies}\n"
        f"spec:\n  duration: 10m\n  settings: {{{settings}}}\n"
        "  steps:\n    - at: 0s\n      apply: {files: [pool.yaml, app.yaml]}\n"
    )
    return tmp_path / "scenario.yaml"


def simulate(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, settings: str, replicas: int, cpu: str
) -> dict[str, Any]:
    """``karpy simulate``'s JSON report of the Scenario."""
    code, result, _ = simulate_json(capsys, str(write(tmp_path, settings, replicas, cpu)))
    assert code == 0
    assert result["summary"]["controllerErrors"] == []
    return result


def running(result: dict[str, Any]) -> int:
    return sum(1 for pod in result["pods"] if pod["phase"] == "Running")


def relaxed_marks(tmp_path: Path, policy: SchedulingPolicy, cpu: str) -> list[str]:
    """The min-values-relaxed annotation of each NodeClaim the simulation under ``policy`` launched."""
    scenario, problems = load_inputs([write(tmp_path, "", 1, cpu)])
    assert problems.errors == []
    simulation = Simulation(SimulationSettings(provisioning=ProvisioningSettings(scheduling=policy)))
    simulation.run_scenario(scenario)
    return [claim.metadata.annotations[MIN_VALUES_RELAXED_ANNOTATION] for claim in simulation.nodeclaims()]


def test_best_effort_runs_the_pod_on_a_node_annotated_as_relaxed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # 7 CPUs fit m5.2xlarge alone: minValues 2 cannot be met.
    strict = simulate(capsys, tmp_path, "minValuesPolicy: Strict", 1, "7")
    assert running(strict) == 0 and strict["nodeclaims"] == []
    best_effort = simulate(capsys, tmp_path, "minValuesPolicy: BestEffort", 1, "7")
    assert running(best_effort) == 1
    assert [claim["instanceType"] for claim in best_effort["nodeclaims"]] == ["m5.2xlarge"]
    assert relaxed_marks(tmp_path, SchedulingPolicy(min_values="BestEffort"), "7") == ["true"]
    # A pod that leaves two types is not relaxed, and its NodeClaim says so.
    assert relaxed_marks(tmp_path, SchedulingPolicy(min_values="BestEffort"), "1") == ["false"]


def test_ignore_plans_as_if_pods_had_no_preferences(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    respect = simulate(capsys, tmp_path, "preferencePolicy: Respect", 3, "500m")
    ignore = simulate(capsys, tmp_path, "preferencePolicy: Ignore", 3, "500m")
    assert running(respect) == running(ignore) == 3
    assert len(respect["nodeclaims"]) == 3
    assert len(ignore["nodeclaims"]) == 1


def test_an_unknown_policy_in_a_scenario_is_refused_at_its_field(tmp_path: Path) -> None:
    (tmp_path / "scenario.yaml").write_text(
        "apiVersion: karpy.dev/v1alpha1\nkind: Scenario\nmetadata: {name: policies}\n"
        "spec:\n  settings: {preferencePolicy: Never}\n  steps: []\n"
    )
    _, problems = load_inputs([tmp_path / "scenario.yaml"])
    assert any("spec.settings.preferencePolicy" in str(error) for error in problems.errors)


def test_karpy_simulate_takes_the_policies_as_flags_over_the_scenarios(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``--min-values-policy`` and ``--preference-policy`` (karpy run's variables) win over the Scenario."""
    strict = write(tmp_path, "minValuesPolicy: Strict", 1, "7")
    code, result, _ = simulate_json(capsys, str(strict), "--min-values-policy", "BestEffort")
    assert code == 0 and running(result) == 1
    respect = write(tmp_path, "preferencePolicy: Respect", 3, "500m")
    code, result, _ = simulate_json(capsys, str(respect), "--preference-policy", "Ignore")
    assert code == 0 and running(result) == 3
    assert len(result["nodeclaims"]) == 1
