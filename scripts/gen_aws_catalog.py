#!/usr/bin/env python3
"""Generate the bundled AWS EC2 instance-type catalog for us-east-1.

Writes ``src/karpy/cloud/data/aws-us-east-1.json``. The output is committed; this
script exists so the catalog can be audited and regenerated. It uses only the
standard library and is fully deterministic (no clock, no randomness, no network).

Data provenance (see ``src/karpy/cloud/data/README.md`` for details):

* ``ON_DEMAND``: Linux on-demand USD/hour in us-east-1, transcribed from
  aws/karpenter-provider-aws ``pkg/providers/pricing/zz_generated.pricing_aws.go``
  (generated 2026-02-09T13:43:35Z).
* ``MAX_PODS``: first column of aws/amazon-vpc-cni-k8s ``misc/eni-max-pods.txt``
  (``ENIs * (IPv4 per ENI - 1) + 2``).
* vCPU, memory, GPU, instance-store NVMe and hypervisor: AWS instance-type
  specifications, cross-checked against Karpenter's generated
  ``website/content/en/docs/reference/instance-types.md``.
* ``networkBandwidthGbps``: the AWS "up to" (burst) figure, not the baseline.
* Spot prices: synthetic, derived from the on-demand price by the fixed rule in
  ``spot_price`` below. They are NOT real market data.

Usage::

    python3 scripts/gen_aws_catalog.py           # (re)write the JSON
    python3 scripts/gen_aws_catalog.py --check   # exit 1 if the JSON is stale
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REGION = "us-east-1"
ZONES: tuple[str, ...] = ("us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d", "us-east-1f")
RETRIEVED = "2026-02-09"
SOURCE = (
    "On-demand prices: AWS EC2 on-demand Linux price list for us-east-1 as captured in Karpenter's "
    "generated pricing table (aws/karpenter-provider-aws pkg/providers/pricing/zz_generated.pricing_aws.go, "
    "generated 2026-02-09). Instance specifications (vCPU, memory, GPU, instance-store NVMe, hypervisor, "
    "network 'up to' bandwidth): AWS EC2 instance type documentation, cross-checked against Karpenter's "
    "generated instance-types reference. Max pods: amazon-vpc-cni-k8s misc/eni-max-pods.txt. "
    "Zone offerings are illustrative. Spot prices are a synthetic, deterministic snapshot "
    "(30-70% below on-demand), not live market data."
)

OUTPUT = Path(__file__).resolve().parent.parent / "src" / "karpy" / "cloud" / "data" / "aws-us-east-1.json"

# --------------------------------------------------------------------------------------------
# On-demand prices (USD/hour, Linux, us-east-1). One family per line: "family: size=price ...".
# Transcribed from Karpenter's zz_generated.pricing_aws.go (generated 2026-02-09T13:43:35Z).
# --------------------------------------------------------------------------------------------
ON_DEMAND_TABLE = """
c5: large=0.085 xlarge=0.17 2xlarge=0.34 4xlarge=0.68 9xlarge=1.53 12xlarge=2.04 18xlarge=3.06
    24xlarge=4.08 metal=4.08
c5a: large=0.077 xlarge=0.154 2xlarge=0.308 4xlarge=0.616 8xlarge=1.232 12xlarge=1.848 16xlarge=2.464
    24xlarge=3.696
c5n: large=0.108 xlarge=0.216 2xlarge=0.432 4xlarge=0.864 9xlarge=1.944 18xlarge=3.888 metal=3.888
c6i: large=0.085 xlarge=0.17 2xlarge=0.34 4xlarge=0.68 8xlarge=1.36 12xlarge=2.04 16xlarge=2.72
    24xlarge=4.08 32xlarge=5.44 metal=5.44
c6a: large=0.0765 xlarge=0.153 2xlarge=0.306 4xlarge=0.612 8xlarge=1.224 12xlarge=1.836 16xlarge=2.448
    24xlarge=3.672 32xlarge=4.896 48xlarge=7.344 metal=7.344
c7i: large=0.08925 xlarge=0.1785 2xlarge=0.357 4xlarge=0.714 8xlarge=1.428 12xlarge=2.142 16xlarge=2.856
    24xlarge=4.284 48xlarge=8.568 metal-24xl=4.7124 metal-48xl=8.568
c7a: medium=0.05132 large=0.10264 xlarge=0.20528 2xlarge=0.41056 4xlarge=0.82112 8xlarge=1.64224
    12xlarge=2.46336 16xlarge=3.28448 24xlarge=4.92672 32xlarge=6.56896 48xlarge=9.85344
    metal-48xl=9.85344
