"""Terminate-first through the disruption controller, on the simulator's cluster (``karpy run``'s
controllers).

A drifted node in a full capacity reservation its pods are bound to, and a
drifted node of a static NodePool at its node limit: without the gates both
stay for ever (no replacement can be staged first); with TerminateFirstDrift
each is deleted first and refilled, counted as Karpenter counts it. The same
for repair with TerminateFirstRepair.
"""

from __future__ import annotations

import dataclasses

from tests.support import KWOK_NODE_CLASS, deployment_manifest, load_objects, spot_ec2_cluster

from karpy.api.core import NodeCondition
from karpy.api.nodeclass import StatusCapacityReservation
from karpy.api.nodepool import REASON_DRIFTED
from karpy.api.requirements import AWS_LABEL_CAPACITY_RESERVATION_ID, LABEL_CAPACITY_TYPE
from karpy.disruption.method import TerminateFirstReason
from karpy.sim.cloud import SimulatedCloudSettings, SimulatedReservation
from karpy.sim.simulation import Simulation, SimulationSettings

MINUTE = 60.0
RESERVED_ONLY = (
    spot_ec2_cluster(("c5.2xlarge",))
    .replace("values: [spot, on-demand]", "values: [reserved]")
    .replace("---\n", "  capacityReservationSelectorTerms: [{tags: {team: api}}]\n---\n", 1)
)


def reserved_cluster(*, drift_gate: bool, repair_gate: bool = False, repair: bool = False) -> Simulation:
    """One reserved c5.2xlarge, the reservation's only instance, running four pods."""
    held = SimulatedReservation(
        StatusCapacityReservation(id="cr-0api", instance_type="c5.2xlarge", zone="us-east-1a"),
        1,
        {"team": "api"},
    )
    simulation = Simulation(
        SimulationSettings(
            cloud=SimulatedCloudSettings(capacity_reservations=[held]),
            terminate_first_drift=drift_gate,
            terminate_first_repair=repair_gate,
            node_repair=repair,
        )
    )
    simulation.apply(load_objects(RESERVED_ONLY, deployment_manifest(replicas=4, cpu="700m")))
    simulation.run(10 * MINUTE)
    [claim] = simulation.nodeclaims()
    assert claim.metadata.labels[AWS_LABEL_CAPACITY_RESERVATION_ID] == "cr-0api"
    assert simulation.cloud.reservations.count("cr-0api") == 0
    return simulation


def drift_pool(simulation: Simulation, name: str = "default") -> None:
    pool = simulation.cluster.nodepool(name)
    assert pool is not None
    simulation.cluster.update(
        dataclasses.replace(pool, template=dataclasses.replace(pool.template, annotations={"rolled": "yes"}))
    )


def terminate_first_counts(simulation: Simulation) -> dict[tuple[str, ...], float]:
    family = simulation.metrics.terminate_first_decisions
    names = ("nodepool", "reason", "terminate_first_reason")
    return {labels: family.value(**dict(zip(names, labels, strict=True))) for labels in family.label_values()}


def decisions(simulation: Simulation) -> set[str]:
    return {labels[0] for labels in simulation.metrics.disruption_decisions.label_values()}


def test_without_the_gate_a_drifted_node_in_a_full_reservation_stays() -> None:
    simulation = reserved_cluster(drift_gate=False)
    [before] = simulation.nodeclaims()
    drift_pool(simulation)
    simulation.run(30 * MINUTE)
    assert [claim.name for claim in simulation.nodeclaims()] == [before.name]
    assert terminate_first_counts(simulation) == {}


def test_with_terminate_first_drift_the_node_goes_first_and_its_slot_is_refilled() -> None:
    simulation = reserved_cluster(drift_gate=True)
    [before] = simulation.nodeclaims()
    drift_pool(simulation)
    simulation.run(30 * MINUTE)
    [after] = simulation.nodeclaims()
    assert after.name != before.name
    assert after.metadata.labels[LABEL_CAPACITY_TYPE] == "reserved"
    assert after.metadata.labels[AWS_LABEL_CAPACITY_RESERVATION_ID] == "cr-0api"
    assert all(pod.phase == "Running" for pod in simulation.pods())
    [command] = simulation.disruption.orchestrator.executed
    assert command.reason == REASON_DRIFTED
    assert command.terminate_first is TerminateFirstReason.NO_RESERVED_CAPACITY
    assert command.replacements == []
    assert terminate_first_counts(simulation) == {("default", "drifted", "no-reserved-capacity"): 1.0}
    assert "terminate-first" in decisions(simulation)


def break_node(simulation: Simulation) -> None:
    [node] = simulation.cluster.nodes()
    now = simulation.clock.now()
    conditions = tuple(c for c in node.conditions if c.type != "Ready")
    ready = NodeCondition("Ready", "Unknown", "NodeStatusUnknown", last_transition_time=now)
    simulation.cluster.update(node.with_changes(conditions=(*conditions, ready)))


def test_repair_terminates_first_only_with_its_own_gate() -> None:
    held = reserved_cluster(drift_gate=True, repair=True)
    [before] = held.nodeclaims()
    break_node(held)
    held.run(60 * MINUTE)
    assert [claim.name for claim in held.nodeclaims()] == [before.name]  # TerminateFirstDrift is not enough

    repaired = reserved_cluster(drift_gate=False, repair_gate=True, repair=True)
    [before] = repaired.nodeclaims()
    break_node(repaired)
    repaired.run(60 * MINUTE)
    [after] = repaired.nodeclaims()
    assert after.name != before.name
    assert after.metadata.labels[AWS_LABEL_CAPACITY_RESERVATION_ID] == "cr-0api"
    assert terminate_first_counts(repaired) == {("default", "unhealthy", "no-reserved-capacity"): 1.0}


STATIC_AT_LIMIT = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: static}
spec:
  replicas: 2
  limits: {nodes: 2}
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements: []
"""


def static_cluster(gate: bool) -> Simulation:
    simulation = Simulation(SimulationSettings(terminate_first_drift=gate))
    simulation.apply(load_objects(KWOK_NODE_CLASS, STATIC_AT_LIMIT))
    simulation.run(10 * MINUTE)
    assert len(simulation.nodeclaims()) == 2
    return simulation


def test_a_static_pool_at_its_limit_rolls_its_drifted_nodes_only_with_the_gate() -> None:
    kept = static_cluster(gate=False)
    before = {claim.name for claim in kept.nodeclaims()}
    drift_pool(kept, "static")
    kept.run(60 * MINUTE)
    assert {claim.name for claim in kept.nodeclaims()} == before

    rolled = static_cluster(gate=True)
    before = {claim.name for claim in rolled.nodeclaims()}
    most = [0]

    def watch() -> None:
        most[0] = max(most[0], len(rolled.nodeclaims()))

    rolled.watch = watch
    drift_pool(rolled, "static")
    rolled.run(60 * MINUTE)
    after = {claim.name for claim in rolled.nodeclaims()}
    assert len(after) == 2 and not after & before
    assert most[0] <= 2  # never over limits.nodes
    counts = terminate_first_counts(rolled)
    assert set(counts) == {("static", "drifted", "static-at-limit")}
    assert counts[("static", "drifted", "static-at-limit")] >= 1
