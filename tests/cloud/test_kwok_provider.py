"""The kwok provider's one piece of process state: instances booting when their launcher stopped.

With a registration delay, a launched instance's Node is created by a timer
in the process that launched it. When that process stops mid-boot (a leader
change), the next leader adopts the instance from its NodeClaim and creates
the Node when the boot would have ended, instead of leaving the NodeClaim
without a Node until the registration timeout.
"""

from __future__ import annotations

import dataclasses
import time

from tests.support import make_nodepool

from karpy.api.conditions import set_condition
from karpy.api.core import Node
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import CONDITION_LAUNCHED, CONDITION_REGISTERED, NodeClaim, NodeClaimSpec
from karpy.api.nodeclass import KWOKNodeClass
from karpy.api.nodeclass_hash import (
    KWOKNODECLASS_HASH_ANNOTATION,
    KWOKNODECLASS_HASH_VERSION,
    KWOKNODECLASS_HASH_VERSION_ANNOTATION,
    kwoknodeclass_hash,
)
from karpy.api.nodepool import NodeClassRef
from karpy.api.requirements import LABEL_INSTANCE_TYPE, LABEL_NODEPOOL, LABEL_ZONE, Requirement
from karpy.cloud.kwok.provider import KwokCloudProvider
from karpy.cloud.kwok_catalog import INSTANCE_TYPES_ANNOTATION
from karpy.disruption.nodeclass_drift import NODECLASS_DRIFT
from karpy.sim.clock import VirtualClock
from karpy.sim.store import InMemoryCluster

# Long enough that a loaded machine still checks "not registered yet" inside the boot
# (at 0.3 s the check raced the timer when other test processes held both cores).
DELAY = 2.0


def _store() -> InMemoryCluster:
    store = InMemoryCluster(VirtualClock())
    store.create(make_nodepool())
    store.create(KWOKNodeClass(metadata=ObjectMeta(name="default")))
    return store


def _launched(store: InMemoryCluster, provider: KwokCloudProvider, name: str) -> NodeClaim:
    """A NodeClaim launched by ``provider``, recorded as the lifecycle controller records it."""
    claim = store.create(
        NodeClaim(
            metadata=ObjectMeta(name=name),
            spec=NodeClaimSpec(
                node_class_ref=NodeClassRef("karpenter.kwok.sh", "KWOKNodeClass", "default"),
                requirements=(Requirement.from_operator(LABEL_INSTANCE_TYPE, "In", ["c5.large"]),),
            ),
        )
    )
    launched = provider.create(claim)
    conditions = set_condition(claim.status.conditions, CONDITION_LAUNCHED, "True", time.time())
    return store.update(
        dataclasses.replace(
            claim,
            metadata=claim.metadata.with_changes(
                labels={**claim.metadata.labels, **launched.metadata.labels}
            ),
            status=dataclasses.replace(
                claim.status, provider_id=launched.status.provider_id, conditions=conditions
            ),
        )
    )


def _stop(provider: KwokCloudProvider) -> None:
    """The launching process goes away: its boot timers never fire."""
    for _, timer in provider._pending.values():
        timer.cancel()


