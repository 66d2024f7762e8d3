"""Karpenter's Grafana dashboards against a real Prometheus scraping ``karpy run``, on kwok nodes.

Prometheus (``scripts/prometheus build``: the server built from the Go module proxy, cached in
~/.cache/karpy/prometheus) scrapes ``karpy run``'s ``/metrics`` every second, as job ``karpenter``,
through the seed walkthrough on this module's own control plane with the real kwok: a NodePool with
limits, a DaemonSet on its nodes and a Deployment of five 1 CPU / 1Gi pods, scaled down to two (a
consolidation) and then to none (the empty nodes go). Every query of Karpenter's published
dashboards (tests/data/dashboards/, their template variables given values as Grafana would) is then
evaluated over the whole run through Prometheus's HTTP API (``query_range``); each must return data,
but for the panels listed in :data:`NO_DATA` with why, which must return none (so the list cannot go
stale). The table of every panel is printed and kept in docs/dashboards.md.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from karpy.observability import ObservabilitySettings
from karpy.run import RunSettings

from .conftest import KWOK_AGENT, REPO, ControlPlane, running_control_plane, wait_until
from .karpy_run import (
    LABEL_ARCH,
    LABEL_OS,
    as_yaml,
    deployment,
    get_items,
    node_class,
    nodepool,
    pool_claims,
    requirement,
    running_karpy,
)

pytestmark = pytest.mark.integration

PROMETHEUS = REPO / "scripts" / "prometheus"
DASHBOARDS = REPO / "tests" / "data" / "dashboards"
NODEPOOL = "it-dashboards"
APP = "dashboards-walkthrough"
INSTANCE_TYPES = ["c5.large", "c5.xlarge", "m5.large", "m5.xlarge"]
CONSOLIDATE_AFTER = 10.0
REPLICAS = 5
STEP = "2s"

# The template variables, as Grafana would give them: every value of a label (All), and for the
# one-value variables, one karpy has.
VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "1m",
    "$__range": "10m",
    "$trailing": "1m",
    "$controller": "disruption",
    "$provisioner": ".*",
    "$nodepool": ".*",
    "$zone": ".*",
    "$arch": ".*",
    "$capacity_type": ".*",
    "$instance_type": ".*",
}
# capacity's "Pod Distribution by $distribution_filter" is evaluated for each of its values.
DISTRIBUTION_FILTERS = ("arch", "capacity_type", "instance_type", "namespace", "node", "nodepool", "zone")

# Prometheus 3 writes the quantile label of a scraped summary as a float ("0.0", "1.0": it normalizes
# "le" and "quantile" on ingestion), so a query for quantile="0" or "1" finds nothing, whoever exports.
PROMETHEUS_3_QUANTILES = (
    'Prometheus 3 stores quantile="0" and "1" as "0.0" and "1.0" (it normalizes summary quantiles on'
    " ingestion), so this query finds nothing whoever exports the summary; the 0.5, 0.9 and 0.99 lines"
    " have data"
)
# (dashboard, panel title, text of the query) -> why it returns no data against karpy.
NO_DATA = {
    ("karpenter-capacity-dashboard", "Node Summary", "node_time_seconds"): (
        "node-exporter's node_time_seconds and node_boot_time_seconds (the nodes' uptime), not Karpenter's;"
        " kwok nodes run no node-exporter"
    ),
    **{
        ("karpenter-performance-dashboard", title, f'{metric}{{quantile="{q}"}}'): PROMETHEUS_3_QUANTILES
        for title, metric in (
            ("Node Termination Latency", "karpenter_nodes_termination_duration_seconds"),
            ("Pod Startup Latency", "karpenter_pods_startup_duration_seconds"),
        )
        for q in ("0", "1")
    },
    **{
        ("karpenter-controllers-allocation", title, metric): (
            "karpenter_allocation_controller_* were Karpenter v0.x's (the provisioner era); no Karpenter v1"
            " exports them (the dashboard is still published)"
        )
        for title, metric in (
            ("Bind duration", "karpenter_allocation_controller_bind_duration_seconds_bucket"),
            ("Binpack duration", "karpenter_allocation_controller_binpacking_duration_seconds_bucket"),
            ("Scheduling duration", "karpenter_allocation_controller_scheduling_duration_seconds_bucket"),
            ("variable $provisioner", "karpenter_allocation_controller_scheduling_duration_seconds_bucket"),
        )
    },
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def control_plane(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[ControlPlane]:
    with running_control_plane(tmp_path_factory, pytestconfig, KWOK_AGENT) as plane:
        yield plane


class Prometheus:
    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"

    def get(self, path: str, **params: str | list[str]) -> Any:
        query = urllib.parse.urlencode(params, doseq=True)
        with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=30) as response:
            body = json.loads(response.read())
        assert body["status"] == "success", body
        return body["data"]

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False


@pytest.fixture(scope="module")
def prometheus_binary() -> str:
    build = subprocess.run([str(PROMETHEUS), "build"], check=False, timeout=3600)
    assert build.returncode == 0, "scripts/prometheus build failed (see its output above)"
    return subprocess.run(
        [str(PROMETHEUS), "path"], capture_output=True, text=True, check=True
    ).stdout.strip()


def start_prometheus(
    binary: str, directory: Path, target_port: int
) -> tuple[subprocess.Popen[bytes], Prometheus]:
    config = directory / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: karpenter\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{target_port}']}}]\n"
    )
    port = free_port()
    log = (directory / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    prometheus = Prometheus(port)
    wait_until(prometheus.ready, timeout=60, interval=0.5, what="Prometheus ready")
    return process, prometheus


def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for item in items:
        yield item
        yield from panels(item.get("panels", []))


def dashboard_queries() -> list[tuple[str, str, str]]:
    """(dashboard, panel title, PromQL) of every panel query and template variable query."""
    found: list[tuple[str, str, str]] = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        board = json.loads(path.read_text())
        for panel in panels(board["panels"]):
            for target in panel.get("targets", []):
                if target.get("expr"):
                    found.append((path.stem, panel.get("title", ""), target["expr"]))
        for variable in board.get("templating", {}).get("list", []):
            query = variable.get("query")
            if isinstance(query, dict) and query.get("query"):
                found.append((path.stem, f"variable ${variable['name']}", query["query"]))
    return found


def expand(expr: str) -> list[str]:
    expr = re.sub(r"\s*#[^\n]*", "", expr)  # PromQL comments, as the capacity dashboard has
    for name in sorted(VARIABLES, key=len, reverse=True):
        expr = expr.replace(name, VARIABLES[name])
    if "$distribution_filter" in expr:
        return [expr.replace("$distribution_filter", value) for value in DISTRIBUTION_FILTERS]
    assert not re.search(r"\$[A-Za-z_]", expr), expr  # every variable given a value
    return [expr]


def has_data(prometheus: Prometheus, expr: str, start: float, end: float) -> bool:
    variable = re.fullmatch(r"label_values\((?:(.+),\s*)?(\w+)\)", expr.strip())
    if variable:
        match, label = variable.groups()
        params: dict[str, str | list[str]] = {"start": f"{start:.3f}", "end": f"{end:.3f}"}
        if match:
            params["match[]"] = [match]
        return bool(prometheus.get(f"/api/v1/label/{label}/values", **params))
    result = prometheus.get(
        "/api/v1/query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=STEP
    )
    return any(series["values"] for series in result["result"])


def no_data_reason(dashboard: str, title: str, expr: str) -> str | None:
    for (board, panel, metric), why in NO_DATA.items():
        if board == dashboard and panel == title and metric in expr:
            return why
    return None


def daemonset(namespace: str) -> dict[str, Any]:
    """A node agent on the NodePool's nodes, as clusters have: the dashboards' daemon columns read it."""
    labels = {"app": f"{APP}-agent"}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": f"{APP}-agent", "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"karpenter.sh/nodepool": NODEPOOL},
                    "containers": [
                        {
                            "name": "agent",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                        }
                    ],
                },
            },
        },
    }


def nodes_of_pool(plane: ControlPlane) -> set[str]:
    return {
        node["metadata"]["name"]
        for node in get_items(plane, "nodes")
        if node["metadata"].get("labels", {}).get("karpenter.sh/nodepool") == NODEPOOL
    }


def running(plane: ControlPlane, namespace: str, replicas: int) -> bool:
    pods = get_items(plane, "pods", "-n", namespace, "-l", f"app={APP}")
    return len(pods) == replicas and all(pod.get("status", {}).get("phase") == "Running" for pod in pods)


def test_karpenters_dashboards_read_karpy_through_prometheus(
    crds: ControlPlane, namespace: str, prometheus_binary: str, tmp_path: Path
) -> None:
    plane = crds
    plane.kubectl(
        "apply",
        "-f",
        "-",
        stdin=as_yaml(
            node_class(NODEPOOL),
            nodepool(
                NODEPOOL,
                INSTANCE_TYPES,
                capacity_types=("spot", "on-demand"),
                consolidation_policy="WhenEmptyOrUnderutilized",
                consolidate_after=f"{CONSOLIDATE_AFTER:g}s",
                requirements=[requirement(LABEL_ARCH, "amd64"), requirement(LABEL_OS, "linux")],
                limits={"cpu": "100", "memory": "400Gi"},
            ),
        ),
    )
    settings = RunSettings(observability=ObservabilitySettings(metrics_port=0, bind_address="127.0.0.1"))
    with running_karpy(plane, settings, pools=[NODEPOOL]) as runner:
        metrics_port = runner.observability.endpoints.metrics_port
        assert metrics_port is not None
        process, prometheus = start_prometheus(prometheus_binary, tmp_path, metrics_port)
        try:
            start = time.time()
            wait_until(
                lambda: any(
                    target["health"] == "up" for target in prometheus.get("/api/v1/targets")["activeTargets"]
                ),
                timeout=30,
                what="Prometheus scraping karpy",
            )
            plane.kubectl(
                "apply",
                "-f",
                "-",
                stdin=as_yaml(daemonset(namespace), deployment(NODEPOOL, namespace, APP, REPLICAS)),
            )
            wait_until(
                lambda: running(plane, namespace, REPLICAS), timeout=90, what=f"{REPLICAS} pods Running"
            )
            before = len(pool_claims(plane, NODEPOOL))
            time.sleep(5)  # a few scrapes of the cluster at its size
            # A consolidation: two pods left, the nodes are underused.
            plane.kubectl("scale", "deployment", APP, "-n", namespace, "--replicas=2")
            wait_until(
                lambda: running(plane, namespace, 2) and len(pool_claims(plane, NODEPOOL)) < before,
                timeout=CONSOLIDATE_AFTER + 120,
                interval=1.0,
                what="a consolidation removing nodes",
            )
            time.sleep(5)
            plane.kubectl("scale", "deployment", APP, "-n", namespace, "--replicas=0")
            wait_until(
                lambda: not pool_claims(plane, NODEPOOL) and not nodes_of_pool(plane),
                timeout=CONSOLIDATE_AFTER + 90,
                interval=1.0,
                what="the empty nodes removed",
            )
            time.sleep(5)
            end = time.time()

            rows: list[tuple[str, str, str, str]] = []
            unexpected: list[str] = []
            for dashboard, title, expr in dashboard_queries():
                data = all(has_data(prometheus, query, start, end) for query in expand(expr))
                why = no_data_reason(dashboard, title, expr)
                rows.append((dashboard, title, " ".join(expr.split()), "yes" if data else f"no: {why}"))
                if data == (why is not None):
                    unexpected.append(f"{dashboard} / {title}: {expr!r} {'has' if data else 'has no'} data")
            print("\n| dashboard | panel | query | returns data |\n| --- | --- | --- | --- |")
            for row in rows:
                print("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
            assert not unexpected, "\n".join(unexpected)
        finally:
            process.terminate()
            process.wait(30)
