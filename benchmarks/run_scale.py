"""``karpy run`` at scale: 1,000 pending pods against a real control plane.

The issue's goal: with 1,000 pending pods, every NodeClaim they need is
created within the provisioning batch window plus 5 s, and karpy's memory
stays well inside what Karpenter allows itself (its own scale test bounds
the controller at 260 MB for 1,000 pods).

What runs: the integration tests' control plane (etcd, kube-apiserver,
kube-scheduler, kube-controller-manager; ``scripts/control-plane``) with the
fake kubelet, unless ``--kubeconfig`` names a cluster to use instead; karpy's
CRDs; and ``karpy run`` as a process of its own, so that its peak resident
memory (``VmHWM`` in ``/proc/PID/status``, the high-water mark the kernel
keeps) is karpy's alone. Then a KWOKNodeClass, a NodePool and the pods:

- ``--workload deployment`` (the default): one Deployment of ``--pods``
  replicas. The ReplicaSet controller creates the pods at its own pace (its
  client is rate-limited to about 20 requests a second), so they arrive over
  most of a minute, and karpy's batches close every ``batchMaxDuration``
  (10 s) while they keep coming: the realistic case.
- ``--workload pods``: bare pods created by this script, many requests at a
  time, so that nearly all of them are pending together and land in one or
  two batches: the worst case for one provisioning pass.

Two watches of the script's own (not karpy's) record when each pod and each
NodeClaim appeared, on this machine's clock. The figures:

- **last pod created -> last NodeClaim created**: from the moment the last
  pod appeared to the moment the last NodeClaim did; the goal is at most the
  batch window (the batch closes ``batchIdleDuration`` after the last pod,
  1 s) plus 5 s;
- **first pod created -> all pods Running**, through registration (the
  ``--registration-delay`` of the kwok provider: 0 s by default, as kwok
  nodes join at once; a real instance takes tens of seconds) and binding;
- **karpy peak RSS**, and the NodeClaims by instance type;
- **karpy's CPU and memory during the scale-out** (from the first pod created
  to the last NodeClaim created), sampled twice a second from
  ``/proc/PID/stat`` and ``/proc/PID/status``: the mean CPU in cores (the
  CPU time used in the window over its length) and the 95th percentile of
  the resident set;
- **reconcile latency** per controller, from karpy's own
  ``controller_runtime_reconcile_time_seconds`` histogram scraped at the end
  (the bucket bound under which half and 99% of the reconciles ended; the
  ``disruption`` controller's is the time of one consolidation pass over the
  cluster at its largest).

Karpenter's kwok bounds are the yardstick: 1,000 pods scaled out within 2
minutes, p95 memory under 260 MB, mean CPU under half a core. For 10,000
pods on 1,000 nodes: ``--pods 10000 --workload pods --cpu 1500m --memory 1Gi
--instance-types c5.4xlarge`` (ten such pods fill a c5.4xlarge).

Run: ``python -m benchmarks.run_scale [--pods 1000] [--workload deployment|pods]
[--registration-delay 0s] [--cpu 250m] [--memory 512Mi] [--instance-types T,...]
[--timeout 600] [--kubeconfig FILE] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.request import urlopen

from karpy.api.crds import all_crds, render_yaml
from karpy.kube._http import ApiStatusError, ApiTransport

REPO = Path(__file__).resolve().parents[1]
CONTROL_PLANE = REPO / "scripts" / "control-plane"
BIN = Path(sys.executable).parent

NAMESPACE = "karpy-scale"
POOL = "karpy-scale"
APP = "scale"
BATCH_IDLE = 1.0
BATCH_MAX = 10.0
GOAL_AFTER_BATCH = 5.0
# Pod creations in flight at once for ``--workload pods``.
CREATORS = 16
INSTANCE_FAMILIES = ["c5", "m5", "r5"]


def log(message: str) -> None:
    print(f"[run_scale] {message}", file=sys.stderr, flush=True)


# -- the cluster ---------------------------------------------------------------------


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    found = BIN / "kubectl"
    command = str(found) if found.exists() else (shutil.which("kubectl") or "kubectl")
    result = subprocess.run(
        [command, "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


@contextlib.contextmanager
def control_plane(
    kubeconfig: Path | None, *, fake_kubelet: bool = True, settings: dict[str, str] | None = None
) -> Iterator[Path]:
    """The cluster to run against: ``kubeconfig``, or a fresh control plane with the fake kubelet.

    ``settings`` are more of ``scripts/control-plane``'s variables (``KARPY_WATCH_CACHE``...).
    """
    if kubeconfig is not None:
        yield kubeconfig
        return
    state_dir = Path(tempfile.gettempdir()) / f"karpy-run-scale-{os.getpid()}"
    env = {
        **os.environ,
        **(settings or {}),
        "KARPY_CONTROL_PLANE_DIR": str(state_dir),
        "KARPY_CONTROL_PLANE_OWNER": str(os.getpid()),
    }
    log("starting a control plane (scripts/control-plane up)")
    subprocess.run([str(CONTROL_PLANE), "build"], env=env, check=True)
    up = subprocess.run([str(CONTROL_PLANE), "up"], env=env, capture_output=True, text=True, check=False)
    try:
        if up.returncode != 0:
            raise RuntimeError(f"scripts/control-plane up failed:\n{up.stderr}")
        config = state_dir / "kubeconfig"
        if not fake_kubelet:
            yield config
            return
        with (state_dir / "logs" / "fake-kubelet.log").open("wb") as output:
            kubelet = subprocess.Popen(
                [sys.executable, "-m", "karpy.cloud.kwok.fake_kubelet", "--kubeconfig", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        # `down` stops every process recorded in pids/.
        (state_dir / "pids" / "fake-kubelet").write_text(f"{kubelet.pid} karpy.cloud.kwok.fake_kubelet\n")
        yield config
    finally:
        subprocess.run([str(CONTROL_PLANE), "down"], env=env, capture_output=True, check=False)


def install_crds(kubeconfig: Path) -> None:
    kubectl(kubeconfig, "apply", "-f", "-", stdin=render_yaml(all_crds()))
    names = [f"crd/{crd['metadata']['name']}" for crd in all_crds()]
    kubectl(kubeconfig, "wait", "--for=condition=Established", "--timeout=60s", *names)


@dataclass
class KarpyProcess:
    process: subprocess.Popen[bytes]
    log_path: Path

    def memory(self) -> dict[str, int]:
        """VmHWM (peak) and VmRSS (now) of the process, in kB."""
        figures: dict[str, int] = {}
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        for line in status.splitlines():
            key, _, value = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                figures[key] = int(value.split()[0])
        return figures

    def cpu_seconds(self) -> float:
        """User and system CPU time the process has used so far."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        # utime and stime are the stat file's 14th and 15th fields (after "pid (comm)": 12th, 13th).
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def metrics_port(self) -> int | None:
        return metrics_port(self.log_path.read_text(errors="replace"))

    def check_alive(self) -> None:
        """Raise, with the end of its log, if ``karpy run`` has exited: its figures would mislead."""
        code = self.process.poll()
        if code is not None:
            tail = self.log_path.read_text(errors="replace")[-6000:]
            raise RuntimeError(f"karpy run exited with {code} during the run; its log ends:\n{tail}")


