"""The reboot lifecycle: a NodeClaim node repair asked to reboot, rebooted in place (Karpenter v1.15).

Node repair commits a reboot by setting the NodeClaim's ``Rebooting``
condition True (reason ``RebootRequested``) and, when the policy bounds the
drain, the ``karpenter.sh/reboot-termination-grace-period`` annotation. This
controller then, step by step and idempotently:

1. **fences** the Node (``karpenter.sh/rebooting:NoSchedule``): nothing new
   lands, while the scheduling snapshot counts the node's capacity as coming
   back, so the pods the drain moves wait for it instead of new nodes;
2. **drains** it of what can be evicted (not DaemonSet or mirror pods;
   pods do-not-disrupt or a PodDisruptionBudget holds stay and ride the
   reboot), for at least 5 s (late bindings), at most the drain bound (none:
   until done; 0: no drain);
3. **issues** the reboot: records the Node's boot ID
   (``karpenter.sh/reboot-pre-boot-id``) and asks the cloud provider to reboot
   the instance; the NodeClaim's ``Initialized`` turns Unknown (reason
   ``Rebooting``) and the Node loses its ``karpenter.sh/initialized`` label;
   ``Rebooting`` says ``RebootIssued``;
4. **observes** the node come back: a new boot ID lifts the fence, and once
   the Node is Ready again the NodeClaim is initialized again and the reboot
   ends, ``Rebooting`` False ``RebootSucceeded``.

A provider that cannot reboot, a reboot the cloud does not accept within 5
minutes or a node not back within 20 minutes fails the reboot: the fence
comes off and the NodeClaim is deleted (replaced), its drain bounded by the
reboot's, ``Rebooting`` False ``RebootFailed`` and a ``RebootFailed`` Event.
Node repair counts the reboots it committed per NodeClaim; a third is a
replacement instead (:mod:`karpy.disruption.repair`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from karpy.api.conditions import FALSE, TRUE, UNKNOWN, set_condition
from karpy.api.core import Node, Pod
from karpy.api.duration import DurationError, parse_duration
from karpy.api.meta import format_timestamp, parse_timestamp
from karpy.api.nodeclaim import (
    CONDITION_INITIALIZED,
    CONDITION_READY,
    CONDITION_REBOOTING,
    LABEL_INITIALIZED,
    REASON_REBOOTING,
    REBOOT_FAILED,
    REBOOT_ISSUED,
    REBOOT_PRE_BOOT_ID_ANNOTATION,
    REBOOT_REQUESTED,
    REBOOT_SUCCEEDED,
    REBOOT_TERMINATION_GRACE_PERIOD_ANNOTATION,
    TERMINATION_TIMESTAMP_ANNOTATION,
    NodeClaim,
)
from karpy.api.taints import REBOOTING_TAINT
from karpy.cloud.provider import (
    CloudProvider,
    CloudProviderError,
    NodeClaimNotFoundError,
    NodeRebootFailedError,
    NodeRebootNotImplementedError,
)
from karpy.controllers.termination import drained_with_the_node
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

log = logging.getLogger("karpy.reboot")

# How long the node may take to come back once the reboot is issued, and the cloud to accept it.
OBSERVATION_WINDOW = 20 * 60.0
ISSUANCE_TIMEOUT = 5 * 60.0
# The shortest drain: pods bound a moment after the fence went up are still caught.
MIN_DRAIN = 5.0
POLL = 15.0
DRAIN_POLL = 1.0
CACHE_LAG = 0.5


def reboot_drain_bound(nodeclaim: NodeClaim) -> float | None:
    """The reboot's drain bound (None: none); raises ValueError when it cannot be read."""
    written = nodeclaim.metadata.annotations.get(REBOOT_TERMINATION_GRACE_PERIOD_ANNOTATION)
    if written is None:
        return None
    try:
        bound = parse_duration(written)
    except DurationError as error:
        raise ValueError(f"{REBOOT_TERMINATION_GRACE_PERIOD_ANNOTATION}: {error}") from error
    if bound < 0:
        raise ValueError(f"{REBOOT_TERMINATION_GRACE_PERIOD_ANNOTATION} must not be negative")
    return bound


