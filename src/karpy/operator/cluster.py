"""How karpy reads and writes a cluster, and tells the time: the protocols, and the errors writes raise.

Controllers never see lightkube, an informer or the simulator's store. They
read cluster state through :class:`ClusterReader`, write through
:class:`ClusterWriter`, ask :class:`Clock` for the time and talk to a cloud
through :class:`karpy.cloud.provider.CloudProvider`. ``karpy run`` implements
these over a real kube-apiserver (informer caches for reads, HTTP for writes);
``karpy simulate`` implements them over an in-memory store whose writes land
at once. Both raise the same typed errors, so a controller's handling of a
409 Conflict or a 429 from the Eviction API is the same code in both worlds.

Reads return frozen records from a cache. Writes take a whole object and are
checked against the resourceVersion it was read at (optimistic concurrency):
a stale write raises :class:`ConflictError` and the controller retries from
fresh state on its next reconcile.

They live in :mod:`karpy.operator`, below the controllers and the cloud
providers, because a cloud provider needs them too: the kwok provider's
instances are Node objects it creates and deletes through a :class:`Cluster`,
and a provider reads node classes and keeps time by the same :class:`Clock`
as the controllers that call it. Providers must not import controllers (an
import-linter contract says so); ``karpy.kube`` and ``karpy.sim`` implement
these protocols.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Protocol, TypeVar

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
from karpy.api.nodeclaim import NodeClaim, UnreadableNodeClaim
from karpy.api.nodeclass import NodeClass
from karpy.api.nodeoverlay import NodeOverlay
from karpy.api.nodepool import NodePool, UnreadableNodePool
from karpy.api.service import ReplicationController, Service
from karpy.api.storage import CSINode, StorageClass

KubeObject = TypeVar("KubeObject")

EVENT_NORMAL = "Normal"
EVENT_WARNING = "Warning"


class KubeError(Exception):
    """A write the cluster refused."""


class ConflictError(KubeError):
    """409: the object changed since it was read."""


class NotFoundError(KubeError):
    """404: the object is gone."""


class AlreadyExistsError(KubeError):
    """409 on create: an object of that name exists."""


class InvalidError(KubeError):
    """422 Invalid: the server refuses the object as written, so sending it again cannot help.

    ``fields`` are the causes that name a field, ``(field, message)``, in the
    object's own paths (``metadata.labels``); the message is the server's.
    """

    def __init__(self, message: str, fields: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.fields = fields


class EvictionRefusedError(KubeError):
    """429 from the Eviction API: a PodDisruptionBudget allows no disruption now."""


class NotLeaderError(RuntimeError):
    """This process does not lead (or no longer does): the write was not made.

    Raised by a fenced writer *before* the request is sent. Not a
    :class:`KubeError`: a reconcile must not treat it as one refused write and
    go on with the next, it must stop, and ``karpy run`` with it.
    """


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the Unix epoch; virtual in the simulator."""
        ...


class WallClock:
    """The real time: the clock of ``karpy run`` (the simulator has its own virtual one)."""

    def now(self) -> float:
        return time.time()


