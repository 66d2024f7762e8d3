"""NodePool (karpenter.sh/v1): defaults, Never, v1beta1 conversion, validation paths, budgets, hash."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest
import yaml

from karpy.api._reader import FieldReader, ManifestError
from karpy.api.nodepool import (
    API_VERSION_V1,
    API_VERSION_V1BETA1,
    DEFAULT_EXPIRE_AFTER,
    WHEN_EMPTY,
    WHEN_EMPTY_OR_UNDERUTILIZED,
    Budget,
    NodeClassRef,
    NodePool,
    convert_v1beta1,
)
from karpy.api.requirements import Requirement
from karpy.api.taints import Taint

HOUR = 3600.0

BASE = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      nodeClassRef:
        group: karpenter.k8s.aws
        kind: EC2NodeClass
        name: default
"""

V1BETA1 = """
apiVersion: karpenter.sh/v1beta1
kind: NodePool
metadata:
  name: old
spec:
  disruption:
    consolidationPolicy: WhenUnderutilized
    expireAfter: 168h
  template:
    spec:
      nodeClassRef:
        apiVersion: karpenter.k8s.aws/v1beta1
        kind: EC2NodeClass
        name: default
      kubelet:
        maxPods: 110
"""


DELETE = object()


def manifest(text: str = BASE, fields: Mapping[str, object] | None = None) -> dict[str, Any]:
    """The manifest in ``text`` with each dotted field path in ``fields`` set (or deleted)."""
    document = yaml.safe_load(text)
    assert isinstance(document, dict)
    for dotted, value in (fields or {}).items():
        *parents, last = dotted.split(".")
        target = document
        for key in parents:
            target = target.setdefault(key, {})
        if value is DELETE:
            target.pop(last, None)
        else:
            target[last] = value
    return document


def nodepool(
    fields: Mapping[str, object] | None = None, *, text: str = BASE, api_version: str = API_VERSION_V1
) -> NodePool:
    return NodePool.parse(FieldReader(manifest(text, fields)), api_version)


def nodepool_error(
    fields: Mapping[str, object] | None = None, *, text: str = BASE, api_version: str = API_VERSION_V1
) -> str:
    with pytest.raises(ManifestError) as raised:
        nodepool(fields, text=text, api_version=api_version)
    return str(raised.value)


# --- v1 defaults and values -----------------------------------------------------


def test_v1_defaults_follow_karpenter() -> None:
    pool = nodepool()
    assert pool.name == "default"
    assert pool.disruption.consolidation_policy == WHEN_EMPTY_OR_UNDERUTILIZED
    assert pool.disruption.consolidate_after == 0.0
    assert pool.disruption.budgets == (Budget(nodes="10%"),)
    assert pool.template.expire_after == 720 * HOUR == DEFAULT_EXPIRE_AFTER
    assert pool.template.termination_grace_period is None
    assert pool.weight is None
    assert pool.limits == {}
    assert pool.template.node_class_ref == NodeClassRef("karpenter.k8s.aws", "EC2NodeClass", "default")
    assert pool.converted_from == ""


