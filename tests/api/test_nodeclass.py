"""Node classes: EC2NodeClass v1 requirements, v1beta1 amiFamily conversion, KWOKNodeClass."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
import yaml

from karpy.api._reader import FieldReader, ManifestError
from karpy.api.manifest import parse_manifests
from karpy.api.nodeclass import (
    EC2_GROUP,
    EC2_KIND,
    KWOK_GROUP,
    KWOK_KIND,
    EC2NodeClass,
    KubeletConfiguration,
    KWOKNodeClass,
    SelectorTerm,
    convert_v1beta1,
)

V1 = f"{EC2_GROUP}/v1"
V1BETA1 = f"{EC2_GROUP}/v1beta1"

EC2 = """
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  role: KarpenterNodeRole-demo
  amiSelectorTerms:
  - alias: al2023@latest
  subnetSelectorTerms:
  - tags: {karpenter.sh/discovery: demo}
  - id: subnet-0123
  securityGroupSelectorTerms:
  - name: nodes
  tags:
    team: platform
"""

DELETE = object()


def document(fields: Mapping[str, object] | None = None) -> dict[str, Any]:
    """The EC2NodeClass above with each ``spec`` field in ``fields`` set (or deleted)."""
    loaded = yaml.safe_load(EC2)
    assert isinstance(loaded, dict)
    for key, value in (fields or {}).items():
        if value is DELETE:
            loaded["spec"].pop(key, None)
        else:
            loaded["spec"][key] = value
    return loaded


def ec2(fields: Mapping[str, object] | None = None, api_version: str = V1) -> EC2NodeClass:
    return EC2NodeClass.parse(FieldReader(document(fields)), api_version)


def ec2_error(fields: Mapping[str, object], api_version: str = V1) -> str:
    with pytest.raises(ManifestError) as raised:
        ec2(fields, api_version)
    return str(raised.value)


def test_v1_ec2nodeclass_reads_selector_terms_role_and_tags() -> None:
    node_class = ec2()
    assert node_class.name == "default"
    assert node_class.metadata.namespace == ""
    assert node_class.ami_selector_terms == (SelectorTerm(alias="al2023@latest"),)
    assert node_class.subnet_selector_terms == (
        SelectorTerm(tags={"karpenter.sh/discovery": "demo"}),
        SelectorTerm(id="subnet-0123"),
    )
    assert node_class.security_group_selector_terms == (SelectorTerm(name="nodes"),)
    assert node_class.role == "KarpenterNodeRole-demo"
    assert node_class.instance_profile == ""
    assert node_class.tags == {"team": "platform"}
    assert node_class.kubelet == KubeletConfiguration()
    assert node_class.converted_from == ""
    assert (node_class.kind, node_class.group) == (EC2_KIND, EC2_GROUP)


def test_instance_profile_may_replace_the_role() -> None:
    node_class = ec2({"role": DELETE, "instanceProfile": "KarpenterNodeInstanceProfile"})
    assert (node_class.role, node_class.instance_profile) == ("", "KarpenterNodeInstanceProfile")


def test_kubelet_settings_are_read_on_the_v1_node_class() -> None:
    node_class = ec2(
        {
            "kubelet": {
                "maxPods": 58,
                "podsPerCore": 4,
                "kubeReserved": {"cpu": "100m", "memory": "512Mi"},
                "systemReserved": {"cpu": "50m"},
                "evictionHard": {"memory.available": "5%"},
            }
        }
    )
    assert node_class.kubelet == KubeletConfiguration(
        max_pods=58,
        pods_per_core=4,
        kube_reserved={"cpu": 100, "memory": 512 * 1024**2},
        system_reserved={"cpu": 50},
        eviction_hard={"memory.available": "5%"},
    )


AMI_REQUIRED = "spec.amiSelectorTerms: required (for example [{alias: al2023@latest}])"
ONE_OF_ROLE = "spec.role: exactly one of role and instanceProfile is required"


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        pytest.param({"amiSelectorTerms": DELETE}, AMI_REQUIRED, id="no AMI selector"),
        pytest.param({"amiSelectorTerms": []}, AMI_REQUIRED, id="empty AMI selector"),
        pytest.param(
            {"amiSelectorTerms": DELETE, "amiFamily": "AL2023"}, AMI_REQUIRED, id="amiFamily alone in v1"
        ),
        pytest.param({"subnetSelectorTerms": DELETE}, "spec.subnetSelectorTerms: required", id="no subnets"),
        pytest.param({"subnetSelectorTerms": []}, "spec.subnetSelectorTerms: required", id="empty subnets"),
        pytest.param(
            {"securityGroupSelectorTerms": DELETE},
            "spec.securityGroupSelectorTerms: required",
            id="no security groups",
        ),
        pytest.param({"role": DELETE}, ONE_OF_ROLE, id="neither role nor instance profile"),
        pytest.param({"instanceProfile": "profile"}, ONE_OF_ROLE, id="both role and instance profile"),
        pytest.param(
            {"subnetSelectorTerms": [{"id": "subnet-1"}, {}]},
            "spec.subnetSelectorTerms[1]: expected at least one, got none, ['tags', 'id']",
            id="empty selector term",
        ),
        pytest.param(
            {"securityGroupSelectorTerms": [{"owner": "123456789012"}]},
            "spec.securityGroupSelectorTerms[0]: expected at least one, got none, ['tags', 'id', 'name']",
            id="selector term with only an owner",
        ),
        # Karpenter's CRD rules, refused offline with the CRD's words (tests/integration/test_crds.py
        # sends the same objects to the API server).
        pytest.param(
            {"subnetSelectorTerms": [{"id": "subnet-1", "tags": {"team": "a"}}]},
            "spec.subnetSelectorTerms[0]: 'id' is mutually exclusive, cannot be set with a combination of "
            "other fields in a subnet selector term",
            id="subnet id with tags",
        ),
        pytest.param(
            {"securityGroupSelectorTerms": [{"name": "web", "tags": {"team": "a"}}]},
            "spec.securityGroupSelectorTerms[0]: 'name' is mutually exclusive, cannot be set with a "
            "combination of other fields in a security group selector term",
            id="security group name with tags",
        ),
        pytest.param(
            {"amiFamily": "AL2023", "amiSelectorTerms": [{"id": "ami-1", "owner": "self"}]},
            "spec.amiSelectorTerms[0]: 'id' is mutually exclusive, cannot be set with a combination of "
            "other fields in amiSelectorTerms",
            id="AMI id with an owner",
        ),
        pytest.param(
            {"subnetSelectorTerms": [{"tags": {"team": ""}}]},
            "spec.subnetSelectorTerms[0].tags: empty tag keys or values aren't supported",
            id="selector tag without a value",
        ),
        pytest.param(
            {"amiSelectorTerms": [{"alias": "al2023"}]},
            "spec.amiSelectorTerms[0].alias: 'alias' is improperly formatted, must match the format "
            "'family@version'",
            id="alias without a version",
        ),
        pytest.param(
            {"amiSelectorTerms": [{"alias": "ubuntu@latest"}]},
            "spec.amiSelectorTerms[0].alias: family is not supported, must be one of the following: "
            "'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022'",
            id="alias of an unknown family",
        ),
        pytest.param(
            {"amiSelectorTerms": [{"alias": "windows2022@v20240101"}]},
            "spec.amiSelectorTerms[0].alias: windows families may only specify version 'latest'",
            id="pinned windows alias",
        ),
        pytest.param(
            {"amiSelectorTerms": [{"alias": "al2023@latest"}, {"tags": {"team": "a"}}]},
            "spec.amiSelectorTerms: 'alias' is mutually exclusive, cannot be set with a combination of "
            "other amiSelectorTerms",
            id="alias with another term",
        ),
        pytest.param(
            {"amiFamily": "AL2", "amiSelectorTerms": [{"alias": "al2023@latest"}]},
            "spec.amiFamily: if set, amiFamily must be 'AL2023' or 'Custom' when using an AL2023 alias",
            id="amiFamily other than the alias'",
        ),
        pytest.param(
            {"amiSelectorTerms": [{"tags": {"team": "a"}}]},
            "spec.amiFamily: must specify amiFamily if amiSelectorTerms does not contain an alias",
            id="no alias and no amiFamily",
        ),
        pytest.param(
            {"tags": {"kubernetes.io/cluster/demo": "owned"}},
            "spec.tags: tag contains a restricted tag matching kubernetes.io/cluster/",
            id="cluster tag",
        ),
        pytest.param(
            {"tags": {"karpenter.sh/nodeclaim": "a"}},
            "spec.tags: tag contains a restricted tag matching karpenter.sh/nodeclaim",
            id="nodeclaim tag",
        ),
        pytest.param(
            {"kubelet": {"kubeReserved": {"nvidia.com/gpu": "1"}}},
            "spec.kubelet.kubeReserved: valid keys for kubeReserved are "
            "['cpu', 'memory', 'ephemeral-storage', 'pid']",
            id="kubeReserved of a GPU",
        ),
        pytest.param(
            {"kubelet": {"evictionHard": {"memory.free": "5%"}}},
            "spec.kubelet.evictionHard: valid keys for evictionHard are ['memory.available', "
            "'nodefs.available', 'nodefs.inodesFree', 'imagefs.available', 'imagefs.inodesFree', "
            "'pid.available']",
            id="unknown eviction signal",
        ),
        pytest.param(
            {"kubelet": {"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 50}},
            "spec.kubelet.imageGCHighThresholdPercent: imageGCHighThresholdPercent must be greater than "
            "imageGCLowThresholdPercent",
            id="image GC thresholds equal",
        ),
        pytest.param(
            {"kubelet": {"evictionSoft": {"memory.available": "1Gi"}}},
            "spec.kubelet.evictionSoft: evictionSoft OwnerKey does not have a matching "
            "evictionSoftGracePeriod",
            id="soft eviction without a grace period",
        ),
        pytest.param(
            {"subnetSelectorTerms": [{"id": "sn-0abc"}]},
            "spec.subnetSelectorTerms[0].id: should match 'subnet-[0-9a-z]+', got 'sn-0abc'",
            id="malformed subnet id",
        ),
        pytest.param(
            {"metadataOptions": {"httpPutResponseHopLimit": 65}},
            "spec.metadataOptions.httpPutResponseHopLimit: must be between 1 and 64, got 65",
            id="hop limit over 64",
        ),
        pytest.param(
            {"metadataOptions": {"httpTokens": "always"}},
            "spec.metadataOptions.httpTokens: must be one of required, optional, got 'always'",
            id="unknown httpTokens",
        ),
        pytest.param(
            {
                "blockDeviceMappings": [
                    {"deviceName": "/dev/xvda", "rootVolume": True, "ebs": {"volumeSize": "20Gi"}},
                    {"deviceName": "/dev/xvdb", "rootVolume": True, "ebs": {"volumeSize": "20Gi"}},
                ]
            },
            "spec.blockDeviceMappings: must have only one blockDeviceMappings with rootVolume",
            id="two root volumes",
        ),
        pytest.param(
            {"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeType": "gp3"}}]},
            "spec.blockDeviceMappings[0].ebs: snapshotID or volumeSize must be defined",
            id="volume with neither size nor snapshot",
        ),
        pytest.param(
            {"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "100Mi"}}]},
            "spec.blockDeviceMappings[0].ebs.volumeSize: must be a size in Gi, G, Ti or T up to 64T, "
            "got '100Mi'",
            id="volume size in Mi",
        ),
        pytest.param(
            {
                "blockDeviceMappings": [
                    {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "1Gi", "volumeType": "gp4"}}
                ]
            },
            "spec.blockDeviceMappings[0].ebs.volumeType: must be one of standard, io1, io2, gp2, sc1, st1, "
            "gp3, got 'gp4'",
            id="unknown volume type",
        ),
        pytest.param(
            {"kubelet": {"evictionSoftGracePeriod": {"memory.available": "1m"}}},
            "spec.kubelet.evictionSoftGracePeriod: evictionSoftGracePeriod OwnerKey does not have a matching "
            "evictionSoft",
            id="grace period without a soft eviction",
        ),
        pytest.param(
            {"subnetSelectorTerms": "subnet-1"},
            "spec.subnetSelectorTerms: expected a list, got string",
            id="selector terms not a list",
        ),
        pytest.param(
            {"kubelet": {"maxPods": -1}}, "spec.kubelet.maxPods: must not be negative", id="negative maxPods"
        ),
        pytest.param(
            {"kubelet": {"kubeReserved": {"cpu": "-100m"}}},
            'spec.kubelet.kubeReserved.cpu: quantity "-100m" must not be negative',
            id="negative kubeReserved",
        ),
    ],
)
def test_invalid_v1_ec2nodeclass_is_rejected_at_its_field(fields: dict[str, object], error: str) -> None:
    assert ec2_error(fields) == error


@pytest.mark.parametrize(
    ("family", "alias"),
    [
        ("AL2", "al2@latest"),
        ("AL2023", "al2023@latest"),
        ("Bottlerocket", "bottlerocket@latest"),
        ("Windows2019", "windows2019@latest"),
        ("Windows2022", "windows2022@latest"),
    ],
)
def test_v1beta1_ami_family_becomes_an_alias_selector_term(family: str, alias: str) -> None:
    node_class = ec2({"amiSelectorTerms": DELETE, "amiFamily": family}, V1BETA1)
    assert node_class.ami_selector_terms == (SelectorTerm(alias=alias),)
    assert node_class.converted_from == V1BETA1


def test_v1beta1_ubuntu_with_its_ami_terms_becomes_al2_and_is_noted() -> None:
    # Karpenter v1 has no Ubuntu family (its CRD refuses it); AL2's user data has the same format.
    terms = [{"name": "ubuntu-eks/k8s_1.30/*"}]
    conversion = convert_v1beta1(FieldReader(document({"amiSelectorTerms": terms, "amiFamily": "Ubuntu"})))
    spec = conversion.mapping["spec"]
    assert isinstance(spec, dict)
    assert spec["amiFamily"] == "AL2" and spec["amiSelectorTerms"] == terms
    assert conversion.notes == [
        "spec.amiFamily: Ubuntu is not a v1 AMI family; became AL2, whose user data has the same format"
    ]


def test_v1beta1_ami_selector_terms_win_over_the_family() -> None:
    node_class = ec2({"amiSelectorTerms": [{"id": "ami-0123"}], "amiFamily": "Custom"}, V1BETA1)
    assert node_class.ami_selector_terms == (SelectorTerm(id="ami-0123"),)


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        (
            {"amiSelectorTerms": DELETE},
            "spec.amiFamily: required when amiSelectorTerms is empty",
        ),
        (
            {"amiSelectorTerms": DELETE, "amiFamily": "Gentoo"},
            "spec.amiFamily: unknown AMI family 'Gentoo'",
        ),
        (
            {"amiSelectorTerms": DELETE, "amiFamily": "Ubuntu"},
            "spec.amiFamily: Karpenter v1 has no Ubuntu AMI family: select the Ubuntu AMIs with"
            " amiSelectorTerms (by name, tags or id) and keep amiFamily Ubuntu, which becomes AL2",
        ),
        ({"subnetSelectorTerms": DELETE}, "spec.subnetSelectorTerms: required"),
    ],
)
def test_invalid_v1beta1_ec2nodeclass_is_rejected_at_its_field(fields: dict[str, object], error: str) -> None:
    assert ec2_error(fields, V1BETA1) == error


def test_v1beta1_ec2nodeclass_is_converted_when_loaded_from_a_manifest() -> None:
    text = yaml.safe_dump(
        {**document({"amiSelectorTerms": DELETE, "amiFamily": "AL2"}), "apiVersion": V1BETA1}
    )
    result = parse_manifests(text, "class.yaml")
    assert result.errors == []
    assert result.notes == [
        f'class.yaml: EC2NodeClass "default": converted from {V1BETA1} to v1',
        'class.yaml: EC2NodeClass "default": spec.amiFamily: AL2 with no amiSelectorTerms became'
        ' amiSelectorTerms: [{"alias": "al2@latest"}]',
    ]
    (loaded,) = result.objects
    assert isinstance(loaded.obj, EC2NodeClass)
    assert loaded.obj.ami_selector_terms == (SelectorTerm(alias="al2@latest"),)


def test_kwoknodeclass_has_only_metadata() -> None:
    node_class = KWOKNodeClass.parse(FieldReader({"metadata": {"name": "default"}, "spec": {}}))
    assert node_class.name == "default"
    assert node_class.metadata.namespace == ""
    assert (node_class.kind, node_class.group) == (KWOK_KIND, KWOK_GROUP)


def test_kwoknodeclass_loads_from_its_api_group() -> None:
    result = parse_manifests(
        "apiVersion: karpenter.kwok.sh/v1alpha1\nkind: KWOKNodeClass\nmetadata: {name: default}\n",
        "kwok.yaml",
    )
    assert result.errors == []
    (loaded,) = result.objects
    assert isinstance(loaded.obj, KWOKNodeClass)
    assert (loaded.kind, loaded.name) == (KWOK_KIND, "default")


def test_kwoknodeclass_needs_a_name() -> None:
    with pytest.raises(ManifestError) as raised:
        KWOKNodeClass.parse(FieldReader({"metadata": {}}))
    assert str(raised.value) == "metadata.name: required"


def test_launch_fields_are_read_with_karpenters_defaults() -> None:
    plain = ec2()
    assert plain.metadata_options.http_tokens == "required"
    assert plain.metadata_options.http_put_response_hop_limit == 1
    assert plain.block_device_mappings == ()
    assert plain.associate_public_ip_address is None
    node_class = ec2(
        {
            "amiFamily": "Custom",
            "userData": "#!/bin/bash\necho hi\n",
            "metadataOptions": {"httpTokens": "optional", "httpPutResponseHopLimit": 2},
            "blockDeviceMappings": [
                {
                    "deviceName": "/dev/xvda",
                    "rootVolume": True,
                    "ebs": {"volumeSize": "40Gi", "volumeType": "gp3", "encrypted": True, "iops": 4000},
                }
            ],
            "associatePublicIPAddress": False,
            "detailedMonitoring": True,
        }
    )
    assert node_class.effective_ami_family == "Custom"
    assert node_class.user_data == "#!/bin/bash\necho hi\n"
    assert node_class.metadata_options.http_tokens == "optional"
    assert node_class.metadata_options.http_put_response_hop_limit == 2
    assert node_class.metadata_options.http_endpoint == "enabled"
    (device,) = node_class.block_device_mappings
    assert (device.device_name, device.root_volume, device.volume_size, device.volume_type) == (
        "/dev/xvda",
        True,
        "40Gi",
        "gp3",
    )
    assert (device.encrypted, device.iops, device.delete_on_termination) == (True, 4000, None)
    assert node_class.associate_public_ip_address is False
    assert node_class.detailed_monitoring is True


@pytest.mark.parametrize(
    ("terms", "family", "expected"),
    [
        ([{"alias": "al2023@latest"}], "", "AL2023"),
        ([{"alias": "bottlerocket@v1.20.0"}], "", "Bottlerocket"),
        ([{"alias": "al2@latest"}], "", "AL2"),
        ([{"tags": {"team": "nodes"}}], "AL2023", "AL2023"),
        ([{"tags": {"team": "nodes"}}], "Custom", "Custom"),
        ([{"alias": "al2023@latest"}], "Custom", "Custom"),
    ],
)
def test_the_effective_ami_family_comes_from_the_family_or_the_alias(
    terms: list[dict[str, object]], family: str, expected: str
) -> None:
    fields: dict[str, object] = {"amiSelectorTerms": terms}
    if family:
        fields["amiFamily"] = family
    assert ec2(fields).effective_ami_family == expected


def test_the_resolved_status_is_read() -> None:
    loaded = document()
    loaded["status"] = {
        "subnets": [{"id": "subnet-1", "zone": "us-east-1a", "zoneID": "use1-az1"}],
        "securityGroups": [{"id": "sg-1", "name": "nodes"}],
        "amis": [
            {
                "id": "ami-1",
                "name": "node",
                "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
            }
        ],
        "instanceProfile": "my-k3s_abc",
    }
    status = EC2NodeClass.parse(FieldReader(loaded), V1).status
    assert [(subnet.id, subnet.zone, subnet.zone_id) for subnet in status.subnets] == [
        ("subnet-1", "us-east-1a", "use1-az1")
    ]
    assert [(group.id, group.name) for group in status.security_groups] == [("sg-1", "nodes")]
    (ami,) = status.amis
    assert (ami.id, ami.deprecated) == ("ami-1", False)
    assert ami.requirements == ({"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},)
    assert status.instance_profile == "my-k3s_abc"
