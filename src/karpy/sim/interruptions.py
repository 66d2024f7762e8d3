"""A scenario's cloud interruptions, delivered to the interruption controller in virtual time.

On AWS, EventBridge puts EC2's warnings on an SQS queue and ``karpy run``
hands each parsed message to the interruption controller as a change of kind
:data:`~karpy.operator.interruption.INTERRUPTION`. Here, at each
:class:`~karpy.sim.cloud.Interruption`'s time, the simulated cloud's
instances it selects get one message each, fed through the simulator's
:class:`~karpy.operator.runtime.Runtime` the same way: the controller that
acts on them is the very one ``karpy run`` uses, so what a scenario shows is
what karpy does.

A spot instance warned of, or one in an interruptible capacity reservation
(kind ``capacity-reservation-interruption``, EC2's ``Capacity Reservation
Instance Interruption Warning``; the controller then also marks the
reservation used up), is reclaimed two minutes after the warning if it is
still there (karpy had deleted its NodeClaim and drained it in time
otherwise): the instance is gone from the cloud and its Node turns NotReady,
as a reclaimed instance's kubelet stops reporting. The termination of its
NodeClaim then finds the instance gone and removes the Node.

A warning that selects no instance (a spot interruption of on-demand nodes,
a zone with none) is a row of the report saying so, and nothing else.

For the report, each warning that made karpy replace a node is recorded with
the moment the cluster had recovered: the interrupted node holds no workload
pod any more, every pod is Running (or finished), and as many pods run as
did when the warning came (between an evicted pod's removal and the creation
of its replacement the cluster would look settled otherwise). That moment is
found on the cluster's changes, only while some recovery is awaited; a
workload scaled down meanwhile may leave it unset.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from karpy.api.core import POD_RUNNING, NodeCondition
from karpy.api.requirements import CAPACITY_TYPE_SPOT
from karpy.operator.cluster import Clock
from karpy.operator.interruption import (
    ACTIONABLE_KINDS,
    INTERRUPTION,
    KIND_CAPACITY_RESERVATION_INTERRUPTION,
    KIND_REBALANCE_RECOMMENDATION,
    KIND_SCHEDULED_CHANGE,
    KIND_SPOT_INTERRUPTION,
    InterruptionMessage,
    instance_id,
    kind_of_state,
)
from karpy.operator.runtime import Runtime, Watch
from karpy.sim.cloud import (
    REBALANCE,
    RECLAIMING_KINDS,
    RESERVATION_INTERRUPTION,
    SCHEDULED_CHANGE,
    SPOT_INTERRUPTION,
    SPOT_INTERRUPTION_NOTICE,
    Instance,
    Interruption,
    SimulatedCloud,
)
from karpy.sim.store import InMemoryCluster


@dataclass(slots=True)
class InterruptionRecord:
    """One instance warned of, and when the cluster had got over it (None: not yet, or nothing to)."""

    at: float
    kind: str
    message_kind: str
    instance_type: str
    zone: str
    capacity_type: str
    node: str
    nodeclaim: str
    # Pods Running in the whole cluster when the warning came.
    running_before: int = 0
    recovered_at: float | None = None
    reclaimed_at: float | None = None


def message_kind(interruption: Interruption) -> str:
    """The kind of message EC2 sends for a scenario's interruption."""
    if interruption.kind == SPOT_INTERRUPTION:
        return KIND_SPOT_INTERRUPTION
    if interruption.kind == REBALANCE:
        return KIND_REBALANCE_RECOMMENDATION
    if interruption.kind == SCHEDULED_CHANGE:
        return KIND_SCHEDULED_CHANGE
    if interruption.kind == RESERVATION_INTERRUPTION:
        return KIND_CAPACITY_RESERVATION_INTERRUPTION
    return kind_of_state(interruption.state)