c6g: medium=0.034 large=0.068 xlarge=0.136 2xlarge=0.272 4xlarge=0.544 8xlarge=1.088 12xlarge=1.632
    16xlarge=2.176 metal=2.3066
c7g: medium=0.0363 large=0.0725 xlarge=0.145 2xlarge=0.29 4xlarge=0.58 8xlarge=1.16 12xlarge=1.74
    16xlarge=2.32 metal=2.32
c8g: medium=0.03988 large=0.07976 xlarge=0.15952 2xlarge=0.31904 4xlarge=0.63808 8xlarge=1.27616
    12xlarge=1.91424 16xlarge=2.55232 24xlarge=3.82848 48xlarge=7.65696 metal-24xl=4.21133
    metal-48xl=7.65696
m5: large=0.096 xlarge=0.192 2xlarge=0.384 4xlarge=0.768 8xlarge=1.536 12xlarge=2.304 16xlarge=3.072
    24xlarge=4.608 metal=4.608
m5a: large=0.086 xlarge=0.172 2xlarge=0.344 4xlarge=0.688 8xlarge=1.376 12xlarge=2.064 16xlarge=2.752
    24xlarge=4.128
m6i: large=0.096 xlarge=0.192 2xlarge=0.384 4xlarge=0.768 8xlarge=1.536 12xlarge=2.304 16xlarge=3.072
    24xlarge=4.608 32xlarge=6.144 metal=6.144
m6a: large=0.0864 xlarge=0.1728 2xlarge=0.3456 4xlarge=0.6912 8xlarge=1.3824 12xlarge=2.0736
    16xlarge=2.7648 24xlarge=4.1472 32xlarge=5.5296 48xlarge=8.2944 metal=8.2944
m7i: large=0.1008 xlarge=0.2016 2xlarge=0.4032 4xlarge=0.8064 8xlarge=1.6128 12xlarge=2.4192
    16xlarge=3.2256 24xlarge=4.8384 48xlarge=9.6768 metal-24xl=5.32224 metal-48xl=9.6768
m7a: medium=0.05796 large=0.11592 xlarge=0.23184 2xlarge=0.46368 4xlarge=0.92736 8xlarge=1.85472
    12xlarge=2.78208 16xlarge=3.70944 24xlarge=5.56416 32xlarge=7.41888 48xlarge=11.12832
    metal-48xl=11.12832
m6g: medium=0.0385 large=0.077 xlarge=0.154 2xlarge=0.308 4xlarge=0.616 8xlarge=1.232 12xlarge=1.848
    16xlarge=2.464 metal=2.6112
m7g: medium=0.0408 large=0.0816 xlarge=0.1632 2xlarge=0.3264 4xlarge=0.6528 8xlarge=1.3056
    12xlarge=1.9584 16xlarge=2.6112 metal=2.6112
m8g: medium=0.04488 large=0.08976 xlarge=0.17952 2xlarge=0.35904 4xlarge=0.71808 8xlarge=1.43616
    12xlarge=2.15424 16xlarge=2.87232 24xlarge=4.30848 48xlarge=8.61696 metal-24xl=4.73933
    metal-48xl=8.61696
r5: large=0.126 xlarge=0.252 2xlarge=0.504 4xlarge=1.008 8xlarge=2.016 12xlarge=3.024 16xlarge=4.032
    24xlarge=6.048 metal=6.048
r5a: large=0.113 xlarge=0.226 2xlarge=0.452 4xlarge=0.904 8xlarge=1.808 12xlarge=2.712 16xlarge=3.616
    24xlarge=5.424
r6i: large=0.126 xlarge=0.252 2xlarge=0.504 4xlarge=1.008 8xlarge=2.016 12xlarge=3.024 16xlarge=4.032
    24xlarge=6.048 32xlarge=8.064 metal=8.064
r6a: large=0.1134 xlarge=0.2268 2xlarge=0.4536 4xlarge=0.9072 8xlarge=1.8144 12xlarge=2.7216
    16xlarge=3.6288 24xlarge=5.4432 32xlarge=7.2576 48xlarge=10.8864 metal=10.8864
r7i: large=0.1323 xlarge=0.2646 2xlarge=0.5292 4xlarge=1.0584 8xlarge=2.1168 12xlarge=3.1752
    16xlarge=4.2336 24xlarge=6.3504 48xlarge=12.7008 metal-24xl=6.98544 metal-48xl=12.7008
