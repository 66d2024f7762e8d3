"""The AWS provider's launch path against moto, through the fault proxy: real HTTP, the real SDK.

Each test drives :class:`AwsCloudProvider` as the NodeClaim lifecycle
controller does: ``create`` raises ``LaunchInProgressError``, the pool's
``wake`` says the launch is done, ``create`` again returns the NodeClaim (or
raises its error). The moto world is shared by the session, so each test
names its NodeClaims uniquely and looks only at its own instances.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import queue
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import boto3
import pytest
from tests.aws.fault_proxy import FaultProxy
from tests.aws.world import CLUSTER, NODE_INSTANCE_PROFILE, REGION, AwsWorld
from tests.support import parse_object

from karpy.api.instancetype import InstanceType
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import NodeClaim, NodeClaimSpec
from karpy.api.nodeclass import EC2NodeClass
from karpy.api.nodepool import NodeClassRef, NodePool
from karpy.api.requirements import (
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    LABEL_ZONE,
    Requirement,
)
from karpy.cloud.aws.client import AwsApiError, AwsClient, Ec2Instance, LaunchTemplate
from karpy.cloud.aws.fleet import FleetError, launch_failure_reason
from karpy.cloud.aws.launchtemplates import LaunchTemplateCleanup, launch_options
from karpy.cloud.aws.provider import AwsCloudProvider
from karpy.cloud.aws.settings import AwsSettings
from karpy.cloud.provider import (
    LAUNCH_FINISHED,
    CloudProviderError,
    InsufficientCapacityError,
    LaunchInProgressError,
    NodeClaimNotFoundError,
    NodeClassNotReadyError,
    NodeRebootFailedError,
)
from karpy.controllers.garbagecollection import INSTANCE_GRACE, INTERVAL, PASS_KEY, GarbageCollector
from karpy.controllers.nodeclaim import NodeClaimLifecycle
from karpy.operator.runtime import Runtime
from karpy.sim.clock import VirtualClock
from karpy.sim.store import InMemoryCluster

SEED_TYPES = ("c5.large", "c5.xlarge", "m5.large", "m5.xlarge")
USER_DATA = "#!/bin/bash\necho joining my-k3s\n"
WAIT = 60.0


def node_class_manifest(aws: AwsWorld, *, name: str = "default", ready: bool = True) -> str:
    subnets = "\n".join(
        f"  - {{id: {subnet}, zone: {zone}}}" for zone, subnet in sorted(aws.subnet_ids.items())
    )
    condition = (
        "{type: Ready, status: 'True', reason: Ready, lastTransitionTime: '2026-01-01T00:00:00Z'}"
        if ready
        else "{type: Ready, status: 'False', reason: SubnetsNotFound,"
        " message: 'SubnetSelector did not match', lastTransitionTime: '2026-01-01T00:00:00Z'}"
    )
    return f"""
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {{name: {name}}}
spec:
  role: KarpenterNodeRole-my-k3s
  amiFamily: Custom
  amiSelectorTerms: [{{tags: {{team: nodes}}}}]
  subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: my-k3s}}}}]
  securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: my-k3s}}}}]
  userData: {json.dumps(USER_DATA)}
  tags: {{team: nodes}}
status:
  subnets:
{subnets}
  securityGroups: [{{id: {aws.security_group_id}, name: my-k3s-node}}]
  amis:
  - id: {aws.ami_new_x86}
    name: my-k3s-node-x86_64-v20260201
    requirements: [{{key: kubernetes.io/arch, operator: In, values: [amd64]}}]
  - id: {aws.ami_arm64}
    name: my-k3s-node-arm64-v20260201
    requirements: [{{key: kubernetes.io/arch, operator: In, values: [arm64]}}]
  instanceProfile: {NODE_INSTANCE_PROFILE}
  conditions: [{condition}]
"""


def nodepool_for(class_name: str = "default") -> NodePool:
    nodepool = parse_object(f"""
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: default}}
spec:
  template:
    spec:
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: {class_name}}}
      requirements: []
""")
    assert isinstance(nodepool, NodePool)
    return nodepool


class RecordingClient(AwsClient):
    """The real client, remembering each NodeClaim's last CreateFleet request."""

    def __init__(self, session: boto3.Session) -> None:
        super().__init__(session)
        self.fleets: dict[str, Mapping[str, Any]] = {}

    def create_fleet(self, request: Mapping[str, Any]) -> dict[str, Any]:
        tags = {tag["Key"]: tag["Value"] for tag in request["TagSpecifications"][0]["Tags"]}
        self.fleets[tags["karpenter.sh/nodeclaim"]] = request
        return super().create_fleet(request)


