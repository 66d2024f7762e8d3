"""The EC2NodeClass status controller against the seeded account, in the simulator's in-memory cluster.

The controllers run as ``karpy run`` runs them (a :class:`Runtime` fed by the
cluster's change notifications), with the real SDK over HTTP to moto. The
NodePool status controller is given a cloud provider whose only AWS part is
:func:`node_class_problem_from_status`, which is what the AWS provider's
``node_class_problem`` is, so the test follows a selector that matches
nothing from the class' status to the NodePool's ``NodeClassReady`` and the
pods' FailedScheduling events.
"""

from __future__ import annotations

import dataclasses
import logging

import pytest
from tests.cloud.aws.conftest import (
    CLUSTER,
    DISCOVERY_TAG,
    KUBERNETES_VERSION,
    NODE_ROLE,
    REGION,
    SSM_PREFIX,
    ZONES,
    AwsWorld,
)
from tests.support import load_objects

from karpy.api.conditions import FALSE, TRUE, Condition, find_condition
from karpy.api.nodeclass import EC2NodeClass, NodeClass, SelectorTerm
from karpy.api.nodepool import CONDITION_NODECLASS_READY, CONDITION_READY
from karpy.cloud.aws.client import AwsApiError, AwsClient
from karpy.cloud.aws.nodeclass_status import RESOLVE_INTERVAL, RETRY_INTERVAL, EC2NodeClassStatusController
from karpy.cloud.aws.resolution import (
    CONDITION_SUBNETS_READY,
    REASON_NODECLASS_READINESS_UNKNOWN,
    REASON_SUBNETS_NOT_FOUND,
    node_class_problem_from_status,
)
from karpy.cloud.aws.selectors import Filter, Subnet
from karpy.cloud.aws.settings import AwsSettings
from karpy.cloud.provider import NodeClassProblem
from karpy.controllers.nodepool import NodePoolStatusController
from karpy.controllers.provisioning import Provisioner
from karpy.operator.readiness import REASON_UNHEALTHY_DEPENDENTS
from karpy.operator.runtime import Runtime
from karpy.sim.clock import VirtualClock
from karpy.sim.cloud import SimulatedCloud
from karpy.sim.store import InMemoryCluster

SETTINGS = AwsSettings(
    cluster_name=CLUSTER, region=REGION, ssm_prefix=SSM_PREFIX, kubernetes_version=KUBERNETES_VERSION
)
TYPO = "typo"

