"""The seed walkthrough end to end: the issue's acceptance criteria, through the CLI."""

from __future__ import annotations

from typing import Any

import pytest
from tests.support import DATA, run_cli, simulate_json

from karpy.cloud.aws_catalog import load_catalog
from karpy.sim.scenario import builtin_scenario_path

ALLOWED_TYPES = {"c5.large", "c5.xlarge", "m5.large", "m5.xlarge"}
DELETE_AT = 300.0


def cheapest_spot(*names: str) -> float:
    catalog = load_catalog()
    return min(
        price
        for name in names
        if (entry := catalog.entry(name)) is not None
        for zone, price in entry.spot_prices.items()
        if zone in ("us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d", "us-east-1f")
    )


def assert_walkthrough(result: dict[str, Any]) -> None:
    assert result["errors"] == []
    assert result["summary"]["controllerErrors"] == []
    app_pods = [pod for pod in result["pods"] if pod["name"].startswith("karpenter-test-")]
    assert len(app_pods) == 5
    claims = result["nodeclaims"]
    assert claims, "no NodeClaim was created"
    nodes = {claim["node"] for claim in claims}
    for pod in app_pods:
        # Every pod ran, on a node of one of the NodeClaims, before the Deployment went.
        assert pod["runningAt"] is not None and pod["runningAt"] < DELETE_AT
        assert pod["node"] in nodes
    for claim in claims:
        assert claim["instanceType"] in ALLOWED_TYPES
        assert claim["capacityType"] == "spot"
        assert claim["nodepool"] == "default"
        assert claim["pricePerHour"] > 0
        assert claim["readyAt"] is not None and claim["readyAt"] < DELETE_AT
        # Every NodeClaim is removed after the Deployment is deleted, not before.
        assert claim["deletedAt"] is not None and claim["deletedAt"] >= DELETE_AT
    # One batch: all NodeClaims were created at the same instant.
    assert len({claim["createdAt"] for claim in claims}) == 1
    # 5 pods x 1 CPU: never dearer than two 4-vCPU nodes (3 + 2 pods), the plan
    # that packing alone would make; karpy finds a cheaper mix where there is one.
    assert result["cost"]["peakPerHour"] <= 2 * cheapest_spot("c5.xlarge", "m5.xlarge") + 1e-9
    assert result["steady"] is True
    assert result["cost"]["total"] > 0


def test_builtin_seed_walkthrough_runs_the_pods_on_spot_and_removes_the_nodes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, result, _ = simulate_json(capsys)
    assert code == 0
    assert result["scenario"] == "seed-walkthrough"
    assert_walkthrough(result)


def test_seed_walkthrough_with_a_v1_nodepool_gives_the_same_result(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, v1beta1, _ = simulate_json(capsys, str(builtin_scenario_path()))
    code, v1, _ = simulate_json(capsys, str(DATA / "seed-v1" / "scenario.yaml"))
    assert code == 0
    assert_walkthrough(v1)

    def shape(result: dict[str, Any]) -> list[tuple[str, str, str, float | None, float | None]]:
        return [
            (c["instanceType"], c["capacityType"], c["zone"], c["readyAt"], c["deletedAt"])
            for c in result["nodeclaims"]
        ]

    assert shape(v1) == shape(v1beta1)
    assert v1["cost"] == v1beta1["cost"]


def test_simulation_is_deterministic(capsys: pytest.CaptureFixture[str]) -> None:
    _, first, _ = simulate_json(capsys)
    _, second, _ = simulate_json(capsys)
    assert first == second


def test_text_output_reads_like_a_nodeclaim_watch_and_ends_with_a_summary(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run_cli(capsys, "simulate")
    assert code == 0
    header = next(line for line in out.splitlines() if line.startswith("TIME"))
    assert header.split() == ["TIME", "NAME", "TYPE", "CAPACITY", "ZONE", "NODE", "READY", "AGE"]
    assert "5 pods pending" in out
    assert "Summary" in out
    assert "first Pending pod -> all Running" in out
    assert "spot" in out


def test_plain_manifests_run_until_steady(capsys: pytest.CaptureFixture[str]) -> None:
    seed = builtin_scenario_path().parent
    code, result, _ = simulate_json(
        capsys, str(seed / "ec2nodeclass.yaml"), str(seed / "nodepool.yaml"), str(seed / "deployment.yaml")
    )
    assert code == 0
    assert result["steady"] is True
    running = [pod for pod in result["pods"] if pod["phase"] == "Running"]
    assert len(running) == 5
    # Nothing deleted the Deployment, so the nodes stay.
    assert all(claim["deletedAt"] is None for claim in result["nodeclaims"])