def test_v1_fields_are_read_as_written() -> None:
    pool = nodepool(
        {
            "spec.weight": 100,
            "spec.limits": {"cpu": "1000", "memory": "1000Gi"},
            "spec.disruption": {
                "consolidationPolicy": "WhenEmpty",
                "consolidateAfter": "1h30m",
                "budgets": [
                    {"nodes": "20%", "reasons": ["Empty", "Drifted"]},
                    {"nodes": 0, "schedule": "@daily", "duration": "10m"},
                ],
            },
            "spec.template.metadata": {"labels": {"team": "a"}, "annotations": {"owner": "me"}},
            "spec.template.spec.expireAfter": "24h",
            "spec.template.spec.terminationGracePeriod": "48h",
            "spec.template.spec.taints": [{"key": "gpu", "value": "true", "effect": "NoSchedule"}],
            "spec.template.spec.startupTaints": [{"key": "agent", "effect": "NoExecute"}],
            "spec.template.spec.requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
                {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": ["4"], "minValues": 2},
            ],
        }
    )
    assert pool.weight == 100
    assert pool.limits == {"cpu": 1_000_000, "memory": 1000 * 1024**3}
    assert pool.disruption.consolidation_policy == WHEN_EMPTY
    assert pool.disruption.consolidate_after == 5400.0
    assert pool.disruption.budgets == (
        Budget(nodes="20%", reasons=("Empty", "Drifted")),
        Budget(nodes="0", schedule="@daily", duration=600.0),
    )
    assert pool.template.labels == {"team": "a"}
    assert pool.template.annotations == {"owner": "me"}
    assert pool.template.expire_after == 24 * HOUR
    assert pool.template.termination_grace_period == 48 * HOUR
    assert pool.template.taints == (Taint("gpu", "NoSchedule", "true"),)
    assert pool.template.startup_taints == (Taint("agent", "NoExecute"),)
    assert pool.template.requirements == (
        Requirement.from_operator("karpenter.sh/capacity-type", "In", ["spot"]),
        Requirement.from_operator("karpenter.k8s.aws/instance-cpu", "Gt", ["4"], 2),
    )


def test_never_disables_consolidate_after_and_expire_after() -> None:
    pool = nodepool(
        {"spec.disruption": {"consolidateAfter": "Never"}, "spec.template.spec.expireAfter": "Never"}
    )
    assert pool.disruption.consolidate_after is None
    assert pool.template.expire_after is None


@pytest.mark.parametrize(
    "fields",
    [
        {"spec.template.spec.expireAfter": "3000000h"},
        {"spec.template.spec.terminationGracePeriod": "2562048h"},
        {"spec.disruption": {"consolidateAfter": "9999999999s"}},
    ],
)
def test_a_duration_beyond_gos_is_refused(fields: dict[str, object]) -> None:
    # The CRD's pattern admits any number of hours; Karpenter's Go cannot read past int64 nanoseconds.
    assert "longer than Go's largest, 2562047h47m16.854775807s" in nodepool_error(fields)


def test_the_longest_go_duration_is_read() -> None:
    pool = nodepool({"spec.template.spec.expireAfter": "2562047h"})
    assert pool.template.expire_after == 2562047 * 3600.0


def test_an_empty_budget_list_stays_empty() -> None:
    assert nodepool({"spec.disruption": {"budgets": []}}).disruption.budgets == ()


@pytest.mark.parametrize(
    "labels",
    [
        {"team": "a", "example.com/tier": "front"},
        {"topology.kubernetes.io/zone": "zone-a", "karpenter.sh/capacity-type": "spot"},
        {"node.kubernetes.io/pool": "x", "node-restriction.kubernetes.io/team": "a"},
        {"kubernetes.io/arch": "arm64", "karpenter.k8s.aws/instance-family": "m7g"},
    ],
)
def test_custom_and_well_known_labels_are_allowed_in_the_template(labels: dict[str, str]) -> None:
    assert nodepool({"spec.template.metadata": {"labels": labels}}).template.labels == labels


# --- validation errors -------------------------------------------------------------

