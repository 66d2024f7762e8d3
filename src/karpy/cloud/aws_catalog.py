"""The bundled catalog of AWS EC2 instance types, turned into InstanceTypes.

The catalog (``data/aws-us-east-1.json``, with its source and date inside)
holds per-type facts: vCPUs, memory, architecture, max pods, GPUs, prices per
offering. This module derives what Karpenter's AWS provider derives from the
same facts, so simulated plans match what Karpenter would do on AWS:

- labels: ``node.kubernetes.io/instance-type``, ``kubernetes.io/arch``,
  ``kubernetes.io/os``, zone, region, capacity type, and the
  ``karpenter.k8s.aws/instance-*`` family (category, family, generation, size,
  cpu, memory, hypervisor, gpu name/manufacturer/count/memory, local NVMe,
  network bandwidth);
- capacity: memory less the 7.5% that the hypervisor keeps
  (Karpenter's ``VM_MEMORY_OVERHEAD_PERCENT`` default), 20Gi root volume,
  max pods from the ENI table (or the node class' kubelet ``maxPods``);
- overhead: Karpenter's kube-reserved defaults (CPU 6% of the first core, 1%
  of the second, 0.5% of the next two, 0.25% of the rest; memory 11MiB a pod
  plus 255MiB; 1Gi of storage) and the kubelet's hard eviction threshold
  (100Mi memory, 10% of the root volume).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import cache
from importlib import resources
from typing import Any

from karpy.api.instancetype import InstanceType, Offering, Overhead
from karpy.api.nodeclass import EC2NodeClass, KubeletConfiguration
from karpy.api.quantity import Quantity, ResourceAmounts, amount_of
from karpy.api.requirements import (
    AWS_LABEL_INSTANCE_CATEGORY,
    AWS_LABEL_INSTANCE_CPU,
    AWS_LABEL_INSTANCE_FAMILY,
    AWS_LABEL_INSTANCE_GENERATION,
    AWS_LABEL_INSTANCE_GPU_COUNT,
    AWS_LABEL_INSTANCE_GPU_MANUFACTURER,
    AWS_LABEL_INSTANCE_GPU_MEMORY,
    AWS_LABEL_INSTANCE_GPU_NAME,
    AWS_LABEL_INSTANCE_HYPERVISOR,
    AWS_LABEL_INSTANCE_LOCAL_NVME,
    AWS_LABEL_INSTANCE_MEMORY,
    AWS_LABEL_INSTANCE_NETWORK_BANDWIDTH,
    AWS_LABEL_INSTANCE_SIZE,
    CAPACITY_TYPE_ON_DEMAND,
    CAPACITY_TYPE_SPOT,
    LABEL_ARCH,
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    LABEL_OS,
    LABEL_REGION,
    LABEL_ZONE,
    Requirement,
    Requirements,
)
from karpy.api.storage import EBS_CSI_DRIVER

CATALOG_FILE = "aws-us-east-1.json"
MIB = 1024 * 1024
GIB = 1024 * MIB
GB = 10**9
VM_MEMORY_OVERHEAD_PERCENT = 0.075
ROOT_VOLUME_BYTES = 20 * GIB
RESOURCE_NVIDIA_GPU = "nvidia.com/gpu"
RESOURCE_AMD_GPU = "amd.com/gpu"


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One instance type as the catalog file states it."""

    name: str
    vcpu: int
    memory_mib: int
    architecture: str
    max_pods: int
    hypervisor: str
    on_demand_price: float
    spot_prices: Mapping[str, float]
    zones: tuple[str, ...]
    gpu_name: str = ""
    gpu_manufacturer: str = ""
    gpu_count: int = 0
    gpu_memory_mib: int = 0
    local_nvme_gib: int = 0
    network_bandwidth_gbps: float = 0.0

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> CatalogEntry:
        gpu = raw.get("gpu") or {}
        return cls(
            name=str(raw["name"]),
            vcpu=int(raw["vcpu"]),
            memory_mib=int(raw["memoryMiB"]),
            architecture=str(raw["architecture"]),
            max_pods=int(raw["maxPods"]),
            hypervisor=str(raw.get("hypervisor") or ""),
            on_demand_price=float(raw["onDemandPrice"]),
            spot_prices={str(zone): float(price) for zone, price in (raw.get("spotPrice") or {}).items()},
            zones=tuple(str(zone) for zone in raw.get("zones") or ()),
            gpu_name=str(gpu.get("name", "")),
            gpu_manufacturer=str(gpu.get("manufacturer", "")),
            gpu_count=int(gpu.get("count", 0)),
            gpu_memory_mib=int(gpu.get("memoryMiB", 0)),
            local_nvme_gib=int(raw.get("localNVMeGiB") or 0),
            network_bandwidth_gbps=float(raw.get("networkBandwidthGbps") or 0.0),
        )


