"""``karpy run`` sizes a new node's DaemonSet pods as admission makes them, on the real control plane.

Karpenter's regression specs "should account for LimitRange Default (and
DefaultRequest) on daemonSet pods for resources", in the test's namespace: a
LimitRange with container defaults of 2 CPUs and 1Gi, a high-priority
DaemonSet whose template sets only a memory limit, and one replica asking for
4 bytes of memory. The API server's LimitRanger gives both pods 2 CPUs. Sized
from the template, the DaemonSet pod asks no CPU, a 4-CPU node looks big
enough, the DaemonSet pod takes its room first, and the app pod is pending
again: karpy once launched 774 NodeClaims in 15 minutes this way. Now one node
holds both pods and no other is launched.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import ControlPlane, wait_until
from .karpy_run import (
    LABEL_NODEPOOL,
    PAUSE_IMAGE,
    NodeClaimWatch,
    as_yaml,
    deployment,
    node_class,
    nodepool,
    running_karpy,
    running_pods,
)

pytestmark = pytest.mark.integration

POOL = "it-limitrange"
PRIORITY_CLASS = "it-limitrange-daemonsets"
APP = "large-app"
DAEMON = "daemonset"
# Both pods fit an 8-CPU type; a 4-CPU one (3.92 allocatable) is too small for 2 + 2 CPUs.
INSTANCE_TYPES = ["c5.xlarge", "m5.xlarge", "c5.2xlarge", "m5.2xlarge"]
# Long enough for a launch loop to show (a kwok node is up within seconds, and an
# empty one goes at once with consolidateAfter 0s).
QUIET = 30.0


@pytest.fixture
def runner(crds: ControlPlane) -> Iterator[ControlPlane]:
    try:
        with running_karpy(crds, pools=[POOL]):
            yield crds
    finally:
        crds.kubectl("delete", "priorityclass", PRIORITY_CLASS, "--ignore-not-found")


def limit_range(namespace: str, field: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {"name": "limitrange", "namespace": namespace},
        "spec": {"limits": [{"type": "Container", field: {"cpu": "2", "memory": "1Gi"}}]},
    }


def daemonset(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": DAEMON, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": DAEMON}},
            "template": {
                "metadata": {"labels": {"app": DAEMON}},
                "spec": {
                    "priorityClassName": PRIORITY_CLASS,
                    "terminationGracePeriodSeconds": 0,
                    # Only on this pool's nodes: other tests' fake nodes share the control plane.
                    "nodeSelector": {LABEL_NODEPOOL: POOL},
                    "containers": [
                        {"name": "pause", "image": PAUSE_IMAGE, "resources": {"limits": {"memory": "1Gi"}}}
                    ],
                },
            },
        },
    }


@pytest.mark.parametrize("field", ["default", "defaultRequest"])
def test_one_node_holds_the_daemonset_pod_and_the_app_pod_under_a_limitrange(
    runner: ControlPlane, namespace: str, field: str
) -> None:
    plane = runner
    app = deployment(POOL, namespace, APP, 1, memory="4")
    del app["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"]
    priority_class = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": PRIORITY_CLASS},
        "value": 10000000,
    }
    with NodeClaimWatch(plane, POOL) as watch:
        plane.kubectl(
            "apply",
            "-f",
            "-",
            stdin=as_yaml(
                node_class(POOL),
                nodepool(
                    POOL,
                    INSTANCE_TYPES,
                    consolidation_policy="WhenEmptyOrUnderutilized",
                    consolidate_after="0s",
                ),
                limit_range(namespace, field),
                priority_class,
                daemonset(namespace),
                app,
            ),
        )

        def both_on_one_node() -> str | None:
            (app_pods, daemon_pods) = (running_pods(plane, namespace, name) for name in (APP, DAEMON))
            nodes = {pod["spec"]["nodeName"] for pod in (*app_pods, *daemon_pods)}
            return nodes.pop() if len(app_pods) == 1 and len(daemon_pods) == 1 and len(nodes) == 1 else None

        node = wait_until(both_on_one_node, timeout=90, what="the app pod and the DaemonSet pod on one node")
        time.sleep(QUIET)
        timeline = watch.snapshot()
    # The pods run as the LimitRanger made them: 2 CPUs each.
    for name in (APP, DAEMON):
        (pod,) = running_pods(plane, namespace, name)
        assert pod["spec"]["nodeName"] == node
        assert pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "2"
    assert len(timeline.created) == 1, f"NodeClaims launched: {sorted(timeline.created)}"
    assert timeline.gone == {}
