"""CapacityBuffers in ``karpy run`` and the simulator: resolved into virtual pods, their room kept.

Karpenter's capacitybuffer controller and the buffer parts of its provisioner
and cluster state, over karpy's protocols (``CapacityBuffer`` feature gate):

- :class:`CapacityBufferController` resolves each buffer's shape (the
  PodTemplate its ``podTemplateRef`` names, or the template of the workload
  its ``scalableRef`` names) and size (:func:`~karpy.scheduling.buffers.buffer_replicas`),
  writes ``status`` (``replicas``, ``podTemplateRef``, ``podTemplateGeneration``,
  ``provisioningStrategy``, the ``ReadyForProvisioning`` condition) and hands
  the buffer's virtual pods to the :class:`BufferRoom`. It reconciles a buffer
  when it, its PodTemplate or its workload changes, and every 30 s, as
  Karpenter's does.
- :class:`BufferRoom` holds the virtual pods and announces a change of a
  buffer's (under :data:`BUFFER_ROOM`), which opens a provisioning batch.
  Every pass plans them after the pending pods (:meth:`BufferRoom.pods`)
  and tells the room where they went (:meth:`BufferRoom.after_pass`): the
  room remembers which node or NodeClaim holds each buffer's room and writes
  each buffer's ``Provisioning`` condition (``FitsExistingCapacity`` when all
  its pods fit capacity there is, launched or in flight; ``RequiresNewCapacity``
  when NodeClaims had to be launched or some did not fit, a NodePool's limits
  say).
- The disruption controller counts the virtual pods placed on a node as that
  node's pods (:meth:`BufferRoom.on`, :func:`with_buffer_room`): a node
  holding buffer room is not empty, and consolidation deletes or replaces it
  only when that room fits elsewhere, as the real pods must. Deleting the
  buffer drops its pods, and the nodes go as any empty node.

Virtual pods are never written anywhere; nothing else of karpy sees them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from karpy.api.capacitybuffer import (
    APPS_GROUP,
    CONDITION_PROVISIONING,
    CONDITION_READY_FOR_PROVISIONING,
    REASON_BUFFER_EMPTY,
    REASON_NOT_READY_FOR_PROVISIONING,
    REASON_POD_TEMPLATE_NOT_FOUND,
    REASON_RESOLUTION_FAILED,
    REASON_RESOLVED,
    REASON_SCALABLE_REF_NOT_FOUND,
    SCALABLE_KINDS,
    CapacityBuffer,
    CapacityBufferStatus,
    NamedPodTemplate,
)
from karpy.api.conditions import FALSE, TRUE, set_condition
from karpy.api.core import Node, Pod, PodTemplate, ScaledWorkload
from karpy.api.nodeclaim import NodeClaim
from karpy.api.quantity import subtract_amounts
from karpy.controllers.state import used_by
from karpy.operator.cluster import Clock, Cluster, KubeError
from karpy.operator.runtime import Watch
from karpy.scheduling.buffers import (
    buffer_key_of,
    buffer_replicas,
    is_virtual,
    provisioning_outcome,
    provisioning_verdict,
    virtual_pods,
)
from karpy.scheduling.solver import ExistingCapacity, NewNodeClaim, Plan

log = logging.getLogger("karpy.capacitybuffer")

# The kind a change of the room is announced under: (BUFFER_ROOM, None, "namespace/name").
BUFFER_ROOM = "BufferRoom"
Listener = Callable[[str, object | None, object | None], None]

# Seconds between two resolutions of a buffer nothing changed (Karpenter's requeue).
RESYNC = 30.0


class BufferRoom:
    """The buffers' virtual pods, and the nodes and NodeClaims the last provisioning pass put them in."""

    def __init__(self, cluster: Cluster, clock: Clock) -> None:
        self.cluster = cluster
        self.clock = clock
        self._pods: dict[str, list[Pod]] = {}
        # Capacity name (a Node's or a NodeClaim's) -> the virtual pods the last pass placed there.
        self._placed: dict[str, list[Pod]] = {}
        # Bumped on every change: what is worked out from the room is worked out again.
        self.version = 0
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> None:
        """Be told when a buffer's virtual pods change (the provisioner plans them again then)."""
        self._listeners.append(listener)

    def _announce(self, key: str) -> None:
        self.version += 1
        for listener in list(self._listeners):
            listener(BUFFER_ROOM, None, key)

    def set(self, key: str, pods: list[Pod]) -> None:
        """Buffer ``key``'s virtual pods from now on.

        Where the last pass put its old pods stays until the next pass places
        the new ones: the room held until then is still held.
        """
        if self._pods.get(key) != pods:
            self._pods[key] = pods
            self._announce(key)

    def drop(self, key: str) -> None:
        """Buffer ``key`` asks for no room (deleted, or not resolved)."""
        if key in self._pods:
            del self._pods[key]
            self._forget_placements(key)
            self._announce(key)

    def _forget_placements(self, key: str) -> None:
        for name in list(self._placed):
            kept = [pod for pod in self._placed[name] if buffer_key_of(pod) != key]
            if kept:
                self._placed[name] = kept
            else:
                del self._placed[name]

    def pods(self) -> list[Pod]:
        """Every buffer's virtual pods, in a stable order."""
        return [pod for key in sorted(self._pods) for pod in self._pods[key]]

    def on(self, *names: str) -> list[Pod]:
        """The virtual pods the last pass placed on the Node or NodeClaim of these names."""
        return [pod for name in names for pod in self._placed.get(name, ())]

    def holds(self, name: str) -> bool:
        return name in self._placed

    def lost(self, old: object | None, new: object | None) -> bool:
        """Whether a change took away capacity holding buffer room (deleted, or being deleted)."""
        if not self._placed:
            return False
        gone = old if new is None else new
        if not isinstance(gone, NodeClaim | Node) or (new is not None and not gone.metadata.deleting):
            return False
        names = [gone.metadata.name, gone.status.node_name if isinstance(gone, NodeClaim) else ""]
        return any(name in self._placed for name in names if name)

    def after_pass(self, plan: Plan, launched: Sequence[tuple[NewNodeClaim, object]]) -> None:
        """Remember where ``plan`` put the virtual pods and write each buffer's Provisioning condition.

        ``launched``: each new NodeClaim of the plan with what creating it gave
        (the NodeClaim, or the error that refused it).
        """
        virtual = {pod.key: pod for pod in self.pods()}
        placed: dict[str, list[Pod]] = {}
        for pod_key, capacity in plan.existing.items():
            if pod_key in virtual:
                placed.setdefault(capacity, []).append(virtual[pod_key])
        for new, created in launched:
            if isinstance(created, NodeClaim):
                pods = [pod for pod in new.pods if is_virtual(pod)]
                if pods:
                    placed.setdefault(created.name, []).extend(pods)
        if placed != self._placed:
            self._placed = placed
            self.version += 1
        outcomes = provisioning_outcome(plan, virtual.values())
        now = self.clock.now()
        for buffer in self.cluster.capacity_buffers():
            outcome = outcomes.get(buffer.key)
            if outcome is None or not buffer.status.ready or buffer.metadata.deleting:
                continue
            verdict = provisioning_verdict(buffer.status.replicas or 0, outcome)
            if verdict is None:
                continue
            conditions = set_condition(
                buffer.status.conditions,
                CONDITION_PROVISIONING,
                verdict.status,
                now,
                verdict.reason,
                verdict.message,
            )
            self._write(buffer, replace(buffer.status, conditions=conditions))

    def _write(self, buffer: CapacityBuffer, status: CapacityBufferStatus) -> None:
        if status == buffer.status:
            return
        try:
            self.cluster.update_status(buffer.with_status(status))
        except KubeError as error:
            # The next pass writes it again from fresh state.
            log.debug("capacitybuffer %s: status not written: %s", buffer.key, error)


