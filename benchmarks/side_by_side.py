"""Karpenter's own controller and ``karpy run`` side by side: same cluster, same work.

For each shape and each controller, a fresh control plane (``scripts/control-plane``, its API
server's audit policy logging only the measured controller's requests) with the real kwok
(``scripts/kwok``) running the nodes, the controller's CRDs, the same KWOKNodeClass and NodePool
(the performance suite's: Linux, on-demand, ``instance-size < 32``, WhenEmptyOrUnderutilized
after 30 s, no limits), then the shape's Deployments:

- ``seed``: the walkthrough, 5 pods of 1 CPU / 1Gi, then scaled to 0;
- ``basic``, ``wide``, ``hostname``: the shapes of Karpenter's performance suite
  (test/suites/performance in sigs.k8s.io/karpenter@v1.15.0: basic_test.go, wide_deployments_test.go,
  host_name_spreading_test.go): 1,000 pods, then scaled in to 700;
- ``scale-down``: 100 pods of 1 CPU / 2Gi scaled to 20, so most nodes are left underused and
  consolidation must move pods, not only delete empty nodes.

Karpenter runs as its kwok controller (``scripts/karpenter-kwok``, built from the module), karpy
as ``karpy run`` with ``KARPY_KWOK_INSTANCE_TYPES=karpenter``, so both offer Karpenter's kwok
instance types at the same prices. Each controller connects with a client certificate of its own
(user ``side-by-side-controller``, in ``system:masters``), so the audit log holds its requests and
nobody else's. Measured (benchmarks/side_by_side_measure.py): time from apply to all pods Running;
NodeClaims created; the fleet's $/h and reserved CPU/memory utilisation once all run; after the
scale-in, the time to the fleet's last change (a quiet ``--settle`` later), the fleet then, and
the pods the controller evicted or deleted; the controller's peak RSS (VmHWM) and mean CPU over
the workload; its API requests.

    python -m benchmarks.side_by_side                      # every shape, both controllers
    python -m benchmarks.side_by_side --shapes seed,basic --scale 0.2 --settle 45

``--scale`` multiplies the pod counts of the performance shapes (the 2-core machine is shared);
``--json FILE`` writes every figure. The table is karpy's and Karpenter's figures and karpy/Karpenter.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.side_by_side_measure import (
    Fleet,
    RequestCounts,
    count_requests,
    cpu_ticks,
    fleet,
    price_table,
    ratio,
    status_bytes,
)
from karpy.kube._http import ApiTransport

REPO = Path(__file__).resolve().parents[1]
CONTROL_PLANE = REPO / "scripts" / "control-plane"
KWOK = REPO / "scripts" / "kwok"
KARPENTER_KWOK = REPO / "scripts" / "karpenter-kwok"
CATALOG = REPO / "src" / "karpy" / "cloud" / "data" / "karpenter-kwok.json"
NAMESPACE = "side-by-side"
CONTROLLER_USER = "side-by-side-controller"
NODEPOOL = "default"
NODECLASS = "default"
APP_LABEL = "side-by-side"
CONTROLLERS = ("karpenter", "karpy")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

AUDIT_POLICY = f"""apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    users: ["{CONTROLLER_USER}"]
  - level: None
"""


# --------------------------------------------------------------------------- shapes


@dataclass(frozen=True)
class Workload:
    """One Deployment: its pods' requests and constraints, its replicas before and after the scale-in."""

    name: str
    replicas: int
    scale_in: int
    cpu: str
    memory: str
    zone_spread: bool = False
    hostname_spread: bool = False
    hostname_anti_affinity: bool = False


@dataclass(frozen=True)
class Shape:
    name: str
    workloads: tuple[Workload, ...]

    @property
    def pods(self) -> int:
        return sum(w.replicas for w in self.workloads)

    @property
    def pods_after(self) -> int:
        return sum(w.scale_in for w in self.workloads)


def _scaled(count: int, scale: float) -> int:
    return max(1, round(count * scale)) if count else 0


