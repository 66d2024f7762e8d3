"""Cluster Autoscaler's rules, each on a small scenario run by the baseline on the simulated cluster."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from tests.support import KWOK_NODE_CLASS, deployment_manifest, run_cli

from karpy.controllers.cluster_autoscaler import ClusterAutoscaler, ScalingEvent
from karpy.sim.scenario import load_inputs
from karpy.sim.simulation import Simulation, SimulationSettings

NODEPOOL = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements: []
"""


def pinned_pod(name: str, group: str, cpu: str = "1") -> str:
    """A Deployment of one pod that runs only on nodes of node group ``group``."""
    return f"""
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: default}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      nodeSelector: {{karpy.dev/node-group: {group}}}
      containers: [{{name: main, resources: {{requests: {{cpu: "{cpu}", memory: 1Gi}}}}}}]
"""


def write_scenario(tmp_path: Path, cluster_autoscaler: str, steps: str, *manifests: str) -> Path:
    (tmp_path / "cluster.yaml").write_text("\n---\n".join([KWOK_NODE_CLASS, NODEPOOL, *manifests]))
    path = tmp_path / "scenario.yaml"
    path.write_text(
        f"""
apiVersion: karpy.dev/v1alpha1
kind: Scenario
metadata: {{name: ca}}
spec:
  duration: 2h
  clusterAutoscaler:
{cluster_autoscaler}
  steps:
    - at: 0s
      apply: {{files: [cluster.yaml]}}
{steps}
"""
    )
    return path


def run(path: Path) -> tuple[Simulation, ClusterAutoscaler]:
    scenario, problems = load_inputs([path])
    assert not problems.errors, problems.errors
    simulation = Simulation(SimulationSettings(autoscaler="cluster-autoscaler"))
    simulation.run_scenario(scenario)
    assert simulation.cluster_autoscaler is not None
    return simulation, simulation.cluster_autoscaler


def of_kind(autoscaler: ClusterAutoscaler, kind: str) -> list[ScalingEvent]:
    """The autoscaler's events of ``kind``, timed from the start of the run."""
    return [
        dataclasses.replace(event, at=event.at - autoscaler.started_at)
        for event in autoscaler.events
        if event.kind == kind
    ]


GROUP_4CPU = "      - {name: small, instanceTypes: [c5.xlarge], minSize: 0, maxSize: 20}"


def test_an_underutilized_node_goes_10_minutes_after_it_fell_below_half_not_before(tmp_path: Path) -> None:
    # Six 1-CPU pods fill two 4-CPU nodes; at 20m two are left, and one node is enough for them.
    path = write_scenario(
        tmp_path,
        f"    nodeGroups:\n{GROUP_4CPU}",
        "    - at: 20m\n      scale: {kind: Deployment, name: app, replicas: 2}",
        deployment_manifest(replicas=6),
    )
    simulation, autoscaler = run(path)
    ups = of_kind(autoscaler, "scale-up")
    assert [(event.group, event.count) for event in ups] == [("small", 2)]
    downs = of_kind(autoscaler, "scale-down")
    assert len(downs) == 1
    # Found unneeded at the first scan after 20m (20:00 or 20:10), removed 10 minutes later.
    assert 30 * 60 <= downs[0].at <= 30 * 60 + 20
    assert len(simulation.nodeclaims()) == 1
    # The removed node was drained, its instance terminated and its Node deleted.
    assert len(list(simulation.cluster.nodes())) == 1
    assert len(simulation.cloud.instances) == 1
    assert all(pod.phase == "Running" for pod in simulation.pods())
    assert simulation.steady()


def test_a_node_above_half_is_kept(tmp_path: Path) -> None:
    path = write_scenario(
        tmp_path,
        f"    nodeGroups:\n{GROUP_4CPU}",
        "    - at: 20m\n      scale: {kind: Deployment, name: app, replicas: 4}",
        deployment_manifest(replicas=6),
    )
    simulation, autoscaler = run(path)
    # 4 CPUs over two nodes: whichever way the ReplicaSet scaled down, no node is below half
    # and able to move its pods (the other node has room for at most one more).
    downs = of_kind(autoscaler, "scale-down")
    assert all(event.at >= 30 * 60 for event in downs)
    assert len(simulation.nodeclaims()) + len(downs) == 2