def with_buffer_room(existing: Sequence[ExistingCapacity], room: BufferRoom) -> list[ExistingCapacity]:
    """``existing`` with the room the buffers hold on each taken, as if their virtual pods ran there."""
    result: list[ExistingCapacity] = []
    for capacity in existing:
        pods = room.on(capacity.name)
        result.append(
            replace(
                capacity,
                available=subtract_amounts(capacity.available, used_by(pods)),
                pods=(*capacity.pods, *pods),
            )
            if pods
            else capacity
        )
    return result


@dataclass(frozen=True, slots=True)
class _Resolved:
    template: PodTemplate
    scalable_replicas: int | None
    pod_template: NamedPodTemplate | None


class CapacityBufferController:
    """Resolves CapacityBuffers into status and virtual pods (Karpenter's capacitybuffer controller)."""

    name = "capacitybuffer"

    def __init__(self, cluster: Cluster, clock: Clock, room: BufferRoom, *, resync: float = RESYNC) -> None:
        self.cluster = cluster
        self.clock = clock
        self.room = room
        self.resync = resync

    def watches(self) -> list[Watch]:
        return [
            Watch("CapacityBuffer", self._on_buffer),
            Watch("PodTemplate", self._on_template),
            *(Watch(kind, self._on_scalable) for kind in SCALABLE_KINDS),
        ]

    def _on_buffer(self, old: object | None, new: object | None) -> Iterable[str]:
        buffer = new if isinstance(new, CapacityBuffer) else old
        return [buffer.key] if isinstance(buffer, CapacityBuffer) else []

    def _on_template(self, old: object | None, new: object | None) -> Iterable[str]:
        template = new if isinstance(new, NamedPodTemplate) else old
        if not isinstance(template, NamedPodTemplate):
            return []
        meta = template.metadata
        return [
            buffer.key
            for buffer in self.cluster.capacity_buffers()
            if buffer.metadata.namespace == meta.namespace and buffer.spec.pod_template_ref == meta.name
        ]

    def _on_scalable(self, old: object | None, new: object | None) -> Iterable[str]:
        if (
            isinstance(old, ScaledWorkload)
            and isinstance(new, ScaledWorkload)
            and (old.replicas, old.template) == (new.replicas, new.template)
        ):
            return []  # its status or metadata: neither the shape nor the count moved
        workload = new if isinstance(new, ScaledWorkload) else old
        if not isinstance(workload, ScaledWorkload):
            return []
        meta = workload.metadata
        keys = []
        for buffer in self.cluster.capacity_buffers():
            ref = buffer.spec.scalable_ref
            if (
                ref is not None
                and buffer.metadata.namespace == meta.namespace
                and ref.kind == workload.kind
                and ref.name == meta.name
                and ref.api_group in ("", APPS_GROUP)
            ):
                keys.append(buffer.key)
        return keys

    def reconcile(self, key: str) -> float | None:
        namespace, _, name = key.partition("/")
        buffer = self.cluster.capacity_buffer(namespace, name)
        if buffer is None or buffer.metadata.deleting:
            self.room.drop(key)
            return None
        status, resolved = self._resolve(buffer)
        if resolved is not None and status.replicas:
            self.room.set(
                key,
                virtual_pods(
                    namespace,
                    name,
                    buffer.metadata.uid,
                    resolved.template,
                    status.replicas,
                    version=f"{buffer.metadata.generation}/{status.pod_template_generation}",
                ),
            )
        else:
            self.room.drop(key)
        if status != buffer.status:
            self.cluster.update_status(buffer.with_status(status))
        return self.resync

    def _resolve(self, buffer: CapacityBuffer) -> tuple[CapacityBufferStatus, _Resolved | None]:
        """The status the buffer should have, and its shape when it resolved."""
        now = self.clock.now()
        status = replace(buffer.status, provisioning_strategy=buffer.spec.provisioning_strategy)
        resolved, reason, message = self._shape(buffer)
        if resolved is None:
            conditions = set_condition(
                status.conditions, CONDITION_READY_FOR_PROVISIONING, FALSE, now, reason, message
            )
            conditions = set_condition(
                conditions,
                CONDITION_PROVISIONING,
                FALSE,
                now,
                REASON_NOT_READY_FOR_PROVISIONING,
                "Buffer is not ReadyForProvisioning",
            )
            return replace(status, conditions=conditions), None
        replicas = buffer_replicas(buffer.spec, resolved.template.spec.requests, resolved.scalable_replicas)
        conditions = set_condition(
            status.conditions,
            CONDITION_READY_FOR_PROVISIONING,
            TRUE,
            now,
            REASON_RESOLVED,
            "Pod template resolved successfully",
        )
        if replicas == 0:
            conditions = set_condition(
                conditions,
                CONDITION_PROVISIONING,
                FALSE,
                now,
                REASON_BUFFER_EMPTY,
                "Buffer has zero desired replicas",
            )
        template = resolved.pod_template
        return (
            replace(
                status,
                conditions=conditions,
                replicas=replicas,
                pod_template_ref=template.metadata.name if template is not None else "",
                pod_template_generation=template.metadata.generation if template is not None else None,
            ),
            resolved,
        )

    def _shape(self, buffer: CapacityBuffer) -> tuple[_Resolved | None, str, str]:
        """The pod shape the buffer names, or None with the reason and message why not."""
        namespace = buffer.metadata.namespace
        spec = buffer.spec
        if spec.pod_template_ref:
            found = self.cluster.pod_template(namespace, spec.pod_template_ref)
            if found is None:
                return (
                    None,
                    REASON_POD_TEMPLATE_NOT_FOUND,
                    f'podtemplates "{spec.pod_template_ref}" not found',
                )
            return _Resolved(found.template, None, found), REASON_RESOLVED, ""
        ref = spec.scalable_ref
        if ref is None:
            return None, REASON_RESOLUTION_FAILED, "Neither podTemplateRef nor scalableRef is set"
        if ref.kind not in SCALABLE_KINDS or ref.api_group not in ("", APPS_GROUP):
            group = ref.api_group or APPS_GROUP
            return None, REASON_RESOLUTION_FAILED, f"unsupported scalableRef kind {ref.kind} in group {group}"
        workload = self.cluster.scalable(ref.kind, namespace, ref.name)
        if workload is None:
            return None, REASON_SCALABLE_REF_NOT_FOUND, f'{ref.kind.lower()}s.apps "{ref.name}" not found'
        return _Resolved(workload.template, workload.replicas, None), REASON_RESOLVED, ""
