"""The chaos suite: two ``karpy run`` replicas under faults, with the invariants watched throughout.

The workload mixes what disruption must respect: a Deployment with a
PodDisruptionBudget (``web``), a Deployment of ``karpenter.sh/do-not-disrupt``
pods (``pinned``) and a StatefulSet (``db``), all 1-CPU pods on one NodePool
of c5.xlarge kwok nodes that consolidates when empty or underused.

A round changes the workload (a **scale-up** of ``web``, a scale-down that
karpy must **consolidate**, or a template change that **drifts** every
node), injects its faults at a random moment of that change (one at a
time, or several in a row), then waits until the cluster has converged:
every pod Running, every NodeClaim Ready with its Node, no disruption in
flight, every node on the current template unless it holds a
do-not-disrupt pod, and the NodeClaims unchanged for 25 s (long enough for a
consolidation pass to act on what a round left). The recovery
time is from the end of the round's faults to that moment. The invariants
(:mod:`tests.chaos.harness`) are checked twice a second all along.

``make test`` runs a subset (three rounds: a leader killed during a
scale-up, the API server stopped during a consolidation, a NodeClaim deleted
and the leader killed during a drift); ``make chaos`` runs the whole matrix
(``KARPY_CHAOS=full``, about 45 minutes): 37 rounds spread over the three
kinds of change, with 24 replica kills (the leader 18 times, the standby 6),
every other fault two to four times, and five rounds that combine faults.
``KARPY_CHAOS_SEED`` picks the random moments and targets (default 1), so a
failing run can be replayed. The table of
faults, recovery times and violations is printed (``pytest -s`` shows it).
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.chaos.harness import FAULTS, LEASE_NAME, LEASE_NAMESPACE, POOL, Rounds, Supervisor
from tests.integration.conftest import ControlPlane
from tests.integration.karpy_run import remove_pools

pytestmark = [pytest.mark.integration, pytest.mark.chaos]


def rounds(full: bool, rng: random.Random) -> list[tuple[str, tuple[str, ...]]]:
    """The matrix: (the change, the faults injected during it) per round."""
    phases = ("scale-up", "consolidation", "drift")
    if not full:
        return [
            ("scale-up", ("leader killed",)),
            ("consolidation", ("API server stopped",)),
            ("drift", ("NodeClaim deleted", "leader killed")),
        ]
    leader: tuple[str, ...] = ("leader killed",)
    standby: tuple[str, ...] = ("standby killed",)
    singles: list[tuple[str, ...]] = [leader] * 15 + [standby] * 5
    for fault in FAULTS:
        if fault not in ("leader killed", "standby killed"):
            singles += [(fault,)] * 2
    combinations: list[tuple[str, ...]] = [
        ("API server stopped", "leader killed"),
        ("Node deleted", "leader killed"),
        ("watches cut (410)", "NodeClaim deleted"),
        ("etcd killed and restarted", "leader killed"),
        ("NodeClaim deleted", "Node deleted", "standby killed"),
    ]
    matrix = singles + combinations
    rng.shuffle(matrix)
    return [(phases[index % len(phases)], faults) for index, faults in enumerate(matrix)]


@pytest.fixture
def supervisor(crds: ControlPlane, namespace: str, tmp_path: Path) -> Iterator[Supervisor]:
    started = Supervisor(crds, tmp_path).start()
    try:
        yield started
    finally:
        print(f"\nreplica exits (replica, status): {started.exits}")
        print(started.logs_tail())
        try:
            # The workload first (its do-not-disrupt pods would hold their nodes), then the pool,
            # while karpy still runs to drain and remove the nodes.
            crds.kubectl("delete", "deployment,statefulset", "--all", "-n", namespace, "--wait=false")
            remove_pools(crds, POOL, timeout=120)
        finally:
            started.stop()
            crds.kubectl("delete", "lease", LEASE_NAME, "-n", LEASE_NAMESPACE, "--ignore-not-found")


def test_two_replicas_under_faults_keep_every_invariant(
    crds: ControlPlane, namespace: str, supervisor: Supervisor
) -> None:
    full = os.environ.get("KARPY_CHAOS", "") == "full"
    rng = random.Random(int(os.environ.get("KARPY_CHAOS_SEED", "1")))
    # The API server is stopped for up to 30 s in the matrix, 10 s in make test's subset.
    stopped_for = (5.0, 30.0) if full else (5.0, 10.0)
    rounds_run = Rounds(crds, namespace, supervisor, rng, api_stopped_for=stopped_for)
    try:
        rounds_run.start()
        for number, (phase, faults) in enumerate(rounds(full, rng), start=1):
            print(rounds_run.run(number, phase, faults), flush=True)
    finally:
        rounds_run.stop()
    monitor = rounds_run.monitor
    print("\n" + rounds_run.table())
    print(f"invariant checks: {monitor.checks}; replica restarts: {len(supervisor.exits)}")
    assert not monitor.violations, [f"{v.invariant}: {v.detail}" for v in monitor.violations]
