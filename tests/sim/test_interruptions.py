"""A scenario's ``cloud.interruptions``: spot warnings handled in virtual time, as ``karpy run`` handles them.

Six pods of one Deployment run on six spot nodes, guarded by a
PodDisruptionBudget that lets two go at a time. At 10 minutes half of the
nodes get the two-minute spot interruption warning. karpy must delete their
NodeClaims, drain them without breaking the budget, and have every pod
running on a replacement before the two minutes are up, the replacements
avoiding the interrupted spot offering for its 3 minutes.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from tests.support import deployment_manifest, simulate_json, spot_ec2_cluster

from karpy.api.core import POD_RUNNING, Pod
from karpy.api.requirements import CAPACITY_TYPE_SPOT
from karpy.operator.karpenter_metrics import Metrics
from karpy.sim.cloud import SPOT_INTERRUPTION_NOTICE, Interruption, SimulatedCloudSettings
from karpy.sim.report import render_text
from karpy.sim.scenario import Scenario, builtin_scenario_path, load_inputs
from karpy.sim.simulation import Simulation

WARNING_AT = 600.0
MIN_AVAILABLE = 4
PDB = f"""
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {{name: app, namespace: default}}
spec:
  minAvailable: {MIN_AVAILABLE}
  selector: {{matchLabels: {{app: app}}}}
"""
SCENARIO = """
apiVersion: karpy.dev/v1alpha1
kind: Scenario
metadata: {name: spot-interruption}
spec:
  duration: 30m
  cloud:
    interruptions:
      - {at: 10m, instanceTypes: [m5.large, c5.large], fraction: 0.5}
  steps:
    - at: 0s
      apply: {files: [cluster.yaml]}
