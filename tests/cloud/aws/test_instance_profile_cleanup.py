"""The instance profiles karpy made for EC2NodeClasses go with their classes, and nothing else does.

Each test resolves classes with ``role`` against the seeded account (so the
profiles are the ones resolution really creates), deletes classes from an
in-memory cluster, runs the cleanup pass and reads IAM back through the SDK.
Every test uses a cluster name of its own, so the profiles of the session's
other tests (cluster ``my-k3s``) double as another cluster's profiles.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import boto3
import pytest
from tests.cloud.aws.conftest import (
    KUBERNETES_VERSION,
    NODE_INSTANCE_PROFILE,
    NODE_ROLE,
    REGION,
    SSM_PREFIX,
    AwsWorld,
)
from tests.cloud.aws.test_nodeclass_resolution import node_class

from karpy.api.nodeclass import EC2NodeClass
from karpy.cloud.aws.client import AwsApiError, AwsClient, InstanceProfile
from karpy.cloud.aws.launchtemplates import CLEANUP_INTERVAL, PROFILE_RETRY_INTERVAL, InstanceProfileCleanup
from karpy.cloud.aws.resolution import ResolutionSettings, instance_profile_name, resolve_node_class
from karpy.cloud.aws.settings import AwsSettings
from karpy.sim.clock import VirtualClock
from karpy.sim.store import InMemoryCluster


class RefusingClient(AwsClient):
    """The real client, except that IAM refuses the calls named in ``refused``, as a narrower policy would."""

    refused: frozenset[str] = frozenset()

    def _refuse(self, action: str) -> None:
        if action in self.refused:
            raise AwsApiError("AccessDenied", f"not authorized to perform: iam:{action}", retryable=False)

    def instance_profiles(self, name_prefix: str) -> list[InstanceProfile]:
        self._refuse("ListInstanceProfiles")
        return super().instance_profiles(name_prefix)

    def delete_instance_profile(self, profile: InstanceProfile) -> None:
        self._refuse("DeleteInstanceProfile")
        super().delete_instance_profile(profile)


class World:
    """A cluster of its own name: its classes, its cleanup, and IAM as the SDK reads it."""

    def __init__(self, cluster_name: str | None = None) -> None:
        self.cluster_name = cluster_name or f"cleanup-{uuid.uuid4().hex[:8]}"
        self.cluster = InMemoryCluster(VirtualClock(start=time.time()))
        self.client = RefusingClient.for_region(REGION)
        self.cleanup = InstanceProfileCleanup(
            self.cluster, self.client, AwsSettings(cluster_name=self.cluster_name, region=REGION)
        )
        self.iam: Any = boto3.client("iam")

    def add_class(self, name: str, **spec: Any) -> EC2NodeClass:
        """The class, created in the cluster and resolved (which makes its profile, for a ``role``)."""
        created = self.cluster.create(node_class(name, **spec))
        assert isinstance(created, EC2NodeClass)
        settings = ResolutionSettings(self.cluster_name, REGION, KUBERNETES_VERSION, SSM_PREFIX)
        resolve_node_class(created, self.client, settings, time.time())
        return created

    def profile(self, class_name: str) -> str:
        return instance_profile_name(self.cluster_name, REGION, class_name)

    def roles_of(self, profile: str) -> list[str] | None:
        """The profile's roles, or None when IAM has no such profile."""
        try:
            found = self.iam.get_instance_profile(InstanceProfileName=profile)["InstanceProfile"]
        except self.iam.exceptions.NoSuchEntityException:
            return None
        return [role["RoleName"] for role in found["Roles"]]


@pytest.fixture
def world(aws: AwsWorld) -> World:
    return World()


def test_the_profile_of_a_deleted_class_is_detached_and_deleted(world: World) -> None:
    gone = world.add_class("gone")
    world.add_class("kept")
    assert world.roles_of(world.profile("gone")) == [NODE_ROLE]

    [watch] = world.cleanup.watches()
    assert list(watch.mapper(gone, None)) == [InstanceProfileCleanup.KEY]  # a class deleted
    assert list(watch.mapper(gone, gone)) == []  # a class changed
    world.cluster.delete(gone)

    assert world.cleanup.reconcile(InstanceProfileCleanup.KEY) == CLEANUP_INTERVAL
    assert world.roles_of(world.profile("gone")) is None
    assert world.roles_of(world.profile("kept")) == [NODE_ROLE]
    # The role itself is IAM's to keep: only its link to the profile went.
    assert world.iam.get_role(RoleName=NODE_ROLE)["Role"]["RoleName"] == NODE_ROLE


