"""The node class hash is Karpenter's: each field it hashes changes it, each it ignores does not.

The golden values (tests/data/ec2nodeclass-hash/hashes.json) are what karpenter-provider-aws
v1.15's ``EC2NodeClass.Hash()`` prints for the manifests beside them (scripts/gen-hash-golden).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support import parse_object

from karpy.api.ec2nodeclass_go_hash import EC2NODECLASS_SPEC
from karpy.api.manifest import parse_manifests
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
        {"instanceStorePolicy": "RAID0"},
        # As Karpenter's Go types: a field written false is not an absent one (a *bool) ...
        {"detailedMonitoring": None},
        # ... and the kubelet settings are hashed as their JSON text, as written.
        {"kubelet": {"kubeReserved": {"cpu": "0.1"}, "maxPods": 110}},
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
        # The CRD's defaults written out: the API server fills them in before Karpenter reads.
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


def test_the_lists_name_every_field_of_karpenters_spec() -> None:
    # Hashed: the Go spec's fields (less those tagged hash:"ignore") and the kubelet text.
    go_fields = {field.json_name for field in EC2NODECLASS_SPEC.fields}
    assert set(EC2_HASHED_FIELDS) == go_fields | {"kubelet"}
    assert not set(EC2_HASHED_FIELDS) & set(EC2_IGNORED_FIELDS)


def test_the_hash_is_annotated_under_karpenters_names_and_version() -> None:
    annotations = ec2nodeclass_hash(node_class()).annotations()
    assert annotations == {
        EC2NODECLASS_HASH_ANNOTATION: BASE_HASH,
        EC2NODECLASS_HASH_VERSION_ANNOTATION: EC2NODECLASS_HASH_VERSION,
    }
    assert EC2NODECLASS_HASH_ANNOTATION == "karpenter.k8s.aws/ec2nodeclass-hash"
    assert EC2NODECLASS_HASH_VERSION == GOLDEN["ec2NodeClassHashVersion"] == "v6"


GOLDEN_DATA = Path(__file__).parent.parent / "data" / "ec2nodeclass-hash"
GOLDEN = json.loads((GOLDEN_DATA / "hashes.json").read_text())
# Manifests whose class is the golden value of another: the API server fills in the CRD's
# metadataOptions defaults before Karpenter hashes (the Go program is given the manifest as is).
API_SERVER_DEFAULTED = {"no-metadata-options": "defaulted"}
# Manifests karpy refuses (fields it does not act on, a volume size Karpenter's CRD refuses too).
REFUSED = {"aws-only-fields", "volume-size-1024mi"}


def golden_manifest(name: str) -> str:
    manifest = yaml.safe_load((GOLDEN_DATA / f"{name}.yaml").read_text())
    manifest.update(apiVersion="karpenter.k8s.aws/v1", kind="EC2NodeClass")
    return yaml.safe_dump(manifest)


def golden_class(name: str) -> EC2NodeClass:
    parsed = parse_object(golden_manifest(name))
    assert isinstance(parsed, EC2NodeClass)
    return parsed


@pytest.mark.parametrize("name", sorted(set(GOLDEN["hashes"]) - REFUSED))
def test_a_class_hashes_to_what_karpenters_go_code_prints(name: str) -> None:
    expected = GOLDEN["hashes"][API_SERVER_DEFAULTED.get(name, name)]
    assert ec2nodeclass_hash(golden_class(name)).value == expected


@pytest.mark.parametrize("name", sorted(set(GOLDEN["hashesWithCABundle"]) - REFUSED))
def test_with_a_cluster_ca_bundle_the_hash_is_karpenters_too(name: str) -> None:
    expected = GOLDEN["hashesWithCABundle"][API_SERVER_DEFAULTED.get(name, name)]
    assert ec2nodeclass_hash(golden_class(name), ca_bundle=GOLDEN["caBundle"]).value == expected


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_the_golden_manifests_karpy_refuses_are_refused(name: str) -> None:
    assert parse_manifests(golden_manifest(name), "golden.yaml").errors


def test_a_class_changed_since_it_was_read_hashes_as_it_is_now() -> None:
    read = node_class()
    changed = dataclasses.replace(read, user_data="#!/bin/bash\necho fixed join\n")
    assert ec2nodeclass_hash(changed) == ec2nodeclass_hash(node_class(userData=changed.user_data))
    # Built in code (nothing read): its fields written out as Karpenter's JSON, where a false
    # detailedMonitoring is not written.
    built = dataclasses.replace(read, written_spec="")
    assert ec2nodeclass_hash(built) == ec2nodeclass_hash(node_class(detailedMonitoring=None))


def test_a_kwok_class_hash_follows_its_instance_type_catalog() -> None:
    aws, karpenter = kwoknodeclass_hash("aws"), kwoknodeclass_hash("karpenter")
    assert aws.value != karpenter.value
    assert aws == kwoknodeclass_hash("aws")
    assert aws.annotation == KWOKNODECLASS_HASH_ANNOTATION
