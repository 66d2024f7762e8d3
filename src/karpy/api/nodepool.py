"""Karpenter's NodePool (karpenter.sh/v1), with v1beta1 manifests converted.

Field names, defaults and validation follow Karpenter v1 so that users'
manifests apply unchanged:

- ``spec.disruption.consolidationPolicy`` defaults to WhenEmptyOrUnderutilized,
  ``consolidateAfter`` to 0s, ``budgets`` to ``[{nodes: 10%}]``;
- ``spec.template.spec.expireAfter`` defaults to 720h (``Never`` disables it);
- ``spec.weight`` is 1..100 and orders NodePools, higher first;
- ``spec.limits`` caps the resources of all the pool's nodes together;
- ``spec.replicas`` (Karpenter's static NodePools, alpha, gate ``StaticCapacity``)
  keeps that many nodes whatever the pods ask for: ``consolidationPolicy`` and
  ``consolidateAfter`` are ignored, ``limits`` may name ``nodes`` only and
  ``weight`` may not be set (:data:`STATIC_RULES`, the CRD's CEL rules), and a
  pool never turns from static to dynamic or back (:func:`static_transition_problem`,
  a rule on updates, which a manifest read alone cannot break).

``status`` is what Karpenter writes and ``kubectl get nodepools`` prints:
``resources`` (the capacity of the pool's nodes, with their count under
``nodes``), ``nodes``, ``nodeClassObservedGeneration`` and the conditions
``ValidationSucceeded``, ``NodeClassReady`` and ``Ready`` (true when both
others are). A NodePool stored on a server that karpy cannot read (it was
accepted by a CRD laxer than karpy's reading) is kept as an
:class:`UnreadableNodePool`: its name, the field at fault and its stored
status, so that the fault can be reported on the object itself.

Many guides still print ``karpenter.sh/v1beta1``. Those manifests are
converted on read, as Karpenter's conversion webhook did:
WhenUnderutilized, written or v1beta1's default in a disruption block that
names no policy, becomes WhenEmptyOrUnderutilized (with ``consolidateAfter:
0s`` when none is written, which is how v1beta1 behaved; one that is written
was refused by v1beta1 with WhenUnderutilized and is honoured by v1),
``disruption.expireAfter`` moves to ``template.spec.expireAfter``,
``nodeClassRef.apiVersion`` becomes ``nodeClassRef.group`` (a missing group
and kind default to the AWS node class, ``karpenter.k8s.aws``
``EC2NodeClass``), ``kubelet`` is dropped (v1 keeps it on the node class;
the note quotes it so it can be moved there), and so is the template's
``resources`` (v1's NodeClaim template has no resource requests, and
Karpenter never read v1beta1's). The conversion works on the raw
mapping, before typed parsing, so a v1beta1 error is reported at the v1 field
path it maps to; each change is noted (:mod:`karpy.api.conversion`).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from karpy.api._reader import FieldReader, ManifestError
from karpy.api.conditions import Condition
from karpy.api.conversion import Conversion, copied_mapping, inline
from karpy.api.core import read_resources
from karpy.api.cron import read_schedule
from karpy.api.duration import DurationError, check_go_duration, parse_duration, parse_optional_duration
from karpy.api.limits import LABEL_NAME_MAX, label_key_problem
from karpy.api.limits import label_value_problem as taint_value_problem
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclass import EC2_GROUP, EC2_KIND
from karpy.api.nodepool_hash import nodepool_template_hash
from karpy.api.quantity import ResourceAmounts
from karpy.api.requirements import (
    LABEL_NODEPOOL,
    Requirement,
    RequirementError,
    Requirements,
    is_restricted_label,
    label_value_problem,
)
from karpy.api.taints import Taint

GROUP = "karpenter.sh"
API_VERSION_V1 = "karpenter.sh/v1"
API_VERSION_V1BETA1 = "karpenter.sh/v1beta1"

WHEN_EMPTY = "WhenEmpty"
WHEN_EMPTY_OR_UNDERUTILIZED = "WhenEmptyOrUnderutilized"
WHEN_UNDERUTILIZED_V1BETA1 = "WhenUnderutilized"
# Karpenter v1.15's third policy: WhenEmptyOrUnderutilized, each move taken only when what it
# saves outweighs the disruption it causes (karpy.disruption.balanced).
BALANCED = "Balanced"
CONSOLIDATION_POLICIES = (WHEN_EMPTY, WHEN_EMPTY_OR_UNDERUTILIZED, BALANCED)
# The policies under which consolidation disrupts nodes that still have pods.
CONSOLIDATES_UNDERUTILIZED = frozenset({WHEN_EMPTY_OR_UNDERUTILIZED, BALANCED})

REASON_EMPTY = "Empty"
REASON_UNDERUTILIZED = "Underutilized"
REASON_DRIFTED = "Drifted"
# Node repair's reason (Karpenter v1.15 paces repair through the budgets under it).
REASON_UNHEALTHY = "Unhealthy"
DISRUPTION_REASONS = (REASON_EMPTY, REASON_UNDERUTILIZED, REASON_DRIFTED, REASON_UNHEALTHY)

DEFAULT_EXPIRE_AFTER = 720 * 3600.0
DEFAULT_BUDGET_NODES = "10%"
# A budget's duration: minutes and hours only, as cron works in minutes (a trailing 0s is
# how Go prints such a duration).
BUDGET_DURATION_PATTERN = r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$"
NUMERIC_OPERATOR_MESSAGE = (
    "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value"
)
NUMERIC_OPERATORS = ("Gt", "Lt", "Gte", "Lte")
NODEPOOL_HASH_ANNOTATION = "karpenter.sh/nodepool-hash"
NODEPOOL_HASH_VERSION_ANNOTATION = "karpenter.sh/nodepool-hash-version"
NODEPOOL_HASH_VERSION = "v3"

# Karpenter's CEL rules on a NodePool's spec for static pools, with their messages.
NODES_LIMIT = "nodes"
STATIC_TRANSITION_MESSAGE = (
    "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes"
)
STATIC_LIMITS_MESSAGE = "only 'limits.nodes' is supported on static NodePools"
STATIC_WEIGHT_MESSAGE = "'weight' is not supported on static NodePools"
STATIC_RULES = (
    (
        "!has(self.replicas) || (!has(self.limits) || size(self.limits) == 0 || "
        "(size(self.limits) == 1 && 'nodes' in self.limits))",
        STATIC_LIMITS_MESSAGE,
    ),
    ("!has(self.replicas) || !has(self.weight)", STATIC_WEIGHT_MESSAGE),
)
STATIC_TRANSITION_RULE = "has(self.replicas) == has(oldSelf.replicas)"

CONDITION_READY = "Ready"
CONDITION_NODECLASS_READY = "NodeClassReady"
CONDITION_VALIDATION_SUCCEEDED = "ValidationSucceeded"


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
        operator, values = item.required_str("operator"), item.str_list("values")
        if operator in NUMERIC_OPERATORS and any(value.startswith("-") for value in values):
            raise item.error("values", NUMERIC_OPERATOR_MESSAGE)
        for value in values:
            problem = label_value_problem(value)
            if problem:
                raise item.error("values", problem)
        try:
            return Requirement.from_operator(
                item.required_str("key"), operator, values, item.integer("minValues")
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
        if value is not None:
            check_go_duration(text, value)  # the field is a Go duration in Karpenter's API
    except DurationError as error:
        raise reader.error(key, str(error)) from error
    if value is not None and value < 0:
        raise reader.error(key, "must not be negative")
    return value


def _check_node_taints(spec: FieldReader, taints: tuple[Taint, ...], startup: tuple[Taint, ...]) -> None:
    """The taints every node gets: each one a Node may carry, no key and effect twice (Karpenter's checks)."""
    seen: set[tuple[str, str]] = set()
    for field_name, written in (("taints", taints), ("startupTaints", startup)):
        for index, taint in enumerate(written):
            path = f"{field_name}[{index}]"
            key_problem = label_key_problem(taint.key)
            if key_problem:
                raise spec.error(f"{path}.key", key_problem.replace("label key", "taint key", 1))
            value_problem = taint_value_problem(taint.key, taint.value)
            if value_problem:
                raise spec.error(f"{path}.value", value_problem.replace("label", "taint", 1))
            if (taint.key, taint.effect) in seen:
                raise spec.error(path, f"duplicate taint Key/Effect pair {taint.key}={taint.effect}")
            seen.add((taint.key, taint.effect))


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
    # Which of labels, annotations, taints and startupTaints were written as an empty {} or []:
    # Go decodes those to non-nil empties, which Karpenter's hash tells from absent fields.
    written_empty: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, reader: FieldReader) -> NodeClaimTemplate:
        metadata = reader.obj("metadata")
        spec = reader.obj("spec")
        labels = metadata.str_map("labels")
        for key, value in labels.items():
            # Every NodeClaim and Node of the pool carries these labels: a key the API server
            # refuses on them would make each NodeClaim of the pool refused.
            key_problem = label_key_problem(key)
            if key_problem is not None:
                raise metadata.obj("labels").error(key, key_problem)
            if key == LABEL_NODEPOOL or is_restricted_label(key):
                raise metadata.obj("labels").error(key, f"label {key!r} is restricted")
            problem = label_value_problem(value)
            if problem:
                raise metadata.obj("labels").error(key, problem)
        annotations = metadata.str_map("annotations")
        for key in annotations:
            # The API server checks annotation keys as label keys, in lower case.
            key_problem = label_key_problem(key.lower())
            if key_problem is not None:
                raise metadata.obj("annotations").error(
                    key, key_problem.replace("label key", "annotation key")
                )
        requirements = read_node_selector_requirements(spec, "requirements")
        for index, requirement in enumerate(requirements):
            key_problem = label_key_problem(requirement.key)
            if key_problem:
                raise ManifestError(f"{spec.child_path('requirements')}[{index}].key", key_problem)
            if requirement.key == LABEL_NODEPOOL or is_restricted_label(requirement.key):
                raise ManifestError(
                    f"{spec.child_path('requirements')}[{index}].key",
                    f"label {requirement.key!r} is restricted",
                )
        if not spec.has("nodeClassRef"):
            raise spec.error("nodeClassRef", "required")
        taints = spec.items("taints", Taint.parse_spec)
        startup_taints = spec.items("startupTaints", Taint.parse_spec)
        _check_node_taints(spec, taints, startup_taints)
        return cls(
            node_class_ref=NodeClassRef.parse(spec.obj("nodeClassRef")),
            labels=labels,
            annotations=annotations,
            requirements=requirements,
            taints=taints,
            startup_taints=startup_taints,
            expire_after=read_duration(spec, "expireAfter", DEFAULT_EXPIRE_AFTER, allow_never=True),
            termination_grace_period=read_duration(spec, "terminationGracePeriod", None, allow_never=False),
            written_empty=frozenset(
                key
                for owner, key in (
                    (metadata, "labels"),
                    (metadata, "annotations"),
                    (spec, "taints"),
                    (spec, "startupTaints"),
                )
                if owner.has(key) and not owner.raw(key)
            ),
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
        written = reader.scalar_str("duration")
        if written is not None and not re.fullmatch(BUDGET_DURATION_PATTERN, written):
            raise reader.error("duration", f"must be in minutes and hours (10m, 8h, 1h30m), got {written!r}")
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
class NodePoolStatus:
    """``status``: the resources of the pool's nodes and the pool's conditions."""

    # Capacity of the pool's nodes summed, with their count under "nodes" (as Karpenter's).
    resources: ResourceAmounts = field(default_factory=dict)
    nodes: int | None = None
    node_class_observed_generation: int | None = None
    conditions: tuple[Condition, ...] = ()

    @classmethod
    def parse(cls, reader: FieldReader) -> NodePoolStatus:
        return cls(
            resources=read_resources(reader, "resources"),
            nodes=reader.integer("nodes"),
            node_class_observed_generation=reader.integer("nodeClassObservedGeneration"),
            conditions=reader.items("conditions", Condition.parse),
        )


@dataclass(frozen=True, slots=True)
class NodePool:
    metadata: ObjectMeta
    template: NodeClaimTemplate
    disruption: Disruption = field(default_factory=Disruption)
    limits: ResourceAmounts = field(default_factory=dict)
    weight: int | None = None
    # spec.replicas: a static pool's node count; None for a dynamic pool.
    replicas: int | None = None
    converted_from: str = ""
    # What the conversion from converted_from changed (karpy.api.conversion); not part
    # of what the pool is, so left out of comparisons.
    conversion_notes: tuple[str, ...] = field(default=(), compare=False)
    status: NodePoolStatus = field(default_factory=NodePoolStatus)

    kind = "NodePool"

    @classmethod
    def parse(cls, reader: FieldReader, api_version: str = API_VERSION_V1) -> NodePool:
        converted_from = ""
        notes: tuple[str, ...] = ()
        if api_version == API_VERSION_V1BETA1:
            conversion = convert_v1beta1(reader)
            reader = FieldReader(conversion.mapping, reader.path)
            converted_from = API_VERSION_V1BETA1
            notes = tuple(conversion.notes)
        spec = reader.obj("spec")
        weight = spec.integer("weight")
        if weight is not None and not 1 <= weight <= 100:
            raise spec.error("weight", f"must be between 1 and 100, got {weight}")
        limits = read_resources(spec, "limits")  # rejects negative amounts at spec.limits.<name>
        replicas = spec.integer("replicas")
        if replicas is not None:
            if replicas < 0:
                raise spec.error("replicas", f"must be greater than or equal to 0, got {replicas}")
            if set(limits) - {NODES_LIMIT}:
                raise spec.error("limits", STATIC_LIMITS_MESSAGE)
            if weight is not None:
                raise spec.error("weight", STATIC_WEIGHT_MESSAGE)
        if not spec.has("template"):
            raise spec.error("template", "required")
        metadata = ObjectMeta.parse(reader.obj("metadata"), namespaced=False)
        if len(metadata.name) > LABEL_NAME_MAX:
            raise reader.error(
                "metadata.name",
                f"must be no more than {LABEL_NAME_MAX} characters, got {len(metadata.name)}: it is the "
                f"value of the {LABEL_NODEPOOL} label of every node the pool launches",
            )
        return cls(
            metadata=metadata,
            template=NodeClaimTemplate.parse(spec.obj("template")),
            disruption=Disruption.parse(spec.obj("disruption")),
            limits=limits,
            weight=weight,
            replicas=replicas,
            converted_from=converted_from,
            conversion_notes=notes,
            status=NodePoolStatus.parse(reader.obj("status")),
        )

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def is_static(self) -> bool:
        """Whether the pool keeps ``replicas`` nodes rather than following the pods' demand."""
        return self.replicas is not None

    @property
    def node_limit(self) -> int | None:
        """``limits.nodes``, whole nodes; None when the pool sets none."""
        limit = self.limits.get(NODES_LIMIT)
        return None if limit is None else int(limit)

    def template_hash(self) -> str:
        """Karpenter's ``karpenter.sh/nodepool-hash``: changes to it mark nodes drifted.

        Karpenter's own value (:mod:`karpy.api.nodepool_hash`). Requirements are left
        out, as in Karpenter: requirement drift compares the node's labels with the new
        requirements, so widening a requirement does not replace every node.
        """
        return nodepool_template_hash(self.template)


def static_transition_problem(old: NodePool, new: NodePool) -> str | None:
    """Karpenter's transition rule: an update may not turn a static pool dynamic or the other way round."""
    return None if old.is_static == new.is_static else STATIC_TRANSITION_MESSAGE


def status_only_change(old: object | None, new: object | None) -> bool:
    """Whether ``old`` and ``new`` are one NodePool whose status alone changed.

    Controllers that act on what a NodePool asks for skip such changes: a
    status write is the pool's own bookkeeping, and reacting to it would
    make every status write a trigger for more work.
    """
    if not isinstance(old, NodePool) or not isinstance(new, NodePool):
        return False
    same_version = old.metadata.with_changes(resource_version=new.metadata.resource_version)
    return dataclasses.replace(old, metadata=same_version, status=new.status) == new


# The cache table and change notifications of UnreadableNodePool records.
UNREADABLE_NODEPOOL = "UnreadableNodePool"


@dataclass(frozen=True, slots=True)
class UnreadableNodePool:
    """A stored NodePool karpy cannot read: its metadata, the field at fault and why, its status."""

    metadata: ObjectMeta
    path: str
    message: str
    status: NodePoolStatus = field(default_factory=NodePoolStatus)

    kind = "NodePool"

    @classmethod
    def of(cls, raw: dict[str, Any], error: ManifestError) -> UnreadableNodePool:
        """The record of ``raw``, which failed to parse with ``error`` (its status read if it can be)."""
        reader = FieldReader(raw)
        metadata = ObjectMeta.parse(reader.obj("metadata"), namespaced=False)
        try:
            status = NodePoolStatus.parse(reader.obj("status"))
        except ManifestError:
            status = NodePoolStatus()  # rewritten whole by the next status write
        return cls(metadata, error.path, error.message, status)

    @property
    def name(self) -> str:
        return self.metadata.name

    def with_version(self, resource_version: str) -> UnreadableNodePool:
        return dataclasses.replace(
            self, metadata=self.metadata.with_changes(resource_version=resource_version)
        )


def convert_v1beta1(reader: FieldReader) -> Conversion:
    """A karpenter.sh/v1beta1 NodePool mapping rewritten as v1, with a note per change.

    Mappings are rewritten as copies; a field of the wrong type is left as
    written, so that typed parsing reports it at its own path.
    """
    conversion = Conversion({key: reader.raw(key) for key in reader})
    spec = copied_mapping(conversion.mapping, "spec")
    if spec is None:
        return conversion
    disruption = copied_mapping(spec, "disruption")
    expire_after: object = None
    if disruption is not None:
        _convert_disruption(disruption, conversion)
        expire_after = disruption.pop("expireAfter", None)
    template = copied_mapping(spec, "template")
    template_spec = copied_mapping(template, "spec") if template is not None else None
    if template_spec is None:
        return conversion
    if expire_after is not None:
        conversion.note("spec.disruption.expireAfter", "moved to spec.template.spec.expireAfter")
        template_spec.setdefault("expireAfter", expire_after)
    node_class_ref = template_spec.get("nodeClassRef")
    if isinstance(node_class_ref, dict):
        template_spec["nodeClassRef"] = _converted_node_class_ref(node_class_ref, conversion)
    # v1beta1 kept kubelet settings on the NodePool; v1 moved them to the node class.
    kubelet = template_spec.pop("kubelet", None)
    if kubelet is not None:
        conversion.note(
            "spec.template.spec.kubelet",
            "dropped: v1 has kubelet settings on the EC2NodeClass;"
            f" move {inline(kubelet)} to its spec.kubelet",
        )
    # v1beta1's template allowed resource requests that nothing read; v1's template has none.
    resources = template_spec.pop("resources", None)
    if resources is not None:
        conversion.note(
            "spec.template.spec.resources",
            f"dropped: v1 NodePools have no resource requests; {inline(resources)} was never used",
        )
    return conversion


def _convert_disruption(disruption: dict[str, object], conversion: Conversion) -> None:
    # v1beta1's default policy was WhenUnderutilized: a block without one converts as if it said so.
    written = disruption.get("consolidationPolicy")
    if written not in (None, WHEN_UNDERUTILIZED_V1BETA1):
        return
    disruption["consolidationPolicy"] = WHEN_EMPTY_OR_UNDERUTILIZED
    conversion.note(
        "spec.disruption.consolidationPolicy",
        f"{WHEN_UNDERUTILIZED_V1BETA1}{'' if written else ' (the v1beta1 default)'}"
        f" is {WHEN_EMPTY_OR_UNDERUTILIZED} in v1",
    )
    after = disruption.get("consolidateAfter")
    if after is None:
        # Karpenter's conversion writes the 0s v1beta1 behaved with; so does karpy.
        disruption["consolidateAfter"] = "0s"
        conversion.note(
            "spec.disruption.consolidateAfter",
            f"set to 0s: v1beta1 consolidated {WHEN_UNDERUTILIZED_V1BETA1} nodes without waiting",
        )
    else:
        conversion.note(
            "spec.disruption.consolidateAfter",
            f"{inline(after)} with {WHEN_UNDERUTILIZED_V1BETA1} was refused by v1beta1 (it never waited);"
            f" v1 accepts it: a node is consolidated {inline(after)} after its last pod change"
            " at the earliest",
        )


def _converted_node_class_ref(written: dict[str, object], conversion: Conversion) -> dict[str, object]:
    """v1beta1's ``apiVersion`` as v1's ``group``; a missing group and kind defaulted.

    v1beta1's apiVersion and kind were optional; Karpenter fills them in with
    the provider's node class (here the AWS one), as v1 requires both.
    """
    path = "spec.template.spec.nodeClassRef"
    rest = dict(written)
    api_version = rest.pop("apiVersion", None)
    group = rest.pop("group", None)
    if group is None and isinstance(api_version, str) and api_version:
        group = api_version.split("/", 1)[0]
        conversion.note(f"{path}.apiVersion", f"{api_version} became group: {group}")
    elif group is None:
        group = EC2_GROUP
        conversion.note(f"{path}.group", f"defaulted to {EC2_GROUP}")
    elif api_version is not None:
        conversion.note(f"{path}.apiVersion", f"dropped: group {group} is written")
    converted: dict[str, object] = {"group": group}
    kind = rest.pop("kind", None)
    if not kind and group == EC2_GROUP:
        kind = EC2_KIND
        conversion.note(f"{path}.kind", f"defaulted to {EC2_KIND}")
    if kind is not None:
        converted["kind"] = kind
    return {**converted, **rest}
