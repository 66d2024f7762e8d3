"""The instance booter: what EC2 and the AMI do after a launch, for tests against moto.

moto launches instances that never boot. :class:`InstanceBooter` plays the
rest: a daemon thread polls the EC2 endpoint (boto3) every ``poll_interval``
seconds and, for each instance of the cluster, does what the machine would:

- **Which instances.** Those tagged ``kubernetes.io/cluster/<cluster>: owned``
  with a ``karpenter.sh/nodepool`` tag: the tags karpy puts on every instance
  it launches, as Karpenter does. Other instances (another cluster's, a
  bastion) never boot into this cluster.
- **Only a K3s join boots.** The instance's user data (DescribeInstanceAttribute
  ``userData``, base64) must pass :func:`tests.aws.k3s_join.check_k3s_join`,
  the recipe of docs/aws.md. If it does not, the message is kept in
  :attr:`InstanceBooter.errors` and no Node ever appears, as a real agent
  without a provider id, the taint or a join token would not join (or would
  join as a Node karpy cannot match).
- **Registration.** ``boot_delay`` seconds after the instance's LaunchTime, a
  Node is created the way the K3s agent registers it: ``spec.providerID``
  ``aws:///<zone>/<instance-id>`` (what the script's
  ``--kubelet-arg=provider-id`` makes of the IMDS values), the script's taints
  (``karpenter.sh/unregistered:NoExecute`` among them) and ``--node-label``
  labels, ``kubernetes.io/hostname``, the instance type's labels from the
  bundled catalog with the instance's zone and the region, and the type's
  capacity and allocatable. The capacity type is left off: no kubelet knows
  it; karpy copies it from the NodeClaim on registration, as Karpenter does.
  The Node carries the fake-kubelet annotation, so
  :mod:`karpy.cloud.kwok.fake_kubelet` keeps it Ready and runs its pods.
- **The Node's name** is the one K3s would use: the instance's private DNS
  name when the script passes ``--node-name`` from IMDS ``local-hostname`` or
  none at all (an EC2 instance's hostname is its private DNS name), the
  instance id when ``--node-name`` is the IMDS instance id. karpy matches
  Nodes to NodeClaims by provider id, so the name only has to be unique.
- **Termination.** When an instance is shutting down or terminated, its Node
  is deleted, as the cloud node lifecycle controller does on AWS.

:attr:`InstanceBooter.registered` keeps, per instance id, when its Node was
created (``clock()`` time), for the figures tests quote.

Nodes are created and deleted through two callables, so the booter runs
without a control plane in unit tests; the defaults talk to the API server of
``kubeconfig`` with lightkube. The EC2 client takes its credentials from the
environment, as karpy's does (``tests.aws.world.sdk_environment``).
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from mypy_boto3_ec2.client import EC2Client
from mypy_boto3_ec2.type_defs import InstanceTypeDef
from tests.aws.k3s_join import METADATA_INSTANCE_ID, K3sJoin, K3sJoinError, check_k3s_join

from karpy.api.core import Node
from karpy.api.meta import ObjectMeta
from karpy.api.requirements import LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_REGION, LABEL_ZONE
from karpy.cloud.aws_catalog import Catalog, instance_type_from_entry, load_catalog
from karpy.cloud.kwok.fake_kubelet import FAKE_NODE_ANNOTATION, FAKE_NODE_VALUE
from karpy.kube._encode import node_to_dict, resources_to_dict

log = logging.getLogger("tests.aws.booter")

CLUSTER_TAG_PREFIX = "kubernetes.io/cluster/"
CLUSTER_TAG_VALUE = "owned"
NODEPOOL_TAG = "karpenter.sh/nodepool"
BOOTING_STATES = ("pending", "running")
GONE_STATES = ("shutting-down", "terminated")

JSON = dict[str, Any]
NodeCreator = Callable[[JSON], None]
"""Creates a Node from its body (metadata, spec and status, as a kubelet registers it)."""
NodeDeleter = Callable[[str], None]
"""Deletes the Node of that name; a Node that is already gone is not an error."""


class UnknownInstanceTypeError(LookupError):
    """The instance's type is not in the bundled catalog, so its labels and capacity are unknown."""


def provider_id(zone: str, instance_id: str) -> str:
    return f"aws:///{zone}/{instance_id}"


@dataclass(frozen=True)
class _Booting:
    """An instance whose user data passed the check, waiting for its boot delay."""

    join: K3sJoin
    launched: float  # LaunchTime, epoch seconds