r7a: medium=0.07608 large=0.15215 xlarge=0.3043 2xlarge=0.6086 4xlarge=1.2172 8xlarge=2.4344
    12xlarge=3.6516 16xlarge=4.8688 24xlarge=7.3032 32xlarge=9.7376 48xlarge=14.6064 metal-48xl=14.6064
r6g: medium=0.0504 large=0.1008 xlarge=0.2016 2xlarge=0.4032 4xlarge=0.8064 8xlarge=1.6128
    12xlarge=2.4192 16xlarge=3.2256 metal=3.4191
r7g: medium=0.0536 large=0.1071 xlarge=0.2142 2xlarge=0.4284 4xlarge=0.8568 8xlarge=1.7136
    12xlarge=2.5704 16xlarge=3.4272 metal=3.4272
r8g: medium=0.05891 large=0.11782 xlarge=0.23564 2xlarge=0.47128 4xlarge=0.94256 8xlarge=1.88512
    12xlarge=2.82768 16xlarge=3.77024 24xlarge=5.65536 48xlarge=11.31072 metal-24xl=6.2209
    metal-48xl=11.31072
t3: nano=0.0052 micro=0.0104 small=0.0208 medium=0.0416 large=0.0832 xlarge=0.1664 2xlarge=0.3328
t3a: nano=0.0047 micro=0.0094 small=0.0188 medium=0.0376 large=0.0752 xlarge=0.1504 2xlarge=0.3008
t4g: nano=0.0042 micro=0.0084 small=0.0168 medium=0.0336 large=0.0672 xlarge=0.1344 2xlarge=0.2688
g4dn: xlarge=0.526 2xlarge=0.752 4xlarge=1.204 8xlarge=2.176 12xlarge=3.912 16xlarge=4.352 metal=7.824
g5: xlarge=1.006 2xlarge=1.212 4xlarge=1.624 8xlarge=2.448 12xlarge=5.672 16xlarge=4.096 24xlarge=8.144
    48xlarge=16.288
g6: xlarge=0.8048 2xlarge=0.9776 4xlarge=1.3232 8xlarge=2.0144 12xlarge=4.6016 16xlarge=3.3968
    24xlarge=6.6752 48xlarge=13.3504
p3: 2xlarge=3.06 8xlarge=12.24 16xlarge=24.48
"""

# --------------------------------------------------------------------------------------------
# Max pods (first column of amazon-vpc-cni-k8s misc/eni-max-pods.txt).
# --------------------------------------------------------------------------------------------
MAX_PODS_TABLE = """
c5: large=29 xlarge=58 2xlarge=58 4xlarge=234 9xlarge=234 12xlarge=234 18xlarge=737 24xlarge=737
    metal=737
c5a: large=29 xlarge=58 2xlarge=58 4xlarge=234 8xlarge=234 12xlarge=234 16xlarge=737 24xlarge=737
c5n: large=29 xlarge=58 2xlarge=58 4xlarge=234 9xlarge=234 18xlarge=737 metal=737
c6i: large=29 xlarge=58 2xlarge=58 4xlarge=234 8xlarge=234 12xlarge=234 16xlarge=737 24xlarge=737
    32xlarge=737 metal=737
c6a: large=29 xlarge=58 2xlarge=58 4xlarge=234 8xlarge=234 12xlarge=234 16xlarge=737 24xlarge=737
    32xlarge=737 48xlarge=737 metal=737
c7i: large=29 xlarge=58 2xlarge=58 4xlarge=234 8xlarge=234 12xlarge=234 16xlarge=737 24xlarge=737
    48xlarge=737 metal-24xl=737 metal-48xl=737
c7a: medium=8 large=29 xlarge=58 2xlarge=58 4xlarge=234 8xlarge=234 12xlarge=234 16xlarge=737
    24xlarge=737 32xlarge=737 48xlarge=737 metal-48xl=737
c6g: medium=8 large=29 xlarge=58 2xlarge=58 4xlarge=234 8xlarge=234 12xlarge=234 16xlarge=737 metal=737
c7g: medium=8 large=29 xlarge=58 2xlarge=58 4xlarge=234 8xlarge=234 12xlarge=234 16xlarge=737 metal=737
c8g: medium=8 large=29 xlarge=58 2xlarge=58 4xlarge=234 8xlarge=234 12xlarge=234 16xlarge=737
    24xlarge=737 48xlarge=737 metal-24xl=737 metal-48xl=737
m5: large=29 xlarge=58 2xlarge=58 4xlarge=234 8xlarge=234 12xlarge=234 16xlarge=737 24xlarge=737
    metal=737
