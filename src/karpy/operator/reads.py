"""Typed reads over a cache of Kubernetes objects kept by kind and key.

Both implementations of :class:`~karpy.operator.cluster.ClusterReader`
(the simulator's in-memory store and the real cluster's informer caches)
hold their objects the same way: by kind, then by ``namespace/name`` (or
``name`` for cluster-scoped kinds). The typed accessors the controllers call
are therefore one piece of code over two primitives, ``_all(kind)`` and
``_get(kind, key)``, which each cache provides (with its own locking).
The pod indexes (by node, unbound) stay with each cache: how they are kept
up to date is the cache's business.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from karpy.api.admission import LimitRange, RuntimeClass
from karpy.api.capacitybuffer import CapacityBuffer, NamedPodTemplate
from karpy.api.core import (
    DaemonSet,
    Namespace,
    Node,
    PersistentVolume,
    PersistentVolumeClaim,
    Pod,
    PodDisruptionBudget,
    ScaledWorkload,
)
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import UNREADABLE_NODECLAIM, NodeClaim, UnreadableNodeClaim
from karpy.api.nodeclass import EC2NodeClass, KWOKNodeClass, NodeClass
from karpy.api.nodeoverlay import NodeOverlay
from karpy.api.nodepool import UNREADABLE_NODEPOOL, NodePool, UnreadableNodePool
from karpy.api.service import ReplicationController, Service
from karpy.api.storage import CSINode, StorageClass

# The kinds a pod's volumes and the nodes' attach limits are read from (see ``storage_objects``).
STORAGE_KINDS = ("PersistentVolumeClaim", "PersistentVolume", "StorageClass", "CSINode")


def object_kind(obj: object) -> str:
    kind = getattr(obj, "kind", None)
    if not isinstance(kind, str):
        raise TypeError(f"not a Kubernetes object: {obj!r}")
    return kind


def object_meta(obj: object) -> ObjectMeta:
    meta = getattr(obj, "metadata", None)
    if not isinstance(meta, ObjectMeta):
        raise TypeError(f"not a Kubernetes object: {obj!r}")
    return meta


def object_key(obj: object) -> str:
    """``namespace/name``, or ``name`` for cluster-scoped objects: the caches' key."""
    meta = object_meta(obj)
    return f"{meta.namespace}/{meta.name}" if meta.namespace else meta.name


class NodeClaimIndex:
    """NodeClaim names by the Node they name (``status.nodeName``) and by provider ID.

    Each cache keeps one, updated with every NodeClaim it stores, so that
    finding the NodeClaim of a Node (every Node and pod event asks) reads
    a dictionary instead of every NodeClaim: with 6,000 nodes, those scans
    were most of a simulated scale-up.
    """

    def __init__(self) -> None:
        self._by_node: dict[str, set[str]] = {}
        self._by_provider_id: dict[str, set[str]] = {}

    def update(self, old: object | None, new: object | None) -> None:
        if isinstance(old, NodeClaim):
            _discard(self._by_node, old.status.node_name, old.name)
            _discard(self._by_provider_id, old.status.provider_id, old.name)
        if isinstance(new, NodeClaim):
            if new.status.node_name:
                self._by_node.setdefault(new.status.node_name, set()).add(new.name)
            if new.status.provider_id:
                self._by_provider_id.setdefault(new.status.provider_id, set()).add(new.name)

    def on_node(self, node_name: str) -> list[str]:
        # sorted() copies the set in one call, so a reader never sees it change mid-way.
        return sorted(self._by_node.get(node_name, ()))

    def with_provider_id(self, provider_id: str) -> list[str]:
        return sorted(self._by_provider_id.get(provider_id, ()))


def _discard(index: dict[str, set[str]], value: str, name: str) -> None:
    names = index.get(value)
    if names is not None:
        names.discard(name)
        if not names:
            del index[value]


