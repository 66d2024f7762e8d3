"""``karpy simulate --from-cluster``'s command line: what it refuses before reading anything.

The run against a cluster is tests/integration/test_simulate_from_cluster.py.
"""

from __future__ import annotations

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
