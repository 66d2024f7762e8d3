"""Two ``karpy run`` replicas against the real control plane: one leads, the other takes over.

Each replica is a separate ``python -m karpy.cli run`` process with leader
election on (the default), so the Lease, the signals and the exit statuses
are the real ones. What is checked:

- both replicas sync their caches, exactly one holds the Lease and only that
  one reconciles;
- killing the leader (SIGKILL) in the middle of a scale-up hands the Lease
  to the standby once the lease has expired on the standby's clock, and the
  new leader finishes the job: every pod runs, every NodeClaim made before
  the kill is still there, the NodeClaims are exactly what one replica alone
  plans for the same pods (karpy's simulator, same manifests), and kwok
  Nodes and NodeClaims match one to one;
- a leader stopped gracefully (SIGTERM) releases the Lease, so the standby
  takes over within one retry, and exits 0;
- a leader whose Lease is taken from it stops and exits with status 1.

The failover times are printed (``pytest -s`` shows them). The replicas use a
Lease, a NodePool, a node class and pod labels of their own, so the other
modules sharing the control plane are not affected; the replicas are
recorded in the control plane's ``pids/`` so its watchdog stops them should
this process die.
"""

from __future__ import annotations

import math
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support import load_objects

from karpy.kube._http import CONTENT_MERGE_PATCH, JSON, ApiStatusError, ApiTransport
from karpy.kube.leader import JITTER_FACTOR, LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD
from karpy.sim.simulation import Simulation

from .conftest import ControlPlane, wait_until
from .karpy_run import (
    KarpyProcess,
    as_yaml,
    condition,
    deployment,
    node_class,
    nodepool,
    remove_pools,
    start_karpy_run,
)

pytestmark = pytest.mark.integration

NODEPOOL = "it-leader"
LEASE_NAME = "it-leader-election"
LEASE_NAMESPACE = "kube-system"
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{LEASE_NAME}"
APP = "it-leader"
# Pods of 1 CPU on c5.xlarge nodes (3.92 CPU allocatable): three per node.
INSTANCE_TYPE = "c5.xlarge"
FIRST_REPLICAS = 6
FINAL_REPLICAS = 9
# The longest a candidate waits between two tries.
MAX_RETRY_INTERVAL = RETRY_PERIOD * (1 + JITTER_FACTOR)

# consolidateAfter Never: no NodeClaim may legitimately go away during the test, so every
# one that does was lost.
POOL_MANIFESTS = as_yaml(
    node_class(NODEPOOL),
    nodepool(
        NODEPOOL,
        [INSTANCE_TYPE],
        capacity_types=None,
        consolidation_policy="WhenEmptyOrUnderutilized",
        consolidate_after="Never",
    ),
)


def app_deployment(namespace: str, replicas: int) -> str:
    return as_yaml(deployment(NODEPOOL, namespace, APP, replicas, memory="256Mi"))


# -- the replicas ---------------------------------------------------------------


def lease_identity(replica: KarpyProcess) -> str | None:
    """The identity a replica runs for the lease as, from its log."""
    found = re.search(r"running for lease \S+ as ([^\s\"]+)", replica.log())
    return found.group(1) if found else None


class Replicas:
    """Starts ``karpy run`` processes and makes sure none outlives the test."""

    def __init__(self, plane: ControlPlane, logs: Path) -> None:
        self.plane = plane
        self.logs = logs
        self.started: list[KarpyProcess] = []

    def start(self, name: str) -> KarpyProcess:
        replica = start_karpy_run(
            self.plane,
            name,
            self.logs,
            "--kubeconfig",
            str(self.plane.kubeconfig),
            "--leader-election-name",
            LEASE_NAME,
            "--leader-election-namespace",
            LEASE_NAMESPACE,
            # Replicas on one machine cannot share the metrics and probe ports: any free ones.
            env={"METRICS_PORT": "0", "HEALTH_PROBE_PORT": "0", "LOG_LEVEL": "info"},
        )
        self.started.append(replica)
        return replica

    def stop_all(self) -> None:
        for replica in self.started:
            replica.stop()