m5a: large=29 xlarge=58 2xlarge=58 4xlarge=234 8xlarge=234 12xlarge=234 16xlarge=737 24xlarge=737
m6i: large=29 xlarge=58 2xlarge=58 4xlarge=234 8xlarge=234 12xlarge=234 16xlarge=737 24xlarge=737
    32xlarge=737 metal=737
m6a: large=29 xlarge=58 2xlarge=58 4xlarge=234 8xlarge=234 12xlarge=234 16xlarge=737 24xlarge=737
    32xlarge=737 48xlarge=737 metal=737
m7i: large=29 xlarge=58 2xlarge=58 4xlarge=234 8xlarge=234 12xlarge=234 16xlarge=737 24xlarge=737
    48xlarge=737 metal-24xl=737 metal-48xl=737
m7a: medium=8 large=29 xlarge=58 2xlarge=58 4xlarge=234 8xlarge=234 12xlarge=234 16xlarge=737
    24xlarge=737 32xlarge=737 48xlarge=737 metal-48xl=737
m6g: medium=8 large=29 xlarge=58 2xlarge=58 4xlarge=234 8xlarge=234 12xlarge=234 16xlarge=737 metal=737
m7g: medium=8 large=29 xlarge=58 2xlarge=58 4xlarge=234 8xlarge=234 12xlarge=234 16xlarge=737 metal=737
m8g: medium=8 large=29 xlarge=58 2xlarge=58 4xlarge=234 8xlarge=234 12xlarge=234 16xlarge=737
    24xlarge=737 48xlarge=737 metal-24xl=737 metal-48xl=737
r5: large=29 xlarge=58 2xlarge=58 4xlarge=234 8xlarge=234 12xlarge=234 16xlarge=737 24xlarge=737
    metal=737
r5a: large=29 xlarge=58 2xlarge=58 4xlarge=234 8xlarge=234 12xlarge=234 16xlarge=737 24xlarge=737
r6i: large=29 xlarge=58 2xlarge=58 4xlarge=234 8xlarge=234 12xlarge=234 16xlarge=737 24xlarge=737
    32xlarge=737 metal=737
r6a: large=29 xlarge=58 2xlarge=58 4xlarge=234 8xlarge=234 12xlarge=234 16xlarge=737 24xlarge=737
    32xlarge=737 48xlarge=737 metal=737
r7i: large=29 xlarge=58 2xlarge=58 4xlarge=234 8xlarge=234 12xlarge=234 16xlarge=737 24xlarge=737
    48xlarge=737 metal-24xl=737 metal-48xl=737
r7a: medium=8 large=29 xlarge=58 2xlarge=58 4xlarge=234 8xlarge=234 12xlarge=234 16xlarge=737
    24xlarge=737 32xlarge=737 48xlarge=737 metal-48xl=737
r6g: medium=8 large=29 xlarge=58 2xlarge=58 4xlarge=234 8xlarge=234 12xlarge=234 16xlarge=737 metal=737
r7g: medium=8 large=29 xlarge=58 2xlarge=58 4xlarge=234 8xlarge=234 12xlarge=234 16xlarge=737 metal=737
r8g: medium=8 large=29 xlarge=58 2xlarge=58 4xlarge=234 8xlarge=234 12xlarge=234 16xlarge=737
    24xlarge=737 48xlarge=737 metal-24xl=737 metal-48xl=737
