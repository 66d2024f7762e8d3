"""Rejections are typed: callers decide by kind, never by the wording of the message."""

from __future__ import annotations

import pytest

from karpy.controllers.disruption import worth_an_event
from karpy.disruption.rejection import INFEASIBLE, WAITING, Rejection, RejectionKind


@pytest.mark.parametrize("kind", [kind for kind in RejectionKind if kind in WAITING])
def test_a_node_that_is_only_waiting_gets_no_event_whatever_the_message_says(kind: RejectionKind) -> None:
    assert not worth_an_event(Rejection(kind, "pod default/web-1 has karpenter.sh/do-not-disrupt"))


@pytest.mark.parametrize("kind", [kind for kind in RejectionKind if kind not in WAITING])
def test_every_other_reason_gets_an_event_even_worded_as_a_wait(kind: RejectionKind) -> None:
    # Worded as the waiting reasons' messages start: the wording once chose the Event.
    for message in ("node is being deleted", "NodePool default has consolidation disabled"):
        assert worth_an_event(Rejection(kind, message))


def test_the_message_is_what_users_read_and_the_names_are_fields() -> None:
    rejection = Rejection(
        RejectionKind.POD_UNSCHEDULABLE,
        "pod default/a would not schedule: no capacity (and 1 more)",
        pods=("default/a", "default/b"),
    )
    assert str(rejection) == rejection.message
    assert rejection.infeasible
    assert "default/b" in rejection.pods and "default/b" not in rejection.message


def test_only_a_pod_that_cannot_land_or_a_node_that_is_not_ready_is_infeasible() -> None:
    assert {RejectionKind.POD_UNSCHEDULABLE, RejectionKind.TARGET_NOT_INITIALIZED} == INFEASIBLE
    assert not INFEASIBLE & WAITING