class ClusterReader(Protocol):
    def pods(self) -> Iterable[Pod]: ...

    def pod(self, namespace: str, name: str) -> Pod | None: ...

    def pods_on_node(self, node_name: str) -> list[Pod]: ...

    def pending_pods(self) -> list[Pod]:
        """Pods that are not bound to a node and not terminal."""
        ...

    def nodes(self) -> Iterable[Node]: ...

    def node(self, name: str) -> Node | None: ...

    def nodeclaims(self) -> Iterable[NodeClaim]: ...

    def nodeclaim(self, name: str) -> NodeClaim | None: ...

    def nodeclaims_on_node(self, node_name: str) -> list[NodeClaim]:
        """The NodeClaims whose ``status.nodeName`` is this Node."""
        ...

    def nodeclaims_with_provider_id(self, provider_id: str) -> list[NodeClaim]:
        """The NodeClaims whose ``status.providerID`` is this one."""
        ...

    def nodepools(self) -> Iterable[NodePool]: ...

    def nodepool(self, name: str) -> NodePool | None: ...

    def unreadable_nodepools(self) -> Iterable[UnreadableNodePool]:
        """NodePools the server holds that karpy cannot read (announced as ``UnreadableNodePool``)."""
        ...

    def unreadable_nodeclaims(self) -> Iterable[UnreadableNodeClaim]:
        """NodeClaims the server holds that karpy cannot read: their names and provider IDs."""
        ...

    def node_class(self, group: str, kind: str, name: str) -> NodeClass | None: ...

    def daemonsets(self) -> Iterable[DaemonSet]: ...

    def pod_disruption_budgets(self) -> Iterable[PodDisruptionBudget]: ...

    def namespaces(self) -> Iterable[Namespace]:
        """The Namespace objects known (a cache that does not watch them has none)."""
        ...

    def persistent_volume_claim(self, namespace: str, name: str) -> PersistentVolumeClaim | None: ...

    def persistent_volume(self, name: str) -> PersistentVolume | None: ...

    def storage_class(self, name: str) -> StorageClass | None: ...

    def storage_objects(self) -> Iterable[PersistentVolumeClaim | PersistentVolume | StorageClass | CSINode]:
        """Every PersistentVolumeClaim, PersistentVolume, StorageClass and CSINode: what a pod's
        volumes, their topology and the nodes' attach limits are read from."""
        ...

    def services(self) -> Iterable[Service]:
        """The Services (none unless default topology spread constraints have them watched)."""
        ...

    def replication_controller(self, namespace: str, name: str) -> ReplicationController | None: ...

    def csi_node(self, name: str) -> CSINode | None:
        """The CSINode of the Node of that name: its attach limit per CSI driver."""
        ...

    def limit_ranges(self) -> Iterable[LimitRange]:
        """The LimitRanges of every namespace: what admission defaults a new pod's containers to."""
        ...

    def runtime_classes(self) -> Iterable[RuntimeClass]:
        """The RuntimeClasses: the overhead admission gives a new pod that names one."""
        ...

    def capacity_buffers(self) -> Iterable[CapacityBuffer]:
        """The CapacityBuffers (none unless the CapacityBuffer feature gate has them watched)."""
        ...

    def capacity_buffer(self, namespace: str, name: str) -> CapacityBuffer | None: ...

    def node_overlays(self) -> Iterable[NodeOverlay]:
        """The NodeOverlays (none unless the NodeOverlay feature gate has them watched)."""
        ...

    def pod_template(self, namespace: str, name: str) -> NamedPodTemplate | None: ...

    def scalable(self, kind: str, namespace: str, name: str) -> ScaledWorkload | None:
        """The Deployment, StatefulSet or ReplicaSet of that name (what a buffer's scalableRef names)."""
        ...


class ClusterWriter(Protocol):
    def create(self, obj: KubeObject) -> KubeObject:
        """Create ``obj``; a ``generateName`` without a name gets a unique name."""
        ...

    def create_all(self, objs: Sequence[KubeObject]) -> list[KubeObject | Exception]:
        """Create each of ``objs`` as ``create`` does, one after another or several at once.

        Per object, in order, what was stored or the error that refused it: a
        failure leaves the others created. A writer to a remote server sends
        them concurrently, so a batch of NodeClaims takes about one round trip,
        not one per NodeClaim.
        """
        ...

    def update(self, obj: KubeObject) -> KubeObject:
        """Replace an object, checked against its resourceVersion; returns what was stored."""
        ...

    def update_status(self, obj: KubeObject) -> KubeObject:
        """Write the status of a NodePool (readable or not) or node class, checked as ``update`` is.

        Only the status is written (the status subresource); what the record
        does not hold of the stored status is kept.
        """
        ...

    def delete(self, obj: object) -> None:
        """Request deletion; objects with finalizers stay, marked deleting, until they are removed."""
        ...

    def bind(self, pod: Pod, node_name: str) -> None: ...

    def evict(self, pod: Pod) -> None:
        """Evict through the Eviction API; raises EvictionRefusedError when a PDB forbids it."""
        ...

    def record_event(self, obj: object, event_type: str, reason: str, message: str) -> None: ...


class Cluster(ClusterReader, ClusterWriter, Protocol):
    """Reads and writes together, as most controllers need both."""
