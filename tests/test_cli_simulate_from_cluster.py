"""``karpy simulate --from-cluster``'s command line: what it refuses before reading anything.

The run against a cluster is tests/integration/test_simulate_from_cluster.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.support import run_cli


def test_kubeconfig_without_from_cluster_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run_cli(capsys, "simulate", "--kubeconfig", "/nowhere")
    assert status == 2 and out == ""
    assert "--kubeconfig: only with --from-cluster" in err


def test_a_kubeconfig_that_cannot_be_read_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "missing.kubeconfig"
    status, out, err = run_cli(capsys, "simulate", "--from-cluster", "--kubeconfig", str(missing))
    assert status == 2 and out == ""
    assert err.startswith("karpy: --from-cluster: no cluster to run against:")
    assert len(err.strip().splitlines()) == 1


def test_an_api_server_that_cannot_be_reached_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "refused.kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\n"
        'clusters: [{name: c, cluster: {server: "http://127.0.0.1:1"}}]\n'
        "users: [{name: u, user: {}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
        "current-context: c\n"
    )
    status, out, err = run_cli(capsys, "simulate", "--from-cluster", "--kubeconfig", str(kubeconfig))
    assert status == 2 and out == ""
    assert err.startswith("karpy: --from-cluster: the API server cannot be reached:")
    assert len(err.strip().splitlines()) == 1


@pytest.fixture
def cluster_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """``karpy simulate --from-cluster`` reads the seed walkthrough's cluster, stopped steady."""
    from tests.sim.test_from_cluster import seed_walkthrough, snapshot_of

    import karpy.cli

    snapshot = snapshot_of(seed_walkthrough())
    monkeypatch.setattr(karpy.cli, "_read_cluster", lambda kubeconfig: snapshot)


SCALE_UP = """\
apiVersion: karpy.dev/v1alpha1
kind: Scenario
metadata: {name: scale-up}
spec:
  duration: 1h
  steps:
    - at: 1m
      scale: {kind: Deployment, namespace: default, name: karpenter-test, replicas: 12}
"""


def test_the_loaded_cluster_runs_with_a_scenarios_steps_after_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, cluster_read: None
) -> None:
    scenario = tmp_path / "scale.yaml"
    scenario.write_text(SCALE_UP)
    report = tmp_path / "run.html"
    status, out, err = run_cli(capsys, "simulate", "--from-cluster", str(scenario), "--report", str(report))
    assert status == 0, err
    assert "note: from the cluster: 2 Nodes, 2 NodeClaims, 5 Pods" in err
    assert "# scaled Deployment default/karpenter-test to 12 replicas" in out
    assert "  nodes at the start   2\n" in out
    launched = int(out.split("  nodes launched       ")[1].split(":")[0])
    assert launched >= 1  # seven more 1-CPU pods do not fit on the two nodes
    assert report.is_file()


def test_the_loaded_cluster_alone_as_json(capsys: pytest.CaptureFixture[str], cluster_read: None) -> None:
    status, out, err = run_cli(capsys, "simulate", "--from-cluster", "-o", "json")
    assert status == 0, err
    document = json.loads(out)
    assert document["scenario"] == "cluster"
    assert document["summary"]["nodeclaimsAtStart"] == 2
    assert all(pod["createdAt"] < 0 and pod["node"] for pod in document["pods"])
