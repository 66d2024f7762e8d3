"""The cloud providers ``karpy run`` launches nodes with, in one table: kwok and aws.

Each entry of :data:`PROVIDERS` says how the provider's settings are read from
``karpy run``'s options (:func:`karpy.settings.run_options`) and how the provider
is built, with the controllers it adds to the core ones
(:mod:`karpy.controllers.core`), as Karpenter's cloud providers add theirs
next to ``controllers.NewControllers``. ``karpy`` (cli.py) chooses the entry by
``KARPY_CLOUD_PROVIDER``; the :class:`~karpy.run.Runner` builds what the
settings name. A new provider is one entry here, one settings class and a
name in :data:`karpy.settings.CLOUD_PROVIDERS`.

The AWS stack is imported only when it is built, so that a kwok run never
imports boto3.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

from karpy.api.nodeclass import EC2_KIND
from karpy.cloud.kwok.provider import KwokCloudProvider
from karpy.cloud.kwok_catalog import KwokInstanceTypes
from karpy.cloud.provider import LAUNCH_FINISHED, CloudProvider
from karpy.controllers.core import CloudFor
from karpy.kube._http import ApiTransport
from karpy.kube.cluster import KubeCluster
from karpy.operator.cluster import WallClock
from karpy.operator.karpenter_metrics import Metrics
from karpy.operator.runtime import Controller
from karpy.settings import RunOptions

if TYPE_CHECKING:
    from karpy.cloud.aws.client import AwsClient
    from karpy.cloud.aws.interruption import SqsInterruptionQueue
    from karpy.cloud.aws.provider import AwsCloudProvider
    from karpy.cloud.aws.settings import AwsSettings

# (kind, old, new): a change for the reconcile loop, put on the Runner's queue from any thread.
HandOver = Callable[[str, object | None, object | None], None]


@dataclass(frozen=True, slots=True)
class KwokSettings:
    """The kwok provider's settings: its "instances" are Node objects, Ready by kwok or the fake kubelet."""

    provider: ClassVar[str] = "kwok"
    registration_delay: float = 0.0
    """KARPY_REGISTRATION_DELAY: seconds between a launch and its Node's creation (0: at once)."""
    instance_types: KwokInstanceTypes = KwokInstanceTypes.AWS
    """KARPY_KWOK_INSTANCE_TYPES: what a KWOKNodeClass offers unless its annotation says."""


@dataclass(frozen=True, slots=True)
class ProviderContext:
    """What the Runner gives a provider to build on."""

    cluster: KubeCluster
    clock: WallClock
    metrics: Metrics
    # The API server's transport, fenced as every write of the leader is.
    transport: ApiTransport
    hand_over: HandOver


class ProviderStack(Protocol):
    """A built provider: its cloud, its controllers, and what it does as the loop starts and stops."""

    @property
    def cloud(self) -> CloudProvider: ...

    def controllers(self, cloud_for: CloudFor) -> list[Controller]:
        """The controllers it adds to the core ones, in registration order."""
        ...

    def fence(self, check_leading: Callable[[], None]) -> None:
        """Pass every write to the cloud through ``check_leading`` first (leader election)."""
        ...

    def first_keys(self) -> list[tuple[str, str]]:
        """The reconciles due at start, even in an empty cluster."""
        ...

    def start(self) -> None:
        """Once this replica leads, before the loop's first turn."""
        ...

    def stop(self) -> None: ...


class KwokStack:
    """The kwok provider: nothing but the cloud, whose boots a new leader resumes."""

    def __init__(self, settings: KwokSettings, context: ProviderContext) -> None:
        self.provider = KwokCloudProvider(
            context.cluster,
            registration_delay=settings.registration_delay,
            clock=context.clock,
            default_instance_types=settings.instance_types,
        )

    @property
    def cloud(self) -> CloudProvider:
        return self.provider

    def controllers(self, cloud_for: CloudFor) -> list[Controller]:
        return []

    def fence(self, check_leading: Callable[[], None]) -> None:
        pass  # its writes are the API server's, fenced there

    def first_keys(self) -> list[tuple[str, str]]:
        return []

    def start(self) -> None:
        # Instances a previous leader launched and left booting get their Nodes.
        self.provider.resume_boots()

    def stop(self) -> None:
        pass


