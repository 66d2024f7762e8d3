"""Provisioning stops launching for pods that the nodes launched for them never take, whatever the cause.

The cause here is no LimitRange: every node registers with a NoSchedule taint
its NodePool does not declare (a kubelet's ``--register-with-taints`` from the
node's user data, say), so karpy believes the pod fits every node it launches,
and the pod tolerates none of them. Each node comes up ready, holds nothing,
and goes as empty; without the guard a new one was launched for the same pod
every minute or so. With it, provisioning stops after three such nodes, says
why on the pod, in the log and in a metric, and tries again only after a hold.
"""

from __future__ import annotations

import dataclasses
import logging

import pytest
from tests.support import load_objects

from karpy.api.core import Deployment, Node, Pod
from karpy.api.taints import Taint
from karpy.controllers.launchloop import EVENT_REASON, FUTILE_LAUNCHES, HOLD
from karpy.sim.simulation import Simulation

MINUTE = 60.0
UNDECLARED_TAINT = Taint("example.com/dedicated", "infra", "NoSchedule")

MANIFESTS = """
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: default}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      requirements: []
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
  disruption: {consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 0s}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: app, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      containers: [{name: app, resources: {requests: {cpu: "1", memory: 1Gi}}}]
"""


def tainting_new_nodes(simulation: Simulation) -> list[bool]:
    """Every Node registers with ``UNDECLARED_TAINT`` as well, as its kubelet was told to.

    Returns a switch: set its one item False to stop.
    """
    tainting = [True]

    def taint(kind: str, old: object | None, new: object | None) -> None:
        if tainting[0] and kind == "Node" and old is None and isinstance(new, Node):
            simulation.cluster.update(new.with_changes(taints=(*new.taints, UNDECLARED_TAINT)))

    simulation.cluster.subscribe(taint)
    return tainting


def run(minutes: float) -> Simulation:
    simulation = Simulation()
    tainting_new_nodes(simulation)
    simulation.apply(load_objects(MANIFESTS))
    simulation.run(minutes * MINUTE, until_steady=False)
    assert simulation.runtime.errors == []
    return simulation


def app_pod(simulation: Simulation) -> Pod:
    (pod,) = (pod for pod in simulation.pods() if pod.metadata.labels.get("app") == "app")
    return pod


def test_launching_stops_for_a_pod_the_nodes_launched_for_it_never_take(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="karpy.provisioning"):
        simulation = run(minutes=15)
    launched = len(simulation.recorder.nodeclaims)
    # Three nodes came up and kept nothing; a fourth was launched while the third had been up for
    # less than SETTLE (not judged yet: kube-scheduler may still bind there), and the pass after
    # held the pod instead of a fifth.
    assert launched == FUTILE_LAUNCHES + 1, sorted(simulation.recorder.nodeclaims)
    pod = app_pod(simulation)
    assert not pod.node_name
    (event,) = (e for e in simulation.cluster.events if e.reason == EVENT_REASON)
    assert (event.kind, event.type, event.name) == ("Pod", "Warning", pod.metadata.name)
    assert f"no node launched for it for {HOLD / 60:g}m" in event.message
    records = sorted(simulation.recorder.nodeclaims.values(), key=lambda record: record.created_at)
    for record in records[:FUTILE_LAUNCHES]:
        assert record.name in event.message
    assert [r.message for r in caplog.records if "held for" in r.message] != []
    assert "karpy_provisioning_launch_loops_total 1\n" in simulation.metrics.registry.exposition()
    # The simulator's report says why the pod waits, as it does for an unschedulable one.
    assert "came up ready and kept none of them" in simulation.provisioner.last.unschedulable[pod.key]


def test_a_held_pod_is_tried_again_after_its_hold_and_held_longer_if_it_loops_again() -> None:
    simulation = run(minutes=15 + HOLD / MINUTE)
    # Each hold after three futile launches and one more launched while the third was settling.
    assert len(simulation.recorder.nodeclaims) == 2 * (FUTILE_LAUNCHES + 1)
    messages = [e.message for e in simulation.cluster.events if e.reason == EVENT_REASON]
    assert len(messages) == 2
    assert f"for {2 * HOLD / 60:g}m" in messages[1]


def test_a_changed_nodepool_ends_the_hold_at_once() -> None:
    simulation = Simulation()
    tainting = tainting_new_nodes(simulation)
    simulation.apply(load_objects(MANIFESTS))
    simulation.run(10 * MINUTE, until_steady=False)
    assert [e for e in simulation.cluster.events if e.reason == EVENT_REASON] != []
    # The cause is found and fixed (the nodes' user data), and the pool changed with it.
    tainting[0] = False
    pool = simulation.cluster.nodepool("default")
    assert pool is not None
    template = dataclasses.replace(pool.template, labels={"fixed": "yes"})
    simulation.cluster.update(dataclasses.replace(pool, template=template))
    simulation.run(2 * MINUTE, until_steady=False)
    assert app_pod(simulation).phase == "Running"


def test_nodes_that_served_the_pods_before_a_scale_down_are_no_loop() -> None:
    # The Deployment goes from 1 to 0 replicas and back, again and again: each time its
    # node goes as empty and the next replica gets a new one. Each served its pod for
    # six minutes: no loop, however many nodes that takes.
    simulation = Simulation()
    simulation.apply(load_objects(MANIFESTS))
    for _ in range(2 * FUTILE_LAUNCHES):
        for replicas, minutes in ((1, 6.0), (0, 1.0)):
            deployment = simulation.cluster.get("Deployment", "default/app")
            assert isinstance(deployment, Deployment)
            simulation.cluster.update(deployment.with_changes(replicas=replicas))
            simulation.run(minutes * MINUTE, until_steady=False)
    assert len(simulation.recorder.nodeclaims) == 2 * FUTILE_LAUNCHES
    assert [e for e in simulation.cluster.events if e.reason == EVENT_REASON] == []
