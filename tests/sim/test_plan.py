"""``karpy plan``: the diff of a NodePool change against the cluster, and its simulated consequence.

The cluster is a simulated one stopped at a moment (tests/sim/test_from_cluster.py's
``snapshot_of``); the consequence is read from the run that starts from it with the change
applied, as ``karpy plan`` runs it.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tests.sim.test_from_cluster import from_snapshot, seed_walkthrough, snapshot_of
from tests.support import run_cli

from karpy.api.manifest import LoadedObject, LoadResult
from karpy.api.nodeclaim import CONDITION_LAUNCHED, CONDITION_REGISTERED, NodeClaim
from karpy.api.nodepool import REASON_DRIFTED, Budget, NodePool
from karpy.api.requirements import LABEL_INSTANCE_TYPE, Requirement
from karpy.api.snapshot import ClusterSnapshot
from karpy.disruption.drift import REASON_REQUIREMENTS_DRIFTED
from karpy.sim.plan import (
    ACTION_CREATE,
    ACTION_UPDATE,
    FieldChange,
    Plan,
    diff_objects,
    observed_initialization_delay,
    observed_registration_delay,
    plan_json,
    plan_of,
    render_plan_text,
)
from karpy.sim.scenario import Scenario, Step
from karpy.sim.simulation import Simulation

TYPES = ["c5.large", "c5.xlarge", "m5.large", "m5.xlarge"]


def without_running_types(simulation: Simulation, pool: NodePool) -> NodePool:
    """``pool`` with the instance types its nodes run left out of its requirements: every node drifts."""
    running = {claim.instance_type for claim in simulation.nodeclaims()}
    allowed = [name for name in TYPES if name not in running]
    requirements = tuple(r for r in pool.template.requirements if r.key != LABEL_INSTANCE_TYPE)
    requirements += (Requirement.from_operator(LABEL_INSTANCE_TYPE, "In", allowed),)
    return dataclasses.replace(pool, template=dataclasses.replace(pool.template, requirements=requirements))


def planned(snapshot: ClusterSnapshot, *applied: object) -> Plan:
    """What ``karpy plan`` predicts for ``applied`` on the cluster ``snapshot`` read."""
    simulation, _ = from_snapshot(snapshot)
    step = Step(
        at=0.0,
        action="apply",
        objects=LoadResult(
            objects=[
                LoadedObject("test", "karpenter.sh/v1", type(obj).__name__, getattr(obj, "name", ""), obj)
                for obj in applied
            ]
        ),
    )
    simulation.run_scenario(Scenario(name="plan", duration=86400.0, steps=[step]))
    return plan_of(simulation, diff_objects(snapshot.objects, applied))


def test_the_diff_names_each_changed_field_by_key_and_new_objects() -> None:
    original = seed_walkthrough()
    pool = original.cluster.nodepool("default")
    assert pool is not None
    changed = without_running_types(original, pool)
    changed = dataclasses.replace(
        changed,
        template=dataclasses.replace(changed.template, labels={"team": "web"}),
        disruption=dataclasses.replace(changed.disruption, budgets=(Budget(nodes="1"),)),
    )
    other = dataclasses.replace(pool, metadata=pool.metadata.with_changes(name="batch", uid=""))
    changes = diff_objects(snapshot_of(original).objects, [changed, other, pool])
    assert [(c.kind, c.name, c.action) for c in changes] == [
        ("NodePool", "default", ACTION_UPDATE),
        ("NodePool", "batch", ACTION_CREATE),
    ]
    fields = {field.path: field for field in changes[0].fields}
    assert set(fields) == {
        f"template.requirements[{LABEL_INSTANCE_TYPE}]",
        "template.labels[team]",
        "disruption.budgets",
    }
    running = original.nodeclaims()[0].instance_type
    requirement = fields[f"template.requirements[{LABEL_INSTANCE_TYPE}]"]
    assert requirement.before is not None and running in requirement.before
    assert requirement.after is not None and running not in requirement.after
    assert fields["template.labels[team]"] == FieldChange("template.labels[team]", None, "web")
    assert fields["disruption.budgets"].after == "[{nodes: 1}]"
    # The cluster's own pool applied again is no change: defaults read the same on both sides.
    assert diff_objects(snapshot_of(original).objects, [pool]) == []


def test_a_requirement_change_replaces_every_node_one_at_a_time_and_moves_their_pods() -> None:
    original = seed_walkthrough()
    pool = original.cluster.nodepool("default")
    assert pool is not None
    nodes = {claim.name for claim in original.nodeclaims()}
    pods = {pod.key for pod in original.pods()}
    plan = planned(snapshot_of(original), without_running_types(original, pool))

    # Both nodes drift at once, for the requirement, and are replaced for drift.
    assert {d.nodeclaim for d in plan.disruptions} == nodes
    assert all(
        d.drift_reason == REASON_REQUIREMENTS_DRIFTED and d.drifted_at == plan.start for d in plan.disruptions
    )
    assert all(d.reason == REASON_DRIFTED for d in plan.disruptions)
    # The default budget (10% of 2 nodes: 1) lets one go at a time: the second begins after the first is gone.
    first, second = plan.disruptions
    assert first.deleted_at is not None and second.disrupted_at >= first.deleted_at
    assert first.disrupted_at < first.deleting_at <= first.deleted_at
    # A replacement per node, launched when its disruption began, of a type the pool now allows.
    assert [launch.created_at for launch in plan.launches] == [d.disrupted_at for d in plan.disruptions]
    assert all(
        launch.instance_type not in {d.instance_type for d in plan.disruptions} for launch in plan.launches
    )
    # Every pod of the first node is evicted and made again on a node that stays; none left pending.
    evicted = {e.pod for d in plan.disruptions for e in d.evictions}
    assert {e.pod for e in first.evictions} <= pods
    assert evicted
    assert all(e.replaced_by and e.landed_on for d in plan.disruptions for e in d.evictions)
    # The last node's pods go to the replacements: no node that is replaced is left to take them.
    assert not {e.landed_on for e in second.evictions} & {d.node for d in plan.disruptions}
    assert plan.pending == {}
    assert plan.steady
    assert plan.price_before == pytest.approx(sum(d.price_per_hour for d in plan.disruptions))
    assert plan.price_after == pytest.approx(sum(launch.price_per_hour for launch in plan.launches))

    text = render_plan_text(plan)
    assert "~ NodePool default (update)" in text
    assert f"disrupt   {first.nodeclaim}" in text and f"{REASON_DRIFTED};" in text
    assert text.index(f"disrupt   {first.nodeclaim}") < text.index(f"disrupt   {second.nodeclaim}")
    document = plan_json(plan)
    assert [d["nodeclaim"] for d in document["disruptions"]] == [first.nodeclaim, second.nodeclaim]
    assert document["disruptions"][0]["driftReason"] == REASON_REQUIREMENTS_DRIFTED
    assert document["disruptions"][0]["disruptedAt"] > 0


def test_a_budget_allowing_no_drift_leaves_the_nodes_drifted_and_running() -> None:
    original = seed_walkthrough()
    pool = original.cluster.nodepool("default")
    assert pool is not None
    changed = without_running_types(original, pool)
    changed = dataclasses.replace(
        changed,
        disruption=dataclasses.replace(
            changed.disruption, budgets=(Budget(nodes="0", reasons=(REASON_DRIFTED,)), Budget())
        ),
    )
    plan = planned(snapshot_of(original), changed)
    assert plan.disruptions == [] and plan.launches == []
    assert {record.name for record in plan.drifted} == {claim.name for claim in original.nodeclaims()}
    assert plan.price_before == pytest.approx(plan.price_after)
    assert "not replaced within the run" in render_plan_text(plan)


def test_karpy_plan_reads_the_cluster_and_prints_the_plan(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = seed_walkthrough()
    running = {claim.instance_type for claim in original.nodeclaims()}
    allowed = ", ".join(f'"{name}"' for name in TYPES if name not in running)
    manifest = tmp_path / "nodepool.yaml"
    manifest.write_text(
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n"
        "  template:\n    spec:\n      requirements:\n"
        '        - {key: kubernetes.io/arch, operator: In, values: ["amd64"]}\n'
        '        - {key: kubernetes.io/os, operator: In, values: ["linux"]}\n'
        '        - {key: karpenter.sh/capacity-type, operator: In, values: ["spot", "on-demand"]}\n'
        f"        - {{key: node.kubernetes.io/instance-type, operator: In, values: [{allowed}]}}\n"
        "      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n"
        "      expireAfter: 720h\n"
        "  limits: {cpu: 100, memory: 400Gi}\n"
        "  disruption: {consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 30s}\n"
    )
    snapshot = snapshot_of(original)
    monkeypatch.setattr("karpy.cli._read_cluster", lambda kubeconfig: snapshot)
    status, out, err = run_cli(capsys, "plan", str(manifest), "-o", "json")
    assert status == 0, err
    document = json.loads(out)
    assert [c["name"] for c in document["changes"]] == ["default"]
    paths = [f["path"] for f in document["changes"][0]["fields"]]
    assert paths == [f"template.requirements[{LABEL_INSTANCE_TYPE}]"]
    assert {d["nodeclaim"] for d in document["disruptions"]} == {c.name for c in original.nodeclaims()}
    assert all(d["reason"] == REASON_DRIFTED for d in document["disruptions"])
    status, out, _ = run_cli(capsys, "plan", str(manifest))
    assert status == 0 and "Predicted consequence" in out and "$/h before -> after" in out


def test_karpy_plan_says_in_one_line_that_the_cluster_cannot_be_read(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    manifest = tmp_path / "nodepool.yaml"
    manifest.write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n")
    status, out, err = run_cli(capsys, "plan", str(manifest), "--kubeconfig", str(tmp_path / "missing"))
    assert status == 2 and out == ""
    assert err.startswith("karpy: plan: no cluster to run against:")
    assert len(err.strip().splitlines()) == 1


def test_replacements_wait_for_the_end_of_a_budget_window_that_allows_no_drift() -> None:
    """A window of ``nodes: 0`` for Drifted opened at the minute of the read and lasting an hour."""
    original = seed_walkthrough()
    pool = original.cluster.nodepool("default")
    assert pool is not None
    read_at = datetime.fromtimestamp(original.clock.now(), UTC)
    window_end = read_at.replace(second=0, microsecond=0).timestamp() + 3600.0
    changed = without_running_types(original, pool)
    frozen = Budget(
        nodes="0",
        schedule=f"{read_at.minute} {read_at.hour} * * *",
        duration=3600.0,
        reasons=(REASON_DRIFTED,),
    )
    changed = dataclasses.replace(
        changed, disruption=dataclasses.replace(changed.disruption, budgets=(frozen, Budget()))
    )
    plan = planned(snapshot_of(original), changed)
    assert len(plan.disruptions) == 2
    first = plan.disruptions[0]
    assert first.drifted_at == plan.start
    # Not before the window closes; then as soon as a pass and the command's re-check allow.
    assert window_end <= first.disrupted_at <= window_end + 60.0


def test_the_registration_and_initialization_delays_are_those_the_clusters_nodes_took() -> None:
    original = seed_walkthrough()
    objects = snapshot_of(original).objects
    # The simulated cloud's nodes register 30 s after launch: so the cluster read says.
    assert observed_registration_delay(objects) == pytest.approx(30.0)
    # And are ready (initialized) 5 s after they register, the simulated kubelet's delay.
    assert observed_initialization_delay(objects) == pytest.approx(5.0)
    quick: list[object] = []
    for obj in objects:
        if isinstance(obj, NodeClaim):
            launched = obj.condition(CONDITION_LAUNCHED)
            assert launched is not None
            # Registered 2 s after launch, as a kwok node is.
            conditions = tuple(
                dataclasses.replace(c, last_transition_time=launched.last_transition_time + 2.0)
                if c.type == CONDITION_REGISTERED
                else c
                for c in obj.status.conditions
            )
            quick.append(obj.with_status(conditions=conditions))
        else:
            quick.append(obj)
    assert observed_registration_delay(quick) == pytest.approx(2.0)
    assert observed_registration_delay([]) is None


def test_karpy_plan_says_the_pools_and_classes_the_files_leave_out_are_left_as_they_are(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a new pool is given: the cluster's own pool and class are kept, and the plan says so."""
    original = seed_walkthrough()
    manifest = tmp_path / "batch.yaml"
    manifest.write_text(
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: batch}\nspec:\n"
        "  template:\n    spec:\n"
        "      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n"
        "      requirements: []\n"
        "      taints: [{key: batch, effect: NoSchedule}]\n"  # the cluster's pods stay where they are
    )
    snapshot = snapshot_of(original)
    monkeypatch.setattr("karpy.cli._read_cluster", lambda kubeconfig: snapshot)
    status, out, err = run_cli(capsys, "plan", str(manifest), "-o", "json")
    assert status == 0, err
    document = json.loads(out)
    assert [(c["kind"], c["name"], c["action"]) for c in document["changes"]] == [
        ("NodePool", "batch", ACTION_CREATE)
    ]
    assert document["leftAsTheyAre"] == [
        {"kind": "EC2NodeClass", "name": "default"},
        {"kind": "NodePool", "name": "default"},
    ]
    # Left out is not deleted: the pool's nodes keep running.
    assert document["disruptions"] == [] and document["driftedNotReplaced"] == []
    status, out, _ = run_cli(capsys, "plan", str(manifest))
    assert status == 0
    lines = out.splitlines()
    left = lines.index("Left as they are (in the cluster, not in the files; a plan never deletes):")
    assert lines[left + 1 : left + 3] == ["    EC2NodeClass default", "    NodePool default"]
