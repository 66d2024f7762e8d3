"""``karpy simulate --from-cluster`` on the control plane, as an account that may only read.

A cluster is built by ``karpy run``: the seed walkthrough's NodePool (c5/m5
large and xlarge, spot or on-demand; consolidation of underutilized nodes after
30 s) with its Deployment of five 1-CPU pods, and a second Deployment of three.
Once karpy has settled, the second Deployment is scaled to zero: some nodes are
now empty or underutilized, and karpy will act on them once ``consolidateAfter``
has passed. Right then ``karpy simulate --from-cluster -o json`` runs as a
process of its own with a kubeconfig holding only the token of a
ServiceAccount whose ClusterRole grants get, list and watch. It must:

- load the cluster as it is: every NodeClaim and Node of the pool, every pod
  on the node it runs on;
- predict what the running controller then does: the NodeClaims it removes
  (and how many it launches in their place), and when, within a fifth;
- write nothing: the API server's audit log (``scripts/control-plane up``
  logs every request of a ServiceAccount at Metadata level) holds only get,
  list and watch requests of that ServiceAccount.

``karpy plan FILE`` and ``karpy plan --from-cluster-autoscaler`` run as the same account on a
cluster of the same pool (and a node of a Cluster Autoscaler node group), with settings given,
and the audit log must show the same: nothing but reads.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from karpy.run import Runner

from .conftest import ControlPlane, wait_until
from .karpy_run import (
    LABEL_ARCH,
    LABEL_INSTANCE_TYPE,
    LABEL_OS,
    NodeClaimWatch,
    ServiceAccount,
    as_yaml,
    deployment,
    get_items,
    karpy_json,
    node_class,
    nodepool,
    pool_claims,
    requirement,
    running_karpy,
    service_account_kubeconfig,
)
from .test_rbac import audit_requests

pytestmark = pytest.mark.integration

NODEPOOL = "it-from-cluster"
FIRST, SECOND = "it-from-cluster-web", "it-from-cluster-batch"
FIRST_REPLICAS, SECOND_REPLICAS = 5, 3
CONSOLIDATE_AFTER = 30.0
READER = "it-from-cluster-reader"
CA_NODE = "it-from-cluster-ca-node"
TYPES = ["c5.large", "c5.xlarge", "m5.large", "m5.xlarge"]


def pool(instance_types: list[str]) -> dict[str, Any]:
    return nodepool(
        NODEPOOL,
        instance_types,
        capacity_types=("spot", "on-demand"),
        requirements=[requirement(LABEL_ARCH, "amd64"), requirement(LABEL_OS, "linux")],
        consolidation_policy="WhenEmptyOrUnderutilized",
        consolidate_after=f"{CONSOLIDATE_AFTER:.0f}s",
    )


MANIFESTS = as_yaml(node_class(NODEPOOL), pool(TYPES))
READ = ["get", "list", "watch"]
READ_ONLY = [
    {
        "apiGroups": [""],
        "resources": [
            "pods",
            "nodes",
            "namespaces",
            "persistentvolumes",
            "persistentvolumeclaims",
            "limitranges",
        ],
        "verbs": READ,
    },
    {
        "apiGroups": ["apps"],
        "resources": ["deployments", "replicasets", "statefulsets", "daemonsets"],
        "verbs": READ,
    },
    {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": READ},
    {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "verbs": READ},
    {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses", "csinodes"], "verbs": READ},
    {"apiGroups": ["node.k8s.io"], "resources": ["runtimeclasses"], "verbs": READ},
    {"apiGroups": ["karpenter.sh"], "resources": ["nodeclaims", "nodepools"], "verbs": READ},
    {"apiGroups": ["karpenter.k8s.aws"], "resources": ["ec2nodeclasses"], "verbs": READ},
    {"apiGroups": ["karpenter.kwok.sh"], "resources": ["kwoknodeclasses"], "verbs": READ},
]


@pytest.fixture
def runner(crds: ControlPlane) -> Iterator[Runner]:
    with running_karpy(crds, pools=[NODEPOOL]) as running:
        yield running


@pytest.fixture
def reader(crds: ControlPlane, namespace: str, tmp_path: Path) -> Iterator[tuple[ServiceAccount, Path]]:
    """A ServiceAccount that may get, list and watch what the simulation reads, and its kubeconfig."""
    crds.kubectl(
        "apply",
        "-f",
        "-",
        stdin=as_yaml(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": READER, "namespace": namespace},
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": READER},
                "rules": READ_ONLY,
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": READER},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": READER},
                "subjects": [{"kind": "ServiceAccount", "name": READER, "namespace": namespace}],
            },
        ),
    )
    account = ServiceAccount(namespace, READER)
    try:
        yield account, service_account_kubeconfig(crds, account, tmp_path / "reader.kubeconfig")
    finally:
        crds.kubectl("delete", "clusterrolebinding,clusterrole", READER, "--ignore-not-found")


def running(plane: ControlPlane, namespace: str, app: str, replicas: int) -> bool:
    pods = get_items(plane, "pods", "-n", namespace, "-l", f"app={app}")
    return len(pods) == replicas and all(pod.get("status", {}).get("phase") == "Running" for pod in pods)


def settled(watch: NodeClaimWatch, quiet: float) -> bool:
    """Whether the pool's NodeClaims have not changed for ``quiet`` seconds (and all are initialized)."""
    timeline = watch.snapshot()
    changes = [*timeline.created.values(), *timeline.deleting.values(), *timeline.gone.values()]
    alive = timeline.alive
    return (
        bool(alive)
        and alive <= set(timeline.initialized)
        and not (set(timeline.deleting) & alive)
        and time.time() - max(changes, default=0.0) >= quiet
    )


