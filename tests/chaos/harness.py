"""What the chaos suite drives and watches: two supervised replicas, the faults, the invariants.

**The replicas.** Two ``karpy run`` processes elect a leader through one
Lease, as the chart's two replicas would. Each talks to the API server
through a :class:`~tests.integration.wire.RecordingProxy` of its own: the
proxy records every request the replica *sent* (the wire, not the server's
audit log, which dates a request sent while the server was stopped by when
it resumed), and cutting its connections cuts the replica's watches. A
:class:`Supervisor` restarts a replica that exits or is killed a second
later, as the Deployment's ReplicaSet and the kubelet would.

**The faults**, each a function that returns once the fault is over:
the API server stopped (SIGSTOP, then SIGCONT); etcd killed (SIGKILL) and
started again with the same command line; the leader (or the standby)
killed; a NodeClaim or a Node deleted by hand; the fake kubelet stopped
(SIGSTOP: no heartbeats, so its nodes go NotReady once the node monitor's
grace period passes) and resumed; the watches cut after an etcd compaction,
so that every replica's watch resumes from a compacted resourceVersion and
gets 410 Gone.

**The invariants**, checked by a :class:`Monitor` thread twice a second, not
only at the end of a round:

- *NodeClaims*: the NodeClaims not being deleted, less those whose node is
  tainted ``karpenter.sh/disrupted`` (its replacement is in flight) or is being
  deleted or gone (deleted by hand, its pods moved before its NodeClaim goes), never
  exceed what the round may need: the count the cluster had converged to
  before it, plus one NodeClaim per three pods added (a node holds three of
  the suite's pods), plus one per replica killed in the round (a leader
  killed between a replacement's launch and its candidate's deletion leaves
  that replacement; the next leader consolidates it);
- *no orphan Node*: no Node of the pool goes without a NodeClaim for longer
  than the garbage-collection window;
- *PDBs*: karpy never deletes a pod (it evicts through the Eviction API,
  which the API server refuses with 429 while a PodDisruptionBudget allows
  no disruption), as seen on the wire;
- *do-not-disrupt*: karpy never evicts a pod carrying
  ``karpenter.sh/do-not-disrupt``, as seen on the wire;
- *every pod eventually Running*: each round converges within its time limit.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import signal
import statistics
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.integration.conftest import ControlPlane
from tests.integration.karpy_run import (
    LABEL_GENERATION,
    KarpyProcess,
    as_yaml,
    deployment,
    lease_identity,
    node_class,
    nodepool,
    pod_disruption_budget,
    start_karpy_run,
)
from tests.integration.wire import RecordingProxy

from karpy.kube._http import ApiStatusError, ApiTransport

JSON = dict[str, Any]

POOL = "chaos"
LEASE_NAME = "chaos-leader-election"
LEASE_NAMESPACE = "kube-system"
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{LEASE_NAME}"
DISRUPTED_TAINT = "karpenter.sh/disrupted"
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
# The suite's pods request 1 CPU; a c5.xlarge (3.92 CPU allocatable) holds three.
PODS_PER_NODE = 3
# How long a Node may go without a NodeClaim: karpy's 30 s garbage-collection grace, a
# pass interval, and the time for a new leader to start after a kill.
ORPHAN_NODE_WINDOW = 60.0
# Restart delay of a replica that exited, as the kubelet's first back-off.
RESTART_DELAY = 1.0


# -- reading the cluster ------------------------------------------------------------


def items(api: ApiTransport, path: str, selector: str = "") -> list[JSON]:
    params = {"labelSelector": selector} if selector else {}
    found = api.request("GET", path, params=params, timeout=10).body.get("items") or []
    assert isinstance(found, list)
    return found


def name_of(obj: JSON) -> str:
    return str(obj["metadata"]["name"])


def deleting(obj: JSON) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def condition(obj: JSON, kind: str) -> str:
    for entry in (obj.get("status") or {}).get("conditions") or ():
        if entry.get("type") == kind:
            return str(entry.get("status"))
    return "Unknown"


@dataclass
class Snapshot:
    """The pool's NodeClaims and Nodes and the namespace's pods, read together."""

    claims: list[JSON]
    nodes: list[JSON]
    pods: list[JSON]

    @classmethod
    def read(cls, api: ApiTransport, namespace: str) -> Snapshot:
        selector = f"karpenter.sh/nodepool={POOL}"
        return cls(
            claims=items(api, "/apis/karpenter.sh/v1/nodeclaims", selector),
            nodes=items(api, "/api/v1/nodes", selector),
            pods=items(api, f"/api/v1/namespaces/{namespace}/pods"),
        )

    def live_claims(self) -> list[JSON]:
        return [claim for claim in self.claims if not deleting(claim)]

    def tainted_nodes(self) -> set[str]:
        return {
            name_of(node)
            for node in self.nodes
            if any(taint.get("key") == DISRUPTED_TAINT for taint in node["spec"].get("taints") or ())
        }

    def leaving_nodes(self) -> set[str]:
        """Nodes on their way out: tainted for a disruption in flight, or being deleted."""
        return self.tainted_nodes() | {name_of(node) for node in self.nodes if deleting(node)}

    def counted_claims(self) -> int:
        """Live NodeClaims, less those whose node is leaving or already gone.

        A Node deleted by hand takes its pods with it before karpy deletes the
        NodeClaim: the pods' new NodeClaim is a replacement, not a second node.
        (A NodeClaim left without its Node for good fails convergence instead.)
        """
        leaving = self.leaving_nodes()
        present = {name_of(node) for node in self.nodes}
        counted = 0
        for claim in self.live_claims():
            node_name = claim.get("status", {}).get("nodeName")
            if node_name in leaving or (node_name and node_name not in present):
                continue
            counted += 1
        return counted

    def orphan_nodes(self) -> set[str]:
        """Nodes of the pool whose provider ID no NodeClaim carries."""
        owned = {claim.get("status", {}).get("providerID") for claim in self.claims}
        return {name_of(node) for node in self.nodes if node["spec"].get("providerID") not in owned}

    def holds_pinned(self, node_name: str) -> bool:
        """Whether a do-not-disrupt pod runs on ``node_name``."""
        return any(
            (pod["metadata"].get("annotations") or {}).get(DO_NOT_DISRUPT) == "true"
            for pod in self.pods_on(node_name)
        )

    def pinned_pods(self) -> set[str]:
        return {
            name_of(pod)
            for pod in self.pods
            if (pod["metadata"].get("annotations") or {}).get(DO_NOT_DISRUPT) == "true"
        }

    def running(self) -> int:
        return sum(
            1
            for pod in self.pods
            if not deleting(pod) and (pod.get("status") or {}).get("phase") == "Running"
        )

    def pods_on(self, node_name: str) -> list[JSON]:
        return [pod for pod in self.pods if pod["spec"].get("nodeName") == node_name]


# -- the replicas ----------------------------------------------------------------------


class Supervisor:
    """Keeps two ``karpy run`` replicas running, each behind a recording proxy of its own."""

    def __init__(self, plane: ControlPlane, logs: Path, replicas: int = 2) -> None:
        self.plane = plane
        self.logs = logs
        self.proxies = [RecordingProxy(plane.state_dir, plane.kubeconfig).start() for _ in range(replicas)]
        self.kubeconfigs = [
            proxy.kubeconfig(logs / f"wire-{index}.kubeconfig") for index, proxy in enumerate(self.proxies)
        ]
        self.processes: list[KarpyProcess | None] = [None] * replicas
        self.starts = [0] * replicas
        self.exits: list[tuple[int, int]] = []  # (replica, exit status)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="supervisor", daemon=True)

    def start(self) -> Supervisor:
        for index in range(len(self.processes)):
            self._start(index)
        self._thread.start()
        return self

    def _start(self, index: int) -> None:
        self.starts[index] += 1
        self.processes[index] = start_karpy_run(
            self.plane,
            f"chaos-{index}-{self.starts[index]}",
            self.logs,
            "--kubeconfig",
            str(self.kubeconfigs[index]),
            "--leader-election-name",
            LEASE_NAME,
            "--leader-election-namespace",
            LEASE_NAMESPACE,
            env={"METRICS_PORT": "0", "HEALTH_PROBE_PORT": "0", "LOG_LEVEL": "info"},
        )

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            with self._lock:
                for index, process in enumerate(self.processes):
                    if process is not None and process.process.poll() is not None:
                        self.exits.append((index, int(process.process.returncode)))
                        process.pid_file.unlink(missing_ok=True)
                        self.processes[index] = None
                        threading.Timer(RESTART_DELAY, self._restart, args=(index,)).start()

    def _restart(self, index: int) -> None:
        with self._lock:
            if not self._stop.is_set() and self.processes[index] is None:
                self._start(index)

    def identity(self, index: int) -> str | None:
        process = self.processes[index]
        return lease_identity(process) if process is not None else None

    def leader_index(self, api: ApiTransport) -> int | None:
        try:
            holder = api.request("GET", LEASE_PATH, timeout=10).body.get("spec", {}).get("holderIdentity")
        except ApiStatusError:
            return None
        with self._lock:
            for index in range(len(self.processes)):
                if holder and self.identity(index) == holder:
                    return index
        return None

    def kill(self, index: int) -> bool:
        with self._lock:
            process = self.processes[index]
            if process is None or process.process.poll() is not None:
                return False
            process.process.kill()
            return True

    def wire_writes(self) -> list[tuple[int, str, str]]:
        return [
            (index, request.method, request.path)
            for index, proxy in enumerate(self.proxies)
            for request in proxy.writes()
        ]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        with self._lock:
            for process in self.processes:
                if process is not None:
                    process.stop()
        for proxy in self.proxies:
            proxy.close()

    def logs_tail(self, lines: int = 12) -> str:
        return "\n".join(
            f"--- replica {index} ---\n{process.tail(lines)}"
            for index, process in enumerate(self.processes)
            if process is not None
        )


# -- the invariants --------------------------------------------------------------------


@dataclass
class Violation:
    at: float
    invariant: str
    detail: str


class Monitor:
    """Checks the invariants twice a second on a thread of its own; the round sets the bound."""

    def __init__(self, plane: ControlPlane, namespace: str, supervisor: Supervisor) -> None:
        self.api = ApiTransport.from_kubeconfig(plane.kubeconfig)
        self.namespace = namespace
        self.supervisor = supervisor
        self.bound = 0
        self.violations: list[Violation] = []
        self.pinned_seen: set[str] = set()
        self.checks = 0
        self.paused = threading.Event()  # set while the API server is stopped: nothing to read
        self._orphans_since: dict[str, float] = {}
        self._reported: set[tuple[str, str]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="monitor", daemon=True)

    def start(self) -> Monitor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.api.close()

    def _violate(self, invariant: str, detail: str, key: str = "") -> None:
        if (invariant, key or detail) in self._reported:
            return
        self._reported.add((invariant, key or detail))
        self.violations.append(Violation(time.monotonic(), invariant, detail))

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            if self.paused.is_set():
                continue
            try:
                snapshot = Snapshot.read(self.api, self.namespace)
            except Exception:  # the API server is down or restarting: the next check reads again
                continue
            self.check(snapshot)

    def check(self, snapshot: Snapshot) -> None:
        self.checks += 1
        now = time.monotonic()
        counted = snapshot.counted_claims()
        if counted > self.bound:
            names = sorted(name_of(claim) for claim in snapshot.live_claims())
            self._violate("NodeClaims within the plan", f"{counted} > {self.bound}: {names}", key=str(names))
        orphans = snapshot.orphan_nodes()
        for name in list(self._orphans_since):
            if name not in orphans:
                del self._orphans_since[name]
        for name in orphans:
            since = self._orphans_since.setdefault(name, now)
            if now - since > ORPHAN_NODE_WINDOW:
                self._violate(
                    "no orphan Node", f"Node {name} without a NodeClaim for {now - since:.0f}s", key=name
                )
        self.pinned_seen |= snapshot.pinned_pods()
        for replica, method, path in self.supervisor.wire_writes():
            parts = path.strip("/").split("/")
            # api/v1/namespaces/NS/pods/NAME[/eviction]
            if len(parts) >= 6 and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "pods":
                pod = parts[5]
                if method == "DELETE" and len(parts) == 6:
                    self._violate("PDBs (evictions only)", f"replica {replica} deleted pod {pod}", key=path)
                if parts[6:] == ["eviction"] and method == "POST" and pod in self.pinned_seen:
                    self._violate("do-not-disrupt", f"replica {replica} evicted pod {pod}", key=path)


# -- the faults --------------------------------------------------------------------------


def process_of(plane: ControlPlane, name: str) -> tuple[int, list[str]]:
    """The pid of a control-plane process (``pids/NAME``) and its command line."""
    pid = int((plane.state_dir / "pids" / name).read_text().split()[0])
    command = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    return pid, [part.decode() for part in command]


def wait_api(api: ApiTransport, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            api.request("GET", "/version", timeout=5)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@dataclass
class Chaos:
    """The context the faults act in."""

    plane: ControlPlane
    api: ApiTransport
    namespace: str
    supervisor: Supervisor
    monitor: Monitor
    rng: random.Random
    api_stopped_for: tuple[float, float]  # the shortest and longest stop of the API server, seconds
    kills: int = 0

    def stop_api_server(self) -> str:
        seconds = self.rng.uniform(*self.api_stopped_for)
        pid, _ = process_of(self.plane, "kube-apiserver")
        self.monitor.paused.set()
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            os.kill(pid, signal.SIGCONT)
            self.monitor.paused.clear()
        wait_api(self.api)
        return f"{seconds:.0f}s"

    def restart_etcd(self) -> str:
        pid, command = process_of(self.plane, "etcd")
        self.monitor.paused.set()
        try:
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
                time.sleep(0.05)
            down = self.rng.uniform(1, 5)
            time.sleep(down)
            log = (self.plane.state_dir / "logs" / "etcd.log").open("ab")
            restarted = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            (self.plane.state_dir / "pids" / "etcd").write_text(f"{restarted.pid} {command[0]}\n")
        finally:
            self.monitor.paused.clear()
        wait_api(self.api)
        return f"down {down:.0f}s"

    def kill_karpy(self, which: str = "leader") -> str:
        index = self.supervisor.leader_index(self.api)
        if which == "standby" or index is None:
            index = self.rng.randrange(len(self.supervisor.processes)) if index is None else 1 - index
        killed = self.supervisor.kill(index)
        if killed:
            self.kills += 1
        return f"{which} (replica {index})" if killed else "none running"

    def delete_nodeclaim(self) -> str:
        snapshot = Snapshot.read(self.api, self.namespace)
        # A NodeClaim holding a do-not-disrupt pod is drained only past its termination grace
        # period (Karpenter's rule, and karpy's): deleting one by hand would stall the round.
        choices = [
            claim
            for claim in snapshot.live_claims()
            if not snapshot.holds_pinned(claim.get("status", {}).get("nodeName", ""))
        ]
        return self._delete_one("/apis/karpenter.sh/v1/nodeclaims", choices)

    def delete_node(self) -> str:
        snapshot = Snapshot.read(self.api, self.namespace)
        # As for a NodeClaim: a node holding a do-not-disrupt pod drains only past its grace period.
        choices = [
            node for node in snapshot.nodes if not deleting(node) and not snapshot.holds_pinned(name_of(node))
        ]
        return self._delete_one("/api/v1/nodes", choices)

    def _delete_one(self, collection: str, choices: list[JSON]) -> str:
        """Delete one of ``choices``, picked at random, by hand (as ``kubectl delete`` would)."""
        if not choices:
            return "none to delete"
        name = name_of(self.rng.choice(choices))
        with contextlib.suppress(ApiStatusError):  # gone meanwhile
            self.api.request("DELETE", f"{collection}/{name}", timeout=10)
        return name

    def stop_kubelet(self) -> str:
        # Past the node monitor's grace period (40 s), so the nodes are marked NotReady.
        seconds = 45.0
        pid, _ = process_of(self.plane, "fake-kubelet")
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            os.kill(pid, signal.SIGCONT)
        return f"{seconds:.0f}s"

    def cut_watches(self) -> str:
        status = json.loads(self.plane.etcdctl("endpoint", "status", "-w", "json"))
        revision = int(status[0]["Status"]["header"]["revision"])
        self.plane.etcdctl("compaction", str(revision))
        cut = sum(proxy.cut() for proxy in self.supervisor.proxies)
        return f"{cut} connections after compacting to {revision}"


FAULTS: dict[str, Callable[[Chaos], str]] = {
    "API server stopped": Chaos.stop_api_server,
    "etcd killed and restarted": Chaos.restart_etcd,
    "leader killed": Chaos.kill_karpy,
    "standby killed": lambda chaos: chaos.kill_karpy("standby"),
    "NodeClaim deleted": Chaos.delete_nodeclaim,
    "Node deleted": Chaos.delete_node,
    "kubelet stopped": Chaos.stop_kubelet,
    "watches cut (410)": Chaos.cut_watches,
}


# -- the table -----------------------------------------------------------------------------


@dataclass
class FaultRecord:
    injected: int = 0
    recoveries: list[float] = field(default_factory=list)
    violations: int = 0


def table(records: dict[str, FaultRecord], total_violations: int) -> str:
    lines = [
        "| fault | injected | recovery p50 | recovery max | invariant violations |",
        "|---|---|---|---|---|",
    ]
    for fault, record in records.items():
        recoveries = record.recoveries
        p50 = f"{statistics.median(recoveries):.1f} s" if recoveries else "-"
        worst = f"{max(recoveries):.1f} s" if recoveries else "-"
        lines.append(f"| {fault} | {record.injected} | {p50} | {worst} | {record.violations} |")
    lines.append(f"| **all** | {sum(r.injected for r in records.values())} | | | **{total_violations}** |")
    return "\n".join(lines)


def slots(pods: int) -> int:
    return math.ceil(pods / PODS_PER_NODE)


# -- the workload and the rounds --------------------------------------------------------

INSTANCE_TYPE = "c5.xlarge"
PINNED = 2
DB = 3
WEB_START = 6
WEB_MAX = 12
WEB_MIN = 3
# The longest a round may take to converge after its faults.
CONVERGE_TIMEOUT = 240.0
STABLE_FOR = 25.0


def statefulset(namespace: str, name: str, replicas: int) -> dict[str, Any]:
    """The same pods as :func:`deployment`'s, owned by a StatefulSet."""
    manifest = deployment(POOL, namespace, name, replicas)
    manifest["kind"] = "StatefulSet"
    manifest["spec"]["serviceName"] = name
    return manifest


