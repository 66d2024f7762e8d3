"""A Scenario's unknown fields are errors, with a did-you-mean; its parser's reads are its format."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from karpy.sim.scenario import is_scenario, load_inputs, parse_scenario

REPO = Path(__file__).resolve().parents[2]

SCENARIO = """\
apiVersion: karpy.dev/v1alpha1
kind: Scenario
metadata: {name: typos, labels: {team: a}}
spec:
  duration: 1h
  cloud:
    registrationDelay: 5s
    capacityFailures:
      - {instanceType: c5.large, zone: "*", capacityType: spot, from: 0s, until: 10m}
    launchErrors: [{message: throttled, from: 0s, until: 30s}]
  steps:
    - at: 0s
      apply:
        objects:
          - {apiVersion: apps/v1, kind: Deployment, metadata: {name: app},
             spec: {replicas: 1, selector: {matchLabels: {app: a}},
                    template: {metadata: {labels: {app: a}}, spec: {containers: [{name: a}]}}}}
    - at: 1m
      scale: {kind: Deployment, namespace: default, name: app, replicas: 3}
    - at: 2m
      delete: {kind: Deployment, name: app}
"""


def parse(text: str) -> tuple[int, list[str]]:
    raw = yaml.safe_load(text)
    scenario, errors = parse_scenario(raw, "scenario.yaml", None)
    return len(scenario.steps), errors


def test_the_example_scenario_is_clean() -> None:
    assert parse(SCENARIO) == (3, [])


TYPOS = {
    "duration": ("  duration: 1h", "  durration: 1h", "spec.durration", "duration"),
    "cloud": ("  cloud:", "  clouds:", "spec.clouds", "cloud"),
    "capacityType": (
        "capacityType: spot",
        "capacityTyp: spot",
        "spec.cloud.capacityFailures[0].capacityTyp",
        "capacityType",
    ),
    "namespace": (
        "namespace: default, name: app, replicas",
        "namspace: default, name: app, replicas",
        "spec.steps[1].scale.namspace",
        "namespace",
    ),
    "step at": ("    - at: 2m", "    - att: 2m", "spec.steps[2].att", "at"),
    "metadata": ("labels: {team: a}", "lables: {team: a}", "metadata.lables", "labels"),
}


@pytest.mark.parametrize("typo", sorted(TYPOS))
def test_a_misspelt_scenario_field_is_an_error_and_the_scenario_is_not_run(typo: str) -> None:
    right, wrong, path, meant = TYPOS[typo]
    assert right in SCENARIO
    steps, errors = parse(SCENARIO.replace(right, wrong))
    assert errors == [
        f'scenario.yaml: Scenario "typos": {path}: unknown field "{path}" (did you mean "{meant}"?)'
    ]
    assert steps == 0


def test_a_field_of_another_step_action_is_unknown_in_this_one() -> None:
    _, errors = parse(
        SCENARIO.replace(
            "delete: {kind: Deployment, name: app}", "delete: {kind: Deployment, name: app, replicas: 0}"
        )
    )
    assert errors == [
        'scenario.yaml: Scenario "typos": spec.steps[2].delete.replicas: '
        'unknown field "spec.steps[2].delete.replicas"'
    ]


def test_a_parse_stopped_by_an_error_reports_it_and_no_unread_field() -> None:
    # The bad 'from' stops the parse before 'until' and 'steps' are read; they are not unknown.
    _, errors = parse(SCENARIO.replace("from: 0s, until: 10m", "from: soon, until: 10m"))
    assert len(errors) == 1
    assert errors[0].startswith('scenario.yaml: Scenario "typos": spec.cloud.capacityFailures[0].from: ')
    # A mapping read to its end before the error still has its unknown fields reported.
    _, errors = parse(SCENARIO.replace("launchErrors:", "launchErorrs:").replace("- at: 2m", "- at: later"))
    assert len(errors) == 2
    assert errors[0].startswith('scenario.yaml: Scenario "typos": spec.steps[2].at: ')
    assert errors[1] == (
        'scenario.yaml: Scenario "typos": spec.cloud.launchErorrs: unknown field "spec.cloud.launchErorrs" '
        '(did you mean "launchErrors"?)'
    )


def test_a_misspelt_required_field_is_reported_as_missing() -> None:
    # The parse stops at the missing field, in the mapping that holds the misspelt one.
    _, errors = parse(SCENARIO.replace("name: app, replicas: 3", "name: app, replica: 3"))
    assert errors == ['scenario.yaml: Scenario "typos": spec.steps[1].scale.replicas: required, not negative']


def test_a_scenario_of_another_api_version_is_an_error_and_is_not_run() -> None:
    steps, errors = parse(SCENARIO.replace("karpy.dev/v1alpha1", "karpy.dev/v1"))
    assert errors == ['scenario.yaml: Scenario "typos": apiVersion: a Scenario is karpy.dev/v1alpha1']
    assert steps == 0


def test_a_bad_object_a_step_applies_is_reported_and_the_scenario_still_runs() -> None:
    steps, errors = parse(SCENARIO.replace("spec: {replicas: 1,", "spec: {replica: 1,"))
    assert errors == [
        'scenario.yaml (spec.steps[0].apply.objects[0]): Deployment "app": spec.replica: '
        'unknown field "spec.replica" (did you mean "replicas"?)'
    ]
    assert steps == 3


def _scenario_files() -> list[Path]:
    roots = [REPO / "tests" / "data", REPO / "src" / "karpy" / "sim" / "scenarios"]
    files = sorted(path for root in roots for path in root.rglob("*.yaml"))
    return [path for path in files if any(is_scenario(doc) for doc in yaml.safe_load_all(path.read_text()))]


@pytest.mark.parametrize("path", _scenario_files(), ids=lambda path: str(path.relative_to(REPO)))
def test_every_bundled_scenario_loads_without_errors(path: Path) -> None:
    scenario, problems = load_inputs([path])
    assert problems.errors == []
    assert scenario.steps
    assert all(not step.objects.errors for step in scenario.steps)


# A Scenario with every field of the format, clean; MISTAKES breaks one field each.
FULL = """\
apiVersion: karpy.dev/v1alpha1
kind: Scenario
metadata: {name: full}
spec:
  duration: 2h
  jobs: {duration: 5m}
  settings: {featureGates: SpotToSpotConsolidation=false, nodeOverheadCost: 0.05}
  load:
    - {kind: Deployment, name: app, cpu: {constant: {value: 2}}}
  cloud:
    registrationDelay: 20s
    capacityFailures:
      - {instanceType: c5.large, zone: us-east-1a, capacityType: spot, from: 0s, until: 10m}
    launchErrors: [{message: throttled, from: 1m, until: 2m}]
    registrationFailures: [{from: 3m, until: 4m}]
    interruptions:
      - {at: 30m, kind: spot-interruption, instanceTypes: [m5.large], zones: [us-east-1b], fraction: 0.5}
      - {at: 40m, kind: state-change, state: stopping, count: 1}
  clusterAutoscaler:
    expander: priority
    priorities: {"10": ["^gen.*"]}
    scanInterval: 10s
    maxNodesTotal: 20
    maxNodeProvisionTime: 15m
    scaleDownUtilizationThreshold: 0.5
    scaleDownUnneededTime: 10m
    seed: 3
    nodeGroups:
      - {name: general, instanceTypes: [m5.xlarge], capacityType: on-demand, minSize: 0, maxSize: 10,
         zones: [us-east-1a], nodePool: default}
  steps:
    - at: 0s
      apply:
        objects:
          - {apiVersion: karpenter.sh/v1, kind: NodePool, metadata: {name: default},
             spec: {template: {spec: {requirements: [],
                                      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass,
                                                     name: default}}}}}
          - {apiVersion: apps/v1, kind: Deployment, metadata: {name: app},
             spec: {replicas: 1, selector: {matchLabels: {app: a}},
                    template: {metadata: {labels: {app: a}}, spec: {containers: [{name: a}]}}}}
    - at: 1h
      scale: {kind: Deployment, name: app, replicas: 3}
    - at: 2h
      delete: {kind: Deployment, name: app}
