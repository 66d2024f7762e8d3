"""A consolidation that found nothing is not worked out again while its inputs stay the same.

The answer is kept only while no object, catalog, budget, back-off or due
time has changed (and at most five minutes), so a run decides exactly as if
every pass were worked out: the same Events at the same times, the same
fleet. Checked on a scenario where every kind of input moves: spot refused
for 30 minutes (the catalog changes when refusals are recorded and when they
expire), replicas scaled in steps, replacements that fail and are backed
off, fragments merged once spot is back.

The same holds one evaluation at a time:
:class:`~karpy.disruption.memo.EvaluationMemo` answers an
evaluation (removing a node, or a group) again while nothing it read has
changed (the candidates, the pods that would move, the nodes offered to
them, the pools, the namespaces). Checked on the same scenario and where the
whole pass is seldom unchanged: HPAs resizing Deployments every 15 seconds.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.hpa_speed import scenario as hpa_scenario
from tests.support import DATA

from karpy.sim.scenario import Scenario, load_inputs
from karpy.sim.simulation import Simulation

SCENARIO = DATA / "scenarios" / "convergence" / "ice-fragments.yaml"
IDLE = """
apiVersion: karpy.dev/v1alpha1
kind: Scenario
metadata: {name: idle-for-days}
spec:
  duration: 72h
  steps:
    - at: 0s
      apply:
        files: [base.yaml, general-pool.yaml]
        objects:
          - apiVersion: apps/v1
            kind: Deployment
            metadata: {name: app, namespace: default}
            spec:
              replicas: 5
              selector: {matchLabels: {app: app}}
              template:
                metadata: {labels: {app: app}}
                spec:
                  containers: [{name: app, resources: {requests: {cpu: "1", memory: 2Gi}}}]
    - {at: 71h, scale: {kind: Deployment, namespace: default, name: app, replicas: 1}}
"""


def run(source: Path | Scenario, *, quiet_pass_ttl: float | None, memo: bool = True) -> Simulation:
    if isinstance(source, Path):
        scenario, problems = load_inputs([source])
        assert problems.errors == []
    else:
        scenario = source
    simulation = Simulation()
    if quiet_pass_ttl is not None:
        simulation.disruption.quiet_pass_ttl = quiet_pass_ttl
    if not memo:
        simulation.disruption.evaluations = None
    simulation.run_scenario(scenario)
    assert simulation.runtime.errors == []
    return simulation


def history(simulation: Simulation) -> list[tuple[float, str, str, str, str]]:
    return [(e.time, e.kind, e.name, e.reason, e.message) for e in simulation.cluster.events]


def fleet(simulation: Simulation) -> list[tuple[str, str, str]]:
    return sorted(
        (claim.name, claim.instance_type, claim.capacity_type)
        for claim in simulation.nodeclaims()
        if not claim.metadata.deleting
    )


def test_answering_a_quiet_pass_again_decides_exactly_as_working_it_out() -> None:
    kept = run(SCENARIO, quiet_pass_ttl=None)
    worked_out = run(SCENARIO, quiet_pass_ttl=0.0)
    assert kept.disruption.quiet_passes > 0
    assert worked_out.disruption.quiet_passes == 0
    assert history(kept) == history(worked_out)
    assert fleet(kept) == fleet(worked_out)
    assert [c.description for c in kept.disruption.orchestrator.executed] == [
        c.description for c in worked_out.disruption.orchestrator.executed
    ]


def test_evaluations_answered_again_decide_exactly_as_working_them_out() -> None:
    kept = run(SCENARIO, quiet_pass_ttl=0.0)
    worked_out = run(SCENARIO, quiet_pass_ttl=0.0, memo=False)
    assert history(kept) == history(worked_out)
    assert fleet(kept) == fleet(worked_out)


def test_hpas_resizing_every_15_seconds_get_the_same_decisions_with_evaluations_answered_again() -> None:
    busy = hpa_scenario(hours=1.5, workloads=6)
    kept = run(busy, quiet_pass_ttl=None)
    worked_out = run(busy, quiet_pass_ttl=None, memo=False)
    assert history(kept) == history(worked_out)
    assert fleet(kept) == fleet(worked_out)
    assert [c.description for c in kept.disruption.orchestrator.executed] == [
        c.description for c in worked_out.disruption.orchestrator.executed
    ]
    assert kept.disruption.orchestrator.executed
    memo = kept.disruption.evaluations
    assert memo is not None and memo.hits > 0 and memo.misses > 0


def test_days_of_an_unchanging_cluster_are_answered_not_simulated_and_a_change_is_seen(
    tmp_path: Path,
) -> None:
    path = tmp_path / "idle.yaml"
    path.write_text(IDLE)
    for name in ("base.yaml", "general-pool.yaml"):
        (tmp_path / name).write_text((SCENARIO.parent / name).read_text())
    simulation = run(path, quiet_pass_ttl=None)
    disruption = simulation.disruption
    # Nothing changes for 71 hours: the loop jumps to the scale-down instead of passing every 10 s.
    assert disruption.passes < 200
    # The scale-down at 71h is acted on: the fleet shrinks.
    deleted = [
        e for e in simulation.cluster.events if e.time >= 71 * 3600 and e.reason == "DisruptionTerminating"
    ]
    assert deleted, [(e.time, e.reason) for e in simulation.cluster.events if e.time >= 71 * 3600]
