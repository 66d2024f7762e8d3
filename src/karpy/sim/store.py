"""The simulator's in-memory cluster: an apiserver without the network.

It keeps what a kube-apiserver keeps for the objects karpy cares about and
behaves like one where controllers can tell the difference:

- every write that changes something bumps a cluster-wide resourceVersion
  (a no-op update is not a change), and an update carrying a
  stale resourceVersion raises ConflictError, so optimistic-concurrency bugs
  show up here and not first in a real cluster;
- ``generateName`` gets a unique suffix (deterministic, from a counter);
- deleting an object with finalizers only marks it (deletionTimestamp); it is
  removed when an update clears the last finalizer;
- deleting an owner deletes its dependents (background cascading, as the
  garbage collector does for Deployments → ReplicaSets → Pods);
- the Eviction API honours PodDisruptionBudgets and answers 429 otherwise;
- a pod is admitted as the Priority admission plugin admits it: its
  ``priorityClassName`` (or the ``globalDefault`` PriorityClass when it names
  none) sets ``spec.priority``, and a class that does not exist refuses the
  create with :class:`AdmissionError` (the apiserver's 403), which whoever
  created the pod reports;
- a pod is sized as the LimitRanger and RuntimeClass admission plugins make
  it (:mod:`karpy.api.admission`): its namespace's LimitRange defaults fill
  its containers' missing requests and limits, its RuntimeClass sets its
  overhead, and a pod those plugins refuse raises :class:`AdmissionError`;
- every change is announced to subscribers as (kind, old, new), the way an
  informer's event handlers see it.

Reads return the stored frozen records themselves: nothing can mutate them.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from karpy.api.admission import Admission, AdmissionRefusedError
from karpy.api.core import (
    POD_RUNNING,
    SYSTEM_PRIORITY_CLASSES,
    Deployment,
    Pod,
    PodDisruptionBudget,
    PriorityClass,
    ReplicaSet,
    StatefulSet,
)
from karpy.api.meta import ObjectMeta
from karpy.operator.cluster import (
    AlreadyExistsError,
    Clock,
    ConflictError,
    EvictionRefusedError,
    KubeError,
    NotFoundError,
)
from karpy.operator.reads import NodeClaimIndex, TypedReads, object_key, object_kind, object_meta
from karpy.sim.budget import MAX_SIMULATED_PODS

T = TypeVar("T")
Listener = Callable[[str, object | None, object | None], None]
log = logging.getLogger("karpy.sim")

_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


@dataclass(frozen=True, slots=True)
class Event:
    """A Kubernetes Event, as ``kubectl get events`` would list it."""

    time: float
    type: str
    reason: str
    message: str
    kind: str
    namespace: str
    name: str


class AdmissionError(KubeError):
    """403 from an admission plugin: the object is refused as written."""


def _with_meta(obj: T, meta: ObjectMeta) -> T:
    return dataclasses.replace(obj, metadata=meta)  # type: ignore[type-var]


class InMemoryCluster(TypedReads):
    """Implements karpy.operator.cluster.Cluster over dictionaries."""

    def __init__(self, clock: Clock, max_pods: int = MAX_SIMULATED_PODS) -> None:
        self.clock = clock
        # The most pods the store holds (karpy.sim.budget): past it a pod is refused, as a quota refuses.
        self.max_pods = max_pods
        self.pods_refused = 0
        self._objects: dict[str, dict[str, Any]] = {}
        self._pods_by_node: dict[str, set[str]] = {}
        self._unbound_pods: set[str] = set()
        self._nodeclaim_index = NodeClaimIndex()
        # Objects by the owner their ownerReferences name, (kind, uid) -> {(kind, key)}, and
        # each object's place in its table, so garbage collection looks up dependents
        # instead of scanning the store for each object removed.
        self._owned: dict[tuple[str, str], set[tuple[str, str]]] = {}
        self._places: dict[tuple[str, str], int] = {}
        self._stored = 0
        self._version = 0
        # The uids objects were created with (not generated here): a generated one must differ from them.
        self._given_uids: set[str] = set()
        self._changes = 0
        self._names = 0
        self._listeners: list[Listener] = []
        self.events: list[Event] = []
        # When each accepted eviction happened (the eviction API's log, for reports).
        self.evictions: list[float] = []

    # -- subscriptions ---------------------------------------------------

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def _announce(self, kind: str, old: object | None, new: object | None) -> None:
        for listener in self._listeners:
            listener(kind, old, new)

    # -- generic access --------------------------------------------------

    def objects(self, kind: str) -> Iterator[Any]:
        return iter(list(self._objects.get(kind, {}).values()))

    def get(self, kind: str, key: str) -> Any | None:
        return self._objects.get(kind, {}).get(key)

    def _all(self, kind: str) -> Iterable[Any]:
        return self.objects(kind)

    def _get(self, kind: str, key: str) -> object | None:
        return self.get(kind, key)

    @property
    def changes(self) -> int:
        """How many times an object was stored or removed: equal counts, the same contents."""
        return self._changes

    def _store(self, kind: str, key: str, obj: object | None) -> None:
        self._changes += 1
        table = self._objects.setdefault(kind, {})
        old = table.get(key)
        if kind == "Pod":
            self._index_pod(key, old, obj)
        elif kind == "NodeClaim":
            self._nodeclaim_index.update(old, obj)
        if old is not None:
            for owner in object_meta(old).owner_references:
                self._owned.get((owner.kind, owner.uid), set()).discard((kind, key))
        if obj is None:
            table.pop(key, None)
            self._places.pop((kind, key), None)
        else:
            if key not in table:
                self._stored += 1
                self._places[(kind, key)] = self._stored
            table[key] = obj
            for owner in object_meta(obj).owner_references:
                self._owned.setdefault((owner.kind, owner.uid), set()).add((kind, key))

    def _index_pod(self, key: str, old: object | None, new: object | None) -> None:
        if isinstance(old, Pod):
            if old.spec.node_name:
                self._pods_by_node.get(old.spec.node_name, set()).discard(key)
            self._unbound_pods.discard(key)
        if isinstance(new, Pod):
            if new.spec.node_name:
                self._pods_by_node.setdefault(new.spec.node_name, set()).add(key)
            elif not new.is_terminal:
                self._unbound_pods.add(key)

    def _next_version(self) -> str:
        self._version += 1
        return str(self._version)

    def _generate_name(self, kind: str, prefix: str) -> str:
        table = self._objects.get(kind, {})
        while True:
            self._names += 1
            number = self._names * 7919  # spread consecutive counters over the alphabet
            suffix = ""
            for _ in range(5):
                number, digit = divmod(number, len(_NAME_ALPHABET))
                suffix += _NAME_ALPHABET[digit]
            name = f"{prefix}{suffix}"
            if name not in table and f"default/{name}" not in table:
                return name

    # -- ClusterWriter ---------------------------------------------------

    def _admit_pod(self, pod: Pod) -> Pod:
        """``pod`` as admission makes it: sized (LimitRanger, RuntimeClass), then given its priority."""
        if pod.spec.runtime_class_name or pod.spec.resources.overhead or self._has("LimitRange"):
            try:
                pod = Admission.of(self.limit_ranges(), self.runtime_classes()).pod(pod)
            except AdmissionRefusedError as error:
                raise AdmissionError(str(error)) from error
        return self._admit_priority(pod)

    def _has(self, kind: str) -> bool:
        return bool(self._objects.get(kind))

    def _admit_priority(self, pod: Pod) -> Pod:
        """``pod`` with the priority its class gives it, as the Priority admission plugin sets it."""
        class_name = pod.spec.priority_class_name
        if not class_name:
            default = next((pc for pc in self.priority_classes() if pc.global_default), None)
            if default is None:
                return pod
            spec = dataclasses.replace(
                pod.spec, priority=default.value, priority_class_name=default.metadata.name
            )
            return pod.with_changes(spec=spec)
        priority_class = self.get("PriorityClass", class_name)
        if isinstance(priority_class, PriorityClass):
            value = priority_class.value
        elif class_name in SYSTEM_PRIORITY_CLASSES:
            value = SYSTEM_PRIORITY_CLASSES[class_name]
        else:
            raise AdmissionError(
                f'pods "{pod.metadata.name}" is forbidden: no PriorityClass with name {class_name} was found'
            )
        return pod.with_changes(spec=dataclasses.replace(pod.spec, priority=value))

    def count(self, kind: str) -> int:
        return len(self._objects.get(kind, {}))

    def _check_pod_budget(self, name: str) -> None:
        if len(self._objects.get("Pod", {})) < self.max_pods:
            return
        if not self.pods_refused:
            log.warning(
                "the simulated cluster holds %s pods, the most its memory budget allows"
                " (karpy.sim.budget); further pods are refused",
                f"{self.max_pods:,}",
            )
        self.pods_refused += 1
        raise AdmissionError(
            f'pods "{name}" is forbidden: the simulation holds {self.max_pods:,} pods,'
            " the most its memory budget allows"
        )

    def create(self, obj: T) -> T:
        kind = object_kind(obj)
        meta = object_meta(obj)
        if not meta.name:
            if not meta.generate_name:
                raise ValueError(f"{kind} without name or generateName")
            meta = meta.with_changes(name=self._generate_name(kind, meta.generate_name))
        key = f"{meta.namespace}/{meta.name}" if meta.namespace else meta.name
        if key in self._objects.get(kind, {}):
            raise AlreadyExistsError(f"{kind} {key} already exists")
        if isinstance(obj, Pod):
            self._check_pod_budget(meta.name)
            obj = self._admit_pod(obj.with_changes(metadata=meta))  # type: ignore[assignment]
        version = self._next_version()
        uid = meta.uid or f"uid-{kind.lower()}-{version}"
        if meta.uid:
            self._given_uids.add(meta.uid)
        elif uid in self._given_uids:
            # Taken by an object created with its own uid (a run from a cluster read from a simulation):
            # the garbage collector would take one for the other's owner.
            uid = f"{uid}-{len(self._given_uids)}"
        meta = meta.with_changes(
            uid=uid,
            resource_version=version,
            creation_timestamp=self.clock.now()
            if meta.creation_timestamp is None
            else meta.creation_timestamp,
            deletion_timestamp=None,
            generation=1,
        )
        stored = _with_meta(obj, meta)
        self._store(kind, key, stored)
        self._announce(kind, None, stored)
        return stored

    def create_all(self, objs: Sequence[T]) -> list[T | Exception]:
        """Each of ``objs`` created in turn (the simulator has no round trips to overlap)."""
        results: list[T | Exception] = []
        for obj in objs:
            try:
                results.append(self.create(obj))
            except (AdmissionError, AlreadyExistsError, ValueError) as error:
                results.append(error)
        return results

    def update(self, obj: T) -> T:
        kind = object_kind(obj)
        key = object_key(obj)
        current = self.get(kind, key)
        if current is None:
            raise NotFoundError(f"{kind} {key} not found")
        meta = object_meta(obj)
        current_meta = object_meta(current)
        if meta.resource_version and meta.resource_version != current_meta.resource_version:
            raise ConflictError(
                f"{kind} {key}: the object has been modified (resourceVersion {meta.resource_version}, "
                f"stored {current_meta.resource_version})"
            )
        # Deletion is not undone by an update, and identity fields are the server's.
        meta = meta.with_changes(
            uid=current_meta.uid,
            creation_timestamp=current_meta.creation_timestamp,
            deletion_timestamp=current_meta.deletion_timestamp,
            resource_version=current_meta.resource_version,
        )
        if _with_meta(obj, meta) == current:
            # As the apiserver does, an update that changes nothing is not a change:
            # no new resourceVersion, no watch event (and so no reconcile loop).
            return current  # type: ignore[no-any-return]
        meta = meta.with_changes(resource_version=self._next_version())
        stored = _with_meta(obj, meta)
        if meta.deletion_timestamp is not None and not meta.finalizers:
            self._remove(kind, key, current)
            return stored
        self._store(kind, key, stored)
        self._announce(kind, current, stored)
        return stored

    def update_status(self, obj: T) -> T:
        """Write ``obj``'s status over the stored object, as a write to the status subresource does."""
        kind = object_kind(obj)
        key = object_key(obj)
        current = self.get(kind, key)
        if current is None:
            raise NotFoundError(f"{kind} {key} not found")
        status = getattr(obj, "status", None)
        if status is None:
            raise TypeError(f"{kind} has no status")
        stored = object_meta(current)
        meta = stored.with_changes(
            resource_version=object_meta(obj).resource_version or stored.resource_version
        )
        return self.update(dataclasses.replace(current, metadata=meta, status=status))  # type: ignore[no-any-return]

    def delete(self, obj: object) -> None:
        self.delete_key(object_kind(obj), object_key(obj))

    def delete_key(self, kind: str, key: str) -> None:
        current = self.get(kind, key)
        if current is None:
            raise NotFoundError(f"{kind} {key} not found")
        meta = object_meta(current)
        # A pod on a node is deleted gracefully: marked now, removed by its kubelet
        # once the containers stop (the kubelet's own delete then removes it).
        graceful = isinstance(current, Pod) and bool(current.spec.node_name) and not current.is_terminal
        if meta.finalizers or (graceful and meta.deletion_timestamp is None):
            if meta.deletion_timestamp is None:
                marked = _with_meta(
                    current,
                    meta.with_changes(
                        deletion_timestamp=self.clock.now(), resource_version=self._next_version()
                    ),
                )
                self._store(kind, key, marked)
                self._announce(kind, current, marked)
            return
        self._remove(kind, key, current)

    def _remove(self, kind: str, key: str, current: object) -> None:
        self._store(kind, key, None)
        self._announce(kind, current, None)
        # Dependents go in the order the store holds them (kind by kind, oldest first), as
        # the kube garbage collector's order does not matter but a simulation's must not vary.
        kinds = list(self._objects)
        dependents = sorted(
            self._owned.pop((kind, object_meta(current).uid), set()),
            key=lambda dependent: (kinds.index(dependent[0]), self._places.get(dependent, 0)),
        )
        for dependent_kind, dependent_key in dependents:
            if self.get(dependent_kind, dependent_key) is not None:
                self.delete_key(dependent_kind, dependent_key)

    def bind(self, pod: Pod, node_name: str) -> None:
        current = self.pod(pod.metadata.namespace, pod.metadata.name)
        if current is None:
            raise NotFoundError(f"Pod {pod.key} not found")
        if current.spec.node_name:
            raise ConflictError(f"Pod {pod.key} is already bound to {current.spec.node_name}")
        self.update(current.with_changes(spec=dataclasses.replace(current.spec, node_name=node_name)))

    def evict(self, pod: Pod) -> None:
        current = self.pod(pod.metadata.namespace, pod.metadata.name)
        if current is None:
            raise NotFoundError(f"Pod {pod.key} not found")
        if current.metadata.deleting:
            return
        for budget in self.pod_disruption_budgets():
            if not budget.selects(current):
                continue
            if self.disruptions_allowed(budget) <= 0:
                raise EvictionRefusedError(
                    f"Cannot evict pod as it would violate the pod's disruption budget "
                    f"{budget.metadata.namespace}/{budget.metadata.name}"
                )
        self.evictions.append(self.clock.now())
        self.delete(current)

    def disruptions_allowed(self, budget: PodDisruptionBudget) -> int:
        matching = [pod for pod in self.pods() if budget.selects(pod) and not pod.is_terminal]
        healthy = sum(1 for pod in matching if pod.phase == POD_RUNNING and not pod.metadata.deleting)
        # As the disruption controller does, the expected count is the scale of the
        # pods' controllers where they have one: a pod just evicted and not yet
        # replaced still counts as expected, so it cannot be evicted twice over.
        expected = 0
        counted: set[str] = set()
        for pod in matching:
            owner = pod.metadata.controller
            scalable = self.get(owner.kind, f"{pod.metadata.namespace}/{owner.name}") if owner else None
            if owner is not None and isinstance(scalable, ReplicaSet | StatefulSet):
                if owner.uid not in counted:
                    counted.add(owner.uid)
                    expected += scalable.replicas
            else:
                expected += 1
        return budget.disruptions_allowed(healthy, max(expected, len(matching)))

    def record_event(self, obj: object, event_type: str, reason: str, message: str) -> None:
        meta = object_meta(obj)
        self.events.append(
            Event(self.clock.now(), event_type, reason, message, object_kind(obj), meta.namespace, meta.name)
        )

    # -- ClusterReader ---------------------------------------------------

    def pods_on_node(self, node_name: str) -> list[Pod]:
        table = self._objects.get("Pod", {})
        return [table[key] for key in sorted(self._pods_by_node.get(node_name, ()))]

    def pending_pods(self) -> list[Pod]:
        table = self._objects.get("Pod", {})
        return [table[key] for key in sorted(self._unbound_pods)]

    def has_pending_pods(self) -> bool:
        """Whether any pod is unbound: ``bool(pending_pods())`` without listing them in order."""
        return bool(self._unbound_pods)

    def deployments(self) -> Iterable[Deployment]:
        return self.objects("Deployment")

    def replicasets(self) -> Iterable[ReplicaSet]:
        return self.objects("ReplicaSet")

    def statefulsets(self) -> Iterable[StatefulSet]:
        return self.objects("StatefulSet")

    def priority_classes(self) -> Iterable[PriorityClass]:
        return self.objects("PriorityClass")
