"""Static NodePools (spec.replicas) end to end in the simulator: the controllers karpy run runs.

A static pool gets its replica count of nodes with no pod asking, keeps them
through consolidation, follows its replicas up and down (a Scenario's
``scale`` step on a NodePool, as ``kubectl scale nodepool``), stays within
``limits.nodes``, has its drifted nodes replaced one for one, and launches
nothing for pending pods (a dynamic pool does).
"""

from __future__ import annotations

import dataclasses
import json
import textwrap
from pathlib import Path

import pytest
from tests.support import KWOK_NODE_CLASS, deployment_manifest, load_objects

from karpy.api.core import DO_NOT_DISRUPT_ANNOTATION
from karpy.api.nodepool import STATIC_TRANSITION_MESSAGE
from karpy.cli import EXIT_OK, main
from karpy.controllers.orchestration import DISRUPTED_TAINT
from karpy.sim.scenario import Step
from karpy.sim.simulation import Simulation, SimulationSettings


def static_pool(replicas: int, *, name: str = "static", extra: str = "", annotations: str = "{}") -> str:
    return f"""
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {name}}}
spec:
  replicas: {replicas}
  template:
    metadata: {{annotations: {annotations}}}
    spec:
      nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}}
      requirements: []
{textwrap.indent(extra, "  ")}
"""


DYNAMIC_POOL = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: dynamic}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements: []
"""


def claims(simulation: Simulation, pool: str = "static") -> list[str]:
    return [claim.name for claim in simulation.nodeclaims() if claim.nodepool == pool]


def scale(simulation: Simulation, replicas: int, name: str = "static") -> None:
    simulation.perform(
        Step(at=simulation.clock.now(), action="scale", kind="NodePool", name=name, replicas=replicas)
    )


def started(*manifests: str, settings: SimulationSettings | None = None) -> Simulation:
    simulation = Simulation(settings=settings)
    simulation.apply(load_objects(KWOK_NODE_CLASS, *manifests))
    simulation.run(600)
    return simulation


def test_a_static_pool_gets_its_replicas_keeps_them_empty_and_follows_a_scale() -> None:
    simulation = started(static_pool(3))
    assert len(claims(simulation)) == 3
    assert all(claim.initialized for claim in simulation.nodeclaims())
    simulation.run(3600)  # an hour: consolidation would have removed three empty nodes long ago
    assert len(claims(simulation)) == 3
    scale(simulation, 5)
    simulation.run(600)
    assert len(claims(simulation)) == 5
    scale(simulation, 1)
    simulation.run(600)
    assert len(claims(simulation)) == 1
    scale(simulation, 0)
    simulation.run(600)
    assert claims(simulation) == [] and list(simulation.cluster.nodes()) == []


def test_the_static_capacity_gate_off_leaves_a_static_pool_without_nodes() -> None:
    simulation = started(static_pool(3), settings=SimulationSettings(static_capacity=False))
    assert claims(simulation) == []


def test_limits_nodes_caps_a_static_pool() -> None:
    simulation = started(static_pool(10, extra="limits: {nodes: 4}"))
    assert len(claims(simulation)) == 4


def test_pending_pods_get_a_dynamic_node_not_a_static_one() -> None:
    simulation = started(static_pool(1), DYNAMIC_POOL)
    assert len(claims(simulation)) == 1
    simulation.apply(load_objects(deployment_manifest(replicas=40, cpu="1")))
    simulation.run(600)
    assert all(pod.phase == "Running" for pod in simulation.pods())
    assert len(claims(simulation)) == 1
    assert claims(simulation, "dynamic")


def test_scale_down_keeps_the_nodes_with_pods_and_do_not_disrupt_last() -> None:
    simulation = started(static_pool(4))
    nodes = sorted(node.name for node in simulation.cluster.nodes())
    pinned = f"{{{DO_NOT_DISRUPT_ANNOTATION}: 'true'}}"
    simulation.apply(
        load_objects(
            deployment_manifest("busy", replicas=1, cpu="100m", memory="64Mi"),
            deployment_manifest("pinned", replicas=1, cpu="100m", memory="64Mi", annotations=pinned),
        )
    )
    simulation.run(120)
    busy = {pod.spec.node_name for pod in simulation.pods() if pod.metadata.name.startswith("busy")}
    held = {pod.spec.node_name for pod in simulation.pods() if pod.metadata.name.startswith("pinned")}
    assert len(nodes) == 4 and len(busy) == len(held) == 1 and busy != held  # kube-scheduler spreads them
    scale(simulation, 2)
    simulation.run(600)
    assert {claim.status.node_name for claim in simulation.nodeclaims()} == busy | held  # the empty ones went
    scale(simulation, 1)
    simulation.run(600)
    assert [claim.status.node_name for claim in simulation.nodeclaims()] == sorted(held)


def test_drift_replaces_every_node_within_the_node_limit() -> None:
    simulation = started(static_pool(4, extra="limits: {nodes: 5}"))
    before = set(claims(simulation))
    most = [0]

    def watch() -> None:
        most[0] = max(most[0], len(simulation.nodeclaims()))

    simulation.watch = watch
    pool = simulation.cluster.nodepool("static")
    assert pool is not None
    changed = dataclasses.replace(
        pool, template=dataclasses.replace(pool.template, annotations={"drift-trigger": "yes"})
    )
    simulation.cluster.update(changed)
    simulation.run(3600)
    after = set(claims(simulation))
    assert len(after) == 4 and not after & before
    assert most[0] <= 5
    assert all(node.metadata.annotations.get("drift-trigger") == "yes" for node in simulation.cluster.nodes())


def test_a_pool_does_not_turn_static_or_dynamic_on_update() -> None:
    simulation = started(DYNAMIC_POOL)
    simulation.apply(load_objects(static_pool(2, name="dynamic")))
    assert any(STATIC_TRANSITION_MESSAGE in why for _, why in simulation.refused)
    scale(simulation, 2, name="dynamic")
    simulation.run(600)
    assert claims(simulation, "dynamic") == []


STATIC_SCENARIO = """
apiVersion: karpy.dev/v1alpha1
kind: Scenario
metadata: {name: warm-pool}
spec:
  duration: 2h
  settings: {featureGates: GATES}
  steps:
    - at: 0s
      apply:
        objects:
          - {apiVersion: karpenter.kwok.sh/v1alpha1, kind: KWOKNodeClass, metadata: {name: default}}
          - apiVersion: karpenter.sh/v1
            kind: NodePool
            metadata: {name: warm}
            spec:
              replicas: 3
              template:
                spec:
                  nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
                  requirements: [{key: node.kubernetes.io/instance-type, operator: In, values: [c5.large]}]
    - at: 30m
      scale: {kind: NodePool, name: warm, replicas: 5}
    - at: 1h
      scale: {kind: NodePool, name: warm, replicas: 1}
