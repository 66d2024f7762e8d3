"""KubeCluster against the real control plane: informer caches, writes, conflicts, 410 Gone.

The CRDs are applied (idempotently) at the start of the module and left in place:
another module deletes them at its own end, and this one must not pull them from
under a module that runs later. Every object a test makes is deleted by that test
(namespaced ones go with the test's namespace).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest

from karpy.api.conditions import Condition
from karpy.api.core import POD_RUNNING, Node, Pod
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import NodeClaim, NodeClaimSpec
from karpy.api.nodepool import NodeClassRef
from karpy.api.requirements import Requirement
from karpy.api.taints import Taint
from karpy.cloud.kwok.fake_kubelet import FAKE_NODE_ANNOTATION, FAKE_NODE_VALUE
from karpy.controllers.state import namespace_labels
from karpy.kube._http import ApiTransport
from karpy.kube._resources import POD, WATCHED_TYPES
from karpy.kube.cluster import KubeCluster
from karpy.operator.cluster import EVENT_NORMAL, ConflictError, EvictionRefusedError

from .conftest import ControlPlane, wait_until

pytestmark = pytest.mark.integration

Change = tuple[str, object | None, object | None]


class Recorder:
    """A subscriber that keeps every change notification (they arrive from informer threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changes: list[Change] = []

    def __call__(self, kind: str, old: object | None, new: object | None) -> None:
        with self._lock:
            self._changes.append((kind, old, new))

    def changes(self, kind: str) -> list[tuple[object | None, object | None]]:
        with self._lock:
            return [(old, new) for changed, old, new in self._changes if changed == kind]


@pytest.fixture
def cluster(crds: ControlPlane) -> Iterator[tuple[KubeCluster, Recorder]]:
    kube = KubeCluster.from_kubeconfig(crds.kubeconfig)
    recorder = Recorder()
    kube.subscribe(recorder)
    kube.start()
    try:
        assert kube.wait_for_sync(60), "the informers did not sync"
        assert kube.synced
        yield kube, recorder
    finally:
        kube.close()


def _fake_node_manifest(name: str) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {FAKE_NODE_ANNOTATION: FAKE_NODE_VALUE},
                "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"},
            },
            "status": {"capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"}},
        }
    )


def _deployment(name: str, replicas: int, node: str) -> str:
    return json.dumps(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": node},
                        "containers": [
                            {
                                "name": "web",
                                "image": "registry.invalid/web:1",
                                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                            }
                        ],
                    },
                },
            },
        }
    )


@pytest.fixture
def fake_node(control_plane: ControlPlane, namespace: str) -> Iterator[str]:
    name = f"fake-{namespace}"
    control_plane.kubectl("apply", "-f", "-", stdin=_fake_node_manifest(name))
    try:
        yield name
    finally:
        control_plane.kubectl("delete", "node", name, "--ignore-not-found", "--wait=false")


def _running_on(kube: KubeCluster, namespace: str, node: str, count: int) -> list[Pod] | None:
    pods = [
        pod
        for pod in kube.pods_on_node(node)
        if pod.metadata.namespace == namespace and pod.phase == POD_RUNNING and not pod.metadata.deleting
    ]
    return pods if len(pods) == count else None