# wide_deployments_test.go's getDeterministicDeploymentConfigs.
WIDE_CPU = (
    "240m",
    "450m",
    "650m",
    "900m",
    "1400m",
    "1900m",
    "2400m",
    "2800m",
    "3300m",
    "3700m",
    "2300m",
    "900m",
    "1300m",
    "2800m",
    "1800m",
    "1850m",
    "3300m",
    "3800m",
    "225m",
    "450m",
    "700m",
    "900m",
    "1300m",
    "1800m",
    "2400m",
    "2800m",
    "3400m",
    "3800m",
    "3300m",
    "2800m",
)
WIDE_MEMORY = (
    "300Mi",
    "400Mi",
    "700Mi",
    "1Gi",
    "2Gi",
    "4Gi",
    "8Gi",
    "4Gi",
    "16Gi",
    "10Gi",
    "64Gi",
    "30Gi",
    "32Gi",
    "32Gi",
    "30Gi",
    "20Gi",
    "30Gi",
    "300Mi",
    "500Mi",
    "750Mi",
    "1Gi",
    "2Gi",
    "4Gi",
    "8Gi",
    "16Gi",
    "32Gi",
    "28Gi",
    "64Gi",
    "13Gi",
    "24Gi",
)


def shapes(scale: float) -> dict[str, Shape]:
    """The shapes, the performance suite's pod counts multiplied by ``scale``."""

    def n(count: int) -> int:
        return _scaled(count, scale)

    wide = tuple(
        Workload(
            f"wide-deployment-{i + 1}",
            n(35 if i < 20 else 30),
            n(25 if i < 20 else 20),
            WIDE_CPU[i],
            WIDE_MEMORY[i],
            zone_spread=True,
            hostname_spread=3 <= i < 6,
            hostname_anti_affinity=i < 3,
        )
        for i in range(30)
    )
    return {
        "seed": Shape("seed", (Workload("seed", 5, 0, "1", "1Gi"),)),
        "basic": Shape(
            "basic",
            (
                Workload("small-resource-app", n(500), n(350), "900m", "3100Mi"),
                Workload("large-resource-app", n(500), n(350), "3500m", "28Gi"),
            ),
        ),
        "wide": Shape("wide", wide),
        "hostname": Shape(
            "hostname",
            (
                Workload("small-resource-app", n(500), n(350), "900m", "3100Mi", hostname_spread=True),
                Workload("large-resource-app", n(500), n(350), "3500m", "28Gi"),
            ),
        ),
        "scale-down": Shape("scale-down", (Workload("scale-down", n(100), n(20), "1", "2Gi"),)),
    }


def deployment(workload: Workload, replicas: int) -> dict[str, Any]:
    labels = {"app": workload.name, APP_LABEL: "true"}
    selector = {"matchLabels": {"app": workload.name}}
    spread = []
    if workload.zone_spread:
        spread.append(
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": selector,
            }
        )
    if workload.hostname_spread:
        spread.append(
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": selector,
            }
        )
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "app",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": workload.cpu, "memory": workload.memory}},
            }
        ],
        "terminationGracePeriodSeconds": 0,
    }
    if spread:
        spec["topologySpreadConstraints"] = spread
    if workload.hostname_anti_affinity:
        spec["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname", "labelSelector": selector}
                ]
            }
        }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": workload.name, "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": selector,
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }


def pool_manifests(consolidate_after: float = 30.0) -> list[dict[str, Any]]:
    """The performance suite's NodePool (suite_test.go's BeforeEach) and a bare KWOKNodeClass."""
    return [
        {
            "apiVersion": "karpenter.kwok.sh/v1alpha1",
            "kind": "KWOKNodeClass",
            "metadata": {"name": NODECLASS},
        },
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": NODEPOOL},
            "spec": {
                "disruption": {
                    "consolidationPolicy": "WhenEmptyOrUnderutilized",
                    "consolidateAfter": f"{consolidate_after:g}s",
                    "budgets": [{"nodes": "100%"}],
                },
                "template": {
                    "spec": {
                        "expireAfter": "Never",
                        "requirements": [
                            {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                            {"key": "karpenter.kwok.sh/instance-size", "operator": "Lt", "values": ["32"]},
                        ],
                        "nodeClassRef": {
                            "group": "karpenter.kwok.sh",
                            "kind": "KWOKNodeClass",
                            "name": NODECLASS,
                        },
                    }
                },
            },
        },
    ]