def test_simulate_from_cluster_loads_the_cluster_predicts_karpys_next_consolidation_and_writes_nothing(
    runner: Runner, crds: ControlPlane, namespace: str, reader: tuple[ServiceAccount, Path]
) -> None:
    plane = crds
    account, kubeconfig = reader
    with NodeClaimWatch(plane, NODEPOOL) as watch:
        plane.kubectl("apply", "-f", "-", stdin=MANIFESTS)
        plane.kubectl(
            "apply",
            "-f",
            "-",
            stdin=as_yaml(
                deployment(NODEPOOL, namespace, FIRST, FIRST_REPLICAS),
                deployment(NODEPOOL, namespace, SECOND, SECOND_REPLICAS),
            ),
        )
        wait_until(lambda: running(plane, namespace, FIRST, FIRST_REPLICAS), timeout=120, what="first pods")
        wait_until(
            lambda: running(plane, namespace, SECOND, SECOND_REPLICAS), timeout=120, what="second pods"
        )
        # karpy has launched and consolidated what it would: nothing changed for consolidateAfter and more.
        wait_until(lambda: settled(watch, CONSOLIDATE_AFTER + 15), timeout=600, what="the pool settled")
        plane.kubectl("scale", "deployment", SECOND, "-n", namespace, "--replicas=0")
        wait_until(lambda: running(plane, namespace, SECOND, 0), timeout=60, what="second pods gone")
        before = set(watch.snapshot().alive)
        read_at = time.time()
        result = karpy_json(kubeconfig, "simulate", "--from-cluster")
        read_for = time.time() - read_at
        print(f"\nkarpy simulate --from-cluster took {read_for:.1f}s")

        # Loaded as it is: the pool's NodeClaims, and the pods on their nodes.
        claims = {claim["name"]: claim for claim in result["nodeclaims"]}
        assert before <= set(claims), (before, sorted(claims))
        nodes = {name: claim["status"]["nodeName"] for name, claim in pool_claims(plane, NODEPOOL).items()}
        for name in before:
            assert claims[name]["node"] == nodes[name]
        simulated_pods = {(pod["namespace"], pod["name"]): pod for pod in result["pods"]}
        for pod in get_items(plane, "pods", "-n", namespace, "-l", f"app={FIRST}"):
            simulated = simulated_pods[(namespace, pod["metadata"]["name"])]
            assert simulated["createdAt"] <= 0  # there before the run started
            assert simulated["node"] == pod["spec"]["nodeName"]

        # The prediction: which of the pool's NodeClaims go, and how many come in their place.
        predicted_gone = {name for name in before if claims[name]["deletedAt"] is not None}
        predicted_new = [
            claim
            for claim in result["nodeclaims"]
            if claim["nodepool"] == NODEPOOL and claim["name"] not in before
        ]
        print(f"predicted: {sorted(predicted_gone)} go, {len(predicted_new)} launched")
        assert predicted_gone, "the simulation consolidates nothing, yet nodes are left underutilized"
        # What the running controller does once consolidateAfter has passed (and a minute more).
        last = max(claims[name]["deletedAt"] for name in predicted_gone)
        wait_until(
            lambda: time.time() - read_at > max(last, CONSOLIDATE_AFTER) + 60 and settled(watch, 20),
            timeout=600,
            what="the pool settled again",
        )
        timeline = watch.snapshot()
        gone = before & set(timeline.gone)
        launched = set(timeline.created) - before
        print(f"karpy run: {sorted(gone)} went, {len(launched)} launched")
        # The simulation's times count from the moment it read the cluster (its "start", whole seconds).
        started = datetime.fromisoformat(result["start"].replace("Z", "+00:00")).timestamp()
        for name in sorted(gone & predicted_gone):
            print(
                f"{name}: deleted {timeline.gone[name] - started:.0f}s after the read,"
                f" predicted {claims[name]['deletedAt']:.0f}s"
            )
        assert gone == predicted_gone
        assert len(launched) == len(predicted_new)
        # When: within a fifth of the predicted time (and the few seconds a watch event and a poll take).
        for name in gone:
            actual, predicted = timeline.gone[name] - started, claims[name]["deletedAt"]
            assert abs(actual - predicted) <= 0.2 * predicted + 5, (name, actual, predicted)

    assert_only_reads(plane, account)
    plane.kubectl(
        "delete", "deployment", FIRST, SECOND, "-n", namespace, "--ignore-not-found", "--wait=false"
    )


