"""``benchmarks.from_cluster_apiserver`` at a fiftieth of its size, so its loader and commands do not rot.

The benchmark starts a control plane of its own (workload controllers off), stores 20
nodes and 200 pods, and times ``karpy simulate --from-cluster`` and ``karpy plan``. No
timing is asserted: that the cluster was stored as described, that both commands read
all of it, and that the plan drifts exactly the c5 nodes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from benchmarks.from_cluster_apiserver import measure

pytestmark = pytest.mark.integration


def test_the_benchmark_stores_the_cluster_and_times_both_commands(tmp_path: Path) -> None:
    measured = measure(nodes=20, pods=200, simulate_duration="30s", plan_duration=None, work_dir=tmp_path)
    figures = measured.figures
    assert (figures["nodes"], figures["karpyNodes"], figures["pods"]) == (20, 18, 200)
    for command in ("simulate", "plan"):
        stages = figures[command]
        assert stages["readSeconds"] > 0 and stages["cpuSeconds"] > 0 and stages["peakRssMiB"] > 0
        assert stages["parseCpuSeconds"] <= stages["readCpuSeconds"]
    # Every node and pod was read: the simulation starts with each (the pending ones too).
    simulated = measured.simulate_output
    assert simulated["errors"] == []
    assert len({pod["name"] for pod in simulated["pods"]}) >= 200
    planned = measured.plan_output
    assert [change["name"] for change in planned["changes"]] == ["general"]
    drifted = {d["nodeclaim"] for d in planned["disruptions"] if d["reason"] == "Drifted"}
    assert len(drifted) == figures["driftingNodes"] == 4
    assert all(int(name.removeprefix("node-")) % 5 == 0 for name in drifted)
