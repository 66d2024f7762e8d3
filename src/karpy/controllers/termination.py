"""Termination: what happens between "delete this NodeClaim" and its removal.

A NodeClaim carries the ``karpenter.sh/termination`` finalizer, so deleting
it only marks it. This controller then, step by step and idempotently:

1. taints the node ``karpenter.sh/disrupted:NoSchedule`` so nothing new lands;
2. drains it through the Eviction API in Karpenter's (and graceful node
   shutdown's) order, each group gone before the next is evicted:
   non-critical pods, non-critical DaemonSet pods, critical pods (system
   priority classes), critical DaemonSet pods. Terminal pods, mirror pods and
   pods that tolerate the ``karpenter.sh/disrupted`` taint are left to go
   with the node, as in Karpenter; an eviction a PodDisruptionBudget
   refuses (429) is retried later, never forced, until the NodeClaim's
   ``terminationGracePeriod`` (if set) runs out, or the earlier deadline node
   repair stamps as ``karpenter.sh/nodeclaim-termination-timestamp``: then what is left is
   deleted and the node terminated without waiting for it. A pod annotated
   ``karpenter.sh/do-not-disrupt`` is not evicted at all until then, as in
   Karpenter v1 (its forceful-expiration design: drain at once, "but respect
   pod do-not-disrupt or PDB blocking pods until the node's
   TerminationGracePeriod is reached"); without a grace period its node waits
   for it, whoever asked for the deletion. A drain that cannot finish
   is given up when the node is not Ready and the cloud says its instance no
   longer exists (a spot instance reclaimed before a budget let its pods go,
   say), as Karpenter does: no kubelet is left to stop those pods, so waiting
   for the budget would keep a dead Node, and the pods bound to it, forever;
   removing the Node lets the pods be garbage collected and replaced. A
   Ready node, or a lookup that fails otherwise, keeps the drain waiting.
   A pod still there :data:`STUCK_TERMINATING_AFTER` seconds past its
   deletion timestamp (which the API server sets to the deletion's time plus
   the pod's grace period) is not waited for, as in Karpenter: its kubelet is
   gone (a stopped instance, say), so nothing will ever remove it before its
   Node goes;
3. deletes the instance in the cloud and marks the NodeClaim
   ``InstanceTerminating`` (from then on it counts toward neither its
   NodePool's size nor its disruption budgets, as in Karpenter);
4. deletes the Node and lifts karpy's finalizer from it, then, once the Node
   is gone (another finalizer may hold it), lifts the NodeClaim's, as
   Karpenter's NodeClaim waits for its Node.

A crash after any step is harmless: the next reconcile finds the step done
and goes on with the next.

A Node deleted directly (``kubectl delete node``) keeps karpy's finalizer
too, so it stays Terminating until karpy acts: as in Karpenter v1, its
NodeClaim is deleted, and the NodeClaim's termination above drains the
node, terminates the instance and lifts the finalizer. A Node with the
finalizer and no NodeClaim (left from a NodeClaim deleted by hand with its
finalizer removed) has nothing to drain through: its finalizer is lifted at
once, with a warning. Both are found on start too, since a restarted
controller sees every Node as added.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from karpy.api.conditions import TRUE, set_condition
from karpy.api.core import Node, Pod
from karpy.api.nodeclaim import (
    CONDITION_DISRUPTION_REASON,
    CONDITION_INSTANCE_TERMINATING,
    TERMINATION_FINALIZER,
    NodeClaim,
)
from karpy.api.taints import DISRUPTED_TAINT_KEY, NO_SCHEDULE, Taint
from karpy.cloud.provider import CloudProvider, CloudProviderError, NodeClaimNotFoundError
from karpy.logs import about
from karpy.operator.cluster import (
    EVENT_NORMAL,
    EVENT_WARNING,
    Clock,
    Cluster,
    EvictionRefusedError,
    NotFoundError,
)
from karpy.operator.karpenter_metrics import Metrics
from karpy.operator.runtime import Watch

log = logging.getLogger("karpy.termination")

DISRUPTED_TAINT = Taint(DISRUPTED_TAINT_KEY, NO_SCHEDULE)
CRITICAL_PRIORITY_CLASSES = ("system-cluster-critical", "system-node-critical")
EVICTION_RETRY = 5.0
DRAIN_POLL = 1.0
# How often a terminated NodeClaim looks again for its Node held by another finalizer (a watch
# on the Node's removal wakes it sooner).
NODE_GONE_POLL = 10.0
# A pod still there this long after its deletion timestamp is stuck terminating (Karpenter's minute).
STUCK_TERMINATING_AFTER = 60.0
# karpenter_pods_drained_total's reason for a NodeClaim no disruption method deleted (Karpenter's).
FORCEFUL_TERMINATION_REASON = "Forceful Termination"
# Keys of deleted Nodes, beside the NodeClaim names the controller's other keys are.
NODE_KEY_PREFIX = "node/"


def remove_node(cluster: Cluster, node: Node) -> None:
    """Delete ``node`` and lift karpy's termination finalizer, once its instance is terminated."""
    current = cluster.node(node.name)
    if current is None:
        return
    try:
        if not current.metadata.deleting:
            cluster.delete(current)
            current = cluster.node(node.name)
        if current is not None and TERMINATION_FINALIZER in current.metadata.finalizers:
            remaining = tuple(f for f in current.metadata.finalizers if f != TERMINATION_FINALIZER)
            cluster.update(current.with_changes(metadata=current.metadata.with_changes(finalizers=remaining)))
    except NotFoundError:
        return


