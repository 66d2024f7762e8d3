"""The AWS provider's drift against moto: the class hash on launch, and each reason Karpenter names.

Instances are launched through the real SDK (tests/cloud/aws/test_launch.py's
harness); the class is then changed in the in-memory cluster as a user would
change it, and ``is_drifted`` is asked as the disruption conditions
controller asks it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from tests.aws.fault_proxy import FaultProxy
from tests.aws.world import AwsWorld
from tests.cloud.aws.test_launch import Harness

from karpy.api.nodeclaim import NodeClaim
from karpy.api.nodeclass import EC2NodeClass, StatusSecurityGroup
from karpy.api.nodeclass_hash import EC2NODECLASS_HASH_ANNOTATION, ec2nodeclass_hash
from karpy.disruption.nodeclass_drift import NODECLASS_DRIFT, SECURITY_GROUP_DRIFT, SUBNET_DRIFT


@pytest.fixture
def harness(aws: AwsWorld, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    proxy = FaultProxy(aws.endpoint).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
    harness = Harness(aws, proxy)
    yield harness
    harness.provider.close()
    proxy.stop()


def change_class(harness: Harness, **changes: object) -> EC2NodeClass:
    current = harness.cluster.node_class("karpenter.k8s.aws", "EC2NodeClass", "default")
    assert isinstance(current, EC2NodeClass)
    changed = harness.cluster.update(dataclasses.replace(current, **changes))  # type: ignore[arg-type]
    assert isinstance(changed, EC2NodeClass)
    return changed


def launched(harness: Harness, suffix: str) -> NodeClaim:
    claim = harness.nodeclaim(suffix, types=("c5.large",))
    result = harness.launch(claim)
    return claim.with_metadata(
        labels={**claim.metadata.labels, **result.metadata.labels},
        annotations={**claim.metadata.annotations, **result.metadata.annotations},
    ).with_status(provider_id=result.status.provider_id, image_id=result.status.image_id)


def test_a_launch_carries_the_class_hash_and_a_static_change_is_nodeclass_drift(harness: Harness) -> None:
    claim = launched(harness, "static")
    expected = ec2nodeclass_hash(harness.node_class, harness.settings.cluster_ca_bundle)
    assert expected.annotations().items() <= claim.metadata.annotations.items()
    assert harness.provider.is_drifted(claim) == ""  # its network is the class' too

    change_class(harness, user_data="#!/bin/bash\necho joining my-k3s, fixed\n")
    assert harness.provider.is_drifted(claim) == NODECLASS_DRIFT
    # Launched before the hash existed: not drifted by its absence.
    unannotated = claim.with_metadata(
        annotations={k: v for k, v in claim.metadata.annotations.items() if k != EC2NODECLASS_HASH_ANNOTATION}
    )
    assert harness.provider.is_drifted(unannotated) == ""


def test_the_instances_security_groups_and_subnet_are_read_from_ec2_and_compared(harness: Harness) -> None:
    claim = launched(harness, "network")
    original = harness.node_class
    other_group = StatusSecurityGroup(id="sg-0fffffffffffffff0", name="hardened")
    change_class(harness, status=dataclasses.replace(original.status, security_groups=(other_group,)))
    assert harness.provider.is_drifted(claim) == SECURITY_GROUP_DRIFT

    zone = claim.zone
    elsewhere = tuple(subnet for subnet in original.status.subnets if subnet.zone != zone)
    assert elsewhere and len(elsewhere) < len(original.status.subnets)
    change_class(harness, status=dataclasses.replace(original.status, subnets=elsewhere))
    assert harness.provider.is_drifted(claim) == SUBNET_DRIFT

    change_class(harness, status=original.status)
    assert harness.provider.is_drifted(claim) == ""