def test_another_clusters_profiles_and_a_users_own_profile_are_untouched(world: World) -> None:
    other = World()
    other.add_class("shared-name")
    same_name_elsewhere = World(world.cluster_name)
    same_name_elsewhere.cleanup.settings = AwsSettings(cluster_name=world.cluster_name, region="eu-west-1")
    mine = world.add_class("shared-name")
    world.add_class("given", role=None, instanceProfile=NODE_INSTANCE_PROFILE)
    world.cluster.delete(mine)
    world.cluster.delete(world.cluster.node_class("karpenter.k8s.aws", "EC2NodeClass", "given"))

    # A cluster of the same name in another region does not take this region's profiles.
    assert same_name_elsewhere.cleanup.reconcile(InstanceProfileCleanup.KEY) == CLEANUP_INTERVAL
    assert world.roles_of(world.profile("shared-name")) == [NODE_ROLE]

    assert world.cleanup.reconcile(InstanceProfileCleanup.KEY) == CLEANUP_INTERVAL
    assert world.roles_of(world.profile("shared-name")) is None
    assert world.roles_of(other.profile("shared-name")) == [NODE_ROLE]
    assert world.roles_of(NODE_INSTANCE_PROFILE) == [NODE_ROLE]


def test_a_profile_is_kept_while_its_class_has_live_instances(world: World, aws: AwsWorld) -> None:
    busy = world.add_class("busy")
    ec2: Any = boto3.client("ec2")
    owned = {"Key": f"kubernetes.io/cluster/{world.cluster_name}", "Value": "owned"}
    [instance] = ec2.run_instances(
        ImageId=aws.ami_new_x86,
        InstanceType="c5.large",
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[
            {
                "ResourceType": "instance",
                "Tags": [owned, {"Key": "karpenter.k8s.aws/ec2nodeclass", "Value": "busy"}],
            }
        ],
    )["Instances"]
    world.cluster.delete(busy)

    assert world.cleanup.reconcile(InstanceProfileCleanup.KEY) == PROFILE_RETRY_INTERVAL
    assert world.roles_of(world.profile("busy")) == [NODE_ROLE]

    ec2.terminate_instances(InstanceIds=[instance["InstanceId"]])
    assert world.cleanup.reconcile(InstanceProfileCleanup.KEY) == CLEANUP_INTERVAL
    assert world.roles_of(world.profile("busy")) is None


def test_a_refused_iam_call_is_logged_and_retried_without_failing_the_pass(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    world.cluster.delete(world.add_class("refused"))
    assert isinstance(world.client, RefusingClient)

    world.client.refused = frozenset({"ListInstanceProfiles"})
    assert world.cleanup.reconcile(InstanceProfileCleanup.KEY) == PROFILE_RETRY_INTERVAL
    world.client.refused = frozenset({"DeleteInstanceProfile"})
    assert world.cleanup.reconcile(InstanceProfileCleanup.KEY) == PROFILE_RETRY_INTERVAL
    assert world.roles_of(world.profile("refused")) == [NODE_ROLE]
    assert "iam:DeleteInstanceProfile" in caplog.text

    world.client.refused = frozenset()
    assert world.cleanup.reconcile(InstanceProfileCleanup.KEY) == CLEANUP_INTERVAL
    assert world.roles_of(world.profile("refused")) is None


def test_a_profile_deleted_meanwhile_is_no_error(world: World) -> None:
    world.add_class("raced")
    [listed] = world.client.instance_profiles(world.cluster_name)
    assert listed.roles == (NODE_ROLE,)
    world.client.delete_instance_profile(listed)
    assert world.roles_of(listed.name) is None
    world.client.delete_instance_profile(listed)  # deleted by another process between its listing and now
