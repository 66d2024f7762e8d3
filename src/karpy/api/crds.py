"""CustomResourceDefinitions for the objects karpy reads and writes in a real cluster.

``karpy run`` works against a real API server, and an API server knows a kind
only once its CRD is installed. These are the CRDs of Karpenter's API as karpy
speaks it: ``NodePool`` and ``NodeClaim`` in ``karpenter.sh/v1``, ``EC2NodeClass``
in ``karpenter.k8s.aws/v1`` and ``KWOKNodeClass`` in ``karpenter.kwok.sh/v1alpha1``.
``karpy crds`` prints them as YAML, for ``karpy crds | kubectl apply -f -``.
They are pure data built from the API model, so they live with it in
``karpy.api``: the real-cluster adapter installs them, and ``karpy validate``
and ``karpy simulate`` refuse fields they do not list (``read_schemas()``,
:mod:`karpy.api.fields`), v1beta1 included.

They are written by hand from the facts of Karpenter's own CRDs (group, names,
scope, field names, defaults, enums, patterns, CEL rules and printer columns)
rather than generated from Go types, because karpy's API model is Python; the
schemas cover in full the fields ``karpy.api`` reads, so the API server rejects
what karpy would reject (an unknown consolidationPolicy, a weight of 200, a
budget of 110%, an alias of an unknown family) with Karpenter's own messages, so
that searching for one finds Karpenter's docs. A rule that ``karpy validate``
enforces too takes its message (and its lists: eviction signals, reservable
resources, restricted tags, selector-term exclusions) from the parser's module,
so the two cannot drift apart. CEL rules walk lists and maps: every list they
walk has a ``maxItems`` (selector terms 30, requirements 100, budgets 50), which
bounds the cost the API server estimates when the CRD is installed (it refuses a
CRD whose rules may cost too much). The schemas also fill in the same defaults (consolidationPolicy
WhenEmptyOrUnderutilized, consolidateAfter 0s, budgets ``[{nodes: 10%}]``,
expireAfter 720h). Free-form parts that karpy does not interpret (an
EC2NodeClass's blockDeviceMappings, metadataOptions, userData...) are kept as
written with ``x-kubernetes-preserve-unknown-fields``, so a manifest written for
Karpenter applies unchanged. Every kind has a status subresource (controllers
write status through ``/status`` and users cannot overwrite it with a spec
update) and Karpenter's printer columns, so ``kubectl get nodeclaims`` shows
TYPE, CAPACITY, ZONE, NODE, READY and AGE, and ``kubectl get nodepools`` shows
NODECLASS, NODES, READY and AGE (``-o wide`` adds the priority-1 columns).

**v1beta1 is rejected, with a message that says how to convert.** Karpenter
converted v1beta1 objects with a conversion webhook. A webhook needs a serving
certificate the API server trusts and an endpoint that is up whenever anyone
reads or writes these kinds (when it is down, even listing NodePools fails):
a heavy requirement for a first install and a way to break a cluster that a
CRD alone cannot. So the CRDs store and prefer ``v1`` only. ``v1beta1`` is
still *served* (conversion strategy ``None``, marked deprecated), with a schema
whose one CEL rule always fails: a v1beta1 create or update is refused by the
API server with a message naming the version and pointing at ``karpy convert``
and docs/crds.md, where the field-by-field conversion is written out. (Not
serving v1beta1 at all would also reject such a manifest, but with kubectl's
"no matches for kind ... ensure CRDs are installed first", which is wrong about
the cause and says nothing about the fix.) Offline, ``karpy simulate`` and
``karpy validate`` still read v1beta1 files and convert them
(``karpy.api.nodepool.convert_v1beta1``), noting each change, and
``karpy convert`` writes them out as v1. The price of
serving v1beta1 is that a client reading through ``v1beta1`` gets the stored
v1 object relabelled, since strategy ``None`` only rewrites ``apiVersion``; no
supported client reads these kinds at v1beta1, and none can write them.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

import yaml

from karpy.api import nodeoverlay
from karpy.api.capacitybuffer import ACTIVE_CAPACITY
from karpy.api.capacitybuffer import GROUP as CAPACITY_BUFFER_GROUP
from karpy.api.capacitybuffer import KIND as CAPACITY_BUFFER_KIND
from karpy.api.nodeclass import (
    ALIAS_ALONE_MESSAGE,
    ALIAS_FAMILY_MESSAGE,
    ALIAS_FORMAT_MESSAGE,
    AMI_FAMILIES,
    AMI_FAMILY_ALIASES,
    AMI_FAMILY_CUSTOM,
    AMI_FAMILY_REQUIRED_MESSAGE,
    AMI_TERMS,
    BOTTLEROCKET_PODS_PER_CORE_MESSAGE,
    CONTEXT_UNSUPPORTED_MESSAGE,
    EC2_GROUP,
    EC2_KIND,
    EMPTY_SELECTOR_TAG_MESSAGE,
    EMPTY_TAG_KEY_MESSAGE,
    EVICTION_SIGNALS,
    GC_THRESHOLDS_MESSAGE,
    IMDS_SWITCH,
    IMDS_TOKENS,
    INSTANCE_STORE_POLICIES,
    KUBELET_RESERVABLE,
    KWOK_GROUP,
    KWOK_KIND,
    MAX_ALIAS_LENGTH,
    MAX_HOP_LIMIT,
    MIN_HOP_LIMIT,
    ONE_CLUSTER_DNS_MESSAGE,
    ONE_ROOT_VOLUME_MESSAGE,
    RESERVATION_ID_MESSAGE,
    RESERVATION_ID_OTHERS,
    RESERVATION_NEEDS_ONE_OF,
    RESTRICTED_TAG_KEYS,
    RESTRICTED_TAG_PREFIX,
    SECURITY_GROUP_TERMS,
    SINGLE_DNS_FAMILIES,
    SOFT_EVICTION_GRACE_MESSAGE,
    SOFT_EVICTION_MESSAGE,
    SSM_PARAMETER_UNSUPPORTED_MESSAGE,
    SUBNET_TERMS,
    USER_DATA_ONLY_KUBELET_FIELDS,
    VOLUME_INITIALIZATION_MESSAGE,
    VOLUME_SIZE_PATTERN,
    VOLUME_SOURCE_MESSAGE,
    VOLUME_TYPES,
    WINDOWS_ALIAS_FAMILIES,
    WINDOWS_ALIAS_MESSAGE,
    SelectorTermRules,
    ami_family_alias_message,
    custom_kubelet_message,
    quoted_list,
    restricted_tag_message,
    valid_keys_message,
)
from karpy.api.nodepool import (
    BUDGET_DURATION_PATTERN,
    CONSOLIDATION_POLICIES,
    DEFAULT_BUDGET_NODES,
    DISRUPTION_REASONS,
    GROUP,
    NUMERIC_OPERATOR_MESSAGE,
    NUMERIC_OPERATORS,
    STATIC_RULES,
    STATIC_TRANSITION_MESSAGE,
    STATIC_TRANSITION_RULE,
    WHEN_EMPTY_OR_UNDERUTILIZED,
)
from karpy.api.requirements import (
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    LABEL_VALUE_PATTERN,
    LABEL_ZONE,
    MAX_LABEL_VALUE_LENGTH,
    WELL_KNOWN_LABELS,
)
from karpy.api.taints import TIME_ADDED_UNSUPPORTED_MESSAGE

Schema = dict[str, Any]
CRD = dict[str, Any]

CRD_API_VERSION = "apiextensions.k8s.io/v1"
CATEGORY = "karpenter"
V1 = "v1"
V1BETA1 = "v1beta1"
KWOK_VERSION = "v1alpha1"

DEFAULT_CONSOLIDATE_AFTER = "0s"
DEFAULT_EXPIRE_AFTER = "720h"
MAX_REQUIREMENTS = 100
MAX_BUDGETS = 50
MAX_SELECTOR_TERMS = 30

# Patterns, as Karpenter writes them.
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
DURATION_OR_NEVER_PATTERN = r"^(([0-9]+(s|m|h))+|Never)$"
DURATION_PATTERN = r"^([0-9]+(s|m|h))+$"
# A Go duration (the kubelet's soft eviction grace periods): 90s, 1m30s, 1.5h.
GO_DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"
BUDGET_NODES_PATTERN = r"^((100|[0-9]{1,2})%|[0-9]+)$"
BUDGET_SCHEDULE_PATTERN = (
    r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly))|((.+)\s(.+)\s(.+)\s(.+)\s(.+))$"
)
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\/))?"
    r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$"
)
CONDITION_TYPE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
# Karpenter's pattern, as its CRDs print it (operatorpkg's Condition).
CONDITION_REASON_PATTERN = r"^([A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?|)$"

# A kubelet eviction threshold: a percentage (at most 100%) or a quantity.
EVICTION_THRESHOLD_PATTERN = (
    r"^((\d{1,2}(\.\d{1,2})?|100(\.0{1,2})?)%|" + QUANTITY_PATTERN.removeprefix("^").removesuffix("$") + ")$"
)
REQUIREMENT_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", *NUMERIC_OPERATORS)
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

# Labels under kubernetes.io that a NodePool may set or require (the rest of the
# domain belongs to the kubelet and to Kubernetes itself).
_KUBERNETES_IO_ALLOWED = (
    "beta.kubernetes.io/instance-type",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "failure-domain.beta.kubernetes.io/zone",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "node.kubernetes.io/instance-type",
    "kubernetes.io/arch",
    "kubernetes.io/os",
    "node.kubernetes.io/windows-build",
)
# Labels under karpenter.k8s.aws that a NodePool may set or require: the AWS provider's
# well-known ones, whose values come from the instance types (the rest are the provider's).
_AWS_ALLOWED = tuple(sorted(key for key in WELL_KNOWN_LABELS if key.partition("/")[0].endswith(EC2_GROUP)))

V1BETA1_WARNING = (
    "{group}/v1beta1 {kind} is not accepted; rewrite it as {group}/v1 (`karpy convert FILE` does)"
)
V1BETA1_MESSAGE = (
    "{kind} {group}/v1beta1 is not accepted: karpy's CRDs store {group}/v1 only and run no "
    "conversion webhook. Rewrite the manifest as {group}/v1 (`karpy convert FILE` prints it "
    "and notes each change; docs/crds.md lists the field changes)"
)


# --- schema building blocks -------------------------------------------------------------------


def _string(**extra: Any) -> Schema:
    return {"type": "string", **extra}


def _string_map(**extra: Any) -> Schema:
    return {"type": "object", "additionalProperties": {"type": "string"}, **extra}


def _quantity() -> Schema:
    return {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": QUANTITY_PATTERN,
        "x-kubernetes-int-or-string": True,
    }


def _resource_list(description: str, *, non_negative: bool = False) -> Schema:
    amount = _quantity()
    if non_negative:
        # A negative limit caps nothing and karpy cannot read it: refused at the door. The
        # pattern's sign is only "+" for strings; an integer needs a minimum of its own.
        amount["pattern"] = QUANTITY_PATTERN.replace(r"^(\+|-)?", r"^\+?", 1)
        amount["minimum"] = 0
    return {"type": "object", "description": description, "additionalProperties": amount}


def _rule(rule: str, message: str) -> dict[str, str]:
    return {"rule": rule, "message": message}


def _any_has(variable: str, fields: Iterable[str]) -> str:
    """CEL: whether ``variable`` has any of ``fields``."""
    return " || ".join(f"has({variable}.{name})" for name in fields)


def _domain(variable: str) -> str:
    """CEL for the prefix (DNS part) of a label key."""
    return f'{variable}.find("^([^/]+)")'


def _label_key_rules(variable: str) -> list[dict[str, str]]:
    """Karpenter's restrictions on label keys, for one key held in ``variable``."""
    allowed = ", ".join(f'"{key}"' for key in _KUBERNETES_IO_ALLOWED)
    aws_allowed = ", ".join(f'"{key}"' for key in _AWS_ALLOWED)
    domain = _domain(variable)
    return [
        _rule(
            f'{variable} in [{allowed}] || {domain}.endsWith("node.kubernetes.io")'
            f' || {domain}.endsWith("node-restriction.kubernetes.io")'
            f' || !{domain}.endsWith("kubernetes.io")',
            'label domain "kubernetes.io" is restricted',
        ),
        _rule(
            f'{domain}.endsWith("kops.k8s.io") || !{domain}.endsWith("k8s.io")',
            'label domain "k8s.io" is restricted',
        ),
        _rule(
            f'{variable} in ["{LABEL_CAPACITY_TYPE}", "{LABEL_NODEPOOL}"] || !{domain}.endsWith("{GROUP}")',
            f'label domain "{GROUP}" is restricted',
        ),
        _rule(f'{variable} != "{LABEL_NODEPOOL}"', f'label "{LABEL_NODEPOOL}" is restricted'),
        _rule(f'{variable} != "kubernetes.io/hostname"', 'label "kubernetes.io/hostname" is restricted'),
        _rule(
            f'{variable} in [{aws_allowed}] || !{domain}.endsWith("{EC2_GROUP}")',
            f'label domain "{EC2_GROUP}" is restricted',
        ),
    ]