def _stuck_terminating(pod: Pod, now: float) -> bool:
    """Marked for deletion a minute past its deletion timestamp and still there: nobody stops it."""
    deleted_at = pod.metadata.deletion_timestamp
    return deleted_at is not None and now > deleted_at + STUCK_TERMINATING_AFTER


def drain_reason(nodeclaim: NodeClaim, metrics: Metrics) -> str:
    """The ``reason`` of ``karpenter_pods_drained_total``, as Karpenter's: the NodeClaim's disruption
    reason (its condition's, or the one the disruption command noted), or forceful termination when
    nothing disrupted it on purpose."""
    condition = nodeclaim.condition(CONDITION_DISRUPTION_REASON)
    if condition is not None and condition.is_true:
        return condition.reason
    return metrics.drain_reason(nodeclaim.name) or FORCEFUL_TERMINATION_REASON


def drain_order(pod: Pod) -> int:
    """Karpenter's drain groups: non-critical, non-critical DaemonSet, critical, critical DaemonSet."""
    critical = pod.spec.priority_class_name in CRITICAL_PRIORITY_CLASSES
    return 2 * critical + pod.is_daemonset_pod


def drained_with_the_node(pod: Pod) -> bool:
    """A pod the drain does not wait for: a mirror pod (its kubelet's, not the API's to delete)
    or one that tolerates the disrupted taint (it asked to stay to the end)."""
    mirror = pod.metadata.controller is not None and pod.metadata.controller.kind == "Node"
    return mirror or any(toleration.tolerates(DISRUPTED_TAINT) for toleration in pod.spec.tolerations)


