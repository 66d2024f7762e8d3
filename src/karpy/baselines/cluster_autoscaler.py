"""Cluster Autoscaler's decisions, as its documented defaults make them (pure: no I/O).

Cluster Autoscaler (CA) scales *node groups* (an AWS Auto Scaling group, a
GKE node pool): each group has one template node, and a group grows or
shrinks by whole nodes of that template. This module decides, from a
snapshot of the cluster handed in by the controller, what one CA scan
(``--scan-interval`` 10 s) does. The controller
(:mod:`karpy.controllers.cluster_autoscaler`) turns that into writes.

Scale-up (CA's ``ScaleUp``):

1. Pending pods first fill the room of nodes already being provisioned (CA
   puts upcoming nodes in its snapshot as template nodes), so a scan during
   a boot does not order the same capacity again.
2. For each group below its max size and not backed off, the pods that pass
   the scheduler's predicates on the template node (resources, node
   selector and required node affinity, taints and tolerations: the same
   :class:`~karpy.api.requirements.Requirements` and
   :func:`~karpy.api.taints.untolerated` checks the kube-scheduler stand-in
   uses) are bin-packed first-fit decreasing onto template nodes: CA's
   binpacking estimator. That gives the option's node count, capped by the
   group's max size and ``--max-nodes-total``.
3. The expander picks one option: ``least-waste`` (least idle CPU and memory
   on the new nodes, CA's score being the sum of the two idle fractions),
   ``random`` (seeded, so a run repeats), ``price`` (cheapest per scheduled
   pod) or ``priority`` (highest priority whose pattern matches the group's
   name, ties by random).
Only one group grows per scan, as in CA without ``--balance-similar-node-groups``.

Scale-down (CA's ``ScaleDown``): a node is *unneeded* when the requests
(DaemonSet pods included, CA's default) of both CPU and memory are below
``--scale-down-utilization-threshold`` (0.5) of its allocatable, its group
is above min size, none of its pods blocks a drain, and its movable pods
fit on the other nodes (simulated with the same predicates, nodes already
chosen for removal left out). A node unneeded for
``--scale-down-unneeded-time`` (10 min) is removed unless a scale-up
happened within ``--scale-down-delay-after-add`` (10 min): empty nodes (only
DaemonSet pods) up to ``--max-empty-bulk-delete`` (10) at once, otherwise
one non-empty node. The unneeded clock is the controller's state; this
module says which nodes are unneeded now and which to remove.

Shortcuts, and why they are safe for a baseline: pods are packed by
requests only (inter-pod affinity and topology spread are not simulated on
template nodes, which only makes CA look as good as or better than it is);
the FFD order is by CPU then memory request, the estimator's order for the
pod shapes a scenario has.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from karpy.api.core import DaemonSet, Node, Pod
from karpy.api.quantity import ResourceAmounts, add_amounts, fits, subtract_amounts
from karpy.api.taints import Taint, untolerated
from karpy.scheduling._model import pod_requests

# The label CA's groups put on their nodes here (an ASG tags its instances likewise).
LABEL_NODE_GROUP = "karpy.dev/node-group"
SAFE_TO_EVICT_ANNOTATION = "cluster-autoscaler.kubernetes.io/safe-to-evict"
SCALE_DOWN_DISABLED_ANNOTATION = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
KUBE_SYSTEM = "kube-system"
EXPANDERS = ("least-waste", "random", "price", "priority")
CAPACITY_TYPES = ("on-demand", "spot")


class NodeGroupError(ValueError):
    """A node group that cannot exist (min above max...); the message names the field."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field_name = field_name


@dataclass(frozen=True, slots=True)
class NodeGroup:
    """A group of identical nodes: one instance type, or a mixed group whose first type is the template."""

    name: str
    instance_types: tuple[str, ...]
    capacity_type: str = "on-demand"
    min_size: int = 0
    max_size: int = 100
    zones: tuple[str, ...] = ()
    # The NodePool whose node class, labels and taints the group's nodes get ("": the first one).
    nodepool: str = ""

    def problems(self) -> list[NodeGroupError]:
        """Everything that keeps this group from existing, each naming its field."""
        problems: list[NodeGroupError] = []
        if not self.name:
            problems.append(NodeGroupError("name", "required"))
        if not self.instance_types:
            problems.append(NodeGroupError("instanceTypes", "at least one instance type"))
        if self.capacity_type not in CAPACITY_TYPES:
            problems.append(
                NodeGroupError(
                    "capacityType", f"one of {', '.join(CAPACITY_TYPES)}, not {self.capacity_type!r}"
                )
            )
        if self.min_size < 0:
            problems.append(NodeGroupError("minSize", "must not be negative"))
        elif self.max_size < self.min_size:
            problems.append(NodeGroupError("maxSize", f"{self.max_size} is below minSize {self.min_size}"))
        return problems

    def check(self) -> None:
        """Raise the first of :meth:`problems`, if any."""
        for problem in self.problems():
            raise problem