def _for_all_keys(rules: list[dict[str, str]]) -> list[dict[str, str]]:
    """The same rules, applied to every key of a map (``self``) rather than to ``x``."""
    return [_rule(f"self.all(x, {item['rule']})", item["message"]) for item in rules]


def _requirements(*, restrict_keys: bool) -> Schema:
    """A NodeSelectorRequirementWithMinValues list, as a NodePool or NodeClaim holds it."""
    key: Schema = _string(maxLength=316, pattern=LABEL_KEY_PATTERN)
    if restrict_keys:
        key["x-kubernetes-validations"] = _label_key_rules("self")
    return {
        "type": "array",
        "description": "Node selector requirements that every node launched satisfies.",
        "maxItems": MAX_REQUIREMENTS,
        "items": {
            "type": "object",
            "required": ["key", "operator"],
            "properties": {
                "key": key,
                "operator": _string(enum=list(REQUIREMENT_OPERATORS)),
                "values": {
                    "type": "array",
                    "items": _string(maxLength=MAX_LABEL_VALUE_LENGTH, pattern=LABEL_VALUE_PATTERN),
                    "x-kubernetes-list-type": "atomic",
                },
                "minValues": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 50,
                    "description": "The least number of distinct values this key must keep open.",
                },
            },
        },
        "x-kubernetes-validations": [
            _rule(
                "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)",
                "requirements with operator 'In' must have a value defined",
            ),
            _rule(
                "self.all(x, ("
                + " || ".join(f"x.operator == '{operator}'" for operator in NUMERIC_OPERATORS)
                + ") ? (x.values.size() == 1 && int(x.values[0]) >= 0) : true)",
                NUMERIC_OPERATOR_MESSAGE,
            ),
            _rule(
                "self.all(x, (x.operator == 'In' && has(x.minValues)) ? "
                "x.values.size() >= x.minValues : true)",
                "requirements with 'minValues' must have at least that many values specified "
                "in the 'values' field",
            ),
        ],
    }


