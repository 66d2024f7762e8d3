"""The disruption pass tries its methods in Karpenter's order and stops at the first command.

Emptiness first, then drift, then consolidation: a drift command is not
worked out while an emptiness one is due, consolidation does not run while
drift has a command, and why each method left a node alone is kept as a
typed reason (the Events say its message).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from tests.support import KWOK_NODE_CLASS, kwok_nodepool, load_objects, make_pod

from karpy.api.conditions import Condition
from karpy.api.core import DO_NOT_DISRUPT_ANNOTATION, Node, Pod
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import (
    CONDITION_DRIFTED,
    CONDITION_INITIALIZED,
    NodeClaim,
    NodeClaimSpec,
    NodeClaimStatus,
)
from karpy.api.nodepool import REASON_DRIFTED, REASON_EMPTY, NodeClassRef, NodePool
from karpy.api.requirements import Requirements
from karpy.controllers.disruption import DisruptionController
from karpy.disruption.consolidation import ConsolidationCommand
from karpy.disruption.method import Candidate
from karpy.disruption.rejection import Rejection, RejectionKind
from karpy.scheduling.solver import NewNodeClaim, Plan
from karpy.sim.simulation import Simulation


class Pass:
    """A disruption controller over chosen candidates, recording which methods got as far as solving."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, budgets: str = "") -> None:
        disruption = "consolidateAfter: 30s" + (f", budgets: [{budgets}]" if budgets else "")
        self.simulation = Simulation()
        self.simulation.apply(load_objects(KWOK_NODE_CLASS, kwok_nodepool(disruption=disruption)))
        self.controller: DisruptionController = self.simulation.disruption
        nodepool = self.controller.cluster.nodepool("default")
        assert nodepool is not None
        self.nodepool: NodePool = nodepool
        self.candidates: list[Candidate] = []
        self.calls: list[str] = []
        monkeypatch.setattr(self.controller, "candidates", self._candidates)
        monkeypatch.setattr(self.controller, "_place_elsewhere", self._place_elsewhere)
        monkeypatch.setattr(self.controller, "_consolidate", self._consolidate)

    def add(
        self, name: str, pods: Sequence[Pod] = (), *, drifted: bool = False, pinned: bool = False
    ) -> None:
        conditions = [Condition(CONDITION_INITIALIZED, "True", last_transition_time=0.0)]
        if drifted:
            conditions.append(Condition(CONDITION_DRIFTED, "True", reason="NodePoolDrifted"))
        claim = NodeClaim(
            metadata=ObjectMeta(name=name),
            spec=NodeClaimSpec(node_class_ref=NodeClassRef("karpenter.kwok.sh", "KWOKNodeClass", "default")),
            status=NodeClaimStatus(node_name=name, conditions=tuple(conditions)),
        )
        annotations = {DO_NOT_DISRUPT_ANNOTATION: "true"} if pinned else {}
        node = Node(metadata=ObjectMeta(name=name, annotations=annotations))
        self.candidates.append(Candidate(claim, node, self.nodepool, list(pods)))

    def _candidates(self) -> tuple[list[Candidate], dict[str, int], dict[str, int]]:
        return list(self.candidates), {"default": 10}, {}

    def _place_elsewhere(self, candidate: Candidate, pods: Sequence[Pod]) -> Plan:
        self.calls.append(f"drift {candidate.nodeclaim.name}")
        return Plan(new_nodeclaims=[NewNodeClaim("default", Requirements(), [], list(pods), {}, {})])

    def _consolidate(
        self, underused: list[Candidate], allowed: dict[str, int], now: float
    ) -> ConsolidationCommand | None:
        self.calls.append("consolidation")
        return None


def test_a_due_emptiness_command_comes_before_drift_and_consolidation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    disruption = Pass(monkeypatch)
    disruption.add("empty")
    disruption.add("drifted", [make_pod("web-1")], drifted=True)
    command, emptiness, any_nodeclaims = disruption.controller.decide()
    assert command is not None and command.reason == REASON_EMPTY
    assert command.candidates == ["empty"]
    assert emptiness.command is not None and any_nodeclaims
    assert disruption.calls == []


def test_drift_comes_before_consolidation_once_nothing_is_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    disruption = Pass(monkeypatch)
    disruption.add("busy", [make_pod("web-1")])
    disruption.add("drifted", [make_pod("web-2")], drifted=True)
    command, _, _ = disruption.controller.decide()
    assert command is not None and command.reason == REASON_DRIFTED
    assert command.candidates == ["drifted"] and len(command.replacements) == 1
    assert disruption.calls == ["drift drifted"]


def test_consolidation_runs_when_no_earlier_method_has_a_command(monkeypatch: pytest.MonkeyPatch) -> None:
    disruption = Pass(monkeypatch)
    disruption.add("busy", [make_pod("web-1")])
    disruption.add("drifted", [make_pod("web-2")], drifted=True, pinned=True)
    command, _, _ = disruption.controller.decide()
    assert command is None
    assert disruption.calls == ["consolidation"]
    blocked = disruption.controller.blocked["drifted"]
    assert isinstance(blocked, Rejection) and blocked.kind is RejectionKind.NODE_DO_NOT_DISRUPT


def test_each_method_spends_its_own_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    # No Empty disruptions allowed: the empty node waits, and drift (its own budget) still acts.
    disruption = Pass(monkeypatch, budgets='{nodes: "0", reasons: [Empty]}')
    disruption.add("empty")
    disruption.add("drifted", [make_pod("web-1")], drifted=True)
    command, emptiness, _ = disruption.controller.decide()
    assert command is not None and command.reason == REASON_DRIFTED
    assert emptiness.deferred == ["empty"]
    assert disruption.controller.blocked["empty"].kind is RejectionKind.BUDGET


def test_a_drifted_node_the_drift_budget_holds_back_says_so_over_emptiness(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    disruption = Pass(monkeypatch, budgets='{nodes: "0"}')
    disruption.add("empty-drifted", drifted=True)
    command, _, _ = disruption.controller.decide()
    assert command is None
    reason = disruption.controller.blocked["empty-drifted"]
    assert reason.kind is RejectionKind.BUDGET and REASON_DRIFTED in reason.message
    assert disruption.calls == ["consolidation"]


def test_the_events_say_the_message_of_each_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    disruption = Pass(monkeypatch, budgets='{nodes: "0"}')
    disruption.add("empty")
    disruption.controller.reconcile("pass")
    reason = disruption.controller.blocked["empty"]
    assert disruption.controller.last.rejected["empty"] == reason
    assert disruption.controller.orchestrator.reported == {"empty": reason.message}
