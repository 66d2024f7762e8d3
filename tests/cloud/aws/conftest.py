"""The moto world of tests/aws/world.py as fixtures: started once per session, pointed at per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.aws.world import (
    CLUSTER,
    DISCOVERY_TAG,
    KUBERNETES_VERSION,
    NODE_INSTANCE_PROFILE,
    NODE_ROLE,
    QUEUE,
    REGION,
    SSM_PREFIX,
    ZONES,
    AwsWorld,
    moto_world,
    sdk_environment,
)

__all__ = [
    "CLUSTER",
    "DISCOVERY_TAG",
    "KUBERNETES_VERSION",
    "NODE_INSTANCE_PROFILE",
    "NODE_ROLE",
    "QUEUE",
    "REGION",
    "SSM_PREFIX",
    "ZONES",
    "AwsWorld",
]


@pytest.fixture(scope="session")
def aws_world() -> Iterator[AwsWorld]:
    """moto on 127.0.0.1, started and seeded once for the session, stopped at its end."""
    with moto_world() as world:
        yield world


@pytest.fixture
def aws(aws_world: AwsWorld, monkeypatch: pytest.MonkeyPatch) -> AwsWorld:
    """The seeded world, with this test's environment pointing the SDK at it."""
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    for name, value in sdk_environment(aws_world.endpoint).items():
        monkeypatch.setenv(name, value)
    return aws_world