# -- reading the cluster fast (kubectl takes a tenth of a second a call) -----------


def lease_holder(api: ApiTransport) -> str:
    try:
        lease = api.request("GET", LEASE_PATH).body
    except ApiStatusError as error:
        if error.code == 404:
            return ""
        raise
    return str(lease.get("spec", {}).get("holderIdentity") or "")


def pool_items(api: ApiTransport, path: str) -> list[JSON]:
    items = api.request("GET", path, params={"labelSelector": f"karpenter.sh/nodepool={NODEPOOL}"}).body
    found = items.get("items") or []
    assert isinstance(found, list)
    return found


def nodeclaims(api: ApiTransport) -> list[JSON]:
    return pool_items(api, "/apis/karpenter.sh/v1/nodeclaims")


def pool_nodes(api: ApiTransport) -> list[JSON]:
    return pool_items(api, "/api/v1/nodes")


def app_pods(api: ApiTransport, namespace: str) -> list[JSON]:
    body = api.request("GET", f"/api/v1/namespaces/{namespace}/pods", params={"labelSelector": f"app={APP}"})
    found = body.body.get("items") or []
    assert isinstance(found, list)
    return found


def name_of(obj: JSON) -> str:
    return str(obj["metadata"]["name"])


def condition_status(obj: JSON, kind: str) -> str:
    return str(condition(obj, kind).get("status", "Unknown"))


def wait_for_holder(api: ApiTransport, identity: str, timeout: float) -> float:
    """Wait until ``identity`` holds the lease; the monotonic time it was first seen holding it."""

    def holds() -> float | None:
        return time.monotonic() if lease_holder(api) == identity else None

    return wait_until(holds, timeout=timeout, interval=0.05, what=f"{identity} to hold the lease")


def planned_nodeclaims() -> int:
    """How many NodeClaims one replica alone makes for the test's scale-up, in karpy's simulator."""

    simulation = Simulation()
    simulation.apply(load_objects(POOL_MANIFESTS, app_deployment("default", FIRST_REPLICAS)))
    simulation.run(120)
    simulation.apply(load_objects(app_deployment("default", FINAL_REPLICAS)))
    simulation.run(600)
    return len(simulation.nodeclaims())


def remove_leftovers(api: ApiTransport) -> None:
    """Delete the pool's NodeClaims and Nodes without a controller (finalizers dropped): after a failure."""
    for path, items in (
        ("/apis/karpenter.sh/v1/nodeclaims", nodeclaims(api)),
        ("/api/v1/nodes", pool_nodes(api)),
    ):
        for item in items:
            object_path = f"{path}/{name_of(item)}"
            for method, body in (("PATCH", {"metadata": {"finalizers": None}}), ("DELETE", None)):
                try:
                    api.request(method, object_path, body=body, content_type=CONTENT_MERGE_PATCH)
                except ApiStatusError:
                    pass


# -- fixtures -------------------------------------------------------------------------


@pytest.fixture
def api(crds: ControlPlane) -> Iterator[ApiTransport]:
    transport = ApiTransport.from_kubeconfig(crds.kubeconfig)
    try:
        yield transport
    finally:
        transport.close()


@pytest.fixture
def replicas(crds: ControlPlane, api: ApiTransport, tmp_path: Path) -> Iterator[Replicas]:
    started = Replicas(crds, tmp_path)
    crds.kubectl("apply", "-f", "-", stdin=POOL_MANIFESTS)
    try:
        yield started
    finally:
        started.stop_all()
        for claim in nodeclaims(api):  # shown when the test failed: what was left, and how far it got
            provider_id = claim.get("status", {}).get("providerID")
            print(
                f"left over: NodeClaim {name_of(claim)} providerID={provider_id}"
                f" Registered={condition_status(claim, 'Registered')}"
                f" Ready={condition_status(claim, 'Ready')}"
            )
        remove_leftovers(api)
        remove_pools(crds, NODEPOOL)
        crds.kubectl("delete", "lease", LEASE_NAME, "-n", LEASE_NAMESPACE, "--ignore-not-found")
        for replica in started.started:
            print(f"--- {replica.name} (exit {replica.process.returncode}) ---\n{replica.tail(15)}")


