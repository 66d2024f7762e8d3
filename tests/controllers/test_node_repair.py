"""Node repair in the disruption pass: an unhealthy node is replaced first, within budgets and the breaker.

The pass runs on the simulator's cluster (the same controllers as ``karpy run``),
whose cloud has Karpenter's AWS repair policies: the kubelet's Ready False or
Unknown held for 30 minutes. A condition is injected on a Node as the node's
kubelet (or a test) would write it.
"""

from __future__ import annotations

from tests.support import KWOK_NODE_CLASS, deployment_manifest, kwok_nodepool, load_objects

from karpy.api.core import NodeCondition
from karpy.api.nodeclaim import TERMINATION_TIMESTAMP_ANNOTATION
from karpy.api.nodepool import REASON_UNHEALTHY
from karpy.disruption.repair import DO_NOT_REPAIR_ANNOTATION
from karpy.sim.simulation import Simulation, SimulationSettings

MINUTE = 60.0


def cluster(nodes: int = 5, *, repair: bool = True, budgets: str = "") -> Simulation:
    """``nodes`` nodes of one pod each (1.5 CPU on c5.large), settled."""
    simulation = Simulation(SimulationSettings(node_repair=repair))
    disruption = "consolidationPolicy: WhenEmpty, consolidateAfter: 1h" + (
        f", budgets: [{budgets}]" if budgets else ""
    )
    simulation.apply(
        load_objects(
            KWOK_NODE_CLASS,
            kwok_nodepool(disruption=disruption, instance_types=("c5.large",)),
            deployment_manifest("web", replicas=nodes, cpu="1500m"),
        )
    )
    simulation.run(10 * MINUTE)
    assert len(list(simulation.cluster.nodes())) == nodes
    return simulation


def break_node(simulation: Simulation, name: str, status: str = "Unknown") -> None:
    """The kubelet stops posting: its Ready turns ``status`` now."""
    node = simulation.cluster.node(name)
    assert node is not None
    now = simulation.clock.now()
    conditions = tuple(c for c in node.conditions if c.type != "Ready")
    ready = NodeCondition("Ready", status, "NodeStatusUnknown", last_transition_time=now)
    simulation.cluster.update(node.with_changes(conditions=(*conditions, ready)))


def node_names(simulation: Simulation) -> set[str]:
    return {node.name for node in simulation.cluster.nodes()}


def events(simulation: Simulation, reason: str) -> list[str]:
    return [event.name for event in simulation.cluster.events if event.reason == reason]


def test_a_node_whose_kubelet_stops_is_replaced_after_its_toleration() -> None:
    simulation = cluster()
    before = node_names(simulation)
    sick = sorted(before)[0]
    break_node(simulation, sick)
    simulation.run(25 * MINUTE, until_steady=False)
    assert sick in node_names(simulation)  # within the 30 minutes Ready may be Unknown
    simulation.run(15 * MINUTE)
    after = node_names(simulation)
    assert sick not in after and len(after) == 5
    assert all(pod.phase == "Running" for pod in simulation.cluster.pods())
    disrupted = simulation.metrics.nodeclaims_unhealthy_disrupted
    assert [labels[0] for labels in disrupted.label_values()] == ["ready"]
    assert [c.reason for c in simulation.disruption.orchestrator.executed] == [REASON_UNHEALTHY]


def test_without_the_gate_no_node_is_repaired() -> None:
    simulation = cluster(repair=False)
    sick = sorted(node_names(simulation))[0]
    break_node(simulation, sick)
    simulation.run(60 * MINUTE)
    assert sick in node_names(simulation)


def test_the_replacement_is_launched_before_the_unhealthy_node_is_deleted() -> None:
    simulation = cluster()
    sick = sorted(node_names(simulation))[0]
    claim = next(c for c in simulation.cluster.nodeclaims() if c.status.node_name == sick)
    seen: list[tuple[int, bool]] = []

    def watch(kind: str, old: object | None, new: object | None) -> None:
        if kind == "NodeClaim":
            current = simulation.cluster.nodeclaim(claim.name)
            claims = len(list(simulation.cluster.nodeclaims()))
            seen.append((claims, current is not None and current.metadata.deleting))

    simulation.cluster.subscribe(watch)
    break_node(simulation, sick)
    simulation.run(45 * MINUTE)
    # A sixth NodeClaim existed while the unhealthy one was not deleting yet.
    assert (6, False) in seen
    first_deleting = next(i for i, (_, deleting) in enumerate(seen) if deleting)
    assert any(count == 6 for count, _ in seen[:first_deleting])


def test_the_breaker_holds_a_pool_with_too_many_unhealthy_nodes_until_one_heals() -> None:
    simulation = cluster()
    first, second = sorted(node_names(simulation))[:2]
    break_node(simulation, first)
    break_node(simulation, second)
    simulation.run(45 * MINUTE, until_steady=False)
    assert {first, second} <= node_names(simulation)  # 2 of 5 > 20%: frozen
    assert first in events(simulation, "NodeRepairBlocked")
    healed = simulation.cluster.node(first)
    assert healed is not None
    ready = NodeCondition("Ready", "True", "KubeletReady", last_transition_time=simulation.clock.now())
    simulation.cluster.update(
        healed.with_changes(conditions=(*(c for c in healed.conditions if c.type != "Ready"), ready))
    )
    simulation.run(10 * MINUTE)
    assert first in node_names(simulation) and second not in node_names(simulation)


