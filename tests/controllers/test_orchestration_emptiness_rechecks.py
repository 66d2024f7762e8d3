"""Empty nodes held back by a disruption budget: how long their re-check takes.

Every disruption command is re-checked 15 s after it is decided. Karpenter
waits those 15 s anew for every emptiness command, so when the default budget
(10% of the pool, rounded up: one node of three) lets empty nodes go one at a
time, each one waits its own re-check after the one before it is gone: three
empty nodes take consolidateAfter + 3 x 15 s.

karpy does better there: a node the budget held back has been watched, pass
after pass, since it became due, and a pod landing on it or leaving it would
have moved its due time. Once that watch has lasted 15 s the re-check has in
effect been done, so the node goes as soon as the budget frees up. Everything
else stays as in Karpenter: the budget is never exceeded, the first command
waits its 15 s, a node whose due time moved starts over, and pending pods (one
may be about to land on the node) bring the fresh wait back.
"""

from __future__ import annotations

from itertools import pairwise

from tests.support import KWOK_NODE_CLASS, kwok_nodepool, load_objects

from karpy.controllers.disruption import VALIDATION_DELAY
from karpy.sim.simulation import Simulation

CONSOLIDATE_AFTER = 30.0
SETTLE = 120.0

SPREAD = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: spread, namespace: default}
spec:
  replicas: 3
  selector: {matchLabels: {app: spread}}
  template:
    metadata: {labels: {app: spread}}
    spec:
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: spread}}}
      containers: [{name: app, resources: {requests: {cpu: 500m, memory: 512Mi}}}]
"""
MANIFESTS = (
    KWOK_NODE_CLASS,
    kwok_nodepool(
        disruption=f"consolidationPolicy: WhenEmpty, consolidateAfter: {CONSOLIDATE_AFTER:g}s",
        instance_types=("c5.large",),
    ),
    SPREAD,
)

# Asks for more than any instance type has: it stays pending for good.
UNSCHEDULABLE_POD = """
apiVersion: v1
kind: Pod
metadata: {name: huge, namespace: default}
spec:
  containers: [{name: main, resources: {requests: {cpu: "1000", memory: 1Gi}}}]
"""


def three_nodes_emptied(*extra: str) -> tuple[Simulation, float]:
    """Three one-pod nodes, settled; then their Deployment is deleted. Returns the deletion time."""
    simulation = Simulation()
    simulation.apply(load_objects(*MANIFESTS, *extra))
    simulation.run(SETTLE, until_steady=False)
    assert len(simulation.nodeclaims()) == 3
    assert all(claim.initialized for claim in simulation.nodeclaims())
    simulation.cluster.delete(simulation.cluster.get("Deployment", "default/spread"))
    return simulation, simulation.clock.now()


def deletions(simulation: Simulation, since: float) -> list[float]:
    moments = [record.deleted_at for record in simulation.recorder.nodeclaims.values()]
    assert all(moment is not None for moment in moments), "a NodeClaim was not deleted"
    return sorted(moment - since for moment in moments if moment is not None)


def test_empty_nodes_held_back_by_the_budget_go_without_a_fresh_recheck() -> None:
    simulation, emptied = three_nodes_emptied()
    simulation.run(600)
    assert simulation.runtime.errors == []
    gone = deletions(simulation, emptied)
    assert len(gone) == 3
    # The budget held: one node of three at a time.
    assert simulation.disruption_peak == {"default": 1}
    # The first command waited its re-check ...
    assert gone[0] >= CONSOLIDATE_AFTER + VALIDATION_DELAY
    # ... and the others, watched empty since they became due, went right after it,
    # where Karpenter would wait 15 s more for each: CONSOLIDATE_AFTER + 45 s for the last.
    assert gone[-1] <= CONSOLIDATE_AFTER + VALIDATION_DELAY + 1
    assert gone[-1] < CONSOLIDATE_AFTER + 3 * VALIDATION_DELAY


def test_a_pending_pod_brings_back_a_fresh_recheck_for_every_command() -> None:
    simulation, emptied = three_nodes_emptied(UNSCHEDULABLE_POD)
    simulation.run(600, until_steady=False)
    gone = deletions(simulation, emptied)
    assert len(gone) == 3
    assert simulation.disruption_peak == {"default": 1}
    # As in Karpenter: each deletion waited its own 15 s after the one before.
    assert gone[0] >= CONSOLIDATE_AFTER + VALIDATION_DELAY
    for earlier, later in pairwise(gone):
        assert later - earlier >= VALIDATION_DELAY


def test_a_node_whose_due_time_moves_waits_a_whole_recheck_again() -> None:
    simulation, emptied = three_nodes_emptied()
    # All three are due and watched; the first command is waiting its re-check.
    simulation.run(CONSOLIDATE_AFTER + 5, until_steady=False)
    assert len(simulation.nodeclaims()) == 3
    assert simulation.disruption.orchestrator.pending is not None
    # A pod comes and goes on the last node: its lastPodEventTime moves on, as
    # NodeClaimPodEvents records it.
    last = simulation.nodeclaims()[-1]
    touched_at = simulation.clock.now()
    simulation.cluster.update(last.with_status(last_pod_event_time=touched_at))
    simulation.run(600)
    records = simulation.recorder.nodeclaims
    touched = records[last.name].deleted_at
    others = [record.deleted_at for name, record in records.items() if name != last.name]
    assert touched is not None and all(moment is not None for moment in others)
    # The other two went as before; the touched one became due again 30 s after the
    # pod event and then waited a whole re-check of its own.
    assert max(moment - emptied for moment in others if moment is not None) <= (
        CONSOLIDATE_AFTER + VALIDATION_DELAY + 1
    )
    assert touched - touched_at >= CONSOLIDATE_AFTER + VALIDATION_DELAY
