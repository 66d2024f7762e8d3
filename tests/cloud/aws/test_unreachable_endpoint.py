"""An EC2 endpoint that refuses every connection: one warning per streak, a growing delay, no traceback.

karpy run against such an endpoint logged 76 ERROR lines and 320 tracebacks in
45 s, the garbage collector's listing and the launch template cleanup raising
into the controller runtime, which retried them every second. Those two now
say it as the node class status, the prices and the SQS poller do.
"""

from __future__ import annotations

import logging
import socket

import pytest
from tests.aws.world import CLUSTER, REGION, sdk_environment

from karpy.cloud.aws.client import AwsClient
from karpy.cloud.aws.launchtemplates import LaunchTemplateCleanup, LaunchTemplates
from karpy.cloud.aws.provider import AwsCloudProvider
from karpy.cloud.aws.settings import AwsSettings
from karpy.cloud.provider import CloudProviderError
from karpy.sim.clock import VirtualClock
from karpy.sim.store import InMemoryCluster

RETRIES = 4


@pytest.fixture
def unreachable(monkeypatch: pytest.MonkeyPatch) -> AwsClient:
    """A client whose endpoint is a loopback port nothing listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    for name, value in sdk_environment(f"http://127.0.0.1:{port}").items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # each refusal at once: the test counts karpy's retries
    return AwsClient.for_region(REGION)


def test_the_launch_template_cleanup_warns_once_and_backs_off(
    unreachable: AwsClient, caplog: pytest.LogCaptureFixture
) -> None:
    cleanup = LaunchTemplateCleanup(
        InMemoryCluster(VirtualClock()), unreachable, LaunchTemplates(unreachable, CLUSTER)
    )
    caplog.set_level(logging.DEBUG, logger="karpy.cloud.aws")
    delays = [cleanup.reconcile(LaunchTemplateCleanup.KEY) or 0.0 for _ in range(RETRIES)]
    assert delays == sorted(delays) and delays[0] > 0 and delays[-1] == 2 ** (RETRIES - 1) * delays[0]
    warnings = [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "launch templates" in warnings[0], warnings
    assert not [record for record in caplog.records if record.exc_info]


def test_the_provider_reports_an_unanswered_listing_as_a_cloud_error(unreachable: AwsClient) -> None:
    clock = VirtualClock()
    provider = AwsCloudProvider(
        InMemoryCluster(clock), unreachable, AwsSettings(cluster_name=CLUSTER, region=REGION), clock
    )
    try:
        with pytest.raises(CloudProviderError, match="DescribeInstances"):
            provider.list()
        with pytest.raises(CloudProviderError, match="DescribeInstances"):
            provider.get("aws:///us-east-1a/i-0123456789abcdef0")
    finally:
        provider.close()
