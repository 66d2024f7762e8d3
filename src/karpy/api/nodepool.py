"""Karpenter's NodePool (karpenter.sh/v1), with v1beta1 manifests converted.

Field names, defaults and validation follow Karpenter v1 so that users'
manifests apply unchanged:

- ``spec.disruption.consolidationPolicy`` defaults to WhenEmptyOrUnderutilized,
  ``consolidateAfter`` to 0s, ``budgets`` to ``[{nodes: 10%}]``;
- ``spec.template.spec.expireAfter`` defaults to 720h (``Never`` disables it);
- ``spec.weight`` is 1..100 and orders NodePools, higher first;
- ``spec.limits`` caps the resources of all the pool's nodes together.

Many guides still print ``karpenter.sh/v1beta1``. Those manifests are
converted on read, as Karpenter's conversion webhook did:
WhenUnderutilized becomes WhenEmptyOrUnderutilized, ``disruption.expireAfter``
moves to ``template.spec.expireAfter``, ``nodeClassRef.apiVersion`` becomes
``nodeClassRef.group`` (a missing group and kind default to the AWS node
class, ``karpenter.k8s.aws`` ``EC2NodeClass``), and ``kubelet`` is dropped (v1
keeps it on the node class). The conversion works on the raw mapping, before
typed parsing, so a v1beta1 error is reported at the v1 field path it maps to.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from karpy.api._reader import FieldReader, ManifestError
from karpy.api.core import read_resources
from karpy.api.cron import read_schedule
from karpy.api.duration import DurationError, parse_duration, parse_optional_duration
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclass import EC2_GROUP, EC2_KIND
from karpy.api.quantity import ResourceAmounts
from karpy.api.requirements import (
    LABEL_NODEPOOL,
    Requirement,
    RequirementError,
    Requirements,
    is_restricted_label,
)
from karpy.api.taints import Taint

GROUP = "karpenter.sh"
API_VERSION_V1 = "karpenter.sh/v1"
API_VERSION_V1BETA1 = "karpenter.sh/v1beta1"

WHEN_EMPTY = "WhenEmpty"
WHEN_EMPTY_OR_UNDERUTILIZED = "WhenEmptyOrUnderutilized"
WHEN_UNDERUTILIZED_V1BETA1 = "WhenUnderutilized"
CONSOLIDATION_POLICIES = (WHEN_EMPTY, WHEN_EMPTY_OR_UNDERUTILIZED)

REASON_EMPTY = "Empty"
REASON_UNDERUTILIZED = "Underutilized"
REASON_DRIFTED = "Drifted"
DISRUPTION_REASONS = (REASON_EMPTY, REASON_UNDERUTILIZED, REASON_DRIFTED)

DEFAULT_EXPIRE_AFTER = 720 * 3600.0
DEFAULT_BUDGET_NODES = "10%"
NODEPOOL_HASH_ANNOTATION = "karpenter.sh/nodepool-hash"
NODEPOOL_HASH_VERSION_ANNOTATION = "karpenter.sh/nodepool-hash-version"
NODEPOOL_HASH_VERSION = "v3"


@dataclass(frozen=True, slots=True)
class NodeClassRef:
    group: str
    kind: str
    name: str

    @classmethod
    def parse(cls, reader: FieldReader) -> NodeClassRef:
        return cls(
            group=reader.required_str("group"),
            kind=reader.required_str("kind"),
            name=reader.required_str("name"),
        )

    def to_dict(self) -> dict[str, str]:
        return {"group": self.group, "kind": self.kind, "name": self.name}

    def __str__(self) -> str:
        return f"{self.kind}/{self.name}"


def read_node_selector_requirements(reader: FieldReader, key: str) -> tuple[Requirement, ...]:
    """Karpenter's NodeSelectorRequirementWithMinValues list, in the order written."""

    def parse(item: FieldReader) -> Requirement:
        try:
            return Requirement.from_operator(
                item.required_str("key"),
                item.required_str("operator"),
                item.str_list("values"),
                item.integer("minValues"),
            )
        except RequirementError as error:
            raise ManifestError(item.path, str(error)) from error

    return reader.items(key, parse)


def read_duration(reader: FieldReader, key: str, default: float | None, *, allow_never: bool) -> float | None:
    text = reader.scalar_str(key)
    if text is None:
        return default
    try:
        value = parse_optional_duration(text) if allow_never else parse_duration(text)
    except DurationError as error:
        raise reader.error(key, str(error)) from error
    if value is not None and value < 0:
        raise reader.error(key, "must not be negative")
    return value