def _taints(description: str) -> Schema:
    return {
        "type": "array",
        "description": description,
        "items": {
            "type": "object",
            "required": ["key", "effect"],
            "properties": {
                "key": _string(minLength=1, pattern=LABEL_KEY_PATTERN),
                "value": _string(pattern=LABEL_VALUE_PATTERN),
                "effect": _string(enum=list(TAINT_EFFECTS)),
                "timeAdded": _string(format="date-time"),
            },
            "x-kubernetes-validations": [_rule("!has(self.timeAdded)", TIME_ADDED_UNSUPPORTED_MESSAGE)],
        },
    }


def _node_class_ref(*, immutable_group_and_kind: bool) -> Schema:
    schema: Schema = {
        "type": "object",
        "description": "The provider node class the nodes are launched with.",
        "required": ["group", "kind", "name"],
        "properties": {
            "group": _string(
                pattern="^[^/]*$",
                **{"x-kubernetes-validations": [_rule("self != ''", "group may not be empty")]},
            ),
            "kind": _string(**{"x-kubernetes-validations": [_rule("self != ''", "kind may not be empty")]}),
            "name": _string(**{"x-kubernetes-validations": [_rule("self != ''", "name may not be empty")]}),
        },
    }
    if immutable_group_and_kind:
        schema["x-kubernetes-validations"] = [
            _rule("self.group == oldSelf.group", "nodeClassRef.group is immutable"),
            _rule("self.kind == oldSelf.kind", "nodeClassRef.kind is immutable"),
        ]
    return schema


def _claim_spec_properties(*, in_nodepool: bool) -> Schema:
    """The NodeClaim spec fields a NodePool's template and a NodeClaim share."""
    return {
        "nodeClassRef": _node_class_ref(immutable_group_and_kind=in_nodepool),
        "requirements": _requirements(restrict_keys=in_nodepool),
        "taints": _taints("Taints put on every node; pods must tolerate them to schedule."),
        "startupTaints": _taints(
            "Taints put on new nodes and expected to be removed by another controller once the node "
            "is ready; pods need not tolerate them."
        ),
        "expireAfter": _string(
            default=DEFAULT_EXPIRE_AFTER,
            pattern=DURATION_OR_NEVER_PATTERN,
            description="How long a node lives before it is replaced (forcefully); Never disables it.",
        ),
        "terminationGracePeriod": _string(
            pattern=DURATION_PATTERN,
            description="The longest a node drains before it is deleted, PodDisruptionBudgets or not.",
        ),
    }


def _eviction_map(field: str, values: Schema) -> Schema:
    """An eviction setting: a map from Karpenter's eviction signals to ``values``."""
    return {
        "type": "object",
        "additionalProperties": values,
        "x-kubernetes-validations": [
            _rule(
                f"self.all(x, x in {quoted_list(EVICTION_SIGNALS)})",
                valid_keys_message(field, EVICTION_SIGNALS),
            )
        ],
    }


def _reserved(field: str, description: str) -> Schema:
    """kubeReserved or systemReserved: cpu, memory, ephemeral-storage and pid, not negative."""
    return _string_map(
        description=description,
        additionalProperties=_string(pattern=QUANTITY_PATTERN),
        **{
            "x-kubernetes-validations": [
                _rule(
                    f"self.all(x, x in {quoted_list(KUBELET_RESERVABLE)})",
                    valid_keys_message(field, KUBELET_RESERVABLE),
                ),
                _rule(
                    "self.all(x, !self[x].startsWith('-'))",
                    f"{field} value cannot be a negative resource quantity",
                ),
            ]
        },
    )


def _kubelet_properties() -> Schema:
    """The kubelet settings Karpenter takes (on the NodePool in v1beta1, on the EC2NodeClass in v1)."""
    percent: Schema = {"type": "integer", "format": "int32", "minimum": 0, "maximum": 100}
    threshold = _string(pattern=EVICTION_THRESHOLD_PATTERN)
    return {
        "clusterDNS": {"type": "array", "items": _string()},
        "maxPods": {"type": "integer", "format": "int32", "minimum": 0},
        "podsPerCore": {"type": "integer", "format": "int32", "minimum": 0},
        "systemReserved": _reserved("systemReserved", "Resources reserved for OS system daemons."),
        "kubeReserved": _reserved("kubeReserved", "Resources reserved for Kubernetes system components."),
        "evictionHard": _eviction_map("evictionHard", threshold),
        "evictionSoft": _eviction_map("evictionSoft", dict(threshold)),
        "evictionSoftGracePeriod": _eviction_map(
            "evictionSoftGracePeriod", _string(pattern=GO_DURATION_PATTERN)
        ),
        "evictionMaxPodGracePeriod": {"type": "integer", "format": "int32"},
        "imageGCHighThresholdPercent": percent,
        "imageGCLowThresholdPercent": dict(percent),
        "cpuCFSQuota": {"type": "boolean"},
    }


def _kubelet_rules() -> list[dict[str, str]]:
    """Karpenter's rules across kubelet settings: GC thresholds ordered, soft evictions paired."""
    return [
        _rule(
            "has(self.imageGCHighThresholdPercent) && has(self.imageGCLowThresholdPercent) ? "
            "self.imageGCHighThresholdPercent > self.imageGCLowThresholdPercent : true",
            GC_THRESHOLDS_MESSAGE,
        ),
        _rule(
            "has(self.evictionSoft) ? self.evictionSoft.all(e, has(self.evictionSoftGracePeriod) && "
            "e in self.evictionSoftGracePeriod) : true",
            SOFT_EVICTION_MESSAGE,
        ),
        _rule(
            "has(self.evictionSoftGracePeriod) ? "
            "self.evictionSoftGracePeriod.all(e, has(self.evictionSoft) && e in self.evictionSoft) : true",
            SOFT_EVICTION_GRACE_MESSAGE,
        ),
    ]


def _conditions() -> Schema:
    return {
        "type": "array",
        "description": "The object's conditions (Ready and those it is the conjunction of).",
        "items": {
            "type": "object",
            "required": ["lastTransitionTime", "status", "type"],
            "properties": {
                "type": _string(maxLength=316, pattern=CONDITION_TYPE_PATTERN),
                "status": _string(enum=["True", "False", "Unknown"]),
                "reason": _string(maxLength=1024, pattern=CONDITION_REASON_PATTERN),
                "message": _string(maxLength=32768),
                "lastTransitionTime": _string(format="date-time"),
                "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
            },
        },
    }


