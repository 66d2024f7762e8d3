"""The Cluster Autoscaler baseline's controller: one scan every ``--scan-interval``.

It drives :mod:`karpy.baselines.cluster_autoscaler` (the pure decisions)
through the same narrow interfaces as karpy's own controllers: a cluster
reader/writer, a clock, and the cloud provider protocol.

How a node group's node comes and goes. CA asks an Auto Scaling group for
more instances and the instances join; here a scale-up creates one NodeClaim
per node, labelled with its group (:data:`LABEL_NODE_GROUP`) and naming the
group's instance types, capacity type and zones as requirements. That is the
cleanest way to keep the comparison apples to apples: the very NodeClaim
lifecycle controller, simulated cloud and kubelet that serve karpy's
NodeClaims launch the instance (same boot and registration delays, same
prices, same capacity failures) and register the Node. A NodeClaim is only
the request's record: nothing of karpy's decides anything about these ones,
because with this baseline the simulation registers neither karpy's
provisioner nor its disruption controllers, and they carry no NodePool label
and never expire. A mixed group lists all its types and the cloud launches
the cheapest available, as an ASG's lowest-price allocation does; the
template (what the scan simulates) is the first type, as CA's is.

Scale-down deletes the node's NodeClaim: the termination controller then
cordons the node, drains it through the Eviction API (PodDisruptionBudgets
respected, as CA's drain respects them) and terminates the instance, the
path CA's own cordon, drain and delete takes.

A node that has not come up within ``--max-node-provision-time`` (15 min) is
given up (its NodeClaim deleted) and its group backed off: 5 min first,
doubling to 30 min (``--initial-node-group-backoff-duration``,
``--max-node-group-backoff-duration``). A launch the cloud refuses (no
capacity) deletes the NodeClaim at once, which backs off the group the same
way, as CA backs off a group whose ASG reports a failed scale-up.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from karpy.api.core import Pod
from karpy.api.instancetype import InstanceType
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import TERMINATION_FINALIZER, NodeClaim, NodeClaimSpec
from karpy.api.nodepool import NodePool
from karpy.api.requirements import LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_ZONE, Requirement
from karpy.baselines.cluster_autoscaler import (
    LABEL_NODE_GROUP,
    ClusterAutoscalerFlags,
    GroupState,
    NodeGroup,
    NodeView,
    Template,
    daemon_requests,
    decide_scale_up,
    to_remove,
    unneeded_nodes,
)
from karpy.cloud.provider import CloudProvider, NodePoolNotEvaluatedError
from karpy.controllers.state import admitted_daemonsets, pdb_blocked_pods
from karpy.operator.cluster import Clock, Cluster, NotFoundError
from karpy.operator.runtime import Watch

log = logging.getLogger("karpy.cluster-autoscaler")

SCAN_KEY = "scan"


@dataclass(frozen=True, slots=True)
class ScalingEvent:
    at: float
    kind: str  # "scale-up", "scale-down" or "backoff"
    group: str
    count: int
    detail: str


def derive_node_groups(
    nodepools: Iterable[NodePool], cloud: CloudProvider, flags: ClusterAutoscalerFlags
) -> list[NodeGroup]:
    """One group per allowed instance type and capacity type of each dynamic NodePool, min 0.

    The max size is the pool's CPU limit over the type's CPU when the pool has
    one, else :attr:`ClusterAutoscalerFlags.derived_max_size`. A static pool
    (``spec.replicas``) is no group: its nodes are kept by the static capacity
    controller under either autoscaler, and nothing scales it for pods.
    """
    groups: list[NodeGroup] = []
    for pool in sorted(nodepools, key=lambda pool: pool.name):
        if pool.is_static:
            continue
        requirements = pool.template.requirement_set()
        allowed_capacity = requirements.get(LABEL_CAPACITY_TYPE)
        try:
            catalog = cloud.get_instance_types(pool)
        except NodePoolNotEvaluatedError:
            continue  # no group until the NodeOverlays priced the pool's types (the next scan)
        for instance_type in catalog:
            if instance_type.requirements.intersects(requirements) is not None:
                continue
            capacity_types = sorted({offering.capacity_type for offering in instance_type.offerings})
            for capacity_type in capacity_types:
                if not allowed_capacity.has(capacity_type):
                    continue
                cpu = instance_type.allocatable.get("cpu", 0)
                limit = pool.limits.get("cpu")
                max_size = limit // cpu if limit is not None and cpu > 0 else flags.derived_max_size
                groups.append(
                    NodeGroup(
                        name=f"{pool.name}-{instance_type.name}-{capacity_type}",
                        instance_types=(instance_type.name,),
                        capacity_type=capacity_type,
                        min_size=0,
                        max_size=max_size,
                        nodepool=pool.name,
                    )
                )
    return groups


class ClusterAutoscaler:
    """Cluster Autoscaler's scan loop over node groups (see the module docstring)."""

    name = "cluster-autoscaler"

    def __init__(
        self,
        cluster: Cluster,
        cloud: CloudProvider,
        clock: Clock,
        *,
        flags: ClusterAutoscalerFlags | None = None,
        groups: Sequence[NodeGroup] | None = None,
        note: Callable[[str], None] | None = None,
    ) -> None:
        self.cluster = cluster
        self.cloud = cloud
        self.clock = clock
        self.flags = flags or ClusterAutoscalerFlags()
        # None: derived from the NodePools at the first scan.
        self.groups: list[NodeGroup] | None = list(groups) if groups is not None else None
        self.note = note or (lambda message: None)
        self.rng = random.Random(self.flags.seed)
        self.unneeded_since: dict[str, float] = {}
        self.last_scale_up: float | None = None
        # Group -> (backed off until, the back-off's length).
        self.backoff: dict[str, tuple[float, float]] = {}
        # NodeClaims this autoscaler created and has not yet seen come up, with their group.
        self.provisioning: dict[str, str] = {}
        self.unschedulable: set[str] = set()
        self.events: list[ScalingEvent] = []
        self.started_at = clock.now()
        self._launched = 0
        # NodeClaim name -> the NodePool whose template it was made from (what prices its instance).
        self._claim_pools: dict[str, str] = {}
        # A pod or node changed since the last scan (whose conclusions may no longer hold).
        self._stale = True

    def configure(self, flags: ClusterAutoscalerFlags, groups: Sequence[NodeGroup] | None) -> None:
        self.flags = flags
        self.groups = list(groups) if groups is not None else None
        self.rng = random.Random(flags.seed)

    def watches(self) -> list[Watch]:
        # CA scans on a timer, not on changes; a change only means the last scan's view is stale.
        return [Watch("Pod", self._on_change), Watch("Node", self._on_change)]

    def _on_change(self, old: object | None, new: object | None) -> Iterable[str]:
        self._stale = True
        return []

    # -- the scan ------------------------------------------------------------

    def reconcile(self, key: str) -> float | None:
        now = self.clock.now()
        self._stale = False
        groups = self._groups()
        self._check_provisioning(now)
        scaled_up = self._scale_up(now, groups)
        if not scaled_up:
            self._scale_down(now, groups)
        return self.flags.scan_interval

    def has_work(self) -> bool:
        """Something is still to come: an unneeded node to remove, pods held by a back-off, or a
        change the next scan has not looked at yet."""
        if self._stale:
            return True
        now = self.clock.now()
        backed_off = any(until > now for until, _ in self.backoff.values())
        pending = any(pod.is_provisionable() for pod in self.cluster.pending_pods())
        return bool(self.unneeded_since) or (backed_off and pending)

    def _groups(self) -> list[NodeGroup]:
        if self.groups is None:
            return derive_node_groups(self.cluster.nodepools(), self.cloud, self.flags)
        return self.groups

    def nodepool_of(self, claim: str) -> str:
        """The NodePool the NodeClaim named ``claim`` was made from ("" if not by this autoscaler)."""
        return self._claim_pools.get(claim, "")

    def _pool_for(self, group: NodeGroup) -> NodePool | None:
        if group.nodepool:
            return self.cluster.nodepool(group.nodepool)
        return min(self.cluster.nodepools(), key=lambda pool: pool.name, default=None)

    def _templates(self, groups: Sequence[NodeGroup]) -> dict[str, Template]:
        daemonsets = admitted_daemonsets(self.cluster)
        templates: dict[str, Template] = {}
        types_of_pool: dict[str, dict[str, InstanceType]] = {}
        for group in groups:
            pool = self._pool_for(group)
            if pool is None:
                continue
            by_name = types_of_pool.get(pool.name)
            if by_name is None:
                types = self.cloud.get_instance_types(pool)
                by_name = types_of_pool[pool.name] = {
                    instance_type.name: instance_type for instance_type in types
                }
            instance_type = by_name.get(group.instance_types[0])
            if instance_type is None:
                continue
            offerings = [
                offering
                for offering in instance_type.offerings
                if offering.capacity_type == group.capacity_type
                and (not group.zones or offering.zone in group.zones)
            ]
            if not offerings:
                continue
            cheapest = min(offerings, key=lambda offering: (offering.price, offering.zone))
            labels = {
                **instance_type.requirements.labels(include_well_known=True),
                **pool.template.labels,
                LABEL_ZONE: cheapest.zone,
                LABEL_CAPACITY_TYPE: group.capacity_type,
                LABEL_NODE_GROUP: group.name,
            }
            taints = pool.template.taints
            templates[group.name] = Template(
                group=group,
                instance_type=instance_type.name,
                labels=labels,
                taints=taints,
                allocatable=dict(instance_type.allocatable),
                price=cheapest.price,
                daemon_requests=daemon_requests(daemonsets, labels, taints),
            )
        return templates

    def _group_claims(self) -> list[NodeClaim]:
        return [claim for claim in self.cluster.nodeclaims() if LABEL_NODE_GROUP in claim.metadata.labels]

    def _check_provisioning(self, now: float) -> None:
        """Back off groups whose nodes failed to come up (refused, or not up in time)."""
        for name, group in list(self.provisioning.items()):
            claim = self.cluster.nodeclaim(name)
            if claim is not None and claim.initialized:
                del self.provisioning[name]
                self.backoff.pop(group, None)
                continue
            if claim is not None and not claim.metadata.deleting:
                created = claim.metadata.creation_timestamp or now
                if now - created < self.flags.max_node_provision_time:
                    continue
                try:
                    self.cluster.delete(claim)
                except NotFoundError:
                    pass
            # Gone, or being deleted (refused by the cloud, given up by liveness): it failed to come up.
            del self.provisioning[name]
            self._back_off(group, now, f"node {name} did not come up")

    def _back_off(self, group: str, now: float, why: str) -> None:
        previous = self.backoff.get(group)
        length = self.flags.initial_backoff
        if previous is not None:
            length = min(previous[1] * 2, self.flags.max_backoff)
        self.backoff[group] = (now + length, length)
        self.events.append(ScalingEvent(now, "backoff", group, 0, why))
        self.note(f"cluster-autoscaler: node group {group} backed off for {length:.0f}s: {why}")

    def _scale_up(self, now: float, groups: Sequence[NodeGroup]) -> bool:
        pending = [
            pod for pod in self.cluster.pending_pods() if pod.is_provisionable() and pod.unschedulable_reason
        ]
        if not pending:
            self.unschedulable = set()
            return False
        templates = self._templates(groups)  # only when there is something to scale up for
        claims = [claim for claim in self._group_claims() if not claim.metadata.deleting]
        sizes = Counter(claim.metadata.labels[LABEL_NODE_GROUP] for claim in claims)
        upcoming = [
            templates[group]
            for claim in claims
            if not claim.initialized and (group := claim.metadata.labels[LABEL_NODE_GROUP]) in templates
        ]
        states = [
            GroupState(
                templates[group.name],
                sizes.get(group.name, 0),
                backed_off=self.backoff.get(group.name, (0.0, 0.0))[0] > now,
            )
            for group in groups
            if group.name in templates
        ]
        decision = decide_scale_up(pending, states, upcoming, self.flags, self.rng)
        if decision is None:
            self.unschedulable = set()
            return False
        self.unschedulable = set(decision.unhelpable if decision.count else decision.waiting)
        if not decision.count:
            return False
        template = templates[decision.group]
        pool = self._pool_for(template.group)
        assert pool is not None  # a template exists only for a group with a pool
        for _ in range(decision.count):
            self._create_claim(template.group, pool)
        self.last_scale_up = now
        self.events.append(ScalingEvent(now, "scale-up", decision.group, decision.count, decision.reason))
        self.note(f"cluster-autoscaler: scale-up of {decision.group} by {decision.count}: {decision.reason}")
        return True

    def _create_claim(self, group: NodeGroup, pool: NodePool) -> None:
        self._launched += 1
        name = f"{group.name}-{self._launched:05d}"
        self._claim_pools[name] = pool.name
        requirements = [
            Requirement.from_operator(LABEL_INSTANCE_TYPE, "In", group.instance_types),
            Requirement.from_operator(LABEL_CAPACITY_TYPE, "In", (group.capacity_type,)),
        ]
        if group.zones:
            requirements.append(Requirement.from_operator(LABEL_ZONE, "In", group.zones))
        claim = NodeClaim(
            metadata=ObjectMeta(
                name=name,
                labels={**pool.template.labels, LABEL_NODE_GROUP: group.name},
                # Deleting it then drains and terminates the node, as for karpy's own NodeClaims.
                finalizers=(TERMINATION_FINALIZER,),
            ),
            spec=NodeClaimSpec(
                node_class_ref=pool.template.node_class_ref,
                requirements=tuple(requirements),
                taints=pool.template.taints,
                expire_after=None,
            ),
        )
        self.cluster.create(claim)
        self.provisioning[name] = group.name

    def _scale_down(self, now: float, groups: Sequence[NodeGroup]) -> None:
        if not self.flags.scale_down_enabled:
            self.unneeded_since = {}
            return
        by_name = {group.name: group for group in groups}
        claims = self._group_claims()
        claim_of_node = {claim.status.node_name: claim for claim in claims if claim.status.node_name}
        sizes = Counter(
            claim.metadata.labels[LABEL_NODE_GROUP] for claim in claims if not claim.metadata.deleting
        )
        views: list[NodeView] = []
        for node in self.cluster.nodes():
            if not node.ready or node.metadata.deleting:
                continue
            claim = claim_of_node.get(node.name)
            removable = claim is not None and claim.initialized and not claim.metadata.deleting
            views.append(
                NodeView(
                    node=node,
                    group=claim.metadata.labels[LABEL_NODE_GROUP] if claim is not None else "",
                    pods=tuple(pod for pod in self.cluster.pods_on_node(node.name) if not pod.is_terminal),
                    removable=removable,
                )
            )
        pods: list[Pod] = list(self.cluster.pods())
        covered = {
            pod.key for budget in self.cluster.pod_disruption_budgets() for pod in pods if budget.selects(pod)
        }
        unneeded, _ = unneeded_nodes(
            views, sizes, by_name, pdb_blocked_pods(self.cluster), covered, self.flags
        )
        names = {item.node for item in unneeded}
        self.unneeded_since = {node: self.unneeded_since.get(node, now) for node in sorted(names)}
        draining = any(claim.metadata.deleting for claim in claims)
        removals = to_remove(unneeded, self.unneeded_since, self.last_scale_up, now, self.flags)
        if draining:
            removals = [item for item in removals if item.empty]  # one non-empty node at a time
        for item in removals:
            claim = claim_of_node[item.node]
            try:
                self.cluster.delete(claim)
            except NotFoundError:
                continue
            self.unneeded_since.pop(item.node, None)
            kind = "empty" if item.empty else "underutilized"
            self.events.append(ScalingEvent(now, "scale-down", item.group, 1, f"{kind} node {item.node}"))
            self.note(f"cluster-autoscaler: scale-down of {item.group}: {kind} node {item.node}")
