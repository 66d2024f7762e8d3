"""What the ``karpy run`` integration tests share: manifests, the runner, reads and a NodeClaim watch.

The runner runs in a thread of the test process (:func:`running_karpy`), or as
a process of its own (:func:`start_karpy_run`) where the command itself or
several replicas are under test, or under the chart's ServiceAccount and RBAC
rather than as the admin (:func:`install_chart`, :func:`service_account_kubeconfig`).

Each test module gives its NodePools and workloads names of its own; pods
select their NodePool by the ``karpenter.sh/nodepool`` label, so the session's
other tests (and their fake nodes) never take them.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from karpy.kube._http import ApiTransport
from karpy.run import Runner, RunSettings

from .conftest import REPO, SCRIPT, ControlPlane, wait_until

LABEL_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
LABEL_CAPACITY_TYPE = "karpenter.sh/capacity-type"
LABEL_NODEPOOL = "karpenter.sh/nodepool"
LABEL_ARCH = "kubernetes.io/arch"
LABEL_OS = "kubernetes.io/os"
LABEL_GENERATION = "karpy.dev/generation"
PAUSE_IMAGE = "public.ecr.aws/eks-distro/kubernetes/pause:3.7"
# The karpy command line of this environment, run as a process of its own.
KARPY = Path(sys.executable).parent / "karpy"
# What ``karpy run`` reads its leader election from; unset for its processes here.
LEADER_ELECTION_VARIABLES = ("DISABLE_LEADER_ELECTION", "LEADER_ELECTION_NAME", "LEADER_ELECTION_NAMESPACE")

# -- manifests -------------------------------------------------------------------


def node_class(name: str) -> dict[str, Any]:
    return {"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass", "metadata": {"name": name}}


def requirement(key: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": "In", "values": list(values)}


def nodepool(
    name: str,
    instance_types: list[str],
    *,
    generation: int | None = None,
    capacity_types: tuple[str, ...] | None = ("on-demand",),
    consolidation_policy: str = "WhenEmpty",
    consolidate_after: str = "10m",
    requirements: Sequence[dict[str, Any]] = (),
    limits: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A NodePool on the KWOKNodeClass of the same name.

    ``generation``, if given, is a label on its nodes (a template change to drift
    them by); ``capacity_types`` None leaves the capacity type open;
    ``requirements`` come after the instance and capacity types.
    """
    template: dict[str, Any] = {
        "spec": {
            "requirements": [
                requirement(LABEL_INSTANCE_TYPE, *instance_types),
                *([] if capacity_types is None else [requirement(LABEL_CAPACITY_TYPE, *capacity_types)]),
                *requirements,
            ],
            "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": name},
        },
    }
    if generation is not None:
        template["metadata"] = {"labels": {LABEL_GENERATION: str(generation)}}
    spec: dict[str, Any] = {
        "template": template,
        "disruption": {"consolidationPolicy": consolidation_policy, "consolidateAfter": consolidate_after},
    }
    if limits is not None:
        spec["limits"] = limits
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name}, "spec": spec}


def deployment(
    pool: str,
    namespace: str,
    app: str,
    replicas: int,
    *,
    cpu: str = "1",
    memory: str = "1Gi",
    do_not_disrupt: bool = False,
) -> dict[str, Any]:
    """``replicas`` pause pods selecting ``pool``'s nodes, labelled ``app=<app>``."""
    annotations = {"karpenter.sh/do-not-disrupt": "true"} if do_not_disrupt else {}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": app, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app}, "annotations": annotations},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "nodeSelector": {LABEL_NODEPOOL: pool},
                    "containers": [
                        {
                            "name": "pause",
                            "image": PAUSE_IMAGE,
                            "resources": {"requests": {"cpu": cpu, "memory": memory}},
                        }
                    ],
                },
            },
        },
    }


def pod_disruption_budget(namespace: str, app: str, min_available: int) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": app, "namespace": namespace},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": app}}},
    }


def as_yaml(*objects: dict[str, Any]) -> str:
    # JSON is YAML: one document per object.
    return "\n---\n".join(json.dumps(obj) for obj in objects) + "\n"


# -- the runner ------------------------------------------------------------------


