"""NodePools whose NodeClaims the API server refused: one bad pool must not stop the others.

A NodePool can hold what its CRD accepts but a NodeClaim stamped from it may
not carry (an admission policy of the cluster's, or a rule karpy does not know
of). The server then refuses each NodeClaim of that pool with 422 Invalid,
and would do so again for every pass. The provisioner records the refusal
here, against the pool's template as it was refused:

- the pool is left out of provisioning (its pods are told why, naming the
  pool) until its template changes, or until a retry is due: after 1 minute,
  then twice as late each time it is refused again, up to 30 minutes (an
  admission policy can be fixed without touching the pool);
- the NodePool status controller reports it on the pool as Karpenter reports
  a pool that fails its runtime validation: ``ValidationSucceeded=False``,
  reason ``NodePoolValidationFailed``, the message naming the NodePool's
  field the server refused (``spec.template.metadata.labels: ...``), so the
  pool is not Ready; a Warning Event says it once.

A NodeClaim of the pool created later clears it. The record lives in memory:
a restarted or new leader tries the pool once more and records it again.
Changes are announced to subscribers as ``(REFUSED_NODEPOOL, None, pool)``,
so the status controller reconciles the pool without a write to it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from karpy.api.nodepool import NodeClaimTemplate, NodePool
from karpy.logs import doubled
from karpy.operator.cluster import InvalidError

# The kind under which a change of a pool's refusal is announced.
REFUSED_NODEPOOL = "RefusedNodePool"
REFUSAL_RETRY = 60.0
REFUSAL_RETRY_MAX = 1800.0

Listener = Callable[[str, object | None, object | None], None]

# Where the fields of a NodeClaim come from in its NodePool.
_NODECLAIM_TO_NODEPOOL_FIELD = (
    ("metadata.labels", "spec.template.metadata.labels"),
    ("metadata.annotations", "spec.template.metadata.annotations"),
    ("spec.", "spec.template.spec."),
)
# The server's own prefix of an Invalid or Forbidden message: the NodeClaim's generated name.
_STATUS_PREFIX = re.compile(r'^\S+ "[^"]*" is (invalid|forbidden): ')


def nodepool_field(nodeclaim_field: str) -> str:
    """The NodePool field a NodeClaim field is stamped from (``metadata.labels`` → the template's)."""
    for claim_prefix, pool_prefix in _NODECLAIM_TO_NODEPOOL_FIELD:
        if nodeclaim_field.startswith(claim_prefix):
            return pool_prefix + nodeclaim_field[len(claim_prefix) :]
    return nodeclaim_field


def refusal_message(error: InvalidError) -> str:
    """What the server refused, in the NodePool's terms: each field it named, with its message."""
    if error.fields:
        return "; ".join(f"{nodepool_field(path)}: {message}" for path, message in error.fields)
    found = _STATUS_PREFIX.match(error.message)
    return f"{found.group(1)}: {error.message[found.end() :]}" if found else error.message


@dataclass(frozen=True, slots=True)
class Refusal:
    template: NodeClaimTemplate
    message: str
    retry_at: float
    count: int
    # Whether a pass has included the pool again since ``retry_at``.
    retried: bool = False


class NodePoolRefusals:
    """The refused NodePools, shared by the provisioner (which records) and the status controller."""

    def __init__(self) -> None:
        self._refusals: dict[str, Refusal] = {}
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def _announce(self, pool: NodePool) -> None:
        for listener in list(self._listeners):
            listener(REFUSED_NODEPOOL, None, pool)

    def refusal(self, pool: NodePool) -> Refusal | None:
        """The refusal of ``pool`` as it is now; None if none, or its template changed since."""
        refusal = self._refusals.get(pool.name)
        return refusal if refusal is not None and refusal.template == pool.template else None

    def refuse(self, pool: NodePool, message: str, now: float) -> Refusal:
        previous = self.refusal(pool)
        count = previous.count + 1 if previous is not None else 1
        refusal = Refusal(
            pool.template, message, now + doubled(REFUSAL_RETRY, count, REFUSAL_RETRY_MAX), count
        )
        self._refusals[pool.name] = refusal
        if previous is None or previous.message != message:
            self._announce(pool)
        return refusal

    def accepted(self, pool: NodePool) -> None:
        """A NodeClaim of ``pool`` was created: whatever refused it before does not any more."""
        if self._refusals.pop(pool.name, None) is not None:
            self._announce(pool)

    def unavailable(self, pools: Iterable[NodePool], now: float) -> dict[str, str]:
        """The pools a pass at ``now`` leaves out, with why; a pool due for a retry is marked retried."""
        left_out: dict[str, str] = {}
        current = {pool.name: pool for pool in pools}
        for name in [name for name in self._refusals if name not in current]:
            del self._refusals[name]  # the pool is gone
        for pool in current.values():
            refusal = self._refusals.get(pool.name)
            if refusal is None:
                continue
            if refusal.template != pool.template:
                self.accepted(pool)  # changed since: it is tried afresh
                continue
            if now < refusal.retry_at:
                left_out[pool.name] = f"the API server refuses its NodeClaims: {refusal.message}"
            elif not refusal.retried:
                self._refusals[pool.name] = Refusal(
                    refusal.template, refusal.message, refusal.retry_at, refusal.count, retried=True
                )
        return left_out

    def retry_due(self, now: float) -> bool:
        """Whether a refused pool is due for a retry that no pass has made yet."""
        return any(not r.retried and r.retry_at <= now for r in self._refusals.values())

    def retry_in(self, now: float) -> float | None:
        """Seconds until the next retry that is not due yet; None when there is none."""
        due = [r.retry_at for r in self._refusals.values() if not r.retried and r.retry_at > now]
        return min(due) - now if due else None
