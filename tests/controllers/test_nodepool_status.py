"""NodePool and node class status: the computation, and the controller in the simulator.

``kubectl get nodepools -o wide`` prints NODES, READY, CPU and MEMORY from a
NodePool's status; these tests check what karpy writes there, that a node
class karpy cannot serve is named on the pool and in its pods' reasons, and
that reconciling again writes nothing.
"""

from __future__ import annotations

from tests.support import KWOK_NODE_CLASS, deployment_manifest, kwok_nodepool, load_objects

from karpy.api.conditions import FALSE, TRUE, UNKNOWN, Condition, find_condition
from karpy.api.nodeclass import NodeClassStatus
from karpy.api.nodepool import (
    CONDITION_NODECLASS_READY,
    CONDITION_READY,
    CONDITION_VALIDATION_SUCCEEDED,
    NodePool,
    NodePoolStatus,
    status_only_change,
)
from karpy.cloud.kwok.provider import NOT_SERVED_MESSAGE, KwokCloudProvider
from karpy.cloud.provider import REASON_NODECLASS_NOT_SERVED, NodeClassProblem
from karpy.controllers.nodepool import (
    REASON_VALIDATION_FAILED,
    NodePoolStatusController,
    node_class_status,
    nodepool_status,
    unreadable_nodepool_status,
)
from karpy.controllers.provisioning import Provisioner
from karpy.controllers.state import REASON_NODECLASS_NOT_FOUND
from karpy.operator.readiness import REASON_UNHEALTHY_DEPENDENTS, with_ready
from karpy.sim.simulation import Simulation

GIB = 1024**3
EC2_NODE_CLASS = """
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
"""


def ec2_nodepool() -> str:
    return kwok_nodepool().replace(
        "{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}",
        "{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}",
    )


def condition(conditions: tuple[Condition, ...], kind: str) -> Condition:
    found = find_condition(conditions, kind)
    assert found is not None, f"no {kind} condition in {conditions}"
    return found


# -- the computation ------------------------------------------------------------


def test_a_pool_with_a_ready_node_class_is_ready_and_counts_its_resources() -> None:
    resources = {"cpu": 6000, "memory": 12 * GIB, "nodes": 2}
    status = nodepool_status(NodePoolStatus(), 100.0, resources, None, 3)
    assert status.resources == resources
    assert status.nodes == 2
    assert status.node_class_observed_generation == 3
    for kind in (CONDITION_VALIDATION_SUCCEEDED, CONDITION_NODECLASS_READY, CONDITION_READY):
        assert condition(status.conditions, kind).status == TRUE
        assert condition(status.conditions, kind).last_transition_time == 100.0


def test_a_node_class_problem_makes_the_pool_not_ready_with_its_reason_and_message() -> None:
    problem = NodeClassProblem(REASON_NODECLASS_NOT_SERVED, "EC2NodeClass/default is not ready: no AWS")
    status = nodepool_status(NodePoolStatus(), 100.0, {"nodes": 0}, problem, 1)
    nodeclass_ready = condition(status.conditions, CONDITION_NODECLASS_READY)
    assert (nodeclass_ready.status, nodeclass_ready.reason) == (FALSE, REASON_NODECLASS_NOT_SERVED)
    assert nodeclass_ready.message == "EC2NodeClass/default is not ready: no AWS"
    ready = condition(status.conditions, CONDITION_READY)
    assert (ready.status, ready.reason, ready.message) == (
        FALSE,
        REASON_UNHEALTHY_DEPENDENTS,
        "NodeClassReady=False",
    )
    assert condition(status.conditions, CONDITION_VALIDATION_SUCCEEDED).status == TRUE


def test_transition_times_move_only_when_a_condition_status_changes() -> None:
    first = nodepool_status(NodePoolStatus(), 100.0, {"nodes": 1}, None, 1)
    again = nodepool_status(first, 200.0, {"cpu": 2000, "nodes": 2}, None, 1)
    assert again.conditions == first.conditions  # resources changed, conditions did not
    broken = nodepool_status(again, 300.0, {"nodes": 2}, NodeClassProblem("NodeClassNotFound", "gone"), 1)
    assert condition(broken.conditions, CONDITION_NODECLASS_READY).last_transition_time == 300.0
    assert condition(broken.conditions, CONDITION_READY).last_transition_time == 300.0
    assert condition(broken.conditions, CONDITION_VALIDATION_SUCCEEDED).last_transition_time == 100.0