"""


@pytest.fixture
def scenario_dir(tmp_path: Path) -> Path:
    (tmp_path / "cluster.yaml").write_text(
        "\n---\n".join([spot_ec2_cluster(), deployment_manifest(replicas=6, cpu="1500m"), PDB])
    )
    (tmp_path / "scenario.yaml").write_text(SCENARIO)
    return tmp_path


def load(scenario_dir: Path) -> Scenario:
    scenario, loaded = load_inputs([scenario_dir / "scenario.yaml"])
    assert loaded.errors == []
    return scenario


class Watcher:
    """What the test measures itself, on every change after the warning."""

    def __init__(self, simulation: Simulation) -> None:
        self.simulation = simulation
        self.fewest_available: int | None = None
        self.back_at: float | None = None
        self.interrupted_nodes: set[str] = set()
        simulation.cluster.subscribe(self.on_change)

    def on_change(self, kind: str, old: object | None, new: object | None) -> None:
        now = self.simulation.clock.now()
        if kind != "Pod" or now < self.simulation.clock.start + WARNING_AT:
            return
        pods = [pod for pod in self.simulation.cluster.pods() if pod.metadata.labels.get("app") == "app"]
        available = [pod for pod in pods if pod.phase == POD_RUNNING and not pod.metadata.deleting]
        if self.fewest_available is None or len(available) < self.fewest_available:
            self.fewest_available = len(available)
        moved = not any(pod.node_name in self.interrupted_nodes for pod in available)
        if self.back_at is None and self.interrupted_nodes and len(available) == 6 and moved:
            self.back_at = now


def app_pods(simulation: Simulation) -> list[Pod]:
    return [pod for pod in simulation.cluster.pods() if pod.metadata.labels.get("app") == "app"]


def test_half_of_the_spot_nodes_interrupted_are_replaced_before_the_two_minutes_are_up(
    scenario_dir: Path,
) -> None:
    simulation = Simulation(metrics=Metrics())
    start = simulation.clock.start
    watcher = Watcher(simulation)
    simulation.run_scenario(load(scenario_dir))

    records = simulation.interruptions.records
    assert len(records) == 3  # half of six, the oldest three
    assert all(record.at == start + WARNING_AT for record in records)
    interrupted = {record.nodeclaim for record in records}
    offerings = {(record.instance_type, record.zone, CAPACITY_TYPE_SPOT) for record in records}
    assert {record.capacity_type for record in records} == {CAPACITY_TYPE_SPOT}

    # The NodeClaims were deleted on the warning, and are gone.
    remaining = {claim.name for claim in simulation.nodeclaims()}
    assert not interrupted & remaining
    terminating = [
        event
        for event in simulation.cluster.events
        if event.reason == "TerminatingOnInterruption" and event.kind == "NodeClaim"
    ]
    assert {event.name for event in terminating} == interrupted
    assert {event.time for event in terminating} == {start + WARNING_AT}

    # Every pod ran again on a replacement before the two minutes were up (virtual seconds).
    recovered_after = [record.recovered_at - record.at for record in records if record.recovered_at]
    assert len(recovered_after) == 3
    assert max(recovered_after) < SPOT_INTERRUPTION_NOTICE
    pods = app_pods(simulation)
    assert len(pods) == 6
    assert all(pod.phase == POD_RUNNING for pod in pods)
    assert not {pod.node_name for pod in pods} & {record.node for record in records}
    # Drained in time: no instance had to be reclaimed under its pods.
    assert all(record.reclaimed_at is None for record in records)

    # The replacements avoided the interrupted spot offering for its 3 minutes.
    replacements = [
        record
        for record in simulation.recorder.nodeclaims.values()
        if record.created_at >= start + WARNING_AT and record.created_at < start + WARNING_AT + 180
    ]
    assert len(replacements) == 3
    assert all((r.instance_type, r.zone, r.capacity_type) not in offerings for r in replacements)

    # The budget held during the drain: never fewer than minAvailable pods available, and it
    # did hold the third eviction back (two at a time).
    assert watcher.fewest_available == MIN_AVAILABLE
    refused = [
        event
        for event in simulation.cluster.events
        if event.reason == "FailedDraining" and event.time >= start + WARNING_AT
    ]
    assert refused
    assert not simulation.runtime.errors


def test_an_independent_measure_agrees_that_pods_run_again_within_two_minutes(scenario_dir: Path) -> None:
    simulation = Simulation()
    watcher = Watcher(simulation)
    scenario = load(scenario_dir)
    # The instances the warning goes to are known once they exist: the three oldest spot ones.
    simulation.cloud.launch_listeners.append(
        lambda instance: (
            watcher.interrupted_nodes.add(instance.node_name) if len(watcher.interrupted_nodes) < 3 else None
        )
    )
    simulation.run_scenario(scenario)
    assert watcher.interrupted_nodes == {record.node for record in simulation.interruptions.records}
    assert watcher.back_at is not None
    assert watcher.back_at - (simulation.clock.start + WARNING_AT) < SPOT_INTERRUPTION_NOTICE


def block_every_eviction(scenario_dir: Path) -> None:
    """A budget that allows no eviction at all: no drain can finish before the instance goes."""
    cluster = scenario_dir / "cluster.yaml"
    cluster.write_text(cluster.read_text().replace(f"minAvailable: {MIN_AVAILABLE}", "minAvailable: 6"))


def test_a_spot_instance_not_drained_in_time_is_reclaimed_and_its_node_turns_not_ready(
    scenario_dir: Path,
) -> None:
    simulation = Simulation()
    block_every_eviction(scenario_dir)
    scenario = load(scenario_dir)
    scenario.duration = WARNING_AT + SPOT_INTERRUPTION_NOTICE + 1
    scenario.run_until_steady = False
    simulation.run_scenario(scenario)
    records = simulation.interruptions.records
    assert len(records) == 3
    assert {record.reclaimed_at for record in records} == {
        simulation.clock.start + WARNING_AT + SPOT_INTERRUPTION_NOTICE
    }
    for record in records:
        assert record.nodeclaim not in {i.nodeclaim for i in simulation.cloud.instances.values()}
        node = simulation.cluster.node(record.node)
        assert node is None or not node.ready


def test_a_reclaimed_node_whose_drain_a_budget_blocks_is_removed_and_its_pods_run_again(
    scenario_dir: Path,
) -> None:
    simulation = Simulation()
    block_every_eviction(scenario_dir)
    simulation.run_scenario(load(scenario_dir))
    records = simulation.interruptions.records
    assert len(records) == 3
    claims = {claim.name for claim in simulation.cluster.nodeclaims()}
    for record in records:
        # The instance went before the budget let a pod go: the dead Node is not kept for it.
        assert record.reclaimed_at is not None
        assert simulation.cluster.node(record.node) is None
        assert record.nodeclaim not in claims
        assert record.recovered_at is not None
    pods = app_pods(simulation)
    assert len(pods) == 6
    assert all(pod.phase == POD_RUNNING for pod in pods)


def test_only_the_selected_instances_are_warned(scenario_dir: Path) -> None:
    simulation = Simulation()
    scenario = load(scenario_dir)
    scenario.interruptions = [Interruption(at=WARNING_AT, count=1, zones=("nowhere-1a",))]
    simulation.run_scenario(scenario)
    assert simulation.interruptions.records == []
    assert all(not event.reason.startswith("Spot") for event in simulation.cluster.events)


def test_a_warning_that_selects_no_instance_says_so_in_the_report(scenario_dir: Path) -> None:
    simulation = Simulation()
    scenario = load(scenario_dir)
    scenario.interruptions = [
        Interruption(at=WARNING_AT, count=1, zones=("nowhere-1a",)),
        Interruption(at=WARNING_AT, kind="state-change", instance_types=("p5.48xlarge",)),
    ]
    simulation.run_scenario(scenario)
    text = render_text(simulation, "spot-interruption")
    assert "00:10:00  # spot-interruption: no spot instance in nowhere-1a to warn of" in text
    assert "00:10:00  # state-change: no instance of p5.48xlarge to warn of" in text


def test_a_rebalance_recommendation_changes_nothing_but_an_event(scenario_dir: Path) -> None:
    simulation = Simulation()
    scenario = load(scenario_dir)
    scenario.interruptions = [Interruption(at=WARNING_AT, kind="rebalance", count=2)]
    simulation.run_scenario(scenario)
    assert len(simulation.interruptions.records) == 2
    names = {record.nodeclaim for record in simulation.interruptions.records}
    assert names <= {claim.name for claim in simulation.nodeclaims()}
    assert len(simulation.nodeclaims()) == 6
    reasons = [event.reason for event in simulation.cluster.events if event.name in names]
    assert reasons.count("SpotRebalanceRecommendation") == 2
    assert "TerminatingOnInterruption" not in reasons


def test_the_report_and_the_json_show_the_interruptions(
    scenario_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    simulation = Simulation()
    simulation.run_scenario(load(scenario_dir))
    text = render_text(simulation, "spot-interruption")
    assert "interruptions        3: 3 x spot-interruption" in text
    assert text.count("spot-interruption, pods running again after") == 3
    assert text.count("# spot-interruption of ip-") == 3

    code, result, _ = simulate_json(capsys, str(scenario_dir / "scenario.yaml"))
    assert code == 0
    interruptions = result["interruptions"]
    assert [entry["time"] for entry in interruptions] == [WARNING_AT] * 3
    assert {entry["kind"] for entry in interruptions} == {"spot-interruption"}
    assert {entry["messageKind"] for entry in interruptions} == {"spot_interrupted"}
    assert all(0 < entry["recoveredAfterSeconds"] < SPOT_INTERRUPTION_NOTICE for entry in interruptions)
    json.dumps(result)


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        ("{fraction: 0.5}", "interruptions[0].at: required"),
        ("{at: 1m, kind: spot}", "interruptions[0].kind: one of spot-interruption, rebalance"),
        ("{at: 1m, fraction: 0.5, count: 1}", "interruptions[0]: give fraction or count, not both"),
        ("{at: 1m, fraction: 1.5}", "interruptions[0].fraction: a number above 0 and at most 1"),
        ("{at: 1m, fraction: half}", "interruptions[0].fraction: a number above 0 and at most 1"),
        ("{at: 1m, count: -1}", "interruptions[0].count: must not be negative"),
        ("{at: 1m, state: stopping}", "interruptions[0].state: only for kind state-change"),
        ("{at: 1m, kind: state-change, state: rebooting}", "interruptions[0].state: one of stopping"),
        ("{at: 1m, zone: us-east-1a}", "interruptions[0].zone: unknown field"),
    ],
)
def test_bad_interruptions_are_errors_naming_the_field(tmp_path: Path, entry: str, error: str) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(
        "apiVersion: karpy.dev/v1alpha1\nkind: Scenario\nmetadata: {name: x}\n"
        f"spec:\n  cloud:\n    interruptions:\n      - {entry}\n  steps: []\n"
    )
    _, loaded = load_inputs([path])
    assert any(error in message for message in loaded.errors), loaded.errors


def test_interruptions_are_read_with_their_defaults(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(
        "apiVersion: karpy.dev/v1alpha1\nkind: Scenario\nmetadata: {name: x}\n"
        "spec:\n  cloud:\n    interruptions:\n"
        "      - {at: 10m}\n"
        "      - {at: 20m, kind: state-change, state: terminated, zones: [us-east-1b], count: 2}\n"
        "  steps: []\n"
    )
    scenario, loaded = load_inputs([path])
    assert loaded.errors == []
    assert scenario.interruptions == [
        Interruption(at=600.0),
        Interruption(at=1200.0, kind="state-change", zones=("us-east-1b",), count=2, state="terminated"),
    ]


def test_the_builtin_spot_interruption_scenario_measures_the_replacements(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The seed's pods, interrupted at 3 minutes: each interrupted node's pods need a new node.

    No pod fits elsewhere, so the cluster cannot have recovered before a replacement registered
    (30 s): a measure that took a moment between an evicted pod's removal and the creation of its
    replacement for a recovery would say 0 s.
    """
    code, result, _ = simulate_json(capsys, str(builtin_scenario_path("spot-interruption")))
    assert code == 0
    interruptions = result["interruptions"]
    # Half the spot nodes alive at 3 minutes, rounded up, as the scenario's fraction says.
    alive = [
        claim
        for claim in result["nodeclaims"]
        if claim["capacityType"] == "spot"
        and claim["createdAt"] < 180
        and (claim["deletedAt"] is None or claim["deletedAt"] >= 180)
    ]
    assert len(alive) >= 2
    assert len(interruptions) == math.ceil(len(alive) / 2)
    registration_delay = SimulatedCloudSettings().registration_delay
    for entry in interruptions:
        assert registration_delay <= entry["recoveredAfterSeconds"] < SPOT_INTERRUPTION_NOTICE
    assert result["summary"]["controllerErrors"] == []
