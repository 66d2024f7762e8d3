"""``karpy run`` out of the cluster as the chart's ServiceAccount, without ``LEADER_ELECTION_NAMESPACE``.

The chart grants its ServiceAccount Leases in its release namespace only. Run
as that account with a kubeconfig holding its token (docs/run.md):

- with the release namespace as the kubeconfig context's namespace, karpy
  takes the Lease there and leads, with no flag or variable;
- with no namespace in the context, the Lease is sought in ``default``, where
  the account may not: karpy says so in one error line naming the namespace
  and what to set, backs off, and ``/readyz`` answers 500 with that line, not
  200, for as long as it cannot take part in the election.
"""

from __future__ import annotations

import signal
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from .conftest import ControlPlane, wait_until
from .karpy_run import helm, install_chart, service_account_kubeconfig, start_karpy_run

pytestmark = pytest.mark.integration

RELEASE = "karpy-lease"
NAMESPACE = "karpy-lease"


@pytest.fixture(scope="module")
def account_kubeconfig(crds: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A kubeconfig with only a token of the chart's ServiceAccount, its context naming no namespace."""
    account = install_chart(
        crds, RELEASE, NAMESPACE, "rbac.create=true", "replicas=0", "settings.cloudProvider=kwok"
    )
    try:
        yield service_account_kubeconfig(crds, account, tmp_path_factory.mktemp("lease") / "karpy.kubeconfig")
    finally:
        helm(crds, "uninstall", RELEASE, "--namespace", NAMESPACE)
        crds.kubectl("delete", "namespace", NAMESPACE, "--wait=false")


def with_context_namespace(kubeconfig: Path, namespace: str, path: Path) -> Path:
    config = yaml.safe_load(kubeconfig.read_text())
    for context in config["contexts"]:
        context["context"]["namespace"] = namespace
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def readyz(port: int) -> tuple[int, str] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError:
        return None


def test_the_lease_goes_to_the_kubeconfig_context_namespace(
    crds: ControlPlane, account_kubeconfig: Path, tmp_path: Path
) -> None:
    kubeconfig = with_context_namespace(account_kubeconfig, NAMESPACE, tmp_path / "ns.kubeconfig")
    karpy = start_karpy_run(
        crds,
        "lease-context",
        tmp_path,
        "--kubeconfig",
        str(kubeconfig),
        env={"METRICS_PORT": "0", "HEALTH_PROBE_PORT": "0", "LOG_LEVEL": "info"},
    )
    try:
        karpy.wait_for(f"acquired lease {NAMESPACE}/karpy-leader-election")
        karpy.wait_for("controllers running")
        karpy.signal(signal.SIGTERM)
        assert karpy.wait_exit(30) == 0, karpy.tail()
    finally:
        karpy.stop()
    assert "forbidden" not in karpy.log().lower()


def test_a_refused_lease_is_said_once_and_the_replica_is_not_ready(
    crds: ControlPlane, account_kubeconfig: Path, tmp_path: Path
) -> None:
    probe_port = free_port()
    karpy = start_karpy_run(
        crds,
        "lease-refused",
        tmp_path,
        "--kubeconfig",
        str(account_kubeconfig),
        env={"METRICS_PORT": "0", "HEALTH_PROBE_PORT": str(probe_port), "LOG_LEVEL": "info"},
    )
    try:
        karpy.wait_for("running for lease default/karpy-leader-election")
        answer = wait_until(
            lambda: ((found := readyz(probe_port)) is not None and found[0] != 200 and found) or None,
            timeout=30,
            what="/readyz to say why it is not ready",
        )
        started = time.monotonic()
        # Over the ~3 s retries the old code made (a warning each), the replica stays not ready.
        while time.monotonic() - started < 15:
            found = readyz(probe_port)
            assert found is not None and found[0] != 200, found
            time.sleep(1)
        log = karpy.log()
    finally:
        karpy.stop()
    status, body = answer
    assert status == 500 and "LEADER_ELECTION_NAMESPACE" in body and "'default'" in body, answer
    refusals = [line for line in log.splitlines() if "refused lease default/karpy-leader-election" in line]
    assert len(refusals) == 1, refusals
    assert "Traceback" not in log
    assert "controllers running" not in log
