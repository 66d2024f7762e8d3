"""A simulation started from a cluster's objects (karpy.sim.from_cluster) carries on from them as they are.

The cluster read here is a simulated one, stopped at a moment: its objects are what a real
cluster's list gives (uids, timestamps, bound pods, launched NodeClaims), and the original run,
continued, says what the cluster would do next.
"""

from __future__ import annotations

import dataclasses

import pytest

from karpy.api.core import Deployment, Node, Pod, ReplicaSet
from karpy.api.meta import ObjectMeta, OwnerReference
from karpy.api.nodeclaim import NodeClaim
from karpy.api.requirements import LABEL_HOSTNAME, LABEL_INSTANCE_TYPE
from karpy.api.snapshot import ClusterSnapshot
from karpy.sim.from_cluster import seed, starting_state
from karpy.sim.report import render_text, result_json
from karpy.sim.scenario import Scenario, Step, builtin_scenario_path, load_inputs
from karpy.sim.simulation import Simulation

KINDS = (
    "Namespace",
    "PriorityClass",
    "EC2NodeClass",
    "KWOKNodeClass",
    "NodePool",
    "Node",
    "CSINode",
    "NodeClaim",
    "Deployment",
    "ReplicaSet",
    "StatefulSet",
    "DaemonSet",
    "PodDisruptionBudget",
    "Pod",
)


def snapshot_of(simulation: Simulation, *extra: object) -> ClusterSnapshot:
    """What listing ``simulation``'s cluster now would read."""
    objects = tuple(obj for kind in KINDS for obj in simulation.cluster.objects(kind))
    return ClusterSnapshot((*objects, *extra), simulation.clock.now())


def seed_walkthrough(seconds: float = 600.0) -> Simulation:
    """The seed walkthrough's NodePool and Deployment, run for ``seconds``: 2 nodes, 5 pods running."""
    folder = builtin_scenario_path().parent
    scenario, problems = load_inputs(
        [folder / "ec2nodeclass.yaml", folder / "nodepool.yaml", folder / "deployment.yaml"]
    )
    assert not problems.errors
    scenario.duration = seconds
    simulation = Simulation()
    simulation.run_scenario(scenario)
    return simulation


def from_snapshot(snapshot: ClusterSnapshot) -> tuple[Simulation, list[str]]:
    state = starting_state(snapshot)
    simulation = Simulation(start=state.start)
    return simulation, seed(simulation, state)


def delete_deployment_at(at: float) -> Scenario:
    step = Step(at=at, action="delete", kind="Deployment", namespace="default", name="karpenter-test")
    return Scenario(name="after", duration=3600.0, steps=[step])


def test_the_state_is_ordered_for_creation_and_names_each_nodeclaims_instance() -> None:
    original = seed_walkthrough()
    state = starting_state(snapshot_of(original))
    kinds = [type(obj).__name__ for obj in state.objects]
    order = [kinds.index(kind) for kind in ("EC2NodeClass", "NodePool", "NodeClaim", "Pod")]
    assert order == sorted(order)
    assert state.start == original.clock.now()
    assert (state.count("Node"), state.count("NodeClaim"), state.count("Pod")) == (2, 2, 5)
    claims = {claim.name: claim for claim in original.nodeclaims()}
    for instance in state.instances:
        claim = claims[instance.nodeclaim]
        assert instance.node_name == claim.status.node_name
        assert instance.instance_type == claim.metadata.labels[LABEL_INSTANCE_TYPE]
        assert instance.launched_at == original.cloud.instances[claim.status.provider_id].launched_at


def test_the_simulation_starts_with_the_pods_on_their_nodes_and_launches_nothing() -> None:
    original = seed_walkthrough()
    before = {pod.key: pod.node_name for pod in original.pods()}
    simulation, notes = from_snapshot(snapshot_of(original))
    assert notes == []
    simulation.run_scenario(Scenario(name="cluster", duration=3600.0))
    assert {pod.key: pod.node_name for pod in simulation.pods()} == before
    names = [claim.name for claim in original.nodeclaims()]
    assert [claim.name for claim in simulation.nodeclaims()] == names
    # The instances are the cloud's, at their price: the bill counts them.
    assert all(record.price_per_hour > 0 for record in simulation.recorder.nodeclaims.values())
    assert all(claim.status.provider_id in simulation.cloud.instances for claim in simulation.nodeclaims())


