"""A scenario's node failures (``cloud.nodeFailures``), written on the Nodes in virtual time.

At each :class:`~karpy.sim.cloud.NodeFailure`'s time, the Nodes of the
instances it selects get its condition (``Ready`` ``Unknown`` by default: the
kubelet stopped posting), its transition time then, as a node's kubelet, the
node lifecycle controller or a node problem detector would write it. Nothing
resets it: the node stays broken until it goes. What karpy does about it is
the disruption controller's node repair (the ``NodeRepair`` feature gate), the
same as ``karpy run``'s, so a what-if shows when each broken node is replaced,
within which budgets, and when the breaker holds a pool back. Each failure is
a row of the report; a failure that selects no instance says so.
"""

from __future__ import annotations

from collections.abc import Callable

from karpy.api.core import NodeCondition
from karpy.operator.cluster import Clock
from karpy.operator.runtime import Runtime, Watch
from karpy.sim.cloud import NodeFailure, SimulatedCloud
from karpy.sim.store import InMemoryCluster


class SimulatedNodeFailures:
    """Writes each node failure's condition on its Nodes, keyed by the failure's index."""

    name = "sim.node-failures"

    def __init__(
        self,
        cluster: InMemoryCluster,
        cloud: SimulatedCloud,
        clock: Clock,
        runtime: Runtime,
        note: Callable[[str], None] | None = None,
    ) -> None:
        self.cluster = cluster
        self.cloud = cloud
        self.clock = clock
        self.runtime = runtime
        self.note = note if note is not None else (lambda _: None)
        self.start = clock.now()
        self._due: set[int] = set()
        # (when, node name, condition) of every Node a failure broke.
        self.broken: list[tuple[float, str, str]] = []

    def watches(self) -> list[Watch]:
        return []

    def schedule(self) -> None:
        """Queue the failures of the cloud's settings, each at its time from now."""
        self.start = self.clock.now()
        for index, failure in enumerate(self.cloud.settings.node_failures):
            self._due.add(index)
            self.runtime.enqueue(self.name, str(index), failure.at)

    def next_failure_at(self) -> float:
        """When the next failure comes (inf: none left)."""
        failures = self.cloud.settings.node_failures
        return min((self.start + failures[index].at for index in self._due), default=float("inf"))

    def reconcile(self, key: str) -> float | None:
        index = int(key)
        self._due.discard(index)
        self._fail(self.cloud.settings.node_failures[index])
        return None

    def _fail(self, failure: NodeFailure) -> None:
        now = self.clock.now()
        what = f"{failure.condition_type}={failure.condition_status}"
        names = []
        for instance in failure.select(self.cloud.instances.values()):
            node = self.cluster.node(instance.node_name)
            if node is None or node.metadata.deleting:
                continue
            kept = tuple(c for c in node.conditions if c.type != failure.condition_type)
            broken = NodeCondition(
                failure.condition_type, failure.condition_status, failure.reason, last_transition_time=now
            )
            self.cluster.update(node.with_changes(conditions=(*kept, broken)))
            self.broken.append((now, node.name, what))
            names.append(node.name)
        if names:
            self.note(f"node failure: {what} on {', '.join(names)}")
        else:
            self.note(f"node failure: {what} selected no node")


__all__ = ["SimulatedNodeFailures"]
