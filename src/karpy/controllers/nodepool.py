"""NodePool and node class status: what ``kubectl get nodepools`` shows, and what is wrong.

Karpenter keeps a NodePool's status up to date and users read it first when
nodes do not come: ``kubectl get nodepools -o wide`` prints NODES, READY, CPU
and MEMORY from it. This controller writes the same status:

- ``resources``: the capacity of the pool's NodeClaims summed, with their
  count under ``nodes`` (the NODES column), and ``nodes`` itself;
  :func:`karpy.controllers.state.nodepool_resources` computes it, as it does
  for the ``karpenter_nodepools_usage`` metric, so the two always agree;
- ``ValidationSucceeded``: true for every NodePool karpy reads. A NodePool
  the server holds but karpy cannot read (a CRD laxer than karpy accepted
  ``limits.cpu: -5``) is never provisioned from; it gets
  ``ValidationSucceeded=False`` with the field path and message, and a
  Warning event, instead of only a log line;
- ``NodeClassReady``: whether the node class the pool names exists, is not
  being deleted and is served and ready according to the cloud provider
  (:func:`karpy.controllers.state.node_class_problem`, the same test the
  provisioner applies, so the condition and the pods' FailedScheduling events
  say the same thing), with ``nodeClassObservedGeneration``;
- ``Ready``: true when both are, else false naming the conditions that are not
  (Karpenter's ``UnhealthyDependents``).

Each node class (EC2NodeClass, KWOKNodeClass) gets its own ``Ready``
condition from the cloud provider: ``karpy run``'s kwok provider serves no
EC2NodeClass, the simulated cloud serves both.

Why it is safe to run all the time: a status is written only when it differs
from the stored one, and a condition's ``lastTransitionTime`` moves only when
its status does (:func:`karpy.api.conditions.set_condition`), so reconciling
again changes nothing and a status write, which comes back as a change
notification, does not start another write. The controllers that act on what
a NodePool asks for ignore changes of its status alone
(:func:`karpy.api.nodepool.status_only_change`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable

from karpy.api.conditions import FALSE, TRUE, Condition, find_condition, set_condition
from karpy.api.nodeclaim import NodeClaim
from karpy.api.nodeclass import EC2_KIND, KWOK_KIND, EC2NodeClass, KWOKNodeClass, NodeClass, NodeClassStatus
from karpy.api.nodepool import (
    CONDITION_NODECLASS_READY,
    CONDITION_READY,
    CONDITION_VALIDATION_SUCCEEDED,
    UNREADABLE_NODEPOOL,
    NodePool,
    NodePoolStatus,
    UnreadableNodePool,
)
from karpy.api.quantity import ResourceAmounts
from karpy.cloud.provider import CloudProvider, NodeClassProblem
from karpy.controllers.refusals import REFUSED_NODEPOOL, NodePoolRefusals
from karpy.controllers.state import node_class_problem, nodepool_resources, nodepool_validation_problem
from karpy.logs import about
from karpy.operator.cluster import EVENT_WARNING, Clock, Cluster
from karpy.operator.readiness import log_ready_change, with_ready
from karpy.operator.runtime import Watch
from karpy.scheduling.solver import NODES_RESOURCE

log = logging.getLogger("karpy.nodepool")

REASON_VALIDATION_FAILED = "NodePoolValidationFailed"
# The conditions a NodePool's Ready summarizes, in the order its message names them.
NODEPOOL_DEPENDENTS = (CONDITION_VALIDATION_SUCCEEDED, CONDITION_NODECLASS_READY)

NODEPOOL_KEY = "NodePool/"


def nodepool_status(
    current: NodePoolStatus,
    now: float,
    resources: ResourceAmounts,
    problem: NodeClassProblem | None,
    node_class_generation: int | None,
    invalid: str | None = None,
) -> NodePoolStatus:
    """The status of a NodePool karpy reads, from its resources and its node class' problem, if any.

    ``invalid`` says why the pool fails validation at run time (its requirements
    admit no offering, the API server refuses its NodeClaims), if it does.
    """
    if invalid is None:
        conditions = set_condition(current.conditions, CONDITION_VALIDATION_SUCCEEDED, TRUE, now)
    else:
        conditions = set_condition(
            current.conditions, CONDITION_VALIDATION_SUCCEEDED, FALSE, now, REASON_VALIDATION_FAILED, invalid
        )
    if problem is None:
        conditions = set_condition(conditions, CONDITION_NODECLASS_READY, TRUE, now)
    else:
        conditions = set_condition(
            conditions, CONDITION_NODECLASS_READY, FALSE, now, problem.reason, problem.message
        )
    return NodePoolStatus(
        resources=dict(resources),
        nodes=resources.get(NODES_RESOURCE, 0),
        node_class_observed_generation=node_class_generation,
        conditions=with_ready(conditions, NODEPOOL_DEPENDENTS, now),
    )


def unreadable_nodepool_status(
    current: NodePoolStatus, now: float, path: str, message: str
) -> NodePoolStatus:
    """The status of a NodePool karpy cannot read: ValidationSucceeded=False naming the field.

    What else the status holds stays: karpy does not know the pool's node
    class, and its NodeClaims (if any) are still counted where they were.
    """
    conditions = set_condition(
        current.conditions,
        CONDITION_VALIDATION_SUCCEEDED,
        FALSE,
        now,
        REASON_VALIDATION_FAILED,
        f"{path}: {message}" if path else message,
    )
    return dataclasses.replace(current, conditions=with_ready(conditions, NODEPOOL_DEPENDENTS, now))


def node_class_status(
    current: NodeClassStatus, now: float, problem: NodeClassProblem | None
) -> NodeClassStatus:
    """A node class' status: Ready unless the cloud provider names a problem.

    Only the conditions change: what an EC2NodeClass' selectors resolved to
    (written by the AWS provider's status controller) is kept as it is.
    """
    if problem is None:
        conditions = set_condition(current.conditions, CONDITION_READY, TRUE, now)
    else:
        conditions = set_condition(
            current.conditions, CONDITION_READY, FALSE, now, problem.reason, problem.message
        )
    return dataclasses.replace(current, conditions=conditions)


class NodePoolStatusController:
    """Writes the status of NodePools (readable or not) and of node classes; see the module docstring.

    Keys are ``NodePool/<name>`` and ``<node class kind>/<name>``.
    """

    name = "nodepool.status"

    def __init__(
        self,
        cluster: Cluster,
        cloud: CloudProvider,
        clock: Clock,
        *,
        refusals: NodePoolRefusals | None = None,
    ) -> None:
        self.cluster = cluster
        self.cloud = cloud
        self.clock = clock
        # The provisioner's record of pools whose NodeClaims the API server refused.
        self.refusals = refusals if refusals is not None else NodePoolRefusals()

    # -- triggers ----------------------------------------------------------

    def watches(self) -> list[Watch]:
        return [
            Watch("NodePool", self._on_nodepool),
            Watch(UNREADABLE_NODEPOOL, self._on_nodepool),
            Watch(REFUSED_NODEPOOL, self._on_nodepool),
            Watch("NodeClaim", self._on_nodeclaim),
            Watch(EC2_KIND, self._on_node_class),
            Watch(KWOK_KIND, self._on_node_class),
        ]

    @staticmethod
    def _on_nodepool(old: object | None, new: object | None) -> Iterable[str]:
        if isinstance(new, NodePool | UnreadableNodePool):
            return [NODEPOOL_KEY + new.name]
        return ()

    @staticmethod
    def _on_nodeclaim(old: object | None, new: object | None) -> Iterable[str]:
        # Only a NodeClaim appearing, going or launching changes its pool's resources.
        if (
            isinstance(old, NodeClaim)
            and isinstance(new, NodeClaim)
            and old.status.capacity == new.status.capacity
        ):
            return ()
        claim = new if isinstance(new, NodeClaim) else old
        if isinstance(claim, NodeClaim) and claim.nodepool:
            return [NODEPOOL_KEY + claim.nodepool]
        return ()

    def _on_node_class(self, old: object | None, new: object | None) -> Iterable[str]:
        changed = new if new is not None else old
        if not isinstance(changed, EC2NodeClass | KWOKNodeClass):
            return ()
        keys = [] if new is None else [f"{changed.kind}/{changed.name}"]
        for pool in self.cluster.nodepools():
            ref = pool.template.node_class_ref
            if (ref.group, ref.kind, ref.name) == (changed.group, changed.kind, changed.name):
                keys.append(NODEPOOL_KEY + pool.name)
        return keys

    # -- reconcile ---------------------------------------------------------

    def reconcile(self, key: str) -> float | None:
        kind, _, name = key.partition("/")
        if kind == "NodePool":
            pool = self.cluster.nodepool(name)
            if pool is not None:
                self._reconcile_nodepool(pool)
            else:
                for unreadable in self.cluster.unreadable_nodepools():
                    if unreadable.name == name:
                        self._reconcile_unreadable(unreadable)
            return None
        node_class = self._node_class(kind, name)
        if node_class is not None:
            status = node_class_status(
                node_class.status, self.clock.now(), self.cloud.node_class_problem(node_class)
            )
            if status != node_class.status:
                self.cluster.update_status(dataclasses.replace(node_class, status=status))
                log_ready_change(node_class, node_class.status.conditions, status.conditions)
        return None

    def _node_class(self, kind: str, name: str) -> NodeClass | None:
        for candidate in (EC2NodeClass, KWOKNodeClass):
            if candidate.kind == kind:
                return self.cluster.node_class(candidate.group, kind, name)
        return None

    def _reconcile_nodepool(self, pool: NodePool) -> None:
        ref = pool.template.node_class_ref
        node_class = self.cluster.node_class(ref.group, ref.kind, ref.name)
        problem = node_class_problem(self.cluster, self.cloud, ref)
        refusal = self.refusals.refusal(pool)
        invalid = refusal.message if refusal is not None else None
        if invalid is None:
            invalid = nodepool_validation_problem(self.cluster, self.cloud, pool)
        status = nodepool_status(
            pool.status,
            self.clock.now(),
            nodepool_resources(claim for claim in self.cluster.nodeclaims() if claim.nodepool == pool.name),
            problem,
            node_class.metadata.generation if node_class is not None else None,
            invalid,
        )
        if status != pool.status:
            self.cluster.update_status(dataclasses.replace(pool, status=status))
            log_ready_change(pool, pool.status.conditions, status.conditions)
            self._event_on_node_class_failure(pool, pool.status.conditions, status.conditions)
            # The provisioner has logged a refusal already; a failed validation is logged here.
            self._event_on_validation_failure(
                pool, pool.status.conditions, status.conditions, log_it=refusal is None
            )

    def _event_on_validation_failure(
        self, pool: NodePool, before: tuple[Condition, ...], after: tuple[Condition, ...], *, log_it: bool
    ) -> None:
        """A Warning Event (and a log line) when the pool turns invalid, or is invalid anew."""
        old = find_condition(before, CONDITION_VALIDATION_SUCCEEDED)
        new = find_condition(after, CONDITION_VALIDATION_SUCCEEDED)
        if new is None or new.status != FALSE:
            return
        if old is not None and (old.status, old.message) == (new.status, new.message):
            return
        self.cluster.record_event(
            pool,
            EVENT_WARNING,
            REASON_VALIDATION_FAILED,
            f"{new.message}; karpy does not provision from this NodePool until it is fixed",
        )
        if log_it:
            log.warning(
                "nodepool %s is not valid: %s",
                pool.name,
                new.message,
                extra=about(pool, controller=self.name),
            )

    def _event_on_node_class_failure(
        self, pool: NodePool, before: tuple[Condition, ...], after: tuple[Condition, ...]
    ) -> None:
        """A Warning Event on the NodePool when its node class turns unready, or says why anew.

        The condition says it to ``kubectl get -o yaml``; the Event says it to
        ``kubectl describe nodepool`` and ``kubectl get events``, where people
        look when nothing launches. Only a change is told, so a class that stays
        broken does not repeat itself.
        """
        old = find_condition(before, CONDITION_NODECLASS_READY)
        new = find_condition(after, CONDITION_NODECLASS_READY)
        if new is None or new.status != FALSE:
            return
        if old is not None and (old.status, old.message) == (new.status, new.message):
            return
        self.cluster.record_event(pool, EVENT_WARNING, new.reason or "NodeClassNotReady", new.message)

    def _reconcile_unreadable(self, pool: UnreadableNodePool) -> None:
        status = unreadable_nodepool_status(pool.status, self.clock.now(), pool.path, pool.message)
        if status == pool.status:
            return
        self.cluster.update_status(dataclasses.replace(pool, status=status))
        before = find_condition(pool.status.conditions, CONDITION_VALIDATION_SUCCEEDED)
        after = find_condition(status.conditions, CONDITION_VALIDATION_SUCCEEDED)
        if after is not None and (
            before is None or (before.status, before.message) != (after.status, after.message)
        ):
            self.cluster.record_event(
                pool,
                EVENT_WARNING,
                REASON_VALIDATION_FAILED,
                f"{after.message}; karpy does not provision from this NodePool until it is fixed",
            )
            log.warning(
                "nodepool %s is not valid: %s",
                pool.name,
                after.message,
                extra=about(pool, controller=self.name),
            )
