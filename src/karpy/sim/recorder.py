"""What a simulation run saw: the NodeClaim watch, pod timings, cost and events.

The recorder listens to the in-memory cluster like ``kubectl get -w`` does:
every time a NodeClaim's printed columns (TYPE, CAPACITY, ZONE, NODE, READY)
change, it keeps a row. It also keeps, per pod (by uid, so a pod created again under an
earlier pod's name has a record of its own), when it was created, bound,
running, finished and deleted (and its owner), and per NodeClaim, when it was created,
became ready, drifted (and why), was tainted for a disruption, began to be deleted and
was deleted, with the hourly price of what was launched. Each HorizontalPodAutoscaler
sync adds a sample to its target's time series (replicas, desired replicas, ready pods,
demand). The report and the JSON output are built from this record alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from karpy.api.conditions import TRUE, find_condition
from karpy.api.core import POD_RUNNING, POD_SUCCEEDED, Node, Pod
from karpy.api.nodeclaim import CONDITION_DRIFTED, CONDITION_READY, NodeClaim
from karpy.api.taints import DISRUPTED_TAINT_KEY
from karpy.operator.cluster import Clock

if TYPE_CHECKING:
    from karpy.sim.cloud import SimulatedCloud
    from karpy.sim.hpa import WorkloadSample
    from karpy.sim.store import InMemoryCluster


@dataclass(frozen=True, slots=True)
class WatchRow:
    time: float
    name: str
    instance_type: str
    capacity_type: str
    zone: str
    node: str
    ready: str
    created: float
    deleted: bool = False


@dataclass(slots=True)
class NodeClaimRecord:
    name: str
    nodepool: str
    created_at: float
    instance_type: str = ""
    capacity_type: str = ""
    zone: str = ""
    node: str = ""
    price_per_hour: float = 0.0
    launched_at: float | None = None
    ready_at: float | None = None
    deleted_at: float | None = None
    # When it was first seen Drifted, with the condition's reason (RequirementsDrifted...) and message.
    drifted_at: float | None = None
    drift_reason: str = ""
    drift_message: str = ""
    # When its node was first tainted karpenter.sh/disrupted (a disruption command began), and
    # when its deletion began (a disruption, expiry or a user): its pods are evicted from then on.
    disrupted_at: float | None = None
    deleting_at: float | None = None


@dataclass(slots=True)
class PodRecord:
    namespace: str
    name: str
    created_at: float
    node: str = ""
    bound_at: float | None = None
    running_at: float | None = None
    succeeded_at: float | None = None
    deleted_at: float | None = None
    daemonset: bool = False
    uid: str = ""
    # Its controller, "ReplicaSet/web-5d8f": what makes a pod in its place when it is evicted.
    owner: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(slots=True)
class Recorder:
    clock: Clock
    cloud: SimulatedCloud | None = None
    # What a launched offering costs an hour, given (the NodeClaim, instance type, zone, capacity type,
    # the cloud's price): None, the cloud's price (NodeOverlays set it otherwise).
    price_of: Callable[[NodeClaim, str, str, str, float], float] | None = None
    rows: list[WatchRow] = field(default_factory=list)
    nodeclaims: dict[str, NodeClaimRecord] = field(default_factory=dict)
    pods: dict[str, PodRecord] = field(default_factory=dict)  # by the pod's uid
    notes: list[tuple[float, str]] = field(default_factory=list)
    # Per HPA target (kind/namespace/name), each sync: replicas, desired replicas, demand.
    workloads: dict[str, list[WorkloadSample]] = field(default_factory=dict)
    first_pending_at: float | None = None
    all_running_at: float | None = None
    end: float = 0.0
    _pending: set[str] = field(default_factory=set)
    _last_columns: dict[str, tuple[str, ...]] = field(default_factory=dict)
    _claim_of_node: dict[str, str] = field(default_factory=dict)

    def note(self, message: str) -> None:
        self.notes.append((self.clock.now(), message))

    def workload_sample(self, target: str, sample: WorkloadSample) -> None:
        self.workloads.setdefault(target, []).append(sample)

    def on_change(self, kind: str, old: object | None, new: object | None) -> None:
        if kind == "NodeClaim":
            self._on_nodeclaim(old, new)
        elif kind == "Pod":
            self._on_pod(old, new)
        elif kind == "Node" and isinstance(new, Node):
            self._on_node(new)

    def _on_node(self, node: Node) -> None:
        name = self._claim_of_node.get(node.name)
        record = self.nodeclaims.get(name) if name is not None else None
        if record is None or record.disrupted_at is not None:
            return
        if any(taint.key == DISRUPTED_TAINT_KEY for taint in node.taints):
            record.disrupted_at = self.clock.now()

    def _on_nodeclaim(self, old: object | None, new: object | None) -> None:
        now = self.clock.now()
        if new is None:
            if isinstance(old, NodeClaim):
                record = self.nodeclaims.get(old.name)
                if record is not None and record.deleted_at is None:
                    record.deleted_at = now
                self._row(old, deleted=True)
            return
        if not isinstance(new, NodeClaim):
            return
        record = self.nodeclaims.get(new.name)
        if record is None:
            record = NodeClaimRecord(new.name, new.nodepool, new.metadata.creation_timestamp or now)
            self.nodeclaims[new.name] = record
        if new.status.provider_id and record.launched_at is None:
            record.launched_at = now
            record.instance_type = new.instance_type
            record.capacity_type = new.capacity_type
            record.zone = new.zone
            instance = self.cloud.instances.get(new.status.provider_id) if self.cloud else None
            price = instance.price if instance is not None else 0.0
            if instance is not None and self.price_of is not None:
                price = self.price_of(
                    new, instance.instance_type.name, instance.zone, instance.capacity_type, price
                )
            record.price_per_hour = price
        record.node = new.status.node_name or record.node
        if record.node:
            self._claim_of_node[record.node] = record.name
        if record.ready_at is None and new.is_true(CONDITION_READY):
            record.ready_at = now
        drifted = new.condition(CONDITION_DRIFTED)
        if record.drifted_at is None and drifted is not None and drifted.status == TRUE:
            record.drifted_at, record.drift_reason, record.drift_message = (
                now,
                drifted.reason,
                drifted.message,
            )
        if record.deleting_at is None and new.metadata.deleting:
            record.deleting_at = now
        self._row(new)

    def _row(self, claim: NodeClaim, deleted: bool = False) -> None:
        ready = find_condition(claim.status.conditions, CONDITION_READY)
        columns = (
            claim.instance_type,
            claim.capacity_type,
            claim.zone,
            claim.status.node_name,
            ready.status if ready else "Unknown",
            "deleted" if deleted else "",
        )
        if self._last_columns.get(claim.name) == columns:
            return
        self._last_columns[claim.name] = columns
        self.rows.append(
            WatchRow(
                time=self.clock.now(),
                name=claim.name,
                instance_type=columns[0],
                capacity_type=columns[1],
                zone=columns[2],
                node=columns[3],
                ready=columns[4],
                created=claim.metadata.creation_timestamp or self.clock.now(),
                deleted=deleted,
            )
        )

    def _on_pod(self, old: object | None, new: object | None) -> None:
        now = self.clock.now()
        pod = new if isinstance(new, Pod) else old if isinstance(old, Pod) else None
        if pod is None:
            return
        # One record per pod, not per name: a StatefulSet's pod created again under the
        # same name is another pod, with its own node and times.
        record = self.pods.get(pod.metadata.uid)
        if record is None:
            record = PodRecord(
                pod.metadata.namespace,
                pod.metadata.name,
                pod.metadata.creation_timestamp or now,
                daemonset=pod.is_daemonset_pod,
                uid=pod.metadata.uid,
                owner=f"{owner.kind}/{owner.name}" if (owner := pod.metadata.controller) is not None else "",
            )
            self.pods[pod.metadata.uid] = record
        if new is None:
            record.deleted_at = record.deleted_at or now
            self._pending.discard(pod.key)
            self._check_all_running(now)
            return
        assert isinstance(new, Pod)
        if new.node_name and record.bound_at is None:
            record.bound_at = now
            record.node = new.node_name
        if new.phase == POD_RUNNING and record.running_at is None:
            record.running_at = now
        if new.phase == POD_SUCCEEDED and record.succeeded_at is None:
            record.succeeded_at = now
        waiting = not new.is_terminal and not new.metadata.deleting and new.phase != POD_RUNNING
        if waiting and not record.daemonset:
            if self.first_pending_at is None:
                self.first_pending_at = now
            self._pending.add(pod.key)
        else:
            self._pending.discard(pod.key)
        self._check_all_running(now)

    def _check_all_running(self, now: float) -> None:
        if self.first_pending_at is not None and self.all_running_at is None and not self._pending:
            self.all_running_at = now

    def finish(self, cluster: InMemoryCluster) -> None:
        self.end = self.clock.now()