def _ready_column() -> Schema:
    return {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'}


def _age_column() -> Schema:
    return {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def _label_column(name: str, label: str, *, priority: int = 0) -> Schema:
    escaped = label.replace(".", r"\.")
    column: Schema = {"name": name, "type": "string", "jsonPath": f".metadata.labels.{escaped}"}
    if priority:
        column["priority"] = priority
    return column


def _object_schema(description: str, spec: Schema, status: Schema) -> Schema:
    return {
        "type": "object",
        "description": description,
        "properties": {
            "apiVersion": _string(),
            "kind": _string(),
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
    }


def _v1beta1_rejected(kind: str, group: str) -> dict[str, Any]:
    """A served, never-stored v1beta1 whose schema refuses every write, with a message that says why."""
    message = V1BETA1_MESSAGE.format(kind=kind, group=group)
    warning = V1BETA1_WARNING.format(kind=kind, group=group)  # the API server allows 256 characters
    return {
        "name": V1BETA1,
        "served": True,
        "storage": False,
        "deprecated": True,
        "deprecationWarning": warning,
        "schema": {
            "openAPIV3Schema": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": True,
                "x-kubernetes-validations": [_rule("false", message)],
            }
        },
        "subresources": {"status": {}},
    }


def _crd(
    *,
    group: str,
    kind: str,
    plural: str,
    versions: list[dict[str, Any]],
    short_names: Iterable[str] = (),
    categories: Iterable[str] = (CATEGORY,),
    scope: str = "Cluster",
) -> CRD:
    names: dict[str, Any] = {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": plural,
        "singular": kind.lower(),
        "categories": list(categories),
    }
    if short_names:
        names["shortNames"] = list(short_names)
    return {
        "apiVersion": CRD_API_VERSION,
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": names,
            "scope": scope,
            "versions": versions,
        },
    }


def _version(
    name: str, schema: Schema, columns: list[Schema], subresources: Schema | None = None
) -> dict[str, Any]:
    return {
        "name": name,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": schema},
        "subresources": subresources if subresources is not None else {"status": {}},
        "additionalPrinterColumns": columns,
    }


# --- the CRDs ---------------------------------------------------------------------------------


def nodepool_crd() -> CRD:
    """``nodepools.karpenter.sh``: what nodes may be launched, and how they are disrupted."""
    budget: Schema = {
        "type": "object",
        "required": ["nodes"],
        "properties": {
            "nodes": _string(
                default=DEFAULT_BUDGET_NODES,
                pattern=BUDGET_NODES_PATTERN,
                description="How many of the pool's nodes may be disrupted at once: a count or a "
                "percentage (rounded up).",
            ),
            "schedule": _string(
                pattern=BUDGET_SCHEDULE_PATTERN,
                description="A cron schedule (UTC) at which the budget becomes active; needs duration.",
            ),
            "duration": _string(
                pattern=BUDGET_DURATION_PATTERN,
                description="How long the budget stays active after each schedule hit (minutes, hours).",
            ),
            "reasons": {
                "type": "array",
                "description": "The disruption reasons the budget applies to; all when omitted.",
                "maxItems": MAX_BUDGETS,
                "items": _string(enum=list(DISRUPTION_REASONS)),
            },
        },
    }
    disruption: Schema = {
        "type": "object",
        "description": "When and how fast the pool's nodes are disrupted.",
        "default": {"consolidateAfter": DEFAULT_CONSOLIDATE_AFTER},
        "required": ["consolidateAfter"],
        "properties": {
            "consolidationPolicy": _string(
                default=WHEN_EMPTY_OR_UNDERUTILIZED,
                enum=list(CONSOLIDATION_POLICIES),
                description="Which nodes consolidation may remove: only empty ones, also "
                "underutilized ones, or underutilized ones only when a move's savings outweigh "
                "its disruption (Balanced).",
            ),
            "consolidateAfter": _string(
                pattern=DURATION_OR_NEVER_PATTERN,
                description="How long a node must have had no pod scheduled or removed before "
                "consolidation considers it; Never disables consolidation.",
            ),
            "budgets": {
                "type": "array",
                "description": "Limits on how many nodes are disrupted at once; the most restrictive "
                "active budget wins.",
                "default": [{"nodes": DEFAULT_BUDGET_NODES}],
                "maxItems": MAX_BUDGETS,
                "items": budget,
                "x-kubernetes-validations": [
                    _rule(
                        "self.all(x, has(x.schedule) == has(x.duration))",
                        "'schedule' must be set with 'duration'",
                    )
                ],
            },
        },
    }
    template: Schema = {
        "type": "object",
        "description": "What every NodeClaim of the pool is stamped from.",
        "required": ["spec"],
        "properties": {
            "metadata": {
                "type": "object",
                "properties": {
                    "labels": {
                        "type": "object",
                        "maxProperties": 100,
                        "additionalProperties": _string(
                            maxLength=MAX_LABEL_VALUE_LENGTH, pattern=LABEL_VALUE_PATTERN
                        ),
                        "x-kubernetes-validations": _for_all_keys(_label_key_rules("x")),
                    },
                    "annotations": _string_map(),
                },
            },
            "spec": {
                "type": "object",
                "required": ["nodeClassRef", "requirements"],
                "properties": _claim_spec_properties(in_nodepool=True),
            },
        },
    }
    spec: Schema = {
        "type": "object",
        "required": ["template"],
        "properties": {
            "template": template,
            "disruption": disruption,
            "limits": _resource_list(
                "Caps on the resources of all the pool's nodes together.", non_negative=True
            ),
            "weight": {
                "type": "integer",
                "format": "int32",
                "minimum": 1,
                "maximum": 100,
                "description": "Orders NodePools: a higher weight is tried first.",
            },
            "replicas": {
                "type": "integer",
                "format": "int64",
                "minimum": 0,
                "description": "Makes the pool static: it keeps this many nodes whatever the pods ask "
                "for (consolidationPolicy and consolidateAfter are then ignored).",
            },
        },
        "x-kubernetes-validations": [
            _rule(STATIC_TRANSITION_RULE, STATIC_TRANSITION_MESSAGE),
            *(_rule(rule, message) for rule, message in STATIC_RULES),
        ],
    }
    status: Schema = {
        "type": "object",
        "properties": {
            "conditions": _conditions(),
            "resources": _resource_list("The resources of the pool's nodes, and their count (nodes)."),
            "nodes": {"type": "integer", "format": "int64", "description": "The number of the pool's nodes."},
            "nodeClassObservedGeneration": {"type": "integer", "format": "int64"},
        },
    }
    columns = [
        {"name": "NodeClass", "type": "string", "jsonPath": ".spec.template.spec.nodeClassRef.name"},
        {"name": "Nodes", "type": "string", "jsonPath": ".status.resources.nodes"},
        _ready_column(),
        _age_column(),
        {"name": "Weight", "type": "integer", "jsonPath": ".spec.weight", "priority": 1},
        {"name": "CPU", "type": "string", "jsonPath": ".status.resources.cpu", "priority": 1},
        {"name": "Memory", "type": "string", "jsonPath": ".status.resources.memory", "priority": 1},
    ]
    schema = _object_schema("A NodePool: the nodes karpy may launch for pending pods.", spec, status)
    schema["required"] = ["spec"]
    return _crd(
        group=GROUP,
        kind="NodePool",
        plural="nodepools",
        # The scale subresource, as Karpenter's: `kubectl scale nodepool` sets spec.replicas and
        # reads the node count back from status.nodes.
        versions=[
            _version(
                V1,
                schema,
                columns,
                {
                    "status": {},
                    "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.nodes"},
                },
            ),
            _v1beta1_rejected("NodePool", GROUP),
        ],
    )


