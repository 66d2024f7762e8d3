"""Two local AWS worlds, one after the other, in one test process.

moto keeps its accounts in the process, not in the server, so the integration modules that each
start a world (``test_aws``, ``test_aws_reservations``) would find the previous module's account
when they land on the same worker: its SSM parameter made the second seed fail with
ParameterAlreadyExists, and its tagged images and subnets would double what selectors find. Each
world resets moto as it stops. An integration test because the unit tests share one session-scoped world
(``tests/cloud/aws/conftest.py``), which no other world may meet.
"""

from __future__ import annotations

import boto3
import pytest
from tests.aws.world import REGION, moto_world, sdk_environment

pytestmark = pytest.mark.integration


def test_a_world_started_after_another_is_seeded_from_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    with moto_world() as first:
        first_vpc = first.vpc_id
    with moto_world() as second:
        for name, value in sdk_environment(second.endpoint).items():
            monkeypatch.setenv(name, value)
        ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=second.endpoint)
        vpcs = {vpc["VpcId"] for vpc in ec2.describe_vpcs()["Vpcs"]}
        assert first_vpc not in vpcs
        assert second.vpc_id in vpcs
