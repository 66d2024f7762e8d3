"""Manifests written the way Karpenter's and Kubernetes' docs write them, run as a user runs them.

``tests/data/realworld/`` holds NodePools and EC2NodeClasses with every field
of Karpenter's concept pages (v1 and v1beta1, a GPU pool on Bottlerocket, a
Windows pool) and workloads with what Kubernetes' docs put in a pod spec
(probes, volumes, init and sidecar containers, topology spread, affinity). A
valid field refused, a traceback, or a pod left pending that Karpenter would
run is a defect, whatever the unit tests say.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml
from tests.support import DATA, run_cli, simulate_json

REALWORLD = DATA / "realworld"
EVERY_FIELD_V1 = REALWORLD / "nodepool-v1-every-field.yaml"
EVERY_FIELD_V1BETA1 = REALWORLD / "nodepool-v1beta1-every-field.yaml"
GPU = REALWORLD / "nodepool-gpu-bottlerocket.yaml"
WINDOWS = REALWORLD / "nodepool-windows.yaml"
WORKLOADS = REALWORLD / "workloads.yaml"
CAPACITY_SPREAD = REALWORLD / "nodepools-capacity-spread.yaml"

VALID = [
    EVERY_FIELD_V1,
    EVERY_FIELD_V1BETA1,
    GPU,
    WORKLOADS,
    CAPACITY_SPREAD,
    pytest.param(
        WINDOWS,
        marks=pytest.mark.xfail(
            strict=True, reason="the bundled catalog offers Linux only, so a Windows pool matches no type"
        ),
    ),
]


@pytest.mark.parametrize("path", VALID, ids=lambda path: path.name)
def test_every_file_validates_with_no_error(capsys: pytest.CaptureFixture[str], path: Path) -> None:
    code, out, err = run_cli(capsys, "validate", str(path))
    assert code == 0, err
    assert "error:" not in err and "Traceback" not in err
    documents = [document for document in yaml.safe_load_all(path.read_text()) if document]
    assert out.count("ok: ") == len(documents)


def test_the_every_field_pool_runs_the_documented_workloads(capsys: pytest.CaptureFixture[str]) -> None:
    code, result, err = simulate_json(capsys, str(EVERY_FIELD_V1), str(WORKLOADS))
    assert code == 0, err
    phases = {pod["name"]: (pod["phase"], pod["unschedulableReason"]) for pod in result["pods"]}
    web = [phase for name, phase in phases.items() if name.startswith("web-")]
    assert [phase for phase, _ in web] == ["Running"] * 4
    # The pool's taint is not tolerated by the GPU pod; that is its one reason.
    assert phases["gpu-pod"] == (
        "Pending",
        "NodePool default: the pod does not tolerate taint example.com/special-taint:NoSchedule",
    )


def test_the_gpu_pool_runs_its_gpu_pods(capsys: pytest.CaptureFixture[str]) -> None:
    code, result, err = simulate_json(capsys, str(GPU))
    assert code == 0, err
    assert [pod["phase"] for pod in result["pods"]] == ["Running", "Running"]
    assert all(name.startswith(("g", "p")) for name in result["summary"]["instanceTypes"])


def test_the_v1beta1_manifests_convert_to_v1_that_validates(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = run_cli(capsys, "convert", str(EVERY_FIELD_V1BETA1))
    assert code == 0, err
    converted = tmp_path / "converted.yaml"
    converted.write_text(out)
    code, validated, err = run_cli(capsys, "validate", "--strict", str(converted))
    assert code == 0, err
    assert validated.count("ok: ") == 3 and "note: " not in err


def test_the_on_demand_spot_split_puts_one_pod_in_five_on_demand(capsys: pytest.CaptureFixture[str]) -> None:
    code, result, err = simulate_json(capsys, str(CAPACITY_SPREAD))
    assert code == 0, err
    pools = {claim["node"]: claim["nodepool"] for claim in result["nodeclaims"]}
    placed = Counter(pools[pod["node"]] for pod in result["pods"])
    assert placed == {"on-demand": 2, "spot": 8}
