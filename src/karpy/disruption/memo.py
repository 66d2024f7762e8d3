"""The memo of consolidation evaluations that found no command, kept across passes.

See :class:`EvaluationMemo`; the removal simulator says what each answer
depends on (:meth:`~karpy.disruption.simulator.RemovalSimulator.memo_key`),
and docs/consolidation.md why it pays on a busy cluster.
"""

from __future__ import annotations

from karpy.api.core import Pod, PodSpec
from karpy.disruption.rejection import Rejection
from karpy.scheduling.solver import placement_bucket, same_placement_spec

# Evaluations kept across passes (see EvaluationMemo).
MAX_MEMO_ENTRIES = 50_000
# How many node keys the memo numbers before it starts afresh.
MAX_MEMO_NODE_KEYS = 500_000


class EvaluationMemo:
    """Evaluations that found no command, kept across passes by what they were worked out from.

    A consolidation pass evaluates about every candidate, alone and in
    groups, and on a busy cluster (an HPA resizing Deployments every 15
    seconds) some pod or node changes between any two passes, so the
    quiet-pass answer (the whole pass unchanged) seldom applies. But most
    evaluations read only a few nodes: the candidates, their pods and the
    nodes with room for those pods; when none of those changed, the answer
    is the one given before. :meth:`RemovalSimulator.memo_key` says what an
    answer depends on; only answers that are not a command are kept (a
    command is acted on, and worked out afresh), and at most
    :data:`MAX_MEMO_ENTRIES` of them (all dropped when full: the next passes
    fill it again with what is current). Decisions are the same with and
    without it (``tests/sim/test_quiet_consolidation.py``).
    """

    def __init__(self) -> None:
        self._answers: dict[tuple[object, ...], Rejection] = {}
        # Each node's key as a number, so that keys naming hundreds of nodes are tuples of
        # numbers (hashed and compared fast), not of nested tuples.
        self._numbers: dict[tuple[object, ...], int] = {}
        self._next_number = 0
        # The objects whose identity stands in keys, kept alive so no other object
        # can take their identity while a key names it.
        self._pinned: dict[int, object] = {}
        # Each pod's placement signature as a number (see ``pod_signature``), by key and
        # version; like node numbers, never given twice.
        self._signatures: dict[tuple[str, str], int] = {}
        self._alike_specs: dict[tuple[object, ...], list[tuple[PodSpec, int]]] = {}
        self._next_signature = 0
        self.hits = 0
        self.misses = 0

    def pin(self, item: object) -> None:
        self._pinned.setdefault(id(item), item)

    def get(self, key: tuple[object, ...]) -> Rejection | None:
        answer = self._answers.get(key)
        if answer is None:
            self.misses += 1
        else:
            self.hits += 1
        return answer

    def number(self, key: tuple[object, ...]) -> int:
        """A number for this node key, the same while the memo keeps its answers."""
        number = self._numbers.get(key)
        if number is None:
            # Never given twice, not even after the memo starts afresh: a pass may still hold
            # numbers it was given before.
            number = self._numbers[key] = self._next_number
            self._next_number += 1
        return number

    def pod_signature(self, pod: Pod) -> int | None:
        """A number for what the solver sees of ``pod`` (None: it has no resourceVersion).

        Two pods get the same number when the solver would place either the
        same way: equal namespace, labels and spec but for the node a bound pod
        runs on, the test :func:`~karpy.scheduling.solver.alike_groups` groups
        pods by (the replicas of a Deployment). Volume terms are not in it: the
        caller leaves pods with volume terms out.
        """
        version = pod.metadata.resource_version
        if not version:
            return None
        known = self._signatures.get((pod.key, version))
        if known is not None:
            return known
        spec = pod.spec
        entries = self._alike_specs.setdefault(placement_bucket(pod), [])
        number = next((number for other, number in entries if same_placement_spec(other, spec)), None)
        if number is None:
            number = self._next_signature
            self._next_signature += 1
            entries.append((spec, number))
        self._signatures[(pod.key, version)] = number
        return number

    def put(self, key: tuple[object, ...], answer: Rejection) -> None:
        if (
            len(self._answers) >= MAX_MEMO_ENTRIES
            or len(self._numbers) >= MAX_MEMO_NODE_KEYS
            or len(self._signatures) >= MAX_MEMO_NODE_KEYS
        ):
            self._answers.clear()
            self._pinned.clear()
            self._numbers.clear()
            self._signatures.clear()
            self._alike_specs.clear()
            return  # its key may name an object no longer pinned
        self._answers[key] = answer
