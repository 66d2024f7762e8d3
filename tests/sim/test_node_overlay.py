"""NodeOverlays in the simulator: what is launched, what consolidation keeps, what fits, what the bill says.

The same controllers as ``karpy run`` (:mod:`karpy.controllers.nodeoverlay`)
with the NodeOverlay feature gate on, against the bundled AWS catalog; each
case is run with the gate off too, so the difference is the overlay's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support import KWOK_NODE_CLASS, deployment_manifest, kwok_nodepool, load_objects, simulate_json

from karpy.api.conditions import find_condition
from karpy.api.nodeoverlay import CAPACITY_OVERLAY_APPLIED, PRICE_OVERLAY_APPLIED
from karpy.baselines.cluster_autoscaler import ClusterAutoscalerFlags
from karpy.sim.report import cost_of
from karpy.sim.simulation import Simulation, SimulationSettings


def overlay(spec: str, name: str = "savings-plan") -> str:
    return f"""
apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {{name: {name}}}
spec: {spec}
"""


# The 16-vCPU type at a price that makes one of it cheaper than four 2-vCPU nodes.
BIG_DISCOUNT = overlay(
    "{requirements: [{key: node.kubernetes.io/instance-type, operator: In, values: [c5.4xlarge]}],"
    " price: '0.05'}"
)


def simulation(*manifests: str, gate: bool = True, autoscaler: str = "karpy") -> Simulation:
    settings = SimulationSettings(node_overlays=gate, autoscaler=autoscaler)
    if autoscaler == "cluster-autoscaler":
        settings.cluster_autoscaler = ClusterAutoscalerFlags(expander="least-waste")
    sim = Simulation(settings)
    sim.apply(load_objects(KWOK_NODE_CLASS, *manifests))
    return sim


def launched(sim: Simulation) -> list[str]:
    return sorted(claim.instance_type for claim in sim.nodeclaims() if not claim.metadata.deleting)


def test_provisioning_picks_the_type_an_overlay_makes_cheaper() -> None:
    manifests = (
        kwok_nodepool(instance_types=("c5.large", "c5.4xlarge")),
        deployment_manifest("app", replicas=4, cpu="1.5", memory="1Gi"),
        BIG_DISCOUNT,
    )
    without = simulation(*manifests, gate=False)
    without.run(120, until_steady=False)
    assert launched(without) == ["c5.large"] * 4
    with_overlay = simulation(*manifests)
    with_overlay.run(120, until_steady=False)
    assert launched(with_overlay) == ["c5.4xlarge"]
    (claim,) = with_overlay.nodeclaims()
    assert claim.metadata.annotations.get(PRICE_OVERLAY_APPLIED) == "true"
    assert CAPACITY_OVERLAY_APPLIED not in claim.metadata.annotations
    assert all(pod.phase == "Running" for pod in with_overlay.pods())
    # The bill is the overlaid price: what the Savings Plan charges.
    assert cost_of(with_overlay)["peakPerHour"] == pytest.approx(0.05)
    assert cost_of(without)["peakPerHour"] > 0.1
    status = next(iter(with_overlay.cluster.node_overlays())).status
    validation = find_condition(status.conditions, "ValidationSucceeded")
    assert validation is not None and validation.is_true


def test_an_overlay_on_one_pool_leaves_the_others_at_list_price() -> None:
    manifests = (
        kwok_nodepool(instance_types=("c5.large", "c5.4xlarge")),
        deployment_manifest("app", replicas=4, cpu="1.5", memory="1Gi"),
        overlay(
            "{requirements: [{key: karpenter.sh/nodepool, operator: In, values: [elsewhere]},"
            " {key: node.kubernetes.io/instance-type, operator: In, values: [c5.4xlarge]}], price: '0.05'}"
        ),
    )
    sim = simulation(*manifests)
    sim.run(120, until_steady=False)
    assert launched(sim) == ["c5.large"] * 4
    assert not any(PRICE_OVERLAY_APPLIED in claim.metadata.annotations for claim in sim.nodeclaims())


def test_consolidation_weighs_the_overlaid_price() -> None:
    # Four pods on one c5.4xlarge, then three go: at list price a c5.large takes the last pod for less;
    # with the discount, the c5.4xlarge is the cheaper node and stays.
    manifests = (
        kwok_nodepool(
            instance_types=("c5.large", "c5.4xlarge"),
            disruption="consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 0s",
        ),
        deployment_manifest("app", replicas=4, cpu="1.5", memory="1Gi"),
    )
    results = {}
    for gate in (False, True):
        sim = simulation(*manifests, BIG_DISCOUNT, gate=gate)
        sim.run(120, until_steady=False)
        sim.apply(load_objects(deployment_manifest("app", replicas=1, cpu="1.5", memory="1Gi")))
        sim.run(900, until_steady=False)
        results[gate] = launched(sim)
    assert results[False] == ["c5.large"]
    assert results[True] == ["c5.4xlarge"]


def test_extended_capacity_from_an_overlay_lets_a_pod_asking_for_it_be_placed() -> None:
    pod = """