def test_ready_is_unknown_while_a_dependent_is_unset() -> None:
    conditions = with_ready((), (CONDITION_VALIDATION_SUCCEEDED,), 5.0)
    assert condition(conditions, CONDITION_READY).status == UNKNOWN


def test_an_unreadable_pool_fails_validation_naming_the_field_and_keeps_its_resources() -> None:
    before = nodepool_status(NodePoolStatus(), 100.0, {"cpu": 2000, "nodes": 1}, None, 1)
    status = unreadable_nodepool_status(before, 200.0, "spec.limits.cpu", "must not be negative")
    validation = condition(status.conditions, CONDITION_VALIDATION_SUCCEEDED)
    assert (validation.status, validation.reason) == (FALSE, REASON_VALIDATION_FAILED)
    assert validation.message == "spec.limits.cpu: must not be negative"
    ready = condition(status.conditions, CONDITION_READY)
    assert (ready.status, ready.message) == (FALSE, "ValidationSucceeded=False")
    assert status.resources == before.resources and status.nodes == 1


def test_a_node_class_is_ready_unless_the_provider_names_a_problem() -> None:
    ready = node_class_status(NodeClassStatus(), 10.0, None)
    assert condition(ready.conditions, CONDITION_READY).status == TRUE
    problem = NodeClassProblem(REASON_NODECLASS_NOT_SERVED, NOT_SERVED_MESSAGE)
    not_ready = node_class_status(ready, 20.0, problem)
    found = condition(not_ready.conditions, CONDITION_READY)
    assert (found.status, found.reason, found.message) == (
        FALSE,
        REASON_NODECLASS_NOT_SERVED,
        NOT_SERVED_MESSAGE,
    )


def test_a_status_write_is_a_status_only_change_and_a_spec_change_is_not() -> None:
    (loaded,) = load_objects(kwok_nodepool())
    pool = loaded.obj
    assert isinstance(pool, NodePool)
    written = NodePool(
        metadata=pool.metadata.with_changes(resource_version="7"),
        template=pool.template,
        disruption=pool.disruption,
        limits=pool.limits,
        weight=pool.weight,
        status=nodepool_status(NodePoolStatus(), 1.0, {"nodes": 0}, None, 1),
    )
    assert status_only_change(pool, written)
    assert not status_only_change(pool, NodePool(metadata=pool.metadata, template=pool.template, weight=5))
    assert not status_only_change(None, pool)


# -- the controller in the simulator ----------------------------------------------


def simulated(*texts: str) -> Simulation:
    simulation = Simulation()
    simulation.apply(load_objects(*texts))
    return simulation


def test_the_pool_status_counts_its_nodes_and_their_capacity_and_says_ready() -> None:
    simulation = simulated(KWOK_NODE_CLASS, kwok_nodepool(), deployment_manifest(replicas=5))
    simulation.run(120, until_steady=False)
    pool = simulation.cluster.nodepool("default")
    assert pool is not None
    claims = simulation.nodeclaims()
    assert claims and pool.status.nodes == len(claims)
    assert pool.status.resources["nodes"] == len(claims)
    assert pool.status.resources["cpu"] == sum(claim.status.capacity["cpu"] for claim in claims)
    assert pool.status.resources["memory"] == sum(claim.status.capacity["memory"] for claim in claims)
    assert condition(pool.status.conditions, CONDITION_READY).status == TRUE
    node_class = simulation.cluster.node_class("karpenter.kwok.sh", "KWOKNodeClass", "default")
    assert node_class is not None
    assert condition(node_class.status.conditions, CONDITION_READY).status == TRUE
    # Once every pod is gone and the nodes with them, the count goes back to 0.
    simulation.cluster.delete_key("Deployment", "default/app")
    simulation.run(600)
    pool = simulation.cluster.nodepool("default")
    assert pool is not None and simulation.nodeclaims() == []
    assert pool.status.nodes == 0 and pool.status.resources == {"nodes": 0}


