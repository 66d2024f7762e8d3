"""``karpy plan`` on the control plane: the predicted replacements are those ``karpy run`` then makes.

A cluster is built by ``karpy run`` as tests/integration/test_simulate_from_cluster.py
builds it: the seed walkthrough's NodePool (c5/m5 large and xlarge, spot or on-demand)
with a Deployment of five 1-CPU pods and a second of three. Once karpy has settled,
``karpy plan`` runs as a process of its own with a NodePool whose instance-type
requirement leaves out every type the pool's nodes run: every node drifts. Then the
same NodePool is applied for real. The NodeClaims ``karpy run`` replaces must be the
predicted ones, begun in the predicted order, each gone within a fifth of the predicted
time (and the few seconds a watch event and a poll take).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from karpy.controllers.disruption import POLL_PERIOD
from karpy.run import Runner

from .conftest import ControlPlane, wait_until
from .karpy_run import (
    LABEL_ARCH,
    LABEL_INSTANCE_TYPE,
    LABEL_OS,
    NodeClaimWatch,
    as_yaml,
    deployment,
    karpy_json,
    node_class,
    nodepool,
    requirement,
    running_karpy,
)
from .test_simulate_from_cluster import running, settled

pytestmark = pytest.mark.integration

NODEPOOL = "it-plan"
FIRST, SECOND = "it-plan-web", "it-plan-batch"
TYPES = ["c5.large", "c5.xlarge", "m5.large", "m5.xlarge"]
CONSOLIDATE_AFTER = 30.0


def pool(instance_types: list[str]) -> dict[str, Any]:
    return nodepool(
        NODEPOOL,
        instance_types,
        capacity_types=("spot", "on-demand"),
        requirements=[requirement(LABEL_ARCH, "amd64"), requirement(LABEL_OS, "linux")],
        consolidation_policy="WhenEmptyOrUnderutilized",
        consolidate_after=f"{CONSOLIDATE_AFTER:.0f}s",
    )


@pytest.fixture
def runner(crds: ControlPlane) -> Iterator[Runner]:
    with running_karpy(crds, pools=[NODEPOOL]) as karpy:
        yield karpy


def test_plan_predicts_the_nodes_a_requirement_change_replaces_their_order_and_times(
    runner: Runner, crds: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    plane = crds
    with NodeClaimWatch(plane, NODEPOOL) as watch:
        plane.kubectl("apply", "-f", "-", stdin=as_yaml(node_class(NODEPOOL), pool(TYPES)))
        plane.kubectl(
            "apply",
            "-f",
            "-",
            stdin=as_yaml(
                deployment(NODEPOOL, namespace, FIRST, 5), deployment(NODEPOOL, namespace, SECOND, 3)
            ),
        )
        wait_until(lambda: running(plane, namespace, FIRST, 5), timeout=120, what="first pods")
        wait_until(lambda: running(plane, namespace, SECOND, 3), timeout=120, what="second pods")
        wait_until(lambda: settled(watch, CONSOLIDATE_AFTER + 15), timeout=600, what="the pool settled")
        timeline = watch.snapshot()
        before = set(timeline.alive)
        in_use = {timeline.labels[name].get(LABEL_INSTANCE_TYPE, "") for name in before}
        allowed = [name for name in TYPES if name not in in_use]
        assert allowed, f"the pool's nodes run every type: {sorted(in_use)}"
        manifest = tmp_path / "nodepool.yaml"
        manifest.write_text(as_yaml(pool(allowed)))

        planned = karpy_json(plane.kubeconfig, "plan", str(manifest))
        changes = planned["changes"]
        assert [(c["name"], [f["path"] for f in c["fields"]]) for c in changes] == [
            (NODEPOOL, [f"template.requirements[{LABEL_INSTANCE_TYPE}]"])
        ]
        predicted = [d for d in planned["disruptions"] if d["nodeclaim"] in before]
        print(
            "\npredicted: "
            + ", ".join(f"{d['nodeclaim']} {d['reason']} gone at {d['deletedAt']}s" for d in predicted)
        )
        assert {d["nodeclaim"] for d in predicted} == before
        assert all(d["reason"] == "Drifted" and d["driftReason"] == "RequirementsDrifted" for d in predicted)

        applied_at = time.time()
        plane.kubectl("apply", "-f", str(manifest))
        last = max(d["deletedAt"] for d in predicted)
        wait_until(
            lambda: before <= set(watch.snapshot().gone) and settled(watch, 20),
            timeout=max(600.0, 3 * last),
            what="every drifted node replaced",
        )
        timeline = watch.snapshot()
        replaced = sorted(before, key=lambda name: timeline.deleting.get(name, timeline.gone[name]))
        print(
            "karpy run: "
            + ", ".join(f"{name} gone at {timeline.gone[name] - applied_at:.0f}s" for name in replaced)
        )
        # The same nodes, begun in the same order.
        assert replaced == [d["nodeclaim"] for d in sorted(predicted, key=lambda d: d["drainedFrom"])]
        for disruption in predicted:
            actual = timeline.gone[disruption["nodeclaim"]] - applied_at
            expected = disruption["deletedAt"]
            # Within a fifth, plus one disruption cycle: the plan starts its 10 s passes at the read,
            # the running controller wherever its own cycle stood, which no reading can tell.
            assert abs(actual - expected) <= 0.2 * expected + POLL_PERIOD, (
                disruption["nodeclaim"],
                actual,
                expected,
            )
    plane.kubectl(
        "delete", "deployment", FIRST, SECOND, "-n", namespace, "--ignore-not-found", "--wait=false"
    )
