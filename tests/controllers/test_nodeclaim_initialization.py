"""A NodeClaim is initialized only once its Node has lost the taints that go by themselves.

As Karpenter's initialization: Ready, startup taints gone, and the known
ephemeral taints gone (``node.kubernetes.io/not-ready`` and its kin, which the
node lifecycle controller lifts a moment after the kubelet reports Ready).
Initializing earlier made the scheduling snapshot count that taint as
blocking while the node's own pods were still pending: a provisioning pass in
that moment launched a second node for them.
"""

from __future__ import annotations

import pytest
from tests.controllers.test_state_capacity import INSTANCE_TYPE, cluster, node, nodeclaim

from karpy.api.conditions import Condition
from karpy.api.core import NodeCondition
from karpy.api.meta import ObjectMeta, OwnerReference
from karpy.api.nodeclaim import CONDITION_LAUNCHED, CONDITION_REGISTERED
from karpy.api.nodeclass import KWOKNodeClass, NodeClassStatus
from karpy.api.taints import KNOWN_EPHEMERAL_TAINTS, NO_SCHEDULE, Taint
from karpy.cloud.kwok.provider import KwokCloudProvider
from karpy.controllers.nodeclaim import NodeClaimLifecycle, _owned_by
from karpy.controllers.state import existing_capacity
from karpy.sim.store import InMemoryCluster

NAME = "default-a"


def registered_claim_and_node(taints: tuple[Taint, ...]) -> tuple[InMemoryCluster, NodeClaimLifecycle]:
    store = cluster()
    store.create(
        nodeclaim(NAME, provider_id=f"kwok://{NAME}").with_status(
            node_name=NAME,
            allocatable=dict(INSTANCE_TYPE.allocatable),
            conditions=(Condition(CONDITION_LAUNCHED, "True"), Condition(CONDITION_REGISTERED, "True")),
        )
    )
    store.create(
        node(NAME, registered=True).with_changes(taints=taints, conditions=(NodeCondition("Ready", "True"),))
    )
    return store, NodeClaimLifecycle(store, KwokCloudProvider(store), store.clock)


def initialized(store: InMemoryCluster) -> bool:
    claim = store.nodeclaim(NAME)
    assert claim is not None
    return claim.initialized


@pytest.mark.parametrize("ephemeral", KNOWN_EPHEMERAL_TAINTS, ids=lambda taint: taint.key)
def test_a_ready_node_still_tainted_as_coming_up_is_initialized_only_once_the_taint_goes(
    ephemeral: Taint,
) -> None:
    store, lifecycle = registered_claim_and_node((ephemeral,))
    lifecycle.reconcile(NAME)
    assert not initialized(store)
    # Meanwhile the node keeps its NodeClaim's room, the taint not blocking.
    (entry,) = existing_capacity(store, {"default": [INSTANCE_TYPE]}, {})
    assert ephemeral in entry.ephemeral_taints
    node = store.node(NAME)
    assert node is not None
    store.update(node.with_changes(taints=()))
    lifecycle.reconcile(NAME)
    assert initialized(store)


def test_other_taints_do_not_hold_initialization_back() -> None:
    store, lifecycle = registered_claim_and_node((Taint("dedicated", NO_SCHEDULE, "gpu"),))
    lifecycle.reconcile(NAME)
    assert initialized(store)


