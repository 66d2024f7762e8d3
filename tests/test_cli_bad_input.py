"""Bad input: one clear line per problem, exit status 2, no traceback, valid objects kept."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support import run_cli, simulate_json

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


@pytest.mark.parametrize("case", sorted(CASES))
def test_simulate_reports_bad_input_and_keeps_the_valid_objects(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file_name, text, fragments = CASES[case]
    bad = write(tmp_path, file_name, text)
    code, result, err = simulate_json(capsys, *seed_files(), str(bad))
    assert code == 2
    assert_one_line_error(err, *fragments)
    assert len(result["errors"]) == 1
    # The seed objects in the same run are not lost: the walkthrough still runs.
    running = [pod for pod in result["pods"] if pod["phase"] == "Running"]
    assert len(running) == 5


# Cases karpy validate reports as warnings, or as errors only with --strict.
WARNING_CASES = frozenset({"missing node class"})


@pytest.mark.parametrize("case", sorted(CASES))
def test_validate_reports_bad_input(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file_name, text, fragments = CASES[case]
    bad = write(tmp_path, file_name, text)
    strict = ["--strict"] if case in WARNING_CASES else []
    code, out, err = run_cli(capsys, "validate", *strict, *seed_files(), str(bad))
    assert code == 2
    assert_one_line_error(err, *fragments)
    assert "ok: " in out and "NodePool default" in out


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
