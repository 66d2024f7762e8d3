"""The seeded test endpoint is the account it claims to be, seen through the SDK as karpy sees it.

Every client here is built with no endpoint, region or credentials of its own:
what reaches moto is what the environment the fixture sets gives botocore,
which is the only way karpy is pointed at an endpoint.
"""

from __future__ import annotations

import boto3
from mypy_boto3_ec2.type_defs import FilterTypeDef
from tests.cloud.aws.conftest import (
    CLUSTER,
    DISCOVERY_TAG,
    NODE_INSTANCE_PROFILE,
    NODE_ROLE,
    QUEUE,
    ZONES,
    AwsWorld,
)

DISCOVERY_FILTER: list[FilterTypeDef] = [{"Name": f"tag:{DISCOVERY_TAG}", "Values": [CLUSTER]}]


def test_the_sdk_reaches_the_endpoint_from_the_environment_alone(aws: AwsWorld) -> None:
    ec2 = boto3.client("ec2")
    assert ec2.meta.endpoint_url == aws.endpoint
    assert ec2.meta.region_name == "us-east-1"
    assert ec2.describe_vpcs(VpcIds=[aws.vpc_id])["Vpcs"][0]["CidrBlock"] == "10.0.0.0/16"


def test_discovery_tags_select_one_subnet_per_zone_and_one_security_group(aws: AwsWorld) -> None:
    ec2 = boto3.client("ec2")
    subnets = ec2.describe_subnets(Filters=DISCOVERY_FILTER)["Subnets"]
    assert {subnet["AvailabilityZone"]: subnet["SubnetId"] for subnet in subnets} == aws.subnet_ids
    assert sorted(aws.subnet_ids) == list(ZONES)
    assert all(subnet["VpcId"] == aws.vpc_id and subnet["AvailabilityZoneId"] for subnet in subnets)
    all_subnets = {subnet["SubnetId"] for subnet in ec2.describe_subnets()["Subnets"]}
    assert aws.untagged_subnet_id in all_subnets

    groups = ec2.describe_security_groups(Filters=DISCOVERY_FILTER)["SecurityGroups"]
    assert [group["GroupId"] for group in groups] == [aws.security_group_id]
    assert groups[0]["GroupName"] == "my-k3s-node"


def test_own_images_have_architectures_tags_and_ordered_creation_dates(aws: AwsWorld) -> None:
    ec2 = boto3.client("ec2")
    images = {
        image["ImageId"]: image
        for image in ec2.describe_images(
            Owners=["self"], Filters=[{"Name": "tag:team", "Values": ["nodes"]}]
        )["Images"]
    }
    assert set(images) == {aws.ami_old_x86, aws.ami_new_x86, aws.ami_arm64}
    assert images[aws.ami_old_x86]["Architecture"] == "x86_64"
    assert images[aws.ami_arm64]["Architecture"] == "arm64"
    assert images[aws.ami_old_x86]["CreationDate"] < images[aws.ami_new_x86]["CreationDate"]


def test_al2023_parameters_name_images_of_their_architecture(aws: AwsWorld) -> None:
    ssm, ec2 = boto3.client("ssm"), boto3.client("ec2")
    for architecture, expected in (("x86_64", aws.al2023_x86), ("arm64", aws.al2023_arm64)):
        image_id = ssm.get_parameter(Name=aws.ssm_name(architecture))["Parameter"]["Value"]
        assert image_id == expected
        (image,) = ec2.describe_images(ImageIds=[image_id])["Images"]
        assert image["Architecture"] == architecture
        assert image["Name"].startswith(f"amazon-eks-node-al2023-{architecture}-standard-")


def test_node_role_instance_profile_and_interruption_queue_exist(aws: AwsWorld) -> None:
    profile = boto3.client("iam").get_instance_profile(InstanceProfileName=NODE_INSTANCE_PROFILE)
    assert [role["RoleName"] for role in profile["InstanceProfile"]["Roles"]] == [NODE_ROLE]
    assert boto3.client("sqs").get_queue_url(QueueName=QUEUE)["QueueUrl"].endswith(f"/{QUEUE}")
