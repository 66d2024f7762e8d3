"""``karpy run --cloud-provider aws`` against the real control plane and a local EC2/SQS/SSM endpoint.

The world is the K3s-on-EC2 account of tests/aws/world.py (moto in server
mode, real HTTP, the real SDK), with karpy reaching it only through
``AWS_ENDPOINT_URL``. Between karpy and moto sits the fault proxy of
tests/aws/fault_proxy.py, which can refuse capacity, throttle and add
latency the way EC2 does and logs every call, so the tests count CreateFleet
calls per NodeClaim. The instance booter of tests/aws/booter.py stands in for
EC2 booting the AMI: it reads each instance's user data, checks it is the
K3s join of docs/aws.md (provider ID from IMDSv2, the unregistered taint,
the join token from SSM) and registers the Node after a boot delay; the fake
kubelet then runs the pods. karpy runs as a process of its own, with the
environment a Helm chart gives it.

The figures the closing notes quote are printed (``-s`` shows them):
pending to all Running with a 30 s boot, CreateFleet calls per NodeClaim,
launch time of 50 NodeClaims with 2 s per CreateFleet, and interruption to
replacement.
"""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from tests.aws.booter import InstanceBooter
from tests.aws.fault_proxy import FaultProxy
from tests.aws.world import CLUSTER, QUEUE, REGION, SSM_PREFIX, AwsWorld, moto_world, sdk_environment
from tests.support import parse_object

from karpy.api.nodeclass_hash import ec2nodeclass_hash
from karpy.kube._http import ApiTransport

from .conftest import REPO, ControlPlane, wait_until
from .karpy_run import (
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    KarpyProcess,
    as_yaml,
    condition,
    get_items,
    pod_disruption_budget,
    pool_claims,
    running_pods,
    start_karpy_run,
)

pytestmark = pytest.mark.integration

EXAMPLES = REPO / "examples" / "aws"
SEED = REPO / "src" / "karpy" / "sim" / "scenarios" / "seed"
SEED_TYPES = {"c5.large", "c5.xlarge", "m5.large", "m5.xlarge"}
LIVE_STATES = ("pending", "running", "stopping", "stopped", "shutting-down")


# -- the AWS side ----------------------------------------------------------------


@dataclass
class Aws:
    world: AwsWorld
    proxy: FaultProxy
    booter: InstanceBooter
    ec2: Any
    sqs: Any

    def instances(
        self, pool: str | None = None, states: tuple[str, ...] = LIVE_STATES
    ) -> list[dict[str, Any]]:
        """The cluster's instances (of ``pool``) in ``states``, straight from moto."""
        filters = [
            {"Name": f"tag:kubernetes.io/cluster/{CLUSTER}", "Values": ["owned"]},
            {"Name": "instance-state-name", "Values": list(states)},
        ]
        if pool is not None:
            filters.append({"Name": f"tag:{LABEL_NODEPOOL}", "Values": [pool]})
        found = []
        for page in self.ec2.get_paginator("describe_instances").paginate(Filters=filters):
            for reservation in page["Reservations"]:
                found.extend(reservation["Instances"])
        return found

    def fleets_by_nodeclaim(self) -> dict[str, int]:
        """CreateFleet calls that reached the endpoint, per NodeClaim (from the proxy's log)."""
        counts: dict[str, int] = {}
        for call in self.proxy.calls:
            if call.action == "CreateFleet" and call.nodeclaim:
                counts[call.nodeclaim] = counts.get(call.nodeclaim, 0) + 1
        return counts

    def queue_url(self) -> str:
        url: str = self.sqs.get_queue_url(QueueName=QUEUE)["QueueUrl"]
        return url


@pytest.fixture(scope="module")
def aws(crds: ControlPlane) -> Iterator[Aws]:
    """moto seeded as the K3s account, the fault proxy in front of it, and the instance booter."""
    with moto_world() as world, pytest.MonkeyPatch.context() as environment:
        # The booter's SDK reads its credentials and region from the environment, as karpy's does.
        for name, value in sdk_environment(world.endpoint).items():
            environment.setenv(name, value)
        proxy = FaultProxy(world.endpoint)
        proxy.start()
        booter = InstanceBooter(world.endpoint, REGION, crds.kubeconfig, CLUSTER, boot_delay=1.0)
        booter.start()
        session = boto3.Session(
            aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION
        )
        try:
            yield Aws(
                world=world,
                proxy=proxy,
                booter=booter,
                ec2=session.client("ec2", endpoint_url=world.endpoint),
                sqs=session.client("sqs", endpoint_url=world.endpoint),
            )
        finally:
            booter.stop()
            proxy.stop()


@pytest.fixture
def fresh(aws: Aws) -> Iterator[Aws]:
    """The module's AWS side with no fault rules, an empty call log and a 1 s boot."""
    aws.proxy.reset()
    aws.booter.boot_delay = 1.0
    yield aws
    aws.proxy.reset()
    assert not aws.booter.errors, f"user data the booter refused: {aws.booter.errors}"


