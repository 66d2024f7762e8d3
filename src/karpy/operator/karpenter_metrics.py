"""Karpenter's metric families, recorded by karpy's controllers and providers under Karpenter's names.

Dashboards and alerts written for Karpenter query names such as
``karpenter_nodeclaims_created_total`` with labels such as ``nodepool``; karpy
publishes the same names, types and labels, so they work unchanged.
:class:`Metrics` declares them on a :class:`~karpy.operator.metrics.Registry`
and gives the controllers one-line calls for what they record. Every
controller takes a ``metrics`` argument; left out, it gets a private
:class:`Metrics` nobody reads, which is what the simulator and most tests want.
It lives below the controllers and the cloud providers because both record
into it (the AWS price refresh and interruption queue do too); the controllers
that only record metrics, and :class:`~karpy.controllers.metering.MeteredCloudProvider`,
are in :mod:`karpy.controllers.metering`.

What is measured, and where:

- ``karpenter_nodeclaims_created_total{reason,nodepool,min_values_relaxed}``:
  a NodeClaim created by the provisioner (reason ``provisioned``) or as a
  disruption replacement (the disruption reason, lower case). karpy never
  relaxes minValues, so ``min_values_relaxed`` is always ``"false"``.
- ``karpenter_nodeclaims_terminated_total{nodepool,capacity_type,zone}``:
  the termination controller lifted the finalizer: instance and Node are gone.
- ``karpenter_nodeclaims_disrupted_total{reason,nodepool,capacity_type,...}`` (and
  ``consolidation_policy``, ``termination_mode``):
  a NodeClaim deleted on purpose: ``empty``, ``drifted``, ``underutilized``
  (disruption), ``expired`` (expireAfter), ``insufficient_capacity`` (its
  launch found no capacity), ``launch_timeout`` or ``registration_timeout``.
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
  ``karpenter_scheduler_unfinished_work_seconds{controller,scheduling_id}``:
  how long the simulation still running has been, worked out at each scrape;
  no series between simulations.
  ``karpenter_scheduler_pending_pods_by_effective_zone_count{controller,zone}``:
  the latest provisioning simulation's pods by the zone their constraints leave
  them (:mod:`karpy.scheduling.zones`: a zone, ``flexible`` or ``none``).
- ``karpenter_nodepools_usage{resource_type,nodepool}`` and
  ``karpenter_nodepools_limit{resource_type,nodepool}``: the capacity of a
  NodePool's NodeClaims (launched ones count their capacity, ``nodes`` counts
  NodeClaims) and its ``spec.limits``; CPU in cores, other resources in base
  units, resource names in lower case with ``_`` for ``-``.
- ``karpenter_cloudprovider_errors_total{controller,method,provider,error}``
  and ``karpenter_cloudprovider_duration_seconds{controller,method,provider}``:
  every cloud provider call, through
  :class:`~karpy.controllers.metering.MeteredCloudProvider`. ``error``
  is the type for the well-known errors (``InsufficientCapacityError``,
  ``NodeClaimNotFoundError``, ``NodeClassNotReadyError``) and empty otherwise.
- ``karpenter_cluster_state_synced`` (1 once the caches have listed; ``karpy
  run`` sets it) and ``karpenter_cluster_state_node_count`` (Nodes in the
  cache).
- Cost and capacity, recorded by :mod:`karpy.controllers.metering` (docs/run.md
  has the table): ``karpenter_nodepools_cost_total{nodepool}`` (the $/h of a
  NodePool's NodeClaims at karpy's prices, overlaid by NodeOverlays) and its
  error counter; the AWS provider's offering price, availability and
  instance-type size gauges; the per-node gauges (``karpenter_nodes_allocatable``,
  ``_total_pod_requests``...) labelled by :data:`NODE_LABEL_NAMES`, the node
  created and terminated counters, termination and lifetime durations, and
  ``karpenter_pods_state``, one series per pod.
- ``karpenter_consolidation_moves_total{decision,nodepool,policy}``: each
  consolidation move worked out (single-node: every node simulated; multi-node:
  the move found), per NodePool it touches, ``approved`` or ``rejected`` by the
  Balanced score (other policies' moves are always approved); ``policy`` is the
  pool's consolidationPolicy as written. ``karpenter_consolidation_score`` (histogram,
  Karpenter's buckets): the score of each Balanced pool's part of a move, by its
  own decision.
- Timings and counts around disruption: the reboot durations (request to
  outcome, issuance to rejoin), instance termination per NodePool, the pods
  each disrupted NodeClaim sets moving, and the replacements of commands
  rolled back after they started (``..._queue_failures_total``).
- ``karpenter_pods_provisioning_*`` and ``_scheduling_decision_duration_seconds``:
  timed from when provisioning first saw a pending pod and first found it a
  place (:class:`PodSchedulingTimes`), as Karpenter's cluster state keeps them.
- The AWS provider's launch and termination failures and user data size,
  recorded by :mod:`karpy.cloud.aws.provider`.
- ``karpenter_build_info{version}``: constant 1.
- ``karpy_provisioning_launch_loops_total``, karpy's own: each time provisioning
  stops launching for a workload caught in a launch loop
  (:mod:`karpy.controllers.launchloop`).

The label values for ``controller`` are karpy's controller names
(``provisioning``, ``nodeclaim.lifecycle``, ``termination``...).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from karpy import __version__
from karpy.api.nodeclaim import NodeClaim
from karpy.api.nodepool import NodePool
from karpy.api.quantity import ResourceAmounts
from karpy.api.requirements import WELL_KNOWN_LABELS
from karpy.operator.metrics import Gauge, Registry
from karpy.operator.operator_metrics import (
    DEFAULT_BUCKETS,
    StatusConditionMetrics,
    StatusKind,
    WorkQueueMetrics,
)

NAMESPACE = "karpenter"

# Karpenter's buckets of karpenter_consolidation_score (1/k is 0.5).
CONSOLIDATION_SCORE_BUCKETS = (0.1, 0.25, 0.33, 0.5, 1.0, 2.0, 5.0, 10.0)
# Karpenter's buckets of the reboot durations: 10 s to 1,280 s, doubling.
REBOOT_DURATION_BUCKETS: tuple[float, ...] = tuple(10.0 * 2**power for power in range(8))
# Karpenter's buckets of the NodeClaim termination durations: 1 s doubling, 11 (instance) or 12 (NodeClaim).
INSTANCE_TERMINATION_BUCKETS: tuple[float, ...] = tuple(float(2**power) for power in range(11))
# Reasons of karpenter_nodeclaims_created_total and _disrupted_total besides the disruption reasons.
REASON_PROVISIONED = "provisioned"
REASON_EXPIRED = "expired"
REASON_INSUFFICIENT_CAPACITY = "insufficient_capacity"
# Karpenter's liveness reasons: not launched in time, or launched and not registered in time.
REASON_LAUNCH_TIMEOUT = "launch_timeout"
REASON_REGISTRATION_TIMEOUT = "registration_timeout"
REASON_NODECLASS_NOT_READY = "nodeclass_not_ready"
# The labels Karpenter's NodeClaim and Node status controllers add to their series: one per node
# class kind (the node class's name) and the NodePool's; the Node's also whether it is initialized.
NODE_CLASS_LABELS = ("karpenter.k8s.aws/ec2nodeclass", "karpenter.kwok.sh/kwoknodeclass")
# The kinds Karpenter v1.15 (and its AWS provider, for EC2NodeClass) has operatorpkg's status
# controller keep the status condition metrics of.
STATUS_KINDS = (
    StatusKind("karpenter.sh", "NodeClaim", (*NODE_CLASS_LABELS, "karpenter.sh/nodepool")),
    StatusKind("karpenter.sh", "NodePool"),
    StatusKind(
        "",
        "Node",
        (*NODE_CLASS_LABELS, "karpenter.sh/nodepool", "karpenter.sh/initialized"),
        deprecated=False,
    ),
    StatusKind("karpenter.k8s.aws", "EC2NodeClass", buckets=DEFAULT_BUCKETS),
    StatusKind("autoscaling.x-k8s.io", "CapacityBuffer"),
)


def well_known_label_name(key: str) -> str:
    """A well-known label as Karpenter's node metrics name it: ``topology.kubernetes.io/zone`` -> ``zone``."""
    return key.rpartition("/")[2].lower().replace("-", "_")