@dataclass(frozen=True, slots=True)
class Catalog:
    source: str
    retrieved: str
    region: str
    zones: tuple[str, ...]
    entries: tuple[CatalogEntry, ...]

    def entry(self, name: str) -> CatalogEntry | None:
        for entry in self.entries:
            if entry.name == name:
                return entry
        return None


@cache
def load_catalog(file_name: str = CATALOG_FILE) -> Catalog:
    text = resources.files("karpy.cloud").joinpath("data", file_name).read_text(encoding="utf-8")
    raw = json.loads(text)
    return Catalog(
        source=str(raw["source"]),
        retrieved=str(raw["retrieved"]),
        region=str(raw["region"]),
        zones=tuple(str(zone) for zone in raw["zones"]),
        entries=tuple(CatalogEntry.from_json(item) for item in raw["instanceTypes"]),
    )


def kube_reserved_cpu_millis(vcpus: int) -> int:
    """Karpenter's (and EKS AMIs') default kube-reserved CPU for a node of ``vcpus``."""
    millis = 0.0
    for core in range(vcpus):
        if core == 0:
            millis += 60
        elif core == 1:
            millis += 10
        elif core < 4:
            millis += 5
        else:
            millis += 2.5
    return math.ceil(millis)


def ephemeral_storage_bytes(node_class: EC2NodeClass | None) -> int:
    """The ephemeral storage of the class' nodes: its root volume's size, else the 20Gi default."""
    size = node_class.ephemeral_volume_size if node_class is not None else ""
    return amount_of("ephemeral-storage", Quantity.parse(size)) if size else ROOT_VOLUME_BYTES


def _eviction_threshold(kubelet: KubeletConfiguration, signal: str, capacity: int, default: int) -> int:
    """The bytes the kubelet's hard eviction ``signal`` keeps free: the class' threshold, else ``default``.

    A threshold is a quantity or a percentage of ``capacity`` (rounded up), as
    the kubelet reads it. One that is neither is left to the launch to refuse
    (:mod:`karpy.cloud.aws.userdata` checks it before writing it): sizing
    falls back to the default rather than failing every scheduling pass.
    """
    value = kubelet.eviction_hard.get(signal, "")
    try:
        if value.endswith("%"):
            return math.ceil(capacity * Fraction(value.removesuffix("%")) / 100)
        return amount_of("memory", Quantity.parse(value)) if value else default
    except (ValueError, ZeroDivisionError):
        return default


def _family_parts(name: str) -> tuple[str, str, str, str]:
    """("c6gn.xlarge") → category "c", family "c6gn", generation "6", size "xlarge"."""
    family, _, size = name.partition(".")
    category = ""
    index = 0
    while index < len(family) and family[index].isalpha():
        category += family[index]
        index += 1
    generation = ""
    while index < len(family) and family[index].isdigit():
        generation += family[index]
        index += 1
    return category, family, generation, size


