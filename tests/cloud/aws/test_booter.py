"""The instance booter against moto: instances launched with the K3s recipe's user data become Nodes.

No control plane: the booter's Node writes go to lists (its seam), and its
clock is the test's, so boot delays pass without sleeping. Each test uses a
cluster name of its own: the moto world is shared by the session, and the
booter must only see the instances a test launched.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from mypy_boto3_ec2.client import EC2Client
from tests.aws.booter import InstanceBooter
from tests.aws.world import REGION, ZONES, AwsWorld
from tests.cloud.aws.test_k3s_join import example_user_data

from karpy.api.requirements import LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_INSTANCE_TYPE, LABEL_ZONE
from karpy.api.taints import UNREGISTERED_TAINT_KEY
from karpy.cloud.kwok.fake_kubelet import FAKE_NODE_ANNOTATION, FAKE_NODE_VALUE

BOOT_DELAY = 30.0
JSON = dict[str, Any]


class Recorder:
    """The booter's seam: what it would create and delete on the API server."""

    def __init__(self) -> None:
        self.created: list[JSON] = []
        self.deleted: list[str] = []
        self.changed = threading.Event()

    def create(self, body: JSON) -> None:
        self.created.append(body)
        self.changed.set()

    def delete(self, name: str) -> None:
        self.deleted.append(name)
        self.changed.set()


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def ec2(aws: AwsWorld) -> EC2Client:
    return boto3.session.Session(region_name=REGION).client("ec2", endpoint_url=aws.endpoint)


@pytest.fixture
def cluster() -> str:
    return f"booter-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def launched(ec2: EC2Client) -> Iterator[list[str]]:
    """Instances a test launches; terminated at its end so the shared world holds none running."""
    ids: list[str] = []
    yield ids
    if ids:
        ec2.terminate_instances(InstanceIds=ids)