apiVersion: v1
kind: Pod
metadata: {name: sliced, namespace: default}
spec:
  containers:
    - name: main
      resources: {requests: {cpu: "1", example.com/gpu-slice: "2"}, limits: {example.com/gpu-slice: "2"}}
"""
    slices = overlay(
        "{requirements: [{key: node.kubernetes.io/instance-type, operator: In, values: [m5.xlarge]}],"
        " capacity: {example.com/gpu-slice: '4'}}",
        "gpu-slices",
    )
    manifests = (kwok_nodepool(), pod, slices)
    without = simulation(*manifests, gate=False)
    without.run(120, until_steady=False)
    assert launched(without) == []
    sim = simulation(*manifests)
    sim.run(120, until_steady=False)
    assert launched(sim) == ["m5.xlarge"]
    (claim,) = sim.nodeclaims()
    assert claim.metadata.annotations.get(CAPACITY_OVERLAY_APPLIED) == "true"
    (placed,) = sim.pods()
    assert placed.phase == "Running" and placed.node_name == claim.status.node_name


def test_two_overlays_of_one_weight_on_one_offering_conflict_and_the_other_applies() -> None:
    manifests = (
        kwok_nodepool(instance_types=("c5.large", "c5.4xlarge")),
        deployment_manifest("app", replicas=4, cpu="1.5", memory="1Gi"),
        BIG_DISCOUNT,
        overlay(
            "{requirements: [{key: node.kubernetes.io/instance-type, operator: In, values: [c5.4xlarge]}],"
            " priceAdjustment: '+100%'}",
            "a-surcharge",
        ),
    )
    sim = simulation(*manifests)
    sim.run(120, until_steady=False)
    assert launched(sim) == ["c5.4xlarge"]  # savings-plan is taken first (a later name), a-surcharge refused
    conditions = {
        found.name: find_condition(found.status.conditions, "ValidationSucceeded")
        for found in sim.cluster.node_overlays()
    }
    surcharge = conditions["a-surcharge"]
    assert surcharge is not None and (surcharge.status, surcharge.reason) == ("False", "Conflict")
    savings = conditions["savings-plan"]
    assert savings is not None and savings.is_true


def test_the_cluster_autoscaler_baseline_prices_groups_with_the_overlay() -> None:
    # least-waste picks the group that wastes least; with prices equal it is the bigger type's
    # job to lose. The price expander is what overlays move: one discounted type takes every pod.
    manifests = (
        kwok_nodepool(instance_types=("c5.large", "c5.4xlarge")),
        deployment_manifest("app", replicas=4, cpu="1.5", memory="1Gi"),
        BIG_DISCOUNT,
    )
    runs = {}
    for gate in (False, True):
        sim = Simulation(
            SimulationSettings(
                node_overlays=gate,
                autoscaler="cluster-autoscaler",
                cluster_autoscaler=ClusterAutoscalerFlags(expander="price"),
            )
        )
        sim.apply(load_objects(KWOK_NODE_CLASS, *manifests))
        sim.run(300, until_steady=False)
        runs[gate] = (launched(sim), cost_of(sim)["peakPerHour"])
    assert runs[False][0] != runs[True][0]
    assert "c5.4xlarge" in runs[True][0]
    assert runs[True][1] < runs[False][1]


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "savings-plan" / "scenario.yaml"


def test_the_savings_plan_example_costs_less_with_the_overlay(capsys: pytest.CaptureFixture[str]) -> None:
    # The NodeOverlay half of the example, its capacity reservation left out
    # (tests/sim/test_capacity_reservations.py runs the other half).
    code, with_overlay, _ = simulate_json(capsys, str(EXAMPLE), "--feature-gates", "ReservedCapacity=false")
    assert code == 0
    code, without, _ = simulate_json(
        capsys, str(EXAMPLE), "--feature-gates", "NodeOverlay=false,ReservedCapacity=false"
    )
    assert code == 0
    assert with_overlay["cost"]["peakPerHour"] < without["cost"]["peakPerHour"]
    types = {claim["instanceType"] for claim in with_overlay["nodeclaims"]}
    assert any(name.startswith("m5.") for name in types)
    assert not any(claim["instanceType"].startswith("m5.") for claim in without["nodeclaims"])
