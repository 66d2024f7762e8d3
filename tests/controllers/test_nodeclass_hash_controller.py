"""The node class hash controller: the class' annotations, and NodeClaims re-annotated on a version change."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import yaml
from tests.support import KWOK_NODE_CLASS, make_nodepool, parse_object

from karpy.api.conditions import TRUE, set_condition
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import CONDITION_DRIFTED, NodeClaim, NodeClaimSpec
from karpy.api.nodeclass import KWOKNodeClass, NodeClass
from karpy.api.nodeclass_hash import (
    EC2NODECLASS_HASH_ANNOTATION,
    EC2NODECLASS_HASH_VERSION_ANNOTATION,
    NodeClassHash,
)
from karpy.api.nodepool import NodeClassRef
from karpy.api.requirements import Requirements
from karpy.controllers.nodeclass_hash import NodeClassHashController
from karpy.controllers.provisioning import build_nodeclaim
from karpy.disruption.nodeclass_drift import static_fields_drifted
from karpy.scheduling.solver import NewNodeClaim
from karpy.sim.clock import VirtualClock
from karpy.sim.cloud import SimulatedCloud
from karpy.sim.store import InMemoryCluster

HASH, VERSION = "example.com/hash", "example.com/hash-version"
KEY = "KWOKNodeClass/default"


class Hasher:
    """Hashes every KWOKNodeClass to ``value`` at ``version``."""

    def __init__(self) -> None:
        self.value, self.version = "100", "v2"

    def node_class_hash(self, node_class: NodeClass) -> NodeClassHash | None:
        if not isinstance(node_class, KWOKNodeClass):
            return None
        return NodeClassHash(self.value, self.version, HASH, VERSION)


def world() -> tuple[InMemoryCluster, Hasher, NodeClassHashController]:
    clock = VirtualClock()
    cluster = InMemoryCluster(clock)
    cluster.create(parse_object(KWOK_NODE_CLASS))
    cluster.create(make_nodepool("default"))
    hasher = Hasher()
    return cluster, hasher, NodeClassHashController(cluster, hasher)


def add_claim(cluster: InMemoryCluster, annotations: dict[str, str], *, drifted: bool = False) -> str:
    pool = cluster.nodepool("default")
    assert pool is not None
    claim = build_nodeclaim(pool, NewNodeClaim("default", Requirements(), [], [], {}, {}))
    claim = claim.with_metadata(annotations={**claim.metadata.annotations, **annotations})
    if drifted:
        conditions = set_condition(claim.status.conditions, CONDITION_DRIFTED, TRUE, 0.0, "NodeClassDrift")
        claim = claim.with_status(conditions=conditions)
    return cluster.create(claim).name


def annotations_of(cluster: InMemoryCluster, name: str) -> dict[str, str]:
    claim = cluster.nodeclaim(name)
    assert isinstance(claim, NodeClaim)
    return {key: value for key, value in claim.metadata.annotations.items() if key in (HASH, VERSION)}


def test_the_class_carries_its_hash_and_version() -> None:
    cluster, hasher, controller = world()
    [watch, _] = controller.watches()
    node_class = cluster.node_class("karpenter.kwok.sh", "KWOKNodeClass", "default")
    assert list(watch.mapper(None, node_class)) == [KEY]
    controller.reconcile(KEY)
    node_class = cluster.node_class("karpenter.kwok.sh", "KWOKNodeClass", "default")
    assert node_class is not None
    assert node_class.metadata.annotations == {HASH: "100", VERSION: "v2"}
    hasher.value = "200"
    controller.reconcile(KEY)
    node_class = cluster.node_class("karpenter.kwok.sh", "KWOKNodeClass", "default")
    assert node_class is not None and node_class.metadata.annotations[HASH] == "200"


def test_nodeclaims_of_another_version_are_re_annotated_not_drifted() -> None:
    cluster, hasher, controller = world()
    before_the_hash = add_claim(cluster, {})
    karpenters = add_claim(cluster, {HASH: "987654321", VERSION: "v1"})
    drifted = add_claim(cluster, {HASH: "987654321", VERSION: "v1"}, drifted=True)
    current = add_claim(cluster, {HASH: "100", VERSION: "v2"})
    controller.reconcile(KEY)
    assert annotations_of(cluster, before_the_hash) == {HASH: "100", VERSION: "v2"}
    assert annotations_of(cluster, karpenters) == {HASH: "100", VERSION: "v2"}
    # Drifted before: whether it still is cannot be told across versions, so its hash stays.
    assert annotations_of(cluster, drifted) == {HASH: "987654321", VERSION: "v2"}
    assert annotations_of(cluster, current) == {HASH: "100", VERSION: "v2"}
    # From now on a change of the class drifts the once unannotated NodeClaim.
    hasher.value = "200"
    claim = cluster.nodeclaim(before_the_hash)
    assert claim is not None
    node_class = cluster.node_class("karpenter.kwok.sh", "KWOKNodeClass", "default")
    assert node_class is not None
    now = hasher.node_class_hash(node_class)
    assert now is not None and static_fields_drifted(claim.metadata.annotations, now)


def test_once_the_class_has_the_current_version_nodeclaims_are_left_alone() -> None:
    cluster, _, controller = world()
    controller.reconcile(KEY)
    later = add_claim(cluster, {})  # made by hand, say: no hash, and none is made up for it
    controller.reconcile(KEY)
    assert annotations_of(cluster, later) == {}


GOLDEN_DATA = Path(__file__).parents[1] / "data" / "ec2nodeclass-hash"
# Karpenter's hash of that class, as its Go code prints it (scripts/gen-hash-golden).
KARPENTERS = json.loads((GOLDEN_DATA / "hashes.json").read_text())["hashes"]["defaulted"]
EC2_KEY = "EC2NodeClass/defaulted"


def ec2_world(class_annotations: dict[str, str]) -> tuple[InMemoryCluster, NodeClassHashController]:
    clock = VirtualClock()
    cluster = InMemoryCluster(clock)
    manifest = yaml.safe_load((GOLDEN_DATA / "defaulted.yaml").read_text())
    manifest["metadata"]["annotations"] = class_annotations
    cluster.create(parse_object(yaml.safe_dump(manifest)))
    return cluster, NodeClassHashController(cluster, SimulatedCloud(cluster, clock))


def add_ec2_claim(cluster: InMemoryCluster, name: str, annotations: dict[str, str]) -> str:
    ref = NodeClassRef("karpenter.k8s.aws", "EC2NodeClass", "defaulted")
    claim = NodeClaim(ObjectMeta(name=name, annotations=annotations), NodeClaimSpec(node_class_ref=ref))
    return cluster.create(claim).name


def ec2_annotations(annotations: Mapping[str, str]) -> dict[str, str]:
    keys = (EC2NODECLASS_HASH_ANNOTATION, EC2NODECLASS_HASH_VERSION_ANNOTATION)
    return {key: value for key, value in annotations.items() if key in keys}


def test_after_an_older_karpy_the_class_and_its_nodeclaims_get_karpenters_hash_and_version() -> None:
    older = {EC2NODECLASS_HASH_ANNOTATION: "123", EC2NODECLASS_HASH_VERSION_ANNOTATION: "karpy-v1"}
    cluster, controller = ec2_world(older)
    claim = add_ec2_claim(cluster, "older", older)
    controller.reconcile(EC2_KEY)
    karpenters = {EC2NODECLASS_HASH_ANNOTATION: KARPENTERS, EC2NODECLASS_HASH_VERSION_ANNOTATION: "v6"}
    node_class = cluster.node_class("karpenter.k8s.aws", "EC2NodeClass", "defaulted")
    assert node_class is not None and ec2_annotations(node_class.metadata.annotations) == karpenters
    found = cluster.nodeclaim(claim)
    assert found is not None and ec2_annotations(found.metadata.annotations) == karpenters


def test_taken_over_from_karpenter_nothing_is_re_annotated() -> None:
    karpenters = {EC2NODECLASS_HASH_ANNOTATION: KARPENTERS, EC2NODECLASS_HASH_VERSION_ANNOTATION: "v6"}
    cluster, controller = ec2_world(karpenters)
    launched = add_ec2_claim(cluster, "karpenters", karpenters)
    behind = add_ec2_claim(cluster, "behind", {**karpenters, EC2NODECLASS_HASH_ANNOTATION: "42"})
    controller.reconcile(EC2_KEY)
    found = cluster.nodeclaim(launched)
    assert found is not None and ec2_annotations(found.metadata.annotations) == karpenters
    # Karpenter's own value for another class: still drifted, as Karpenter would have it.
    found = cluster.nodeclaim(behind)
    assert found is not None and found.metadata.annotations[EC2NODECLASS_HASH_ANNOTATION] == "42"