@dataclass(frozen=True)
class Sample:
    at: float  # time.time()
    cpu_seconds: float
    rss_kb: int


class Sampler:
    """The process's CPU time and resident set, twice a second, on a thread of its own."""

    def __init__(self, karpy: KarpyProcess, every: float = 0.5) -> None:
        self.karpy = karpy
        self.every = every
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(OSError, ValueError, IndexError):
                self.samples.append(
                    Sample(time.time(), self.karpy.cpu_seconds(), self.karpy.memory().get("VmRSS", 0))
                )
            self._stop.wait(self.every)

    def window(self, start: float, end: float) -> tuple[float, float]:
        """(mean CPU in cores, p95 RSS in MB) over [start, end], from the samples around it."""
        before = [sample for sample in self.samples if sample.at <= start] or self.samples[:1]
        after = [sample for sample in self.samples if sample.at >= end] or self.samples[-1:]
        inside = [sample for sample in self.samples if start <= sample.at <= end] or after
        if not before or not after:
            return 0.0, 0.0
        first, last = before[-1], after[0]
        cores = (last.cpu_seconds - first.cpu_seconds) / max(last.at - first.at, 1e-6)
        rss = sorted(sample.rss_kb for sample in inside)
        return cores, rss[min(len(rss) - 1, int(0.95 * len(rss)))] / 1024


def metrics_port(log_text: str) -> int | None:
    """The port ``karpy run`` serves /metrics on, from its log."""
    found = re.search(r"serving /metrics[^\"]* on port (\d+)", log_text)
    return int(found.group(1)) if found else None


