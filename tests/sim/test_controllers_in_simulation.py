"""The controllers' behaviour over time, driven in the simulator with virtual time."""

from __future__ import annotations

import dataclasses

from tests.support import KWOK_NODE_CLASS as NODE_CLASS
from tests.support import deployment_manifest as deployment
from tests.support import kwok_nodepool as nodepool
from tests.support import load_objects

from karpy.api.nodeclaim import NodeClaim
from karpy.disruption.rejection import RejectionKind
from karpy.sim.cloud import CapacityFailure, LaunchError
from karpy.sim.simulation import Simulation


def pod(name: str, cpu: str = "1") -> str:
    return f"""
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  containers: [{{name: main, resources: {{requests: {{cpu: "{cpu}", memory: 1Gi}}}}}}]
"""


def started(*texts: str) -> Simulation:
    simulation = Simulation()
    simulation.apply(load_objects(NODE_CLASS, *texts))
    return simulation


def claims(simulation: Simulation) -> list[NodeClaim]:
    return simulation.nodeclaims()


def running_pods(simulation: Simulation) -> int:
    return sum(1 for p in simulation.pods() if p.phase == "Running" and not p.is_daemonset_pod)


def test_a_batch_closes_after_one_idle_second() -> None:
    simulation = started(nodepool(), deployment(replicas=3))
    simulation.run(0.99, until_steady=False)
    assert claims(simulation) == []
    simulation.run(0.02, until_steady=False)
    assert len(claims(simulation)) == 1


def test_a_batch_closes_after_ten_seconds_however_busy() -> None:
    simulation = started(nodepool())
    for index in range(30):  # a pod every 0.5 s for 15 s keeps the batch from going idle
        simulation.apply(load_objects(pod(f"p{index}", "100m")))
        simulation.run(0.5, until_steady=False)
        if claims(simulation):
            break
    first = min(claim.metadata.creation_timestamp or 0 for claim in claims(simulation))
    assert first - simulation.clock.start == 10.0


def test_in_flight_nodeclaims_absorb_later_pods_instead_of_launching_more() -> None:
    simulation = started(nodepool(), deployment(replicas=2, cpu="500m"))
    simulation.run(2, until_steady=False)
    assert len(claims(simulation)) == 1  # 1 CPU on one 2-vCPU type, not yet registered
    simulation.apply(load_objects(pod("late", "500m")))
    simulation.run(600)
    assert len(claims(simulation)) == 1
    assert running_pods(simulation) == 3


def test_consolidate_after_is_measured_from_the_last_pod_event() -> None:
    simulation = started(nodepool(disruption="consolidateAfter: 10m"), deployment(replicas=1))
    simulation.run(120, until_steady=False)
    assert running_pods(simulation) == 1
    app = simulation.cluster.get("Deployment", "default/app")
    simulation.cluster.delete(app)
    simulation.run(9 * 60, until_steady=False)
    assert len(claims(simulation)) == 1, "deleted before consolidateAfter elapsed"
    simulation.run(2 * 60)
    assert claims(simulation) == []


def test_consolidate_after_never_keeps_empty_nodes() -> None:
    simulation = started(nodepool(disruption="consolidateAfter: Never"), deployment(replicas=1))
    simulation.run(120, until_steady=False)
    simulation.cluster.delete(simulation.cluster.get("Deployment", "default/app"))
    simulation.run(3600)
    assert len(claims(simulation)) == 1
    assert simulation.steady()


def test_a_do_not_disrupt_node_is_not_consolidated() -> None:
    simulation = started(nodepool(), deployment(replicas=1))
    simulation.run(120, until_steady=False)
    node = simulation.cluster.node(claims(simulation)[0].status.node_name)
    assert node is not None
    annotations = {**node.metadata.annotations, "karpenter.sh/do-not-disrupt": "true"}
    simulation.cluster.update(node.with_changes(metadata=node.metadata.with_changes(annotations=annotations)))
    simulation.cluster.delete(simulation.cluster.get("Deployment", "default/app"))
    simulation.run(3600)
    assert len(claims(simulation)) == 1
    reason = simulation.disruption.last.rejected[claims(simulation)[0].name]
    assert reason.kind is RejectionKind.NODE_DO_NOT_DISRUPT
    assert "do-not-disrupt" in reason.message


