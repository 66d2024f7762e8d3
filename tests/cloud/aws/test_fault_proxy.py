"""The fault proxy itself, against moto with the real SDK: what it forwards, refuses, throttles, delays."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from tests.aws.fault_proxy import FaultProxy
from tests.aws.world import AwsWorld

NO_RETRIES = Config(retries={"mode": "standard", "total_max_attempts": 1})


@pytest.fixture
def proxy(aws: AwsWorld) -> Iterator[FaultProxy]:
    proxy = FaultProxy(aws.endpoint).start()
    yield proxy
    proxy.stop()


def _ec2(proxy: FaultProxy, config: Config | None = None) -> Any:
    return boto3.Session().client("ec2", endpoint_url=proxy.url, config=config)


def _template(ec2: Any, aws: AwsWorld) -> str:
    name = f"proxy-test-{time.monotonic_ns()}"
    ec2.create_launch_template(LaunchTemplateName=name, LaunchTemplateData={"ImageId": aws.ami_new_x86})
    return name


def _fleet(ec2: Any, aws: AwsWorld, template: str, capacity_type: str, nodeclaim: str) -> dict[str, Any]:
    overrides = [
        {"InstanceType": instance_type, "SubnetId": aws.subnet_ids[zone], "AvailabilityZone": zone}
        for instance_type in ("c5.large", "m5.large")
        for zone in ("us-east-1a", "us-east-1b")
    ]
    response: dict[str, Any] = ec2.create_fleet(
        Type="instant",
        LaunchTemplateConfigs=[
            {
                "LaunchTemplateSpecification": {"LaunchTemplateName": template, "Version": "$Latest"},
                "Overrides": overrides,
            }
        ],
        TargetCapacitySpecification={"TotalTargetCapacity": 1, "DefaultTargetCapacityType": capacity_type},
        TagSpecifications=[
            {"ResourceType": "instance", "Tags": [{"Key": "karpenter.sh/nodeclaim", "Value": nodeclaim}]}
        ],
    )
    return response


def test_requests_pass_through_unchanged_and_are_logged(proxy: FaultProxy, aws: AwsWorld) -> None:
    ec2 = _ec2(proxy)
    subnets = ec2.describe_subnets(SubnetIds=[aws.subnet_ids["us-east-1a"]])["Subnets"]
    assert subnets[0]["AvailabilityZone"] == "us-east-1a"
    response = _fleet(ec2, aws, _template(ec2, aws), "on-demand", "claim-a")
    assert response.get("Errors", []) == []
    assert response["Instances"][0]["InstanceType"] == "c5.large"
    assert proxy.fleets_per_nodeclaim() == {"claim-a": 1}
    assert proxy.count("DescribeSubnets") == 1


def test_refused_offerings_become_an_error_set_and_the_rest_is_forwarded(
    proxy: FaultProxy, aws: AwsWorld
) -> None:
    ec2 = _ec2(proxy)
    template = _template(ec2, aws)
    proxy.refuse_capacity("c5.large", "*", "spot")
    response = _fleet(ec2, aws, template, "spot", "claim-b")
    errors = {
        (error["LaunchTemplateAndOverrides"]["Overrides"]["InstanceType"],
         error["LaunchTemplateAndOverrides"]["Overrides"]["AvailabilityZone"],
         error["ErrorCode"], error["Lifecycle"])
        for error in response["Errors"]
    }  # fmt: skip
    assert errors == {
        ("c5.large", "us-east-1a", "InsufficientInstanceCapacity", "spot"),
        ("c5.large", "us-east-1b", "InsufficientInstanceCapacity", "spot"),
    }
    # moto launched the first override left: an m5.large.
    assert response["Instances"][0]["InstanceType"] == "m5.large"
    # The same offerings in on-demand are not refused.
    assert _fleet(ec2, aws, template, "on-demand", "claim-c").get("Errors", []) == []


def test_nothing_left_is_answered_with_only_the_error_set(proxy: FaultProxy, aws: AwsWorld) -> None:
    ec2 = _ec2(proxy)
    template = _template(ec2, aws)
    proxy.refuse_capacity(capacity_type="spot", code="MaxSpotInstanceCountExceeded")
    before = len(ec2.describe_instances()["Reservations"])
    response = _fleet(ec2, aws, template, "spot", "claim-d")
    assert response.get("Instances", []) == []
    assert len(response["Errors"]) == 4
    assert {error["ErrorCode"] for error in response["Errors"]} == {"MaxSpotInstanceCountExceeded"}
    assert len(ec2.describe_instances()["Reservations"]) == before  # nothing reached moto


def test_throttling_answers_503_request_limit_exceeded_for_the_first_calls(
    proxy: FaultProxy, aws: AwsWorld
) -> None:
    ec2 = _ec2(proxy, NO_RETRIES)
    proxy.throttle("DescribeSubnets", first=2)
    for _ in range(2):
        with pytest.raises(ClientError) as raised:
            ec2.describe_subnets()
        assert raised.value.response["Error"]["Code"] == "RequestLimitExceeded"
        assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    assert ec2.describe_subnets()["Subnets"]
    # With the SDK's standard retries the throttled calls are retried and succeed.
    proxy.throttle("DescribeVpcs", first=2)
    assert _ec2(proxy, Config(retries={"mode": "standard", "max_attempts": 5})).describe_vpcs()["Vpcs"]
    assert proxy.count("DescribeVpcs") == 3


def test_latency_is_added_per_action(proxy: FaultProxy, aws: AwsWorld) -> None:
    ec2 = _ec2(proxy)
    proxy.delay("DescribeSubnets", 0.5)
    started = time.monotonic()
    ec2.describe_subnets()
    assert time.monotonic() - started >= 0.5
    started = time.monotonic()
    ec2.describe_vpcs()
    assert time.monotonic() - started < 0.5


def test_throttling_at_a_rate_refuses_calls_beyond_it(proxy: FaultProxy, aws: AwsWorld) -> None:
    ec2 = _ec2(proxy, NO_RETRIES)
    proxy.throttle("DescribeVpcs", per_second=1)
    assert ec2.describe_vpcs()["Vpcs"]
    with pytest.raises(ClientError) as raised:
        ec2.describe_vpcs()
    assert raised.value.response["Error"]["Code"] == "RequestLimitExceeded"
    time.sleep(1.1)
    assert ec2.describe_vpcs()["Vpcs"]
