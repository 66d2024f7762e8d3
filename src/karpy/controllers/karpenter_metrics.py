"""Karpenter's metrics, recorded by karpy's controllers under Karpenter's names.

Dashboards and alerts written for Karpenter query names such as
``karpenter_nodeclaims_created_total`` with labels such as ``nodepool``; karpy
publishes the same names, types and labels, so they work unchanged.
:class:`Metrics` declares them on a :class:`~karpy.controllers.metrics.Registry`
and gives the controllers one-line calls for what they record. Every
controller takes a ``metrics`` argument; left out, it gets a private
:class:`Metrics` nobody reads, which is what the simulator and most tests want.

What is measured, and where:

- ``karpenter_nodeclaims_created_total{reason,nodepool,min_values_relaxed}``:
  a NodeClaim created by the provisioner (reason ``provisioned``) or as a
  disruption replacement (the disruption reason, lower case). karpy never
  relaxes minValues, so ``min_values_relaxed`` is always ``"false"``.
- ``karpenter_nodeclaims_terminated_total{nodepool,capacity_type,zone}``:
  the termination controller lifted the finalizer: instance and Node are gone.
- ``karpenter_nodeclaims_disrupted_total{reason,nodepool,capacity_type}``:
  a NodeClaim deleted on purpose: ``empty``, ``drifted``, ``underutilized``
  (disruption), ``expired`` (expireAfter), ``insufficient_capacity`` (its
  launch found no capacity) or ``liveness`` (not launched or registered in
  time).
- ``karpenter_pods_startup_duration_seconds`` (summary): from a pod's
  creation until karpy sees it Running, for pods karpy saw Pending;
  ``karpenter_pods_bound_duration_seconds`` (histogram): from creation until
  karpy sees it bound to a node. Both in the cluster's clock, so in the
  simulator they are virtual seconds.
- ``karpenter_scheduler_scheduling_duration_seconds{controller}``: the wall
  time of each provisioning scheduling simulation (snapshot and solve).
  ``karpenter_scheduler_queue_depth{controller,scheduling_id}``: the pods a
  simulation works on; set when it starts, and when it ends to the pods it
  left unscheduled, which are still waiting (one series, that of the latest
  simulation). ``karpenter_scheduler_unschedulable_pods_count{controller}``:
  the pods the latest simulation could not place.
- ``karpenter_nodepools_usage{resource_type,nodepool}`` and
  ``karpenter_nodepools_limit{resource_type,nodepool}``: the capacity of a
  NodePool's NodeClaims (launched ones count their capacity, ``nodes`` counts
  NodeClaims) and its ``spec.limits``; CPU in cores, other resources in base
  units, resource names in lower case with ``_`` for ``-``.
- ``karpenter_cloudprovider_errors_total{controller,method,provider,error}``
  and ``karpenter_cloudprovider_duration_seconds{controller,method,provider}``:
  every cloud provider call, through :class:`MeteredCloudProvider`. ``error``
  is the type for the well-known errors (``InsufficientCapacityError``,
  ``NodeClaimNotFoundError``, ``NodeClassNotReadyError``) and empty otherwise.
- ``karpenter_cluster_state_synced`` (1 once the caches have listed; ``karpy
  run`` sets it) and ``karpenter_cluster_state_node_count`` (Nodes in the
  cache).
- ``karpenter_build_info{version}``: constant 1.
- ``karpy_provisioning_launch_loops_total``, karpy's own: each time provisioning
  stops launching for a workload caught in a launch loop
  (:mod:`karpy.controllers.launchloop`).

The label values for ``controller`` are karpy's controller names
(``provisioning``, ``nodeclaim.lifecycle``, ``termination``...).
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

from karpy import __version__
from karpy.api.core import POD_PENDING, POD_RUNNING, Pod
from karpy.api.instancetype import InstanceType
from karpy.api.nodeclaim import NodeClaim
from karpy.api.nodeclass import NodeClass
from karpy.api.nodepool import NodePool
from karpy.api.quantity import ResourceAmounts
from karpy.cloud.provider import (
    CloudProvider,
    InsufficientCapacityError,
    LaunchInProgressError,
    NodeClaimNotFoundError,
    NodeClassNotReadyError,
    NodeClassProblem,
    RepairPolicy,
)
from karpy.controllers.interfaces import Clock, ClusterReader
from karpy.controllers.metrics import Gauge, Registry
from karpy.controllers.runtime import Watch
from karpy.controllers.state import nodepool_resources

T = TypeVar("T")

NAMESPACE = "karpenter"

# Reasons of karpenter_nodeclaims_created_total and _disrupted_total besides the disruption reasons.
REASON_PROVISIONED = "provisioned"
REASON_EXPIRED = "expired"
REASON_INSUFFICIENT_CAPACITY = "insufficient_capacity"
REASON_LIVENESS = "liveness"


def reason_label(reason: str) -> str:
    """A disruption reason as Karpenter's metrics write it: ``Underutilized`` -> ``underutilized``."""
    out: list[str] = []
    for index, char in enumerate(reason):
        if char.isupper() and index and not reason[index - 1].isupper():
            out.append("_")
        out.append(char.lower())
    return "".join(out)


