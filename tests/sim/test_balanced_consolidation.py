"""consolidationPolicy Balanced in the simulator: the same controllers as ``karpy run`` score each move.

One m5.2xlarge whose pods fit an m5.large or an m5.xlarge is replaced under
WhenEmptyOrUnderutilized; under Balanced the move saves 47% of the pool's cost
(the per-node cost counted) for all of its disruption, below the 0.5
Karpenter's k = 2 asks, and the node stays, the reason in the report.
Karpenter would take it: it reckons the saving on the cheapest option, the
m5.large (71%), though the launch may get the m5.xlarge; karpy reckons it on
the dearest option the replacement may launch as.
Nodes left with a pod each are merged under both policies: deleting two of
three saves as much of the cost as of the disruption (score 1).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.support import simulate_json

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
        - {key: node.kubernetes.io/instance-type, operator: In, values: [TYPES]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
  disruption: {consolidationPolicy: POLICY, consolidateAfter: 30s}
"""
DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: app, namespace: default}
spec:
  replicas: 14
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      containers: [{name: app, resources: {requests: {cpu: 500m, memory: 1Gi}}}]
"""
SCENARIO = """apiVersion: karpy.dev/v1alpha1
kind: Scenario
metadata: {name: balanced}
spec:
  duration: 30m
  steps:
    - at: 0s
      apply: {files: [pool.yaml, app.yaml]}
    - {at: 5m, scale: {kind: Deployment, namespace: default, name: app, replicas: 3}}
"""


def simulate(tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str, types: str) -> dict[str, Any]:
    (tmp_path / "pool.yaml").write_text(POOL.replace("POLICY", policy).replace("TYPES", types))
    (tmp_path / "app.yaml").write_text(DEPLOYMENT)
    (tmp_path / "scenario.yaml").write_text(SCENARIO)
    code, result, _ = simulate_json(capsys, str(tmp_path / "scenario.yaml"))
    assert code == 0
    assert result["summary"]["controllerErrors"] == []
    assert sum(1 for pod in result["pods"] if pod["phase"] == "Running") == 3
    return result


def alive(result: dict[str, Any]) -> list[str]:
    return sorted(claim["instanceType"] for claim in result["nodeclaims"] if claim["deletedAt"] is None)


def test_a_replacement_that_saves_too_little_for_its_disruption_is_not_made_under_balanced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    types = "m5.large, m5.xlarge, m5.2xlarge"
    assert alive(simulate(tmp_path, capsys, "WhenEmptyOrUnderutilized", types)) == ["m5.large"]
    balanced = simulate(tmp_path, capsys, "Balanced", types)
    assert alive(balanced) == ["m5.2xlarge"]
    assert "NodePool default is Balanced: the move saves 47.3% of its cost for 100.0% of its disruption" in (
        str(balanced["disruption"])
    )


def test_nodes_left_with_a_pod_each_are_merged_under_balanced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert alive(simulate(tmp_path, capsys, "Balanced", "m5.large")) == ["m5.large"]
    assert alive(simulate(tmp_path, capsys, "WhenEmptyOrUnderutilized", "m5.large")) == ["m5.large"]
