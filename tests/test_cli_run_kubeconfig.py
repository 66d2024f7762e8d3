"""``karpy run`` without a usable cluster configuration: one line and exit 2, not a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support import root_logging_kept

from karpy.cli import main


@pytest.mark.parametrize(
    ("content", "expected"),
    [(None, "not found"), ("clusters: [\n", "while parsing"), ("", ""), ("users: []\n", "")],
    ids=["missing", "malformed", "empty", "no-clusters"],
)
def test_run_without_a_usable_kubeconfig_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, expected: str
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    if content is not None:
        kubeconfig.write_text(content)
    with root_logging_kept():  # karpy run configures the root logger
        code = main(
            ["run", "--kubeconfig", str(kubeconfig), "--metrics-port", "0", "--health-probe-port", "0"]
        )
    err = capsys.readouterr().err
    assert code == 2
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("karpy: no cluster to run against:")
    assert expected in lines[0]
