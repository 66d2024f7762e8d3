"""What the AWS provider is told about its cluster and account (``karpy run --cloud-provider aws``).

The names are Karpenter's settings where Karpenter has the setting
(``CLUSTER_NAME``, ``INTERRUPTION_QUEUE``, ``CLUSTER_ENDPOINT``,
``CLUSTER_CA_BUNDLE``); the region and credentials are the SDK's own
configuration (``AWS_REGION``, the standard credential chain, IRSA's web
identity, ``AWS_ENDPOINT_URL``), so nothing karpy-specific stands between a
pod's environment and boto3. ``KARPY_AWS_SSM_PREFIX`` exists because the
AMI aliases (``al2023@latest``) are SSM parameters under ``/aws/service/``,
a path a mirror or a test endpoint may have to serve under a prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from karpy.cloud.aws.resolution import ResolutionSettings
from karpy.settings import DEFAULT_LAUNCH_CONCURRENCY


@dataclass(frozen=True, slots=True)
class AwsSettings:
    # Its entry in karpy.providers.PROVIDERS.
    provider: ClassVar[str] = "aws"
    # CLUSTER_NAME: tags every instance, launch template and instance profile; required on AWS.
    cluster_name: str
    # AWS_REGION; empty: the SDK's default chain decides.
    region: str = ""
    # INTERRUPTION_QUEUE: the SQS queue EventBridge feeds; empty: interruptions are not watched.
    interruption_queue: str = ""
    # KARPY_AWS_SSM_PREFIX: prepended to /aws/service/... when an AMI alias is resolved.
    ssm_prefix: str = ""
    # The cluster's Kubernetes major.minor (the EKS AMI aliases are per version); from the apiserver.
    kubernetes_version: str = ""
    # CLUSTER_ENDPOINT and CLUSTER_CA_BUNDLE (base64 PEM): what AL2/AL2023/Bottlerocket nodes join.
    cluster_endpoint: str = ""
    cluster_ca_bundle: str = ""
    # KARPY_AWS_LAUNCH_CONCURRENCY: CreateFleet and TerminateInstances calls in flight at once.
    launch_concurrency: int = DEFAULT_LAUNCH_CONCURRENCY
    # The ReservedCapacity gate: capacity reservations are resolved, offered and launched into.
    reserved_capacity: bool = True

    def resolution(self) -> ResolutionSettings:
        return ResolutionSettings(
            cluster_name=self.cluster_name,
            region=self.region,
            kubernetes_version=self.kubernetes_version,
            ssm_prefix=self.ssm_prefix,
            reserved_capacity=self.reserved_capacity,
        )
