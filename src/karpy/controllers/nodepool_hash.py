"""Keeps each NodePool's hash annotations, and its NodeClaims' when the hash version changes.

Karpenter's ``nodepool.hash`` controller: every NodePool carries its current
``karpenter.sh/nodepool-hash`` (Karpenter's own value, :mod:`karpy.api.nodepool_hash`)
and ``karpenter.sh/nodepool-hash-version``, so a user (and Karpenter's e2e specs)
sees what its NodeClaims are compared with. When the version the pool carries is not
the current one (the pool is new, karpy takes over from a Karpenter that hashed
differently, or someone wrote another version), each NodeClaim of the pool whose
version is not the current one is *re-annotated*, not drifted: it gets the current
version and, unless it is already Drifted (whether it still is cannot be told across
versions), the pool's current hash. Only then is the pool's own version brought up to
date, so a failed NodeClaim write is retried on the next reconcile.

The drift decision compares a NodeClaim's annotations with the hash worked out afresh
(:mod:`karpy.disruption.drift`), so it does not wait for this controller's write.
Unlike Karpenter, which stamps only pools whose node class its provider serves, every
readable pool is stamped: the hash does not depend on the provider.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable

from karpy.api.nodeclaim import CONDITION_DRIFTED
from karpy.api.nodepool import (
    NODEPOOL_HASH_ANNOTATION,
    NODEPOOL_HASH_VERSION,
    NODEPOOL_HASH_VERSION_ANNOTATION,
    NodePool,
    status_only_change,
)
from karpy.logs import about
from karpy.operator.cluster import Cluster
from karpy.operator.runtime import Watch

log = logging.getLogger("karpy.nodepool")


class NodePoolHashController:
    """Writes a NodePool's hash annotations; re-annotates its NodeClaims on a hash version change."""

    name = "nodepool.hash"

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def watches(self) -> list[Watch]:
        return [Watch("NodePool", self._on_nodepool)]

    @staticmethod
    def _on_nodepool(old: object | None, new: object | None) -> Iterable[str]:
        if not isinstance(new, NodePool) or status_only_change(old, new):
            return ()
        return [new.name]

    def reconcile(self, key: str) -> float | None:
        pool = self.cluster.nodepool(key)
        if pool is None or pool.metadata.deleting:
            return None
        current = pool.template_hash()
        annotations = pool.metadata.annotations
        if annotations.get(NODEPOOL_HASH_VERSION_ANNOTATION) != NODEPOOL_HASH_VERSION:
            self._reannotate(pool, current)
        wanted = {
            **annotations,
            NODEPOOL_HASH_ANNOTATION: current,
            NODEPOOL_HASH_VERSION_ANNOTATION: NODEPOOL_HASH_VERSION,
        }
        if wanted != annotations:
            metadata = pool.metadata.with_changes(annotations=wanted)
            self.cluster.update(dataclasses.replace(pool, metadata=metadata))
        return None

    def _reannotate(self, pool: NodePool, current: str) -> None:
        for claim in self.cluster.nodeclaims():
            if claim.nodepool != pool.name:
                continue
            annotations = claim.metadata.annotations
            if annotations.get(NODEPOOL_HASH_VERSION_ANNOTATION) == NODEPOOL_HASH_VERSION:
                continue
            wanted = {**annotations, NODEPOOL_HASH_VERSION_ANNOTATION: NODEPOOL_HASH_VERSION}
            if claim.condition(CONDITION_DRIFTED) is None:
                wanted[NODEPOOL_HASH_ANNOTATION] = current
            log.info(
                "nodeclaim %s: nodepool hash re-annotated for hash version %s",
                claim.name,
                NODEPOOL_HASH_VERSION,
                extra=about(claim, controller=self.name),
            )
            self.cluster.update(claim.with_metadata(annotations=wanted))


__all__ = ["NodePoolHashController"]
