"""StorageClasses, CSINodes and volume attach limits: how many volumes a node can take.

A node can attach only so many volumes of one CSI driver (an EBS volume is a
device on the instance, and a Nitro instance has 28 slots for them, its
network interfaces and its local disks together). Karpenter v1.15 counts the
persistent volumes of the pods it places against that limit, per driver:

- a pod's volumes are its PersistentVolumeClaims, each under the driver of
  its bound PersistentVolume (``spec.csi.driver``, or the EBS driver for an
  in-tree ``awsElasticBlockStore`` volume), or, unbound, the provisioner of
  its StorageClass (an in-tree provisioner name translated to its CSI
  driver's); a claim with neither counts under no driver;
- an existing node's limit per driver is its CSINode's
  ``spec.drivers[].allocatable.count`` (a driver listed without a count is
  unlimited); a driver its CSINode does not list falls back to its instance
  type's limit;
- a new node's limit is its instance type's (:attr:`InstanceType.volume_limits`);
  a type with none declared for a driver takes any number.

The scheduler counts them as a resource, ``attachable-volumes-csi-<driver>``
(the name Kubernetes gave the same count on a node's allocatable before
CSINode had it), so a bin of instance-type options drops the types that cannot
attach its pods' volumes the way it drops those without the CPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from karpy.api._reader import FieldReader
from karpy.api.meta import ObjectMeta

VOLUME_RESOURCE_PREFIX = "attachable-volumes-csi-"
# What "no limit" counts as in the scheduler's arithmetic: more volumes than any pod set has.
UNLIMITED_VOLUMES = 1 << 30

EBS_CSI_DRIVER = "ebs.csi.aws.com"
# In-tree provisioner names and the CSI drivers that replaced them (k8s.io/csi-translation-lib).
IN_TREE_CSI_DRIVERS: Mapping[str, str] = {
    "kubernetes.io/aws-ebs": EBS_CSI_DRIVER,
    "kubernetes.io/gce-pd": "pd.csi.storage.gke.io",
    "kubernetes.io/azure-disk": "disk.csi.azure.com",
    "kubernetes.io/azure-file": "file.csi.azure.com",
    "kubernetes.io/cinder": "cinder.csi.openstack.org",
    "kubernetes.io/vsphere-volume": "csi.vsphere.vmware.com",
    "kubernetes.io/portworx-volume": "pxd.portworx.com",
    "kubernetes.io/rbd": "rbd.csi.ceph.com",
}


def volume_resource(driver: str) -> str:
    """The scheduler's resource name for volumes of ``driver``."""
    return VOLUME_RESOURCE_PREFIX + driver


def is_volume_resource(resource: str) -> bool:
    return resource.startswith(VOLUME_RESOURCE_PREFIX)


def csi_driver_of_provisioner(provisioner: str) -> str:
    """The CSI driver a StorageClass's provisioner names (an in-tree name translated)."""
    return IN_TREE_CSI_DRIVERS.get(provisioner, provisioner)


@dataclass(frozen=True, slots=True)
class StorageClass:
    metadata: ObjectMeta
    provisioner: str = ""

    kind = "StorageClass"

    @classmethod
    def parse(cls, reader: FieldReader) -> StorageClass:
        return cls(
            metadata=ObjectMeta.parse(reader.obj("metadata"), namespaced=False),
            provisioner=reader.required_str("provisioner"),
        )

    @property
    def csi_driver(self) -> str:
        return csi_driver_of_provisioner(self.provisioner)


@dataclass(frozen=True, slots=True)
class CSINode:
    """A node's CSI drivers and how many volumes each can attach there (None: no limit)."""

    metadata: ObjectMeta
    limits: Mapping[str, int | None] = field(default_factory=dict)

    kind = "CSINode"

    @classmethod
    def parse(cls, reader: FieldReader) -> CSINode:
        limits: dict[str, int | None] = {}
        for driver in reader.obj("spec").items("drivers", lambda item: item):
            allocatable = driver.obj("allocatable")
            limits[driver.required_str("name")] = (
                allocatable.integer("count") if allocatable.has("count") else None
            )
        return cls(metadata=ObjectMeta.parse(reader.obj("metadata"), namespaced=False), limits=limits)