def test_reconciling_again_writes_nothing() -> None:
    simulation = simulated(KWOK_NODE_CLASS, kwok_nodepool(), deployment_manifest(replicas=2))
    simulation.run(120, until_steady=False)
    pool = simulation.cluster.nodepool("default")
    assert pool is not None
    controller = NodePoolStatusController(simulation.cluster, simulation.cloud, simulation.clock)
    simulation.clock.advance(60)
    controller.reconcile("NodePool/default")
    controller.reconcile("KWOKNodeClass/default")
    after = simulation.cluster.nodepool("default")
    assert after is not None and after.metadata.resource_version == pool.metadata.resource_version


def test_a_missing_node_class_is_named_on_the_pool_and_in_the_pods_reasons() -> None:
    simulation = simulated(ec2_nodepool(), deployment_manifest(replicas=2))
    simulation.run(30, until_steady=False)
    pool = simulation.cluster.nodepool("default")
    assert pool is not None
    nodeclass_ready = condition(pool.status.conditions, CONDITION_NODECLASS_READY)
    assert (nodeclass_ready.status, nodeclass_ready.reason) == (FALSE, REASON_NODECLASS_NOT_FOUND)
    assert nodeclass_ready.message == "EC2NodeClass/default (karpenter.k8s.aws) not found"
    assert condition(pool.status.conditions, CONDITION_READY).status == FALSE
    reasons = set(simulation.provisioner.last.unschedulable.values())
    assert reasons == {"NodePool default: node class EC2NodeClass/default (karpenter.k8s.aws) not found"}
    failed = [event.message for event in simulation.cluster.events if event.reason == "FailedScheduling"]
    assert failed and all(
        "node class EC2NodeClass/default (karpenter.k8s.aws) not found" in m for m in failed
    )


def test_pods_left_pending_by_a_missing_node_class_are_provisioned_once_it_is_applied() -> None:
    simulation = simulated(ec2_nodepool(), deployment_manifest(replicas=2))
    simulation.run(30, until_steady=False)
    assert simulation.nodeclaims() == []
    simulation.apply(load_objects(EC2_NODE_CLASS))
    simulation.run(120, until_steady=False)
    pool = simulation.cluster.nodepool("default")
    assert pool is not None and condition(pool.status.conditions, CONDITION_READY).status == TRUE
    assert simulation.nodeclaims(), "the pods stayed pending after their node class appeared"


def test_the_kwok_provider_serves_no_ec2_node_class_and_the_pods_are_told_so() -> None:
    pending = (
        "{apiVersion: v1, kind: Pod, metadata: {name: web, namespace: default},"
        " spec: {containers: [{name: web, image: web}]}}"
    )
    simulation = simulated(EC2_NODE_CLASS, ec2_nodepool(), pending)
    cloud = KwokCloudProvider(simulation.cluster)
    node_class = simulation.cluster.node_class("karpenter.k8s.aws", "EC2NodeClass", "default")
    assert node_class is not None
    assert cloud.node_class_problem(node_class) == NodeClassProblem(
        REASON_NODECLASS_NOT_SERVED, "karpy run serves KWOKNodeClass only; no AWS provider is configured"
    )
    provisioner = Provisioner(simulation.cluster, cloud, simulation.clock)
    result = provisioner.provision()
    assert result.created == []
    assert set(result.unschedulable.values()) == {
        "NodePool default: node class EC2NodeClass/default is not ready: "
        "karpy run serves KWOKNodeClass only; no AWS provider is configured"
    }
    controller = NodePoolStatusController(simulation.cluster, cloud, simulation.clock)
    controller.reconcile("NodePool/default")
    controller.reconcile("EC2NodeClass/default")
    pool = simulation.cluster.nodepool("default")
    assert pool is not None
    nodeclass_ready = condition(pool.status.conditions, CONDITION_NODECLASS_READY)
    assert (nodeclass_ready.status, nodeclass_ready.reason) == (FALSE, REASON_NODECLASS_NOT_SERVED)
    node_class = simulation.cluster.node_class("karpenter.k8s.aws", "EC2NodeClass", "default")
    assert node_class is not None
    assert condition(node_class.status.conditions, CONDITION_READY).message == NOT_SERVED_MESSAGE