@contextlib.contextmanager
def running_in_thread(plane: ControlPlane, runner: Runner, *, pools: Sequence[str] = ()) -> Iterator[Runner]:
    """``runner`` looping in a background thread; stopped (and checked) at the end.

    ``pools`` are removed with :func:`remove_pools` first, while karpy still runs
    to drain their nodes. Apart from :func:`running_karpy` for a test that looks
    at the Runner before it starts.
    """
    stop = threading.Event()
    started = threading.Event()
    failures: list[BaseException] = []

    def target() -> None:
        try:
            runner.run(stop, started)
        except BaseException as error:  # reported by the test thread
            failures.append(error)

    thread = threading.Thread(target=target, name="karpy-runner", daemon=True)
    thread.start()
    try:
        wait_until(lambda: started.is_set() or bool(failures), timeout=60, what="the runner to start")
        assert not failures, f"the runner failed: {failures[0]!r}"
        try:
            yield runner
        finally:
            remove_pools(plane, *pools)
    finally:
        stop.set()
        thread.join(30)
        assert not thread.is_alive(), "the runner did not stop"
        assert not failures, f"the runner failed: {failures[0]!r}"


@contextlib.contextmanager
def running_karpy(
    plane: ControlPlane, settings: RunSettings | None = None, *, pools: Sequence[str] = ()
) -> Iterator[Runner]:
    """A :class:`karpy.run.Runner` on its own connection, in a background thread (:func:`running_in_thread`).

    The Runner itself is handed out, so a test can reach its cluster adapter
    (to cut its watches, say) while it runs.
    """
    transport = ApiTransport.from_kubeconfig(plane.kubeconfig)
    try:
        with running_in_thread(plane, Runner(transport, settings), pools=pools) as runner:
            yield runner
    finally:
        transport.close()


