"""Cluster capacity as the provisioner and the disruption controller see it.

Both need the same derived view of the cluster: which nodes and in-flight
NodeClaims have room for which pods, what every NodePool's DaemonSets take
from each new node, and how much of each NodePool's limits is already used.
Computing it in one place keeps the two from disagreeing about capacity,
which is the root of consolidation churn in autoscalers that do.

Whether a NodePool's node class can launch anything is decided here too
(:func:`node_class_problem`), once for the provisioner, the disruption
controller and the NodePool status controller: a pool whose class is missing,
being deleted or not served by the cloud provider offers no instance types,
and pods it would have taken are told why in those words, rather than that no
instance type satisfies the pool's requirements.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from karpy.api.admission import Admission
from karpy.api.conditions import FALSE, find_condition
from karpy.api.core import NAMESPACE_NAME_LABEL, DaemonSet, LabelSelector, Node, Pod
from karpy.api.instancetype import InstanceType, offering_price
from karpy.api.nodeclaim import NodeClaim
from karpy.api.nodeclass import NodeClass
from karpy.api.nodecost import DEFAULT_NODE_OVERHEAD_COST, node_cost
from karpy.api.nodepool import CONDITION_VALIDATION_SUCCEEDED, NodeClaimTemplate, NodeClassRef, NodePool
from karpy.api.quantity import ResourceAmounts, add_amounts, subtract_amounts
from karpy.api.requirements import (
    CAPACITY_TYPE_ON_DEMAND,
    CAPACITY_TYPE_RESERVED,
    CAPACITY_TYPE_SPOT,
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    Operator,
    Requirement,
    Requirements,
)
from karpy.api.schedulerconfig import SchedulerConfiguration
from karpy.api.storage import volume_resource
from karpy.api.taints import (
    CONSOLIDATION_PLANNED_TAINT_KEY,
    DISRUPTED_TAINT_KEY,
    KNOWN_EPHEMERAL_TAINTS,
    REBOOTING_TAINT,
    UNREGISTERED_TAINT_KEY,
    Taint,
    untolerated,
)
from karpy.cloud.provider import (
    CloudProvider,
    CloudProviderError,
    NodeClassProblem,
    NodePoolNotEvaluatedError,
)
from karpy.disruption.static import StaticCount
from karpy.operator.cluster import ClusterReader
from karpy.scheduling.default_spread import DefaultSpread, SelectorSources
from karpy.scheduling.policy import SchedulingPolicy
from karpy.scheduling.solver import (
    DEFAULT_POLICY,
    NODES_RESOURCE,
    POD_RESOURCE,
    ExistingCapacity,
    NodePoolCapacity,
    Plan,
    TypeMemo,
    launchable_types,
    max_capacity,
    pool_requirements,
    solve,
)

log = logging.getLogger("karpy.state")


def daemon_overhead(
    nodepool: NodePool,
    daemonsets: Iterable[DaemonSet],
    instance_types: Sequence[InstanceType] = (),
) -> tuple[ResourceAmounts, dict[str, ResourceAmounts]]:
    """Requests of the DaemonSets that would run on a node of ``nodepool``.

    Returns the overhead of every DaemonSet that could run somewhere in the
    pool, and, per instance type where it differs, the overhead of those that
    would run on that type. Only DaemonSets that tolerate the pool's taints
    and whose node constraints match count: charging every DaemonSet to every
    node (a GPU driver DaemonSet to a CPU node, an arm64 agent to an amd64
    node) overstates overhead, which makes nodes look full and, in
    consolidation, makes the same pods look like they need another node.
    """
    requirements = pool_requirements(nodepool)
    running: list[tuple[tuple[Requirements, ...], ResourceAmounts]] = []
    total: ResourceAmounts = {}
    for daemonset in daemonsets:
        spec = daemonset.template.spec
        if untolerated(nodepool.template.taints, spec.tolerations) is not None:
            continue
        options = spec.node_requirements()
        if not any(requirements.compatible(option) is None for option in options):
            continue
        requests = dict(spec.requests)
        requests[POD_RESOURCE] = requests.get(POD_RESOURCE, 0) + 1
        running.append((options, requests))
        total = add_amounts(total, requests)
    per_type: dict[str, ResourceAmounts] = {}
    if not running:
        return total, per_type  # nothing differs by type (and a catalog per pool is much to read)
    for instance_type in instance_types:
        on_type = requirements.intersection(instance_type.requirements)
        amounts: ResourceAmounts = {}
        for options, requests in running:
            if any(on_type.compatible(option) is None for option in options):
                amounts = add_amounts(amounts, requests)
        if amounts != total:
            per_type[instance_type.name] = amounts
    return total, per_type


def nodeclaim_options(nodeclaim: NodeClaim, instance_types: Sequence[InstanceType]) -> list[InstanceType]:
    allowed = nodeclaim.requirement_set().get(LABEL_INSTANCE_TYPE)
    return [instance_type for instance_type in instance_types if allowed.has(instance_type.name)]


def _min_amounts(options: Sequence[InstanceType]) -> ResourceAmounts:
    if not options:
        return {}
    result = dict(options[0].allocatable)
    for instance_type in options[1:]:
        for resource in list(result):
            result[resource] = min(result[resource], instance_type.allocatable.get(resource, 0))
    return result


def nodeclaim_capacity(nodeclaim: NodeClaim, instance_types: Sequence[InstanceType]) -> ResourceAmounts:
    """Capacity counted against NodePool limits: launched, or the largest it could be."""
    if nodeclaim.status.capacity:
        return dict(nodeclaim.status.capacity)
    return max_capacity(nodeclaim_options(nodeclaim, instance_types))


def used_on_node(cluster: ClusterReader, node_name: str) -> ResourceAmounts:
    return used_on(cluster.pods_on_node(node_name))


def used_on(pods_on_node: Iterable[Pod]) -> ResourceAmounts:
    """What a node's pods use of it: its finished pods aside."""
    return used_by(pod for pod in pods_on_node if not pod.is_terminal)