class Harness:
    """A cluster holding the node class, the provider under test, and the wake-ups it posts."""

    def __init__(
        self,
        aws: AwsWorld,
        proxy: FaultProxy,
        *,
        ready: bool = True,
        concurrency: int = 16,
        spec: str = "",
    ) -> None:
        self.aws = aws
        self.proxy = proxy
        self.clock = VirtualClock(start=time.time())
        self.cluster = InMemoryCluster(self.clock)
        # ``spec``: more of the class' spec, as YAML lines indented by two spaces.
        manifest = node_class_manifest(aws, ready=ready).replace("status:\n", spec + "status:\n", 1)
        node_class = parse_object(manifest)
        assert isinstance(node_class, EC2NodeClass)
        self.node_class = self.cluster.create(node_class)
        self.woken: queue.Queue[str] = queue.Queue()
        self.settings = AwsSettings(cluster_name=CLUSTER, region=REGION, launch_concurrency=concurrency)
        self.client: AwsClient = RecordingClient.for_region(REGION)
        self.provider = self.new_provider()
        self.prefix = f"t{uuid.uuid4().hex[:8]}"

    def new_provider(self) -> AwsCloudProvider:
        return AwsCloudProvider(self.cluster, self.client, self.settings, self.clock, wake=self.woken.put)

    def nodeclaim(
        self,
        suffix: str,
        *,
        types: tuple[str, ...] = SEED_TYPES,
        capacity_types: tuple[str, ...] = ("spot", "on-demand"),
        more: tuple[Requirement, ...] = (),
    ) -> NodeClaim:
        return self.cluster.create(
            NodeClaim(
                metadata=ObjectMeta(name=f"{self.prefix}-{suffix}", labels={LABEL_NODEPOOL: "default"}),
                spec=NodeClaimSpec(
                    node_class_ref=NodeClassRef("karpenter.k8s.aws", "EC2NodeClass", "default"),
                    requirements=(
                        Requirement.from_operator(LABEL_INSTANCE_TYPE, "In", types),
                        Requirement.from_operator(LABEL_CAPACITY_TYPE, "In", capacity_types),
                        *more,
                    ),
                ),
            )
        )

    def launch(self, claim: NodeClaim, provider: AwsCloudProvider | None = None) -> NodeClaim:
        """create → LaunchInProgressError → wake → create, as the lifecycle controller does."""
        provider = provider or self.provider
        with pytest.raises(LaunchInProgressError):
            provider.create(claim)
        assert self.woken.get(timeout=WAIT) == claim.name
        return provider.create(claim)

    def instances(self, name: str) -> list[dict[str, Any]]:
        """moto's live instances tagged for NodeClaim ``name``."""
        reservations = _ec2(self.aws).describe_instances(
            Filters=[
                {"Name": "tag:karpenter.sh/nodeclaim", "Values": [name]},
                {"Name": "instance-state-name", "Values": ["pending", "running"]},
            ]
        )["Reservations"]
        return [instance for reservation in reservations for instance in reservation["Instances"]]


@pytest.fixture
def proxy(aws: AwsWorld, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultProxy]:
    proxy = FaultProxy(aws.endpoint).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
    yield proxy
    proxy.stop()


@pytest.fixture
def harness(aws: AwsWorld, proxy: FaultProxy) -> Iterator[Harness]:
    harness = Harness(aws, proxy)
    yield harness
    harness.provider.close()


def _ec2(aws: AwsWorld) -> Any:
    return boto3.Session().client("ec2", endpoint_url=aws.endpoint)


def _template_data(harness: Harness, claim: NodeClaim) -> dict[str, Any]:
    """The data of the launch template ``claim``'s instance came from, as EC2 stored it."""
    assert isinstance(harness.client, RecordingClient)
    [instance] = harness.instances(claim.name)
    [config] = [
        config
        for config in harness.client.fleets[claim.name]["LaunchTemplateConfigs"]
        if config["Overrides"][0]["ImageId"] == instance["ImageId"]
    ]
    name = config["LaunchTemplateSpecification"]["LaunchTemplateName"]
    versions = _ec2(harness.aws).describe_launch_template_versions(LaunchTemplateName=name)
    return versions["LaunchTemplateVersions"][0]["LaunchTemplateData"]  # type: ignore[no-any-return]


KARPENTER_DOCS_DISKS = """\
  blockDeviceMappings:
  - deviceName: /dev/xvda
    rootVolume: true
    ebs:
      volumeSize: 100Gi
      volumeType: gp3
      iops: 10000
      throughput: 125
      encrypted: true
      kmsKeyID: arn:aws:kms:us-east-1:123456789012:key/1a2b3c4d-5e6f-1a2b-3c4d-5e6f1a2b3c4d
      deleteOnTermination: true
  - deviceName: /dev/xvdb
    ebs: {volumeSize: 20G, volumeType: gp3}
"""


@pytest.fixture
def disks(aws: AwsWorld, proxy: FaultProxy) -> Iterator[Harness]:
    """A harness whose class has the root volume of Karpenter's docs and a second, decimal-sized disk."""
    harness = Harness(aws, proxy, spec=KARPENTER_DOCS_DISKS)
    yield harness
    harness.provider.close()


def test_block_devices_reach_the_launch_template_sized_as_karpenter_sizes_them(disks: Harness) -> None:
    claim = disks.nodeclaim("disks")
    disks.launch(claim)
    root, data_disk = _template_data(disks, claim)["BlockDeviceMappings"]
    assert root == {
        "DeviceName": "/dev/xvda",
        "Ebs": {
            # 100Gi is 107.4 GB: Karpenter asks EC2 for 108, never less than the quantity.
            "VolumeSize": 108,
            "VolumeType": "gp3",
            "Iops": 10000,
            "Throughput": 125,
            "Encrypted": True,
            "KmsKeyId": "arn:aws:kms:us-east-1:123456789012:key/1a2b3c4d-5e6f-1a2b-3c4d-5e6f1a2b3c4d",
            "DeleteOnTermination": True,
        },
    }
    assert data_disk == {"DeviceName": "/dev/xvdb", "Ebs": {"VolumeSize": 20, "VolumeType": "gp3"}}


