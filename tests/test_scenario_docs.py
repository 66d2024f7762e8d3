"""Every YAML example of docs/scenarios.md loads without an error, so the page cannot rot.

Scenario examples are read as ``karpy simulate`` reads a Scenario file, their
``files`` resolved against tests/data/scenarios/workloads (the directory the
page names); manifest examples are read as ``karpy validate`` reads them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from tests.support import DATA

from karpy.api.manifest import KubernetesYAMLLoader, parse_manifests
from karpy.sim.scenario import is_scenario, parse_scenario

PAGE = Path(__file__).parent.parent / "docs" / "scenarios.md"
FILES = DATA / "scenarios" / "workloads"
EXAMPLES = re.findall(
    r"^```yaml\n(.*?)^```$", PAGE.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL
)


def test_the_page_has_an_example_per_step_cloud_setting_and_workload_kind() -> None:
    text = "\n".join(EXAMPLES)
    for field in ("files:", "objects:", "scale:", "delete:", "registrationDelay:", "capacityFailures:"):
        assert field in text
    for field in ("launchErrors:", "registrationFailures:", "interruptions:", "nodeFailures:", "jobs:"):
        assert field in text
    for field in ("capacityReservations:",):
        assert field in text
    for kind in ("Job", "CronJob", "StatefulSet", "PriorityClass", "Namespace"):
        assert f"kind: {kind}\n" in text


@pytest.mark.parametrize("example", EXAMPLES, ids=[f"example-{i + 1}" for i in range(len(EXAMPLES))])
def test_every_example_loads_without_errors(example: str) -> None:
    document = yaml.load(example, Loader=KubernetesYAMLLoader)
    if is_scenario(document):
        scenario, errors = parse_scenario(document, "docs/scenarios.md", FILES)
        assert errors == []
        assert scenario.steps
        for step in scenario.steps:
            if step.action == "apply":
                assert step.objects.objects
    else:
        result = parse_manifests(example, "docs/scenarios.md")
        assert result.errors == []
        assert len(result.objects) == 1


REFUSED = re.findall(
    r"^```yaml refused\n(.*?)^```\n\n```text\n(.*?)^```$",
    PAGE.read_text(encoding="utf-8"),
    flags=re.MULTILINE | re.DOTALL,
)


def test_the_page_has_a_refused_example() -> None:
    assert REFUSED


@pytest.mark.parametrize("example, output", REFUSED, ids=[f"refused-{i + 1}" for i in range(len(REFUSED))])
def test_every_refused_example_gives_the_errors_the_page_shows(example: str, output: str) -> None:
    document = yaml.load(example, Loader=KubernetesYAMLLoader)
    scenario, errors = parse_scenario(document, "scenario.yaml", FILES)
    assert errors == output.splitlines()
    assert scenario.steps == []  # not run