def test_a_zero_budget_blocks_emptiness() -> None:
    simulation = started(
        nodepool(disruption='consolidateAfter: 0s, budgets: [{nodes: "0"}]'), deployment(replicas=1)
    )
    simulation.run(120, until_steady=False)
    simulation.cluster.delete(simulation.cluster.get("Deployment", "default/app"))
    simulation.run(600, until_steady=False)
    assert len(claims(simulation)) == 1
    reason = simulation.disruption.last.rejected[claims(simulation)[0].name]
    assert reason.kind is RejectionKind.BUDGET
    assert "budget" in reason.message


def test_spot_capacity_errors_fall_back_to_on_demand_and_the_pods_run() -> None:
    simulation = Simulation()
    simulation.cloud.settings.capacity_failures.append(CapacityFailure(capacity_type="spot"))
    simulation.apply(load_objects(NODE_CLASS, nodepool(), deployment(replicas=2)))
    simulation.run(900)
    assert running_pods(simulation) == 2
    assert {claim.capacity_type for claim in claims(simulation)} == {"on-demand"}
    reasons = {event.reason for event in simulation.cluster.events}
    assert "InsufficientCapacityError" in reasons


def test_nodepool_limits_are_never_exceeded_and_the_rest_is_explained() -> None:
    simulation = started(nodepool(extra_spec="  limits: {cpu: 4}"), deployment(replicas=6))
    simulation.run(900)
    total_cpu = sum(claim.status.capacity.get("cpu", 0) for claim in claims(simulation))
    assert total_cpu <= 4000
    stuck = simulation.provisioner.last.unschedulable
    assert stuck and all("limit" in reason for reason in stuck.values())
    assert simulation.steady()


def test_a_nodeclaim_whose_node_never_registers_is_deleted_after_fifteen_minutes() -> None:
    simulation = Simulation()
    simulation.cloud.settings.registration_delay = 3600.0
    simulation.apply(load_objects(NODE_CLASS, nodepool(), deployment(replicas=1)))
    simulation.run(16 * 60, until_steady=False)
    reasons = [event.reason for event in simulation.cluster.events]
    assert "FailedRegistration" in reasons


def test_a_drain_never_breaks_a_pod_disruption_budget() -> None:
    budget = """
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: app, namespace: default}
spec: {minAvailable: 2, selector: {matchLabels: {app: app}}}
"""
    simulation = started(nodepool(), deployment(replicas=2), budget)
    simulation.run(120, until_steady=False)
    assert running_pods(simulation) == 2
    claim = claims(simulation)[0]
    simulation.cluster.delete(claim)
    for _ in range(60):
        simulation.run(1, until_steady=False)
        healthy = sum(1 for p in simulation.pods() if p.phase == "Running" and not p.metadata.deleting)
        assert healthy >= 2, "a PodDisruptionBudget was violated during the drain"
    assert simulation.cluster.nodeclaim(claim.name) is not None
    assert "FailedDraining" in {event.reason for event in simulation.cluster.events}
    # Lift the budget: the drain finishes, the pods move to a replacement and run.
    simulation.cluster.delete(simulation.cluster.get("PodDisruptionBudget", "default/app"))
    simulation.run(900)
    assert simulation.cluster.nodeclaim(claim.name) is None
    assert running_pods(simulation) == 2


def test_node_labels_and_taints_come_from_the_nodeclaim() -> None:
    simulation = started(
        nodepool(extra_spec=""),
        deployment(replicas=1),
    )
    simulation.run(120, until_steady=False)
    claim = claims(simulation)[0]
    node = simulation.cluster.node(claim.status.node_name)
    assert node is not None
    assert node.metadata.labels["karpenter.sh/nodepool"] == "default"
    assert node.metadata.labels["karpenter.sh/registered"] == "true"
    assert node.metadata.labels["karpenter.sh/initialized"] == "true"
    assert node.metadata.labels["node.kubernetes.io/instance-type"] == claim.instance_type
    assert all(taint.key != "karpenter.sh/unregistered" for taint in node.taints)
    assert "karpenter.sh/termination" in node.metadata.finalizers
    assert claim.initialized and claim.registered and claim.launched
    assert dataclasses.asdict(claim.status)["allocatable"]["cpu"] > 0


