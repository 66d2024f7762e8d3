"""What a simulation may cost: idle cluster time costs nothing, pods and memory stay within a budget."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from karpy.api.core import Deployment
from karpy.api.manifest import parse_manifests
from karpy.sim.budget import (
    MAX_SIMULATED_PODS,
    Heartbeat,
    MemoryBudgetError,
    RunWatch,
    pod_budget_problem,
    requested_pods,
)
from karpy.sim.scenario import builtin_scenario_path, load_inputs
from karpy.sim.simulation import Simulation

SEED = builtin_scenario_path().parent

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      containers: [{{name: c, image: x, resources: {{requests: {{cpu: 100m}}}}}}]
"""


def seed_directory(directory: Path, *, expire_after: str = "720h") -> None:
    for name in ("ec2nodeclass.yaml", "nodepool.yaml", "deployment.yaml"):
        text = (SEED / name).read_text()
        (directory / name).write_text(text.replace("expireAfter: 720h", f"expireAfter: {expire_after}"))


def test_idle_cluster_time_costs_nothing(tmp_path: Path) -> None:
    # A 10,000-year run whose only step comes late: before, each idle hour took 360 disruption
    # passes (28 s of wall time per 1,000 h); now the loop jumps to the step.
    seed_directory(tmp_path, expire_after="Never")
    (tmp_path / "scenario.yaml").write_text(
        (SEED / "scenario.yaml")
        .read_text()
        .replace("duration: 2h", "duration: 87600000h")
        .replace("at: 5m", "at: 1000h")
    )
    scenario, problems = load_inputs([tmp_path / "scenario.yaml"])
    assert problems.errors == []
    simulation = Simulation()
    started = time.monotonic()
    simulation.run_scenario(scenario)
    assert time.monotonic() - started < 30
    assert simulation.disruption.passes < 200
    # The step at 1,000 h was applied then, its Deployment's nodes consolidated away, and the run
    # stopped steady rather than stepping on to its end.
    start = simulation.clock.start
    deleted = [
        moment - start for moment, note in simulation.recorder.notes if note.startswith("deleted Deployment")
    ]
    assert deleted == [1000 * 3600.0]
    assert simulation.nodeclaims() == []
    assert simulation.clock.elapsed < 1001 * 3600


def test_a_run_that_stays_settled_jumps_to_its_end(tmp_path: Path) -> None:
    seed_directory(tmp_path, expire_after="Never")
    scenario, _ = load_inputs([tmp_path])
    scenario.duration = 87_600_000 * 3600.0
    scenario.run_until_steady = False
    simulation = Simulation()
    simulation.run_scenario(scenario)
    assert simulation.clock.elapsed == scenario.duration
    assert simulation.disruption.passes < 200
    assert len(simulation.nodeclaims()) >= 1  # the app still runs at the end


def test_the_store_refuses_pods_past_its_budget_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    simulation = Simulation()
    simulation.cluster.max_pods = 7
    loaded = parse_manifests(
        "\n---\n".join([DEPLOYMENT.format(name="a", replicas=5), DEPLOYMENT.format(name="b", replicas=5)]),
        "apps.yaml",
    )
    assert loaded.errors == []
    with caplog.at_level(logging.WARNING, logger="karpy.sim"):
        simulation.apply(loaded.objects)
        simulation.run(600.0)
    assert simulation.cluster.count("Pod") == 7
    assert simulation.cluster.pods_refused > 0
    assert sum("the most its memory budget allows" in record.message for record in caplog.records) == 1
    failed = [event for event in simulation.cluster.events if event.reason == "FailedCreate"]
    assert failed and "memory budget" in failed[0].message


def test_pods_asked_for_count_replicas_scales_hpas_and_jobs_at_their_largest() -> None:
    text = "\n---\n".join(
        [
            DEPLOYMENT.format(name="web", replicas=10),
            DEPLOYMENT.format(name="api", replicas=2),
            "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: api}\nspec:\n"
            "  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: api}\n  maxReplicas: 40\n"
            "  metrics: [{type: Resource, resource: {name: cpu, target: {type: Utilization,"
            " averageUtilization: 50}}}]\n",
            "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\n"
            "spec:\n  completions: 30\n  parallelism: 3\n"
            "  template:\n    spec:\n      restartPolicy: Never\n"
            "      containers: [{name: c, image: x}]\n",
        ]
    )
    loaded = parse_manifests(text, "x.yaml")
    assert loaded.errors == []
    wanted = requested_pods(
        loaded.objects, [("Deployment", "default/web", 25), ("Deployment", "default/web", 5)]
    )
    assert wanted == {"Deployment default/web": 25, "Deployment default/api": 40, "Job default/j": 30}
    assert pod_budget_problem(wanted) is None
    problem = pod_budget_problem({"Deployment default/web": MAX_SIMULATED_PODS + 1})
    assert problem is not None and f"at most {MAX_SIMULATED_PODS:,}" in problem
    assert isinstance(loaded.objects[0].obj, Deployment)


def test_the_watch_stops_a_run_at_its_memory_budget() -> None:
    with pytest.raises(MemoryBudgetError, match="stopped at cluster time 1h: the run's memory reached"):
        RunWatch(lambda: "cluster time 1h", budget_bytes=1)()
    RunWatch(lambda: "cluster time 2h", budget_bytes=1 << 50)()


def test_a_long_command_says_how_far_it_is_while_it_works() -> None:
    lines: list[str] = []
    with Heartbeat(lambda: "cluster time 3h", lines.append, every=0.05):
        busy_until = time.monotonic() + 0.3
        while time.monotonic() < busy_until:  # a long step that never yields on its own
            sum(range(1000))
    assert len(lines) >= 2
    assert lines[0].startswith("still working after 0 s: cluster time 3h")