def start_pair(
    replicas: Replicas, api: ApiTransport, first: str, second: str
) -> tuple[KarpyProcess, KarpyProcess]:
    """Start two replicas; once both have synced, (the leader, the standby)."""
    one, other = replicas.start(first), replicas.start(second)
    for replica in (one, other):
        replica.wait_for("caches synced")
    by_identity = {lease_identity(replica): replica for replica in (one, other)}
    holder = wait_until(lambda: lease_holder(api) or None, timeout=30, interval=0.1, what="a lease holder")
    assert holder in by_identity, f"the lease is held by {holder!r}, not by a replica"
    leader = by_identity[holder]
    standby = other if leader is one else one
    leader.wait_for("controllers running")
    log = leader.log()
    # The log tells the start-up in the order it happens: the lease is sought once the caches synced.
    steps = ("caches synced", "running for lease", "acquired lease", "controllers running")
    assert [log.find(step) for step in steps] == sorted(log.find(step) for step in steps), log
    assert "acquired lease" in log
    assert "acquired lease" not in standby.log()
    assert "controllers running" not in standby.log()
    return leader, standby


# -- the tests --------------------------------------------------------------------------


def test_a_killed_leader_is_replaced_and_no_nodeclaim_is_duplicated_or_lost(
    replicas: Replicas, api: ApiTransport, crds: ControlPlane, namespace: str
) -> None:
    plane = crds
    leader, standby = start_pair(replicas, api, "a", "b")
    standby_identity = lease_identity(standby)
    assert standby_identity is not None

    # Only the leader acts: the first NodeClaims appear, and the leader dies at once.
    plane.kubectl("apply", "-f", "-", stdin=app_deployment(namespace, FIRST_REPLICAS))
    wait_until(lambda: nodeclaims(api) or None, timeout=60, interval=0.05, what="the first NodeClaims")
    killed = leader.signal(signal.SIGKILL)
    assert leader.wait_exit(10) == -signal.SIGKILL
    before_kill = {name_of(claim): claim for claim in nodeclaims(api)}
    launched = sum(1 for claim in before_kill.values() if claim.get("status", {}).get("providerID"))
    registered = sum(1 for claim in before_kill.values() if condition_status(claim, "Registered") == "True")
    # More pods while nobody leads: the new leader must add to the old plan, not redo it.
    plane.kubectl("apply", "-f", "-", stdin=app_deployment(namespace, FINAL_REPLICAS))

    took_over = wait_for_holder(api, standby_identity, timeout=LEASE_DURATION + 3 * MAX_RETRY_INTERVAL)
    failover = took_over - killed
    # Not before the lease expired on the standby's clock (the leader renewed about a retry
    # period before the kill at most; a second one is slack for a loaded machine), and
    # within a lease duration plus two tries after it.
    assert failover >= LEASE_DURATION - 2 * RETRY_PERIOD, failover
    assert failover <= LEASE_DURATION + 2 * MAX_RETRY_INTERVAL + 1.0, failover
    standby.wait_for("controllers running", timeout=10)

    def all_running() -> list[JSON] | None:
        pods = app_pods(api, namespace)
        running = [pod for pod in pods if pod.get("status", {}).get("phase") == "Running"]
        return running if len(running) == len(pods) == FINAL_REPLICAS else None

    pods = wait_until(all_running, timeout=60, what=f"{FINAL_REPLICAS} pods Running")
    all_running_after = time.monotonic() - killed

    def claims_ready() -> list[JSON] | None:
        claims = nodeclaims(api)
        ready = [claim for claim in claims if condition_status(claim, "Ready") == "True"]
        return claims if claims and len(ready) == len(claims) else None

    claims = {
        name_of(claim): claim for claim in wait_until(claims_ready, timeout=60, what="NodeClaims Ready")
    }

    # Nothing lost: every NodeClaim made before the kill is still there (none may be consolidated).
    assert set(before_kill) <= set(claims), f"lost: {set(before_kill) - set(claims)}"
    # Nothing duplicated: what one replica alone makes for the same scale-up.
    planned = planned_nodeclaims()
    assert planned == math.ceil(FINAL_REPLICAS / 3)
    assert len(claims) == planned, sorted(claims)
    # kwok Nodes and NodeClaims match one to one, and the pods run on them.
    nodes = {name_of(node): node for node in pool_nodes(api)}
    assert {claim["status"]["nodeName"] for claim in claims.values()} == set(nodes)
    for name, claim in claims.items():
        assert nodes[claim["status"]["nodeName"]]["spec"]["providerID"] == f"kwok://{name}"
        assert claim["metadata"]["labels"]["node.kubernetes.io/instance-type"] == INSTANCE_TYPE
    assert {pod["spec"]["nodeName"] for pod in pods} <= set(nodes)
    assert "acquired lease" in standby.log()

    print(
        f"\nSIGKILL of the leader -> standby holds the lease: {failover:.1f}s"
        f" (lease {LEASE_DURATION:g}s, retry {RETRY_PERIOD:g}s);"
        f" -> all {FINAL_REPLICAS} pods Running: {all_running_after:.1f}s"
        f"\nNodeClaims at the kill: {len(before_kill)} ({launched} launched, {registered} registered);"
        f" at the end: {len(claims)}, planned by one replica: {planned}"
    )

    # The new leader also takes things down: the Deployment and the NodeClaims go.
    plane.kubectl("delete", "deployment", APP, "-n", namespace, "--wait=false")
    plane.kubectl("delete", "nodeclaims", "-l", f"karpenter.sh/nodepool={NODEPOOL}", "--wait=false")
    wait_until(
        lambda: not nodeclaims(api) and not pool_nodes(api),
        timeout=60,
        what="the NodeClaims and their Nodes removed by the new leader",
    )


