"""Static capacity: keep each static NodePool (``spec.replicas``) at its replica count.

Karpenter's ``static.provisioning`` and ``static.deprovisioning`` controllers
in one: on a static pool's change (created, replicas or limits changed, turned
Ready) and on its NodeClaims appearing or going, the pool's NodeClaims are
counted (:func:`~karpy.controllers.state.static_counts`) and the decision core
(:mod:`karpy.disruption.static`) says how many to launch or remove and which.
Launching stamps NodeClaims from the template alone (the cloud picks the
cheapest offering its requirements admit); removing deletes NodeClaims, which
the termination controller drains as any other. Drift of a static pool's nodes
is the disruption controller's (``StaticDrift``), consolidation leaves them
alone, and the provisioner launches nothing from a static pool.

A node's disrupted taint coming or going (a drift command started or rolled
back) is a change too. A pool that is not Ready or is being deleted gets
nothing launched (its NodeClaims go with it through the garbage collector's
cascade). A pool at its
``limits.nodes`` is looked at again every 30 s, as Karpenter does, besides
each change. Off when the ``StaticCapacity`` feature gate is (static pools then
get no nodes, as in Karpenter).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from karpy.api.conditions import TRUE, find_condition
from karpy.api.core import Node
from karpy.api.nodeclaim import NodeClaim
from karpy.api.nodepool import CONDITION_READY, NodePool, status_only_change
from karpy.api.requirements import LABEL_NODEPOOL
from karpy.api.taints import DISRUPTED_TAINT_KEY
from karpy.cloud.provider import CloudProvider
from karpy.controllers.provisioning import build_nodeclaim
from karpy.controllers.state import static_counts
from karpy.disruption.candidates import nodeclaim_lifetime_remaining
from karpy.disruption.static import (
    StaticMember,
    scale_down_order,
    static_nodeclaim,
    to_launch,
    to_remove,
)
from karpy.logs import about, named
from karpy.operator.cluster import EVENT_NORMAL, Clock, Cluster, NotFoundError
from karpy.operator.karpenter_metrics import Metrics
from karpy.operator.runtime import Watch

log = logging.getLogger("karpy.static")

# Seconds before a pool held at its node limit is looked at again.
AT_LIMIT_RETRY = 30.0
# The termination reason of a NodeClaim removed to come down to replicas (Karpenter's).
REASON_OVERPROVISIONED = "overprovisioned"


class StaticCapacity:
    name = "static"

    def __init__(self, cluster: Cluster, cloud: CloudProvider, clock: Clock, *, metrics: Metrics) -> None:
        self.cluster = cluster
        self.cloud = cloud
        self.clock = clock
        self.metrics = metrics
        # NodeClaims this controller deleted, counted as deleting before the cache shows it.
        self._deleted: set[str] = set()

    def watches(self) -> list[Watch]:
        return [
            Watch("NodePool", self._on_nodepool),
            Watch("NodeClaim", self._on_nodeclaim),
            Watch("Node", self._on_node),
        ]

    def _on_nodepool(self, old: object | None, new: object | None) -> Iterable[str]:
        if not isinstance(new, NodePool) or not new.is_static:
            return ()
        if status_only_change(old, new) and _ready(old) == _ready(new):
            return ()
        return [new.name]

    def _on_nodeclaim(self, old: object | None, new: object | None) -> Iterable[str]:
        claim = new if isinstance(new, NodeClaim) else old
        if not isinstance(claim, NodeClaim):
            return ()
        unchanged = (
            isinstance(old, NodeClaim)
            and isinstance(new, NodeClaim)
            and (old.metadata.deleting, old.launched) == (new.metadata.deleting, new.launched)
        )
        if unchanged:
            return ()
        pool = self.cluster.nodepool(claim.nodepool)
        return [pool.name] if pool is not None and pool.is_static else ()

    def _on_node(self, old: object | None, new: object | None) -> Iterable[str]:
        """A node's disrupted taint put on or taken off (a drift command started or rolled back)
        moves its NodeClaim between active and pending disruption."""
        if not isinstance(old, Node) or not isinstance(new, Node) or _disrupted(old) == _disrupted(new):
            return ()
        pool = self.cluster.nodepool(new.metadata.labels.get(LABEL_NODEPOOL, ""))
        return [pool.name] if pool is not None and pool.is_static else ()

    def reconcile(self, key: str) -> float | None:
        pool = self.cluster.nodepool(key)
        if pool is None or not pool.is_static or pool.metadata.deleting:
            return None
        existing = {claim.name for claim in self.cluster.nodeclaims()}
        self._deleted &= existing
        count = static_counts(self.cluster, self._deleted).get(pool.name)
        if count is None:
            return None
        removing = to_remove(pool, count)
        if removing:
            self._scale_down(pool, removing)
            return None
        if not _ready(pool):
            return None  # its status turning Ready is a change that brings it back
        launching = to_launch(pool, count)
        if launching:
            self._scale_up(pool, launching, count.active)
            return None
        if count.active + count.pending_disruption < (pool.replicas or 0):
            log.info(
                "static nodepool %s is at its node limit (%s nodes): %d of %d replicas",
                pool.name,
                pool.node_limit,
                count.active,
                pool.replicas,
                extra=about(pool, controller=self.name),
            )
            return AT_LIMIT_RETRY
        return None

    def _scale_up(self, pool: NodePool, launching: int, active: int) -> None:
        log.info(
            "launching %d nodeclaims for static nodepool %s (%d of %d replicas)",
            launching,
            pool.name,
            active,
            pool.replicas,
            extra=about(pool, controller=self.name),
        )
        new = static_nodeclaim(pool)
        created = self.cluster.create_all([build_nodeclaim(pool, new) for _ in range(launching)])
        for outcome in created:
            if isinstance(outcome, NodeClaim):
                self.metrics.nodeclaim_created(outcome)
                self.cluster.record_event(
                    outcome, EVENT_NORMAL, "Launching", f"NodeClaim for static NodePool {pool.name}"
                )
        failures = [outcome for outcome in created if isinstance(outcome, Exception)]
        if failures:
            raise failures[0]

    def _scale_down(self, pool: NodePool, removing: int) -> None:
        now = self.clock.now()
        members = []
        for claim in self.cluster.nodeclaims():
            if claim.nodepool != pool.name or claim.metadata.deleting or claim.name in self._deleted:
                continue
            node_name = claim.status.node_name
            node = self.cluster.node(node_name) if node_name else None
            if node is not None and _disrupted(node):
                continue  # pending disruption: the drift that tainted it removes it
            members.append(
                StaticMember(
                    claim.name,
                    claim.launched,
                    self.cluster.pods_on_node(node_name) if node_name else (),
                    nodeclaim_lifetime_remaining(claim, now),
                )
            )
        chosen = scale_down_order(members)[:removing]
        log.info(
            "removing %d nodeclaims of static nodepool %s down to %d replicas: %s",
            len(chosen),
            pool.name,
            pool.replicas,
            ", ".join(member.name for member in chosen),
            extra=about(pool, controller=self.name),
        )
        for member in chosen:
            found = self.cluster.nodeclaim(member.name)
            if found is None:
                continue
            try:
                self.cluster.delete(found)
            except NotFoundError:
                continue
            self._deleted.add(member.name)
            self.cluster.record_event(
                found,
                EVENT_NORMAL,
                "DisruptionTerminating",
                f"Disrupting NodeClaim: {REASON_OVERPROVISIONED} (static NodePool {pool.name} "
                f"scaled to {pool.replicas})",
            )
            log.debug(
                "deleting nodeclaim", extra=about(found, NodePool=named(pool.name), controller=self.name)
            )


def _disrupted(node: Node) -> bool:
    return any(taint.key == DISRUPTED_TAINT_KEY for taint in node.taints)


def _ready(pool: object | None) -> bool:
    if not isinstance(pool, NodePool):
        return False
    ready = find_condition(pool.status.conditions, CONDITION_READY)
    return ready is not None and ready.status == TRUE


__all__ = ["StaticCapacity"]
