"""A launch that runs in the background (AWS) is not a failure to the NodeClaim lifecycle controller.

The provider raises ``LaunchInProgressError`` and later posts
``LaunchFinished`` with the NodeClaim's name; meanwhile the NodeClaim gets
no Event, no ``Launched=False`` condition and no error metric, and is
requeued only at its launch deadline.
"""

from __future__ import annotations

import builtins

from tests.prometheus_text import parse
from tests.support import make_nodepool

from karpy.api.instancetype import InstanceType
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import CONDITION_LAUNCHED, NodeClaim, NodeClaimSpec, NodeClaimStatus
from karpy.api.nodeclass import KWOKNodeClass, NodeClass
from karpy.api.nodepool import NodeClassRef, NodePool
from karpy.api.requirements import LABEL_INSTANCE_TYPE
from karpy.cloud.provider import LAUNCH_FINISHED, LaunchInProgressError, NodeClassProblem, RepairPolicy
from karpy.controllers.metering import MeteredCloudProvider
from karpy.controllers.nodeclaim import LAUNCH_TTL, NodeClaimLifecycle
from karpy.operator.karpenter_metrics import Metrics
from karpy.sim.clock import VirtualClock
from karpy.sim.store import InMemoryCluster


class BackgroundCloud:
    """Launches in the background: the first create starts, the next (after the wake-up) returns."""

    name = "background"

    def __init__(self) -> None:
        self.started: set[str] = set()
        self.finished: set[str] = set()

    def create(self, nodeclaim: NodeClaim) -> NodeClaim:
        if nodeclaim.name not in self.finished:
            self.started.add(nodeclaim.name)
            raise LaunchInProgressError(f"launching {nodeclaim.name}")
        return NodeClaim(
            metadata=ObjectMeta(name=nodeclaim.name, labels={LABEL_INSTANCE_TYPE: "c5.large"}),
            spec=nodeclaim.spec,
            status=NodeClaimStatus(
                provider_id=f"aws:///us-east-1a/i-{nodeclaim.name}", capacity={"cpu": 2000}
            ),
        )

    def delete(self, nodeclaim: NodeClaim) -> None: ...

    def get(self, provider_id: str) -> NodeClaim:
        raise NotImplementedError

    def list(self) -> builtins.list[NodeClaim]:
        return []

    def get_instance_types(self, nodepool: NodePool) -> builtins.list[InstanceType]:
        return []

    def is_drifted(self, nodeclaim: NodeClaim) -> str:
        return ""

    def repair_policies(self) -> builtins.list[RepairPolicy]:
        return []

    supports_reboot = False

    def reboot(self, nodeclaim: NodeClaim, operation_id: str) -> None:
        raise NotImplementedError

    def node_class_problem(self, node_class: NodeClass) -> NodeClassProblem | None:
        return None

    def mark_offering_unavailable(self, instance_type: str, zone: str, capacity_type: str) -> None: ...


def test_a_launch_in_progress_waits_quietly_for_its_wake_up() -> None:
    clock = VirtualClock()
    cluster = InMemoryCluster(clock)
    cluster.create(make_nodepool())
    cluster.create(KWOKNodeClass(metadata=ObjectMeta(name="default")))
    claim = cluster.create(
        NodeClaim(
            metadata=ObjectMeta(name="claim-1"),
            spec=NodeClaimSpec(node_class_ref=NodeClassRef("karpenter.kwok.sh", "KWOKNodeClass", "default")),
        )
    )
    cloud = BackgroundCloud()
    metrics = Metrics()
    lifecycle = NodeClaimLifecycle(
        cluster, MeteredCloudProvider(cloud, metrics, "nodeclaim.lifecycle"), clock
    )

    requeue = lifecycle.reconcile(claim.name)
    assert cloud.started == {"claim-1"}
    assert requeue == LAUNCH_TTL  # the deadline only: the wake-up brings it back
    assert cluster.events == []
    stored = cluster.nodeclaim(claim.name)
    assert stored is not None and stored.condition(CONDITION_LAUNCHED) is None
    assert "karpenter_cloudprovider_errors_total" not in parse(metrics.registry.exposition()).types

    # The provider's wake-up is a change the controller maps to the NodeClaim.
    [watch] = [watch for watch in lifecycle.watches() if watch.kind == LAUNCH_FINISHED]
    assert list(watch.mapper(None, "claim-1")) == ["claim-1"]

    cloud.finished.add("claim-1")
    lifecycle.reconcile(claim.name)
    launched = cluster.nodeclaim(claim.name)
    assert launched is not None and launched.launched
    assert launched.status.provider_id == "aws:///us-east-1a/i-claim-1"
    assert [event.reason for event in cluster.events] == ["Launched"]