class Workload:
    """The suite's objects, and what a round changes of them."""

    def __init__(self, plane: ControlPlane, namespace: str) -> None:
        self.plane = plane
        self.namespace = namespace
        self.web = WEB_START
        self.generation = 1

    @property
    def pods(self) -> int:
        return self.web + PINNED + DB

    def apply(self) -> None:
        self.plane.kubectl(
            "apply",
            "-f",
            "-",
            stdin=as_yaml(
                node_class(POOL),
                nodepool(
                    POOL,
                    [INSTANCE_TYPE],
                    generation=self.generation,
                    consolidation_policy="WhenEmptyOrUnderutilized",
                    consolidate_after="5s",
                ),
                deployment(POOL, self.namespace, "web", self.web),
                pod_disruption_budget(self.namespace, "web", WEB_MIN - 1),
                deployment(POOL, self.namespace, "pinned", PINNED, do_not_disrupt=True),
                statefulset(self.namespace, "db", DB),
            ),
        )

    def change(self, phase: str, rng: random.Random) -> None:
        if phase == "scale-up":
            self.web = min(WEB_MAX, self.web + rng.randint(3, 6))
        elif phase == "consolidation":
            self.web = WEB_MIN
        else:
            self.generation += 1
        self.apply()


def converged(snapshot: Snapshot, workload: Workload) -> bool:
    live = snapshot.live_claims()
    if len(snapshot.claims) != len(live) or not live:
        return False
    pods = [pod for pod in snapshot.pods if not deleting(pod)]
    if len(pods) != workload.pods or snapshot.running() != workload.pods:
        return False
    nodes = {name_of(node): node for node in snapshot.nodes}
    for claim in live:
        node = nodes.get(claim.get("status", {}).get("nodeName", ""))
        if node is None or condition(claim, "Ready") != "True" or condition(node, "Ready") != "True":
            return False
        if any(taint.get("key") == DISRUPTED_TAINT for taint in node["spec"].get("taints") or ()):
            return False
        current = claim["metadata"].get("labels", {}).get(LABEL_GENERATION) == str(workload.generation)
        if not current and not snapshot.holds_pinned(name_of(node)):
            return False
    return len(nodes) == len(live)


