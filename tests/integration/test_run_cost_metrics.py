"""``karpy run``'s cost and node metrics, scraped during the seed walkthrough on the real control plane.

The walkthrough of test_run.py (five pods of 1 CPU on c5/m5 large and xlarge,
spot or on-demand) on a NodePool of this module's own, with ``/metrics`` on a
free port. Once the pods run, the scrape must show the NodePool's $/h
(``karpenter_nodepools_cost_total``) equal to the bundled catalog's price of
each offering karpy launched, worked out here from the catalog; the offering
prices karpy plans with; and per node, Karpenter's allocatable, pod requests
and lifetime gauges with the Node's own figures. Once the Deployment is gone
and the nodes with it, the cost is 0 and the nodes terminated are counted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from tests.prometheus_text import Exposition, parse

from karpy.api.quantity import parse_resource_list
from karpy.cloud.aws_catalog import instance_type_from_entry, load_catalog
from karpy.observability import ObservabilitySettings
from karpy.run import Runner, RunSettings

from .conftest import ControlPlane, wait_until
from .karpy_run import (
    LABEL_ARCH,
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
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
from .test_run_observability import get

pytestmark = pytest.mark.integration

NODEPOOL = "it-cost"
APP = "it-cost-app"
REPLICAS = 5
MANIFESTS = as_yaml(
    node_class(NODEPOOL),
    nodepool(
        NODEPOOL,
        ["c5.large", "c5.xlarge", "m5.large", "m5.xlarge"],
        capacity_types=("spot", "on-demand"),
        consolidation_policy="WhenEmptyOrUnderutilized",
        consolidate_after="5s",
        requirements=[requirement(LABEL_ARCH, "amd64"), requirement(LABEL_OS, "linux")],
    ),
)


@pytest.fixture
def runner(crds: ControlPlane) -> Iterator[Runner]:
    settings = RunSettings(
        observability=ObservabilitySettings(metrics_port=0, bind_address="127.0.0.1"),
    )
    with running_karpy(crds, settings, pools=[NODEPOOL]) as running:
        yield running


def scrape(runner: Runner) -> Exposition:
    port = runner.observability.endpoints.metrics_port
    assert port is not None
    status, body = get(port, "/metrics")
    assert status == 200
    return parse(body)


def catalog_prices() -> dict[tuple[str, str, str], float]:
    """(instance type, zone, capacity type) -> $/h, from the catalog the kwok provider offers."""
    catalog = load_catalog()
    return {
        (instance_type.name, offering.zone, offering.capacity_type): offering.price
        for entry in catalog.entries
        for instance_type in [instance_type_from_entry(entry, catalog.region, catalog.zones)]
        for offering in instance_type.offerings
    }


def launched(claims: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [
        (
            claim["metadata"]["labels"][LABEL_INSTANCE_TYPE],
            claim["metadata"]["labels"]["topology.kubernetes.io/zone"],
            claim["metadata"]["labels"][LABEL_CAPACITY_TYPE],
        )
        for claim in claims
    ]


def test_the_walkthrough_shows_its_cost_and_its_nodes_in_karpenters_metrics(
    runner: Runner, crds: ControlPlane, namespace: str
) -> None:
    plane = crds
    plane.kubectl("apply", "-f", "-", stdin=MANIFESTS)
    plane.kubectl("apply", "-f", "-", stdin=as_yaml(deployment(NODEPOOL, namespace, APP, REPLICAS)))

    def running_pods() -> bool:
        pods = get_items(plane, "pods", "-n", namespace, "-l", f"app={APP}")
        return len(pods) == REPLICAS and all(pod.get("status", {}).get("phase") == "Running" for pod in pods)

    wait_until(running_pods, timeout=90, what=f"{REPLICAS} pods Running")
    claims = list(pool_claims(plane, NODEPOOL).values())
    offerings = launched(claims)
    prices = catalog_prices()
    expected = sum(prices[offering] for offering in offerings)
    assert expected > 0
    node_names = {claim["status"]["nodeName"] for claim in claims}

    def scraped() -> Exposition | None:
        # Node metrics pass every 5 s: wait for the one that saw every pod bound.
        exposition = scrape(runner)
        requested = sum(
            exposition.find("karpenter_nodes_total_pod_requests", nodepool=NODEPOOL, resource_type="cpu")
        )
        cost = exposition.find("karpenter_nodepools_cost_total", nodepool=NODEPOOL)
        return exposition if requested >= REPLICAS and cost and cost[0] > 0 else None

    exposition = wait_until(scraped, timeout=30, what="the walkthrough's cost and requests scraped")
    assert exposition.types["karpenter_nodepools_cost_total"] == "gauge"
    cost = exposition.value("karpenter_nodepools_cost_total", nodepool=NODEPOOL)
    assert cost == pytest.approx(expected)
    print(f"\nkarpenter_nodepools_cost_total{{nodepool={NODEPOOL!r}}} {cost:.4f} for {sorted(offerings)}")
    for instance_type, zone, capacity_type in set(offerings):
        price = exposition.value(
            "karpenter_cloudprovider_instance_type_offering_price_estimate",
            instance_type=instance_type,
            zone=zone,
            capacity_type=capacity_type,
        )
        assert price == prices[(instance_type, zone, capacity_type)]
    created = exposition.find("karpenter_nodes_created_total", nodepool=NODEPOOL)
    assert sum(created) == len(claims)

    nodes = {node["metadata"]["name"]: node for node in get_items(plane, "nodes")}
    for name in node_names:
        allocatable = exposition.find(
            "karpenter_nodes_allocatable", node_name=name, resource_type="cpu", nodepool=NODEPOOL
        )
        assert allocatable == [parse_resource_list(nodes[name]["status"]["allocatable"])["cpu"] / 1000]
        (lifetime,) = exposition.find("karpenter_nodes_current_lifetime_seconds", node_name=name)
        assert 0 < lifetime < 600
    states = exposition.find(
        "karpenter_pods_state", namespace=namespace, nodepool=NODEPOOL, phase="Running", ready="true"
    )
    assert states == [1] * REPLICAS
    utilization = exposition.find("karpenter_cluster_utilization_percent", resource_type="cpu")
    assert utilization and 0 < utilization[0] <= 100

    plane.kubectl("delete", "deployment", APP, "-n", namespace, "--wait=false")

    def emptied() -> Exposition | None:
        if pool_claims(plane, NODEPOOL):
            return None
        exposition = scrape(runner)
        terminated = sum(exposition.find("karpenter_nodes_terminated_total", nodepool=NODEPOOL))
        return exposition if terminated == len(claims) else None

    exposition = wait_until(emptied, timeout=120, interval=1.0, what="the empty nodes gone and counted")
    assert exposition.value("karpenter_nodepools_cost_total", nodepool=NODEPOOL) == 0
    count = "karpenter_nodes_termination_duration_seconds_count"
    assert exposition.value(count, nodepool=NODEPOOL) == len(claims)
    count = "karpenter_nodeclaims_termination_duration_seconds_count"
    assert exposition.value(count, nodepool=NODEPOOL) == len(claims)
    assert not exposition.find("karpenter_nodes_allocatable", nodepool=NODEPOOL)
