"""Per-node costs in the simulator: fewer, larger nodes when they save what each node costs.

The cost a node carries beyond its instance (karpy.api.nodecost) is added by
the controllers to every offering's price, so the provisioner's plans and
consolidation's savings both count it; the run's reported cost stays the
instance prices. Each test runs the same Scenario with the cost and without
it (``--node-overhead-cost 0`` leaves the volume only).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.support import simulate_json

from karpy.api.nodecost import node_cost

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
      requirements: REQUIREMENTS
  disruption: {consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 30s}
"""
DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: app, namespace: default}
spec:
  replicas: REPLICAS
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      containers: [{name: app, resources: {requests: {cpu: 500m, memory: 1Gi}}}]
"""


def write(tmp_path: Path, requirements: str, replicas: int, scale_to: int | None = None) -> Path:
    (tmp_path / "pool.yaml").write_text(POOL.replace("REQUIREMENTS", requirements))
    (tmp_path / "app.yaml").write_text(DEPLOYMENT.replace("REPLICAS", str(replicas)))
    steps = "    - at: 0s\n      apply: {files: [pool.yaml, app.yaml]}\n"
    if scale_to is not None:
        scale = f"{{kind: Deployment, namespace: default, name: app, replicas: {scale_to}}}"
        steps += f"    - {{at: 5m, scale: {scale}}}\n"
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(
        "apiVersion: karpy.dev/v1alpha1\nkind: Scenario\nmetadata: {name: node-cost}\n"
        f"spec:\n  duration: 1h\n  steps:\n{steps}"
    )
    return scenario


def alive(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [claim for claim in result["nodeclaims"] if claim["deletedAt"] is None]


def run(capsys: pytest.CaptureFixture[str], scenario: Path, *flags: str) -> dict[str, Any]:
    code, result, _ = simulate_json(capsys, str(scenario), *flags)
    assert code == 0
    assert result["summary"]["controllerErrors"] == []
    return result


def test_counting_what_each_node_costs_launches_fewer_nodes_and_costs_less_in_all(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = write(tmp_path, "[]", replicas=120)
    per_node = node_cost(None).total
    plans = {}
    for flag in ("0", None):
        result = run(capsys, scenario, *(("--node-overhead-cost", flag) if flag else ()))
        claims = alive(result)
        assert sum(1 for pod in result["pods"] if pod["phase"] == "Running") == 120
        instances = sum(claim["pricePerHour"] for claim in claims)
        plans[flag] = (len(claims), instances, instances + per_node * len(claims))
    small_nodes, large_nodes = plans["0"][0], plans[None][0]
    # Priced by instance alone the cheapest nodes hold 3 pods; counting each node's volume
    # and per-host cost, nodes of dozens of pods are cheaper in all, though not by instance.
    assert small_nodes >= 40
    assert large_nodes * 5 <= small_nodes
    assert plans[None][2] < plans["0"][2]
    assert plans["0"][1] <= plans[None][1]


def test_consolidation_merges_two_small_nodes_when_it_saves_a_nodes_cost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # t4g.small holds one 500m/1Gi pod and t4g.medium two or three for exactly twice its
    # price: two smalls merged into a medium save nothing but one node's cost.
    requirements = (
        "[{key: node.kubernetes.io/instance-type, operator: In, values: [t4g.small, t4g.medium]},"
        " {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}]"
    )
    scenario = write(tmp_path, requirements, replicas=1, scale_to=2)
    bare = alive(run(capsys, scenario, "--node-overhead-cost", "0"))
    counted = alive(run(capsys, scenario))
    assert sorted(claim["instanceType"] for claim in bare) == ["t4g.small", "t4g.small"]
    assert [claim["instanceType"] for claim in counted] == ["t4g.medium"]


def test_the_scenarios_setting_is_used_and_the_flag_wins_over_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = write(tmp_path, "[]", replicas=60)
    text = scenario.read_text().replace(
        "  duration: 1h\n", "  duration: 1h\n  settings: {nodeOverheadCost: 0}\n"
    )
    scenario.write_text(text)
    from_scenario = len(alive(run(capsys, scenario)))
    from_flag = len(alive(run(capsys, scenario, "--node-overhead-cost", "0.02")))
    assert from_flag < from_scenario


@pytest.mark.parametrize("value", ["-1", "cheap", ".inf"])
def test_a_bad_per_node_cost_is_refused_naming_the_field(
    value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = write(tmp_path, "[]", replicas=1)
    text = scenario.read_text().replace(
        "  duration: 1h\n", f"  duration: 1h\n  settings: {{nodeOverheadCost: {value}}}\n"
    )
    scenario.write_text(text)
    code, _, err = simulate_json_error(capsys, scenario)
    assert code == 2
    assert "spec.settings.nodeOverheadCost" in err


def simulate_json_error(capsys: pytest.CaptureFixture[str], scenario: Path) -> tuple[int, str, str]:
    from karpy.cli import main

    code = main(["simulate", "--output", "json", str(scenario)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_bad_flag_value_is_refused_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from karpy.cli import main

    code = main(["simulate", "--node-overhead-cost", "-0.5", str(write(tmp_path, "[]", replicas=1))])
    assert code == 2
    assert "--node-overhead-cost" in capsys.readouterr().err