def capacity_type_pool(*values: str) -> str:
    return kwok_nodepool().replace(
        "values: [c5.large, c5.xlarge, m5.large, m5.xlarge]",
        "values: [c5.large, c5.xlarge, m5.large, m5.xlarge]\n"
        f"        - {{key: karpenter.sh/capacity-type, operator: In, values: [{', '.join(values)}]}}",
    )


def pod_selecting_the_pool() -> str:
    return deployment_manifest(replicas=2).replace(
        "containers:", "nodeSelector: {karpenter.sh/nodepool: default}\n      containers:"
    )


def test_a_pool_allowing_only_an_unknown_capacity_type_fails_validation_and_its_pods_are_told_why() -> None:
    # Karpenter's runtime validation: an In requirement on capacity-type naming none of its values.
    simulation = simulated(KWOK_NODE_CLASS, capacity_type_pool("preemptible"), pod_selecting_the_pool())
    simulation.run(30, until_steady=False)
    pool = simulation.cluster.nodepool("default")
    assert pool is not None
    validation = condition(pool.status.conditions, CONDITION_VALIDATION_SUCCEEDED)
    assert (validation.status, validation.reason) == (FALSE, REASON_VALIDATION_FAILED)
    assert validation.message.startswith(
        "requirement karpenter.sh/capacity-type In [preemptible] matches no offering"
    )
    assert "expected one of: on-demand, reserved, spot" in validation.message
    assert condition(pool.status.conditions, CONDITION_READY).status == FALSE
    reasons = set(simulation.provisioner.last.unschedulable.values())
    assert reasons == {f"NodePool default: {validation.message}"}
    assert not any("karpenter.sh/nodepool" in reason for reason in reasons)
    warnings = [e for e in simulation.cluster.events if e.reason == REASON_VALIDATION_FAILED]
    assert len(warnings) == 1 and validation.message in warnings[0].message


def test_a_pool_allowing_only_a_capacity_type_the_provider_does_not_offer_says_so() -> None:
    # Reserved is a known capacity type, but the simulated kwok catalog has no reserved offering.
    simulation = simulated(KWOK_NODE_CLASS, capacity_type_pool("reserved"), pod_selecting_the_pool())
    simulation.run(30, until_steady=False)
    pool = simulation.cluster.nodepool("default")
    assert pool is not None
    validation = condition(pool.status.conditions, CONDITION_VALIDATION_SUCCEEDED)
    assert validation.status == FALSE
    assert validation.message == (
        "requirement karpenter.sh/capacity-type In [reserved] matches no offering of any instance type"
    )
    assert set(simulation.provisioner.last.unschedulable.values()) == {
        f"NodePool default: {validation.message}"
    }


def test_a_pool_with_one_known_capacity_type_among_unknown_ones_is_valid() -> None:
    simulation = simulated(
        KWOK_NODE_CLASS, capacity_type_pool("preemptible", "spot"), pod_selecting_the_pool()
    )
    simulation.run(30, until_steady=False)
    pool = simulation.cluster.nodepool("default")
    assert pool is not None
    assert condition(pool.status.conditions, CONDITION_READY).status == TRUE
    assert simulation.nodeclaims()


def test_karpenters_capacity_type_validation_holds_whatever_the_node_class() -> None:
    # Karpenter validates the requirement itself: a missing node class does not hide it.
    simulation = simulated(capacity_type_pool("preemptible"), pod_selecting_the_pool())
    simulation.run(30, until_steady=False)
    pool = simulation.cluster.nodepool("default")
    assert pool is not None
    assert condition(pool.status.conditions, CONDITION_VALIDATION_SUCCEEDED).status == FALSE
    assert condition(pool.status.conditions, CONDITION_NODECLASS_READY).status == FALSE
