"""karpy against the Cluster Autoscaler baseline on five traces, measured side by side.

Each scenario runs as a user would run it: ``karpy simulate SCENARIO
--compare cluster-autoscaler -o json``, in a process of its own. The
simulator runs the scenario twice on the same simulated cluster and cloud
(boot delays, prices, capacity windows): once with karpy's NodePools, once
with the Cluster Autoscaler baseline (``karpy.baselines.cluster_autoscaler``)
and the node groups the scenario declares for it (derived from the NodePools
when it declares none). What is compared is what ``--compare`` prints: the
cost of the run, mean and peak nodes, the instance types launched, how long
pods waited (p50, p95, max of first Pending to Running), pods evicted, and
scale-up and scale-down events.

The five traces:

- ``walkthrough``: the guide's walkthrough (the seed scenario, 5 pods then
  deleted); node groups derived from its NodePool;
- ``daily-web``: a web Deployment under a day-long sine of CPU demand scaled
  by a HorizontalPodAutoscaler (``examples/hpa-daily-web``); derived groups;
- ``batch-bursts``: a CronJob of 30 pods of 2 CPU / 4Gi for 20 minutes
  every 2 hours beside a small always-on API;
- ``three-teams``: web (small pods, day and night sizes), data (memory-heavy)
  and ml (CPU-heavy, coming and going) in one cluster;
- ``spot-ice-storm``: spot refused everywhere for an hour while the web tier
  scales up in the middle of it.

The last three declare the node groups a platform team sets up for Cluster
Autoscaler (a group per pod shape and capacity type, spot first through the
priority expander); karpy runs them on one NodePool (amd64, categories c, m, r,
generation > 4, spot or on-demand, consolidation after 30 s).

**Configuration** is counted too: the lines of YAML of each side's
autoscaling configuration as the scenario gives it, both written out the
same way (block style, ``yaml.safe_dump``): karpy's NodePools and node
classes; the baseline's ``spec.clusterAutoscaler`` (none when derived). The
baseline's count leaves out what Cluster Autoscaler needs outside
Kubernetes (an Auto Scaling group and a launch template per node group), so
it is a lower bound of its real configuration.

Run: ``python -m benchmarks.compare [--scenario NAME ...] [--jobs N] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from karpy.sim.scenario import builtin_scenario_path

HERE = Path(__file__).parent
SCENARIOS: dict[str, Path] = {
    "walkthrough": builtin_scenario_path(),
    "daily-web": HERE.parent / "examples" / "hpa-daily-web" / "scenario.yaml",
    "batch-bursts": HERE / "compare" / "batch-bursts" / "scenario.yaml",
    "three-teams": HERE / "compare" / "three-teams" / "scenario.yaml",
    "spot-ice-storm": HERE / "compare" / "spot-ice-storm" / "scenario.yaml",
}
AUTOSCALERS = ("karpy", "cluster-autoscaler")
KARPY_CONFIG_KINDS = frozenset({"NodePool", "EC2NodeClass", "KWOKNodeClass"})
# The figures of --compare's table shown here, in this order.
FIGURES = (
    "cost of the run",
    "mean nodes",
    "peak nodes",
    "instance types",
    "pending p50",
    "pending p95",
    "pending max",
    "pods evicted",
    "scale-up events",
    "scale-down events",
)


@dataclass(frozen=True, slots=True)
class Comparison:
    """One scenario: each autoscaler's figures (as ``--compare`` prints them), config lines, wall time."""

    scenario: str
    figures: dict[str, dict[str, str]]
    config_lines: dict[str, int | None]
    wall_seconds: float


def scenario_file(path: Path) -> Path:
    """The Scenario file itself (a scenario directory holds ``scenario.yaml``)."""
    return path / "scenario.yaml" if path.is_dir() else path


def _documents(path: Path) -> Iterator[dict[str, Any]]:
    for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
        if isinstance(document, dict):
            yield document


def _block_lines(value: object) -> int:
    return len(yaml.safe_dump(value, default_flow_style=False, sort_keys=False).splitlines())


