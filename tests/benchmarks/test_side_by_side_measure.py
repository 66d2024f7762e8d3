"""The pure parts of the side-by-side benchmark (benchmarks/side_by_side_measure.py): audit log,
fleet cost and utilisation, /proc parsing, and the shapes taken from Karpenter's performance suite."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from benchmarks.side_by_side import Result as RunResult
from benchmarks.side_by_side import deployment, load_results, pool_manifests, shapes, table
from benchmarks.side_by_side_measure import (
    count_requests,
    cpu_ticks,
    fleet,
    pod_requests,
    price_table,
    ratio,
    status_bytes,
)

USER = "side-by-side-controller"


def event(
    audit_id: str,
    verb: str,
    resource: str,
    *,
    stage: str = "ResponseComplete",
    user: str = USER,
    subresource: str = "",
    agent: str = "karpenter/v1.15.0 (linux/amd64)",
) -> str:
    ref: dict[str, str] = {"resource": resource}
    if subresource:
        ref["subresource"] = subresource
    return json.dumps(
        {
            "kind": "Event",
            "auditID": audit_id,
            "stage": stage,
            "verb": verb,
            "user": {"username": user, "groups": ["system:masters"]},
            "userAgent": agent,
            "objectRef": ref,
        }
    )


def test_each_request_of_the_user_is_counted_once_by_its_audit_id() -> None:
    lines = [
        event("w1", "watch", "pods", stage="ResponseStarted"),
        event("w1", "watch", "pods", stage="ResponseComplete"),
        event("c1", "create", "nodeclaims"),
        event("c2", "create", "nodeclaims"),
        event("s1", "patch", "nodeclaims", subresource="status"),
        event("e1", "create", "pods", subresource="eviction"),
        event("d1", "delete", "pods"),
        event("x1", "create", "nodeclaims", user="kubernetes-admin"),  # somebody else's
        '{"kind":"Event","auditID":"torn',  # a line the API server is still writing
        "",
    ]
    counts = count_requests(lines, USER)
    assert counts.total == 6
    assert counts.watches == 1
    assert counts.by_verb == {"watch": 1, "create": 3, "patch": 1, "delete": 1}
    assert counts.by_resource["nodeclaims/status"] == 1
    assert counts.nodeclaims_created == 2  # the status patch is no launch
    assert counts.evictions == 1
    assert counts.pods_deleted == 1
    assert counts.user_agents == {"karpenter/v1.15.0": 6}


def claim(
    name: str, instance_type: str, zone: str = "test-zone-a", *, deleting: bool = False
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "labels": {
            "node.kubernetes.io/instance-type": instance_type,
            "topology.kubernetes.io/zone": zone,
            "karpenter.sh/capacity-type": "on-demand",
        },
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": metadata}


def node(name: str, cpu: str, memory: str, *, launched: bool = True) -> dict[str, Any]:
    labels = {"karpenter.sh/nodepool": "default"} if launched else {}
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"cpu": cpu, "memory": memory}},
    }


def pod(node_name: str, cpu: str, memory: str, phase: str = "Running") -> dict[str, Any]:
    return {
        "spec": {
            "nodeName": node_name,
            "containers": [{"resources": {"requests": {"cpu": cpu, "memory": memory}}}],
        },
        "status": {"phase": phase},
    }


PRICES = {
    ("c-4x-amd64-linux", "test-zone-a", "on-demand"): 0.25,
    ("m-8x-amd64-linux", "test-zone-a", "on-demand"): 1.5,
}


def test_cost_is_every_live_nodeclaim_at_its_offering_price() -> None:
    result = fleet(
        [
            claim("a", "c-4x-amd64-linux"),
            claim("b", "m-8x-amd64-linux"),
            claim("gone", "m-8x-amd64-linux", deleting=True),
            claim("odd", "c-4x-amd64-linux", zone="elsewhere"),
        ],
        [],
        [],
        PRICES,
    )
    assert result.cost_per_hour == pytest.approx(0.25 + 1.5 + 0.0)
    assert result.nodeclaims == 3
    assert result.unpriced == ("odd",)


def test_utilisation_is_the_mean_over_launched_nodes_of_active_requests_over_allocatable() -> None:
    nodes = [
        node("n1", "4", "8Gi"),
        node("n2", "2", "4Gi"),
        node("control", "8", "16Gi", launched=False),  # not a NodePool's: left out, as the suite does
    ]
    pods = [
        pod("n1", "3", "2Gi"),
        pod("n1", "1", "2Gi", phase="Succeeded"),  # finished: reserves nothing
        pod("n2", "500m", "4Gi"),
        pod("control", "8", "16Gi"),
        {"spec": {"containers": []}, "status": {"phase": "Pending"}},  # not bound
    ]
    result = fleet([], nodes, pods, PRICES)
    assert result.nodes == 2
    assert result.cpu_utilisation == pytest.approx((3 / 4 + 0.5 / 2) / 2)
    assert result.memory_utilisation == pytest.approx((2 / 8 + 4 / 4) / 2)


def test_an_empty_fleet_has_no_utilisation_rather_than_a_division_by_zero() -> None:
    result = fleet([], [], [], PRICES)
    assert (result.cost_per_hour, result.cpu_utilisation, result.memory_utilisation) == (0.0, 0.0, 0.0)


def test_pod_requests_take_the_largest_init_container_and_the_overhead() -> None:
    spec = {
        "containers": [
            {"resources": {"requests": {"cpu": "250m"}}},
            {"resources": {"requests": {"cpu": "250m"}}},
        ],
        "initContainers": [{"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
        "overhead": {"cpu": "100m"},
    }
    assert pod_requests({"spec": spec}) == {"cpu": 1100, "memory": 2**30}


def test_the_price_table_reads_karpys_copy_of_karpenters_kwok_prices() -> None:
    catalog = {
        "instanceTypes": [
            {
                "name": "c-1x-amd64-linux",
                "offerings": [
                    {"zone": "test-zone-a", "capacityType": "spot", "price": 0.019},
                    {"zone": "test-zone-a", "capacityType": "on-demand", "price": 0.027},
                ],
            }
        ]
    }
    assert price_table(catalog) == {
        ("c-1x-amd64-linux", "test-zone-a", "spot"): 0.019,
        ("c-1x-amd64-linux", "test-zone-a", "on-demand"): 0.027,
    }


def test_proc_status_and_stat_are_read_as_the_kernel_writes_them() -> None:
    status = "Name:\tkarpy\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\n"
    assert status_bytes(status, "VmRSS") == 100 * 2**20
    assert status_bytes(status, "VmHWM") == 200 * 2**20
    assert status_bytes("Name:\tkthreadd\n", "VmRSS") == 0
    # The command may hold spaces and parentheses; utime (14) and stime (15) follow it.
    stat = "4242 (python (x) y) S 1 4242 4242 0 -1 4194304 100 0 0 0 350 25 0 0 20 0 9 0 100 0"
    assert cpu_ticks(stat) == 375


def test_ratio_is_karpy_over_karpenter_and_a_dash_without_both() -> None:
    assert ratio(1.0, 4.0) == "0.25"
    assert ratio(None, 4.0) == "—"
    assert ratio(1.0, 0) == "—"


def test_the_shapes_are_the_performance_suites() -> None:
    full = shapes(1.0)
    assert (full["basic"].pods, full["basic"].pods_after) == (1000, 700)
    assert (full["wide"].pods, full["wide"].pods_after) == (1000, 700)
    assert (full["hostname"].pods, full["hostname"].pods_after) == (1000, 700)
    assert (full["seed"].pods, full["seed"].pods_after) == (5, 0)
    wide = full["wide"].workloads
    assert [w.hostname_anti_affinity for w in wide[:4]] == [True, True, True, False]
    assert [w.hostname_spread for w in wide[2:7]] == [False, True, True, True, False]
    assert all(w.zone_spread for w in wide)
    assert shapes(0.2)["basic"].pods == 200
    small = deployment(full["hostname"].workloads[0], 3)
    template = small["spec"]["template"]["spec"]
    assert small["spec"]["replicas"] == 3
    assert template["containers"][0]["resources"]["requests"] == {"cpu": "900m", "memory": "3100Mi"}
    assert [c["topologyKey"] for c in template["topologySpreadConstraints"]] == ["kubernetes.io/hostname"]
    pool = pool_manifests(30)[1]["spec"]
    assert pool["disruption"]["consolidateAfter"] == "30s"
    assert {"key": "karpenter.kwok.sh/instance-size", "operator": "Lt", "values": ["32"]} in pool["template"][
        "spec"
    ]["requirements"]


def test_the_table_shows_both_figures_and_their_ratio() -> None:
    karpenter = RunResult("karpenter", "seed", 5, 0, time_to_running=4.0, api_requests=50)
    karpy = RunResult("karpy", "seed", 5, 0, time_to_running=2.0, api_requests=60, failure="")
    text = table([karpenter, karpy])
    assert "| seed (5→0 pods) | time to all Running (s) | 4.0 | 2.0 | 0.50 |" in text
    assert "| API requests | 50 | 60 | 1.20 |" in text


def test_results_written_with_json_read_back_for_the_table(tmp_path: Path) -> None:
    scaled_out = fleet([claim("a", "c-4x-amd64-linux")], [], [], PRICES)
    result = RunResult("karpy", "basic", 200, 140, time_to_running=30.0, scaled_out=scaled_out)
    path = tmp_path / "results.json"
    path.write_text(json.dumps([dataclasses.asdict(result)], default=str))
    assert load_results(path) == [result]
