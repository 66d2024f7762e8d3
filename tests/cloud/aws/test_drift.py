"""The AWS provider's drift against moto: the class hash on launch, and each reason Karpenter names.

Instances are launched through the real SDK (tests/cloud/aws/test_launch.py's
harness); the class is then changed in the in-memory cluster as a user would
change it, and ``is_drifted`` is asked as the disruption conditions
controller asks it. The simulator's cloud, on the same cluster, is asked the
same: both decide by one rule and one hash, Karpenter's (the golden values in
tests/data/ec2nodeclass-hash are what its Go code prints for those classes).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.aws.fault_proxy import FaultProxy
from tests.aws.world import AwsWorld
from tests.cloud.aws.test_launch import Harness, node_class_manifest
from tests.support import parse_object

from karpy.api.nodeclaim import NodeClaim
from karpy.api.nodeclass import EC2NodeClass, StatusSecurityGroup
from karpy.api.nodeclass_hash import (
    EC2NODECLASS_HASH_ANNOTATION,
    EC2NODECLASS_HASH_VERSION_ANNOTATION,
    ec2nodeclass_hash,
)
from karpy.disruption.nodeclass_drift import NODECLASS_DRIFT, SECURITY_GROUP_DRIFT, SUBNET_DRIFT
from karpy.sim.cloud import SimulatedCloud

GOLDEN_DATA = Path(__file__).parents[2] / "data" / "ec2nodeclass-hash"
GOLDEN = json.loads((GOLDEN_DATA / "hashes.json").read_text())
# What karpy refuses (fields it does not act on; a volume size Karpenter's CRD refuses too), and
# the class the API server makes of one before Karpenter hashes it (the CRD's metadataOptions).
GOLDEN_REFUSED = {"aws-only-fields", "volume-size-1024mi"}
GOLDEN_DEFAULTED = {"no-metadata-options": "defaulted"}


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


def with_spec(harness: Harness, spec: dict[str, Any]) -> EC2NodeClass:
    """The harness' class with ``spec`` in place of its own, read as a user's manifest is, and stored."""
    manifest = yaml.safe_load(node_class_manifest(harness.aws))
    manifest["spec"] = spec
    parsed = parse_object(yaml.safe_dump(manifest))
    current = harness.cluster.node_class("karpenter.k8s.aws", "EC2NodeClass", "default")
    assert isinstance(parsed, EC2NodeClass) and current is not None
    stored = harness.cluster.update(dataclasses.replace(parsed, metadata=current.metadata))
    assert isinstance(stored, EC2NodeClass)
    return stored


def annotated(claim: NodeClaim, value: str, version: str = GOLDEN["ec2NodeClassHashVersion"]) -> NodeClaim:
    return claim.with_metadata(
        annotations={
            **claim.metadata.annotations,
            EC2NODECLASS_HASH_ANNOTATION: value,
            EC2NODECLASS_HASH_VERSION_ANNOTATION: version,
        }
    )


def test_a_nodeclaim_carrying_karpenters_hash_of_its_class_is_not_drifted(harness: Harness) -> None:
    claim = launched(harness, "golden")
    simulated = SimulatedCloud(harness.cluster, harness.clock)
    wrong: dict[str, object] = {}
    for name in sorted(set(GOLDEN["hashes"]) - GOLDEN_REFUSED):
        spec = yaml.safe_load((GOLDEN_DATA / f"{name}.yaml").read_text())["spec"]
        with_spec(harness, spec)
        karpenters = GOLDEN["hashes"][GOLDEN_DEFAULTED.get(name, name)]
        # Launched by Karpenter from this class: the same class, the same nodes.
        if (found := harness.provider.is_drifted(annotated(claim, karpenters))) != "":
            wrong[f"{name}: AWS"] = found
        # Launched from another class: Karpenter's hash of it differs, and so is karpy's.
        other = next(value for value in GOLDEN["hashes"].values() if value != karpenters)
        if (found := harness.provider.is_drifted(annotated(claim, other))) != NODECLASS_DRIFT:
            wrong[f"{name}: AWS, another class' hash"] = found
        # Of another hash version (an older karpy's, or none): re-annotated, never drifted.
        if (found := harness.provider.is_drifted(annotated(claim, other, "karpy-v1"))) != "":
            wrong[f"{name}: AWS, karpy-v1"] = found
        # The simulator annotates its launch with Karpenter's value, and drifts it as AWS does.
        launch = simulated.create(harness.nodeclaim(f"sim-{name}", types=("c5.large",)))
        if (written := launch.metadata.annotations.get(EC2NODECLASS_HASH_ANNOTATION)) != karpenters:
            wrong[f"{name}: simulated launch"] = written
        if (found := simulated.is_drifted(annotated(launch, other))) != NODECLASS_DRIFT:
            wrong[f"{name}: simulated, another class' hash"] = found
    assert not wrong


# Each change to the harness' class, and Karpenter's drift reason for it: every field Karpenter
# hashes drifts by NodeClassDrift; a field it ignores, or the same class written another way, by none.
SPEC_CHANGES: list[tuple[str, dict[str, Any], str]] = [
    ("userData", {"userData": "#!/bin/bash\necho joining my-k3s, fixed\n"}, NODECLASS_DRIFT),
    ("tags", {"tags": {"team": "nodes", "cost-center": "42"}}, NODECLASS_DRIFT),
    ("role", {"role": "KarpenterNodeRole-other"}, NODECLASS_DRIFT),
    ("instanceProfile", {"role": None, "instanceProfile": "KarpenterNodeInstanceProfile"}, NODECLASS_DRIFT),
    ("kubelet", {"kubelet": {"maxPods": 58}}, NODECLASS_DRIFT),
    (
        "blockDeviceMappings",
        {
            "blockDeviceMappings": [
                {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "50Gi", "volumeType": "gp3"}}
            ]
        },
        NODECLASS_DRIFT,
    ),
    ("metadataOptions", {"metadataOptions": {"httpPutResponseHopLimit": 2}}, NODECLASS_DRIFT),
    ("associatePublicIPAddress", {"associatePublicIPAddress": True}, NODECLASS_DRIFT),
    ("detailedMonitoring", {"detailedMonitoring": True}, NODECLASS_DRIFT),
    ("detailedMonitoring written false", {"detailedMonitoring": False}, NODECLASS_DRIFT),
    ("instanceStorePolicy", {"instanceStorePolicy": "RAID0"}, NODECLASS_DRIFT),
    ("amiFamily", {"amiFamily": "AL2"}, NODECLASS_DRIFT),
    # The CRD's defaults written out; an empty kubelet, which Karpenter hashes as an absent one.
    ("metadataOptions defaults written", {"metadataOptions": {"httpTokens": "required"}}, ""),
    ("kubelet empty", {"kubelet": {}}, ""),
]


def test_the_simulator_and_aws_drift_on_the_same_changes_for_the_same_reason(harness: Harness) -> None:
    original = yaml.safe_load(node_class_manifest(harness.aws))["spec"]
    simulated = SimulatedCloud(harness.cluster, harness.clock)
    on_aws = launched(harness, "agree")
    on_sim = simulated.create(harness.nodeclaim("sim-agree", types=("c5.large",)))
    assert harness.provider.is_drifted(on_aws) == simulated.is_drifted(on_sim) == ""
    decisions: dict[str, tuple[str, str, str]] = {}
    for name, changes, reason in SPEC_CHANGES:
        spec = {**original, **changes}
        with_spec(harness, {key: value for key, value in spec.items() if value is not None})
        decisions[name] = (reason, harness.provider.is_drifted(on_aws), simulated.is_drifted(on_sim))
        with_spec(harness, original)
    assert {name: (reason,) * 3 for name, (reason, _, _) in decisions.items()} == decisions
