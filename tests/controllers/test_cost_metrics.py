"""Cost, offering and node metrics under Karpenter's names, driven in the simulator and read back as text.

The figures are checked against what the simulator knows by other means: the
bill its recorder keeps (the price each launch was charged, overlaid when the
NodeOverlay gate is on), the catalog's offerings, and the Nodes and pods of
the in-memory cluster.
"""

from __future__ import annotations

import builtins

import pytest
from tests.prometheus_text import Exposition, parse
from tests.support import KWOK_NODE_CLASS, deployment_manifest, kwok_nodepool, load_objects

from karpy.api.instancetype import InstanceType
from karpy.api.nodepool import NodePool
from karpy.cloud.kwok_catalog import load_kwok_catalog
from karpy.cloud.provider import CloudProviderError
from karpy.controllers.metering import NodeMetrics, NodePoolMetrics, instance_type_size, node_metric_labels
from karpy.operator.karpenter_metrics import NODE_LABEL_NAMES, Metrics
from karpy.operator.metrics import Registry
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
DAEMONSET = """
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: default}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers:
      - name: agent
        image: agent
        resources: {requests: {cpu: 100m, memory: 64Mi}, limits: {cpu: 200m, memory: 128Mi}}
"""


def scrape(metrics: Metrics) -> Exposition:
    return parse(metrics.registry.exposition())


def simulated(*manifests: str, overlays: bool = False) -> tuple[Simulation, Metrics]:
    metrics = Metrics()
    simulation = Simulation(SimulationSettings(node_overlays=overlays), metrics=metrics)
    simulation.apply(load_objects(KWOK_NODE_CLASS, *manifests))
    simulation.run(300)
    assert all(pod.phase == "Running" for pod in simulation.pods())
    return simulation, metrics


def billed_per_hour(simulation: Simulation) -> float:
    """What the simulator's bill charges an hour for the NodeClaims still there."""
    return sum(
        record.price_per_hour
        for record in simulation.recorder.nodeclaims.values()
        if record.deleted_at is None
    )


def test_a_nodepool_costs_what_its_launched_offerings_are_billed() -> None:
    simulation, metrics = simulated(POOL, APP)
    exposition = scrape(metrics)
    assert exposition.types["karpenter_nodepools_cost_total"] == "gauge"
    cost = exposition.value("karpenter_nodepools_cost_total", nodepool="default")
    assert cost > 0.1  # four c5.large at list price
    assert cost == pytest.approx(billed_per_hour(simulation))


def test_the_cost_is_the_overlaid_price_with_the_nodeoverlay_gate() -> None:
    simulation, metrics = simulated(POOL, APP, DISCOUNT, overlays=True)
    assert [claim.instance_type for claim in simulation.nodeclaims()] == ["c5.4xlarge"]
    exposition = scrape(metrics)
    assert exposition.value("karpenter_nodepools_cost_total", nodepool="default") == pytest.approx(0.05)
    # The offering metrics show the price karpy plans with: the overlaid one.
    zone = simulation.nodeclaims()[0].zone
    price = exposition.value(
        "karpenter_cloudprovider_instance_type_offering_price_estimate",
        instance_type="c5.4xlarge",
        capacity_type="on-demand",
        zone=zone,
    )
    assert price == pytest.approx(0.05)


def test_the_cost_goes_to_zero_when_the_nodes_go_and_the_series_with_the_nodepool() -> None:
    simulation, metrics = simulated(POOL, APP)
    simulation.cluster.delete(simulation.cluster.get("Deployment", "default/app"))
    simulation.run(600)
    assert not simulation.nodeclaims()
    assert scrape(metrics).value("karpenter_nodepools_cost_total", nodepool="default") == 0
    simulation.cluster.delete(simulation.cluster.get("NodePool", "default"))
    simulation.run(60)
    assert not scrape(metrics).find("karpenter_nodepools_cost_total")


def test_every_offering_of_the_catalogs_is_priced_and_its_type_sized() -> None:
    simulation, metrics = simulated(POOL, APP)
    exposition = scrape(metrics)
    (pool,) = simulation.cluster.nodepools()
    catalog = simulation.cloud.get_instance_types(pool)
    prices = exposition.series("karpenter_cloudprovider_instance_type_offering_price_estimate")
    assert len(prices) == sum(len(instance_type.offerings) for instance_type in catalog)
    for instance_type in catalog[:20]:
        for offering in instance_type.offerings:
            labels = {
                "instance_type": instance_type.name,
                "capacity_type": offering.capacity_type,
                "zone": offering.zone,
            }
            assert prices[frozenset(labels.items())] == offering.price
            available = "karpenter_cloudprovider_instance_type_offering_available"
            assert exposition.value(available, **labels) == (1 if offering.available else 0)
    c5_large = {"instance_type": "c5.large"}
    assert exposition.value("karpenter_cloudprovider_instance_type_cpu_cores", **c5_large) == 2
    assert exposition.value("karpenter_cloudprovider_instance_type_memory_bytes", **c5_large) == 4 * 2**30


