"""Provisioning: from pending pods to NodeClaims.

Pending pods arrive one by one but are best packed together, so the
provisioner batches them, as Karpenter does: a batch closes when no new
pending pod has arrived for ``batch_idle`` seconds (1 s by default) or when it
has been open ``batch_max`` seconds (10 s), whichever comes first. Then it
takes a snapshot, asks the scheduling core for a plan and creates one
NodeClaim per new bin, nominating the pods that bin is for.

The pass is idempotent: the next one sees the NodeClaims it created as
in-flight capacity, so pods that are still pending (the nodes have not
registered yet) fit there and no second NodeClaim is launched for them.

A batch opens when a pod becomes pending, when capacity goes away, when a
NodeClaim initializes with pods planned for it still pending, and when
kube-scheduler binds a pod into room a pass planned for pods still pending:
kube-scheduler spreads pods by least allocation, not as the plan packed them,
so the pods it then cannot place would otherwise wait, nominated to capacity
that is full, until something unrelated happens. The pass after such a bind
sees the room as it really is; pods that merely are not bound yet still fit
where they were planned, and nothing is launched for them. (Karpenter's pod
controller re-triggers on every update of a pending pod, kube-scheduler's
Unschedulable condition included, to the same end.) A batch opens too when a
PersistentVolumeClaim, PersistentVolume, StorageClass or CSINode changes while
the last pass left a pod that mounts claims unschedulable: what its volumes
allow (their zone, the driver they count against) may have changed with it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from karpy.api.conditions import find_condition
from karpy.api.core import Pod
from karpy.api.meta import ObjectMeta, OwnerReference
from karpy.api.nodeclaim import TERMINATION_FINALIZER, NodeClaim, NodeClaimSpec
from karpy.api.nodecost import DEFAULT_NODE_OVERHEAD_COST
from karpy.api.nodeoverlay import CAPACITY_OVERLAY_APPLIED, PRICE_OVERLAY_APPLIED
from karpy.api.nodepool import (
    API_VERSION_V1,
    CONDITION_NODECLASS_READY,
    CONDITION_READY,
    NODEPOOL_HASH_ANNOTATION,
    NODEPOOL_HASH_VERSION,
    NODEPOOL_HASH_VERSION_ANNOTATION,
    NodePool,
    status_only_change,
)
from karpy.api.quantity import ResourceAmounts, format_amount
from karpy.api.requirements import LABEL_NODEPOOL
from karpy.api.schedulerconfig import SchedulerConfiguration
from karpy.cloud.provider import CloudProvider
from karpy.controllers.capacitybuffer import BUFFER_ROOM, BufferRoom
from karpy.controllers.launchloop import LaunchLoopGuard
from karpy.controllers.nodeoverlay import OVERLAYS_EVALUATED
from karpy.controllers.refusals import NodePoolRefusals, refusal_message
from karpy.controllers.state import PoolTypesCache, scheduling_snapshot
from karpy.logs import about, named
from karpy.operator.cluster import (
    EVENT_NORMAL,
    EVENT_WARNING,
    Clock,
    Cluster,
    InvalidError,
    NotLeaderError,
)
from karpy.operator.karpenter_metrics import Metrics
from karpy.operator.reads import STORAGE_KINDS
from karpy.operator.runtime import Watch
from karpy.scheduling.buffers import is_virtual
from karpy.scheduling.policy import MIN_VALUES_RELAXED_ANNOTATION, SchedulingPolicy
from karpy.scheduling.solver import DEFAULT_POLICY, NewNodeClaim, Plan

log = logging.getLogger("karpy.provisioning")

BATCH_KEY = "batch"


@dataclass(frozen=True, slots=True)
class ProvisioningSettings:
    """The provisioner's settings, and the per-node cost the disruption controller prices nodes with too."""

    batch_idle: float = 1.0
    """Seconds without a new pending pod after which the batch closes (BATCH_IDLE_DURATION)."""

    batch_max: float = 10.0
    """Seconds after which the batch of pending pods closes at most (BATCH_MAX_DURATION)."""

    node_overhead_cost: float = DEFAULT_NODE_OVERHEAD_COST
    """$/h every node costs beyond its instance, volumes and address (KARPY_NODE_OVERHEAD_COST); the
    disruption controller prices nodes with the same figure (:mod:`karpy.api.nodecost`)."""

    scheduling: SchedulingPolicy = DEFAULT_POLICY
    """MIN_VALUES_POLICY and PREFERENCE_POLICY; disruption's simulations plan with them too."""

    scheduler_config: SchedulerConfiguration | None = None
    """The cluster's kube-scheduler default topology spread constraints (SCHEDULER_CONFIG), which
    pods without constraints of their own are planned with (and a drifted node's pods replanned)."""


