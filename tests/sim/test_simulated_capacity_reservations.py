"""Capacity reservations in the simulator: the Scenario's ``cloud.capacityReservations``, through the
offerings code ``karpy run`` uses (:mod:`karpy.cloud.reservations`): reserved first, then on-demand when
used up, selected by the EC2NodeClass's terms, gone when they end, billed used or not."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support import deployment_manifest, load_objects, run_cli, simulate_json, spot_ec2_cluster

from karpy.api.nodeclass import EC2NodeClass, StatusCapacityReservation
from karpy.api.requirements import (
    AWS_LABEL_CAPACITY_RESERVATION_ID,
    AWS_LABEL_CAPACITY_RESERVATION_TYPE,
    LABEL_CAPACITY_TYPE,
)
from karpy.disruption.drift import NODECLASS_DRIFT_MESSAGES
from karpy.disruption.nodeclass_drift import CAPACITY_RESERVATION_DRIFT
from karpy.operator.interruption import KIND_CAPACITY_RESERVATION_INTERRUPTION
from karpy.sim.cloud import (
    RESERVATION_INTERRUPTION,
    Interruption,
    SimulatedCloudSettings,
    SimulatedReservation,
)
from karpy.sim.report import reservation_cost_of
from karpy.sim.simulation import Simulation, SimulationSettings

TERMS = "  capacityReservationSelectorTerms: [{tags: {team: api}}]\n"


def cluster(terms: str = TERMS) -> str:
    """The spot/on-demand EC2 pool of tests.support, allowing reserved too, on a class with ``terms``."""
    return (
        spot_ec2_cluster(("c5.2xlarge", "c5.large", "m5.large"))
        .replace("values: [spot, on-demand]", "values: [on-demand, reserved]")
        .replace("---\n", terms + "---\n", 1)
    )


def reservation(count: int = 2, *, until: float | None = None, kind: str = "default") -> SimulatedReservation:
    return SimulatedReservation(
        StatusCapacityReservation(
            id="cr-0api", instance_type="c5.2xlarge", zone="us-east-1a", reservation_type=kind, end_time=until
        ),
        count,
        {"team": "api"},
    )


def simulation(
    *held: SimulatedReservation, terms: str = TERMS, gate: bool = True, replicas: int = 30
) -> Simulation:
    sim = Simulation(
        SimulationSettings(
            cloud=SimulatedCloudSettings(capacity_reservations=list(held), reserved_capacity=gate)
        )
    )
    sim.apply(load_objects(cluster(terms), deployment_manifest(replicas=replicas, cpu="700m")))
    return sim


def by_capacity_type(sim: Simulation) -> dict[str, list[str]]:
    kinds: dict[str, list[str]] = {}
    for claim in sim.nodeclaims():
        if not claim.metadata.deleting:
            kinds.setdefault(claim.metadata.labels[LABEL_CAPACITY_TYPE], []).append(claim.instance_type)
    return kinds


def test_a_reservation_is_filled_first_and_the_rest_falls_back_to_on_demand() -> None:
    sim = simulation(reservation(2))
    sim.run(600)
    kinds = by_capacity_type(sim)
    assert kinds["reserved"] == ["c5.2xlarge", "c5.2xlarge"]
    assert kinds["on-demand"]  # 30 pods of 700m do not fit in two c5.2xlarge
    reserved = [c for c in sim.nodeclaims() if c.metadata.labels[LABEL_CAPACITY_TYPE] == "reserved"]
    assert {c.metadata.labels[AWS_LABEL_CAPACITY_RESERVATION_ID] for c in reserved} == {"cr-0api"}
    assert {c.metadata.labels[AWS_LABEL_CAPACITY_RESERVATION_TYPE] for c in reserved} == {"default"}
    assert sim.cloud.reservations.count("cr-0api") == 0
    assert not sim.cluster.has_pending_pods()


def test_with_the_gate_off_or_no_matching_term_nothing_launches_into_it() -> None:
    for sim in (simulation(reservation(2), gate=False), simulation(reservation(2), terms="")):
        sim.run(600)
        assert "reserved" not in by_capacity_type(sim)
        node_class = sim.cluster.node_class("karpenter.k8s.aws", "EC2NodeClass", "default")
        assert isinstance(node_class, EC2NodeClass)
        assert sim.cloud.reservations_for(node_class) == ()


def test_a_terminated_reserved_instance_frees_its_slot() -> None:
    sim = simulation(reservation(2), replicas=8)
    sim.run(600)
    [claim] = [c for c in sim.nodeclaims() if c.metadata.labels[LABEL_CAPACITY_TYPE] == "reserved"]
    assert sim.cloud.reservations.count("cr-0api") == 1
    sim.cloud.delete(claim)
    assert sim.cloud.reservations.count("cr-0api") == 2


def test_a_capacity_block_is_expiring_40_minutes_before_its_end_and_gone_after_it() -> None:
    sim = simulation(reservation(2, until=3600.0, kind="capacity-block"), replicas=0)
    node_class = sim.cluster.node_class("karpenter.k8s.aws", "EC2NodeClass", "default")
    assert isinstance(node_class, EC2NodeClass)
    [held] = sim.cloud.reservations_for(node_class)
    assert held.state == "active"
    sim.run(25 * 60, until_steady=False)
    [held] = sim.cloud.reservations_for(node_class)
    assert held.state == "expiring"
    c5 = next(t for t in sim.cloud.instance_types_for(node_class) if t.name == "c5.2xlarge")
    assert [o.available for o in c5.offerings if o.capacity_type == "reserved"] == [False]
    sim.run(40 * 60, until_steady=False)
    assert sim.cloud.reservations_for(node_class) == ()


def test_a_reservation_is_billed_whether_used_or_not() -> None:
    sim = simulation(reservation(2), gate=False, replicas=0)
    sim.run(3600, until_steady=False)
    fees = reservation_cost_of(sim)
    assert fees["perHourAtEnd"] == pytest.approx(2 * 0.34)
    assert fees["total"] == pytest.approx(2 * 0.34, rel=0.01)


SCENARIO = """\
apiVersion: karpy.dev/v1alpha1
kind: Scenario
metadata: {name: reserved}
spec:
  duration: 10m
  cloud:
    capacityReservations:
      - {id: cr-0abc, instanceType: c5.2xlarge, zone: us-east-1a, count: 1, tags: {team: api}}
      - {instanceType: c5.2xlarge, zone: us-east-2z, count: 0, type: capacity-block}