class BrokenCloud:
    """A cloud whose catalog cannot be had (an unready node class, say)."""

    name = "broken"

    def get_instance_types(self, nodepool: NodePool) -> builtins.list[InstanceType]:
        raise CloudProviderError("no catalog")


def test_a_catalog_that_cannot_be_had_counts_a_cost_tracker_error_and_keeps_the_last_cost() -> None:
    simulation, metrics = simulated(POOL, APP)
    before = scrape(metrics).value("karpenter_nodepools_cost_total", nodepool="default")
    tracker = NodePoolMetrics(simulation.cluster, metrics, BrokenCloud())  # type: ignore[arg-type]
    tracker.reconcile("default")
    exposition = scrape(metrics)
    assert exposition.types["karpenter_nodepools_cost_tracker_errors_total"] == "counter"
    assert exposition.value("karpenter_nodepools_cost_tracker_errors_total", nodepool="default") == 1
    assert exposition.value("karpenter_nodepools_cost_total", nodepool="default") == before


def test_node_metrics_show_allocatable_requests_daemons_and_overhead_per_node() -> None:
    simulation, metrics = simulated(POOL, APP, DAEMONSET)
    exposition = scrape(metrics)
    nodes = list(simulation.cluster.nodes())
    assert nodes
    for node in nodes:
        labels = node_metric_labels(node)
        assert tuple(labels) == NODE_LABEL_NAMES  # in declaration order: the pass keys series by it
        assert labels["nodepool"] == "default" and labels["managed"] == "true"
        assert labels["instance_type"] == node.metadata.labels["node.kubernetes.io/instance-type"]
        cpu = {**labels, "resource_type": "cpu"}
        memory = {**labels, "resource_type": "memory"}
        assert exposition.value("karpenter_nodes_allocatable", **cpu) == node.allocatable["cpu"] / 1000
        assert exposition.value("karpenter_nodes_allocatable", **memory) == node.allocatable["memory"]
        overhead = (node.capacity["cpu"] - node.allocatable["cpu"]) / 1000
        assert exposition.value("karpenter_nodes_system_overhead", **cpu) == pytest.approx(overhead)
        pods = [pod for pod in simulation.cluster.pods_on_node(node.name) if not pod.is_terminal]
        requested = sum(pod.spec.requests.get("cpu", 0) for pod in pods) / 1000
        assert exposition.value("karpenter_nodes_total_pod_requests", **cpu) == pytest.approx(requested)
        # One agent per node: its request and limit.
        assert exposition.value("karpenter_nodes_total_daemon_requests", **cpu) == pytest.approx(0.1)
        assert exposition.value("karpenter_nodes_total_daemon_limits", **cpu) == pytest.approx(0.2)
        assert exposition.value("karpenter_nodes_total_daemon_limits", **memory) == 128 * 2**20
        # Each pod counts one of the `pods` resource, as in Karpenter's sums.
        count = {**labels, "resource_type": "pods"}
        assert exposition.value("karpenter_nodes_total_pod_requests", **count) == len(pods)
        assert exposition.value("karpenter_nodes_total_daemon_requests", **count) == 1
        assert exposition.value("karpenter_nodes_current_lifetime_seconds", **labels) > 0
    allocatable = sum(node.allocatable["cpu"] for node in nodes)
    requested = sum(pod.spec.requests.get("cpu", 0) for pod in simulation.pods() if pod.node_name)
    utilization = exposition.value("karpenter_cluster_utilization_percent", resource_type="cpu")
    assert utilization == pytest.approx(100 * requested / allocatable)