def resource_type_label(resource: str) -> str:
    return resource.lower().replace("-", "_")


def resource_value(resource: str, amount: int) -> float:
    """An amount in the unit Karpenter reports: CPU in cores (karpy counts millicores)."""
    return amount / 1000 if resource == "cpu" else float(amount)


def set_per_resource(gauge: Gauge, nodepool: str, amounts: ResourceAmounts) -> None:
    """Replace a NodePool's series of ``gauge`` with one per resource, so a resource gone leaves no series."""
    gauge.remove_matching(nodepool=nodepool)
    for resource, amount in amounts.items():
        gauge.labels(resource_type=resource_type_label(resource), nodepool=nodepool).set(
            resource_value(resource, amount)
        )


class SchedulingSimulation:
    """One scheduling simulation being measured (see :meth:`Metrics.scheduling`)."""

    def __init__(self) -> None:
        self.unscheduled = 0

    def left(self, unscheduled: int) -> None:
        """Record how many pods the simulation could not place."""
        self.unscheduled = unscheduled


class Metrics:
    """Karpenter's metrics on one registry, with the calls controllers record through."""

    def __init__(self, registry: Registry | None = None) -> None:
        self.registry = registry if registry is not None else Registry()
        r = self.registry
        self.build_info = r.gauge(
            f"{NAMESPACE}_build_info",
            "A metric with a constant '1' value labeled by the version karpy was built from.",
            ["version"],
        )
        self.build_info.labels(version=__version__).set(1)
        self.nodeclaims_created = r.counter(
            f"{NAMESPACE}_nodeclaims_created_total",
            "Number of nodeclaims created in total. Labeled by reason the nodeclaim was created, "
            "the owning nodepool, and if min values was relaxed for this nodeclaim.",
            ["reason", "nodepool", "min_values_relaxed"],
        )
        self.nodeclaims_terminated = r.counter(
            f"{NAMESPACE}_nodeclaims_terminated_total",
            "Number of nodeclaims terminated in total. Labeled by the owning nodepool, capacity type, "
            "and zone.",
            ["nodepool", "capacity_type", "zone"],
        )
        self.nodeclaims_disrupted = r.counter(
            f"{NAMESPACE}_nodeclaims_disrupted_total",
            "Number of nodeclaims disrupted in total. Labeled by reason the nodeclaim was disrupted, "
            "the owning nodepool, and capacity type.",
            ["reason", "nodepool", "capacity_type"],
        )
        self.pods_startup_duration = r.summary(
            f"{NAMESPACE}_pods_startup_duration_seconds",
            "The time from pod creation until the pod is running.",
        )
        self.pods_bound_duration = r.histogram(
            f"{NAMESPACE}_pods_bound_duration_seconds",
            "The time from pod creation until the pod is bound.",
        )
        self.scheduling_duration = r.histogram(
            f"{NAMESPACE}_scheduler_scheduling_duration_seconds",
            "Duration of scheduling simulations used for deprovisioning and provisioning in seconds.",
            ["controller"],
        )
        self.queue_depth = r.gauge(
            f"{NAMESPACE}_scheduler_queue_depth",
            "The number of pods currently waiting to be scheduled.",
            ["controller", "scheduling_id"],
        )
        self.unschedulable_pods = r.gauge(
            f"{NAMESPACE}_scheduler_unschedulable_pods_count",
            "The number of unschedulable Pods.",
            ["controller"],
        )
        self.nodepools_usage = r.gauge(
            f"{NAMESPACE}_nodepools_usage",
            "The amount of resources that have been provisioned for a nodepool. Labeled by nodepool name "
            "and resource type.",
            ["resource_type", "nodepool"],
        )
        self.nodepools_limit = r.gauge(
            f"{NAMESPACE}_nodepools_limit",
            "Limits specified on the nodepool that restrict the quantity of resources provisioned. "
            "Labeled by nodepool name and resource type.",
            ["resource_type", "nodepool"],
        )
        self.cloudprovider_errors = r.counter(
            f"{NAMESPACE}_cloudprovider_errors_total",
            "Total number of errors returned from CloudProvider calls.",
            ["controller", "method", "provider", "error"],
        )
        self.cloudprovider_duration = r.histogram(
            f"{NAMESPACE}_cloudprovider_duration_seconds",
            "Duration of cloud provider method calls. Labeled by the controller, method name and provider.",
            ["controller", "method", "provider"],
        )
        self.cluster_state_synced = r.gauge(
            f"{NAMESPACE}_cluster_state_synced",
            "Returns 1 if cluster state is synced and 0 otherwise. Synced checks that nodeclaims and "
            "nodes that are stored in the APIServer have the same representation as the cluster state.",
        )
        self.cluster_state_node_count = r.gauge(
            f"{NAMESPACE}_cluster_state_node_count", "Current count of nodes in cluster state"
        )
        # controller-runtime's own, which Karpenter exposes too: one series per controller.
        self.reconcile_time = r.histogram(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            ["controller"],
        )
        self.reconcile_total = r.counter(
            "controller_runtime_reconcile_total",
            "Total number of reconciliations per controller",
            ["controller", "result"],
        )
        # karpy's own: karpy.controllers.launchloop.
        self.launch_loops = r.counter(
            "karpy_provisioning_launch_loops_total",
            "Workloads whose pending pods provisioning stopped launching nodes for: the nodes"
            " launched for them came up ready and kept none of them, again and again.",
        )
        self._scheduling_ids: dict[str, str] = {}
        self._simulations = 0

    def reconciled(self, controller: str, seconds: float, result: str) -> None:
        """One reconcile (the Runtime's observer in ``karpy run``)."""
        self.reconcile_time.labels(controller=controller).observe(seconds)
        self.reconcile_total.labels(controller=controller, result=result).inc()

    # -- NodeClaims ------------------------------------------------------------

    def nodeclaim_created(self, nodeclaim: NodeClaim, reason: str = REASON_PROVISIONED) -> None:
        self.nodeclaims_created.labels(
            reason=reason_label(reason), nodepool=nodeclaim.nodepool, min_values_relaxed="false"
        ).inc()

    def nodeclaim_terminated(self, nodeclaim: NodeClaim) -> None:
        self.nodeclaims_terminated.labels(
            nodepool=nodeclaim.nodepool, capacity_type=nodeclaim.capacity_type, zone=nodeclaim.zone
        ).inc()

    def nodeclaim_disrupted(self, nodeclaim: NodeClaim, reason: str) -> None:
        self.nodeclaims_disrupted.labels(
            reason=reason_label(reason), nodepool=nodeclaim.nodepool, capacity_type=nodeclaim.capacity_type
        ).inc()

    # -- scheduling ------------------------------------------------------------

    @contextmanager
    def scheduling(self, controller: str, pods: int) -> Iterator[SchedulingSimulation]:
        """Measure one scheduling simulation of ``pods`` pods by ``controller``."""
        self._simulations += 1
        previous = self._scheduling_ids.get(controller)
        if previous is not None:
            self.queue_depth.remove(controller=controller, scheduling_id=previous)
        scheduling_id = self._scheduling_ids[controller] = str(self._simulations)
        depth = self.queue_depth.labels(controller=controller, scheduling_id=scheduling_id)
        depth.set(pods)
        simulation = SchedulingSimulation()
        simulation.unscheduled = pods
        started = time.perf_counter()
        try:
            yield simulation
        finally:
            self.scheduling_duration.labels(controller=controller).observe(time.perf_counter() - started)
            depth.set(simulation.unscheduled)
            self.unschedulable_pods.labels(controller=controller).set(simulation.unscheduled)

    # -- NodePools -------------------------------------------------------------

    def nodepool_observed(self, nodepool: NodePool, nodeclaims: Iterable[NodeClaim]) -> None:
        set_per_resource(self.nodepools_usage, nodepool.name, nodepool_resources(nodeclaims))
        set_per_resource(self.nodepools_limit, nodepool.name, nodepool.limits)

    def nodepool_gone(self, name: str) -> None:
        self.nodepools_usage.remove_matching(nodepool=name)
        self.nodepools_limit.remove_matching(nodepool=name)


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

    def repair_policies(self) -> builtins.list[RepairPolicy]:
        return self._call("RepairPolicies", self.cloud.repair_policies)

    def node_class_problem(self, node_class: NodeClass) -> NodeClassProblem | None:
        # Not a call to the cloud (Karpenter reads the node class' Ready condition): not metered.
        return self.cloud.node_class_problem(node_class)

    def mark_offering_unavailable(self, instance_type: str, zone: str, capacity_type: str) -> None:
        # Bookkeeping inside the provider, not a call to the cloud: not metered.
        self.cloud.mark_offering_unavailable(instance_type, zone, capacity_type)


