"""Objects that Karpenter's CRD rules refuse, one per rule, and good objects of each shape.

Shared by ``tests/integration/test_crds.py``, which sends each to a real API
server, and ``tests/api/test_crd_cases_offline.py``, which reads each with
karpy's own file loader: both must refuse the bad ones (the loader but for the
gaps docs/crds.md lists) and accept the good ones. Each case is a small change
to a valid object.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

from karpy.api.nodeclass import (
    AMI_FAMILY_CUSTOM,
    BOTTLEROCKET_PODS_PER_CORE_MESSAGE,
    CONTEXT_UNSUPPORTED_MESSAGE,
    ONE_CLUSTER_DNS_MESSAGE,
    SSM_PARAMETER_UNSUPPORTED_MESSAGE,
    USER_DATA_ONLY_KUBELET_FIELDS,
    ami_family_alias_message,
    custom_kubelet_message,
)
from karpy.api.taints import TIME_ADDED_UNSUPPORTED_MESSAGE

RULE_OBJECT = "it-crds-rule"

POOL: dict[str, Any] = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodePool",
    "metadata": {"name": RULE_OBJECT},
    "spec": {
        "template": {
            "spec": {
                "requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            }
        }
    },
}
NODE_CLASS: dict[str, Any] = {
    "apiVersion": "karpenter.k8s.aws/v1",
    "kind": "EC2NodeClass",
    "metadata": {"name": RULE_OBJECT},
    "spec": {
        "role": "KarpenterNodeRole-it",
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "it"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "it"}}],
    },
}
CLAIM: dict[str, Any] = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodeClaim",
    "metadata": {"name": RULE_OBJECT},
    "spec": {
        "requirements": [
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c5.large"]}
        ],
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
    },
}


def merged(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``patch`` merged in: mappings merge, anything else (lists too) replaces."""
    result = copy.deepcopy(base)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merged(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def pool(spec: dict[str, Any]) -> dict[str, Any]:
    return merged(POOL, {"spec": spec})


def claim_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """A NodePool whose template spec has ``spec`` merged in."""
    return pool({"template": {"spec": spec}})


def requirement(key: str, operator: str, *values: str, **extra: Any) -> dict[str, Any]:
    """A NodePool with the one requirement."""
    item: dict[str, Any] = {"key": key, "operator": operator, **extra}
    if values:
        item["values"] = list(values)
    return claim_spec({"requirements": [item]})


def template_labels(keys: dict[str, str]) -> dict[str, Any]:
    return pool({"template": {"metadata": {"labels": keys}}})


def node_class(spec: dict[str, Any]) -> dict[str, Any]:
    return merged(NODE_CLASS, {"spec": spec})


# One setting of each kubelet field that only karpy's user data carries.
CUSTOM_REFUSED_KUBELET: dict[str, dict[str, Any]] = {
    "clusterDNS": {"clusterDNS": ["10.0.0.10"]},
    "evictionSoft": {
        "evictionSoft": {"memory.available": "5%"},
        "evictionSoftGracePeriod": {"memory.available": "1m"},
    },
    "evictionSoftGracePeriod": {
        "evictionSoft": {"memory.available": "5%"},
        "evictionSoftGracePeriod": {"memory.available": "1m"},
    },
    "evictionMaxPodGracePeriod": {"evictionMaxPodGracePeriod": 30},
    "imageGCHighThresholdPercent": {"imageGCHighThresholdPercent": 90},
    "imageGCLowThresholdPercent": {"imageGCLowThresholdPercent": 10},
    "cpuCFSQuota": {"cpuCFSQuota": False},
}


# Two cluster DNS addresses: AL2023's NodeConfig takes a list, AL2's and Bottlerocket's one address.
DNS_PAIR = ["10.100.0.10", "10.100.0.11"]

# A taint as kubectl shows a Node's, with the time it was put on.
TIMED_TAINT = {"key": "example.com/a", "effect": "NoExecute", "timeAdded": "2024-01-01T00:00:00Z"}


def kubelet(settings: dict[str, Any]) -> dict[str, Any]:
    return node_class({"kubelet": settings})


# A CapacityBuffer (autoscaling.x-k8s.io, served with the CapacityBuffer feature gate's CRD).
BUFFER: dict[str, Any] = {
    "apiVersion": "autoscaling.x-k8s.io/v1beta1",
    "kind": "CapacityBuffer",
    "metadata": {"name": RULE_OBJECT, "namespace": "default"},
    "spec": {"podTemplateRef": {"name": "shape"}, "replicas": 2},
}


def buffer_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """A CapacityBuffer of ``spec`` alone (not merged: the rules are about fields left out)."""
    return {**BUFFER, "spec": spec}


# A NodeOverlay (karpenter.sh/v1alpha1, served with the NodeOverlay feature gate's CRD).
OVERLAY: dict[str, Any] = {
    "apiVersion": "karpenter.sh/v1alpha1",
    "kind": "NodeOverlay",
    "metadata": {"name": RULE_OBJECT},
    "spec": {
        "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
        "priceAdjustment": "-10%",
        "weight": 10,
    },
}


def overlay_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """A NodeOverlay of ``spec`` alone (not merged: the rules are about fields left out)."""
    return {**OVERLAY, "spec": spec}


def overlay_requirement(key: str, operator: str, values: list[str] | None = None) -> dict[str, Any]:
    written: dict[str, Any] = {"key": key, "operator": operator}
    if values is not None:
        written["values"] = values
    return overlay_spec({"requirements": [written]})


SELECTOR_TAGS = {"karpenter.sh/discovery": "it"}
BAD_OBJECTS: list[tuple[str, dict[str, Any], str]] = [
    # Requirement keys and template labels outside the restricted label domains.
    (
        "requirement-kubernetes-io",
        requirement("kubernetes.io/team", "Exists"),
        'label domain "kubernetes.io" is restricted',
    ),
    (
        "requirement-k8s-io",
        requirement("example.k8s.io/team", "Exists"),
        'label domain "k8s.io" is restricted',
    ),
    (
        "requirement-karpenter-sh",
        requirement("karpenter.sh/team", "Exists"),
        'label domain "karpenter.sh" is restricted',
    ),
    (
        "requirement-karpenter-k8s-aws",
        requirement("karpenter.k8s.aws/team", "Exists"),
        'label domain "karpenter.k8s.aws" is restricted',
    ),
    (
        "requirement-nodepool",
        requirement("karpenter.sh/nodepool", "In", "other"),
        'label "karpenter.sh/nodepool" is restricted',
    ),
    (
        "label-kubernetes-io",
        template_labels({"kubernetes.io/team": "a"}),
        'label domain "kubernetes.io" is restricted',
    ),
    ("label-k8s-io", template_labels({"example.k8s.io/team": "a"}), 'label domain "k8s.io" is restricted'),
    (
        "label-karpenter-sh",
        template_labels({"karpenter.sh/team": "a"}),
        'label domain "karpenter.sh" is restricted',
    ),
    (
        "label-karpenter-k8s-aws",
        template_labels({"karpenter.k8s.aws/team": "a"}),
        'label domain "karpenter.k8s.aws" is restricted',
    ),
    (
        "label-nodepool",
        template_labels({"karpenter.sh/nodepool": "other"}),
        'label "karpenter.sh/nodepool" is restricted',
    ),
    (
        "label-hostname",
        template_labels({"kubernetes.io/hostname": "node-a"}),
        'label "kubernetes.io/hostname" is restricted',
    ),
    ("label-value-too-long", template_labels({"team": "a" * 64}), "may not be more than 63"),
    # Operators and their values.
    ("unknown-operator", requirement("team", "Equals", "a"), 'Unsupported value: "Equals"'),
    (
        "in-without-values",
        requirement("team", "In"),
        "requirements with operator 'In' must have a value defined",
    ),
    (
        "gt-with-two-values",
        requirement("karpenter.k8s.aws/instance-cpu", "Gt", "2", "4"),
        "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
    ),
    (
        "lt-negative",
        requirement("karpenter.k8s.aws/instance-cpu", "Lt", "-1"),
        "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
    ),
    (
        "min-values-above-values",
        requirement("team", "In", "a", "b", minValues=3),
        "requirements with 'minValues' must have at least that many values specified in the 'values' field",
    ),
    ("min-values-zero", requirement("team", "Exists", minValues=0), "greater than or equal to 1"),
    ("min-values-51", requirement("team", "Exists", minValues=51), "less than or equal to 50"),
    # Budgets, consolidation and durations.
    (
        "budget-110-percent",
        pool({"disruption": {"consolidateAfter": "0s", "budgets": [{"nodes": "110%"}]}}),
        "should match",
    ),
    (
        "budget-negative",
        pool({"disruption": {"consolidateAfter": "0s", "budgets": [{"nodes": "-1"}]}}),
        "should match",
    ),
    (
        "budget-words",
        pool({"disruption": {"consolidateAfter": "0s", "budgets": [{"nodes": "ten"}]}}),
        "should match",
    ),
    (
        "duration-without-schedule",
        pool({"disruption": {"consolidateAfter": "0s", "budgets": [{"nodes": "0", "duration": "10m"}]}}),
        "'schedule' must be set with 'duration'",
    ),
    (
        "budget-duration-in-seconds",
        pool(
            {
                "disruption": {
                    "consolidateAfter": "0s",
                    "budgets": [{"nodes": "0", "schedule": "@daily", "duration": "30s"}],
                }
            }
        ),
        "budgets[0].duration",
    ),
    (
        "budget-schedule-not-cron",
        pool(
            {
                "disruption": {
                    "consolidateAfter": "0s",
                    "budgets": [{"nodes": "0", "schedule": "daily", "duration": "1h"}],
                }
            }
        ),
        "budgets[0].schedule",
    ),
    (
        "budget-unknown-reason",
        pool({"disruption": {"consolidateAfter": "0s", "budgets": [{"nodes": "1", "reasons": ["Expired"]}]}}),
        'Unsupported value: "Expired"',
    ),
    ("consolidate-after-days", pool({"disruption": {"consolidateAfter": "1d"}}), "consolidateAfter"),
    ("consolidate-after-bare-number", pool({"disruption": {"consolidateAfter": "30"}}), "consolidateAfter"),
    (
        "consolidate-after-missing",
        pool({"disruption": {"consolidationPolicy": "WhenEmpty"}}),
        "Required value",
    ),
    ("expire-after-forever", claim_spec({"expireAfter": "forever"}), "expireAfter"),
    ("termination-grace-never", claim_spec({"terminationGracePeriod": "Never"}), "terminationGracePeriod"),
    ("weight-zero", pool({"weight": 0}), "greater than or equal to 1"),
    # Static NodePools (spec.replicas).
    ("replicas-negative", pool({"replicas": -1}), "greater than or equal to 0"),
    (
        "static-cpu-limit",
        pool({"replicas": 2, "limits": {"nodes": "5", "cpu": "10"}}),
        "only 'limits.nodes' is supported on static NodePools",
    ),
    ("static-weight", pool({"replicas": 2, "weight": 10}), "'weight' is not supported on static NodePools"),
    (
        "taint-effect",
        claim_spec({"taints": [{"key": "team", "effect": "Sometimes"}]}),
        'Unsupported value: "Sometimes"',
    ),
    # The node class reference.
    (
        "node-class-group-empty",
        claim_spec({"nodeClassRef": {"group": ""}}),
        "group may not be empty",
    ),
    ("node-class-kind-empty", claim_spec({"nodeClassRef": {"kind": ""}}), "kind may not be empty"),
    ("node-class-name-empty", claim_spec({"nodeClassRef": {"name": ""}}), "name may not be empty"),
    # NodeClaims: requests are not negative either.
    (
        "nodeclaim-negative-request",
        merged(CLAIM, {"spec": {"resources": {"requests": {"cpu": "-1"}}}}),
        "spec.resources.requests.cpu",
    ),
    (
        "nodeclaim-in-without-values",
        merged(CLAIM, {"spec": {"requirements": [{"key": "team", "operator": "In"}]}}),
        "requirements with operator 'In' must have a value defined",
    ),
    # EC2NodeClass selector terms.
    ("subnets-empty", node_class({"subnetSelectorTerms": []}), "subnetSelectorTerms cannot be empty"),
    (
        "security-groups-empty",
        node_class({"securityGroupSelectorTerms": []}),
        "securityGroupSelectorTerms cannot be empty",
    ),
    ("amis-empty", node_class({"amiSelectorTerms": []}), "should have at least 1 items"),
    (
        "subnet-term-empty",
        node_class({"subnetSelectorTerms": [{}]}),
        "expected at least one, got none, ['tags', 'id']",
    ),
    (
        "subnet-id-and-tags",
        node_class({"subnetSelectorTerms": [{"id": "subnet-0abc", "tags": SELECTOR_TAGS}]}),
        "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector "
        "term",
    ),
    (
        "subnet-id-malformed",
        node_class({"subnetSelectorTerms": [{"id": "sn-0abc"}]}),
        "subnetSelectorTerms[0].id",
    ),
    (
        "security-group-term-empty",
        node_class({"securityGroupSelectorTerms": [{}]}),
        "expected at least one, got none, ['tags', 'id', 'name']",
    ),
    (
        "security-group-id-and-name",
        node_class({"securityGroupSelectorTerms": [{"id": "sg-0abc", "name": "web"}]}),
        "'id' is mutually exclusive, cannot be set with a combination of other fields in a security group "
        "selector term",
    ),
    (
        "security-group-name-and-tags",
        node_class({"securityGroupSelectorTerms": [{"name": "web", "tags": SELECTOR_TAGS}]}),
        "'name' is mutually exclusive, cannot be set with a combination of other fields in a security group "
        "selector term",
    ),
    (
        "selector-tag-value-empty",
        node_class({"subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": ""}}]}),
        "empty tag keys or values aren't supported",
    ),
    (
        "ami-term-owner-only",
        node_class({"amiFamily": "AL2023", "amiSelectorTerms": [{"owner": "self"}]}),
        "expected at least one, got none, ['tags', 'id', 'name', 'alias']",
    ),
    (
        "ami-id-and-owner",
        node_class({"amiFamily": "AL2023", "amiSelectorTerms": [{"id": "ami-0abc", "owner": "self"}]}),
        "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
    ),
    (
        "ami-alias-and-tags",
        node_class({"amiSelectorTerms": [{"alias": "al2023@latest", "tags": SELECTOR_TAGS}]}),
        "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
    ),
    (
        "ami-alias-and-another-term",
        node_class({"amiSelectorTerms": [{"alias": "al2023@latest"}, {"tags": SELECTOR_TAGS}]}),
        "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms",
    ),
    (
        "ami-alias-without-version",
        node_class({"amiSelectorTerms": [{"alias": "al2023"}]}),
        "'alias' is improperly formatted, must match the format 'family@version'",
    ),
    (
        "ami-alias-unknown-family",
        node_class({"amiSelectorTerms": [{"alias": "ubuntu@latest"}]}),
        "family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', "
        "'windows2019', 'windows2022'",
    ),
    (
        "ami-alias-windows-pinned",
        node_class({"amiSelectorTerms": [{"alias": "windows2022@v20240101"}]}),
        "windows families may only specify version 'latest'",
    ),
    (
        "ami-alias-too-long",
        node_class({"amiSelectorTerms": [{"alias": "bottlerocket@v1.20.0-aaaaaaaaaaaaa"}]}),
        "may not be more than 30",
    ),
    (
        "ami-family-other-than-alias",
        node_class({"amiFamily": "AL2", "amiSelectorTerms": [{"alias": "al2023@latest"}]}),
        "if set, amiFamily must be 'AL2023' or 'Custom' when using an AL2023 alias",
    ),
    (
        "ami-family-bottlerocket-alias",
        node_class({"amiFamily": "AL2023", "amiSelectorTerms": [{"alias": "bottlerocket@latest"}]}),
        "if set, amiFamily must be 'Bottlerocket' or 'Custom' when using a Bottlerocket alias",
    ),
    (
        "ami-family-missing",
        node_class({"amiSelectorTerms": [{"tags": SELECTOR_TAGS}]}),
        "must specify amiFamily if amiSelectorTerms does not contain an alias",
    ),
    ("ami-family-ubuntu", node_class({"amiFamily": "Ubuntu"}), 'Unsupported value: "Ubuntu"'),
    # Role, instance profile and tags.
    (
        "role-and-instance-profile",
        node_class({"instanceProfile": "KarpenterNodeInstanceProfile-it"}),
        "must specify exactly one of ['role', 'instanceProfile']",
    ),
    ("role-empty", node_class({"role": ""}), "role cannot be empty"),
    (
        "tag-cluster",
        node_class({"tags": {"kubernetes.io/cluster/it": "owned"}}),
        "tag contains a restricted tag matching kubernetes.io/cluster/",
    ),
    (
        "tag-eks-cluster-name",
        node_class({"tags": {"eks:eks-cluster-name": "it"}}),
        "tag contains a restricted tag matching eks:eks-cluster-name",
    ),
    (
        "tag-nodepool",
        node_class({"tags": {"karpenter.sh/nodepool": "default"}}),
        "tag contains a restricted tag matching karpenter.sh/nodepool",
    ),
    (
        "tag-nodeclaim",
        node_class({"tags": {"karpenter.sh/nodeclaim": "default-abcde"}}),
        "tag contains a restricted tag matching karpenter.sh/nodeclaim",
    ),
    (
        "tag-ec2nodeclass",
        node_class({"tags": {"karpenter.k8s.aws/ec2nodeclass": "default"}}),
        "tag contains a restricted tag matching karpenter.k8s.aws/ec2nodeclass",
    ),
    # Kubelet settings.
    ("kubelet-max-pods-negative", kubelet({"maxPods": -1}), "greater than or equal to 0"),
    (
        "kubelet-eviction-signal",
        kubelet({"evictionHard": {"memory.free": "5%"}}),
        "valid keys for evictionHard are ['memory.available', 'nodefs.available', 'nodefs.inodesFree', "
        "'imagefs.available', 'imagefs.inodesFree', 'pid.available']",
    ),
    ("kubelet-eviction-threshold", kubelet({"evictionHard": {"memory.available": "lots"}}), "should match"),
    ("kubelet-eviction-over-100", kubelet({"evictionHard": {"memory.available": "101%"}}), "should match"),
    (
        "kubelet-reserved-resource",
        kubelet({"kubeReserved": {"nvidia.com/gpu": "1"}}),
        "valid keys for kubeReserved are ['cpu', 'memory', 'ephemeral-storage', 'pid']",
    ),
    (
        "kubelet-reserved-negative",
        kubelet({"systemReserved": {"cpu": "-100m"}}),
        "systemReserved value cannot be a negative resource quantity",
    ),
    (
        "kubelet-image-gc-order",
        kubelet({"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 60}),
        "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent",
    ),
    (
        "kubelet-soft-eviction-without-grace",
        kubelet({"evictionSoft": {"memory.available": "500Mi"}}),
        "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod",
    ),
    (
        "kubelet-grace-without-soft-eviction",
        kubelet({"evictionSoftGracePeriod": {"memory.available": "1m"}}),
        "evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft",
    ),
    # A Custom family's user data is the user's: kubelet settings only karpy's user data carries are refused.
    *(
        (
            f"custom-family-kubelet-{name}",
            node_class({"amiFamily": AMI_FAMILY_CUSTOM, "kubelet": CUSTOM_REFUSED_KUBELET[name]}),
            custom_kubelet_message(name),
        )
        for name in USER_DATA_ONLY_KUBELET_FIELDS
    ),
    (
        "gte-negative",
        requirement("karpenter.k8s.aws/instance-cpu", "Gte", "-1"),
        "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
    ),
    (
        "lte-two-values",
        requirement("karpenter.k8s.aws/instance-cpu", "Lte", "2", "4"),
        "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
    ),
    # Instance metadata and block devices.
    (
        "metadata-hop-limit",
        node_class({"metadataOptions": {"httpPutResponseHopLimit": 65}}),
        "less than or equal to 64",
    ),
    (
        "two-root-volumes",
        node_class(
            {
                "blockDeviceMappings": [
                    {"deviceName": "/dev/xvda", "rootVolume": True, "ebs": {"volumeSize": "20Gi"}},
                    {"deviceName": "/dev/xvdb", "rootVolume": True, "ebs": {"volumeSize": "20Gi"}},
                ]
            }
        ),
        "must have only one blockDeviceMappings with rootVolume",
    ),
    (
        "volume-without-size-or-snapshot",
        node_class({"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeType": "gp3"}}]}),
        "snapshotID or volumeSize must be defined",
    ),
    (
        "volume-size-unit",
        node_class({"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "100Mi"}}]}),
        "volumeSize",
    ),
    (
        "volume-type",
        node_class(
            {
                "blockDeviceMappings": [
                    {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "1Gi", "volumeType": "gp4"}}
                ]
            }
        ),
        'Unsupported value: "gp4"',
    ),
    (
        "volume-field-misspelt",
        node_class({"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSiz": "1Gi"}}]}),
        'unknown field "spec.blockDeviceMappings[0].ebs.volumeSiz"',
    ),
    # Every other CEL rule of the CRDs, one case each (cel_witnesses finds a case for each rule).
    *(
        (
            f"ami-family-{family.lower()}-with-another-alias",
            node_class({"amiFamily": "AL2023", "amiSelectorTerms": [{"alias": f"{alias}@latest"}]}),
            ami_family_alias_message(family),
        )
        for family, alias in (("AL2", "al2"), ("Windows2019", "windows2019"), ("Windows2022", "windows2022"))
    ),
    *(
        (
            f"{field}-tag-key-empty",
            node_class({field: [{"tags": {"": "it"}}]}),
            "empty tag keys or values aren't supported",
        )
        for field in ("securityGroupSelectorTerms", "capacityReservationSelectorTerms")
    ),
    (
        "ami-tag-value-empty",
        node_class({"amiFamily": "AL2023", "amiSelectorTerms": [{"tags": {"Name": ""}}]}),
        "empty tag keys or values aren't supported",
    ),
    (
        "instance-profile-empty",
        merged(
            {k: v for k, v in NODE_CLASS.items() if k != "spec"},
            {"spec": {**{k: v for k, v in NODE_CLASS["spec"].items() if k != "role"}, "instanceProfile": ""}},
        ),
        "instanceProfile cannot be empty",
    ),
    ("tag-key-empty", node_class({"tags": {"": "a"}}), "empty tag keys aren't supported"),
    (
        "kubelet-system-reserved-resource",
        kubelet({"systemReserved": {"nvidia.com/gpu": "1"}}),
        "valid keys for systemReserved are ['cpu', 'memory', 'ephemeral-storage', 'pid']",
    ),
    (
        "kubelet-kube-reserved-negative",
        kubelet({"kubeReserved": {"memory": "-1Gi"}}),
        "kubeReserved value cannot be a negative resource quantity",
    ),
    (
        "kubelet-soft-eviction-signal",
        kubelet({"evictionSoft": {"memory.free": "5%"}, "evictionSoftGracePeriod": {"memory.free": "1m"}}),
        "valid keys for evictionSoft are ['memory.available', 'nodefs.available', 'nodefs.inodesFree', "
        "'imagefs.available', 'imagefs.inodesFree', 'pid.available']",
    ),
    (
        "kubelet-soft-eviction-grace-signal",
        kubelet({"evictionSoft": {"memory.free": "5%"}, "evictionSoftGracePeriod": {"memory.free": "1m"}}),
        "valid keys for evictionSoftGracePeriod are ['memory.available', 'nodefs.available', "
        "'nodefs.inodesFree', 'imagefs.available', 'imagefs.inodesFree', 'pid.available']",
    ),
    (
        "volume-initialization-without-snapshot",
        node_class(
            {
                "blockDeviceMappings": [
                    {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "1Gi", "volumeInitializationRate": 100}}
                ]
            }
        ),
        "snapshotID must be set when volumeInitializationRate is set",
    ),
    (
        "requirement-hostname",
        requirement("kubernetes.io/hostname", "Exists"),
        'label "kubernetes.io/hostname" is restricted',
    ),
    *(
        (
            f"nodeclaim-node-class-{field}-empty",
            merged(CLAIM, {"spec": {"nodeClassRef": {field: ""}}}),
            f"{field} may not be empty",
        )
        for field in ("group", "kind", "name")
    ),
    (
        "nodeclaim-gt-with-two-values",
        merged(
            CLAIM,
            {"spec": {"requirements": [{"key": "example.com/cpu", "operator": "Gt", "values": ["1", "2"]}]}},
        ),
        "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
    ),
    (
        "nodeclaim-min-values-above-values",
        merged(
            CLAIM,
            {
                "spec": {
                    "requirements": [
                        {"key": "example.com/team", "operator": "In", "values": ["a"], "minValues": 2}
                    ]
                }
            },
        ),
        "requirements with 'minValues' must have at least that many values specified in the 'values' field",
    ),
    # The issue's own list (found by hand before the derivation): each is also derived below.
    (
        "budget-nodes-integer",
        pool({"disruption": {"consolidateAfter": "0s", "budgets": [{"nodes": 5}]}}),
        "must be of type string",
    ),
    (
        "budgets-51",
        pool({"disruption": {"consolidateAfter": "0s", "budgets": [{"nodes": "1"}] * 51}}),
        "must have at most 50 items",
    ),
    ("consolidate-after-fraction", pool({"disruption": {"consolidateAfter": "1.5h"}}), "should match"),
    ("consolidate-after-milliseconds", pool({"disruption": {"consolidateAfter": "5ms"}}), "should match"),
    (
        "requirements-101",
        claim_spec({"requirements": [{"key": "example.com/team", "operator": "Exists"}] * 101}),
        "must have at most 100 items",
    ),
    ("label-value-integer", template_labels({"team": 5}), "must be of type string"),  # type: ignore[dict-item]
    ("requirement-key-with-space", requirement("bad key!", "Exists"), "should match"),
    ("kubelet-eviction-200-percent", kubelet({"evictionHard": {"memory.available": "200%"}}), "should match"),
    ("limit-fraction-as-number", pool({"limits": {"cpu": 0.5}}), "spec.limits.cpu"),
    ("kubelet-max-pods-over-int32", kubelet({"maxPods": 2**31}), "format int32"),
    # Fields karpy keeps the shape of but refuses: nothing of karpy's would act on them.
    ("context-refused", node_class({"context": "ctx-0abc"}), CONTEXT_UNSUPPORTED_MESSAGE),
    *(
        (
            f"cluster-dns-two-on-{family}",
            node_class(
                {"amiSelectorTerms": [{"alias": f"{family}@latest"}], "kubelet": {"clusterDNS": DNS_PAIR}}
            ),
            ONE_CLUSTER_DNS_MESSAGE,
        )
        for family in ("al2", "bottlerocket")
    ),
    (
        "cluster-dns-two-on-al2-by-family",
        node_class(
            {"amiFamily": "AL2", "amiSelectorTerms": [{"name": "al2-*"}], "kubelet": {"clusterDNS": DNS_PAIR}}
        ),
        ONE_CLUSTER_DNS_MESSAGE,
    ),
    *(
        (f"bottlerocket-pods-per-core-{how}", node_class(spec), BOTTLEROCKET_PODS_PER_CORE_MESSAGE)
        for how, spec in (
            (
                "alias",
                {"amiSelectorTerms": [{"alias": "bottlerocket@latest"}], "kubelet": {"podsPerCore": 2}},
            ),
            (
                "family",
                {
                    "amiFamily": "Bottlerocket",
                    "amiSelectorTerms": [{"name": "br-*"}],
                    "kubelet": {"podsPerCore": 2},
                },
            ),
        )
    ),
    *(
        (f"{kind}-{field}-time-added-refused", manifest, TIME_ADDED_UNSUPPORTED_MESSAGE)
        for field in ("taints", "startupTaints")
        for kind, manifest in (
            ("pool", claim_spec({field: [TIMED_TAINT]})),
            ("claim", merged(CLAIM, {"spec": {field: [TIMED_TAINT]}})),
        )
    ),
    (
        "ssm-parameter-refused",
        node_class(
            {
                "amiFamily": "AL2023",
                "amiSelectorTerms": [{"name": "my-ami", "ssmParameter": "/my/ami"}],
            }
        ),
        SSM_PARAMETER_UNSUPPORTED_MESSAGE,
    ),
    # Capacity reservations.
    (
        "reservation-owner-only",
        node_class({"capacityReservationSelectorTerms": [{"ownerID": "123456789012"}]}),
        "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']",
    ),
    (
        "reservation-id-and-tags",
        node_class({"capacityReservationSelectorTerms": [{"id": "cr-0abc", "tags": SELECTOR_TAGS}]}),
        "'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation "
        "selector term",
    ),
    (
        "reservation-id-malformed",
        node_class({"capacityReservationSelectorTerms": [{"id": "res-0abc"}]}),
        "capacityReservationSelectorTerms[0].id",
    ),
    (
        "buffer-template-and-scalable",
        buffer_spec(
            {
                "podTemplateRef": {"name": "shape"},
                "scalableRef": {"kind": "Deployment", "name": "app"},
                "replicas": 1,
            }
        ),
        "You must define either PodTemplateRef or ScalableRef, but not both",
    ),
    (
        "buffer-template-without-size",
        buffer_spec({"podTemplateRef": {"name": "shape"}}),
        "If podTemplateRef is set, replicas or limits must also be set",
    ),
    (
        "overlay-both-prices",
        overlay_spec({"requirements": [], "price": "0.1", "priceAdjustment": "-10%"}),
        "cannot set both 'price' and 'priceAdjustment'",
    ),
    (
        "overlay-not-in-empty",
        overlay_requirement("node.kubernetes.io/instance-type", "NotIn", []),
        "requirements with operator 'NotIn' must have a value defined",
    ),
    (
        "overlay-in-empty",
        overlay_requirement("node.kubernetes.io/instance-type", "In", []),
        "requirements with operator 'In' must have a value defined",
    ),
    (
        "overlay-gte-two-values",
        overlay_requirement("karpenter.k8s.aws/instance-cpu", "Gte", ["2", "4"]),
        "requirements operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single positive integer value",
    ),
    (
        "overlay-karpenter-domain",
        overlay_requirement("karpenter.sh/team", "Exists"),
        'label domain "karpenter.sh" is restricted',
    ),
    (
        "overlay-hostname",
        overlay_requirement("kubernetes.io/hostname", "Exists"),
        'label "kubernetes.io/hostname" is restricted',
    ),
    (
        "overlay-capacity-cpu",
        overlay_spec({"requirements": [], "capacity": {"cpu": "4"}}),
        "invalid resource restricted",
    ),
]


