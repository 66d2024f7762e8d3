"""The chart's Grafana dashboards: ``helm template`` with ``dashboards.enabled`` renders one ConfigMap per
dashboard, labelled for Grafana's sidecar, whose JSON Grafana's dashboard schema accepts.

The schema check is ``scripts/grafana-dashboard-check``: Grafana's dashboard types as the
grafana-foundation-sdk generates them from Grafana's dashboard kind, decoding each dashboard strictly
(a required field missing, a field of the wrong type or one the schema does not know fails) and
validating it. Karpenter's dashboards ship with their panels and queries as published
(tests/data/dashboards/), which is checked here too.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).parent.parent
CHART = REPO / "charts" / "karpy"
PUBLISHED = REPO / "tests" / "data" / "dashboards"
CHECK = REPO / "scripts" / "grafana-dashboard-check"
SHIPPED = {"karpenter-capacity-dashboard.json", "karpenter-performance-dashboard.json", "karpy-overview.json"}


def helm() -> str:
    found = subprocess.run(
        [str(REPO / "scripts" / "control-plane"), "helm"], capture_output=True, text=True, check=False
    )
    path = found.stdout.strip()
    if found.returncode != 0 or not Path(path).exists():
        pytest.skip("helm is not built (make control-plane)")
    return path


def render(*values: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        [helm(), "template", "t", str(CHART), "--namespace", "monitoring", *values],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def dashboards(manifests: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        name: manifest
        for manifest in manifests
        if manifest["kind"] == "ConfigMap"
        for name in manifest.get("data", {})
        if name.endswith(".json")
    }


def check(paths: list[Path]) -> subprocess.CompletedProcess[str]:
    if shutil.which("go") is None and not Path("/usr/local/go/bin/go").exists():
        pytest.skip("no Go toolchain: the schema checker is built from the Go module proxy")
    return subprocess.run(
        [str(CHECK), *map(str, paths)], capture_output=True, text=True, timeout=900, check=False
    )


def test_no_dashboards_by_default() -> None:
    assert dashboards(render()) == {}


def test_the_dashboards_render_as_configmaps_for_grafanas_sidecar(tmp_path: Path) -> None:
    found = dashboards(render("--set", "dashboards.enabled=true"))
    assert set(found) == SHIPPED
    files = []
    for name, configmap in found.items():
        assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert configmap["metadata"]["namespace"] == "monitoring"
        path = tmp_path / name
        path.write_text(configmap["data"][name])
        files.append(path)
    result = check(files)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("\nok ") + result.stdout.startswith("ok ") == len(SHIPPED), result.stdout


def test_the_schema_check_refuses_what_grafana_would_not_take(tmp_path: Path) -> None:
    """The check is a real one: the published Karpenter dashboard, unmigrated, is refused, and so is a
    panel with a field Grafana's schema does not have."""
    board = json.loads((CHART / "dashboards" / "karpy-overview.json").read_text())
    board["panels"][1]["yaxes"] = []
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(board))
    result = check([broken, PUBLISHED / "karpenter-capacity-dashboard.json"])
    assert result.returncode == 1
    assert "unexpected field 'yaxes'" in result.stdout
    assert "annotations.list[0].datasource" in result.stdout


def test_the_sidecar_label_and_namespace_can_be_chosen() -> None:
    found = dashboards(
        render(
            "--set",
            "dashboards.enabled=true",
            "--set",
            "dashboards.namespace=grafana",
            "--set",
            "dashboards.label=dashboards",
            "--set",
            "dashboards.labelValue=karpy",
        )
    )
    for configmap in found.values():
        assert configmap["metadata"]["namespace"] == "grafana"
        assert configmap["metadata"]["labels"]["dashboards"] == "karpy"


def queries(board: dict[str, Any]) -> list[tuple[str, str]]:
    def panels(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [p for item in items for p in [item, *panels(item.get("panels", []))]]

    return [
        (p.get("title", ""), t.get("expr", "")) for p in panels(board["panels"]) for t in p.get("targets", [])
    ]


@pytest.mark.parametrize(
    "name", ["karpenter-capacity-dashboard.json", "karpenter-performance-dashboard.json"]
)
def test_karpenters_dashboards_ship_with_their_published_panels_and_queries(name: str) -> None:
    shipped = json.loads((CHART / "dashboards" / name).read_text())
    published = json.loads((PUBLISHED / name).read_text())
    assert queries(shipped) == queries(published)
    assert shipped["panels"] == published["panels"]
    assert [v["query"] for v in shipped["templating"]["list"]] == [
        v["query"] for v in published["templating"]["list"]
    ]
