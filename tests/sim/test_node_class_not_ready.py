"""``karpy simulate`` says why pods stay pending when their NodePool's node class is gone.

A NodePool naming a class missing from the inputs is refused at load (bad
input); a class deleted while the run goes on is the case left, and the pods
that come after it are told which class is missing, not that no instance
type satisfies the pool.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support import KWOK_NODE_CLASS, deployment_manifest, kwok_nodepool, run_cli, simulate_json

REASON = "NodePool default: node class KWOKNodeClass/default (karpenter.kwok.sh) not found"


def scenario(tmp_path: Path) -> Path:
    (tmp_path / "pool.yaml").write_text(KWOK_NODE_CLASS + "\n---\n" + kwok_nodepool())
    (tmp_path / "app.yaml").write_text(deployment_manifest(replicas=2))
    path = tmp_path / "scenario.yaml"
    path.write_text(
        """
apiVersion: karpy.dev/v1alpha1
kind: Scenario
metadata: {name: node-class-deleted}
spec:
  duration: 10m
  steps:
    - {at: 0s, apply: {files: [pool.yaml]}}
    - {at: 10s, delete: {kind: KWOKNodeClass, name: default}}
    - {at: 20s, apply: {files: [app.yaml]}}
"""
    )
    return path


def test_pending_reasons_name_the_missing_node_class(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = scenario(tmp_path)
    code, result, _ = simulate_json(capsys, str(path))
    assert code == 0
    reasons = {pod["unschedulableReason"] for pod in result["pods"] if not pod["daemonSet"]}
    assert reasons == {REASON}
    code, out, _ = run_cli(capsys, "simulate", str(path))
    assert REASON in out