RECONCILE_BUCKET = re.compile(
    r'^controller_runtime_reconcile_time_seconds_bucket\{controller="([^"]+)",le="([^"]+)"\} (\S+)$'
)


def reconcile_buckets(port: int) -> dict[str, list[tuple[float, float]]]:
    """Per controller, the cumulative (bound, count) buckets of karpy's reconcile time histogram."""
    text = urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    buckets: dict[str, list[tuple[float, float]]] = {}
    for line in text.splitlines():
        found = RECONCILE_BUCKET.match(line)
        if found:
            bound = float("inf") if found.group(2) == "+Inf" else float(found.group(2))
            buckets.setdefault(found.group(1), []).append((bound, float(found.group(3))))
    return {controller: sorted(series) for controller, series in buckets.items()}


def bound_under(series: list[tuple[float, float]], quantile: float) -> float:
    """The first bucket bound under which ``quantile`` of a cumulative series' count ended."""
    total = series[-1][1]
    return next(bound for bound, cumulative in series if cumulative >= quantile * total)


def reconcile_latencies(port: int) -> dict[str, tuple[int, float, float]]:
    """Per controller: (reconciles, p50 bound, p99 bound) in seconds, from karpy's histogram."""
    return {
        controller: (int(series[-1][1]), bound_under(series, 0.5), bound_under(series, 0.99))
        for controller, series in reconcile_buckets(port).items()
        if series and series[-1][1] > 0
    }


@contextlib.contextmanager
def karpy_run(kubeconfig: Path, registration_delay: float, log_dir: Path) -> Iterator[KarpyProcess]:
    """``karpy run`` as a process of its own, until it logs that its controllers run."""
    log_path = log_dir / "karpy-run.log"
    log(f"karpy run logs to {log_path}")
    command = [
        str(BIN / "karpy"),
        "run",
        "--kubeconfig",
        str(kubeconfig),
        "--registration-delay",
        f"{registration_delay:g}s",
        "--batch-idle-duration",
        f"{BATCH_IDLE:g}s",
        "--batch-max-duration",
        f"{BATCH_MAX:g}s",
        # One replica: no lease to wait for; any free ports for /metrics and the probes.
        "--disable-leader-election",
        "--metrics-port",
        "0",
        "--health-probe-port",
        "0",
    ]
    with log_path.open("wb") as output:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT)
    karpy = KarpyProcess(process, log_path)
    try:
        deadline = time.monotonic() + 60
        while "controllers running" not in log_path.read_text(errors="replace"):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"karpy run did not start:\n{log_path.read_text(errors='replace')[-3000:]}"
                )
            time.sleep(0.1)
        yield karpy
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


# -- what is watched -------------------------------------------------------------------


class Arrivals:
    """A watch of one collection in a thread: when each object first appeared, and its last state."""

    def __init__(self, kubeconfig: Path, path: str, params: dict[str, str]) -> None:
        self._transport = ApiTransport.from_kubeconfig(kubeconfig)
        self._path = path
        self._params = {**params, "watch": "true", "timeoutSeconds": "3600"}
        self._lock = threading.Lock()
        self.first_seen: dict[str, float] = {}
        self.objects: dict[str, dict[str, Any]] = {}
        self._opened = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Arrivals:
        self._thread.start()
        if not self._opened.wait(30):
            raise RuntimeError(f"the watch of {self._path} did not open")
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._transport.close()
        self._thread.join(10)

    def _run(self) -> None:
        with (
            contextlib.suppress(Exception),  # cut at the end
            self._transport.stream_lines(self._path, self._params, 4000) as lines,
        ):
            self._opened.set()
            for line in lines:
                if not line.strip():
                    continue
                event = json.loads(line)
                obj = event.get("object") or {}
                name = (obj.get("metadata") or {}).get("name")
                if not name or event.get("type") not in ("ADDED", "MODIFIED", "DELETED"):
                    continue
                now = time.time()
                with self._lock:
                    self.first_seen.setdefault(name, now)
                    if event["type"] == "DELETED":
                        self.objects.pop(name, None)
                    else:
                        self.objects[name] = obj

    def snapshot(self) -> tuple[dict[str, float], dict[str, dict[str, Any]]]:
        with self._lock:
            return dict(self.first_seen), dict(self.objects)


# -- the workload ---------------------------------------------------------------------