def instance_type_from_entry(
    entry: CatalogEntry,
    region: str,
    zones: tuple[str, ...] | None = None,
    kubelet: KubeletConfiguration | None = None,
    unavailable: frozenset[tuple[str, str, str]] = frozenset(),
    root_volume_bytes: int = ROOT_VOLUME_BYTES,
    instance_store_raid0: bool = False,
) -> InstanceType:
    """The InstanceType for a catalog entry, offered in ``zones`` (default: all it lists).

    ``root_volume_bytes`` is the node's ephemeral storage (the node class'
    root volume, :func:`ephemeral_storage_bytes`); the kubelet's default eviction
    threshold keeps a tenth of it free. With ``instance_store_raid0`` (the
    class' ``instanceStorePolicy: RAID0``) a type with local NVMe disks keeps its
    ephemeral storage on them instead: their total, in decimal GB, as Karpenter
    counts it (the user data assembles them into one array).
    """
    kubelet = kubelet or KubeletConfiguration()
    if instance_store_raid0 and entry.local_nvme_gib:
        root_volume_bytes = entry.local_nvme_gib * GB
    offered_zones = tuple(zone for zone in entry.zones if zones is None or zone in zones)
    offerings: list[Offering] = []
    for zone in offered_zones:
        if zone in entry.spot_prices:
            offerings.append(
                Offering(
                    zone,
                    CAPACITY_TYPE_SPOT,
                    entry.spot_prices[zone],
                    (entry.name, zone, CAPACITY_TYPE_SPOT) not in unavailable,
                )
            )
        offerings.append(
            Offering(
                zone,
                CAPACITY_TYPE_ON_DEMAND,
                entry.on_demand_price,
                (entry.name, zone, CAPACITY_TYPE_ON_DEMAND) not in unavailable,
            )
        )
    max_pods = entry.max_pods
    if kubelet.max_pods is not None:
        max_pods = kubelet.max_pods
    if kubelet.pods_per_core:
        max_pods = min(max_pods, kubelet.pods_per_core * entry.vcpu)
    memory_mib = entry.memory_mib - math.ceil(entry.memory_mib * VM_MEMORY_OVERHEAD_PERCENT)
    capacity: ResourceAmounts = {
        "cpu": entry.vcpu * 1000,
        "memory": memory_mib * MIB,
        "ephemeral-storage": root_volume_bytes,
        "pods": max_pods,
    }
    if entry.gpu_count and entry.gpu_manufacturer == "nvidia":
        capacity[RESOURCE_NVIDIA_GPU] = entry.gpu_count
    elif entry.gpu_count and entry.gpu_manufacturer == "amd":
        capacity[RESOURCE_AMD_GPU] = entry.gpu_count
    kube_reserved: ResourceAmounts = {
        "cpu": kube_reserved_cpu_millis(entry.vcpu),
        "memory": (11 * max_pods + 255) * MIB,
        "ephemeral-storage": GIB,
    }
    kube_reserved.update(kubelet.kube_reserved)
    eviction: ResourceAmounts = {
        "memory": _eviction_threshold(kubelet, "memory.available", capacity["memory"], 100 * MIB),
        "ephemeral-storage": _eviction_threshold(
            kubelet, "nodefs.available", root_volume_bytes, root_volume_bytes // 10
        ),
    }
    category, family, generation, size = _family_parts(entry.name)
    capacity_types = sorted({offering.capacity_type for offering in offerings})
    labels = {
        LABEL_INSTANCE_TYPE: entry.name,
        LABEL_ARCH: entry.architecture,
        LABEL_OS: "linux",
        LABEL_REGION: region,
        AWS_LABEL_INSTANCE_CATEGORY: category,
        AWS_LABEL_INSTANCE_FAMILY: family,
        AWS_LABEL_INSTANCE_GENERATION: generation,
        AWS_LABEL_INSTANCE_SIZE: size,
        AWS_LABEL_INSTANCE_CPU: str(entry.vcpu),
        AWS_LABEL_INSTANCE_MEMORY: str(entry.memory_mib),
        AWS_LABEL_INSTANCE_NETWORK_BANDWIDTH: str(int(entry.network_bandwidth_gbps * 1000)),
    }
    if entry.hypervisor:
        labels[AWS_LABEL_INSTANCE_HYPERVISOR] = entry.hypervisor
    if entry.local_nvme_gib:
        labels[AWS_LABEL_INSTANCE_LOCAL_NVME] = str(entry.local_nvme_gib)
    if entry.gpu_count:
        labels[AWS_LABEL_INSTANCE_GPU_NAME] = entry.gpu_name
        labels[AWS_LABEL_INSTANCE_GPU_MANUFACTURER] = entry.gpu_manufacturer
        labels[AWS_LABEL_INSTANCE_GPU_COUNT] = str(entry.gpu_count)
        labels[AWS_LABEL_INSTANCE_GPU_MEMORY] = str(entry.gpu_memory_mib)
    requirements = Requirements.from_labels(labels)
    requirements.add(Requirement.from_operator(LABEL_ZONE, "In", offered_zones))
    requirements.add(Requirement.from_operator(LABEL_CAPACITY_TYPE, "In", capacity_types))
    built = InstanceType.build(
        entry.name,
        requirements,
        tuple(offerings),
        capacity,
        Overhead(
            kube_reserved=kube_reserved,
            system_reserved=dict(kubelet.system_reserved),
            eviction_threshold=eviction,
        ),
    )
    return dataclasses.replace(built, volume_limits={EBS_CSI_DRIVER: ebs_volume_limit(entry)})


# EBS attachment slots: a Nitro instance (bare metal too) shares 28 between EBS volumes,
# network interfaces and local NVMe disks; an older (Xen) instance has 39 for volumes alone.
NITRO_ATTACHMENT_SLOTS = 28
XEN_ATTACHMENT_SLOTS = 39


def ebs_volume_limit(entry: CatalogEntry) -> int:
    """How many EBS volumes pods can attach to a node of this type, as the EBS CSI driver counts it.

    The driver's node plugin publishes on the CSINode what is left of the
    attachment slots once the root volume (and, on Nitro, the primary network
    interface and each local NVMe disk) has its own: the catalog does not
    count an instance's NVMe disks, only whether it has any, so one is
    counted when it has some. Karpenter's AWS provider publishes no limit per
    type, so a new node's limit is unknown to it until its CSINode appears
    (kubernetes-sigs/karpenter#2891); karpy plans with this one from the first
    pass.
    """
    if entry.hypervisor != "xen":  # Nitro, or bare metal on Nitro (no hypervisor)
        return NITRO_ATTACHMENT_SLOTS - 1 - 1 - (1 if entry.local_nvme_gib else 0)
    return XEN_ATTACHMENT_SLOTS - 1
