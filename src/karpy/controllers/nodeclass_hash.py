"""Keeps each node class' hash annotations, and its NodeClaims' when the hash version changes.

Karpenter's ``nodeclass.hash`` controller: the class carries its current hash
and hash version (``karpenter.k8s.aws/ec2nodeclass-hash`` and
``-hash-version`` for an EC2NodeClass, :mod:`karpy.api.nodeclass_hash`), so
a user sees what its NodeClaims are compared with. The EC2NodeClass' hash is
Karpenter's own value and version, so after Karpenter of the same hash
version nothing is re-annotated and its NodeClaims compare directly. When the
version the class carries is not the current one (an older karpy's
``karpy-v1``, a Karpenter of another hash version, or a new class), every
NodeClaim of the class with another version is *re-annotated*, not drifted:
it gets the current version and, unless it is already Drifted (whether it
still is cannot be told across versions), the current hash. A NodeClaim
launched before the hash existed is annotated the same way, so it drifts on
the class' next change and not on the hash's absence.

The drift decision itself compares a NodeClaim's annotations with the hash
worked out afresh (:mod:`karpy.disruption.nodeclass_drift`), so it does not
wait for this controller's write.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable

from karpy.api.nodeclaim import CONDITION_DRIFTED, NodeClaim
from karpy.api.nodeclass import EC2_GROUP, EC2_KIND, KWOK_GROUP, KWOK_KIND, EC2NodeClass, KWOKNodeClass
from karpy.api.nodeclass_hash import NodeClassHash
from karpy.cloud.provider import NodeClassHashing
from karpy.logs import about
from karpy.operator.cluster import Cluster
from karpy.operator.runtime import Watch

log = logging.getLogger("karpy.nodeclass")

_GROUPS = {EC2_KIND: EC2_GROUP, KWOK_KIND: KWOK_GROUP}


class NodeClassHashController:
    """Writes a node class' hash annotations; re-annotates its NodeClaims on a hash version change."""

    name = "nodeclass.hash"

    def __init__(self, cluster: Cluster, cloud: NodeClassHashing) -> None:
        self.cluster = cluster
        self.cloud = cloud

    def watches(self) -> list[Watch]:
        return [Watch(EC2_KIND, self._on_node_class), Watch(KWOK_KIND, self._on_node_class)]

    @staticmethod
    def _on_node_class(old: object | None, new: object | None) -> Iterable[str]:
        if not isinstance(new, EC2NodeClass | KWOKNodeClass):
            return []
        return [f"{new.kind}/{new.name}"]

    def reconcile(self, key: str) -> float | None:
        kind, _, name = key.partition("/")
        node_class = self.cluster.node_class(_GROUPS.get(kind, ""), kind, name)
        if node_class is None or node_class.metadata.deleting:
            return None
        current = self.cloud.node_class_hash(node_class)
        if current is None:
            return None  # a class this provider does not serve
        annotations = node_class.metadata.annotations
        if annotations.get(current.version_annotation) != current.version:
            self._reannotate(kind, name, current)
        wanted = {**annotations, **current.annotations()}
        if wanted != annotations:
            metadata = node_class.metadata.with_changes(annotations=wanted)
            self.cluster.update(dataclasses.replace(node_class, metadata=metadata))
        return None

    def _reannotate(self, kind: str, name: str, current: NodeClassHash) -> None:
        for claim in self.cluster.nodeclaims():
            ref = claim.spec.node_class_ref
            if ref.kind != kind or ref.name != name or claim.metadata.deleting:
                continue
            annotations = claim.metadata.annotations
            if annotations.get(current.version_annotation) == current.version:
                continue
            wanted = {**annotations, current.version_annotation: current.version}
            if not _drifted(claim):
                wanted[current.annotation] = current.value
            log.info(
                "nodeclaim %s: node class hash re-annotated for hash version %s",
                claim.name,
                current.version,
                extra=about(claim, controller=self.name),
            )
            self.cluster.update(claim.with_metadata(annotations=wanted))


def _drifted(claim: NodeClaim) -> bool:
    return claim.condition(CONDITION_DRIFTED) is not None


__all__ = ["NodeClassHashController"]
