"""When the provisioner looks at pending pods again.

A pod refused at a NodePool's limit must not wait for an unrelated change:
an in-flight NodeClaim counts against the limit at the largest type it lists
until it launches, and the type the cloud launches is often smaller, which
frees room. Its launch therefore opens a batch when pods are pending.
"""

from __future__ import annotations

import dataclasses

from tests.support import KWOK_NODE_CLASS, deployment_manifest, kwok_nodepool, load_objects

from karpy.api.nodeclaim import NodeClaim
from karpy.controllers.provisioning import BATCH_KEY
from karpy.sim.simulation import Simulation

UNPLACEABLE_POD = """
apiVersion: v1
kind: Pod
metadata: {name: huge, namespace: default}
spec:
  containers: [{name: main, resources: {requests: {cpu: "500"}}}]
"""


def _launch_handler_result(extra_spec: str) -> list[str]:
    simulation = Simulation()
    simulation.apply(
        load_objects(KWOK_NODE_CLASS, kwok_nodepool(extra_spec), deployment_manifest(replicas=1))
    )
    simulation.run(120, until_steady=False)
    simulation.apply(load_objects(UNPLACEABLE_POD))
    assert simulation.cluster.pending_pods()
    (launched,) = simulation.nodeclaims()
    assert launched.launched
    not_yet = launched.with_status(conditions=())
    assert isinstance(not_yet, NodeClaim) and not not_yet.launched
    (watch,) = [w for w in simulation.provisioner.watches() if w.kind == "NodeClaim"]
    keys = list(watch.mapper(not_yet, launched))
    # An update that does not launch anything opens no batch.
    assert list(watch.mapper(launched, dataclasses.replace(launched))) == []
    return keys


def test_a_launch_in_a_pool_with_limits_opens_a_batch_for_pending_pods() -> None:
    assert _launch_handler_result("  limits: {cpu: 100}") == [BATCH_KEY]


def test_a_launch_in_a_pool_without_limits_changes_nothing_for_pending_pods() -> None:
    assert _launch_handler_result("") == []
