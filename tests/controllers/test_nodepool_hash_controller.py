"""The NodePool hash controller: the pool's annotations, and NodeClaims re-annotated on a version change."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import yaml
from tests.support import KWOK_NODE_CLASS, make_nodepool, parse_object

from karpy.api._reader import FieldReader
from karpy.api.conditions import TRUE, set_condition
from karpy.api.nodeclaim import CONDITION_DRIFTED, NodeClaim
from karpy.api.nodepool import (
    NODEPOOL_HASH_ANNOTATION as HASH,
)
from karpy.api.nodepool import (
    NODEPOOL_HASH_VERSION_ANNOTATION as VERSION,
)
from karpy.api.nodepool import NodePool
from karpy.api.requirements import Requirements
from karpy.controllers.nodepool_hash import NodePoolHashController
from karpy.controllers.provisioning import build_nodeclaim
from karpy.disruption.drift import drift_reason
from karpy.scheduling.solver import NewNodeClaim
from karpy.sim.clock import VirtualClock
from karpy.sim.store import InMemoryCluster

DATA = Path(__file__).parent.parent / "data" / "nodepool-hash"
GOLDEN = json.loads((DATA / "hashes.json").read_text())["hashes"]


def world(pool: NodePool | None = None) -> tuple[InMemoryCluster, NodePoolHashController]:
    cluster = InMemoryCluster(VirtualClock())
    cluster.create(parse_object(KWOK_NODE_CLASS))
    cluster.create(pool if pool is not None else make_nodepool("default"))
    return cluster, NodePoolHashController(cluster)


def pool_of(cluster: InMemoryCluster, name: str = "default") -> NodePool:
    pool = cluster.nodepool(name)
    assert pool is not None
    return pool


def add_claim(cluster: InMemoryCluster, annotations: dict[str, str], *, drifted: bool = False) -> str:
    claim = build_nodeclaim(pool_of(cluster), NewNodeClaim("default", Requirements(), [], [], {}, {}))
    kept = {key: value for key, value in claim.metadata.annotations.items() if key not in (HASH, VERSION)}
    claim = claim.with_metadata(annotations={**kept, **annotations})
    if drifted:
        conditions = set_condition(claim.status.conditions, CONDITION_DRIFTED, TRUE, 0.0, "NodePoolDrifted")
        claim = claim.with_status(conditions=conditions)
    return cluster.create(claim).name


def claim_of(cluster: InMemoryCluster, name: str) -> NodeClaim:
    claim = cluster.nodeclaim(name)
    assert isinstance(claim, NodeClaim)
    return claim


def hash_annotations(claim: NodeClaim | NodePool) -> dict[str, str]:
    return {key: value for key, value in claim.metadata.annotations.items() if key in (HASH, VERSION)}


def with_annotations(
    pool: NodePool, annotations: dict[str, str], template_annotations: dict[str, str]
) -> NodePool:
    template = dataclasses.replace(pool.template, annotations=template_annotations)
    metadata = pool.metadata.with_changes(annotations={**pool.metadata.annotations, **annotations})
    return dataclasses.replace(pool, metadata=metadata, template=template)


def test_the_pool_carries_karpenters_own_hash_and_version() -> None:
    manifest = yaml.safe_load((DATA / "everything.yaml").read_text())
    cluster, controller = world(NodePool.parse(FieldReader(manifest)))
    pool = pool_of(cluster, "everything")
    [watch] = controller.watches()
    assert list(watch.mapper(None, pool)) == ["everything"]
    controller.reconcile("everything")
    assert hash_annotations(pool_of(cluster, "everything")) == {HASH: GOLDEN["everything"], VERSION: "v3"}
    # A status write alone is no reason to reconcile.
    stamped = pool_of(cluster, "everything")
    status = dataclasses.replace(stamped.status, nodes=3)
    assert list(watch.mapper(stamped, dataclasses.replace(stamped, status=status))) == []


def test_a_version_mismatch_re_annotates_nodeclaims_instead_of_drifting_them() -> None:
    # Karpenter's e2e "should update the nodepool-hash annotation on the nodepool and nodeclaim when
    # the nodepool's nodepool-hash-version annotation does not match the controller hash version".
    cluster, controller = world()
    controller.reconcile("default")
    assert hash_annotations(pool_of(cluster)) == {HASH: GOLDEN["minimal-defaulted"], VERSION: "v3"}
    stamped = add_claim(cluster, hash_annotations(pool_of(cluster)))
    other_version = add_claim(cluster, {HASH: "test-hash-2", VERSION: "test-hash-version-2"})
    drifted = add_claim(cluster, {HASH: "987654321", VERSION: "v1"}, drifted=True)
    before_the_hash = add_claim(cluster, {})
    changed = with_annotations(
        pool_of(cluster), {HASH: "test-hash-1", VERSION: "test-hash-version-1"}, {"test-key": "test-value"}
    )
    cluster.update(changed)
    controller.reconcile("default")
    pool = pool_of(cluster)
    expected = {HASH: pool.template_hash(), VERSION: "v3"}
    assert hash_annotations(pool) == expected
    assert expected[HASH] != GOLDEN["minimal-defaulted"]  # the template changed
    assert hash_annotations(claim_of(cluster, other_version)) == expected
    assert hash_annotations(claim_of(cluster, before_the_hash)) == expected
    # Drifted before: whether it still is cannot be told across versions, so its hash stays.
    assert hash_annotations(claim_of(cluster, drifted)) == {HASH: "987654321", VERSION: "v3"}
    # Already of the current version: left alone, so the template change drifts it.
    assert hash_annotations(claim_of(cluster, stamped))[HASH] != expected[HASH]
    assert drift_reason(claim_of(cluster, stamped), pool)[0] == "NodePoolDrifted"
    assert drift_reason(claim_of(cluster, other_version), pool) == ("", "")


def test_once_the_pool_has_the_current_version_nodeclaims_are_left_alone() -> None:
    cluster, controller = world()
    controller.reconcile("default")
    later = add_claim(cluster, {})  # made by hand, say: no hash, and none is made up for it
    controller.reconcile("default")
    assert hash_annotations(claim_of(cluster, later)) == {}
