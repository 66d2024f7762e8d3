"""The one check drift and repair share: a plan's first pod waiting on capacity not initialized yet."""

from __future__ import annotations

from karpy.disruption.candidates import waiting_on_uninitialized
from karpy.scheduling.solver import Plan


def test_the_first_pod_by_key_on_an_uninitialized_target_is_named_with_it() -> None:
    plan = Plan(existing={"ns/b": "new-1", "ns/a": "ready", "ns/c": "new-0"})
    assert waiting_on_uninitialized(plan, frozenset({"new-0", "new-1"})) == ("ns/b", "new-1")
    assert waiting_on_uninitialized(plan, frozenset({"new-0"})) == ("ns/c", "new-0")


def test_a_plan_onto_initialized_capacity_waits_on_nothing() -> None:
    plan = Plan(existing={"ns/a": "ready"})
    assert waiting_on_uninitialized(plan, frozenset({"new-0"})) is None
    assert waiting_on_uninitialized(Plan(), frozenset({"new-0"})) is None
