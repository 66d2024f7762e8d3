"""Object metadata shared by every Kubernetes object karpy reads or writes.

Only the metadata that the controllers act on is kept: identity (name,
namespace, uid), labels and annotations, owners (a pod without a controller
blocks disruption), finalizers and deletion (termination runs while the
``karpenter.sh/termination`` finalizer holds an object), and the
resourceVersion that every write is checked against.

Timestamps are float seconds since the Unix epoch, read from and written as
RFC 3339: the controllers compare them with the injected clock, which in the
simulator is virtual.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import UTC, datetime

from karpy.api._reader import FieldReader, ManifestError
from karpy.api.limits import dns1123_label_problem, dns1123_subdomain_problem, labels_problem


def parse_timestamp(text: str, path: str = "") -> float:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as error:
        raise ManifestError(path, f"invalid timestamp {text!r}") from error
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def format_timestamp(seconds: float) -> str:
    moment = datetime.fromtimestamp(seconds, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class OwnerReference:
    api_version: str
    kind: str
    name: str
    uid: str = ""
    controller: bool = False
    # Whether the owner's foreground deletion waits for this object (Karpenter sets it on the
    # references from a NodeClaim to its NodePool and from a Node to its NodeClaim).
    block_owner_deletion: bool = False

    @classmethod
    def parse(cls, reader: FieldReader) -> OwnerReference:
        return cls(
            api_version=reader.string("apiVersion"),
            kind=reader.required_str("kind"),
            name=reader.required_str("name"),
            uid=reader.string("uid"),
            controller=reader.boolean("controller"),
            block_owner_deletion=reader.boolean("blockOwnerDeletion"),
        )

    def to_dict(self) -> dict[str, object]:
        result: dict[str, object] = {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
        }
        # Both are pointers in the API: a false one written out reads back as set, not as absent.
        if self.controller:
            result["controller"] = True
        if self.block_owner_deletion:
            result["blockOwnerDeletion"] = True
        return result


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    name: str
    namespace: str = ""
    uid: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    owner_references: tuple[OwnerReference, ...] = ()
    finalizers: tuple[str, ...] = ()
    creation_timestamp: float | None = None
    deletion_timestamp: float | None = None
    resource_version: str = ""
    generation: int = 0
    generate_name: str = ""

    @classmethod
    def parse(cls, reader: FieldReader, *, namespaced: bool) -> ObjectMeta:
        name = reader.string("name")
        if not name and not reader.string("generateName"):
            raise reader.error("name", "required")
        problem = dns1123_subdomain_problem(name) if name else None
        if problem is not None:
            raise reader.error("name", problem)
        namespace = (reader.string("namespace") or "default") if namespaced else ""
        problem = dns1123_label_problem(namespace) if namespace else None
        if problem is not None:
            raise reader.error("namespace", problem)
        labels = reader.str_map("labels")
        problem = labels_problem(labels)
        if problem is not None:
            raise reader.error("labels", problem)
        created = reader.string("creationTimestamp")
        deleted = reader.string("deletionTimestamp")
        return cls(
            name=name,
            namespace=namespace,
            uid=reader.string("uid"),
            labels=labels,
            annotations=reader.str_map("annotations"),
            owner_references=reader.items("ownerReferences", OwnerReference.parse),
            finalizers=reader.str_list("finalizers"),
            creation_timestamp=parse_timestamp(created, reader.child_path("creationTimestamp"))
            if created
            else None,
            deletion_timestamp=parse_timestamp(deleted, reader.child_path("deletionTimestamp"))
            if deleted
            else None,
            resource_version=reader.string("resourceVersion"),
            generation=reader.integer("generation", 0) or 0,
            generate_name=reader.string("generateName"),
        )

    @property
    def controller(self) -> OwnerReference | None:
        for owner in self.owner_references:
            if owner.controller:
                return owner
        return None

    @property
    def deleting(self) -> bool:
        return self.deletion_timestamp is not None

    def with_changes(self, **changes: object) -> ObjectMeta:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, object]:
        result: dict[str, object] = {"name": self.name}
        if self.namespace:
            result["namespace"] = self.namespace
        if self.uid:
            result["uid"] = self.uid
        if self.labels:
            result["labels"] = dict(sorted(self.labels.items()))
        if self.annotations:
            result["annotations"] = dict(sorted(self.annotations.items()))
        if self.owner_references:
            result["ownerReferences"] = [owner.to_dict() for owner in self.owner_references]
        if self.finalizers:
            result["finalizers"] = list(self.finalizers)
        if self.creation_timestamp is not None:
            result["creationTimestamp"] = format_timestamp(self.creation_timestamp)
        if self.deletion_timestamp is not None:
            result["deletionTimestamp"] = format_timestamp(self.deletion_timestamp)
        if self.resource_version:
            result["resourceVersion"] = self.resource_version
        return result
