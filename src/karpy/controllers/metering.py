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
from dataclasses import dataclass
from typing import TypeVar

from karpy.api.core import POD_PENDING, POD_RUNNING, Pod
from karpy.api.instancetype import InstanceType
from karpy.api.nodeclaim import NodeClaim
from karpy.api.nodeclass import NodeClass
from karpy.api.nodeclass_hash import NodeClassHash
from karpy.api.nodepool import NodePool
from karpy.cloud.provider import (
    CloudProvider,
    InsufficientCapacityError,
    LaunchInProgressError,
    NodeClaimNotFoundError,
    NodeClassHashing,
    NodeClassNotReadyError,
    NodeClassProblem,
    RepairPolicy,
    ReservationMarking,
)
from karpy.controllers.state import nodepool_resources
from karpy.operator.cluster import Clock, ClusterReader
from karpy.operator.karpenter_metrics import Metrics
from karpy.operator.runtime import Watch

T = TypeVar("T")


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
        self.metrics.nodepool_observed(nodepool, nodepool_resources(claims))
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
