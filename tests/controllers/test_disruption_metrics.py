"""Karpenter's voluntary-disruption, drain and waiting-pod metrics, driven in the simulator and scraped.

The disruption controller records what each pass evaluates (eligible nodes, evaluation time, the
NodePools' budgets) and each command it carries out (decision, reason, consolidation type, and the
$/h a consolidation saves); the termination controller counts drained nodes, drained pods and eviction
requests; the pod metrics keep the age of every pod not yet bound or running.
"""

from __future__ import annotations

from tests.prometheus_text import Exposition, parse
from tests.support import KWOK_NODE_CLASS, deployment_manifest, kwok_nodepool, load_objects

from karpy.api.core import Deployment, Pod
from karpy.operator.karpenter_metrics import Metrics
from karpy.sim.simulation import Simulation

NODEPOOL = kwok_nodepool()


def scrape(metrics: Metrics) -> Exposition:
    return parse(metrics.registry.exposition())


def scaled_up(replicas: int) -> tuple[Simulation, Metrics]:
    metrics = Metrics()
    simulation = Simulation(metrics=metrics)
    simulation.apply(load_objects(KWOK_NODE_CLASS, NODEPOOL, deployment_manifest(replicas=replicas)))
    simulation.run(600)
    assert sum(1 for pod in simulation.pods() if pod.phase == "Running") == replicas
    return simulation, metrics


def scale(simulation: Simulation, replicas: int) -> None:
    deployment = simulation.cluster.get("Deployment", "default/app")
    assert isinstance(deployment, Deployment)
    simulation.cluster.update(deployment.with_changes(replicas=replicas))


def test_emptiness_is_counted_as_delete_decisions_and_drains() -> None:
    simulation, metrics = scaled_up(5)
    nodes = len(simulation.nodeclaims())
    simulation.cluster.delete(simulation.cluster.get("Deployment", "default/app"))
    simulation.run(3600)
    assert simulation.nodeclaims() == []
    exposition = scrape(metrics)
    assert exposition.types["karpenter_voluntary_disruption_decisions_total"] == "counter"
    decisions = exposition.value(
        "karpenter_voluntary_disruption_decisions_total",
        decision="delete",
        reason="empty",
        consolidation_type="empty",
    )
    assert decisions >= 1
    assert (
        exposition.value(
            "karpenter_voluntary_disruption_decisions_by_nodepool_total",
            nodepool="default",
            decision="delete",
            reason="empty",
            consolidation_type="empty",
        )
        == decisions
    )
    # Every pass evaluates emptiness: its candidates are gone by now, its evaluations timed.
    assert exposition.types["karpenter_voluntary_disruption_eligible_nodes"] == "gauge"
    assert exposition.value("karpenter_voluntary_disruption_eligible_nodes", reason="empty") == 0
    assert (
        exposition.types["karpenter_voluntary_disruption_decision_evaluation_duration_seconds"] == "histogram"
    )
    assert (
        exposition.value(
            "karpenter_voluntary_disruption_decision_evaluation_duration_seconds_count",
            reason="empty",
            consolidation_type="empty",
        )
        >= 1
    )
    # Karpenter's duration buckets, 5 ms to 10 minutes.
    buckets = exposition.find(
        "karpenter_voluntary_disruption_decision_evaluation_duration_seconds_bucket",
        reason="empty",
        consolidation_type="empty",
    )
    assert len(buckets) == 46
    # The default budget (10% of the nodes, at least one) while there were nodes.
    assert exposition.find("karpenter_nodepools_allowed_disruptions", nodepool="default", reason="empty")
    assert exposition.find("karpenter_nodepools_nodes_consuming_budgets", nodepool="default", reason="empty")
    # Each empty node's drain finished once.
    assert exposition.value("karpenter_nodes_drained_total", nodepool="default") == nodes


def test_consolidation_counts_its_decisions_savings_and_evictions() -> None:
    simulation, metrics = scaled_up(10)
    before = len(simulation.nodeclaims())
    scale(simulation, 2)
    simulation.run(3600)
    assert len(simulation.nodeclaims()) < before
    exposition = scrape(metrics)
    underutilized = {
        dict(labels)["decision"]: value
        for labels, value in exposition.series("karpenter_voluntary_disruption_decisions_total").items()
        if dict(labels)["reason"] == "underutilized"
    }
    assert underutilized, exposition.series("karpenter_voluntary_disruption_decisions_total")
    assert exposition.value("karpy_voluntary_disruption_savings_per_hour_total", nodepool="default") > 0
    # The pods consolidation moved were evicted through the Eviction API, each accepted.
    assert exposition.value("karpenter_pods_eviction_requests_total", code="200") >= 1
    assert exposition.value("karpenter_pods_drained_total", reason="Underutilized") >= 1


def test_pods_waiting_have_their_age_until_they_run() -> None:
    metrics = Metrics()
    simulation = Simulation(metrics=metrics)
    # Before their node is up: the pods wait unbound.
    simulation.apply(load_objects(KWOK_NODE_CLASS, NODEPOOL, deployment_manifest(replicas=2)))
    simulation.run(0.5, until_steady=False)
    pods = [pod for pod in simulation.pods() if isinstance(pod, Pod)]
    assert len(pods) == 2
    exposition = scrape(metrics)
    for pod in pods:
        names = frozenset({("name", pod.metadata.name), ("namespace", "default")})
        unstarted = exposition.samples[("karpenter_pods_unstarted_time_seconds", names)]
        unbound = exposition.samples[
            ("karpenter_pods_unbound_time_seconds", names | {("dynamic_resources", "false")})
        ]
        assert 0 <= unbound == unstarted <= 1
    simulation.run(600)
    assert all(pod.phase == "Running" for pod in simulation.pods())
    exposition = scrape(metrics)
    assert not exposition.find("karpenter_pods_unstarted_time_seconds")
    assert not exposition.find("karpenter_pods_unbound_time_seconds")


def test_reconcile_errors_are_counted_per_controller() -> None:
    metrics = Metrics()
    metrics.reconciled("provisioning", 0.01, "success")
    metrics.reconciled("termination", 0.01, "error")
    exposition = scrape(metrics)
    assert exposition.value("controller_runtime_reconcile_errors_total", controller="provisioning") == 0
    assert exposition.value("controller_runtime_reconcile_errors_total", controller="termination") == 1