"""


def test_the_scenario_takes_reservations_and_checks_each_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(SCENARIO)
    code, _, err = run_cli(capsys, "simulate", str(bad))
    assert code != 0
    assert "spec.cloud.capacityReservations[1].zone: unknown zone 'us-east-2z'" in err
    assert "spec.cloud.capacityReservations[1].count" in err
    assert "spec.cloud.capacityReservations[1].until: required for a capacity-block" in err

    good = tmp_path / "good.yaml"
    good.write_text(
        SCENARIO.split("      - {instanceType", maxsplit=1)[0]
        + "  steps:\n    - at: 0s\n      apply: {files: [cluster.yaml]}\n"
    )
    (tmp_path / "cluster.yaml").write_text(cluster() + "---\n" + deployment_manifest(replicas=4, cpu="700m"))
    code, result, _ = simulate_json(capsys, str(good))
    assert code == 0
    types = sorted((claim["instanceType"], claim["capacityType"]) for claim in result["nodeclaims"])
    assert ("c5.2xlarge", "reserved") in types
    assert result["capacityReservationCost"]["perHourAtEnd"] == pytest.approx(0.34)


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "savings-plan" / "scenario.yaml"


def test_the_example_prints_the_cost_with_and_without_the_overlay_and_the_reservation(
    capsys: pytest.CaptureFixture[str],
) -> None:
    peaks = {}
    for gates in (
        "",
        "NodeOverlay=false",
        "ReservedCapacity=false",
        "NodeOverlay=false,ReservedCapacity=false",
    ):
        code, out, _ = run_cli(
            capsys, "simulate", str(EXAMPLE), *(("--feature-gates", gates) if gates else ())
        )
        assert code == 0
        assert "capacity reservations $0.6800/hour, billed used or not" in out
        [line] = [line for line in out.splitlines() if line.startswith("  price at peak        ")]
        peaks[gates] = line.split("$")[1]
    # Without the reservation the nodes cost what the NodeOverlay half of the example says.
    assert peaks["ReservedCapacity=false"] == "0.6034/hour"
    assert peaks["NodeOverlay=false,ReservedCapacity=false"] == "0.7650/hour"
    # With it, two c5.2xlarge run in the reservation, priced near zero: the nodes cost far less.
    assert float(peaks[""].split("/")[0]) < 0.2
    assert float(peaks["NodeOverlay=false"].split("/")[0]) < 0.2


def test_an_interruptible_reservations_warning_replaces_its_node_and_marks_the_reservation_used_up() -> None:
    held = SimulatedReservation(
        StatusCapacityReservation(
            id="cr-0api", instance_type="c5.2xlarge", zone="us-east-1a", interruptible=True
        ),
        2,
        {"team": "api"},
    )
    sim = simulation(held, replicas=8)
    sim.run(300)
    [claim] = [c for c in sim.nodeclaims() if c.metadata.labels[LABEL_CAPACITY_TYPE] == "reserved"]
    sim.cloud.settings.interruptions.append(
        Interruption(at=sim.clock.now() - sim.cloud.start + 1, kind=RESERVATION_INTERRUPTION)
    )
    sim.interruptions.schedule()
    sim.run(600)
    assert sim.cluster.nodeclaim(claim.name) is None
    [record] = sim.interruptions.records
    assert record.message_kind == KIND_CAPACITY_RESERVATION_INTERRUPTION
    # The reservation took its slot back and is marked used up: the replacement is on-demand.
    assert sim.cloud.reservations.count("cr-0api") == 0
    kinds = by_capacity_type(sim)
    assert "reserved" not in kinds and kinds["on-demand"]
    assert not sim.cluster.has_pending_pods()


def test_nodes_of_an_expiring_capacity_block_are_replaced_before_its_end() -> None:
    sim = simulation(reservation(2, until=3600.0, kind="capacity-block"), replicas=8)
    sim.run(300)
    [claim] = [c for c in sim.nodeclaims() if c.metadata.labels[LABEL_CAPACITY_TYPE] == "reserved"]
    assert sim.cloud.reservations_expiring_at() == {"cr-0api": sim.cloud.start + 20 * 60}
    sim.run(25 * 60, until_steady=False)
    # Deleted 40 minutes before the end (Karpenter's capacityreservation.expiration), pods moved on.
    assert sim.cluster.nodeclaim(claim.name) is None
    assert "reserved" not in by_capacity_type(sim)
    assert not sim.cluster.has_pending_pods()


def test_a_node_whose_reservation_ended_is_relabelled_on_demand() -> None:
    # Karpenter's capacityreservation.capacitytype: EC2 keeps the instances, as on-demand.
    sim = simulation(reservation(2, until=1800.0), replicas=30)
    sim.run(600, until_steady=False)
    reserved = [c.name for c in sim.nodeclaims() if c.metadata.labels[LABEL_CAPACITY_TYPE] == "reserved"]
    assert len(reserved) == 2
    sim.run(1800 + 120, until_steady=False)
    for name in reserved:
        claim = sim.cluster.nodeclaim(name)
        assert claim is not None
        assert claim.metadata.labels[LABEL_CAPACITY_TYPE] == "on-demand"
        assert AWS_LABEL_CAPACITY_RESERVATION_ID not in claim.metadata.labels
        assert AWS_LABEL_CAPACITY_RESERVATION_TYPE not in claim.metadata.labels
        node = sim.cluster.node(claim.status.node_name)
        assert node is not None
        assert node.metadata.labels[LABEL_CAPACITY_TYPE] == "on-demand"
        assert AWS_LABEL_CAPACITY_RESERVATION_ID not in node.metadata.labels


def test_a_node_in_a_reservation_its_class_no_longer_selects_drifts_with_karpenters_reason() -> None:
    sim = simulation(reservation(2), replicas=8)
    sim.run(600)
    [claim] = [c for c in sim.nodeclaims() if c.metadata.labels[LABEL_CAPACITY_TYPE] == "reserved"]
    assert not claim.is_true("Drifted")
    sim.apply(load_objects(cluster("  capacityReservationSelectorTerms: [{tags: {team: web}}]\n")))
    sim.run(900)
    assert [e.message for e in sim.cluster.events if e.reason == "Drifted"] == [
        NODECLASS_DRIFT_MESSAGES[CAPACITY_RESERVATION_DRIFT]
    ]
    assert sim.cluster.nodeclaim(claim.name) is None  # replaced, on-demand now
    assert "reserved" not in by_capacity_type(sim)
    assert not sim.cluster.has_pending_pods()