def test_a_nodeclaim_gets_one_fleet_one_tagged_instance_in_a_discovered_subnet(harness: Harness) -> None:
    claim = harness.nodeclaim("seed")
    launched = harness.launch(claim)

    assert launched.name == claim.name
    assert harness.proxy.fleets_per_nodeclaim()[claim.name] == 1
    [instance] = harness.instances(claim.name)
    zone = instance["Placement"]["AvailabilityZone"]
    assert instance["SubnetId"] == harness.aws.subnet_ids[zone]
    assert instance["InstanceType"] in SEED_TYPES
    tags = {tag["Key"]: tag["Value"] for tag in instance["Tags"]}
    assert tags["karpenter.sh/nodepool"] == "default"
    assert tags["karpenter.k8s.aws/ec2nodeclass"] == "default"
    assert tags[f"kubernetes.io/cluster/{CLUSTER}"] == "owned"
    assert tags["team"] == "nodes"
    # The cheapest admissible spot offering: the catalog's c5.large in us-east-1b.
    assert (instance["InstanceType"], zone, instance.get("InstanceLifecycle")) == (
        "c5.large",
        "us-east-1b",
        "spot",
    )

    # Hydrated as the lifecycle controller records it.
    assert launched.status.provider_id == f"aws:///{zone}/{instance['InstanceId']}"
    assert launched.metadata.labels[LABEL_INSTANCE_TYPE] == "c5.large"
    assert launched.metadata.labels[LABEL_ZONE] == zone
    assert launched.metadata.labels[LABEL_CAPACITY_TYPE] == "spot"
    assert launched.metadata.labels["kubernetes.io/arch"] == "amd64"
    assert launched.status.capacity["cpu"] == 2000
    assert 0 < launched.status.allocatable["memory"] < launched.status.capacity["memory"]
    assert launched.status.image_id == harness.aws.ami_new_x86 == instance["ImageId"]

    # moto does not copy MetadataOptions to the instance: the fleet's launch template holds them.
    ec2 = _ec2(harness.aws)
    attribute = ec2.describe_instance_attribute(InstanceId=instance["InstanceId"], Attribute="userData")
    assert base64.b64decode(attribute["UserData"]["Value"]).decode() == USER_DATA
    templates = ec2.describe_launch_templates(
        Filters=[{"Name": "tag:karpenter.k8s.aws/cluster", "Values": [CLUSTER]}]
    )["LaunchTemplates"]
    named = [t for t in templates if t["LaunchTemplateName"].startswith("karpenter.k8s.aws/")]
    assert named
    versions = ec2.describe_launch_template_versions(LaunchTemplateName=named[0]["LaunchTemplateName"])
    data = versions["LaunchTemplateVersions"][0]["LaunchTemplateData"]
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert data["MetadataOptions"]["HttpPutResponseHopLimit"] == 1
    assert data["SecurityGroupIds"] == [harness.aws.security_group_id]
    assert data["IamInstanceProfile"] == {"Name": NODE_INSTANCE_PROFILE}

    # A repeated create (a status write that failed) returns the same instance, no second fleet.
    assert harness.provider.create(claim).status.provider_id == launched.status.provider_id
    assert harness.proxy.fleets_per_nodeclaim()[claim.name] == 1


def test_spot_refused_everywhere_marks_exactly_those_and_the_next_claim_launches_on_demand(
    harness: Harness,
) -> None:
    harness.proxy.refuse_capacity(capacity_type="spot")
    first = harness.nodeclaim("ice")
    with pytest.raises(InsufficientCapacityError) as raised:
        harness.launch(first)
    expected = {(t, z, "spot") for t in SEED_TYPES for z in harness.aws.subnet_ids}
    assert set(raised.value.offerings) == expected
    assert harness.provider.unavailable.now() == expected
    assert harness.instances(first.name) == []

    # The next plan offers on-demand only for the seed types.
    offered = {
        (it.name, o.zone, o.capacity_type)
        for it in harness.provider.get_instance_types(nodepool_for())
        if it.name in SEED_TYPES
        for o in it.offerings
        if o.available
    }
    assert offered and all(capacity_type == "on-demand" for _, _, capacity_type in offered)
    second = harness.launch(harness.nodeclaim("fallback"))
    assert second.metadata.labels[LABEL_CAPACITY_TYPE] == "on-demand"
    [instance] = harness.instances(second.name)
    assert instance.get("InstanceLifecycle") is None  # on-demand

    # Three minutes later the spot offerings are offered again.
    harness.clock.advance_to(harness.clock.now() + 181)
    assert harness.provider.unavailable.now() == frozenset()
    again = {
        o.capacity_type
        for it in harness.provider.get_instance_types(nodepool_for())
        if it.name == "c5.large"
        for o in it.offerings
        if o.available
    }
    assert again == {"spot", "on-demand"}


def test_an_account_that_cannot_run_spot_falls_back_to_on_demand(harness: Harness) -> None:
    """No spot service-linked role, and no right to create it: spot is out for every type, as in Karpenter."""
    harness.proxy.refuse_capacity(
        capacity_type="spot", code="AuthFailure.ServiceLinkedRoleCreationNotPermitted"
    )
    first = harness.nodeclaim("no-spot-role")
    with pytest.raises(InsufficientCapacityError, match="ServiceLinkedRoleCreationNotPermitted"):
        harness.launch(first)
    offered = {
        o.capacity_type
        for it in harness.provider.get_instance_types(nodepool_for())
        for o in it.offerings
        if o.available
    }
    assert offered == {"on-demand"}
    second = harness.launch(harness.nodeclaim("no-spot-role-2", types=("m6i.large",)))
    assert second.metadata.labels[LABEL_CAPACITY_TYPE] == "on-demand"


