"""``karpy run``'s metrics, probes and JSON logs against the real control plane.

The runner (:class:`karpy.run.Runner`, as :func:`karpy.run.run` wires it)
runs in a background thread with its endpoints on free ports of 127.0.0.1.
A Deployment of three pods gets kwok nodes; the test then scrapes
``/metrics`` as Prometheus would (parsed with the strict reader in
``tests/prometheus_text.py``) and asks ``/healthz`` and ``/readyz`` as the
kubelet would; once the Deployment is gone and the empty nodes with it, the
disruption and termination counters must show them.

The NodePool, node class and pod labels are this module's own, so it cannot
take or disturb other tests' nodes on the shared control plane; every
assertion on a labelled series selects this module's NodePool.
"""

from __future__ import annotations

import json
import logging
import signal
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.prometheus_text import Exposition, parse

from karpy.kube._http import ApiTransport
from karpy.logs import JsonFormatter
from karpy.observability import ObservabilitySettings
from karpy.run import Runner, RunSettings

from .conftest import ControlPlane, wait_until
from .karpy_run import (
    LABEL_ARCH,
    as_yaml,
    deployment,
    get_items,
    node_class,
    nodepool,
    pool_claims,
    requirement,
    running_in_thread,
    running_karpy,
    start_karpy_run,
)

pytestmark = pytest.mark.integration

NODEPOOL = "it-observe"
APP = "it-observe-app"
REPLICAS = 3

MANIFESTS = as_yaml(
    node_class(NODEPOOL),
    nodepool(
        NODEPOOL,
        ["c5.large", "c5.xlarge"],
        consolidate_after="1s",
        requirements=[requirement(LABEL_ARCH, "amd64")],
        limits={"cpu": "64"},
    ),
)


def endpoints_on_free_ports() -> RunSettings:
    """Settings serving /metrics and the probes on any free ports of 127.0.0.1."""
    return RunSettings(
        observability=ObservabilitySettings(metrics_port=0, health_probe_port=0, bind_address="127.0.0.1")
    )


