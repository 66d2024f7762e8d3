"""benchmarks.follow_karpy finds a run_scale's ``karpy run`` child and reads its CPU time and memory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from benchmarks.follow_karpy import karpy_child, sample


def test_it_finds_the_karpy_run_child_and_reads_its_figures(tmp_path: Path) -> None:
    # A stand-in whose command line reads like run_scale's: <python> <bin>/karpy run ...
    script = tmp_path / "karpy"
    script.write_text("import time\ntime.sleep(30)\n")
    child = subprocess.Popen([sys.executable, str(script), "run", "--kubeconfig", "x"])
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert karpy_child(os.getpid()) == child.pid
        cpu, peak, rss = sample(child.pid)
        assert cpu >= 0 and peak >= rss > 0
    finally:
        for process in (child, other):
            process.kill()
            process.wait()
    assert karpy_child(os.getpid()) is None
