"""The disruption queue's failures and the pods each disruption sets moving, as Karpenter counts them.

``karpenter_voluntary_disruption_queue_failures_total`` counts, when a command is rolled back after it
started, its replacements that did not come up; ``karpenter_pods_disruption_initiated_total`` the pods
that have to move as each NodeClaim is disrupted (not DaemonSet pods, not finished ones).
"""

from __future__ import annotations

from tests.controllers.test_disruption_metrics import NODEPOOL, scale, scaled_up, scrape
from tests.controllers.test_orchestration import carried_out, launched, replace, world
from tests.support import KWOK_NODE_CLASS, deployment_manifest, load_objects, make_pod

from karpy.api.conditions import TRUE, set_condition
from karpy.api.core import Pod
from karpy.api.nodeclaim import CONDITION_INITIALIZED
from karpy.api.requirements import LABEL_CAPACITY_TYPE, LABEL_NODEPOOL
from karpy.controllers.orchestration import REPLACEMENT_INITIALIZATION_TIMEOUT
from karpy.operator.karpenter_metrics import Metrics
from karpy.sim.simulation import Simulation

QUEUE_FAILURES = "karpenter_voluntary_disruption_queue_failures_total"
PODS_DISRUPTED = "karpenter_pods_disruption_initiated_total"


def pod_on(name: str, node: str, phase: str) -> Pod:
    return make_pod(name, extra_spec=f"  nodeName: {node}").with_changes(phase=phase)


def test_a_replacement_that_fails_counts_a_queue_failure() -> None:
    clock, cluster, orchestrator = world("old")
    carried_out(clock, orchestrator, replace("old"))
    cluster.delete(launched(cluster, orchestrator))  # never launched: its NodeClaim is deleted
    in_flight = orchestrator.in_flight
    assert in_flight is not None
    orchestrator.follow(in_flight, clock.now())
    exposition = scrape(orchestrator.metrics)
    assert exposition.types[QUEUE_FAILURES] == "counter"
    assert exposition.series(QUEUE_FAILURES) == {
        frozenset({("decision", "replace"), ("reason", "underutilized"), ("consolidation_type", "single")}): 1
    }


def test_a_replacement_not_initialized_in_time_counts_a_queue_failure() -> None:
    clock, _, orchestrator = world("a", "b")
    carried_out(clock, orchestrator, replace("a", "b"))
    in_flight = orchestrator.in_flight
    assert in_flight is not None
    clock.advance_to(clock.now() + REPLACEMENT_INITIALIZATION_TIMEOUT)
    orchestrator.follow(in_flight, clock.now())
    exposition = scrape(orchestrator.metrics)
    assert (
        exposition.value(
            QUEUE_FAILURES, decision="replace", reason="underutilized", consolidation_type="multi"
        )
        == 1
    )


def test_a_command_carried_out_counts_no_queue_failure_and_the_pods_it_moves() -> None:
    clock, cluster, orchestrator = world("old")
    old = cluster.nodeclaim("old")
    assert old is not None
    cluster.update(old.with_metadata(labels={LABEL_NODEPOOL: "default", LABEL_CAPACITY_TYPE: "spot"}))
    for index in range(3):
        cluster.create(pod_on(f"web-{index}", "node-old", "Running"))
    cluster.create(pod_on("done", "node-old", "Succeeded"))  # finished: nothing to move
    carried_out(clock, orchestrator, replace("old"))
    new = launched(cluster, orchestrator)
    initialized = set_condition(new.status.conditions, CONDITION_INITIALIZED, TRUE, clock.now())
    cluster.update(new.with_status(conditions=initialized))
    in_flight = orchestrator.in_flight
    assert in_flight is not None
    orchestrator.follow(in_flight, clock.now())
    exposition = scrape(orchestrator.metrics)
    assert not exposition.series(QUEUE_FAILURES)
    assert exposition.types[PODS_DISRUPTED] == "counter"
    assert exposition.series(PODS_DISRUPTED) == {
        frozenset(
            {
                ("reason", "underutilized"),
                ("nodepool", "default"),
                ("capacity_type", "spot"),
                ("consolidation_policy", "when_empty_or_underutilized"),
                ("termination_mode", "graceful"),
            }
        ): 3
    }


