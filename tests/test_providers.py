"""The provider table: every provider ``karpy run`` accepts has one entry, built from its settings."""

from __future__ import annotations

from typing import cast

import pytest

from karpy.kube._http import ApiTransport
from karpy.providers import PROVIDERS, KwokSettings, KwokStack, provider_of
from karpy.run import Runner, RunSettings
from karpy.settings import CLOUD_PROVIDERS, RunOptions


def test_every_cloud_provider_has_one_entry() -> None:
    assert list(PROVIDERS) == list(CLOUD_PROVIDERS)
    assert all(name == entry.name for name, entry in PROVIDERS.items())


def test_the_kwok_entry_reads_its_settings_and_builds_the_kwok_cloud() -> None:
    settings = PROVIDERS["kwok"].settings(RunOptions(registration_delay=3.0), {})
    assert settings == KwokSettings(registration_delay=3.0)
    assert provider_of(settings) is PROVIDERS["kwok"]
    # The runner is only built, never run: no request reaches the transport.
    runner = Runner(cast(ApiTransport, object()), RunSettings(cloud=settings))
    assert isinstance(runner.provider, KwokStack)
    assert runner.cloud is runner.provider.provider
    assert runner.provider.provider.registration_delay == 3.0


def test_the_aws_entry_reads_its_settings() -> None:
    pytest.importorskip("boto3")
    options = RunOptions(cluster_name="demo", cloud_provider="aws", interruption_queue="q")
    settings = PROVIDERS["aws"].settings(options, {"AWS_REGION": "eu-west-1"})
    assert provider_of(settings) is PROVIDERS["aws"]
    assert not isinstance(settings, KwokSettings)
    assert (settings.cluster_name, settings.region, settings.interruption_queue) == ("demo", "eu-west-1", "q")


class CaTransport:
    """A transport that is never asked anything but the CA of its connection."""

    ca_bundle = "Q0EgT0YgVEhFIENPTk5FQ1RJT04="


@pytest.mark.parametrize(
    ("setting", "expected"), [("", CaTransport.ca_bundle), ("U0VUVElORw==", "U0VUVElORw==")]
)
def test_the_aws_provider_takes_the_connections_ca_when_none_is_set(setting: str, expected: str) -> None:
    # As Karpenter: CLUSTER_CA_BUNDLE, else the API server connection's CA, for user data and the class hash.
    pytest.importorskip("boto3")
    from karpy.cloud.aws.settings import AwsSettings

    settings = AwsSettings(
        cluster_name="demo", region="eu-west-1", cluster_ca_bundle=setting, kubernetes_version="1.34"
    )
    runner = Runner(cast(ApiTransport, CaTransport()), RunSettings(cloud=settings))
    assert runner.provider.cloud.settings.cluster_ca_bundle == expected  # type: ignore[attr-defined]