@dataclass(frozen=True, slots=True)
class NodeClaimTemplate:
    """``spec.template``: what every NodeClaim of the pool is stamped from."""

    node_class_ref: NodeClassRef
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    requirements: tuple[Requirement, ...] = ()
    taints: tuple[Taint, ...] = ()
    startup_taints: tuple[Taint, ...] = ()
    expire_after: float | None = DEFAULT_EXPIRE_AFTER
    termination_grace_period: float | None = None

    @classmethod
    def parse(cls, reader: FieldReader) -> NodeClaimTemplate:
        metadata = reader.obj("metadata")
        spec = reader.obj("spec")
        labels = metadata.str_map("labels")
        for key in labels:
            if key == LABEL_NODEPOOL or is_restricted_label(key):
                raise metadata.obj("labels").error(key, f"label {key!r} is restricted")
        requirements = read_node_selector_requirements(spec, "requirements")
        for index, requirement in enumerate(requirements):
            if requirement.key == LABEL_NODEPOOL or is_restricted_label(requirement.key):
                raise ManifestError(
                    f"{spec.child_path('requirements')}[{index}].key",
                    f"label {requirement.key!r} is restricted",
                )
        if not spec.has("nodeClassRef"):
            raise spec.error("nodeClassRef", "required")
        return cls(
            node_class_ref=NodeClassRef.parse(spec.obj("nodeClassRef")),
            labels=labels,
            annotations=metadata.str_map("annotations"),
            requirements=requirements,
            taints=spec.items("taints", Taint.parse),
            startup_taints=spec.items("startupTaints", Taint.parse),
            expire_after=read_duration(spec, "expireAfter", DEFAULT_EXPIRE_AFTER, allow_never=True),
            termination_grace_period=read_duration(spec, "terminationGracePeriod", None, allow_never=False),
        )

    def requirement_set(self) -> Requirements:
        """The template's requirements, with its labels as single-value requirements."""
        result = Requirements.from_labels(self.labels)
        for requirement in self.requirements:
            result.add(requirement)
        return result


