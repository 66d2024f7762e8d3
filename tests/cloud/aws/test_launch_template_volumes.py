"""A volume restored from a snapshot gets the initialization rate its class asks for."""

from __future__ import annotations

from tests.support import parse_object

from karpy.api.nodeclass import EC2NodeClass
from karpy.cloud.aws.launchtemplates import launch_options

NODE_CLASS = """
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: restored}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{id: subnet-1}]
  securityGroupSelectorTerms: [{id: sg-1}]
  blockDeviceMappings:
    - deviceName: /dev/xvda
      ebs: {volumeSize: 20Gi, volumeType: gp3}
    - deviceName: /dev/xvdb
      ebs: {snapshotID: snap-0123456789, volumeInitializationRate: 300}
"""


def test_the_volume_initialization_rate_reaches_the_launch_template() -> None:
    node_class = parse_object(NODE_CLASS)
    assert isinstance(node_class, EC2NodeClass)
    root, restored = launch_options(node_class, "ami-1", "").template_data()["BlockDeviceMappings"]
    assert restored == {
        "DeviceName": "/dev/xvdb",
        "Ebs": {"SnapshotId": "snap-0123456789", "VolumeInitializationRate": 300},
    }
    assert "VolumeInitializationRate" not in root["Ebs"]