# The labels of Karpenter's node metrics: one per well-known label (its name after the ``/``), the
# core's and the providers' karpy serves (kwok's and AWS's: a kwok node of the AWS catalog carries
# AWS's), then the node's name, phase and whether a NodePool manages it.
NODE_WELL_KNOWN_LABELS: dict[str, tuple[str, ...]] = {
    name: tuple(sorted(key for key in WELL_KNOWN_LABELS if well_known_label_name(key) == name))
    for name in sorted({well_known_label_name(key) for key in WELL_KNOWN_LABELS})
}
NODE_LABEL_NAMES: tuple[str, ...] = (*NODE_WELL_KNOWN_LABELS, "node_name", "phase", "managed")

# Karpenter's buckets of karpenter_nodes_lifetime_duration_seconds: 15 minutes to 30 days.
_HOUR = 3600.0
_DAY = 24 * _HOUR
NODE_LIFETIME_BUCKETS: tuple[float, ...] = (
    0.25 * _HOUR, 0.5 * _HOUR, 0.75 * _HOUR, _HOUR, 2 * _HOUR, 4 * _HOUR, 6 * _HOUR, 8 * _HOUR,
    10 * _HOUR, 12 * _HOUR, 16 * _HOUR, 20 * _HOUR, _DAY, 2 * _DAY, 3 * _DAY, 5 * _DAY, 10 * _DAY,
    15 * _DAY, 20 * _DAY, 25 * _DAY, 30 * _DAY,
)  # fmt: skip

POD_STATE_LABELS: tuple[str, ...] = (
    "name",
    "namespace",
    "owner",
    "node",
    "scheduled",
    "nodepool",
    "zone",
    "arch",
    "capacity_type",
    "instance_type",
    "phase",
    "ready",
    "managed",
)


def reason_label(reason: str) -> str:
    """A disruption reason as Karpenter's metrics write it: ``Underutilized`` -> ``underutilized``."""
    out: list[str] = []
    for index, char in enumerate(reason):
        if char.isupper() and index and not reason[index - 1].isupper():
            out.append("_")
        out.append(char.lower())
    return "".join(out)


