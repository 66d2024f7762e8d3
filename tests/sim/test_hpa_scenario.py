"""End to end: an HPA under a step in demand scales up, karpy launches nodes, and after the
demand falls and the 5-minute stabilization window passes, the HPA scales down and
consolidation removes the nodes."""

from __future__ import annotations

import shutil
from pathlib import Path

from karpy.sim.scenario import load_inputs
from karpy.sim.simulation import Simulation

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hpa-daily-web"

SCENARIO = """apiVersion: karpy.dev/v1alpha1
kind: Scenario
metadata: {name: hpa-step}
spec:
  duration: 45m
  load:
    - kind: Deployment
      namespace: default
      name: web
      cpu:
        steps: [{at: 0s, value: 1}, {at: 1m, value: 4}, {at: 5m, value: 1}]
  steps:
    - at: 0s
      apply: {files: [ec2nodeclass.yaml, nodepool.yaml, web.yaml]}
"""


def run(tmp_path: Path, scenario: str) -> Simulation:
    for name in ("ec2nodeclass.yaml", "nodepool.yaml", "web.yaml"):
        shutil.copy(EXAMPLE / name, tmp_path / name)
    (tmp_path / "scenario.yaml").write_text(scenario)
    loaded, problems = load_inputs([tmp_path / "scenario.yaml"])
    assert problems.errors == []
    simulation = Simulation()
    simulation.run_scenario(loaded)
    return simulation


def test_a_step_in_demand_scales_out_and_back_in(tmp_path: Path) -> None:
    simulation = run(tmp_path, SCENARIO)
    samples = simulation.recorder.workloads["Deployment/default/web"]
    start = simulation.recorder.notes[0][0]

    def desired_at(offset: float) -> int:
        return [s.desired for s in samples if s.time - start <= offset][-1]

    # 1 core over 4 pods of 500m is 50% against a 60% target: ceil(4 × 0.83) is 4.
    assert desired_at(45) == 4
    # 4 cores at 60% of 500m need 14 pods; the HPA gets there in steps, capped by its
    # policies (at most double or +4 per 15 s) and damped by pods still booting.
    peak = max(s.desired for s in samples)
    assert peak == 14
    rise = next(s.time - start for s in samples if s.desired == 14)
    assert 60 < rise < 5 * 60
    assert [s.desired for s in samples if 60 <= s.time - start <= rise][:2] == [8, 14]
    # Karpy launched nodes for the pods.
    records = simulation.recorder.nodeclaims.values()
    launched_before_drop = [r for r in records if r.created_at - start < 5 * 60]
    assert len(launched_before_drop) >= 2
    # Demand drops at 5 m; the HPA holds 14 for the 300 s window (the last sync that
    # still saw 4 cores was at 285 s), then to ceil(14 × 14.3% / 60%) = 4: 1 core over 14
    # pods of 500m is 14.3% of their requests.
    assert desired_at(5 * 60 + 270) == 14
    assert desired_at(5 * 60 + 285) == 4
    assert samples[-1].desired == 4
    # Consolidation removed nodes: fewer remain than were running at the peak.
    alive_at_end = [r for r in records if r.deleted_at is None]
    deleted = [r for r in records if r.deleted_at is not None]
    assert deleted and len(alive_at_end) < len(launched_before_drop)


def test_an_hpa_without_a_load_keeps_the_replicas_and_says_so(tmp_path: Path) -> None:
    scenario = (
        SCENARIO.replace("  load:\n", "  xload:\n").split("  xload:")[0] + SCENARIO.split("value: 1}]\n")[1]
    )
    simulation = run(tmp_path, scenario.replace("45m", "5m"))
    notes = [text for _, text in simulation.recorder.notes if text.startswith("HPA")]
    assert notes == ["HPA default/web: no load for Deployment default/web in the Scenario; replicas kept"]
    assert {s.desired for s in simulation.recorder.workloads["Deployment/default/web"]} == {4}
