"""``python -m benchmarks.scheduling``: measure the solver, print the tables and the targets.

Five tables, each a suite that ``--only`` can select (see benchmarks/README.md
for what each column means):

- ``karpenter``: Karpenter's own benchmark shapes, exactly (400 fake
  instance types and its diverse pods, labels and selectors as it draws
  them), from 1 to 20,000 pods: the speed comparison.
- ``karpenter-groups``: the same kinds of pod on the same types, each
  constrained pod selecting its own group, as a Deployment's pods do.
- ``catalog``: the real AWS catalog with a web/batch/memory-heavy mix of
  1,000 to 50,000 pods: speed and memory at a realistic scale.
- ``lp``: generic and mixed pods on the real catalog against three LP lower
  bounds on the price: how far from optimal the plans are.
- ``existing``: Karpenter's diverse pods on a cluster already running 0 to
  5,000 nodes, nearly all full: what existing capacity costs a scale-up.

Every case runs in a fresh process with a time limit (``--timeout``, per
case); a case past it is reported as timed out and the larger sizes of the
same table are skipped, since they would only take longer. Progress goes
to stderr, the tables to stdout, so ``> results.txt`` keeps just the tables.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.scheduling.measure import Case, Result, Suite, measure_isolated
from benchmarks.scheduling.report import (
    catalog_table,
    existing_table,
    judge_targets,
    lp_table,
    machine,
    speed_table,
    targets_table,
)

KARPENTER_SIZES = (1, 50, 100, 500, 1_000, 2_000, 5_000, 10_000, 20_000)
CATALOG_SIZES = (1_000, 10_000, 50_000)
LP_SIZES = (100, 1_000, 10_000)
EXISTING_SIZES = (5_000,)
# How many nodes the ``existing`` suite's cluster already runs, for each pod count.
EXISTING_NODE_COUNTS = (0, 1_000, 5_000)
QUICK_SIZES = {
    Suite.KARPENTER: (1, 50, 100, 500),
    Suite.GROUPS: (1, 50, 100, 500),
    Suite.CATALOG: (1_000,),
    Suite.LP: (100, 1_000),
    Suite.EXISTING: (500,),
}
FULL_SIZES = {
    Suite.KARPENTER: KARPENTER_SIZES,
    Suite.GROUPS: KARPENTER_SIZES,
    Suite.CATALOG: CATALOG_SIZES,
    Suite.LP: LP_SIZES,
    Suite.EXISTING: EXISTING_SIZES,
}
DEFAULT_TIMEOUT_SECONDS = 900.0

TITLES = {
    Suite.KARPENTER: "Karpenter's benchmark shapes, exactly: its diverse pods on its 400 fake instance types",
    Suite.GROUPS: "Own-group shapes: the diverse kinds, each constrained pod selecting its own group",
    Suite.CATALOG: "Real catalog: web/batch/memory-heavy mix on the AWS us-east-1 catalog",
    Suite.LP: "Cost quality: plan price against LP lower bounds (generic pods, AWS catalog)",
    Suite.EXISTING: "Existing capacity: diverse pods on a cluster already running nodes, 9 in 10 full",
}


def parse_sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part.replace("_", "")) for part in text.split(",") if part.strip())
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"expected comma-separated pod counts, got {text!r}") from error
    if not sizes or any(size < 1 for size in sizes):
        raise argparse.ArgumentTypeError("pod counts must be positive")
    return tuple(sorted(set(sizes)))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.scheduling",
        description="Measure karpy's scheduling core: speed, plan cost against LP bounds, memory.",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes only (a minute or so)")
    parser.add_argument(
        "--sizes", type=parse_sizes, help="comma-separated pod counts, used for every selected suite"
    )
    parser.add_argument(
        "--only",
        choices=[str(suite) for suite in Suite],
        action="append",
        help="run only this suite (repeat for several)",
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the results to FILE")
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help="time limit per case; after one, the larger sizes of its table are skipped "
        f"(default {DEFAULT_TIMEOUT_SECONDS:g})",
    )
    parser.add_argument(
        "--no-tracemalloc",
        dest="tracemalloc",
        action="store_false",
        help="skip the catalog solves' tracemalloc peak (one more solve per case, 3-5x slower than timed)",
    )
    parser.add_argument("--seed", type=int, default=42, help="seed of the pod generators (default 42)")
    return parser


def plan_cases(suite: Suite, sizes: Sequence[int], seed: int, tracemalloc: bool) -> list[Case]:
    if suite is Suite.KARPENTER:
        return [Case(suite, "karpenter-diverse", "karpenter-exact-400", size, seed) for size in sizes]
    if suite is Suite.GROUPS:
        return [Case(suite, "diverse", "karpenter-400", size, seed) for size in sizes]
    if suite is Suite.CATALOG:
        return [Case(suite, "mixed", "aws-catalog", size, seed, trace_memory=tracemalloc) for size in sizes]
    if suite is Suite.EXISTING:
        return [
            Case(suite, "diverse", "karpenter-400", size, seed, existing=nodes)
            for size in sizes
            for nodes in EXISTING_NODE_COUNTS
        ]
    return [
        Case(suite, workload, "aws-catalog", size, seed, lower_bound=True)
        for workload in ("generic", "mixed")
        for size in sizes
    ]


def run_suite(cases: Sequence[Case], timeout: float) -> list[Result]:
    results: list[Result] = []
    given_up: set[str] = set()
    for case in cases:
        label = f"{case.suite} {case.workload} {case.pods:,} pods"
        if case.existing:
            label += f", {case.existing:,} existing nodes"
        if case.workload in given_up:
            results.append(Result(case, error="skipped: a smaller size ran out of time"))
            continue
        print(f"  {label} ...", end="", file=sys.stderr, flush=True)
        started = time.perf_counter()
        result = measure_isolated(case, timeout)
        print(f" {time.perf_counter() - started:.1f} s {result.error}", file=sys.stderr, flush=True)
        if result.error.startswith("timed out"):
            given_up.add(case.workload)
        results.append(result)
    return results


def render(suite: Suite, results: Sequence[Result]) -> list[str]:
    if suite in (Suite.KARPENTER, Suite.GROUPS):
        return speed_table(results)
    if suite is Suite.CATALOG:
        return catalog_table(results)
    if suite is Suite.EXISTING:
        return existing_table(results)
    return lp_table(results)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    suites = [Suite(name) for name in args.only] if args.only else list(Suite)
    info = machine()
    print("karpy scheduling benchmarks")
    for key, value in info.items():
        print(f"  {key}: {value}")
    print(f"  timeout per case: {args.timeout:g} s; seed {args.seed}")

    all_results: list[Result] = []
    for suite in suites:
        sizes = args.sizes or (QUICK_SIZES if args.quick else FULL_SIZES)[suite]
        print(f"{suite}:", file=sys.stderr, flush=True)
        results = run_suite(plan_cases(suite, sizes, args.seed, args.tracemalloc), args.timeout)
        all_results.extend(results)
        print()
        print(TITLES[suite])
        print()
        for line in render(suite, results):
            print(line)
        sys.stdout.flush()

    verdicts = judge_targets(all_results)
    print()
    print("Targets")
    print()
    for line in targets_table(verdicts):
        print(line)

    if args.json:
        document = {
            "machine": info,
            "arguments": {key: str(value) for key, value in vars(args).items()},
            "results": [result.to_json() for result in all_results],
            "targets": [verdict.to_json() for verdict in verdicts],
        }
        args.json.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
