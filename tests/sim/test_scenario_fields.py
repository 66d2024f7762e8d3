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
