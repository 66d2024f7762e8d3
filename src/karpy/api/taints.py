"""Taints and tolerations, with the matching rules of the Kubernetes scheduler.

NodePools put taints on the nodes they launch (``spec.template.spec.taints``)
and startup taints that an agent removes once the node is ready
(``startupTaints``). A pod may land on a node only when it tolerates every
NoSchedule and NoExecute taint; PreferNoSchedule is a preference. Startup
taints and the ``karpenter.sh/unregistered`` taint are ignored when deciding
whether a pod fits a NodeClaim, because they go away on their own.

``karpy.dev/consolidation-planned:PreferNoSchedule`` is karpy's own: the
nodes a consolidation plan will remove in later passes (a budget lets only
some go now) carry it, so kube-scheduler puts the pods evicted meanwhile on
the nodes that stay rather than on the next ones to go. It is a hint to
kube-scheduler only: karpy's own scheduling ignores it, since the pods may
still land there (see ``controllers/orchestration.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from karpy.api._reader import FieldReader

NO_SCHEDULE = "NoSchedule"
PREFER_NO_SCHEDULE = "PreferNoSchedule"
NO_EXECUTE = "NoExecute"
EFFECTS = (NO_SCHEDULE, PREFER_NO_SCHEDULE, NO_EXECUTE)

# A node's taint gets its timeAdded from Kubernetes when it is put on; karpy does not copy a
# template's, so one written there would be accepted and do nothing.
TIME_ADDED_UNSUPPORTED_MESSAGE = (
    "timeAdded is not supported by karpy: a node's taints are timed when they are put on it"
)
UNREGISTERED_TAINT_KEY = "karpenter.sh/unregistered"
DISRUPTED_TAINT_KEY = "karpenter.sh/disrupted"
CONSOLIDATION_PLANNED_TAINT_KEY = "karpy.dev/consolidation-planned"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    effect: str
    value: str = ""

    @classmethod
    def parse(cls, reader: FieldReader) -> Taint:
        key = reader.required_str("key")
        effect = reader.required_str("effect")
        if effect not in EFFECTS:
            raise reader.error("effect", f"must be one of {', '.join(EFFECTS)}, got {effect!r}")
        return cls(key=key, effect=effect, value=reader.string("value"))

    @classmethod
    def parse_spec(cls, reader: FieldReader) -> Taint:
        """A taint a NodePool or NodeClaim puts on its node; ``timeAdded`` is refused (see its message)."""
        if reader.has("timeAdded"):
            raise reader.error("timeAdded", TIME_ADDED_UNSUPPORTED_MESSAGE)
        return cls.parse(reader)

    def to_dict(self) -> dict[str, str]:
        result = {"key": self.key, "effect": self.effect}
        if self.value:
            result["value"] = self.value
        return result

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


# Taints a node carries only on its way up (Karpenter's known ephemeral taints): the API
# server's TaintNodesByCondition admission puts not-ready on every new Node until its
# kubelet reports Ready, the node lifecycle controller puts unreachable on one whose kubelet
# has not reported yet, and a cloud controller manager keeps uninitialized until it has set
# the node up. On a node whose NodeClaim is not initialized they say nothing about where pods
# will fit, and counting them as blocking would launch a second node for the first one's pods.
KNOWN_EPHEMERAL_TAINTS = (
    Taint("node.kubernetes.io/not-ready", NO_SCHEDULE),
    Taint("node.kubernetes.io/unreachable", NO_SCHEDULE),
    Taint("node.cloudprovider.kubernetes.io/uninitialized", NO_SCHEDULE),
)


# The fence of a node being rebooted in place (node repair's RebootNode): nothing new lands
# until it boots again. Its capacity comes back, so the scheduling snapshot ignores it.
REBOOTING_TAINT = Taint("karpenter.sh/rebooting", NO_SCHEDULE)


def known_ephemeral(taints: Iterable[Taint]) -> Taint | None:
    """The first of ``taints`` that is a known ephemeral taint, matched as Karpenter matches
    taints (key and effect: a cloud controller manager's uninitialized taint carries a value)."""
    for taint in taints:
        if any(taint.key == known.key and taint.effect == known.effect for known in KNOWN_EPHEMERAL_TAINTS):
            return taint
    return None


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None

    @classmethod
    def parse(cls, reader: FieldReader) -> Toleration:
        operator = reader.string("operator") or "Equal"  # Kubernetes reads an empty operator as Equal
        if operator not in ("Equal", "Exists"):
            raise reader.error("operator", f"must be Equal or Exists, got {operator!r}")
        effect = reader.string("effect")
        if effect and effect not in EFFECTS:
            raise reader.error("effect", f"must be one of {', '.join(EFFECTS)}, got {effect!r}")
        key = reader.string("key")
        if not key and operator != "Exists":
            raise reader.error("operator", "an empty key needs operator Exists")
        return cls(
            key=key,
            operator=operator,
            value=reader.string("value"),
            effect=effect,
            toleration_seconds=reader.integer("tolerationSeconds"),
        )

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.value == taint.value


def untolerated(taints: Iterable[Taint], tolerations: Iterable[Toleration]) -> Taint | None:
    """The first NoSchedule/NoExecute taint none of ``tolerations`` tolerates, if any."""
    tolerations = tuple(tolerations)
    for taint in taints:
        if taint.effect == PREFER_NO_SCHEDULE:
            continue
        if not any(toleration.tolerates(taint) for toleration in tolerations):
            return taint
    return None


def untolerated_preferences(taints: Iterable[Taint], tolerations: Iterable[Toleration]) -> int:
    """How many PreferNoSchedule taints none of ``tolerations`` tolerates (kube-scheduler's
    TaintToleration score counts them)."""
    tolerations = tuple(tolerations)
    return sum(
        1
        for taint in taints
        if taint.effect == PREFER_NO_SCHEDULE
        and not any(toleration.tolerates(taint) for toleration in tolerations)
    )
