"""Karpenter's own e2e specs against ``karpy run``: the CI-sized subset of its regression suite.

``scripts/karpenter-e2e`` builds Karpenter's regression suite binary from the Go module
proxy (cached in ~/.cache/karpy/karpenter-e2e) and runs it against ``karpy run`` and
the real kwok on a control plane of this test's own (the suite's cleanup deletes
every NodePool, NodeClaim and Node of the cluster, so it cannot share the session's).
The subset is the NodePool validation specs, the NodePool hash, one pod per node, a
standalone NodeClaim's metadata reaching its Node, a CapacityBuffer's room and three static
NodePool specs (scale up, scale down to zero, scale-down order): a few minutes;
``make karpenter-e2e`` runs the whole suites. Each spec of the Ginkgo JSON
report must have passed, and every focused spec must have run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import REPO, SCRIPT

pytestmark = pytest.mark.integration

E2E = REPO / "scripts" / "karpenter-e2e"
# Ginkgo matches this against each spec's containers and leaf text joined by spaces (not anchored:
# the text it matches has more in front).
FOCUS = (
    r"Integration (Validation NodePool|CRD Hash|Utilization) "
    r"|StandaloneNodeClaim should create a NodeClaim propagating"
    r"|CapacityBuffer PodTemplateRef Provisioning should provision capacity"
    r"|StaticCapacity (Provisioning should create static NodeClaims to"
    r"|Deprovisioning should (scale down to zero|terminate empty nodes first))"
)
EXPECTED_SPECS = 17 + 1 + 1 + 1 + 1 + 3


def _go_available() -> bool:
    return shutil.which("go") is not None or Path("/usr/local/go/bin/go").exists()


def test_karpenter_regression_subset_passes(tmp_path: Path) -> None:
    if not _go_available():
        pytest.skip("no Go toolchain: Karpenter's e2e suite is built from its module with `go test -c`")
    build = subprocess.run([str(E2E), "build", "regression"], check=False, timeout=1800)
    assert build.returncode == 0, "scripts/karpenter-e2e build regression failed (see its output above)"

    env = {
        **os.environ,
        "KARPY_CONTROL_PLANE_DIR": str(tmp_path / "plane"),
        "KARPY_CONTROL_PLANE_OWNER": str(os.getpid()),
        "KARPENTER_E2E_REPORTS": str(tmp_path / "reports"),
        "KARPENTER_E2E_LOGS": str(tmp_path / "logs"),
    }
    up = subprocess.run(
        [str(SCRIPT), "up"], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert up.returncode == 0, up.stderr
    try:
        env["KUBECONFIG"] = str(tmp_path / "plane" / "kubeconfig")
        run = subprocess.run(
            [str(E2E), "run", "regression", f"-ginkgo.focus={FOCUS}"],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        suite_log = tmp_path / "logs" / "regression.log"
        detail = f"{run.stdout}\n{run.stderr}\n{suite_log.read_text(errors='replace')[-6000:]}"
        assert run.returncode == 0, detail
        report = json.loads((tmp_path / "reports" / "regression.json").read_text())
        specs = [
            spec
            for suite in report
            for spec in suite["SpecReports"] or []
            if spec["LeafNodeType"] == "It" and spec["State"] != "skipped"
        ]
        assert len(specs) == EXPECTED_SPECS, [spec["LeafNodeText"] for spec in specs]
        assert all(spec["State"] == "passed" for spec in specs), detail
    finally:
        subprocess.run([str(SCRIPT), "down"], env=env, capture_output=True, timeout=120, check=False)
