"""What a node costs beyond its instance price, per hour: the per-node cost the solver adds.

With prices linear in size, an instance of 2 vCPUs costs per vCPU what one
of 64 does, so a plan priced by instance alone is indifferent between one
large node and thirty small ones, and the cheapest plan for 20,000 small
pods can be 6,668 nodes of three pods each. Every node carries costs its
instance price does not show, and each is paid per node whatever its size:

* **its volumes**: the EBS volumes of the node class's ``blockDeviceMappings``
  (a class with none gets the AMI family's default, as Karpenter launches:
  20 GiB gp3, Bottlerocket 4 + 20 GiB, Windows 50 GiB), billed per GiB-month
  by volume type, with gp3's IOPS above 3,000 and throughput above 125 MiB/s
  and io1/io2's provisioned IOPS on top (us-east-1 list prices; other
  regions differ by a few percent, which moves no decision);
* **a public IPv4 address**, $0.005 an hour since February 2024, when the
  node class says ``associatePublicIPAddress: true``. Unset, the subnet
  decides and karpy does not know; EKS's recommended layout (nodes in private
  subnets) assigns none, so none is charged;
* **what is priced per host** (the node overhead cost, ``node_overhead_cost``, set by
  ``KARPY_NODE_OVERHEAD_COST``, ``--node-overhead-cost`` or a Scenario's ``nodeOverheadCost``):
  monitoring, logging and security agents are commonly licensed per host,
  from about $15 a host-month ($0.02 an hour) up; each node is also one more
  to patch, drain and watch, with its own kubelet, CNI and kube-proxy load on
  the API server. :data:`DEFAULT_NODE_OVERHEAD_COST` is that $0.02, a conservative
  figure a team without such licences can set to 0.

DaemonSets' requests are a per-node cost too, but in resources, not money:
the solver already takes them out of each node's room.

The cost is the same for every instance type a NodePool can launch (it
depends on the node class and the setting only), so it never changes which
type is cheapest for one NodeClaim; it changes how many NodeClaims a plan
wants, and what a consolidation that removes nodes saves. Reported costs
(the simulator's run cost, metrics' offering prices) stay instance prices.
"""

from __future__ import annotations

from dataclasses import dataclass

from karpy.api.nodeclass import AMI_FAMILY_CUSTOM, EC2NodeClass, NodeClass
from karpy.api.quantity import Quantity, QuantityError

HOURS_PER_MONTH = 730.0
# EBS list prices, us-east-1, $ per GiB-month by volume type.
EBS_GIB_MONTH = {
    "gp3": 0.08,
    "gp2": 0.10,
    "io1": 0.125,
    "io2": 0.125,
    "st1": 0.045,
    "sc1": 0.015,
    "standard": 0.05,
}
# What is free with a gp3 volume, and the price of more ($ per IOPS-month and per MiB/s-month).
GP3_FREE_IOPS = 3000
GP3_FREE_THROUGHPUT = 125
GP3_IOPS_MONTH = 0.005
GP3_THROUGHPUT_MONTH = 0.04
# io1/io2 bill every provisioned IOPS ($ per IOPS-month, io2's first tier).
PROVISIONED_IOPS_MONTH = 0.065
PUBLIC_IPV4_HOUR = 0.005
DEFAULT_VOLUME_TYPE = "gp3"
# Karpenter's default volumes by AMI family when a node class lists none, in GiB.
DEFAULT_VOLUMES_GIB = {
    "AL2": (20.0,),
    "AL2023": (20.0,),
    "Bottlerocket": (4.0, 20.0),
    "Windows2019": (50.0,),
    "Windows2022": (50.0,),
    AMI_FAMILY_CUSTOM: (20.0,),
}
# The node overhead cost, $ per node and hour, when none is configured (see the module docstring).
DEFAULT_NODE_OVERHEAD_COST = 0.02
_GIB = 2**30


@dataclass(frozen=True, slots=True)
class NodeCost:
    """A node's hourly cost beyond its instance price, by where it comes from."""

    volumes: float = 0.0
    public_ipv4: float = 0.0
    # What is priced per host (KARPY_NODE_OVERHEAD_COST).
    node_overhead_cost: float = 0.0

    @property
    def total(self) -> float:
        return self.volumes + self.public_ipv4 + self.node_overhead_cost


def _gib(size: str) -> float:
    try:
        return float(Quantity.parse(size).value) / _GIB
    except (QuantityError, ValueError):
        return 0.0  # the node class's parser has checked the size; nothing to charge if it cannot be read


def _volume_cost(gib: float, volume_type: str, iops: int | None, throughput: int | None) -> float:
    monthly = gib * EBS_GIB_MONTH.get(volume_type or DEFAULT_VOLUME_TYPE, EBS_GIB_MONTH[DEFAULT_VOLUME_TYPE])
    if (volume_type or DEFAULT_VOLUME_TYPE) == "gp3":
        monthly += max(0, (iops or 0) - GP3_FREE_IOPS) * GP3_IOPS_MONTH
        monthly += max(0, (throughput or 0) - GP3_FREE_THROUGHPUT) * GP3_THROUGHPUT_MONTH
    elif volume_type in ("io1", "io2"):
        monthly += (iops or 0) * PROVISIONED_IOPS_MONTH
    return monthly / HOURS_PER_MONTH


def volumes_cost(node_class: EC2NodeClass | None) -> float:
    """$/h of a node's EBS volumes: the class's mappings, else the family's default (gp3)."""
    if node_class is None or not node_class.block_device_mappings:
        family = node_class.effective_ami_family if node_class is not None else AMI_FAMILY_CUSTOM
        sizes = DEFAULT_VOLUMES_GIB.get(family, DEFAULT_VOLUMES_GIB[AMI_FAMILY_CUSTOM])
        return sum(_volume_cost(size, DEFAULT_VOLUME_TYPE, None, None) for size in sizes)
    return sum(
        _volume_cost(_gib(mapping.volume_size), mapping.volume_type, mapping.iops, mapping.throughput)
        for mapping in node_class.block_device_mappings
        if mapping.volume_size
    )


def node_cost(
    node_class: NodeClass | None, node_overhead_cost: float = DEFAULT_NODE_OVERHEAD_COST
) -> NodeCost:
    """What every node launched with ``node_class`` costs per hour beyond its instance.

    A KWOK node class stands for an EC2 node with Karpenter's default volume
    (it has no volumes to read); a missing class is priced the same way.
    """
    ec2 = node_class if isinstance(node_class, EC2NodeClass) else None
    public = ec2 is not None and ec2.associate_public_ip_address is True
    return NodeCost(
        volumes=volumes_cost(ec2),
        public_ipv4=PUBLIC_IPV4_HOUR if public else 0.0,
        node_overhead_cost=node_overhead_cost,
    )


__all__ = [
    "DEFAULT_NODE_OVERHEAD_COST",
    "EBS_GIB_MONTH",
    "HOURS_PER_MONTH",
    "PUBLIC_IPV4_HOUR",
    "NodeCost",
    "node_cost",
    "volumes_cost",
]
