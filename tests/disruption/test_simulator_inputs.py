"""Consolidation simulates a removal with the inputs provisioning plans with.

The pods a move would evict are planned as pending pods are: the volumes
each attaches counted against every node's attach limit per CSI driver, and
the cluster's default topology spread constraints given to those that
declare none. The simulator (tests/sim/test_volume_attach_limits.py,
tests/sim/test_default_topology_spread.py) runs the same through the
controllers.
"""

from __future__ import annotations

import dataclasses

from tests.disruption.test_consolidation import LARGE, NOW, Cluster, app_pod

from karpy.api.core import LabelSelector, Pod
from karpy.api.meta import OwnerReference
from karpy.api.storage import EBS_CSI_DRIVER, volume_resource
from karpy.disruption.consolidation import KARPENTER_RULES
from karpy.disruption.decision import decide_consolidation
from karpy.scheduling.default_spread import DefaultSpread, SelectorSources

EBS = volume_resource(EBS_CSI_DRIVER)


def test_no_pod_is_moved_onto_a_node_that_cannot_attach_its_volume() -> None:
    cluster = Cluster()
    db = app_pod("db-0")
    cluster.add("node-a", LARGE, [db])
    cluster.add("node-b", LARGE, [app_pod("b1")], candidate=False)
    # node-b has the CPU for db-0 but attaches no more EBS volumes.
    cluster.capacity[1] = dataclasses.replace(
        cluster.capacity[1], available={**cluster.capacity[1].available, EBS: 0}
    )

    def decide(counts: dict[str, dict[str, int]] | None) -> list[str]:
        decision = decide_consolidation(
            cluster.candidates,
            cluster.capacity,
            cluster.pools(),
            cluster.prices,
            {"default": 1},
            {},
            NOW,
            rules=KARPENTER_RULES,
            volume_counts=counts,
        )
        command = decision.command
        assert command is not None
        return [claim.instance_types[0].name for claim in command.replacements]

    # Counted as pending pods are, the volume keeps db-0 off node-b: a smaller node replaces node-a.
    assert decide({db.key: {EBS: 1}}) == ["small.2x"]
    # Uncounted (as before), node-a was deleted and db-0 sent where it cannot attach its volume.
    assert decide(None) == []


def test_the_default_spread_keeps_pods_apart_as_provisioning_would() -> None:
    cluster = Cluster()
    owner = OwnerReference("apps/v1", "ReplicaSet", "web", controller=True)

    def web(name: str) -> Pod:
        pod = app_pod(name)
        meta = pod.metadata.with_changes(labels={"app": "web"}, owner_references=(owner,))
        return pod.with_changes(metadata=meta)

    a, b = web("web-a"), web("web-b")
    cluster.add("node-a", LARGE, [a])
    cluster.add("node-b", LARGE, [b])
    spread = DefaultSpread(
        ({"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"},),
        SelectorSources(lambda namespace: [], lambda *owner: LabelSelector({"app": "web"})),
    )

    def decide(default_spread: DefaultSpread | None) -> list[str]:
        decision = decide_consolidation(
            cluster.candidates,
            cluster.capacity,
            cluster.pools(),
            cluster.prices,
            {"default": 1},
            {},
            NOW,
            rules=KARPENTER_RULES,
            default_spread=default_spread,
        )
        command = decision.command
        return [] if command is None else ["delete" if command.is_delete else "replace"]

    # Without the defaults one node takes both pods; with them (one pod a node at most apart)
    # deleting either leaves both on one node and none on a node that stays: a replacement
    # is planned for the moving pod instead of a delete.
    assert decide(None) == ["delete"]
    assert decide(spread) != ["delete"]
