"""The printed tables and the targets, judged from the measured results.

Kept apart from the measuring so that a JSON file written by one run can be
read and compared by another tool without re-running anything, and so that
the judging of a target is written down once: a target that was not
measured says NOT RUN rather than passing by default, and a speed measured
on a plan that breaks the pods' constraints does not pass.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.scheduling.measure import Result, Suite

TARGET_PODS_PER_SECOND = 10_000.0
TARGET_THROUGHPUT_PODS = 20_000
TARGET_GAP = 0.05
TARGET_GAP_MIN_PODS = 1_000
TARGET_MEMORY_BYTES = 1024**3
TARGET_MEMORY_PODS = 50_000

PASS = "PASS"
FAIL = "FAIL"
NOT_RUN = "NOT RUN"


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Columns padded to their widest cell; text left-aligned, figures right-aligned."""
    widths = [len(header) for header in headers]
    for row in rows:
        for index, cell in enumerate(row):
            widths[index] = max(widths[index], len(cell))

    def line(cells: Sequence[str]) -> str:
        parts = [
            cell.rjust(widths[index]) if _numeric(cell) else cell.ljust(widths[index])
            for index, cell in enumerate(cells)
        ]
        return "  ".join(parts).rstrip()

    return [line(headers), "  ".join("-" * width for width in widths), *(line(row) for row in rows)]


NUMERIC_CELL = re.compile(r"[+-]?[\d,]+(\.\d+)?(%| ms| s| MiB|/\d+)?")


def _numeric(cell: str) -> bool:
    """A figure (``1,234``, ``8.3 ms``, ``+12.5%``, ``0/22``, ``-``), which lines up on the right."""
    return cell == "-" or NUMERIC_CELL.fullmatch(cell) is not None


def seconds_text(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.1f} ms"
    return f"{seconds:.2f} s"


def bytes_text(amount: int | None) -> str:
    if amount is None:
        return "-"
    return f"{amount / 1024**2:,.1f} MiB"


def rate_text(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:,.0f}"


def price_text(price: float | None) -> str:
    return "-" if price is None else f"{price:,.2f}"


def gap_text(gap: float | None) -> str:
    return "-" if gap is None else f"{gap * 100:+.1f}%"


def broken_text(result: Result) -> str:
    if not result.constraints_checked:
        return "-"
    return f"{result.constraints_broken}/{result.constraints_checked}"


def _error_row(result: Result, width: int) -> list[str]:
    return [f"{result.case.pods:,}", result.error, *([""] * (width - 2))]


# A table column: its header and how a result's cell reads.
Column = tuple[str, Callable[[Result], str]]

PODS: Column = ("pods", lambda result: f"{result.case.pods:,}")
WALL_TIME: Column = ("wall time", lambda result: seconds_text(result.seconds))
RUNS: Column = ("runs", lambda result: str(result.runs))
RATE: Column = ("pods/s", lambda result: rate_text(result.pods_per_second))
NODECLAIMS: Column = ("NodeClaims", lambda result: f"{result.nodeclaims:,}")
UNSCHEDULABLE: Column = ("unschedulable", lambda result: f"{result.unschedulable:,}")
PRICE: Column = ("price $/h", lambda result: price_text(result.price))
BROKEN: Column = ("broken groups", broken_text)
EXISTING_NODES: Column = ("existing nodes", lambda result: f"{result.case.existing:,}")
ON_EXISTING: Column = ("on existing nodes", lambda result: f"{result.on_existing:,}")


def results_table(columns: Sequence[Column], results: Sequence[Result]) -> list[str]:
    """One row per result; a result that failed shows its pod count and error instead."""
    rows = [
        _error_row(result, len(columns)) if result.error else [cell(result) for _, cell in columns]
        for result in results
    ]
    return format_table([header for header, _ in columns], rows)


def speed_table(results: Sequence[Result]) -> list[str]:
    return results_table([PODS, WALL_TIME, RUNS, RATE, NODECLAIMS, UNSCHEDULABLE, PRICE, BROKEN], results)


def existing_table(results: Sequence[Result]) -> list[str]:
    columns = [EXISTING_NODES, PODS, WALL_TIME, RUNS, RATE, ON_EXISTING, NODECLAIMS, UNSCHEDULABLE, BROKEN]
    return results_table(columns, results)


def catalog_table(results: Sequence[Result]) -> list[str]:
    lines = speed_table(results)
    headers = ["pods", "peak RSS", "RSS growth in solve", "tracemalloc peak"]
    rows = [
        [
            f"{result.case.pods:,}",
            bytes_text(result.peak_rss_bytes),
            bytes_text(result.rss_growth_bytes),
            bytes_text(result.tracemalloc_peak_bytes),
        ]
        for result in results
        if not result.error
    ]
    return [*lines, "", *format_table(headers, rows)]


