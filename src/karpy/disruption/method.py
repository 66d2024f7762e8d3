"""What a disruption method is: Karpenter's ``disruption.Method``, and what it works on.

Karpenter's disruption pass tries its methods in one order (emptiness,
drift, multi-node consolidation, single-node consolidation) and carries out
the first command one of them computes. Each method says which disruption
reason its commands count against in the budgets, which candidates it
considers, and how it computes its command from them, or why it has none
(typed :class:`~karpy.disruption.rejection.Rejection` values). The methods
are pure: what needs the cluster or the cloud (where a drifted node's pods
would go) is handed in by the controller as a value or a function.

Expiration is not a method. In Karpenter v1 it is forceful: an expired
NodeClaim is deleted without a budget, a replacement or a command, by the
NodeClaim disruption controller (:mod:`karpy.disruption.expiration` is its
pure rule). docs/consolidation.md has the rules the methods decide by.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from karpy.api.core import Node, Pod
from karpy.api.nodeclaim import NodeClaim
from karpy.api.nodepool import NodePool
from karpy.disruption.rejection import Rejection
from karpy.scheduling.solver import NewNodeClaim


class TerminateFirstReason(enum.Enum):
    """Why a command deletes its node before a replacement exists (Karpenter's label values)."""

    NO_RESERVED_CAPACITY = "no-reserved-capacity"
    STATIC_AT_LIMIT = "static-at-limit"


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node the disruption methods may disrupt: its NodeClaim, Node, NodePool and pods."""

    nodeclaim: NodeClaim
    node: Node
    nodepool: NodePool
    pods: Sequence[Pod]


class MethodCommand(Protocol):
    """What every method's command says: why, which NodeClaims go, what is launched first."""

    @property
    def reason(self) -> str:
        """The disruption reason (the budgets' reasons)."""
        ...

    @property
    def nodeclaim_names(self) -> list[str]: ...

    @property
    def replacements(self) -> list[NewNodeClaim]: ...

    @property
    def description(self) -> str: ...


@dataclass(slots=True)
class RemovalCommand:
    """Delete ``candidates``, after launching ``replacements`` if any (emptiness, drift)."""

    reason: str
    candidates: list[Candidate]
    replacements: list[NewNodeClaim] = field(default_factory=list)
    description: str = ""
    # Set on a delete-only command that goes before its replacement can exist, with why
    # (TerminateFirstDrift: karpy.disruption.terminate_first).
    terminate_first: TerminateFirstReason | None = None

    @property
    def nodeclaim_names(self) -> list[str]:
        return [candidate.nodeclaim.name for candidate in self.candidates]


@dataclass(slots=True)
class MethodResult:
    """What a method computed: the command to carry out now, if any, and why not for the rest."""

    command: MethodCommand | None = None
    # The candidates the method left alone or tried in vain, and why (NodeClaim name -> reason).
    rejected: dict[str, Rejection] = field(default_factory=dict)


class Method(Protocol):
    """One way of disrupting nodes, as the disruption pass runs it."""

    @property
    def reason(self) -> str:
        """The disruption reason its commands count against (the budgets' reasons)."""
        ...

    def considers(self, candidate: Candidate) -> bool:
        """Whether the method looks at this candidate at all (Karpenter's ShouldDisrupt)."""
        ...

    def compute(self, candidates: Sequence[Candidate], allowed: Mapping[str, int]) -> MethodResult:
        """The command for ``candidates`` (in disruption order), each NodePool giving up no
        more than ``allowed`` of its nodes, or why there is none."""
        ...


__all__ = ["Candidate", "Method", "MethodCommand", "MethodResult", "RemovalCommand"]
