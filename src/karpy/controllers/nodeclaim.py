"""NodeClaim lifecycle: Launched → Registered → Initialized (= Ready).

One reconcile moves a NodeClaim as far as the world lets it:

- **launch**: the cloud provider creates the instance; the NodeClaim takes
  the launched type's labels, capacity and allocatable, its providerID and
  the provider's annotations (the node class hash drift is judged by).
  A provider whose launches take seconds (AWS) raises
  ``LaunchInProgressError`` and launches in the background: that is not a
  failure (no Event, no warning); the NodeClaim is reconciled again when the
  provider posts ``LaunchFinished`` with its name, and otherwise only at its
  launch deadline.
  An insufficient-capacity error deletes the NodeClaim (with an Event): its
  pods become pending again and the next provisioning pass picks another
  offering, which the cloud now reports unavailable.
- **register**: the Node with the same providerID has joined; karpy syncs the
  NodeClaim's labels, annotations and taints onto it, takes off the
  ``karpenter.sh/unregistered`` taint and puts on the termination finalizer.
- **initialize**: the Node is Ready, its startup taints are gone and every
  resource the NodeClaim asked for is allocatable.

Reconciles of different NodeClaims touch different objects (each its own
NodeClaim and Node), so ``karpy run`` runs up to
:data:`LIFECYCLE_CONCURRENCY` of them at once (``max_concurrent_reconciles``,
:mod:`karpy.operator.runtime`): one at a time, each launch, registration and
initialization waited its round trips to the API server behind the one
before, and a provisioning pass's hundred NodeClaims took 16 s to launch where
Karpenter, whose lifecycle controller reconciles many at once, took 2 s.

Liveness, as in Karpenter: a NodeClaim not launched within 5 minutes of its
creation, or not registered within 15 minutes of launch, is deleted, so a
broken launch or instance does not hold pods hostage. A second controller
here records each NodeClaim's last pod event (a pod bound to or leaving its
node); consolidateAfter is measured from it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable

from karpy.api.conditions import FALSE, TRUE, set_condition
from karpy.api.core import Node, Pod
from karpy.api.meta import OwnerReference
from karpy.api.nodeclaim import (
    CONDITION_INITIALIZED,
    CONDITION_LAUNCHED,
    CONDITION_READY,
    CONDITION_REGISTERED,
    LABEL_INITIALIZED,
    LABEL_REGISTERED,
    TERMINATION_FINALIZER,
    NodeClaim,
)
from karpy.api.nodepool import API_VERSION_V1
from karpy.api.taints import UNREGISTERED_TAINT_KEY, known_ephemeral
from karpy.cloud.provider import (
    LAUNCH_FINISHED,
    CloudProvider,
    CloudProviderError,
    InsufficientCapacityError,
    LaunchInProgressError,
    NodeClassNotReadyError,
)
from karpy.controllers.state import node_of
from karpy.logs import about
from karpy.operator.cluster import (
    EVENT_NORMAL,
    EVENT_WARNING,
    Clock,
    Cluster,
)
from karpy.operator.karpenter_metrics import (
    REASON_INSUFFICIENT_CAPACITY,
    REASON_LAUNCH_TIMEOUT,
    REASON_NODECLASS_NOT_READY,
    REASON_REGISTRATION_TIMEOUT,
    Metrics,
)
from karpy.operator.runtime import Watch

log = logging.getLogger("karpy.nodeclaim")

REGISTRATION_TTL = 15 * 60.0
LAUNCH_TTL = 5 * 60.0
LAUNCH_RETRY = 5.0
RECHECK = 1.0
# NodeClaims the real loop launches, registers or initializes at once (the cluster writer's
# own bound on concurrent creates is the same).
LIFECYCLE_CONCURRENCY = 16
# lastPodEventTime is written at most this often per NodeClaim (Karpenter's dedupeTimeout).
POD_EVENT_DEDUPE_SECONDS = 10.0


def _nodeclaim_names(old: object | None, new: object | None) -> Iterable[str]:
    obj = new if new is not None else old
    return [obj.name] if isinstance(obj, NodeClaim) else []


def _launch_finished(old: object | None, new: object | None) -> Iterable[str]:
    # A provider's background launch ended; the change's object is the NodeClaim's name.
    return [new] if isinstance(new, str) else []


class NodeClaimLifecycle:
    name = "nodeclaim.lifecycle"
    max_concurrent_reconciles = LIFECYCLE_CONCURRENCY

    def __init__(
        self, cluster: Cluster, cloud: CloudProvider, clock: Clock, *, metrics: Metrics | None = None
    ) -> None:
        self.cluster = cluster
        self.cloud = cloud
        self.clock = clock
        self.metrics = metrics if metrics is not None else Metrics()

    def watches(self) -> list[Watch]:
        return [
            Watch("NodeClaim", _nodeclaim_names),
            Watch("Node", self._on_node),
            Watch(LAUNCH_FINISHED, _launch_finished),
        ]

    def _on_node(self, old: object | None, new: object | None) -> Iterable[str]:
        node = new if new is not None else old
        if not isinstance(node, Node) or not node.provider_id:
            return []
        return [claim.name for claim in self.cluster.nodeclaims_with_provider_id(node.provider_id)]

    def reconcile(self, key: str) -> float | None:
        nodeclaim = self.cluster.nodeclaim(key)
        if nodeclaim is None or nodeclaim.metadata.deleting:
            return None
        now = self.clock.now()
        if not nodeclaim.launched:
            created = nodeclaim.metadata.creation_timestamp or now
            if now - created >= LAUNCH_TTL:
                self.cluster.record_event(
                    nodeclaim,
                    EVENT_WARNING,
                    "FailedLaunch",
                    f"Not launched within {LAUNCH_TTL / 60:.0f}m; deleting the NodeClaim",
                )
                self.cluster.delete(nodeclaim)
                self.metrics.nodeclaim_disrupted(nodeclaim, REASON_LAUNCH_TIMEOUT)
                return None
            try:
                launched = self._launch(nodeclaim, now)
            except LaunchInProgressError:
                # LAUNCH_FINISHED wakes this NodeClaim; the deadline is the backstop.
                return max(0.0, created + LAUNCH_TTL - now)
            except CloudProviderError:
                return min(LAUNCH_RETRY, max(0.0, created + LAUNCH_TTL - now))
            if launched is None:
                return None
            nodeclaim = launched
        if not nodeclaim.registered:
            node = node_of(self.cluster, nodeclaim)
            if node is None:
                launched_at = nodeclaim.condition(CONDITION_LAUNCHED)
                since = launched_at.last_transition_time if launched_at else now
                if now - since >= REGISTRATION_TTL:
                    self.cluster.record_event(
                        nodeclaim,
                        EVENT_WARNING,
                        "FailedRegistration",
                        f"Node did not register within {REGISTRATION_TTL / 60:.0f}m; deleting the NodeClaim",
                    )
                    self.cluster.delete(nodeclaim)
                    self.metrics.nodeclaim_disrupted(nodeclaim, REASON_REGISTRATION_TIMEOUT)
                    return None
                # The Node's arrival wakes this up earlier; this is the liveness deadline.
                return since + REGISTRATION_TTL - now
            registered, node = self._register(nodeclaim, node, now)
            if (
                registered.initialized
                or registered.rebooting
                or self._initialization_blocker(registered, node)
            ):
                self._write_registered(registered, node)
                return None  # a Node change wakes us up
            # Registered and ready to initialize at once: one status write for both, judged on
            # the Node as registration patched it (the cache may not have it yet).
            self._initialize(registered, node, now, registered_now=True)
            return None
        if not nodeclaim.initialized and not nodeclaim.rebooting:
            # A rebooting node is initialized again by the reboot controller, once it is back.
            node = node_of(self.cluster, nodeclaim)
            if node is None:
                return RECHECK
            waiting = self._initialization_blocker(nodeclaim, node)
            if waiting:
                return None  # a Node change wakes us up
            nodeclaim = self._initialize(nodeclaim, node, now)
        return None

    def _launch(self, nodeclaim: NodeClaim, now: float) -> NodeClaim | None:
        try:
            launched = self.cloud.create(nodeclaim)
        except LaunchInProgressError:
            raise  # not a failure: the launch runs in the background
        except InsufficientCapacityError as error:
            self._give_up(nodeclaim, error, "InsufficientCapacityError", "insufficient capacity")
            self.metrics.nodeclaim_disrupted(nodeclaim, REASON_INSUFFICIENT_CAPACITY)
            return None
        except NodeClassNotReadyError as error:
            # As Karpenter's launch: a NodeClaim whose node class is missing or not Ready is
            # deleted, not retried until its launch deadline; its pods are provisioned again.
            self._give_up(nodeclaim, error, "NodeClassNotReady", "node class not ready")
            self.metrics.nodeclaim_disrupted(nodeclaim, REASON_NODECLASS_NOT_READY)
            return None
        except CloudProviderError as error:
            self.cluster.record_event(nodeclaim, EVENT_WARNING, "LaunchFailed", str(error))
            conditions = set_condition(
                nodeclaim.status.conditions, CONDITION_LAUNCHED, FALSE, now, "LaunchFailed", str(error)
            )
            # Writing an unchanged status would wake this controller again at once.
            if conditions != nodeclaim.status.conditions:
                self.cluster.update(nodeclaim.with_status(conditions=conditions))
            log.warning(
                "nodeclaim %s: launch failed: %s",
                nodeclaim.name,
                error,
                extra=about(nodeclaim, controller=self.name),
            )
            raise
        # As Karpenter's launch: what the provider resolved, then a label for each requirement
        # the scheduler narrowed to a value (a custom topology key such as a capacity-spread
        # domain: the Node must carry it for kube-scheduler to count it), then the NodeClaim's
        # own labels, each over the one before.
        labels = {
            **launched.metadata.labels,
            **nodeclaim.requirement_set().labels(),
            **nodeclaim.metadata.labels,
        }
        conditions = set_condition(nodeclaim.status.conditions, CONDITION_LAUNCHED, TRUE, now)
        conditions = set_condition(
            conditions, CONDITION_READY, FALSE, now, "NotRegistered", "Node not registered"
        )
        # The provider's annotations (the node class hash it launched from) over the NodeClaim's.
        annotations = {**nodeclaim.metadata.annotations, **launched.metadata.annotations}
        updated = dataclasses.replace(
            nodeclaim,
            metadata=nodeclaim.metadata.with_changes(labels=labels, annotations=annotations),
            status=dataclasses.replace(
                nodeclaim.status,
                provider_id=launched.status.provider_id,
                image_id=launched.status.image_id,
                capacity=dict(launched.status.capacity),
                allocatable=dict(launched.status.allocatable),
                conditions=conditions,
            ),
        )
        stored = self.cluster.update(updated)
        log.info(
            "launched nodeclaim %s: %s %s in %s (%s)",
            stored.name,
            stored.instance_type,
            stored.capacity_type,
            stored.zone,
            stored.status.provider_id,
            extra=about(stored, controller=self.name),
        )
        self.cluster.record_event(
            stored,
            EVENT_NORMAL,
            "Launched",
            f"Launched {stored.instance_type} ({stored.capacity_type}) in {stored.zone}",
        )
        return stored

    def _give_up(self, nodeclaim: NodeClaim, error: Exception, event_reason: str, what: str) -> None:
        """Delete a NodeClaim whose launch the cloud refused for good, with an Event and a warning."""
        self.cluster.record_event(nodeclaim, EVENT_WARNING, event_reason, str(error))
        log.warning(
            "nodeclaim %s: %s: %s", nodeclaim.name, what, error, extra=about(nodeclaim, controller=self.name)
        )
        self.cluster.delete(nodeclaim)

    def _register(self, nodeclaim: NodeClaim, node: Node, now: float) -> tuple[NodeClaim, Node]:
        """The Node registered (patched), and the NodeClaim's registered status, not written yet."""
        labels = dict(node.metadata.labels)
        labels.update(nodeclaim.metadata.labels)
        labels[LABEL_REGISTERED] = "true"
        # Karpenter's registration copies the NodeClaim's annotations too, each over the Node's own.
        annotations = {**node.metadata.annotations, **nodeclaim.metadata.annotations}
        taints = [taint for taint in node.taints if taint.key != UNREGISTERED_TAINT_KEY]
        for taint in (*nodeclaim.spec.taints, *nodeclaim.spec.startup_taints):
            if taint not in taints:
                taints.append(taint)
        # The NodeClaim's annotations too (its NodePool template's among them), as Karpenter's registration.
        annotations = {**node.metadata.annotations, **nodeclaim.metadata.annotations}
        finalizers = node.metadata.finalizers
        if TERMINATION_FINALIZER not in finalizers:
            finalizers = (*finalizers, TERMINATION_FINALIZER)
        registered_node = self.cluster.update(
            node.with_changes(
                metadata=node.metadata.with_changes(
                    labels=labels,
                    annotations=annotations,
                    finalizers=finalizers,
                    owner_references=_owned_by(node.metadata.owner_references, nodeclaim),
                ),
                taints=tuple(taints),
            )
        )
        conditions = set_condition(nodeclaim.status.conditions, CONDITION_REGISTERED, TRUE, now)
        conditions = set_condition(
            conditions, CONDITION_READY, FALSE, now, "NotInitialized", "Node not initialized"
        )
        return nodeclaim.with_status(node_name=node.name, conditions=conditions), registered_node

    def _write_registered(self, nodeclaim: NodeClaim, node: Node) -> NodeClaim:
        stored = self.cluster.update(nodeclaim)
        self.cluster.record_event(stored, EVENT_NORMAL, "Registered", f"Node {node.name} registered")
        return stored

    def _initialization_blocker(self, nodeclaim: NodeClaim, node: Node) -> str:
        if not node.ready:
            return "node not ready"
        for taint in nodeclaim.spec.startup_taints:
            if taint in node.taints:
                return f"startup taint {taint} still present"
        # As Karpenter's initialization does: the node lifecycle controller takes its not-ready
        # taint off a moment after the kubelet reports Ready. Until then the scheduling snapshot
        # must keep treating the taint as one that goes (it does so only for NodeClaims not yet
        # initialized): counted as blocking, a provisioning pass in that moment found no room
        # for the node's own pods and launched another node for them.
        ephemeral = known_ephemeral(node.taints)
        if ephemeral is not None:
            return f"known ephemeral taint {ephemeral} still present"
        for resource, amount in nodeclaim.spec.requests.items():
            if amount > 0 and node.allocatable.get(resource, 0) <= 0:
                return f"resource {resource} not registered"
        return ""

    def _initialize(
        self, nodeclaim: NodeClaim, node: Node, now: float, *, registered_now: bool = False
    ) -> NodeClaim:
        labels = dict(node.metadata.labels)
        labels[LABEL_INITIALIZED] = "true"
        self.cluster.update(node.with_changes(metadata=node.metadata.with_changes(labels=labels)))
        conditions = set_condition(nodeclaim.status.conditions, CONDITION_INITIALIZED, TRUE, now)
        conditions = set_condition(conditions, CONDITION_READY, TRUE, now)
        stored = self.cluster.update(nodeclaim.with_status(conditions=conditions))
        if registered_now:
            self.cluster.record_event(stored, EVENT_NORMAL, "Registered", f"Node {node.name} registered")
        self.cluster.record_event(stored, EVENT_NORMAL, "Initialized", f"Node {node.name} initialized")
        return stored


