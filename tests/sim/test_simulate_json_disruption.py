"""`karpy simulate --output json` says which nodes were not disrupted or consolidated, why, and
what keeping them costs: the summary's lines, machine-readable (docs/simulate-output.md)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from tests.support import DATA, run_cli, simulate_json

from karpy.api.nodecost import node_cost

CONSOLIDATION = DATA / "scenarios" / "consolidation"

# The consolidation scenario (12 pods, scaled down to 3 at 5m, consolidateAfter 10m)
# with one more object applied at 0s.
SCENARIO = """
apiVersion: karpy.dev/v1alpha1
kind: Scenario
metadata: {name: held-back}
spec:
  duration: 2h
  steps:
    - at: 0s
      apply: {files: [base.yaml, extra.yaml]}
    - at: 5m
      scale: {kind: Deployment, namespace: default, name: app, replicas: 3}
"""

PDB = """
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: app, namespace: default}
spec:
  minAvailable: 100%
  selector: {matchLabels: {app: app}}
"""

NO_BUDGET = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements:
        - {key: karpenter.k8s.aws/instance-family, operator: In, values: [c5, m5]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
  disruption: {consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 10m, budgets: [{nodes: "0"}]}
"""


def held_back_scenario(tmp_path: Path, extra: str) -> Path:
    shutil.copy(CONSOLIDATION / "base.yaml", tmp_path / "base.yaml")
    (tmp_path / "extra.yaml").write_text(extra)
    (tmp_path / "scenario.yaml").write_text(SCENARIO)
    return tmp_path / "scenario.yaml"


def only_nodeclaim(result: dict[str, Any]) -> dict[str, Any]:
    alive = [claim for claim in result["nodeclaims"] if claim["deletedAt"] is None]
    assert len(alive) == 1
    claim: dict[str, Any] = alive[0]
    return claim


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        (None, "has karpenter.sh/do-not-disrupt"),
        (PDB, "PodDisruptionBudget default/app"),
        (NO_BUDGET, "disruption budget of NodePool default allows no more Underutilized disruptions"),
    ],
    ids=["do-not-disrupt", "pdb", "budget"],
)
def test_a_node_held_back_from_consolidation_is_in_the_json_with_the_saving_it_gives_up(
    extra: str | None, reason: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    do_not_disrupt = CONSOLIDATION / "scenario-do-not-disrupt.yaml"
    path = do_not_disrupt if extra is None else held_back_scenario(tmp_path, extra)
    code, result, _ = simulate_json(capsys, str(path))
    assert code == 0
    claim = only_nodeclaim(result)
    assert result["disruption"]["notConsolidated"] == []
    [entry] = result["disruption"]["notDisrupted"]
    assert entry["nodeclaim"] == claim["name"]
    assert entry["node"] == claim["node"] != ""
    assert reason in entry["reason"]
    # Three 1-CPU pods on the 16-CPU node the twelve needed: a smaller node would do.
    saving = entry["savingGivenUpPerHour"]
    assert isinstance(saving, float)
    assert 0 < saving < claim["pricePerHour"]


def test_the_text_summary_shows_the_saving_given_up(capsys: pytest.CaptureFixture[str]) -> None:
    code, result, _ = simulate_json(capsys, str(CONSOLIDATION / "scenario-do-not-disrupt.yaml"))
    [entry] = result["disruption"]["notDisrupted"]

    code, out, _ = run_cli(capsys, "simulate", str(CONSOLIDATION / "scenario-do-not-disrupt.yaml"))
    assert code == 0
    assert f"{entry['nodeclaim']}: {entry['reason']} (gives up ${entry['savingGivenUpPerHour']:.4f}/h)" in out


def test_a_node_consolidation_tried_in_vain_is_not_consolidated_and_gives_up_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # After consolidating, the replacement is the cheapest node for the three pods. The price
    # consolidation compares is the node's: its instance and what a KWOK node costs beyond it.
    code, result, _ = simulate_json(capsys, str(CONSOLIDATION / "scenario.yaml"))
    assert code == 0
    claim = only_nodeclaim(result)
    node_price = claim["pricePerHour"] + node_cost(None).total
    assert result["disruption"] == {
        "notDisrupted": [],
        "notConsolidated": [
            {
                "nodeclaim": claim["name"],
                "node": claim["node"],
                "reason": f"no replacement is at least 10% cheaper than ${node_price:.4f}/h",
                "savingGivenUpPerHour": None,
            }
        ],
    }