def used_by(pods: Iterable[Pod]) -> ResourceAmounts:
    """What ``pods`` request together, one ``pods`` slot each."""
    used: ResourceAmounts = {}
    count = 0
    for pod in pods:
        for resource, amount in pod.spec.requests.items():
            used[resource] = used.get(resource, 0) + amount
        count += 1
    if count:
        used[POD_RESOURCE] = used.get(POD_RESOURCE, 0) + count
    return used


def existing_capacity(
    cluster: ClusterReader,
    instance_types: dict[str, Sequence[InstanceType]],
    overheads: dict[str, ResourceAmounts],
    exclude: frozenset[str] = frozenset(),
) -> list[ExistingCapacity]:
    """Nodes and in-flight NodeClaims that pods can still be placed on.

    Nodes and NodeClaims being deleted are left out: their pods are about to
    move, and counting them would hide the need for new capacity. So are the
    NodeClaims named in ``exclude`` (and their nodes): disruption asks "where
    would these pods go if those nodes were gone".

    A Node still tainted ``karpenter.sh/unregistered`` and matching no
    launched NodeClaim is left out too. Its instance was created, but the
    NodeClaim's launch is not in the cache yet (a watch event behind, or the
    replica that launched it died before recording it): that NodeClaim is
    counted below as in flight, and counting the Node as well would count the
    same capacity twice and leave pods pending. Only a NodeClaim registers a
    Node, so with none no pod could ever run there anyway.
    """
    result: list[ExistingCapacity] = []
    claims_by_provider: dict[str, NodeClaim] = {}
    for nodeclaim in cluster.nodeclaims():
        if nodeclaim.status.provider_id:
            claims_by_provider[nodeclaim.status.provider_id] = nodeclaim
    registered: set[str] = set()
    for node in cluster.nodes():
        claim = claims_by_provider.get(node.provider_id) if node.provider_id else None
        if claim is not None:
            registered.add(claim.name)
            if claim.name in exclude:
                continue
        elif any(taint.key == UNREGISTERED_TAINT_KEY for taint in node.taints):
            continue
        if node.metadata.deleting or node.unschedulable or (claim is not None and claim.metadata.deleting):
            continue
        if any(taint.key == DISRUPTED_TAINT_KEY for taint in node.taints):
            continue  # on its way out
        pool_types = instance_types.get(claim.nodepool, ()) if claim is not None else ()
        type_name = node.metadata.labels.get(LABEL_INSTANCE_TYPE, "")
        fallback = _type_volume_limits([t for t in pool_types if t.name == type_name][:1])
        result.append(_node_capacity(cluster, node, claim, fallback))
    for nodeclaim in cluster.nodeclaims():
        if nodeclaim.name in registered or nodeclaim.metadata.deleting or nodeclaim.name in exclude:
            continue
        pool = nodeclaim.nodepool
        if nodeclaim.status.allocatable:
            allocatable = dict(nodeclaim.status.allocatable)
        else:
            allocatable = _min_amounts(nodeclaim_options(nodeclaim, instance_types.get(pool, ())))
        options = nodeclaim_options(nodeclaim, instance_types.get(pool, ()))
        if nodeclaim.instance_type:
            options = [t for t in options if t.name == nodeclaim.instance_type]
        attachable = attach_room(cluster, "", (), _type_volume_limits(options))
        requirements = nodeclaim.requirement_set()
        for key, value in nodeclaim.metadata.labels.items():
            requirements.add(Requirement.from_operator(key, "In", (value,)))
        result.append(
            ExistingCapacity(
                name=nodeclaim.name,
                nodepool=pool,
                requirements=requirements,
                taints=nodeclaim.spec.taints,
                available={**subtract_amounts(allocatable, overheads.get(pool, {})), **attachable},
                in_flight=True,
            )
        )
    return result


