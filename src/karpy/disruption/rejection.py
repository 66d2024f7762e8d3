"""Why the disruption core leaves a node alone: a typed value, not a sentence to parse.

Every reason a disruption method gives for not disrupting a node (it waits,
the node, its pods or a budget hold it back, its pods would not schedule
elsewhere, or removing it gives no command) is a
:class:`Rejection`: its :class:`RejectionKind`, the message shown to users
(Events, logs, the simulator's report; the wording is free to change), and
the pods and other nodes it names. Callers decide by the kind and read the
names from the fields: the controller publishes Events for some kinds only,
and the evaluation memo keeps an answer for alike nodes only when it names
no pod.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class RejectionKind(enum.Enum):
    # Not a candidate yet: a matter of time or state, not worth an Event.
    BEING_DELETED = "BeingDeleted"
    NOT_INITIALIZED = "NotInitialized"
    CONSOLIDATION_DISABLED = "ConsolidationDisabled"  # consolidateAfter: Never
    EMPTY_ONLY = "EmptyOnly"  # consolidationPolicy: WhenEmpty
    NOT_DUE = "NotDue"  # consolidateAfter has not elapsed
    # Held back by the node, its pods, its price or a budget.
    NODE_DO_NOT_DISRUPT = "NodeDoNotDisrupt"
    POD_DO_NOT_DISRUPT = "PodDoNotDisrupt"
    POD_WITHOUT_OWNER = "PodWithoutOwner"
    POD_DISRUPTION_BUDGET = "PodDisruptionBudget"
    PRICE_UNKNOWN = "PriceUnknown"
    BUDGET = "Budget"
    # A static NodePool's drift waits for its scale-down, or has no room under limits.nodes, or
    # (TerminateFirstDrift) can launch only into full capacity reservations the node frees no slot of.
    STATIC_SCALING_DOWN = "StaticScalingDown"
    STATIC_AT_NODE_LIMIT = "StaticAtNodeLimit"
    STATIC_RESERVATIONS_FULL = "StaticReservationsFull"
    # A consolidation's replacement, kept while the nodes whose pods it is for still go.
    LANDING_CAPACITY = "LandingCapacity"
    # Evaluated: removing it gives no command. The first two are infeasible: its pods
    # would not all find a place they can count on.
    TARGET_NOT_INITIALIZED = "TargetNotInitialized"
    POD_UNSCHEDULABLE = "PodUnschedulable"
    TOO_MANY_NEW_NODES = "TooManyNewNodes"
    BUDGET_TOO_SMALL = "BudgetTooSmall"
    NOT_CHEAPER = "NotCheaper"
    SPOT_TO_SPOT_DISABLED = "SpotToSpotDisabled"
    TOO_FEW_SPOT_TYPES = "TooFewSpotTypes"
    MIN_VALUES_UNMET = "MinValuesUnmet"
    SAME_TYPE_NOT_CHEAPER = "SameTypeNotCheaper"
    # consolidationPolicy: Balanced: the move saves too little for the disruption it causes.
    BALANCED_SCORE_TOO_LOW = "BalancedScoreTooLow"
    # karpy's merge of N nodes into M < N saves too little for the pods it moves.
    MERGE_NOT_WORTH_MOVES = "MergeNotWorthMoves"
    # Node repair: vetoed by karpenter.sh/do-not-repair, or its NodePool's breaker is tripped.
    DO_NOT_REPAIR = "DoNotRepair"
    REPAIR_BREAKER = "RepairBreaker"


# The node is not a candidate yet: it will be, or will not be one, without anyone acting.
WAITING: frozenset[RejectionKind] = frozenset(
    {
        RejectionKind.BEING_DELETED,
        RejectionKind.NOT_INITIALIZED,
        RejectionKind.CONSOLIDATION_DISABLED,
        RejectionKind.EMPTY_ONLY,
        RejectionKind.NOT_DUE,
        RejectionKind.STATIC_SCALING_DOWN,
    }
)
# The nodes cannot go at all: their pods would not all find a place.
INFEASIBLE: frozenset[RejectionKind] = frozenset(
    {RejectionKind.TARGET_NOT_INITIALIZED, RejectionKind.POD_UNSCHEDULABLE}
)


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why some nodes are not disrupted: what kind of reason, in words, and whom it names."""

    kind: RejectionKind
    message: str
    # The pods (namespace/name) and other nodes the reason is about.
    pods: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()

    @property
    def infeasible(self) -> bool:
        return self.kind in INFEASIBLE

    def __str__(self) -> str:
        return self.message


__all__ = ["INFEASIBLE", "WAITING", "Rejection", "RejectionKind"]