def wait_converged(
    api: ApiTransport, workload: Workload, supervisor: Supervisor, timeout: float
) -> tuple[float | None, int]:
    """(the monotonic time the cluster converged, or None; the NodeClaims counted then).

    Converged also means a running replica holds the lease: a cluster that merely
    stands still while nobody leads has not recovered (nothing would consolidate it).
    """
    deadline = time.monotonic() + timeout
    stable_since: float | None = None
    stable_names: frozenset[str] = frozenset()
    counted = 0
    while time.monotonic() < deadline:
        try:
            snapshot = Snapshot.read(api, workload.namespace)
        except Exception:  # a fault's aftermath: the API server still starting
            time.sleep(1)
            continue
        names = frozenset(name_of(claim) for claim in snapshot.claims)
        if converged(snapshot, workload) and supervisor.leader_index(api) is not None:
            if stable_since is None or names != stable_names:
                stable_since, stable_names = time.monotonic(), names
            elif time.monotonic() - stable_since >= STABLE_FOR:
                return stable_since, snapshot.counted_claims()
            counted = snapshot.counted_claims()
        else:
            stable_since = None
        time.sleep(0.5)
    return None, counted


class Rounds:
    """Runs rounds: a change of the workload, faults at a random moment of it, then convergence."""

    def __init__(
        self,
        plane: ControlPlane,
        namespace: str,
        supervisor: Supervisor,
        rng: random.Random,
        *,
        api_stopped_for: tuple[float, float],
    ) -> None:
        self.api = ApiTransport.from_kubeconfig(plane.kubeconfig)
        self.supervisor = supervisor
        self.rng = rng
        self.monitor = Monitor(plane, namespace, supervisor)
        self.chaos = Chaos(plane, self.api, namespace, supervisor, self.monitor, rng, api_stopped_for)
        self.workload = Workload(plane, namespace)
        self.records: dict[str, FaultRecord] = {fault: FaultRecord() for fault in FAULTS}
        self.counted = 0

    def start(self) -> None:
        """Apply the workload and wait until it has converged, before any fault."""
        self.monitor.bound = slots(self.workload.pods)
        self.monitor.start()
        self.workload.apply()
        at, self.counted = wait_converged(self.api, self.workload, self.supervisor, CONVERGE_TIMEOUT)
        if at is None:
            raise AssertionError(
                f"the workload did not converge before any fault\n{self.supervisor.logs_tail()}"
            )

    def run(self, number: int, phase: str, faults: tuple[str, ...]) -> str:
        """One round; its line for the log."""
        monitor, workload = self.monitor, self.workload
        before = workload.pods
        workload.change(phase, self.rng)
        monitor.bound = self.counted + slots(max(0, workload.pods - before))
        started = time.monotonic()
        time.sleep(self.rng.uniform(0.0, 4.0))  # a random moment of the change
        details = []
        for fault in faults:
            if "killed" in fault and "etcd" not in fault:
                # A replica killed mid-command may leave one replacement behind.
                monitor.bound += 1
            details.append(f"{fault}: {FAULTS[fault](self.chaos)}")
            self.records[fault].injected += 1
        faults_over = time.monotonic()
        at, self.counted = wait_converged(self.api, workload, self.supervisor, CONVERGE_TIMEOUT)
        recovery = (at - faults_over) if at is not None else None
        if at is None:
            monitor.violations.append(
                Violation(
                    time.monotonic(), "every pod eventually Running", f"round {number} did not converge"
                )
            )
        in_round = [violation for violation in monitor.violations if violation.at >= started]
        for fault in faults:
            if recovery is not None:
                self.records[fault].recoveries.append(recovery)
            self.records[fault].violations += len(in_round)
        outcome = (
            f"converged {recovery:.1f}s after the faults" if recovery is not None else "DID NOT CONVERGE"
        )
        return (
            f"round {number} ({phase}; {', '.join(details)}): {outcome},"
            f" {self.counted} NodeClaims, bound {monitor.bound}, violations {len(in_round)}"
        )

    def table(self) -> str:
        injected = {fault: record for fault, record in self.records.items() if record.injected}
        return table(injected, len(self.monitor.violations))

    def stop(self) -> None:
        self.monitor.stop()
        self.api.close()
