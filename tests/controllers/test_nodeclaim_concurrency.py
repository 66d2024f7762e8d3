"""``karpy run`` launches a pass's NodeClaims, and writes their pod events, several at once.

Each reconcile of the NodeClaim lifecycle and pod-events controllers writes
objects of its own key only, so they say so (``max_concurrent_reconciles``)
and the real loop (``Runtime.run_round``) runs that many at once. Here each
write waits until every key's write has started (a barrier): one reconcile at
a time, the first would wait for good.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from tests.controllers.test_nodeclaim_background_launch import BackgroundCloud
from tests.support import make_nodepool

from karpy.api.core import Node
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import NodeClaim, NodeClaimSpec
from karpy.api.nodeclass import KWOKNodeClass
from karpy.api.nodepool import NodeClassRef
from karpy.controllers.nodeclaim import NodeClaimLifecycle, NodeClaimPodEvents
from karpy.operator.runtime import Runtime
from karpy.sim.clock import VirtualClock
from karpy.sim.store import InMemoryCluster

CLAIMS = 4
KWOK_CLASS = NodeClassRef("karpenter.kwok.sh", "KWOKNodeClass", "default")


def meeting_writes(cluster: InMemoryCluster, writers: int) -> Callable[[Any], Any]:
    """``cluster.update`` that first waits for ``writers`` writes to be under way at once."""
    barrier = threading.Barrier(writers, timeout=5)
    store = threading.Lock()  # the in-memory store itself is written one at a time
    original = cluster.update

    def update(obj: Any) -> Any:
        barrier.wait()
        with store:
            return original(obj)

    return update


def cluster_with_claims(clock: VirtualClock) -> InMemoryCluster:
    cluster = InMemoryCluster(clock)
    cluster.create(make_nodepool())
    cluster.create(KWOKNodeClass(metadata=ObjectMeta(name="default")))
    for index in range(CLAIMS):
        cluster.create(
            NodeClaim(
                metadata=ObjectMeta(name=f"claim-{index}"), spec=NodeClaimSpec(node_class_ref=KWOK_CLASS)
            )
        )
    return cluster


def test_the_lifecycle_launches_a_passs_nodeclaims_at_once_in_a_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = VirtualClock()
    cluster = cluster_with_claims(clock)
    cloud = BackgroundCloud()
    cloud.finished.update(f"claim-{index}" for index in range(CLAIMS))  # each launch returns at once
    runtime = Runtime(clock)
    runtime.register(NodeClaimLifecycle(cluster, cloud, clock))
    monkeypatch.setattr(cluster, "update", meeting_writes(cluster, CLAIMS))
    for index in range(CLAIMS):
        runtime.enqueue(NodeClaimLifecycle.name, f"claim-{index}")
    try:
        assert runtime.run_round() == CLAIMS
        assert runtime.wait_for_workers(timeout=10) == CLAIMS
    finally:
        runtime.close()
    assert runtime.errors == []
    assert all(claim.launched for claim in cluster.nodeclaims())


def test_pod_events_of_several_nodes_are_written_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = VirtualClock()
    cluster = cluster_with_claims(clock)
    for claim in cluster.nodeclaims():
        cluster.create(Node(metadata=ObjectMeta(name=f"node-{claim.name}")))
        cluster.update(claim.with_status(node_name=f"node-{claim.name}"))
    clock.advance(30)
    runtime = Runtime(clock)
    runtime.register(NodeClaimPodEvents(cluster, clock))
    monkeypatch.setattr(cluster, "update", meeting_writes(cluster, CLAIMS))
    for claim in cluster.nodeclaims():
        runtime.enqueue(NodeClaimPodEvents.name, f"node-{claim.name}")
    try:
        assert runtime.run_round() == CLAIMS
        assert runtime.wait_for_workers(timeout=10) == CLAIMS
    finally:
        runtime.close()
    assert runtime.errors == []
    assert {claim.status.last_pod_event_time for claim in cluster.nodeclaims()} == {clock.now()}
