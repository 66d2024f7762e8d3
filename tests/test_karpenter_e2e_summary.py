"""The per-spec table of a Ginkgo JSON report (benchmarks/karpenter_e2e.py).

Passed and failed specs keep their state (a failure its message); a spec the
script skipped for one of the two lists gets that list's result and reason;
containers (Describe, BeforeEach) are not specs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from benchmarks.karpenter_e2e import merged, rows, summary

from benchmarks import karpenter_e2e


def spec(containers: list[str], leaf: str, state: str, message: str = "", kind: str = "It") -> dict[str, Any]:
    failure = {"Message": message} if message else None
    return {
        "ContainerHierarchyTexts": containers,
        "LeafNodeText": leaf,
        "LeafNodeType": kind,
        "State": state,
        "Failure": failure,
    }


def test_each_spec_gets_its_result_and_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Lists of this test's own: the project's change as features land.
    listed = "# why\nTerminateFirst | patches FEATURE_GATES of Karpenter\n"
    (tmp_path / "not-applicable.txt").write_text(listed)
    (tmp_path / "deferred.txt").write_text("Some Feature | the feature is absent from karpy\n")
    monkeypatch.setattr(karpenter_e2e, "LISTS", tmp_path)
    report = [
        {
            "SpecReports": [
                spec(["Integration", "CRD Hash"], "should have NodePool hash", "passed"),
                spec(["NodeClaim", "Standalone"], "should create", "failed", "Timed out after 600s.\nmore"),
                spec(["TerminateFirst"], "should terminate first", "skipped"),
                spec(["Some Feature"], "should work", "skipped"),
                spec(["Other"], "skips itself", "skipped", "cluster lacks X"),
                spec(["Other"], "left out", "skipped"),
                spec([], "", "passed", kind="SynchronizedBeforeSuite"),
            ]
        }
    ]
    table = rows(report)
    assert [(text, result) for text, result, _ in table] == [
        ("Integration CRD Hash should have NodePool hash", "passed"),
        ("NodeClaim Standalone should create", "failed"),
        ("TerminateFirst should terminate first", "not applicable"),
        ("Some Feature should work", "deferred"),
        ("Other skips itself", "skipped"),
        ("Other left out", "not run"),
    ]
    assert table[1][2] == "failed: Timed out after 600s. more"
    assert "FEATURE_GATES" in table[2][2]
    assert table[3][2] == "the feature is absent from karpy"
    assert table[4][2] == "cluster lacks X"


def test_focused_runs_merge_into_one_row_per_spec_the_last_that_ran_it() -> None:
    first = rows([{"SpecReports": [spec(["A"], "one", "failed", "boom"), spec(["A"], "two", "skipped")]}])
    second = rows([{"SpecReports": [spec(["A"], "one", "skipped"), spec(["A"], "two", "passed")]}])
    third = rows([{"SpecReports": [spec(["A"], "one", "passed"), spec(["A"], "two", "skipped")]}])
    table = merged([first, second, third])
    assert [(text, result) for text, result, _ in table] == [("A one", "passed"), ("A two", "passed")]
    assert merged([second])[0][1] == "not run"
    assert summary(table) == "2 passed; 2 specs; 2 of 2 applicable passed (100%)"


def test_focused_runs_of_one_suite_make_one_row_per_spec_with_the_last_result_run() -> None:
    first = [("A a", "passed", ""), ("A b", "failed", "failed: x"), ("A c", "not run", "")]
    second = [("A a", "not run", ""), ("A b", "passed", ""), ("A c", "not run", "")]
    assert merged([first, second]) == [("A a", "passed", ""), ("A b", "passed", ""), ("A c", "not run", "")]
