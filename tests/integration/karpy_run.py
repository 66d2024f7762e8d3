"""What the ``karpy run`` integration tests share: manifests, the runner, reads and a NodeClaim watch.

Each test module gives its NodePools and workloads names of its own; pods
select their NodePool by the ``karpenter.sh/nodepool`` label, so the session's
other tests (and their fake nodes) never take them.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from karpy.kube._http import ApiTransport
from karpy.run import Runner, RunSettings

from .conftest import ControlPlane, wait_until

LABEL_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
LABEL_CAPACITY_TYPE = "karpenter.sh/capacity-type"
LABEL_NODEPOOL = "karpenter.sh/nodepool"
LABEL_GENERATION = "karpy.dev/generation"
PAUSE_IMAGE = "public.ecr.aws/eks-distro/kubernetes/pause:3.7"

# -- manifests -------------------------------------------------------------------


def node_class(name: str) -> dict[str, Any]:
    return {"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass", "metadata": {"name": name}}


def nodepool(
    name: str,
    instance_types: list[str],
    *,
    generation: int = 1,
    capacity_types: tuple[str, ...] = ("on-demand",),
    consolidation_policy: str = "WhenEmpty",
    consolidate_after: str = "10m",
) -> dict[str, Any]:
    """A NodePool on the KWOKNodeClass of the same name; ``generation`` is a label on its nodes."""
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": {LABEL_GENERATION: str(generation)}},
                "spec": {
                    "requirements": [
                        {"key": LABEL_INSTANCE_TYPE, "operator": "In", "values": instance_types},
                        {"key": LABEL_CAPACITY_TYPE, "operator": "In", "values": list(capacity_types)},
                    ],
                    "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": name},
                },
            },
            "disruption": {
                "consolidationPolicy": consolidation_policy,
                "consolidateAfter": consolidate_after,
            },
        },
    }


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
def running_karpy(plane: ControlPlane, settings: RunSettings | None = None) -> Iterator[Runner]:
    """A :class:`karpy.run.Runner` looping in a background thread; stopped (and checked) at the end.

    The Runner itself is handed out, so a test can reach its cluster adapter
    (to cut its watches, say) while it runs.
    """
    transport = ApiTransport.from_kubeconfig(plane.kubeconfig)
    runner = Runner(transport, settings)
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
        yield runner
    finally:
        stop.set()
        thread.join(30)
        transport.close()
        assert not thread.is_alive(), "the runner did not stop"
        assert not failures, f"the runner failed: {failures[0]!r}"


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
