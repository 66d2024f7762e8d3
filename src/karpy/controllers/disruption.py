"""Disruption orchestration: carry out what the decision core decides.

Every pass (every 10 s, Karpenter's polling period, or sooner when a node is
known to become due) builds the candidates from the cluster, asks
:mod:`karpy.disruption` for one decision and carries it out by deleting
NodeClaims; the termination controller drains and removes them. Methods run
in Karpenter's order and a pass stops at the first that acts.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from karpy.api.nodepool import REASON_EMPTY
from karpy.controllers.interfaces import EVENT_NORMAL, Clock, Cluster
from karpy.controllers.runtime import Watch
from karpy.disruption.emptiness import Candidate, EmptinessDecision, decide_emptiness

log = logging.getLogger("karpy.disruption")

PASS_KEY = "pass"
POLL_PERIOD = 10.0


class DisruptionController:
    name = "disruption"

    def __init__(self, cluster: Cluster, clock: Clock, poll_period: float = POLL_PERIOD) -> None:
        self.cluster = cluster
        self.clock = clock
        self.poll_period = poll_period
        self.last = EmptinessDecision()
        self.passes = 0

    def watches(self) -> list[Watch]:
        return [Watch("NodePool", self._start), Watch("NodeClaim", self._start)]

    def _start(self, old: object | None, new: object | None) -> Iterable[str]:
        # The pass keeps itself going by requeueing; a change only makes sure it runs.
        return [PASS_KEY] if old is None or new is None else []

    def candidates(self) -> tuple[list[Candidate], dict[str, int], dict[str, int]]:
        candidates: list[Candidate] = []
        pool_sizes: dict[str, int] = {}
        disrupting: dict[str, int] = {}
        for nodeclaim in self.cluster.nodeclaims():
            pool_name = nodeclaim.nodepool
            pool_sizes[pool_name] = pool_sizes.get(pool_name, 0) + 1
            if nodeclaim.metadata.deleting:
                disrupting[pool_name] = disrupting.get(pool_name, 0) + 1
                continue
            if not nodeclaim.initialized or not nodeclaim.status.node_name:
                continue
            nodepool = self.cluster.nodepool(pool_name)
            node = self.cluster.node(nodeclaim.status.node_name)
            if nodepool is None or node is None or node.metadata.deleting:
                continue
            candidates.append(Candidate(nodeclaim, node, nodepool, self.cluster.pods_on_node(node.name)))
        return candidates, pool_sizes, disrupting

    def decide(self) -> tuple[EmptinessDecision, bool]:
        """The decision for the cluster as it is now (no writes), and whether any NodeClaim exists."""
        candidates, pool_sizes, disrupting = self.candidates()
        return decide_emptiness(candidates, pool_sizes, disrupting, self.clock.now()), bool(pool_sizes)

    def reconcile(self, key: str) -> float | None:
        self.passes += 1
        now = self.clock.now()
        decision, any_nodeclaims = self.decide()
        self.last = decision
        for candidate in decision.delete:
            log.info("disrupting nodeclaim %s (%s): empty", candidate.nodeclaim.name, candidate.node.name)
            self.cluster.record_event(
                candidate.node, EVENT_NORMAL, "DisruptionTerminating", f"Disrupting Node: {REASON_EMPTY}"
            )
            self.cluster.record_event(
                candidate.nodeclaim,
                EVENT_NORMAL,
                "DisruptionTerminating",
                f"Disrupting NodeClaim: {REASON_EMPTY}",
            )
            self.cluster.delete(candidate.nodeclaim)
        if not any_nodeclaims:
            return None  # nothing to watch over until a NodeClaim appears
        if decision.next_due is not None:
            return max(0.0, min(self.poll_period, decision.next_due - now))
        return self.poll_period

    def has_work(self) -> bool:
        """Whether disruption would act now or later, judged on the current cluster."""
        return self.decide()[0].has_work
