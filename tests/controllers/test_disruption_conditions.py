"""The NodeClaim disruption conditions controller on its own: Drifted marks and expiry.

An in-memory cluster and a cloud that says only whether a NodeClaim drifted:
each test writes the NodePool or the cloud's answer and reads the NodeClaim
the controller left.
"""

from __future__ import annotations

import dataclasses
from typing import cast

from tests.support import make_nodepool

from karpy.api.conditions import TRUE, find_condition, set_condition
from karpy.api.nodeclaim import CONDITION_CONSOLIDATABLE, CONDITION_DRIFTED, CONDITION_INITIALIZED, NodeClaim
from karpy.api.requirements import Requirements
from karpy.cloud.provider import CloudProvider, CloudProviderError
from karpy.controllers.disruption_conditions import NodeClaimDisruptionConditions
from karpy.controllers.provisioning import build_nodeclaim
from karpy.disruption.drift import REASON_NODEPOOL_DRIFTED
from karpy.disruption.nodeclass_drift import AMI_DRIFT
from karpy.scheduling.solver import NewNodeClaim
from karpy.sim.clock import VirtualClock
from karpy.sim.store import InMemoryCluster

TAINTED = "      taints: [{key: dedicated, value: batch, effect: NoSchedule}]"


class DriftingCloud:
    """Says ``drifted`` of every NodeClaim, or fails when it is None."""

    name = "drifting"

    def __init__(self) -> None:
        self.drifted: str | None = ""

    def is_drifted(self, nodeclaim: NodeClaim) -> str:
        if self.drifted is None:
            raise CloudProviderError("the cloud does not answer")
        return self.drifted


def world(
    *, initialized: bool = True, expire_after: float | None = None
) -> tuple[VirtualClock, InMemoryCluster, DriftingCloud, NodeClaimDisruptionConditions, str]:
    """A NodePool and one NodeClaim launched from it as it is now."""
    clock = VirtualClock()
    cluster = InMemoryCluster(clock)
    pool = cluster.create(make_nodepool("default"))
    claim = build_nodeclaim(pool, NewNodeClaim("default", Requirements(), [], [], {}, {}))
    claim = dataclasses.replace(claim, spec=dataclasses.replace(claim.spec, expire_after=expire_after))
    if initialized:
        claim = claim.with_status(
            conditions=set_condition(claim.status.conditions, CONDITION_INITIALIZED, TRUE, clock.now())
        )
    name = cluster.create(claim).name
    cloud = DriftingCloud()
    controller = NodeClaimDisruptionConditions(cluster, cast(CloudProvider, cloud), clock)
    return clock, cluster, cloud, controller, name


def drifted(cluster: InMemoryCluster, name: str) -> str:
    """The Drifted condition's reason, "" when there is none."""
    claim = cluster.nodeclaim(name)
    assert claim is not None
    condition = find_condition(claim.status.conditions, CONDITION_DRIFTED)
    assert condition is None or condition.status == TRUE, "Drifted is true or not there at all"
    return condition.reason if condition is not None else ""


def test_a_template_change_marks_the_nodeclaim_drifted_and_a_change_back_clears_it() -> None:
    _, cluster, _, controller, name = world()
    controller.reconcile(name)
    assert drifted(cluster, name) == ""
    changed = make_nodepool("default", template_spec=TAINTED)
    assert changed.template_hash() != make_nodepool("default").template_hash()
    cluster.update(changed)
    controller.reconcile(name)
    assert drifted(cluster, name) == REASON_NODEPOOL_DRIFTED
    assert [event.name for event in cluster.events if event.reason == "Drifted"] == [name]
    cluster.update(make_nodepool("default"))
    controller.reconcile(name)
    assert drifted(cluster, name) == ""


def test_the_clouds_drift_marks_the_nodeclaim_and_a_cloud_that_fails_does_not() -> None:
    _, cluster, cloud, controller, name = world()
    cloud.drifted = AMI_DRIFT
    controller.reconcile(name)
    assert drifted(cluster, name) == AMI_DRIFT  # the cloud's reason is the condition's, as in Karpenter
    cloud.drifted = None
    controller.reconcile(name)
    assert drifted(cluster, name) == ""


def test_drift_is_judged_only_once_the_nodeclaim_is_initialized() -> None:
    _, cluster, cloud, controller, name = world(initialized=False)
    cloud.drifted = "the node class's AMI changed"
    controller.reconcile(name)
    assert drifted(cluster, name) == ""


def test_an_expired_nodeclaim_is_deleted_at_its_expiry_and_not_before() -> None:
    clock, cluster, _, controller, name = world(expire_after=3600.0)
    assert controller.reconcile(name) == 3600.0, "requeued for its expiry"
    clock.advance_to(clock.now() + 3599)
    assert controller.reconcile(name) == 1.0
    claim = cluster.nodeclaim(name)
    assert claim is not None and not claim.metadata.deleting
    clock.advance_to(clock.now() + 1)
    assert controller.reconcile(name) is None
    claim = cluster.nodeclaim(name)
    assert claim is None or claim.metadata.deleting
    events = [(event.reason, event.message) for event in cluster.events if event.name == name]
    assert ("DisruptionTerminating", "Disrupting NodeClaim: Expired") in events


def test_a_nodepool_change_wakes_its_nodeclaims_but_a_status_change_does_not() -> None:
    _, cluster, _, controller, name = world()
    pool = cluster.nodepool("default")
    assert pool is not None
    changed = make_nodepool("default", template_spec=TAINTED)
    assert list(controller._on_nodepool(pool, changed)) == [name]
    rewritten = dataclasses.replace(pool, metadata=pool.metadata.with_changes(resource_version="999"))
    assert list(controller._on_nodepool(pool, rewritten)) == []


def consolidatable(cluster: InMemoryCluster, name: str) -> bool:
    claim = cluster.nodeclaim(name)
    assert claim is not None
    condition = find_condition(claim.status.conditions, CONDITION_CONSOLIDATABLE)
    assert condition is None or condition.status == TRUE, "Consolidatable is true or not there at all"
    return condition is not None


def test_consolidatable_once_consolidate_after_has_passed_since_the_last_pod_event() -> None:
    """Karpenter's Consolidatable condition, which its e2e suites wait for before a budget check."""
    clock, cluster, _, controller, name = world()
    cluster.update(make_nodepool("default", spec="  disruption: {consolidateAfter: 30s}"))
    assert controller.reconcile(name) == 30.0, "requeued for when it becomes consolidatable"
    assert not consolidatable(cluster, name)
    clock.advance_to(clock.now() + 30)
    assert controller.reconcile(name) is None
    assert consolidatable(cluster, name)
    # A pod landing on the node puts it off for another consolidateAfter.
    claim = cluster.nodeclaim(name)
    assert claim is not None
    moved = cluster.update(claim.with_status(last_pod_event_time=clock.now()))
    assert list(controller._on_nodeclaim(claim, moved)) == [name]
    assert controller.reconcile(name) == 30.0
    assert not consolidatable(cluster, name)


def test_never_consolidatable_without_consolidation_or_before_initialization() -> None:
    clock, cluster, _, controller, name = world()
    cluster.update(make_nodepool("default", spec="  disruption: {consolidateAfter: Never}"))
    clock.advance_to(clock.now() + 3600)
    assert controller.reconcile(name) is None
    assert not consolidatable(cluster, name)
    _, cluster, _, controller, name = world(initialized=False)
    controller.reconcile(name)
    assert not consolidatable(cluster, name)