def test_one_refused_offering_falls_back_to_another(harness: Harness) -> None:
    harness.proxy.refuse_capacity("c5.large", "us-east-1b", "spot")
    launched = harness.launch(harness.nodeclaim("one-ice"))
    chosen = (launched.metadata.labels[LABEL_INSTANCE_TYPE], launched.metadata.labels[LABEL_ZONE])
    assert chosen != ("c5.large", "us-east-1b")
    assert launched.metadata.labels[LABEL_CAPACITY_TYPE] == "spot"
    assert harness.provider.unavailable.now() == {("c5.large", "us-east-1b", "spot")}


def test_throttled_create_fleet_is_retried_into_exactly_one_instance(harness: Harness) -> None:
    harness.proxy.throttle("CreateFleet", first=2)
    claim = harness.nodeclaim("throttled")
    launched = harness.launch(claim)
    assert harness.proxy.fleets_per_nodeclaim()[claim.name] == 3  # two 503s, then the launch
    [instance] = harness.instances(claim.name)
    assert launched.status.provider_id.endswith(instance["InstanceId"])


def test_a_launch_template_deleted_behind_karpys_back_is_recreated_once(harness: Harness) -> None:
    harness.launch(harness.nodeclaim("template-1"))
    ec2 = _ec2(harness.aws)
    [name] = harness.provider.templates._known
    ec2.delete_launch_template(LaunchTemplateName=name)
    created_before = harness.proxy.count("CreateLaunchTemplate")

    claim = harness.nodeclaim("template-2")
    launched = harness.launch(claim)
    assert harness.proxy.fleets_per_nodeclaim()[claim.name] == 2  # refused, then launched
    assert harness.proxy.count("CreateLaunchTemplate") == created_before + 1
    assert len(harness.instances(claim.name)) == 1
    assert launched.status.provider_id
    assert ec2.describe_launch_templates(LaunchTemplateNames=[name])["LaunchTemplates"]


def test_fifty_launches_with_slow_create_fleet_run_concurrently(harness: Harness) -> None:
    """The real lifecycle controller and runtime, fed as ``karpy run`` feeds them: one queue of changes."""
    harness.proxy.delay("CreateFleet", 2.0)
    changes: queue.Queue[tuple[str, object | None, object | None]] = queue.Queue()
    harness.cluster.subscribe(lambda kind, old, new: changes.put((kind, old, new)))
    provider = AwsCloudProvider(
        harness.cluster,
        harness.client,
        harness.settings,
        harness.clock,
        wake=lambda name: changes.put((LAUNCH_FINISHED, None, name)),
    )
    runtime = Runtime(harness.clock)
    runtime.register(NodeClaimLifecycle(harness.cluster, provider, harness.clock))
    started = time.monotonic()
    claims = [harness.nodeclaim(f"many-{index}") for index in range(50)]
    try:
        while not all(harness.cluster.nodeclaim(claim.name).launched for claim in claims):  # type: ignore[union-attr]
            assert time.monotonic() - started < WAIT, "the launches did not finish"
            kind, old, new = changes.get(timeout=WAIT)
            runtime.on_change(kind, old, new)
            while not changes.empty():
                runtime.on_change(*changes.get_nowait())
            runtime.run_due()
    finally:
        provider.close()
    elapsed = time.monotonic() - started
    per_claim = harness.proxy.fleets_per_nodeclaim()
    print(
        f"\n50 NodeClaims, 2 s per CreateFleet, {harness.settings.launch_concurrency} at once: "
        f"all launched in {elapsed:.1f} s (one at a time: >= 100 s); "
        f"CreateFleet calls per NodeClaim: {sorted({per_claim[c.name] for c in claims})}"
    )
    assert elapsed < 50 * 2.0 / 3
    assert runtime.errors == []
    assert all(per_claim[claim.name] == 1 for claim in claims)
    assert all(len(harness.instances(claim.name)) == 1 for claim in claims)
    assert {event.reason for event in harness.cluster.events} == {"Launched"}
    provider_ids = {harness.cluster.nodeclaim(claim.name).status.provider_id for claim in claims}  # type: ignore[union-attr]
    assert len(provider_ids) == 50


def test_a_nodeclaim_reconciled_again_while_its_launch_runs_launches_once(harness: Harness) -> None:
    harness.proxy.delay("CreateFleet", 0.5)
    claim = harness.nodeclaim("again")
    for _ in range(3):
        with pytest.raises(LaunchInProgressError):
            harness.provider.create(claim)
    assert harness.woken.get(timeout=WAIT) == claim.name
    harness.provider.create(claim)
    assert harness.proxy.fleets_per_nodeclaim()[claim.name] == 1
    assert len(harness.instances(claim.name)) == 1


def test_a_nodeclaim_older_than_the_provider_adopts_its_instance(harness: Harness) -> None:
    claim = harness.nodeclaim("adopt")
    launched = harness.launch(claim)
    # karpy restarts: a new provider, later than the NodeClaim, knows nothing of the launch.
    harness.provider.close()
    harness.clock.advance_to(harness.clock.now() + 5)
    restarted = harness.new_provider()
    harness.provider = restarted
    adopted = harness.launch(claim, restarted)
    assert adopted.status.provider_id == launched.status.provider_id
    assert harness.proxy.fleets_per_nodeclaim()[claim.name] == 1
    assert len(harness.instances(claim.name)) == 1


