"""Where each kind karpy reads lives on the API server, and how to name its objects.

One small table instead of generated resource classes: the adapter lists,
watches and writes every kind over the same few URL shapes
(``/api/v1/pods``, ``/apis/karpenter.sh/v1/nodeclaims``, with
``/namespaces/NS`` for a namespaced object), and parses each object with the
parser :data:`karpy.api.manifest.PARSERS` registers for its apiVersion and kind,
so a kind is added here by one line.
"""

from __future__ import annotations

from dataclasses import dataclass

from karpy.api.capacitybuffer import API_VERSION as CAPACITY_BUFFER_API_VERSION
from karpy.api.nodeclass import EC2_GROUP, EC2_KIND, KWOK_GROUP, KWOK_KIND
from karpy.api.nodeoverlay import API_VERSION as NODE_OVERLAY_API_VERSION
from karpy.api.nodepool import API_VERSION_V1


@dataclass(frozen=True, slots=True)
class ResourceType:
    kind: str
    api_version: str
    plural: str
    namespaced: bool

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def _prefix(self) -> str:
        return f"/apis/{self.api_version}" if "/" in self.api_version else f"/api/{self.api_version}"

    def collection_path(self, namespace: str = "") -> str:
        """The list (and watch) URL: all namespaces unless ``namespace`` is given."""
        if self.namespaced and namespace:
            return f"{self._prefix}/namespaces/{namespace}/{self.plural}"
        return f"{self._prefix}/{self.plural}"

    def object_path(self, namespace: str, name: str, subresource: str = "") -> str:
        path = f"{self.collection_path(namespace)}/{name}"
        return f"{path}/{subresource}" if subresource else path

    def key(self, namespace: str, name: str) -> str:
        """The cache key: ``namespace/name`` for namespaced kinds, ``name`` otherwise."""
        return f"{namespace}/{name}" if self.namespaced else name


POD = ResourceType("Pod", "v1", "pods", namespaced=True)
NODE = ResourceType("Node", "v1", "nodes", namespaced=False)
NODECLAIM = ResourceType("NodeClaim", API_VERSION_V1, "nodeclaims", namespaced=False)
NODEPOOL = ResourceType("NodePool", API_VERSION_V1, "nodepools", namespaced=False)
EC2_NODE_CLASS = ResourceType(EC2_KIND, f"{EC2_GROUP}/v1", "ec2nodeclasses", namespaced=False)
KWOK_NODE_CLASS = ResourceType(KWOK_KIND, f"{KWOK_GROUP}/v1alpha1", "kwoknodeclasses", namespaced=False)
DAEMONSET = ResourceType("DaemonSet", "apps/v1", "daemonsets", namespaced=True)
POD_DISRUPTION_BUDGET = ResourceType(
    "PodDisruptionBudget", "policy/v1", "poddisruptionbudgets", namespaced=True
)
PERSISTENT_VOLUME_CLAIM = ResourceType(
    "PersistentVolumeClaim", "v1", "persistentvolumeclaims", namespaced=True
)
PERSISTENT_VOLUME = ResourceType("PersistentVolume", "v1", "persistentvolumes", namespaced=False)
# A claim's driver, and how many of its volumes a node can attach (karpy.api.storage).
STORAGE_CLASS = ResourceType("StorageClass", "storage.k8s.io/v1", "storageclasses", namespaced=False)
CSI_NODE = ResourceType("CSINode", "storage.k8s.io/v1", "csinodes", namespaced=False)
# Their labels are what pod affinity's namespaceSelector selects by.
NAMESPACE = ResourceType("Namespace", "v1", "namespaces", namespaced=False)
# What admission defaults a new pod to: DaemonSet pods on a new node are sized by them.
LIMIT_RANGE = ResourceType("LimitRange", "v1", "limitranges", namespaced=True)
RUNTIME_CLASS = ResourceType("RuntimeClass", "node.k8s.io/v1", "runtimeclasses", namespaced=False)
EVENT = ResourceType("Event", "v1", "events", namespaced=True)
# What the CapacityBuffer feature gate has watched: the buffers and what they name.
CAPACITY_BUFFER = ResourceType(
    "CapacityBuffer", CAPACITY_BUFFER_API_VERSION, "capacitybuffers", namespaced=True
)
# What the NodeOverlay feature gate has watched.
NODE_OVERLAY = ResourceType("NodeOverlay", NODE_OVERLAY_API_VERSION, "nodeoverlays", namespaced=False)
OVERLAY_TYPES: tuple[ResourceType, ...] = (NODE_OVERLAY,)
POD_TEMPLATE = ResourceType("PodTemplate", "v1", "podtemplates", namespaced=True)
DEPLOYMENT = ResourceType("Deployment", "apps/v1", "deployments", namespaced=True)
STATEFUL_SET = ResourceType("StatefulSet", "apps/v1", "statefulsets", namespaced=True)
REPLICA_SET = ResourceType("ReplicaSet", "apps/v1", "replicasets", namespaced=True)
# What a pod's priority comes from (read by karpy simulate --from-cluster).
PRIORITY_CLASS = ResourceType("PriorityClass", "scheduling.k8s.io/v1", "priorityclasses", namespaced=False)
BUFFER_TYPES: tuple[ResourceType, ...] = (
    CAPACITY_BUFFER,
    POD_TEMPLATE,
    DEPLOYMENT,
    STATEFUL_SET,
    REPLICA_SET,
)

# What a pod's default topology spread selector is deduced from (SCHEDULER_CONFIG's defaults).
SERVICE = ResourceType("Service", "v1", "services", namespaced=True)
REPLICATION_CONTROLLER = ResourceType(
    "ReplicationController", "v1", "replicationcontrollers", namespaced=True
)
SPREAD_TYPES: tuple[ResourceType, ...] = (SERVICE, REPLICATION_CONTROLLER, REPLICA_SET, STATEFUL_SET)

#: The kinds KubeCluster keeps informer caches of.
WATCHED_TYPES: tuple[ResourceType, ...] = (
    POD,
    NODE,
    NODECLAIM,
    NODEPOOL,
    EC2_NODE_CLASS,
    KWOK_NODE_CLASS,
    DAEMONSET,
    POD_DISRUPTION_BUDGET,
    PERSISTENT_VOLUME_CLAIM,
    PERSISTENT_VOLUME,
    STORAGE_CLASS,
    CSI_NODE,
    NAMESPACE,
    LIMIT_RANGE,
    RUNTIME_CLASS,
)

TYPES_BY_KIND: dict[str, ResourceType] = {
    resource.kind: resource
    for resource in (*WATCHED_TYPES, *BUFFER_TYPES, *OVERLAY_TYPES, *SPREAD_TYPES, PRIORITY_CLASS)
}
