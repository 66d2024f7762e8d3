"""Karpenter's scheduling policies (settings since v1.4-v1.6), as the solver takes them.

``PREFERENCE_POLICY=Ignore`` has the solver plan as if pods had no
preferences: preferred node affinity, preferred pod affinity and
anti-affinity terms and ``ScheduleAnyway`` topology spreads are dropped
before a pod is placed (Karpenter's ``PreferencePolicyIgnore``), where
``Respect``, the default, holds them and gives them up one at a time when a
pod fits nowhere. ``PreferNoSchedule`` taints are still avoided first, as
in Karpenter, whose relaxation gives them up last under either policy.

``MIN_VALUES_POLICY=BestEffort`` has a NodeClaim launched with fewer
values than a requirement's ``minValues`` when its pods leave no more
(Karpenter's ``MinValuesPolicyBestEffort``): the NodeClaim's minValues are
lowered to what its options offer and it carries
``karpenter.sh/nodeclaim-min-values-relaxed: "true"``. ``Strict``, the
default, leaves such pods pending. Karpenter's BestEffort also cuts a
NodeClaim's options to the 60 cheapest even when more of them would meet
minValues, relaxing what need not be; karpy keeps as many as meet it
(tests/scheduling/test_policies.py), and relaxes only what no option can meet.
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_VALUES_STRICT = "Strict"
MIN_VALUES_BEST_EFFORT = "BestEffort"
MIN_VALUES_POLICIES = (MIN_VALUES_STRICT, MIN_VALUES_BEST_EFFORT)
PREFERENCE_RESPECT = "Respect"
PREFERENCE_IGNORE = "Ignore"
PREFERENCE_POLICIES = (PREFERENCE_RESPECT, PREFERENCE_IGNORE)
# Karpenter's annotation on every NodeClaim its scheduler makes: whether its minValues were relaxed.
MIN_VALUES_RELAXED_ANNOTATION = "karpenter.sh/nodeclaim-min-values-relaxed"


@dataclass(frozen=True, slots=True)
class SchedulingPolicy:
    """MIN_VALUES_POLICY and PREFERENCE_POLICY, one value for provisioning and disruption alike."""

    min_values: str = MIN_VALUES_STRICT
    preferences: str = PREFERENCE_RESPECT

    @property
    def relaxes_min_values(self) -> bool:
        return self.min_values == MIN_VALUES_BEST_EFFORT

    @property
    def ignores_preferences(self) -> bool:
        return self.preferences == PREFERENCE_IGNORE


__all__ = [
    "MIN_VALUES_BEST_EFFORT",
    "MIN_VALUES_POLICIES",
    "MIN_VALUES_RELAXED_ANNOTATION",
    "MIN_VALUES_STRICT",
    "PREFERENCE_IGNORE",
    "PREFERENCE_POLICIES",
    "PREFERENCE_RESPECT",
    "SchedulingPolicy",
]