def config_lines(path: Path) -> dict[str, int | None]:
    """Lines of YAML each side's autoscaling configuration takes, written out alike.

    karpy: the NodePools and node classes the scenario applies (from its
    files and inline objects). The baseline: ``spec.clusterAutoscaler``, or
    None when its node groups are derived from the NodePools.
    """
    file = scenario_file(path)
    scenario = next(d for d in _documents(file) if d.get("kind") == "Scenario")
    spec = scenario.get("spec") or {}
    karpy = 0
    for step in spec.get("steps") or []:
        apply = step.get("apply") or {}
        objects = list(apply.get("objects") or [])
        for name in apply.get("files") or []:
            objects.extend(_documents(file.parent / name))
        karpy += sum(_block_lines(obj) for obj in objects if obj.get("kind") in KARPY_CONFIG_KINDS)
    baseline = spec.get("clusterAutoscaler")
    return {"karpy": karpy, "cluster-autoscaler": _block_lines(baseline) if baseline else None}


def run_one(name: str) -> Comparison:
    path = SCENARIOS[name]
    started = time.perf_counter()
    finished = subprocess.run(
        [
            sys.executable,
            "-m",
            "karpy.cli",
            "simulate",
            str(path),
            "--compare",
            "cluster-autoscaler",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    if finished.returncode != 0:
        raise RuntimeError(f"{name}: karpy simulate exited {finished.returncode}: {finished.stderr.strip()}")
    document = json.loads(finished.stdout)
    header, *rows = document["comparison"]
    figures = {
        autoscaler: {row[0]: row[header.index(autoscaler)] for row in rows} for autoscaler in AUTOSCALERS
    }
    return Comparison(name, figures, config_lines(path), wall)


def _dollars(text: str) -> float:
    return float(text.lstrip("$").split("/")[0])


def markdown(results: Sequence[Comparison]) -> str:
    """The summary table, then one table per scenario with every figure."""
    lines = [
        "| scenario | karpy cost | CA cost | CA ÷ karpy | pending p95 karpy / CA | mean nodes karpy / CA "
        "| evicted karpy / CA | YAML lines karpy / CA | wall |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        karpy, baseline = result.figures["karpy"], result.figures["cluster-autoscaler"]
        ratio = _dollars(baseline["cost of the run"]) / max(_dollars(karpy["cost of the run"]), 1e-9)
        config = result.config_lines
        baseline_config = config["cluster-autoscaler"] or "derived"
        lines.append(
            f"| {result.scenario} | {karpy['cost of the run']} | {baseline['cost of the run']} | {ratio:.2f} "
            f"| {karpy['pending p95']} / {baseline['pending p95']} "
            f"| {karpy['mean nodes']} / {baseline['mean nodes']} "
            f"| {karpy['pods evicted']} / {baseline['pods evicted']} "
            f"| {config['karpy']} / {baseline_config} | {result.wall_seconds:.0f} s |"
        )
    for result in results:
        lines += ["", f"`{result.scenario}`", "", "| | karpy | cluster-autoscaler |", "|---|---|---|"]
        for figure in FIGURES:
            cells = [result.figures[autoscaler].get(figure, "-") for autoscaler in AUTOSCALERS]
            lines.append(f"| {figure} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--scenario", action="append", choices=sorted(SCENARIOS), help="only these (repeatable)"
    )
    parser.add_argument("--jobs", type=int, default=1, help="scenarios run at once (each in its own process)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of the tables")
    args = parser.parse_args(argv)
    names = args.scenario or list(SCENARIOS)
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(run_one, names))
    if args.json:
        print(json.dumps([_as_dict(result) for result in results], indent=2))
    else:
        print(markdown(results))
        print(f"\nwall time {time.perf_counter() - started:.0f} s")


def _as_dict(result: Comparison) -> dict[str, object]:
    return {
        "scenario": result.scenario,
        "figures": result.figures,
        "configLines": result.config_lines,
        "wallSeconds": round(result.wall_seconds, 1),
    }


if __name__ == "__main__":
    main()