def nodeclaim_crd() -> CRD:
    """``nodeclaims.karpenter.sh``: one request for one node, written by the provisioner."""
    spec: Schema = {
        "type": "object",
        "required": ["nodeClassRef", "requirements"],
        "properties": {
            **_claim_spec_properties(in_nodepool=False),
            "resources": {
                "type": "object",
                "properties": {
                    "requests": _resource_list("The summed requests of the planned pods.", non_negative=True)
                },
            },
        },
        "x-kubernetes-validations": [_rule("self == oldSelf", "spec is immutable")],
    }
    status: Schema = {
        "type": "object",
        "properties": {
            "nodeName": _string(description="The Node that registered for this NodeClaim."),
            "providerID": _string(description="The cloud provider's id of the instance."),
            "imageID": _string(description="The image the instance was launched from."),
            "capacity": _resource_list("The launched instance type's capacity."),
            "allocatable": _resource_list("The launched instance type's allocatable resources."),
            "conditions": _conditions(),
            "lastPodEventTime": _string(
                format="date-time",
                description="When a pod was last scheduled to or removed from the node.",
            ),
        },
    }
    columns = [
        _label_column("Type", LABEL_INSTANCE_TYPE),
        _label_column("Capacity", LABEL_CAPACITY_TYPE),
        _label_column("Zone", LABEL_ZONE),
        {"name": "Node", "type": "string", "jsonPath": ".status.nodeName"},
        _ready_column(),
        _age_column(),
        {"name": "ImageID", "type": "string", "jsonPath": ".status.imageID", "priority": 1},
        {"name": "ID", "type": "string", "jsonPath": ".status.providerID", "priority": 1},
        _label_column("NodePool", LABEL_NODEPOOL, priority=1),
        {"name": "NodeClass", "type": "string", "jsonPath": ".spec.nodeClassRef.name", "priority": 1},
        {
            "name": "Drifted",
            "type": "string",
            "jsonPath": '.status.conditions[?(@.type=="Drifted")].status',
            "priority": 1,
        },
    ]
    schema = _object_schema("A NodeClaim: one request for one node.", spec, status)
    schema["required"] = ["spec"]
    return _crd(
        group=GROUP,
        kind="NodeClaim",
        plural="nodeclaims",
        versions=[_version(V1, schema, columns), _v1beta1_rejected("NodeClaim", GROUP)],
    )


def _selector_tags(what: str) -> Schema:
    """A selector term's tags: up to 20, neither keys nor values empty ("*" matches any value)."""
    return _string_map(
        maxProperties=20,
        description=f"Tags the {what} must have; '*' matches any value.",
        **{
            "x-kubernetes-validations": [
                _rule("self.all(k, k != '' && self[k] != '')", EMPTY_SELECTOR_TAG_MESSAGE)
            ]
        },
    )


def _selector_terms(
    description: str,
    properties: Schema,
    *,
    needs_one_of: tuple[str, ...],
    exclusive: Iterable[tuple[str, tuple[str, ...], str]],
    empty_message: str = "",
    may_be_empty: bool = False,
) -> Schema:
    """Selector terms (subnets, security groups, AMIs, reservations): ORed terms of ANDed fields.

    Each term needs one of ``needs_one_of``; each ``(field, others, message)`` of
    ``exclusive`` refuses a term that sets ``field`` with any of ``others``. An
    empty list is refused by ``empty_message`` when given (Karpenter's words for
    subnets and security groups), else by ``minItems`` unless ``may_be_empty``
    (capacity reservations are optional). ``maxItems`` bounds the
    cost of the rules, which walk every term.
    """
    rules = [
        _rule(
            f"self.all(x, {_any_has('x', needs_one_of)})",
            f"expected at least one, got none, {quoted_list(needs_one_of)}",
        ),
        *(
            _rule(f"!self.exists(x, has(x.{name}) && ({_any_has('x', others)}))", message)
            for name, others, message in exclusive
        ),
    ]
    schema: Schema = {
        "type": "array",
        "description": description,
        "maxItems": MAX_SELECTOR_TERMS,
        "items": {"type": "object", "properties": properties},
        "x-kubernetes-validations": rules,
    }
    if empty_message:
        rules.insert(0, _rule("self.size() != 0", empty_message))
    elif not may_be_empty:
        schema["minItems"] = 1
    return schema


def _exclusive(rules: SelectorTermRules) -> list[tuple[str, tuple[str, ...], str]]:
    """The mutual exclusions of a list of selector terms, with their messages."""
    return [(name, others, rules.exclusive_message(name)) for name, others in rules.exclusive]


def _ami_selector_terms() -> Schema:
    """AMI selector terms: an alias (family@version) stands alone; an id goes without other fields."""
    family = "self.find('^[^@]+')"
    alias = _string(
        maxLength=MAX_ALIAS_LENGTH,
        description="An EKS optimized AMI, as family@version (al2023@latest, bottlerocket@v1.20.0).",
        **{
            "x-kubernetes-validations": [
                _rule("self.matches('^[a-zA-Z0-9]+@.+$')", ALIAS_FORMAT_MESSAGE),
                _rule(f"{family} in {quoted_list(AMI_FAMILY_ALIASES.values())}", ALIAS_FAMILY_MESSAGE),
                _rule(
                    f"{family} in {quoted_list(WINDOWS_ALIAS_FAMILIES)} ? "
                    "self.find('@.*$') == '@latest' : true",
                    WINDOWS_ALIAS_MESSAGE,
                ),
            ]
        },
    )
    terms = _selector_terms(
        "AMI selector terms; an alias stands alone.",
        {
            "alias": alias,
            "tags": _selector_tags("AMI"),
            "id": _string(pattern=AMI_TERMS.id_pattern),
            "name": _string(description="The AMI's name (not its Name tag)."),
            "owner": _string(description="Account ids, self, amazon or aws-marketplace."),
            "ssmParameter": _string(description="An SSM parameter holding the AMI id."),
        },
        needs_one_of=AMI_TERMS.needs_one_of,
        exclusive=_exclusive(AMI_TERMS),
    )
    terms["x-kubernetes-validations"].append(
        _rule("self.all(x, !has(x.ssmParameter))", SSM_PARAMETER_UNSUPPORTED_MESSAGE)
    )
    terms["x-kubernetes-validations"].append(
        _rule("!(self.exists(x, has(x.alias)) && self.size() != 1)", ALIAS_ALONE_MESSAGE)
    )
    return terms


def _ami_family_rules() -> list[dict[str, str]]:
    """An amiFamily next to an alias is the alias' family or Custom; with no alias it is required."""
    rules = []
    for family, alias in AMI_FAMILY_ALIASES.items():
        rules.append(
            _rule(
                "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && "
                f"x.alias.find('^[^@]+') == '{alias}') ? "
                f"(self.amiFamily == '{AMI_FAMILY_CUSTOM}' || self.amiFamily == '{family}') : true)",
                ami_family_alias_message(family),
            )
        )
    rules.append(
        _rule(
            "self.amiSelectorTerms.exists(x, has(x.alias)) ? true : has(self.amiFamily)",
            AMI_FAMILY_REQUIRED_MESSAGE,
        )
    )
    return rules


