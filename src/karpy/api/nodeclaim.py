"""Karpenter's NodeClaim (karpenter.sh/v1): one request for one node.

The provisioner writes the spec (requirements that admit every instance type
the planned pods fit on, the pods' summed requests, the pool's taints); the
cloud provider fills the status at launch (providerID, the chosen type's
capacity and allocatable, and labels for type, zone and capacity type); the
lifecycle controller moves it through the conditions Launched → Registered →
Initialized, whose conjunction is Ready.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from karpy.api._reader import FieldReader
from karpy.api.conditions import Condition, find_condition
from karpy.api.core import read_resources
from karpy.api.meta import ObjectMeta, parse_timestamp
from karpy.api.nodepool import (
    DEFAULT_EXPIRE_AFTER,
    NodeClassRef,
    read_duration,
    read_node_selector_requirements,
)
from karpy.api.quantity import ResourceAmounts
from karpy.api.requirements import (
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    LABEL_ZONE,
    Requirement,
    Requirements,
)
from karpy.api.taints import Taint

TERMINATION_FINALIZER = "karpenter.sh/termination"
# When the drain gives up at the latest (RFC 3339): node repair stamps its policy's drain bound here,
# which tightens, never loosens, what terminationGracePeriod allows.
TERMINATION_TIMESTAMP_ANNOTATION = "karpenter.sh/nodeclaim-termination-timestamp"

CONDITION_LAUNCHED = "Launched"
CONDITION_REGISTERED = "Registered"
CONDITION_INITIALIZED = "Initialized"
CONDITION_READY = "Ready"
CONDITION_CONSOLIDATABLE = "Consolidatable"
CONDITION_DRIFTED = "Drifted"
CONDITION_DISRUPTION_REASON = "DisruptionReason"
# Set once the drain is done and the cloud accepted the instance's deletion: the NodeClaim no
# longer counts toward its NodePool's size or disruption budgets (Karpenter v1).
CONDITION_INSTANCE_TERMINATING = "InstanceTerminating"
# An in-place reboot (node repair's RebootNode): True while requested or issued, False once it
# succeeded or failed; its reason says which (Karpenter v1.15's reboot lifecycle).
CONDITION_REBOOTING = "Rebooting"
REBOOT_REQUESTED = "RebootRequested"
REBOOT_ISSUED = "RebootIssued"
REBOOT_SUCCEEDED = "RebootSucceeded"
REBOOT_FAILED = "RebootFailed"
# The Initialized condition's reason while the node reboots.
REASON_REBOOTING = "Rebooting"
# The Node's boot ID before the reboot (a new one says it happened), and the reboot's drain bound.
REBOOT_PRE_BOOT_ID_ANNOTATION = "karpenter.sh/reboot-pre-boot-id"
REBOOT_TERMINATION_GRACE_PERIOD_ANNOTATION = "karpenter.sh/reboot-termination-grace-period"

LABEL_REGISTERED = "karpenter.sh/registered"
LABEL_INITIALIZED = "karpenter.sh/initialized"


@dataclass(frozen=True, slots=True)
class NodeClaimSpec:
    node_class_ref: NodeClassRef
    requirements: tuple[Requirement, ...] = ()
    requests: ResourceAmounts = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    startup_taints: tuple[Taint, ...] = ()
    expire_after: float | None = DEFAULT_EXPIRE_AFTER
    termination_grace_period: float | None = None

    @classmethod
    def parse(cls, reader: FieldReader) -> NodeClaimSpec:
        return cls(
            node_class_ref=NodeClassRef.parse(reader.obj("nodeClassRef")),
            requirements=read_node_selector_requirements(reader, "requirements"),
            requests=read_resources(reader.obj("resources"), "requests"),
            taints=reader.items("taints", Taint.parse_spec),
            startup_taints=reader.items("startupTaints", Taint.parse_spec),
            expire_after=read_duration(reader, "expireAfter", DEFAULT_EXPIRE_AFTER, allow_never=True),
            termination_grace_period=read_duration(reader, "terminationGracePeriod", None, allow_never=False),
        )


@dataclass(frozen=True, slots=True)
class NodeClaimStatus:
    node_name: str = ""
    provider_id: str = ""
    image_id: str = ""
    capacity: ResourceAmounts = field(default_factory=dict)
    allocatable: ResourceAmounts = field(default_factory=dict)
    conditions: tuple[Condition, ...] = ()
    last_pod_event_time: float | None = None

    @classmethod
    def parse(cls, reader: FieldReader) -> NodeClaimStatus:
        last_pod_event = reader.string("lastPodEventTime")
        return cls(
            node_name=reader.string("nodeName"),
            provider_id=reader.string("providerID"),
            image_id=reader.string("imageID"),
            capacity=read_resources(reader, "capacity"),
            allocatable=read_resources(reader, "allocatable"),
            conditions=reader.items("conditions", Condition.parse),
            last_pod_event_time=parse_timestamp(last_pod_event, reader.child_path("lastPodEventTime"))
            if last_pod_event
            else None,
        )


@dataclass(frozen=True, slots=True)
class NodeClaim:
    metadata: ObjectMeta
    spec: NodeClaimSpec
    status: NodeClaimStatus = field(default_factory=NodeClaimStatus)

    kind = "NodeClaim"

    @classmethod
    def parse(cls, reader: FieldReader) -> NodeClaim:
        return cls(
            metadata=ObjectMeta.parse(reader.obj("metadata"), namespaced=False),
            spec=NodeClaimSpec.parse(reader.obj("spec")),
            status=NodeClaimStatus.parse(reader.obj("status")),
        )

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def nodepool(self) -> str:
        return self.metadata.labels.get(LABEL_NODEPOOL, "")

    @property
    def instance_type(self) -> str:
        return self.metadata.labels.get(LABEL_INSTANCE_TYPE, "")

    @property
    def capacity_type(self) -> str:
        return self.metadata.labels.get(LABEL_CAPACITY_TYPE, "")

    @property
    def zone(self) -> str:
        return self.metadata.labels.get(LABEL_ZONE, "")

    def condition(self, kind: str) -> Condition | None:
        return find_condition(self.status.conditions, kind)

    def is_true(self, kind: str) -> bool:
        condition = self.condition(kind)
        return condition is not None and condition.is_true

    @property
    def launched(self) -> bool:
        return self.is_true(CONDITION_LAUNCHED)

    @property
    def registered(self) -> bool:
        return self.is_true(CONDITION_REGISTERED)

    @property
    def initialized(self) -> bool:
        return self.is_true(CONDITION_INITIALIZED)

    @property
    def rebooting(self) -> bool:
        """A reboot was committed and has not ended yet."""
        return self.is_true(CONDITION_REBOOTING)

    def requirement_set(self) -> Requirements:
        result = Requirements()
        for requirement in self.spec.requirements:
            result.add(requirement)
        return result

    def with_status(self, **changes: object) -> NodeClaim:
        return dataclasses.replace(self, status=dataclasses.replace(self.status, **changes))  # type: ignore[arg-type]

    def with_metadata(self, **changes: object) -> NodeClaim:
        return dataclasses.replace(self, metadata=self.metadata.with_changes(**changes))

    @property
    def termination_deadline(self) -> float | None:
        """When its drain gives up: the earlier of deletion plus terminationGracePeriod and the
        termination timestamp annotation (None: neither is set; the drain waits)."""
        deadlines: list[float] = []
        deleted_at = self.metadata.deletion_timestamp
        if deleted_at is not None and self.spec.termination_grace_period is not None:
            deadlines.append(deleted_at + self.spec.termination_grace_period)
        stamped = self.metadata.annotations.get(TERMINATION_TIMESTAMP_ANNOTATION)
        if stamped:
            try:
                deadlines.append(parse_timestamp(stamped))
            except ValueError:
                pass  # written by hand and unreadable: terminationGracePeriod still bounds the drain
        return min(deadlines) if deadlines else None


# The cache table of UnreadableNodeClaim records.
UNREADABLE_NODECLAIM = "UnreadableNodeClaim"


@dataclass(frozen=True, slots=True)
class UnreadableNodeClaim:
    """A stored NodeClaim karpy cannot read: its name and provider ID, the field at fault and why.

    Kept so that its instance still has an owner: a NodeClaim the cache left out
    altogether would leave its instance to the garbage collector, which deletes
    an instance no NodeClaim owns (and its Node, pods and all).
    """

    name: str
    provider_id: str
    path: str
    message: str

    @classmethod
    def of(cls, raw: dict[str, Any], path: str, message: str) -> UnreadableNodeClaim | None:
        """The record of ``raw``, read as leniently as can be; None without even a name."""
        metadata = raw.get("metadata")
        name = metadata.get("name") if isinstance(metadata, dict) else None
        if not isinstance(name, str) or not name:
            return None
        status = raw.get("status")
        provider_id = status.get("providerID") if isinstance(status, dict) else None
        return cls(name, provider_id if isinstance(provider_id, str) else "", path, message)