@dataclass(frozen=True, slots=True)
class ClusterAutoscalerFlags:
    """CA's flags the model honours, with CA's defaults (but ``least-waste`` is the default expander here)."""

    scan_interval: float = 10.0  # --scan-interval
    expander: str = "least-waste"  # --expander (CA's own default is random)
    # --expander=priority's ConfigMap: priority -> regexes matching group names.
    priorities: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    seed: int = 0  # the random expander's (and priority ties') seed, so a run repeats
    max_nodes_total: int = 0  # --max-nodes-total (0: no limit)
    max_node_provision_time: float = 15 * 60.0  # --max-node-provision-time
    initial_backoff: float = 5 * 60.0  # --initial-node-group-backoff-duration
    max_backoff: float = 30 * 60.0  # --max-node-group-backoff-duration
    scale_down_enabled: bool = True  # --scale-down-enabled
    utilization_threshold: float = 0.5  # --scale-down-utilization-threshold
    unneeded_time: float = 10 * 60.0  # --scale-down-unneeded-time
    delay_after_add: float = 10 * 60.0  # --scale-down-delay-after-add
    max_empty_bulk_delete: int = 10  # --max-empty-bulk-delete
    skip_nodes_with_system_pods: bool = True  # --skip-nodes-with-system-pods
    # Group sizes for groups derived from a NodePool without a cpu limit.
    derived_max_size: int = 100


@dataclass(frozen=True, slots=True)
class Template:
    """What a new node of a group looks like: CA's template node, its DaemonSet pods included."""

    group: NodeGroup
    instance_type: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    allocatable: ResourceAmounts
    price: float
    daemon_requests: ResourceAmounts = field(default_factory=dict)

    @property
    def free(self) -> ResourceAmounts:
        """Room left for workload pods on an empty template node."""
        return subtract_amounts(self.allocatable, self.daemon_requests)


def schedulable_on(pod: Pod, labels: Mapping[str, str], taints: Sequence[Taint]) -> bool:
    """The scheduler's predicates other than resources: node selector/affinity, taints."""
    if untolerated(taints, pod.spec.tolerations) is not None:
        return False
    return any(option.is_satisfied_by_labels(labels) is None for option in pod.spec.node_requirements())


def daemon_requests(
    daemonsets: Iterable[DaemonSet], labels: Mapping[str, str], taints: Sequence[Taint]
) -> ResourceAmounts:
    """Requests of the DaemonSets whose pods would run on a node with ``labels`` and ``taints``."""
    total: ResourceAmounts = {}
    for daemonset in daemonsets:
        spec = daemonset.template.spec
        if untolerated(taints, spec.tolerations) is not None:
            continue
        if not any(option.is_satisfied_by_labels(labels) is None for option in spec.node_requirements()):
            continue
        total = add_amounts(total, {**spec.requests, "pods": spec.requests.get("pods", 0) + 1})
    return total


def _size_key(pod: Pod) -> tuple[int, int, str]:
    requests = pod_requests(pod)
    return (-requests.get("cpu", 0), -requests.get("memory", 0), pod.key)


def pack_on_upcoming(pods: Sequence[Pod], upcoming: Sequence[Template]) -> list[Pod]:
    """First-fit decreasing of ``pods`` onto nodes being provisioned; returns the pods left over."""
    room = [template.free for template in upcoming]
    left: list[Pod] = []
    for pod in sorted(pods, key=_size_key):
        requests = pod_requests(pod)
        for index, template in enumerate(upcoming):
            if fits(requests, room[index]) and schedulable_on(pod, template.labels, template.taints):
                room[index] = subtract_amounts(room[index], requests)
                break
        else:
            left.append(pod)
    return left


def estimate(pods: Sequence[Pod], template: Template, limit: int) -> tuple[int, list[Pod]]:
    """CA's binpacking estimator: template nodes opened first-fit decreasing, at most ``limit``.

    Returns the node count and the pods those nodes take.
    """
    room: list[ResourceAmounts] = []
    placed: list[Pod] = []
    for pod in sorted(pods, key=_size_key):
        requests = pod_requests(pod)
        for index, free in enumerate(room):
            if fits(requests, free):
                room[index] = subtract_amounts(free, requests)
                placed.append(pod)
                break
        else:
            if len(room) < limit and fits(requests, template.free):
                room.append(subtract_amounts(template.free, requests))
                placed.append(pod)
    return len(room), placed


