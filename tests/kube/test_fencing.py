"""The write fence of ``karpy run``: past the renew deadline not one more write leaves the process.

Each seam is checked on its own: the API server transport (every method but
GET refused before it is sent), the elector's check, the AWS SDK clients
(every operation but Describe, Get and List), the event sender and the kwok
boot timers (a refused write is dropped, not retried).
The Runtime's part (a refusal ends the loop instead of being retried as one
reconcile's failure) is in ``tests/operator/test_runtime.py``; the whole,
with the API server stopped past the renew deadline, in
``tests/integration/test_leader_election.py``.
"""

from __future__ import annotations

import logging
import threading
from typing import cast

import boto3
import httpx2
import pytest
from botocore.stub import Stubber
from lightkube import Client, KubeConfig
from tests.kube.test_leader import NAMESPACE, Clock, FakeLeaseServer

from karpy.api.core import Node
from karpy.api.meta import ObjectMeta
from karpy.cloud.aws.client import AwsClient
from karpy.cloud.kwok.provider import KwokCloudProvider, KwokLaunch
from karpy.kube._events import EventSender, PendingEvent
from karpy.kube._http import ApiTransport
from karpy.kube.leader import LeaderElectionConfig, LeaderElector, LeadershipLostError
from karpy.operator.cluster import Cluster, NotLeaderError


class Refusing:
    """A fence that lets writes through until told to refuse them."""

    def __init__(self) -> None:
        self.refuse = False
        self.asked = 0

    def __call__(self) -> None:
        self.asked += 1
        if self.refuse:
            raise NotLeaderError("not leading")


def recording_transport() -> tuple[ApiTransport, list[tuple[str, str]]]:
    """A real ApiTransport whose requests reach an in-process handler instead of a server."""
    seen: list[tuple[str, str]] = []

    def handle(request: httpx2.Request) -> httpx2.Response:
        seen.append((request.method, request.url.path))
        return httpx2.Response(200, json={"kind": "Status"})

    config = KubeConfig.from_dict(
        {
            "clusters": [{"name": "c", "cluster": {"server": "http://api.test"}}],
            "users": [{"name": "u", "user": {}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "c",
        }
    )
    client = Client(config, transport=httpx2.MockTransport(handle))
    return ApiTransport(client), seen


def test_a_fenced_transport_refuses_writes_before_sending_them_and_lets_reads_through() -> None:
    transport, seen = recording_transport()
    fence = Refusing()
    fenced = transport.fenced(fence)
    fenced.request("POST", "/api/v1/nodes", body={"metadata": {"name": "a"}})
    assert seen == [("POST", "/api/v1/nodes")] and fence.asked == 1

    fence.refuse = True
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        with pytest.raises(NotLeaderError):
            fenced.request(method, "/api/v1/nodes/a", body={})
    assert seen == [("POST", "/api/v1/nodes")], "a refused write reached the server"
    fenced.request("GET", "/api/v1/nodes")  # reads are never fenced
    # The unfenced transport (the elector's, for the lease) is not affected.
    transport.request("PUT", "/apis/coordination.k8s.io/v1/namespaces/karpy/leases/l", body={})
    assert seen[1:] == [
        ("GET", "/api/v1/nodes"),
        ("PUT", "/apis/coordination.k8s.io/v1/namespaces/karpy/leases/l"),
    ]
    assert fence.asked == 5


def test_the_elector_check_refuses_once_the_renew_deadline_passes_and_before_it_leads() -> None:
    server, clock = FakeLeaseServer(), Clock()
    config = LeaderElectionConfig(namespace=NAMESPACE, identity="a")
    elector = LeaderElector(server, config, monotonic=clock, wall_clock=clock, jitter=lambda: 0.5)
    with pytest.raises(LeadershipLostError, match="lost lease"):
        elector.check_leading()  # a standby writes nothing
    elector.tick()
    elector.check_leading()
    server.down = True  # no renewal succeeds from now on
    clock.advance(config.renew_deadline - 0.01)
    elector.check_leading()
    clock.advance(0.02)
    with pytest.raises(NotLeaderError):  # the deadline, not the election thread's next step
        elector.check_leading()


def test_the_aws_fence_stands_before_every_operation_that_changes_something() -> None:
    session = boto3.session.Session(aws_access_key_id="x", aws_secret_access_key="x", region_name="us-east-1")
    client = AwsClient(session)
    fence = Refusing()
    client.fence(fence)
    ec2 = Stubber(client._ec2)
    ec2.add_response("describe_subnets", {"Subnets": []})
    with ec2:
        fence.refuse = True
        assert client.describe_subnets(()) == []  # a read passes
        with pytest.raises(NotLeaderError):
            client.create_fleet({"LaunchTemplateConfigs": [], "TargetCapacitySpecification": {}})
        with pytest.raises(NotLeaderError):
            client.terminate_instances(["i-0123456789abcdef0"])
        ec2.assert_no_pending_responses()
    assert fence.asked == 2  # the two writes; the read never asked


def test_an_event_refused_by_the_fence_is_dropped_quietly(caplog: pytest.LogCaptureFixture) -> None:
    def send(event: PendingEvent) -> None:
        raise NotLeaderError("not leading")

    sender = EventSender(send, name="test-events")
    caplog.set_level(logging.INFO)
    sender.submit(PendingEvent(object(), "Normal", "Launched", "launched", 0.0))
    assert sender.flush(5)
    sender.close(1)
    assert sender.failed == 1 and sender.sent == 0
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]


def test_a_kwok_boot_that_ends_after_the_lease_is_lost_creates_no_node(
    caplog: pytest.LogCaptureFixture,
) -> None:
    refused = threading.Event()

    class FencedCluster:
        def create(self, obj: Node) -> Node:
            refused.set()
            raise NotLeaderError("not leading")

    provider = KwokCloudProvider(cast(Cluster, FencedCluster()))
    node = Node(metadata=ObjectMeta(name="booting"))
    launch = KwokLaunch(node=node, instance_type=provider.instance_types[0], labels={})
    caplog.set_level(logging.INFO)
    provider._boot("booting", launch, 0.01)
    assert refused.wait(5)
    threading.Event().wait(0.2)  # the timer thread logs just after the refusal
    provider_log = [record.getMessage() for record in caplog.records if record.name.startswith("karpy")]
    assert any("not leading" in message for message in provider_log), provider_log
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]