GOOD_OBJECTS: list[tuple[str, dict[str, Any]]] = [
    *(
        (
            f"budget-nodes-{nodes}",
            pool({"disruption": {"consolidateAfter": "0s", "budgets": [{"nodes": nodes}]}}),
        )
        for nodes in ("0", "10", "10%", "100%")
    ),
    (
        "budget-window",
        pool(
            {
                "disruption": {
                    "consolidateAfter": "0s",
                    "budgets": [
                        {
                            "nodes": "0",
                            "schedule": "0 9 * * mon-fri",
                            "duration": "8h",
                            "reasons": ["Drifted"],
                        },
                        {"nodes": "1", "schedule": "@daily", "duration": "1h30m"},
                    ],
                }
            }
        ),
    ),
    *(
        (f"consolidate-after-{after}", pool({"disruption": {"consolidateAfter": after}}))
        for after in ("30s", "1h30m", "Never")
    ),
    ("weight-written-as-2.0", pool({"weight": 2.0})),  # kubectl sends it as 2
    ("weight-null", pool({"weight": None})),  # a null field is pruned, as if not written
    ("static-zero-replicas", pool({"replicas": 0})),
    ("static-nodes-limit", pool({"replicas": 3, "limits": {"nodes": "5"}})),
    ("when-empty", pool({"disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "5m"}})),
    ("expire-never-and-grace", claim_spec({"expireAfter": "Never", "terminationGracePeriod": "48h"})),
    ("gt-one-integer", requirement("karpenter.k8s.aws/instance-generation", "Gt", "2")),
    ("cluster-dns-two-on-al2023", node_class({"kubelet": {"clusterDNS": DNS_PAIR}})),
    (
        "gte-lte-bounds",
        claim_spec(
            {
                "requirements": [
                    {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gte", "values": ["4"]},
                    {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Lte", "values": ["16"]},
                ]
            }
        ),
    ),
    (
        "custom-family-sizing-kubelet",
        node_class(
            {
                "amiFamily": AMI_FAMILY_CUSTOM,
                "instanceStorePolicy": "RAID0",
                "kubelet": {"maxPods": 20, "podsPerCore": 4, "evictionHard": {"memory.available": "5%"}},
            }
        ),
    ),
    (
        "min-values-equal-to-values",
        requirement("karpenter.k8s.aws/instance-family", "In", "c5", "m5", minValues=2),
    ),
    (
        "not-in-and-exists",
        claim_spec(
            {
                "requirements": [
                    {
                        "key": "karpenter.k8s.aws/instance-size",
                        "operator": "NotIn",
                        "values": ["nano", "micro"],
                    },
                    {"key": "example.com/team", "operator": "Exists"},
                    {"key": "example.com/legacy", "operator": "DoesNotExist"},
                ]
            }
        ),
    ),
    ("limits-zero", pool({"limits": {"cpu": 0, "memory": "0", "nvidia.com/gpu": "0"}})),
    (
        "labels-in-allowed-subdomains",
        template_labels(
            {
                "node.kubernetes.io/team": "a",
                "node-restriction.kubernetes.io/team": "a",
                "kops.k8s.io/instancegroup": "a",
                "example.com/team": "a",
                "team": "",
            }
        ),
    ),
    (
        "nodeclaim-with-requests",
        merged(CLAIM, {"spec": {"resources": {"requests": {"cpu": "1", "pods": 3}}}}),
    ),
    ("ami-id", node_class({"amiFamily": "AL2023", "amiSelectorTerms": [{"id": "ami-0abc"}]})),
    (
        "ami-name-and-owner",
        node_class({"amiFamily": "Custom", "amiSelectorTerms": [{"name": "my-ami", "owner": "self"}]}),
    ),
    (
        "ami-tags-and-owner",
        node_class({"amiFamily": "AL2", "amiSelectorTerms": [{"tags": SELECTOR_TAGS, "owner": "amazon"}]}),
    ),
    ("ami-alias-pinned", node_class({"amiSelectorTerms": [{"alias": "bottlerocket@v1.20.0"}]})),
    (
        "ami-alias-with-custom-family",
        node_class({"amiFamily": "Custom", "amiSelectorTerms": [{"alias": "al2@latest"}]}),
    ),
    (
        "ami-alias-with-its-family",
        node_class({"amiFamily": "Windows2019", "amiSelectorTerms": [{"alias": "windows2019@latest"}]}),
    ),
    (
        "instance-profile",
        merged(
            {k: v for k, v in NODE_CLASS.items() if k != "spec"},
            {
                "spec": {
                    **{k: v for k, v in NODE_CLASS["spec"].items() if k != "role"},
                    "instanceProfile": "KarpenterNodeInstanceProfile-it",
                }
            },
        ),
    ),
    (
        "subnet-and-security-group-ids",
        node_class(
            {
                "subnetSelectorTerms": [{"id": "subnet-0abc"}, {"tags": SELECTOR_TAGS}],
                "securityGroupSelectorTerms": [{"id": "sg-0abc"}, {"name": "web"}, {"tags": {"Name": "*"}}],
            }
        ),
    ),
    ("reservations-none", node_class({"capacityReservationSelectorTerms": []})),
    (
        "reservations-by-id-tags-and-criteria",
        node_class(
            {
                "capacityReservationSelectorTerms": [
                    {"id": "cr-0abc"},
                    {"tags": SELECTOR_TAGS, "ownerID": "123456789012"},
                    {"instanceMatchCriteria": "open"},
                ]
            }
        ),
    ),
    (
        "one-root-volume-and-a-snapshot",
        node_class(
            {
                "blockDeviceMappings": [
                    {
                        "deviceName": "/dev/xvda",
                        "rootVolume": True,
                        "ebs": {"volumeSize": "64T", "volumeType": "gp3"},
                    },
                    {
                        "deviceName": "/dev/xvdb",
                        "ebs": {"snapshotID": "snap-0abc", "volumeInitializationRate": 100},
                    },
                ]
            }
        ),
    ),
    (
        "kubelet",
        kubelet(
            {
                "maxPods": 110,
                "kubeReserved": {"cpu": "200m", "memory": "100Mi", "ephemeral-storage": "1Gi", "pid": "100"},
                "evictionHard": {
                    "memory.available": "5%",
                    "nodefs.available": "10.5%",
                    "pid.available": "100",
                },
                "evictionSoft": {"memory.available": "500Mi"},
                "evictionSoftGracePeriod": {"memory.available": "1m30s"},
                "imageGCHighThresholdPercent": 85,
                "imageGCLowThresholdPercent": 80,
            }
        ),
    ),
    ("buffer-template-and-replicas", BUFFER),
    (
        "buffer-template-and-limits",
        buffer_spec({"podTemplateRef": {"name": "shape"}, "limits": {"cpu": "4"}}),
    ),
    (
        "buffer-scalable-percentage",
        buffer_spec(
            {"scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": "app"}, "percentage": 20}
        ),
    ),
    ("overlay-price-adjustment", OVERLAY),
    ("overlay-price", overlay_spec({"requirements": [], "price": "0.05"})),
    (
        "overlay-capacity-nodepool-gte",
        overlay_spec(
            {
                "requirements": [
                    {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["default"]},
                    {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gte", "values": ["4"]},
                ],
                "capacity": {"hugepages-2Mi": "100Mi", "example.com/gpu-slice": "4"},
                "weight": 10000,
            }
        ),
    ),
]


# --- Objects derived from the CRD schemas -------------------------------------------------------
#
# The cases above are a list; the promise is a property: whatever karpy's CRDs refuse, the loader
# refuses. So bad objects are also *derived*: the schemas of karpy.api.crds are walked along a
# valid object that sets every field (FULL_OBJECTS), and for each constraint met on the way
# (type, enum, pattern, minLength/maxLength, minItems/maxItems, maxProperties, minimum/maximum,
# required) one object is made that breaks it and nothing else; and where cheap, one that sits
# exactly on the bound, which the CRD accepts. A constraint added to a CRD is then tested without
# a new case. The CEL rules cannot be broken generically; every one of them must have a case in
# BAD_OBJECTS instead (cel_rules, related_paths), which the API server proves refused.

FULL_POOL: dict[str, Any] = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodePool",
    "metadata": {"name": RULE_OBJECT},
    "spec": {
        "weight": 10,
        "limits": {"cpu": "100", "memory": "100Gi"},
        "disruption": {
            "consolidationPolicy": "WhenEmpty",
            "consolidateAfter": "30s",
            "budgets": [{"nodes": "10%", "schedule": "@daily", "duration": "1h", "reasons": ["Drifted"]}],
        },
        "template": {
            "metadata": {"labels": {"example.com/team": "a"}, "annotations": {"example.com/note": "x"}},
            "spec": {
                "requirements": [
                    {"key": "example.com/team", "operator": "In", "values": ["a"]},
                    {"key": "example.com/zone", "operator": "Exists", "minValues": 1},
                ],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "taints": [
                    {
                        "key": "example.com/dedicated",
                        "value": "a",
                        "effect": "NoSchedule",
                    }
                ],
                "startupTaints": [{"key": "example.com/booting", "effect": "NoSchedule"}],
                "expireAfter": "720h",
                "terminationGracePeriod": "1h",
            },
        },
    },
}
FULL_CLAIM: dict[str, Any] = merged(
    CLAIM,
    {
        "spec": {
            "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c5.large"]},
                {"key": "example.com/zone", "operator": "Exists", "minValues": 1},
            ],
            "taints": [{"key": "example.com/dedicated", "value": "a", "effect": "NoSchedule"}],
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
            "expireAfter": "Never",
            "terminationGracePeriod": "1h",
        }
    },
)
FULL_NODE_CLASS: dict[str, Any] = node_class(
    {
        "amiFamily": "AL2023",
        "amiSelectorTerms": [{"tags": SELECTOR_TAGS, "owner": "amazon"}],
        "subnetSelectorTerms": [{"tags": SELECTOR_TAGS}, {"id": "subnet-0abc"}],
        "securityGroupSelectorTerms": [{"tags": SELECTOR_TAGS}, {"id": "sg-0abc"}, {"name": "web"}],
        "tags": {"team": "a"},
        "detailedMonitoring": True,
        "associatePublicIPAddress": False,
        "instanceStorePolicy": "RAID0",
        "userData": "#!/bin/bash",
        "metadataOptions": {
            "httpEndpoint": "enabled",
            "httpProtocolIPv6": "disabled",
            "httpPutResponseHopLimit": 2,
            "httpTokens": "required",
        },
        "blockDeviceMappings": [
            {"deviceName": "/dev/xvdb", "ebs": {"snapshotID": "snap-0abc", "volumeInitializationRate": 100}},
            {
                "deviceName": "/dev/xvda",
                "rootVolume": True,
                "ebs": {
                    "volumeSize": "20Gi",
                    "volumeType": "gp3",
                    "iops": 3000,
                    "throughput": 125,
                    "encrypted": True,
                    "deleteOnTermination": True,
                },
            },
        ],
        "kubelet": {
            "clusterDNS": ["10.0.0.10"],
            "maxPods": 110,
            "podsPerCore": 2,
            "systemReserved": {"cpu": "100m"},
            "kubeReserved": {"memory": "100Mi"},
            "evictionHard": {"memory.available": "5%"},
            "evictionSoft": {"memory.available": "10%"},
            "evictionSoftGracePeriod": {"memory.available": "1m"},
            "evictionMaxPodGracePeriod": 60,
            "imageGCHighThresholdPercent": 85,
            "imageGCLowThresholdPercent": 80,
            "cpuCFSQuota": True,
        },
    }
)
FULL_ALIAS_NODE_CLASS: dict[str, Any] = node_class({"amiSelectorTerms": [{"alias": "al2023@latest"}]})
FULL_KWOK_CLASS: dict[str, Any] = {
    "apiVersion": "karpenter.kwok.sh/v1alpha1",
    "kind": "KWOKNodeClass",
    "metadata": {"name": RULE_OBJECT},
    "spec": {"nodeRegistrationDelay": "5s"},
}
FULL_OVERLAY: dict[str, Any] = overlay_spec(
    {
        "requirements": [
            {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["default"]},
            {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5"]},
        ],
        "price": "0.05",
        "capacity": {"example.com/gpu-slice": "4"},
        "weight": 10,
    }
)
FULL_OBJECTS = [FULL_POOL, FULL_CLAIM, FULL_NODE_CLASS, FULL_ALIAS_NODE_CLASS, FULL_KWOK_CLASS, FULL_OVERLAY]

Path = tuple[str | int, ...]
INTEGER_BOUNDS = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
_DELETE = object()
# Strings tried against a pattern; those it refuses are the bad values (at most PATTERN_TRIES).
PATTERN_CANDIDATES = ("bad value!", "1.5h", "5ms", "200%", "1d", "-1", "a/b/c", "@every 5m", "ten", "")
PATTERN_TRIES = 2


def schemas_by_kind() -> dict[tuple[str, str], dict[str, Any]]:
    """The schema of each kind the CRDs store, by (apiVersion, kind), as ``karpy crds`` installs them."""
    from karpy.api.crds import all_crds

    found: dict[tuple[str, str], dict[str, Any]] = {}
    for crd in all_crds():
        spec = crd["spec"]
        version = next(version for version in spec["versions"] if version["storage"])
        found[f"{spec['group']}/{version['name']}", spec["names"]["kind"]] = version["schema"][
            "openAPIV3Schema"
        ]
    return found


def with_value(manifest: dict[str, Any], path: Path, value: object) -> dict[str, Any]:
    """``manifest`` with the value at ``path`` replaced (or removed, for _DELETE)."""
    result = copy.deepcopy(manifest)
    parent: Any = result
    for step in path[:-1]:
        parent = parent[step]
    if value is _DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return result


def _shown_path(path: Path) -> str:
    text = ""
    for step in path:
        text += f"[{step}]" if isinstance(step, int) else (f".{step}" if text else step)
    return text


def _matches(pattern: str | None, value: str) -> bool:
    import re

    return pattern is None or re.search(pattern, value) is not None


def _long_strings(length: int, like: str) -> list[str]:
    """Strings of ``length`` characters to try against a pattern: a label key's shape, letters, ``like``'s."""
    name = "a" * min(63, max(length - 2, 1))
    prefix_length = length - len(name) - 1
    prefix = ".".join("a" * 63 for _ in range(prefix_length // 64 + 1))[:prefix_length].rstrip(".")
    shaped = f"{prefix}/{name}" if prefix else "a" * length
    padded = (like + like[-1:] * length)[:length] if like else ""
    return [shaped if len(shaped) == length else "a" * length, "a" * length, padded]


def _wrong_type(schema: dict[str, Any]) -> object:
    if schema.get("x-kubernetes-int-or-string"):
        return [1]
    return {"string": 5, "integer": "5", "number": "5", "boolean": "yes", "object": "x", "array": "x"}[
        schema["type"]
    ]


def _walk(schema: dict[str, Any], value: object, path: Path) -> Iterator[tuple[str, Path, object, bool]]:
    """(constraint, path, value, refused) for each constraint of ``schema`` met along ``value``."""
    if "type" in schema or schema.get("x-kubernetes-int-or-string"):
        yield "type", path, _wrong_type(schema), True
    if "enum" in schema:
        yield "enum", path, "NotAnOption", True
        # Another operator needs other values (Gt a number, Exists none): not a bound to try.
        if path[-1] != "operator":
            for option in schema["enum"]:
                if option != value:
                    yield "enum", path, option, False
    if isinstance(value, str):
        pattern = schema.get("pattern")
        tries = [text for text in PATTERN_CANDIDATES if not _matches(pattern, text)]
        for text in tries[:PATTERN_TRIES]:
            if "maxLength" not in schema or len(text) <= schema["maxLength"]:
                yield "pattern", path, text, True
        for bound, over in (("maxLength", 1), ("minLength", -1)):
            if bound in schema:
                length = schema[bound]
                for refused, size in ((True, length + over), (False, length)):
                    if size >= 0:
                        fitting = [text for text in _long_strings(size, value) if _matches(pattern, text)]
                        if fitting:
                            yield bound, path, fitting[0], refused
    if schema.get("format") == "date-time":
        yield "format", path, "yesterday", True
    if isinstance(value, int | float) and not isinstance(value, bool):
        if schema.get("format") in INTEGER_BOUNDS:
            most = INTEGER_BOUNDS[schema["format"]][1]
            yield "format", path, most + 1, True
            if schema.get("maximum", most) >= most:
                yield "format", path, most, False
        for bound, step in (("minimum", -1), ("maximum", 1)):
            if bound in schema:
                yield bound, path, schema[bound] + step, True
                yield bound, path, schema[bound], False
    if isinstance(value, list) and value:
        for bound, step in (("maxItems", 1), ("minItems", -1)):
            if bound in schema:
                size = schema[bound]
                if size + step >= 0:
                    yield bound, path, [value[0]] * (size + step), True
                yield bound, path, [value[0]] * size, False
        if isinstance(schema.get("items"), dict):
            for index, item in enumerate(value):
                yield from _walk(schema["items"], item, (*path, index))
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for name in schema.get("required", ()):
            if name in value and "default" not in properties.get(name, {}):
                yield "required", (*path, name), _DELETE, True
        if "maxProperties" in schema and value:
            first_key, first_value = next(iter(value.items()))
            for refused, size in ((True, schema["maxProperties"] + 1), (False, schema["maxProperties"])):
                grown = {f"{first_key}-{index}": first_value for index in range(size - 1)}
                yield "maxProperties", path, {first_key: first_value, **grown}, refused
        for name, item in value.items():
            field = properties.get(name, schema.get("additionalProperties"))
            if isinstance(field, dict) and not (
                field.get("x-kubernetes-preserve-unknown-fields") and "properties" not in field
            ):
                yield from _walk(field, item, (*path, name))


# Bounds the schema allows that a CEL rule of the same CRD refuses, so no good object is made there.
CEL_BOUND_CONFLICTS = frozenset(
    {
        ("spec.kubelet.imageGCHighThresholdPercent", "minimum"),  # high must exceed low
        ("spec.kubelet.imageGCLowThresholdPercent", "maximum"),
        ("spec.amiSelectorTerms", "maxItems"),  # 30 aliases: an alias stands alone
        ("spec.amiSelectorTerms[0].alias", "maxLength"),  # family@version, of a known family
    }
)

# Values the schema allows that a CEL rule refuses for the full object: a Custom family cannot
# carry the kubelet settings that only karpy's user data would pass on.
CEL_VALUE_CONFLICTS = frozenset(
    {
        ("spec.amiFamily", json.dumps(AMI_FAMILY_CUSTOM)),
        ("spec.amiFamily", json.dumps("Bottlerocket")),  # podsPerCore cannot act there
    }
)


def derived_objects() -> tuple[list[tuple[str, dict[str, Any], str]], list[tuple[str, dict[str, Any]]]]:
    """(bad objects as (id, manifest, field path), good objects at the bounds as (id, manifest))."""
    schemas = schemas_by_kind()
    bad: dict[str, tuple[str, dict[str, Any], str]] = {}
    good: dict[str, tuple[str, dict[str, Any]]] = {}
    for base_index, base in enumerate(FULL_OBJECTS):
        schema = schemas[base["apiVersion"], base["kind"]]
        spec_schema = schema["properties"]["spec"]
        for constraint, path, value, refused in _walk(spec_schema, base["spec"], ("spec",)):
            where = _shown_path(path)
            shown = "delete" if value is _DELETE else json.dumps(value)[:40]
            name = f"{base['kind']}{base_index}:{where}:{constraint}:{shown}"
            manifest = with_value(base, path, value)
            if refused:
                bad.setdefault(name, (name, manifest, where))
            elif (where, constraint) not in CEL_BOUND_CONFLICTS and (
                where,
                json.dumps(value),
            ) not in CEL_VALUE_CONFLICTS:
                good.setdefault(name, (name, manifest))
    return list(bad.values()), list(good.values())


DERIVED_BAD, DERIVED_GOOD = derived_objects()


def cel_rules() -> list[tuple[str, str, str]]:
    """Every CEL rule of the CRDs a create can break, as (kind, schema path, message).

    The path leaves out list indices and map keys (``spec.template.metadata.labels``); rules that
    compare with the stored object (oldSelf: immutability) cannot be broken by a create.
    """

    def walk(schema: dict[str, Any], path: str) -> Iterator[tuple[str, str]]:
        for rule in schema.get("x-kubernetes-validations", []):
            if "oldSelf" not in rule["rule"]:
                yield path, rule["message"]
        for name, field in schema.get("properties", {}).items():
            yield from walk(field, f"{path}.{name}" if path else name)
        for nested in ("items", "additionalProperties"):
            if isinstance(schema.get(nested), dict):
                yield from walk(schema[nested], path)

    return [
        (kind, path, message)
        for (_, kind), schema in schemas_by_kind().items()
        for path, message in walk(schema["properties"]["spec"], "spec")
    ]


def changed_paths(base: object, changed: object, path: str = "") -> Iterator[str]:
    """The paths where ``changed`` differs from ``base``, down to each leaf written, without list indices."""
    if isinstance(base, dict) and isinstance(changed, dict):
        for key in sorted(set(base) | set(changed), key=str):
            if base.get(key) != changed.get(key):
                yield from changed_paths(base.get(key), changed.get(key), f"{path}.{key}" if path else key)
    elif isinstance(base, list) and isinstance(changed, list):
        for index in range(max(len(base), len(changed))):
            before = base[index] if index < len(base) else None
            after = changed[index] if index < len(changed) else None
            if before != after:
                yield from changed_paths(before, after, path)
    elif isinstance(changed, dict | list) and base is None:
        yield from changed_paths({} if isinstance(changed, dict) else [], changed, path)
    elif isinstance(base, dict | list) and changed is None:
        yield from changed_paths(base, {} if isinstance(base, dict) else [], path)
    elif base != changed:
        yield path


def related_paths(one: str, other: str) -> bool:
    """Whether one schema path holds the other (a rule on a list is broken by a change in an item)."""
    return one == other or one.startswith(f"{other}.") or other.startswith(f"{one}.")


CASE_BASES = {
    "NodePool": POOL,
    "NodeClaim": CLAIM,
    "EC2NodeClass": NODE_CLASS,
    "CapacityBuffer": BUFFER,
    "NodeOverlay": OVERLAY,
}


def cel_witnesses(kind: str, path: str, message: str) -> list[str]:
    """The BAD_OBJECTS cases that break the rule ``message`` at ``path`` of ``kind``."""
    return [
        name
        for name, manifest, expected in BAD_OBJECTS
        if manifest["kind"] == kind
        and expected == message
        and any(related_paths(changed, path) for changed in changed_paths(CASE_BASES[kind], manifest))
    ]