@dataclass(frozen=True, slots=True)
class ScaleUpOption:
    template: Template
    count: int
    pods: tuple[Pod, ...]

    def waste(self) -> float:
        """Least-waste's score: idle CPU fraction plus idle memory fraction of the new nodes."""
        score = 0.0
        for resource in ("cpu", "memory"):
            offered = self.template.allocatable.get(resource, 0) * self.count
            if offered <= 0:
                continue
            used = sum(pod_requests(pod).get(resource, 0) for pod in self.pods)
            used += self.template.daemon_requests.get(resource, 0) * self.count
            score += (offered - used) / offered
        return score

    def price_per_pod(self) -> float:
        return self.template.price * self.count / max(len(self.pods), 1)


@dataclass(frozen=True, slots=True)
class GroupState:
    """A group as the scan sees it: its template, how many nodes it has, and whether it is backed off."""

    template: Template
    size: int  # nodes, upcoming ones included
    backed_off: bool = False


@dataclass(frozen=True, slots=True)
class ScaleUp:
    group: str
    count: int
    reason: str
    # Pending pods no group can take (no template fits them): they stay pending.
    unhelpable: tuple[str, ...] = ()
    # Pending pods that upcoming nodes do not take: the ones this scan tried to help.
    waiting: tuple[str, ...] = ()


def choose(
    options: Sequence[ScaleUpOption], flags: ClusterAutoscalerFlags, rng: random.Random
) -> ScaleUpOption:
    """The expander: one option among those that help."""
    ordered = sorted(options, key=lambda option: option.template.group.name)
    if flags.expander == "random":
        return rng.choice(ordered)
    if flags.expander == "price":
        return min(ordered, key=lambda option: (option.price_per_pod(), option.waste()))
    if flags.expander == "priority":
        for priority in sorted(flags.priorities, reverse=True):
            patterns = [re.compile(pattern) for pattern in flags.priorities[priority]]
            matching = [
                option
                for option in ordered
                if any(pattern.fullmatch(option.template.group.name) for pattern in patterns)
            ]
            if matching:
                return rng.choice(matching)
        return rng.choice(ordered)
    # Least-waste keeps the options that waste least; CA then picks among equals at random.
    least = min(option.waste() for option in ordered)
    best = [option for option in ordered if option.waste() - least < 1e-9]
    return best[0] if len(best) == 1 else rng.choice(best)


def decide_scale_up(
    pending: Sequence[Pod],
    groups: Sequence[GroupState],
    upcoming: Sequence[Template],
    flags: ClusterAutoscalerFlags,
    rng: random.Random,
) -> ScaleUp | None:
    """What one scan scales up, or None: pending pods not taken by upcoming nodes, on the best group."""
    waiting = pack_on_upcoming(pending, upcoming)
    if not waiting:
        return None
    total = sum(group.size for group in groups)
    headroom = flags.max_nodes_total - total if flags.max_nodes_total > 0 else None
    options: list[ScaleUpOption] = []
    helpable: set[str] = set()
    for group in groups:
        template = group.template
        candidates = [
            pod
            for pod in waiting
            if schedulable_on(pod, template.labels, template.taints)
            and fits(pod_requests(pod), template.free)
        ]
        helpable.update(pod.key for pod in candidates)
        limit = template.group.max_size - group.size
        if headroom is not None:
            limit = min(limit, headroom)
        if group.backed_off or limit <= 0 or not candidates:
            continue
        count, placed = estimate(candidates, template, limit)
        if count:
            options.append(ScaleUpOption(template, count, tuple(placed)))
    unhelpable = tuple(sorted(pod.key for pod in waiting if pod.key not in helpable))
    if not options:
        keys = tuple(sorted(pod.key for pod in waiting))
        return ScaleUp("", 0, "no group can take the pending pods now", unhelpable, keys)
    best = choose(options, flags, rng)
    return ScaleUp(
        best.template.group.name,
        best.count,
        f"{len(best.pods)} pending pods on {best.count} x {best.template.instance_type}"
        f" (expander {flags.expander})",
        unhelpable,
        tuple(sorted(pod.key for pod in waiting)),
    )


@dataclass(frozen=True, slots=True)
class NodeView:
    """A node as scale-down sees it."""

    node: Node
    group: str
    pods: tuple[Pod, ...]  # pods bound to it and not finished
    removable: bool = True  # ready, not being deleted, belongs to a group

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def movable_pods(self) -> list[Pod]:
        return [pod for pod in self.pods if not pod.is_daemonset_pod]

    def utilization(self) -> float:
        """CA's utilization: the larger of requested CPU and memory over allocatable."""
        requested: ResourceAmounts = {}
        for pod in self.pods:
            requested = add_amounts(requested, pod.spec.requests)
        fractions = [
            requested.get(resource, 0) / self.node.allocatable[resource]
            for resource in ("cpu", "memory")
            if self.node.allocatable.get(resource, 0) > 0
        ]
        return max(fractions, default=0.0)


