"""Follow the ``karpy run`` of ``benchmarks.run_scale``: its CPU time and memory, scraped as Prometheus would.

``python -m benchmarks.follow_karpy PID OUT.json`` finds the ``karpy run``
child of the run_scale process ``PID`` and, once a second until it exits,
records its CPU seconds (utime + stime), peak and current resident set
(``VmHWM``, ``VmRSS``) and the machine's 1-minute load average; every 15 s it
scrapes ``/metrics`` (the port from karpy's log), as a Prometheus would, and
records how long the scrape took, the body's size and its samples. Each
sample is written to OUT.json as it comes, so a run stopped early still has
its figures; at the end it prints a summary. The run_scale script scrapes only
at its end, so the cost of rendering the series a Prometheus reads every 15 s
would not show without this.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from urllib.request import urlopen

SCRAPE_EVERY = 15.0
TICKS = os.sysconf("SC_CLK_TCK")


def children(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat[1]) == parent:
            found.append(int(entry.name))
    return found


def karpy_child(parent: int) -> int | None:
    """The child of ``parent`` running ``karpy run``."""
    for child in children(parent):
        try:
            command = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        for at, part in enumerate(command[:-1]):
            if part.endswith(b"/karpy") and command[at + 1] == b"run":
                return child
    return None


def sample(pid: int) -> tuple[float, int, int]:
    """(CPU seconds, VmHWM kB, VmRSS kB) of ``pid``; OSError once it is gone."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    status = Path(f"/proc/{pid}/status").read_text()
    peak = re.search(r"VmHWM:\s+(\d+)", status)
    now = re.search(r"VmRSS:\s+(\d+)", status)
    if peak is None or now is None:
        raise OSError(f"process {pid} has no memory figures")
    return (int(fields[11]) + int(fields[12])) / TICKS, int(peak.group(1)), int(now.group(1))


def follow(parent: int, out: Path) -> dict[str, object]:
    pid = None
    while pid is None:
        if not Path(f"/proc/{parent}").exists():
            raise SystemExit(f"process {parent} is gone")
        pid = karpy_child(parent)
        time.sleep(0.5)
    log = Path(os.readlink(f"/proc/{pid}/fd/1"))
    samples: list[tuple[float, float, int, int, float]] = []
    scrapes: list[tuple[float, float, int, int]] = []
    port: int | None = None
    last_scrape = 0.0
    while True:
        try:
            cpu, peak, rss = sample(pid)
        except OSError:
            break
        now = time.time()
        samples.append((now, cpu, peak, rss, os.getloadavg()[0]))
        if port is None:
            found = re.search(r"serving /metrics[^\"]* on port (\d+)", log.read_text(errors="replace"))
            port = int(found.group(1)) if found else None
        if port is not None and now - last_scrape >= SCRAPE_EVERY:
            last_scrape = now
            started = time.monotonic()
            try:
                body = urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
            except OSError:
                pass
            else:
                series = sum(1 for line in body.splitlines() if line and not line.startswith("#"))
                scrapes.append((now, time.monotonic() - started, len(body), series))
        out.write_text(json.dumps({"pid": pid, "log": str(log), "samples": samples, "scrapes": scrapes}))
        time.sleep(1)
    if not samples:
        return {}
    first, last = samples[0], samples[-1]
    loads = [each[4] for each in samples]
    return {
        "followed_s": last[0] - first[0],
        "cpu_s": last[1],
        "peak_rss_mb": last[2] / 1024,
        "load_mean": sum(loads) / len(loads),
        "scrapes": len(scrapes),
        "max_scrape_s": max((each[1] for each in scrapes), default=None),
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m benchmarks.follow_karpy RUN_SCALE_PID OUT.json", file=sys.stderr)
        return 2
    print(json.dumps(follow(int(args[0]), Path(args[1])), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