def _block_device_mappings() -> Schema:
    """Karpenter's block device mappings: a device and its EBS volume; one root volume at most."""
    ebs: Schema = {
        "type": "object",
        "properties": {
            "deleteOnTermination": {"type": "boolean"},
            "encrypted": {"type": "boolean"},
            "iops": {"type": "integer", "format": "int64"},
            "kmsKeyID": _string(),
            "snapshotID": _string(),
            "throughput": {"type": "integer", "format": "int64"},
            "volumeInitializationRate": {
                "type": "integer",
                "format": "int32",
                "minimum": 100,
                "maximum": 300,
            },
            "volumeSize": _string(pattern=VOLUME_SIZE_PATTERN, description="The size in Gi, G, Ti or T."),
            "volumeType": _string(enum=list(VOLUME_TYPES)),
        },
        "x-kubernetes-validations": [
            _rule("has(self.snapshotID) || has(self.volumeSize)", VOLUME_SOURCE_MESSAGE),
            _rule(
                "!has(self.volumeInitializationRate) || (has(self.snapshotID) && self.snapshotID != '')",
                VOLUME_INITIALIZATION_MESSAGE,
            ),
        ],
    }
    return {
        "type": "array",
        "description": "The block devices of the launched instances.",
        "maxItems": 50,
        "items": {
            "type": "object",
            "properties": {"deviceName": _string(), "ebs": ebs, "rootVolume": {"type": "boolean"}},
        },
        "x-kubernetes-validations": [
            _rule(
                "self.filter(x, has(x.rootVolume) ? x.rootVolume == true : false).size() <= 1",
                ONE_ROOT_VOLUME_MESSAGE,
            )
        ],
    }


def ec2nodeclass_crd() -> CRD:
    """``ec2nodeclasses.karpenter.k8s.aws``: where and how AWS instances launch."""
    ami_terms = _ami_selector_terms()
    # Karpenter's kubelet block is a fixed set of fields, all listed here: an unknown one is a
    # typo (maxPod for maxPods), refused rather than kept, as karpy reads these settings.
    kubelet: Schema = {
        "type": "object",
        "description": "Kubelet settings of the launched nodes.",
        "properties": _kubelet_properties(),
        "x-kubernetes-validations": _kubelet_rules(),
    }
    free_form = {"x-kubernetes-preserve-unknown-fields": True}
    spec: Schema = {
        "type": "object",
        "required": ["amiSelectorTerms", "securityGroupSelectorTerms", "subnetSelectorTerms"],
        "properties": {
            "subnetSelectorTerms": _selector_terms(
                "Subnet selector terms: the subnets (and so the zones) nodes launch in.",
                {"tags": _selector_tags("subnet"), "id": _string(pattern=SUBNET_TERMS.id_pattern)},
                needs_one_of=SUBNET_TERMS.needs_one_of,
                exclusive=_exclusive(SUBNET_TERMS),
                empty_message="subnetSelectorTerms cannot be empty",
            ),
            "securityGroupSelectorTerms": _selector_terms(
                "Security group selector terms.",
                {
                    "tags": _selector_tags("security group"),
                    "id": _string(pattern=SECURITY_GROUP_TERMS.id_pattern),
                    "name": _string(description="The security group's name (not its Name tag)."),
                },
                needs_one_of=SECURITY_GROUP_TERMS.needs_one_of,
                exclusive=_exclusive(SECURITY_GROUP_TERMS),
                empty_message="securityGroupSelectorTerms cannot be empty",
            ),
            "amiSelectorTerms": ami_terms,
            "amiFamily": _string(enum=list(AMI_FAMILIES)),
            "role": _string(
                description="The IAM role of the nodes (karpy or Karpenter makes the instance profile).",
                **{
                    "x-kubernetes-validations": [
                        _rule("self != ''", "role cannot be empty"),
                        _rule("self == oldSelf", "immutable field changed"),
                    ]
                },
            ),
            "instanceProfile": _string(
                description="An existing instance profile, instead of role.",
                **{"x-kubernetes-validations": [_rule("self != ''", "instanceProfile cannot be empty")]},
            ),
            "tags": _string_map(
                description="Tags put on the instances, volumes and launch templates.",
                **{
                    "x-kubernetes-validations": [
                        _rule("self.all(k, k != '')", EMPTY_TAG_KEY_MESSAGE),
                        _rule(
                            f"self.all(k, !k.startsWith('{RESTRICTED_TAG_PREFIX}'))",
                            restricted_tag_message(f"{RESTRICTED_TAG_PREFIX}/"),
                        ),
                        *(
                            _rule(f"self.all(k, k != '{key}')", restricted_tag_message(key))
                            for key in RESTRICTED_TAG_KEYS
                        ),
                    ]
                },
            ),
            "kubelet": kubelet,
            "userData": _string(),
            "context": _string(),
            "detailedMonitoring": {"type": "boolean"},
            "associatePublicIPAddress": {"type": "boolean"},
            "instanceStorePolicy": _string(enum=list(INSTANCE_STORE_POLICIES)),
            "blockDeviceMappings": _block_device_mappings(),
            # Karpenter's four instance metadata settings, closed like its CRD: "httpToken" is a typo.
            "metadataOptions": {
                "type": "object",
                "properties": {
                    "httpEndpoint": _string(enum=list(IMDS_SWITCH)),
                    "httpProtocolIPv6": _string(enum=list(IMDS_SWITCH)),
                    "httpPutResponseHopLimit": {
                        "type": "integer",
                        "format": "int64",
                        "minimum": MIN_HOP_LIMIT,
                        "maximum": MAX_HOP_LIMIT,
                    },
                    "httpTokens": _string(enum=list(IMDS_TOKENS)),
                },
                "default": {
                    "httpEndpoint": "enabled",
                    "httpProtocolIPv6": "disabled",
                    "httpPutResponseHopLimit": 1,
                    "httpTokens": "required",
                },
            },
            "capacityReservationSelectorTerms": _selector_terms(
                "Capacity reservations the nodes may launch into.",
                {
                    "tags": _selector_tags("capacity reservation"),
                    "id": _string(pattern="^cr-[0-9a-z]+$"),
                    "ownerID": _string(pattern="^[0-9]{12}$"),
                    "instanceMatchCriteria": _string(enum=["open", "targeted"]),
                },
                needs_one_of=RESERVATION_NEEDS_ONE_OF,
                may_be_empty=True,
                exclusive=[("id", RESERVATION_ID_OTHERS, RESERVATION_ID_MESSAGE)],
            ),
        },
        "x-kubernetes-validations": [
            _rule(
                "(has(self.role) && !has(self.instanceProfile))"
                " || (!has(self.role) && has(self.instanceProfile))",
                "must specify exactly one of ['role', 'instanceProfile']",
            ),
            _rule(
                "(has(oldSelf.role) && has(self.role)) || (has(oldSelf.instanceProfile) && "
                "has(self.instanceProfile))",
                "changing from 'instanceProfile' to 'role' is not supported. You must delete and "
                "recreate this node class if you want to change this.",
            ),
            *_ami_family_rules(),
            _rule(
                "!has(self.kubelet) || !has(self.kubelet.podsPerCore) || (has(self.amiFamily) ? "
                "self.amiFamily != 'Bottlerocket' : "
                "!self.amiSelectorTerms.exists(t, has(t.alias) && t.alias.startsWith('bottlerocket@')))",
                BOTTLEROCKET_PODS_PER_CORE_MESSAGE,
            ),
            _rule(
                "!has(self.kubelet) || !has(self.kubelet.clusterDNS) || "
                "self.kubelet.clusterDNS.size() <= 1 || "
                f"(has(self.amiFamily) ? !(self.amiFamily in {quoted_list(SINGLE_DNS_FAMILIES)}) : "
                "!self.amiSelectorTerms.exists(t, has(t.alias) && "
                "(t.alias.startsWith('al2@') || t.alias.startsWith('bottlerocket@'))))",
                ONE_CLUSTER_DNS_MESSAGE,
            ),
            _rule("!has(self.context)", CONTEXT_UNSUPPORTED_MESSAGE),
            *(
                _rule(
                    f"!has(self.amiFamily) || self.amiFamily != '{AMI_FAMILY_CUSTOM}' || "
                    f"!has(self.kubelet) || !has(self.kubelet.{name})",
                    custom_kubelet_message(name),
                )
                for name in USER_DATA_ONLY_KUBELET_FIELDS
            ),
        ],
    }
    status: Schema = {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "properties": {
            "conditions": _conditions(),
            "instanceProfile": _string(),
            "subnets": {"type": "array", "items": {"type": "object", **free_form}},
            "securityGroups": {"type": "array", "items": {"type": "object", **free_form}},
            "amis": {"type": "array", "items": {"type": "object", **free_form}},
            "capacityReservations": {"type": "array", "items": {"type": "object", **free_form}},
        },
    }
    columns = [
        _ready_column(),
        _age_column(),
        {"name": "Role", "type": "string", "jsonPath": ".spec.role", "priority": 1},
    ]
    schema = _object_schema(
        "An EC2NodeClass: AWS settings of the nodes of NodePools that use it.", spec, status
    )
    schema["required"] = ["spec"]
    return _crd(
        group=EC2_GROUP,
        kind=EC2_KIND,
        plural="ec2nodeclasses",
        short_names=("ec2nc", "ec2ncs"),
        versions=[_version(V1, schema, columns), _v1beta1_rejected(EC2_KIND, EC2_GROUP)],
    )


