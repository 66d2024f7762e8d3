"""``karpy validate`` reads what ``karpy simulate`` reads, Scenario files included.

A user checks a scenario before running it; before, a Scenario file (or a
directory holding one) was "unknown kind 'Scenario'" to validate while
simulate ran it. ``karpy convert`` reads files the way both do: directories,
UTF-16 with a byte-order mark, the same one-line errors.
"""

from __future__ import annotations

import codecs
import re
from pathlib import Path

import pytest
from tests.support import run_cli, simulate_json
from tests.test_cli_bad_input import assert_one_line_error

from karpy.sim.scenario import builtin_scenario_path

SEED = builtin_scenario_path().parent
WORKLOADS = Path(__file__).parent / "data" / "scenarios" / "workloads"


def test_a_scenario_file_validates_with_every_object_it_applies(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "validate", str(SEED / "scenario.yaml"))
    assert code == 0, err
    assert "Scenario seed-walkthrough" in out
    for name in ("EC2NodeClass default", "NodePool default", "Deployment karpenter-test"):
        assert name in out
    assert "unknown kind" not in err and "warning: " not in err


def test_a_directory_holding_a_scenario_validates_as_simulate_reads_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run_cli(capsys, "validate", "--strict", str(WORKLOADS))
    assert code == 0, err
    assert "Scenario workloads" in out and "StatefulSet db" in out and "CronJob report" in out


def test_a_typo_in_a_scenario_is_an_error_and_the_scenario_is_not_ok(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(
        "apiVersion: karpy.dev/v1alpha1\nkind: Scenario\nmetadata: {name: typo}\n"
        f"spec:\n  durration: 1h\n  steps:\n    - apply: {{files: [{SEED / 'nodepool.yaml'}]}}\n"
    )
    code, out, err = run_cli(capsys, "validate", str(scenario))
    assert code == 2
    assert 'unknown field "spec.durration" (did you mean "duration"?)' in err
    assert "Scenario typo" not in out


def test_a_node_class_applied_by_a_later_step_counts_for_a_pool_of_an_earlier_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(
        "apiVersion: karpy.dev/v1alpha1\nkind: Scenario\nmetadata: {name: later}\nspec:\n  steps:\n"
        f"    - {{at: 0s, apply: {{files: [{SEED / 'nodepool.yaml'}]}}}}\n"
        f"    - {{at: 1m, apply: {{files: [{SEED / 'ec2nodeclass.yaml'}]}}}}\n"
    )
    code, _, err = run_cli(capsys, "validate", "--strict", str(scenario))
    assert code == 0, err


def test_a_pool_whose_class_no_step_applies_is_a_warning_or_with_strict_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(
        "apiVersion: karpy.dev/v1alpha1\nkind: Scenario\nmetadata: {name: alone}\nspec:\n  steps:\n"
        f"    - {{at: 0s, apply: {{files: [{SEED / 'nodepool.yaml'}]}}}}\n"
    )
    code, _, err = run_cli(capsys, "validate", str(scenario))
    assert code == 0 and "warning: " in err and 'EC2NodeClass "default"' in err
    code, _, err = run_cli(capsys, "validate", "--strict", str(scenario))
    assert code == 2 and "error: " in err and 'EC2NodeClass "default"' in err


def test_convert_reads_directories_and_utf16_files_like_the_other_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "nodepool.yaml").write_bytes(
        codecs.BOM_UTF16_LE + (SEED / "nodepool.yaml").read_text().encode("utf-16-le")
    )
    (tmp_path / "broken.yaml").write_bytes(b"kind: \xe9\n")
    code, out, err = run_cli(capsys, "convert", str(tmp_path))
    assert code == 2
    assert "apiVersion: karpenter.sh/v1\nkind: NodePool" in out
    [error] = [line for line in err.splitlines() if line.startswith("error: ")]
    assert "broken.yaml" in error and "not UTF-8 text" in error