def test_pods_of_a_deployment_appear_get_bound_and_run_with_notifications(
    cluster: tuple[KubeCluster, Recorder], control_plane: ControlPlane, namespace: str, fake_node: str
) -> None:
    kube, recorder = cluster
    control_plane.kubectl(
        "apply", "--namespace", namespace, "-f", "-", stdin=_deployment("web", 2, fake_node)
    )
    pods = wait_until(lambda: _running_on(kube, namespace, fake_node, 2), what="2 pods Running in the cache")
    assert all(pod.spec.requests == {"cpu": 100, "memory": 64 * 1024**2} for pod in pods)
    assert not [pod for pod in kube.pending_pods() if pod.metadata.namespace == namespace]
    assert kube.node(fake_node) is not None and kube.node(fake_node).ready  # type: ignore[union-attr]
    for pod in pods:
        assert kube.pod(namespace, pod.metadata.name) == pod
        seen = [
            (old, new) for old, new in recorder.changes("Pod") if isinstance(new, Pod) and new.key == pod.key
        ]
        assert any(old is None for old, _ in seen), "the pod's creation was announced"
        assert any(isinstance(new, Pod) and not new.spec.node_name for _, new in seen), "seen unbound"
        assert any(isinstance(new, Pod) and new.phase == POD_RUNNING for _, new in seen), "seen Running"
    assert any(isinstance(new, Node) and new.name == fake_node for _, new in recorder.changes("Node"))


def test_nodeclaim_create_update_status_conflict_and_events(
    cluster: tuple[KubeCluster, Recorder], crds: ControlPlane
) -> None:
    kube, _ = cluster
    claim = NodeClaim(
        metadata=ObjectMeta(name="", generate_name="it-kube-", labels={"karpenter.sh/nodepool": "it-kube"}),
        spec=NodeClaimSpec(
            node_class_ref=NodeClassRef("karpenter.kwok.sh", "KWOKNodeClass", "it-kube"),
            requirements=(Requirement.from_operator("node.kubernetes.io/instance-type", "In", ["c5.large"]),),
            requests={"cpu": 1000, "memory": 1024**3},
        ),
    )
    created = kube.create(claim)
    try:
        assert created.name.startswith("it-kube-") and len(created.name) > len("it-kube-")
        assert created.metadata.resource_version and created.metadata.uid
        assert created.spec == claim.spec
        wait_until(lambda: kube.nodeclaim(created.name), what="the NodeClaim in the cache")

        launched = created.with_status(
            provider_id="kwok://it-kube-node",
            capacity={"cpu": 2000, "memory": 4 * 1024**3, "pods": 110},
            conditions=(Condition("Launched", "True", "Launched", "", 1_700_000_000.0),),
        ).with_metadata(labels={**created.metadata.labels, "node.kubernetes.io/instance-type": "c5.large"})
        stored = kube.update(launched)
        assert stored.metadata.resource_version != created.metadata.resource_version
        assert stored.status == launched.status
        assert stored.metadata.labels == launched.metadata.labels

        def cached_at_stored_version() -> NodeClaim | None:
            found = kube.nodeclaim(created.name)
            return (
                found
                if found and found.metadata.resource_version == stored.metadata.resource_version
                else None
            )

        cached = wait_until(cached_at_stored_version, what="the updated NodeClaim in the cache")
        assert cached.status.provider_id == "kwok://it-kube-node" and cached.launched
        assert cached.instance_type == "c5.large"

        # The same write from the stale object: the server refuses it.
        with pytest.raises(ConflictError):
            kube.update(created.with_status(provider_id="kwok://other"))
        with pytest.raises(ConflictError):
            kube.update(created.with_metadata(labels={"karpenter.sh/nodepool": "other"}))
        assert kube.nodeclaim(created.name) == cached

        # Events about a cluster-scoped object go to "default"; a repeat within two minutes is
        # not written (its count rides on the next write after the window).
        for _ in range(2):
            kube.record_event(cached, EVENT_NORMAL, "Launched", "launched for the test")
        assert kube.flush_events(30), "the events were not sent"
        events = json.loads(
            crds.kubectl(
                "get",
                "events",
                "-n",
                "default",
                "-o",
                "json",
                f"--field-selector=involvedObject.name={created.name}",
            )
        )["items"]
        assert [(e["reason"], e["type"], e["count"]) for e in events] == [("Launched", EVENT_NORMAL, 1)]
        assert events[0]["involvedObject"]["kind"] == "NodeClaim"
    finally:
        crds.kubectl(
            "delete", "events", "-n", "default", f"--field-selector=involvedObject.name={created.name}"
        )
        kube.delete(created)
    wait_until(lambda: kube.nodeclaim(created.name) is None, what="the NodeClaim gone from the cache")


