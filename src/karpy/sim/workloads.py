"""Stand-ins for kube-controller-manager's workload controllers.

- Deployment → ReplicaSet: one ReplicaSet per pod-template hash, scaled to
  the Deployment's replicas; older ReplicaSets scale to zero (a rollout is
  instantaneous here; surge and unavailability settings are not modelled).
- ReplicaSet → Pods: create missing pods (``generateName``), delete surplus
  ones (unbound first, newest first), replace pods that went away.
- DaemonSet → one pod per node whose taints the template tolerates and whose
  labels its node constraints accept, bound directly to the node, as the
  DaemonSet controller does.
- Pod garbage collection: pods bound to a Node that no longer exists go.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable

from karpy.api.core import DaemonSet, Deployment, Node, Pod, PodTemplate, ReplicaSet
from karpy.api.meta import ObjectMeta, OwnerReference
from karpy.api.taints import Taint, Toleration, untolerated
from karpy.controllers.interfaces import NotFoundError
from karpy.controllers.runtime import Watch
from karpy.sim.store import InMemoryCluster

TEMPLATE_HASH_LABEL = "pod-template-hash"
# Taints the DaemonSet controller tolerates on every DaemonSet pod.
DAEMONSET_TOLERATIONS = tuple(
    Toleration(key=key, operator="Exists")
    for key in (
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/disk-pressure",
        "node.kubernetes.io/memory-pressure",
        "node.kubernetes.io/pid-pressure",
        "node.kubernetes.io/unschedulable",
        "node.kubernetes.io/network-unavailable",
    )
)


def template_hash(template: PodTemplate) -> str:
    material = json.dumps(
        {"labels": template.labels, "annotations": template.annotations, "spec": repr(template.spec)},
        sort_keys=True,
    )
    return hashlib.sha256(material.encode()).hexdigest()[:10]


def _owner(kind: str, api_version: str, meta: ObjectMeta) -> OwnerReference:
    return OwnerReference(api_version=api_version, kind=kind, name=meta.name, uid=meta.uid, controller=True)


def pod_from_template(template: PodTemplate, owner: OwnerReference, namespace: str, prefix: str) -> Pod:
    return Pod(
        metadata=ObjectMeta(
            name="",
            generate_name=prefix,
            namespace=namespace,
            labels=dict(template.labels),
            annotations=dict(template.annotations),
            owner_references=(owner,),
        ),
        spec=template.spec,
    )


class SimulatedWorkloadControllers:
    """Keys: "deployment/NS/NAME", "replicaset/NS/NAME", "daemonset/NS/NAME", "gc/NODE"."""

    name = "sim.workloads"

    def __init__(self, cluster: InMemoryCluster) -> None:
        self.cluster = cluster

    def watches(self) -> list[Watch]:
        return [
            Watch("Deployment", lambda old, new: self._keys("deployment", old, new)),
            Watch("ReplicaSet", lambda old, new: self._keys("replicaset", old, new)),
            Watch("DaemonSet", lambda old, new: self._keys("daemonset", old, new)),
            Watch("Pod", self._on_pod),
            Watch("Node", self._on_node),
        ]

    @staticmethod
    def _keys(prefix: str, old: object | None, new: object | None) -> Iterable[str]:
        obj = new if new is not None else old
        meta = getattr(obj, "metadata", None)
        if isinstance(meta, ObjectMeta):
            return [f"{prefix}/{meta.namespace}/{meta.name}"]
        return []

    def _on_pod(self, old: object | None, new: object | None) -> Iterable[str]:
        pod = new if new is not None else old
        if not isinstance(pod, Pod):
            return []
        controller = pod.metadata.controller
        if controller is None or controller.kind != "ReplicaSet":
            return []
        if new is None or (
            isinstance(new, Pod)
            and new.metadata.deleting
            and not (isinstance(old, Pod) and old.metadata.deleting)
        ):
            return [f"replicaset/{pod.metadata.namespace}/{controller.name}"]
        return []

    def _on_node(self, old: object | None, new: object | None) -> Iterable[str]:
        keys = [f"daemonset/{ds.metadata.namespace}/{ds.metadata.name}" for ds in self.cluster.daemonsets()]
        if new is None and isinstance(old, Node):
            keys.append(f"gc/{old.name}")
        return keys

    def reconcile(self, key: str) -> float | None:
        kind, _, rest = key.partition("/")
        namespace, _, name = rest.partition("/")
        if kind == "deployment":
            self._deployment(namespace, name)
        elif kind == "replicaset":
            self._replicaset(namespace, name)
        elif kind == "daemonset":
            self._daemonset(namespace, name)
        elif kind == "gc":
            self._collect(rest)
        return None

    def _deployment(self, namespace: str, name: str) -> None:
        deployment = self.cluster.get("Deployment", f"{namespace}/{name}")
        if not isinstance(deployment, Deployment) or deployment.metadata.deleting:
            return
        digest = template_hash(deployment.template)
        wanted = f"{name}-{digest}"
        owner = _owner("Deployment", "apps/v1", deployment.metadata)
        for replicaset in list(self.cluster.replicasets()):
            if replicaset.metadata.namespace != namespace:
                continue
            controller = replicaset.metadata.controller
            if controller is None or controller.uid != deployment.metadata.uid:
                continue
            replicas = deployment.replicas if replicaset.metadata.name == wanted else 0
            if replicaset.replicas != replicas:
                self.cluster.update(dataclasses.replace(replicaset, replicas=replicas))
        if self.cluster.get("ReplicaSet", f"{namespace}/{wanted}") is None:
            labels = dict(deployment.template.labels)
            labels[TEMPLATE_HASH_LABEL] = digest
            template = dataclasses.replace(deployment.template, labels=labels)
            self.cluster.create(
                ReplicaSet(
                    metadata=ObjectMeta(
                        name=wanted, namespace=namespace, labels=labels, owner_references=(owner,)
                    ),
                    replicas=deployment.replicas,
                    selector=deployment.selector,
                    template=template,
                )
            )

    def _replicaset(self, namespace: str, name: str) -> None:
        replicaset = self.cluster.get("ReplicaSet", f"{namespace}/{name}")
        if not isinstance(replicaset, ReplicaSet) or replicaset.metadata.deleting:
            return
        pods = [
            pod
            for pod in self.cluster.pods()
            if pod.metadata.namespace == namespace
            and (controller := pod.metadata.controller) is not None
            and controller.uid == replicaset.metadata.uid
            and not pod.metadata.deleting
            and not pod.is_terminal
        ]
        missing = replicaset.replicas - len(pods)
        owner = _owner("ReplicaSet", "apps/v1", replicaset.metadata)
        for _ in range(missing):
            self.cluster.create(pod_from_template(replicaset.template, owner, namespace, f"{name}-"))
        if missing < 0:
            # Unbound pods go first, then the newest: what the ReplicaSet controller prefers.
            surplus = sorted(
                pods,
                key=lambda pod: (bool(pod.node_name), -(pod.metadata.creation_timestamp or 0.0), pod.key),
            )
            for pod in surplus[:-missing]:
                try:
                    self.cluster.delete(pod)
                except NotFoundError:
                    continue

    def _daemonset(self, namespace: str, name: str) -> None:
        daemonset = self.cluster.get("DaemonSet", f"{namespace}/{name}")
        if not isinstance(daemonset, DaemonSet):
            return
        owner = _owner("DaemonSet", "apps/v1", daemonset.metadata)
        covered = {
            pod.node_name
            for pod in self.cluster.pods()
            if (controller := pod.metadata.controller) is not None
            and controller.uid == daemonset.metadata.uid
        }
        for node in list(self.cluster.nodes()):
            if node.name in covered or node.metadata.deleting or not self._runs_on(daemonset, node):
                continue
            pod = pod_from_template(daemonset.template, owner, namespace, f"{name}-")
            self.cluster.create(pod.with_changes(spec=dataclasses.replace(pod.spec, node_name=node.name)))

    @staticmethod
    def _runs_on(daemonset: DaemonSet, node: Node) -> bool:
        spec = daemonset.template.spec
        tolerations = (*spec.tolerations, *DAEMONSET_TOLERATIONS)
        blocking: list[Taint] = list(node.taints)
        if untolerated(blocking, tolerations) is not None:
            return False
        return any(
            option.is_satisfied_by_labels(node.metadata.labels) is None for option in spec.node_requirements()
        )

    def _collect(self, node_name: str) -> None:
        if self.cluster.node(node_name) is not None:
            return
        for pod in self.cluster.pods_on_node(node_name):
            try:
                # Twice: the first marks a bound pod deleting, the second removes it (no kubelet is left).
                self.cluster.delete(pod)
                if self.cluster.pod(pod.metadata.namespace, pod.metadata.name) is not None:
                    self.cluster.delete(pod)
            except NotFoundError:
                continue