# -- controllers that only record metrics ---------------------------------------


@dataclass(slots=True)
class PodMetrics:
    """Pod start-up and binding durations, from the pod changes the runtime hands out.

    It measures in the change mappers, which see every transition (a reconcile
    would read the cache later and could miss a pod that went Pending, bound
    and Running between two reconciles). Only transitions seen happening
    count: a pod already Running when karpy starts says nothing about karpy.
    """

    clock: Clock
    metrics: Metrics
    name: str = "metrics.pod"

    def watches(self) -> list[Watch]:
        return [Watch("Pod", self._on_pod)]

    def _on_pod(self, old: object | None, new: object | None) -> Iterable[str]:
        if not isinstance(old, Pod) or not isinstance(new, Pod):
            return ()
        created = new.metadata.creation_timestamp
        if created is None:
            return ()
        elapsed = max(0.0, self.clock.now() - created)
        if not old.node_name and new.node_name:
            self.metrics.pods_bound_duration.observe(elapsed)
        if old.phase == POD_PENDING and new.phase == POD_RUNNING:
            self.metrics.pods_startup_duration.observe(elapsed)
        return ()

    def reconcile(self, key: str) -> float | None:
        return None


@dataclass(slots=True)
class NodePoolMetrics:
    """``karpenter_nodepools_usage`` and ``_limit``, per NodePool, kept up to date on changes."""

    cluster: ClusterReader
    metrics: Metrics
    name: str = "metrics.nodepool"

    def watches(self) -> list[Watch]:
        return [Watch("NodePool", self._pool_of), Watch("NodeClaim", self._pool_of)]

    @staticmethod
    def _pool_of(old: object | None, new: object | None) -> Iterable[str]:
        names = set()
        for obj in (old, new):
            if isinstance(obj, NodePool):
                names.add(obj.name)
            elif isinstance(obj, NodeClaim) and obj.nodepool:
                names.add(obj.nodepool)
        return sorted(names)

    def reconcile(self, key: str) -> float | None:
        nodepool = self.cluster.nodepool(key)
        if nodepool is None:
            self.metrics.nodepool_gone(key)
            return None
        claims = [claim for claim in self.cluster.nodeclaims() if claim.nodepool == key]
        self.metrics.nodepool_observed(nodepool, claims)
        return None


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


def metrics_controllers(
    cluster: ClusterReader, clock: Clock, metrics: Metrics
) -> list[PodMetrics | NodePoolMetrics | ClusterStateMetrics]:
    """The controllers that only record metrics, for a runtime to register."""
    return [
        PodMetrics(clock, metrics),
        NodePoolMetrics(cluster, metrics),
        ClusterStateMetrics(cluster, metrics),
    ]
