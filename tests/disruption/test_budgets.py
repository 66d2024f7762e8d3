"""Disruption budgets and their cron windows."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from tests.support import make_nodepool

from karpy.api.cron import CronError, CronSchedule
from karpy.api.manifest import parse_manifests
from karpy.disruption.budgets import allowed_disruptions


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("expression", "moment", "matches"),
    [
        ("0 9 * * *", "2026-03-02T09:00", True),
        ("0 9 * * *", "2026-03-02T09:01", False),
        ("*/15 * * * *", "2026-03-02T10:45", True),
        ("0 0 * * 1-5", "2026-03-07T00:00", False),  # a Saturday
        ("0 0 * * 0", "2026-03-08T00:00", True),  # a Sunday
        ("0 0 * * 7", "2026-03-08T00:00", True),  # 7 is Sunday too
        ("@daily", "2026-03-08T00:00", True),
        ("30 2 1 * *", "2026-04-01T02:30", True),
    ],
)
def test_cron_matching(expression: str, moment: str, matches: bool) -> None:
    assert CronSchedule(expression).matches(datetime.fromisoformat(moment).replace(tzinfo=UTC)) is matches


@pytest.mark.parametrize("expression", ["* * * *", "61 * * * *", "a * * * *", "*/0 * * * *"])
def test_bad_cron_is_rejected(expression: str) -> None:
    with pytest.raises(CronError):
        CronSchedule(expression)


def test_percentages_round_up_and_the_most_restrictive_budget_wins() -> None:
    pool = make_nodepool(spec='  disruption: {consolidateAfter: 0s, budgets: [{nodes: "20%"}, {nodes: "5"}]}')
    assert allowed_disruptions(pool, "Empty", 10, 0, at("2026-03-02T12:00")) == 2
    assert allowed_disruptions(pool, "Empty", 11, 0, at("2026-03-02T12:00")) == 3
    assert allowed_disruptions(pool, "Empty", 10, 2, at("2026-03-02T12:00")) == 0


def test_a_scheduled_budget_applies_only_inside_its_window() -> None:
    pool = make_nodepool(
        spec="  disruption: {consolidateAfter: 0s, "
        'budgets: [{nodes: "0", schedule: "0 9 * * *", duration: 8h}, {nodes: "100%"}]}'
    )
    assert allowed_disruptions(pool, "Empty", 10, 0, at("2026-03-02T10:00")) == 0
    assert allowed_disruptions(pool, "Empty", 10, 0, at("2026-03-02T16:59")) == 0
    assert allowed_disruptions(pool, "Empty", 10, 0, at("2026-03-02T17:00")) == 10
    assert allowed_disruptions(pool, "Empty", 10, 0, at("2026-03-02T08:59")) == 10


def test_a_budget_with_reasons_applies_only_to_them() -> None:
    pool = make_nodepool(
        spec='  disruption: {consolidateAfter: 0s, budgets: [{nodes: "0", reasons: [Drifted]}, '
        '{nodes: "100%"}]}'
    )
    assert allowed_disruptions(pool, "Drifted", 4, 0, at("2026-03-02T10:00")) == 0
    assert allowed_disruptions(pool, "Empty", 4, 0, at("2026-03-02T10:00")) == 4


def test_the_default_budget_is_ten_percent() -> None:
    pool = make_nodepool()
    assert allowed_disruptions(pool, "Empty", 25, 0, at("2026-03-02T10:00")) == 3


@pytest.mark.parametrize(
    ("schedule", "error"),
    [
        ("61 * * * *", "'61' is out of range 0-59"),
        ("0 9 * * mun", "invalid field 'mun'"),
        ("*/0 * * * *", "invalid step '0'"),
    ],
)
def test_a_budget_schedule_cron_cannot_read_is_an_error_where_it_is_written(
    schedule: str, error: str
) -> None:
    text = f"""
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: default}}
spec:
  template:
    spec:
      nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}}
  disruption:
    consolidateAfter: 0s
    budgets: [{{nodes: "0", schedule: "{schedule}", duration: 1h}}]
"""
    result = parse_manifests(text, "f.yaml")
    assert result.objects == []
    assert result.errors == [f'f.yaml: NodePool "default": spec.disruption.budgets[0].schedule: {error}']
