"""What a node costs beyond its instance: volumes by type and size, the public address, the setting."""

from __future__ import annotations

import pytest

from karpy.api.manifest import parse_manifests
from karpy.api.nodeclass import EC2NodeClass
from karpy.api.nodecost import DEFAULT_NODE_OVERHEAD_COST, PUBLIC_IPV4_HOUR, node_cost

HOURS = 730.0
CLASS = """
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: ALIAS}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
"""


def ec2_class(extra: str = "", alias: str = "al2023@latest") -> EC2NodeClass:
    loaded = parse_manifests(CLASS.replace("ALIAS", alias) + extra, "class.yaml")
    assert loaded.errors == []
    (item,) = loaded.objects
    assert isinstance(item.obj, EC2NodeClass)
    return item.obj


def test_a_kwok_or_missing_class_costs_karpenters_default_volume_and_the_default_extra() -> None:
    cost = node_cost(None)
    assert cost.volumes == pytest.approx(20 * 0.08 / HOURS)
    assert cost.public_ipv4 == 0.0
    assert cost.node_overhead_cost == DEFAULT_NODE_OVERHEAD_COST == 0.02
    assert cost.total == pytest.approx(0.0222, abs=1e-4)
    assert node_cost(None, 0.0).total == pytest.approx(20 * 0.08 / HOURS)


@pytest.mark.parametrize(
    ("alias", "gib"),
    [("al2023@latest", 20), ("al2@latest", 20), ("bottlerocket@latest", 24), ("windows2022@latest", 50)],
)
def test_a_class_without_mappings_costs_its_familys_default_volumes(alias: str, gib: int) -> None:
    assert node_cost(ec2_class(alias=alias), 0.0).volumes == pytest.approx(gib * 0.08 / HOURS)


def test_mapped_volumes_are_priced_by_type_size_and_what_they_provision_beyond_the_free_part() -> None:
    node_class = ec2_class("""
  blockDeviceMappings:
    - deviceName: /dev/xvda
      rootVolume: true
      ebs: {volumeSize: 100Gi, volumeType: gp3, iops: 6000, throughput: 250}
    - deviceName: /dev/xvdb
      ebs: {volumeSize: 50Gi, volumeType: io2, iops: 1000}
    - deviceName: /dev/xvdc
      ebs: {volumeSize: 200Gi, volumeType: st1}
""")
    gp3 = 100 * 0.08 + (6000 - 3000) * 0.005 + (250 - 125) * 0.04
    io2 = 50 * 0.125 + 1000 * 0.065
    st1 = 200 * 0.045
    assert node_cost(node_class, 0.0).volumes == pytest.approx((gp3 + io2 + st1) / HOURS)


def test_a_gp3_volume_within_its_free_iops_and_throughput_costs_its_size_only() -> None:
    node_class = ec2_class("""
  blockDeviceMappings:
    - deviceName: /dev/xvda
      ebs: {volumeSize: 80Gi, volumeType: gp3, iops: 3000, throughput: 125}
""")
    assert node_cost(node_class, 0.0).volumes == pytest.approx(80 * 0.08 / HOURS)


@pytest.mark.parametrize(("setting", "charged"), [("true", PUBLIC_IPV4_HOUR), ("false", 0.0), (None, 0.0)])
def test_a_public_address_is_charged_only_when_the_class_asks_for_one(
    setting: str | None, charged: float
) -> None:
    extra = f"  associatePublicIPAddress: {setting}\n" if setting is not None else ""
    assert node_cost(ec2_class(extra), 0.0).public_ipv4 == charged
