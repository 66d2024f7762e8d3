"""EC2NodeClass resolution against the seeded account, through the real SDK over HTTP.

Each test writes an EC2NodeClass as a user would, resolves it with the
client karpy builds from the environment, and checks the status Karpenter
would write: what each selector picks, which AMI wins, and which condition
names the selector that matched nothing.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from tests.cloud.aws.conftest import (
    CLUSTER,
    DISCOVERY_TAG,
    KUBERNETES_VERSION,
    NODE_INSTANCE_PROFILE,
    NODE_ROLE,
    REGION,
    SSM_PREFIX,
    AwsWorld,
)

from karpy.api._reader import FieldReader
from karpy.api.conditions import find_condition
from karpy.api.nodeclass import EC2NodeClass
from karpy.cloud.aws.client import AwsApiError, AwsClient
from karpy.cloud.aws.resolution import (
    CONDITION_AMIS_READY,
    CONDITION_INSTANCE_PROFILE_READY,
    CONDITION_SECURITY_GROUPS_READY,
    CONDITION_SUBNETS_READY,
    NodeClassResolution,
    ResolutionSettings,
    instance_profile_name,
    resolve_node_class,
)

SETTINGS = ResolutionSettings(CLUSTER, REGION, KUBERNETES_VERSION, SSM_PREFIX)
DISCOVERY = {"tags": {DISCOVERY_TAG: CLUSTER}}


def node_class(name: str = "default", **spec: Any) -> EC2NodeClass:
    document = {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": name},
        "spec": {
            "role": NODE_ROLE,
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [DISCOVERY],
            "securityGroupSelectorTerms": [DISCOVERY],
            **spec,
        },
    }
    return EC2NodeClass.parse(FieldReader(document), "karpenter.k8s.aws/v1")


def resolve(cls: EC2NodeClass, settings: ResolutionSettings = SETTINGS) -> NodeClassResolution:
    return resolve_node_class(cls, AwsClient.for_region(REGION), settings, time.time())


def condition(resolution: NodeClassResolution, kind: str) -> tuple[str, str, str]:
    found = find_condition(resolution.conditions, kind)
    assert found is not None, kind
    return found.status, found.reason, found.message


def test_the_getting_started_class_resolves_to_discovered_subnets_groups_al2023_and_a_profile(
    aws: AwsWorld,
) -> None:
    resolution = resolve(node_class())
    assert resolution.ready
    status = resolution.status()
    subnets = status["subnets"]
    assert isinstance(subnets, list)
    assert {s["zone"]: s["id"] for s in subnets} == aws.subnet_ids
    assert all(s["zoneID"] for s in subnets)
    assert status["securityGroups"] == [{"id": aws.security_group_id, "name": "my-k3s-node"}]
    amis = status["amis"]
    assert isinstance(amis, list)
    arch = "kubernetes.io/arch"
    assert {ami["id"]: ami["requirements"][0] for ami in amis} == {
        aws.al2023_x86: {"key": arch, "operator": "In", "values": ["amd64"]},
        aws.al2023_arm64: {"key": arch, "operator": "In", "values": ["arm64"]},
    }
    # The standard variant serves no GPU or accelerator types, as Karpenter's requirements say.
    assert {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "DoesNotExist"} in amis[0][
        "requirements"
    ]
    assert status["instanceProfile"] == instance_profile_name(CLUSTER, REGION, "default")
    ready = condition(resolution, "Ready")
    assert ready[0] == "True"


def test_a_role_gets_a_tagged_profile_holding_it_created_once(aws: AwsWorld) -> None:
    first = resolve(node_class("profiled"))
    again = resolve(node_class("profiled"))
    assert (
        first.instance_profile == again.instance_profile == instance_profile_name(CLUSTER, REGION, "profiled")
    )
    profile = boto3.client("iam").get_instance_profile(InstanceProfileName=first.instance_profile)[
        "InstanceProfile"
    ]
    assert [role["RoleName"] for role in profile["Roles"]] == [NODE_ROLE]
    tags = {tag["Key"]: tag["Value"] for tag in profile.get("Tags", [])}
    assert tags["karpenter.k8s.aws/ec2nodeclass"] == "profiled"
    assert tags["karpenter.sh/managed-by"] == CLUSTER


def test_an_instance_profile_is_used_as_given_and_a_missing_one_is_named(aws: AwsWorld) -> None:
    given = resolve(node_class(role=None, instanceProfile=NODE_INSTANCE_PROFILE))
    assert given.instance_profile == NODE_INSTANCE_PROFILE
    assert condition(given, CONDITION_INSTANCE_PROFILE_READY)[0] == "True"
    missing = resolve(node_class(role=None, instanceProfile="no-such-profile"))
    assert condition(missing, CONDITION_INSTANCE_PROFILE_READY) == (
        "False",
        "InstanceProfileNotFound",
        "instanceProfile no-such-profile does not exist",
    )
    assert not missing.ready


def test_a_wildcard_tag_value_matches_any_value_and_ids_select_exactly(aws: AwsWorld) -> None:
    wildcard = resolve(node_class(subnetSelectorTerms=[{"tags": {DISCOVERY_TAG: "*"}}]))
    assert {s.id for s in wildcard.subnets} == set(aws.subnet_ids.values())
    by_id = resolve(
        node_class(
            subnetSelectorTerms=[{"id": aws.untagged_subnet_id}],
            securityGroupSelectorTerms=[{"id": aws.untagged_security_group_id}],
        )
    )
    assert [s.id for s in by_id.subnets] == [aws.untagged_subnet_id]
    assert [g.id for g in by_id.security_groups] == [aws.untagged_security_group_id]


def test_terms_are_ored_and_a_term_matching_nothing_beside_one_that_matches_is_fine(aws: AwsWorld) -> None:
    resolution = resolve(
        node_class(
            securityGroupSelectorTerms=[{"name": "bastion"}, {"tags": {"no-such-tag": "x"}}, DISCOVERY],
        )
    )
    assert {g.name for g in resolution.security_groups} == {"bastion", "my-k3s-node"}
    assert condition(resolution, CONDITION_SECURITY_GROUPS_READY)[0] == "True"


def test_a_subnet_selector_matching_nothing_names_itself_and_makes_the_class_unready(aws: AwsWorld) -> None:
    resolution = resolve(node_class(subnetSelectorTerms=[{"tags": {DISCOVERY_TAG: "other-cluster"}}]))
    assert condition(resolution, CONDITION_SUBNETS_READY) == (
        "False",
        "SubnetsNotFound",
        "SubnetSelector did not match any Subnets:"
        " subnetSelectorTerms [{tags: {karpenter.sh/discovery: other-cluster}}]",
    )
    assert condition(resolution, "Ready") == ("False", "UnhealthyDependents", "SubnetsReady=False")
    assert resolution.subnets == ()
    assert "subnets" not in resolution.status()
    # The rest still resolves, so the status shows what is right as well as what is not.
    assert condition(resolution, CONDITION_AMIS_READY)[0] == "True"


def test_a_security_group_selector_matching_nothing_names_itself(aws: AwsWorld) -> None:
    resolution = resolve(node_class(securityGroupSelectorTerms=[{"name": "no-such-group"}]))
    assert condition(resolution, CONDITION_SECURITY_GROUPS_READY) == (
        "False",
        "SecurityGroupsNotFound",
        "SecurityGroupSelector did not match any SecurityGroups:"
        " securityGroupSelectorTerms [{name: no-such-group}]",
    )


def test_tagged_amis_resolve_to_the_newest_per_architecture(aws: AwsWorld) -> None:
    resolution = resolve(node_class(amiFamily="Custom", amiSelectorTerms=[{"tags": {"team": "nodes"}}]))
    assert {ami.id for ami in resolution.amis} == {aws.ami_new_x86, aws.ami_arm64}
    by_name = resolve(node_class(amiFamily="Custom", amiSelectorTerms=[{"name": "my-k3s-node-x86_64-*"}]))
    assert [ami.id for ami in by_name.amis] == [aws.ami_new_x86]
    by_id = resolve(node_class(amiFamily="Custom", amiSelectorTerms=[{"id": aws.ami_old_x86}]))
    assert [(ami.id, ami.name) for ami in by_id.amis] == [(aws.ami_old_x86, "my-k3s-node-x86_64-v20260101")]


def test_an_owner_restricts_a_name_term(aws: AwsWorld) -> None:
    theirs = resolve(
        node_class(amiFamily="Custom", amiSelectorTerms=[{"name": "my-k3s-node-*", "owner": "999999999999"}])
    )
    assert theirs.amis == ()
    mine = resolve(
        node_class(amiFamily="Custom", amiSelectorTerms=[{"name": "my-k3s-node-*", "owner": "self"}])
    )
    assert {ami.id for ami in mine.amis} == {aws.ami_new_x86, aws.ami_arm64}


def test_an_alias_without_its_ssm_parameters_names_the_parameters_read(aws: AwsWorld) -> None:
    # The real /aws/service prefix: nothing is seeded there, as a wrong prefix setting would find.
    resolution = resolve(node_class(), ResolutionSettings(CLUSTER, REGION, KUBERNETES_VERSION, ""))
    status, reason, message = condition(resolution, CONDITION_AMIS_READY)
    assert (status, reason) == ("False", "AMINotFound")
    assert message.startswith(
        "AMISelector did not match any AMIs: alias al2023@latest: no SSM parameter found ("
    )
    assert (
        "/aws/service/eks/optimized-ami/1.37/amazon-linux-2023/x86_64/standard/recommended/image_id"
        in message
    )


def test_an_unknown_alias_family_is_named(aws: AwsWorld) -> None:
    resolution = resolve(node_class(amiSelectorTerms=[{"alias": "windows2022@latest"}]))
    assert condition(resolution, CONDITION_AMIS_READY)[:2] == ("False", "AMINotFound")
    assert "windows2022@latest" in condition(resolution, CONDITION_AMIS_READY)[2]


def test_an_unreachable_endpoint_is_a_retryable_error_not_an_unready_class(
    aws: AwsWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    with pytest.raises(AwsApiError) as raised:
        resolve(node_class())
    assert raised.value.retryable


def test_a_role_that_does_not_exist_is_aws_own_refusal_on_the_profile_condition(aws: AwsWorld) -> None:
    resolution = resolve(node_class("no-role", role="NoSuchRole"))
    status, reason, message = condition(resolution, CONDITION_INSTANCE_PROFILE_READY)
    assert (status, reason) == ("False", "NoSuchEntity")
    assert "NoSuchRole" in message
    assert resolution.instance_profile == ""
    assert condition(resolution, "Ready") == ("False", "UnhealthyDependents", "InstanceProfileReady=False")


def test_the_example_class_of_docs_aws_md_resolves_ready(aws: AwsWorld) -> None:
    page = (Path(__file__).resolve().parents[3] / "docs" / "aws.md").read_text()
    example = re.search(r"```yaml\n(.*?)```", page, re.DOTALL)
    assert example is not None
    document = yaml.safe_load(example.group(1))
    resolution = resolve(EC2NodeClass.parse(FieldReader(document), document["apiVersion"]))
    assert resolution.ready, resolution.conditions
