"""The per-spec table of a Ginkgo JSON report of Karpenter's e2e suites run against karpy.

    python -m benchmarks.karpenter_e2e REPORT.json... [--markdown]

Prints one row per spec (spec, result, reason): passed; failed with the first
line of its failure; not applicable or deferred (skipped by scripts/karpenter-e2e
with the reason from not-applicable.txt or deferred.txt); skipped by the suite
itself with its message; not run (left out by a focus). Then the counts and the
share of applicable specs that passed. Several reports (focused runs of one suite)
make one table: a spec appears once, with its result from the last report that ran
it (passed or failed) or, if none did, from the first.
Exit status 0: the table is the result.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

LISTS = Path(__file__).resolve().parent / "karpenter-e2e"


def spec_lists() -> list[tuple[re.Pattern[str], str, str]]:
    """(pattern, result, reason) from the two lists scripts/karpenter-e2e skips by."""
    lists: list[tuple[re.Pattern[str], str, str]] = []
    for name, result in (("not-applicable.txt", "not applicable"), ("deferred.txt", "deferred")):
        for line in (LISTS / name).read_text().splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            pattern, _, reason = line.partition("|")
            lists.append((re.compile(pattern.strip()), result, reason.strip()))
    return lists


def rows(report: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    listed = spec_lists()
    table: list[tuple[str, str, str]] = []
    for suite in report:
        for spec in suite.get("SpecReports") or []:
            if spec.get("LeafNodeType") != "It":
                continue
            containers = spec.get("ContainerHierarchyTexts") or []
            text = " ".join([*containers, spec.get("LeafNodeText", "")])
            state = spec.get("State", "")
            failure = (spec.get("Failure") or {}).get("Message", "")
            first_line = " ".join(failure.split())[:160]
            if state == "passed":
                table.append((text, "passed", ""))
            elif state == "skipped":
                match = next(((res, why) for pattern, res, why in listed if pattern.search(text)), None)
                if match is not None and not failure:
                    table.append((text, *match))
                elif failure:
                    table.append((text, "skipped", first_line))  # Skip() in the suite, with why
                else:
                    table.append((text, "not run", "not selected by -ginkgo.focus"))
            elif state == "pending":
                table.append((text, "pending", "marked pending in the suite"))
            else:
                table.append((text, "failed", f"{state}: {first_line}"))
    return table


# Results a later report's row may replace: a spec it did not run keeps what an earlier one found.
_RAN = ("passed", "failed")


def merged(tables: list[list[tuple[str, str, str]]]) -> list[tuple[str, str, str]]:
    """One row per spec over several reports of the same suites, in first-seen order.

    Focused runs each run a few specs and leave the others "not run"; a spec's row is
    the last one that ran it (passed or failed), else the first row seen for it.
    """
    by_spec: dict[str, tuple[str, str, str]] = {}
    for table in tables:
        for row in table:
            spec, result, _ = row
            if spec not in by_spec or result in _RAN or by_spec[spec][1] == "not run":
                by_spec[spec] = row
    return list(by_spec.values())


def summary(table: list[tuple[str, str, str]]) -> str:
    """The counts, and the share of applicable specs (all but "not applicable") that passed."""
    counts = Counter(result for _, result, _ in table)
    text = ", ".join(f"{count} {result}" for result, count in sorted(counts.items()))
    applicable = len(table) - counts["not applicable"]
    share = f"; {counts['passed']} of {applicable} applicable passed ({counts['passed'] / applicable:.0%})"
    return f"{text}; {len(table)} specs" + (share if applicable else "")


def main(argv: list[str]) -> int:
    paths = [arg for arg in argv if not arg.startswith("--")]
    markdown = "--markdown" in argv
    table = merged([rows(json.loads(Path(path).read_text())) for path in paths])
    if markdown:
        print("| spec | result | reason |\n|---|---|---|")
        for spec, result, reason in table:
            print(f"| {spec} | {result} | {reason.replace('|', '/')} |")
    else:
        for spec, result, reason in table:
            print(f"{result:<15} {spec}" + (f"\n{'':<15} {reason}" if reason else ""))
    print(f"\n{summary(table)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
