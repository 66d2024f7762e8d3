"""Services and ReplicationControllers, as far as they select pods.

kube-scheduler deduces the label selector of a pod's default topology spread
constraints from the Services in its namespace that select it and from its
controller's selector (a ReplicationController, ReplicaSet or StatefulSet);
karpy reads these two kinds for that alone (:mod:`karpy.scheduling.default_spread`).
"""

from __future__ import annotations

from dataclasses import dataclass

from karpy.api._reader import FieldReader
from karpy.api.meta import ObjectMeta


@dataclass(frozen=True, slots=True)
class Service:
    metadata: ObjectMeta
    # spec.selector; None when absent (a Service without one selects no pod).
    selector: dict[str, str] | None = None

    kind = "Service"

    @classmethod
    def parse(cls, reader: FieldReader) -> Service:
        spec = reader.obj("spec")
        return cls(
            metadata=ObjectMeta.parse(reader.obj("metadata"), namespaced=True),
            selector=spec.str_map("selector") if spec.raw("selector") is not None else None,
        )


@dataclass(frozen=True, slots=True)
class ReplicationController:
    metadata: ObjectMeta
    selector: dict[str, str]

    kind = "ReplicationController"

    @classmethod
    def parse(cls, reader: FieldReader) -> ReplicationController:
        spec = reader.obj("spec")
        selector = spec.str_map("selector") or reader.obj("spec").obj("template").obj("metadata").str_map(
            "labels"
        )
        return cls(metadata=ObjectMeta.parse(reader.obj("metadata"), namespaced=True), selector=selector)
