"""Bad input: one clear line per problem, exit status 2, no traceback, valid objects kept."""

from __future__ import annotations

import codecs
import json
import os
import shutil
import socket
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import pytest
import yaml
from benchmarks.trial_inputs import Outcome, run_capped
from tests.support import run_cli, simulate_json

from karpy.api.manifest import MAX_DOCUMENT_CHARS, MAX_NESTING_DEPTH, parse_manifests
from karpy.sim.files import MAX_FILE_BYTES
from karpy.sim.scenario import builtin_scenario_path

SEED = builtin_scenario_path().parent

NODEPOOL = """\
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {name}}}
spec:
  template:
    spec:
      requirements: {requirements}
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: {node_class}}}
  limits: {{cpu: "{cpu}"}}
"""


POD = """\
apiVersion: v1
kind: Pod
metadata: {{name: p, labels: {{app: p}}}}
spec:
  {spec}
  containers: [{{name: c, image: x, resources: {{requests: {{cpu: 100m}}}}}}]
"""

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{{selector}}}}}
  template:
    metadata: {{labels: {labels}}}
    spec:
      containers: [{{name: c, image: x, resources: {{requests: {{cpu: 100m}}}}}}]
"""


def nodepool(
    name: str = "broken",
    requirements: str = "[]",
    node_class: str = "default",
    cpu: str = "100",
) -> str:
    return NODEPOOL.format(name=name, requirements=requirements, node_class=node_class, cpu=cpu)


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text)
    return path


def seed_files() -> list[str]:
    return [str(SEED / "ec2nodeclass.yaml"), str(SEED / "nodepool.yaml"), str(SEED / "deployment.yaml")]


def assert_one_line_error(err: str, *fragments: str) -> None:
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, err
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    assert "Traceback" not in err


CASES = {
    "malformed YAML": (
        "bad.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n  labels: [unclosed\n",
        ("bad.yaml:", "invalid YAML"),
    ),
    "a key set twice in one mapping": (
        "twice.yaml",
        nodepool().replace("  limits:", "  weight: 10\n  weight: 20\n  limits:"),
        ("twice.yaml:", "invalid YAML", "key 'weight' already set in map"),
    ),
    "unknown kind": (
        "unknown.yaml",
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n",
        ("unknown.yaml", 'Widget "w"', "kind: unknown kind 'Widget'"),
    ),
    "requirements that can never be met": (
        "impossible.yaml",
        nodepool(
            requirements=(
                "[{key: kubernetes.io/arch, operator: In, values: [arm64]},"
                " {key: node.kubernetes.io/instance-type, operator: In, values: [c5.large]}]"
            )
        ),
        ("impossible.yaml", 'NodePool "broken"', "spec.template.spec.requirements", "no instance type"),
    ),
    "minValues the catalog cannot meet": (
        "minvalues.yaml",
        nodepool(
            requirements=(
                "[{key: karpenter.k8s.aws/instance-family, operator: In, values: [c5, m5, c4, r4, m5d],"
                " minValues: 5}]"
            )
        ),
        (
            "minvalues.yaml",
            'NodePool "broken"',
            "spec.template.spec.requirements",
            "do not meet minValues (karpenter.k8s.aws/instance-family: 2 values, minValues 5)",
        ),
    ),
    "contradictory requirements": (
        "contradiction.yaml",
        nodepool(
            requirements=(
                "[{key: kubernetes.io/arch, operator: In, values: [amd64]},"
                " {key: kubernetes.io/arch, operator: NotIn, values: [amd64]}]"
            )
        ),
        ("contradiction.yaml", 'NodePool "broken"', "spec.template.spec.requirements"),
    ),
    "negative quantity": (
        "negative.yaml",
        nodepool(cpu="-1"),
        ("negative.yaml", 'NodePool "broken"', "spec.limits", "cpu"),
    ),
    "misspelt field": (
        "typo.yaml",
        nodepool().replace("requirements:", "requirments:"),
        (
            "typo.yaml",
            'NodePool "broken"',
            'spec.template.spec.requirments: unknown field "spec.template.spec.requirments"',
            '(did you mean "requirements"?)',
        ),
    ),
    "misspelt resource name": (
        "cpus.yaml",
        nodepool().replace("{cpu:", "{cpus:"),
        (
            "cpus.yaml",
            'NodePool "broken"',
            'spec.limits.cpus: unknown resource name "cpus"',
            'did you mean "cpu"',
        ),
    ),
    "replicas beyond int32": (
        "huge.yaml",
        DEPLOYMENT.format(
            name="huge", replicas="99999999999999999999999", selector="app: huge", labels="{app: huge}"
        ),
        ("huge.yaml", 'Deployment "huge"', "spec.replicas", "cannot unmarshal number", "int32"),
    ),
    "a name the API server refuses": (
        "name.yaml",
        DEPLOYMENT.format(name="Web_1", replicas=1, selector="app: web", labels="{app: web}"),
        ("name.yaml", 'Deployment "Web_1"', "metadata.name", "RFC 1123 subdomain"),
    ),
    "a name longer than 253 characters": (
        "long.yaml",
        DEPLOYMENT.format(name="a" * 254, replicas=1, selector="app: web", labels="{app: web}"),
        ("long.yaml", "metadata.name", "no more than 253 characters"),
    ),
    "a label key with a space": (
        "label.yaml",
        DEPLOYMENT.format(name="web", replicas=1, selector="app: web", labels="{app: web, 'my team': a}"),
        ("label.yaml", 'Deployment "web"', "spec.template.labels", 'Invalid value: "my team"'),
    ),
    "a label value longer than 63 characters": (
        "value.yaml",
        DEPLOYMENT.format(
            name="web", replicas=1, selector="app: web", labels="{app: web, team: " + "x" * 64 + "}"
        ),
        ("value.yaml", "spec.template.labels", 'Invalid value: "xxx', "no more than 63 bytes"),
    ),
    "a selector that does not select the template": (
        "selector.yaml",
        DEPLOYMENT.format(name="web", replicas=1, selector="app: api", labels="{app: web}"),
        ("selector.yaml", 'Deployment "web"', "spec.template.metadata.labels", "does not match"),
    ),
    "a spread constraint with an unknown whenUnsatisfiable": (
        "spread.yaml",
        POD.format(
            spec="topologySpreadConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, "
            "whenUnsatisfiable: Whatever, labelSelector: {matchLabels: {app: p}}}]"
        ),
        (
            "spread.yaml",
            'Pod "p"',
            "whenUnsatisfiable",
            'Unsupported value: "Whatever"',
            '"DoNotSchedule", "ScheduleAnyway"',
        ),
    ),
    "pod anti-affinity without a topologyKey": (
        "anti.yaml",
        POD.format(
            spec="affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: "
            "[{labelSelector: {matchLabels: {app: p}}}]}}"
        ),
        (
            "anti.yaml",
            'Pod "p"',
            "podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey",
        ),
    ),
    "missing node class": (
        "orphan.yaml",
        nodepool(node_class="does-not-exist"),
        (
            "orphan.yaml",
            'NodePool "broken"',
            "spec.template.spec.nodeClassRef",
            '"does-not-exist"',
            "not found",
        ),
    ),
}


# Cases karpy validate reports as warnings, or as errors only with --strict.
WARNING_CASES = frozenset({"missing node class"})


def test_validate_accepts_the_seed_manifests(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "validate", *seed_files())
    assert code == 0, err
    assert out.count("ok: ") == 3
    assert "converted from karpenter.sh/v1beta1" in out


def test_validate_checks_a_scenario_and_the_objects_it_applies(capsys: pytest.CaptureFixture[str]) -> None:
    # The seed directory, as karpy simulate runs it: a Scenario and the files it applies.
    code, out, err = run_cli(capsys, "validate", "--strict", str(SEED))
    assert code == 0, err
    assert sorted(line.split(": ")[-1] for line in out.splitlines() if line.startswith("ok: ")) == [
        "Deployment karpenter-test",
        "EC2NodeClass default",
        "NodePool default",
        "Scenario seed-walkthrough",
    ]


def test_validate_reports_a_scenarios_typos_like_simulate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = (SEED / "scenario.yaml").read_text().replace("steps:", "stepz:", 1)
    for name in ("nodepool.yaml", "ec2nodeclass.yaml", "deployment.yaml"):
        write(tmp_path, name, (SEED / name).read_text())
    bad = write(tmp_path, "scenario.yaml", scenario)
    code, out, err = run_cli(capsys, "validate", str(bad))
    assert code == 2
    assert_one_line_error(err, 'Scenario "seed-walkthrough"', "spec.stepz", 'did you mean "steps"')
    assert "unknown kind" not in err and "Scenario" not in out


def test_validating_one_nodepool_warns_that_its_node_class_is_not_in_the_files(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run_cli(capsys, "validate", str(SEED / "nodepool.yaml"))
    assert code == 0, err
    assert "ok: " in out and "NodePool default" in out
    assert "error: " not in err
    [warning] = [line for line in err.splitlines() if line.startswith("warning: ")]
    for fragment in (
        "nodepool.yaml",
        'NodePool "default"',
        "spec.template.spec.nodeClassRef",
        'EC2NodeClass "default"',
        "may exist in the cluster",
    ):
        assert fragment in warning


def test_strict_validation_makes_a_missing_node_class_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "validate", "--strict", str(SEED / "nodepool.yaml"))
    assert code == 2
    assert_one_line_error(err, 'NodePool "default"', 'EC2NodeClass "default"', "not found")
    assert "warning: " not in err
    assert "NodePool default" not in out


def test_strict_validation_of_complete_manifests_passes(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "validate", "--strict", *seed_files())
    assert code == 0, err
    assert "warning: " not in err


def test_a_nodepool_with_a_missing_node_class_is_still_checked_for_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    impossible = (
        "[{key: kubernetes.io/arch, operator: In, values: [amd64]},"
        " {key: kubernetes.io/arch, operator: NotIn, values: [amd64]}]"
    )
    pool = write(tmp_path, "pool.yaml", nodepool(node_class="elsewhere", requirements=impossible))
    code, _, err = run_cli(capsys, "validate", str(pool))
    assert code == 2
    assert_one_line_error(err, 'NodePool "broken"', "spec.template.spec.requirements")
    assert 'EC2NodeClass "elsewhere"' in err and "warning: " in err


def test_a_missing_file_is_an_error_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(capsys, "validate", str(tmp_path / "nope.yaml"))
    assert code == 2
    assert_one_line_error(err, "nope.yaml", "no such file")


def test_valid_documents_in_a_file_with_a_bad_one_are_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mixed = write(
        tmp_path,
        "mixed.yaml",
        (SEED / "deployment.yaml").read_text() + "\n---\napiVersion: v1\nkind: Gizmo\nmetadata: {name: g}\n",
    )
    code, result, err = simulate_json(
        capsys, str(SEED / "ec2nodeclass.yaml"), str(SEED / "nodepool.yaml"), str(mixed)
    )
    assert code == 2
    assert_one_line_error(err, "mixed.yaml", 'Gizmo "g"')
    assert sum(1 for pod in result["pods"] if pod["phase"] == "Running") == 5


def test_a_does_not_exist_requirement_is_not_mistaken_for_a_contradiction(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pool = write(
        tmp_path,
        "pool.yaml",
        nodepool(name="plain", requirements="[{key: example.com/gpu, operator: DoesNotExist}]"),
    )
    code, out, err = run_cli(capsys, "validate", str(SEED / "ec2nodeclass.yaml"), str(pool))
    assert code == 0, err
    assert "NodePool plain" in out


# Files that are not the UTF-8 YAML a manifest should be, or that would make a
# naive loader recurse or expand without bound. Each is (file name, bytes, the
# fragments its one error line holds).
CONFIG_MAP = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\n"
DEPTH = 3000
LAUGH_LEVELS = "".join(
    f"  l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * 9)}]\n" for level in range(1, 10)
)
ADVERSARIAL: dict[str, tuple[str, bytes, tuple[str, ...]]] = {
    "binary": ("binary.yaml", bytes(range(256)) * 16, ("binary.yaml:", "binary data")),
    "NUL bytes in text": (
        "nul.yaml",
        CONFIG_MAP.replace("ConfigMap", "Config\x00Map").encode(),
        ("nul.yaml:", "binary data", "NUL byte at line 2, column 13"),
    ),
    "Latin-1": (
        "latin1.yaml",
        CONFIG_MAP.replace("settings", "caf\u00e9").encode("latin-1"),
        ("latin1.yaml:", "not UTF-8 text", "0xE9", "line 3, column 21"),
    ),
    "UTF-32 with a byte-order mark": (
        "utf32.yaml",
        CONFIG_MAP.encode("utf-32"),
        ("utf32.yaml:", "UTF-32LE text", "UTF-8 or UTF-16"),
    ),
    "UTF-16 with a mark but an odd length": (
        "utf16-cut.yaml",
        CONFIG_MAP.encode("utf-16")[:-1],
        ("utf16-cut.yaml:", "not UTF-16LE text"),
    ),
    "deep flow sequences": (
        "deep-seq.yaml",
        ("[" * DEPTH + "]" * DEPTH).encode(),
        ("deep-seq.yaml:1:257:", "nested deeper than 256 levels"),
    ),
    "deep flow mappings": (
        "deep-flow-map.yaml",
        ("{a: " * DEPTH + "1" + "}" * DEPTH).encode(),
        ("deep-flow-map.yaml:1:1025:", "nested deeper than 256 levels"),
    ),
    "deep block mappings": (
        "deep-block.yaml",
        "".join(" " * level + "a:\n" for level in range(DEPTH)).encode(),
        ("deep-block.yaml:257:", "nested deeper than 256 levels"),
    ),
    "deep through aliases": (
        "deep-alias.yaml",
        (
            "a0: &a0 x\n" + "".join(f"a{level}: &a{level} [*a{level - 1}]\n" for level in range(1, 300))
        ).encode(),
        ("deep-alias.yaml:", "nested deeper than 256 levels through aliases"),
    ),
    "an alias inside its own anchor": (
        "cycle.yaml",
        (CONFIG_MAP + "data: &loop {self: *loop}\n").encode(),
        ("cycle.yaml:4:", "alias *loop is inside its own anchor"),
    ),
    "billion laughs": (
        "laughs.yaml",
        (CONFIG_MAP + "data:\n  l0: &l0 lol\n" + LAUGH_LEVELS).encode(),
        ("laughs.yaml:", "aliases add more than 400,000 nodes"),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES | ADVERSARIAL))
def test_simulate_reports_bad_input_and_keeps_the_valid_objects(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file_name, text, fragments = (CASES | ADVERSARIAL)[case]
    bad = tmp_path / file_name
    bad.write_bytes(text if isinstance(text, bytes) else text.encode())
    code, result, err = simulate_json(capsys, *seed_files(), str(bad))
    assert code == 2
    assert_one_line_error(err, *fragments)
    assert len(result["errors"]) == 1
    # The seed objects in the same run are not lost: the walkthrough still runs.
    running = [pod for pod in result["pods"] if pod["phase"] == "Running"]
    assert len(running) == 5


@pytest.mark.parametrize("case", sorted(CASES | ADVERSARIAL))
def test_validate_reports_bad_input(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file_name, text, fragments = (CASES | ADVERSARIAL)[case]
    bad = tmp_path / file_name
    bad.write_bytes(text if isinstance(text, bytes) else text.encode())
    strict = ["--strict"] if case in WARNING_CASES else []
    code, out, err = run_cli(capsys, "validate", *strict, *seed_files(), str(bad))
    assert code == 2
    assert_one_line_error(err, *fragments)
    assert "ok: " in out and "NodePool default" in out


# kubectl reads a UTF-8 byte-order mark and UTF-16 with a mark (either byte order) as text.
ENCODINGS = {
    "UTF-8 with a byte-order mark": codecs.BOM_UTF8 + (SEED / "deployment.yaml").read_bytes(),
    "UTF-16LE with a byte-order mark": codecs.BOM_UTF16_LE
    + (SEED / "deployment.yaml").read_text().encode("utf-16-le"),
    "UTF-16BE with a byte-order mark": codecs.BOM_UTF16_BE
    + (SEED / "deployment.yaml").read_text().encode("utf-16-be"),
}


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_a_manifest_kubectl_reads_is_read(
    encoding: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deployment = tmp_path / "deployment.yaml"
    deployment.write_bytes(ENCODINGS[encoding])
    code, result, err = simulate_json(
        capsys, str(SEED / "ec2nodeclass.yaml"), str(SEED / "nodepool.yaml"), str(deployment)
    )
    assert code == 0, err
    assert sum(1 for pod in result["pods"] if pod["phase"] == "Running") == 5


def test_the_deepest_nesting_allowed_loads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nested = "[" * MAX_NESTING_DEPTH + "]" * MAX_NESTING_DEPTH
    config_map = write(tmp_path, "deep.yaml", CONFIG_MAP + f"data: {{x: {nested[2:-2]}}}\n")
    code, out, err = run_cli(capsys, "validate", str(config_map))
    assert code == 0, err
    assert 'ConfigMap "settings": skipped' in out


def test_a_billion_laughs_is_refused_without_being_expanded() -> None:
    text = CONFIG_MAP + "data:\n  l0: &l0 lol\n" + LAUGH_LEVELS
    tracemalloc.start()
    started = time.process_time()
    result = parse_manifests(text, "laughs.yaml")
    elapsed = time.process_time() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert [error.split(": ", 1)[1] for error in result.errors] == [
        "document too complex: aliases add more than 400,000 nodes"
    ]
    assert elapsed < 1.0 and peak < 10_000_000


def test_a_huge_scalar_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config_map = write(tmp_path, "big.yaml", CONFIG_MAP + "data: {x: " + "a" * 2_000_000 + "}\n")
    code, out, err = run_cli(capsys, "validate", *seed_files(), str(config_map))
    assert code == 0, err
    assert out.count("ok: ") == 3 and 'ConfigMap "settings": skipped' in out


def copy_seed_manifests(directory: Path) -> None:
    for name in ("ec2nodeclass.yaml", "nodepool.yaml", "deployment.yaml"):
        (directory / name).write_bytes((SEED / name).read_bytes())


def test_a_scenario_reports_an_unreadable_file_it_applies_and_runs_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy_seed_manifests(tmp_path)
    (tmp_path / "binary.yaml").write_bytes(bytes(range(256)))
    (tmp_path / "deep.yaml").write_text("[" * DEPTH + "]" * DEPTH)
    scenario = (
        (SEED / "scenario.yaml").read_text().replace("deployment.yaml]", "deployment.yaml, binary.yaml]")
    )
    write(tmp_path, "scenario.yaml", scenario)
    code, result, err = simulate_json(capsys, str(tmp_path))
    assert code == 2
    assert_one_line_error(err, "binary.yaml:", "binary data")
    assert result["summary"]["nodeclaimsLaunched"] >= 1
    assert result["summary"]["allRunningAt"] is not None


def test_a_directory_with_a_deeply_nested_file_is_reported_and_the_rest_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy_seed_manifests(tmp_path)
    (tmp_path / "deep.yaml").write_text("[" * DEPTH + "]" * DEPTH)
    code, result, err = simulate_json(capsys, str(tmp_path))
    assert code == 2
    assert_one_line_error(err, "deep.yaml:1:257:", "nested deeper than 256 levels")
    assert sum(1 for pod in result["pods"] if pod["phase"] == "Running") == 5


def test_a_syntax_error_after_the_scenario_in_its_file_is_reported_and_the_scenario_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy_seed_manifests(tmp_path)
    write(tmp_path, "scenario.yaml", (SEED / "scenario.yaml").read_text() + "---\nitems: [unclosed\n")
    code, result, err = simulate_json(capsys, str(tmp_path))
    assert code == 2
    assert_one_line_error(err, "scenario.yaml:", "invalid YAML")
    assert result["scenario"] == "seed-walkthrough"
    assert result["summary"]["allRunningAt"] is not None


def test_a_directory_whose_scenario_is_json_runs_the_scenario(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A directory stands for its .json files as for its .yaml ones, the Scenario among them.
    copy_seed_manifests(tmp_path)
    scenario = yaml.safe_load((SEED / "scenario.yaml").read_text())
    write(tmp_path, "scenario.json", json.dumps(scenario))
    code, result, err = simulate_json(capsys, str(tmp_path))
    assert code == 0, err
    assert result["scenario"] == "seed-walkthrough"
    assert result["summary"]["allRunningAt"] is not None


NOTHING_TO_READ = {
    "an empty file": ("empty.yaml", ""),
    "a file of comments": (
        "comments.yaml",
        "# Source: chart/templates/disabled.yaml\n---\n# nothing rendered\n",
    ),
    "a directory of no manifests": ("manifests", None),
}


@pytest.mark.parametrize("case", sorted(NOTHING_TO_READ))
@pytest.mark.parametrize("command", ["validate", "simulate"])
def test_input_holding_no_object_is_one_error_not_an_empty_success(
    case: str, command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name, text = NOTHING_TO_READ[case]
    path = tmp_path / name
    if text is None:
        path.mkdir()
        write(path, "README.md", "# not a manifest\n")
    else:
        path.write_text(text)
    code, _, err = run_cli(capsys, command, str(path))
    assert code == 2
    assert_one_line_error(err, f"{path}: no Kubernetes objects")


def test_a_file_of_skipped_kinds_is_not_reported_as_holding_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_map = write(tmp_path, "settings.yaml", CONFIG_MAP)
    code, out, err = run_cli(capsys, "validate", str(config_map))
    assert code == 0, err
    assert 'ConfigMap "settings": skipped' in out


def test_keys_a_merge_brings_in_may_be_overridden() -> None:
    text = CONFIG_MAP + "data:\n  <<: &base {mode: fast, level: '1'}\n  mode: slow\n"
    result = parse_manifests(text, "merge.yaml")
    assert result.errors == [] and len(result.notes) == 1


def test_the_objects_beside_a_scenario_in_its_file_are_applied_at_time_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # One file holding everything, as a user writes it: the Scenario, then its manifests.
    scenario = (
        "apiVersion: karpy.dev/v1alpha1\nkind: Scenario\nmetadata: {name: one-file}\nspec: {duration: 1h}\n"
    )
    manifests = [
        (SEED / name).read_text() for name in ("ec2nodeclass.yaml", "nodepool.yaml", "deployment.yaml")
    ]
    everything = write(tmp_path, "everything.yaml", "\n---\n".join([scenario, *manifests]))
    code, out, err = run_cli(capsys, "validate", str(everything))
    assert code == 0, err
    assert out.count("ok: ") == 4
    code, result, err = simulate_json(capsys, str(everything))
    assert code == 0, err
    assert result["scenario"] == "one-file"
    assert sum(1 for pod in result["pods"] if pod["phase"] == "Running") == 5


def test_a_second_scenario_in_the_file_is_an_error_not_silently_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy_seed_manifests(tmp_path)
    seed = (SEED / "scenario.yaml").read_text()
    write(tmp_path, "scenario.yaml", seed + "---\n" + seed.replace("seed-walkthrough", "second"))
    code, _, err = run_cli(capsys, "validate", str(tmp_path / "scenario.yaml"))
    assert code == 2
    assert_one_line_error(err, 'Scenario "second": not run', '"seed-walkthrough"')


# -- files that are no manifests, operating system errors, sizes ----------------------------------


def capped_karpy(*args: str, timeout: float = 60.0, user: int | None = None) -> Outcome:
    """``karpy ARGS`` in a process of its own under the trials' memory cap and ``timeout``."""
    return run_capped([sys.executable, "-m", "karpy.cli", *args], Path.cwd(), timeout=timeout, user=user)