class Terminator:
    name = "termination"

    def __init__(
        self, cluster: Cluster, cloud: CloudProvider, clock: Clock, *, metrics: Metrics | None = None
    ) -> None:
        self.cluster = cluster
        self.cloud = cloud
        self.clock = clock
        self.metrics = metrics if metrics is not None else Metrics()
        # The NodeClaims whose drain finished, counted once in karpenter_nodes_drained_total.
        self._drained: set[str] = set()

    def watches(self) -> list[Watch]:
        return [
            Watch("NodeClaim", self._on_nodeclaim),
            Watch("Pod", self._on_pod),
            Watch("Node", self._on_node),
        ]

    def _on_node(self, old: object | None, new: object | None) -> Iterable[str]:
        if new is None:
            return self._on_node_gone(old)
        if (
            isinstance(new, Node)
            and new.metadata.deleting
            and TERMINATION_FINALIZER in new.metadata.finalizers
        ):
            return [NODE_KEY_PREFIX + new.name]
        return []

    def _on_nodeclaim(self, old: object | None, new: object | None) -> Iterable[str]:
        if isinstance(new, NodeClaim) and new.metadata.deleting:
            return [new.name]
        if new is None and isinstance(old, NodeClaim) and old.status.node_name:
            # A NodeClaim gone before its Node (its finalizer lifted by someone else): a Node
            # already deleted has no drain left to wait for, so its own finalizer must go too.
            return [NODE_KEY_PREFIX + old.status.node_name]
        return []

    def _node_deleted(self, name: str) -> float | None:
        """A Node deleted by someone else: delete its NodeClaim, whose termination drains it."""
        node = self.cluster.node(name)
        if (
            node is None
            or not node.metadata.deleting
            or TERMINATION_FINALIZER not in node.metadata.finalizers
        ):
            return None
        claim = next(
            (
                c
                for c in self.cluster.nodeclaims()
                if c.status.node_name == name
                or (node.provider_id and c.status.provider_id == node.provider_id)
            ),
            None,
        )
        if claim is None:
            log.warning(
                "node %s was deleted and has no NodeClaim: lifting its finalizer without a drain",
                name,
                extra=about(node, controller=self.name),
            )
            remove_node(self.cluster, node)
            return None
        if claim.metadata.deleting:
            return None
        log.info(
            "node %s was deleted: deleting its NodeClaim %s, which drains it",
            name,
            claim.name,
            extra=about(claim, node, controller=self.name),
        )
        self.cluster.record_event(
            node, EVENT_NORMAL, "Deleting", f"Deleting NodeClaim {claim.name}: the Node was deleted"
        )
        try:
            self.cluster.delete(claim)
        except NotFoundError:
            # Gone from the server, not yet from the cache: look again once the cache has caught up.
            return DRAIN_POLL
        return None

    def _on_node_gone(self, old: object | None) -> list[str]:
        # A Node another finalizer held is gone at last: its NodeClaim's termination finishes.
        if isinstance(old, Node):
            return [
                claim.name
                for claim in self.cluster.nodeclaims()
                if claim.metadata.deleting and claim.status.node_name == old.name
            ]
        return []

    def _on_pod(self, old: object | None, new: object | None) -> Iterable[str]:
        # A pod leaving a draining node moves the drain on.
        if new is None and isinstance(old, Pod) and old.node_name:
            for claim in self.cluster.nodeclaims():
                if claim.metadata.deleting and claim.status.node_name == old.node_name:
                    return [claim.name]
        return []

    def reconcile(self, key: str) -> float | None:
        if key.startswith(NODE_KEY_PREFIX):
            return self._node_deleted(key.removeprefix(NODE_KEY_PREFIX))
        nodeclaim = self.cluster.nodeclaim(key)
        if nodeclaim is None or not nodeclaim.metadata.deleting:
            return None
        node = self.cluster.node(nodeclaim.status.node_name) if nodeclaim.status.node_name else None
        if node is not None:
            wait = self._drain(nodeclaim, node)
            if wait is not None and not self._instance_gone(nodeclaim, node):
                return wait
        instance_deleted = False
        if nodeclaim.status.provider_id:
            try:
                self.cloud.delete(nodeclaim)
            except NodeClaimNotFoundError:
                pass
            instance_deleted = True
            if not nodeclaim.is_true(CONDITION_INSTANCE_TERMINATING):
                conditions = set_condition(
                    nodeclaim.status.conditions, CONDITION_INSTANCE_TERMINATING, TRUE, self.clock.now()
                )
                nodeclaim = self.cluster.update(nodeclaim.with_status(conditions=conditions))
        if node is not None:
            remove_node(self.cluster, node)
            if self.cluster.node(node.name) is not None:
                return NODE_GONE_POLL  # someone else's finalizer holds the Node: the NodeClaim waits
        if TERMINATION_FINALIZER in nodeclaim.metadata.finalizers:
            remaining = tuple(f for f in nodeclaim.metadata.finalizers if f != TERMINATION_FINALIZER)
            self.cluster.update(nodeclaim.with_metadata(finalizers=remaining))
            self.metrics.nodeclaim_terminated(nodeclaim)
            terminating = nodeclaim.condition(CONDITION_INSTANCE_TERMINATING)
            if instance_deleted and terminating is not None:
                # The providers' delete returns once the instance is going; from the first one on.
                self.metrics.instance_terminated(
                    nodeclaim, self.clock.now() - terminating.last_transition_time
                )
            self._drained.discard(nodeclaim.name)
            self.metrics.drain_finished(nodeclaim.name)
        log.info(
            "terminated nodeclaim %s", nodeclaim.name, extra=about(nodeclaim, node, controller=self.name)
        )
        self.cluster.record_event(
            nodeclaim, EVENT_NORMAL, "Terminated", "Instance deleted, NodeClaim removed"
        )
        return None

    def _drain(self, nodeclaim: NodeClaim, node: Node) -> float | None:
        """Evict what must go; ``None`` once the node is drained."""
        if DISRUPTED_TAINT not in node.taints:
            node = self.cluster.update(node.with_changes(taints=(*node.taints, DISRUPTED_TAINT)))
        now = self.clock.now()
        remaining = [
            pod
            for pod in self.cluster.pods_on_node(node.name)
            if not pod.is_terminal and not _stuck_terminating(pod, now) and not drained_with_the_node(pod)
        ]
        if not remaining:
            if nodeclaim.name not in self._drained:
                self._drained.add(nodeclaim.name)
                self.metrics.nodes_drained.labels(nodepool=nodeclaim.nodepool).inc()
            return None
        deadline = nodeclaim.termination_deadline
        if deadline is None and nodeclaim.spec.termination_grace_period is not None:
            deadline = now + nodeclaim.spec.termination_grace_period  # no deletion timestamp read yet
        forced = deadline is not None and now >= deadline
        # Past the deadline every group goes at once, as in Karpenter.
        first = min(drain_order(pod) for pod in remaining)
        refused = False
        for pod in remaining:
            if (drain_order(pod) != first and not forced) or pod.metadata.deleting:
                continue
            if pod.do_not_disrupt_at(now) and not forced:
                refused = True  # it holds the node until the grace period runs out
                continue
            try:
                if forced:
                    self.cluster.delete(pod)
                else:
                    self.cluster.evict(pod)
            except EvictionRefusedError as error:
                refused = True
                self.metrics.pods_eviction_requests.labels(code="429").inc()
                self.cluster.record_event(pod, EVENT_WARNING, "FailedDraining", str(error))
                continue
            except NotFoundError:
                if not forced:
                    self.metrics.pods_eviction_requests.labels(code="404").inc()
                continue
            if not forced:
                self.metrics.pods_eviction_requests.labels(code="200").inc()
            self.metrics.pods_drained.labels(reason=drain_reason(nodeclaim, self.metrics)).inc()
        if forced:
            # Past terminationGracePeriod the node goes whatever is still on it, as in Karpenter:
            # a pod whose own shutdown (a long pre-stop hook) runs on goes with it.
            return None
        return EVICTION_RETRY if refused else DRAIN_POLL

    def _instance_gone(self, nodeclaim: NodeClaim, node: Node) -> bool:
        """Whether a node that is not Ready has lost its instance (its drain is then given up)."""
        provider_id = node.provider_id or nodeclaim.status.provider_id
        if node.ready or not provider_id:
            return False
        try:
            self.cloud.get(provider_id)
        except NodeClaimNotFoundError:
            log.info(
                "node %s is not ready and its instance %s is gone: removing it without draining",
                node.name,
                provider_id,
                extra=about(nodeclaim, node, controller=self.name),
            )
            return True
        except CloudProviderError:
            return False
        return False
