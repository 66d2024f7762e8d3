"""Karpenter's metrics as the controllers record them, driven in the simulator and read back as text."""

from __future__ import annotations

import builtins

import pytest
from tests.prometheus_text import Exposition, parse
from tests.support import KWOK_NODE_CLASS, deployment_manifest, kwok_nodepool, load_objects

from karpy import __version__
from karpy.api.instancetype import InstanceType
from karpy.api.nodeclaim import NodeClaim
from karpy.api.nodeclass import NodeClass
from karpy.api.nodepool import NodePool
from karpy.cloud.provider import (
    CloudProviderError,
    InsufficientCapacityError,
    NodeClaimNotFoundError,
    NodeClassProblem,
    RepairPolicy,
)
from karpy.controllers.metering import MeteredCloudProvider
from karpy.operator.karpenter_metrics import Metrics, reason_label
from karpy.sim.cloud import CapacityFailure
from karpy.sim.simulation import Simulation

NODEPOOL = kwok_nodepool(extra_spec='  limits: {cpu: "100", memory: 400Gi}')
DEPLOYMENT = deployment_manifest(replicas=5)


def scrape(metrics: Metrics) -> Exposition:
    return parse(metrics.registry.exposition())


@pytest.fixture
def scaled_up() -> tuple[Simulation, Metrics]:
    metrics = Metrics()
    simulation = Simulation(metrics=metrics)
    simulation.apply(load_objects(KWOK_NODE_CLASS, NODEPOOL, DEPLOYMENT))
    simulation.run(600)
    assert sum(1 for pod in simulation.pods() if pod.phase == "Running") == 5
    return simulation, metrics


def test_provisioning_counts_created_nodeclaims_by_nodepool_and_reason(
    scaled_up: tuple[Simulation, Metrics],
) -> None:
    simulation, metrics = scaled_up
    claims = simulation.nodeclaims()
    exposition = scrape(metrics)
    assert exposition.types["karpenter_nodeclaims_created_total"] == "counter"
    assert exposition.series("karpenter_nodeclaims_created_total") == {
        frozenset({("reason", "provisioned"), ("nodepool", "default"), ("min_values_relaxed", "false")}): len(
            claims
        )
    }


def test_pod_startup_and_binding_are_measured_for_pods_seen_pending(
    scaled_up: tuple[Simulation, Metrics],
) -> None:
    _, metrics = scaled_up
    exposition = scrape(metrics)
    assert exposition.types["karpenter_pods_startup_duration_seconds"] == "summary"
    assert exposition.value("karpenter_pods_startup_duration_seconds_count") == 5
    # In the simulator: a 1 s batch, a registration delay and the kubelet's start, in virtual seconds.
    fastest = exposition.value("karpenter_pods_startup_duration_seconds", quantile="0")
    slowest = exposition.value("karpenter_pods_startup_duration_seconds", quantile="1")
    assert 1 <= fastest <= slowest < 120
    assert exposition.value("karpenter_pods_bound_duration_seconds_count", dynamic_resources="false") == 5


def test_scheduling_simulations_are_timed_and_leave_their_queue_depth(
    scaled_up: tuple[Simulation, Metrics],
) -> None:
    _, metrics = scaled_up
    exposition = scrape(metrics)
    assert (
        exposition.value("karpenter_scheduler_scheduling_duration_seconds_count", controller="provisioning")
        >= 1
    )
    depth = exposition.series("karpenter_scheduler_queue_depth")
    assert len(depth) == 1, "only the latest simulation's series is kept"
    (labels, value), *_ = depth.items()
    assert dict(labels)["controller"] == "provisioning"
    assert value == 0  # every pod placed
    assert exposition.value("karpenter_scheduler_unschedulable_pods_count", controller="provisioning") == 0


def test_nodepool_usage_and_limits(scaled_up: tuple[Simulation, Metrics]) -> None:
    simulation, metrics = scaled_up
    claims = simulation.nodeclaims()
    exposition = scrape(metrics)
    cpu = sum(claim.status.capacity["cpu"] for claim in claims) / 1000
    memory = sum(claim.status.capacity["memory"] for claim in claims)
    assert exposition.value("karpenter_nodepools_usage", resource_type="cpu", nodepool="default") == cpu
    assert exposition.value("karpenter_nodepools_usage", resource_type="memory", nodepool="default") == memory
    assert exposition.value("karpenter_nodepools_usage", resource_type="nodes", nodepool="default") == len(
        claims
    )
    assert exposition.value("karpenter_nodepools_limit", resource_type="cpu", nodepool="default") == 100
    assert (
        exposition.value("karpenter_nodepools_limit", resource_type="memory", nodepool="default")
        == 400 * 2**30
    )