def drain_blocker(
    pod: Pod, pdb_blocked: Mapping[str, str], pdb_covered: set[str], flags: ClusterAutoscalerFlags
) -> str | None:
    """Why CA's drain simulation refuses to move ``pod``, or None."""
    if pod.metadata.annotations.get(SAFE_TO_EVICT_ANNOTATION) == "false":
        return f"pod {pod.key} is annotated {SAFE_TO_EVICT_ANNOTATION}=false"
    if pod.do_not_disrupt:
        return f"pod {pod.key} is annotated karpenter.sh/do-not-disrupt"
    if pod.metadata.annotations.get(SAFE_TO_EVICT_ANNOTATION) == "true":
        return pdb_blocked.get(pod.key)
    if pod.metadata.controller is None:
        return f"pod {pod.key} has no controller"
    if (
        flags.skip_nodes_with_system_pods
        and pod.metadata.namespace == KUBE_SYSTEM
        and pod.key not in pdb_covered
    ):
        return f"kube-system pod {pod.key} has no PodDisruptionBudget"
    return pdb_blocked.get(pod.key)


@dataclass(frozen=True, slots=True)
class Unneeded:
    node: str
    group: str
    empty: bool


def unneeded_nodes(
    nodes: Sequence[NodeView],
    group_sizes: Mapping[str, int],
    groups: Mapping[str, NodeGroup],
    pdb_blocked: Mapping[str, str],
    pdb_covered: set[str],
    flags: ClusterAutoscalerFlags,
) -> tuple[list[Unneeded], dict[str, str]]:
    """Nodes scale-down may remove now, and why each other candidate node is kept.

    Candidates are looked at least utilized first; each one's pods are
    placed on the nodes that stay (the room they take is then gone), as CA's
    simulation of consecutive removals does.
    """
    room: dict[str, ResourceAmounts] = {}
    for view in nodes:
        used: ResourceAmounts = {}
        for pod in view.pods:
            used = add_amounts(used, pod_requests(pod))
        room[view.name] = subtract_amounts(view.node.allocatable, used)
    targets = [view for view in nodes if view.removable and not view.node.unschedulable]
    sizes = dict(group_sizes)
    removed: set[str] = set()
    found: list[Unneeded] = []
    kept: dict[str, str] = {}
    for view in sorted((view for view in nodes if view.removable), key=lambda v: (v.utilization(), v.name)):
        utilization = view.utilization()
        if utilization >= flags.utilization_threshold:
            kept[view.name] = f"utilization {utilization:.2f} is not below {flags.utilization_threshold}"
            continue
        if view.node.metadata.annotations.get(SCALE_DOWN_DISABLED_ANNOTATION) == "true":
            kept[view.name] = f"node is annotated {SCALE_DOWN_DISABLED_ANNOTATION}=true"
            continue
        group = groups.get(view.group)
        if group is None or sizes.get(view.group, 0) <= group.min_size:
            kept[view.name] = f"node group {view.group} is at its min size"
            continue
        blockers = [
            b for pod in view.movable_pods if (b := drain_blocker(pod, pdb_blocked, pdb_covered, flags))
        ]
        if blockers:
            kept[view.name] = blockers[0]
            continue
        trial = dict(room)
        stuck = ""
        for pod in sorted(view.movable_pods, key=_size_key):
            requests = pod_requests(pod)
            destination = next(
                (
                    other.name
                    for other in targets
                    if other.name != view.name
                    and other.name not in removed
                    and fits(requests, trial[other.name])
                    and schedulable_on(pod, other.node.metadata.labels, other.node.taints)
                ),
                None,
            )
            if destination is None:
                stuck = f"pod {pod.key} fits on no other node"
                break
            trial[destination] = subtract_amounts(trial[destination], requests)
        if stuck:
            kept[view.name] = stuck
            continue
        room = trial
        removed.add(view.name)
        sizes[view.group] = sizes.get(view.group, 0) - 1
        found.append(Unneeded(view.name, view.group, not view.movable_pods))
    return found, kept


def to_remove(
    unneeded: Sequence[Unneeded],
    unneeded_since: Mapping[str, float],
    last_scale_up: float | None,
    now: float,
    flags: ClusterAutoscalerFlags,
) -> list[Unneeded]:
    """The nodes one scan deletes: empty ones in bulk, else one non-empty node."""
    if not flags.scale_down_enabled:
        return []
    if last_scale_up is not None and now - last_scale_up < flags.delay_after_add:
        return []
    ripe = [item for item in unneeded if now - unneeded_since.get(item.node, now) >= flags.unneeded_time]
    empty = [item for item in ripe if item.empty]
    if empty:
        return empty[: flags.max_empty_bulk_delete]
    return ripe[:1]
