"""Stand-ins for what runs on nodes: the kubelet and the node's startup agents.

In a real cluster an instance boots, its kubelet registers a Node (with the
labels and taints it was started with, and ``karpenter.sh/unregistered``),
reports Ready a little later (with a CSINode saying how many volumes of each
CSI driver it can attach, its instance type's limits), agents such as a CNI
remove startup taints,
and the kubelet starts the pods bound to it. Each of those is a timer here,
with delays that default to typical EC2 figures and can be changed per
scenario. Pods being deleted stop after a short grace and are removed.

A pod whose work ends (a Job's, or a bare pod's) runs for its
``karpy.dev/duration`` annotation, or for a Job's pods without one the
scenario's ``jobs.duration``, and then Succeeds: it stays on its node as a
finished pod does, holding no resources and pending for nothing. Pods of
ReplicaSets, StatefulSets and DaemonSets restart their containers in
Kubernetes (restartPolicy Always), so they never finish here either.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from karpy.api.conditions import TRUE
from karpy.api.core import POD_PENDING, POD_RUNNING, POD_SUCCEEDED, Node, NodeCondition, Pod, run_duration
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclass import KWOKNodeClass
from karpy.api.quantity import ResourceAmounts
from karpy.api.requirements import LABEL_HOSTNAME
from karpy.api.storage import CSINode
from karpy.api.taints import NO_EXECUTE, UNREGISTERED_TAINT_KEY, Taint
from karpy.operator.cluster import Clock, NotFoundError
from karpy.operator.runtime import Runtime, Watch
from karpy.sim.cloud import Instance, SimulatedCloud
from karpy.sim.store import InMemoryCluster


@dataclass(slots=True)
class KubeletSettings:
    node_ready_delay: float = 5.0
    startup_taint_delay: float = 3.0
    pod_start_delay: float = 2.0
    pod_stop_delay: float = 1.0
    # How long a Job's pod runs when its template says nothing; None: until it is deleted.
    job_duration: float | None = None


class SimulatedKubelet:
    """Every node's kubelet, as one controller keyed by "node/NAME" and "pod/NS/NAME"."""

    name = "sim.kubelet"

    def __init__(
        self,
        cluster: InMemoryCluster,
        cloud: SimulatedCloud,
        clock: Clock,
        runtime: Runtime,
        settings: KubeletSettings | None = None,
    ) -> None:
        self.cluster = cluster
        self.cloud = cloud
        self.clock = clock
        self.runtime = runtime
        self.settings = settings or KubeletSettings()
        self._registered_at: dict[str, float] = {}
        # The extended resources a node of (NodePool, instance type) reports beyond its type's, as a
        # device plugin would make it (what NodeOverlays say it has); None: none.
        self.extended_resources: Callable[[str, str], ResourceAmounts] | None = None
        self._bound_at: dict[str, float] = {}
        self._stopping_at: dict[str, float] = {}
        cloud.launch_listeners.append(self._on_launch)

    def watches(self) -> list[Watch]:
        return [Watch("Pod", self._on_pod)]

    def _on_launch(self, instance: Instance) -> None:
        elapsed = instance.launched_at - self.cloud.start
        if any(
            failure.start <= elapsed < failure.end for failure in self.cloud.settings.registration_failures
        ):
            return  # this instance never boots into a node
        self.runtime.enqueue(
            self.name, f"register/{instance.provider_id}", self._registration_delay(instance)
        )

    def _registration_delay(self, instance: Instance) -> float:
        """A KWOKNodeClass' ``nodeRegistrationDelay`` when it sets one, else the cloud's boot time."""
        claim = self.cluster.nodeclaim(instance.nodeclaim)
        if claim is not None:
            ref = claim.spec.node_class_ref
            node_class = self.cluster.node_class(ref.group, ref.kind, ref.name)
            if isinstance(node_class, KWOKNodeClass) and node_class.node_registration_delay is not None:
                return node_class.node_registration_delay
        return self.cloud.settings.registration_delay

    def _on_pod(self, old: object | None, new: object | None) -> Iterable[str]:
        if not isinstance(new, Pod):
            if isinstance(old, Pod):
                self._bound_at.pop(old.key, None)
                self._stopping_at.pop(old.key, None)
            return []
        now = self.clock.now()
        if new.metadata.deleting and new.key not in self._stopping_at:
            self._stopping_at[new.key] = now
            return [f"pod/{new.key}"]
        if new.node_name and new.phase == POD_PENDING and new.key not in self._bound_at:
            self._bound_at[new.key] = now
            return [f"pod/{new.key}"]
        return []

    def reconcile(self, key: str) -> float | None:
        kind, _, rest = key.partition("/")
        if kind == "register":
            self._register(rest)
            return None
        if kind == "node":
            return self._node(rest)
        return self._pod(rest)

    def finishes_at(self, pod: Pod) -> float | None:
        """When a running pod's containers exit successfully; None if they run on."""
        if pod.phase != POD_RUNNING or pod.start_time is None or pod.owner_kind not in ("", "Job"):
            return None
        duration = run_duration(pod.metadata.annotations)
        if duration is None and pod.owner_kind == "Job":
            duration = self.settings.job_duration
        return None if duration is None else pod.start_time + duration

    def _register(self, provider_id: str) -> None:
        instance = self.cloud.instances.get(provider_id)
        if instance is None or self.cluster.node(instance.node_name) is not None:
            return
        claim = self.cluster.nodeclaim(instance.nodeclaim)
        labels = dict(instance.labels)
        taints: list[Taint] = [Taint(UNREGISTERED_TAINT_KEY, NO_EXECUTE)]
        if claim is not None:
            labels.update(claim.metadata.labels)
            taints.extend(claim.spec.taints)
            taints.extend(claim.spec.startup_taints)
        labels[LABEL_HOSTNAME] = instance.node_name
        extended: ResourceAmounts = {}
        if self.extended_resources is not None and claim is not None:
            extended = self.extended_resources(claim.nodepool, instance.instance_type.name)
        self.cluster.create(
            Node(
                metadata=ObjectMeta(name=instance.node_name, labels=labels),
                provider_id=provider_id,
                taints=tuple(taints),
                capacity={**instance.instance_type.capacity, **extended},
                allocatable={**instance.instance_type.allocatable, **extended},
                conditions=(NodeCondition("Ready", "False", "KubeletNotReady"),),
            )
        )
        if instance.instance_type.volume_limits:
            # The CSI drivers' node plugins publish how many volumes the node can attach.
            self.cluster.create(
                CSINode(
                    metadata=ObjectMeta(name=instance.node_name),
                    limits=dict(instance.instance_type.volume_limits),
                )
            )
        self._registered_at[instance.node_name] = self.clock.now()
        self.runtime.enqueue(self.name, f"node/{instance.node_name}", self.settings.node_ready_delay)

    def _node(self, name: str) -> float | None:
        node = self.cluster.node(name)
        if node is None or node.metadata.deleting:
            return None
        if node.provider_id not in self.cloud.instances:
            return None  # the instance is gone; the kubelet with it
        now = self.clock.now()
        registered = self._registered_at.get(name, now)
        if not node.ready:
            ready_at = registered + self.settings.node_ready_delay
            if now < ready_at:
                return ready_at - now
            node = self.cluster.update(
                node.with_changes(conditions=(NodeCondition("Ready", TRUE, "KubeletReady"),))
            )
        claim = self.cluster.nodeclaim(self.cloud.instances[node.provider_id].nodeclaim)
        startup = claim.spec.startup_taints if claim is not None else ()
        if startup and any(taint in node.taints for taint in startup):
            clear_at = registered + self.settings.node_ready_delay + self.settings.startup_taint_delay
            if now < clear_at:
                return clear_at - now
            self.cluster.update(node.with_changes(taints=tuple(t for t in node.taints if t not in startup)))
        return None

    def _pod(self, pod_key: str) -> float | None:
        namespace, _, name = pod_key.partition("/")
        pod = self.cluster.pod(namespace, name)
        if pod is None:
            return None
        now = self.clock.now()
        if pod.metadata.deleting:
            stop_at = self._stopping_at.get(pod.key, now) + min(
                self.settings.pod_stop_delay, float(pod.spec.termination_grace_period_seconds)
            )
            if now < stop_at:
                return stop_at - now
            try:
                self.cluster.delete(pod)  # the containers stopped: the second delete removes it
            except NotFoundError:
                pass
            return None
        if pod.node_name and pod.phase == POD_PENDING:
            node = self.cluster.node(pod.node_name)
            if node is None:
                return None
            start_at = self._bound_at.get(pod.key, now) + self.settings.pod_start_delay
            if now < start_at:
                return start_at - now
            pod = self.cluster.update(pod.with_changes(phase=POD_RUNNING, start_time=now, ready=True))
        finish_at = self.finishes_at(pod)
        if finish_at is None:
            return None
        if now < finish_at:
            return finish_at - now
        self.cluster.update(pod.with_changes(phase=POD_SUCCEEDED, ready=False))
        return None