"""

# name: (the right text, the wrong text, the error's field path, a fragment of its message)
MISTAKES = {
    "duration": ("duration: 2h", "duration: forever", "spec.duration", "invalid duration 'forever'"),
    "job duration": ("duration: 5m}", "duration: -5m}", "spec.jobs.duration", "must not be negative"),
    "feature gate": ("=false,", "=maybe,", "spec.settings.featureGates", "maybe"),
    "node cost": ("nodeOverheadCost: 0.05", "nodeOverheadCost: -1", "spec.settings.nodeOverheadCost", "-1"),
    "load kind": (
        "{kind: Deployment, name: app, cpu",
        "{kind: Job, name: app, cpu",
        "spec.load[0].kind",
        "Job",
    ),
    "load value": ("{value: 2}", "{value: -2}", "spec.load[0].cpu.constant.value", "must not be negative"),
    "registration delay": (
        "registrationDelay: 20s",
        "registrationDelay: soon",
        "spec.cloud.registrationDelay",
        "soon",
    ),
    "window order": (
        "from: 0s, until: 10m",
        "from: 10m, until: 5m",
        "spec.cloud.capacityFailures[0].until",
        "5m is not after from (10m)",
    ),
    "instance type": (
        "instanceType: c5.large",
        "instanceType: z99.mega",
        "spec.cloud.capacityFailures[0].instanceType",
        "unknown instance type 'z99.mega'",
    ),
    "zone": ("zone: us-east-1a,", "zone: mars-1a,", "spec.cloud.capacityFailures[0].zone", "us-east-1a"),
    "capacity type": (
        "capacityType: spot, from",
        "capacityType: cheap, from",
        "spec.cloud.capacityFailures[0].capacityType",
        "on-demand, spot",
    ),
    "empty launch error window": (
        "from: 1m, until: 2m",
        "from: 2m, until: 2m",
        "spec.cloud.launchErrors[0].until",
        "not after from",
    ),
    "registration failure window": (
        "from: 3m, until: 4m",
        "from: 4m, until: 3m",
        "spec.cloud.registrationFailures[0].until",
        "not after from",
    ),
    "interruption after the end": (
        "at: 30m, kind: spot",
        "at: 3h, kind: spot",
        "spec.cloud.interruptions[0].at",
        "after the end of the run",
    ),
    "interruption type": (
        "instanceTypes: [m5.large]",
        "instanceTypes: [m5.lrage]",
        "spec.cloud.interruptions[0].instanceTypes[0]",
        'did you mean "m5.large"',
    ),
    "interruption fraction": (
        "fraction: 0.5}",
        "fraction: 2}",
        "spec.cloud.interruptions[0].fraction",
        "at most 1",
    ),
    "interruption state": (
        "state: stopping",
        "state: melting",
        "spec.cloud.interruptions[1].state",
        "melting",
    ),
    "expander": (
        "expander: priority",
        "expander: cheapest",
        "spec.clusterAutoscaler.expander",
        "least-waste",
    ),
    "priority pattern": (
        '["^gen.*"]',
        '["(gen"]',
        "spec.clusterAutoscaler.priorities.10[0]",
        "not a regular expression",
    ),
    "scan interval": (
        "scanInterval: 10s",
        "scanInterval: 0s",
        "spec.clusterAutoscaler.scanInterval",
        "above zero",
    ),
    "max nodes": (
        "maxNodesTotal: 20",
        "maxNodesTotal: -2",
        "spec.clusterAutoscaler.maxNodesTotal",
        "negative",
    ),
    "threshold": (
        "scaleDownUtilizationThreshold: 0.5",
        "scaleDownUtilizationThreshold: 1.5",
        "spec.clusterAutoscaler.scaleDownUtilizationThreshold",
        "from 0 to 1",
    ),
    "seed type": ("seed: 3", "seed: three", "spec.clusterAutoscaler.seed", "expected an integer"),
    "node group type": (
        "instanceTypes: [m5.xlarge]",
        "instanceTypes: [z99.mega]",
        "spec.clusterAutoscaler.nodeGroups[0].instanceTypes[0]",
        "unknown instance type 'z99.mega': the simulated cloud has the",
    ),
    "node group sizes": (
        "minSize: 0, maxSize: 10",
        "minSize: 11, maxSize: 10",
        "spec.clusterAutoscaler.nodeGroups[0].maxSize",
        "below minSize 11",
    ),
    "node group pool": (
        "nodePool: default}",
        "nodePool: defualt}",
        "spec.clusterAutoscaler.nodeGroups[0].nodePool",
        "no NodePool 'defualt' (did you mean \"default\"?)",
    ),
    "step after the end": (
        "- at: 1h\n      scale",
        "- at: 3h\n      scale",
        "spec.steps[1].at",
        "3h is after the end of the run (spec.duration 2h): the step would never run",
    ),
    "step time": ("- at: 1h\n      scale", "- at: later\n      scale", "spec.steps[1].at", "later"),
    "scale kind": (
        "scale: {kind: Deployment",
        "scale: {kind: DaemonSet",
        "spec.steps[1].scale.kind",
        "DaemonSet",
    ),
    "replicas over int32": (
        "replicas: 3}",
        "replicas: 3000000000}",
        "spec.steps[1].scale.replicas",
        "over 2147483647",
    ),
    "delete kind": (
        "delete: {kind: Deployment",
        "delete: {kind: Deploymnet",
        "spec.steps[2].delete.kind",
        'did you mean "Deployment"',
    ),
}


def test_the_full_scenario_is_clean() -> None:
    assert parse(FULL) == (3, [])


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_each_field_of_the_scenario_is_checked_and_a_bad_one_stops_the_run(mistake: str) -> None:
    right, wrong, path, fragment = MISTAKES[mistake]
    assert FULL.count(right) == 1
    steps, errors = parse(FULL.replace(right, wrong))
    assert len(errors) == 1, errors
    assert errors[0].startswith(f'scenario.yaml: Scenario "full": {path}: '), errors
    assert fragment in errors[0]
    assert "\n" not in errors[0]
    assert steps == 0


def test_every_error_of_a_scenario_is_reported_one_line_each() -> None:
    # "step time" breaks the field "step after the end" does; without a duration nothing is after the end.
    together = sorted(set(MISTAKES) - {"step time", "duration"})
    text = FULL
    for name in together:
        right, wrong, _, _ = MISTAKES[name]
        text = text.replace(right, wrong)
    _, errors = parse(text)
    expected = [MISTAKES[name][2] for name in together]
    reported = [error.split(": ")[2] for error in errors]
    assert sorted(reported) == sorted(expected), errors


@pytest.mark.parametrize("apply", ["{}", "{files: []}", "{objects: []}", "null"])
def test_a_step_that_applies_nothing_is_an_error(apply: str) -> None:
    steps, errors = parse(
        FULL.replace("- at: 2h\n      delete: {kind: Deployment, name: app}", f"- {{at: 2h, apply: {apply}}}")
    )
    assert errors == [
        'scenario.yaml: Scenario "full": spec.steps[2]: a step needs exactly one of apply, delete or scale'
        if apply == "null"
        else 'scenario.yaml: Scenario "full": spec.steps[2].apply: needs files or objects to apply'
    ]
    assert steps == 0
