"""A change to a claim, a volume, a StorageClass or a CSINode alone makes consolidation look again.

Consolidation counts the volumes the moving pods attach against the nodes'
attach limits (their CSINodes'), and reads the claims, volumes and classes to
know which driver each volume is of. A consolidation that found nothing is
answered again while nothing it reads has changed (the quiet pass), so those
objects must count among what it reads: before, a CSINode whose limit grew
left a node whose pods had nowhere to go kept for good in the simulator (the
loop jumps over passes it takes to be unchanged) and for up to five minutes in
``karpy run``.

The cluster: 40 StatefulSet pods, each with an EBS volume, on two m5.4xlarge
(26 volumes each): by CPU one node holds them all, by volumes neither holds
the other's 20.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from tests.sim.test_volume_attach_limits import STORAGE_CLASS, db_pods_per_node, statefulset
from tests.support import load_objects, spot_ec2_cluster

from karpy.api.core import PersistentVolume, PersistentVolumeClaim
from karpy.api.meta import ObjectMeta
from karpy.api.storage import EBS_CSI_DRIVER, CSINode, StorageClass
from karpy.sim.simulation import Simulation


def settled() -> Simulation:
    cluster = spot_ec2_cluster(("m5.4xlarge",)).replace(
        "consolidationPolicy: WhenEmpty, consolidateAfter: 1h",
        "consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 30s",
    )
    simulation = Simulation()
    simulation.apply(load_objects(cluster, STORAGE_CLASS, statefulset(40)))
    simulation.run(3600, until_steady=False)
    assert sorted(db_pods_per_node(simulation).values()) == [20, 20]
    return simulation


def test_a_csinode_whose_limit_grows_frees_the_other_node() -> None:
    simulation = settled()
    first = sorted(db_pods_per_node(simulation))[0]
    csi_node = simulation.cluster.csi_node(first)
    assert csi_node is not None and csi_node.limits == {EBS_CSI_DRIVER: 26}
    simulation.cluster.update(dataclasses.replace(csi_node, limits={EBS_CSI_DRIVER: 60}))
    changed_at = simulation.clock.now()
    simulation.run(1800, until_steady=False)
    # The other node's 20 pods now fit beside the first node's: it is deleted within moments.
    assert db_pods_per_node(simulation) == {first: 40}
    assert len(list(simulation.cluster.nodeclaims())) == 1
    deleted = [
        e.time - changed_at
        for e in simulation.cluster.events
        if e.reason == "DisruptionTerminating" and e.kind == "NodeClaim"
    ]
    assert len(deleted) == 1 and deleted[0] < 60, deleted


def _worked_out_after(simulation: Simulation, change: Callable[[Simulation], None]) -> bool:
    """Whether the next consolidation after ``change`` is worked out (not answered from the last)."""
    disruption = simulation.disruption
    disruption.decide()
    quiet = disruption.quiet_passes
    disruption.decide()
    assert disruption.quiet_passes == quiet + 1  # unchanged: answered from the last
    change(simulation)
    disruption.decide()
    return disruption.quiet_passes == quiet + 1


def _first_claim(simulation: Simulation) -> PersistentVolumeClaim:
    claim = next(iter(simulation.cluster.objects("PersistentVolumeClaim")))
    assert isinstance(claim, PersistentVolumeClaim)
    return claim


def _delete_claim(simulation: Simulation) -> None:
    simulation.cluster.delete(_first_claim(simulation))


def _relabel_volume(simulation: Simulation) -> None:
    volume = next(iter(simulation.cluster.objects("PersistentVolume")))
    assert isinstance(volume, PersistentVolume)
    meta = volume.metadata.with_changes(labels={"tier": "gold"})
    simulation.cluster.update(dataclasses.replace(volume, metadata=meta))


def _new_storage_class(simulation: Simulation) -> None:
    simulation.cluster.create(StorageClass(metadata=ObjectMeta(name="io2"), provisioner=EBS_CSI_DRIVER))


def _csinode_limit(simulation: Simulation) -> None:
    csi_node = next(iter(simulation.cluster.objects("CSINode")))
    assert isinstance(csi_node, CSINode)
    simulation.cluster.update(dataclasses.replace(csi_node, limits={EBS_CSI_DRIVER: 27}))


def test_each_storage_kind_changed_alone_has_consolidation_worked_out_again() -> None:
    simulation = settled()
    for change in (_delete_claim, _relabel_volume, _new_storage_class, _csinode_limit):
        assert _worked_out_after(simulation, change), change.__name__