def test_registration_copies_the_nodeclaims_labels_and_annotations_onto_its_node() -> None:
    # As Karpenter's registration: a NodeClaim's own annotations reach its Node (a standalone
    # NodeClaim's metadata is how a user puts them there), each over a value the Node had.
    store = cluster()
    claim = nodeclaim(NAME, provider_id=f"kwok://{NAME}")
    store.create(
        claim.with_metadata(
            labels={**claim.metadata.labels, "custom-label": "custom-value"},
            annotations={"custom-annotation": "custom-value", "shared": "from-claim"},
        ).with_status(
            allocatable=dict(INSTANCE_TYPE.allocatable),
            conditions=(Condition(CONDITION_LAUNCHED, "True"),),
        )
    )
    joined = node(NAME, registered=False)
    annotated = joined.metadata.with_changes(annotations={"shared": "from-node"})
    store.create(joined.with_changes(metadata=annotated))
    NodeClaimLifecycle(store, KwokCloudProvider(store), store.clock).reconcile(NAME)
    registered = store.node(NAME)
    assert registered is not None
    assert registered.metadata.labels["custom-label"] == "custom-value"
    assert registered.metadata.annotations["custom-annotation"] == "custom-value"
    assert registered.metadata.annotations["shared"] == "from-claim"
    # ...and makes the NodeClaim an owner of its Node, once.
    stored_claim = store.nodeclaim(NAME)
    assert stored_claim is not None
    owner = OwnerReference(
        "karpenter.sh/v1", "NodeClaim", NAME, stored_claim.metadata.uid, block_owner_deletion=True
    )
    assert registered.metadata.owner_references == (owner,)
    assert _owned_by(registered.metadata.owner_references, stored_claim) == (owner,)


@pytest.mark.parametrize("stored", ["False", "True", None])
def test_a_nodeclaim_whose_kwok_class_is_not_ready_is_deleted_not_launched(stored: str | None) -> None:
    # As Karpenter's launch with its kwok provider: the class' stored Ready=False (whoever wrote
    # it) refuses the launch and the NodeClaim goes; no condition yet is no verdict.
    store = cluster()
    conditions = () if stored is None else (Condition("Ready", stored, reason="TestingNotReady"),)
    store.create(KWOKNodeClass(ObjectMeta(name="default"), NodeClassStatus(conditions=conditions)))
    store.create(nodeclaim(NAME))
    NodeClaimLifecycle(store, KwokCloudProvider(store), store.clock).reconcile(NAME)
    reasons = [event.reason for event in store.events]
    claim = store.nodeclaim(NAME)
    if stored == "False":
        assert "NodeClassNotReady" in reasons
        assert claim is None or claim.metadata.deleting
    else:
        assert "NodeClassNotReady" not in reasons


def test_a_node_ready_when_it_registers_is_registered_and_initialized_in_one_status_write() -> None:
    # Karpenter's lifecycle writes a reconcile's status once; two writes were a request more
    # per NodeClaim on a real API server, where kwok's Nodes are Ready as they register.
    store = cluster()
    store.create(
        nodeclaim(NAME, provider_id=f"kwok://{NAME}").with_status(
            allocatable=dict(INSTANCE_TYPE.allocatable), conditions=(Condition(CONDITION_LAUNCHED, "True"),)
        )
    )
    store.create(node(NAME, registered=False).with_changes(conditions=(NodeCondition("Ready", "True"),)))
    writes: list[object] = []
    store.subscribe(lambda kind, old, new: writes.append(new) if kind == "NodeClaim" else None)
    NodeClaimLifecycle(store, KwokCloudProvider(store), store.clock).reconcile(NAME)
    claim = store.nodeclaim(NAME)
    assert claim is not None and claim.registered and claim.initialized
    assert len(writes) == 1
    assert [event.reason for event in store.events][-2:] == ["Registered", "Initialized"]


def test_a_node_not_ready_when_it_registers_is_registered_and_initialized_later() -> None:
    store = cluster()
    store.create(
        nodeclaim(NAME, provider_id=f"kwok://{NAME}").with_status(
            allocatable=dict(INSTANCE_TYPE.allocatable), conditions=(Condition(CONDITION_LAUNCHED, "True"),)
        )
    )
    store.create(node(NAME, registered=False))
    lifecycle = NodeClaimLifecycle(store, KwokCloudProvider(store), store.clock)
    lifecycle.reconcile(NAME)
    claim = store.nodeclaim(NAME)
    assert claim is not None and claim.registered and not claim.initialized
    joined = store.node(NAME)
    assert joined is not None
    store.update(joined.with_changes(conditions=(NodeCondition("Ready", "True"),)))
    lifecycle.reconcile(NAME)
    assert initialized(store)