NODE_CLASS = f"""
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {{name: default}}
spec:
  role: {NODE_ROLE}
  amiSelectorTerms: [{{alias: al2023@latest}}]
  subnetSelectorTerms: [{{tags: {{{DISCOVERY_TAG}: SUBNET_TAG}}}}]
  securityGroupSelectorTerms: [{{tags: {{{DISCOVERY_TAG}: {CLUSTER}}}}}]
"""
NODEPOOL = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements: [{key: node.kubernetes.io/instance-type, operator: In, values: [c5.large]}]
"""
PENDING_POD = (
    "{apiVersion: v1, kind: Pod, metadata: {name: web, namespace: default},"
    " spec: {containers: [{name: web, image: web}]}}"
)


class StatusReadingCloud(SimulatedCloud):
    """The simulated cloud, but an EC2NodeClass is ready as its status says, as on AWS."""

    def node_class_problem(self, node_class: NodeClass) -> NodeClassProblem | None:
        assert isinstance(node_class, EC2NodeClass)
        return node_class_problem_from_status(node_class)


class FlakyClient(AwsClient):
    """The real client, except that DescribeSubnets is throttled while ``throttled`` is set."""

    throttled = False

    def describe_subnets(self, filters: tuple[Filter, ...]) -> list[Subnet]:
        if self.throttled:
            raise AwsApiError("RequestLimitExceeded", "Request limit exceeded.", retryable=True)
        return super().describe_subnets(filters)


class World:
    """An in-memory cluster with the status controllers registered on a runtime."""

    def __init__(self, subnet_tag: str, client: AwsClient | None = None) -> None:
        self.clock = VirtualClock()
        self.cluster = InMemoryCluster(self.clock)
        self.runtime = Runtime(self.clock)
        self.cluster.subscribe(self.runtime.on_change)
        self.cloud = StatusReadingCloud(self.cluster, self.clock)
        self.client = client or AwsClient.for_region(REGION)
        self.controller = EC2NodeClassStatusController(
            self.cluster, self.client, self.clock, settings=SETTINGS
        )
        self.runtime.register(self.controller)
        self.runtime.register(NodePoolStatusController(self.cluster, self.cloud, self.clock))
        for item in load_objects(NODE_CLASS.replace("SUBNET_TAG", subnet_tag), NODEPOOL, PENDING_POD):
            self.cluster.create(item.obj)

    def run_until(self, moment: float) -> None:
        """Reconcile what is due, up to ``moment`` seconds after the start."""
        end = self.clock.start + moment
        while True:
            self.runtime.run_due()
            due = self.runtime.next_due()
            if due is None or due > end:
                self.clock.advance_to(max(end, self.clock.now()))
                self.runtime.run_due()
                return
            self.clock.advance_to(due)

    def node_class(self) -> EC2NodeClass:
        found = self.cluster.node_class("karpenter.k8s.aws", "EC2NodeClass", "default")
        assert isinstance(found, EC2NodeClass)
        return found

    def pool_condition(self, kind: str) -> Condition:
        pool = self.cluster.nodepool("default")
        assert pool is not None
        return condition(pool.status.conditions, kind)

    def set_subnet_tag(self, value: str) -> None:
        node_class = self.node_class()
        self.cluster.update(
            dataclasses.replace(
                node_class, subnet_selector_terms=(SelectorTerm(tags={DISCOVERY_TAG: value}),)
            )
        )


def condition(conditions: tuple[Condition, ...], kind: str) -> Condition:
    found = find_condition(conditions, kind)
    assert found is not None, f"no {kind} condition in {conditions}"
    return found


def test_a_good_class_is_ready_with_what_its_selectors_resolved_to(aws: AwsWorld) -> None:
    world = World(CLUSTER)
    world.run_until(1)
    status = world.node_class().status
    assert condition(status.conditions, CONDITION_READY).status == TRUE
    assert sorted((subnet.zone, subnet.id) for subnet in status.subnets) == sorted(
        (zone, aws.subnet_ids[zone]) for zone in ZONES
    )
    assert [group.id for group in status.security_groups] == [aws.security_group_id]
    assert {ami.id for ami in status.amis} == {aws.al2023_x86, aws.al2023_arm64}
    assert status.instance_profile.startswith(f"{CLUSTER}_")
    assert world.pool_condition(CONDITION_NODECLASS_READY).status == TRUE
    # The periodic pass finds the same answer and writes nothing.
    version = world.node_class().metadata.resource_version
    world.run_until(RESOLVE_INTERVAL * 2 + 1)
    assert world.node_class().metadata.resource_version == version


def test_a_selector_that_matches_nothing_is_named_on_the_class_the_pool_and_the_pods(aws: AwsWorld) -> None:
    world = World(TYPO)
    world.run_until(1)
    status = world.node_class().status
    subnets = condition(status.conditions, CONDITION_SUBNETS_READY)
    assert (subnets.status, subnets.reason) == (FALSE, REASON_SUBNETS_NOT_FOUND)
    selector = f"subnetSelectorTerms [{{tags: {{{DISCOVERY_TAG}: {TYPO}}}}}]"
    assert selector in subnets.message
    assert status.subnets == ()
    ready = condition(status.conditions, CONDITION_READY)
    expected = f"SubnetsReady=False ({REASON_SUBNETS_NOT_FOUND}: {subnets.message})"
    assert (ready.status, ready.reason, ready.message) == (FALSE, REASON_UNHEALTHY_DEPENDENTS, expected)
    pool_ready = world.pool_condition(CONDITION_NODECLASS_READY)
    assert (pool_ready.status, pool_ready.reason) == (FALSE, REASON_UNHEALTHY_DEPENDENTS)
    assert pool_ready.message == f"EC2NodeClass/default is not ready: {expected}"
    # `kubectl describe nodepool` shows it as a Warning Event too, once.
    pool_events = [
        event
        for event in world.cluster.events
        if (event.kind, event.type, event.reason) == ("NodePool", "Warning", REASON_UNHEALTHY_DEPENDENTS)
        and selector in event.message
    ]
    assert len(pool_events) == 1
    # The pending pod is told the same, and which selector to fix.
    Provisioner(world.cluster, world.cloud, world.clock).provision()
    failed = [event.message for event in world.cluster.events if event.reason == "FailedScheduling"]
    assert failed and all(selector in message for message in failed)
    # The two status controllers agree: nothing more is written by either.
    version = world.node_class().metadata.resource_version
    world.run_until(RESOLVE_INTERVAL + 1)
    assert world.node_class().metadata.resource_version == version

    world.set_subnet_tag(CLUSTER)
    world.run_until(RESOLVE_INTERVAL + 2)
    status = world.node_class().status
    assert condition(status.conditions, CONDITION_READY).status == TRUE
    assert len(status.subnets) == len(ZONES)
    assert world.pool_condition(CONDITION_NODECLASS_READY).status == TRUE


def test_a_spec_change_is_resolved_at_once(aws: AwsWorld) -> None:
    world = World(CLUSTER)
    world.run_until(1)
    world.set_subnet_tag(TYPO)
    world.runtime.run_due()  # no time passes
    assert condition(world.node_class().status.conditions, CONDITION_READY).status == FALSE


def test_a_passing_aws_error_keeps_the_status_and_is_logged_once_per_streak(
    aws: AwsWorld, caplog: pytest.LogCaptureFixture
) -> None:
    client = FlakyClient.for_region(REGION)
    assert isinstance(client, FlakyClient)
    world = World(CLUSTER, client)
    world.run_until(1)
    before = world.node_class().status
    assert condition(before.conditions, CONDITION_READY).status == TRUE
    client.throttled = True
    caplog.set_level(logging.DEBUG, logger="karpy.aws.nodeclass")
    world.run_until(1 + RESOLVE_INTERVAL + 5 * RETRY_INTERVAL)
    assert world.node_class().status == before
    warnings = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1 and "RequestLimitExceeded" in warnings[0].getMessage()
    attempts = [record for record in caplog.records if "RequestLimitExceeded" in record.getMessage()]
    assert len(attempts) >= 5  # retried every RETRY_INTERVAL, the later ones at debug level
    client.throttled = False
    world.run_until(1 + RESOLVE_INTERVAL + 7 * RETRY_INTERVAL)
    assert any("resolved again" in record.getMessage() for record in caplog.records)
    # A new streak is worth a new warning.
    client.throttled = True
    world.run_until(1 + 3 * RESOLVE_INTERVAL)
    assert len([record for record in caplog.records if record.levelno == logging.WARNING]) == 2


def test_the_problem_read_from_a_status() -> None:
    (item,) = load_objects(NODE_CLASS.replace("SUBNET_TAG", CLUSTER))
    node_class = item.obj
    assert isinstance(node_class, EC2NodeClass)
    unresolved = node_class_problem_from_status(node_class)
    assert unresolved is not None and unresolved.reason == REASON_NODECLASS_READINESS_UNKNOWN

    def with_conditions(*conditions: Condition) -> EC2NodeClass:
        return dataclasses.replace(
            node_class, status=dataclasses.replace(node_class.status, conditions=conditions)
        )

    assert node_class_problem_from_status(with_conditions(Condition(CONDITION_READY, TRUE))) is None
    # A status written as Karpenter writes it (Ready names the conditions only) gets their messages.
    karpenter_written = with_conditions(
        Condition(CONDITION_SUBNETS_READY, FALSE, REASON_SUBNETS_NOT_FOUND, "no subnet matched"),
        Condition(CONDITION_READY, FALSE, REASON_UNHEALTHY_DEPENDENTS, "SubnetsReady=False"),
    )
    assert node_class_problem_from_status(karpenter_written) == NodeClassProblem(
        REASON_UNHEALTHY_DEPENDENTS, f"SubnetsReady=False ({REASON_SUBNETS_NOT_FOUND}: no subnet matched)"
    )
