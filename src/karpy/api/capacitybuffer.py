"""CapacityBuffer (``autoscaling.x-k8s.io/v1beta1``): spare capacity, an API shared with Cluster Autoscaler.

A CapacityBuffer asks for room that is there before pods arrive: ``replicas``
chunks shaped like a pod, the shape read from a PodTemplate
(``spec.podTemplateRef``) or from a workload's own template
(``spec.scalableRef``: a Deployment, StatefulSet or ReplicaSet, whose
``percentage`` of replicas may size it), capped by ``spec.limits``. The
autoscaler resolves it into ``status.replicas`` and the conditions
``ReadyForProvisioning`` (the shape resolved) and ``Provisioning`` (whether the
room fits the capacity there is), and keeps that much room free by planning
virtual pods (never created) as if they were pending. Field names, condition
reasons and the virtual pods' annotations are Karpenter v1.15's, so its tests
and tools read karpy's status unchanged.

Also here: the core/v1 PodTemplate object a buffer refers to (karpy's
:class:`~karpy.api.core.PodTemplate` is the template inside a workload).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from karpy.api._reader import FieldReader
from karpy.api.conditions import Condition, find_condition
from karpy.api.core import PodTemplate, read_resources
from karpy.api.meta import ObjectMeta
from karpy.api.quantity import ResourceAmounts, format_amount

GROUP = "autoscaling.x-k8s.io"
API_VERSION = f"{GROUP}/v1beta1"
KIND = "CapacityBuffer"
FEATURE_GATE = "CapacityBuffer"

ACTIVE_CAPACITY = "buffer.x-k8s.io/active-capacity"

CONDITION_READY_FOR_PROVISIONING = "ReadyForProvisioning"
CONDITION_PROVISIONING = "Provisioning"

# ReadyForProvisioning's reasons.
REASON_RESOLVED = "Resolved"
REASON_SCALABLE_REF_NOT_FOUND = "ScalableRefNotFound"
REASON_POD_TEMPLATE_NOT_FOUND = "PodTemplateNotFound"
REASON_RESOLUTION_FAILED = "ResolutionFailed"
# Provisioning's reasons.
REASON_FITS_EXISTING_CAPACITY = "FitsExistingCapacity"
REASON_REQUIRES_NEW_CAPACITY = "RequiresNewCapacity"
REASON_NOT_READY_FOR_PROVISIONING = "NotReadyForProvisioning"
REASON_BUFFER_EMPTY = "BufferEmpty"

# What marks a virtual pod, and the buffer it stands for (Karpenter's annotations).
VIRTUAL_POD_ANNOTATION = "karpenter.sh/capacity-buffer-fake-pod"
BUFFER_NAME_ANNOTATION = "karpenter.sh/capacity-buffer-name"
BUFFER_NAMESPACE_ANNOTATION = "karpenter.sh/capacity-buffer-namespace"
# Virtual pods are placed after every real pod.
VIRTUAL_POD_PRIORITY = -(2**31)

# The kinds a scalableRef may name (all in the apps group).
SCALABLE_KINDS = ("Deployment", "StatefulSet", "ReplicaSet")
APPS_GROUP = "apps"


@dataclass(frozen=True, slots=True)
class ScalableRef:
    api_group: str
    kind: str
    name: str

    @classmethod
    def parse(cls, reader: FieldReader) -> ScalableRef:
        return cls(reader.string("apiGroup"), reader.required_str("kind"), reader.required_str("name"))


@dataclass(frozen=True, slots=True)
class CapacityBufferSpec:
    pod_template_ref: str = ""
    scalable_ref: ScalableRef | None = None
    replicas: int | None = None
    percentage: int | None = None
    # None: not set (an empty map is set and limits nothing).
    limits: ResourceAmounts | None = None
    provisioning_strategy: str = ACTIVE_CAPACITY

    @classmethod
    def parse(cls, reader: FieldReader) -> CapacityBufferSpec:
        template_ref = reader.obj("podTemplateRef").string("name") if reader.has("podTemplateRef") else ""
        scalable = ScalableRef.parse(reader.obj("scalableRef")) if reader.has("scalableRef") else None
        if template_ref and scalable is not None:
            raise reader.error(
                "podTemplateRef", "You must define either PodTemplateRef or ScalableRef, but not both"
            )
        replicas = reader.integer("replicas")
        percentage = reader.integer("percentage")
        for key, value in (("replicas", replicas), ("percentage", percentage)):
            if value is not None and value < 0:
                raise reader.error(key, "must not be negative")
        limits = read_resources(reader, "limits") if reader.has("limits") else None
        if template_ref and replicas is None and limits is None:
            raise reader.error(
                "podTemplateRef", "If podTemplateRef is set, replicas or limits must also be set"
            )
        return cls(
            pod_template_ref=template_ref,
            scalable_ref=scalable,
            replicas=replicas,
            percentage=percentage,
            limits=limits,
            provisioning_strategy=reader.string("provisioningStrategy", ACTIVE_CAPACITY),
        )


@dataclass(frozen=True, slots=True)
class CapacityBufferStatus:
    conditions: tuple[Condition, ...] = ()
    replicas: int | None = None
    pod_template_ref: str = ""
    pod_template_generation: int | None = None
    provisioning_strategy: str = ""

    @classmethod
    def parse(cls, reader: FieldReader) -> CapacityBufferStatus:
        return cls(
            conditions=reader.items("conditions", Condition.parse),
            replicas=reader.integer("replicas"),
            pod_template_ref=reader.obj("podTemplateRef").string("name"),
            pod_template_generation=reader.integer("podTemplateGeneration"),
            provisioning_strategy=reader.string("provisioningStrategy"),
        )

    def to_dict(self) -> dict[str, Any]:
        """The status as the CRD stores it (fields not set left out)."""
        result: dict[str, Any] = {}
        if self.conditions:
            result["conditions"] = [condition.to_dict() for condition in self.conditions]
        if self.replicas is not None:
            result["replicas"] = self.replicas
        if self.pod_template_ref:
            result["podTemplateRef"] = {"name": self.pod_template_ref}
        if self.pod_template_generation is not None:
            result["podTemplateGeneration"] = self.pod_template_generation
        if self.provisioning_strategy:
            result["provisioningStrategy"] = self.provisioning_strategy
        return result

    @property
    def ready(self) -> bool:
        condition = find_condition(self.conditions, CONDITION_READY_FOR_PROVISIONING)
        return condition is not None and condition.is_true


@dataclass(frozen=True, slots=True)
class CapacityBuffer:
    metadata: ObjectMeta
    spec: CapacityBufferSpec = field(default_factory=CapacityBufferSpec)
    status: CapacityBufferStatus = field(default_factory=CapacityBufferStatus)

    kind = KIND

    @classmethod
    def parse(cls, reader: FieldReader) -> CapacityBuffer:
        return cls(
            metadata=ObjectMeta.parse(reader.obj("metadata"), namespaced=True),
            spec=CapacityBufferSpec.parse(reader.obj("spec")),
            status=CapacityBufferStatus.parse(reader.obj("status")),
        )

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"

    def with_status(self, status: CapacityBufferStatus) -> CapacityBuffer:
        return dataclasses.replace(self, status=status)


@dataclass(frozen=True, slots=True)
class NamedPodTemplate:
    """A core/v1 PodTemplate object: a pod's shape, stored under a name (what ``podTemplateRef`` names)."""

    metadata: ObjectMeta
    template: PodTemplate

    kind = "PodTemplate"

    @classmethod
    def parse(cls, reader: FieldReader) -> NamedPodTemplate:
        return cls(
            metadata=ObjectMeta.parse(reader.obj("metadata"), namespaced=True),
            template=PodTemplate.parse(reader.obj("template")),
        )


def describe_limits(limits: ResourceAmounts) -> str:
    return ", ".join(f"{name}: {format_amount(name, amount)}" for name, amount in sorted(limits.items()))
