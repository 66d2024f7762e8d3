"""``karpy validate`` reads what ``karpy simulate`` reads, Scenario files included.

A user checks a scenario before running it; before, a Scenario file (or a
directory holding one) was "unknown kind 'Scenario'" to validate while
simulate ran it. ``karpy convert`` reads files the way both do: directories,
UTF-16 with a byte-order mark, the same one-line errors.
"""

from __future__ import annotations

import codecs
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
