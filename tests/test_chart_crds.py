"""The chart's ``crds/`` are ``karpy crds``, written by scripts/gen_chart_crds.py, never by hand."""

from __future__ import annotations

from pathlib import Path

import yaml
from scripts.gen_chart_crds import CRDS_DIR, chart_crds, differences, write

from karpy.api.crds import all_crds


def test_the_charts_crds_are_what_the_generator_makes_now() -> None:
    assert differences() == [], "run scripts/gen_chart_crds.py and commit charts/karpy/crds"


def test_the_charts_crds_are_the_crds_karpy_prints_one_per_file() -> None:
    in_chart = [next(iter(yaml.safe_load_all(path.read_text()))) for path in sorted(CRDS_DIR.glob("*.yaml"))]
    assert len(in_chart) == len(all_crds())
    by_name = {crd["metadata"]["name"]: crd for crd in in_chart}
    assert by_name == {crd["metadata"]["name"]: crd for crd in all_crds()}
    assert sorted(path.name for path in CRDS_DIR.glob("*.yaml")) == [
        "autoscaling.x-k8s.io_capacitybuffers.yaml",
        "karpenter.k8s.aws_ec2nodeclasses.yaml",
        "karpenter.kwok.sh_kwoknodeclasses.yaml",
        "karpenter.sh_nodeclaims.yaml",
        "karpenter.sh_nodeoverlays.yaml",
        "karpenter.sh_nodepools.yaml",
    ]


def test_a_stale_missing_or_extra_file_is_reported_and_rewritten(tmp_path: Path) -> None:
    write(tmp_path)
    assert differences(tmp_path) == []
    (tmp_path / "karpenter.sh_nodepools.yaml").write_text("# edited by hand\n")
    (tmp_path / "karpenter.sh_nodeclaims.yaml").unlink()
    (tmp_path / "karpenter.sh_provisioners.yaml").write_text("---\n")
    assert differences(tmp_path) == [
        "karpenter.sh_nodeclaims.yaml: missing",
        "karpenter.sh_provisioners.yaml: not a CRD of karpy.api.crds",
        "karpenter.sh_nodepools.yaml: differs from karpy.api.crds",
    ]
    write(tmp_path)
    assert differences(tmp_path) == []
    assert {path.name: path.read_text() for path in tmp_path.iterdir()} == chart_crds()