def test_a_cloud_api_outage_delays_the_launch_and_is_retried() -> None:
    simulation = Simulation()
    simulation.cloud.settings.launch_errors.append(LaunchError("RequestLimitExceeded", 0.0, 20.0))
    simulation.apply(load_objects(NODE_CLASS, nodepool(), deployment(replicas=1)))
    simulation.run(900)
    assert running_pods(simulation) == 1
    claim = claims(simulation)[0]
    launched = claim.condition("Launched")
    assert launched is not None and launched.last_transition_time - simulation.clock.start >= 20.0
    assert "LaunchFailed" in {event.reason for event in simulation.cluster.events}
    assert simulation.runtime.errors == []
    assert len(claims(simulation)) == 1


def test_a_pod_with_a_zonal_volume_gets_a_node_in_the_volumes_zone() -> None:
    volume = """
apiVersion: v1
kind: PersistentVolume
metadata: {name: data-0}
spec:
  nodeAffinity:
    required:
      nodeSelectorTerms:
        - matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [us-east-1c]}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: default}
spec: {volumeName: data-0}
---
apiVersion: v1
kind: Pod
metadata: {name: db, namespace: default}
spec:
  containers: [{name: main, resources: {requests: {cpu: "1", memory: 1Gi}}}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
"""
    simulation = started(nodepool(), volume)
    simulation.run(600)
    assert running_pods(simulation) == 1
    assert [claim.zone for claim in claims(simulation)] == ["us-east-1c"]


def test_a_nodeclaim_that_cannot_launch_for_five_minutes_is_deleted_and_retried() -> None:
    simulation = Simulation()
    simulation.cloud.settings.launch_errors.append(LaunchError("RequestLimitExceeded", 0.0, 8 * 60.0))
    simulation.apply(load_objects(NODE_CLASS, nodepool(), deployment(replicas=1)))
    simulation.run(20 * 60)
    reasons = [event.reason for event in simulation.cluster.events]
    assert "FailedLaunch" in reasons
    assert running_pods(simulation) == 1
    assert len(simulation.recorder.nodeclaims) >= 2


def test_capacity_errors_fall_back_to_another_spot_offering_before_on_demand() -> None:
    simulation = Simulation()
    # The cheapest spot offering fails; other spot offerings still have capacity.
    simulation.apply(load_objects(NODE_CLASS, nodepool(), deployment(replicas=1)))
    simulation.cloud.settings.capacity_failures.append(
        CapacityFailure(instance_type="c5.large", capacity_type="spot")
    )
    simulation.run(900)
    assert running_pods(simulation) == 1
    launched = [claim for claim in claims(simulation)]
    assert all(claim.capacity_type == "spot" for claim in launched)
    assert all(claim.instance_type != "c5.large" for claim in launched)


def test_termination_grace_period_bounds_a_drain_a_pdb_would_block() -> None:
    budget = """
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: app, namespace: default}
spec: {minAvailable: 2, selector: {matchLabels: {app: app}}}
"""
    pool = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      terminationGracePeriod: 2m
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements: [{key: node.kubernetes.io/instance-type, operator: In, values: [c5.large, c5.xlarge]}]
"""
    simulation = started(pool, deployment(replicas=2), budget)
    simulation.run(120, until_steady=False)
    claim = claims(simulation)[0]
    assert claim.spec.termination_grace_period == 120.0
    simulation.cluster.delete(claim)
    simulation.run(60, until_steady=False)
    assert simulation.cluster.nodeclaim(claim.name) is not None  # the PDB holds the drain
    simulation.run(10 * 60)
    assert simulation.cluster.nodeclaim(claim.name) is None  # forced once the grace period ran out


def test_deleting_a_nodepool_terminates_its_nodeclaims() -> None:
    # NodeClaims are owned by their NodePool: the garbage collector's cascade deletes
    # them, and termination drains and removes them as for any other deletion.
    simulation = started(nodepool(), deployment(replicas=3))
    simulation.run(120, until_steady=False)
    assert running_pods(simulation) == 3
    pool = simulation.cluster.nodepool("default")
    assert pool is not None
    assert all(
        [(owner.kind, owner.name, owner.uid) for owner in claim.metadata.owner_references]
        == [("NodePool", "default", pool.metadata.uid)]
        for claim in claims(simulation)
    )
    simulation.cluster.delete(pool)
    simulation.run(600, until_steady=False)
    assert claims(simulation) == []
    assert list(simulation.cluster.nodes()) == []