@functools.lru_cache(maxsize=8192)
def _label_requirements(labels: frozenset[tuple[str, str]]) -> Requirements:
    """A node's labels as requirements, worked out once per set of labels.

    Every pass builds every node's capacity, and a node's labels almost
    never change; parsing them was a tenth of a disruption pass on a
    300-node cluster. Requirements are not changed once built (the solver
    copies before it narrows), so one object serves every pass.
    """
    return Requirements.from_labels(dict(labels))


def _node_capacity(
    cluster: ClusterReader, node: Node, claim: NodeClaim | None, volume_limits: Mapping[str, int]
) -> ExistingCapacity:
    """A Node's room, as Karpenter's cluster state counts a node until its NodeClaim is initialized.

    A Node that has just registered is not the node it is about to be: it may
    report no allocatable yet (a kwok Node is created without a status, which
    the kubelet fills in a moment later) or not all of it (extended resources
    come with their device plugins), and it carries taints that go once it is
    up (:data:`~karpy.api.taints.KNOWN_EPHEMERAL_TAINTS`: the API server puts
    ``node.kubernetes.io/not-ready`` on every new Node). Pods counted against
    that would fit nowhere, and the pass would launch a second node for the
    first one's pods: seen after a leader change, when the new leader posts
    the Nodes of the instances its predecessor left booting and provisions in
    the same breath. So until the NodeClaim is initialized the room is the
    NodeClaim's allocatable (from its instance type) and those taints do not
    block; the claim's startup taints never do.
    """
    pods = tuple(pod for pod in cluster.pods_on_node(node.name) if not pod.is_terminal)
    allocatable = node.allocatable
    ephemeral: tuple[Taint, ...] = ()
    if claim is not None:
        ephemeral = claim.spec.startup_taints
        if not claim.initialized:
            ephemeral = (*ephemeral, *KNOWN_EPHEMERAL_TAINTS)
            allocatable = claim.status.allocatable or allocatable
        if claim.rebooting:
            # A node rebooting in place comes back: its pods wait for it, not for a new node.
            ephemeral = (*ephemeral, REBOOTING_TAINT)
    return ExistingCapacity(
        name=node.name,
        # A Node no NodeClaim owns (left by one deleted without its finalizer) is room, as
        # Karpenter counts every active node, but no NodePool's, whatever its labels say.
        nodepool=node.metadata.labels.get(LABEL_NODEPOOL, "") if claim is not None else "",
        requirements=_label_requirements(frozenset(node.metadata.labels.items())),
        # The planned-consolidation mark is advice to kube-scheduler, which may still put
        # pods there: karpy plans as if it were not there.
        taints=tuple(taint for taint in node.taints if taint.key != CONSOLIDATION_PLANNED_TAINT_KEY),
        available={
            **subtract_amounts(allocatable, used_by(pods)),
            **attach_room(cluster, node.name, pods, volume_limits),
        },
        in_flight=not node.ready,
        ephemeral_taints=ephemeral,
        pods=pods,
    )


REASON_NODECLASS_NOT_FOUND = "NodeClassNotFound"
REASON_NODECLASS_TERMINATING = "NodeClassTerminating"


def node_class_problem(
    cluster: ClusterReader, cloud: CloudProvider, ref: NodeClassRef
) -> NodeClassProblem | None:
    """Why a NodePool whose ``nodeClassRef`` is ``ref`` cannot launch now; None when it can.

    The reasons are Karpenter's for a NodePool's NodeClassReady condition: the
    class is not found, it is being deleted, or (asked of the cloud provider)
    the provider does not serve it or it is not ready. Each message names the
    class, so it reads on its own in a pod's FailedScheduling event.
    """
    node_class = cluster.node_class(ref.group, ref.kind, ref.name)
    if node_class is None:
        return NodeClassProblem(REASON_NODECLASS_NOT_FOUND, f"{ref} ({ref.group}) not found")
    if node_class.metadata.deleting:
        return NodeClassProblem(REASON_NODECLASS_TERMINATING, f"{ref} is being deleted")
    problem = cloud.node_class_problem(node_class)
    if problem is None:
        return None
    return NodeClassProblem(problem.reason, f"{ref} is not ready: {problem.message}")