def test_cluster_state_and_cloud_provider_calls(scaled_up: tuple[Simulation, Metrics]) -> None:
    simulation, metrics = scaled_up
    exposition = scrape(metrics)
    assert exposition.value("karpenter_cluster_state_synced") == 1
    assert exposition.value("karpenter_cluster_state_node_count") == len(list(simulation.cluster.nodes()))
    creates = exposition.value(
        "karpenter_cloudprovider_duration_seconds_count",
        controller="nodeclaim.lifecycle",
        method="Create",
        provider=simulation.cloud.name,
    )
    assert creates == len(simulation.nodeclaims())
    assert "karpenter_cloudprovider_errors_total" not in exposition.types  # nothing failed
    assert exposition.value("karpenter_build_info", version=__version__) == 1


def test_empty_nodes_are_counted_disrupted_and_terminated(scaled_up: tuple[Simulation, Metrics]) -> None:
    simulation, metrics = scaled_up
    launched = {(claim.capacity_type, claim.zone) for claim in simulation.nodeclaims()}
    count = len(simulation.nodeclaims())
    simulation.cluster.delete(simulation.cluster.get("Deployment", "default/app"))
    simulation.run(3600)
    assert simulation.nodeclaims() == []
    exposition = scrape(metrics)
    assert (
        sum(exposition.find("karpenter_nodeclaims_disrupted_total", reason="empty", nodepool="default"))
        == count
    )
    assert sum(exposition.series("karpenter_nodeclaims_terminated_total").values()) == count
    for labels in exposition.series("karpenter_nodeclaims_terminated_total"):
        found = dict(labels)
        assert found["nodepool"] == "default"
        assert (found["capacity_type"], found["zone"]) in launched
    # The pool's usage follows its NodeClaims down to nothing.
    assert exposition.value("karpenter_nodepools_usage", resource_type="nodes", nodepool="default") == 0
    assert exposition.value("karpenter_cluster_state_node_count") == 0


def test_a_deleted_nodepool_leaves_no_series(scaled_up: tuple[Simulation, Metrics]) -> None:
    simulation, metrics = scaled_up
    simulation.cluster.delete(simulation.cluster.get("Deployment", "default/app"))
    simulation.run(3600)
    simulation.cluster.delete(simulation.cluster.get("NodePool", "default"))
    simulation.run(60, until_steady=False)
    exposition = scrape(metrics)
    assert not exposition.find("karpenter_nodepools_usage", nodepool="default")
    assert not exposition.find("karpenter_nodepools_limit", nodepool="default")


def test_disruption_reasons_are_written_as_karpenter_writes_them() -> None:
    assert reason_label("Underutilized") == "underutilized"
    assert reason_label("Drifted") == "drifted"
    assert reason_label("Empty") == "empty"
    assert reason_label("insufficient_capacity") == "insufficient_capacity"
    assert reason_label("NodeRegistrationFailed") == "node_registration_failed"


class FailingCloud:
    name = "failing"

    def __init__(self, error: Exception) -> None:
        self.error = error

    def create(self, nodeclaim: NodeClaim) -> NodeClaim:
        raise self.error

    def delete(self, nodeclaim: NodeClaim) -> None:
        raise self.error

    def get(self, provider_id: str) -> NodeClaim:
        raise self.error

    def list(self) -> builtins.list[NodeClaim]:
        return []

    def get_instance_types(self, nodepool: NodePool) -> builtins.list[InstanceType]:
        raise self.error

    def is_drifted(self, nodeclaim: NodeClaim) -> str:
        return ""

    def repair_policies(self) -> builtins.list[RepairPolicy]:
        return []

    supports_reboot = False

    def reboot(self, nodeclaim: NodeClaim, operation_id: str) -> None:
        raise NotImplementedError

    def node_class_problem(self, node_class: NodeClass) -> NodeClassProblem | None:
        return None

    def mark_offering_unavailable(self, instance_type: str, zone: str, capacity_type: str) -> None:
        raise self.error