def test_least_waste_picks_the_group_with_least_idle_cpu(tmp_path: Path) -> None:
    groups = (
        "    nodeGroups:\n"
        "      - {name: big, instanceTypes: [m5.4xlarge], maxSize: 10}\n"
        "      - {name: fit, instanceTypes: [c5.xlarge], maxSize: 10}\n"
        "      - {name: wide, instanceTypes: [c5.2xlarge], maxSize: 10}"
    )
    path = write_scenario(tmp_path, groups, "", deployment_manifest(replicas=3))
    simulation, autoscaler = run(path)
    assert [(event.group, event.count) for event in of_kind(autoscaler, "scale-up")] == [("fit", 1)]
    assert {claim.instance_type for claim in simulation.nodeclaims()} == {"c5.xlarge"}


def test_no_scale_down_of_a_node_whose_pods_cannot_move(tmp_path: Path) -> None:
    # Two nodes at a quarter each, but each pod may run only in its own group.
    groups = (
        "    nodeGroups:\n"
        "      - {name: a, instanceTypes: [c5.xlarge], maxSize: 5}\n"
        "      - {name: b, instanceTypes: [c5.xlarge], maxSize: 5}"
    )
    path = write_scenario(tmp_path, groups, "", pinned_pod("pinned-a", "a"), pinned_pod("pinned-b", "b"))
    scenario, _ = load_inputs([path])
    scenario.run_until_steady = False
    scenario.duration = 40 * 60
    simulation = Simulation(SimulationSettings(autoscaler="cluster-autoscaler"))
    simulation.run_scenario(scenario)
    autoscaler = simulation.cluster_autoscaler
    assert autoscaler is not None
    assert len(of_kind(autoscaler, "scale-up")) == 2
    assert of_kind(autoscaler, "scale-down") == []
    assert len(simulation.nodeclaims()) == 2
    assert autoscaler.unneeded_since == {}


def test_empty_nodes_go_in_bulk_of_ten(tmp_path: Path) -> None:
    # Twelve 3-CPU pods take a 4-CPU node each; once they are gone, 10 nodes go at one scan, 2 at the next.
    path = write_scenario(
        tmp_path,
        f"    nodeGroups:\n{GROUP_4CPU}",
        "    - at: 15m\n      delete: {kind: Deployment, name: app}",
        deployment_manifest(replicas=12, cpu="3"),
    )
    simulation, autoscaler = run(path)
    downs = of_kind(autoscaler, "scale-down")
    moments = sorted({event.at for event in downs})
    assert len(moments) == 2
    assert [sum(1 for event in downs if event.at == moment) for moment in moments] == [10, 2]
    assert moments[1] - moments[0] == pytest.approx(10.0)
    assert all("empty node" in event.detail for event in downs)
    assert simulation.nodeclaims() == []
    assert list(simulation.cluster.nodes()) == []
    assert simulation.cloud.instances == {}


def test_scale_down_waits_10_minutes_after_a_scale_up(tmp_path: Path) -> None:
    # The "small" nodes are underutilized from 5m; a scale-up of group "other" at 12m holds
    # their removal until 10 minutes after it, past the 15m the unneeded time alone would give.
    groups = (
        "    nodeGroups:\n"
        "      - {name: small, instanceTypes: [c5.xlarge], maxSize: 20}\n"
        "      - {name: other, instanceTypes: [m5.xlarge], maxSize: 5}"
    )
    steps = (
        "    - at: 5m\n      scale: {kind: Deployment, name: app, replicas: 2}\n"
        "    - at: 12m\n      apply:\n        objects:\n"
        "          - apiVersion: v1\n            kind: Pod\n"
        "            metadata: {name: late, namespace: default, ownerReferences: []}\n"
        "            spec:\n              nodeSelector: {karpy.dev/node-group: other}\n"
        "              containers: [{name: main, resources: {requests: {cpu: '3'}}}]"
    )
    path = write_scenario(tmp_path, groups, steps, deployment_manifest(replicas=6))
    _, autoscaler = run(path)
    ups = of_kind(autoscaler, "scale-up")
    assert [event.group for event in ups] == ["small", "other"]
    late_up = ups[1].at
    downs = [event for event in of_kind(autoscaler, "scale-down") if event.group == "small"]
    assert downs, "an underutilized small node is removed in the end"
    assert downs[0].at >= late_up + 600
    assert downs[0].at <= late_up + 620


