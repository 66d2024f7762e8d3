"""The Helm chart's values, schema, documentation and environment, checked without Helm.

``tests/integration/test_chart.py`` renders and installs the chart with Helm;
these checks need neither Helm nor a cluster: the default values meet the
schema, the schema refuses typos naming the field, every value is documented
in docs/install.md and set by the full values file the integration tests
render, and the Deployment sets only variables ``karpy run`` reads.

Karpenter's chart: every key of its values (tests/data/karpenter-chart-values.yaml)
is one of karpy's values, or refused or ignored by karpenter-keys.yaml, and has
its row in docs/install.md; tests/integration/test_chart_karpenter_values.py
renders each with Helm.
"""

from __future__ import annotations

import functools
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
KARPENTER_VALUES = REPO / "tests" / "data" / "karpenter-chart-values.yaml"
KARPENTER_KEYS = CHART / "karpenter-keys.yaml"
DOCS = REPO / "docs" / "install.md"
# What karpy run reads besides SETTINGS, as the Deployment sets it (karpy.kube.leader).
LEADER_ELECTION_VARIABLES = {"DISABLE_LEADER_ELECTION", "LEADER_ELECTION_NAMESPACE"}


@functools.cache
def _default_values_text() -> str:
    return (CHART / "values.yaml").read_text()


def default_values() -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load(_default_values_text())
    return values


@functools.cache
def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return loaded


@functools.cache
def karpenter_decisions() -> dict[str, dict[str, Any]]:
    """karpenter-keys.yaml: each key of Karpenter's chart karpy does not act on, with its decision."""
    table: dict[str, dict[str, dict[str, Any]]] = yaml.safe_load(KARPENTER_KEYS.read_text())
    return {
        key: {**entry, "decision": kind} for kind, entries in table.items() for key, entry in entries.items()
    }


def karpenter_keys() -> list[dict[str, Any]]:
    """Every key of Karpenter's chart (tests/data/karpenter-chart-values.yaml), its path dotted as ``key``."""
    entries: list[dict[str, Any]] = yaml.safe_load(KARPENTER_VALUES.read_text())["keys"]
    return [{**entry, "path": entry["key"], "key": ".".join(entry["key"])} for entry in entries]


def value_paths(node: dict[str, Any] | None = None, prefix: str = "") -> Iterator[str]:
    """Every value's dotted path: karpy's own objects are walked, Kubernetes structures are one value.

    Karpenter's keys that karpy does not act on are typed by the schema too, but are not karpy's
    values (they have no default): they are left out, and so are objects holding only them.
    """
    node = schema() if node is None else node
    foreign = karpenter_decisions()
    for name, child in node["properties"].items():
        path = f"{prefix}{name}"
        if path in foreign:
            continue
        if child.get("additionalProperties") is False and "properties" in child:
            yield from value_paths(child, f"{path}.")
        else:
            yield path


@functools.cache
def _karpy_value_paths() -> frozenset[str]:
    return frozenset(value_paths())


def decision(key: str) -> str:
    """What karpy's chart does with a key of Karpenter's: supported, refused or ignored."""
    foreign = karpenter_decisions()
    if key in foreign:
        return str(foreign[key]["decision"])
    parts = key.split(".")
    ours = _karpy_value_paths()
    if any(".".join(parts[:end]) in ours for end in range(1, len(parts) + 1)):
        return "supported"
    return "undecided"


def lookup(values: dict[str, Any], path: str) -> Any:
    found: Any = values
    for part in path.split("."):
        found = found[part]
    return found


@functools.cache
def _validator() -> Any:
    return jsonschema.Draft7Validator(schema())


def schema_errors(values: dict[str, Any]) -> list[str]:
    validator = _validator()
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


def test_aws_without_a_cluster_name_is_left_to_the_templates_which_say_it_in_words() -> None:
    """A schema error would say "minLength"; _karpenter.tpl fails naming settings.clusterName."""
    values = default_values()
    values["settings"].update(cloudProvider="aws", clusterName="")
    assert schema_errors(values) == []
    assert (
        "settings.clusterName is required with settings.cloudProvider=aws"
        in (CHART / "templates" / "_karpenter.tpl").read_text()
    )