TEMPLATE_SPEC = "spec.template.spec"
TEMPLATE_LABELS = "spec.template.metadata.labels"
POLICY_MESSAGE = "must be one of WhenEmpty, WhenEmptyOrUnderutilized, Balanced,"
BUDGET_NODES_MESSAGE = "must be a non-negative integer or a percentage up to 100%, got"
NODE_CLASS_REF = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        pytest.param(
            {"spec.disruption": {"consolidationPolicy": "WhenUnderutilized"}},
            f"spec.disruption.consolidationPolicy: {POLICY_MESSAGE} got 'WhenUnderutilized'",
            id="v1beta1 policy in a v1 manifest",
        ),
        pytest.param(
            {"spec.disruption": {"consolidationPolicy": "Always"}},
            f"spec.disruption.consolidationPolicy: {POLICY_MESSAGE} got 'Always'",
            id="unknown policy",
        ),
        pytest.param(
            {"spec.disruption": {"consolidateAfter": "-1s"}},
            "spec.disruption.consolidateAfter: must not be negative",
            id="negative consolidateAfter",
        ),
        pytest.param(
            {"spec.disruption": {"consolidateAfter": "soon"}},
            "spec.disruption.consolidateAfter: invalid duration 'soon'",
            id="bad consolidateAfter",
        ),
        pytest.param(
            {"spec.disruption": {"budgets": [{"nodes": "110%"}]}},
            f"spec.disruption.budgets[0].nodes: {BUDGET_NODES_MESSAGE} '110%'",
            id="budget over 100%",
        ),
        pytest.param(
            {"spec.disruption": {"budgets": [{"nodes": "1"}, {"nodes": "abc"}]}},
            f"spec.disruption.budgets[1].nodes: {BUDGET_NODES_MESSAGE} 'abc'",
            id="budget not a number",
        ),
        pytest.param(
            {"spec.disruption": {"budgets": [{"nodes": "-1"}]}},
            f"spec.disruption.budgets[0].nodes: {BUDGET_NODES_MESSAGE} '-1'",
            id="negative budget",
        ),
        pytest.param(
            {"spec.disruption": {"budgets": [{"nodes": "5.5%"}]}},
            f"spec.disruption.budgets[0].nodes: {BUDGET_NODES_MESSAGE} '5.5%'",
            id="fractional budget",
        ),
        pytest.param(
            {"spec.disruption": {"budgets": [{"nodes": ""}]}},
            f"spec.disruption.budgets[0].nodes: {BUDGET_NODES_MESSAGE} ''",
            id="empty budget",
        ),
        pytest.param(
            {"spec.disruption": {"budgets": [{"nodes": "\u0663"}]}},
            f"spec.disruption.budgets[0].nodes: {BUDGET_NODES_MESSAGE} '\u0663'",
            id="non-ASCII digit budget",
        ),
        pytest.param(
            {"spec.disruption": {"budgets": [{"nodes": "1"}, {"nodes": "10%", "schedule": "0 9 * * *"}]}},
            "spec.disruption.budgets[1].duration: schedule and duration go together",
            id="schedule without duration",
        ),
        pytest.param(
            {"spec.disruption": {"budgets": [{"nodes": "0", "duration": "8h"}]}},
            "spec.disruption.budgets[0].schedule: schedule and duration go together",
            id="duration without schedule",
        ),
        pytest.param(
            {"spec.disruption": {"budgets": [{"nodes": "0", "schedule": "0 9 * *", "duration": "8h"}]}},
            "spec.disruption.budgets[0].schedule: expected a cron expression of five fields, got '0 9 * *'",
            id="short cron schedule",
        ),
        pytest.param(
            {"spec.disruption": {"budgets": [{"nodes": "0", "schedule": "@daily", "duration": "Never"}]}},
            "spec.disruption.budgets[0].duration: invalid duration 'Never'",
            id="budget duration Never",
        ),
        pytest.param(
            {"spec.disruption": {"budgets": [{"nodes": "1", "reasons": ["Drifted", "Expired"]}]}},
            "spec.disruption.budgets[0].reasons: unknown reason 'Expired'; "
            "use Empty, Underutilized, Drifted, Unhealthy",
            id="unknown reason",
        ),
        pytest.param({"spec.weight": 0}, "spec.weight: must be between 1 and 100, got 0", id="weight 0"),
        pytest.param(
            {"spec.weight": 101}, "spec.weight: must be between 1 and 100, got 101", id="weight 101"
        ),
        pytest.param(
            {"spec.weight": "10"}, "spec.weight: expected an integer, got string", id="weight string"
        ),
        pytest.param(
            {"spec.limits": {"cpu": "-1"}},
            'spec.limits.cpu: quantity "-1" must not be negative',
            id="negative limit",
        ),
        pytest.param(
            {"spec.limits": {"cpu": "10", "memory": "-1Gi"}},
            'spec.limits.memory: quantity "-1Gi" must not be negative',
            id="negative memory limit",
        ),
        pytest.param(
            {"spec.template.metadata": {"labels": {"karpenter.sh/nodepool": "other"}}},
            f"{TEMPLATE_LABELS}.karpenter.sh/nodepool: label 'karpenter.sh/nodepool' is restricted",
            id="nodepool label",
        ),
        pytest.param(
            {"spec.template.metadata": {"labels": {"kubernetes.io/hostname": "n1"}}},
            f"{TEMPLATE_LABELS}.kubernetes.io/hostname: label 'kubernetes.io/hostname' is restricted",
            id="hostname label",
        ),
        pytest.param(
            {"spec.template.metadata": {"labels": {"karpenter.sh/custom": "x"}}},
            f"{TEMPLATE_LABELS}.karpenter.sh/custom: label 'karpenter.sh/custom' is restricted",
            id="karpenter.sh domain label",
        ),
        pytest.param(
            {"spec.template.metadata": {"labels": {"bad key!": "x"}}},
            f"{TEMPLATE_LABELS}.bad key!: label key 'bad key!': the name part must consist of alphanumeric "
            "characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            id="label key not a qualified name",
        ),
        pytest.param(
            {"spec.template.metadata": {"labels": {"example.com/" + "n" * 64: "x"}}},
            f"{TEMPLATE_LABELS}.example.com/{'n' * 64}: label key 'example.com/{'n' * 64}': "
            "the name part must be no more than 63 characters",
            id="label key name part of 64 characters",
        ),
        pytest.param(
            {"spec.template.metadata": {"labels": {"Example.COM/team": "x"}}},
            f"{TEMPLATE_LABELS}.Example.COM/team: label key 'Example.COM/team': prefix part 'Example.COM': "
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
            "and must start and end with an alphanumeric character",
            id="label key prefix not a DNS subdomain",
        ),
        pytest.param(
            {"spec.template.metadata": {"annotations": {"team/": "x"}}},
            "spec.template.metadata.annotations.team/: annotation key 'team/': "
            "the name part must be non-empty",
            id="annotation key without a name",
        ),
        pytest.param(
            {"spec.template.metadata": {"labels": {"team.kubernetes.io/name": "x"}}},
            f"{TEMPLATE_LABELS}.team.kubernetes.io/name: label 'team.kubernetes.io/name' is restricted",
            id="kubernetes.io subdomain label",
        ),
        pytest.param(
            {
                "spec.template.spec.requirements": [
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
                    {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["a"]},
                ]
            },
            f"{TEMPLATE_SPEC}.requirements[1].key: label 'karpenter.sh/nodepool' is restricted",
            id="nodepool requirement",
        ),
        pytest.param(
            {"spec.template.spec.requirements": [{"key": "kubernetes.io/hostname", "operator": "Exists"}]},
            f"{TEMPLATE_SPEC}.requirements[0].key: label 'kubernetes.io/hostname' is restricted",
            id="hostname requirement",
        ),
        pytest.param(
            {"spec.template.spec.requirements": [{"key": "team", "operator": "In", "values": []}]},
            f'{TEMPLATE_SPEC}.requirements[0]: requirement "team" with operator In '
            "must have at least one value",
            id="requirement without values",
        ),
        pytest.param(
            {"spec.template.spec.nodeClassRef": DELETE},
            f"{TEMPLATE_SPEC}.nodeClassRef: required",
            id="missing nodeClassRef",
        ),
        pytest.param(
            {"spec.template.spec.nodeClassRef": {"kind": "EC2NodeClass", "name": "default"}},
            f"{TEMPLATE_SPEC}.nodeClassRef.group: required",
            id="nodeClassRef without group",
        ),
        pytest.param({"spec.template": DELETE}, "spec.template: required", id="missing template"),
        pytest.param(
            {"spec.template.spec.taints": [{"key": "gpu", "effect": "Sometimes"}]},
            f"{TEMPLATE_SPEC}.taints[0].effect: must be one of NoSchedule, PreferNoSchedule, NoExecute, "
            "got 'Sometimes'",
            id="bad taint effect",
        ),
        pytest.param(
            {"spec.template.spec.expireAfter": "-1h"},
            f"{TEMPLATE_SPEC}.expireAfter: must not be negative",
            id="negative expireAfter",
        ),
        pytest.param(
            {"spec.template.spec.terminationGracePeriod": "Never"},
            f"{TEMPLATE_SPEC}.terminationGracePeriod: invalid duration 'Never'",
            id="terminationGracePeriod Never",
        ),
        pytest.param({"metadata": {}}, "metadata.name: required", id="no name"),
        # Karpenter's CRD rules, refused offline too (tests/integration/test_crds.py sends the same
        # objects to the API server).
        pytest.param(
            {"spec.template.metadata": {"labels": {"team": "a" * 64}}},
            f"{TEMPLATE_LABELS}.team: label value '{'a' * 64}' is longer than 63 characters",
            id="label value too long",
        ),
        pytest.param(
            {"spec.template.metadata": {"labels": {"team": "a/b"}}},
            f"{TEMPLATE_LABELS}.team: label value 'a/b' must be alphanumerics with '-', '_' or '.' inside",
            id="label value with a slash",
        ),
        pytest.param(
            {"spec.template.spec.requirements": [{"key": "team", "operator": "In", "values": ["a b"]}]},
            f"{TEMPLATE_SPEC}.requirements[0].values: label value 'a b' must be alphanumerics with '-', '_' "
            "or '.' inside",
            id="requirement value with a space",
        ),
        pytest.param(
            {
                "spec.template.spec.requirements": [
                    {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Lt", "values": ["-1"]}
                ]
            },
            f"{TEMPLATE_SPEC}.requirements[0].values: requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' "
            "must have a single positive integer value",
            id="negative Lt",
        ),
        pytest.param(
            {
                "spec.disruption": {
                    "consolidateAfter": "0s",
                    "budgets": [{"nodes": "0", "schedule": "@daily", "duration": "30s"}],
                }
            },
            "spec.disruption.budgets[0].duration: must be in minutes and hours (10m, 8h, 1h30m), got '30s'",
            id="budget duration in seconds",
        ),
    ],
)
def test_invalid_nodepool_is_rejected_at_the_exact_field(fields: dict[str, object], error: str) -> None:
    assert nodepool_error(fields) == error


