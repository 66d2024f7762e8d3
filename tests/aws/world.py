"""A local AWS endpoint for the AWS provider's tests: moto in server mode, seeded as a user's account.

Used by the provider's tests (tests/cloud/aws) and by the control-plane tests
(tests/integration) alike; the pytest fixtures live in their conftest files.

karpy reaches AWS only through boto3, so the tests give it what a deployment
gives it: ``AWS_ENDPOINT_URL`` (honoured by botocore for every service),
``AWS_REGION`` and credentials in the environment. Behind the endpoint is moto
(``ThreadedMotoServer``) on 127.0.0.1 and a free port: real HTTP, the real SDK,
no test-only code path in karpy.

The world is seeded once per test session (starting and seeding take about 6 s on a
2-core machine, mostly moto building its regions and a 1 s wait between two
images' creation times) as the account of a K3s cluster ``my-k3s`` would look:

- a VPC with one subnet in each of three zones, tagged
  ``karpenter.sh/discovery: my-k3s``, and one untagged subnet that no
  discovery selector may pick up;
- a security group tagged the same, and one that is not;
- AMIs of the account's own, copied from moto's built-in images so they carry
  a real architecture: two generations of a tagged x86_64 image (the newer one
  must win) and an arm64 one;
- the SSM parameters Karpenter reads for the ``al2023`` alias, under
  :data:`SSM_PREFIX` because moto reserves the ``/aws/service/...`` names;
- an IAM role for the nodes with an instance profile holding it;
- the interruption queue ``my-k3s-karpy``.

moto 5.2 launches a fleet's instances without its launch template's
``SecurityGroupIds`` (it reads a ``GroupSet`` key EC2 does not have), so
every instance would be in the VPC's default group and drift
(``SecurityGroupDrift``) at once; :func:`fleets_use_template_security_groups`
gives them the template's groups, as EC2 does.

Tests share the world, so they treat it as read-only or make only changes that
are idempotent (an instance profile created for a role is created once and
found again). The environment is set per test through ``monkeypatch``, so no
other test sees the endpoint.
"""

from __future__ import annotations

import logging
import socket
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import boto3
from moto.ec2.models.fleets import FleetsBackend
from moto.server import ThreadedMotoServer
from mypy_boto3_ec2.type_defs import TagSpecificationTypeDef, TagTypeDef

CLUSTER = "my-k3s"
REGION = "us-east-1"
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
DISCOVERY_TAG = "karpenter.sh/discovery"
SSM_PREFIX = "/karpy-test"
KUBERNETES_VERSION = "1.37"
NODE_ROLE = "KarpenterNodeRole-my-k3s"
NODE_INSTANCE_PROFILE = "KarpenterNodeInstanceProfile-my-k3s"
QUEUE = "my-k3s-karpy"

# The environment a deployment gives karpy; credentials are moto's usual fakes.
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
}


@dataclass(frozen=True)
class AwsWorld:
    """What the seeded account holds, for tests to compare resolution against."""

    endpoint: str
    vpc_id: str
    subnet_ids: dict[str, str]  # zone -> discovery-tagged subnet
    untagged_subnet_id: str
    security_group_id: str
    untagged_security_group_id: str
    ami_old_x86: str
    ami_new_x86: str
    ami_arm64: str
    al2023_x86: str  # the image the al2023 SSM parameters name, per architecture
    al2023_arm64: str
    seconds_to_seed: float  # from starting the server to the world being seeded

    def ssm_name(self, architecture: str) -> str:
        return (
            f"{SSM_PREFIX}/aws/service/eks/optimized-ami/{KUBERNETES_VERSION}"
            f"/amazon-linux-2023/{architecture}/standard/recommended/image_id"
        )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _discovery() -> list[TagTypeDef]:
    return [{"Key": DISCOVERY_TAG, "Value": CLUSTER}]


def _tagged(resource_type: Literal["subnet", "security-group"], **tags: str) -> TagSpecificationTypeDef:
    """A resource's tags at creation: the cluster's discovery tag and ``tags``."""
    extra: list[TagTypeDef] = [{"Key": key, "Value": value} for key, value in tags.items()]
    return {"ResourceType": resource_type, "Tags": [*_discovery(), *extra]}