def kwoknodeclass_crd() -> CRD:
    """``kwoknodeclasses.karpenter.kwok.sh``: Karpenter's kwok provider class.

    Its one field, ``nodeRegistrationDelay``, is how long a launched node takes
    to register, as in Karpenter's kwok provider; without it karpy's own
    setting (``--registration-delay``, the simulator's boot time) applies.
    """
    spec: Schema = {
        "type": "object",
        "description": "Kwok nodes: how long they take to register.",
        "properties": {
            "nodeRegistrationDelay": _string(
                pattern=DURATION_PATTERN,
                description="How long a kwok node takes to register (default: --registration-delay).",
            )
        },
    }
    status: Schema = {"type": "object", "properties": {"conditions": _conditions()}}
    schema = _object_schema("A KWOKNodeClass: nodes are fake Node objects in the cluster.", spec, status)
    return _crd(
        group=KWOK_GROUP,
        kind=KWOK_KIND,
        plural="kwoknodeclasses",
        versions=[_version(KWOK_VERSION, schema, [_ready_column(), _age_column()])],
    )


def capacitybuffer_crd() -> CRD:
    """``capacitybuffers.autoscaling.x-k8s.io``: spare capacity (the CapacityBuffer feature gate).

    The API is Kubernetes autoscaling's, shared with Cluster Autoscaler;
    Karpenter v1.15 ships its CRD with its own, and so does karpy: with the
    gate on, ``karpy run`` watches the kind and needs it served. Namespaced,
    short name ``cb``, category ``autoscaling``, version v1beta1, Karpenter's
    printer columns and rules (exactly one of ``podTemplateRef`` and
    ``scalableRef``; a ``podTemplateRef`` with ``replicas`` or ``limits``).
    """
    reference = {
        "type": "object",
        "required": ["name"],
        "properties": {"name": _string(minLength=1, description="The name of the referent.")},
    }
    count = {"type": "integer", "format": "int32", "minimum": 0}
    spec: Schema = {
        "type": "object",
        "description": "The room to keep: its shape, how many chunks, and what limits them.",
        "properties": {
            "provisioningStrategy": _string(
                default=ACTIVE_CAPACITY, description="How the buffer is used (active capacity: virtual pods)."
            ),
            "podTemplateRef": {
                **reference,
                "description": "A PodTemplate of the same namespace: a chunk's shape.",
            },
            "scalableRef": {
                "type": "object",
                "description": "A Deployment, StatefulSet or ReplicaSet whose pods give a chunk's shape.",
                "required": ["kind", "name"],
                "properties": {
                    "apiGroup": _string(),
                    "kind": _string(minLength=1),
                    "name": _string(minLength=1),
                },
            },
            "replicas": {**count, "description": "How many chunks."},
            "percentage": {**count, "description": "Chunks as a percentage of the scalableRef's replicas."},
            "limits": {**_resource_list("The most the chunks may request together."), "type": "object"},
        },
        "x-kubernetes-validations": [
            _rule(
                "!has(self.podTemplateRef) || has(self.replicas) || has(self.limits)",
                "If podTemplateRef is set, replicas or limits must also be set",
            ),
            _rule(
                "!(has(self.podTemplateRef) && has(self.scalableRef))",
                "You must define either PodTemplateRef or ScalableRef, but not both",
            ),
        ],
    }
    conditions = _conditions()
    conditions["x-kubernetes-list-type"] = "map"
    conditions["x-kubernetes-list-map-keys"] = ["type"]
    status: Schema = {
        "type": "object",
        "properties": {
            "conditions": conditions,
            "podTemplateRef": reference,
            "podTemplateGeneration": {"type": "integer", "format": "int64"},
            "provisioningStrategy": _string(),
            "replicas": {"type": "integer", "format": "int32"},
        },
    }
    schema = _object_schema("A CapacityBuffer: room kept free for pods of one shape.", spec, status)
    schema["required"] = ["spec"]
    columns: list[Schema] = [
        {"name": "Strategy", "type": "string", "jsonPath": ".spec.provisioningStrategy"},
        {"name": "PodTemplate", "type": "string", "jsonPath": ".status.podTemplateRef.name"},
        {"name": "Replicas", "type": "integer", "jsonPath": ".status.replicas"},
        {"name": "ConditionsType", "type": "string", "jsonPath": ".status.conditions[*].type"},
        {"name": "ConditionsStatus", "type": "string", "jsonPath": ".status.conditions[*].status"},
        {"name": "ConditionsReason", "type": "string", "jsonPath": ".status.conditions[*].reason"},
        _age_column(),
    ]
    return _crd(
        group=CAPACITY_BUFFER_GROUP,
        kind=CAPACITY_BUFFER_KIND,
        plural="capacitybuffers",
        versions=[_version("v1beta1", schema, columns)],
        short_names=("cb",),
        categories=("autoscaling",),
        scope="Namespaced",
    )