@dataclass(slots=True)
class ProvisioningResult:
    """What the last pass decided, kept for explanations and the simulator's report."""

    time: float = 0.0
    created: list[str] = field(default_factory=list)
    unschedulable: dict[str, str] = field(default_factory=dict)


class Provisioner:
    name = "provisioning"

    def __init__(
        self,
        cluster: Cluster,
        cloud: CloudProvider,
        clock: Clock,
        *,
        settings: ProvisioningSettings | None = None,
        metrics: Metrics | None = None,
        refusals: NodePoolRefusals | None = None,
        buffers: BufferRoom | None = None,
    ) -> None:
        self.cluster = cluster
        # The CapacityBuffers' virtual pods, planned after the pending pods every pass (None: gate off).
        self.buffers = buffers
        self.cloud = cloud
        self.clock = clock
        self.settings = settings or ProvisioningSettings()
        self.metrics = metrics if metrics is not None else Metrics()
        # NodePools whose NodeClaims the API server refused (shared with the NodePool status controller).
        self.refusals = refusals if refusals is not None else NodePoolRefusals()
        self._batch_start: float | None = None
        self._batch_last = 0.0
        self.last = ProvisioningResult()
        self._pool_types = PoolTypesCache(self.settings.node_overhead_cost)
        self.passes = 0
        # Stops launching for pods the nodes launched for them keep not taking.
        self.loop_guard = LaunchLoopGuard(cluster, clock, self.metrics.launch_loops)
        # The capacity (a NodeClaim's or a Node's name) the last pass planned each pending pod
        # for, and the other way round: a bind into room planned for others reopens a batch.
        self._planned_for: dict[str, str] = {}
        self._planned_on: dict[str, set[str]] = {}

    # -- triggers ----------------------------------------------------------

    def watches(self) -> list[Watch]:
        return [
            Watch("Pod", self._on_pod),
            Watch("Node", self._on_capacity_change),
            Watch("NodeClaim", self._on_capacity_change),
            Watch("NodePool", self._on_nodepool),
            # The CapacityBuffers' virtual pods changed (karpy.controllers.capacitybuffer).
            *([Watch(BUFFER_ROOM, lambda old, new: self.trigger())] if self.buffers is not None else []),
            # The NodeOverlays were evaluated (karpy.controllers.nodeoverlay): prices and pools changed.
            Watch(OVERLAYS_EVALUATED, self._on_overlays),
            *(Watch(kind, self._on_storage) for kind in STORAGE_KINDS),
        ]

    def trigger(self) -> list[str]:
        now = self.clock.now()
        if self._batch_start is None:
            self._batch_start = now
        self._batch_last = now
        return [BATCH_KEY]

    @property
    def batch_open(self) -> bool:
        """Whether a batch is open: a pass is due once it closes."""
        return self._batch_start is not None

    def _on_pod(self, old: object | None, new: object | None) -> Iterable[str]:
        self.loop_guard.on_pod(old, new)
        newly_pending = isinstance(new, Pod) and new.is_provisionable()
        if newly_pending and not (isinstance(old, Pod) and old.is_provisionable()):
            assert isinstance(new, Pod)
            self.metrics.pod_scheduling.ack(new.key, self.clock.now())
            return self.trigger()
        if not isinstance(new, Pod) or new.is_terminal:
            if isinstance(old, Pod):
                self._forget_plan(old.key)  # gone: no room is planned for it any more
            return ()
        just_bound = bool(new.spec.node_name) and not (isinstance(old, Pod) and old.spec.node_name)
        if just_bound and self._took_planned_room(new):
            return self.trigger()
        return ()

    def _took_planned_room(self, pod: Pod) -> bool:
        """Whether ``pod``, just bound, landed in capacity the last pass planned for pods still pending
        (and not for itself): those may no longer fit there."""
        planned = self._forget_plan(pod.key)
        node_name = pod.spec.node_name
        capacity = {node_name, *(claim.name for claim in self.cluster.nodeclaims_on_node(node_name))}
        if planned in capacity:
            return False
        return any(self._planned_on.get(name) for name in capacity)

    def _plan_for(self, pod_key: str, capacity: str) -> None:
        self._planned_for[pod_key] = capacity
        self._planned_on.setdefault(capacity, set()).add(pod_key)

    def _forget_plan(self, pod_key: str) -> str | None:
        capacity = self._planned_for.pop(pod_key, None)
        if capacity is not None:
            pods = self._planned_on[capacity]
            pods.discard(pod_key)
            if not pods:
                del self._planned_on[capacity]
        return capacity

    def _on_capacity_change(self, old: object | None, new: object | None) -> Iterable[str]:
        self.loop_guard.on_nodeclaim(old, new)
        # Capacity going away (a node or NodeClaim deleted) may strand pods.
        if new is None and self.cluster.pending_pods():
            return self.trigger()
        if self.buffers is not None and self.buffers.lost(old, new):
            return self.trigger()  # buffer room went with it: find it again
        if self._launch_freed_limit(old, new) and self.cluster.pending_pods():
            return self.trigger()
        if self._initialized_under_planned_pods(old, new):
            return self.trigger()
        return ()

    def _initialized_under_planned_pods(self, old: object | None, new: object | None) -> bool:
        """Whether a NodeClaim the last pass planned pods for has just initialized with them still pending.

        kube-scheduler binds them within moments when they fit; when they do not (the node came
        up smaller than its type, or with room taken), the next pass sees its real room."""
        if not isinstance(new, NodeClaim) or not new.initialized:
            return False
        if isinstance(old, NodeClaim) and old.initialized:
            return False
        return bool(self._planned_on.get(new.name) or self._planned_on.get(new.status.node_name))

    def _launch_freed_limit(self, old: object | None, new: object | None) -> bool:
        """Whether a NodeClaim of a pool with limits has just launched.

        Until it launches, a NodeClaim counts against its pool's limits at the
        largest type it lists; once launched, at the type the cloud chose,
        which is often smaller. Pods refused at the limit meanwhile would
        otherwise wait for an unrelated change before they are tried again.
        """
        if not isinstance(new, NodeClaim) or not new.launched:
            return False
        if isinstance(old, NodeClaim) and old.launched:
            return False
        nodepool = self.cluster.nodepool(new.nodepool)
        return nodepool is not None and bool(nodepool.limits)

    def _on_storage(self, old: object | None, new: object | None) -> Iterable[str]:
        # Pods refused for their volumes (a claim bound in a zone no pool offers, say) stay pending
        # unchanged, so only this change can tell that they may fit now.
        for key in self.last.unschedulable:
            namespace, _, name = key.partition("/")
            pod = self.cluster.pod(namespace, name)
            if pod is not None and pod.spec.claim_names and pod.is_provisionable():
                return self.trigger()
        return ()

    def _on_overlays(self, old: object | None, new: object | None) -> Iterable[str]:
        # A pool awaiting its first evaluation may take the pods left pending meanwhile.
        return self.trigger() if self.cluster.pending_pods() else ()

    def _on_nodepool(self, old: object | None, new: object | None) -> Iterable[str]:
        if status_only_change(old, new) and _readiness(old) == _readiness(new):
            return ()  # the pool's own bookkeeping: it offers nothing new to pending pods
        self.loop_guard.release()  # what the changed pool launches may take the pods it held
        # A pool that became Ready (its node class appeared, say) may take pods left pending.
        return self.trigger() if self.cluster.pending_pods() else ()

    # -- reconcile ---------------------------------------------------------

    def reconcile(self, key: str) -> float | None:
        now = self.clock.now()
        if self._batch_start is None and self.refusals.retry_due(now) and self.cluster.pending_pods():
            self.trigger()  # a refused NodePool is due to be tried again
        if self._batch_start is None:
            return self.refusals.retry_in(now)
        closes_at = min(
            self._batch_last + self.settings.batch_idle, self._batch_start + self.settings.batch_max
        )
        if now < closes_at:
            return closes_at - now
        self._batch_start = None
        self.provision()
        if self._batch_start is not None:
            return self.settings.batch_idle  # a refusal left pods to place without their pool
        return self._next_pass_in()

    def _next_pass_in(self) -> float | None:
        """Seconds to the next pass due without a trigger: a refused pool's retry, or the end of
        the loop guard's first hold (its pods may still be pending), whichever comes first."""
        now = self.clock.now()
        retry_in = self.refusals.retry_in(now)
        release = self.loop_guard.next_release()
        if release is None or (retry_in is not None and retry_in < release - now):
            return retry_in  # the hold is looked at again after the retry's pass
        self._batch_start = self._batch_last = release
        return release + self.settings.batch_idle - now

    def provisionable_pods(self) -> list[Pod]:
        return [pod for pod in self.cluster.pending_pods() if pod.is_provisionable()]

    def schedule(
        self, pods: list[Pod], unavailable: dict[str, str] | None = None
    ) -> tuple[Plan, dict[str, NodePool]]:
        """Plan placements for ``pods`` against the current cluster (no writes).

        ``unavailable``: NodePools left out, with why (the pods that only they
        could take are told so).
        """
        snapshot = scheduling_snapshot(
            self.cluster,
            self.cloud,
            pool_types=self._pool_types,
            unavailable=unavailable or {},
            policy=self.settings.scheduling,
            scheduler_config=self.settings.scheduler_config,
        )
        return snapshot.solve(self._still_pending(pods), effective_zones=True), snapshot.nodepools

    def _still_pending(self, pods: list[Pod]) -> list[Pod]:
        """``pods`` less those bound (or gone) since they were read, now that the nodes are read.

        ``karpy run`` reads from caches that its watches change meanwhile. A pod
        kube-scheduler bound between the read of the pending pods and the
        snapshot's read of the nodes would be counted twice: to be placed, and
        on its node, taking the room it would be placed in; with the nodes full
        the pass launched a NodeClaim for it that stayed empty. Read again now,
        a pod bound before its node was read is on its node only; one bound
        since counts nowhere, so the pass sees a little more room than there
        is, and the bind of a pod it then plans there reopens a pass.
        """
        still: list[Pod] = []
        for pod in pods:
            if is_virtual(pod):
                still.append(pod)
                continue
            current = self.cluster.pod(pod.metadata.namespace, pod.metadata.name)
            if current is not None and current.is_provisionable():
                still.append(pod)
        return still

    def provision(self) -> ProvisioningResult:
        self.passes += 1
        pods, held = self.loop_guard.admit(self.provisionable_pods())
        result = ProvisioningResult(time=self.clock.now(), unschedulable=held)
        virtual = self.buffers.pods() if self.buffers is not None else []
        if not pods and not virtual:
            self.last = result
            return result
        refused = self.refusals.unavailable(self.cluster.nodepools(), result.time)
        with self.metrics.scheduling(self.name, len(pods) + len(virtual)) as simulation:
            plan, nodepools = self.schedule([*pods, *virtual], refused)
            simulation.left(len(plan.unschedulable))
        # The verdict on the real pods (a capacity buffer's virtual pods are never seen pending).
        real = {pod.key for pod in pods}
        self.metrics.pending_pods_by_zone(
            self.name, (zone for key, zone in plan.effective_zones.items() if key in real)
        )
        placed = [*plan.existing, *(pod.key for new in plan.new_nodeclaims for pod in new.pods)]
        self.metrics.pods_decided(
            (key for key in placed if key in real),
            (key for key in plan.unschedulable if key in real),
            result.time,
        )
        # Created together (a remote writer sends them at once); each failure is raised once the
        # NodeClaims that were created are accounted for, so a retry does not launch them again.
        created = self.cluster.create_all(
            [build_nodeclaim(nodepools[new.nodepool], new) for new in plan.new_nodeclaims]
        )
        failures = [
            outcome
            for outcome in created
            if isinstance(outcome, Exception) and not isinstance(outcome, InvalidError)
        ]
        self._account_refusals(plan.new_nodeclaims, created, nodepools)
        if self.buffers is not None:
            self.buffers.after_pass(plan, list(zip(plan.new_nodeclaims, created, strict=True)))
        self._planned_for.clear()
        self._planned_on.clear()
        for pod_key, capacity in plan.existing.items():
            self._plan_for(pod_key, capacity)
        for new, nodeclaim in zip(plan.new_nodeclaims, created, strict=True):
            if not isinstance(nodeclaim, NodeClaim):
                continue
            for pod in new.pods:
                self._plan_for(pod.key, nodeclaim.name)
            result.created.append(nodeclaim.name)
            self.loop_guard.record(nodeclaim, [pod for pod in new.pods if not is_virtual(pod)])
            self.metrics.nodeclaim_created(nodeclaim)
            log.info(
                "created nodeclaim %s for %d pods (%s; %d instance types from $%.4f/h with per-node costs)",
                nodeclaim.name,
                len(new.pods),
                describe_requests(new.requests),
                len(new.instance_types),
                new.price,
                extra=about(nodeclaim, NodePool=named(new.nodepool), controller=self.name),
            )
            self.cluster.record_event(
                nodeclaim,
                EVENT_NORMAL,
                "Launching",
                f"NodeClaim for {len(new.pods)} pods: {describe_requests(new.requests)}",
            )
            for pod in new.pods:
                if is_virtual(pod):
                    continue  # never created: nothing to tell
                self.cluster.record_event(
                    pod, EVENT_NORMAL, "Nominated", f"Pod should schedule on: nodeclaim/{nodeclaim.name}"
                )
        if failures:
            # A lost leadership first: it ends the loop, where any other failure is retried.
            raise next((error for error in failures if isinstance(error, NotLeaderError)), failures[0])
        pods_by_key = {pod.key: pod for pod in pods}
        unschedulable = {key: reason for key, reason in plan.unschedulable.items() if key in pods_by_key}
        for pod_key, reason in sorted(unschedulable.items()):
            self.cluster.record_event(
                pods_by_key[pod_key], EVENT_WARNING, "FailedScheduling", f"Failed to schedule pod, {reason}"
            )
        result.unschedulable = {**held, **unschedulable}
        self.last = result
        return result

    def _account_refusals(
        self,
        planned: list[NewNodeClaim],
        created: list[NodeClaim | Exception],
        nodepools: dict[str, NodePool],
    ) -> None:
        """Record the NodePools whose NodeClaims the server refused as invalid; clear those it took.

        A refusal fails its pool only (see :mod:`karpy.controllers.refusals`): one
        warning line, no traceback; the pool's pods are planned again at once
        without it, so those another pool can take get a node.
        """
        refused: dict[str, tuple[InvalidError, list[Pod]]] = {}
        for new, outcome in zip(planned, created, strict=True):
            if isinstance(outcome, NodeClaim):
                self.refusals.accepted(nodepools[new.nodepool])
            elif isinstance(outcome, InvalidError):
                refused.setdefault(new.nodepool, (outcome, []))[1].extend(new.pods)
        now = self.clock.now()
        for name, (error, pods) in sorted(refused.items()):
            pool = nodepools[name]
            refusal = self.refusals.refuse(pool, refusal_message(error), now)
            log.warning(
                "nodepool %s: the API server refused its NodeClaim for %d pods: %s;"
                " not provisioning from it until it changes (next try in %.0fs)",
                name,
                len(pods),
                refusal.message,
                refusal.retry_at - now,
                extra=about(pool, controller=self.name),
            )
        if refused and self.cluster.pending_pods():
            self.trigger()