def go_duration(seconds: float) -> str:
    """Seconds as Go's Duration.String writes them (``45s``, ``1m0s``, ``0s``), as Karpenter annotates."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def _older(cached: str, written: str) -> bool:
    """Whether a cached resourceVersion predates one written (etcd's are increasing integers;
    anything else is taken as current)."""
    try:
        return bool(cached and written) and int(cached) < int(written)
    except ValueError:
        return False


def _reboot_times(nodeclaim: NodeClaim) -> tuple[float, float | None]:
    """When the reboot under way was requested (its ``Rebooting`` condition turned True) and, once
    issued, when it was (``Initialized`` turned Unknown), as Karpenter times its reboot metrics."""
    rebooting = nodeclaim.condition(CONDITION_REBOOTING)
    initialized = nodeclaim.condition(CONDITION_INITIALIZED)
    requested = rebooting.last_transition_time if rebooting is not None else 0.0
    issued = None
    if initialized is not None and initialized.status == UNKNOWN:
        issued = initialized.last_transition_time
    return requested, issued


def _drained(pod: Pod) -> bool:
    """A pod the reboot's drain moves (not a DaemonSet's, a mirror pod or one done)."""
    return not (pod.is_terminal or pod.is_daemonset_pod or drained_with_the_node(pod))


class RebootController:
    """Carries a committed reboot through fence, drain, issue and observe to its outcome."""

    name = "nodeclaim.reboot"

    def __init__(
        self, cluster: Cluster, cloud: CloudProvider, clock: Clock, *, metrics: Metrics | None = None
    ) -> None:
        self.metrics = metrics if metrics is not None else Metrics()
        self.cluster = cluster
        self.cloud = cloud
        self.clock = clock
        # When each reboot's first provider call was made (the issuance timeout counts from it).
        self._issuing_since: dict[str, float] = {}
        # The resourceVersion of each NodeClaim as this controller last wrote it: a cached one
        # older than that is a NodeClaim the cache has not caught up with, not to act on again.
        self._written: dict[str, str] = {}

    def watches(self) -> list[Watch]:
        return [Watch("NodeClaim", self._on_nodeclaim), Watch("Node", self._on_node)]

    def _on_nodeclaim(self, old: object | None, new: object | None) -> Iterable[str]:
        if isinstance(new, NodeClaim) and new.rebooting:
            return [new.name]
        return []

    def _on_node(self, old: object | None, new: object | None) -> Iterable[str]:
        # Only fenced Nodes (a new boot ID shows on one): every other Node's heartbeat is no concern.
        fenced = isinstance(new, Node) and REBOOTING_TAINT in new.taints
        if not isinstance(new, Node) or not (
            fenced or (isinstance(old, Node) and REBOOTING_TAINT in old.taints)
        ):
            return []
        for claim in self.cluster.nodeclaims():
            if claim.status.node_name == new.name and claim.rebooting:
                return [claim.name]
        return []

    def reconcile(self, key: str) -> float | None:
        nodeclaim = self.cluster.nodeclaim(key)
        if _older(nodeclaim.metadata.resource_version if nodeclaim else "", self._written.get(key, "")):
            return CACHE_LAG  # the cache is behind this controller's own last write
        if nodeclaim is None or not nodeclaim.rebooting or nodeclaim.metadata.deleting:
            self._issuing_since.pop(key, None)
            self._written.pop(key, None)
            return None
        rebooting = nodeclaim.condition(CONDITION_REBOOTING)
        assert rebooting is not None
        now = self.clock.now()
        node = self.cluster.node(nodeclaim.status.node_name) if nodeclaim.status.node_name else None
        deadline = self._deadline(nodeclaim)
        if node is None:
            if now > (
                deadline if deadline is not None else rebooting.last_transition_time + ISSUANCE_TIMEOUT
            ):
                return self._fail(nodeclaim, None, "the node is gone")
            return POLL
        if deadline is not None and now > deadline:
            issued = rebooting.reason == REBOOT_ISSUED
            why = "the node did not come back in time" if issued else "the reboot was not issued in time"
            return self._fail(nodeclaim, node, why, result="recovery_timeout" if issued else "provider_error")
        if rebooting.reason == REBOOT_REQUESTED:
            return self._requested(nodeclaim, node, now)
        if rebooting.reason == REBOOT_ISSUED:
            return self._issued(nodeclaim, node, now)
        return None

    def _deadline(self, nodeclaim: NodeClaim) -> float | None:
        rebooting = nodeclaim.condition(CONDITION_REBOOTING)
        if rebooting is not None and rebooting.reason == REBOOT_ISSUED:
            initialized = nodeclaim.condition(CONDITION_INITIALIZED)
            if initialized is not None and initialized.status == UNKNOWN:
                return initialized.last_transition_time + OBSERVATION_WINDOW
            return None
        since = self._issuing_since.get(nodeclaim.name)
        return since + ISSUANCE_TIMEOUT if since is not None else None

    def _requested(self, nodeclaim: NodeClaim, node: Node, now: float) -> float | None:
        try:
            bound = reboot_drain_bound(nodeclaim)
        except ValueError as error:
            return self._fail(
                nodeclaim, node, f"invalid reboot request: {error}", replace=False, result="invalid_request"
            )
        node = self._fence(node, fenced=True)
        pre_boot = nodeclaim.metadata.annotations.get(REBOOT_PRE_BOOT_ID_ANNOTATION)
        if pre_boot is not None and node.boot_id != pre_boot:
            return self._to_issued(nodeclaim, node, now)  # it rebooted already (a restart in between)
        if pre_boot is None:
            wait = self._drain(nodeclaim, node, bound, now)
            if wait is not None:
                return wait
            annotations = {**nodeclaim.metadata.annotations, REBOOT_PRE_BOOT_ID_ANNOTATION: node.boot_id}
            nodeclaim = self._write(nodeclaim.with_metadata(annotations=annotations))
        self._issuing_since.setdefault(nodeclaim.name, now)
        rebooting = nodeclaim.condition(CONDITION_REBOOTING)
        assert rebooting is not None
        # Stable across retries, and (as Karpenter's) naming the boot it leaves: a new boot ID is
        # never the one before, whatever the clock's resolution.
        pre = nodeclaim.metadata.annotations.get(REBOOT_PRE_BOOT_ID_ANNOTATION, "")
        operation = f"{nodeclaim.metadata.uid or nodeclaim.name}-{int(rebooting.last_transition_time)}-{pre}"
        try:
            self.cloud.reboot(nodeclaim, operation)
        except NodeRebootNotImplementedError:
            return self._fail(nodeclaim, node, "reboot not implemented by the cloud provider")
        except (NodeClaimNotFoundError, NodeRebootFailedError) as error:
            return self._fail(nodeclaim, node, f"reboot rejected by the cloud provider: {error}")
        except CloudProviderError as error:
            log.warning(
                "reboot of %s not accepted yet: %s", nodeclaim.name, error, extra=about(nodeclaim, node)
            )
            return POLL
        return self._to_issued(nodeclaim, node, now)

    def _drain(self, nodeclaim: NodeClaim, node: Node, bound: float | None, now: float) -> float | None:
        """Evict what may go; None once done (or the bound is up: what is left rides the reboot)."""
        if bound == 0:
            return None
        rebooting = nodeclaim.condition(CONDITION_REBOOTING)
        requested = rebooting.last_transition_time if rebooting is not None else now
        deadline = None if bound is None else requested + max(bound, MIN_DRAIN)
        # What has to go (pods do-not-disrupt keeps stay, and ride the reboot), evicted or going.
        leaving = [
            pod
            for pod in self.cluster.pods_on_node(node.name)
            if _drained(pod) and not pod.do_not_disrupt_at(now)
        ]
        for pod in leaving:
            if pod.metadata.deleting:
                continue
            try:
                self.cluster.evict(pod)
            except EvictionRefusedError as error:
                self.cluster.record_event(pod, EVENT_WARNING, "FailedDraining", str(error))
            except NotFoundError:
                continue
        if leaving and (deadline is None or now < deadline):
            return DRAIN_POLL if deadline is None else min(DRAIN_POLL, deadline - now)
        # Drained, or out of time (what is left rides the reboot); not before the shortest drain.
        floor = requested + MIN_DRAIN
        return floor - now if now < floor else None

    def _to_issued(self, nodeclaim: NodeClaim, node: Node, now: float) -> float:
        rebooting = nodeclaim.condition(CONDITION_REBOOTING)
        message = rebooting.message if rebooting is not None else ""
        conditions = set_condition(
            nodeclaim.status.conditions, CONDITION_REBOOTING, TRUE, now, REBOOT_ISSUED, message
        )
        conditions = set_condition(
            conditions, CONDITION_INITIALIZED, UNKNOWN, now, REASON_REBOOTING, "node is rebooting"
        )
        self._write(nodeclaim.with_status(conditions=conditions))
        self._uninitialize(node)
        return POLL

    def _issued(self, nodeclaim: NodeClaim, node: Node, now: float) -> float | None:
        pre_boot = nodeclaim.metadata.annotations.get(REBOOT_PRE_BOOT_ID_ANNOTATION, "")
        if node.boot_id == pre_boot:
            # Not back yet: the node is not initialized until it is (after a restart too).
            self._uninitialize(node)
            return POLL
        # Back: from here on only forward (a reconcile on a stale NodeClaim must not take the
        # initialized label off a node this reboot already initialized again).
        if REBOOTING_TAINT in node.taints:
            # Karpenter's Event for the new boot, once.
            self.cluster.record_event(
                nodeclaim, EVENT_NORMAL, "RebootObserved", f"Node {node.name} booted again"
            )
        node = self._fence(node, fenced=False)
        if not node.ready:
            return POLL
        requested, issued = _reboot_times(nodeclaim)
        labels = {**node.metadata.labels, LABEL_INITIALIZED: "true"}
        self.cluster.update(node.with_changes(metadata=node.metadata.with_changes(labels=labels)))
        annotations = {
            k: v for k, v in nodeclaim.metadata.annotations.items() if k != REBOOT_PRE_BOOT_ID_ANNOTATION
        }
        nodeclaim = self._write(nodeclaim.with_metadata(annotations=annotations))
        conditions = set_condition(
            nodeclaim.status.conditions,
            CONDITION_REBOOTING,
            FALSE,
            now,
            REBOOT_SUCCEEDED,
            "node rebooted and rejoined the cluster",
        )
        conditions = set_condition(conditions, CONDITION_INITIALIZED, TRUE, now)
        conditions = set_condition(conditions, CONDITION_READY, TRUE, now)
        stored = self._write(nodeclaim.with_status(conditions=conditions))
        self._issuing_since.pop(nodeclaim.name, None)
        self.metrics.reboot_ended("succeeded", now - requested, None if issued is None else now - issued)
        log.info("rebooted node %s in place", node.name, extra=about(stored, node))
        return None

    def _fail(
        self,
        nodeclaim: NodeClaim,
        node: Node | None,
        why: str,
        *,
        replace: bool = True,
        result: str = "provider_error",
    ) -> float | None:
        """End the reboot: lift the fence, and replace the node unless the request itself was bad."""
        if node is not None:
            self._fence(node, fenced=False)
        now = self.clock.now()
        requested, _ = _reboot_times(nodeclaim)
        self._issuing_since.pop(nodeclaim.name, None)
        conditions = set_condition(
            nodeclaim.status.conditions, CONDITION_REBOOTING, FALSE, now, REBOOT_FAILED, why
        )
        nodeclaim = self._write(nodeclaim.with_status(conditions=conditions))
        self.cluster.record_event(nodeclaim, EVENT_WARNING, "RebootFailed", f"Reboot failed: {why}")
        self.metrics.reboot_ended(result, now - requested)
        log.warning("reboot of %s failed: %s", nodeclaim.name, why, extra=about(nodeclaim, node))
        if not replace:
            return None
        try:
            bound = reboot_drain_bound(nodeclaim)
        except ValueError:
            bound = None
        if bound is not None:
            deadline = now + bound
            written = nodeclaim.metadata.annotations.get(TERMINATION_TIMESTAMP_ANNOTATION)
            if not written or parse_timestamp(written) > deadline:
                annotations = {
                    **nodeclaim.metadata.annotations,
                    TERMINATION_TIMESTAMP_ANNOTATION: format_timestamp(deadline),
                }
                nodeclaim = self._write(nodeclaim.with_metadata(annotations=annotations))
        try:
            self.cluster.delete(nodeclaim)
        except NotFoundError:
            pass
        return None

    def _write(self, nodeclaim: NodeClaim) -> NodeClaim:
        stored = self.cluster.update(nodeclaim)
        self._written[stored.name] = stored.metadata.resource_version
        return stored

    def _fence(self, node: Node, *, fenced: bool) -> Node:
        if (REBOOTING_TAINT in node.taints) == fenced:
            return node
        taints = (
            (*node.taints, REBOOTING_TAINT)
            if fenced
            else tuple(t for t in node.taints if t != REBOOTING_TAINT)
        )
        return self.cluster.update(node.with_changes(taints=taints))

    def _uninitialize(self, node: Node) -> Node:
        if LABEL_INITIALIZED not in node.metadata.labels:
            return node
        labels = {k: v for k, v in node.metadata.labels.items() if k != LABEL_INITIALIZED}
        return self.cluster.update(node.with_changes(metadata=node.metadata.with_changes(labels=labels)))


__all__ = ["RebootController", "go_duration", "reboot_drain_bound"]