def test_do_not_repair_on_the_node_vetoes_repair() -> None:
    simulation = cluster()
    sick = sorted(node_names(simulation))[0]
    node = simulation.cluster.node(sick)
    assert node is not None
    annotations = {**node.metadata.annotations, DO_NOT_REPAIR_ANNOTATION: "true"}
    simulation.cluster.update(node.with_changes(metadata=node.metadata.with_changes(annotations=annotations)))
    break_node(simulation, sick)
    simulation.run(60 * MINUTE, until_steady=False)
    assert sick in node_names(simulation)
    assert sick in events(simulation, "DisruptionBlocked")


def test_the_unhealthy_budget_holds_repair_and_other_reasons_budgets_do_not() -> None:
    simulation = cluster(budgets="{nodes: '0', reasons: [Unhealthy]}")
    sick = sorted(node_names(simulation))[0]
    break_node(simulation, sick)
    simulation.run(60 * MINUTE, until_steady=False)
    assert sick in node_names(simulation)
    loose = cluster(budgets="{nodes: '0', reasons: [Drifted, Underutilized, Empty]}")
    other = sorted(node_names(loose))[0]
    break_node(loose, other)
    loose.run(60 * MINUTE)
    assert other not in node_names(loose)


def test_a_policy_drain_bound_is_stamped_on_the_nodeclaim_as_it_is_deleted() -> None:
    simulation = cluster()
    sick = sorted(node_names(simulation))[0]
    claim = next(c for c in simulation.cluster.nodeclaims() if c.status.node_name == sick)
    stamped: list[str] = []

    def watch(kind: str, old: object | None, new: object | None) -> None:
        current = simulation.cluster.nodeclaim(claim.name)
        if current is not None and TERMINATION_TIMESTAMP_ANNOTATION in current.metadata.annotations:
            stamped.append(current.metadata.annotations[TERMINATION_TIMESTAMP_ANNOTATION])

    simulation.cluster.subscribe(watch)
    # A policy set with a drain bound: Karpenter's kwok provider's (Ready False: forceful, no drain).
    from karpy.cloud.repair_policies import KWOK_REPAIR_POLICIES
    from karpy.disruption.repair import RepairPolicyMatcher

    simulation.disruption.repair_policies = RepairPolicyMatcher(KWOK_REPAIR_POLICIES)
    break_node(simulation, sick, status="False")
    simulation.run(30 * MINUTE)
    assert stamped and sick not in node_names(simulation)


# -- reboot ------------------------------------------------------------------------


def kwok_policies(simulation: Simulation) -> None:
    """Karpenter's kwok provider's policies, whose KWOKRebootRequired reboots the node in place."""
    from karpy.cloud.repair_policies import KWOK_REPAIR_POLICIES
    from karpy.disruption.repair import RepairPolicyMatcher

    simulation.disruption.repair_policies = RepairPolicyMatcher(KWOK_REPAIR_POLICIES)


def reboot_fault(simulation: Simulation, name: str) -> None:
    node = simulation.cluster.node(name)
    assert node is not None
    since = simulation.clock.now() - 11 * MINUTE
    fault = NodeCondition("KWOKRebootRequired", "True", "E2ETest", last_transition_time=since)
    simulation.cluster.update(node.with_changes(conditions=(*node.conditions, fault)))


def clear_fault(simulation: Simulation, name: str) -> None:
    node = simulation.cluster.node(name)
    assert node is not None
    kept = tuple(c for c in node.conditions if c.type != "KWOKRebootRequired")
    simulation.cluster.update(node.with_changes(conditions=kept))