class Captured(logging.Handler):
    """The JSON lines the runner's loggers write, kept in memory."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.setFormatter(JsonFormatter())
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))


@dataclass
class Running:
    plane: ControlPlane
    runner: Runner
    logs: Captured

    @property
    def metrics_port(self) -> int:
        port = self.runner.observability.endpoints.metrics_port
        assert port is not None
        return port

    @property
    def probe_port(self) -> int:
        port = self.runner.observability.endpoints.health_probe_port
        assert port is not None
        return port


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def scrape(running: Running) -> Exposition:
    status, body = get(running.metrics_port, "/metrics")
    assert status == 200
    return parse(body)


@pytest.fixture
def running(crds: ControlPlane) -> Iterator[Running]:
    """A Runner with its endpoints on free ports, in a background thread; stopped and checked at the end."""
    transport = ApiTransport.from_kubeconfig(crds.kubeconfig)
    runner = Runner(transport, endpoints_on_free_ports())
    # Before its informers have listed, the runner is not ready.
    assert runner.observability.health.ready() == (False, "informer caches not synced")
    logs = Captured()
    karpy_logger = logging.getLogger("karpy")
    saved_level = karpy_logger.level
    karpy_logger.addHandler(logs)
    karpy_logger.setLevel(logging.INFO)
    try:
        with running_in_thread(crds, runner, pools=[NODEPOOL]):
            yield Running(crds, runner, logs)
    finally:
        karpy_logger.removeHandler(logs)
        karpy_logger.setLevel(saved_level)
        transport.close()


def pool_nodeclaims(plane: ControlPlane) -> list[dict[str, Any]]:
    return list(pool_claims(plane, NODEPOOL).values())


def test_metrics_probes_and_logs_of_a_scale_up_and_down(running: Running, namespace: str) -> None:
    plane = running.plane
    # The probes answer as soon as the runner has started: alive, and ready (caches synced).
    assert get(running.probe_port, "/healthz") == (200, "ok\n")
    assert get(running.probe_port, "/readyz") == (200, "ok\n")

    plane.kubectl("apply", "-f", "-", stdin=MANIFESTS)
    plane.kubectl("apply", "-f", "-", stdin=as_yaml(deployment(NODEPOOL, namespace, APP, REPLICAS)))

    def all_running() -> bool:
        pods = get_items(plane, "pods", "-n", namespace, "-l", f"app={APP}")
        running_pods = [pod for pod in pods if pod.get("status", {}).get("phase") == "Running"]
        return len(pods) == REPLICAS and len(running_pods) == REPLICAS

    wait_until(all_running, timeout=90, what=f"{REPLICAS} pods Running")
    claims = pool_nodeclaims(plane)
    assert claims
    claim_names = {claim["metadata"]["name"] for claim in claims}

    def scraped_after_startup() -> Exposition | None:
        # The pods' Running status reaches the runner's cache a moment after kubectl sees it.
        exposition = scrape(running)
        done = exposition.find("karpenter_pods_startup_duration_seconds_count")
        return exposition if done and done[0] >= REPLICAS else None

    exposition = wait_until(scraped_after_startup, timeout=30, what="the pods' start-up observed")
    assert exposition.types["karpenter_nodeclaims_created_total"] == "counter"
    created = exposition.value(
        "karpenter_nodeclaims_created_total",
        reason="provisioned",
        nodepool=NODEPOOL,
        min_values_relaxed="false",
    )
    assert created == len(claims) > 0
    assert exposition.value("karpenter_cluster_state_synced") == 1
    node_count = exposition.value("karpenter_cluster_state_node_count")
    assert node_count >= len(claims)
    usage = exposition.series("karpenter_nodepools_usage")
    assert usage[frozenset({("resource_type", "nodes"), ("nodepool", NODEPOOL)})] == len(claims)
    assert usage[frozenset({("resource_type", "cpu"), ("nodepool", NODEPOOL)})] >= REPLICAS
    assert exposition.value("karpenter_nodepools_limit", resource_type="cpu", nodepool=NODEPOOL) == 64
    solved = "karpenter_scheduler_scheduling_duration_seconds_count"
    assert exposition.value(solved, controller="provisioning") >= 1
    assert exposition.find("karpenter_scheduler_queue_depth", controller="provisioning")
    startup_max = exposition.value("karpenter_pods_startup_duration_seconds", quantile="1")
    assert 0 < startup_max < 90
    # Timed from when provisioning first saw the pods and found them a place, as Karpenter times them.
    assert exposition.value("karpenter_pods_scheduling_decision_duration_seconds_count") >= 1
    assert exposition.value("karpenter_pods_provisioning_startup_duration_seconds_count") >= 1
    assert exposition.value("karpenter_cluster_state_unsynced_time_seconds") == 0
    creates = exposition.value(
        "karpenter_cloudprovider_duration_seconds_count",
        controller="nodeclaim.lifecycle",
        method="Create",
        provider="kwok",
    )
    assert creates >= len(claims)

    # Each NodeClaim's creation is a JSON line naming it and its NodePool.
    created_lines = [
        line
        for line in running.logs.lines
        if line["logger"] == "karpy.provisioning" and str(line["message"]).startswith("created nodeclaim")
    ]
    ours = [line for line in created_lines if line.get("NodePool") == {"name": NODEPOOL}]
    logged = {line["NodeClaim"]["name"] for line in ours}
    assert logged == claim_names
    assert all(line["level"] == "INFO" and line["controller"] == "provisioning" for line in created_lines)

    plane.kubectl("delete", "deployment", APP, "-n", namespace, "--wait=false")
    wait_until(lambda: not pool_nodeclaims(plane), timeout=90, interval=1.0, what="the empty nodes removed")

    def scraped_after_termination() -> Exposition | None:
        exposition = scrape(running)
        terminated = sum(exposition.find("karpenter_nodeclaims_terminated_total", nodepool=NODEPOOL))
        # The usage gauge follows on the metrics controller's own reconcile of the deletions,
        # a moment after the termination counts them: both are waited for.
        nodes = exposition.value("karpenter_nodepools_usage", resource_type="nodes", nodepool=NODEPOOL)
        return exposition if terminated >= len(claims) and nodes == 0 else None

    exposition = wait_until(scraped_after_termination, timeout=30, what="the terminations counted")
    assert sum(exposition.find("karpenter_nodeclaims_terminated_total", nodepool=NODEPOOL)) == len(claims)
    disrupted = exposition.find("karpenter_nodeclaims_disrupted_total", reason="empty", nodepool=NODEPOOL)
    assert sum(disrupted) == len(claims)
    # Empty nodes set no pod moving; each instance's termination is timed.
    assert (
        sum(exposition.find("karpenter_pods_disruption_initiated_total", reason="empty", nodepool=NODEPOOL))
        == 0
    )
    instance = "karpenter_nodeclaims_instance_termination_duration_seconds_count"
    assert exposition.value(instance, nodepool=NODEPOOL) == len(claims)
    assert exposition.value("karpenter_nodepools_usage", resource_type="nodes", nodepool=NODEPOOL) == 0
    terminated_lines = [
        line
        for line in running.logs.lines
        if line["logger"] == "karpy.termination" and line.get("NodeClaim", {}).get("name") in claim_names
    ]
    assert {line["NodeClaim"]["name"] for line in terminated_lines} == claim_names
    assert all("Node" in line for line in terminated_lines)

    assert get(running.probe_port, "/healthz")[0] == 200


def test_the_endpoints_close_with_the_runner(crds: ControlPlane) -> None:
    with running_karpy(crds, endpoints_on_free_ports()) as runner:
        port = runner.observability.endpoints.metrics_port
        assert port is not None
        assert get(port, "/metrics")[0] == 200
    deadline = time.monotonic() + 5
    with pytest.raises(OSError):
        while time.monotonic() < deadline:
            get(port, "/metrics")
            time.sleep(0.1)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_karpy_run_takes_its_settings_from_the_environment_and_logs_json(
    crds: ControlPlane, tmp_path: Path
) -> None:
    """The command itself: settings from the environment, endpoints up, JSON on stderr, clean exit."""
    metrics_port, probe_port = free_port(), free_port()
    env = {
        "KUBECONFIG": str(crds.kubeconfig),
        "METRICS_PORT": str(metrics_port),
        "HEALTH_PROBE_PORT": str(probe_port),
        "CLUSTER_NAME": "it-observe-cluster",
        "LOG_LEVEL": "info",
        "DISABLE_LEADER_ELECTION": "true",  # a single replica; no Lease shared with other tests
    }
    karpy = start_karpy_run(crds, "observe", tmp_path, env=env)
    try:

        def ready() -> bool:
            if karpy.process.poll() is not None:
                pytest.fail(f"karpy run exited early:\n{karpy.log()}")
            try:
                return get(probe_port, "/readyz")[0] == 200
            except OSError:
                return False

        wait_until(ready, timeout=60, what="karpy run to be ready")
        assert get(probe_port, "/healthz")[0] == 200
        status, body = get(metrics_port, "/metrics")
        assert status == 200
        assert parse(body).value("karpenter_cluster_state_synced") == 1
        karpy.signal(signal.SIGTERM)
        assert karpy.wait_exit(30) == 0
    finally:
        karpy.stop()
    lines = [json.loads(line) for line in karpy.log().splitlines()]
    assert lines, "no log lines"
    assert {"level", "time", "logger", "message"} <= set(lines[0])
    starting = [line for line in lines if line["message"] == "starting"]
    assert starting and starting[0]["cluster"] == "it-observe-cluster"
    served = " ".join(str(line["message"]) for line in lines if line["logger"] == "karpy.http")
    assert f"port {metrics_port}" in served and f"port {probe_port}" in served
    assert any(str(line["message"]).startswith("stopped after") for line in lines)
    # Not a line per API request: the HTTP client speaks at debug level only.
    assert not any(str(line["logger"]).startswith(("httpx", "httpcore")) for line in lines)
