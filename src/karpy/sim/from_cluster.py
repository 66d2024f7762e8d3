"""A simulation that starts from a real cluster as it is (``karpy simulate --from-cluster``).

:func:`starting_state` turns a :class:`~karpy.api.snapshot.ClusterSnapshot`
(the records :mod:`karpy.kube.snapshot` read) into what the simulator starts
from, without touching a simulation: the objects in the order they can be
created in (a PriorityClass before the pods that name it, a node class before
its NodePools), the instances the NodeClaims stand for, the objects that were
being deleted, and notes on what was left out. It is pure, so ``karpy plan``
can start from the same state. :func:`seed` puts that state into a
:class:`~karpy.sim.simulation.Simulation` whose clock starts when the cluster
was read:

- every object keeps its uid, creationTimestamp and status: pods stay bound to
  their nodes and running, NodeClaims stay launched, registered and
  initialized with their conditions' times and ``lastPodEventTime``, so
  ``consolidateAfter``, expiry and budgets' windows count from the real times;
- a NodeClaim's instance becomes one of the simulated cloud's, priced by the
  offering its labels name in its node class' catalog (the bundled catalog,
  the one ``karpy run`` prices kwok nodes with); one the catalog does not list
  is noted and left unpriced;
- Nodes no NodePool manages stay as they are: fixed capacity, with their
  labels, taints, allocatable and pods, which nothing launches or removes;
- objects the cluster was deleting are deleted again at the start (their
  finalizers hold them as they held them in the cluster);
- finished pods are left out: they hold nothing and nothing waits for them.

Seeding is not a stream of events: the pod-event controller's keys queued by
the pods' creation are dropped, so a node's ``lastPodEventTime`` is the
cluster's, not the moment of the load.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from karpy.api.core import Node, Pod
from karpy.api.nodeclaim import CONDITION_LAUNCHED, NodeClaim
from karpy.api.requirements import LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_NODEPOOL, LABEL_ZONE
from karpy.api.snapshot import ClusterSnapshot
from karpy.cloud.provider import CloudProviderError
from karpy.controllers.nodeclaim import NodeClaimPodEvents
from karpy.operator.cluster import AlreadyExistsError, KubeError, NotFoundError
from karpy.operator.reads import object_key, object_kind, object_meta
from karpy.sim.simulation import Simulation

# The order kinds are created in: what others refer to first. Kinds not listed come after these.
CREATION_ORDER = (
    "Namespace",
    "PriorityClass",
    "StorageClass",
    "RuntimeClass",
    "LimitRange",
    "EC2NodeClass",
    "KWOKNodeClass",
    "NodePool",
    "Node",
    "CSINode",
    "NodeClaim",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "Deployment",
    "ReplicaSet",
    "StatefulSet",
    "DaemonSet",
    "PodDisruptionBudget",
    "Pod",
)


@dataclass(frozen=True, slots=True)
class RunningInstance:
    """The instance a NodeClaim stands for, as its labels and status name it."""

    nodeclaim: str
    node_name: str
    instance_type: str
    zone: str
    capacity_type: str
    launched_at: float


@dataclass(frozen=True, slots=True)
class StartingState:
    """What a simulation of a cluster starts from (see the module docstring)."""

    start: float
    objects: tuple[object, ...]
    instances: tuple[RunningInstance, ...]
    # (kind, key) of the objects the cluster was deleting.
    deleting: tuple[tuple[str, str], ...]
    notes: tuple[str, ...]

    def count(self, kind: str) -> int:
        return sum(1 for obj in self.objects if object_kind(obj) == kind)


def _rank(kind: str) -> int:
    return CREATION_ORDER.index(kind) if kind in CREATION_ORDER else len(CREATION_ORDER)


def starting_state(snapshot: ClusterSnapshot) -> StartingState:
    """The state a simulation of the cluster ``snapshot`` read starts from."""
    notes = [f"left out, karpy cannot read it: {line}" for line in snapshot.unreadable]
    finished = 0
    kept: list[object] = []
    for obj in snapshot.objects:
        if isinstance(obj, Pod) and obj.is_terminal:
            finished += 1
            continue
        kept.append(obj)
    if finished:
        notes.append(f"{finished} finished pods left out: they hold nothing")
    kept.sort(key=lambda obj: (_rank(object_kind(obj)), object_kind(obj), object_key(obj)))
    nodes_by_provider = {
        node.provider_id: node for node in kept if isinstance(node, Node) and node.provider_id
    }
    instances = []
    for claim in kept:
        if isinstance(claim, NodeClaim) and claim.status.provider_id:
            instances.append(_instance_of(claim, nodes_by_provider.get(claim.status.provider_id), snapshot))
    managed = {instance.node_name for instance in instances}
    fixed = sorted(
        node.name
        for node in kept
        if isinstance(node, Node) and node.name not in managed and LABEL_NODEPOOL not in node.metadata.labels
    )
    if fixed:
        notes.append(
            f"{len(fixed)} nodes no NodePool manages, kept as fixed capacity: {', '.join(fixed[:5])}"
            + (", ..." if len(fixed) > 5 else "")
        )
    deleting = tuple(
        (object_kind(obj), object_key(obj)) for obj in kept if object_meta(obj).deletion_timestamp is not None
    )
    return StartingState(snapshot.taken_at, tuple(kept), tuple(instances), deleting, tuple(notes))


def _instance_of(claim: NodeClaim, node: Node | None, snapshot: ClusterSnapshot) -> RunningInstance:
    labels = claim.metadata.labels
    if node is not None:
        labels = {**labels, **node.metadata.labels}  # the Node's labels are what the kubelet reported
    launched = claim.condition(CONDITION_LAUNCHED)
    launched_at = (
        launched.last_transition_time
        if launched is not None and launched.last_transition_time
        else claim.metadata.creation_timestamp or snapshot.taken_at
    )
    return RunningInstance(
        nodeclaim=claim.name,
        node_name=node.name if node is not None else claim.status.node_name or claim.name,
        instance_type=labels.get(LABEL_INSTANCE_TYPE, ""),
        zone=labels.get(LABEL_ZONE, ""),
        capacity_type=labels.get(LABEL_CAPACITY_TYPE, ""),
        launched_at=launched_at,
    )


def seed(simulation: Simulation, state: StartingState) -> list[str]:
    """Put ``state`` into ``simulation``, whose clock starts at ``state.start``; notes on what did not fit."""
    if simulation.clock.now() != state.start:
        raise ValueError("the simulation must start when the cluster was read: Simulation(start=...)")
    notes = list(state.notes)
    cluster, cloud = simulation.cluster, simulation.cloud
    instances = {instance.nodeclaim: instance for instance in state.instances}
    for obj in state.objects:
        if isinstance(obj, NodeClaim) and obj.name in instances:
            # Before the NodeClaim: what records its cost reads the instance's price as it appears.
            running = instances[obj.name]
            try:
                adopted = cloud.adopt(
                    obj,
                    running.node_name,
                    running.instance_type,
                    running.zone,
                    running.capacity_type,
                    running.launched_at,
                )
            except CloudProviderError as problem:
                adopted, why = None, str(problem)
            else:
                offering = f"{running.instance_type} {running.capacity_type} in {running.zone}"
                why = f"{offering} is not in its catalog"
            if adopted is None:
                notes.append(f"NodeClaim {obj.name}: unpriced, {why}")
            elif cluster.node(running.node_name) is None:
                # Launched and not registered yet: its node joins as a launched instance's does.
                for listener in cloud.launch_listeners:
                    listener(adopted)
        try:
            cluster.create(obj)
        except (KubeError, AlreadyExistsError) as problem:
            notes.append(f"{object_kind(obj)} {object_key(obj)}: left out: {problem}")
    for kind, key in state.deleting:
        try:
            cluster.delete_key(kind, key)
        except NotFoundError:
            continue
    simulation.runtime.forget(NodeClaimPodEvents.name)
    return notes


def describe(state: StartingState, kinds: Iterable[str] = ("Node", "NodeClaim", "Pod")) -> str:
    """One line saying what was loaded: ``12 Nodes, 10 NodeClaims, 240 Pods read at ...``."""
    return ", ".join(f"{state.count(kind)} {kind}s" for kind in kinds)
