"""The node class hash: each field Karpenter hashes changes it, each it ignores does not."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import yaml
from tests.support import parse_object

from karpy.api.nodeclass import EC2NodeClass
from karpy.api.nodeclass_hash import (
    EC2_HASHED_FIELDS,
    EC2_IGNORED_FIELDS,
    EC2NODECLASS_HASH_ANNOTATION,
    EC2NODECLASS_HASH_VERSION,
    EC2NODECLASS_HASH_VERSION_ANNOTATION,
    KWOKNODECLASS_HASH_ANNOTATION,
    ec2nodeclass_hash,
    kwoknodeclass_hash,
)

BASE: dict[str, Any] = {
    "apiVersion": "karpenter.k8s.aws/v1",
    "kind": "EC2NodeClass",
    "metadata": {"name": "default"},
    "spec": {
        "role": "KarpenterNodeRole",
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
        "tags": {"team-a": "one", "team-b": "two"},
        "userData": "#!/bin/bash\necho join\n",
        "detailedMonitoring": False,
        "associatePublicIPAddress": False,
        "kubelet": {"maxPods": 110, "kubeReserved": {"cpu": "100m"}},
        "metadataOptions": {"httpTokens": "optional", "httpPutResponseHopLimit": 2},
        "blockDeviceMappings": [
            {
                "deviceName": "/dev/xvda",
                "rootVolume": True,
                "ebs": {"volumeSize": "20Gi", "volumeType": "gp3", "encrypted": True},
            },
            {"deviceName": "/dev/xvdb", "ebs": {"volumeSize": "100Gi", "volumeType": "gp3"}},
        ],
    },
}


def node_class(**spec_changes: Any) -> EC2NodeClass:
    """BASE with ``spec_changes`` merged into its spec (a None value removes the field)."""
    manifest = yaml.safe_load(yaml.safe_dump(BASE))
    for key, value in spec_changes.items():
        if value is None:
            manifest["spec"].pop(key, None)
        else:
            manifest["spec"][key] = value
    parsed = parse_object(yaml.safe_dump(manifest))
    assert isinstance(parsed, EC2NodeClass)
    return parsed


def hash_of(**spec_changes: Any) -> str:
    return ec2nodeclass_hash(node_class(**spec_changes)).value


BASE_HASH = hash_of()
ROOT, DATA = BASE["spec"]["blockDeviceMappings"]


@pytest.mark.parametrize(
    "changes",
    [
        {"userData": "#!/bin/bash\necho fixed join\n"},
        {"tags": {"team-a": "one", "team-b": "three"}},
        {"tags": {"team-a": "one"}},
        {"role": None, "instanceProfile": "KarpenterNodeInstanceProfile"},
        {"role": "OtherRole"},
        {"detailedMonitoring": True},
        {"associatePublicIPAddress": True},
        {"associatePublicIPAddress": None},  # false and unset differ: the subnet's default decides
        {"kubelet": {"maxPods": 58, "kubeReserved": {"cpu": "100m"}}},
        {"kubelet": {"maxPods": 110, "kubeReserved": {"cpu": "200m"}}},
        {
            "kubelet": {
                "maxPods": 110,
                "kubeReserved": {"cpu": "100m"},
                "evictionHard": {"memory.available": "5%"},
            }
        },
        {"metadataOptions": {"httpTokens": "required", "httpPutResponseHopLimit": 2}},
        {"metadataOptions": {"httpTokens": "optional", "httpPutResponseHopLimit": 1}},
        {
            "metadataOptions": {
                "httpTokens": "optional",
                "httpPutResponseHopLimit": 2,
                "httpEndpoint": "disabled",
            }
        },
        {
            "metadataOptions": {
                "httpTokens": "optional",
                "httpPutResponseHopLimit": 2,
                "httpProtocolIPv6": "enabled",
            }
        },
        {"blockDeviceMappings": [{**ROOT, "ebs": {**ROOT["ebs"], "volumeSize": "40Gi"}}, DATA]},
        {"blockDeviceMappings": [{**ROOT, "ebs": {**ROOT["ebs"], "volumeType": "io1", "iops": 3000}}, DATA]},
        {"blockDeviceMappings": [{**ROOT, "ebs": {**ROOT["ebs"], "throughput": 250}}, DATA]},
        {"blockDeviceMappings": [{**ROOT, "ebs": {**ROOT["ebs"], "encrypted": False}}, DATA]},
        {"blockDeviceMappings": [{**ROOT, "ebs": {**ROOT["ebs"], "kmsKeyID": "arn:aws:kms:key/1"}}, DATA]},
        {"blockDeviceMappings": [{**ROOT, "ebs": {**ROOT["ebs"], "deleteOnTermination": False}}, DATA]},
        {"blockDeviceMappings": [{**ROOT, "ebs": {**ROOT["ebs"], "snapshotID": "snap-0123"}}, DATA]},
        {"blockDeviceMappings": [{**ROOT, "rootVolume": False}, DATA]},
        {"blockDeviceMappings": [{**ROOT, "deviceName": "/dev/sda1"}, DATA]},
        {"blockDeviceMappings": [ROOT]},
        # The AMI family as resolved: the alias' family, or amiFamily when it says another.
        {"amiSelectorTerms": [{"alias": "bottlerocket@latest"}]},
        {"amiFamily": "Custom"},
    ],
    ids=",".join,
)
def test_each_field_karpenter_hashes_changes_the_hash(changes: dict[str, Any]) -> None:
    assert hash_of(**changes) != BASE_HASH


@pytest.mark.parametrize(
    "changes",
    [
        # Compared as what they resolve to (AMIDrift, SecurityGroupDrift, SubnetDrift), not hashed.
        {"amiSelectorTerms": [{"alias": "al2023@v20260201"}]},
        {"subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "other"}}]},
        {"securityGroupSelectorTerms": [{"id": "sg-0123456789abcdef0"}]},
        # Written another way, the same nodes.
        {"tags": {"team-b": "two", "team-a": "one"}},
        {"blockDeviceMappings": [DATA, ROOT]},
        {"amiFamily": "AL2023"},  # what the alias says already
        {"detailedMonitoring": None},  # false is the default
        {"kubelet": {"kubeReserved": {"cpu": "0.1"}, "maxPods": 110}},
        {
            "metadataOptions": {
                "httpTokens": "optional",
                "httpPutResponseHopLimit": 2,
                "httpEndpoint": "enabled",
                "httpProtocolIPv6": "disabled",
            }
        },
    ],
    ids=",".join,
)
def test_each_field_karpenter_ignores_and_each_rewording_leaves_the_hash(changes: dict[str, Any]) -> None:
    assert hash_of(**changes) == BASE_HASH


def test_the_name_and_metadata_are_not_hashed_and_the_ca_bundle_is() -> None:
    renamed = node_class()
    renamed = dataclasses.replace(
        renamed, metadata=renamed.metadata.with_changes(name="other", annotations={"team": "platform"})
    )
    assert ec2nodeclass_hash(renamed).value == BASE_HASH
    rotated = ec2nodeclass_hash(node_class(), ca_bundle="LS0tLS1CRUdJTi0tLS0t")
    assert rotated.value != BASE_HASH  # since Karpenter v1.12: a new cluster CA rolls the nodes


def test_every_field_of_the_model_is_hashed_or_ignored_on_purpose() -> None:
    # A field added to EC2NodeClass must be put in one of the two lists (and docs/aws.md).
    fields = {field.name for field in dataclasses.fields(EC2NodeClass)}
    assert fields == set(EC2_HASHED_FIELDS) | set(EC2_IGNORED_FIELDS)
    assert not set(EC2_HASHED_FIELDS) & set(EC2_IGNORED_FIELDS)


def test_the_hash_is_annotated_under_karpenters_names_with_karpys_own_version() -> None:
    annotations = ec2nodeclass_hash(node_class()).annotations()
    assert annotations == {
        EC2NODECLASS_HASH_ANNOTATION: BASE_HASH,
        EC2NODECLASS_HASH_VERSION_ANNOTATION: EC2NODECLASS_HASH_VERSION,
    }
    assert EC2NODECLASS_HASH_ANNOTATION == "karpenter.k8s.aws/ec2nodeclass-hash"
    # Karpenter's versions are v1, v2...: a NodeClaim it launched is re-annotated, not drifted.
    assert not EC2NODECLASS_HASH_VERSION.removeprefix("v").isdigit()


def test_a_kwok_class_hash_follows_its_instance_type_catalog() -> None:
    aws, karpenter = kwoknodeclass_hash("aws"), kwoknodeclass_hash("karpenter")
    assert aws.value != karpenter.value
    assert aws == kwoknodeclass_hash("aws")
    assert aws.annotation == KWOKNODECLASS_HASH_ANNOTATION