class InstanceBooter:
    """Registers a Node for every instance of the cluster that boots a K3s join; see the module docstring."""

    def __init__(
        self,
        endpoint_url: str,
        region: str,
        kubeconfig: Path | None,
        cluster_name: str,
        boot_delay: float,
        *,
        create_node: NodeCreator | None = None,
        delete_node: NodeDeleter | None = None,
        poll_interval: float = 0.5,
        clock: Callable[[], float] = time.time,
        catalog: Catalog | None = None,
    ) -> None:
        self.region = region
        self.cluster_name = cluster_name
        self.boot_delay = boot_delay
        self.poll_interval = poll_interval
        self.clock = clock
        self.catalog = catalog or load_catalog()
        self.ec2: EC2Client = boto3.session.Session(region_name=region).client(
            "ec2", endpoint_url=endpoint_url
        )
        if create_node is None or delete_node is None:
            if kubeconfig is None:
                raise ValueError("a kubeconfig is needed unless create_node and delete_node are given")
            default_create, default_delete = lightkube_node_writers(kubeconfig)
            create_node = create_node or default_create
            delete_node = delete_node or default_delete
        self._create_node = create_node
        self._delete_node = delete_node
        self.registered: dict[str, float] = {}  # instance id -> clock() when its Node was created
        self.errors: dict[str, str] = {}  # instance id -> why it never registers
        self.nodes: dict[str, str] = {}  # instance id -> name of its Node, while it exists
        self._booting: dict[str, _Booting] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the thread ---------------------------------------------------------

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="instance-booter", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll_once()
            except Exception:  # the endpoint or the API server blinking: try again next round
                log.exception("instance booter pass failed")
            self._stop.wait(self.poll_interval)

    # -- one pass -----------------------------------------------------------

    def poll_once(self) -> None:
        """Look at the cluster's instances once: check new ones, register due ones, forget gone ones."""
        now = self.clock()
        for instance in self._instances():
            instance_id = instance["InstanceId"]
            state = instance["State"]["Name"]
            if state in GONE_STATES:
                self._forget(instance_id)
            elif (
                state in BOOTING_STATES
                and instance_id not in self.registered
                and instance_id not in self.errors
            ):
                self._boot(instance, now)

    def _instances(self) -> list[InstanceTypeDef]:
        paginator = self.ec2.get_paginator("describe_instances")
        filters = [
            {"Name": f"tag:{CLUSTER_TAG_PREFIX}{self.cluster_name}", "Values": [CLUSTER_TAG_VALUE]},
            {"Name": "tag-key", "Values": [NODEPOOL_TAG]},
        ]
        return [
            instance
            for page in paginator.paginate(Filters=filters)  # type: ignore[arg-type]
            for reservation in page["Reservations"]
            for instance in reservation["Instances"]
        ]

    def _boot(self, instance: InstanceTypeDef, now: float) -> None:
        instance_id = instance["InstanceId"]
        booting = self._booting.get(instance_id)
        if booting is None:
            try:
                join = check_k3s_join(self._user_data(instance_id))
            except K3sJoinError as error:
                with self._lock:
                    self.errors[instance_id] = str(error)
                log.warning("instance %s does not join K3s: %s", instance_id, error)
                return
            launched = instance["LaunchTime"]
            booting = _Booting(join, launched.timestamp() if isinstance(launched, dt.datetime) else now)
            self._booting[instance_id] = booting
        if now < booting.launched + self.boot_delay:
            return
        try:
            body = self.node_body(instance, booting.join)
        except UnknownInstanceTypeError as error:
            with self._lock:
                self.errors[instance_id] = str(error)
            return
        self._create_node(body)
        with self._lock:
            self.registered[instance_id] = self.clock()
            self.nodes[instance_id] = body["metadata"]["name"]
        del self._booting[instance_id]
        log.info("instance %s registered as Node %s", instance_id, body["metadata"]["name"])

    def _user_data(self, instance_id: str) -> str:
        answer = self.ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
        encoded = answer.get("UserData", {}).get("Value", "")
        if not encoded:
            raise K3sJoinError("the instance has no user data")
        return base64.b64decode(encoded).decode("utf-8")

    def _forget(self, instance_id: str) -> None:
        self._booting.pop(instance_id, None)
        with self._lock:
            name = self.nodes.pop(instance_id, None)
        if name is not None:
            self._delete_node(name)
            log.info("instance %s is gone: deleted Node %s", instance_id, name)

    # -- the Node -----------------------------------------------------------

    def node_body(self, instance: InstanceTypeDef, join: K3sJoin) -> JSON:
        """The Node the K3s agent of ``instance`` registers, with its status (capacity, allocatable)."""
        instance_id = instance["InstanceId"]
        zone = instance["Placement"]["AvailabilityZone"]
        entry = self.catalog.entry(instance["InstanceType"])
        if entry is None:
            raise UnknownInstanceTypeError(
                f"instance type {instance['InstanceType']} is not in the bundled catalog"
            )
        instance_type = instance_type_from_entry(entry, self.region, zones=(zone,))
        private_dns = instance.get("PrivateDnsName", "")
        name = instance_id if join.node_name_from == METADATA_INSTANCE_ID or not private_dns else private_dns
        labels = instance_type.requirements.labels(include_well_known=True)
        labels.pop(LABEL_CAPACITY_TYPE, None)
        labels.update({LABEL_ZONE: zone, LABEL_REGION: self.region, LABEL_HOSTNAME: name, **join.labels})
        node = Node(
            metadata=ObjectMeta(
                name=name, labels=labels, annotations={FAKE_NODE_ANNOTATION: FAKE_NODE_VALUE}
            ),
            provider_id=provider_id(zone, instance_id),
            taints=join.taints,
        )
        body = node_to_dict(node)
        body["status"] = {
            "capacity": resources_to_dict(instance_type.capacity),
            "allocatable": resources_to_dict(instance_type.allocatable),
        }
        return body


def lightkube_node_writers(kubeconfig: Path) -> tuple[NodeCreator, NodeDeleter]:
    """Create and delete Nodes on the API server of ``kubeconfig``."""
    from lightkube import ApiError, Client, KubeConfig
    from lightkube.codecs import from_dict
    from lightkube.resources.core_v1 import Node as KubeNode

    client = Client(KubeConfig.from_file(kubeconfig), field_manager="karpy-instance-booter")
    conflict, not_found = 409, 404

    def create(body: JSON) -> None:
        try:
            client.create(from_dict(body))
        except ApiError as error:
            if error.status.code != conflict:  # already registered (a retried pass)
                raise

    def delete(name: str) -> None:
        try:
            client.delete(KubeNode, name)
        except ApiError as error:
            if error.status.code != not_found:
                raise

    return create, delete