def _wait_for_node(store: InMemoryCluster, name: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if store.node(name) is not None:
            return True
        time.sleep(0.02)
    return False


def test_the_next_leader_finishes_the_boot_of_an_instance_left_booting() -> None:
    store = _store()
    first = KwokCloudProvider(store, registration_delay=DELAY)
    claim = _launched(store, first, "default-a")
    _stop(first)
    successor = KwokCloudProvider(store, registration_delay=DELAY)
    assert successor.resume_boots() == ["default-a"]
    assert store.node("default-a") is None  # still booting: the rest of the delay is kept
    assert _wait_for_node(store, "default-a", DELAY + 10.0)
    node = store.node("default-a")
    assert node is not None and node.provider_id == claim.status.provider_id
    assert node.metadata.labels[LABEL_INSTANCE_TYPE] == "c5.large"
    assert node.metadata.labels[LABEL_ZONE] == claim.metadata.labels[LABEL_ZONE]


def test_nothing_is_adopted_that_has_a_node_a_pending_boot_or_a_registration() -> None:
    store = _store()
    provider = KwokCloudProvider(store, registration_delay=DELAY)
    _launched(store, provider, "default-booting")  # this process's own timer is still on
    # No delay: the Node is created at once, off the caller's thread.
    registered = _launched(store, KwokCloudProvider(store), "default-up")
    deadline = time.monotonic() + 10
    while store.node("default-up") is None:
        assert time.monotonic() < deadline, "the kwok Node was not created"
        time.sleep(0.01)
    store.update(
        dataclasses.replace(
            registered,
            status=dataclasses.replace(
                registered.status,
                conditions=set_condition(registered.status.conditions, CONDITION_REGISTERED, "True", 0.0),
            ),
        )
    )
    assert provider.resume_boots() == []
    _stop(provider)


def test_an_offering_marked_unavailable_is_reported_so_until_the_ttl_passes() -> None:
    from karpy.cloud.offerings import UNAVAILABLE_OFFERING_TTL, UnavailableOfferings

    class Clock:
        t = 1000.0

        def now(self) -> float:
            return self.t

    clock = Clock()
    offerings = UnavailableOfferings(clock)
    offerings.mark("c5.large", "us-east-1a", "spot")
    assert ("c5.large", "us-east-1a", "spot") in offerings
    clock.t += UNAVAILABLE_OFFERING_TTL - 1
    assert offerings.now() == {("c5.large", "us-east-1a", "spot")}
    clock.t += 1
    assert offerings.now() == frozenset()


def test_a_marked_offering_is_not_launched_and_is_reported_unavailable() -> None:
    store = _store()
    clock = VirtualClock()
    provider = KwokCloudProvider(store, clock=clock)
    first = _launched(store, provider, "default-a")
    zone = first.metadata.labels[LABEL_ZONE]
    capacity_type = first.metadata.labels["karpenter.sh/capacity-type"]
    provider.mark_offering_unavailable("c5.large", zone, capacity_type)
    (c5_large,) = [it for it in provider.get_instance_types(make_nodepool()) if it.name == "c5.large"]
    unavailable = {(o.zone, o.capacity_type) for o in c5_large.offerings if not o.available}
    assert unavailable == {(zone, capacity_type)}
    second = _launched(store, provider, "default-b")
    assert (second.metadata.labels[LABEL_ZONE], second.metadata.labels["karpenter.sh/capacity-type"]) != (
        zone,
        capacity_type,
    )


def test_list_gives_the_nodes_a_nodepool_launched_with_their_creation_times() -> None:
    store = _store()
    provider = KwokCloudProvider(store, registration_delay=0.0)
    claim = store.create(
        NodeClaim(
            metadata=ObjectMeta(name="default-gc", labels={LABEL_NODEPOOL: "default"}),
            spec=NodeClaimSpec(
                node_class_ref=NodeClassRef("karpenter.kwok.sh", "KWOKNodeClass", "default"),
                requirements=(Requirement.from_operator(LABEL_INSTANCE_TYPE, "In", ["c5.large"]),),
            ),
        )
    )
    provider.create(claim)
    assert _wait_for_node(store, claim.name, 5.0)
    # A kwok Node no NodePool launched (made by hand, or by kwok's own tooling) is not karpy's to list.
    store.create(Node(metadata=ObjectMeta(name="by-hand"), provider_id="kwok://by-hand"))
    (listed,) = provider.list()
    node = store.node(claim.name)
    assert node is not None and listed.name == claim.name
    assert listed.status.provider_id == "kwok://default-gc"
    assert listed.metadata.creation_timestamp == node.metadata.creation_timestamp is not None


def test_a_kwok_nodeclaim_carries_its_class_hash_and_drifts_when_the_catalog_changes() -> None:
    store = _store()
    provider = KwokCloudProvider(store)
    claim = store.create(
        NodeClaim(
            metadata=ObjectMeta(name="hashed"),
            spec=NodeClaimSpec(node_class_ref=NodeClassRef("karpenter.kwok.sh", "KWOKNodeClass", "default")),
        )
    )
    launched = provider.create(claim)
    assert launched.metadata.annotations == {
        KWOKNODECLASS_HASH_ANNOTATION: kwoknodeclass_hash("aws").value,
        KWOKNODECLASS_HASH_VERSION_ANNOTATION: KWOKNODECLASS_HASH_VERSION,
    }
    claim = claim.with_metadata(annotations=launched.metadata.annotations)
    assert provider.is_drifted(claim) == ""
    node_class = store.node_class("karpenter.kwok.sh", "KWOKNodeClass", "default")
    assert node_class is not None
    annotated = node_class.metadata.with_changes(annotations={INSTANCE_TYPES_ANNOTATION: "karpenter"})
    store.update(dataclasses.replace(node_class, metadata=annotated))
    assert provider.is_drifted(claim) == NODECLASS_DRIFT
    assert provider.is_drifted(claim.with_metadata(annotations={})) == ""  # launched before the hash
    _stop(provider)


def test_the_node_class_registration_delay_wins_over_the_providers() -> None:
    """KWOKNodeClass spec.nodeRegistrationDelay, as Karpenter's kwok provider: the Node waits that long."""
    store = InMemoryCluster(VirtualClock())
    store.create(make_nodepool())
    store.create(KWOKNodeClass(metadata=ObjectMeta(name="default"), node_registration_delay=DELAY))
    provider = KwokCloudProvider(store)  # no delay of its own
    _launched(store, provider, "default-slow")
    assert store.node("default-slow") is None  # booting: the class' delay holds it back
    assert "default-slow" in provider._pending
    assert _wait_for_node(store, "default-slow", DELAY + 10.0)


def test_a_node_class_delay_of_zero_registers_at_once_whatever_the_provider_says() -> None:
    store = InMemoryCluster(VirtualClock())
    store.create(make_nodepool())
    store.create(KWOKNodeClass(metadata=ObjectMeta(name="default"), node_registration_delay=0.0))
    provider = KwokCloudProvider(store, registration_delay=600.0)
    _launched(store, provider, "default-fast")
    assert _wait_for_node(store, "default-fast", 10.0)


def test_a_node_reports_the_extended_resources_overlays_give_its_type_in_its_pool() -> None:
    store = _store()
    provider = KwokCloudProvider(store)
    asked: list[tuple[str, str]] = []

    def extended(nodepool: str, instance_type: str) -> dict[str, int]:
        asked.append((nodepool, instance_type))
        return {"example.com/gpu": 2, "hugepages-2Mi": 2**30} if nodepool == "default" else {}

    provider.extended_resources = extended
    claim = store.create(
        NodeClaim(
            metadata=ObjectMeta(name="gpu", labels={LABEL_NODEPOOL: "default"}),
            spec=NodeClaimSpec(
                node_class_ref=NodeClassRef("karpenter.kwok.sh", "KWOKNodeClass", "default"),
                requirements=(Requirement.from_operator(LABEL_INSTANCE_TYPE, "In", ["c5.large"]),),
            ),
        )
    )
    provider.create(claim)
    assert _wait_for_node(store, "gpu", 10)
    node = store.node("gpu")
    assert node is not None
    assert asked == [("default", "c5.large")]
    assert node.capacity["example.com/gpu"] == node.allocatable["example.com/gpu"] == 2
    assert node.capacity["hugepages-2Mi"] == node.allocatable["hugepages-2Mi"] == 2**30
    # The type's own resources are untouched.
    assert node.capacity["cpu"] == 2000 and node.allocatable["cpu"] < 2000


def test_without_overlays_a_node_reports_its_type_alone() -> None:
    store = _store()
    provider = KwokCloudProvider(store)
    claim = _launched(store, provider, "plain")
    assert _wait_for_node(store, claim.name, 10)
    node = store.node("plain")
    assert node is not None
    assert not any("/" in resource for resource in node.capacity)