# --- budgets -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nodes", "total", "allowed"),
    [
        ("10%", 10, 1),
        ("10%", 11, 2),
        ("10%", 1, 1),
        ("10%", 0, 0),
        ("33%", 3, 1),
        ("50%", 5, 3),
        ("0%", 10, 0),
        ("100%", 7, 7),
        ("5", 3, 5),
        ("0", 100, 0),
    ],
)
def test_budget_allowed_rounds_percentages_up(nodes: str, total: int, allowed: int) -> None:
    assert Budget(nodes=nodes).allowed(total) == allowed


def test_budget_nodes_written_as_a_yaml_integer_read_as_a_count() -> None:
    (budget,) = nodepool({"spec.disruption": {"budgets": [{"nodes": 3}]}}).disruption.budgets
    assert budget.nodes == "3"
    assert budget.allowed(100) == 3


def test_budget_without_nodes_defaults_to_ten_percent() -> None:
    (budget,) = nodepool({"spec.disruption": {"budgets": [{"reasons": ["Empty"]}]}}).disruption.budgets
    assert budget == Budget(nodes="10%", reasons=("Empty",))


# --- v1beta1 conversion ----------------------------------------------------------


def test_v1beta1_nodepool_is_converted_to_v1() -> None:
    pool = nodepool(text=V1BETA1, api_version=API_VERSION_V1BETA1)
    assert pool.converted_from == API_VERSION_V1BETA1
    assert pool.disruption.consolidation_policy == WHEN_EMPTY_OR_UNDERUTILIZED
    assert pool.disruption.consolidate_after == 0.0
    assert pool.template.expire_after == 168 * HOUR
    assert pool.template.node_class_ref == NodeClassRef("karpenter.k8s.aws", "EC2NodeClass", "default")