def test_a_reboot_policy_reboots_the_node_in_place_and_its_pods_wait_for_it() -> None:
    from karpy.api.nodeclaim import CONDITION_REBOOTING, REBOOT_SUCCEEDED

    simulation = cluster(1)
    kwok_policies(simulation)
    (name,) = node_names(simulation)
    (claim,) = simulation.cluster.nodeclaims()
    boot_before = simulation.cluster.node(name).boot_id  # type: ignore[union-attr]
    reasons: list[str] = []
    claims_seen: set[str] = set()

    def watch(kind: str, old: object | None, new: object | None) -> None:
        current = simulation.cluster.nodeclaim(claim.name)
        claims_seen.update(c.name for c in simulation.cluster.nodeclaims())
        rebooting = current.condition(CONDITION_REBOOTING) if current is not None else None
        if rebooting is not None and (not reasons or reasons[-1] != rebooting.reason):
            reasons.append(rebooting.reason)
            if rebooting.status == "True" and rebooting.reason == "RebootRequested":
                assert "KWOKRebootRequired" in rebooting.message
                clear_fault(simulation, name)  # the reboot clears the fault

    simulation.cluster.subscribe(watch)
    reboot_fault(simulation, name)
    simulation.run(30 * MINUTE)
    assert reasons == ["RebootRequested", "RebootIssued", REBOOT_SUCCEEDED]
    assert claims_seen == {claim.name}  # no replacement was launched for the displaced pod
    node = simulation.cluster.node(name)
    assert node is not None and node.boot_id != boot_before
    assert node.metadata.labels.get("karpenter.sh/initialized") == "true"
    assert all(t.key != "karpenter.sh/rebooting" for t in node.taints)
    after = simulation.cluster.nodeclaim(claim.name)
    assert after is not None and after.initialized
    (pod,) = list(simulation.cluster.pods())
    assert pod.phase == "Running" and pod.node_name == name
    assert [labels for labels in simulation.metrics.node_reboots.label_values()] == [("succeeded",)]


def test_a_fault_that_outlives_two_reboots_gets_the_node_replaced() -> None:
    simulation = cluster(1)
    kwok_policies(simulation)
    (name,) = node_names(simulation)
    boots: set[str] = set()

    def watch(kind: str, old: object | None, new: object | None) -> None:
        node = simulation.cluster.node(name)
        if node is not None:
            boots.add(node.boot_id)

    simulation.cluster.subscribe(watch)
    reboot_fault(simulation, name)
    simulation.run(60 * MINUTE)
    assert name not in node_names(simulation) and len(node_names(simulation)) == 1
    assert len(boots - {""}) == 2  # two reboots, then the replacement


def test_a_reboot_is_timed_from_its_request_and_its_recovery_from_its_issuance() -> None:
    simulation = cluster(1)
    kwok_policies(simulation)
    (name,) = node_names(simulation)
    cleared: list[bool] = []

    def watch(kind: str, old: object | None, new: object | None) -> None:
        current = simulation.cluster.nodeclaims()
        if not cleared and any(c.rebooting for c in current):
            cleared.append(True)
            clear_fault(simulation, name)

    simulation.cluster.subscribe(watch)
    reboot_fault(simulation, name)
    simulation.run(30 * MINUTE)
    metrics = simulation.metrics
    assert metrics.node_reboot_duration.count(result="succeeded") == 1
    assert metrics.node_reboot_recovery_duration.count() == 1
    text = metrics.registry.exposition()
    assert "# TYPE karpenter_nodes_reboot_duration_seconds histogram" in text
    # Karpenter's buckets, 10 s to 1,280 s; the drain lasts at least 5 s, the node's restart some more.
    assert 'karpenter_nodes_reboot_duration_seconds_bucket{result="succeeded",le="1280"} 1' in text
    assert 'karpenter_nodes_reboot_duration_seconds_bucket{result="succeeded",le="+Inf"} 1' in text
    assert 'karpenter_nodes_reboot_recovery_duration_seconds_bucket{le="10"}' in text
    total = float(
        text.split('karpenter_nodes_reboot_duration_seconds_sum{result="succeeded"} ')[1].split()[0]
    )
    recovery = float(text.split("karpenter_nodes_reboot_recovery_duration_seconds_sum ")[1].split()[0])
    assert total >= 5 and 0 <= recovery < total  # the simulated node restarts at once


def test_a_reboot_the_cloud_refuses_for_good_fails_at_once_and_the_node_is_replaced() -> None:
    from karpy.api.nodeclaim import CONDITION_REBOOTING, REBOOT_FAILED
    from karpy.cloud.provider import NodeRebootFailedError
    from karpy.controllers.reboot import ISSUANCE_TIMEOUT

    simulation = cluster(1)
    kwok_policies(simulation)
    (name,) = node_names(simulation)
    (claim,) = simulation.cluster.nodeclaims()
    asked: list[float] = []

    def denied(nodeclaim: object, operation_id: str) -> None:
        asked.append(simulation.clock.now())
        raise NodeRebootFailedError("UnauthorizedOperation: not authorized to perform ec2:RebootInstances")

    simulation.cloud.reboot = denied  # type: ignore[method-assign]
    failed_at: list[float] = []

    def watch(kind: str, old: object | None, new: object | None) -> None:
        current = simulation.cluster.nodeclaim(claim.name)
        rebooting = current.condition(CONDITION_REBOOTING) if current is not None else None
        if rebooting is not None and rebooting.reason == REBOOT_FAILED and not failed_at:
            failed_at.append(simulation.clock.now())

    simulation.cluster.subscribe(watch)
    reboot_fault(simulation, name)
    simulation.run(30 * MINUTE)
    assert len(asked) == 1  # not retried
    assert failed_at and failed_at[0] - asked[0] < ISSUANCE_TIMEOUT
    assert name not in node_names(simulation) and len(node_names(simulation)) == 1
    assert [labels for labels in simulation.metrics.node_reboots.label_values()] != [("succeeded",)]