def launch(
    ec2: EC2Client,
    aws: AwsWorld,
    ids: list[str],
    cluster: str,
    user_data: str,
    *,
    instance_type: str = "m5.large",
    zone: str = ZONES[1],
    tags: dict[str, str] | None = None,
) -> str:
    if tags is None:
        tags = {f"kubernetes.io/cluster/{cluster}": "owned", "karpenter.sh/nodepool": "default"}
    answer = ec2.run_instances(
        ImageId=aws.ami_new_x86,
        InstanceType=instance_type,  # type: ignore[arg-type]
        MinCount=1,
        MaxCount=1,
        SubnetId=aws.subnet_ids[zone],
        UserData=user_data,
        TagSpecifications=[
            {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
        ],
    )
    instance_id = answer["Instances"][0]["InstanceId"]
    ids.append(instance_id)
    return instance_id


def booter(aws: AwsWorld, cluster: str, recorder: Recorder, clock: Clock, **kwargs: Any) -> InstanceBooter:
    return InstanceBooter(
        aws.endpoint,
        REGION,
        None,
        cluster,
        BOOT_DELAY,
        create_node=recorder.create,
        delete_node=recorder.delete,
        clock=clock,
        **kwargs,
    )


def test_an_instance_joining_k3s_becomes_a_node_after_the_boot_delay(
    aws: AwsWorld, ec2: EC2Client, cluster: str, launched: list[str]
) -> None:
    recorder, clock = Recorder(), Clock()
    instance_id = launch(ec2, aws, launched, cluster, example_user_data())
    instance = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    launch_time = instance["LaunchTime"].timestamp()
    subject = booter(aws, cluster, recorder, clock)

    clock.now = launch_time + BOOT_DELAY - 1
    subject.poll_once()
    assert recorder.created == [] and subject.errors == {}

    clock.now = launch_time + BOOT_DELAY
    subject.poll_once()
    (body,) = recorder.created
    assert subject.registered == {instance_id: clock.now}
    assert body["spec"]["providerID"] == f"aws:///{ZONES[1]}/{instance_id}"
    name = instance["PrivateDnsName"]
    assert name and body["metadata"]["name"] == name
    labels = body["metadata"]["labels"]
    assert labels[LABEL_HOSTNAME] == name
    assert labels[LABEL_INSTANCE_TYPE] == "m5.large"
    assert labels[LABEL_ZONE] == ZONES[1]
    assert labels["topology.kubernetes.io/region"] == REGION
    assert labels["karpenter.k8s.aws/instance-family"] == "m5"
    assert LABEL_CAPACITY_TYPE not in labels
    assert body["metadata"]["annotations"] == {FAKE_NODE_ANNOTATION: FAKE_NODE_VALUE}
    assert body["spec"]["taints"] == [{"key": UNREGISTERED_TAINT_KEY, "effect": "NoExecute"}]
    assert body["status"]["capacity"]["cpu"] == "2"
    assert body["status"]["capacity"]["pods"] == "29"
    assert set(body["status"]["allocatable"]) == {"cpu", "memory", "ephemeral-storage", "pods"}

    subject.poll_once()
    assert len(recorder.created) == 1  # registered once

    ec2.terminate_instances(InstanceIds=[instance_id])
    subject.poll_once()
    assert recorder.deleted == [name]
    assert subject.nodes == {}


@pytest.mark.parametrize(
    ("user_data", "message"),
    [
        (example_user_data().replace('K3S_TOKEN="$TOKEN"', "K3S_TOKEN=K10secret"), "literal K3S_TOKEN"),
        (
            example_user_data().replace(" --node-taint karpenter.sh/unregistered:NoExecute", ""),
            "unregistered",
        ),
        ("", "no user data"),
    ],
)
def test_an_instance_whose_user_data_does_not_join_never_registers(
    aws: AwsWorld, ec2: EC2Client, cluster: str, launched: list[str], user_data: str, message: str
) -> None:
    recorder, clock = Recorder(), Clock()
    instance_id = launch(ec2, aws, launched, cluster, user_data)
    subject = booter(aws, cluster, recorder, clock)
    clock.now += 10 * BOOT_DELAY
    subject.poll_once()
    subject.poll_once()
    assert message in subject.errors[instance_id]
    assert recorder.created == [] and subject.registered == {}


def test_instances_of_other_clusters_and_untagged_ones_are_not_booted(
    aws: AwsWorld, ec2: EC2Client, cluster: str, launched: list[str]
) -> None:
    recorder, clock = Recorder(), Clock()
    launch(
        ec2, aws, launched, cluster, example_user_data(), tags={f"kubernetes.io/cluster/{cluster}": "owned"}
    )
    launch(
        ec2,
        aws,
        launched,
        cluster,
        example_user_data(),
        tags={"kubernetes.io/cluster/someone-else": "owned", "karpenter.sh/nodepool": "default"},
    )
    subject = booter(aws, cluster, recorder, clock)
    clock.now += 10 * BOOT_DELAY
    subject.poll_once()
    assert recorder.created == [] and subject.errors == {}


def test_the_node_is_named_after_the_instance_id_when_the_script_says_so(
    aws: AwsWorld, ec2: EC2Client, cluster: str, launched: list[str]
) -> None:
    recorder, clock = Recorder(), Clock()
    script = example_user_data().replace('--node-name "$NODE_NAME"', '--node-name "$INSTANCE_ID"')
    instance_id = launch(ec2, aws, launched, cluster, script, instance_type="c5.xlarge", zone=ZONES[2])
    subject = booter(aws, cluster, recorder, clock)
    clock.now += 10 * BOOT_DELAY
    subject.poll_once()
    (body,) = recorder.created
    assert body["metadata"]["name"] == instance_id
    assert body["metadata"]["labels"][LABEL_INSTANCE_TYPE] == "c5.xlarge"
    assert body["spec"]["providerID"] == f"aws:///{ZONES[2]}/{instance_id}"


def test_the_thread_registers_and_stops(
    aws: AwsWorld, ec2: EC2Client, cluster: str, launched: list[str]
) -> None:
    recorder = Recorder()
    instance_id = launch(ec2, aws, launched, cluster, example_user_data())
    subject = InstanceBooter(
        aws.endpoint,
        REGION,
        None,
        cluster,
        0.0,
        create_node=recorder.create,
        delete_node=recorder.delete,
        poll_interval=0.1,
    )
    subject.start()
    try:
        assert recorder.changed.wait(timeout=20)
    finally:
        subject.stop()
    assert list(subject.registered) == [instance_id]
    created = len(recorder.created)
    ec2.terminate_instances(InstanceIds=[instance_id])
    for _ in itertools.repeat(None, 3):
        time.sleep(0.1)
    assert recorder.deleted == [] and len(recorder.created) == created  # stopped: nothing more happens