class TypedReads:
    """The typed half of ClusterReader, over ``_all`` and ``_get``."""

    # Kept by the cache with every NodeClaim it stores.
    _nodeclaim_index: NodeClaimIndex

    def _all(self, kind: str) -> Iterable[Any]:
        raise NotImplementedError

    def _get(self, kind: str, key: str) -> object | None:
        raise NotImplementedError

    def pods(self) -> Iterable[Pod]:
        return self._all("Pod")

    def pod(self, namespace: str, name: str) -> Pod | None:
        found = self._get("Pod", f"{namespace}/{name}")
        return found if isinstance(found, Pod) else None

    def nodes(self) -> Iterable[Node]:
        return self._all("Node")

    def node(self, name: str) -> Node | None:
        found = self._get("Node", name)
        return found if isinstance(found, Node) else None

    def nodeclaims(self) -> Iterable[NodeClaim]:
        return self._all("NodeClaim")

    def nodeclaim(self, name: str) -> NodeClaim | None:
        found = self._get("NodeClaim", name)
        return found if isinstance(found, NodeClaim) else None

    def nodeclaims_on_node(self, node_name: str) -> list[NodeClaim]:
        """The NodeClaims whose ``status.nodeName`` is this Node (one, but for a bad write)."""
        return self._nodeclaims(self._nodeclaim_index.on_node(node_name))

    def nodeclaims_with_provider_id(self, provider_id: str) -> list[NodeClaim]:
        """The NodeClaims whose ``status.providerID`` is this one."""
        return self._nodeclaims(self._nodeclaim_index.with_provider_id(provider_id))

    def _nodeclaims(self, names: Iterable[str]) -> list[NodeClaim]:
        found = (self.nodeclaim(name) for name in names)
        return [claim for claim in found if claim is not None]

    def nodepools(self) -> Iterable[NodePool]:
        return self._all("NodePool")

    def nodepool(self, name: str) -> NodePool | None:
        found = self._get("NodePool", name)
        return found if isinstance(found, NodePool) else None

    def unreadable_nodepools(self) -> Iterable[UnreadableNodePool]:
        return self._all(UNREADABLE_NODEPOOL)

    def unreadable_nodeclaims(self) -> Iterable[UnreadableNodeClaim]:
        return self._all(UNREADABLE_NODECLAIM)

    def node_class(self, group: str, kind: str, name: str) -> NodeClass | None:
        found = self._get(kind, name)
        if isinstance(found, EC2NodeClass | KWOKNodeClass) and found.group == group:
            return found
        return None

    def daemonsets(self) -> Iterable[DaemonSet]:
        return self._all("DaemonSet")

    def pod_disruption_budgets(self) -> Iterable[PodDisruptionBudget]:
        return self._all("PodDisruptionBudget")

    def namespaces(self) -> Iterable[Namespace]:
        return self._all("Namespace")

    def persistent_volume_claim(self, namespace: str, name: str) -> PersistentVolumeClaim | None:
        found = self._get("PersistentVolumeClaim", f"{namespace}/{name}")
        return found if isinstance(found, PersistentVolumeClaim) else None

    def persistent_volume(self, name: str) -> PersistentVolume | None:
        found = self._get("PersistentVolume", name)
        return found if isinstance(found, PersistentVolume) else None

    def storage_class(self, name: str) -> StorageClass | None:
        found = self._get("StorageClass", name)
        return found if isinstance(found, StorageClass) else None

    def storage_objects(self) -> Iterable[PersistentVolumeClaim | PersistentVolume | StorageClass | CSINode]:
        for kind in STORAGE_KINDS:
            yield from self._all(kind)

    def services(self) -> Iterable[Service]:
        return self._all("Service")

    def replication_controller(self, namespace: str, name: str) -> ReplicationController | None:
        found = self._get("ReplicationController", f"{namespace}/{name}")
        return found if isinstance(found, ReplicationController) else None

    def csi_node(self, name: str) -> CSINode | None:
        found = self._get("CSINode", name)
        return found if isinstance(found, CSINode) else None

    def limit_ranges(self) -> Iterable[LimitRange]:
        return self._all("LimitRange")

    def runtime_classes(self) -> Iterable[RuntimeClass]:
        return self._all("RuntimeClass")

    def capacity_buffers(self) -> Iterable[CapacityBuffer]:
        return self._all("CapacityBuffer")

    def capacity_buffer(self, namespace: str, name: str) -> CapacityBuffer | None:
        found = self._get("CapacityBuffer", f"{namespace}/{name}")
        return found if isinstance(found, CapacityBuffer) else None

    def node_overlays(self) -> Iterable[NodeOverlay]:
        return self._all("NodeOverlay")

    def pod_template(self, namespace: str, name: str) -> NamedPodTemplate | None:
        found = self._get("PodTemplate", f"{namespace}/{name}")
        return found if isinstance(found, NamedPodTemplate) else None

    def scalable(self, kind: str, namespace: str, name: str) -> ScaledWorkload | None:
        found = self._get(kind, f"{namespace}/{name}")
        return found if isinstance(found, ScaledWorkload) and found.kind == kind else None
