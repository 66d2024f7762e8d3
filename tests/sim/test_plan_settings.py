"""``karpy plan`` runs the controller ``karpy simulate`` runs: the same settings, from the same flags.

Each test plans one change on a cluster read through a stand-in for the API server, once with
the defaults and once with a setting whose value changes what the controller does; the plan
must be the setting's. Both forms of the command are covered: ``karpy plan FILE`` and
``karpy plan --from-cluster-autoscaler``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.baselines.test_ca_migration import node, pod
from tests.sim.test_from_cluster import seed_walkthrough, snapshot_of
from tests.support import run_cli

from karpy.api.manifest import parse_manifests
from karpy.api.snapshot import ClusterSnapshot

STATIC_POOL = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: static}
spec:
  replicas: 2
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: node.kubernetes.io/instance-type, operator: In, values: [c5.large]}
"""

# Two types, minValues 2; the Deployment's 3-CPU pods fit only the larger one.
BIG_POOL_AND_PODS = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: big}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: node.kubernetes.io/instance-type, operator: In, values: [c5.large, c5.xlarge], minValues: 2}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: big, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: big}}
  template:
    metadata: {labels: {app: big}}
    spec:
      nodeSelector: {karpenter.sh/nodepool: big}
      containers: [{name: main, image: app, resources: {requests: {cpu: "3"}}}]
"""


@pytest.fixture
def seed_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """The seed walkthrough's cluster (2 nodes of pool default, 5 pods), as ``karpy plan`` reads it."""
    snapshot = snapshot_of(seed_walkthrough())
    monkeypatch.setattr("karpy.cli._read_cluster", lambda kubeconfig: snapshot)


def plan_document(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    status, out, err = run_cli(capsys, "plan", *argv, "-o", "json")
    assert status == 0, err
    document: dict[str, Any] = json.loads(out)
    return document


def launched(document: dict[str, Any], pool: str) -> list[str]:
    return [launch["instanceType"] for launch in document["launches"] if launch["nodepool"] == pool]


def test_a_feature_gate_given_to_karpy_plan_is_the_plans(
    seed_cluster: None, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    manifest = tmp_path / "static.yaml"
    manifest.write_text(STATIC_POOL)
    # StaticCapacity is on by default: the static pool's two nodes are launched.
    assert launched(plan_document(capsys, str(manifest)), "static") == ["c5.large", "c5.large"]
    # Off, as a karpy run with FEATURE_GATES=StaticCapacity=false: nothing is launched for it.
    off = plan_document(capsys, str(manifest), "--feature-gates", "StaticCapacity=false")
    assert launched(off, "static") == []
    assert off["disruptions"] == []


def test_a_scenarios_settings_given_to_karpy_plan_are_the_plans_and_a_flag_wins(
    seed_cluster: None, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "static.yaml").write_text(STATIC_POOL)
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(
        "apiVersion: karpy.dev/v1alpha1\nkind: Scenario\nmetadata: {name: static-off}\n"
        "spec:\n  settings: {featureGates: StaticCapacity=false}\n"
        "  steps:\n    - {at: 0s, apply: {files: [static.yaml]}}\n"
    )
    assert launched(plan_document(capsys, str(scenario)), "static") == []
    on = plan_document(capsys, str(scenario), "--feature-gates", "StaticCapacity=true")
    assert launched(on, "static") == ["c5.large", "c5.large"]


def test_the_min_values_policy_given_to_karpy_plan_decides_what_is_launched(
    seed_cluster: None, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    manifest = tmp_path / "big.yaml"
    manifest.write_text(BIG_POOL_AND_PODS)
    strict = plan_document(capsys, str(manifest))
    assert launched(strict, "big") == []
    assert [pending["pod"].startswith("default/big-") for pending in strict["pendingAtEnd"]] == [True, True]
    assert all("minValues" in pending["reason"] for pending in strict["pendingAtEnd"])
    best_effort = plan_document(capsys, str(manifest), "--min-values-policy", "BestEffort")
    assert launched(best_effort, "big") == ["c5.xlarge", "c5.xlarge"]
    assert best_effort["pendingAtEnd"] == []


def test_a_bad_setting_given_to_karpy_plan_is_refused_naming_the_flag(
    seed_cluster: None, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    manifest = tmp_path / "static.yaml"
    manifest.write_text(STATIC_POOL)
    status, out, err = run_cli(capsys, "plan", str(manifest), "--feature-gates", "Drift=false")
    assert status == 2 and out == ""
    assert "karpy: --feature-gates: unknown feature gate 'Drift'" in err
    status, _, err = run_cli(capsys, "plan", "--from-cluster-autoscaler", "--node-overhead-cost", "-1")
    assert status == 2 and "karpy: --node-overhead-cost:" in err
    status, _, err = run_cli(capsys, "plan", str(manifest), "--scheduler-config", str(tmp_path / "none"))
    assert status == 2 and "karpy: --scheduler-config:" in err


def test_the_preference_policy_given_to_karpy_plan_from_cluster_autoscaler_decides_the_karpy_run(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four 1-CPU pods of an EKS node group, each preferring an m5.4xlarge (a 16-CPU node)."""
    group = "eks.amazonaws.com/nodegroup: web\n    eks.amazonaws.com/capacityType: ON_DEMAND"
    prefer = (
        "affinity: {nodeAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [{weight: 100,"
        " preference: {matchExpressions: [{key: node.kubernetes.io/instance-type, operator: In,"
        " values: [m5.4xlarge]}]}}]}}"
    )
    manifests = [
        node("web-1", "m5.xlarge", "us-east-1a", group),
        node("web-2", "m5.xlarge", "us-east-1b", group),
    ]
    manifests += [pod(f"web-{index}", f"web-{1 + index % 2}", "1", prefer) for index in range(4)]
    loaded = parse_manifests("\n---\n".join(manifests), "cluster")
    assert not loaded.errors, loaded.errors
    snapshot = ClusterSnapshot(tuple(item.obj for item in loaded.objects), 0.0)
    monkeypatch.setattr("karpy.cli._read_cluster", lambda kubeconfig: snapshot)
    # Respected (the default), the preference makes karpy launch the one large node it names.
    respect = plan_document(capsys, "--from-cluster-autoscaler")["karpy"]
    assert (respect["nodes"], respect["podsPending"]) == (1, 0)
    # Ignored, as a karpy run with PREFERENCE_POLICY=Ignore: cheaper nodes, as the price says.
    ignore = plan_document(capsys, "--from-cluster-autoscaler", "--preference-policy", "Ignore")["karpy"]
    assert ignore["podsPending"] == 0
    assert ignore["pricePerHour"] < respect["pricePerHour"]