def test_get_list_and_delete(harness: Harness) -> None:
    claim = harness.nodeclaim("lifecycle")
    launched = harness.launch(claim)
    found = harness.provider.get(launched.status.provider_id)
    assert found.name == claim.name
    assert found.metadata.labels[LABEL_NODEPOOL] == "default"
    assert found.metadata.labels[LABEL_INSTANCE_TYPE] == launched.metadata.labels[LABEL_INSTANCE_TYPE]
    listed = {c.name: c for c in harness.provider.list()}
    assert listed[claim.name].status.provider_id == launched.status.provider_id
    assert listed[claim.name].metadata.creation_timestamp

    recorded = claim.with_status(provider_id=launched.status.provider_id)
    harness.provider.delete(recorded)
    assert harness.instances(claim.name) == []
    with pytest.raises(NodeClaimNotFoundError):
        harness.provider.delete(recorded)
    with pytest.raises(NodeClaimNotFoundError):
        harness.provider.get(launched.status.provider_id)
    assert claim.name not in {c.name for c in harness.provider.list()}


def test_an_instance_shutting_down_is_listed_as_deleting_and_not_terminated_again(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    claim = harness.nodeclaim("shutting-down")
    launched = harness.launch(claim)
    listed_by_ec2 = harness.client.describe_instances

    def shutting_down(**query: Any) -> list[Ec2Instance]:
        # EC2 lists a terminated instance as shutting-down for a minute or so.
        return [dataclasses.replace(found, state="shutting-down") for found in listed_by_ec2(**query)]

    monkeypatch.setattr(harness.client, "describe_instances", shutting_down)
    listed = {found.name: found for found in harness.provider.list()}
    assert listed[claim.name].status.provider_id == launched.status.provider_id
    assert listed[claim.name].metadata.deleting
    # Its NodeClaim went as a termination ends, while the instance still shuts down.
    harness.cluster.delete(claim)
    collector = GarbageCollector(harness.cluster, harness.provider, harness.clock)
    harness.clock.advance_to(harness.clock.now() + INSTANCE_GRACE + INTERVAL)
    collector.reconcile(PASS_KEY)
    assert harness.proxy.count("TerminateInstances") == 0


def test_garbage_collection_terminates_this_clusters_leaks_only(harness: Harness) -> None:
    ec2 = _ec2(harness.aws)

    def run(name: str, cluster: str | None, *, stop: bool = False) -> str:
        tags = [{"Key": "karpenter.sh/nodepool", "Value": "default"}]
        tags.append({"Key": "karpenter.sh/nodeclaim", "Value": f"{harness.prefix}-{name}"})
        if cluster is not None:
            tags.append({"Key": f"kubernetes.io/cluster/{cluster}", "Value": "owned"})
        found = ec2.run_instances(
            ImageId=harness.aws.ami_new_x86,
            InstanceType="c5.large",
            MinCount=1,
            MaxCount=1,
            SubnetId=next(iter(harness.aws.subnet_ids.values())),
            TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
        )
        instance_id = str(found["Instances"][0]["InstanceId"])
        if stop:
            ec2.stop_instances(InstanceIds=[instance_id])
        return instance_id

    other_cluster = run("theirs", "another-cluster")
    untagged = run("untagged", None)
    leaked_stopped = run("leaked-stopped", CLUSTER, stop=True)
    collector = GarbageCollector(harness.cluster, harness.provider, harness.clock)
    harness.clock.advance_to(harness.clock.now() + INSTANCE_GRACE + INTERVAL)
    collector.reconcile(PASS_KEY)

    def state(instance_id: str) -> str:
        reservations = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
        return str(reservations[0]["Instances"][0]["State"]["Name"])

    assert state(other_cluster) == "running"
    assert state(untagged) == "running"
    assert state(leaked_stopped) in ("shutting-down", "terminated")


def test_a_node_class_not_ready_launches_nothing(aws: AwsWorld, proxy: FaultProxy) -> None:
    harness = Harness(aws, proxy, ready=False)
    try:
        with pytest.raises(NodeClassNotReadyError, match="SubnetSelector did not match"):
            harness.provider.get_instance_types(nodepool_for())
        with pytest.raises(NodeClassNotReadyError):
            harness.provider.create(harness.nodeclaim("unready"))
        problem = harness.provider.node_class_problem(harness.node_class)
        assert problem is not None and problem.reason == "SubnetsNotFound"
        assert proxy.count("CreateFleet") == 0
        assert proxy.count("CreateLaunchTemplate") == 0
    finally:
        harness.provider.close()


def test_user_data_by_family_carries_the_nodeclaims_labels_and_registration_taints(harness: Harness) -> None:
    manifest = node_class_manifest(harness.aws).replace(
        "amiFamily: Custom\n  amiSelectorTerms: [{tags: {team: nodes}}]",
        "amiSelectorTerms: [{alias: al2023@latest}]",
    )
    al2023 = parse_object(manifest)
    assert isinstance(al2023, EC2NodeClass) and al2023.effective_ami_family == "AL2023"
    claim = harness.nodeclaim("userdata")
    document = harness.provider.node_user_data(al2023, claim)
    assert "karpenter.sh/nodepool=default" in document
    assert "karpenter.sh/unregistered" in document and "NoExecute" in document
    # A Custom class (AMIs by tags) gets its userData verbatim.
    assert harness.provider.node_user_data(harness.node_class, claim) == USER_DATA


def test_launch_templates_of_a_deleted_node_class_are_cleaned_up(harness: Harness) -> None:
    harness.launch(harness.nodeclaim("kept"))
    gone = parse_object(node_class_manifest(harness.aws, name=f"{harness.prefix}-gone"))
    assert isinstance(gone, EC2NodeClass)
    orphan = harness.provider.templates.ensure(
        launch_options(gone, harness.aws.ami_new_x86, "#!/bin/sh\n"), gone
    )
    cleanup = LaunchTemplateCleanup(harness.cluster, harness.client, harness.provider.templates)
    [watch] = cleanup.watches()
    assert watch.mapper(gone, None) == [LaunchTemplateCleanup.KEY]  # a class deleted
    assert watch.mapper(gone, gone) == []  # a class changed

    assert cleanup.reconcile(LaunchTemplateCleanup.KEY) == 3600.0
    remaining = {
        template["LaunchTemplateName"]: {tag["Key"]: tag["Value"] for tag in template.get("Tags", [])}
        for template in _ec2(harness.aws).describe_launch_templates()["LaunchTemplates"]
    }
    assert orphan not in remaining
    assert any(tags.get("karpenter.k8s.aws/ec2nodeclass") == "default" for tags in remaining.values())
    assert orphan not in harness.provider.templates._known


def test_other_fleet_errors_carry_aws_message_and_mark_nothing(harness: Harness) -> None:
    harness.proxy.refuse_capacity(code="InvalidFleetConfiguration")
    with pytest.raises(CloudProviderError) as raised:
        harness.launch(harness.nodeclaim("invalid"))
    assert not isinstance(raised.value, InsufficientCapacityError)
    assert "InvalidFleetConfiguration: There is no spot capacity" in str(raised.value)
    assert harness.provider.unavailable.now() == frozenset()


def test_prices_are_replaced_and_drift_follows_the_class_amis(harness: Harness) -> None:
    harness.provider.update_prices({"c5.large": 1.5}, {("c5.large", "us-east-1a"): 0.5})
    [c5_large] = [t for t in harness.provider.get_instance_types(nodepool_for()) if t.name == "c5.large"]
    prices = {(o.zone, o.capacity_type): o.price for o in c5_large.offerings}
    assert prices[("us-east-1a", "on-demand")] == prices[("us-east-1b", "on-demand")] == 1.5
    assert prices[("us-east-1a", "spot")] == 0.5
    assert prices[("us-east-1b", "spot")] == 0.0313  # unchanged: not in the refresh

    claim = harness.nodeclaim("drift").with_metadata(labels={LABEL_INSTANCE_TYPE: "c5.large"})
    current = claim.with_status(image_id=harness.aws.ami_new_x86)
    assert harness.provider.is_drifted(current) == ""
    assert harness.provider.is_drifted(claim.with_status(image_id=harness.aws.ami_old_x86)) == "AMIDrift"
    # The arm64 AMI serves no x86 type: an x86 instance running it has drifted too.
    assert harness.provider.is_drifted(claim.with_status(image_id=harness.aws.ami_arm64)) == "AMIDrift"
    assert {(p.condition_type, p.condition_status) for p in harness.provider.repair_policies()} >= {
        ("Ready", "False"),
        ("Ready", "Unknown"),
    }


class RefusingTemplatesClient(AwsClient):
    """An account whose policy does not allow describing launch templates."""

    def launch_templates_named(self, names: Sequence[str]) -> list[LaunchTemplate]:
        raise AwsApiError("UnauthorizedOperation", "You are not authorized to perform this operation.", False)


def test_a_refused_aws_call_before_create_fleet_is_the_launch_error(harness: Harness) -> None:
    harness.client = RefusingTemplatesClient(boto3.Session())
    provider = harness.new_provider()
    try:
        with pytest.raises(CloudProviderError, match="UnauthorizedOperation: You are not authorized"):
            harness.launch(harness.nodeclaim("refused"), provider)
    finally:
        provider.close()
    assert harness.proxy.count("CreateFleet") == 0


def test_the_root_volume_is_the_nodes_ephemeral_storage(disks: Harness) -> None:
    """A pod asking for 50Gi of ephemeral storage fits a node class whose root volume is 100Gi."""
    hundred_gi = 100 * 1024**3
    [c5_large] = [t for t in disks.provider.get_instance_types(nodepool_for()) if t.name == "c5.large"]
    assert c5_large.capacity["ephemeral-storage"] == hundred_gi
    assert c5_large.allocatable["ephemeral-storage"] > 50 * 1024**3
    launched = disks.launch(disks.nodeclaim("ephemeral"))
    assert launched.status.capacity["ephemeral-storage"] == hundred_gi
    found = disks.provider.get(launched.status.provider_id)
    assert found.status.capacity["ephemeral-storage"] == hundred_gi


def test_raid0_makes_the_instance_store_the_nodes_ephemeral_storage(aws: AwsWorld, proxy: FaultProxy) -> None:
    """instanceStorePolicy RAID0: a type with local NVMe keeps pods' storage there (a g4dn.xlarge: 125 GB)."""
    raid0 = Harness(aws, proxy, spec="  instanceStorePolicy: RAID0\n")
    try:
        types = {t.name: t for t in raid0.provider.get_instance_types(nodepool_for())}
        assert types["g4dn.xlarge"].capacity["ephemeral-storage"] == 125 * 10**9
        # A type without instance store keeps the root volume (the AMI's 20Gi).
        assert types["c5.large"].capacity["ephemeral-storage"] == 20 * 1024**3
        launched = raid0.launch(raid0.nodeclaim("raid0", types=("g4dn.xlarge",)))
        assert launched.status.capacity["ephemeral-storage"] == 125 * 10**9
    finally:
        raid0.provider.close()


@pytest.mark.parametrize(
    ("family_spec", "mappings", "expected"),
    [
        # The mapping marked rootVolume wins, wherever it is.
        ("amiFamily: AL2023", "[{deviceName: /dev/xvdz, rootVolume: true, ebs: {volumeSize: 80Gi}}]", "80Gi"),
        # Without one: the family's data device (Bottlerocket keeps its data on /dev/xvdb).
        (
            "amiFamily: Bottlerocket",
            "[{deviceName: /dev/xvda, ebs: {volumeSize: 4Gi}},"
            " {deviceName: /dev/xvdb, ebs: {volumeSize: 60Gi}}]",
            "60Gi",
        ),
        ("amiFamily: AL2023", "[{deviceName: /dev/xvdb, ebs: {volumeSize: 60Gi}}]", ""),
        # A Custom AMI's layout is unknown: the last mapping.
        (
            "amiFamily: Custom",
            "[{deviceName: /dev/sda1, ebs: {volumeSize: 30Gi}}, {deviceName: /dev/sdb}]",
            "",
        ),
        ("amiFamily: Custom", "[{deviceName: /dev/sda1, ebs: {volumeSize: 30Gi}}]", "30Gi"),
        ("amiFamily: AL2", "[]", ""),
    ],
)
def test_the_ephemeral_volume_is_found_as_karpenter_finds_it(
    aws: AwsWorld, family_spec: str, mappings: str, expected: str
) -> None:
    manifest = (
        node_class_manifest(aws)
        .replace("  amiFamily: Custom\n", "", 1)
        .replace("status:\n", f"  {family_spec}\n  blockDeviceMappings: {mappings}\nstatus:\n", 1)
    )
    node_class = parse_object(manifest)
    assert isinstance(node_class, EC2NodeClass)
    assert node_class.ephemeral_volume_size == expected


def test_launch_templates_tag_what_they_launch_as_the_controller_policy_requires(harness: Harness) -> None:
    """docs/aws.md lets CreateFleet make network interfaces and spot requests only with these tags."""
    required = {f"kubernetes.io/cluster/{CLUSTER}": "owned", "karpenter.sh/nodepool": "default"}

    def tagged(data: dict[str, Any]) -> dict[str, dict[str, str]]:
        return {
            spec["ResourceType"]: {tag["Key"]: tag["Value"] for tag in spec["Tags"]}
            for spec in data.get("TagSpecifications", [])
            if spec["ResourceType"] != "launch-template"  # moto lists the template's own tags here too
        }

    spot_claim = harness.nodeclaim("tags-spot")
    assert harness.launch(spot_claim).metadata.labels[LABEL_CAPACITY_TYPE] == "spot"
    spot = tagged(_template_data(harness, spot_claim))
    assert set(spot) == {"network-interface", "spot-instances-request"}
    for tags in spot.values():
        assert tags.items() >= {**required, "team": "nodes"}.items()
        assert "karpenter.sh/nodeclaim" not in tags  # shared by the pool's NodeClaims

    on_demand_claim = harness.nodeclaim("tags-od", capacity_types=("on-demand",))
    harness.launch(on_demand_claim)
    on_demand = tagged(_template_data(harness, on_demand_claim))
    assert set(on_demand) == {"network-interface"}
    assert on_demand["network-interface"].items() >= required.items()


def test_the_class_eviction_thresholds_size_allocatable(aws: AwsWorld, proxy: FaultProxy) -> None:
    """evictionHard keeps memory and disk free on the node: karpy must not count them as allocatable."""
    default = Harness(aws, proxy)
    strict = Harness(
        aws,
        proxy,
        spec="  kubelet:\n    evictionHard: {memory.available: 1Gi, nodefs.available: 25%}\n",
    )
    try:

        def instance_type(harness: Harness, name: str) -> InstanceType:
            [found] = [t for t in harness.provider.get_instance_types(nodepool_for()) if t.name == name]
            return found

        before, after = instance_type(default, "m5.large"), instance_type(strict, "m5.large")
        assert before.capacity == after.capacity
        # The default thresholds are 100Mi of memory and a tenth of the 20Gi root volume.
        assert before.allocatable["memory"] - after.allocatable["memory"] == 1024**3 - 100 * 1024**2
        assert after.overhead.eviction_threshold["ephemeral-storage"] == 5 * 1024**3
        # The launched NodeClaim records the same allocatable as the plan's type.
        launched = strict.launch(strict.nodeclaim("eviction"))
        planned = instance_type(strict, launched.instance_type)
        assert launched.status.allocatable == planned.allocatable
    finally:
        default.provider.close()
        strict.provider.close()


def test_a_graviton_on_demand_claim_in_one_zone_launches_there_from_the_arm64_ami(harness: Harness) -> None:
    """A NodePool written for Graviton, on-demand only, restricted to one zone."""
    claim = harness.nodeclaim(
        "graviton",
        types=("c6g.large", "m6g.large", "c5.large"),
        capacity_types=("on-demand",),
        more=(
            Requirement.from_operator("kubernetes.io/arch", "In", ("arm64",)),
            Requirement.from_operator(LABEL_ZONE, "In", ("us-east-1c",)),
        ),
    )
    launched = harness.launch(claim)
    [instance] = harness.instances(claim.name)
    fleet = harness.client.fleets[claim.name]  # type: ignore[attr-defined]
    overrides = [o for config in fleet["LaunchTemplateConfigs"] for o in config["Overrides"]]
    assert {o["InstanceType"] for o in overrides} == {"c6g.large", "m6g.large"}
    assert {(o["AvailabilityZone"], o["SubnetId"]) for o in overrides} == {
        ("us-east-1c", harness.aws.subnet_ids["us-east-1c"])
    }
    assert {o["ImageId"] for o in overrides} == {harness.aws.ami_arm64}
    assert fleet["TargetCapacitySpecification"]["DefaultTargetCapacityType"] == "on-demand"
    assert instance["ImageId"] == harness.aws.ami_arm64 == _template_data(harness, claim)["ImageId"]
    assert instance.get("InstanceLifecycle") is None
    assert instance["Placement"]["AvailabilityZone"] == "us-east-1c"
    assert launched.metadata.labels["kubernetes.io/arch"] == "arm64"
    assert launched.metadata.labels[LABEL_CAPACITY_TYPE] == "on-demand"


def test_each_refused_offering_counts_a_launch_failure_by_zone_capacity_type_and_reason(
    harness: Harness,
) -> None:
    harness.proxy.refuse_capacity(capacity_type="spot")
    with pytest.raises(InsufficientCapacityError):
        harness.launch(harness.nodeclaim("ice-metric", types=("c5.large",)))
    failures = harness.provider.metrics.instance_launch_failures
    # One per offering CreateFleet refused; an insufficient-capacity code is none of Karpenter's
    # named reasons, so it is LaunchFailed as there.
    assert sorted(failures.label_values()) == [
        (zone, "", "spot", "LaunchFailed") for zone in sorted(harness.aws.subnet_ids)
    ]
    assert all(failures.value(zone=z, zone_id="", capacity_type="spot", reason="LaunchFailed") == 1
               for z in harness.aws.subnet_ids)  # fmt: skip


def test_launch_failure_reasons_are_karpenters() -> None:
    def reason(code: str, message: str = "") -> str:
        return launch_failure_reason(FleetError(code, message, "c5.large", "us-east-1a", "spot"))

    assert reason("AuthFailure.ServiceLinkedRoleCreationNotPermitted") == "SpotSLRCreationFailed"
    assert reason("UnauthorizedOperation", "Not authorized for images: [ami-1]") == "AMIAuthorizationFailure"
    assert (
        reason(
            "UnauthorizedOperation",
            "Not authorized for images, with an explicit deny in a permissions boundary",
        )
        == "Unauthorized"
    )
    assert reason("InvalidLaunchTemplateId.NotFound") == "LaunchTemplateNotFound"
    assert reason("MaxSpotInstanceCountExceeded") == "SpotQuotaExceeded"
    assert reason("InsufficientInstanceCapacity") == "LaunchFailed"


def test_the_rendered_user_data_size_is_kept_per_class_until_the_class_is_gone(harness: Harness) -> None:
    claim = harness.nodeclaim("userdata-size")
    harness.launch(claim)
    size = len(harness.provider.user_data(harness.node_class, claim).encode())
    gauge = harness.provider.metrics.userdata_bytes
    assert gauge.value(nodeclass="default") == size >= len(USER_DATA)
    cleanup = LaunchTemplateCleanup(
        harness.cluster, harness.client, harness.provider.templates, metrics=harness.provider.metrics
    )
    cleanup.reconcile(LaunchTemplateCleanup.KEY)
    assert gauge.value(nodeclass="default") == size  # the class is still there
    harness.cluster.delete(harness.node_class)
    cleanup.reconcile(LaunchTemplateCleanup.KEY)
    assert gauge.label_values() == []


def test_a_refused_terminate_counts_a_termination_failure(harness: Harness) -> None:
    claim = harness.nodeclaim("terminate-refused")
    launched = harness.launch(claim)
    harness.proxy.throttle("TerminateInstances", first=100)
    with pytest.raises(CloudProviderError):
        harness.provider.delete(launched)  # labelled with its zone, as the cluster's NodeClaim is
    zone = launched.metadata.labels[LABEL_ZONE]
    assert harness.provider.metrics.instance_termination_failures.label_values() == [(zone, "")]


def test_a_reboot_is_ec2s_reboot_instances_and_refused_for_an_instance_gone(harness: Harness) -> None:
    claim = harness.nodeclaim("reboot")
    launched = harness.launch(claim)
    recorded = claim.with_status(provider_id=launched.status.provider_id)
    assert harness.provider.supports_reboot
    harness.provider.reboot(recorded, "op-1")
    assert harness.proxy.count("RebootInstances") == 1
    assert [i["State"]["Name"] for i in harness.instances(claim.name)] == ["running"]  # in place

    harness.provider.delete(recorded)
    with pytest.raises(NodeClaimNotFoundError):
        harness.provider.reboot(recorded, "op-2")
    assert harness.proxy.count("RebootInstances") == 1  # looked up first, as Karpenter's provider does


def test_a_reboot_ec2_refuses_for_want_of_permission_fails_for_good(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    claim = harness.nodeclaim("reboot-denied")
    launched = harness.launch(claim)
    recorded = claim.with_status(provider_id=launched.status.provider_id)

    def denied(ids: Sequence[str]) -> None:
        raise AwsApiError("UnauthorizedOperation", "not authorized to perform ec2:RebootInstances", False)

    monkeypatch.setattr(harness.client, "reboot_instances", denied)
    with pytest.raises(NodeRebootFailedError):
        harness.provider.reboot(recorded, "op-1")

    def throttled(ids: Sequence[str]) -> None:
        raise AwsApiError("RequestLimitExceeded", "", True)

    monkeypatch.setattr(harness.client, "reboot_instances", throttled)
    with pytest.raises(CloudProviderError) as raised:
        harness.provider.reboot(recorded, "op-2")
    assert not isinstance(raised.value, (NodeRebootFailedError, NodeClaimNotFoundError))  # retried