def test_the_full_values_file_sets_every_value_to_something_else() -> None:
    defaults, full = default_values(), yaml.safe_load(FULL_VALUES.read_text())
    assert schema_errors(full) == []
    same = [path for path in value_paths() if lookup(full, path) == lookup(defaults, path)]
    # serviceAccount.create stays true so that the rendered Deployment names the chart's ServiceAccount.
    assert same == ["serviceAccount.create"]


def test_docs_install_lists_every_value_with_its_default() -> None:
    rows: dict[str, str] = {}
    for match in re.finditer(r"^\| `([A-Za-z.]+)` \|.*$", DOCS.read_text(), flags=re.MULTILINE):
        rows.setdefault(match.group(1), match.group(0))  # the values table comes before Karpenter's
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
        "PREFERENCE_POLICY",
        "MIN_VALUES_POLICY",
        "FEATURE_GATES",
        "KARPY_NODE_OVERHEAD_COST",
        "SCHEDULER_CONFIG",
        "LOG_LEVEL",
        "METRICS_PORT",
        "HEALTH_PROBE_PORT",
        "DISABLE_LEADER_ELECTION",
        "LEADER_ELECTION_NAMESPACE",
    }


def with_value(values: dict[str, Any], path: list[str], value: Any) -> dict[str, Any]:
    """``values`` with the value at ``path`` set, as a values file setting it would (Helm merges maps)."""
    node = values
    for part in path[:-1]:
        child = node.get(part)
        node[part] = child = dict(child) if isinstance(child, dict) else {}
        node = child
    node[path[-1]] = value
    return values


def test_karpenters_image_is_replaced_by_the_default_image() -> None:
    """karpy.image runs values.yaml's repository when controller.image is Karpenter's: the two agree."""
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    repository = default_values()["controller"]["image"]["repository"]
    assert f'$image = dict "repository" "{repository}"' in helpers


def test_every_key_of_karpenters_chart_is_karpys_or_decided() -> None:
    keys = karpenter_keys()
    assert len(keys) >= 90 and len({entry["key"] for entry in keys}) == len(keys)
    undecided = [entry["key"] for entry in keys if decision(entry["key"]) == "undecided"]
    assert undecided == [], "a key of Karpenter's chart that is neither karpy's nor in karpenter-keys.yaml"
    assert set(karpenter_decisions()) <= {entry["key"] for entry in keys}, (
        "a decision for no key of Karpenter's"
    )
    for key in karpenter_decisions():
        assert decision(key) in {"refused", "ignored"}
        parts = key.split(".")
        assert not any(".".join(parts[:end]) in _karpy_value_paths() for end in range(1, len(parts) + 1)), key


@pytest.mark.parametrize("entry", karpenter_keys(), ids=lambda entry: entry["key"])
def test_the_schema_takes_every_key_of_karpenters_chart(entry: dict[str, Any]) -> None:
    """No "additional properties" error for Karpenter's keys, at its default or changed."""
    for value in (entry["default"], entry["changed"]):
        if value is None:
            continue  # Helm drops a null
        values = with_value(default_values(), entry["path"], value)
        for path, also in _also(entry.get("also", {})):
            with_value(values, path, also)
        assert schema_errors(values) == [], (entry["key"], value)


def _also(also: dict[str, Any], prefix: tuple[str, ...] = ()) -> Iterator[tuple[list[str], Any]]:
    for name, value in also.items():
        if isinstance(value, dict):
            yield from _also(value, (*prefix, name))
        else:
            yield [*prefix, name], value


def test_docs_install_decides_every_key_of_karpenters_chart() -> None:
    """docs/install.md's table of Karpenter's keys: each key once, with what karpy does with it."""
    text = DOCS.read_text()
    section = text[text.index("## A values file written for Karpenter") :]
    rows = {
        match.group(1): match.group(2)
        for match in re.finditer(
            r"^\| `([^`]+)`[^|]*\|.*\| (supported|ignored|refused)\b[^|]*\|$", section, re.MULTILINE
        )
    }
    for entry in karpenter_keys():
        assert entry["key"] in rows, f"docs/install.md has no row for Karpenter's {entry['key']}"
        assert rows[entry["key"]] == decision(entry["key"]), entry["key"]
