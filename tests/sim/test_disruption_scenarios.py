"""Disruption scenarios: readable scenario files (tests/data/scenarios) plus assertions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support import DATA

from karpy.api.core import Pod
from karpy.disruption import decision
from karpy.disruption.drift import NODECLASS_DRIFT_MESSAGES
from karpy.disruption.method import Candidate
from karpy.disruption.nodeclass_drift import AMI_DRIFT, NODECLASS_DRIFT, SECURITY_GROUP_DRIFT, SUBNET_DRIFT
from karpy.sim.scenario import load_inputs
from karpy.sim.simulation import Simulation

SCENARIOS = DATA / "scenarios"


def run(path: Path) -> Simulation:
    scenario, problems = load_inputs([path])
    assert problems.errors == []
    simulation = Simulation()
    simulation.run_scenario(scenario)
    assert simulation.runtime.errors == []
    return simulation


def at(simulation: Simulation, seconds: float | None) -> float | None:
    return None if seconds is None else seconds - simulation.clock.start


def app_pods_running(simulation: Simulation) -> int:
    return sum(1 for pod in simulation.pods() if pod.phase == "Running" and not pod.is_daemonset_pod)


def test_a_template_change_drifts_the_node_and_it_is_replaced_before_it_goes() -> None:
    simulation = run(SCENARIOS / "drift" / "scenario.yaml")
    records = simulation.recorder.nodeclaims
    old = [r for r in records.values() if r.created_at - simulation.clock.start < 60]
    new = [r for r in records.values() if r.created_at - simulation.clock.start >= 600]
    assert len(old) == 1 and len(new) == 1
    assert old[0].deleted_at is not None and new[0].ready_at is not None
    # The replacement was ready before the drifted node was deleted.
    assert new[0].ready_at <= old[0].deleted_at
    live = simulation.nodeclaims()
    assert [claim.metadata.labels.get("team") for claim in live] == ["payments"]
    assert app_pods_running(simulation) == 3
    assert "Drifted" in {event.reason for event in simulation.cluster.events}


def test_a_drifted_node_whose_replacement_never_registers_stays_and_serves() -> None:
    scenario, _ = load_inputs([SCENARIOS / "drift" / "scenario-replacement-never-registers.yaml"])
    simulation = Simulation()
    # Stop just after the first replacement was given up (15 minutes after it was
    # launched at 10m25s: the first pass after the change at 10m finds the drift at 10m10s)
    # and before the next attempt, 15 s of re-checking later.
    scenario.duration = 25 * 60 + 30
    simulation.run_scenario(scenario)
    original = min(simulation.recorder.nodeclaims.values(), key=lambda r: r.created_at)
    assert original.deleted_at is None, "the drifted node went without a working replacement"
    assert app_pods_running(simulation) == 3
    reasons = [event.reason for event in simulation.cluster.events]
    assert "DisruptionFailed" in reasons and "FailedRegistration" in reasons
    # The rolled-back node is schedulable again.
    node = simulation.cluster.node(original.node)
    assert node is not None and all(taint.key != "karpenter.sh/disrupted" for taint in node.taints)


def test_once_replacements_register_again_the_drift_goes_through() -> None:
    simulation = run(SCENARIOS / "drift" / "scenario-replacement-never-registers.yaml")
    original = min(simulation.recorder.nodeclaims.values(), key=lambda r: r.created_at)
    assert original.deleted_at is not None and original.deleted_at - simulation.clock.start > 40 * 60
    assert app_pods_running(simulation) == 3


def test_a_node_expires_at_expire_after_and_its_pods_move_to_a_replacement() -> None:
    simulation = run(SCENARIOS / "expiration" / "scenario.yaml")
    records = sorted(simulation.recorder.nodeclaims.values(), key=lambda r: r.created_at)
    first = records[0]
    assert first.deleted_at is not None
    lived = first.deleted_at - first.created_at
    assert 3600 <= lived < 3600 + 60
    assert len(records) >= 2
    assert app_pods_running(simulation) == 3
    assert "Disrupting NodeClaim: Expired" in {event.message for event in simulation.cluster.events}


def test_a_twenty_percent_budget_lets_at_most_two_of_ten_nodes_go_at_once() -> None:
    simulation = run(SCENARIOS / "budgets" / "scenario-twenty-percent.yaml")
    deletions = [r.deleted_at for r in simulation.recorder.nodeclaims.values()]
    assert len(deletions) == 10 and all(moment is not None for moment in deletions)
    # At no moment were more than two NodeClaims of the pool being disrupted.
    assert max(simulation.disruption_peak.values()) <= 2
    assert max(simulation.disruption_peak.values()) == 2


def test_a_zero_budget_in_a_schedule_window_blocks_inside_it_and_not_after() -> None:
    simulation = run(SCENARIOS / "budgets" / "scenario-window.yaml")
    deleted = [r.deleted_at for r in simulation.recorder.nodeclaims.values()]
    assert deleted and all(moment is not None for moment in deleted)
    # Emptied at 00:10, kept through the 00:00–02:00 window, gone soon after it.
    assert all(
        2 * 3600 <= moment - simulation.clock.start < 2 * 3600 + 30 * 60 for moment in deleted if moment
    )


def test_do_not_disrupt_pods_are_never_evicted_and_a_drain_never_breaks_a_pdb() -> None:
    scenario, problems = load_inputs([SCENARIOS / "blockers" / "scenario.yaml"])
    assert problems.errors == []
    simulation = Simulation()
    violations: list[str] = []
    evicted: list[str] = []
    settled: list[bool] = []

    def watch(kind: str, old: object | None, new: object | None) -> None:
        if kind != "Pod":
            return
        pods = list(simulation.cluster.pods())
        healthy = sum(
            1
            for p in pods
            if p.metadata.labels.get("app") == "api" and p.phase == "Running" and not p.metadata.deleting
        )
        if healthy == 3:
            settled.append(True)  # all replicas ran once: from now on the PDB holds
        if settled and healthy < 2:
            violations.append(
                f"{simulation.clock.now() - simulation.clock.start:.0f}s: {healthy} api pods healthy"
            )
        if isinstance(new, Pod) and new.do_not_disrupt and new.metadata.deleting:
            evicted.append(new.key)

    simulation.cluster.subscribe(watch)
    simulation.run_scenario(scenario)
    assert violations == []
    assert evicted == []
    web_node = {p.node_name for p in simulation.pods() if p.metadata.labels.get("app") == "web"}
    assert len(web_node) == 1
    claims = {claim.status.node_name: claim for claim in simulation.nodeclaims()}
    # The web node is still the original, drifted one: blocked, not replaced.
    web_claim = claims[next(iter(web_node))]
    assert web_claim.is_true("Drifted")
    assert "do-not-disrupt" in simulation.disruption.blocked[web_claim.name].message
    # The api node was replaced.
    api_nodes = {p.node_name for p in simulation.pods() if p.metadata.labels.get("app") == "api"}
    assert all(claims[name].metadata.labels.get("generation") == "2" for name in api_nodes)


def test_underused_nodes_are_consolidated_but_not_before_consolidate_after() -> None:
    simulation = run(SCENARIOS / "consolidation" / "scenario.yaml")
    records = sorted(simulation.recorder.nodeclaims.values(), key=lambda r: r.created_at)
    first = records[0]
    assert first.deleted_at is not None
    # Scaled down at 5m; consolidateAfter 10m: untouched at 14m (9 minutes on), gone soon after 15m.
    assert first.deleted_at - simulation.clock.start >= 15 * 60
    replacement = records[1]
    assert replacement.price_per_hour < first.price_per_hour
    assert replacement.ready_at is not None and replacement.ready_at <= first.deleted_at
    assert app_pods_running(simulation) == 3
    assert sum(1 for r in records if r.deleted_at is None) == 1


def test_consolidation_does_not_run_away_while_a_deployment_scales_up_and_down() -> None:
    simulation = run(SCENARIOS / "consolidation" / "scenario-flapping.yaml")
    launched = [r for r in simulation.recorder.nodeclaims.values() if r.launched_at is not None]
    # Waves every 6 minutes, consolidateAfter 10m: the node is never idle long enough
    # to be consolidated, so no launch/terminate loop, DaemonSet and all.
    assert len(launched) <= 2
    assert sum(1 for r in launched if r.deleted_at is not None) <= 1
    assert app_pods_running(simulation) == 12


@pytest.mark.parametrize(
    ("scenario", "reason"),
    [
        ("scenario.yaml", AMI_DRIFT),  # a new AMI pinned
        ("scenario-userdata.yaml", NODECLASS_DRIFT),  # a static field: the hash changed
        ("scenario-security-group.yaml", SECURITY_GROUP_DRIFT),  # other security groups selected
    ],
)
def test_a_node_class_change_drifts_and_replaces_the_node_with_karpenters_reason(
    scenario: str, reason: str
) -> None:
    simulation = run(SCENARIOS / "nodeclass-drift" / scenario)
    records = sorted(simulation.recorder.nodeclaims.values(), key=lambda r: r.created_at)
    assert len(records) == 2
    assert records[0].deleted_at is not None and records[1].deleted_at is None
    assert [event.message for event in simulation.cluster.events if event.reason == "Drifted"] == [
        NODECLASS_DRIFT_MESSAGES[reason]
    ]
    assert app_pods_running(simulation) == 2


def test_a_node_class_rewritten_to_ask_for_the_same_nodes_drifts_nothing() -> None:
    # The simulator used to drift on any change to the class; karpy run never did that.
    simulation = run(SCENARIOS / "nodeclass-drift" / "scenario-same-nodes.yaml")
    records = list(simulation.recorder.nodeclaims.values())
    assert len(records) == 1 and records[0].deleted_at is None
    assert not [event for event in simulation.cluster.events if event.reason == "Drifted"]
    assert app_pods_running(simulation) == 2


def test_consolidation_never_evicts_a_do_not_disrupt_pod() -> None:
    simulation = run(SCENARIOS / "consolidation" / "scenario-do-not-disrupt.yaml")
    records = list(simulation.recorder.nodeclaims.values())
    assert len(records) == 1 and records[0].deleted_at is None
    name = records[0].name
    assert "do-not-disrupt" in simulation.disruption.blocked[name].message
    blocked = {
        event.kind
        for event in simulation.cluster.events
        if event.reason == "DisruptionBlocked" and event.name == name
    }
    assert blocked == {"NodeClaim", "Node"}  # on both, as Karpenter records it (the Node shares the name)
    assert app_pods_running(simulation) == 3


def test_a_blocked_nodes_saving_is_worked_out_once_while_it_stays_blocked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    simulation = run(SCENARIOS / "consolidation" / "scenario-do-not-disrupt.yaml")
    (name,) = simulation.disruption.savings_given_up
    saving = simulation.disruption.savings_given_up[name]
    simulated: list[str] = []
    work_out = decision.savings_given_up

    def counting(held_back: list[Candidate], *args: Any, **kwargs: Any) -> dict[str, float]:
        simulated.extend(candidate.nodeclaim.name for candidate in held_back)
        return work_out(held_back, *args, **kwargs)

    monkeypatch.setattr(decision, "savings_given_up", counting)
    simulation.disruption.decide()
    assert simulated == []
    assert simulation.disruption.savings_given_up == {name: saving}


TWO_NODE_BASE = """\
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: node.kubernetes.io/instance-type, operator: In, values: [c5.large]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
  disruption: {consolidationPolicy: WhenEmpty, consolidateAfter: 1m, budgets: [{nodes: "1"}]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, resources: {requests: {cpu: "1", memory: 512Mi}}}]