def test_last_pod_event_times_are_the_clusters_not_the_loads() -> None:
    original = seed_walkthrough()
    times = {claim.name: claim.status.last_pod_event_time for claim in original.nodeclaims()}
    assert all(times.values())
    simulation, _ = from_snapshot(snapshot_of(original))
    simulation.run_scenario(Scenario(name="cluster", duration=60.0))
    assert {claim.name: claim.status.last_pod_event_time for claim in simulation.nodeclaims()} == times


def test_consolidation_decides_and_acts_as_the_cluster_would() -> None:
    """Deleting the Deployment: the same nodes go, at the same times, as in the run that built the cluster."""
    original = seed_walkthrough()
    moment = original.clock.now() - original.clock.start
    simulation, _ = from_snapshot(snapshot_of(original))
    simulation.run_scenario(delete_deployment_at(0.0))
    # The reference: the same run, with the Deployment deleted at the moment the snapshot was taken.
    folder = builtin_scenario_path().parent
    reference_scenario, _ = load_inputs(
        [folder / "ec2nodeclass.yaml", folder / "nodepool.yaml", folder / "deployment.yaml"]
    )
    reference_scenario.steps += delete_deployment_at(moment).steps
    reference_scenario.duration = moment + 3600.0
    reference = Simulation()
    reference.run_scenario(reference_scenario)
    assert simulation.nodeclaims() == [] == reference.nodeclaims()
    deleted = {r.name: r.deleted_at for r in reference.recorder.nodeclaims.values()}
    assert {r.name: r.deleted_at for r in simulation.recorder.nodeclaims.values()} == pytest.approx(deleted)
    assert all(when is not None for when in deleted.values())


def test_a_replicaset_named_by_kubernetes_hash_stays_the_deployments_current_one() -> None:
    """A real cluster's ReplicaSet is not named by the simulator's hash: its pods are kept, none added."""
    original = seed_walkthrough()
    snapshot = snapshot_of(original)
    name = "karpenter-test-7b9f8c6d5"
    renamed: list[object] = []
    for obj in snapshot.objects:
        if isinstance(obj, ReplicaSet):
            renamed.append(dataclasses.replace(obj, metadata=obj.metadata.with_changes(name=name)))
        elif isinstance(obj, Pod) and obj.metadata.controller is not None:
            owner = dataclasses.replace(obj.metadata.owner_references[0], name=name)
            renamed.append(obj.with_changes(metadata=obj.metadata.with_changes(owner_references=(owner,))))
        else:
            renamed.append(obj)
    simulation, _ = from_snapshot(ClusterSnapshot(tuple(renamed), snapshot.taken_at))
    pods = {pod.key for pod in simulation.pods()}
    simulation.run_scenario(Scenario(name="cluster", duration=600.0))
    assert {pod.key for pod in simulation.pods()} == pods
    assert [rs.metadata.name for rs in simulation.cluster.replicasets()] == [name]
    assert [d.metadata.name for d in simulation.cluster.objects("Deployment") if isinstance(d, Deployment)]