def test_node_labels_and_taints_are_patched_without_losing_the_rest(
    cluster: tuple[KubeCluster, Recorder], control_plane: ControlPlane, fake_node: str
) -> None:
    kube, _ = cluster

    def ready_node() -> Node | None:
        found = kube.node(fake_node)
        return found if found is not None and found.ready else None

    node = wait_until(ready_node, what="the fake node Ready")
    before = json.loads(control_plane.kubectl("get", "node", fake_node, "-o", "json"))

    def patched() -> Node | None:
        # The fake kubelet may still be writing the node (a label added after Ready was seen),
        # so the cached copy can be one version behind: the write is then refused, as it must
        # be, and tried again from the cache once it has caught up, as a controller's next
        # reconcile would.
        current = kube.node(fake_node)
        assert current is not None
        changed = current.with_changes(
            metadata=current.metadata.with_changes(
                labels={**current.metadata.labels, "karpenter.sh/initialized": "true"}
            ),
            taints=(*current.taints, Taint("karpenter.sh/disrupted", "NoSchedule")),
        )
        try:
            return kube.update(changed)
        except ConflictError:
            return None

    stored = wait_until(patched, timeout=30, what="the node patched from an up-to-date cache")
    assert stored.metadata.labels["karpenter.sh/initialized"] == "true"
    assert Taint("karpenter.sh/disrupted", "NoSchedule") in stored.taints

    after = json.loads(control_plane.kubectl("get", "node", fake_node, "-o", "json"))
    # Every label there before is kept, and ours added. The fake kubelet may add its own in the
    # meantime (beta.kubernetes.io/os was seen to appear after the node went Ready).
    expected = {**before["metadata"]["labels"], "karpenter.sh/initialized": "true"}
    assert after["metadata"]["labels"].items() >= expected.items()
    assert after["metadata"]["annotations"] == before["metadata"]["annotations"]
    assert after["status"]["nodeInfo"] == before["status"]["nodeInfo"]
    assert {c["type"] for c in after["status"]["conditions"]} >= {"Ready", "MemoryPressure"}
    assert after["status"]["capacity"] == before["status"]["capacity"]
    assert {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"} in after["spec"]["taints"]

    # A write from the node as it was read before: refused, and nothing changes.
    with pytest.raises(ConflictError):
        kube.update(node.with_changes(unschedulable=True))
    final = json.loads(control_plane.kubectl("get", "node", fake_node, "-o", "json"))
    assert not final["spec"].get("unschedulable")


def test_eviction_refused_by_a_pdb_that_allows_none(
    cluster: tuple[KubeCluster, Recorder], control_plane: ControlPlane, namespace: str, fake_node: str
) -> None:
    kube, _ = cluster
    control_plane.kubectl(
        "apply", "--namespace", namespace, "-f", "-", stdin=_deployment("guarded", 1, fake_node)
    )
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "guarded"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
    }
    control_plane.kubectl("apply", "--namespace", namespace, "-f", "-", stdin=json.dumps(pdb))
    [pod] = wait_until(lambda: _running_on(kube, namespace, fake_node, 1), what="the guarded pod Running")
    wait_until(
        lambda: any(b.metadata.namespace == namespace for b in kube.pod_disruption_budgets()),
        what="the PDB in the cache",
    )

    def pdb_counts_the_pod() -> bool:
        status = json.loads(control_plane.kubectl("get", "pdb", "guarded", "-n", namespace, "-o", "json"))[
            "status"
        ]
        return bool(status.get("currentHealthy") == 1 and status.get("disruptionsAllowed") == 0)

    wait_until(pdb_counts_the_pod, what="the PDB to count the pod healthy")
    with pytest.raises(EvictionRefusedError):
        kube.evict(pod)
    assert not json.loads(
        control_plane.kubectl("get", "pod", pod.metadata.name, "-n", namespace, "-o", "json")
    )["metadata"].get("deletionTimestamp")


