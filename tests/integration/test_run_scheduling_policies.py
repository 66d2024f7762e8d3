"""``karpy run`` against the real control plane: MIN_VALUES_POLICY=BestEffort and PREFERENCE_POLICY=Ignore.

One runner with both of Karpenter's non-default policies. A pool that asks
for two instance types gets a pod only one type has room for: the pod runs,
and its NodeClaim on the API server says ``karpenter.sh/nodeclaim-min-values-relaxed:
"true"`` with the minValues lowered to one; a small pod's NodeClaim says
``"false"``. Three replicas that prefer not to share a node share one, as
PREFERENCE_POLICY=Ignore plans them. Under the defaults the first pod stays
pending and the replicas get a node each (tests/sim/test_scheduling_policies.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from karpy.controllers.provisioning import ProvisioningSettings
from karpy.run import RunSettings
from karpy.scheduling.policy import MIN_VALUES_RELAXED_ANNOTATION, SchedulingPolicy

from .conftest import ControlPlane, wait_until
from .karpy_run import (
    LABEL_INSTANCE_TYPE,
    as_yaml,
    deployment,
    node_class,
    nodepool,
    pool_claims,
    running_karpy,
    running_pods,
)

pytestmark = pytest.mark.integration

RELAXED = "it-min-values"
SPREAD = "it-preferences"
POLICY = SchedulingPolicy(min_values="BestEffort", preferences="Ignore")


@pytest.fixture
def runner(crds: ControlPlane) -> Iterator[ControlPlane]:
    settings = RunSettings(provisioning=ProvisioningSettings(scheduling=POLICY))
    with running_karpy(crds, settings, pools=[RELAXED, SPREAD]):
        yield crds


def min_values_pool() -> dict[str, Any]:
    pool = nodepool(RELAXED, ["m5.large", "m5.xlarge", "m5.2xlarge"], consolidate_after="1h")
    for requirement in pool["spec"]["template"]["spec"]["requirements"]:
        if requirement["key"] == LABEL_INSTANCE_TYPE:
            requirement["minValues"] = 2
    return pool


def spread_out(namespace: str) -> dict[str, Any]:
    app = deployment(SPREAD, namespace, SPREAD, 3, cpu="500m", memory="512Mi")
    app["spec"]["template"]["spec"]["affinity"] = {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {"app": SPREAD}},
                    },
                }
            ]
        }
    }
    return app


def test_both_policies_act_and_the_relaxed_nodeclaim_says_so(runner: ControlPlane, namespace: str) -> None:
    plane = runner

    def apply(*objects: dict[str, Any]) -> None:
        plane.kubectl("apply", "-f", "-", stdin=as_yaml(*objects))

    def wait_running(app: str, count: int) -> None:
        def running() -> bool:
            return len(running_pods(plane, namespace, app)) == count

        wait_until(running, timeout=120, what=f"{count} {app} pods Running")

    apply(
        node_class(RELAXED),
        min_values_pool(),
        node_class(SPREAD),
        nodepool(SPREAD, ["m5.large", "m5.xlarge"], consolidate_after="1h"),
        deployment(RELAXED, namespace, "small", 1, cpu="500m", memory="512Mi"),
        spread_out(namespace),
    )
    wait_running("small", 1)
    wait_running(SPREAD, 3)
    # 7 CPUs: only m5.2xlarge has room, and the pool asks for two types.
    apply(deployment(RELAXED, namespace, "big", 1, cpu="7"))
    wait_running("big", 1)
    pods = {pod["metadata"]["labels"]["app"]: pod for pod in running_pods(plane, namespace, "big")}
    pods.update({pod["metadata"]["labels"]["app"]: pod for pod in running_pods(plane, namespace, "small")})
    claims = pool_claims(plane, RELAXED)
    by_node = {claim["status"].get("nodeName"): claim for claim in claims.values()}
    big = by_node[pods["big"]["spec"]["nodeName"]]
    small = by_node[pods["small"]["spec"]["nodeName"]]
    assert big["metadata"]["annotations"][MIN_VALUES_RELAXED_ANNOTATION] == "true"
    assert big["metadata"]["labels"][LABEL_INSTANCE_TYPE] == "m5.2xlarge"
    [requirement] = [r for r in big["spec"]["requirements"] if r["key"] == LABEL_INSTANCE_TYPE]
    assert requirement["minValues"] == 1
    assert small["metadata"]["annotations"][MIN_VALUES_RELAXED_ANNOTATION] == "false"
    # The three replicas that prefer separate nodes share one.
    assert len({pod["spec"]["nodeName"] for pod in running_pods(plane, namespace, SPREAD)}) == 1
    assert len(pool_claims(plane, SPREAD)) == 1