def test_simulate_keeps_a_pool_whose_class_is_missing_and_its_pods_say_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, result, err = simulate_json(capsys, str(SEED / "nodepool.yaml"), str(SEED / "deployment.yaml"))
    assert code == 2
    assert_one_line_error(err, 'NodePool "default"', 'EC2NodeClass "default"', "not found")
    reasons = {pod["unschedulableReason"] for pod in result["pods"]}
    assert reasons == {"NodePool default: node class EC2NodeClass/default (karpenter.k8s.aws) not found"}
    [pool] = result["nodepools"]
    conditions = {condition["type"]: condition for condition in pool["conditions"]}
    assert (conditions["NodeClassReady"]["status"], conditions["NodeClassReady"]["reason"]) == (
        "False",
        "NodeClassNotFound",
    )
    assert conditions["Ready"]["status"] == "False"


def test_the_json_gives_each_pool_its_nodes_resources_and_conditions(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, result, err = simulate_json(capsys, "--duration", "2m", str(SEED))
    assert code == 0, err
    [pool] = result["nodepools"]
    live = [claim for claim in result["nodeclaims"] if claim["deletedAt"] is None]
    assert pool["nodes"] == len(live) > 0
    assert pool["resources"]["nodes"] == str(len(live))
    assert int(pool["resources"]["cpu"]) >= 5  # five 1-CPU pods run on the pool's nodes
    assert {c["type"]: c["status"] for c in pool["conditions"]} == {
        "ValidationSucceeded": "True",
        "NodeClassReady": "True",
        "Ready": "True",
    }


# Objects beside a Scenario in its own file: bad ones, a good one, and a document that is not YAML.
BESIDE = """\
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: bad}
spec:
  template:
    spec:
      requirments: []
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: app}
spec:
  replicas: 1
  selector: {matchLabels: {app: a}}
  template:
    metadata: {labels: {app: a}}
    spec:
      containers: [{name: a, image: x, resources: {requets: {cpu: 1}}}]
---
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: default}
---
kind: Pod
metadata: {name: no-version}
---
[not yaml
"""
SCENARIO_ABOVE = (
    "apiVersion: karpy.dev/v1alpha1\nkind: Scenario\nmetadata: {name: mixed}\n"
    "spec:\n  duration: 1h\n  steps:\n    - {at: 5m, delete: {kind: Deployment, name: app}}\n---\n"
)
SCENARIO_MISTAKES = {
    "none": ("", ""),
    "duration": ("duration: 1h", "duration: forever"),
    "step action": ("delete: {kind", "delet: {kind"),
    "step kind": ("kind: Deployment, name", "kind: Deploymnet, name"),
}


def _error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error: ")]


@pytest.mark.parametrize("mistake", sorted(SCENARIO_MISTAKES))
def test_the_objects_beside_a_scenario_are_reported_as_in_a_plain_manifest_file(
    mistake: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    right, wrong = SCENARIO_MISTAKES[mistake]
    scenario_text = SCENARIO_ABOVE.replace(right, wrong) if right else SCENARIO_ABOVE
    (tmp_path / "plain").mkdir()
    (tmp_path / "scenario").mkdir()
    plain, with_scenario = tmp_path / "plain" / "f.yaml", tmp_path / "scenario" / "f.yaml"
    plain.write_text(BESIDE)
    with_scenario.write_text(scenario_text + BESIDE)
    code, _, err = run_cli(capsys, "validate", str(plain))
    assert code == 2
    # The same errors, but for the directory and the lines the Scenario document adds above.
    shift = scenario_text.count("\n")
    expected = [
        re.sub(r"f\.yaml:(\d+):", lambda line: f"f.yaml:{int(line[1]) + shift}:", error).replace(
            str(plain), str(with_scenario)
        )
        for error in _error_lines(err)
    ]
    assert len(expected) == 4, err  # requirments, requets, no apiVersion, not YAML
    code, out, err = run_cli(capsys, "validate", str(with_scenario))
    assert code == 2
    errors = _error_lines(err)
    assert errors[: len(expected)] == expected
    scenario_errors = errors[len(expected) :]
    assert all('Scenario "mixed"' in error for error in scenario_errors), err
    assert len(scenario_errors) == (0 if mistake == "none" else 1), err
    assert ("ok: " + f"{with_scenario}: Scenario mixed" in out) == (mistake == "none")
    assert "KWOKNodeClass default" in out and "NodePool bad" not in out
    code, result, err = simulate_json(capsys, str(with_scenario))
    assert code == 2
    assert _error_lines(err) == errors and result["errors"] == [error[len("error: ") :] for error in errors]


def test_every_error_of_a_scenario_is_one_line_and_neither_command_runs_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(
        "apiVersion: karpy.dev/v1alpha1\nkind: Scenario\nmetadata: {name: three}\nspec:\n  duration: 1h\n"
        "  cloud:\n    capacityFailures: [{capacityType: spot, from: 30m, until: 10m}]\n"
        "  clusterAutoscaler:\n    nodeGroups: [{name: big, instanceTypes: [z99.mega], maxSize: 5}]\n"
        "  steps:\n"
        f"    - {{at: 0s, apply: {{files: [{SEED / 'ec2nodeclass.yaml'}, {SEED / 'nodepool.yaml'},"
        f" {SEED / 'deployment.yaml'}]}}}}\n"
        "    - {at: 90m, scale: {kind: Deployment, name: karpenter-test, replicas: 0}}\n"
    )
    expected = [
        'Scenario "three": spec.cloud.capacityFailures[0].until: 10m is not after from (30m)',
        'Scenario "three": spec.clusterAutoscaler.nodeGroups[0].instanceTypes[0]: unknown instance type'
        " 'z99.mega': the simulated cloud has the",
        'Scenario "three": spec.steps[1].at: 1h30m is after the end of the run (spec.duration 1h):'
        " the step would never run",
    ]
    for command in (["validate"], ["simulate", "--autoscaler", "cluster-autoscaler"]):
        code, out, err = run_cli(capsys, *command, str(scenario))
        assert code == 2, err
        errors = _error_lines(err)
        assert len(errors) == 3, err
        for error, fragment in zip(errors, expected, strict=True):
            assert fragment in error
        assert "Traceback" not in err and "ok: " + f"{scenario}: Scenario" not in out


def test_a_step_left_out_by_a_shorter_duration_is_a_warning(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "simulate", "--duration", "1m", str(SEED / "scenario.yaml"))
    assert code == 0, err
    [warning] = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert warning.endswith("spec.steps[1]: at 5m, after --duration 1m: not run")


def test_a_file_named_beside_a_scenario_of_its_directory_is_read_unless_a_step_applies_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "scenario.yaml").write_text(
        "apiVersion: karpy.dev/v1alpha1\nkind: Scenario\nmetadata: {name: beside}\nspec:\n"
        "  steps: [{at: 1m, apply: {files: [applied.yaml]}}]\n"
    )
    pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: %s}\nspec: {containers: [{name: a, %s: x}]}\n"
    (tmp_path / "applied.yaml").write_text(pod % ("applied", "image"))
    (tmp_path / "extra.yaml").write_text(pod % ("extra", "imagee"))
    files = [str(tmp_path / name) for name in ("scenario.yaml", "applied.yaml", "extra.yaml")]
    code, out, err = run_cli(capsys, "validate", *files)
    assert code == 2
    assert_one_line_error(err, "extra.yaml", 'Pod "extra"', "spec.containers[0].imagee")
    assert out.count("Pod applied") == 1  # by its step only
    # Given as the directory, its files are the steps' to name, as documented.
    code, out, err = run_cli(capsys, "validate", str(tmp_path))
    assert code == 0, err
    assert "Pod extra" not in out and out.count("Pod applied") == 1