def _bare_pod(name: str) -> str:
    # Selects no node, so it stays Pending and is deleted at once.
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {"karpy.dev/none": "none"},
                "containers": [{"name": "c", "image": "registry.invalid/c:1"}],
            },
        }
    )


def test_watch_gone_after_compaction_relists_and_loses_no_change(crds: ControlPlane, namespace: str) -> None:
    kube = KubeCluster(ApiTransport.from_kubeconfig(crds.kubeconfig), kinds=(POD,))
    recorder = Recorder()
    kube.subscribe(recorder)
    kube.start()
    try:
        assert kube.wait_for_sync(60)
        crds.kubectl("apply", "--namespace", namespace, "-f", "-", stdin=_bare_pod("before"))
        before = wait_until(lambda: kube.pod(namespace, "before"), what="the first pod in the cache")

        # The watch stops; during the gap one pod is deleted and another created ...
        kube.stop()
        crds.kubectl("delete", "pod", "before", "--namespace", namespace, "--wait=true")
        crds.kubectl("apply", "--namespace", namespace, "-f", "-", stdin=_bare_pod("during"))
        revision = crds.kubectl(
            "get", "pod", "during", "--namespace", namespace, "-o", "jsonpath={.metadata.resourceVersion}"
        )
        # ... and etcd forgets the history of the gap: resuming the watch gets 410 Gone.
        crds.etcdctl("compact", revision)
        assert kube.relists_after_gone("Pod") == 0
        kube.start()

        during = wait_until(lambda: kube.pod(namespace, "during"), what="the pod created during the gap")
        wait_until(lambda: kube.pod(namespace, "before") is None, what="the pod deleted during the gap to go")
        assert kube.relists_after_gone("Pod") >= 1
        changes = recorder.changes("Pod")
        assert (before, None) in changes
        assert any(old is None and new == during for old, new in changes)
    finally:
        kube.close()


def test_namespace_labels_reach_the_scheduling_snapshot(
    cluster: tuple[KubeCluster, Recorder], control_plane: ControlPlane, namespace: str
) -> None:
    kube, _ = cluster
    control_plane.kubectl("label", "namespace", namespace, "team=web")

    def labels() -> dict[str, str] | None:
        found = namespace_labels(kube).get(namespace, {})
        return found if found.get("team") == "web" else None

    found = wait_until(labels, what=f"namespace {namespace} labelled team=web in the cache")
    assert found["kubernetes.io/metadata.name"] == namespace


def test_informers_stream_their_first_state_and_never_list(crds: ControlPlane, namespace: str) -> None:
    """kube-apiserver 1.37 has WatchList on: every informer syncs from one streaming watch."""
    crds.kubectl("apply", "--namespace", namespace, "-f", "-", stdin=_bare_pod("streamed"))
    kube = KubeCluster(ApiTransport.from_kubeconfig(crds.kubeconfig))
    recorder = Recorder()
    kube.subscribe(recorder)
    kube.start()
    try:
        assert kube.wait_for_sync(60)
        assert kube.pod(namespace, "streamed") is not None
        kinds = [resource.kind for resource in WATCHED_TYPES]
        assert {kind: (kube.lists(kind), kube.initial_streams(kind)) for kind in kinds} == {
            kind: (0, 1) for kind in kinds
        }
        # The stream goes on as the watch: a later pod arrives on it.
        crds.kubectl("apply", "--namespace", namespace, "-f", "-", stdin=_bare_pod("later"))
        wait_until(lambda: kube.pod(namespace, "later"), what="a pod created after the sync")
        assert kube.initial_streams("Pod") == 1 and kube.lists("Pod") == 0
    finally:
        kube.close()