class SimulatedInterruptions:
    """The cloud's side of interruptions: keyed ``warn/INDEX`` and ``reclaim/PROVIDER_ID``."""

    name = "sim.interruptions"

    def __init__(
        self,
        cluster: InMemoryCluster,
        cloud: SimulatedCloud,
        clock: Clock,
        runtime: Runtime,
        note: Callable[[str], None] | None = None,
    ) -> None:
        self.cluster = cluster
        # Says what happened in the run's report, among its rows.
        self.note = note if note is not None else (lambda _: None)
        self.cloud = cloud
        self.clock = clock
        self.runtime = runtime
        self.start = clock.now()  # what the warnings' times count from (schedule sets it again)
        self.records: list[InterruptionRecord] = []
        self._due: set[str] = set()
        self._awaiting: list[InterruptionRecord] = []
        cluster.subscribe(self._on_change)

    def watches(self) -> list[Watch]:
        return []

    def schedule(self) -> None:
        """Queue the warnings of the cloud's settings, each at its time from now."""
        self.start = self.clock.now()
        for index, interruption in enumerate(self.cloud.settings.interruptions):
            key = f"warn/{index}"
            self._due.add(key)
            self.runtime.enqueue(self.name, key, interruption.at)

    @property
    def finished(self) -> bool:
        """Every warning sent, and every spot instance warned of reclaimed or already gone."""
        return not any(
            key.startswith("warn/") or key.removeprefix("reclaim/") in self.cloud.instances
            for key in self._due
        )

    def next_warning_at(self) -> float | None:
        """When the next warning is sent (inf: none left); None while a warned instance awaits its end."""
        if any(
            key.removeprefix("reclaim/") in self.cloud.instances
            for key in self._due
            if key.startswith("reclaim/")
        ):
            return None
        warnings = [
            self.start + self.cloud.settings.interruptions[int(key.removeprefix("warn/"))].at
            for key in self._due
            if key.startswith("warn/")
        ]
        return min(warnings, default=float("inf"))

    def reconcile(self, key: str) -> float | None:
        self._due.discard(key)
        kind, _, rest = key.partition("/")
        if kind == "warn":
            self._warn(self.cloud.settings.interruptions[int(rest)])
        else:
            self._reclaim(rest)
        return None

    def _warn(self, interruption: Interruption) -> None:
        now = self.clock.now()
        kind = message_kind(interruption)
        running = self._running()
        selected = interruption.select(self.cloud.instances.values())
        if not selected:
            # Said in the report, or a warning of on-demand nodes (say) would vanish without a trace.
            self.note(f"{interruption.kind}: no {interruption.describe_instances()} to warn of")
        for instance in selected:
            record = self._record(interruption, kind, instance, now)
            record.running_before = running
            self.records.append(record)
            self.note(
                f"{interruption.kind} of {record.node or instance.provider_id}"
                f" ({record.instance_type} {record.capacity_type} in {record.zone})"
            )
            if kind in ACTIONABLE_KINDS:
                self._awaiting.append(record)
            if interruption.kind == RESERVATION_INTERRUPTION:
                self.cloud.take_back_reserved(instance.provider_id)
            if interruption.kind in RECLAIMING_KINDS:
                key = f"reclaim/{instance.provider_id}"
                self._due.add(key)
                self.runtime.enqueue(self.name, key, SPOT_INTERRUPTION_NOTICE)
            message_id = f"{interruption.kind}-{len(self.records)}-{instance_id(instance.provider_id)}"
            self.runtime.on_change(
                INTERRUPTION,
                None,
                InterruptionMessage(message_id, kind, (instance_id(instance.provider_id),), now, detail=kind),
            )

    def _record(
        self, interruption: Interruption, kind: str, instance: Instance, now: float
    ) -> InterruptionRecord:
        node = self.cluster.node(instance.node_name)
        return InterruptionRecord(
            at=now,
            kind=interruption.kind,
            message_kind=kind,
            instance_type=instance.instance_type.name,
            zone=instance.zone,
            capacity_type=instance.capacity_type,
            node=node.name if node is not None else "",
            nodeclaim=instance.nodeclaim,
        )

    def _reclaim(self, provider_id: str) -> None:
        instance = self.cloud.terminate(provider_id)
        if instance is None:
            return  # deleted in time
        for record in self.records:
            if record.nodeclaim == instance.nodeclaim and record.reclaimed_at is None:
                record.reclaimed_at = self.clock.now()
        what = "spot instance" if instance.capacity_type == CAPACITY_TYPE_SPOT else "reserved instance"
        self.note(f"{what} {provider_id} reclaimed")
        node = self.cluster.node(instance.node_name)
        if node is not None and node.ready:
            self.cluster.update(
                node.with_changes(
                    conditions=(
                        NodeCondition(
                            "Ready", "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status."
                        ),
                    )
                )
            )

    def _running(self) -> int:
        return sum(1 for pod in self.cluster.pods() if pod.phase == POD_RUNNING and not pod.metadata.deleting)

    def _on_change(self, kind: str, old: object | None, new: object | None) -> None:
        if not self._awaiting or kind not in ("Pod", "Node"):
            return
        if self.cluster.has_pending_pods():
            return
        running: int | None = None
        for record in list(self._awaiting):
            if any(
                not pod.is_daemonset_pod and not pod.is_terminal
                for pod in self.cluster.pods_on_node(record.node)
            ):
                continue
            if running is None:
                if any(not pod.is_terminal and pod.phase != POD_RUNNING for pod in self.cluster.pods()):
                    return
                running = self._running()
            if running >= record.running_before:
                record.recovered_at = self.clock.now()
                self._awaiting.remove(record)