# Karpenter's known values of a requirement (WellKnownValuesForRequirements): a NodePool whose
# ``In`` requirement on the key lists none of them fails its runtime validation.
WELL_KNOWN_VALUES: Mapping[str, frozenset[str]] = {
    LABEL_CAPACITY_TYPE: frozenset({CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT, CAPACITY_TYPE_RESERVED})
}


def nodepool_validation_problem(cluster: ClusterReader, cloud: CloudProvider, pool: NodePool) -> str | None:
    """Why ``pool`` can launch nothing whatever pods ask, said about its requirements; None if it can.

    Karpenter's runtime validation refuses a pool whose ``In`` requirement on a
    key with known values (``karpenter.sh/capacity-type``) lists none of them;
    beyond it, a pool whose requirements (alone, else together) admit no
    offering of its node class' instance types cannot launch either. Both make
    the pool's ``ValidationSucceeded`` false, and are what its pods are told,
    rather than blaming their own selector. The node class must be ready for
    the second (its instance types are unknown otherwise).
    """
    requirements = pool_requirements(pool)
    unknown = well_known_values_problem(requirements)
    if unknown is not None:
        return unknown
    if node_class_problem(cluster, cloud, pool.template.node_class_ref) is not None:
        return None
    try:
        catalog = cloud.get_instance_types(pool)
    except CloudProviderError:
        return None  # said by the provisioner's own warning
    return offering_problem(requirements, catalog)


def well_known_values_problem(requirements: Requirements) -> str | None:
    """Karpenter's check of requirements on keys with known values: an ``In`` naming none of them."""
    for requirement in requirements:
        known = WELL_KNOWN_VALUES.get(requirement.key)
        if known and requirement.operator() == Operator.IN and not requirement.values & known:
            return (
                f"requirement {requirement} matches no offering: no valid values found for "
                f"{requirement.key}, expected one of: {', '.join(sorted(known))}"
            )
    return None


def offering_problem(requirements: Requirements, catalog: Sequence[InstanceType]) -> str | None:
    """Which of ``requirements`` admits no offering of ``catalog`` (or that they do not together)."""
    if any(t.requirements.intersects(requirements) is None for t in catalog):
        return None
    for requirement in requirements:
        alone = Requirements(requirement)
        if not any(t.requirements.intersects(alone) is None for t in catalog):
            return f"requirement {requirement} matches no offering of any instance type"
    described = ", ".join(
        str(requirement) for requirement in requirements if requirement.key != LABEL_NODEPOOL
    )
    return f"requirements {described} together match no offering of any instance type"


def invalid_nodepools(cluster: ClusterReader) -> dict[str, str]:
    """The NodePools whose status says they failed validation, with why: no replacement goes there.

    The disruption controller reads it from the status the NodePool status
    controller writes (a pool the API server refused NodeClaims of included),
    as Karpenter launches replacements only in Ready pools.
    """
    invalid: dict[str, str] = {}
    for pool in cluster.nodepools():
        found = find_condition(pool.status.conditions, CONDITION_VALIDATION_SUCCEEDED)
        if found is not None and found.status == FALSE:
            invalid[pool.name] = f"ValidationSucceeded=False: {found.message}"
    return invalid


# Why a static pool launches nothing for pending pods (they may still land on its nodes).
STATIC_POOL_UNAVAILABLE = "static (spec.replicas): it keeps its replica count and launches no node for pods"


def static_counts(cluster: ClusterReader, deleted: Container[str] = ()) -> dict[str, StaticCount]:
    """Each static NodePool's NodeClaims by state: deleting (or in ``deleted``, asked to be deleted
    before the cache shows it), pending disruption (its node carries the disrupted taint a disruption
    command puts on before it launches the replacement), or active."""
    static = {pool.name for pool in cluster.nodepools() if pool.is_static}
    counts: dict[str, list[int]] = {name: [0, 0, 0] for name in static}
    for nodeclaim in cluster.nodeclaims():
        count = counts.get(nodeclaim.nodepool)
        if count is None:
            continue
        node = cluster.node(nodeclaim.status.node_name) if nodeclaim.status.node_name else None
        if nodeclaim.metadata.deleting or nodeclaim.name in deleted:
            count[2] += 1
        elif node is not None and any(taint.key == DISRUPTED_TAINT_KEY for taint in node.taints):
            count[1] += 1
        else:
            count[0] += 1
    return {name: StaticCount(*count) for name, count in counts.items()}


