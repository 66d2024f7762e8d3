"""A stand-in for kube-scheduler: binds pending pods to nodes they fit.

Karpenter never binds pods; the kube-scheduler does, once a node is Ready
and its taints allow. This stand-in applies the same hard filters karpy's own
scheduler plans with (resources, node selector and required node affinity,
NoSchedule/NoExecute taints, unschedulable nodes, readiness) and scores the
way kube-scheduler's default profile mostly does: a node with fewer
PreferNoSchedule taints the pod does not tolerate wins, then the least
allocated node, ties to the node registered first (kube-scheduler picks
among ties at random; a simulation has to be repeatable). Pods it cannot
place are marked Unschedulable, which is what makes them pending for the
provisioner.

The taint count comes first because of the weights: the default profile
weighs TaintToleration 3 and NodeResourcesFit (least allocated) 1, each
scored 0 to 100, and TaintToleration gives 100 to a node with none of those
taints and 0 to the node with the most. So a node without them beats one
with them whatever their allocation (up to NodeResourcesBalancedAllocation,
weight 1, which rarely decides); with nodes of several different counts
in between, the order is the same as long as the counts differ enough,
which with karpy's one such taint (``karpy.dev/consolidation-planned``) they
always do.

Required pod affinity and anti-affinity (both ways) and DoNotSchedule
topology spread are filters too, as in kube-scheduler (``_interpod``): a pod
with such terms, or one a bound pod's anti-affinity selects, has its nodes
filtered one by one against the pods bound so far, this pass's included.

Volumes are bound as a WaitForFirstConsumer StorageClass binds them (the
usual class for zonal block storage, and the one Karpenter's docs advise):
a claim with no volume yet is provisioned in the zone of the node its first
pod is bound to, and from then on the volume's node affinity is one more
filter for every pod that mounts it. A pod whose claim does not exist waits,
unschedulable, as kube-scheduler makes it wait. A node takes no more volumes
of a CSI driver than its CSINode's count allows (NodeVolumeLimits), counted as
karpy's provisioning counts them (:func:`karpy.controllers.state.attach_room`).
A pod that declares no topology spread constraints gets the profile's
``defaultConstraints`` when the scenario's ``settings.schedulerConfig`` names
them (:mod:`karpy.scheduling.default_spread`), as kube-scheduler does with
``defaultingType: List``.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Iterable

from karpy.api.core import DEFAULT_SCHEDULER, Node, PersistentVolume, Pod
from karpy.api.meta import ObjectMeta
from karpy.api.quantity import ResourceAmounts, add_amounts, fits, subtract_amounts
from karpy.api.requirements import LABEL_ZONE, Requirements
from karpy.api.schedulerconfig import SchedulerConfiguration
from karpy.api.storage import UNLIMITED_VOLUMES
from karpy.api.taints import untolerated, untolerated_preferences
from karpy.controllers.state import (
    attach_room,
    default_spread,
    namespace_labels,
    used_on,
    volume_counts,
    volume_terms,
)
from karpy.operator.runtime import Watch
from karpy.scheduling.solver import pod_requests
from karpy.sim._interpod import BoundPods, allowed_nodes, has_inter_pod_terms
from karpy.sim.store import InMemoryCluster

SCHEDULE_KEY = "schedule"
UNSCHEDULABLE_MESSAGE = "0/{nodes} nodes are available: no node fits the pod"


class SimulatedKubeScheduler:
    name = "sim.kube-scheduler"

    def __init__(self, cluster: InMemoryCluster, config: SchedulerConfiguration | None = None) -> None:
        self.cluster = cluster
        self.bindings = 0
        # The profile's podTopologySpread.defaultConstraints (List defaulting), as SCHEDULER_CONFIG says.
        self.config = config

    def watches(self) -> list[Watch]:
        return [Watch("Pod", self._on_pod), Watch("Node", self._on_node)]

    def _on_pod(self, old: object | None, new: object | None) -> Iterable[str]:
        waiting = (
            isinstance(new, Pod) and not new.node_name and not new.metadata.deleting and not new.is_terminal
        )
        if waiting and (not isinstance(old, Pod) or old.node_name or old.metadata.deleting):
            return [SCHEDULE_KEY]
        if new is None and isinstance(old, Pod) and old.node_name:
            return [SCHEDULE_KEY]  # room freed up
        return []

    def _on_node(self, old: object | None, new: object | None) -> Iterable[str]:
        return [SCHEDULE_KEY] if isinstance(new, Node) and self.cluster.has_pending_pods() else []

    def reconcile(self, key: str) -> float | None:
        pending = [
            pod
            for pod in self.cluster.pending_pods()
            if pod.spec.scheduler_name == DEFAULT_SCHEDULER and not pod.metadata.deleting
        ]
        if not pending:
            return None
        # Pods that declare no spread constraints get the profile's defaults, on the copies
        # filtered here (the pod bound is the one stored).
        spread = default_spread(self.cluster, self.config)
        stored = {pod.key: pod for pod in pending}
        if spread is not None:
            pending = spread.apply(pending)
        every_node = list(self.cluster.nodes())
        on_node = {node.name: self.cluster.pods_on_node(node.name) for node in every_node}
        nodes = [
            node
            for node in every_node
            if node.ready and not node.unschedulable and not node.metadata.deleting
        ]
        free: dict[str, ResourceAmounts] = {
            node.name: subtract_amounts(node.allocatable, used_on(on_node[node.name])) for node in nodes
        }
        ordered = sorted(
            pending, key=lambda pod: (-pod.spec.priority, pod.metadata.creation_timestamp or 0, pod.key)
        )
        choosers: dict[tuple[object, ...], _NodeChooser] = {}
        volumes = volume_terms(self.cluster, pending)
        attached = volume_counts(self.cluster, pending)
        if attached:
            # NodeVolumeLimits: a node attaches no more of a driver's volumes than its CSINode allows.
            drivers = {resource for counts in attached.values() for resource in counts}
            for node in nodes:
                room = attach_room(self.cluster, node.name, on_node[node.name], {})
                free[node.name].update(
                    {resource: room.get(resource, UNLIMITED_VOLUMES) for resource in drivers}
                )
        bound = self._bound_pods(every_node, on_node, pending)
        for pod in ordered:
            missing = self._missing_claim(pod)
            if missing:
                self._mark_unschedulable(stored[pod.key], f'persistentvolumeclaim "{missing}" not found')
                continue
            requests = pod_requests(pod)
            if pod.key in attached:
                requests = add_amounts(requests, attached[pod.key])
            options = pod.spec.node_requirements()
            if pod.key in volumes:
                options = tuple(option.intersection(term) for option in options for term in volumes[pod.key])
            kind = (
                tuple(sorted(requests.items())),
                pod.spec.tolerations,
                tuple(option.identity() for option in options),
            )
            interpod = bound is not None and (has_inter_pod_terms(pod) or bound.repels(pod))
            chooser = None if interpod else choosers.get(kind)
            if chooser is None:
                allowed = [
                    index
                    for index, node in enumerate(nodes)
                    if untolerated(node.taints, pod.spec.tolerations) is None
                    and any(option.is_satisfied_by_labels(node.metadata.labels) is None for option in options)
                ]
                why = ""
                if interpod:
                    assert bound is not None
                    # Depends on where pods are bound, this pass's included: not kept for alike pods.
                    allowed, why = allowed_nodes(pod, allowed, nodes, bound)
                penalties = {
                    index: untolerated_preferences(nodes[index].taints, pod.spec.tolerations)
                    for index in allowed
                }
                chooser = _NodeChooser(requests, nodes, free, penalties)
                if not interpod:
                    choosers[kind] = chooser
                elif why:
                    self._mark_unschedulable(stored[pod.key], f"0/{len(nodes)} nodes are available: {why}")
                    continue
            best = chooser.best()
            if best is None:
                self._mark_unschedulable(stored[pod.key], UNSCHEDULABLE_MESSAGE.format(nodes=len(nodes)))
                continue
            self._bind_volumes(pod, best)
            self.cluster.bind(stored[pod.key], best.name)
            self.bindings += 1
            free[best.name] = subtract_amounts(free[best.name], requests)
            if bound is not None:
                bound.add(best.name, pod)
        return None

    def _bound_pods(
        self, every_node: list[Node], on_node: dict[str, list[Pod]], pending: list[Pod]
    ) -> BoundPods | None:
        """Where pods are bound, for the inter-pod filters; None when no pod needs them.

        Only a pending pod with inter-pod terms, or one a bound pod's
        anti-affinity selects, is filtered against the bound pods; without
        either (no pending pod has such terms, no bound pod has
        anti-affinity) none is, and neither are the pods this pass binds,
        which have none. Indexing every bound pod on every pass, for nothing,
        was most of the stand-in's time on a large cluster.
        """
        if not any(has_inter_pod_terms(pod) for pod in pending) and not any(
            pod.spec.pod_anti_affinity for pods in on_node.values() for pod in pods
        ):
            return None
        return BoundPods.of(every_node, on_node, namespace_labels(self.cluster))

    def _mark_unschedulable(self, pod: Pod, message: str) -> None:
        if pod.unschedulable_reason != message:
            self.cluster.update(pod.with_changes(unschedulable_reason=message))

    def _missing_claim(self, pod: Pod) -> str:
        for claim_name in pod.spec.claim_names:
            if self.cluster.persistent_volume_claim(pod.metadata.namespace, claim_name) is None:
                return claim_name
        return ""

    def _bind_volumes(self, pod: Pod, node: Node) -> None:
        """Provision a volume, in ``node``'s zone, for each claim of ``pod`` that has none yet."""
        zone = node.metadata.labels.get(LABEL_ZONE)
        for claim_name in pod.spec.claim_names:
            claim = self.cluster.persistent_volume_claim(pod.metadata.namespace, claim_name)
            if claim is None or claim.volume_name:
                continue
            terms = (Requirements.from_labels({LABEL_ZONE: zone}),) if zone else ()
            # Under its class's CSI driver (``spec.csi.driver``), as a CSI provisioner writes it: a
            # bound volume keeps counting against the node's attach limit for that driver.
            storage_class = (
                self.cluster.storage_class(claim.storage_class_name) if claim.storage_class_name else None
            )
            volume = self.cluster.create(
                PersistentVolume(
                    metadata=ObjectMeta(name=f"pvc-{claim.metadata.uid}"),
                    node_terms=terms,
                    csi_driver=storage_class.csi_driver if storage_class is not None else "",
                )
            )
            self.cluster.update(dataclasses.replace(claim, volume_name=volume.metadata.name))