def test_consolidation_counts_the_pods_it_sets_moving_as_its_drains_evict_them() -> None:
    simulation, metrics = scaled_up(10)
    scale(simulation, 2)
    simulation.run(3600)
    exposition = scrape(metrics)
    moved = exposition.find(PODS_DISRUPTED, reason="underutilized", nodepool="default")
    assert moved and sum(moved) >= 1
    for labels in exposition.series(PODS_DISRUPTED):
        found = dict(labels)
        assert found["consolidation_policy"] == "when_empty_or_underutilized"
        assert found["termination_mode"] == "graceful"
    # Every pod set moving was evicted by the drain (a consolidation moves only pods that can be).
    assert sum(moved) == exposition.value("karpenter_pods_drained_total", reason="Underutilized")


EXPIRING_NODEPOOL = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      expireAfter: 10m
      terminationGracePeriod: 1h
      requirements:
        - {key: node.kubernetes.io/instance-type, operator: In, values: [c5.large]}
  disruption: {consolidateAfter: Never}
"""


def test_expiration_counts_the_pods_each_expired_node_sets_moving() -> None:
    metrics = Metrics()
    simulation = Simulation(metrics=metrics)
    simulation.apply(load_objects(KWOK_NODE_CLASS, EXPIRING_NODEPOOL, deployment_manifest(replicas=2)))
    simulation.run(60)
    first = {claim.name for claim in simulation.nodeclaims()}
    assert len(first) == 2
    simulation.run(15 * 60, until_steady=False)
    assert not first & {claim.name for claim in simulation.nodeclaims()}, "the first nodes expired"
    exposition = scrape(metrics)
    expired = sum(exposition.find("karpenter_nodeclaims_disrupted_total", reason="expired"))
    assert expired >= len(first)
    # One 1-CPU pod fits a c5.large: each expired node set one pod moving. Not a consolidation: no
    # policy; the terminationGracePeriod bounds the drain (eventual).
    series = exposition.series(PODS_DISRUPTED)
    assert {dict(labels)["consolidation_policy"] for labels in series} == {""}
    assert {dict(labels)["termination_mode"] for labels in series} == {"eventual"}
    assert sum(exposition.find(PODS_DISRUPTED, reason="expired", nodepool="default")) == expired


def test_a_node_that_never_registers_is_disrupted_for_registration_timeout_as_karpenter_says() -> None:
    metrics = Metrics()
    simulation = Simulation(metrics=metrics)
    simulation.cloud.settings.registration_delay = 3600.0
    simulation.apply(load_objects(KWOK_NODE_CLASS, NODEPOOL, deployment_manifest(replicas=1)))
    simulation.run(16 * 60, until_steady=False)
    disrupted = scrape(metrics).series("karpenter_nodeclaims_disrupted_total")
    assert {dict(labels)["reason"] for labels in disrupted} == {"registration_timeout"}
    assert all(dict(labels)["consolidation_policy"] == "" for labels in disrupted)


def test_a_consolidation_names_its_pools_policy_on_each_nodeclaim_it_disrupts() -> None:
    simulation, metrics = scaled_up(5)
    simulation.cluster.delete(simulation.cluster.get("Deployment", "default/app"))
    simulation.run(3600)
    disrupted = scrape(metrics).series("karpenter_nodeclaims_disrupted_total")
    assert disrupted
    for labels in disrupted:
        found = dict(labels)
        assert found["reason"] == "empty"
        assert found["consolidation_policy"] == "when_empty_or_underutilized"
        assert found["termination_mode"] == "graceful"