def manifests(cpu: str, memory: str, instance_types: list[str] | None = None) -> tuple[str, dict[str, Any]]:
    """The NodeClass, NodePool and namespace (YAML), and the pod template."""
    types = (
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": instance_types}
        if instance_types
        else {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": INSTANCE_FAMILIES}
    )
    pool = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": POOL},
        "spec": {
            "template": {
                "spec": {
                    "requirements": [
                        types,
                        {
                            "key": "karpenter.sh/capacity-type",
                            "operator": "In",
                            "values": ["spot", "on-demand"],
                        },
                    ],
                    "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": POOL},
                }
            },
            # Nodes are never briefly empty on purpose here: keep them through the run.
            "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "10m"},
        },
    }
    objects = [
        {"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass", "metadata": {"name": POOL}},
        pool,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
    ]
    template = {
        "metadata": {"labels": {"app": APP}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {"karpenter.sh/nodepool": POOL},
            "containers": [
                {
                    "name": "pause",
                    "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                    "resources": {"requests": {"cpu": cpu, "memory": memory}},
                }
            ],
        },
    }
    return "\n---\n".join(json.dumps(obj) for obj in objects), template


def create_deployment(kubeconfig: Path, pods: int, template: dict[str, Any]) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": APP, "namespace": NAMESPACE},
        "spec": {"replicas": pods, "selector": {"matchLabels": {"app": APP}}, "template": template},
    }
    kubectl(kubeconfig, "apply", "-f", "-", stdin=json.dumps(deployment))


def create_pods(kubeconfig: Path, pods: int, template: dict[str, Any]) -> None:
    transport = ApiTransport.from_kubeconfig(kubeconfig)
    path = f"/api/v1/namespaces/{NAMESPACE}/pods"

    def create(index: int) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {**template["metadata"], "name": f"{APP}-{index:05d}"},
            "spec": template["spec"],
        }
        for attempt in range(5):
            try:
                transport.request("POST", path, body=body)
                return
            except ApiStatusError as error:
                if error.code != 429 or attempt == 4:  # the apiserver's own flow control: wait, retry
                    raise
                time.sleep(0.2 * (attempt + 1))

    try:
        with concurrent.futures.ThreadPoolExecutor(CREATORS) as pool:
            list(pool.map(create, range(pods)))
    finally:
        transport.close()