def karpy_aws(plane: ControlPlane, aws: Aws, name: str, log_dir: Path, **env: str) -> KarpyProcess:
    """``karpy run --cloud-provider aws`` with a deployment's environment, through the fault proxy."""
    environ = {
        **sdk_environment(aws.proxy.url),
        "KUBECONFIG": str(plane.kubeconfig),
        "KARPY_CLOUD_PROVIDER": "aws",
        "CLUSTER_NAME": CLUSTER,
        "INTERRUPTION_QUEUE": QUEUE,
        "KARPY_AWS_SSM_PREFIX": SSM_PREFIX,
        "DISABLE_LEADER_ELECTION": "true",
        "METRICS_PORT": "0",
        "HEALTH_PROBE_PORT": "0",
        "KARPY_LOG_FORMAT": "text",
        **env,
    }
    process = start_karpy_run(plane, name, log_dir, env=environ)
    process.wait_for("controllers running", timeout=90)
    return process


# -- manifests -------------------------------------------------------------------


def k3s_node_class(name: str, *, api_version: str = "karpenter.k8s.aws/v1", **spec: Any) -> dict[str, Any]:
    """The K3s recipe's EC2NodeClass (examples/aws), renamed, with ``spec`` fields replaced."""
    node_class = yaml.safe_load((EXAMPLES / "ec2nodeclass.yaml").read_text())
    node_class["apiVersion"] = api_version
    node_class["metadata"]["name"] = name
    node_class["spec"].update(spec)
    return dict(node_class)


def pool(
    name: str,
    node_class: str,
    instance_types: list[str],
    capacity_types: list[str],
    *,
    consolidate_after: str = "30s",
) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "requirements": [
                        {"key": LABEL_INSTANCE_TYPE, "operator": "In", "values": instance_types},
                        {"key": LABEL_CAPACITY_TYPE, "operator": "In", "values": capacity_types},
                    ],
                    "nodeClassRef": {
                        "group": "karpenter.k8s.aws",
                        "kind": "EC2NodeClass",
                        "name": node_class,
                    },
                }
            },
            "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": consolidate_after},
        },
    }


def karpenter_test(
    namespace: str, pool_name: str, replicas: int, cpu: str = "1", memory: str = "1Gi"
) -> dict[str, Any]:
    """The guide's ``karpenter-test`` Deployment (examples/aws), kept to ``pool_name``'s nodes."""
    deployment = yaml.safe_load((EXAMPLES / "deployment.yaml").read_text())
    deployment["metadata"]["namespace"] = namespace
    deployment["metadata"]["name"] = f"karpenter-test-{pool_name}"
    deployment["spec"]["replicas"] = replicas
    labels = {"app": f"karpenter-test-{pool_name}"}
    deployment["spec"]["selector"]["matchLabels"] = labels
    template = deployment["spec"]["template"]
    template["metadata"]["labels"] = labels
    # The session's other tests run nodes of their own: these pods stay on this pool's.
    template["spec"]["nodeSelector"] = {LABEL_NODEPOOL: pool_name}
    (container,) = template["spec"]["containers"]
    container["resources"]["requests"] = {"cpu": cpu, "memory": memory}
    return dict(deployment)


def remove_aws_pool(
    plane: ControlPlane, aws: Aws, pool_name: str, node_class: str, timeout: float = 90
) -> None:
    """Delete the NodePool (karpy drains and terminates its instances), then its EC2NodeClass."""
    plane.kubectl("delete", "nodepool", pool_name, "--ignore-not-found", "--wait=false")
    plane.kubectl("delete", "nodeclaims", "-l", f"{LABEL_NODEPOOL}={pool_name}", "--wait=false")
    wait_until(
        lambda: not pool_claims(plane, pool_name), timeout=timeout, what=f"{pool_name}'s NodeClaims to go"
    )
    plane.kubectl("delete", "ec2nodeclass", node_class, "--ignore-not-found", "--wait=false")


