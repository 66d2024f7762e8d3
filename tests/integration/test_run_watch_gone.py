"""``karpy run`` loses no pod when its watches come back to 410 Gone in the middle of a scale-up.

karpy's informers resume a watch from the last resourceVersion they saw. If
etcd compacted past it meanwhile (a long disconnection, an apiserver restart),
the server answers 410 Gone, and the informer lists again; the cluster adapter
diffs the list against its cache and announces what changed during the gap as
ordinary changes. This test makes that happen while a Deployment scales up:

1. the pods start to arrive and karpy sees the first ones pending;
2. every watch of karpy's is cut (the informers stop, as on a lost
   connection) while the controllers keep running on what they have: the
   provisioner closes its batch, NodeClaims are created, the ReplicaSet
   controller creates the rest of the pods, the scheduler waits;
3. etcd is compacted past everything karpy saw, so resuming any watch gets
   410 Gone, and the informers start again.

Then every pod must end Running and no NodeClaim may be duplicated: with one
1-CPU pod per 2-vCPU instance, exactly one NodeClaim per pod, none of them
empty, is what a correct karpy launches (a duplicate would be an extra,
empty one).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from karpy.run import Runner

from .conftest import ControlPlane, wait_until
from .karpy_run import (
    NodeClaimWatch,
    as_yaml,
    deployment,
    get_items,
    node_class,
    nodepool,
    pool_claims,
    running_karpy,
    running_pods,
)

pytestmark = pytest.mark.integration

POOL = "it-gone"
APP = "gone-app"
REPLICAS = 12


@pytest.fixture
def runner(crds: ControlPlane) -> Iterator[tuple[ControlPlane, Runner]]:
    with running_karpy(crds, pools=[POOL]) as runner:
        yield crds, runner


def latest_revision(plane: ControlPlane, namespace: str, name: str) -> int:
    """Write a ConfigMap and return its resourceVersion: etcd's newest revision."""
    manifest = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"at": str(time.time())},
    }
    plane.kubectl("apply", "-f", "-", stdin=json.dumps(manifest))
    version = plane.kubectl(
        "get", "configmap", name, "-n", namespace, "-o", "jsonpath={.metadata.resourceVersion}"
    )
    return int(version)


def test_a_watch_gone_410_in_the_middle_of_a_scale_up_loses_no_pod(
    runner: tuple[ControlPlane, Runner], namespace: str
) -> None:
    plane, karpy = runner
    cluster = karpy.cluster
    plane.kubectl(
        "apply",
        "-f",
        "-",
        stdin=as_yaml(node_class(POOL), nodepool(POOL, ["c5.large"], capacity_types=("spot", "on-demand"))),
    )
    wait_until(lambda: cluster.nodepool(POOL) is not None, what="the NodePool in karpy's cache")
    relists_before = {kind: cluster.relists_after_gone(kind) for kind in ("Pod", "NodeClaim", "Node")}

    with NodeClaimWatch(plane, POOL) as watch:
        plane.kubectl("apply", "-f", "-", stdin=as_yaml(deployment(POOL, namespace, APP, REPLICAS)))

        def app_pending() -> bool:
            return any(pod.metadata.namespace == namespace for pod in cluster.pending_pods())

        # 1. karpy sees the first pods pending: its batch is open.
        wait_until(app_pending, timeout=30, interval=0.02, what="karpy to see a pending pod")
        # 2. Its watches are cut; the controllers go on with what they have.
        cluster.stop()
        cut_at = time.monotonic()
        time.sleep(3)  # the batch closes, NodeClaims are created, the ReplicaSet creates the rest
        # 3. etcd forgets what happened meanwhile: two writes, then compaction to the newest
        # revision, so no watch can resume from anything karpy saw.
        latest_revision(plane, namespace, "gap-marker")
        revision = latest_revision(plane, namespace, "gap-marker")
        plane.etcdctl("compact", str(revision))
        cluster.start()

        def relisted() -> bool:
            return all(cluster.relists_after_gone(kind) > relists_before[kind] for kind in relists_before)

        wait_until(relisted, timeout=30, what="karpy's informers to list again after 410 Gone")
        print(f"\nwatches cut for {time.monotonic() - cut_at:.1f}s; relisted after 410 Gone")

        def all_running() -> bool:
            return len(running_pods(plane, namespace, APP)) == REPLICAS

        wait_until(all_running, timeout=120, interval=0.5, what=f"{REPLICAS} pods Running")
        time.sleep(3)  # anything launched late would show up by now
        timeline = watch.snapshot()

    pods = get_items(plane, "pods", "-n", namespace, "-l", f"app={APP}")
    assert len(pods) == REPLICAS
    claims = pool_claims(plane, POOL)
    print(f"{len(pods)} pods Running on {len(claims)} NodeClaims ({len(timeline.created)} ever created)")
    # One NodeClaim per pod, each with its pod: none duplicated, none left empty.
    assert len(timeline.created) == REPLICAS, sorted(timeline.created)
    assert len(claims) == REPLICAS
    nodes = {claim["status"].get("nodeName") for claim in claims.values()}
    assert {pod["spec"]["nodeName"] for pod in pods} == nodes
    # karpy's caches agree with the server again.
    assert {claim.name for claim in cluster.nodeclaims() if claim.nodepool == POOL} == set(claims)
    assert not [pod for pod in cluster.pending_pods() if pod.metadata.namespace == namespace]