def test_v1beta1_conversion_drops_kubelet_and_leaves_the_input_untouched() -> None:
    document = manifest(V1BETA1)
    original = copy.deepcopy(document)
    converted = convert_v1beta1(FieldReader(document)).mapping
    assert document == original
    assert converted["spec"] == {
        "disruption": {"consolidationPolicy": WHEN_EMPTY_OR_UNDERUTILIZED, "consolidateAfter": "0s"},
        "template": {
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "expireAfter": "168h",
            }
        },
    }
    assert converted["metadata"] == {"name": "old"}


@pytest.mark.parametrize(
    ("disruption", "policy", "consolidate_after", "expire_after"),
    [
        (
            {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s"},
            WHEN_EMPTY,
            30.0,
            DEFAULT_EXPIRE_AFTER,
        ),
        (
            {"consolidationPolicy": "WhenUnderutilized", "expireAfter": "Never"},
            WHEN_EMPTY_OR_UNDERUTILIZED,
            0.0,
            None,
        ),
        ({"expireAfter": "24h"}, WHEN_EMPTY_OR_UNDERUTILIZED, 0.0, 24 * HOUR),
        ({}, WHEN_EMPTY_OR_UNDERUTILIZED, 0.0, DEFAULT_EXPIRE_AFTER),
    ],
)
def test_v1beta1_disruption_maps_to_v1_policy_and_template_expire_after(
    disruption: dict[str, str], policy: str, consolidate_after: float, expire_after: float | None
) -> None:
    pool = nodepool({"spec.disruption": disruption}, text=V1BETA1, api_version=API_VERSION_V1BETA1)
    assert pool.disruption.consolidation_policy == policy
    assert pool.disruption.consolidate_after == consolidate_after
    assert pool.template.expire_after == expire_after


@pytest.mark.parametrize(
    ("reference", "converted"),
    [
        (
            {"apiVersion": "karpenter.k8s.aws/v1beta1", "kind": "EC2NodeClass", "name": "a"},
            NodeClassRef("karpenter.k8s.aws", "EC2NodeClass", "a"),
        ),
        (
            {"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass", "name": "a"},
            NodeClassRef("karpenter.kwok.sh", "KWOKNodeClass", "a"),
        ),
        # v1beta1 made apiVersion and kind optional; Karpenter fills in the provider's node class.
        ({"name": "a"}, NodeClassRef("karpenter.k8s.aws", "EC2NodeClass", "a")),
        ({"apiVersion": "", "kind": "", "name": "a"}, NodeClassRef("karpenter.k8s.aws", "EC2NodeClass", "a")),
        ({"kind": "EC2NodeClass", "name": "a"}, NodeClassRef("karpenter.k8s.aws", "EC2NodeClass", "a")),
        (
            {"group": "karpenter.k8s.aws", "apiVersion": "ignored/v1", "kind": "EC2NodeClass", "name": "a"},
            NodeClassRef("karpenter.k8s.aws", "EC2NodeClass", "a"),
        ),
    ],
)
def test_v1beta1_node_class_ref_api_version_becomes_group(
    reference: dict[str, str], converted: NodeClassRef
) -> None:
    pool = nodepool(
        {"spec.template.spec.nodeClassRef": reference}, text=V1BETA1, api_version=API_VERSION_V1BETA1
    )
    assert pool.template.node_class_ref == converted


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        pytest.param(
            {"spec.disruption": {"expireAfter": "forever"}},
            "spec.template.spec.expireAfter: invalid duration 'forever'",
            id="expireAfter reported at its v1 path",
        ),
        pytest.param(
            {
                "spec.template.spec.nodeClassRef": {
                    "kind": "KWOKNodeClass",
                    "apiVersion": "karpenter.kwok.sh/v1alpha1",
                }
            },
            "spec.template.spec.nodeClassRef.name: required",
            id="nodeClassRef without name",
        ),
        pytest.param(
            {"spec.template.spec.nodeClassRef": DELETE},
            "spec.template.spec.nodeClassRef: required",
            id="missing nodeClassRef",
        ),
        pytest.param(
            {"spec.template": "default"},
            "spec.template: expected an object, got string",
            id="template of the wrong type",
        ),
        pytest.param(
            {"spec.disruption": ["WhenEmpty"]},
            "spec.disruption: expected an object, got list",
            id="disruption of the wrong type",
        ),
        pytest.param(
            {"spec.template.spec.nodeClassRef": "default"},
            "spec.template.spec.nodeClassRef: expected an object, got string",
            id="nodeClassRef of the wrong type",
        ),
    ],
)
def test_v1beta1_errors_are_reported_at_the_v1_field_path(fields: dict[str, object], error: str) -> None:
    assert nodepool_error(fields, text=V1BETA1, api_version=API_VERSION_V1BETA1) == error