def assert_only_reads(plane: ControlPlane, account: ServiceAccount) -> None:
    """Nothing but reads by ``account``, and nothing refused, by the API server's audit log."""
    requests, refused = audit_requests(plane, account.username, time.time())
    assert requests, "no audit events of the reader"
    assert {request.verb for request in requests} <= {"get", "list", "watch"}, requests
    assert not refused, refused


def test_karpy_plan_and_plan_from_cluster_autoscaler_write_nothing(
    runner: Runner, crds: ControlPlane, namespace: str, reader: tuple[ServiceAccount, Path], tmp_path: Path
) -> None:
    """Both forms of ``karpy plan``, with a setting given, as the account that may only read.

    The cluster holds the pool's nodes and, beside them, a node of a Cluster Autoscaler node
    group (its EKS label; tainted, so no pod of the test goes to a node nothing runs).
    """
    plane = crds
    account, kubeconfig = reader
    group_node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": CA_NODE,
            "labels": {
                LABEL_INSTANCE_TYPE: "m5.large",
                "topology.kubernetes.io/zone": "us-east-1a",
                LABEL_ARCH: "amd64",
                LABEL_OS: "linux",
                "eks.amazonaws.com/nodegroup": "it-workers",
            },
        },
        "spec": {"taints": [{"key": "it-workers", "effect": "NoSchedule"}]},
    }
    with NodeClaimWatch(plane, NODEPOOL) as watch:
        plane.kubectl("apply", "-f", "-", stdin=MANIFESTS)
        plane.kubectl("apply", "-f", "-", stdin=as_yaml(group_node))
        try:
            plane.kubectl(
                "apply", "-f", "-", stdin=as_yaml(deployment(NODEPOOL, namespace, FIRST, FIRST_REPLICAS))
            )
            wait_until(lambda: running(plane, namespace, FIRST, FIRST_REPLICAS), timeout=120, what="pods")
            wait_until(lambda: settled(watch, 10), timeout=300, what="the pool settled")
            timeline = watch.snapshot()
            alive = set(timeline.alive)
            in_use = {timeline.labels[name].get(LABEL_INSTANCE_TYPE, "") for name in alive}
            allowed = [name for name in TYPES if name not in in_use]
            assert allowed, f"the pool's nodes run every type: {sorted(in_use)}"
            manifest = tmp_path / "nodepool.yaml"
            manifest.write_text(as_yaml(pool(allowed)))

            # The FILE form: the pool's nodes no longer satisfy it, so the plan replaces them.
            planned = karpy_json(kubeconfig, "plan", str(manifest), "--feature-gates", "NodeRepair=true")
            assert [change["name"] for change in planned["changes"]] == [NODEPOOL]
            assert {d["nodeclaim"] for d in planned["disruptions"]} >= alive
            assert {"kind": "KWOKNodeClass", "name": NODEPOOL} in planned["leftAsTheyAre"]
            # The node group form: the group is found and both runs are made.
            migration = karpy_json(
                kubeconfig, "plan", "--from-cluster-autoscaler", "--min-values-policy", "BestEffort"
            )
            assert [m["kind"] for m in migration["manifests"]] == ["KWOKNodeClass", "NodePool"]
            assert "clusterAutoscaler" in migration and "karpy" in migration
        finally:
            plane.kubectl("delete", "node", CA_NODE, "--ignore-not-found", "--wait=false")
            plane.kubectl(
                "delete", "deployment", FIRST, "-n", namespace, "--ignore-not-found", "--wait=false"
            )
    assert_only_reads(plane, account)