def test_a_node_no_nodepool_manages_is_fixed_capacity_pods_may_move_to() -> None:
    original = seed_walkthrough()
    fixed = Node(
        metadata=ObjectMeta(name="control-plane-1", labels={LABEL_HOSTNAME: "control-plane-1"}, uid="uid-cp"),
        allocatable={"cpu": 8000, "memory": 32 * 2**30, "pods": 110},
        capacity={"cpu": 8000, "memory": 32 * 2**30, "pods": 110},
    )
    fixed = dataclasses.replace(fixed, conditions=next(iter(original.cluster.nodes())).conditions)
    pending = Pod(
        metadata=ObjectMeta(name="lonely", namespace="default", uid="uid-lonely"),
        spec=dataclasses.replace(original.pods()[0].spec, node_name=""),
    )
    state = starting_state(snapshot_of(original, fixed, pending))
    assert any("1 nodes no NodePool manages" in note and "control-plane-1" in note for note in state.notes)
    simulation = Simulation(start=state.start)
    seed(simulation, state)
    simulation.run_scenario(Scenario(name="cluster", duration=600.0))
    assert simulation.cluster.node("control-plane-1") is not None
    lonely = simulation.cluster.pod("default", "lonely")
    assert lonely is not None and lonely.node_name == "control-plane-1"
    # Nothing was launched for it, and consolidation moved the others there: the fixed node stays.
    assert len(simulation.recorder.nodeclaims) == 2
    assert {pod.node_name for pod in simulation.pods()} == {"control-plane-1"}


def test_finished_pods_are_left_out_and_deleting_objects_are_deleted_again() -> None:
    original = seed_walkthrough()
    pods = original.pods()
    done = pods[0].with_changes(phase="Succeeded")
    marked = pods[1].metadata.with_changes(deletion_timestamp=original.clock.now())
    going = pods[1].with_changes(metadata=marked)
    objects = [obj for obj in snapshot_of(original).objects if obj not in (pods[0], pods[1])]
    state = starting_state(ClusterSnapshot((*objects, done, going), original.clock.now()))
    assert state.count("Pod") == 4
    assert state.deleting == (("Pod", pods[1].key),)
    simulation = Simulation(start=state.start)
    seed(simulation, state)
    stored = simulation.cluster.pod(pods[1].metadata.namespace, pods[1].metadata.name)
    assert stored is not None and stored.metadata.deleting


def test_an_instance_the_catalog_does_not_list_is_noted_unpriced() -> None:
    original = seed_walkthrough()
    odd: list[object] = []
    for obj in snapshot_of(original).objects:
        if isinstance(obj, NodeClaim | Node):
            labels = {**obj.metadata.labels, LABEL_INSTANCE_TYPE: "x9.huge"}
            odd.append(dataclasses.replace(obj, metadata=obj.metadata.with_changes(labels=labels)))
        else:
            odd.append(obj)
    _, notes = from_snapshot(ClusterSnapshot(tuple(odd), original.clock.now()))
    assert sum(1 for note in notes if "unpriced, x9.huge spot in" in note) == 2


def test_seed_refuses_a_simulation_that_starts_at_another_time() -> None:
    state = starting_state(snapshot_of(seed_walkthrough()))
    with pytest.raises(ValueError, match="must start when the cluster was read"):
        seed(Simulation(), state)


def test_owner_references_keep_their_uids() -> None:
    original = seed_walkthrough()
    simulation, _ = from_snapshot(snapshot_of(original))
    uids = {rs.metadata.uid for rs in simulation.cluster.replicasets()}
    owners = {pod.metadata.controller.uid for pod in simulation.pods() if pod.metadata.controller is not None}
    assert owners <= uids
    assert isinstance(simulation.pods()[0].metadata.owner_references[0], OwnerReference)


def test_the_summary_counts_the_nodes_found_apart_from_the_nodes_launched() -> None:
    original = seed_walkthrough()
    simulation, _ = from_snapshot(snapshot_of(original))
    simulation.run_scenario(Scenario(name="cluster", duration=600.0))
    summary = result_json(simulation, "cluster", [])["summary"]
    assert (summary["nodeclaimsAtStart"], summary["nodeclaimsLaunched"], summary["instanceTypes"]) == (
        2,
        0,
        {},
    )
    text = render_text(simulation, "cluster")
    assert "  nodes at the start   2\n  nodes launched       0\n" in text
    # A run from files starts with none, and says nothing of it.
    assert result_json(original, "seed", [])["summary"]["nodeclaimsAtStart"] == 0
    assert "nodes at the start" not in render_text(original, "seed")