def assert_refused_in_one_line(outcome: Outcome, *fragments: str) -> None:
    assert outcome.code == 2, (outcome.code, outcome.err[-2000:])
    assert not outcome.traceback, outcome.err[-2000:]
    lines = [line for line in outcome.err.splitlines() if line.startswith(("error: ", "karpy: "))]
    assert len(lines) == 1, outcome.err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


SPECIAL_FILES = {
    "/dev/zero named": ("convert", "/dev/zero", None),
    "/dev/urandom named": ("simulate", "/dev/urandom", None),
    "a *.yaml link to /dev/zero in a directory": ("simulate", "zero.yaml", "/dev/zero"),
    "a FIFO in a directory": ("validate", "pipe.yaml", "fifo"),
}


@pytest.mark.parametrize("case", sorted(SPECIAL_FILES))
def test_a_special_file_is_refused_without_being_read(case: str, tmp_path: Path) -> None:
    # Before: /dev/zero was read until the kernel killed karpy (22.6 GB); a FIFO blocked for ever.
    command, name, target = SPECIAL_FILES[case]
    if target is None:
        paths = [name]
    else:
        copy_seed_manifests(tmp_path)
        if target == "fifo":
            os.mkfifo(tmp_path / name)
        else:
            (tmp_path / name).symlink_to(target)
        paths = [str(tmp_path)]
    outcome = capped_karpy(command, *paths, timeout=60)
    assert_refused_in_one_line(outcome, name, "not a regular file")
    assert outcome.peak_rss < 300 * 1024 * 1024
    if target is not None and command == "simulate":
        assert "nodes launched" in outcome.out  # the directory's other files still ran