def test_nodes_created_and_terminated_are_counted_by_nodepool_and_zone() -> None:
    simulation, metrics = simulated(POOL, APP)
    zones = sorted(claim.zone for claim in simulation.nodeclaims())
    created = scrape(metrics).series("karpenter_nodes_created_total")
    assert sum(created.values()) == len(zones) > 0
    for zone in set(zones):
        key = frozenset({("nodepool", "default"), ("zone", zone)})
        assert created[key] == zones.count(zone)
    simulation.cluster.delete(simulation.cluster.get("Deployment", "default/app"))
    simulation.run(600)
    assert not list(simulation.cluster.nodes())
    exposition = scrape(metrics)
    assert sum(exposition.series("karpenter_nodes_terminated_total").values()) == len(zones)
    # The nodes gone, their series went with them.
    assert not exposition.find("karpenter_nodes_allocatable")
    # How long their termination and their lives took, by NodePool, in Karpenter's types and buckets.
    assert exposition.types["karpenter_nodes_termination_duration_seconds"] == "summary"
    assert exposition.types["karpenter_nodes_lifetime_duration_seconds"] == "histogram"
    assert exposition.types["karpenter_nodeclaims_termination_duration_seconds"] == "histogram"
    for name in (
        "karpenter_nodes_termination_duration_seconds_count",
        "karpenter_nodes_lifetime_duration_seconds_count",
        "karpenter_nodeclaims_termination_duration_seconds_count",
    ):
        assert exposition.value(name, nodepool="default") == len(zones)
    lifetime_buckets = exposition.find("karpenter_nodes_lifetime_duration_seconds_bucket", le="900")
    assert lifetime_buckets == [len(zones)]  # they lived less than 15 minutes of virtual time
    assert exposition.find("karpenter_nodeclaims_termination_duration_seconds_bucket", le="2048") == [
        len(zones)
    ]
    assert (
        exposition.value("karpenter_nodes_termination_duration_seconds", nodepool="default", quantile="1")
        >= 0
    )


def test_a_gauge_replaces_its_series_at_once() -> None:
    gauge = Registry().gauge("g", "help", ["pool", "kind"])
    gauge.labels(pool="a", kind="x").set(1)
    gauge.labels(pool="b", kind="x").set(2)
    gauge.replace([({"kind": "y"}, 3.0)], pool="a")
    assert gauge.label_values() == [("a", "y"), ("b", "x")]
    gauge.replace([])
    assert gauge.label_values() == []


def test_node_metrics_pass_every_five_seconds_in_run_and_on_changes_in_the_simulator() -> None:
    simulation, metrics = simulated(POOL, APP)
    periodic = NodeMetrics(simulation.cluster, simulation.clock, metrics, resync=5.0)
    assert periodic.reconcile("all") == 5.0
    assert {watch.kind for watch in periodic.watches()} == {"Node", "NodeClaim"}
    on_changes = NodeMetrics(simulation.cluster, simulation.clock, metrics)
    assert on_changes.reconcile("all") is None
    assert {watch.kind for watch in on_changes.watches()} == {"Node", "NodeClaim", "Pod"}


def test_every_pod_has_one_state_series_with_its_node_and_goes_with_it() -> None:
    simulation, metrics = simulated(POOL, APP)
    exposition = scrape(metrics)
    assert exposition.types["karpenter_pods_state"] == "gauge"
    states = exposition.series("karpenter_pods_state")
    pods = simulation.pods()
    assert len(states) == len(pods) == 4
    for pod in pods:
        node = simulation.cluster.node(pod.node_name)
        assert node is not None
        owner = pod.metadata.owner_references[0]
        labels = {
            "name": pod.metadata.name,
            "namespace": "default",
            "owner": f"/apis/apps/v1/namespaces/default/replicasets/{owner.name}",
            "node": node.name,
            "scheduled": "true",
            "nodepool": "default",
            "zone": node.metadata.labels["topology.kubernetes.io/zone"],
            "arch": "amd64",
            "capacity_type": node.metadata.labels["karpenter.sh/capacity-type"],
            "instance_type": node.metadata.labels["node.kubernetes.io/instance-type"],
            "phase": "Running",
            "ready": "true",
            "managed": "true",
        }
        assert states[frozenset(labels.items())] == 1
    simulation.cluster.delete(simulation.cluster.get("Deployment", "default/app"))
    simulation.run(600)
    assert not scrape(metrics).find("karpenter_pods_state")


def test_a_type_is_sized_from_karpenters_kwok_labels_whose_memory_is_a_quantity() -> None:
    """Karpenter's kwok types label memory as a quantity ("32Gi"), the AWS provider's in MiB."""
    catalog = {t.name: t for t in load_kwok_catalog().instance_types()}
    kwok_type = catalog["c-8x-amd64-linux"]
    labels = kwok_type.requirements.labels(include_well_known=True)
    assert labels["karpenter.kwok.sh/instance-memory"] == "16Gi"
    assert instance_type_size(kwok_type) == (8, 16 * 2**30)