def nodepool_resources(nodeclaims: Iterable[NodeClaim]) -> ResourceAmounts:
    """What a NodePool's ``status.resources`` and usage metric say: its NodeClaims' capacity, and their count.

    Every NodeClaim of the pool counts as a node (Karpenter counts the nodes
    of its cluster state, launched or not); a NodeClaim adds its capacity once
    it is launched.
    """
    resources: ResourceAmounts = {}
    count = 0
    for nodeclaim in nodeclaims:
        resources = add_amounts(resources, nodeclaim.status.capacity)
        count += 1
    resources[NODES_RESOURCE] = count
    return resources


@dataclass(frozen=True, slots=True)
class PoolTypes:
    """What a NodePool's instance types are to the solver: those it may launch, and the
    DaemonSets' requests on each (``daemon_overhead``)."""

    launchable: list[InstanceType]
    overhead: ResourceAmounts
    type_overhead: dict[str, ResourceAmounts]
    # What the solver works out from these alone, shared by every solve while they stay.
    memo: TypeMemo = field(default_factory=TypeMemo)


# The priced catalogs PoolTypesCache keeps: one per node cost and catalog list in use (a catalog
# replaced by the provider is left behind, and goes once this many newer ones were priced).
PRICED_ENTRIES = 64


class PoolTypesCache:
    """Each NodePool's :class:`PoolTypes`, kept while what they are worked out from stays.

    Working them out reads every type of the catalog (hundreds on AWS) against
    the pool's requirements and every DaemonSet, which was most of a
    disruption pass on a small cluster, and it is the same answer pass after
    pass: it changes only with the pool's template, the DaemonSets, or the
    catalog the provider returns (a new list whenever an offering's
    availability or price changes, so the list itself is the key; the entry
    holds it, so its identity cannot be reused by another list).
    """

    def __init__(self, node_overhead_cost: float = DEFAULT_NODE_OVERHEAD_COST) -> None:
        # $/h every node costs beyond its instance, volumes and address (karpy.api.nodecost).
        self.node_overhead_cost = node_overhead_cost
        self._entries: dict[
            str, tuple[Sequence[InstanceType], NodeClaimTemplate, tuple[DaemonSet, ...], PoolTypes]
        ] = {}
        # By the cost a node adds and the catalog: pools of one node class (or of classes that cost
        # alike) share a list, so ten thousand pools price the catalog once, not ten thousand times;
        # pools whose NodeOverlays differ each have theirs. The oldest entries go past PRICED_ENTRIES.
        self._priced: dict[tuple[float, int], tuple[Sequence[InstanceType], list[InstanceType]]] = {}
        # The DaemonSets, LimitRanges and RuntimeClasses last read, and the DaemonSets admitted under them.
        self._admitted: tuple[tuple[object, ...], tuple[DaemonSet, ...]] | None = None

    def daemonsets(self, cluster: ClusterReader) -> tuple[DaemonSet, ...]:
        """The DaemonSets with their pods sized as admission will make them (:func:`admitted_daemonsets`).

        Kept while the objects read stay the same ones (a cache replaces an
        object when it changes), so the pool types keyed by them stay too.
        """
        sources = (*cluster.daemonsets(), None, *cluster.limit_ranges(), None, *cluster.runtime_classes())
        if self._admitted is not None and _same_objects(self._admitted[0], sources):
            return self._admitted[1]
        admitted = admitted_daemonsets(cluster)
        self._admitted = (sources, admitted)
        return admitted

    def priced(
        self, nodepool: NodePool, node_class: NodeClass | None, catalog: Sequence[InstanceType]
    ) -> list[InstanceType]:
        """The catalog with every offering's price raised by what a node of the pool costs beyond it.

        Provisioning and consolidation both price nodes from this list, so a
        plan and the nodes it would replace are priced alike
        (:mod:`karpy.api.nodecost`). Kept while the catalog and the cost stay,
        so the list, like the provider's, changes only when they do. An
        offering without a known price (0 or not finite) keeps it: the cost
        must not make an unknown price look known.
        """
        cost = node_cost(node_class, self.node_overhead_cost).total
        # The entry holds the catalog, so its id cannot be another list's while the entry stays.
        key = (cost, id(catalog))
        entry = self._priced.get(key)
        if entry is not None and entry[0] is catalog:
            return entry[1]
        priced = list(catalog) if cost == 0 else [with_node_cost(type_, cost) for type_ in catalog]
        self._priced[key] = (catalog, priced)
        while len(self._priced) > PRICED_ENTRIES:
            del self._priced[next(iter(self._priced))]
        return priced

    def get(
        self, nodepool: NodePool, daemonsets: tuple[DaemonSet, ...], catalog: Sequence[InstanceType]
    ) -> PoolTypes:
        entry = self._entries.get(nodepool.name)
        if (
            entry is not None
            and entry[0] is catalog
            and entry[1] == nodepool.template
            and entry[2] == daemonsets
        ):
            return entry[3]
        overhead, type_overhead = daemon_overhead(nodepool, daemonsets, catalog)
        types = PoolTypes(launchable_types(nodepool, catalog), overhead, type_overhead)
        self._entries[nodepool.name] = (catalog, nodepool.template, daemonsets, types)
        return types