"""
CLASS_SPEC: dict[str, Any] = {
    "amiSelectorTerms": [{"alias": "al2023@v20260101"}],
    "role": "KarpenterNodeRole",
    "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
    "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
    "tags": {"team": "web"},
    "blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "20Gi", "volumeType": "gp3"}}],
}


def class_manifest(**changes: Any) -> str:
    spec = {**CLASS_SPEC, **changes}
    node_class = {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": spec,
    }
    return yaml.safe_dump(node_class)


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"tags": {"team": "web", "cost-center": "42"}}, NODECLASS_DRIFT),
        (
            {
                "blockDeviceMappings": [
                    {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "50Gi", "volumeType": "gp3"}}
                ]
            },
            NODECLASS_DRIFT,
        ),
        ({"metadataOptions": {"httpPutResponseHopLimit": 2}}, NODECLASS_DRIFT),
        ({"kubelet": {"maxPods": 58}}, NODECLASS_DRIFT),
        ({"subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo-private"}}]}, SUBNET_DRIFT),
    ],
    ids=["tags", "blockDeviceMappings", "metadataOptions", "kubelet", "subnetSelectorTerms"],
)
def test_each_field_replaces_both_nodes_one_at_a_time_under_a_budget_of_one(
    tmp_path: Path, changes: dict[str, Any], reason: str
) -> None:
    (tmp_path / "base.yaml").write_text(class_manifest() + "---\n" + TWO_NODE_BASE)
    (tmp_path / "update.yaml").write_text(class_manifest(**changes))
    (tmp_path / "scenario.yaml").write_text(
        "apiVersion: karpy.dev/v1alpha1\nkind: Scenario\nmetadata: {name: field-drift}\n"
        "spec:\n  duration: 1h\n  steps:\n"
        "    - {at: 0s, apply: {files: [base.yaml]}}\n"
        "    - {at: 10m, apply: {files: [update.yaml]}}\n"
    )
    simulation = run(tmp_path / "scenario.yaml")
    records = sorted(simulation.recorder.nodeclaims.values(), key=lambda r: r.created_at)
    originals, replacements = records[:2], records[2:]
    assert len(replacements) == 2, [(r.name, r.created_at, r.deleted_at) for r in records]
    assert all(r.deleted_at is not None for r in originals)
    assert all(r.deleted_at is None for r in replacements)
    # A budget of one: the second replacement starts once the first drifted node is gone.
    first_gone = min(r.deleted_at for r in originals if r.deleted_at is not None)
    assert replacements[1].created_at >= first_gone
    drifted = [event.message for event in simulation.cluster.events if event.reason == "Drifted"]
    assert drifted and set(drifted) == {NODECLASS_DRIFT_MESSAGES[reason]}
    assert app_pods_running(simulation) == 2
