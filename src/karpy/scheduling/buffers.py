"""A CapacityBuffer as the scheduling core sees it: a set of virtual pods, and what a plan made of them.

A buffer asks for room for ``replicas`` pods of one shape. Karpenter (v1.14+)
meets it by planning that many virtual pods, never created, with every
provisioning pass as if they were pending: placed after every real pod (the
lowest priority), they land in room that is free or in new NodeClaims, and a
real pod that takes the room leaves them to be placed again, so the room
refills. karpy does the same; this module holds the pure part:

- :func:`buffer_replicas`: how many chunks ``replicas``, ``percentage`` of a
  workload's replicas and ``limits`` make (Cluster Autoscaler's rules, which
  Karpenter follows: the larger of replicas and percentage, capped by what fits
  in the limits; the limits alone when neither is set);
- :func:`virtual_pods`: the pods, with Karpenter's annotations and names
  (``capacity-buffer-<name>-<i>``), the template's labels, node selector,
  affinity and tolerations, and no volume claims (there is no claim to bind);
- :func:`provisioning_outcome`: per buffer, whether a plan put all its pods
  in existing capacity (``FitsExistingCapacity``) or needed new NodeClaims or
  left some unplaced (``RequiresNewCapacity``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from karpy.api.capacitybuffer import (
    API_VERSION,
    BUFFER_NAME_ANNOTATION,
    BUFFER_NAMESPACE_ANNOTATION,
    KIND,
    REASON_FITS_EXISTING_CAPACITY,
    REASON_REQUIRES_NEW_CAPACITY,
    VIRTUAL_POD_ANNOTATION,
    VIRTUAL_POD_PRIORITY,
    CapacityBufferSpec,
)
from karpy.api.core import Pod, PodTemplate
from karpy.api.meta import ObjectMeta, OwnerReference
from karpy.api.quantity import ResourceAmounts
from karpy.scheduling._model import Plan

INT32_MAX = 2**31 - 1


def percentage_replicas(scalable_replicas: int, percentage: int) -> int:
    """``percentage`` of a workload's replicas, rounded up; at least one when both are positive."""
    if scalable_replicas <= 0 or percentage <= 0:
        return 0
    return max(1, math.ceil(scalable_replicas * percentage / 100))


def limit_replicas(limits: Mapping[str, int], requests: ResourceAmounts) -> int | None:
    """How many pods of ``requests`` fit in ``limits``: the fewest over the resources both name.

    None when they share no resource a pod requests (the limits then limit nothing).
    """
    fits = [limit // requests[name] for name, limit in limits.items() if requests.get(name, 0) > 0]
    return min(*fits, INT32_MAX) if fits else None


def buffer_replicas(
    spec: CapacityBufferSpec, requests: ResourceAmounts, scalable_replicas: int | None
) -> int:
    """The chunks a buffer asks for, as Karpenter resolves ``status.replicas``.

    ``scalable_replicas`` is the workload's replica count when the buffer names
    one by ``scalableRef`` (None for a ``podTemplateRef``, where a percentage
    means nothing).
    """
    candidates: list[int] = []
    if spec.percentage is not None and scalable_replicas:
        candidates.append(percentage_replicas(scalable_replicas, spec.percentage))
    if spec.replicas is not None:
        candidates.append(spec.replicas)
    desired = max(candidates, default=0)
    if spec.limits is not None:
        fits = limit_replicas(spec.limits, requests)
        if fits is not None:
            return min(desired, fits) if candidates else fits
    return desired


def is_virtual(pod: Pod) -> bool:
    return pod.metadata.annotations.get(VIRTUAL_POD_ANNOTATION) == "true"


def buffer_key_of(pod: Pod) -> str:
    """``namespace/name`` of the buffer a virtual pod stands for; empty for a real pod."""
    if not is_virtual(pod):
        return ""
    annotations = pod.metadata.annotations
    return f"{annotations.get(BUFFER_NAMESPACE_ANNOTATION, '')}/{annotations.get(BUFFER_NAME_ANNOTATION, '')}"


def virtual_pods(
    namespace: str, name: str, uid: str, template: PodTemplate, replicas: int, version: str = ""
) -> list[Pod]:
    """The ``replicas`` virtual pods of buffer ``namespace/name`` shaped by ``template``.

    ``version`` stands as their resourceVersion: what is worked out from a pod
    and kept by its key and version (consolidation's memo) is worked out again
    when the buffer's shape changes. The buffer is their controller: what
    disrupts a node they are planned on, the buffer places again.
    """
    owner = OwnerReference(API_VERSION, KIND, name, uid, controller=True)
    spec = dataclasses.replace(
        template.spec,
        priority=VIRTUAL_POD_PRIORITY,
        priority_class_name="",
        node_name="",
        claim_names=(),  # no claim will ever be bound to them
    )
    annotations = {
        VIRTUAL_POD_ANNOTATION: "true",
        BUFFER_NAME_ANNOTATION: name,
        BUFFER_NAMESPACE_ANNOTATION: namespace,
    }
    return [
        Pod(
            metadata=ObjectMeta(
                name=f"capacity-buffer-{name}-{index}",
                namespace=namespace,
                uid=f"{uid}-{index}",
                labels=dict(template.labels),
                annotations=dict(annotations),
                owner_references=(owner,),
                resource_version=version,
            ),
            spec=spec,
        )
        for index in range(1, replicas + 1)
    ]


@dataclass(frozen=True, slots=True)
class BufferOutcome:
    """Where one provisioning plan put a buffer's virtual pods."""

    existing: int = 0
    new: int = 0
    unplaced: int = 0

    @property
    def fits_existing(self) -> bool:
        return not self.new and not self.unplaced


def provisioning_outcome(plan: Plan, pods: Iterable[Pod]) -> dict[str, BufferOutcome]:
    """Per buffer (``namespace/name``), how ``plan`` placed its virtual pods among ``pods``."""
    counts: dict[str, list[int]] = {}
    on_new = {pod.key for new in plan.new_nodeclaims for pod in new.pods}
    for pod in pods:
        key = buffer_key_of(pod)
        if not key:
            continue
        tally = counts.setdefault(key, [0, 0, 0])
        if pod.key in plan.existing:
            tally[0] += 1
        elif pod.key in on_new:
            tally[1] += 1
        else:
            tally[2] += 1
    return {key: BufferOutcome(*tally) for key, tally in counts.items()}


@dataclass(frozen=True, slots=True)
class ProvisioningVerdict:
    """The Provisioning condition a buffer gets from a plan: its status, reason and message."""

    status: str
    reason: str
    message: str


def provisioning_verdict(replicas: int, outcome: BufferOutcome) -> ProvisioningVerdict | None:
    """What a plan that placed a ready buffer's pods as ``outcome`` says of its room (Karpenter's rules).

    None when it says nothing new: fewer pods placed than the buffer asks for
    without any left over (a plan made before its replicas changed).
    """
    if outcome.new or outcome.unplaced:
        return ProvisioningVerdict(
            "False",
            REASON_REQUIRES_NEW_CAPACITY,
            f"{outcome.new}/{replicas} virtual pods required new capacity, {outcome.unplaced} failed",
        )
    if replicas > 0 and outcome.existing == replicas:
        return ProvisioningVerdict(
            "True", REASON_FITS_EXISTING_CAPACITY, f"All {replicas} virtual pods fit on existing capacity"
        )
    return None