def _same_objects(a: Sequence[object], b: Sequence[object]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def admitted_daemonsets(cluster: ClusterReader) -> tuple[DaemonSet, ...]:
    """The DaemonSets whose pods admission lets be created, each sized as its pods will be.

    A DaemonSet's pod on a node not launched yet is sized from its template,
    but the pod that runs is the one admission makes of it: LimitRange
    defaults and RuntimeClass overhead included (:mod:`karpy.api.admission`).
    Sized from the template alone, a node can be too small for the pod that
    runs, and the pod it was launched for is pending again, node after node.
    """
    return Admission.of(cluster.limit_ranges(), cluster.runtime_classes()).daemonsets(cluster.daemonsets())


def with_node_cost(instance_type: InstanceType, cost: float) -> InstanceType:
    """``instance_type`` with ``cost`` added to each offering whose price is known."""
    offerings = tuple(
        dataclasses.replace(offering, price=offering.price + cost)
        if 0 < offering.price < float("inf")
        else offering
        for offering in instance_type.offerings
    )
    return dataclasses.replace(instance_type, offerings=offerings)


def nodepool_capacity(
    cluster: ClusterReader,
    nodepool: NodePool,
    instance_types: Sequence[InstanceType],
    types: PoolTypes,
) -> NodePoolCapacity:
    remaining: ResourceAmounts | None = None
    if nodepool.limits:
        used: ResourceAmounts = {}
        count = 0
        for nodeclaim in cluster.nodeclaims():
            if nodeclaim.nodepool == nodepool.name:
                used = add_amounts(used, nodeclaim_capacity(nodeclaim, instance_types))
                count += 1
        remaining = {
            resource: limit - (count if resource == NODES_RESOURCE else used.get(resource, 0))
            for resource, limit in nodepool.limits.items()
        }
    # Limits count existing NodeClaims against every type (one may be of a type the pool no
    # longer admits); what the pool can launch is only what its requirements admit.
    return NodePoolCapacity(
        nodepool, types.launchable, types.overhead, remaining, types.type_overhead, memo=types.memo
    )


def volume_terms(cluster: ClusterReader, pods: Sequence[Pod]) -> dict[str, tuple[Requirements, ...]]:
    """Per pod, the node affinity its bound persistent volumes impose (ANDed across volumes)."""
    result: dict[str, tuple[Requirements, ...]] = {}
    for pod in pods:
        terms: tuple[Requirements, ...] = ()
        for claim_name in pod.spec.claim_names:
            claim = cluster.persistent_volume_claim(pod.metadata.namespace, claim_name)
            volume = cluster.persistent_volume(claim.volume_name) if claim and claim.volume_name else None
            if volume is None or not volume.node_terms:
                continue
            terms = (
                volume.node_terms
                if not terms
                else tuple(a.intersection(b) for a in terms for b in volume.node_terms)
            )
        if terms:
            result[pod.key] = terms
    return result


def pod_volumes(cluster: ClusterReader, pod: Pod) -> dict[str, set[str]]:
    """The claims ``pod`` mounts by the CSI driver that attaches each, as Karpenter's GetVolumes finds them.

    A claim bound to a volume counts under the volume's driver (none if no CSI
    driver attaches it); an unbound one under its StorageClass's provisioner.
    A claim that does not exist, or whose class does not, counts under none.
    """
    volumes: dict[str, set[str]] = {}
    for claim_name in pod.spec.claim_names:
        claim = cluster.persistent_volume_claim(pod.metadata.namespace, claim_name)
        if claim is None:
            continue
        if claim.volume_name:
            volume = cluster.persistent_volume(claim.volume_name)
            driver = volume.csi_driver if volume is not None else ""
        else:
            storage_class = (
                cluster.storage_class(claim.storage_class_name) if claim.storage_class_name else None
            )
            driver = storage_class.csi_driver if storage_class is not None else ""
        if driver:
            volumes.setdefault(driver, set()).add(f"{pod.metadata.namespace}/{claim_name}")
    return volumes


def volume_counts(cluster: ClusterReader, pods: Iterable[Pod]) -> dict[str, ResourceAmounts]:
    """Per pod that mounts any, how many volumes of each CSI driver it attaches, as the solver's resources."""
    counts: dict[str, ResourceAmounts] = {}
    for pod in pods:
        if not pod.spec.claim_names:
            continue
        volumes = pod_volumes(cluster, pod)
        if volumes:
            counts[pod.key] = {volume_resource(driver): len(claims) for driver, claims in volumes.items()}
    return counts


def attach_room(
    cluster: ClusterReader, node_name: str, pods: Iterable[Pod], fallback: Mapping[str, int]
) -> ResourceAmounts:
    """How many more volumes of each limited CSI driver the node can attach.

    The limit is the node's CSINode's (a driver it lists without a count is
    unlimited), else its instance type's (``fallback``); what its pods mount
    is counted once per claim, however many of them mount it.
    """
    limits: dict[str, int | None] = dict(fallback)
    csi_node = cluster.csi_node(node_name) if node_name else None
    if csi_node is not None:
        limits.update(csi_node.limits)
    if not any(limit is not None for limit in limits.values()):
        return {}
    used: dict[str, set[str]] = {}
    for pod in pods:
        if pod.spec.claim_names:
            for driver, claims in pod_volumes(cluster, pod).items():
                used.setdefault(driver, set()).update(claims)
    return {
        volume_resource(driver): limit - len(used.get(driver, ()))
        for driver, limit in limits.items()
        if limit is not None
    }


def _type_volume_limits(options: Sequence[InstanceType]) -> dict[str, int]:
    """The attach limits every one of ``options`` has, the least of each (the cloud may pick any)."""
    if not options:
        return {}
    limits = dict(options[0].volume_limits)
    for instance_type in options[1:]:
        for driver in list(limits):
            if driver in instance_type.volume_limits:
                limits[driver] = min(limits[driver], instance_type.volume_limits[driver])
            else:
                del limits[driver]
    return limits


def namespace_labels(cluster: ClusterReader) -> dict[str, dict[str, str]]:
    """Every namespace's labels by name: those of its Namespace object, if any, and its name label.

    A namespace holding pods exists whether or not its object was read (the
    simulator runs manifests without Namespaces); it has the name label the
    apiserver gives every namespace, so a namespaceSelector on that label
    still selects it.
    """
    labels: dict[str, dict[str, str]] = {
        pod.metadata.namespace: {NAMESPACE_NAME_LABEL: pod.metadata.namespace} for pod in cluster.pods()
    }
    for namespace in cluster.namespaces():
        labels[namespace.metadata.name] = namespace.labels
    return labels


@dataclass(slots=True)
class SchedulingSnapshot:
    """Everything the scheduling core needs about the cluster, taken at one moment."""

    cluster: ClusterReader
    nodepools: dict[str, NodePool]
    instance_types: dict[str, list[InstanceType]]
    pools: list[NodePoolCapacity]
    existing: list[ExistingCapacity]
    namespace_labels: dict[str, dict[str, str]]
    # MIN_VALUES_POLICY and PREFERENCE_POLICY.
    policy: SchedulingPolicy = DEFAULT_POLICY
    # The cluster's default topology spread constraints, for pods that declare none (SCHEDULER_CONFIG).
    default_spread: DefaultSpread | None = None

    def solve(self, pods: Sequence[Pod], *, effective_zones: bool = False) -> Plan:
        """The plan for ``pods`` (with each one's effective zone when asked: see ``solve``)."""
        if self.default_spread is not None:
            pods = self.default_spread.apply(pods)
        return solve(
            pods,
            self.existing,
            self.pools,
            volume_terms(self.cluster, pods),
            self.namespace_labels,
            policy=self.policy,
            volume_counts=volume_counts(self.cluster, pods),
            effective_zones=effective_zones,
        )


def scheduling_snapshot(
    cluster: ClusterReader,
    cloud: CloudProvider,
    exclude: frozenset[str] = frozenset(),
    pool_types: PoolTypesCache | None = None,
    unavailable: Mapping[str, str] | None = None,
    policy: SchedulingPolicy = DEFAULT_POLICY,
    scheduler_config: SchedulerConfiguration | None = None,
) -> SchedulingSnapshot:
    """The cluster as the scheduling core sees it, without the NodeClaims in ``exclude``.

    The NodePools in ``unavailable`` launch nothing; the pods they alone could
    take are told why (``NodePool <name>: <why>``).

    The provisioner and the disruption controller both build their view here,
    so "where would these pods go" has one answer in both. A controller that
    takes snapshots pass after pass passes its ``pool_types`` cache.
    """
    if pool_types is None:
        pool_types = PoolTypesCache()
    nodepools = {pool.name: pool for pool in cluster.nodepools() if not pool.metadata.deleting}
    daemonsets = pool_types.daemonsets(cluster)
    instance_types: dict[str, list[InstanceType]] = {}
    overheads: dict[str, ResourceAmounts] = {}
    pools: list[NodePoolCapacity] = []
    for pool in nodepools.values():
        problem = node_class_problem(cluster, cloud, pool.template.node_class_ref)
        instance_types[pool.name] = []
        if problem is None:
            try:
                ref = pool.template.node_class_ref
                instance_types[pool.name] = pool_types.priced(
                    pool, cluster.node_class(ref.group, ref.kind, ref.name), cloud.get_instance_types(pool)
                )
            except NodePoolNotEvaluatedError as error:
                log.debug("NodePool %s: %s", pool.name, error)  # the NodeOverlays' first evaluation is due
            except CloudProviderError as error:
                log.warning("NodePool %s has no instance types: %s", pool.name, error)
        types = pool_types.get(pool, daemonsets, instance_types[pool.name])
        overheads[pool.name] = types.overhead
        capacity = nodepool_capacity(cluster, pool, instance_types[pool.name], types)
        invalid = None if problem is not None else _launch_problem(pool, types, instance_types[pool.name])
        if problem is not None:
            capacity = dataclasses.replace(capacity, unavailable=f"node class {problem.message}")
        elif invalid is not None:
            capacity = dataclasses.replace(capacity, unavailable=invalid)
        elif unavailable and pool.name in unavailable:
            capacity = dataclasses.replace(capacity, unavailable=unavailable[pool.name])
        elif pool.is_static:
            capacity = dataclasses.replace(capacity, unavailable=STATIC_POOL_UNAVAILABLE)
        pools.append(capacity)
    existing = existing_capacity(cluster, dict(instance_types), overheads, exclude)
    return SchedulingSnapshot(
        cluster,
        nodepools,
        instance_types,
        pools,
        existing,
        namespace_labels(cluster),
        policy,
        default_spread(cluster, scheduler_config),
    )


def default_spread(cluster: ClusterReader, config: SchedulerConfiguration | None) -> DefaultSpread | None:
    """What gives pods the cluster's default spread constraints, reading its Services and controllers."""
    if config is None or not config.default_constraints:
        return None

    def services(namespace: str) -> list[dict[str, str] | None]:
        return [service.selector for service in cluster.services() if service.metadata.namespace == namespace]

    def owner(api_version: str, kind: str, namespace: str, name: str) -> LabelSelector | None:
        if kind == "ReplicationController":
            controller = cluster.replication_controller(namespace, name)
            return LabelSelector(dict(controller.selector)) if controller and controller.selector else None
        workload = cluster.scalable(kind, namespace, name)
        return workload.selector if workload is not None else None

    return DefaultSpread(config.default_constraints, SelectorSources(services, owner))


def _launch_problem(pool: NodePool, types: PoolTypes, catalog: Sequence[InstanceType]) -> str | None:
    """Why a pool whose node class is ready admits no instance type (as its status says), if it does not."""
    if types.launchable or not catalog:
        return None  # no catalog: the provider's error is what is wrong, and was logged
    requirements = pool_requirements(pool)
    return well_known_values_problem(requirements) or offering_problem(requirements, catalog)


def pdb_blocked_pods(cluster: ClusterReader) -> dict[str, str]:
    """Pods a PodDisruptionBudget would not let be evicted now, with the budget's name."""
    pods = [pod for pod in cluster.pods() if not pod.is_terminal]
    blocked: dict[str, str] = {}
    for budget in cluster.pod_disruption_budgets():
        matching = [pod for pod in pods if budget.selects(pod)]
        healthy = sum(1 for pod in matching if pod.phase == "Running" and not pod.metadata.deleting)
        if budget.disruptions_allowed(healthy, len(matching)) > 0:
            continue
        name = f"{budget.metadata.namespace}/{budget.metadata.name}"
        for pod in matching:
            blocked[pod.key] = f"PodDisruptionBudget {name} allows no disruption now"
    return blocked


def node_of(cluster: ClusterReader, nodeclaim: NodeClaim) -> Node | None:
    """The Node of ``nodeclaim``: by the name its registration recorded, else by provider ID."""
    if nodeclaim.status.node_name:
        node = cluster.node(nodeclaim.status.node_name)
        if node is not None:
            return node
    if not nodeclaim.status.provider_id:
        return None
    return next((node for node in cluster.nodes() if node.provider_id == nodeclaim.status.provider_id), None)


def launched_price(nodeclaim: NodeClaim, instance_types: Sequence[InstanceType]) -> float:
    """The hourly price of the offering a NodeClaim was launched on (0 if unknown)."""
    price = offering_price(instance_types, nodeclaim.instance_type, nodeclaim.zone, nodeclaim.capacity_type)
    return 0.0 if price is None else price
