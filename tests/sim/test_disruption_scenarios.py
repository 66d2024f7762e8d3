"""Disruption scenarios: readable scenario files (tests/data/scenarios) plus assertions."""

from __future__ import annotations

from pathlib import Path

from tests.support import DATA

from karpy.sim.scenario import load_inputs
from karpy.sim.simulation import Simulation

SCENARIOS = DATA / "scenarios"


def run(path: Path) -> Simulation:
    scenario, problems = load_inputs([path])
    assert problems.errors == []
    simulation = Simulation()
    simulation.run_scenario(scenario)
    assert simulation.runtime.errors == []
    return simulation


def at(simulation: Simulation, seconds: float | None) -> float | None:
    return None if seconds is None else seconds - simulation.clock.start


def app_pods_running(simulation: Simulation) -> int:
    return sum(1 for pod in simulation.pods() if pod.phase == "Running" and not pod.is_daemonset_pod)


def test_a_template_change_drifts_the_node_and_it_is_replaced_before_it_goes() -> None:
    simulation = run(SCENARIOS / "drift" / "scenario.yaml")
    records = simulation.recorder.nodeclaims
    old = [r for r in records.values() if r.created_at - simulation.clock.start < 60]
    new = [r for r in records.values() if r.created_at - simulation.clock.start >= 600]
    assert len(old) == 1 and len(new) == 1
    assert old[0].deleted_at is not None and new[0].ready_at is not None
    # The replacement was ready before the drifted node was deleted.
    assert new[0].ready_at <= old[0].deleted_at
    live = simulation.nodeclaims()
    assert [claim.metadata.labels.get("team") for claim in live] == ["payments"]
    assert app_pods_running(simulation) == 3
    assert "Drifted" in {event.reason for event in simulation.cluster.events}


def test_a_drifted_node_whose_replacement_never_registers_stays_and_serves() -> None:
    scenario, _ = load_inputs([SCENARIOS / "drift" / "scenario-replacement-never-registers.yaml"])
    simulation = Simulation()
    # Stop just after the first replacement was given up (15 minutes after it was
    # launched at 10m16s) and before the next attempt, 15 s of re-checking later.
    scenario.duration = 25 * 60 + 20
    simulation.run_scenario(scenario)
    original = min(simulation.recorder.nodeclaims.values(), key=lambda r: r.created_at)
    assert original.deleted_at is None, "the drifted node went without a working replacement"
    assert app_pods_running(simulation) == 3
    reasons = [event.reason for event in simulation.cluster.events]
    assert "DisruptionFailed" in reasons and "FailedRegistration" in reasons
    # The rolled-back node is schedulable again.
    node = simulation.cluster.node(original.node)
    assert node is not None and all(taint.key != "karpenter.sh/disrupted" for taint in node.taints)


def test_once_replacements_register_again_the_drift_goes_through() -> None:
    simulation = run(SCENARIOS / "drift" / "scenario-replacement-never-registers.yaml")
    original = min(simulation.recorder.nodeclaims.values(), key=lambda r: r.created_at)
    assert original.deleted_at is not None and original.deleted_at - simulation.clock.start > 40 * 60
    assert app_pods_running(simulation) == 3


def test_a_node_expires_at_expire_after_and_its_pods_move_to_a_replacement() -> None:
    simulation = run(SCENARIOS / "expiration" / "scenario.yaml")
    records = sorted(simulation.recorder.nodeclaims.values(), key=lambda r: r.created_at)
    first = records[0]
    assert first.deleted_at is not None
    lived = first.deleted_at - first.created_at
    assert 3600 <= lived < 3600 + 60
    assert len(records) >= 2
    assert app_pods_running(simulation) == 3
    assert "Disrupting NodeClaim: Expired" in {event.message for event in simulation.cluster.events}