def lp_table(results: Sequence[Result]) -> list[str]:
    headers = [
        "workload",
        "pods",
        "plan $/h",
        "aggregate LP $/h",
        "gap",
        "assignment LP $/h",
        "gap to it",
        "configuration LP $/h",
        "gap to it",
        "configuration LP's nodes",
    ]
    rows = [
        [result.case.workload, *_error_row(result, len(headers) - 1)]
        if result.error
        else [
            result.case.workload,
            f"{result.case.pods:,}",
            price_text(result.price),
            price_text(result.lower_bound),
            gap_text(result.gap),
            price_text(result.assignment_bound),
            gap_text(result.assignment_gap),
            price_text(result.configuration_bound),
            gap_text(result.configuration_gap),
            result.configuration_bound_nodes,
        ]
        for result in results
    ]
    return format_table(headers, rows)


@dataclass(frozen=True, slots=True)
class TargetVerdict:
    name: str
    target: str
    measured: str
    verdict: str

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "target": self.target, "measured": self.measured, "verdict": self.verdict}


def _find(results: Sequence[Result], suite: Suite, pods: int) -> Result | None:
    return next((r for r in results if r.case.suite is suite and r.case.pods == pods and not r.error), None)


def judge_targets(results: Sequence[Result]) -> list[TargetVerdict]:
    verdicts: list[TargetVerdict] = []

    throughput = _find(results, Suite.KARPENTER, TARGET_THROUGHPUT_PODS)
    target = (
        f">= {TARGET_PODS_PER_SECOND:,.0f} pods/s, {TARGET_THROUGHPUT_PODS:,} diverse pods, no broken group"
    )
    if throughput is None or throughput.pods_per_second is None:
        verdicts.append(TargetVerdict("speed", target, "not measured", NOT_RUN))
    else:
        rate = throughput.pods_per_second
        measured = f"{rate:,.0f} pods/s, {broken_text(throughput)} groups broken"
        ok = rate >= TARGET_PODS_PER_SECOND and throughput.constraints_broken == 0
        verdicts.append(TargetVerdict("speed", target, measured, PASS if ok else FAIL))

    bounded = [
        r for r in results if r.case.suite is Suite.LP and r.case.pods >= TARGET_GAP_MIN_PODS and not r.error
    ]
    gaps_by_bound: tuple[tuple[str, str, Callable[[Result], float | None]], ...] = (
        ("cost", "configuration LP (the tightest bound)", lambda result: result.configuration_gap),
        ("cost*", "assignment LP (looser)", lambda result: result.assignment_gap),
        ("cost**", "aggregate LP (loosest)", lambda result: result.gap),
    )
    for name, bound_name, gap_of in gaps_by_bound:
        target = f"<= {TARGET_GAP:.0%} above the {bound_name}, >= {TARGET_GAP_MIN_PODS:,} generic pods"
        gaps = [(gap, result) for result in bounded if (gap := gap_of(result)) is not None]
        if not gaps:
            verdicts.append(TargetVerdict(name, target, "not measured", NOT_RUN))
            continue
        worst, worst_result = max(gaps, key=lambda item: item[0])
        measured = f"worst {worst:+.1%} ({worst_result.case.workload}, {worst_result.case.pods:,} pods)"
        verdicts.append(TargetVerdict(name, target, measured, PASS if worst <= TARGET_GAP else FAIL))

    memory = _find(results, Suite.CATALOG, TARGET_MEMORY_PODS)
    target = f"< {TARGET_MEMORY_BYTES / 1024**3:.0f} GiB peak, {TARGET_MEMORY_PODS:,}-pod catalog solve"
    if memory is None or memory.peak_rss_bytes is None:
        verdicts.append(TargetVerdict("memory", target, "not measured", NOT_RUN))
    else:
        peak = memory.peak_rss_bytes
        measured = f"{bytes_text(peak)} peak RSS of the whole measuring process"
        if memory.tracemalloc_peak_bytes is not None:
            measured += f"; solve's tracemalloc peak {bytes_text(memory.tracemalloc_peak_bytes)}"
        verdicts.append(
            TargetVerdict("memory", target, measured, PASS if peak < TARGET_MEMORY_BYTES else FAIL)
        )
    return verdicts


def targets_table(verdicts: Sequence[TargetVerdict]) -> list[str]:
    return format_table(
        ["target", "goal", "measured", "verdict"],
        [[verdict.name, verdict.target, verdict.measured, verdict.verdict] for verdict in verdicts],
    )


def _first_line_with(path: str, prefix: str) -> str:
    try:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            if line.startswith(prefix):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def source_revision() -> str:
    """The commit the measured karpy comes from, and whether its src/ differs from it (best effort)."""
    root = Path(__file__).resolve().parents[2]
    # Read-only: no optional index refresh, so a concurrent git command is never blocked.
    environment = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=root,
            env=environment,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "diff", "--quiet", "HEAD", "--", "src"], cwd=root, env=environment, check=False
        ).returncode
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{commit} (src/ changed since)" if changed else commit


def machine() -> dict[str, str]:
    """What the figures were measured on, and which karpy."""
    return {
        "karpy commit": source_revision(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "cpus": str(os.cpu_count()),
        "cpu model": _first_line_with("/proc/cpuinfo", "model name"),
        "memory": _first_line_with("/proc/meminfo", "MemTotal"),
    }