"""


def test_a_scenario_scales_a_static_pool_as_kubectl_scale_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(STATIC_SCENARIO.replace("GATES", "StaticCapacity=true"))
    assert main(["simulate", str(path), "-o", "json"]) == EXIT_OK
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert summary["nodeclaimsLaunched"] == 5  # 3, then 2 more; the scale to 1 launches none
    path.write_text(STATIC_SCENARIO.replace("GATES", "StaticCapacity=false"))
    assert main(["simulate", str(path), "-o", "json"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["summary"]["nodeclaimsLaunched"] == 0


def test_a_static_pool_keeps_its_replicas_under_the_cluster_autoscaler_baseline_too() -> None:
    settings = SimulationSettings(autoscaler="cluster-autoscaler")
    simulation = started(static_pool(3), DYNAMIC_POOL, settings=settings)
    assert len(claims(simulation)) == 3
    simulation.apply(load_objects(deployment_manifest(replicas=4, cpu="1")))
    simulation.run(3600)
    assert all(pod.phase == "Running" for pod in simulation.pods())
    assert len(claims(simulation)) == 3
    # The baseline scaled the dynamic pool's node groups only (its NodeClaims are named by group).
    assert any(claim.name.startswith("dynamic-") for claim in simulation.nodeclaims())


def test_a_node_back_from_pending_disruption_counts_again() -> None:
    # A drift command taints a node, then rolls back (its replacement failed): the node is active
    # again, and a scale-down decided meanwhile must still come down to replicas.
    simulation = started(static_pool(3))
    node = sorted(simulation.cluster.nodes(), key=lambda node: node.name)[0]
    simulation.cluster.update(node.with_changes(taints=(*node.taints, DISRUPTED_TAINT)))
    scale(simulation, 2)
    simulation.run(60)
    assert len(claims(simulation)) == 3  # two active, one pending disruption: at replicas
    tainted = simulation.cluster.node(node.name)
    assert tainted is not None
    simulation.cluster.update(
        tainted.with_changes(taints=tuple(t for t in tainted.taints if t != DISRUPTED_TAINT))
    )
    simulation.run(600)
    assert len(claims(simulation)) == 2


AT_LIMIT_SCENARIO = """
apiVersion: karpy.dev/v1alpha1
kind: Scenario
metadata: {name: rolled-at-limit}
spec:
  duration: 2h
  settings: {featureGates: GATES}
  steps:
    - at: 0s
      apply:
        objects:
          - {apiVersion: karpenter.kwok.sh/v1alpha1, kind: KWOKNodeClass, metadata: {name: default}}
          - apiVersion: karpenter.sh/v1
            kind: NodePool
            metadata: {name: warm}
            spec:
              replicas: 2
              limits: {nodes: 2}
              template:
                spec:
                  nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
                  requirements: [{key: node.kubernetes.io/instance-type, operator: In, values: [c5.large]}]
    - at: 30m
      apply:
        objects:
          - apiVersion: karpenter.sh/v1
            kind: NodePool
            metadata: {name: warm}
            spec:
              replicas: 2
              limits: {nodes: 2}
              template:
                metadata: {labels: {rolled: "yes"}}
                spec:
                  nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
                  requirements: [{key: node.kubernetes.io/instance-type, operator: In, values: [c5.large]}]
"""


def test_a_scenarios_terminate_first_drift_gate_rolls_a_static_pool_at_its_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(AT_LIMIT_SCENARIO.replace("GATES", "TerminateFirstDrift=true"))
    assert main(["simulate", str(path), "-o", "json"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["summary"]["nodeclaimsLaunched"] == 4  # 2, then 2 successors
    path.write_text(AT_LIMIT_SCENARIO.replace("GATES", '""'))
    assert main(["simulate", str(path), "-o", "json"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["summary"]["nodeclaimsLaunched"] == 2  # held at the limit