@pytest.mark.parametrize(
    ("error", "label"),
    [
        (InsufficientCapacityError("no c5.large"), "InsufficientCapacityError"),
        (NodeClaimNotFoundError("gone"), "NodeClaimNotFoundError"),
        (CloudProviderError("throttled"), ""),
    ],
)
def test_cloud_provider_errors_are_counted_by_controller_method_and_type(
    error: Exception, label: str
) -> None:
    metrics = Metrics()
    cloud = MeteredCloudProvider(FailingCloud(error), metrics, "termination")
    with pytest.raises(type(error)):
        cloud.get("kwok://x")
    assert cloud.list() == []
    exposition = scrape(metrics)
    assert (
        exposition.value(
            "karpenter_cloudprovider_errors_total",
            controller="termination",
            method="Get",
            provider="failing",
            error=label,
        )
        == 1
    )
    assert exposition.find("karpenter_cloudprovider_errors_total", method="List") == []
    assert (
        exposition.value(
            "karpenter_cloudprovider_duration_seconds_count",
            controller="termination",
            method="List",
            provider="failing",
        )
        == 1
    )


def test_an_insufficient_capacity_launch_counts_as_disrupted() -> None:
    metrics = Metrics()
    simulation = Simulation(metrics=metrics)
    simulation.cloud.settings.capacity_failures.append(CapacityFailure(capacity_type="spot"))
    simulation.apply(load_objects(KWOK_NODE_CLASS, NODEPOOL, DEPLOYMENT))
    simulation.run(600)
    exposition = scrape(metrics)
    failed = exposition.find("karpenter_nodeclaims_disrupted_total", reason="insufficient_capacity")
    errors = exposition.find("karpenter_cloudprovider_errors_total", error="InsufficientCapacityError")
    assert sum(failed) == sum(errors) >= 1


def test_instance_termination_is_timed_per_nodepool(scaled_up: tuple[Simulation, Metrics]) -> None:
    simulation, metrics = scaled_up
    count = len(simulation.nodeclaims())
    simulation.cluster.delete(simulation.cluster.get("Deployment", "default/app"))
    simulation.run(3600)
    assert simulation.nodeclaims() == []
    exposition = scrape(metrics)
    name = "karpenter_nodeclaims_instance_termination_duration_seconds"
    assert exposition.types[name] == "histogram"
    assert exposition.value(f"{name}_count", nodepool="default") == count
    # Karpenter's buckets: 1 s to 1,024 s, doubling.
    assert exposition.value(f"{name}_bucket", nodepool="default", le="1024") == count
    assert not exposition.find(f"{name}_bucket", le="2048")


def test_unfinished_work_is_the_time_the_running_simulation_has_taken_when_scraped() -> None:
    metrics = Metrics()
    now = [100.0]
    metrics.wall_clock = lambda: now[0]
    name = "karpenter_scheduler_unfinished_work_seconds"
    with metrics.scheduling("provisioning", 3):
        now[0] = 102.5
        during = scrape(metrics)
        assert during.types[name] == "gauge"
        ((labels, value),) = during.series(name).items()
        assert dict(labels) == {"controller": "provisioning", "scheduling_id": "1"}
        assert value == 2.5
        now[0] = 104.0
        assert scrape(metrics).value(name, controller="provisioning", scheduling_id="1") == 4.0
    assert scrape(metrics).series(name) == {}  # none between simulations, as Karpenter's
    assert scrape(metrics).value(
        "karpenter_scheduler_scheduling_duration_seconds_sum", controller="provisioning"
    ) == pytest.approx(4.0)


def test_pending_pods_are_counted_by_effective_zone_per_simulation() -> None:
    nodepool_zones = kwok_nodepool()
    pinned = deployment_manifest("pinned", replicas=2).replace(
        "    spec:\n", "    spec:\n      nodeSelector: {topology.kubernetes.io/zone: test-zone-b}\n"
    )
    metrics = Metrics()
    simulation = Simulation(metrics=metrics)
    simulation.apply(load_objects(KWOK_NODE_CLASS, nodepool_zones, deployment_manifest(replicas=3), pinned))
    simulation.run(5)
    name = "karpenter_scheduler_pending_pods_by_effective_zone_count"
    exposition = scrape(metrics)
    assert exposition.types[name] == "gauge"
    assert exposition.series(name) == {
        frozenset({("controller", "provisioning"), ("zone", "flexible")}): 3,
        frozenset({("controller", "provisioning"), ("zone", "test-zone-b")}): 2,
    }
    # The next simulation's pods replace the last one's series.
    metrics.pending_pods_by_zone("provisioning", ["flexible"])
    flexible = frozenset({("controller", "provisioning"), ("zone", "flexible")})
    assert scrape(metrics).series(name) == {flexible: 1}