def test_a_symbolic_link_loop_is_said_to_be_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.yaml").symlink_to(tmp_path / "b.yaml")
    (tmp_path / "b.yaml").symlink_to(tmp_path / "a.yaml")
    for paths in ([str(tmp_path / "a.yaml")], [str(tmp_path)]):
        code, _, err = run_cli(capsys, "validate", *paths)
        assert code == 2
        assert "no such file" not in err and "symbolic link loop" in err, err
        assert "Traceback" not in err


@pytest.mark.parametrize("command", ["validate", "simulate", "convert"])
@pytest.mark.parametrize("name", ["x" * 300 + ".yaml", "d" * 300, "abcdefgh/" * 550 + "x.yaml"])
def test_a_name_too_long_is_one_line(
    command: str, name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: OSError: [Errno 36] File name too long, as a traceback.
    code, _, err = run_cli(capsys, command, str(tmp_path / name))
    assert code == 2
    assert_one_line_error(err, "file name too long")


def test_a_directory_without_read_permission_is_one_line(tmp_path: Path) -> None:
    # Root reads anything: the check runs as nobody then (in a directory nobody may enter).
    as_root = os.geteuid() == 0
    if as_root and shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv to drop the privilege")
    scratch = Path(tempfile.mkdtemp(prefix="karpy-permission-"))
    try:
        scratch.chmod(0o755)
        locked = scratch / "locked"
        locked.mkdir()
        (locked / "app.yaml").write_text((SEED / "deployment.yaml").read_text())
        locked.chmod(0)
        user = 65534 if as_root else None
        for command in ("validate", "simulate", "convert"):
            outcome = capped_karpy(command, str(locked), user=user)
            assert_refused_in_one_line(outcome, "locked", "permission denied")
        outcome = capped_karpy("validate", str(locked / "app.yaml"), user=user)
        assert_refused_in_one_line(outcome, "app.yaml", "permission denied")
    finally:
        locked.chmod(0o755)
        shutil.rmtree(scratch)


def test_a_file_over_the_size_limit_is_refused_before_it_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    big = tmp_path / "big.yaml"
    with big.open("wb") as file:
        file.truncate(MAX_FILE_BYTES + 1)  # sparse: nothing written, nothing to read but zeros
    tracemalloc.start()
    try:
        code, _, err = run_cli(capsys, "validate", str(big))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert code == 2
    assert_one_line_error(err, "big.yaml", "8.0 MiB, more than the 8.0 MiB karpy reads from one file")
    assert peak < MAX_FILE_BYTES / 2


def test_a_document_over_the_api_servers_request_limit_is_refused() -> None:
    huge = CONFIG_MAP + "data: {x: " + "a" * MAX_DOCUMENT_CHARS + "}\n"
    result = parse_manifests(f"{CONFIG_MAP}---\n{huge}---\n{CONFIG_MAP}", "big.yaml")
    assert len(result.errors) == 1
    assert "document too complex: a document longer than 3 MiB" in result.errors[0]
    assert len(result.notes) == 1  # the document before it was read


def test_a_scale_step_beyond_int32_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy_seed_manifests(tmp_path)
    seed = (SEED / "scenario.yaml").read_text()
    scale = "    - at: 10m\n      scale: {kind: Deployment, name: karpenter-test, replicas: 3000000000}\n"
    write(tmp_path, "scenario.yaml", seed + scale)
    code, _, err = run_cli(capsys, "validate", str(tmp_path / "scenario.yaml"))
    assert code == 2
    assert_one_line_error(err, "replicas", "3000000000 is over 2147483647")


def test_a_million_replicas_are_refused_by_simulate_before_a_pod_is_made(tmp_path: Path) -> None:
    # Before: 1.6 GB within a minute and no word. The API server takes a million replicas, so
    # validate does too; simulate says it would pass its memory budget, in a second.
    copy_seed_manifests(tmp_path)
    deployment = tmp_path / "deployment.yaml"
    deployment.write_text(deployment.read_text().replace("replicas: 5", "replicas: 1000000"))
    outcome = capped_karpy("simulate", str(tmp_path), timeout=60)
    assert_refused_in_one_line(outcome, "1,000,000 pods", "Deployment default/karpenter-test", "at most")
    assert outcome.peak_rss < 300 * 1024 * 1024
    assert capped_karpy("validate", str(tmp_path)).code == 0


def test_a_load_trace_that_is_not_text_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy_seed_manifests(tmp_path)
    (tmp_path / "trace.csv").write_bytes(bytes(range(128, 256)))
    seed = (SEED / "scenario.yaml").read_text()
    load = "  load:\n    - {kind: Deployment, name: karpenter-test, cpu: {csv: {file: trace.csv}}}\n"
    write(tmp_path, "scenario.yaml", seed.replace("  steps:\n", load + "  steps:\n", 1))
    code, _, err = run_cli(capsys, "validate", str(tmp_path / "scenario.yaml"))
    assert code == 2
    assert_one_line_error(err, "trace.csv", "not UTF-8")


def test_karpy_run_with_its_metrics_port_in_use_says_so_in_one_line(tmp_path: Path) -> None:
    kubeconfig = write(
        tmp_path,
        "kubeconfig",
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n",
    )
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        outcome = capped_karpy(
            "run", "--kubeconfig", str(kubeconfig), "--metrics-port", str(port), "--health-probe-port", "0"
        )
    assert_refused_in_one_line(outcome, f"cannot serve /metrics on port {port}", "address already in use")


@pytest.mark.parametrize("kubeconfig", ["/dev/zero", "directory"])
def test_karpy_run_with_a_kubeconfig_that_is_no_file_says_so_in_one_line(
    kubeconfig: str, tmp_path: Path
) -> None:
    # Before: /dev/zero was read as YAML until memory ran out.
    path = kubeconfig if kubeconfig.startswith("/") else str(tmp_path)
    outcome = capped_karpy("run", "--kubeconfig", path, "--metrics-port", "0", "--health-probe-port", "0")
    assert_refused_in_one_line(outcome, f"kubeconfig {path}")