def _object(plane: ControlPlane, kind: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(plane.kubectl("get", kind, name, "-o", "json"))
    return found


def is_ready(plane: ControlPlane, node_class: str) -> bool:
    return condition(_object(plane, "ec2nodeclass", node_class), "Ready").get("status") == "True"


def app_of(namespace: str, pool_name: str) -> str:
    return f"karpenter-test-{pool_name}"


def launch_templates(aws: Aws, node_class: str) -> list[str]:
    templates = aws.ec2.describe_launch_templates(
        Filters=[{"Name": "tag:karpenter.k8s.aws/ec2nodeclass", "Values": [node_class]}]
    )["LaunchTemplates"]
    return [template["LaunchTemplateName"] for template in templates]


# -- the seed walkthrough --------------------------------------------------------


def test_the_seed_walkthrough_launches_tagged_imdsv2_instances_that_join_and_scale_to_zero(
    fresh: Aws, crds: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    aws, plane = fresh, crds
    aws.booter.boot_delay = 30.0  # an AMI's boot, as the issue measures it
    # The seed's v1beta1 manifests (Karpenter's getting-started NodePool), on the K3s recipe's class.
    node_class = k3s_node_class("seed-aws", api_version="karpenter.k8s.aws/v1beta1")
    seed_pool = yaml.safe_load((SEED / "nodepool.yaml").read_text())
    seed_pool["metadata"]["name"] = "seed-aws"
    seed_pool["spec"]["template"]["spec"]["nodeClassRef"]["name"] = "seed-aws"
    assert seed_pool["apiVersion"] == "karpenter.sh/v1beta1"
    karpy = karpy_aws(plane, aws, "aws-seed", tmp_path)
    try:
        # karpy's CRDs store v1 only: the guide's v1beta1 manifests go through `karpy convert` first.
        manifests = tmp_path / "seed-v1beta1.yaml"
        manifests.write_text(as_yaml(node_class, seed_pool))
        converted = subprocess.run(
            [sys.executable, "-m", "karpy.cli", "convert", str(manifests)],
            capture_output=True,
            text=True,
            check=True,
            cwd=REPO,
        ).stdout
        plane.kubectl("apply", "-f", "-", stdin=converted)
        wait_until(lambda: is_ready(plane, "seed-aws"), timeout=60, what="the EC2NodeClass to be Ready")
        status = _object(plane, "ec2nodeclass", "seed-aws")["status"]
        assert {subnet["id"] for subnet in status["subnets"]} == set(aws.world.subnet_ids.values())
        assert [group["id"] for group in status["securityGroups"]] == [aws.world.security_group_id]

        applied = time.monotonic()
        plane.kubectl("apply", "-f", "-", stdin=as_yaml(karpenter_test(namespace, "seed-aws", 5)))
        app = app_of(namespace, "seed-aws")
        wait_until(lambda: len(running_pods(plane, namespace, app)) == 5, timeout=180, what="5 pods Running")
        to_running = time.monotonic() - applied

        instances = aws.instances("seed-aws")
        claims = pool_claims(plane, "seed-aws")
        assert len(instances) == len(claims) >= 1
        discovered = set(aws.world.subnet_ids.values())
        for instance in instances:
            tags = {tag["Key"]: tag["Value"] for tag in instance.get("Tags", [])}
            assert instance["InstanceType"] in SEED_TYPES
            assert instance["SubnetId"] in discovered
            assert tags[LABEL_NODEPOOL] == "seed-aws"
            assert tags["karpenter.sh/nodeclaim"] in claims
            assert tags["karpenter.k8s.aws/ec2nodeclass"] == "seed-aws"
        # moto does not copy a template's MetadataOptions to the instance: the template must require IMDSv2.
        for name in launch_templates(aws, "seed-aws"):
            data = aws.ec2.describe_launch_template_versions(LaunchTemplateName=name)[
                "LaunchTemplateVersions"
            ][0]["LaunchTemplateData"]
            assert data["MetadataOptions"]["HttpTokens"] == "required"
            assert data["MetadataOptions"]["HttpPutResponseHopLimit"] == 1
        fleets = aws.fleets_by_nodeclaim()
        print(
            f"\nseed on AWS: 5 pods pending to Running in {to_running:.1f}s with a 30s boot;"
            f" {len(claims)} NodeClaims, CreateFleet calls per NodeClaim {sorted(fleets.values())}"
        )
        assert all(count == 1 for count in fleets.values())

        plane.kubectl("scale", "deployment", app, "-n", namespace, "--replicas=0")
        wait_until(lambda: not aws.instances("seed-aws"), timeout=150, what="every instance terminated")
        wait_until(lambda: not pool_claims(plane, "seed-aws"), timeout=60, what="the NodeClaims to go")
        plane.kubectl("delete", "nodepool", "seed-aws", "--wait=false")
        plane.kubectl("delete", "ec2nodeclass", "seed-aws", "--wait=false")
        wait_until(
            lambda: not launch_templates(aws, "seed-aws"), timeout=60, what="the launch templates deleted"
        )
    finally:
        remove_aws_pool(plane, aws, "seed-aws", "seed-aws")
        karpy.stop()


def _spot(instance: dict[str, Any]) -> bool:
    return instance.get("InstanceLifecycle") == "spot"


# -- insufficient capacity -------------------------------------------------------


def test_spot_refused_everywhere_falls_back_to_on_demand_and_a_refused_type_to_another(
    fresh: Aws, crds: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    aws, plane = fresh, crds
    aws.proxy.refuse_capacity(capacity_type="spot")  # every spot offering, in every zone
    karpy = karpy_aws(plane, aws, "aws-ice", tmp_path)
    try:
        plane.kubectl(
            "apply",
            "-f",
            "-",
            stdin=as_yaml(
                k3s_node_class("ice-aws"),
                pool("ice-aws", "ice-aws", sorted(SEED_TYPES), ["spot", "on-demand"]),
                karpenter_test(namespace, "ice-aws", 2),
            ),
        )
        app = app_of(namespace, "ice-aws")
        wait_until(lambda: len(running_pods(plane, namespace, app)) == 2, timeout=90, what="2 pods Running")
        instances = aws.instances("ice-aws")
        assert instances and not any(_spot(instance) for instance in instances)
        fleets = [call for call in aws.proxy.calls if call.action == "CreateFleet"]
        refused = [call.nodeclaim for call in fleets if call.refused]
        launched = [call.nodeclaim for call in fleets if not call.refused]
        # Each NodeClaim that met the refusal met it once and was replaced; each replacement
        # launched on-demand at its first CreateFleet ("within one retry").
        assert refused and len(set(refused)) == len(refused)
        assert len(set(launched)) == len(launched) == len(instances)
        assert not set(refused) & set(launched)
        print(
            f"\nICE: {len(refused)} spot CreateFleet calls refused, then {len(launched)} on-demand launches"
        )

        # One offering refused: the fleet takes another type, and the refused one is avoided after.
        aws.proxy.reset()
        aws.proxy.refuse_capacity(instance_type="c5.large")
        # However the fallback packed the first two pods, no seed type holds more than three of
        # these 1-CPU pods, so this many cannot all fit on the instances already running.
        replicas = 3 * len(instances) + 1
        plane.kubectl("scale", "deployment", app, "-n", namespace, f"--replicas={replicas}")
        wait_until(
            lambda: len(running_pods(plane, namespace, app)) == replicas,
            timeout=120,
            what=f"{replicas} pods Running",
        )
        new = [
            instance
            for instance in aws.instances("ice-aws")
            if instance["InstanceId"] not in {i["InstanceId"] for i in instances}
        ]
        assert new and all(instance["InstanceType"] != "c5.large" for instance in new)
    finally:
        remove_aws_pool(plane, aws, "ice-aws", "ice-aws")
        karpy.stop()


# -- throttling and slow launches ------------------------------------------------


def test_fifty_nodeclaims_launch_concurrently_through_throttling_and_two_second_fleets(
    fresh: Aws, crds: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    aws, plane = fresh, crds
    aws.proxy.delay("CreateFleet", 2.0)
    aws.proxy.throttle("CreateFleet", first=5)  # 503 RequestLimitExceeded, retried by the SDK
    karpy = karpy_aws(plane, aws, "aws-burst", tmp_path)
    try:
        plane.kubectl(
            "apply",
            "-f",
            "-",
            stdin=as_yaml(
                k3s_node_class("burst-aws"),
                pool("burst-aws", "burst-aws", ["c5.large"], ["on-demand"]),
            ),
        )
        wait_until(lambda: is_ready(plane, "burst-aws"), timeout=60, what="the EC2NodeClass to be Ready")
        applied = time.monotonic()
        # 4 pods of 450m fill a c5.large (1930m allocatable): 200 pods need 50 NodeClaims.
        plane.kubectl(
            "apply",
            "-f",
            "-",
            stdin=as_yaml(karpenter_test(namespace, "burst-aws", 200, cpu="450m", memory="512Mi")),
        )
        wait_until(lambda: len(aws.instances("burst-aws")) >= 50, timeout=120, what="50 instances")
        launched = time.monotonic() - applied
        fleets = [call for call in aws.proxy.calls if call.action == "CreateFleet"]
        span = max(call.finished for call in fleets) - min(call.started for call in fleets)
        per_claim: dict[str, int] = {}
        for instance in aws.instances("burst-aws"):
            tags = {tag["Key"]: tag["Value"] for tag in instance.get("Tags", [])}
            per_claim[tags["karpenter.sh/nodeclaim"]] = per_claim.get(tags["karpenter.sh/nodeclaim"], 0) + 1
        assert len(per_claim) == 50 and set(per_claim.values()) == {1}, "one instance per NodeClaim"
        throttled = sum(1 for call in aws.proxy.calls if call.action == "CreateFleet" and call.throttled)
        print(
            f"\n50 NodeClaims with 2s per CreateFleet: all instances launched {launched:.1f}s after the"
            f" pods were applied (CreateFleet span {span:.1f}s; serial would be >= 100s);"
            f" {len(fleets)} CreateFleet calls, {throttled} of them throttled"
        )
        assert span < 50.0
    finally:
        # Without their pods the 50 nodes need no drain when the pool goes.
        plane.kubectl("delete", "deployment", app_of(namespace, "burst-aws"), "-n", namespace, "--wait=false")
        remove_aws_pool(plane, aws, "burst-aws", "burst-aws", timeout=180)
        karpy.stop()


# -- a crash between CreateFleet and the NodeClaim's status ----------------------


def test_a_karpy_killed_mid_launch_leaves_no_instance_without_a_nodeclaim(
    fresh: Aws, crds: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    aws, plane = fresh, crds
    # The instance exists in moto as soon as CreateFleet reaches it; the answer takes 5 s more.
    aws.proxy.delay("CreateFleet", 5.0, after_upstream=True)
    first = karpy_aws(plane, aws, "aws-crash-1", tmp_path)
    second: KarpyProcess | None = None
    try:
        plane.kubectl(
            "apply",
            "-f",
            "-",
            stdin=as_yaml(
                k3s_node_class("crash-aws"),
                pool("crash-aws", "crash-aws", ["c5.large"], ["on-demand"]),
                karpenter_test(namespace, "crash-aws", 1),
            ),
        )
        wait_until(lambda: bool(aws.instances("crash-aws")), timeout=60, interval=0.05, what="the instance")
        first.process.kill()  # SIGKILL: the NodeClaim never learns its instance
        first.process.wait(30)
        (claim,) = pool_claims(plane, "crash-aws").values()
        assert not claim.get("status", {}).get("providerID")
        aws.proxy.reset()
        second = karpy_aws(plane, aws, "aws-crash-2", tmp_path)
        restarted = time.monotonic()
        app = app_of(namespace, "crash-aws")
        wait_until(lambda: len(running_pods(plane, namespace, app)) == 1, timeout=90, what="the pod Running")

        def every_instance_owned() -> bool:
            owned = {
                c.get("status", {}).get("providerID", "").rsplit("/", 1)[-1]
                for c in pool_claims(plane, "crash-aws").values()
            }
            return all(instance["InstanceId"] in owned for instance in aws.instances("crash-aws"))

        wait_until(every_instance_owned, timeout=45, what="every instance to have a NodeClaim")
        owned_after = time.monotonic() - restarted
        print(f"\nkilled mid-launch: every instance has a NodeClaim {owned_after:.1f}s after the restart")
        assert owned_after < 30 + 15  # the garbage collection window, and its period
    finally:
        remove_aws_pool(plane, aws, "crash-aws", "crash-aws")
        first.stop()
        if second is not None:
            second.stop()


# -- a CreateFleet that lands after a restart: a duplicate instance --------------


def test_a_late_create_fleet_after_a_restart_makes_a_duplicate_that_is_terminated(
    fresh: Aws, crds: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    aws, plane = fresh, crds
    # CreateFleet reaches moto 30 s after karpy sent it: by then karpy was killed and its
    # successor found no instance to adopt and launched one. The late call makes a second
    # instance with the same karpenter.sh/nodeclaim tag, whose Node joins.
    aws.proxy.delay("CreateFleet", 30.0)
    first = karpy_aws(plane, aws, "aws-late-1", tmp_path)
    second: KarpyProcess | None = None
    try:
        plane.kubectl(
            "apply",
            "-f",
            "-",
            stdin=as_yaml(
                k3s_node_class("late-aws"),
                pool("late-aws", "late-aws", ["c5.large"], ["on-demand"], consolidate_after="10m"),
                karpenter_test(namespace, "late-aws", 1),
            ),
        )
        wait_until(
            lambda: aws.proxy.count("CreateFleet") >= 1,
            timeout=60,
            interval=0.05,
            what="the held CreateFleet",
        )
        first.process.kill()
        first.process.wait(30)
        aws.proxy.reset()  # the held call still lands; later ones go through at once
        second = karpy_aws(plane, aws, "aws-late-2", tmp_path)
        (claim,) = pool_claims(plane, "late-aws")

        def recorded() -> str:
            found = pool_claims(plane, "late-aws").get(claim, {})
            return str(found.get("status", {}).get("providerID", "")).rsplit("/", 1)[-1]

        wait_until(lambda: bool(recorded()), timeout=60, what="the restarted karpy's launch recorded")
        original = recorded()
        wait_until(
            lambda: len(aws.instances("late-aws")) == 2, timeout=50, what="the late CreateFleet to land"
        )
        (duplicate,) = [i["InstanceId"] for i in aws.instances("late-aws") if i["InstanceId"] != original]
        landed = time.monotonic()
        tags = {tag["Key"]: tag["Value"] for tag in aws.instances("late-aws")[0].get("Tags", ())}
        assert tags.get("karpenter.sh/nodeclaim") == claim

        def duplicate_gone() -> bool:
            live = {i["InstanceId"] for i in aws.instances("late-aws", ("pending", "running"))}
            nodes = {n["spec"].get("providerID", "").rsplit("/", 1)[-1] for n in get_items(plane, "nodes")}
            return duplicate not in live and duplicate not in nodes

        wait_until(duplicate_gone, timeout=30 + 10 + 30, what="the duplicate instance and its Node to go")
        print(
            f"\nlate CreateFleet: the duplicate terminated {time.monotonic() - landed:.1f}s after it landed"
        )
        assert original in {i["InstanceId"] for i in aws.instances("late-aws", ("pending", "running"))}
        assert recorded() == original
        assert "a duplicate for NodeClaim" in second.log()
    finally:
        if second is not None:
            print(second.tail())  # shown when the test fails
        remove_aws_pool(plane, aws, "late-aws", "late-aws")
        first.stop()
        if second is not None:
            second.stop()


# -- an endpoint that does not answer ---------------------------------------------


def closed_port() -> int:
    """A loopback port nothing listens on: every connection to it is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


UNREACHABLE_FOR = 30.0


def test_an_unreachable_endpoint_is_a_few_warnings_not_a_flood(crds: ControlPlane, tmp_path: Path) -> None:
    plane = crds
    environ = {
        **sdk_environment(f"http://127.0.0.1:{closed_port()}"),
        "KUBECONFIG": str(plane.kubeconfig),
        "KARPY_CLOUD_PROVIDER": "aws",
        "CLUSTER_NAME": CLUSTER,
        "INTERRUPTION_QUEUE": QUEUE,
        "KARPY_AWS_SSM_PREFIX": SSM_PREFIX,
        "DISABLE_LEADER_ELECTION": "true",
        "METRICS_PORT": "0",
        "HEALTH_PROBE_PORT": "0",
        "KARPY_LOG_FORMAT": "json",
    }
    karpy = start_karpy_run(plane, "aws-unreachable", tmp_path, env=environ)
    try:
        karpy.wait_for("controllers running", timeout=90)
        time.sleep(UNREACHABLE_FOR)
        assert karpy.process.poll() is None, karpy.tail()
    finally:
        karpy.stop()
    lines = [json.loads(line) for line in karpy.log().splitlines() if line.startswith("{")]
    errors = [line for line in lines if line["level"] == "ERROR"]
    tracebacks = [line for line in lines if "stacktrace" in line]
    warnings = [line["message"] for line in lines if line["level"] == "WARN"]
    print(f"\nunreachable endpoint for {UNREACHABLE_FOR:g}s: {len(errors)} ERROR, {len(warnings)} WARN lines")
    assert not errors and not tracebacks, errors[:3]
    # One warning per thing that failed (collector, cleanups, prices, queue), not one per retry.
    assert len({warning.split(":")[0] for warning in warnings}) == len(warnings), "\n".join(warnings)
    assert len(warnings) <= 8, "\n".join(warnings)
    assert any("garbage collection" in warning for warning in warnings)


# -- spot interruption -----------------------------------------------------------


def spot_interruption_warning(instance_id: str, zone: str) -> str:
    """An EventBridge "EC2 Spot Instance Interruption Warning", as SQS delivers it."""
    return json.dumps(
        {
            "version": "0",
            "id": f"1e5527d7-bb36-4607-3370-4164db56a40e-{instance_id}",
            "detail-type": "EC2 Spot Instance Interruption Warning",
            "source": "aws.ec2",
            "account": "123456789012",
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "region": REGION,
            "resources": [f"arn:aws:ec2:{zone}:instance/{instance_id}"],
            "detail": {"instance-id": instance_id, "instance-action": "terminate"},
        }
    )


def test_a_spot_interruption_is_drained_and_replaced_before_the_two_minutes_are_up(
    fresh: Aws, crds: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    aws, plane = fresh, crds
    aws.booter.boot_delay = 30.0
    karpy = karpy_aws(plane, aws, "aws-interruption", tmp_path)
    app = app_of(namespace, "spot-aws")
    try:
        plane.kubectl(
            "apply",
            "-f",
            "-",
            stdin=as_yaml(
                k3s_node_class("spot-aws"),
                pool("spot-aws", "spot-aws", ["c5.large"], ["spot"], consolidate_after="10m"),
                karpenter_test(namespace, "spot-aws", 2),
                pod_disruption_budget(namespace, app, 1),
            ),
        )
        wait_until(lambda: len(running_pods(plane, namespace, app)) == 2, timeout=120, what="2 pods Running")
        pod = running_pods(plane, namespace, app)[0]
        node = _object(plane, "node", pod["spec"]["nodeName"])
        zone, instance_id = node["spec"]["providerID"].removeprefix("aws:///").split("/")
        queue_url = aws.queue_url()
        before_warning = aws.instances("spot-aws")
        aws.sqs.send_message(QueueUrl=queue_url, MessageBody="this is not an EventBridge event")
        sent = time.monotonic()
        aws.sqs.send_message(QueueUrl=queue_url, MessageBody=spot_interruption_warning(instance_id, zone))

        fewest = 2

        def replaced() -> bool:
            nonlocal fewest
            running = running_pods(plane, namespace, app)
            fewest = min(fewest, len(running))
            gone = not any(
                n["metadata"]["name"] == node["metadata"]["name"] for n in get_items(plane, "nodes")
            )
            return (
                gone
                and len(running) == 2
                and all(p["spec"]["nodeName"] != node["metadata"]["name"] for p in running)
            )

        wait_until(replaced, timeout=120, interval=0.5, what="the interrupted node drained and replaced")
        took = time.monotonic() - sent
        print(
            f"\nspot interruption warning to replacement running and the old node gone:"
            f" {took:.1f}s (30s boot)"
        )
        assert took < 120
        assert fewest >= 1, "the PodDisruptionBudget (minAvailable 1) was broken"
        before = {i["InstanceId"] for i in before_warning}
        replacement = [i for i in aws.instances("spot-aws") if i["InstanceId"] not in before]
        # The interrupted offering is unavailable for 3 minutes: the replacement is elsewhere.
        assert replacement and all(i["Placement"]["AvailabilityZone"] != zone for i in replacement)

        def queue_empty() -> bool:
            attributes = aws.sqs.get_queue_attributes(
                QueueUrl=queue_url,
                AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
            )["Attributes"]
            return bool(
                attributes["ApproximateNumberOfMessages"] == "0"
                and attributes["ApproximateNumberOfMessagesNotVisible"] == "0"
            )

        wait_until(queue_empty, timeout=30, what="both messages deleted from the queue")
        assert "is unparseable, deleting it" in karpy.log(), karpy.tail()
    finally:
        # The budget would keep the last pod's node from draining when the pool goes.
        plane.kubectl("delete", "pdb", app, "-n", namespace, "--ignore-not-found")
        remove_aws_pool(plane, aws, "spot-aws", "spot-aws")
        karpy.stop()


# -- a node class that resolves to nothing ---------------------------------------


def test_a_selector_matching_nothing_is_named_on_the_class_the_pool_and_the_pods_and_nothing_launches(
    fresh: Aws, crds: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    aws, plane = fresh, crds
    karpy = karpy_aws(plane, aws, "aws-typo", tmp_path)
    try:
        typo = [{"tags": {"karpenter.sh/discovery": "my-k3z"}}]
        plane.kubectl(
            "apply",
            "-f",
            "-",
            stdin=as_yaml(
                k3s_node_class("typo-aws", subnetSelectorTerms=typo),
                pool("typo-aws", "typo-aws", ["c5.large"], ["on-demand"]),
                karpenter_test(namespace, "typo-aws", 1),
            ),
        )

        def class_condition() -> dict[str, Any] | None:
            ready = condition(_object(plane, "ec2nodeclass", "typo-aws"), "Ready")
            return ready if ready.get("status") == "False" and "my-k3z" in ready.get("message", "") else None

        ready = wait_until(
            class_condition, timeout=60, what="the EC2NodeClass Ready=False naming the selector"
        )
        subnets = condition(_object(plane, "ec2nodeclass", "typo-aws"), "SubnetsReady")
        assert subnets["status"] == "False" and "my-k3z" in subnets["message"], subnets
        assert (
            condition(_object(plane, "ec2nodeclass", "typo-aws"), "SecurityGroupsReady")["status"] == "True"
        )
        print(f"\nEC2NodeClass Ready: {ready.get('reason')}: {ready.get('message')}")

        def pool_condition() -> dict[str, Any] | None:
            # The pool's condition follows the class' a reconcile later: False at first only for
            # "not resolved yet", then naming the selector once the class' status says why.
            found = condition(_object(plane, "nodepool", "typo-aws"), "NodeClassReady")
            return found if found.get("status") == "False" and "my-k3z" in found.get("message", "") else None

        wait_until(pool_condition, timeout=60, what="the NodePool's NodeClassReady=False naming the selector")

        def pod_event() -> str | None:
            events = get_items(plane, "events", "-n", namespace)
            messages = [
                e.get("message", "") for e in events if e.get("involvedObject", {}).get("kind") == "Pod"
            ]
            return next((m for m in messages if "my-k3z" in m), None)

        def pool_event() -> str | None:
            events = get_items(plane, "events", "-A", "--field-selector", "involvedObject.kind=NodePool")
            messages = [e.get("message", "") for e in events if e["involvedObject"].get("name") == "typo-aws"]
            return next((m for m in messages if "my-k3z" in m), None)

        told = wait_until(pool_event, timeout=60, what="a NodePool Event naming the selector")
        print(f"NodePool event: {told}")
        print(f"pod event: {wait_until(pod_event, timeout=60, what='a pod Event naming the selector')}")
        assert not [call for call in aws.proxy.calls if call.action == "CreateFleet"]
        assert not aws.instances("typo-aws")
    finally:
        remove_aws_pool(plane, aws, "typo-aws", "typo-aws")
        karpy.stop()


# -- node class drift ------------------------------------------------------------


@dataclass
class Rollout:
    """What a drift rollout of a pool looked like, sampled while it ran."""

    reasons: set[str]
    most_disrupted_at_once: int
    seconds: float


def roll_out(plane: ControlPlane, pool_name: str, before: set[str], timeout: float = 300) -> Rollout:
    """Wait until none of ``before`` is left and as many new NodeClaims run; sample on the way."""
    started = time.monotonic()
    rollout = Rollout(set(), 0, 0.0)

    def replaced() -> bool:
        claims = pool_claims(plane, pool_name)
        going = sum(1 for claim in claims.values() if claim["metadata"].get("deletionTimestamp"))
        rollout.most_disrupted_at_once = max(rollout.most_disrupted_at_once, going)
        rollout.reasons.update(condition(claim, "Drifted").get("reason", "") for claim in claims.values())
        return not before & set(claims) and len(set(claims) - before) == len(before)

    wait_until(replaced, timeout=timeout, what=f"{pool_name}'s nodes replaced")
    rollout.seconds = time.monotonic() - started
    rollout.reasons.discard("")
    return rollout


def test_a_changed_user_data_or_security_group_selector_replaces_each_node_within_the_budget(
    fresh: Aws, crds: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    aws, plane = fresh, crds
    karpy = karpy_aws(plane, aws, "aws-drift", tmp_path)
    hash_key = "karpenter.k8s.aws/ec2nodeclass-hash"
    version_key = "karpenter.k8s.aws/ec2nodeclass-hash-version"
    try:
        drift_pool = pool("drift-aws", "drift-aws", ["c5.large"], ["on-demand"])
        drift_pool["spec"]["disruption"]["budgets"] = [{"nodes": "1"}]
        node_class = k3s_node_class("drift-aws")
        # One pod of a whole CPU a c5.large: two nodes.
        plane.kubectl(
            "apply",
            "-f",
            "-",
            stdin=as_yaml(node_class, drift_pool, karpenter_test(namespace, "drift-aws", 2)),
        )
        app = app_of(namespace, "drift-aws")
        wait_until(lambda: len(running_pods(plane, namespace, app)) == 2, timeout=180, what="2 pods Running")
        first = pool_claims(plane, "drift-aws")
        assert len(first) == 2

        def class_annotations() -> dict[str, str]:
            found: dict[str, str] = _object(plane, "ec2nodeclass", "drift-aws")["metadata"].get(
                "annotations", {}
            )
            return found

        class_hash = wait_until(lambda: class_annotations().get(hash_key), timeout=30, what="the class' hash")
        # Karpenter's value for the class as the API server stores it, with the CA of the
        # connection (no CLUSTER_CA_BUNDLE is given), as Karpenter would compute it here.
        stored = parse_object(json.dumps(_object(plane, "ec2nodeclass", "drift-aws")))
        connection = ApiTransport.from_kubeconfig(plane.kubeconfig)
        assert connection.ca_bundle
        assert class_hash == ec2nodeclass_hash(stored, connection.ca_bundle).value
        connection.close()
        for claim in first.values():
            annotations = claim["metadata"]["annotations"]
            assert annotations[hash_key] == class_hash and annotations[version_key] == "v6"

        # The K3s user fixes the join script: the same script with one more line.
        fixed = node_class["spec"]["userData"].replace("set -euo pipefail\n", "set -euo pipefail\n# v2\n", 1)
        patch = {"spec": {"userData": fixed}}
        plane.kubectl("patch", "ec2nodeclass", "drift-aws", "--type", "merge", "-p", json.dumps(patch))
        rollout = roll_out(plane, "drift-aws", set(first))
        wait_until(lambda: len(running_pods(plane, namespace, app)) == 2, timeout=120, what="2 pods Running")
        assert rollout.reasons == {"NodeClassDrift"}, rollout
        assert rollout.most_disrupted_at_once <= 1, f"{rollout} with a budget of one node"
        new_hash = class_annotations()[hash_key]
        second = pool_claims(plane, "drift-aws")
        assert new_hash != class_hash
        assert {claim["metadata"]["annotations"][hash_key] for claim in second.values()} == {new_hash}
        booted = {
            base64.b64decode(
                aws.ec2.describe_instance_attribute(InstanceId=instance["InstanceId"], Attribute="userData")[
                    "UserData"
                ]["Value"]
            ).decode()
            for instance in aws.instances("drift-aws", ("pending", "running"))
        }
        assert booted == {fixed}, "the replacements boot the fixed join script"
        print(f"\nuserData changed: 2 nodes replaced in {rollout.seconds:.0f}s, one at a time")

        # Then the nodes move to another security group: a dynamic field, not in the hash.
        hardened = aws.world.untagged_security_group_id
        patch = {"spec": {"securityGroupSelectorTerms": [{"id": hardened}]}}
        plane.kubectl("patch", "ec2nodeclass", "drift-aws", "--type", "merge", "-p", json.dumps(patch))
        rollout = roll_out(plane, "drift-aws", set(second))
        wait_until(lambda: len(running_pods(plane, namespace, app)) == 2, timeout=120, what="2 pods Running")
        assert rollout.reasons == {"SecurityGroupDrift"}, rollout
        assert rollout.most_disrupted_at_once <= 1, f"{rollout} with a budget of one node"
        assert class_annotations()[hash_key] == new_hash  # the selectors are not hashed
        groups = {
            group["GroupId"]
            for instance in aws.instances("drift-aws", ("pending", "running"))
            for group in instance["SecurityGroups"]
        }
        assert groups == {hardened}
        print(f"security group selector changed: 2 nodes replaced in {rollout.seconds:.0f}s, one at a time")
    finally:
        remove_aws_pool(plane, aws, "drift-aws", "drift-aws")
        karpy.stop()