class AwsStack:
    """The AWS provider and what comes with it: node class status, pricing, cleanup, interruption.

    The provider's background launches and the interruption queue's messages
    reach the reconcile loop as changes put on the Runner's queue
    (``hand_over``), like the informers' notifications: one thread still owns
    the Runtime.
    """

    def __init__(self, settings: AwsSettings, context: ProviderContext) -> None:
        from karpy.cloud.aws.client import AwsClient
        from karpy.cloud.aws.provider import AwsCloudProvider

        if not settings.kubernetes_version:
            settings = dataclasses.replace(settings, kubernetes_version=kubernetes_version(context.transport))
        if not settings.cluster_ca_bundle:
            # As Karpenter: the CA of the API server connection (nodes' user data, the class hash).
            settings = dataclasses.replace(settings, cluster_ca_bundle=context.transport.ca_bundle)
        self.settings = settings
        self.cluster = context.cluster
        self.clock = context.clock
        self.metrics = context.metrics
        self.hand_over = context.hand_over
        self.client: AwsClient = AwsClient.for_region(settings.region)
        self.provider: AwsCloudProvider = AwsCloudProvider(
            context.cluster,
            self.client,
            settings,
            context.clock,
            wake=lambda name: context.hand_over(LAUNCH_FINISHED, None, name),
            metrics=context.metrics,
        )
        self.queue: SqsInterruptionQueue | None = None

    @property
    def cloud(self) -> CloudProvider:
        return self.provider

    def controllers(self, cloud_for: CloudFor) -> list[Controller]:
        from karpy.cloud.aws.launchtemplates import InstanceProfileCleanup, LaunchTemplateCleanup
        from karpy.cloud.aws.nodeclass_status import EC2NodeClassStatusController
        from karpy.cloud.aws.pricing import PricingRefresher
        from karpy.controllers.interruption import InterruptionController
        from karpy.controllers.metering import STATUS_RESYNC, StatusConditionMetricsController

        controllers: list[Controller] = [
            EC2NodeClassStatusController(
                self.cluster,
                self.client,
                self.clock,
                settings=self.settings,
                reservations=self.provider.reservations,
            ),
            LaunchTemplateCleanup(self.cluster, self.client, self.provider.templates, metrics=self.metrics),
            InstanceProfileCleanup(self.cluster, self.client, self.settings),
            PricingRefresher(self.client, self.provider, self.clock, metrics=self.metrics),
            # The AWS provider's operatorpkg status controller for its node class.
            StatusConditionMetricsController(
                self.cluster, self.clock, self.metrics, EC2_KIND, resync=STATUS_RESYNC
            ),
        ]
        if self.settings.interruption_queue:
            controllers.append(
                InterruptionController(
                    self.cluster, cloud_for(InterruptionController.name), self.clock, metrics=self.metrics
                )
            )
        return controllers

    def fence(self, check_leading: Callable[[], None]) -> None:
        self.client.fence(check_leading)

    def first_keys(self) -> list[tuple[str, str]]:
        """Prices, leftover launch templates and instance profiles."""
        from karpy.cloud.aws.launchtemplates import InstanceProfileCleanup, LaunchTemplateCleanup
        from karpy.cloud.aws.pricing import REFRESH_KEY, PricingRefresher

        return [
            (PricingRefresher.name, REFRESH_KEY),
            (LaunchTemplateCleanup.name, LaunchTemplateCleanup.KEY),
            (InstanceProfileCleanup.name, InstanceProfileCleanup.KEY),
        ]

    def start(self) -> None:
        import boto3

        from karpy.cloud.aws.interruption import SqsInterruptionQueue
        from karpy.operator.interruption import INTERRUPTION

        # Only the leader reads the interruption queue.
        if self.settings.interruption_queue and self.queue is None:
            self.queue = SqsInterruptionQueue(
                self.settings.interruption_queue,
                lambda message: self.hand_over(INTERRUPTION, None, message),
                session=boto3.session.Session(region_name=self.settings.region or None),
                metrics=self.metrics,
            )
            self.queue.start()

    def stop(self) -> None:
        if self.queue is not None:
            self.queue.stop()
        self.provider.close()


def kubernetes_version(transport: ApiTransport) -> str:
    """The API server's major.minor (``/version``), as the EKS AMI aliases are per version."""
    info = transport.request("GET", "/version").body
    if not isinstance(info, dict):
        return ""
    major = str(info.get("major", "")).rstrip("+")
    minor = str(info.get("minor", "")).rstrip("+")
    return f"{major}.{minor}" if major and minor else ""


def kwok_settings(options: RunOptions, environ: Mapping[str, str]) -> KwokSettings:
    return KwokSettings(
        registration_delay=options.registration_delay,
        instance_types=KwokInstanceTypes(options.kwok_instance_types),
    )


def aws_settings(options: RunOptions, environ: Mapping[str, str]) -> AwsSettings:
    """The AWS provider's settings; the region is the SDK's (AWS_REGION, else AWS_DEFAULT_REGION)."""
    from karpy.cloud.aws.settings import AwsSettings

    return AwsSettings(
        cluster_name=options.cluster_name,
        region=environ.get("AWS_REGION", "").strip() or environ.get("AWS_DEFAULT_REGION", "").strip(),
        interruption_queue=options.interruption_queue,
        ssm_prefix=options.aws_ssm_prefix,
        cluster_endpoint=options.cluster_endpoint,
        cluster_ca_bundle=options.cluster_ca_bundle,
        launch_concurrency=options.aws_launch_concurrency,
        reserved_capacity=options.feature_gates.reserved_capacity,
    )


def _build_kwok(settings: KwokSettings | AwsSettings, context: ProviderContext) -> ProviderStack:
    if not isinstance(settings, KwokSettings):
        raise TypeError(f"the kwok provider takes KwokSettings, not {type(settings).__name__}")
    return KwokStack(settings, context)


def _build_aws(settings: KwokSettings | AwsSettings, context: ProviderContext) -> ProviderStack:
    if isinstance(settings, KwokSettings):
        raise TypeError("the aws provider takes AwsSettings, not KwokSettings")
    return AwsStack(settings, context)


@dataclass(frozen=True, slots=True)
class Provider:
    """One cloud provider: how its settings are read and how it is built."""

    name: str
    # Its settings from karpy run's options and the environment (cli.py).
    settings: Callable[[RunOptions, Mapping[str, str]], KwokSettings | AwsSettings]
    # The provider and its controllers, over a Runner's cluster (run.py).
    build: Callable[[KwokSettings | AwsSettings, ProviderContext], ProviderStack]


PROVIDERS: dict[str, Provider] = {
    "kwok": Provider("kwok", kwok_settings, _build_kwok),
    "aws": Provider("aws", aws_settings, _build_aws),
}


def provider_of(settings: KwokSettings | AwsSettings) -> Provider:
    """The entry whose settings these are."""
    return PROVIDERS[settings.provider]