class NodeClaimPodEvents:
    """Keeps ``status.lastPodEventTime``: when a pod last landed on or left the node.

    Each reconcile writes the NodeClaims of one node, so ``karpy run`` runs several at once
    too: one at a time, a scale-out's binds queued a write per node (0.15 s each on a busy
    API server) on the loop's thread, ahead of the provisioning pass for the pods left over.

    As in Karpenter, DaemonSet pods are no pod events (a node holding only them is empty) and
    the time is written at most once per :data:`POD_EVENT_DEDUPE_SECONDS` per NodeClaim: a
    node filling up binds a pod every few hundred milliseconds. Karpenter drops the events
    inside that window, so a node can look quiet up to ten seconds early; here they are
    written when the window ends, so ``consolidateAfter`` never starts before the last one.
    """

    name = "nodeclaim.podevents"
    max_concurrent_reconciles = LIFECYCLE_CONCURRENCY

    def __init__(self, cluster: Cluster, clock: Clock) -> None:
        self.cluster = cluster
        self.clock = clock

    def watches(self) -> list[Watch]:
        return [Watch("Pod", self._on_pod)]

    def _on_pod(self, old: object | None, new: object | None) -> Iterable[str]:
        if any(isinstance(pod, Pod) and pod.is_daemonset_pod for pod in (old, new)):
            return []
        before = old.node_name if isinstance(old, Pod) else ""
        after = new.node_name if isinstance(new, Pod) else ""
        if isinstance(new, Pod) and new.is_terminal and not (isinstance(old, Pod) and old.is_terminal):
            return [after] if after else []
        if before == after:
            return []
        return [name for name in (before, after) if name]

    def reconcile(self, key: str) -> float | None:
        node = self.cluster.node(key)
        if node is None:
            return None
        now = self.clock.now()
        wait: float | None = None
        for claim in self.cluster.nodeclaims_on_node(key):
            if claim.metadata.deleting:
                continue
            last = claim.status.last_pod_event_time
            # The tolerance: a requeue at the window's end must count as out of it.
            if last is not None and now - last < POD_EVENT_DEDUPE_SECONDS - 1e-6:
                remaining = last + POD_EVENT_DEDUPE_SECONDS - now
                wait = remaining if wait is None else min(wait, remaining)
                continue
            self.cluster.update(claim.with_status(last_pod_event_time=now))
        return wait


def _owned_by(owners: tuple[OwnerReference, ...], nodeclaim: NodeClaim) -> tuple[OwnerReference, ...]:
    """The Node's owner references with its NodeClaim among them, as Karpenter's registration adds it."""
    uid = nodeclaim.metadata.uid
    if not uid or any(_refers_to(owner, nodeclaim) for owner in owners):
        return owners
    owner = OwnerReference(API_VERSION_V1, NodeClaim.kind, nodeclaim.name, uid, block_owner_deletion=True)
    return (*owners, owner)


def _refers_to(owner: OwnerReference, nodeclaim: NodeClaim) -> bool:
    return (
        owner.api_version == API_VERSION_V1
        and owner.kind == NodeClaim.kind
        and owner.uid == nodeclaim.metadata.uid
    )
