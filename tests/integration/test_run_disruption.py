"""``karpy run`` against the real control plane: drift and do-not-disrupt, compared with the simulator.

Each test applies a KWOKNodeClass, a NodePool and workloads of its own (own
names, own pod labels, pods selecting the test's NodePool, so the session's
other tests and their nodes never mix in), lets karpy bring the pods up, and
then changes the NodePool's template (a label on its nodes): every NodeClaim
of the pool is marked Drifted, and the disruption controller replaces them
one at a time, as the default budget allows, each replacement initialized
before its old node is drained.

- **Drift**: every old node is replaced; a PodDisruptionBudget keeps one of
  the two pods running throughout, and the timeline shows that each old node
  was deleted only after a replacement was up.
- **Node class drift**: a KWOKNodeClass switched to Karpenter's kwok catalog
  (``karpy.dev/kwok-instance-types``) marks its nodes Drifted with
  ``NodeClassDrift``, and they are replaced by nodes of the new catalog.
- **do-not-disrupt**: the node of a pod annotated ``karpenter.sh/do-not-disrupt``
  stays, Drifted but blocked, with a ``DisruptionBlocked`` Event saying why;
  the other node of the pool is replaced all the same.

The same manifests then run through ``karpy simulate`` (a Scenario applying
the changed NodePool later), and the outcome must be the same: the same
NodeClaims replaced or kept, on the same instance types, every pod running.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from karpy.cli import main as karpy_cli

from .conftest import ControlPlane, wait_until
from .karpy_run import (
    LABEL_GENERATION,
    LABEL_INSTANCE_TYPE,
    NodeClaimWatch,
    Timeline,
    as_yaml,
    condition,
    deployment,
    get_items,
    node_class,
    nodepool,
    pod_disruption_budget,
    pool_claims,
    running_karpy,
    running_pods,
    wait_for,
)

pytestmark = pytest.mark.integration

INSTANCE_TYPE = "c5.large"  # 2 vCPU: one 1-CPU pod per node
DRIFT_POOL = "it-drift"
DND_POOL = "it-dnd"
CLASS_POOL = "it-kwok-class"
KARPENTER_TYPE = "c-2x-amd64-linux"  # Karpenter's kwok catalog: 2 CPUs, one 1-CPU pod per node


@pytest.fixture
def runner(crds: ControlPlane) -> Iterator[ControlPlane]:
    with running_karpy(crds, pools=[DRIFT_POOL, DND_POOL, CLASS_POOL]):
        yield crds


def pool(name: str, generation: int) -> dict[str, Any]:
    # consolidateAfter 10m: a replacement is empty for a moment before its pods land.
    return nodepool(name, [INSTANCE_TYPE], generation=generation, consolidate_after="10m")


def simulate(tmp_path: Path, capsys: pytest.CaptureFixture[str], before: str, after: str) -> dict[str, Any]:
    """``karpy simulate --output json`` on a Scenario: ``before`` at 0s, ``after`` at 5m."""
    (tmp_path / "before.yaml").write_text(before)
    (tmp_path / "after.yaml").write_text(after)
    scenario = {
        "apiVersion": "karpy.dev/v1alpha1",
        "kind": "Scenario",
        "metadata": {"name": tmp_path.name},
        "spec": {
            "duration": "1h",
            "steps": [
                {"at": "0s", "apply": {"files": ["before.yaml"]}},
                {"at": "5m", "apply": {"files": ["after.yaml"]}},
            ],
        },
    }
    (tmp_path / "scenario.yaml").write_text(json.dumps(scenario))
    capsys.readouterr()
    code = karpy_cli(["simulate", "--output", "json", str(tmp_path / "scenario.yaml")])
    out = capsys.readouterr().out
    assert code == 0, out
    result = json.loads(out)
    assert isinstance(result, dict)
    assert result["errors"] == [] and result["summary"]["controllerErrors"] == []
    return result


def sim_claims(result: dict[str, Any], *, before: bool) -> list[dict[str, Any]]:
    change = 300.0
    return [c for c in result["nodeclaims"] if (c["createdAt"] < change) == before]


def print_timeline(
    capsys: pytest.CaptureFixture[str], title: str, timeline: Timeline, changed_at: float, *extra: str
) -> None:
    """Print the timeline to the terminal (``capsys`` would otherwise keep it, as it keeps the CLI's)."""

    def at(moment: float | None) -> str:
        return "-" if moment is None else f"{moment - changed_at:+6.1f}s"

    lines = [f"\n{title} (seconds after the NodePool change)"]
    for name in sorted(timeline.created, key=lambda n: timeline.created[n]):
        lines.append(
            f"  {name:<16} gen {timeline.labels.get(name, {}).get(LABEL_GENERATION, '?')}"
            f"  created {at(timeline.created[name])}  initialized {at(timeline.initialized.get(name))}"
            f"  drifted {at(timeline.drifted.get(name))}  deleting {at(timeline.deleting.get(name))}"
            f"  gone {at(timeline.gone.get(name))}"
        )
    with capsys.disabled():
        print("\n".join([*lines, *extra]))


def test_a_template_change_drifts_every_node_and_each_is_replaced_before_it_goes(
    runner: ControlPlane, namespace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plane = runner
    app = "drift-app"
    workload = [deployment(DRIFT_POOL, namespace, app, 2), pod_disruption_budget(namespace, app, 1)]
    before = as_yaml(node_class(DRIFT_POOL), pool(DRIFT_POOL, 1), *workload)
    after = as_yaml(pool(DRIFT_POOL, 2))
    plane.kubectl("apply", "-f", "-", stdin=before)
    wait_until(lambda: len(running_pods(plane, namespace, app)) == 2, timeout=60, what="2 pods Running")
    original = pool_claims(plane, DRIFT_POOL)
    assert len(original) == 2

    with NodeClaimWatch(plane, DRIFT_POOL) as watch:
        changed_at = time.time()
        plane.kubectl("apply", "-f", "-", stdin=after)

        def replaced() -> bool:
            seen = watch.snapshot()
            current = seen.alive
            return (
                not current & original.keys()
                and len(current) == 2
                and all(name in seen.initialized for name in current)
                and len(running_pods(plane, namespace, app)) == 2
            )

        fewest_running = wait_for(
            "both nodes replaced",
            replaced,
            timeout=180,
            running=lambda: len(running_pods(plane, namespace, app)),
        )
        elapsed = time.time() - changed_at
        timeline = watch.snapshot()
    print_timeline(
        capsys,
        "drift",
        timeline,
        changed_at,
        f"NodePool changed -> both nodes replaced, pods Running: {elapsed:.1f}s",
    )

    # Both old NodeClaims were marked Drifted, then deleted; the new ones carry the new label.
    assert set(timeline.drifted) >= original.keys()
    new = [name for name in timeline.created if name not in original]
    assert len(new) == 2
    assert all(timeline.labels[name].get(LABEL_GENERATION) == "2" for name in new)
    assert all(timeline.labels[name].get(LABEL_INSTANCE_TYPE) == INSTANCE_TYPE for name in new)
    # The k-th old node was deleted only once k replacements had initialized.
    for rank, old in enumerate(sorted(original, key=lambda name: timeline.deleting[name]), start=1):
        ready_before = [name for name in new if timeline.initialized[name] <= timeline.deleting[old]]
        assert len(ready_before) >= rank, f"{old} deleted before its replacement was up"
    # The PodDisruptionBudget held: a pod kept running all along.
    assert fewest_running >= 1
    pods = running_pods(plane, namespace, app)
    assert {pod["spec"]["nodeName"] for pod in pods} <= set(new)

    # The simulator, on the same manifests, does the same.
    result = simulate(tmp_path, capsys, before, after)
    old_sim, new_sim = sim_claims(result, before=True), sim_claims(result, before=False)
    assert len(old_sim) == len(original) and len(new_sim) == len(new)
    assert all(claim["deletedAt"] is not None for claim in old_sim)
    assert all(claim["deletedAt"] is None and claim["readyAt"] is not None for claim in new_sim)
    assert {claim["instanceType"] for claim in result["nodeclaims"]} == {INSTANCE_TYPE}
    for rank, old_claim in enumerate(sorted(old_sim, key=lambda c: c["deletedAt"]), start=1):
        assert sum(1 for c in new_sim if c["readyAt"] <= old_claim["deletedAt"]) >= rank
    sim_pods = [p for p in result["pods"] if p["name"].startswith(f"{app}-") and p["phase"] == "Running"]
    assert len(sim_pods) == 2
    drifted_sim = {e["object"] for e in result["events"] if e["reason"] == "Drifted"}
    assert drifted_sim == {f"NodeClaim/{claim['name']}" for claim in old_sim}


def test_a_do_not_disrupt_pod_keeps_its_drifted_node_while_the_others_are_replaced(
    runner: ControlPlane, namespace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plane = runner
    protected, free = "dnd-web", "dnd-api"
    workload = [
        deployment(DND_POOL, namespace, protected, 1, do_not_disrupt=True),
        deployment(DND_POOL, namespace, free, 1),
    ]
    before = as_yaml(node_class(DND_POOL), pool(DND_POOL, 1), *workload)
    after = as_yaml(pool(DND_POOL, 2))
    plane.kubectl("apply", "-f", "-", stdin=before)

    def both_running() -> dict[str, dict[str, Any]] | None:
        pods = {app: running_pods(plane, namespace, app) for app in (protected, free)}
        if all(len(found) == 1 for found in pods.values()):
            return {app: found[0] for app, found in pods.items()}
        return None

    pods = wait_until(both_running, timeout=60, what="both pods Running")
    protected_node = pods[protected]["spec"]["nodeName"]
    free_node = pods[free]["spec"]["nodeName"]
    assert protected_node != free_node
    by_node = {claim["status"]["nodeName"]: name for name, claim in pool_claims(plane, DND_POOL).items()}
    protected_claim, free_claim = by_node[protected_node], by_node[free_node]

    with NodeClaimWatch(plane, DND_POOL) as watch:
        changed_at = time.time()
        plane.kubectl("apply", "-f", "-", stdin=after)

        def free_replaced() -> bool:
            seen = watch.snapshot()
            current = seen.alive
            return (
                free_claim not in current
                and protected_claim in seen.drifted
                and len(current) == 2
                and all(name in seen.initialized for name in current)
                and len(running_pods(plane, namespace, free)) == 1
            )

        wait_for("the other node replaced", free_replaced, timeout=180, running=lambda: 0)
        # Two passes more (one runs at least every 10 s): the protected node is still there.
        time.sleep(21)
        timeline = watch.snapshot()
    print_timeline(capsys, "do-not-disrupt", timeline, changed_at)

    claims = pool_claims(plane, DND_POOL)
    assert protected_claim in claims and protected_claim not in timeline.deleting
    assert condition(claims[protected_claim], "Drifted").get("status") == "True"
    still = running_pods(plane, namespace, protected)
    assert [pod["metadata"]["name"] for pod in still] == [pods[protected]["metadata"]["name"]]
    assert still[0]["spec"]["nodeName"] == protected_node
    # The other node went, replaced by one with the new label.
    replacements = [name for name in claims if name != protected_claim]
    assert len(replacements) == 1
    assert claims[replacements[0]]["metadata"]["labels"].get(LABEL_GENERATION) == "2"
    assert timeline.initialized[replacements[0]] <= timeline.deleting[free_claim]
    # An Event on the protected NodeClaim says why it stays.
    events = get_items(
        plane, "events", "-n", "default", "--field-selector", f"involvedObject.name={protected_claim}"
    )
    blocked = [event["message"] for event in events if event.get("reason") == "DisruptionBlocked"]
    assert any("do-not-disrupt" in message and protected in message for message in blocked), blocked

    # The simulator, on the same manifests, keeps the same node and replaces the other.
    result = simulate(tmp_path, capsys, before, after)
    old_sim, new_sim = sim_claims(result, before=True), sim_claims(result, before=False)
    assert len(old_sim) == 2 and len(new_sim) == 1
    web_pod = next(p for p in result["pods"] if p["name"].startswith(f"{protected}-"))
    kept = [claim for claim in old_sim if claim["deletedAt"] is None]
    assert [claim["node"] for claim in kept] == [web_pod["node"]]
    assert web_pod["phase"] == "Running"
    sim_blocked = [
        event["message"]
        for event in result["events"]
        if event["reason"] == "DisruptionBlocked" and event["object"] == f"NodeClaim/{kept[0]['name']}"
    ]
    assert any("do-not-disrupt" in message for message in sim_blocked)


def test_a_kwok_class_switched_to_another_catalog_drifts_its_nodes_onto_the_new_one(
    runner: ControlPlane, namespace: str
) -> None:
    plane = runner
    app = "class-app"
    both_catalogs = nodepool(CLASS_POOL, [INSTANCE_TYPE, KARPENTER_TYPE], consolidate_after="10m")
    kwok_class = node_class(CLASS_POOL)
    kwok_class["metadata"]["annotations"] = {"karpy.dev/kwok-instance-types": "aws"}
    plane.kubectl(
        "apply",
        "-f",
        "-",
        stdin=as_yaml(kwok_class, both_catalogs, deployment(CLASS_POOL, namespace, app, 2)),
    )
    wait_until(lambda: len(running_pods(plane, namespace, app)) == 2, timeout=60, what="2 pods Running")
    original = pool_claims(plane, CLASS_POOL)
    assert {claim["metadata"]["labels"][LABEL_INSTANCE_TYPE] for claim in original.values()} == {
        INSTANCE_TYPE
    }
    assert all(
        "karpy.dev/kwoknodeclass-hash" in claim["metadata"]["annotations"] for claim in original.values()
    )

    plane.kubectl(
        "annotate", "kwoknodeclass", CLASS_POOL, "--overwrite", "karpy.dev/kwok-instance-types=karpenter"
    )
    reasons: set[str] = set()

    def replaced() -> bool:
        claims = pool_claims(plane, CLASS_POOL)
        reasons.update(condition(claim, "Drifted").get("reason", "") for claim in claims.values())
        types = {claim["metadata"]["labels"].get(LABEL_INSTANCE_TYPE) for claim in claims.values()}
        return not original.keys() & claims.keys() and len(claims) == 2 and types == {KARPENTER_TYPE}

    wait_until(replaced, timeout=180, what="both nodes replaced by Karpenter's kwok types")
    wait_until(lambda: len(running_pods(plane, namespace, app)) == 2, timeout=60, what="2 pods Running again")
    assert "NodeClassDrift" in reasons, reasons