def seed(endpoint: str, started: float) -> AwsWorld:
    session = boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION)
    ec2 = session.client("ec2", endpoint_url=endpoint)
    ssm = session.client("ssm", endpoint_url=endpoint)
    iam = session.client("iam", endpoint_url=endpoint)
    sqs = session.client("sqs", endpoint_url=endpoint)

    vpc_id = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet_ids = {}
    for index, zone in enumerate(ZONES):
        subnet = ec2.create_subnet(
            VpcId=vpc_id,
            CidrBlock=f"10.0.{index * 32}.0/19",
            AvailabilityZone=zone,
            TagSpecifications=[
                {
                    "ResourceType": "subnet",
                    "Tags": [*_discovery(), {"Key": "Name", "Value": f"private-{zone}"}],
                }
            ],
        )
        subnet_ids[zone] = subnet["Subnet"]["SubnetId"]
    untagged = ec2.create_subnet(VpcId=vpc_id, CidrBlock="10.0.128.0/19", AvailabilityZone=ZONES[0])
    group = ec2.create_security_group(
        GroupName="my-k3s-node",
        Description="nodes of my-k3s",
        VpcId=vpc_id,
        TagSpecifications=[_tagged("security-group")],
    )
    other_group = ec2.create_security_group(GroupName="bastion", Description="not for nodes", VpcId=vpc_id)

    def builtin(architecture: str) -> str:
        images = ec2.describe_images(
            Owners=["amazon"], Filters=[{"Name": "architecture", "Values": [architecture]}]
        )["Images"]
        return sorted(image["ImageId"] for image in images)[0]

    def own_image(source: str, name: str, **tags: str) -> str:
        image_id = ec2.copy_image(SourceImageId=source, SourceRegion=REGION, Name=name)["ImageId"]
        ec2.create_tags(Resources=[image_id], Tags=[{"Key": k, "Value": v} for k, v in tags.items()])
        return image_id

    x86, arm64 = builtin("x86_64"), builtin("arm64")
    # Same tags, older then newer; the names also sort in age order, as Karpenter breaks
    # equal creation times by name.
    ami_old = own_image(x86, "my-k3s-node-x86_64-v20260101", team="nodes", generation="old")
    time.sleep(1.0)  # creation times have whole seconds: the newer one must be strictly newer
    ami_new = own_image(x86, "my-k3s-node-x86_64-v20260201", team="nodes", generation="new")
    ami_arm = own_image(arm64, "my-k3s-node-arm64-v20260201", team="nodes", generation="new")
    al2023_x86 = own_image(x86, f"amazon-eks-node-al2023-x86_64-standard-{KUBERNETES_VERSION}-v20260301")
    al2023_arm = own_image(arm64, f"amazon-eks-node-al2023-arm64-standard-{KUBERNETES_VERSION}-v20260301")

    world = AwsWorld(
        endpoint=endpoint,
        vpc_id=vpc_id,
        subnet_ids=subnet_ids,
        untagged_subnet_id=untagged["Subnet"]["SubnetId"],
        security_group_id=group["GroupId"],
        untagged_security_group_id=other_group["GroupId"],
        ami_old_x86=ami_old,
        ami_new_x86=ami_new,
        ami_arm64=ami_arm,
        al2023_x86=al2023_x86,
        al2023_arm64=al2023_arm,
        seconds_to_seed=0.0,
    )
    for architecture, image_id in (("x86_64", al2023_x86), ("arm64", al2023_arm)):
        ssm.put_parameter(Name=world.ssm_name(architecture), Value=image_id, Type="String")

    iam.create_role(
        RoleName=NODE_ROLE,
        AssumeRolePolicyDocument=(
            '{"Version":"2012-10-17","Statement":[{"Effect":"Allow",'
            '"Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}'
        ),
    )
    iam.create_instance_profile(InstanceProfileName=NODE_INSTANCE_PROFILE)
    iam.add_role_to_instance_profile(InstanceProfileName=NODE_INSTANCE_PROFILE, RoleName=NODE_ROLE)
    sqs.create_queue(QueueName=QUEUE)
    return AwsWorld(**{**world.__dict__, "seconds_to_seed": time.monotonic() - started})


def fleets_use_template_security_groups() -> None:
    """Make moto's CreateFleet put each instance in its launch template's security groups, as EC2 does."""
    if getattr(FleetsBackend.create_fleet, "uses_template_security_groups", False):
        return
    create_fleet = FleetsBackend.create_fleet

    def with_template_groups(self: Any, *args: Any, **kwargs: Any) -> Any:
        fleet = create_fleet(self, *args, **kwargs)
        launched = [(item["instance"], item["launch_spec"]) for item in fleet.on_demand_instances]
        launched += [(request.instance, request.launch_spec) for request in fleet.spot_requests]
        for instance, launch_spec in launched:
            template = launch_spec.launch_template_spec if launch_spec is not None else None
            if not template:
                continue
            data = (
                self.get_launch_template(template["LaunchTemplateId"]).get_version(template["Version"]).data
            )
            groups = data.get("SecurityGroupIds") or []
            if groups:
                self.modify_instance_security_groups(instance.id, list(groups))
        return fleet

    with_template_groups.uses_template_security_groups = True  # type: ignore[attr-defined]
    FleetsBackend.create_fleet = with_template_groups  # type: ignore[method-assign]


@contextmanager
def moto_world() -> Iterator[AwsWorld]:
    """moto on 127.0.0.1 and a free port, seeded; stopped on exit."""
    started = time.monotonic()
    # The server logs every request at INFO level: thousands of lines in a failed test's report.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    fleets_use_template_security_groups()
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        yield seed(endpoint, started)
    finally:
        # moto keeps its accounts in the process, not in the server: without a reset, the next world
        # of this process (the next module on the same test worker) would find this one's resources.
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")).close()
        server.stop()


def sdk_environment(endpoint: str) -> dict[str, str]:
    """The environment a deployment gives the SDK, pointed at ``endpoint`` and nothing else."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        # AWS_REGION is the setting karpy reads (as Karpenter does); botocore itself reads
        # AWS_DEFAULT_REGION, which a deployment's SDK environment sets too.
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        # No file of the machine's own AWS configuration may point the SDK elsewhere.
        "AWS_CONFIG_FILE": "/nonexistent/karpy-test/config",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/karpy-test/credentials",
        **CREDENTIALS,
    }