def wait_for_namespace_account(kubeconfig: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            kubectl(kubeconfig, "get", "serviceaccount", "default", "-n", NAMESPACE)
            return
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


# -- the run ---------------------------------------------------------------------------


@dataclass
class ScaleResult:
    pods: int
    workload: str
    registration_delay: float
    batch_idle: float = BATCH_IDLE
    batch_max: float = BATCH_MAX
    pods_created_over: float = 0.0
    last_pod_to_last_nodeclaim: float = 0.0
    first_pod_to_all_running: float | None = None
    nodeclaims: int = 0
    instance_types: dict[str, int] = field(default_factory=dict)
    empty_nodeclaims: int = 0
    pods_running: int = 0
    karpy_peak_rss_mb: float = 0.0
    karpy_rss_mb: float = 0.0
    # From the first pod created to the last NodeClaim created.
    scale_out_seconds: float = 0.0
    karpy_mean_cpu_cores: float = 0.0
    karpy_p95_rss_mb: float = 0.0
    # Per controller: reconciles, p50 and p99 (histogram bucket bounds, seconds).
    reconcile_latency: dict[str, tuple[int, float, float]] = field(default_factory=dict)

    @property
    def goal(self) -> float:
        """The batch window after the last pod, plus 5 s."""
        return self.batch_idle + GOAL_AFTER_BATCH

    def lines(self) -> list[str]:
        running = (
            f"{self.first_pod_to_all_running:.1f} s"
            if self.first_pod_to_all_running is not None
            else f"not reached ({self.pods_running} of {self.pods} Running)"
        )
        types = ", ".join(f"{count} x {name}" for name, count in sorted(self.instance_types.items()))
        if self.last_pod_to_last_nodeclaim < 0:
            verdict = f"(goal {self.goal:g} s: met; the last pods fit in NodeClaims created before them)"
        else:
            met = self.last_pod_to_last_nodeclaim <= self.goal
            verdict = f"(goal {self.goal:g} s: {'met' if met else 'MISSED'})"
        rows = [
            ("pods", f"{self.pods} ({self.workload}, created over {self.pods_created_over:.1f} s)"),
            ("batch window", f"{self.batch_idle:g} s idle, {self.batch_max:g} s at most"),
            ("registration delay", f"{self.registration_delay:g} s"),
            ("NodeClaims", f"{self.nodeclaims}: {types} ({self.empty_nodeclaims} without a pod)"),
            ("last pod created -> last NodeClaim", f"{self.last_pod_to_last_nodeclaim:.1f} s {verdict}"),
            ("first pod created -> all pods Running", running),
            (
                "karpy peak RSS (VmHWM)",
                f"{self.karpy_peak_rss_mb:.0f} MB (at the end {self.karpy_rss_mb:.0f} MB;"
                " Karpenter's bound: 260 MB)",
            ),
            (
                "karpy during the scale-out",
                f"{self.scale_out_seconds:.1f} s: mean CPU {self.karpy_mean_cpu_cores:.2f} cores"
                f" (Karpenter's bound: 0.5), p95 RSS {self.karpy_p95_rss_mb:.0f} MB",
            ),
        ]
        rows.extend(
            (
                f"reconciles of {controller}",
                f"{count}: p50 <= {p50:g} s, p99 <= {p99:g} s",
            )
            for controller, (count, p50, p99) in sorted(self.reconcile_latency.items())
        )
        return [f"{label:<40} {value}" for label, value in rows]


def measure(
    kubeconfig: Path,
    *,
    pods: int = 1000,
    workload: str = "deployment",
    registration_delay: float = 0.0,
    cpu: str = "250m",
    memory: str = "512Mi",
    instance_types: list[str] | None = None,
    timeout: float = 600.0,
    log_dir: Path | None = None,
) -> ScaleResult:
    """One run against the cluster of ``kubeconfig`` (CRDs installed here); cleans up after itself."""
    log_dir = log_dir or Path(tempfile.mkdtemp(prefix="karpy-run-scale-"))
    result = ScaleResult(pods=pods, workload=workload, registration_delay=registration_delay)
    setup, template = manifests(cpu, memory, instance_types)
    install_crds(kubeconfig)
    wait_for_namespace_gone(kubeconfig)
    with karpy_run(kubeconfig, registration_delay, log_dir) as karpy:
        kubectl(kubeconfig, "apply", "-f", "-", stdin=setup)
        wait_for_namespace_account(kubeconfig)
        pod_watch = Arrivals(kubeconfig, f"/api/v1/namespaces/{NAMESPACE}/pods", {})
        claim_watch = Arrivals(
            kubeconfig, "/apis/karpenter.sh/v1/nodeclaims", {"labelSelector": f"karpenter.sh/nodepool={POOL}"}
        )
        try:
            with pod_watch, claim_watch, Sampler(karpy) as sampler:
                log(f"creating {pods} pods ({workload})")
                if workload == "deployment":
                    create_deployment(kubeconfig, pods, template)
                else:
                    create_pods(kubeconfig, pods, template)
                collect(result, pod_watch, claim_watch, timeout)
                karpy.check_alive()
                memory_kb = karpy.memory()
                result.karpy_peak_rss_mb = memory_kb.get("VmHWM", 0) / 1024
                result.karpy_rss_mb = memory_kb.get("VmRSS", 0) / 1024
                pod_times, _ = pod_watch.snapshot()
                claim_times, _ = claim_watch.snapshot()
                if pod_times and claim_times:
                    start, end = min(pod_times.values()), max(claim_times.values())
                    result.scale_out_seconds = end - start
                    result.karpy_mean_cpu_cores, result.karpy_p95_rss_mb = sampler.window(start, end)
                port = karpy.metrics_port()
                if port is not None:
                    result.reconcile_latency = reconcile_latencies(port)
        finally:
            clean_up(kubeconfig)
    return result


def _running(pod: dict[str, Any]) -> bool:
    return bool((pod.get("status") or {}).get("phase") == "Running")


def collect(result: ScaleResult, pod_watch: Arrivals, claim_watch: Arrivals, timeout: float) -> None:
    """Wait for every pod to exist and run (or for the time limit), then work out the figures."""
    deadline = time.monotonic() + timeout
    settled_since: float | None = None
    while time.monotonic() < deadline:
        pod_times, pod_objects = pod_watch.snapshot()
        running = sum(1 for pod in pod_objects.values() if _running(pod))
        if len(pod_times) >= result.pods and running >= result.pods:
            # All Running: wait a little more, in case a late NodeClaim still shows up.
            settled_since = settled_since or time.monotonic()
            if time.monotonic() - settled_since >= 3:
                break
        time.sleep(0.25)
    pod_times, pod_objects = pod_watch.snapshot()
    claim_times, claims = claim_watch.snapshot()
    result.pods_running = sum(1 for pod in pod_objects.values() if _running(pod))
    if pod_times:
        first_pod, last_pod = min(pod_times.values()), max(pod_times.values())
        result.pods_created_over = last_pod - first_pod
        if claim_times:
            result.last_pod_to_last_nodeclaim = max(claim_times.values()) - last_pod
        if result.pods_running >= result.pods:
            result.first_pod_to_all_running = max(_running_at(pod_objects.values())) - first_pod
    result.nodeclaims = len(claim_times)
    for claim in claims.values():
        instance_type = claim["metadata"].get("labels", {}).get("node.kubernetes.io/instance-type", "?")
        result.instance_types[instance_type] = result.instance_types.get(instance_type, 0) + 1
    used = {pod["spec"].get("nodeName") for pod in pod_objects.values()}
    result.empty_nodeclaims = sum(
        1 for claim in claims.values() if (claim.get("status") or {}).get("nodeName") not in used
    )


def _running_at(pods: Any) -> list[float]:
    """When each pod became Running, by its Ready condition's transition (whole seconds)."""
    moments: list[float] = []
    for pod in pods:
        for entry in (pod.get("status") or {}).get("conditions") or ():
            if entry.get("type") == "Ready" and entry.get("lastTransitionTime"):
                stamp = entry["lastTransitionTime"].replace("Z", "+00:00")
                moments.append(datetime.fromisoformat(stamp).timestamp())
    return moments or [time.time()]


def clean_up(kubeconfig: Path) -> None:
    """Delete the workload, then the NodePool and its NodeClaims (karpy still runs to drain them)."""
    log("cleaning up")
    with contextlib.suppress(RuntimeError):
        kubectl(kubeconfig, "delete", "namespace", NAMESPACE, "--wait=false", "--ignore-not-found")
        kubectl(kubeconfig, "delete", "nodepool", POOL, "--wait=false", "--ignore-not-found")
        kubectl(kubeconfig, "delete", "nodeclaims", "-l", f"karpenter.sh/nodepool={POOL}", "--wait=false")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and kubectl(
            kubeconfig, "get", "nodeclaims", "-l", f"karpenter.sh/nodepool={POOL}", "-o", "name"
        ):
            time.sleep(1)
        kubectl(kubeconfig, "delete", "kwoknodeclass", POOL, "--wait=false", "--ignore-not-found")
        wait_for_namespace_gone(kubeconfig)


def wait_for_namespace_gone(kubeconfig: Path, timeout: float = 120) -> None:
    """Wait until the namespace of an earlier run is gone: one being deleted accepts no new pods."""
    deadline = time.monotonic() + timeout
    while kubectl(kubeconfig, "get", "namespace", NAMESPACE, "--ignore-not-found", "-o", "name"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"namespace {NAMESPACE} still there after {timeout:g}s")
        time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run_scale", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--workload", choices=("deployment", "pods"), default="deployment")
    parser.add_argument("--registration-delay", type=float, default=0.0, help="seconds (default 0)")
    parser.add_argument("--cpu", default="250m", help="each pod's CPU request (default 250m)")
    parser.add_argument("--memory", default="512Mi", help="each pod's memory request (default 512Mi)")
    parser.add_argument(
        "--kubeconfig", type=Path, help="an existing cluster (default: start a control plane)"
    )
    parser.add_argument(
        "--instance-types",
        help="comma-separated instance types the NodePool allows (default: the c5, m5 and r5 families)",
    )
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="seconds to wait for every pod to run (default 600)"
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    with control_plane(args.kubeconfig) as kubeconfig:
        result = measure(
            kubeconfig,
            pods=args.pods,
            workload=args.workload,
            registration_delay=args.registration_delay,
            cpu=args.cpu,
            memory=args.memory,
            instance_types=args.instance_types.split(",") if args.instance_types else None,
            timeout=args.timeout,
        )
    print("\n".join(result.lines()))
    if args.json is not None:
        args.json.write_text(json.dumps(asdict(result), indent=2) + "\n")
    return 0 if result.last_pod_to_last_nodeclaim <= result.goal else 1


if __name__ == "__main__":
    sys.exit(main())
