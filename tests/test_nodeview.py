"""``karpy nodes``' view model, over the simulator's cluster and cloud.

Each figure is checked against what is known by other means: the bill the
simulator's recorder keeps (the price each launch was charged, overlaid with
the NodeOverlay gate), ``karpenter_nodepools_cost_total`` as karpy run's
metrics controller records it from the same cluster, and the pods and Nodes
of the in-memory cluster.
"""

from __future__ import annotations

import pytest
from tests.prometheus_text import parse
from tests.support import KWOK_NODE_CLASS, deployment_manifest, kwok_nodepool, load_objects

from karpy.api.core import Node, NodeCondition
from karpy.api.meta import ObjectMeta
from karpy.api.requirements import LABEL_INSTANCE_TYPE, LABEL_ZONE
from karpy.cli import main
from karpy.nodeview import UNMANAGED, ClusterView, NodeRow, bar, node_view, render
from karpy.operator.karpenter_metrics import Metrics
from karpy.sim.simulation import Simulation, SimulationSettings

POOL = kwok_nodepool(instance_types=("c5.large", "c5.4xlarge"))
APP = deployment_manifest("app", replicas=4, cpu="1.5", memory="1Gi")
DISCOUNT = """
apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {name: savings-plan}
spec:
  requirements: [{key: node.kubernetes.io/instance-type, operator: In, values: [c5.4xlarge]}]
  price: '0.05'
"""
GIB = 2**30


def simulated(*manifests: str, overlays: bool = False) -> tuple[Simulation, Metrics]:
    metrics = Metrics()
    simulation = Simulation(SimulationSettings(node_overlays=overlays), metrics=metrics)
    simulation.apply(load_objects(KWOK_NODE_CLASS, *manifests))
    simulation.run(300)
    assert all(pod.phase == "Running" for pod in simulation.pods())
    return simulation, metrics


def billed_per_hour(simulation: Simulation) -> float:
    return sum(
        record.price_per_hour
        for record in simulation.recorder.nodeclaims.values()
        if record.deleted_at is None
    )


def metered_cost(metrics: Metrics) -> float:
    return parse(metrics.registry.exposition()).value("karpenter_nodepools_cost_total", nodepool="default")


def a_node_of_someone_else(name: str = "kind-control-plane") -> Node:
    return Node(
        metadata=ObjectMeta(name=name, labels={LABEL_INSTANCE_TYPE: "m5.large", LABEL_ZONE: "us-east-1a"}),
        allocatable={"cpu": 2000, "memory": 8 * GIB},
        conditions=(NodeCondition("Ready", "True"),),
    )


def test_each_node_costs_its_offering_and_the_total_is_the_bill_and_the_metric() -> None:
    simulation, metrics = simulated(POOL, APP)
    view = node_view(simulation.cluster, simulation.cloud)
    assert len(view.rows) == len(simulation.nodeclaims()) > 0
    assert view.hourly_price == pytest.approx(billed_per_hour(simulation))
    assert view.hourly_price == pytest.approx(metered_cost(metrics))
    claims = {claim.status.node_name: claim for claim in simulation.nodeclaims()}
    for row in view.rows:
        claim = claims[row.name]
        assert (row.nodepool, row.instance_type, row.zone, row.capacity_type) == (
            "default",
            claim.instance_type,
            claim.zone,
            claim.capacity_type,
        )
        node = simulation.cluster.node(row.name)
        assert node is not None
        assert (row.cpu_allocatable, row.memory_allocatable) == (
            node.allocatable["cpu"],
            node.allocatable["memory"],
        )
        pods = simulation.cluster.pods_on_node(row.name)
        assert row.pods == len(pods)
        assert row.cpu_requested == sum(pod.spec.requests["cpu"] for pod in pods)
        assert row.ready and not row.deleting
    assert view.pods == 4
    assert view.total("cpu_requested") == 4 * 1500
    assert view.total("memory_requested") == 4 * GIB


def test_the_nodeoverlay_price_applies_with_its_gate_only() -> None:
    simulation, metrics = simulated(POOL, APP, DISCOUNT, overlays=True)
    assert [claim.instance_type for claim in simulation.nodeclaims()] == ["c5.4xlarge"]
    overlaid = node_view(simulation.cluster, simulation.cloud, node_overlays=True)
    assert overlaid.hourly_price == pytest.approx(0.05)
    assert overlaid.hourly_price == pytest.approx(metered_cost(metrics))
    listed = node_view(simulation.cluster, simulation.cloud)
    assert listed.hourly_price > 0.2  # a c5.4xlarge at its catalog price