t3: nano=4 micro=4 small=11 medium=17 large=35 xlarge=58 2xlarge=58
t3a: nano=4 micro=4 small=8 medium=17 large=35 xlarge=58 2xlarge=58
t4g: nano=4 micro=4 small=11 medium=17 large=35 xlarge=58 2xlarge=58
g4dn: xlarge=29 2xlarge=29 4xlarge=29 8xlarge=58 12xlarge=234 16xlarge=58 metal=737
g5: xlarge=58 2xlarge=58 4xlarge=234 8xlarge=234 12xlarge=737 16xlarge=234 24xlarge=737 48xlarge=345
g6: xlarge=58 2xlarge=58 4xlarge=234 8xlarge=234 12xlarge=234 16xlarge=737 24xlarge=737 48xlarge=737
p3: 2xlarge=58 8xlarge=234 16xlarge=234
"""

# --------------------------------------------------------------------------------------------
# Network bandwidth, the "up to" (burst) figure in Gbps, per size. Shared by several families.
# --------------------------------------------------------------------------------------------
NET_C5 = "large=10 xlarge=10 2xlarge=10 4xlarge=10 9xlarge=12 12xlarge=12 18xlarge=25 24xlarge=25 metal=25"
NET_M5_R5 = "large=10 xlarge=10 2xlarge=10 4xlarge=10 8xlarge=10 12xlarge=12 16xlarge=20 24xlarge=25 metal=25"
NET_C5A = "large=10 xlarge=10 2xlarge=10 4xlarge=10 8xlarge=10 12xlarge=12 16xlarge=20 24xlarge=20"
NET_M5A_R5A = "large=10 xlarge=10 2xlarge=10 4xlarge=10 8xlarge=10 12xlarge=10 16xlarge=12 24xlarge=20"
NET_C5N = "large=25 xlarge=25 2xlarge=25 4xlarge=25 9xlarge=50 18xlarge=100 metal=100"
NET_X86_GEN6_7 = (
    "medium=12.5 large=12.5 xlarge=12.5 2xlarge=12.5 4xlarge=12.5 8xlarge=12.5 12xlarge=18.75 16xlarge=25"
    " 24xlarge=37.5 32xlarge=50 48xlarge=50 metal=50 metal-24xl=37.5 metal-48xl=50"
)
NET_GRAVITON2 = (
    "medium=10 large=10 xlarge=10 2xlarge=10 4xlarge=10 8xlarge=12 12xlarge=20 16xlarge=25 metal=25"
)
NET_GRAVITON3_4 = (
    "medium=12.5 large=12.5 xlarge=12.5 2xlarge=15 4xlarge=15 8xlarge=15 12xlarge=22.5 16xlarge=30"
    " 24xlarge=40 48xlarge=50 metal=30 metal-24xl=40 metal-48xl=50"
)
NET_BURSTABLE = "nano=5 micro=5 small=5 medium=5 large=5 xlarge=5 2xlarge=5"
NET_G4DN = "xlarge=25 2xlarge=25 4xlarge=25 8xlarge=50 12xlarge=50 16xlarge=50 metal=100"
NET_G5_G6 = "xlarge=10 2xlarge=10 4xlarge=25 8xlarge=25 12xlarge=40 16xlarge=25 24xlarge=50 48xlarge=100"
NET_P3 = "2xlarge=10 8xlarge=10 16xlarge=25"

# vCPUs by size for the regular (non-burstable, non-GPU) families.
VCPU_BY_SIZE: dict[str, int] = {
    "medium": 1,
    "large": 2,
    "xlarge": 4,
    "2xlarge": 8,
    "4xlarge": 16,
    "8xlarge": 32,
    "9xlarge": 36,
    "12xlarge": 48,
    "16xlarge": 64,
    "18xlarge": 72,
    "24xlarge": 96,
    "32xlarge": 128,
    "48xlarge": 192,
    "metal-24xl": 96,
    "metal-48xl": 192,
}

# Burstable (t3/t3a/t4g): size -> (vCPU, memory MiB).
BURSTABLE_SHAPES: dict[str, tuple[int, int]] = {
    "nano": (2, 512),
    "micro": (2, 1024),
    "small": (2, 2048),
    "medium": (2, 4096),
    "large": (2, 8192),
    "xlarge": (4, 16384),
    "2xlarge": (8, 32768),
}

# c5n has its own memory sizes (GiB 5.25 / 10.5 / 21 / 42 / 96 / 192).
C5N_SHAPES: dict[str, tuple[int, int]] = {
    "large": (2, 5376),
    "xlarge": (4, 10752),
    "2xlarge": (8, 21504),
    "4xlarge": (16, 43008),
    "9xlarge": (36, 98304),
    "18xlarge": (72, 196608),
    "metal": (72, 196608),
}

# GPU families: size -> (vCPU, memory MiB, GPU count, instance-store NVMe GB).
G4DN_SHAPES: dict[str, tuple[int, int, int, int]] = {
    "xlarge": (4, 16384, 1, 125),
    "2xlarge": (8, 32768, 1, 225),
    "4xlarge": (16, 65536, 1, 225),
    "8xlarge": (32, 131072, 1, 900),
    "12xlarge": (48, 196608, 4, 900),
    "16xlarge": (64, 262144, 1, 900),
    "metal": (96, 393216, 8, 1800),
}
G5_SHAPES: dict[str, tuple[int, int, int, int]] = {
    "xlarge": (4, 16384, 1, 250),
    "2xlarge": (8, 32768, 1, 450),
    "4xlarge": (16, 65536, 1, 600),
    "8xlarge": (32, 131072, 1, 900),
    "12xlarge": (48, 196608, 4, 3800),
    "16xlarge": (64, 262144, 1, 1900),
    "24xlarge": (96, 393216, 4, 3800),
    "48xlarge": (192, 786432, 8, 7600),
}
G6_SHAPES: dict[str, tuple[int, int, int, int]] = {
    "xlarge": (4, 16384, 1, 250),
    "2xlarge": (8, 32768, 1, 450),
    "4xlarge": (16, 65536, 1, 600),
    "8xlarge": (32, 131072, 1, 900),
    "12xlarge": (48, 196608, 4, 3760),
    "16xlarge": (64, 262144, 1, 1880),
    "24xlarge": (96, 393216, 4, 3760),
    "48xlarge": (192, 786432, 8, 7520),
}
P3_SHAPES: dict[str, tuple[int, int, int, int]] = {
    "2xlarge": (8, 62464, 1, 0),
    "8xlarge": (32, 249856, 4, 0),
    "16xlarge": (64, 499712, 8, 0),
}


@dataclass(frozen=True)
class GpuModel:
    name: str
    manufacturer: str
    memory_mib: int  # per GPU, as reported by EC2 DescribeInstanceTypes


GPU_T4 = GpuModel("t4", "nvidia", 16384)
GPU_A10G = GpuModel("a10g", "nvidia", 22888)
GPU_L4 = GpuModel("l4", "nvidia", 22888)
GPU_V100 = GpuModel("v100", "nvidia", 16384)


@dataclass(frozen=True)
class Family:
    name: str
    architecture: str  # "amd64" or "arm64"
    mib_per_vcpu: int  # 0 when the family uses an explicit shape table
    network: str  # one of the NET_* tables
    zones: tuple[str, ...]  # zones where the family is offered
    spot_fraction: float  # typical spot price as a fraction of on-demand
    hypervisor: str = "nitro"
    gpu: GpuModel | None = None


ALL_ZONES = ZONES
NO_F = ("us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d")
ABC = ("us-east-1a", "us-east-1b", "us-east-1c")
ACDF = ("us-east-1a", "us-east-1c", "us-east-1d", "us-east-1f")

FAMILIES: tuple[Family, ...] = (
    # Compute optimised: 2 GiB per vCPU.
    Family("c5", "amd64", 2048, NET_C5, ALL_ZONES, 0.42),
    Family("c5a", "amd64", 2048, NET_C5A, ALL_ZONES, 0.40),
    Family("c5n", "amd64", 0, NET_C5N, ALL_ZONES, 0.42),
    Family("c6i", "amd64", 2048, NET_X86_GEN6_7, ALL_ZONES, 0.42),
    Family("c6a", "amd64", 2048, NET_X86_GEN6_7, ALL_ZONES, 0.42),
    Family("c7i", "amd64", 2048, NET_X86_GEN6_7, NO_F, 0.46),
    Family("c7a", "amd64", 2048, NET_X86_GEN6_7, NO_F, 0.48),
    Family("c6g", "arm64", 2048, NET_GRAVITON2, ALL_ZONES, 0.42),
    Family("c7g", "arm64", 2048, NET_GRAVITON3_4, NO_F, 0.44),
    Family("c8g", "arm64", 2048, NET_GRAVITON3_4, ABC, 0.50),
    # General purpose: 4 GiB per vCPU.
    Family("m5", "amd64", 4096, NET_M5_R5, ALL_ZONES, 0.43),
    Family("m5a", "amd64", 4096, NET_M5A_R5A, ALL_ZONES, 0.40),
    Family("m6i", "amd64", 4096, NET_X86_GEN6_7, ALL_ZONES, 0.43),
    Family("m6a", "amd64", 4096, NET_X86_GEN6_7, ALL_ZONES, 0.42),
    Family("m7i", "amd64", 4096, NET_X86_GEN6_7, NO_F, 0.47),
    Family("m7a", "amd64", 4096, NET_X86_GEN6_7, NO_F, 0.48),
    Family("m6g", "arm64", 4096, NET_GRAVITON2, ALL_ZONES, 0.42),
    Family("m7g", "arm64", 4096, NET_GRAVITON3_4, NO_F, 0.44),
    Family("m8g", "arm64", 4096, NET_GRAVITON3_4, ABC, 0.50),
    # Memory optimised: 8 GiB per vCPU.
    Family("r5", "amd64", 8192, NET_M5_R5, ALL_ZONES, 0.35),
    Family("r5a", "amd64", 8192, NET_M5A_R5A, ALL_ZONES, 0.35),
    Family("r6i", "amd64", 8192, NET_X86_GEN6_7, ALL_ZONES, 0.36),
    Family("r6a", "amd64", 8192, NET_X86_GEN6_7, ALL_ZONES, 0.36),
    Family("r7i", "amd64", 8192, NET_X86_GEN6_7, NO_F, 0.42),
    Family("r7a", "amd64", 8192, NET_X86_GEN6_7, NO_F, 0.44),
    Family("r6g", "arm64", 8192, NET_GRAVITON2, ALL_ZONES, 0.36),
    Family("r7g", "arm64", 8192, NET_GRAVITON3_4, NO_F, 0.40),
    Family("r8g", "arm64", 8192, NET_GRAVITON3_4, ABC, 0.46),
    # Burstable.
    Family("t3", "amd64", 0, NET_BURSTABLE, ALL_ZONES, 0.35),
    Family("t3a", "amd64", 0, NET_BURSTABLE, ALL_ZONES, 0.35),
    Family("t4g", "arm64", 0, NET_BURSTABLE, ALL_ZONES, 0.36),
    # GPU.
    Family("g4dn", "amd64", 0, NET_G4DN, ALL_ZONES, 0.44, gpu=GPU_T4),
    Family("g5", "amd64", 0, NET_G5_G6, NO_F, 0.42, gpu=GPU_A10G),
    Family("g6", "amd64", 0, NET_G5_G6, NO_F, 0.46, gpu=GPU_L4),
    Family("p3", "amd64", 0, NET_P3, ACDF, 0.35, hypervisor="xen", gpu=GPU_V100),
)

# vCPU for the plain "metal" size, which differs by family.
METAL_VCPU: dict[str, int] = {
    "c5": 96,
    "c6i": 128,
    "c6a": 192,
    "c6g": 64,
    "c7g": 64,
    "m5": 96,
    "m6i": 128,
    "m6a": 192,
    "m6g": 64,
    "m7g": 64,
    "r5": 96,
    "r6i": 128,
    "r6a": 192,
    "r6g": 64,
    "r7g": 64,
}

GPU_SHAPES: dict[str, dict[str, tuple[int, int, int, int]]] = {
    "g4dn": G4DN_SHAPES,
    "g5": G5_SHAPES,
    "g6": G6_SHAPES,
    "p3": P3_SHAPES,
}

# Spot rule bounds (fraction of on-demand).
SPOT_MIN_FRACTION = 0.30
SPOT_MAX_FRACTION = 0.70
SIZE_JITTER = (0.92, 1.08)
ZONE_JITTER = (0.93, 1.07)


def parse_table(text: str) -> dict[str, dict[str, str]]:
    """Parse ``family: size=value ...`` lines (continuation lines are indented)."""
    result: dict[str, dict[str, str]] = {}
    current: str | None = None
    for raw in text.splitlines():
        if not raw.strip():
            continue
        line = raw
        if not raw[0].isspace():
            family, _, line = raw.partition(":")
            current = family.strip()
            if current in result:
                raise ValueError(f"duplicate family {current!r}")
            result[current] = {}
        if current is None:
            raise ValueError(f"continuation line before any family: {raw!r}")
        result[current].update(parse_pairs(line))
    return result


def parse_pairs(text: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for token in text.split():
        key, sep, value = token.partition("=")
        if not sep:
            raise ValueError(f"bad token {token!r}")
        if key in pairs:
            raise ValueError(f"duplicate key {key!r}")
        pairs[key] = value
    return pairs


def unit_hash(key: str) -> float:
    """A stable pseudo-random number in [0, 1] derived from ``key``."""
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()
    return int(digest[:8], 16) / 0xFFFFFFFF


def jitter(key: str, bounds: tuple[float, float]) -> float:
    low, high = bounds
    return low + (high - low) * unit_hash(key)


def spot_price(family: Family, name: str, zone: str, on_demand: float) -> float:
    """Synthetic spot price: on-demand x family fraction x size jitter x zone jitter, clamped."""
    fraction = (
        family.spot_fraction
        * jitter(f"size:{name}", SIZE_JITTER)
        * jitter(f"zone:{name}:{zone}", ZONE_JITTER)
    )
    # Clamp in whole ten-thousandths of a dollar so that rounding cannot leave the band.
    floor = math.ceil(on_demand * SPOT_MIN_FRACTION * 10_000)
    ceiling = math.floor(on_demand * SPOT_MAX_FRACTION * 10_000)
    units = min(max(round(on_demand * fraction * 10_000), floor), ceiling)
    return max(units, 1) / 10_000


def offered_zones(family: Family, size: str, vcpu: int) -> list[str]:
    """Bare-metal and very large (>= 128 vCPU) sizes are offered in fewer zones."""
    if size.startswith("metal") or vcpu >= 128:
        return list(family.zones[:3])
    return list(family.zones)


def shape(family: Family, size: str) -> tuple[int, int, int, int]:
    """Return (vCPU, memory MiB, GPU count, instance-store NVMe GB)."""
    if family.name in GPU_SHAPES:
        return GPU_SHAPES[family.name][size]
    if family.name in ("t3", "t3a", "t4g"):
        vcpu, memory = BURSTABLE_SHAPES[size]
        return vcpu, memory, 0, 0
    if family.name == "c5n":
        vcpu, memory = C5N_SHAPES[size]
        return vcpu, memory, 0, 0
    vcpu = METAL_VCPU[family.name] if size == "metal" else VCPU_BY_SIZE[size]
    return vcpu, vcpu * family.mib_per_vcpu, 0, 0


def build() -> dict[str, Any]:
    prices = parse_table(ON_DEMAND_TABLE)
    max_pods = parse_table(MAX_PODS_TABLE)
    families = {f.name: f for f in FAMILIES}
    if set(prices) != set(families) or set(max_pods) != set(families):
        raise ValueError("price / max-pods tables and FAMILIES disagree on the family list")

    types: list[dict[str, Any]] = []
    for family in FAMILIES:
        network = parse_pairs(family.network)
        if set(prices[family.name]) != set(max_pods[family.name]):
            raise ValueError(f"{family.name}: price and max-pods sizes differ")
        for size, price_text in prices[family.name].items():
            name = f"{family.name}.{size}"
            vcpu, memory, gpu_count, nvme = shape(family, size)
            on_demand = round(float(price_text), 6)
            zones = offered_zones(family, size, vcpu)
            gpu: dict[str, Any] | None = None
            if family.gpu is not None:
                gpu = {
                    "name": family.gpu.name,
                    "manufacturer": family.gpu.manufacturer,
                    "count": gpu_count,
                    "memoryMiB": family.gpu.memory_mib,
                }
            bandwidth = float(network[size])
            types.append(
                {
                    "name": name,
                    "vcpu": vcpu,
                    "memoryMiB": memory,
                    "architecture": family.architecture,
                    "maxPods": int(max_pods[family.name][size]),
                    "hypervisor": "" if size.startswith("metal") else family.hypervisor,
                    "onDemandPrice": on_demand,
                    "spotPrice": {z: spot_price(family, name, z, on_demand) for z in zones},
                    "zones": zones,
                    "gpu": gpu,
                    "localNVMeGiB": nvme,
                    "networkBandwidthGbps": int(bandwidth) if bandwidth.is_integer() else bandwidth,
                }
            )
    types.sort(key=lambda t: str(t["name"]))
    validate(types)
    return {
        "source": SOURCE,
        "retrieved": RETRIEVED,
        "region": REGION,
        "zones": list(ZONES),
        "instanceTypes": types,
    }


def validate(types: list[dict[str, Any]]) -> None:
    names = [str(t["name"]) for t in types]
    if len(names) != len(set(names)):
        raise ValueError("duplicate instance type names")
    by_name = {str(t["name"]): t for t in types}
    for t in types:
        zones = list(t["zones"])
        if len(zones) < 3 or not set(zones) <= set(ZONES):
            raise ValueError(f"{t['name']}: bad zones {zones}")
        if sorted(t["spotPrice"]) != sorted(zones):
            raise ValueError(f"{t['name']}: spot zones differ from offered zones")
        for price in t["spotPrice"].values():
            ratio = float(price) / float(t["onDemandPrice"])
            if not SPOT_MIN_FRACTION <= ratio <= SPOT_MAX_FRACTION:
                raise ValueError(f"{t['name']}: spot/on-demand ratio {ratio:.2f} out of range")
    for required in ("c5.large", "c5.xlarge", "m5.large", "m5.xlarge"):
        t = by_name[required]
        for zone in ("us-east-1a", "us-east-1b", "us-east-1c"):
            if zone not in t["zones"] or zone not in t["spotPrice"]:
                raise ValueError(f"{required} must be offered with spot in {zone}")


def render(catalog: dict[str, Any]) -> str:
    return json.dumps(catalog, indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="fail if the committed JSON is out of date")
    parser.add_argument("--output", type=Path, default=OUTPUT, help="where to write the catalog")
    args = parser.parse_args(argv)
    text = render(build())
    output: Path = args.output
    if args.check:
        if not output.exists() or output.read_text(encoding="utf-8") != text:
            print(f"{output} is out of date; run scripts/gen_aws_catalog.py", file=sys.stderr)
            return 1
        return 0
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text, encoding="utf-8")
    print(f"wrote {output} ({text.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
