"""Objects that Karpenter's CRD rules refuse, one per rule, and good objects of each shape.

Shared by ``tests/integration/test_crds.py``, which sends each to a real API
server, and ``tests/api/test_crd_cases_offline.py``, which reads each with
karpy's own file loader: both must refuse the bad ones (the loader but for the
gaps docs/crds.md lists) and accept the good ones. Each case is a small change
to a valid object.
"""

from __future__ import annotations

import copy
from typing import Any

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


def kubelet(settings: dict[str, Any]) -> dict[str, Any]:
    return node_class({"kubelet": settings})


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
        "requirements operator 'Gt' or 'Lt' must have a single positive integer value",
    ),
    (
        "lt-negative",
        requirement("karpenter.k8s.aws/instance-cpu", "Lt", "-1"),
        "requirements operator 'Gt' or 'Lt' must have a single positive integer value",
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
    ("when-empty", pool({"disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "5m"}})),
    ("expire-never-and-grace", claim_spec({"expireAfter": "Never", "terminationGracePeriod": "48h"})),
    ("gt-one-integer", requirement("karpenter.k8s.aws/instance-generation", "Gt", "2")),
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
    (
        "reservations",
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
]