@dataclass(frozen=True, slots=True)
class Budget:
    nodes: str = DEFAULT_BUDGET_NODES
    schedule: str | None = None
    duration: float | None = None
    reasons: tuple[str, ...] = ()

    @classmethod
    def parse(cls, reader: FieldReader) -> Budget:
        nodes = reader.scalar_str("nodes")
        if nodes is None:
            nodes = DEFAULT_BUDGET_NODES
        digits = nodes[:-1] if nodes.endswith("%") else nodes
        if not (digits.isascii() and digits.isdigit()) or (nodes.endswith("%") and int(digits) > 100):
            raise reader.error(
                "nodes", f"must be a non-negative integer or a percentage up to 100%, got {nodes!r}"
            )
        schedule = read_schedule(reader, "schedule")
        duration = read_duration(reader, "duration", None, allow_never=False)
        if (schedule is None) != (duration is None):
            raise reader.error(
                "schedule" if schedule is None else "duration", "schedule and duration go together"
            )
        reasons = reader.str_list("reasons")
        for reason in reasons:
            if reason not in DISRUPTION_REASONS:
                raise reader.error(
                    "reasons", f"unknown reason {reason!r}; use {', '.join(DISRUPTION_REASONS)}"
                )
        return cls(nodes=nodes, schedule=schedule, duration=duration, reasons=reasons)

    def allowed(self, total_nodes: int) -> int:
        """Nodes this budget lets be disrupted at once (percentages round up, as Karpenter's)."""
        if self.nodes.endswith("%"):
            return -(-int(self.nodes[:-1]) * total_nodes // 100)
        return int(self.nodes)


@dataclass(frozen=True, slots=True)
class Disruption:
    consolidation_policy: str = WHEN_EMPTY_OR_UNDERUTILIZED
    consolidate_after: float | None = 0.0
    budgets: tuple[Budget, ...] = (Budget(),)

    @classmethod
    def parse(cls, reader: FieldReader) -> Disruption:
        policy = reader.string("consolidationPolicy", WHEN_EMPTY_OR_UNDERUTILIZED)
        if policy not in CONSOLIDATION_POLICIES:
            raise reader.error(
                "consolidationPolicy", f"must be one of {', '.join(CONSOLIDATION_POLICIES)}, got {policy!r}"
            )
        budgets = reader.items("budgets", Budget.parse) if reader.has("budgets") else (Budget(),)
        return cls(
            consolidation_policy=policy,
            consolidate_after=read_duration(reader, "consolidateAfter", 0.0, allow_never=True),
            budgets=budgets,
        )


@dataclass(frozen=True, slots=True)
class NodePool:
    metadata: ObjectMeta
    template: NodeClaimTemplate
    disruption: Disruption = field(default_factory=Disruption)
    limits: ResourceAmounts = field(default_factory=dict)
    weight: int | None = None
    converted_from: str = ""

    kind = "NodePool"

    @classmethod
    def parse(cls, reader: FieldReader, api_version: str = API_VERSION_V1) -> NodePool:
        converted_from = ""
        if api_version == API_VERSION_V1BETA1:
            reader = FieldReader(convert_v1beta1(reader), reader.path)
            converted_from = API_VERSION_V1BETA1
        spec = reader.obj("spec")
        weight = spec.integer("weight")
        if weight is not None and not 1 <= weight <= 100:
            raise spec.error("weight", f"must be between 1 and 100, got {weight}")
        limits = read_resources(spec, "limits")  # rejects negative amounts at spec.limits.<name>
        if not spec.has("template"):
            raise spec.error("template", "required")
        return cls(
            metadata=ObjectMeta.parse(reader.obj("metadata"), namespaced=False),
            template=NodeClaimTemplate.parse(spec.obj("template")),
            disruption=Disruption.parse(spec.obj("disruption")),
            limits=limits,
            weight=weight,
            converted_from=converted_from,
        )

    @property
    def name(self) -> str:
        return self.metadata.name

    def template_hash(self) -> str:
        """Karpenter's ``karpenter.sh/nodepool-hash``: changes to it mark nodes drifted.

        Requirements are left out on purpose: Karpenter judges requirement drift
        by comparing the node's labels with the new requirements, so widening a
        requirement does not replace every node. Lists are hashed as sets, as
        Karpenter's hash does (``SlicesAsSets``): reordering taints is no change.
        """
        template = self.template
        material: dict[str, Any] = {
            "labels": dict(sorted(template.labels.items())),
            "annotations": dict(sorted(template.annotations.items())),
            "taints": [taint.to_dict() for taint in sorted(template.taints, key=_taint_order)],
            "startupTaints": [taint.to_dict() for taint in sorted(template.startup_taints, key=_taint_order)],
            "nodeClassRef": template.node_class_ref.to_dict(),
            "expireAfter": template.expire_after,
            "terminationGracePeriod": template.termination_grace_period,
        }
        digest = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()
        return str(int(digest[:16], 16))


def _taint_order(taint: Taint) -> tuple[str, str, str]:
    return (taint.key, taint.effect, taint.value)


def convert_v1beta1(reader: FieldReader) -> dict[str, object]:
    """A karpenter.sh/v1beta1 NodePool mapping rewritten as v1.

    Mappings are rewritten as copies; a field of the wrong type is left as
    written, so that typed parsing reports it at its own path.
    """
    result = {key: reader.raw(key) for key in reader}
    spec = _copied_mapping(result, "spec")
    if spec is None:
        return result
    disruption = _copied_mapping(spec, "disruption")
    expire_after: object = None
    if disruption is not None:
        if disruption.get("consolidationPolicy") == WHEN_UNDERUTILIZED_V1BETA1:
            disruption["consolidationPolicy"] = WHEN_EMPTY_OR_UNDERUTILIZED
        expire_after = disruption.pop("expireAfter", None)
    template = _copied_mapping(spec, "template")
    template_spec = _copied_mapping(template, "spec") if template is not None else None
    if template_spec is None:
        return result
    if expire_after is not None:
        template_spec.setdefault("expireAfter", expire_after)
    node_class_ref = _copied_mapping(template_spec, "nodeClassRef")
    if node_class_ref is not None:
        # v1beta1's apiVersion and kind were optional; Karpenter fills them in
        # with the provider's node class (here the AWS one), as v1 requires both.
        api_version = node_class_ref.pop("apiVersion", None)
        if isinstance(api_version, str) and api_version and "group" not in node_class_ref:
            node_class_ref["group"] = api_version.split("/", 1)[0]
        node_class_ref.setdefault("group", EC2_GROUP)
        if not node_class_ref.get("kind") and node_class_ref["group"] == EC2_GROUP:
            node_class_ref["kind"] = EC2_KIND
    # v1beta1 kept kubelet settings on the NodePool; v1 moved them to the node class.
    template_spec.pop("kubelet", None)
    return result


def _copied_mapping(parent: dict[str, object], key: str) -> dict[str, object] | None:
    """A copy of the mapping at ``parent[key]``, put in its place; None if that is not a mapping."""
    value = parent.get(key)
    if not isinstance(value, dict):
        return None
    copy = dict(value)
    parent[key] = copy
    return copy