def test_v1beta1_spec_of_the_wrong_type_is_reported_as_such() -> None:
    assert (
        nodepool_error({"spec": ["template"]}, text=V1BETA1, api_version=API_VERSION_V1BETA1)
        == "spec: expected an object, got list"
    )


# --- template hash -------------------------------------------------------------------

TAINTS = [
    {"key": "gpu", "value": "true", "effect": "NoSchedule"},
    {"key": "dedicated", "value": "ml", "effect": "NoExecute"},
]
LABELS = {"team": "a", "tier": "batch"}


def hashed(fields: Mapping[str, object] | None = None) -> str:
    base: dict[str, object] = {
        "spec.template.metadata": {"labels": LABELS, "annotations": {"owner": "me"}},
        "spec.template.spec.taints": TAINTS,
    }
    return nodepool({**base, **(fields or {})}).template_hash()


def test_template_hash_is_a_decimal_string_stable_across_parses() -> None:
    assert hashed() == hashed()
    assert hashed().isdigit()


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param(
            {
                "spec.template.metadata": {
                    "labels": dict(reversed(LABELS.items())),
                    "annotations": {"owner": "me"},
                }
            },
            id="label order",
        ),
        pytest.param({"spec.template.spec.taints": list(reversed(TAINTS))}, id="taint order"),
        pytest.param(
            {
                "spec.template.spec.requirements": [
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}
                ]
            },
            id="requirements",
        ),
        pytest.param(
            {"spec.disruption": {"consolidationPolicy": "WhenEmpty", "budgets": [{"nodes": "1"}]}},
            id="disruption",
        ),
        pytest.param({"spec.limits": {"cpu": "10"}, "spec.weight": 50}, id="limits and weight"),
    ],
)
def test_template_hash_ignores_what_does_not_drift_nodes(fields: dict[str, object]) -> None:
    assert hashed(fields) == hashed()


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"spec.template.spec.taints": TAINTS[:1]}, id="taint removed"),
        pytest.param(
            {"spec.template.spec.taints": [{**TAINTS[0], "value": "false"}, TAINTS[1]]}, id="taint value"
        ),
        pytest.param(
            {"spec.template.spec.taints": [{**TAINTS[0], "effect": "NoExecute"}, TAINTS[1]]},
            id="taint effect",
        ),
        pytest.param(
            {"spec.template.spec.startupTaints": [{"key": "agent", "effect": "NoSchedule"}]},
            id="startup taint",
        ),
        pytest.param(
            {"spec.template.metadata": {"labels": {**LABELS, "team": "b"}, "annotations": {"owner": "me"}}},
            id="label value",
        ),
        pytest.param(
            {"spec.template.metadata": {"labels": {"team": "a"}, "annotations": {"owner": "me"}}},
            id="label removed",
        ),
        pytest.param(
            {"spec.template.metadata": {"labels": LABELS, "annotations": {"owner": "you"}}}, id="annotation"
        ),
        pytest.param(
            {"spec.template.spec.nodeClassRef": {**NODE_CLASS_REF, "name": "other"}}, id="node class"
        ),
        pytest.param({"spec.template.spec.expireAfter": "24h"}, id="expireAfter"),
        pytest.param({"spec.template.spec.terminationGracePeriod": "1h"}, id="terminationGracePeriod"),
    ],
)
def test_template_hash_changes_with_what_drifts_nodes(fields: dict[str, object]) -> None:
    assert hashed(fields) != hashed()