def termination_mode(drain_bound: float | None) -> str:
    """How a NodeClaim's node is drained, as Karpenter's ``termination_mode`` label says it: ``graceful``
    without a bound (its terminationGracePeriod, or the one repair applied), ``forceful`` with none
    left, ``eventual`` otherwise."""
    if drain_bound is None:
        return "graceful"
    return "forceful" if drain_bound <= 0 else "eventual"


def _disrupted_labels(nodeclaim: NodeClaim, reason: str, consolidation_policy: str) -> dict[str, str]:
    """The labels Karpenter puts on a disrupted NodeClaim's counters."""
    return {
        "reason": reason_label(reason),
        "nodepool": nodeclaim.nodepool,
        "capacity_type": nodeclaim.capacity_type,
        "consolidation_policy": reason_label(consolidation_policy),
        "termination_mode": termination_mode(nodeclaim.spec.termination_grace_period),
    }


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


class PodSchedulingTimes:
    """When provisioning first saw each pending pod, first decided on it, and first found it a place.

    Karpenter keeps these in its cluster state (``AckPods``, ``MarkPodSchedulingDecisions``) for the
    ``karpenter_pods_provisioning_*`` and ``_scheduling_decision_duration_seconds`` metrics, which time
    from them rather than from the pod's creation. Keyed by namespace/name; a pod's entries go once it
    starts, finishes or is deleted (:meth:`forget`, called by the pod metrics controller, which turns
    ``kept`` on: without it nothing is kept, so nothing piles up). Used from the reconcile thread only.
    """

    def __init__(self) -> None:
        self.kept = False
        self.acked: dict[str, float] = {}
        self.decided: dict[str, float] = {}
        self.schedulable: dict[str, float] = {}

    def ack(self, key: str, now: float) -> None:
        if self.kept:
            self.acked.setdefault(key, now)

    def forget(self, key: str) -> None:
        self.acked.pop(key, None)
        self.decided.pop(key, None)
        self.schedulable.pop(key, None)


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
            "Number of nodeclaims disrupted in total by Karpenter. Labeled by reason the nodeclaim was "
            "disrupted, the owning nodepool, the capacity type, the consolidation policy, and the "
            "termination mode.",
            ["reason", "nodepool", "capacity_type", "consolidation_policy", "termination_mode"],
        )
        self.nodeclaims_unhealthy_disrupted = r.counter(
            f"{NAMESPACE}_nodeclaims_unhealthy_disrupted_total",
            "Number of unhealthy nodeclaims disrupted in total by node repair. Labeled by the condition "
            "the node was disrupted on, the owning nodepool, the capacity type, the image ID, and the "
            "termination mode.",
            ["condition", "nodepool", "capacity_type", "image_id", "termination_mode"],
        )
        self.pods_disruption_initiated = r.counter(
            f"{NAMESPACE}_pods_disruption_initiated_total",
            "Number of pod disruptions initiated in total by Karpenter, incremented by the reschedulable "
            "pod count whenever the underlying nodeclaim is disrupted. Labeled by reason the nodeclaim was "
            "disrupted, the owning nodepool, the capacity type, the consolidation policy, and the "
            "termination mode. Pods owned by DaemonSets and mirror pods are excluded.",
            ["reason", "nodepool", "capacity_type", "consolidation_policy", "termination_mode"],
        )
        self.consolidation_moves = r.counter(
            f"{NAMESPACE}_consolidation_moves_total",
            "Number of balanced consolidation moves. Labeled by decision, NodePool, and policy.",
            ["decision", "nodepool", "policy"],
        )
        self.consolidation_score = r.histogram(
            f"{NAMESPACE}_consolidation_score",
            "Score of balanced consolidation moves. Labeled by decision, NodePool, and policy.",
            ["decision", "nodepool", "policy"],
            buckets=CONSOLIDATION_SCORE_BUCKETS,
        )
        self.node_reboots = r.counter(
            f"{NAMESPACE}_nodes_reboots_total",
            "Number of node reboots carried out by Karpenter, labeled by terminal result (succeeded, "
            "provider_error, recovery_timeout).",
            ["result"],
        )
        self.node_reboot_duration = r.histogram(
            f"{NAMESPACE}_nodes_reboot_duration_seconds",
            "Duration of the full reboot action from request to terminal outcome, labeled by result.",
            ["result"],
            REBOOT_DURATION_BUCKETS,
        )
        self.node_reboot_recovery_duration = r.histogram(
            f"{NAMESPACE}_nodes_reboot_recovery_duration_seconds",
            "Time from issuing a reboot until the node proved a new boot and rejoined (bootID changed + "
            "Ready). Recorded on successful reboots only.",
            (),
            REBOOT_DURATION_BUCKETS,
        )
        self.pods_startup_duration = r.summary(
            f"{NAMESPACE}_pods_startup_duration_seconds",
            "The time from pod creation until the pod is running.",
        )
        self.pods_bound_duration = r.histogram(
            f"{NAMESPACE}_pods_bound_duration_seconds",
            "The time from pod creation until the pod is bound.",
            ["dynamic_resources"],
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
        self.unfinished_work = r.gauge(
            f"{NAMESPACE}_scheduler_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been observed by "
            "scheduling_duration_seconds.",
            ["controller", "scheduling_id"],
        )
        self.pending_pods_by_effective_zone = r.gauge(
            f"{NAMESPACE}_scheduler_pending_pods_by_effective_zone_count",
            "Pending pods dimensioned by effective zone constraint, or the intersection of pod-level zone "
            "signals, volume topology (PVC zones), and topology constraints. Values: specific zone name "
            "(e.g., 'us-west-2a'), 'flexible' (multiple zones), or 'none' (no valid intersection).",
            ["controller", "zone"],
        )
        # The simulations running, (controller, scheduling_id) -> when they started: the scrape
        # reads how long each has been running (written and read under the registry's lock).
        self._running: dict[tuple[str, str], float] = {}
        # The wall clock simulations are timed by (a test's fake clock in place).
        self.wall_clock: Callable[[], float] = time.perf_counter
        r.on_scrape(self._refresh_unfinished_work)
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
        self.cluster_state_unsynced_time = r.gauge(
            f"{NAMESPACE}_cluster_state_unsynced_time_seconds",
            "The time for which cluster state is not synced",
        )
        self._unsynced_since: float | None = None
        self.cluster_state_node_count = r.gauge(
            f"{NAMESPACE}_cluster_state_node_count", "Current count of nodes in cluster state"
        )
        # Cost (alpha in Karpenter since v1.9): the $/h of each NodePool's NodeClaims at the offering
        # prices karpy plans with, NodeOverlays applied when their gate is on (controllers/metering.py).
        self.nodepools_cost = r.gauge(
            f"{NAMESPACE}_nodepools_cost_total",
            "Total cost of the nodepool from Karpenter's perspective. Units are determined by the cloud "
            "provider. Not an authoritative source for billing. Includes modifications due to NodeOverlays",
            ["nodepool"],
        )
        self.nodepools_cost_errors = r.counter(
            f"{NAMESPACE}_nodepools_cost_tracker_errors_total",
            "Number of errors encountered during cost tracking operations. Labeled by nodepool.",
            ["nodepool"],
        )
        # The AWS provider's offering metrics, from whichever provider karpy runs.
        offering = ["instance_type", "capacity_type", "zone"]
        self.offering_available = r.gauge(
            f"{NAMESPACE}_cloudprovider_instance_type_offering_available",
            "Instance type offering availability, based on instance type, capacity type, and zone",
            offering,
        )
        self.offering_price = r.gauge(
            f"{NAMESPACE}_cloudprovider_instance_type_offering_price_estimate",
            "Instance type offering estimated hourly price used when making informed decisions on node "
            "cost calculation, based on instance type, capacity type, and zone.",
            offering,
        )
        self.instance_type_cpu = r.gauge(
            f"{NAMESPACE}_cloudprovider_instance_type_cpu_cores",
            "VCPUs cores for a given instance type.",
            ["instance_type"],
        )
        self.instance_type_memory = r.gauge(
            f"{NAMESPACE}_cloudprovider_instance_type_memory_bytes",
            "Memory, in bytes, for a given instance type.",
            ["instance_type"],
        )
        # The AWS provider's instance and EC2NodeClass metrics, recorded by karpy.cloud.aws.
        self.instance_launch_failures = r.counter(
            f"{NAMESPACE}_cloudprovider_instance_launch_failures_total",
            "Number of instance launch (CreateFleet offering) failures, dimensioned by availability zone, "
            "zone ID, capacity type, and launch failure reason.",
            ["zone", "zone_id", "capacity_type", "reason"],
        )
        self.instance_termination_failures = r.counter(
            f"{NAMESPACE}_cloudprovider_instance_termination_failures_total",
            "Number of instance termination (TerminateInstances) failures, dimensioned by availability zone "
            "and zone ID.",
            ["zone", "zone_id"],
        )
        self.userdata_bytes = r.gauge(
            f"{NAMESPACE}_ec2nodeclasses_userdata_bytes",
            "Size in bytes of the rendered user data (raw, pre-base64) for the EC2NodeClass",
            ["nodeclass"],
        )
        # Nodes (pkg/metrics and pkg/controllers/metrics/node in Karpenter).
        self.nodes_created = r.counter(
            f"{NAMESPACE}_nodes_created_total",
            "Number of nodes created in total by Karpenter. Labeled by owning nodepool and zone.",
            ["nodepool", "zone"],
        )
        self.nodes_terminated = r.counter(
            f"{NAMESPACE}_nodes_terminated_total",
            "Number of nodes terminated in total by Karpenter. Labeled by owning nodepool and zone.",
            ["nodepool", "zone"],
        )
        self.nodes_termination_duration = r.summary(
            f"{NAMESPACE}_nodes_termination_duration_seconds",
            "The time taken between a node's deletion request and the removal of its finalizer",
            ["nodepool"],
        )
        self.nodes_lifetime_duration = r.histogram(
            f"{NAMESPACE}_nodes_lifetime_duration_seconds",
            "The lifetime duration of the nodes since creation.",
            ["nodepool"],
            NODE_LIFETIME_BUCKETS,
        )
        self.nodeclaims_termination_duration = r.histogram(
            f"{NAMESPACE}_nodeclaims_termination_duration_seconds",
            "Duration of NodeClaim termination in seconds.",
            ["nodepool"],
            tuple(float(2**power) for power in range(12)),
        )
        self.instance_termination_duration = r.histogram(
            f"{NAMESPACE}_nodeclaims_instance_termination_duration_seconds",
            "Duration of CloudProvider Instance termination in seconds.",
            ["nodepool"],
            INSTANCE_TERMINATION_BUCKETS,
        )
        per_resource = [*NODE_LABEL_NAMES, "resource_type"]
        self.nodes_allocatable = r.gauge(
            f"{NAMESPACE}_nodes_allocatable",
            "Node allocatable are the resources allocatable by nodes.",
            per_resource,
        )
        self.nodes_pod_requests = r.gauge(
            f"{NAMESPACE}_nodes_total_pod_requests",
            "Node total pod requests are the resources requested by pods bound to nodes, including the "
            "DaemonSet pods.",
            per_resource,
        )
        self.nodes_pod_limits = r.gauge(
            f"{NAMESPACE}_nodes_total_pod_limits",
            "Node total pod limits are the resources specified by pod limits, including the DaemonSet pods.",
            per_resource,
        )
        self.nodes_daemon_requests = r.gauge(
            f"{NAMESPACE}_nodes_total_daemon_requests",
            "Node total daemon requests are the resource requested by DaemonSet pods bound to nodes.",
            per_resource,
        )
        self.nodes_daemon_limits = r.gauge(
            f"{NAMESPACE}_nodes_total_daemon_limits",
            "Node total daemon limits are the resources specified by DaemonSet pod limits.",
            per_resource,
        )
        self.nodes_system_overhead = r.gauge(
            f"{NAMESPACE}_nodes_system_overhead",
            "Node system daemon overhead are the resources reserved for system overhead, the difference "
            "between the node's capacity and allocatable values are reported by the status.",
            per_resource,
        )
        self.nodes_lifetime = r.gauge(
            f"{NAMESPACE}_nodes_current_lifetime_seconds", "Node age in seconds", list(NODE_LABEL_NAMES)
        )
        self.cluster_utilization = r.gauge(
            f"{NAMESPACE}_cluster_utilization_percent",
            "Utilization of allocatable resources by pod requests",
            ["resource_type"],
        )
        self.pods_state = r.gauge(
            f"{NAMESPACE}_pods_state",
            "Pod state is the current state of pods. This metric can be used several ways as it is labeled "
            "by the pod name, namespace, owner, node, whether the pod is scheduled, nodepool name, zone, "
            "architecture, capacity type, instance type, pod phase, pod readiness, and whether the node is "
            "Karpenter-managed.",
            list(POD_STATE_LABELS),
        )
        # Voluntary disruption (pkg/controllers/disruption/metrics.go in Karpenter), recorded by
        # karpy.controllers.disruption where its passes decide and carry out commands.
        self.disruption_decisions = r.counter(
            f"{NAMESPACE}_voluntary_disruption_decisions_total",
            "Number of disruption decisions performed. Labeled by disruption decision, reason, and "
            "consolidation type.",
            ["decision", "reason", "consolidation_type"],
        )
        self.disruption_decisions_by_nodepool = r.counter(
            f"{NAMESPACE}_voluntary_disruption_decisions_by_nodepool_total",
            "Number of disruption decisions performed by nodepool. Labeled by nodepool name, disruption "
            "decision, reason, and consolidation type.",
            ["nodepool", "decision", "reason", "consolidation_type"],
        )
        self.terminate_first_decisions = r.counter(
            f"{NAMESPACE}_voluntary_disruption_terminate_first_decisions_total",
            "Number of terminate-first disruption decisions performed. Labeled by nodepool name, reason, "
            "and why the replacement couldn't be staged first.",
            ["nodepool", "reason", "terminate_first_reason"],
        )
        self.disruption_eligible_nodes = r.gauge(
            f"{NAMESPACE}_voluntary_disruption_eligible_nodes",
            "Number of nodes eligible for disruption by Karpenter. Labeled by disruption reason.",
            ["reason"],
        )
        self.disruption_evaluation_duration = r.histogram(
            f"{NAMESPACE}_voluntary_disruption_decision_evaluation_duration_seconds",
            "Duration of the disruption decision evaluation process in seconds. Labeled by method and "
            "consolidation type.",
            ["reason", "consolidation_type"],
        )
        self.disruption_failed_validations = r.counter(
            f"{NAMESPACE}_voluntary_disruption_failed_validations_total",
            "Number of candidates that were selected for disruption but failed validation. Labeled by "
            "consolidation type.",
            ["consolidation_type"],
        )
        self.disruption_queue_failures = r.counter(
            f"{NAMESPACE}_voluntary_disruption_queue_failures_total",
            "The number of times that an enqueued disruption decision failed. Labeled by disruption method.",
            ["decision", "reason", "consolidation_type"],
        )
        self.nodepools_allowed_disruptions = r.gauge(
            f"{NAMESPACE}_nodepools_allowed_disruptions",
            "The number of nodes for a given NodePool that can be concurrently disrupting at a point in "
            "time. Labeled by NodePool. Note that allowed disruptions can change very rapidly, as new "
            "nodes may be created and others may be deleted at any point.",
            ["nodepool", "reason"],
        )
        self.nodepools_nodes_consuming_budgets = r.gauge(
            f"{NAMESPACE}_nodepools_nodes_consuming_budgets",
            "The number of nodes consuming the budget of a nodepool at a point in time. Labeled by NodePool.",
            ["nodepool", "reason"],
        )
        # Drain (pkg/controllers/node/termination in Karpenter), recorded by karpy.controllers.termination.
        self.nodes_drained = r.counter(
            f"{NAMESPACE}_nodes_drained_total",
            "The total number of nodes drained by Karpenter",
            ["nodepool"],
        )
        self.pods_drained = r.counter(
            f"{NAMESPACE}_pods_drained_total",
            "The total number of pods drained during node termination by Karpenter, labeled by reason",
            ["reason"],
        )
        self.pods_eviction_requests = r.counter(
            f"{NAMESPACE}_pods_eviction_requests_total",
            "The total number of pod eviction requests made by Karpenter, labeled by response code",
            ["code"],
        )
        # Pods waiting (pkg/controllers/metrics/pod in Karpenter): one series per pod not yet bound or
        # running, its age, gone once it is.
        self.pods_unstarted_time = r.gauge(
            f"{NAMESPACE}_pods_unstarted_time_seconds",
            "The time from pod creation until the pod is running.",
            ["name", "namespace"],
        )
        self.pods_unbound_time = r.gauge(
            f"{NAMESPACE}_pods_unbound_time_seconds",
            "The time from pod creation until the pod is bound.",
            ["name", "namespace", "dynamic_resources"],
        )
        # Pods timed from when provisioning first found them a place (Karpenter's alpha
        # pods_provisioning_* metrics) or first saw them (scheduling_decision, undecided).
        self.pods_provisioning_bound_duration = r.histogram(
            f"{NAMESPACE}_pods_provisioning_bound_duration_seconds",
            "The time from when Karpenter first thinks the pod can schedule until it binds. Note: this "
            "calculated from a point in memory, not by the pod creation timestamp.",
            ["dynamic_resources"],
        )
        self.pods_provisioning_unbound_time = r.gauge(
            f"{NAMESPACE}_pods_provisioning_unbound_time_seconds",
            "The time from when Karpenter first thinks the pod can schedule until it binds. Note: this "
            "calculated from a point in memory, not by the pod creation timestamp.",
            ["name", "namespace", "dynamic_resources"],
        )
        self.pods_provisioning_startup_duration = r.histogram(
            f"{NAMESPACE}_pods_provisioning_startup_duration_seconds",
            "The time from when Karpenter first thinks the pod can schedule until the pod is running. Note: "
            "this calculated from a point in memory, not by the pod creation timestamp.",
        )
        self.pods_provisioning_unstarted_time = r.gauge(
            f"{NAMESPACE}_pods_provisioning_unstarted_time_seconds",
            "The time from when Karpenter first thinks the pod can schedule until the pod is running. Note: "
            "this calculated from a point in memory, not by the pod creation timestamp.",
            ["name", "namespace"],
        )
        self.pods_scheduling_undecided_time = r.gauge(
            f"{NAMESPACE}_pods_provisioning_scheduling_undecided_time_seconds",
            "The time from when Karpenter has seen a pod without making a scheduling decision for the pod. "
            "Note: this calculated from a point in memory, not by the pod creation timestamp.",
            ["name", "namespace"],
        )
        self.pods_scheduling_decision_duration = r.histogram(
            f"{NAMESPACE}_pods_scheduling_decision_duration_seconds",
            "The time it takes for Karpenter to first try to schedule a pod after it's been seen.",
        )
        self.pod_scheduling = PodSchedulingTimes()
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
        self.reconcile_errors = r.counter(
            "controller_runtime_reconcile_errors_total",
            "Total number of reconciliation errors per controller",
            ["controller"],
        )
        # controller-runtime's work queue metrics (karpy.operator.operator_metrics), the Runtime's
        # queue observer in karpy run.
        self.work_queues = WorkQueueMetrics(r)
        # operatorpkg's status condition metrics, kept by the status controllers (karpy.controllers.metering).
        self.status_conditions = StatusConditionMetrics(r, STATUS_KINDS)
        # karpy's own: what the disruption commands carried out save, $/h (Karpenter has no such
        # metric; karpy's dashboard charts it), by the NodePool of the nodes removed.
        self.disruption_savings = r.counter(
            "karpy_voluntary_disruption_savings_per_hour_total",
            "Hourly cost, in the cloud provider's units, that the consolidation commands carried out "
            "removed: the price of the nodes deleted less that of their replacements. Labeled by nodepool.",
            ["nodepool"],
        )
        # karpy's own: karpy.controllers.launchloop.
        self.launch_loops = r.counter(
            "karpy_provisioning_launch_loops_total",
            "Workloads whose pending pods provisioning stopped launching nodes for: the nodes"
            " launched for them came up ready and kept none of them, again and again.",
        )
        self._scheduling_ids: dict[str, str] = {}
        # The reason each NodeClaim a disruption command deletes was disrupted for (Karpenter reads it off
        # the NodeClaim's DisruptionReason condition, which karpy puts only on the nodes it reboots).
        self._disruption_reasons: dict[str, str] = {}
        self._simulations = 0

    def reconciled(self, controller: str, seconds: float, result: str) -> None:
        """One reconcile (the Runtime's observer in ``karpy run``)."""
        self.reconcile_time.labels(controller=controller).observe(seconds)
        self.reconcile_total.labels(controller=controller, result=result).inc()
        if result == "error":
            self.reconcile_errors.labels(controller=controller).inc()
        else:
            # Present at 0, as controller-runtime's.
            self.reconcile_errors.labels(controller=controller).inc(0)

    def cluster_state(self, synced: bool, now: float) -> None:
        """Whether the caches are synced, and for how long they have not been (0 once they are)."""
        self.cluster_state_synced.set(1 if synced else 0)
        if synced:
            self._unsynced_since = None
        elif self._unsynced_since is None:
            self._unsynced_since = now
        since = self._unsynced_since
        self.cluster_state_unsynced_time.set(0.0 if since is None else now - since)

    # -- NodeClaims ------------------------------------------------------------

    def nodeclaim_created(self, nodeclaim: NodeClaim, reason: str = REASON_PROVISIONED) -> None:
        self.nodeclaims_created.labels(
            reason=reason_label(reason), nodepool=nodeclaim.nodepool, min_values_relaxed="false"
        ).inc()

    def nodeclaim_terminated(self, nodeclaim: NodeClaim) -> None:
        self.nodeclaims_terminated.labels(
            nodepool=nodeclaim.nodepool, capacity_type=nodeclaim.capacity_type, zone=nodeclaim.zone
        ).inc()

    def nodeclaim_disrupted(self, nodeclaim: NodeClaim, reason: str, consolidation_policy: str = "") -> None:
        """A NodeClaim deleted on purpose; a consolidation names its NodePool's ``consolidation_policy``."""
        self.nodeclaims_disrupted.labels(**_disrupted_labels(nodeclaim, reason, consolidation_policy)).inc()

    def pods_disrupted(
        self, nodeclaim: NodeClaim, reason: str, pods: int, consolidation_policy: str = ""
    ) -> None:
        """The ``pods`` that have to move as ``nodeclaim`` is disrupted for ``reason``; a consolidation
        names its NodePool's ``consolidation_policy`` (as written: ``WhenEmptyOrUnderutilized``)."""
        self.pods_disruption_initiated.labels(
            **_disrupted_labels(nodeclaim, reason, consolidation_policy)
        ).inc(pods)

    def consolidation_move(
        self, decision: str, nodepool: str, policy: str, score: float | None, score_decision: str = ""
    ) -> None:
        """A NodePool's part of a consolidation move (``decision``: approved or rejected); a Balanced
        pool's ``score`` is observed under its own ``score_decision`` (the move's when not given)."""
        self.consolidation_moves.labels(decision=decision, nodepool=nodepool, policy=policy).inc()
        if score is not None:
            self.consolidation_score.labels(
                decision=score_decision or decision, nodepool=nodepool, policy=policy
            ).observe(score)

    def nodeclaim_repaired(self, nodeclaim: NodeClaim, condition: str, drain_bound: float | None) -> None:
        """A NodeClaim node repair disrupted, by the drain bound repair applied (None: the NodeClaim's own):
        forceful without a drain, eventual with a bound, graceful with none (Karpenter's modes)."""
        bound = drain_bound if drain_bound is not None else nodeclaim.spec.termination_grace_period
        mode = termination_mode(bound)
        self.nodeclaims_unhealthy_disrupted.labels(
            condition=reason_label(condition),
            nodepool=nodeclaim.nodepool,
            capacity_type=nodeclaim.capacity_type,
            image_id=nodeclaim.status.image_id,
            termination_mode=mode,
        ).inc()

    def reboot_ended(self, result: str, seconds: float, recovery_seconds: float | None = None) -> None:
        """A reboot's terminal ``result``, ``seconds`` after it was requested; a successful one's
        ``recovery_seconds`` from its issuance until the node rejoined."""
        self.node_reboots.labels(result=result).inc()
        self.node_reboot_duration.labels(result=result).observe(seconds)
        if recovery_seconds is not None:
            self.node_reboot_recovery_duration.observe(recovery_seconds)

    def instance_terminated(self, nodeclaim: NodeClaim, seconds: float) -> None:
        """A NodeClaim's instance gone, ``seconds`` after its termination began."""
        self.instance_termination_duration.labels(nodepool=nodeclaim.nodepool).observe(seconds)

    # -- voluntary disruption --------------------------------------------------

    def disruption_evaluated(
        self, reason: str, consolidation_type: str, eligible: int, seconds: float
    ) -> None:
        """One disruption method evaluated over ``eligible`` candidates."""
        self.disruption_eligible_nodes.labels(reason=reason_label(reason)).set(eligible)
        self.disruption_evaluation_duration.labels(
            reason=reason_label(reason), consolidation_type=consolidation_type
        ).observe(seconds)

    def disruption_budget(self, nodepool: str, reason: str, allowed: int, consuming: int) -> None:
        """A NodePool's budget for ``reason``: the nodes it lets be disrupting at once, and those that are."""
        labels = {"nodepool": nodepool, "reason": reason_label(reason)}
        self.nodepools_allowed_disruptions.labels(**labels).set(allowed)
        self.nodepools_nodes_consuming_budgets.labels(**labels).set(consuming)

    def disruption_performed(
        self,
        decision: str,
        reason: str,
        consolidation_type: str,
        nodepools: Iterable[str],
        savings_per_hour: float = 0.0,
    ) -> None:
        """A disruption command carried out (``decision``: ``delete``, ``replace``, ``terminate-first``
        or ``reboot``)."""
        labels = {
            "decision": decision,
            "reason": reason_label(reason),
            "consolidation_type": consolidation_type,
        }
        self.disruption_decisions.labels(**labels).inc()
        pools = sorted(set(nodepools))
        for nodepool in pools:
            self.disruption_decisions_by_nodepool.labels(nodepool=nodepool, **labels).inc()
        if savings_per_hour > 0 and pools:
            for nodepool in pools:
                self.disruption_savings.labels(nodepool=nodepool).inc(savings_per_hour / len(pools))

    def terminate_first_performed(self, reason: str, why: str, nodepools: Iterable[str]) -> None:
        """A terminate-first command carried out (``why``: no-reserved-capacity or static-at-limit)."""
        for nodepool in sorted(set(nodepools)):
            self.terminate_first_decisions.labels(
                nodepool=nodepool, reason=reason_label(reason), terminate_first_reason=why
            ).inc()

    def disrupting(self, nodeclaims: Iterable[str], reason: str) -> None:
        """NodeClaims a disruption command deletes, for their drain's ``karpenter_pods_drained_total``."""
        for name in nodeclaims:
            self._disruption_reasons[name] = reason

    def drain_reason(self, nodeclaim: str) -> str | None:
        """The disruption reason :meth:`disrupting` noted for ``nodeclaim`` (None: none)."""
        return self._disruption_reasons.get(nodeclaim)

    def drain_finished(self, nodeclaim: str) -> None:
        self._disruption_reasons.pop(nodeclaim, None)

    def disruption_queue_failed(
        self, decision: str, reason: str, consolidation_type: str, failed_launches: int
    ) -> None:
        """A command rolled back after it started, ``failed_launches`` of its replacements not up."""
        self.disruption_queue_failures.labels(
            decision=decision, reason=reason_label(reason), consolidation_type=consolidation_type
        ).inc(failed_launches)

    def disruption_validation_failed(self, consolidation_type: str, candidates: int) -> None:
        self.disruption_failed_validations.labels(consolidation_type=consolidation_type).inc(candidates)

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
        running = (controller, scheduling_id)
        with self.registry.lock:
            started = self._running[running] = self.wall_clock()
            self.unfinished_work.labels(controller=controller, scheduling_id=scheduling_id).set(0)
        try:
            yield simulation
        finally:
            with self.registry.lock:
                del self._running[running]
                self.unfinished_work.remove(controller=controller, scheduling_id=scheduling_id)
            self.scheduling_duration.labels(controller=controller).observe(self.wall_clock() - started)
            depth.set(simulation.unscheduled)
            self.unschedulable_pods.labels(controller=controller).set(simulation.unscheduled)

    def _refresh_unfinished_work(self) -> None:
        """At a scrape: how long each simulation still running has been (Karpenter's series exists
        only while one runs)."""
        now = self.wall_clock()
        for (controller, scheduling_id), started in self._running.items():
            self.unfinished_work.labels(controller=controller, scheduling_id=scheduling_id).set(now - started)

    def pending_pods_by_zone(self, controller: str, zones: Iterable[str]) -> None:
        """The pending pods of ``controller``'s latest simulation by effective zone (one value per
        pod: a zone, ``flexible`` or ``none``), replacing its previous simulation's series."""
        counts: dict[str, int] = {}
        for zone in zones:
            counts[zone] = counts.get(zone, 0) + 1
        self.pending_pods_by_effective_zone.replace(
            (({"zone": zone}, count) for zone, count in counts.items()), controller=controller
        )

    def pods_decided(self, placed: Iterable[str], unplaced: Iterable[str], now: float) -> None:
        """A provisioning simulation's verdict on pending pods (namespace/name): the first verdict on
        each is timed from when it was seen; a place found is remembered until it is lost."""
        times = self.pod_scheduling
        if not times.kept:
            return
        for key, found in [*((key, True) for key in placed), *((key, False) for key in unplaced)]:
            if found:
                times.schedulable.setdefault(key, now)
            else:
                times.schedulable.pop(key, None)
            if key not in times.decided:
                times.decided[key] = now
                acked = times.acked.get(key)
                if acked is not None:
                    self.pods_scheduling_decision_duration.observe(now - acked)

    # -- NodePools -------------------------------------------------------------

    def nodepool_observed(self, nodepool: NodePool, usage: ResourceAmounts) -> None:
        """Record a NodePool's usage (its NodeClaims' capacity and count) and its limits."""
        set_per_resource(self.nodepools_usage, nodepool.name, usage)
        set_per_resource(self.nodepools_limit, nodepool.name, nodepool.limits)

    def nodepool_gone(self, name: str) -> None:
        self.nodepools_usage.remove_matching(nodepool=name)
        self.nodepools_limit.remove_matching(nodepool=name)
        self.nodepools_cost.remove_matching(nodepool=name)