def test_max_size_is_respected_and_the_rest_stay_pending(tmp_path: Path) -> None:
    path = write_scenario(
        tmp_path,
        "    nodeGroups:\n      - {name: small, instanceTypes: [c5.xlarge], maxSize: 2}",
        "",
        deployment_manifest(replicas=5, cpu="3"),
    )
    simulation, autoscaler = run(path)
    assert len(simulation.nodeclaims()) == 2
    assert sum(1 for pod in simulation.pods() if pod.phase == "Running") == 2
    assert len(autoscaler.unschedulable) == 3
    assert simulation.steady()


def test_max_nodes_total_caps_all_groups(tmp_path: Path) -> None:
    path = write_scenario(
        tmp_path,
        f"    maxNodesTotal: 3\n    nodeGroups:\n{GROUP_4CPU}",
        "",
        deployment_manifest(replicas=5, cpu="3"),
    )
    simulation, _ = run(path)
    assert len(simulation.nodeclaims()) == 3


def test_a_group_whose_node_does_not_come_up_in_15_minutes_is_backed_off(tmp_path: Path) -> None:
    # Instances launched in the first 10 minutes never join: the "fit" node is given up at 15
    # minutes, its group backed off, and the next best group takes the pods.
    groups = (
        "    nodeGroups:\n"
        "      - {name: fit, instanceTypes: [c5.xlarge], maxSize: 5}\n"
        "      - {name: big, instanceTypes: [m5.4xlarge], maxSize: 5}"
    )
    path = write_scenario(tmp_path, groups, "", deployment_manifest(replicas=3))
    text = path.read_text().replace(
        "  clusterAutoscaler:",
        "  cloud:\n    registrationFailures: [{from: 0s, until: 10m}]\n  clusterAutoscaler:",
    )
    path.write_text(text)
    simulation, autoscaler = run(path)
    ups = of_kind(autoscaler, "scale-up")
    backoffs = of_kind(autoscaler, "backoff")
    assert ups[0].group == "fit" and ups[0].at == pytest.approx(10.0)
    assert [event.group for event in backoffs] == ["fit"]
    assert 15 * 60 <= backoffs[0].at - ups[0].at <= 15 * 60 + 10
    assert ups[1].group == "big" and ups[1].at >= backoffs[0].at
    assert {claim.instance_type for claim in simulation.nodeclaims()} == {"m5.4xlarge"}
    assert all(pod.phase == "Running" for pod in simulation.pods())


def test_node_groups_derived_from_a_nodepool(tmp_path: Path) -> None:
    path = write_scenario(tmp_path, "    expander: least-waste", "", deployment_manifest(replicas=2))
    simulation, autoscaler = run(path)
    ups = of_kind(autoscaler, "scale-up")
    assert len(ups) == 1 and ups[0].group.startswith("default-")
    assert all(pod.phase == "Running" for pod in simulation.pods())


def test_min_above_max_is_an_exit_2_error_naming_file_object_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_scenario(
        tmp_path,
        "    nodeGroups:\n      - {name: small, instanceTypes: [c5.xlarge], minSize: 3, maxSize: 2}",
        "",
    )
    code, _, err = run_cli(capsys, "simulate", "--autoscaler", "cluster-autoscaler", str(path))
    assert code == 2
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1
    assert 'scenario.yaml: Scenario "ca": spec.clusterAutoscaler.nodeGroups[0].maxSize:' in errors[0]
    assert "below minSize 3" in errors[0]


def test_a_group_the_cloud_refuses_is_backed_off_and_another_takes_the_pods(tmp_path: Path) -> None:
    groups = (
        "    nodeGroups:\n"
        "      - {name: spot, instanceTypes: [c5.xlarge], capacityType: spot, maxSize: 5}\n"
        "      - {name: od, instanceTypes: [c5.2xlarge], capacityType: on-demand, maxSize: 5}"
    )
    path = write_scenario(tmp_path, groups, "", deployment_manifest(replicas=3))
    text = path.read_text().replace(
        "  clusterAutoscaler:",
        "  cloud:\n    capacityFailures: [{instanceType: c5.xlarge, capacityType: spot}]\n"
        "  clusterAutoscaler:",
    )
    path.write_text(text)
    simulation, autoscaler = run(path)
    assert [event.group for event in of_kind(autoscaler, "scale-up")] == ["spot", "od"]
    assert [event.group for event in of_kind(autoscaler, "backoff")] == ["spot"]
    assert {claim.instance_type for claim in simulation.nodeclaims()} == {"c5.2xlarge"}
    assert all(pod.phase == "Running" for pod in simulation.pods())
