"""``karpy nodes --once`` on the control plane, during the seed walkthrough, as an account that may only read.

The walkthrough of test_run.py (five pods of 1 CPU on c5/m5 large and
xlarge, spot or on-demand) runs under ``karpy run`` on a NodePool of this
module's, next to a Node no NodePool manages. ``karpy nodes --once`` then runs
as a process of its own with a kubeconfig holding only a token of a
ServiceAccount whose ClusterRole grants get, list and watch and nothing else.
Its frame must show each of karpy's nodes with its NodePool, offering and the
bundled catalog's price of that offering (worked out here from the catalog,
as test_run_cost_metrics.py does), the pods' requests, the other Node marked
as not karpy's and unpriced, and the cluster's $/h as the sum of the prices.
The frame is printed (``-s``), which is where README's example comes from.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from karpy.nodeview import UNMANAGED
from karpy.run import Runner

from .conftest import ControlPlane, wait_until
from .karpy_run import (
    KARPY,
    LABEL_ARCH,
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    LABEL_OS,
    ServiceAccount,
    as_yaml,
    deployment,
    get_items,
    node_class,
    nodepool,
    pool_claims,
    requirement,
    running_karpy,
    service_account_kubeconfig,
)
from .test_run_cost_metrics import catalog_prices, launched

pytestmark = pytest.mark.integration

NODEPOOL = "it-nodes"
APP = "it-nodes-app"
REPLICAS = 5
OTHER_NODE = "it-nodes-not-karpys"

LABEL_ZONE = "topology.kubernetes.io/zone"
READER = "it-nodes-reader"
MANIFESTS = as_yaml(
    node_class(NODEPOOL),
    nodepool(
        NODEPOOL,
        ["c5.large", "c5.xlarge", "m5.large", "m5.xlarge"],
        capacity_types=("spot", "on-demand"),
        requirements=[requirement(LABEL_ARCH, "amd64"), requirement(LABEL_OS, "linux")],
    ),
)
READ_ONLY = [
    {"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["get", "list", "watch"]},
    {
        "apiGroups": ["karpenter.sh"],
        "resources": ["nodeclaims", "nodepools"],
        "verbs": ["get", "list", "watch"],
    },
    {"apiGroups": ["karpenter.k8s.aws"], "resources": ["ec2nodeclasses"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["karpenter.kwok.sh"], "resources": ["kwoknodeclasses"], "verbs": ["get", "list", "watch"]},
]


@pytest.fixture
def runner(crds: ControlPlane) -> Iterator[Runner]:
    with running_karpy(crds, pools=[NODEPOOL]) as running:
        yield running


@pytest.fixture
def reader(crds: ControlPlane, namespace: str, tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig of a ServiceAccount that may get, list and watch what the view reads, and nothing else."""
    plane = crds
    plane.kubectl(
        "apply",
        "-f",
        "-",
        stdin=as_yaml(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": READER, "namespace": namespace},
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": READER},
                "rules": READ_ONLY,
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": READER},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": READER},
                "subjects": [{"kind": "ServiceAccount", "name": READER, "namespace": namespace}],
            },
        ),
    )
    try:
        yield service_account_kubeconfig(
            plane, ServiceAccount(namespace, READER), tmp_path / "reader.kubeconfig"
        )
    finally:
        plane.kubectl("delete", "clusterrolebinding,clusterrole", READER, "--ignore-not-found")


def karpy_nodes(kubeconfig: Path) -> str:
    result = subprocess.run(
        [str(KARPY), "nodes", "--once", "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_karpy_nodes_shows_the_walkthroughs_nodes_and_cost_reading_only(
    runner: Runner, crds: ControlPlane, namespace: str, reader: Path
) -> None:
    plane = crds
    plane.kubectl("apply", "-f", "-", stdin=MANIFESTS)
    plane.kubectl("apply", "-f", "-", stdin=as_yaml(deployment(NODEPOOL, namespace, APP, REPLICAS)))
    # A Node of someone else's: no NodePool label, an instance type karpy's catalog lists.
    other = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": OTHER_NODE,
            "labels": {
                "node.kubernetes.io/instance-type": "m5.large",
                "topology.kubernetes.io/zone": "us-east-1a",
            },
        },
    }
    plane.kubectl("apply", "-f", "-", stdin=as_yaml(other))
    try:

        def running_pods() -> bool:
            pods = get_items(plane, "pods", "-n", namespace, "-l", f"app={APP}")
            return len(pods) == REPLICAS and all(
                pod.get("status", {}).get("phase") == "Running" for pod in pods
            )

        wait_until(running_pods, timeout=90, what=f"{REPLICAS} pods Running")
        claims = list(pool_claims(plane, NODEPOOL).values())
        prices = catalog_prices()
        frame = karpy_nodes(reader)
        print(f"\n$ karpy nodes --once\n{frame}")
        lines = frame.splitlines()
        by_node = {line.split()[0]: line for line in lines[5:] if line.strip()}
        pods_by_node: dict[str, int] = {}
        for pod in get_items(plane, "pods", "-n", namespace, "-l", f"app={APP}"):
            pods_by_node[pod["spec"]["nodeName"]] = pods_by_node.get(pod["spec"]["nodeName"], 0) + 1
        expected = 0.0
        for claim, offering in zip(claims, launched(claims), strict=True):
            instance_type, zone, capacity_type = offering
            price = prices[offering]
            expected += price
            cells = by_node[claim["status"]["nodeName"]].split()
            assert cells[1:6] == [NODEPOOL, instance_type, capacity_type, zone, f"${price:.4f}"]
            assert cells[-2:] == [str(pods_by_node[claim["status"]["nodeName"]]), "Ready"]
        other_cells = by_node[OTHER_NODE]
        assert UNMANAGED in other_cells and "m5.large" in other_cells
        assert other_cells.split()[-1] == "NotReady"  # nothing runs it
        # The totals count every Node (an earlier test module on the same control plane may have left some).
        nodes = get_items(plane, "nodes")
        managed = [
            node["metadata"]["labels"] for node in nodes if LABEL_NODEPOOL in node["metadata"]["labels"]
        ]
        # Nodes left by another module may come from Karpenter's kwok catalog, which the AWS one
        # lacks: their price is read from their row, and the AWS catalog's where it lists them.
        total = 0.0
        for node in nodes:
            labels = node["metadata"]["labels"]
            if LABEL_NODEPOOL not in labels:
                continue
            shown = float(by_node[node["metadata"]["name"]].split()[5].lstrip("$"))
            offering = (labels[LABEL_INSTANCE_TYPE], labels[LABEL_ZONE], labels[LABEL_CAPACITY_TYPE])
            if offering in prices:
                assert shown == pytest.approx(prices[offering], abs=5e-5)
            total += shown
        assert total >= expected > 0
        header_total = re.search(r"\$([\d.]+)/hour", lines[0])
        assert header_total is not None
        # The rows are rounded to 1/10,000 of a dollar each.
        assert float(header_total.group(1)) == pytest.approx(total, abs=5e-5 * (len(managed) + 1))
        assert f"{len(nodes)} nodes ({len(managed)} karpy's, {len(nodes) - len(managed)} not)" in lines[0]
        requested = re.search(r"([\d.]+) of [\d.]+ requested", lines[1])
        assert requested is not None and float(requested.group(1)) >= REPLICAS  # the pods' 5 CPUs at least
    finally:
        plane.kubectl("delete", "node", OTHER_NODE, "--ignore-not-found")
        plane.kubectl("delete", "deployment", APP, "-n", namespace, "--ignore-not-found", "--wait=false")
