"""Karpenter v1.15's documentation examples pass ``karpy validate``, as a user would run it.

``tests/data/karpenter-docs/v1.15/`` holds every whole NodePool, NodeClaim and
EC2NodeClass of Karpenter's docs and ``examples/v1`` that Karpenter's own CRDs
accept (its README lists the fragments left out and why). Each file must
validate with no error and no warning but the one a single-file run gives for a
node class kept in another file. Those karpy refuses on purpose are under
``refused/`` with the words of the refusal, so the gap stays visible.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support import DATA, run_cli

V115 = DATA / "karpenter-docs" / "v1.15"
ACCEPTED = sorted(V115.glob("*.yaml"))
# Refused by karpy, with the words that say why.
NO_WINDOWS_TYPE = "no instance type in the catalog satisfies them (kubernetes.io/os In [windows]"
REFUSED = {
    "examples-windows-2019.yaml": NO_WINDOWS_TYPE,
    "examples-windows-2022.yaml": NO_WINDOWS_TYPE,
    "examples-windows-2025.yaml": "family is not supported",
}


def test_the_examples_cover_the_three_kinds_and_the_newer_fields() -> None:
    text = "\n".join(path.read_text() for path in ACCEPTED)
    for kind in ("kind: NodePool", "kind: NodeClaim", "kind: EC2NodeClass"):
        assert kind in text
    # Fields of v1.1+ that karpy refused or ignored once.
    for written in ('instanceStorePolicy: "RAID0"', "minValues:", "alias: al2023@", "alias: bottlerocket@"):
        assert written in text
    assert len(ACCEPTED) >= 19


@pytest.mark.parametrize("path", ACCEPTED, ids=[path.name for path in ACCEPTED])
def test_karpy_validate_accepts_each_example(capsys: pytest.CaptureFixture[str], path: Path) -> None:
    code, out, err = run_cli(capsys, "validate", str(path))
    assert code == 0, out + err
    assert "error" not in out + err


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_karpy_refuses_the_windows_examples_naming_why(capsys: pytest.CaptureFixture[str], name: str) -> None:
    code, out, err = run_cli(capsys, "validate", str(V115 / "refused" / name))
    assert code != 0
    assert REFUSED[name] in out + err
    assert sorted(path.name for path in (V115 / "refused").glob("*.yaml")) == sorted(REFUSED)
