"""The Helm chart's values, schema, documentation and environment, checked without Helm.

``tests/integration/test_chart.py`` renders and installs the chart with Helm;
these checks need neither Helm nor a cluster: the default values meet the
schema, the schema refuses typos naming the field, every value is documented
in docs/install.md and set by the full values file the integration tests
render, and the Deployment sets only variables ``karpy run`` reads.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # locked (a dependency of moto[server]), no stubs
import pytest
import yaml

from karpy.settings import SETTINGS

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "karpy"
FULL_VALUES = REPO / "tests" / "data" / "chart-values-full.yaml"
DOCS = REPO / "docs" / "install.md"
# What karpy run reads besides SETTINGS, as the Deployment sets it (karpy.kube.leader).
LEADER_ELECTION_VARIABLES = {"DISABLE_LEADER_ELECTION", "LEADER_ELECTION_NAMESPACE"}


def default_values() -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return values


def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return loaded


def value_paths(node: dict[str, Any] | None = None, prefix: str = "") -> Iterator[str]:
    """Every value's dotted path: karpy's own objects are walked, Kubernetes structures are one value."""
    node = schema() if node is None else node
    for name, child in node["properties"].items():
        path = f"{prefix}{name}"
        if child.get("additionalProperties") is False and "properties" in child:
            yield from value_paths(child, f"{path}.")
        else:
            yield path


def lookup(values: dict[str, Any], path: str) -> Any:
    found: Any = values
    for part in path.split("."):
        found = found[part]
    return found


def schema_errors(values: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft7Validator(schema())
    return [
        f"{'.'.join(map(str, error.absolute_path))}: {error.message}"
        for error in validator.iter_errors(values)
    ]


def test_the_schema_is_draft_07_and_the_defaults_meet_it() -> None:
    jsonschema.Draft7Validator.check_schema(schema())
    assert schema_errors(default_values()) == []


def test_every_value_has_a_default_and_a_type() -> None:
    values = default_values()
    paths = list(value_paths())
    for path in paths:
        lookup(values, path)  # a KeyError names a value the schema has and values.yaml lacks
    assert schema_errors(values) == []  # and additionalProperties: false refuses the reverse
    assert {"replicas", "settings.clusterName", "settings.featureGates.spotToSpotConsolidation"} <= set(paths)


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (
            {"setings": {"clusterName": "a"}},
            "Additional properties are not allowed ('setings' was unexpected)",
        ),
        ({"replica": 2}, "Additional properties are not allowed ('replica' was unexpected)"),
        (
            {"settings": {"clusterNmae": "a"}},
            "settings: Additional properties are not allowed ('clusterNmae'",
        ),
        ({"settings": {"featureGates": {"drift": True}}}, "settings.featureGates: Additional properties"),
        ({"settings": {"cloudProvider": "aws"}}, "settings.clusterName: '' should be non-empty"),
        (
            {"settings": {"cloudProvider": "gcp"}},
            "settings.cloudProvider: 'gcp' is not one of ['kwok', 'aws']",
        ),
        (
            {"settings": {"batchIdleDuration": "1 second"}},
            "settings.batchIdleDuration: '1 second' does not match",
        ),
        ({"logLevel": "verbose"}, "logLevel: 'verbose' is not one of ['debug', 'info', 'warn', 'error']"),
        (
            {"controller": {"metrics": {"port": "http"}}},
            "controller.metrics.port: 'http' is not of type 'integer'",
        ),
        ({"controller": {"image": {"digest": "latest"}}}, "controller.image.digest: 'latest' does not match"),
        (
            {"podDisruptionBudget": {"maxUnavailable": "half"}},
            "podDisruptionBudget.maxUnavailable: 'half' is not valid",
        ),
        ({"serviceAccount": {"annotation": {}}}, "serviceAccount: Additional properties are not allowed"),
    ],
)
def test_a_typo_or_a_bad_value_is_refused_naming_the_field(change: dict[str, Any], error: str) -> None:
    values = default_values()

    def merge(into: dict[str, Any], change: dict[str, Any]) -> None:
        for key, value in change.items():
            if isinstance(value, dict) and isinstance(into.get(key), dict) and value:
                merge(into[key], value)
            else:
                into[key] = value

    merge(values, change)
    errors = schema_errors(values)
    assert any(found.lstrip(": ").startswith(error) for found in errors), errors


def test_aws_needs_a_cluster_name_and_kwok_does_not() -> None:
    values = default_values()
    values["settings"].update(cloudProvider="aws", clusterName="my-k3s")
    assert schema_errors(values) == []
    values["settings"].update(cloudProvider="kwok", clusterName="")
    assert schema_errors(values) == []


def test_the_full_values_file_sets_every_value_to_something_else() -> None:
    defaults, full = default_values(), yaml.safe_load(FULL_VALUES.read_text())
    assert schema_errors(full) == []
    same = [path for path in value_paths() if lookup(full, path) == lookup(defaults, path)]
    # serviceAccount.create stays true so that the rendered Deployment names the chart's ServiceAccount.
    assert same == ["serviceAccount.create"]


def test_docs_install_lists_every_value_with_its_default() -> None:
    rows = {
        match.group(1): match.group(0)
        for match in re.finditer(r"^\| `([A-Za-z.]+)` \|.*$", DOCS.read_text(), flags=re.MULTILINE)
    }
    defaults = default_values()
    for path in value_paths():
        assert path in rows, f"docs/install.md has no row for {path}"
        default = lookup(defaults, path)
        if isinstance(default, bool):
            assert f"`{str(default).lower()}`" in rows[path], rows[path]
        elif isinstance(default, (str, int)) and default != "":
            assert f"`{default}`" in rows[path], rows[path]


def test_the_deployment_sets_the_variables_karpy_run_reads() -> None:
    template = (CHART / "templates" / "deployment.yaml").read_text()
    names = set(re.findall(r"^ {12}- name: ([A-Z_]+)$", template, flags=re.MULTILINE))
    known = {setting.env for setting in SETTINGS} | LEADER_ELECTION_VARIABLES
    assert names - known == set(), "the chart sets a variable karpy run does not read"
    assert names == {
        "KARPY_CLOUD_PROVIDER",
        "CLUSTER_NAME",
        "CLUSTER_ENDPOINT",
        "CLUSTER_CA_BUNDLE",
        "INTERRUPTION_QUEUE",
        "BATCH_IDLE_DURATION",
        "BATCH_MAX_DURATION",
        "FEATURE_GATES",
        "KARPY_NODE_OVERHEAD_COST",
        "LOG_LEVEL",
        "METRICS_PORT",
        "HEALTH_PROBE_PORT",
        "DISABLE_LEADER_ELECTION",
        "LEADER_ELECTION_NAMESPACE",
    }