class _NodeChooser:
    """The node with the fewest untolerated PreferNoSchedule taints, then the least
    allocated, then the first registered, that takes one kind of pod.

    Pods alike in requests, tolerations and node requirements pass the same
    filters, so each kind filters the nodes once and keeps them in a heap by
    score. Free room only shrinks while pods are bound, and with it a node's
    score: an entry whose node was bound to since is pushed again with its
    score now, and one whose node no longer fits the kind is dropped. Each
    pod then costs a few heap operations instead of a pass over every node,
    the same choice as scoring them all. (Taints do not change while pods
    are bound, so their count is fixed per node.)
    """

    def __init__(
        self,
        requests: ResourceAmounts,
        nodes: list[Node],
        free: dict[str, ResourceAmounts],
        penalties: dict[int, int],
    ) -> None:
        self.requests = requests
        self.nodes = nodes
        self.free = free
        self.heap = [
            (penalty, -_free_fraction(free[nodes[index].name], nodes[index].allocatable), index)
            for index, penalty in penalties.items()
            if fits(requests, free[nodes[index].name])
        ]
        heapq.heapify(self.heap)

    def best(self) -> Node | None:
        heap = self.heap
        while heap:
            penalty, negative_score, index = heap[0]
            node = self.nodes[index]
            free = self.free[node.name]
            if not fits(self.requests, free):
                heapq.heappop(heap)
                continue
            score = -_free_fraction(free, node.allocatable)
            if score != negative_score:
                heapq.heapreplace(heap, (penalty, score, index))
                continue
            if -score > -1.0:
                return node
            # Overcommitted (more than all of it in use): so is every other node with as
            # few such taints, and none of them is chosen, as when every node is scored
            # from a floor of -1; a node with more may still be.
            heapq.heappop(heap)
        return None


def _free_fraction(free: ResourceAmounts, allocatable: ResourceAmounts) -> float:
    fractions = [
        free.get(resource, 0) / allocatable[resource]
        for resource in ("cpu", "memory")
        if allocatable.get(resource, 0) > 0
    ]
    return sum(fractions) / len(fractions) if fractions else 0.0