def test_a_node_no_nodepool_manages_is_shown_marked_and_unpriced() -> None:
    simulation, _ = simulated(POOL, APP)
    priced = node_view(simulation.cluster, simulation.cloud).hourly_price
    simulation.cluster.create(a_node_of_someone_else())
    view = node_view(simulation.cluster, simulation.cloud)
    other = view.rows[-1]  # karpy's nodes first
    assert other.name == "kind-control-plane"
    assert not other.managed and other.price is None
    assert view.managed == len(view.rows) - 1 and view.unpriced == 1
    assert view.hourly_price == pytest.approx(priced)
    assert view.total("cpu_allocatable") == sum(row.cpu_allocatable for row in view.rows[:-1]) + 2000
    frame = render(view)
    assert "1 not" in frame[0] and "(1 node without a price)" in frame[0]
    (line,) = [line for line in frame if line.startswith("kind-control-plane")]
    assert UNMANAGED in line and "m5.large" in line


def test_a_nodepool_whose_node_class_is_gone_leaves_its_nodes_unpriced() -> None:
    simulation, _ = simulated(POOL, APP)
    node_class = simulation.cluster.node_class("karpenter.kwok.sh", "KWOKNodeClass", "default")
    simulation.cluster.delete(node_class)
    view = node_view(simulation.cluster, simulation.cloud)
    assert view.rows and all(row.price is None and row.managed for row in view.rows)
    assert view.hourly_price == 0


def row(
    name: str, nodepool: str, price: float | None, cpu: tuple[int, int], memory: tuple[int, int]
) -> NodeRow:
    return NodeRow(
        name=name,
        nodepool=nodepool,
        instance_type="c5.xlarge",
        capacity_type="spot",
        zone="us-east-1a",
        price=price,
        cpu_requested=cpu[0],
        cpu_allocatable=cpu[1],
        memory_requested=memory[0],
        memory_allocatable=memory[1],
        pods=3,
        ready=True,
        deleting=name == "b",
    )


def test_a_frame_shows_the_totals_then_a_line_per_node() -> None:
    view = ClusterView(
        (
            row("a", "default", 0.0685, (3000, 3920), (3 * GIB, 6 * GIB)),
            row("b", "default", 0.0685, (1000, 3920), (1 * GIB, 6 * GIB)),
        )
    )
    frame = render(view)
    assert frame[0] == "2 nodes (2 karpy's, 0 not), 6 pods   $0.1370/hour   $100.01/month"
    assert frame[1] == f"CPU     {bar(4000, 7840)} 4 of 7.84 requested (51%)"
    assert frame[2] == f"Memory  {bar(4 * GIB, 12 * GIB)} 4.0Gi of 12.0Gi requested (33%)"
    assert frame[4].split() == [
        "NODE",
        "NODEPOOL",
        "INSTANCE",
        "TYPE",
        "CAPACITY",
        "ZONE",
        "$/HOUR",
        "CPU",
        "MEMORY",
        "PODS",
        "STATUS",
    ]
    assert frame[5].split()[:6] == ["a", "default", "c5.xlarge", "spot", "us-east-1a", "$0.0685"]
    assert frame[5].endswith(f"{bar(3000, 3920, 10)}  77%  {bar(3 * GIB, 6 * GIB, 10)}  50%  3     Ready")
    assert frame[6].endswith("Ready,Deleting")
    plain = render(view, bars=False)
    assert plain[1] == "CPU     4 of 7.84 requested (51%)"
    assert "█" not in "".join(plain) and "░" not in "".join(plain)


def test_a_bar_is_full_past_the_whole_and_empty_without_one() -> None:
    assert bar(1, 2, 10) == "█" * 5 + "░" * 5
    assert bar(5, 2, 4) == "████"
    assert bar(1, 0, 4) == "░░░░"


def test_karpy_nodes_refuses_a_bad_interval_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nodes", "--once", "--interval", "soon"]) == 2
    assert capsys.readouterr().err.startswith("karpy: ")