def test_a_stopped_leader_hands_over_at_once_and_a_deposed_one_exits_non_zero(
    replicas: Replicas, api: ApiTransport
) -> None:
    leader, standby = start_pair(replicas, api, "c", "d")
    standby_identity = lease_identity(standby)
    assert standby_identity is not None

    stopped = leader.signal(signal.SIGTERM)
    took_over = wait_for_holder(api, standby_identity, timeout=LEASE_DURATION)
    handover = took_over - stopped
    assert leader.wait_exit(30) == 0
    assert "released lease" in leader.log()
    # Released, not expired: within one try of the standby (and slack), far below the lease duration.
    assert handover <= MAX_RETRY_INTERVAL + 3.0, handover
    standby.wait_for("controllers running", timeout=10)

    # Someone else writes itself into the lease: the leader stops within a renewal and exits 1.
    taken = time.monotonic()
    api.request(
        "PATCH",
        LEASE_PATH,
        body={"spec": {"holderIdentity": "it-intruder"}},
        content_type=CONTENT_MERGE_PATCH,
    )
    assert standby.wait_exit(RENEW_DEADLINE + 15) == 1
    deposed = time.monotonic() - taken
    assert "lost lease" in standby.log()
    assert lease_holder(api) == "it-intruder"
    print(
        f"\nSIGTERM of the leader -> standby holds the lease: {handover:.1f}s;"
        f" lease taken -> deposed leader exited 1: {deposed:.1f}s"
    )
