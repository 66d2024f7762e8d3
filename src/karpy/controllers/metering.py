"""The controllers that only record metrics, and the cloud provider that meters its calls.

:class:`PodMetrics`, :class:`NodePoolMetrics` and :class:`ClusterStateMetrics`
keep Karpenter's pod, NodePool and cluster-state metrics up to date from the
changes the runtime hands out; :func:`metrics_controllers` lists them for a
runtime to register. :class:`MeteredCloudProvider` wraps the cloud provider a
controller is given, for the ``karpenter_cloudprovider_*`` families. The
families themselves are declared by :class:`karpy.operator.karpenter_metrics.Metrics`.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from karpy.api.capacitybuffer import KIND as BUFFER_KIND
from karpy.api.capacitybuffer import CapacityBuffer
from karpy.api.core import POD_PENDING, POD_RUNNING, Node, Pod
from karpy.api.instancetype import InstanceType
from karpy.api.nodeclaim import NodeClaim
from karpy.api.nodeclass import EC2_GROUP, EC2_KIND, EC2NodeClass, NodeClass
from karpy.api.nodeclass_hash import NodeClassHash
from karpy.api.nodepool import NodePool, status_only_change
from karpy.api.quantity import (
    QuantityError,
    ResourceAmounts,
    parse_resource_list,
    subtract_amounts,
)
from karpy.api.requirements import (
    AWS_LABEL_INSTANCE_CPU,
    AWS_LABEL_INSTANCE_MEMORY,
    KWOK_LABEL_INSTANCE_CPU,
    KWOK_LABEL_INSTANCE_MEMORY,
    LABEL_ARCH,
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    LABEL_ZONE,
)
from karpy.cloud.provider import (
    CloudProvider,
    CloudProviderError,
    InsufficientCapacityError,
    LaunchInProgressError,
    NodeClaimNotFoundError,
    NodeClassHashing,
    NodeClassNotReadyError,
    NodeClassProblem,
    NodePoolNotEvaluatedError,
    RepairPolicy,
    ReservationMarking,
)
from karpy.controllers.nodeoverlay import OVERLAYS_EVALUATED
from karpy.controllers.state import launched_price, nodepool_resources
from karpy.operator.cluster import Clock, ClusterReader
from karpy.operator.karpenter_metrics import (
    NODE_WELL_KNOWN_LABELS,
    Metrics,
    resource_type_label,
    resource_value,
)
from karpy.operator.operator_metrics import ObservedCondition, StatusRecorder, prometheus_label
from karpy.operator.runtime import Watch

T = TypeVar("T")

# The key of the controllers that reconcile everything in one pass.
PASS_KEY = "all"
# Seconds between the passes Karpenter's metrics controllers make whatever changed: the NodePool
# metrics every 10 s, the node metrics every 5 s, the AWS provider's offering metrics every minute.
NODEPOOL_RESYNC = 10.0
NODE_RESYNC = 5.0
# How often the ages of the pods waiting to run are brought up to date, and the key that does it.
POD_RESYNC = 5.0
WAITING_PODS_KEY = "waiting-pods"
OFFERING_RESYNC = 60.0
NODEPOOL_METRICS = "metrics.nodepool"
INSTANCE_CPU_LABELS = (AWS_LABEL_INSTANCE_CPU, KWOK_LABEL_INSTANCE_CPU)
OFFERING_METRICS = "metrics.offerings"
# operatorpkg's status controllers reconcile each object again every 10 s.
STATUS_RESYNC = 10.0


def cloud_error_label(error: Exception) -> str:
    for known in (InsufficientCapacityError, NodeClaimNotFoundError, NodeClassNotReadyError):
        if isinstance(error, known):
            return known.__name__
    return ""


class MeteredCloudProvider:
    """A cloud provider that counts the errors and times the calls of one controller.

    Karpenter decorates its cloud provider the same way; the controller label
    comes from a context there and from the decorator's own field here, so
    each controller gets its own decorator over the shared provider.
    """

    def __init__(self, cloud: CloudProvider, metrics: Metrics, controller: str) -> None:
        self.cloud = cloud
        self.metrics = metrics
        self.controller = controller
        self.name = cloud.name
        self.supports_reboot = cloud.supports_reboot

    def _call(self, method: str, call: Callable[[], T]) -> T:
        started = time.perf_counter()
        try:
            return call()
        except LaunchInProgressError:
            raise  # a launch running in the background, not an error
        except Exception as error:
            self.metrics.cloudprovider_errors.labels(
                controller=self.controller, method=method, provider=self.name, error=cloud_error_label(error)
            ).inc()
            raise
        finally:
            self.metrics.cloudprovider_duration.labels(
                controller=self.controller, method=method, provider=self.name
            ).observe(time.perf_counter() - started)

    def create(self, nodeclaim: NodeClaim) -> NodeClaim:
        return self._call("Create", lambda: self.cloud.create(nodeclaim))

    def delete(self, nodeclaim: NodeClaim) -> None:
        self._call("Delete", lambda: self.cloud.delete(nodeclaim))

    def get(self, provider_id: str) -> NodeClaim:
        return self._call("Get", lambda: self.cloud.get(provider_id))

    def list(self) -> builtins.list[NodeClaim]:
        return self._call("List", self.cloud.list)

    def get_instance_types(self, nodepool: NodePool) -> builtins.list[InstanceType]:
        return self._call("GetInstanceTypes", lambda: self.cloud.get_instance_types(nodepool))

    def is_drifted(self, nodeclaim: NodeClaim) -> str:
        return self._call("IsDrifted", lambda: self.cloud.is_drifted(nodeclaim))

    def node_class_hash(self, node_class: NodeClass) -> NodeClassHash | None:
        # Worked out from the class and the provider's settings, not a call to the cloud: not metered.
        return self.cloud.node_class_hash(node_class) if isinstance(self.cloud, NodeClassHashing) else None

    def repair_policies(self) -> builtins.list[RepairPolicy]:
        return self._call("RepairPolicies", self.cloud.repair_policies)

    def reboot(self, nodeclaim: NodeClaim, operation_id: str) -> None:
        self._call("Reboot", lambda: self.cloud.reboot(nodeclaim, operation_id))

    def node_class_problem(self, node_class: NodeClass) -> NodeClassProblem | None:
        # Not a call to the cloud (Karpenter reads the node class' Ready condition): not metered.
        return self.cloud.node_class_problem(node_class)

    def mark_offering_unavailable(self, instance_type: str, zone: str, capacity_type: str) -> None:
        # Bookkeeping inside the provider, not a call to the cloud: not metered.
        self.cloud.mark_offering_unavailable(instance_type, zone, capacity_type)

    def mark_reservation_unavailable(self, reservation_id: str) -> None:
        if isinstance(self.cloud, ReservationMarking):
            self.cloud.mark_reservation_unavailable(reservation_id)

    def reservations_expiring_at(self) -> dict[str, float]:
        if isinstance(self.cloud, ReservationMarking):
            return self.cloud.reservations_expiring_at()
        return {}


# -- controllers that only record metrics ---------------------------------------


@dataclass(slots=True)
class PodMetrics:
    """Pod start-up and binding durations, and ``karpenter_pods_state``, from the pod changes handed out.

    It measures in the change mappers, which see every transition (a reconcile
    would read the cache later and could miss a pod that went Pending, bound
    and Running between two reconciles). Only transitions seen happening
    count: a pod already Running when karpy starts says nothing about karpy.

    ``karpenter_pods_state`` has one series per pod (value 1), as Karpenter's:
    its name, namespace, owner (the first owner reference as a self link), node,
    phase, readiness, and the NodePool, zone, architecture, capacity type and
    instance type of its node as they were when the pod last changed; the
    series goes with the pod. Without a ``cluster`` (a test's) it is not kept.

    The ages of the waiting pods: a pod's change writes that pod's series at
    once; every age is brought up to date on the ``resync`` pass alone. A pass
    on every change (there are thousands a minute while 10,000 pods start)
    took half a core in ``karpy run``. Without a ``resync`` (the simulator,
    whose virtual clock a periodic pass would keep from settling) each change
    still asks for a pass, and the queue folds a step's changes into one.
    """

    clock: Clock
    metrics: Metrics
    cluster: ClusterReader | None = None
    # How often the ages of the pods still waiting are brought up to date (None: at their changes only).
    resync: float | None = None
    name: str = "metrics.pod"
    # Each pod's series of karpenter_pods_state, by the pod's namespace/name.
    _states: dict[str, dict[str, str]] = field(default_factory=dict)
    # The pods not running yet (karpenter_pods_unstarted_time_seconds and _unbound_time_seconds).
    _waiting: dict[str, _WaitingPod] = field(default_factory=dict)
    # When a pass over every waiting pod last ran or was asked for, and whether another is queued
    # or will come back on its own (the resync).
    _pass_at: float = float("-inf")
    _pass_due: bool = False

    def __post_init__(self) -> None:
        self.metrics.pod_scheduling.kept = True  # this controller forgets each pod's times

    def watches(self) -> list[Watch]:
        return [Watch("Pod", self._on_pod)]

    def _on_pod(self, old: object | None, new: object | None) -> Iterable[str]:
        if self.cluster is not None:
            self._record_state(old, new)
        # When provisioning first found the pod a place, if it did (read before a start forgets it).
        schedulable = self.metrics.pod_scheduling.schedulable.get(new.key) if isinstance(new, Pod) else None
        waiting = self._note_waiting(old, new)
        if not isinstance(old, Pod) or not isinstance(new, Pod):
            return waiting
        created = new.metadata.creation_timestamp
        if created is None:
            return ()
        now = self.clock.now()
        elapsed = max(0.0, now - created)
        if not old.node_name and new.node_name:
            self.metrics.pods_bound_duration.labels(dynamic_resources="false").observe(elapsed)
            if schedulable is not None:
                self.metrics.pods_provisioning_bound_duration.labels(dynamic_resources="false").observe(
                    max(0.0, now - schedulable)
                )
        if old.phase == POD_PENDING and new.phase == POD_RUNNING:
            self.metrics.pods_startup_duration.observe(elapsed)
            if schedulable is not None:
                self.metrics.pods_provisioning_startup_duration.observe(max(0.0, now - schedulable))
        return waiting

    def _note_waiting(self, old: object | None, new: object | None) -> tuple[str, ...]:
        """Keep the pods not running yet; a change to one (or its start) asks for the ages again."""
        pod = new if isinstance(new, Pod) else old if isinstance(old, Pod) else None
        if pod is None:
            return ()
        created = pod.metadata.creation_timestamp
        if isinstance(new, Pod) and new.phase == POD_PENDING and created is not None:
            waiting = _WaitingPod(pod.metadata.name, pod.metadata.namespace, created, bool(pod.node_name))
            self._waiting[pod.key] = waiting
            now = self.clock.now()
            self._write_ages(pod.key, waiting, now)
            # The others' ages wait for the resync, unless it is overdue (a queue emptied when
            # leadership moved, say, would otherwise leave them stale for good).
            if self.resync is not None and self._pass_due and now - self._pass_at < 2 * self.resync:
                return ()
            self._pass_due, self._pass_at = True, now
            return (WAITING_PODS_KEY,)
        # Started, finished or deleted: provisioning's times of it are done with, as in Karpenter.
        self.metrics.pod_scheduling.forget(pod.key)
        gone = self._waiting.pop(pod.key, None)
        if gone is not None:
            self._remove_waiting(gone.name, gone.namespace)
        return ()

    def _remove_waiting(self, name: str, namespace: str) -> None:
        self.metrics.pods_unstarted_time.remove(name=name, namespace=namespace)
        self.metrics.pods_unbound_time.remove(name=name, namespace=namespace, dynamic_resources="false")
        self.metrics.pods_provisioning_unstarted_time.remove(name=name, namespace=namespace)
        self.metrics.pods_provisioning_unbound_time.remove(
            name=name, namespace=namespace, dynamic_resources="false"
        )
        self.metrics.pods_scheduling_undecided_time.remove(name=name, namespace=namespace)

    def _record_state(self, old: object | None, new: object | None) -> None:
        pod = new if isinstance(new, Pod) else old if isinstance(old, Pod) else None
        if pod is None:
            return
        previous = self._states.pop(pod.key, None)
        labels = pod_state_labels(new, self.cluster) if isinstance(new, Pod) else None
        if previous is not None and previous != labels:
            self.metrics.pods_state.remove(**previous)
        if labels is not None:
            self._states[pod.key] = labels
            self.metrics.pods_state.labels(**labels).set(1)

    def reconcile(self, key: str) -> float | None:
        """The ages of the pods still waiting: since creation, until running, and until bound."""
        now = self.clock.now()
        for pod_key, waiting in self._waiting.items():
            self._write_ages(pod_key, waiting, now)
        self._pass_at = now
        self._pass_due = self.resync is not None and bool(self._waiting)
        return self.resync if self._waiting else None

    def _write_ages(self, pod_key: str, waiting: _WaitingPod, now: float) -> None:
        """One waiting pod's series: since creation, and since provisioning placed or saw it."""
        # Each series is dropped by its full label set: a removal by partial labels scans every
        # series, and done for each waiting pod that made a pass over 10,000 pods quadratic.
        times = self.metrics.pod_scheduling
        age = max(0.0, now - waiting.created)
        names = {"name": waiting.name, "namespace": waiting.namespace}
        self.metrics.pods_unstarted_time.labels(**names).set(age)
        if waiting.bound:
            self.metrics.pods_unbound_time.remove(**names, dynamic_resources="false")
        else:
            self.metrics.pods_unbound_time.labels(**names, dynamic_resources="false").set(age)
        # Since provisioning found it a place (none: no series), and since it saw it undecided.
        schedulable = times.schedulable.get(pod_key)
        if schedulable is None:
            self.metrics.pods_provisioning_unstarted_time.remove(**names)
            self.metrics.pods_provisioning_unbound_time.remove(**names, dynamic_resources="false")
        else:
            since = max(0.0, now - schedulable)
            self.metrics.pods_provisioning_unstarted_time.labels(**names).set(since)
            if waiting.bound:
                self.metrics.pods_provisioning_unbound_time.remove(**names, dynamic_resources="false")
            else:
                unbound = self.metrics.pods_provisioning_unbound_time
                unbound.labels(**names, dynamic_resources="false").set(since)
        acked = times.acked.get(pod_key)
        if waiting.bound or pod_key in times.decided or acked is None:
            self.metrics.pods_scheduling_undecided_time.remove(**names)
        else:
            self.metrics.pods_scheduling_undecided_time.labels(**names).set(max(0.0, now - acked))


@dataclass(frozen=True, slots=True)
class _WaitingPod:
    name: str
    namespace: str
    created: float
    bound: bool


def pod_state_labels(pod: Pod, cluster: ClusterReader | None) -> dict[str, str]:
    """A pod's labels on ``karpenter_pods_state`` (Karpenter's ``makeLabels``)."""
    owner = pod.metadata.owner_references[0] if pod.metadata.owner_references else None
    node = cluster.node(pod.node_name) if cluster is not None and pod.node_name else None
    node_labels = node.metadata.labels if node is not None else {}
    return {
        "name": pod.metadata.name,
        "namespace": pod.metadata.namespace,
        "owner": (
            f"/apis/{owner.api_version}/namespaces/{pod.metadata.namespace}/{owner.kind.lower()}s/{owner.name}"
            if owner is not None
            else ""
        ),
        "node": pod.node_name,
        "scheduled": "true" if pod.node_name else "false",
        "nodepool": node_labels.get(LABEL_NODEPOOL, ""),
        "zone": node_labels.get(LABEL_ZONE, ""),
        "arch": node_labels.get(LABEL_ARCH, ""),
        "capacity_type": node_labels.get(LABEL_CAPACITY_TYPE, ""),
        "instance_type": node_labels.get(LABEL_INSTANCE_TYPE, ""),
        "phase": pod.phase,
        "ready": "true" if pod.ready else "false",
        "managed": "true" if node_labels.get(LABEL_NODEPOOL) else "false",
    }


@dataclass(slots=True)
class NodePoolMetrics:
    """``karpenter_nodepools_usage``, ``_limit`` and ``_cost_total``, per NodePool, kept up to date.

    The cost is Karpenter's cluster cost tracker's figure: the sum, over the
    NodePool's NodeClaims that say what was launched (instance type, zone and
    capacity type labels), of that offering's hourly price in the catalog
    ``cloud`` gives the pool (with NodeOverlays applied when their gate is on,
    since every controller's cloud is then the overlaid one). An offering the
    catalog no longer lists counts 0, as Karpenter's does. A catalog that
    cannot be had (an unready node class) counts one
    ``karpenter_nodepools_cost_tracker_errors_total`` and keeps the last
    figure. Without a ``cloud`` no cost is recorded.

    ``resync`` (seconds) reconciles every NodePool again that often, as
    Karpenter's does every 10 s: prices change with no object changing (the AWS
    price refresh). The simulator leaves it out: its prices change only with
    an overlay evaluation, which is watched, and a periodic reconcile would keep
    its virtual clock from settling.
    """

    cluster: ClusterReader
    metrics: Metrics
    cloud: CloudProvider | None = None
    resync: float | None = None
    name: str = NODEPOOL_METRICS

    def watches(self) -> list[Watch]:
        return [
            Watch("NodePool", self._pool_of),
            Watch("NodeClaim", self._pool_of),
            Watch(OVERLAYS_EVALUATED, self._every_pool),
        ]

    @staticmethod
    def _pool_of(old: object | None, new: object | None) -> Iterable[str]:
        names = set()
        for obj in (old, new):
            if isinstance(obj, NodePool):
                names.add(obj.name)
            elif isinstance(obj, NodeClaim) and obj.nodepool:
                names.add(obj.nodepool)
        return sorted(names)

    def _every_pool(self, old: object | None, new: object | None) -> Iterable[str]:
        return sorted(pool.name for pool in self.cluster.nodepools())

    def reconcile(self, key: str) -> float | None:
        nodepool = self.cluster.nodepool(key)
        if nodepool is None:
            self.metrics.nodepool_gone(key)
            return None
        claims = [claim for claim in self.cluster.nodeclaims() if claim.nodepool == key]
        self.metrics.nodepool_observed(nodepool, nodepool_resources(claims))
        if self.cloud is not None:
            self._record_cost(nodepool, claims)
        return self.resync

    def _record_cost(self, nodepool: NodePool, claims: list[NodeClaim]) -> None:
        launched = [claim for claim in claims if claim.instance_type and claim.zone and claim.capacity_type]
        if not launched:
            self.metrics.nodepools_cost.labels(nodepool=nodepool.name).set(0)
            return
        try:
            catalog = self.cloud.get_instance_types(nodepool) if self.cloud is not None else []
        except NodePoolNotEvaluatedError:
            return  # the overlays' first evaluation announces itself (watched above)
        except CloudProviderError:
            self.metrics.nodepools_cost_errors.labels(nodepool=nodepool.name).inc()
            return
        cost = sum(launched_price(claim, catalog) for claim in launched)
        self.metrics.nodepools_cost.labels(nodepool=nodepool.name).set(cost)


@dataclass(slots=True)
class OfferingMetrics:
    """The AWS provider's offering and instance type metrics, from the catalogs of every NodePool.

    ``karpenter_cloudprovider_instance_type_offering_price_estimate`` and
    ``_offering_available`` per (instance type, capacity type, zone), and
    ``_instance_type_cpu_cores`` and ``_memory_bytes`` per instance type, for
    every type the NodePools' catalogs list (Karpenter's AWS provider lists
    its NodePools' whole catalogs the same way: one series per offering, a few
    thousand for the bundled AWS catalog). Prices are the overlaid ones when
    the NodeOverlay gate is on; an offering two NodePools price differently
    shows the price of the last NodePool by name, as Karpenter's map keeps the
    last. Each pass replaces every series at once, so offerings no NodePool
    lists any more go. Karpenter's controller runs every minute (``resync``).
    """

    cluster: ClusterReader
    cloud: CloudProvider
    metrics: Metrics
    resync: float | None = None
    name: str = OFFERING_METRICS

    def watches(self) -> list[Watch]:
        return [Watch("NodePool", self._on_nodepool), Watch(OVERLAYS_EVALUATED, lambda old, new: [PASS_KEY])]

    @staticmethod
    def _on_nodepool(old: object | None, new: object | None) -> Iterable[str]:
        return () if status_only_change(old, new) else (PASS_KEY,)

    def reconcile(self, key: str) -> float | None:
        available: dict[tuple[str, str, str], bool] = {}
        price: dict[tuple[str, str, str], float] = {}
        cpu: dict[str, float] = {}
        memory: dict[str, float] = {}
        for nodepool in sorted(self.cluster.nodepools(), key=lambda pool: pool.name):
            try:
                catalog = self.cloud.get_instance_types(nodepool)
            except CloudProviderError:
                continue  # that pool's series only; the error is the provider's to report
            for instance_type in catalog:
                cpu[instance_type.name], memory[instance_type.name] = instance_type_size(instance_type)
                for offering in instance_type.offerings:
                    dimensions = (instance_type.name, offering.capacity_type, offering.zone)
                    launchable = offering.launchable  # a full reservation reads 0, as it always has here
                    available[dimensions] = available.get(dimensions, False) or launchable
                    price[dimensions] = offering.price
        m = self.metrics
        m.offering_available.replace((_offering_labels(d), 1.0 if a else 0.0) for d, a in available.items())
        m.offering_price.replace((_offering_labels(d), p) for d, p in price.items())
        m.instance_type_cpu.replace(({"instance_type": name}, value) for name, value in cpu.items())
        m.instance_type_memory.replace(({"instance_type": name}, value) for name, value in memory.items())
        return self.resync


def instance_type_size(instance_type: InstanceType) -> tuple[float, float]:
    """An instance type's vCPUs and memory bytes as the cloud describes it, not its capacity with the
    VM overhead taken off: the AWS provider's ``instance-cpu`` and ``instance-memory`` labels (memory
    in MiB), or Karpenter's kwok labels (memory a quantity such as ``32Gi``); a type without them, or
    with a value neither reads, gives its capacity."""
    labels = instance_type.requirements.labels(include_well_known=True)
    cpu = resource_value("cpu", instance_type.capacity.get("cpu", 0))
    memory = float(instance_type.capacity.get("memory", 0))
    for key in INSTANCE_CPU_LABELS:
        if key in labels:
            cpu = _label_amount(labels[key], "cpu") or cpu
            break
    if AWS_LABEL_INSTANCE_MEMORY in labels:
        mebibytes = _label_amount(labels[AWS_LABEL_INSTANCE_MEMORY], "mebibytes")
        memory = mebibytes * 2**20 if mebibytes is not None else memory
    elif KWOK_LABEL_INSTANCE_MEMORY in labels:
        memory = _label_amount(labels[KWOK_LABEL_INSTANCE_MEMORY], "memory") or memory
    return cpu, memory


def _label_amount(text: str, resource: str) -> float | None:
    """A label's value read as a Kubernetes quantity of ``resource``; None if it is none."""
    try:
        return resource_value(resource, parse_resource_list({resource: text})[resource])
    except QuantityError:
        return None


def _offering_labels(dimensions: tuple[str, str, str]) -> dict[str, str]:
    instance_type, capacity_type, zone = dimensions
    return {"instance_type": instance_type, "capacity_type": capacity_type, "zone": zone}


@dataclass(slots=True)
class ClusterStateMetrics:
    """``karpenter_cluster_state_node_count``: the Nodes in the cluster cache."""

    cluster: ClusterReader
    metrics: Metrics
    name: str = "metrics.cluster"

    def watches(self) -> list[Watch]:
        return [Watch("Node", self._on_node)]

    @staticmethod
    def _on_node(old: object | None, new: object | None) -> Iterable[str]:
        # Only arrivals and departures change the count.
        return ["nodes"] if old is None or new is None else ()

    def reconcile(self, key: str) -> float | None:
        self.metrics.cluster_state_node_count.set(sum(1 for _ in self.cluster.nodes()))
        return None


@dataclass(slots=True)
class NodeMetrics:
    """Karpenter's per-node gauges and node counters (``metrics.node``, Karpenter's name).

    Each pass replaces, for every Node, ``karpenter_nodes_allocatable``,
    ``_total_pod_requests``, ``_total_pod_limits``, ``_total_daemon_requests``,
    ``_total_daemon_limits`` and ``_system_overhead`` (one series per resource the
    figure names), ``_current_lifetime_seconds``, and the cluster's
    ``karpenter_cluster_utilization_percent`` per resource. A node's series
    carry Karpenter's labels: one per well-known label (empty when the Node has
    none), its name, its phase (the deprecated ``status.phase``, which karpy does
    not read: always empty, as real kubelets leave it) and whether a NodePool
    manages it. Pods that finished (Succeeded, Failed) count for nothing, as in
    Karpenter's cluster state.

    ``karpenter_nodes_created_total`` and ``_terminated_total`` are counted from
    the changes handed out, as they happen: a NodeClaim becoming Registered
    (Karpenter counts at registration) and a NodePool's Node leaving the cluster
    (Karpenter counts when its termination finalizer lets it go). A Node leaving
    also observes ``karpenter_nodes_termination_duration_seconds`` (since its
    deletion was asked) and ``_lifetime_duration_seconds`` (since its creation),
    and a NodeClaim leaving ``karpenter_nodeclaims_termination_duration_seconds``.

    Karpenter's controller runs every 5 s whatever changed (``resync``), which
    is what ``karpy run`` does: reacting to every pod change would recompute
    every node's sums on every batch of a 10,000-pod scale-up. The simulator
    has no resync (it would keep the virtual clock from settling): it passes
    again when a Node or a pod's binding or phase changes.
    """

    cluster: ClusterReader
    clock: Clock
    metrics: Metrics
    resync: float | None = None
    name: str = "metrics.node"

    def watches(self) -> list[Watch]:
        watches = [Watch("Node", self._on_node), Watch("NodeClaim", self._on_nodeclaim)]
        if self.resync is None:
            watches.append(Watch("Pod", self._on_pod))
        return watches

    def _on_node(self, old: object | None, new: object | None) -> Iterable[str]:
        if isinstance(old, Node) and new is None and LABEL_NODEPOOL in old.metadata.labels:
            labels = old.metadata.labels
            pool = labels[LABEL_NODEPOOL]
            self.metrics.nodes_terminated.labels(nodepool=pool, zone=labels.get(LABEL_ZONE, "")).inc()
            now = self.clock.now()
            if old.metadata.deletion_timestamp is not None:
                waited = max(0.0, now - old.metadata.deletion_timestamp)
                self.metrics.nodes_termination_duration.labels(nodepool=pool).observe(waited)
            if old.metadata.creation_timestamp is not None:
                lived = max(0.0, now - old.metadata.creation_timestamp)
                self.metrics.nodes_lifetime_duration.labels(nodepool=pool).observe(lived)
        if self.resync is not None and old is not None and new is not None:
            return ()  # the periodic pass sees it; arrivals and departures start one at once
        return (PASS_KEY,)

    def _on_nodeclaim(self, old: object | None, new: object | None) -> Iterable[str]:
        registered = isinstance(new, NodeClaim) and new.registered
        if registered and isinstance(old, NodeClaim) and isinstance(new, NodeClaim) and not old.registered:
            self.metrics.nodes_created.labels(nodepool=new.nodepool, zone=new.zone).inc()
        if isinstance(old, NodeClaim) and new is None and old.metadata.deletion_timestamp is not None:
            waited = max(0.0, self.clock.now() - old.metadata.deletion_timestamp)
            self.metrics.nodeclaims_termination_duration.labels(nodepool=old.nodepool).observe(waited)
        return ()

    @staticmethod
    def _on_pod(old: object | None, new: object | None) -> Iterable[str]:
        if isinstance(old, Pod) and isinstance(new, Pod):
            if old.node_name == new.node_name and old.is_terminal == new.is_terminal:
                return ()
            return (PASS_KEY,) if new.node_name else ()
        changed = new if new is not None else old
        return (PASS_KEY,) if isinstance(changed, Pod) and changed.node_name else ()

    def reconcile(self, key: str) -> float | None:
        now = self.clock.now()
        rows: dict[str, list[tuple[tuple[str, ...], float]]] = {figure: [] for figure in _NODE_FIGURES}
        lifetimes: list[tuple[tuple[str, ...], float]] = []
        allocatable_total: dict[str, int] = {}
        requested_total: dict[str, int] = {}
        for node in self.cluster.nodes():
            base = tuple(node_metric_labels(node).values())
            pods = [pod for pod in self.cluster.pods_on_node(node.name) if not pod.is_terminal]
            daemons = [pod for pod in pods if pod.is_daemonset_pod]
            # Each pod counts 1 of the `pods` resource, as in Karpenter's sums (RequestsForPods).
            requests = _counted(_sum(pod.spec.requests for pod in pods), len(pods))
            per_node = {
                "allocatable": node.allocatable,
                "pod_requests": requests,
                "pod_limits": _counted(_sum(pod_limits(pod) for pod in pods), len(pods)),
                "daemon_requests": _counted(_sum(pod.spec.requests for pod in daemons), len(daemons)),
                "daemon_limits": _counted(_sum(pod_limits(pod) for pod in daemons), len(daemons)),
                "system_overhead": subtract_amounts(node.capacity, node.allocatable),
            }
            for figure, amounts in per_node.items():
                rows[figure].extend(
                    ((*base, resource_type_label(name)), resource_value(name, amount))
                    for name, amount in amounts.items()
                )
            created = node.metadata.creation_timestamp
            lifetimes.append((base, max(0.0, now - created) if created is not None else 0.0))
            _add_into(allocatable_total, node.allocatable)
            _add_into(requested_total, requests)
        m = self.metrics
        m.nodes_allocatable.replace(rows["allocatable"])
        m.nodes_pod_requests.replace(rows["pod_requests"])
        m.nodes_pod_limits.replace(rows["pod_limits"])
        m.nodes_daemon_requests.replace(rows["daemon_requests"])
        m.nodes_daemon_limits.replace(rows["daemon_limits"])
        m.nodes_system_overhead.replace(rows["system_overhead"])
        m.nodes_lifetime.replace(lifetimes)
        m.cluster_utilization.replace(
            ({"resource_type": resource_type_label(name)}, 100 * requested_total.get(name, 0) / amount)
            for name, amount in allocatable_total.items()
            if amount
        )
        return self.resync


_NODE_FIGURES = (
    "allocatable",
    "pod_requests",
    "pod_limits",
    "daemon_requests",
    "daemon_limits",
    "system_overhead",
)


def node_metric_labels(node: Node) -> dict[str, str]:
    """A Node's labels on Karpenter's node metrics, in the order of :data:`NODE_LABEL_NAMES`."""
    labels = node.metadata.labels
    out = {
        name: next((labels[key] for key in keys if labels.get(key)), "")
        for name, keys in NODE_WELL_KNOWN_LABELS.items()
    }
    out["node_name"] = node.name
    out["phase"] = ""
    out["managed"] = "true" if labels.get(LABEL_NODEPOOL) else "false"
    return out


def pod_limits(pod: Pod) -> ResourceAmounts:
    """A pod's limits as Karpenter's node metrics sum them (:meth:`PodResources.effective_limits`)."""
    return pod.spec.resources.effective_limits()


def _add_into(total: dict[str, int], amounts: ResourceAmounts) -> None:
    for name, amount in amounts.items():
        total[name] = total.get(name, 0) + amount


def _counted(amounts: ResourceAmounts, pods: int) -> ResourceAmounts:
    """``amounts`` with the ``pods`` resource set to the number of pods summed (none: nothing)."""
    return {**amounts, "pods": pods} if pods else amounts


def _sum(amounts: Iterable[ResourceAmounts]) -> ResourceAmounts:
    total: dict[str, int] = {}
    for each in amounts:
        _add_into(total, each)
    return total


@dataclass(slots=True)
class StatusConditionMetricsController:
    """operatorpkg's status controller for one kind, as Karpenter registers it (NodeClaim, NodePool
    and Node; the AWS provider adds EC2NodeClass).

    Each reconcile of an object sets the gauges of its conditions
    (``operator_<kind>_status_condition_count`` and ``_current_status_seconds``),
    counts the conditions that appeared or changed status since the last one
    (``_transitions_total``) and times how long the one left had held
    (``_transition_seconds``); a terminating object's time so far goes to
    ``operator_<kind>_termination_current_time_seconds``. An object gone has its
    series dropped (its termination timed if it was seen terminating), so the
    series stay as many as the objects' conditions. Like operatorpkg's it looks
    again every 10 s (``resync``; the simulator only on changes), which keeps
    the ages current, and it sees transitions between its looks, not each
    write: two changes within one are one transition, as there.
    """

    cluster: ClusterReader
    clock: Clock
    metrics: Metrics
    kind: str
    resync: float | None = None
    name: str = ""
    _recorder: StatusRecorder | None = None

    def __post_init__(self) -> None:
        self.name = f"operatorpkg.{self.kind.lower()}.status"
        self._recorder = StatusRecorder(self.metrics.status_conditions, self.kind)

    def watches(self) -> list[Watch]:
        return [Watch(self.kind, self._name_of)]

    @staticmethod
    def _name_of(old: object | None, new: object | None) -> Iterable[str]:
        return sorted({_status_key(obj) for obj in (old, new) if isinstance(obj, StatusObject)})

    def reconcile(self, key: str) -> float | None:
        recorder = self._recorder
        assert recorder is not None
        now = self.clock.now()
        found = self._read(key)
        if found is None:
            recorder.gone(key, now)
            return None
        conditions = found.conditions if isinstance(found, Node) else found.status.conditions
        observed = [
            ObservedCondition(c.type, c.status, c.reason, c.last_transition_time or 0.0) for c in conditions
        ]
        recorder.observed(
            key,
            observed,
            self._labels(found),
            found.metadata.deletion_timestamp,
            now,
            namespace=found.metadata.namespace or "",
        )
        return self.resync

    def _read(self, name: str) -> StatusObject | None:
        if self.kind == "NodeClaim":
            return self.cluster.nodeclaim(name)
        if self.kind == "NodePool":
            return self.cluster.nodepool(name)
        if self.kind == "Node":
            return self.cluster.node(name)
        if self.kind == BUFFER_KIND:
            namespace, _, buffer = name.partition("/")
            return self.cluster.capacity_buffer(namespace, buffer)
        found = self.cluster.node_class(EC2_GROUP, EC2_KIND, name)
        return found if isinstance(found, EC2NodeClass) else None

    def _labels(self, found: StatusObject) -> dict[str, str]:
        """The labels operatorpkg adds for the object (its ``WithLabels`` keys), by Prometheus name.

        Karpenter labels its NodeClaims and Nodes with their node class
        (``karpenter.k8s.aws/ec2nodeclass: default``); karpy's may not carry that
        label, so the NodeClaim's node class reference stands in for it."""
        keys = self.metrics.status_conditions.kinds[self.kind][0].labels
        if not keys:
            return {}
        labels = found.metadata.labels
        claim: NodeClaim | None = None
        if isinstance(found, NodeClaim):
            claim = found
        elif isinstance(found, Node):
            claims = self.cluster.nodeclaims_on_node(found.metadata.name)
            claim = claims[0] if claims else None
        values: dict[str, str] = {}
        for key in keys:
            value = labels.get(key, "")
            if not value and claim is not None:
                ref = claim.spec.node_class_ref
                if key == f"{ref.group}/{ref.kind.lower()}":
                    value = ref.name
            values[prometheus_label(key)] = value
        return values


StatusObject = NodeClaim | NodePool | Node | EC2NodeClass | CapacityBuffer


def _status_key(obj: StatusObject) -> str:
    return obj.key if isinstance(obj, CapacityBuffer) else obj.metadata.name


MetricsController = (
    PodMetrics
    | NodePoolMetrics
    | ClusterStateMetrics
    | NodeMetrics
    | OfferingMetrics
    | StatusConditionMetricsController
)


def metrics_controllers(
    cluster: ClusterReader,
    clock: Clock,
    metrics: Metrics,
    cloud_for: Callable[[str], CloudProvider] | None = None,
    *,
    periodic: bool = True,
) -> list[MetricsController]:
    """The controllers that only record metrics, for a runtime to register.

    ``cloud_for`` (the cloud each controller calls) adds the cost and offering
    metrics; ``periodic`` False leaves out the passes Karpenter makes whatever
    changed (the simulator: see :class:`NodePoolMetrics`).
    """
    controllers: list[MetricsController] = [
        PodMetrics(clock, metrics, cluster, POD_RESYNC if periodic else None),
        NodePoolMetrics(
            cluster,
            metrics,
            cloud_for(NODEPOOL_METRICS) if cloud_for is not None else None,
            NODEPOOL_RESYNC if periodic else None,
        ),
        ClusterStateMetrics(cluster, metrics),
        NodeMetrics(cluster, clock, metrics, NODE_RESYNC if periodic else None),
        *(
            StatusConditionMetricsController(
                cluster, clock, metrics, kind, STATUS_RESYNC if periodic else None
            )
            for kind in ("NodeClaim", "NodePool", "Node")
        ),
    ]
    if cloud_for is not None:
        controllers.append(
            OfferingMetrics(
                cluster, cloud_for(OFFERING_METRICS), metrics, OFFERING_RESYNC if periodic else None
            )
        )
    return controllers