def nodeoverlay_crd() -> CRD:
    """``nodeoverlays.karpenter.sh``: prices and extended capacity karpy plans with (the NodeOverlay gate).

    Karpenter v1.15's v1alpha1 CRD: cluster-scoped, short name ``overlays``,
    its patterns for ``price`` and ``priceAdjustment``, its CEL rules (not both
    prices; ``In``/``NotIn`` with values; one integer for ``Gt``/``Lt``/``Gte``/
    ``Lte``; no cpu, memory, ephemeral-storage or pods in ``capacity``; the
    karpenter.sh and hostname keys restricted), weight 1..10000, and its
    printer columns (Weight with ``-o wide``).
    """
    key = _string(maxLength=316, pattern=LABEL_KEY_PATTERN)
    key["x-kubernetes-validations"] = [
        _rule(
            f'self in ["{LABEL_CAPACITY_TYPE}", "{LABEL_NODEPOOL}"]'
            f' || !{_domain("self")}.endsWith("{GROUP}")',
            nodeoverlay.MESSAGE_KARPENTER_DOMAIN,
        ),
        _rule('self != "kubernetes.io/hostname"', nodeoverlay.MESSAGE_HOSTNAME),
    ]
    numeric = " || ".join(f"x.operator == '{operator}'" for operator in ("Gt", "Lt", "Gte", "Lte"))
    restricted = ", ".join(f"'{name}'" for name in nodeoverlay.RESTRICTED_CAPACITY)
    spec: Schema = {
        "type": "object",
        "description": "Which instance types and offerings the overlay applies to, and what it changes.",
        "required": ["requirements"],
        "properties": {
            "requirements": {
                "type": "array",
                "description": "Well-known labels, karpenter.sh/nodepool and template labels to match.",
                "maxItems": nodeoverlay.MAX_REQUIREMENTS,
                "x-kubernetes-list-type": "atomic",
                "items": {
                    "type": "object",
                    "required": ["key", "operator"],
                    "properties": {
                        "key": key,
                        "operator": _string(enum=list(nodeoverlay.OPERATORS)),
                        "values": {
                            "type": "array",
                            "items": _string(maxLength=MAX_LABEL_VALUE_LENGTH, pattern=LABEL_VALUE_PATTERN),
                            "x-kubernetes-list-type": "atomic",
                        },
                    },
                },
                "x-kubernetes-validations": [
                    _rule(
                        "self.all(x, x.operator == 'NotIn' ? x.values.size() != 0 : true)",
                        nodeoverlay.MESSAGE_NOT_IN_VALUES,
                    ),
                    _rule(
                        "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)",
                        nodeoverlay.MESSAGE_IN_VALUES,
                    ),
                    _rule(
                        f"self.all(x, ({numeric}) ? (x.values.size() == 1 && int(x.values[0]) >= 0) : true)",
                        nodeoverlay.MESSAGE_NUMERIC,
                    ),
                ],
            },
            "price": _string(
                pattern=nodeoverlay.PRICE_PATTERN, description="The price of the matching offerings."
            ),
            "priceAdjustment": _string(
                pattern=nodeoverlay.PRICE_ADJUSTMENT_PATTERN,
                description="A change of their price: +0.5 or -0.5 (absolute), +10% or -15%.",
            ),
            "capacity": {
                **_resource_list("Extended resources added to the matching instance types."),
                "x-kubernetes-validations": [
                    _rule(f"self.all(x, !(x in [{restricted}]))", nodeoverlay.MESSAGE_RESTRICTED_CAPACITY)
                ],
            },
            "weight": {
                "type": "integer",
                "format": "int32",
                "minimum": nodeoverlay.MIN_WEIGHT,
                "maximum": nodeoverlay.MAX_WEIGHT,
                "description": "Precedence over other overlays: higher first (unset is 0).",
            },
        },
        "x-kubernetes-validations": [
            _rule("!has(self.price) || !has(self.priceAdjustment)", nodeoverlay.MESSAGE_BOTH_PRICES)
        ],
    }
    conditions = _conditions()
    conditions["x-kubernetes-list-type"] = "map"
    conditions["x-kubernetes-list-map-keys"] = ["type"]
    status: Schema = {"type": "object", "properties": {"conditions": conditions}}
    schema = _object_schema("A NodeOverlay: prices and capacity that are not the cloud's.", spec, status)
    schema["required"] = ["spec"]
    columns: list[Schema] = [
        _ready_column(),
        _age_column(),
        {"name": "Weight", "type": "integer", "jsonPath": ".spec.weight", "priority": 1},
    ]
    return _crd(
        group=nodeoverlay.GROUP,
        kind=nodeoverlay.KIND,
        plural="nodeoverlays",
        versions=[_version(nodeoverlay.VERSION, schema, columns)],
        short_names=("overlays",),
    )


def all_crds() -> list[CRD]:
    """Every CRD karpy needs, node classes first (NodePools refer to them), the gated kinds last."""
    return [
        ec2nodeclass_crd(),
        kwoknodeclass_crd(),
        nodepool_crd(),
        nodeclaim_crd(),
        capacitybuffer_crd(),
        nodeoverlay_crd(),
    ]


def render_yaml(crds: Iterable[CRD]) -> str:
    """The CRDs as one multi-document YAML stream, each document starting with ``---``."""
    documents = [
        yaml.safe_dump(copy.deepcopy(crd), sort_keys=False, default_flow_style=False, width=1000)
        for crd in crds
    ]
    return "".join(f"---\n{document}" for document in documents)


# --- the schemas of the versions karpy reads from files -----------------------------------------


def _storage_schema(crd: CRD) -> Schema:
    versions = crd["spec"]["versions"]
    schema: Schema = next(v for v in versions if v["storage"])["schema"]["openAPIV3Schema"]
    return schema


def _nodepool_v1beta1_schema(v1: Schema) -> Schema:
    """A v1beta1 NodePool's fields as Karpenter's v1beta1 API had them, from the v1 schema.

    v1beta1 had ``disruption.expireAfter`` (v1 moved it to the template),
    ``nodeClassRef.apiVersion`` (v1 has ``group``), and ``kubelet`` and
    ``resources`` in the template (v1 moved kubelet to the node class); it had
    no ``terminationGracePeriod``.
    """
    schema = copy.deepcopy(v1)
    spec = schema["properties"]["spec"]["properties"]
    spec["disruption"]["properties"]["expireAfter"] = _string(pattern=DURATION_OR_NEVER_PATTERN)
    claim = spec["template"]["properties"]["spec"]["properties"]
    del claim["expireAfter"], claim["terminationGracePeriod"]
    claim["nodeClassRef"]["properties"] = {"apiVersion": _string(), "kind": _string(), "name": _string()}
    claim["kubelet"] = {"type": "object", "properties": _kubelet_properties()}
    claim["resources"] = {
        "type": "object",
        "properties": {"requests": _resource_list("The least resources a node must have.")},
    }
    return schema


def _ec2nodeclass_v1beta1_schema(v1: Schema) -> Schema:
    """A v1beta1 EC2NodeClass's fields: v1's without kubelet, capacity reservations and AMI aliases."""
    schema = copy.deepcopy(v1)
    spec = schema["properties"]["spec"]["properties"]
    del spec["kubelet"], spec["capacityReservationSelectorTerms"]
    ami_term = spec["amiSelectorTerms"]["items"]["properties"]
    del ami_term["alias"], ami_term["ssmParameter"]
    return schema


def read_schemas() -> dict[tuple[str, str], Schema]:
    """The schema of every Karpenter kind and version ``karpy simulate`` and ``karpy validate`` read.

    The v1 schemas are the CRDs' own; the v1beta1 ones are never served (the
    CRDs refuse v1beta1 writes) but files in v1beta1 are read and converted,
    so their fields are known too.
    """
    schemas: dict[tuple[str, str], Schema] = {}
    for crd in all_crds():
        spec = crd["spec"]
        for version in spec["versions"]:
            if version["storage"]:
                schemas[f"{spec['group']}/{version['name']}", spec["names"]["kind"]] = _storage_schema(crd)
    schemas[f"{GROUP}/{V1BETA1}", "NodePool"] = _nodepool_v1beta1_schema(schemas[f"{GROUP}/{V1}", "NodePool"])
    schemas[f"{EC2_GROUP}/{V1BETA1}", EC2_KIND] = _ec2nodeclass_v1beta1_schema(
        schemas[f"{EC2_GROUP}/{V1}", EC2_KIND]
    )
    return schemas
