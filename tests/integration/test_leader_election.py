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
- a leader whose Lease is taken from it stops and exits with status 1;
- fencing: with the API server stopped (SIGSTOP) past the renew deadline in
  the middle of a scale-out, not one write leaves the old leader after its
  deadline, as seen on the wire (a recording proxy between it and the API
  server: the audit log would tell when the server *received* a request,
  which for one sent during the stop is when the server resumed), it exits
  1, and the standby finishes the job with no duplicate NodeClaim. The boots
  of its last instances end after its deadline, so its kwok boot timers are
  among the writers the fence must stop.

The failover times are printed (``pytest -s`` shows them). The replicas use a
Lease, a NodePool, a node class and pod labels of their own, so the other
modules sharing the control plane are not affected; the replicas are
recorded in the control plane's ``pids/`` so its watchdog stops them should
this process die.
"""

from __future__ import annotations

import math
import os
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
    lease_identity,
    node_class,
    nodepool,
    remove_pools,
    start_karpy_run,
)
from .wire import RecordingProxy, SentRequest

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


class Replicas:
    """Starts ``karpy run`` processes and makes sure none outlives the test."""

    def __init__(self, plane: ControlPlane, logs: Path) -> None:
        self.plane = plane
        self.logs = logs
        self.started: list[KarpyProcess] = []

    def start(
        self, name: str, *, kubeconfig: Path | None = None, env: dict[str, str] | None = None
    ) -> KarpyProcess:
        replica = start_karpy_run(
            self.plane,
            name,
            self.logs,
            "--kubeconfig",
            str(kubeconfig or self.plane.kubeconfig),
            "--leader-election-name",
            LEASE_NAME,
            "--leader-election-namespace",
            LEASE_NAMESPACE,
            # Replicas on one machine cannot share the metrics and probe ports: any free ones.
            env={"METRICS_PORT": "0", "HEALTH_PROBE_PORT": "0", "LOG_LEVEL": "info", **(env or {})},
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


def planned_nodeclaims(*steps: int) -> int:
    """How many NodeClaims one replica alone makes, the app scaled to each of ``steps`` in turn."""

    simulation = Simulation()
    simulation.apply(load_objects(POOL_MANIFESTS))
    for replicas in steps:
        simulation.apply(load_objects(app_deployment("default", replicas)))
        simulation.run(600)
    return len(simulation.nodeclaims())


def wait_all_running(api: ApiTransport, namespace: str, replicas: int, timeout: float) -> list[JSON]:
    def all_running() -> list[JSON] | None:
        pods = app_pods(api, namespace)
        running = [pod for pod in pods if pod.get("status", {}).get("phase") == "Running"]
        return running if len(running) == len(pods) == replicas else None

    found: list[JSON] = wait_until(all_running, timeout=timeout, what=f"{replicas} pods Running")
    return found


def wait_claims_ready(api: ApiTransport, timeout: float) -> dict[str, JSON]:
    def claims_ready() -> list[JSON] | None:
        claims = nodeclaims(api)
        ready = [claim for claim in claims if condition_status(claim, "Ready") == "True"]
        return claims if claims and len(ready) == len(claims) else None

    return {
        name_of(claim): claim for claim in wait_until(claims_ready, timeout=timeout, what="NodeClaims Ready")
    }


def assert_nodes_match_claims(api: ApiTransport, claims: dict[str, JSON], pods: list[JSON]) -> None:
    """kwok Nodes and NodeClaims match one to one, and the pods run on them."""
    nodes = {name_of(node): node for node in pool_nodes(api)}
    assert {claim["status"]["nodeName"] for claim in claims.values()} == set(nodes)
    for name, claim in claims.items():
        assert nodes[claim["status"]["nodeName"]]["spec"]["providerID"] == f"kwok://{name}"
        assert claim["metadata"]["labels"]["node.kubernetes.io/instance-type"] == INSTANCE_TYPE
    assert {pod["spec"]["nodeName"] for pod in pods} <= set(nodes)


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

    pods = wait_all_running(api, namespace, FINAL_REPLICAS, timeout=60)
    all_running_after = time.monotonic() - killed
    claims = wait_claims_ready(api, timeout=60)

    # Nothing lost: every NodeClaim made before the kill is still there (none may be consolidated).
    assert set(before_kill) <= set(claims), f"lost: {set(before_kill) - set(claims)}"
    # Nothing duplicated: what one replica alone makes for the same scale-up.
    planned = planned_nodeclaims(FIRST_REPLICAS, FINAL_REPLICAS)
    assert planned == math.ceil(FINAL_REPLICAS / 3)
    assert len(claims) == planned, sorted(claims)
    assert_nodes_match_claims(api, claims, pods)
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


# -- fencing --------------------------------------------------------------------------

# Pods of the fencing test's scale-out: four NodeClaims.
FENCING_REPLICAS = 12
# Longer than the renew deadline, as the operator's report had it (20 s).
API_SERVER_STOPPED = RENEW_DEADLINE + 8.0
# The kwok boot time: the instances launched just before the stop come up after the old
# leader's renew deadline, so its boot timers would write then, were they not fenced.
REGISTRATION_DELAY = RENEW_DEADLINE + 2.0


def api_server_pid(plane: ControlPlane) -> int:
    return int((plane.state_dir / "pids" / "kube-apiserver").read_text().split()[0])


def describe(requests: list[SentRequest], since: float) -> list[str]:
    return [f"+{request.at - since:.2f}s {request.method} {request.path}" for request in requests]


def test_no_write_leaves_a_leader_past_its_renew_deadline_and_the_standby_finishes_the_job(
    replicas: Replicas, api: ApiTransport, crds: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    plane = crds
    wire = RecordingProxy(plane.state_dir, plane.kubeconfig).start()
    env = {"KARPY_REGISTRATION_DELAY": f"{REGISTRATION_DELAY:g}s"}
    try:
        # The leader-to-be alone first, through the proxy; then the standby, straight to the server.
        leader = replicas.start("e", kubeconfig=wire.kubeconfig(tmp_path / "wire.kubeconfig"), env=env)
        leader.wait_for("controllers running")
        standby = replicas.start("f", env=env)
        standby.wait_for("caches synced")
        standby_identity = lease_identity(standby)
        assert standby_identity is not None
        assert lease_holder(api) == lease_identity(leader)

        plane.kubectl("apply", "-f", "-", stdin=app_deployment(namespace, FENCING_REPLICAS))
        wait_until(lambda: nodeclaims(api) or None, timeout=60, interval=0.05, what="the first NodeClaims")
        pid = api_server_pid(plane)
        os.kill(pid, signal.SIGSTOP)
        stopped = time.monotonic()  # the stop came no later than this
        try:
            time.sleep(API_SERVER_STOPPED)
        finally:
            os.kill(pid, signal.SIGCONT)
        resumed = time.monotonic()

        # The old leader gives up (status 1) ...
        assert leader.wait_exit(LEASE_DURATION + 15) == 1
        # ... and sent nothing that writes after its renew deadline, which came no later than
        # RENEW_DEADLINE after the stop (no renewal can succeed while the server is stopped).
        deadline = stopped + RENEW_DEADLINE
        writes = wire.writes()
        late = [request for request in writes if request.at > deadline]
        assert not late, describe(late, stopped)
        assert not wire.problems, wire.problems
        # It was acting until the stop: the test is about a leader in the middle of a scale-out.
        created = [
            w for w in writes if w.method == "POST" and w.path.endswith("/nodeclaims") and w.at <= stopped
        ]
        assert created, describe(writes, stopped)
        during_stop = [request for request in writes if stopped < request.at <= deadline]

        # The standby takes over and finishes the job: every pod runs, no NodeClaim is duplicated.
        took_over = wait_for_holder(
            api, standby_identity, timeout=LEASE_DURATION + 3 * MAX_RETRY_INTERVAL + 5
        )
        standby.wait_for("controllers running", timeout=10)
        pods = wait_all_running(api, namespace, FENCING_REPLICAS, timeout=90)
        all_running_after = time.monotonic() - resumed
        claims = wait_claims_ready(api, timeout=60)
        planned = planned_nodeclaims(FENCING_REPLICAS)
        assert planned == math.ceil(FENCING_REPLICAS / 3)
        assert len(claims) == planned, sorted(claims)
        assert_nodes_match_claims(api, claims, pods)
        print(
            f"\nAPI server stopped {API_SERVER_STOPPED:g}s (renew deadline {RENEW_DEADLINE:g}s);"
            f" the old leader's writes on the wire: {len(writes)}, of which {len(created)} NodeClaim"
            f" creations before the stop, {len(during_stop)} sent during the stop before its deadline"
            f" ({', '.join(describe(during_stop, stopped)) or 'none'}), 0 after it;"
            f" the standby held the lease {took_over - resumed:.1f}s after the resume,"
            f" all {FENCING_REPLICAS} pods Running {all_running_after:.1f}s after it,"
            f" {len(claims)} NodeClaims (planned by one replica: {planned})"
        )
    finally:
        wire.close()