# --------------------------------------------------------------------------- the cluster


def log(message: str) -> None:
    print(f"[side-by-side {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def kubectl_path() -> str:
    local = REPO / ".venv" / "bin" / "kubectl"
    return str(local) if local.exists() else "kubectl"


@dataclass
class Plane:
    state: Path
    logs: Path
    kubeconfig: Path
    controller_kubeconfig: Path
    api: ApiTransport = field(repr=False)

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            [kubectl_path(), "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def apply(self, objects: Sequence[Mapping[str, Any]]) -> None:
        self.kubectl(
            "apply", "--server-side", "-f", "-", stdin="\n---\n".join(json.dumps(o) for o in objects)
        )

    def items(self, path: str) -> list[dict[str, Any]]:
        body = self.api.request("GET", path).body
        assert isinstance(body, dict)
        items: list[dict[str, Any]] = body.get("items") or []
        return items

    def pods(self) -> list[dict[str, Any]]:
        return self.items(f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector={APP_LABEL}%3Dtrue")

    def nodes(self) -> list[dict[str, Any]]:
        return self.items("/api/v1/nodes")

    def nodeclaims(self) -> list[dict[str, Any]]:
        return self.items("/apis/karpenter.sh/v1/nodeclaims")

    def audit(self) -> RequestCounts:
        path = self.state / "audit.log"
        with path.open(errors="replace") as lines:
            return count_requests(lines, CONTROLLER_USER)


def controller_kubeconfig(state: Path) -> Path:
    """A kubeconfig like the admin's, for a client certificate of the measured controller's own."""
    pki = state / "pki"
    key, csr, crt = (pki / f"controller.{ext}" for ext in ("key", "csr", "crt"))
    subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
    subject = f"/O=system:masters/CN={CONTROLLER_USER}"
    subprocess.run(
        ["openssl", "req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr)],
        check=True,
        capture_output=True,
    )
    ext = pki / "controller.ext"
    ext.write_text(
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=clientAuth\n"
    )
    subprocess.run(
        [
            "openssl",
            "x509",
            "-req",
            "-in",
            str(csr),
            "-CA",
            str(pki / "ca.crt"),
            "-CAkey",
            str(pki / "ca.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            str(ext),
            "-out",
            str(crt),
        ],
        check=True,
        capture_output=True,
    )
    admin = (state / "kubeconfig").read_text()
    path = state / "controller.kubeconfig"
    path.write_text(
        admin.replace("pki/admin.crt", "pki/controller.crt").replace("pki/admin.key", "pki/controller.key")
    )
    return path


@contextlib.contextmanager
def control_plane(logs: Path) -> Iterator[Plane]:
    state = Path(tempfile.mkdtemp(prefix="side-by-side-plane-"))
    policy = logs / "audit-policy.yaml"
    policy.write_text(AUDIT_POLICY)
    env = {
        **os.environ,
        "KARPY_CONTROL_PLANE_DIR": str(state),
        "KARPY_AUDIT_POLICY": str(policy),
        "KARPY_CONTROL_PLANE_OWNER": str(os.getpid()),
    }
    with (logs / "control-plane.log").open("w") as out:
        # `up` picks free ports, which another plane on the machine may take before the API
        # server binds them: a failed `up` stops what it started, so it is tried again.
        for attempt in range(3):
            up = subprocess.run(
                [str(CONTROL_PLANE), "up"], env=env, stdout=out, stderr=subprocess.STDOUT, check=False
            )
            if up.returncode == 0:
                break
            if attempt == 2:
                raise RuntimeError(f"scripts/control-plane up failed (see {logs / 'control-plane.log'})")
    api = ApiTransport.from_kubeconfig(state / "kubeconfig")
    try:
        yield Plane(state, logs, state / "kubeconfig", controller_kubeconfig(state), api)
    finally:
        api.close()
        with contextlib.suppress(OSError):
            (logs / "audit.log").write_bytes((state / "audit.log").read_bytes())
        with (logs / "control-plane.log").open("a") as out:
            subprocess.run(
                [str(CONTROL_PLANE), "down"], env=env, stdout=out, stderr=subprocess.STDOUT, check=False
            )


@contextlib.contextmanager
def process(
    name: str, argv: Sequence[str], env: Mapping[str, str], logs: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """A process of ours in its own session, its output in ``logs/NAME.log``; stopped by its pid."""
    with (logs / f"{name}.log").open("wb") as out:
        proc = subprocess.Popen(
            list(argv), env=dict(env), stdout=out, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True
        )
    try:
        time.sleep(1.0)
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited at start: {(logs / f'{name}.log').read_text()[-2000:]}")
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def apply_crds(plane: Plane, controller: str) -> None:
    if controller == "karpy":
        crds = subprocess.run(
            [sys.executable, "-m", "karpy.cli", "crds"], capture_output=True, text=True, check=True, cwd=REPO
        ).stdout
        plane.kubectl("apply", "--server-side", "-f", "-", stdin=crds)
    else:
        files = subprocess.run(
            [str(KARPENTER_KWOK), "crds"], capture_output=True, text=True, check=True
        ).stdout
        args = [arg for path in files.split() for arg in ("-f", path)]
        plane.kubectl("apply", "--server-side", *args)
    plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")


def controller_command(controller: str, plane: Plane) -> tuple[list[str], dict[str, str]]:
    env = {
        **os.environ,
        "KUBECONFIG": str(plane.controller_kubeconfig),
        "METRICS_PORT": "0",
        "HEALTH_PROBE_PORT": "0",
    }
    if controller == "karpenter":
        return [str(KARPENTER_KWOK), "run"], env
    env.update(PYTHONUNBUFFERED="1", KARPY_KWOK_INSTANCE_TYPES="karpenter")
    argv = [
        sys.executable,
        "-m",
        "karpy.cli",
        "run",
        "--kubeconfig",
        str(plane.controller_kubeconfig),
        "--disable-leader-election",
    ]
    return argv, env


# --------------------------------------------------------------------------- sampling


class Sampler:
    """The controller's resident memory and CPU time, read from /proc twice a second."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_rss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self.peak_rss = max(self.peak_rss, self.rss())

    def rss(self) -> int:
        try:
            return status_bytes(Path(f"/proc/{self.pid}/status").read_text(), "VmRSS")
        except OSError:
            return 0

    def high_water(self) -> int:
        """The kernel's peak RSS of the process (VmHWM), at least the sampled peak."""
        try:
            hwm = status_bytes(Path(f"/proc/{self.pid}/status").read_text(), "VmHWM")
        except OSError:
            hwm = 0
        return max(hwm, self.peak_rss)

    def cpu_seconds(self) -> float:
        try:
            return cpu_ticks(Path(f"/proc/{self.pid}/stat").read_text()) / CLOCK_TICKS
        except OSError:
            return 0.0

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)


# --------------------------------------------------------------------------- one run


@dataclass
class Result:
    controller: str
    shape: str
    pods: int
    pods_after: int
    time_to_running: float | None = None
    nodeclaims_launched: int = 0
    scaled_out: Fleet | None = None
    consolidation_time: float | None = None
    scaled_in: Fleet | None = None
    pods_disrupted: int = 0
    peak_rss_mb: float = 0.0
    cpu_seconds: float = 0.0
    """The controller's CPU time from the apply to the end of the run."""
    mean_cpu_cores: float = 0.0
    """Its CPU time from the apply to all pods Running over that time (the suite's scale-out figure)."""
    api_requests: int = 0
    api_by_verb: Mapping[str, int] = field(default_factory=dict)
    api_by_resource: Mapping[str, int] = field(default_factory=dict)
    user_agents: Mapping[str, int] = field(default_factory=dict)
    failure: str = ""


def wait_for(check: Callable[[], bool], timeout: float, interval: float, what: str) -> float:
    """Poll ``check`` until true; the monotonic time it was first seen true."""
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return time.monotonic()
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f}s")
        time.sleep(interval)


def all_running(plane: Plane, expected: int) -> bool:
    pods = plane.pods()
    running = [p for p in pods if p.get("status", {}).get("phase") == "Running" and p["spec"].get("nodeName")]
    return len(pods) == expected == len(running)


def pool_ready(plane: Plane) -> bool:
    body = plane.api.request("GET", f"/apis/karpenter.sh/v1/nodepools/{NODEPOOL}").body
    assert isinstance(body, dict)
    conditions = body.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def fleet_signature(plane: Plane) -> tuple[Any, ...]:
    """What consolidation changes: the NodeClaims, which are going, and which Nodes are tainted."""
    claims = plane.nodeclaims()
    nodes = plane.nodes()
    going = sorted(c["metadata"]["name"] for c in claims if c["metadata"].get("deletionTimestamp"))
    tainted = sorted(
        n["metadata"]["name"]
        for n in nodes
        if n["metadata"].get("deletionTimestamp")
        or any(t.get("key") == "karpenter.sh/disrupted" for t in n.get("spec", {}).get("taints") or [])
    )
    return (tuple(sorted(c["metadata"]["name"] for c in claims)), tuple(going), tuple(tainted), len(nodes))


def settle(plane: Plane, expected_pods: int, quiet: float, timeout: float) -> float:
    """Wait until the pods are back to ``expected_pods`` Running and the fleet has not changed for
    ``quiet`` seconds with nothing draining; the monotonic time of its last change."""
    deadline = time.monotonic() + timeout
    last = fleet_signature(plane)
    changed = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(2.0)
        now = fleet_signature(plane)
        if now != last:
            last, changed = now, time.monotonic()
            continue
        if expected_pods == 0 and not now[0] and all_running(plane, 0):
            return changed  # nothing left to consolidate
        draining = bool(now[1] or now[2])
        if not draining and time.monotonic() - changed >= quiet and all_running(plane, expected_pods):
            return changed
    raise TimeoutError(f"consolidation did not settle within {timeout:.0f}s")


def snapshot(plane: Plane, prices: Mapping[tuple[str, str, str], float]) -> Fleet:
    return fleet(plane.nodeclaims(), plane.nodes(), plane.pods(), prices)


def run_one(controller: str, shape: Shape, options: argparse.Namespace, logs: Path) -> Result:
    prices = price_table(json.loads(CATALOG.read_text()))
    result = Result(controller, shape.name, shape.pods, shape.pods_after)
    with control_plane(logs) as plane:
        apply_crds(plane, controller)
        plane.kubectl("create", "namespace", NAMESPACE)
        kwok_env = {**os.environ, "KUBECONFIG": str(plane.kubeconfig)}
        with process("kwok", [str(KWOK), "run"], kwok_env, logs):
            plane.apply(pool_manifests(options.consolidate_after))
            argv, env = controller_command(controller, plane)
            with process(controller, argv, env, logs) as proc:
                sampler = Sampler(proc.pid).start()
                try:
                    wait_for(
                        lambda: pool_ready(plane),
                        options.timeout,
                        0.5,
                        f"NodePool {NODEPOOL} Ready (by {controller})",
                    )
                    time.sleep(options.warmup)
                    measure(plane, proc, sampler, shape, options, prices, result)
                except (TimeoutError, RuntimeError) as problem:
                    result.failure = str(problem)
                    log(f"{controller} {shape.name}: {problem}")
                finally:
                    sampler.stop()
                    result.peak_rss_mb = sampler.high_water() / 2**20
            counts = plane.audit()
            result.api_requests = counts.total
            result.api_by_verb = counts.by_verb
            result.api_by_resource = counts.by_resource
            result.user_agents = counts.user_agents
            result.nodeclaims_launched = counts.nodeclaims_created
            result.pods_disrupted = counts.evictions + counts.pods_deleted
    return result


def measure(
    plane: Plane,
    proc: subprocess.Popen[bytes],
    sampler: Sampler,
    shape: Shape,
    options: argparse.Namespace,
    prices: Mapping[tuple[str, str, str], float],
    result: Result,
) -> None:
    interval = 0.5 if shape.pods <= 50 else 2.0

    def alive() -> None:
        if proc.poll() is not None:
            raise RuntimeError(f"the controller exited ({proc.returncode})")

    cpu_start = sampler.cpu_seconds()
    started = time.monotonic()
    plane.apply([deployment(w, w.replicas) for w in shape.workloads])

    def running() -> bool:
        alive()
        return all_running(plane, shape.pods)

    try:
        result.time_to_running = (
            wait_for(running, options.timeout, interval, f"{shape.pods} pods Running") - started
        )
        result.mean_cpu_cores = (sampler.cpu_seconds() - cpu_start) / result.time_to_running
        log(f"{result.controller} {shape.name}: {shape.pods} pods Running in {result.time_to_running:.1f}s")
        result.scaled_out = snapshot(plane, prices)
        scaled_in = time.monotonic()
        plane.apply([deployment(w, w.scale_in) for w in shape.workloads])
        changed = settle(plane, shape.pods_after, options.settle, options.timeout)
        alive()
        result.consolidation_time = changed - scaled_in
        result.scaled_in = snapshot(plane, prices)
        log(f"{result.controller} {shape.name}: consolidated in {result.consolidation_time:.1f}s")
    finally:  # a run that timed out still used what it used
        result.cpu_seconds = sampler.cpu_seconds() - cpu_start


# --------------------------------------------------------------------------- the table

ROWS: tuple[tuple[str, Callable[[Result], float | None], str], ...] = (
    ("time to all Running (s)", lambda r: r.time_to_running, "{:.1f}"),
    ("NodeClaims launched", lambda r: r.nodeclaims_launched, "{:.0f}"),
    ("fleet $/h, scaled out", lambda r: r.scaled_out.cost_per_hour if r.scaled_out else None, "{:.2f}"),
    (
        "reserved CPU util, scaled out",
        lambda r: r.scaled_out.cpu_utilisation if r.scaled_out else None,
        "{:.1%}",
    ),
    (
        "reserved mem util, scaled out",
        lambda r: r.scaled_out.memory_utilisation if r.scaled_out else None,
        "{:.1%}",
    ),
    ("time to consolidate (s)", lambda r: r.consolidation_time, "{:.1f}"),
    ("fleet $/h, scaled in", lambda r: r.scaled_in.cost_per_hour if r.scaled_in else None, "{:.2f}"),
    ("NodeClaims, scaled in", lambda r: r.scaled_in.nodeclaims if r.scaled_in else None, "{:.0f}"),
    ("pods disrupted", lambda r: r.pods_disrupted, "{:.0f}"),
    ("peak RSS (MiB)", lambda r: r.peak_rss_mb, "{:.0f}"),
    ("mean CPU to all Running (cores)", lambda r: r.mean_cpu_cores, "{:.2f}"),
    ("CPU time, whole run (s)", lambda r: r.cpu_seconds, "{:.1f}"),
    ("API requests", lambda r: r.api_requests, "{:.0f}"),
)


def table(results: Sequence[Result]) -> str:
    lines = [
        "| shape | measure | Karpenter | karpy | karpy/Karpenter |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    by_key = {(r.shape, r.controller): r for r in results}
    for shape in dict.fromkeys(r.shape for r in results):
        karpenter, karpy = by_key.get((shape, "karpenter")), by_key.get((shape, "karpy"))
        pods = karpy or karpenter
        assert pods is not None
        label = f"{shape} ({pods.pods}→{pods.pods_after} pods)"
        for name, get, fmt in ROWS:
            a = get(karpenter) if karpenter else None
            b = get(karpy) if karpy else None
            cells = [fmt.format(v) if v is not None else "—" for v in (a, b)]
            lines.append(f"| {label} | {name} | {cells[0]} | {cells[1]} | {ratio(b, a)} |")
            label = ""
        for r in (karpenter, karpy):
            if r and r.failure:
                lines.append(f"| | {r.controller} failed | {r.failure} | | |")
    return "\n".join(lines)


def load_results(path: Path) -> list[Result]:
    """The results a ``--json`` file holds."""
    results = []
    for data in json.loads(path.read_text()):
        for phase in ("scaled_out", "scaled_in"):
            if data.get(phase) is not None:
                data[phase] = Fleet(**{**data[phase], "unpriced": tuple(data[phase]["unpriced"])})
        results.append(Result(**data))
    return results


def machine() -> str:
    load = os.getloadavg()
    return (
        f"{platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.side_by_side", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--shapes", default="seed,basic,wide,hostname,scale-down", help="comma-separated")
    parser.add_argument(
        "--controllers", default=",".join(CONTROLLERS), help="comma-separated: karpenter,karpy"
    )
    parser.add_argument(
        "--scale", type=float, default=1.0, help="multiply the performance shapes' pod counts"
    )
    parser.add_argument("--settle", type=float, default=90.0, help="seconds the fleet must stay unchanged")
    parser.add_argument(
        "--consolidate-after",
        type=float,
        default=30.0,
        help="the NodePool's consolidateAfter (the suite's: 30)",
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per phase")
    parser.add_argument(
        "--warmup", type=float, default=2.0, help="seconds between the NodePool Ready and the apply"
    )
    parser.add_argument("--logs", type=Path, help="keep every run's logs and audit log here")
    parser.add_argument("--json", type=Path, help="write every figure to this file")
    parser.add_argument(
        "--table",
        type=Path,
        nargs="+",
        metavar="JSON",
        help="print the table of earlier --json files, run nothing",
    )
    options = parser.parse_args(argv)
    if options.table:
        # A later file's run of a shape and controller replaces an earlier one's.
        merged = {(r.shape, r.controller): r for path in options.table for r in load_results(path)}
        print(table(list(merged.values())))
        return 0
    catalog = shapes(options.scale)
    wanted = [s.strip() for s in options.shapes.split(",") if s.strip()]
    unknown = [s for s in wanted if s not in catalog]
    controllers = [c.strip() for c in options.controllers.split(",") if c.strip()]
    if unknown or not set(controllers) <= set(CONTROLLERS):
        parser.error(f"unknown shape or controller: {unknown or controllers}")
    # A quiet spell must outlast consolidateAfter plus a validation (15 s in both) and a retry,
    # or it ends before consolidation could begin.
    if options.settle < options.consolidate_after + 45:
        parser.error("--settle must be at least --consolidate-after + 45 seconds")
    if "karpenter" in controllers:
        subprocess.run([str(KARPENTER_KWOK), "build"], check=True)
    subprocess.run([str(KWOK), "build"], check=True)
    subprocess.run([str(CONTROL_PLANE), "build"], check=True)
    root = options.logs or Path(tempfile.mkdtemp(prefix="side-by-side-"))
    log(f"{machine()}; logs in {root}")
    results: list[Result] = []
    for name in wanted:
        for controller in controllers:
            logs = root / f"{name}-{controller}"
            logs.mkdir(parents=True, exist_ok=True)
            log(f"{controller} {name}: {catalog[name].pods} pods")
            results.append(run_one(controller, catalog[name], options, logs))
            if options.json:  # after each run, so an interrupted one keeps what was measured
                options.json.write_text(json.dumps([asdict(r) for r in results], indent=2, default=str))
    print(f"\n{machine()}\n")
    print(table(results))
    return 1 if any(r.failure for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
