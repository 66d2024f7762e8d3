"""What a disruption method is: Karpenter's ``disruption.Method``.

Karpenter's disruption pass tries its methods in one order (emptiness,
drift, multi-node consolidation, single-node consolidation) and carries out
the first command one of them computes. Each method says which disruption
reason its commands count against in the budgets, which candidates it
considers, and how it computes its command from them, or why it has none.
The consolidation pass (:func:`karpy.disruption.decision.decide_consolidation`)
loops over its two methods in that order; docs/consolidation.md has the
rules they decide by.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from karpy.disruption.consolidation import ConsolidationCommand
from karpy.disruption.emptiness import Candidate
from karpy.disruption.rejection import Rejection


@dataclass(slots=True)
class MethodResult:
    """What a method computed: the command to carry out now, if any, and why not for the rest."""

    command: ConsolidationCommand | None = None
    # The candidates the method tried in vain, and why (NodeClaim name -> reason).
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