@dataclass
class KarpyProcess:
    """A ``karpy run`` process of a test's, with its log and its record in the control plane's ``pids/``."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    pid_file: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def wait_for(self, text: str, timeout: float = 60) -> None:
        """Wait until the log says ``text``; fail at once if the process exits first."""

        def logged() -> bool:
            if self.process.poll() is not None:
                pytest.fail(f"karpy run {self.name} exited ({self.process.returncode}):\n{self.tail()}")
            return text in self.log()

        wait_until(logged, timeout=timeout, interval=0.1, what=f"karpy run {self.name} to log {text!r}")

    def signal(self, signum: signal.Signals) -> float:
        """Send ``signum``; the monotonic time it was sent."""
        sent = time.monotonic()
        self.process.send_signal(signum)
        return sent

    def wait_exit(self, timeout: float) -> int:
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"karpy run {self.name} did not exit within {timeout}s:\n{self.tail()}")
        self.pid_file.unlink(missing_ok=True)
        return code

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)
        self.pid_file.unlink(missing_ok=True)


def lease_identity(replica: KarpyProcess) -> str | None:
    """The identity a replica runs for the lease as, from its log."""
    found = re.search(r"running for lease \S+ as ([^\s\"]+)", replica.log())
    return found.group(1) if found else None


def start_karpy_run(
    plane: ControlPlane, name: str, log_dir: Path, *flags: str, env: Mapping[str, str]
) -> KarpyProcess:
    """``python -m karpy.cli run <flags>`` as a process of its own, its output in ``log_dir``.

    Its environment is this process's without the leader election settings
    (each test says what it wants), with ``env`` on top; unbuffered, so that
    its log is complete up to a SIGKILL. It is recorded in the control plane's
    ``pids/``, so the watchdog stops it should the tests die before they do.
    """
    environ = {key: value for key, value in os.environ.items() if key not in LEADER_ELECTION_VARIABLES}
    environ["PYTHONUNBUFFERED"] = "1"
    environ.update(env)
    log_path = log_dir / f"karpy-{name}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "karpy.cli", "run", *flags],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=environ,
        )
    pid_file = plane.state_dir / "pids" / f"karpy-run-{name}-{process.pid}"
    pid_file.write_text(f"{process.pid} karpy.cli run\n")
    return KarpyProcess(name, process, log_path, pid_file)


# -- the chart's ServiceAccount ----------------------------------------------------

CHART = REPO / "charts" / "karpy"
# How long a ServiceAccount token of a test lives (the TokenRequest API's expirationSeconds).
TOKEN_SECONDS = 3600


@dataclass(frozen=True)
class ServiceAccount:
    namespace: str
    name: str

    @property
    def username(self) -> str:
        """The user name the API server authenticates its tokens as (and audits them under)."""
        return f"system:serviceaccount:{self.namespace}:{self.name}"


def helm(plane: ControlPlane, *args: str) -> str:
    """Run the cached helm CLI (``scripts/control-plane helm``) against the control plane."""
    found = subprocess.run([str(SCRIPT), "helm"], capture_output=True, text=True, check=False)
    if found.returncode != 0:
        pytest.fail("helm is not built: run scripts/control-plane build")
    result = subprocess.run(
        [found.stdout.strip(), "--kubeconfig", str(plane.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(f"helm {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
    return result.stdout


def install_chart(plane: ControlPlane, release: str, namespace: str, *values: str) -> ServiceAccount:
    """``helm install`` charts/karpy as ``release`` in ``namespace``; its ServiceAccount.

    ``values`` are ``key=value`` settings (``--set``).
    """
    sets = [arg for value in values for arg in ("--set", value)]
    helm(plane, "install", release, str(CHART), "--namespace", namespace, "--create-namespace", *sets)
    accounts = get_items(
        plane, "serviceaccounts", "-n", namespace, "-l", f"app.kubernetes.io/instance={release}"
    )
    assert len(accounts) == 1, [account["metadata"]["name"] for account in accounts]
    return ServiceAccount(namespace, accounts[0]["metadata"]["name"])


def service_account_kubeconfig(plane: ControlPlane, account: ServiceAccount, path: Path) -> Path:
    """A kubeconfig at ``path`` for the control plane with a token of ``account`` (TokenRequest API).

    The server and its CA are the admin kubeconfig's; the credentials are only
    the token, so whatever uses it can do exactly what the account's RBAC allows.
    """
    admin = ApiTransport.from_kubeconfig(plane.kubeconfig)
    try:
        answer = admin.request(
            "POST",
            f"/api/v1/namespaces/{account.namespace}/serviceaccounts/{account.name}/token",
            body={
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": TOKEN_SECONDS},
            },
        ).body
    finally:
        admin.close()
    token = answer["status"]["token"]
    config = yaml.safe_load(plane.kubeconfig.read_text())
    cluster = next(entry for entry in config["clusters"] if entry["name"] == _current_cluster(config))
    user = account.name
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [cluster],
                "users": [{"name": user, "user": {"token": token}}],
                "contexts": [{"name": user, "context": {"cluster": cluster["name"], "user": user}}],
                "current-context": user,
            }
        )
    )
    path.chmod(0o600)
    return path


def _current_cluster(config: dict[str, Any]) -> str:
    context = next(entry for entry in config["contexts"] if entry["name"] == config["current-context"])
    return str(context["context"]["cluster"])


def remove_pools(plane: ControlPlane, *pools: str, timeout: float = 60) -> None:
    """Delete NodePools, then their NodeClaims (karpy, still running, drains and removes them).

    The NodePool goes first, so nothing launches anew for pods its nodes leave.
    Best effort: a NodeClaim still there after ``timeout`` is reported, not failed on.
    """
    for pool in pools:
        plane.kubectl("delete", "nodepool", pool, "--ignore-not-found", "--wait=false")
    for pool in pools:
        plane.kubectl("delete", "nodeclaims", "-l", f"{LABEL_NODEPOOL}={pool}", "--wait=false")
    deadline = time.monotonic() + timeout
    left: list[str] = []
    while time.monotonic() < deadline:
        left = [name for pool in pools for name in pool_claims(plane, pool)]
        if not left:
            break
        time.sleep(0.5)
    if left:
        print(f"NodeClaims not removed within {timeout:g}s: {', '.join(sorted(left))}")
    for pool in pools:
        plane.kubectl("delete", "kwoknodeclass", pool, "--ignore-not-found", "--wait=false")


def karpy_json(kubeconfig: Path, *argv: str) -> dict[str, Any]:
    """``karpy ARGV --kubeconfig KUBECONFIG -o json`` as a process of its own: its JSON document."""
    result = subprocess.run(
        [str(KARPY), *argv, "--kubeconfig", str(kubeconfig), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


# -- reads -----------------------------------------------------------------------


def get_items(plane: ControlPlane, *args: str) -> list[dict[str, Any]]:
    items = json.loads(plane.kubectl("get", *args, "-o", "json"))["items"]
    assert isinstance(items, list)
    return items


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    for entry in obj.get("status", {}).get("conditions") or ():
        if entry.get("type") == kind:
            return dict(entry)
    return {}


def running_pods(plane: ControlPlane, namespace: str, app: str) -> list[dict[str, Any]]:
    return [
        pod
        for pod in get_items(plane, "pods", "-n", namespace, "-l", f"app={app}")
        if pod.get("status", {}).get("phase") == "Running"
        and pod["spec"].get("nodeName")
        and not pod["metadata"].get("deletionTimestamp")
    ]


def get_object(plane: ControlPlane, *args: str) -> dict[str, Any]:
    """One object as ``kubectl get -o json`` prints it."""
    found = json.loads(plane.kubectl("get", *args, "-o", "json"))
    assert isinstance(found, dict)
    return found


def pool_claims(plane: ControlPlane, pool: str) -> dict[str, dict[str, Any]]:
    claims = get_items(plane, "nodeclaims", "-l", f"{LABEL_NODEPOOL}={pool}")
    return {claim["metadata"]["name"]: claim for claim in claims}


def wait_for(what: str, probe: Callable[[], bool], *, timeout: float, running: Callable[[], int]) -> int:
    """Wait until ``probe()``; meanwhile count running pods. Returns the fewest seen."""
    deadline = time.monotonic() + timeout
    fewest = running()
    while not probe():
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.25)
        fewest = min(fewest, running())
    return fewest


# -- a NodeClaim watch -------------------------------------------------------------


@dataclass
class Timeline:
    """When a watch of the pool's NodeClaims first showed each of them in each state.

    The times are the test's clock as the events arrived: one watch delivers
    the changes of all the pool's NodeClaims in the order the server made them,
    so the order of these times is the order of the changes, to well under a
    second (the objects' own timestamps have whole seconds).
    """

    created: dict[str, float] = field(default_factory=dict)
    initialized: dict[str, float] = field(default_factory=dict)
    drifted: dict[str, float] = field(default_factory=dict)
    deleting: dict[str, float] = field(default_factory=dict)
    gone: dict[str, float] = field(default_factory=dict)
    labels: dict[str, dict[str, str]] = field(default_factory=dict)

    def observe(self, event_type: str, claim: dict[str, Any]) -> None:
        now = time.time()
        meta = claim["metadata"]
        name = meta["name"]
        self.labels[name] = dict(meta.get("labels") or {})
        self.created.setdefault(name, now)
        if meta.get("deletionTimestamp"):
            self.deleting.setdefault(name, now)
        for kind, table in (("Initialized", self.initialized), ("Drifted", self.drifted)):
            if condition(claim, kind).get("status") == "True":
                table.setdefault(name, now)
        if event_type == "DELETED":
            self.gone.setdefault(name, now)

    @property
    def alive(self) -> set[str]:
        return set(self.created) - set(self.gone)


class NodeClaimWatch:
    """A watch of one pool's NodeClaims in a thread, feeding a :class:`Timeline`.

    Polling would miss short states (a drained node's NodeClaim is deleting for
    well under a second), so the test watches, as any controller would. The
    watch is the test's own connection, independent of karpy's informers.
    """

    def __init__(self, plane: ControlPlane, pool: str) -> None:
        self.timeline = Timeline()
        self._lock = threading.Lock()
        self._transport = ApiTransport.from_kubeconfig(plane.kubeconfig)
        self._params = {
            "watch": "true",
            "labelSelector": f"{LABEL_NODEPOOL}={pool}",
            "timeoutSeconds": "1800",
        }
        self._opened = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watch-{pool}", daemon=True)

    def __enter__(self) -> NodeClaimWatch:
        self._thread.start()
        assert self._opened.wait(30), "the NodeClaim watch did not open"
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._transport.close()  # wakes the thread up
        self._thread.join(10)

    def _run(self) -> None:
        path = "/apis/karpenter.sh/v1/nodeclaims"
        # The stream is cut at the end: that ends the thread, quietly.
        with contextlib.suppress(Exception), self._transport.stream_lines(path, self._params, 2000) as lines:
            self._opened.set()
            for line in lines:
                if line.strip():
                    event = json.loads(line)
                    with self._lock:
                        self.timeline.observe(event["type"], event["object"])

    def snapshot(self) -> Timeline:
        with self._lock:
            return Timeline(
                **{name: dict(getattr(self.timeline, name)) for name in Timeline.__dataclass_fields__}
            )


def store_past_the_crd(plane: ControlPlane, manifest: dict[str, Any]) -> None:
    """Write a NodePool straight into etcd, as one stored before the CRD refused what it holds."""
    stored = copy.deepcopy(manifest)
    stored["metadata"].update(
        uid=str(uuid.uuid4()),
        generation=1,
        creationTimestamp=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
    plane.etcdctl(
        "put", f"/registry/karpenter.sh/nodepools/{manifest['metadata']['name']}", json.dumps(stored)
    )