def _readiness(pool: object | None) -> tuple[str, ...]:
    """The pool's Ready and NodeClassReady, status and message.

    The message too: a pool whose class goes from "not resolved yet" to naming the
    selector that matches nothing stays False, and its pending pods are told why only
    by a pass after the change.
    """
    if not isinstance(pool, NodePool):
        return ()
    found = (
        find_condition(pool.status.conditions, kind) for kind in (CONDITION_READY, CONDITION_NODECLASS_READY)
    )
    return tuple(
        part for condition in found if condition is not None for part in (condition.status, condition.message)
    )


def describe_requests(requests: ResourceAmounts) -> str:
    return ", ".join(
        f"{name}: {format_amount(name, amount)}" for name, amount in sorted(requests.items()) if amount
    )


def build_nodeclaim(nodepool: NodePool, new: NewNodeClaim) -> NodeClaim:
    template = nodepool.template
    labels = dict(template.labels)
    labels[LABEL_NODEPOOL] = nodepool.name
    annotations = dict(template.annotations)
    annotations[NODEPOOL_HASH_ANNOTATION] = nodepool.template_hash()
    annotations[NODEPOOL_HASH_VERSION_ANNOTATION] = NODEPOOL_HASH_VERSION
    # Karpenter's marks of a NodeClaim whose instance types a NodeOverlay priced or sized.
    if any(instance_type.price_overlaid for instance_type in new.instance_types):
        annotations[PRICE_OVERLAY_APPLIED] = "true"
    if any(instance_type.capacity_overlaid for instance_type in new.instance_types):
        annotations[CAPACITY_OVERLAY_APPLIED] = "true"
    # Karpenter's mark on every NodeClaim it plans: whether MIN_VALUES_POLICY=BestEffort relaxed it.
    annotations[MIN_VALUES_RELAXED_ANNOTATION] = "true" if new.min_values_relaxed else "false"
    # Owned by its NodePool, as Karpenter's are: deleting the NodePool then deletes its
    # NodeClaims (the garbage collector's cascade), which drain and terminate as usual.
    owners = (
        (
            OwnerReference(
                API_VERSION_V1, "NodePool", nodepool.name, nodepool.metadata.uid, block_owner_deletion=True
            ),
        )
        if nodepool.metadata.uid
        else ()
    )
    return NodeClaim(
        metadata=ObjectMeta(
            name="",
            generate_name=f"{nodepool.name}-",
            labels=labels,
            annotations=annotations,
            finalizers=(TERMINATION_FINALIZER,),
            owner_references=owners,
        ),
        spec=NodeClaimSpec(
            node_class_ref=template.node_class_ref,
            requirements=tuple(new.requirements),
            requests=dict(new.requests),
            taints=template.taints,
            startup_taints=template.startup_taints,
            expire_after=template.expire_after,
            termination_grace_period=template.termination_grace_period,
        ),
    )
