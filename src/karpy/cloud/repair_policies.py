"""The repair policies of karpy's cloud providers (which node conditions, held how long, repair how).

- kwok: Karpenter v1.15's kwok provider's set. The kubelet's Ready False
  (the set's default fallback) or Unknown for 10 minutes replaces the node
  without a drain (its kubelet cannot evict anything); the simulated faults
  the e2e suites inject, ``KWOKUnhealthy`` (True for 30 s: replace, drain
  bounded at 45 s) and ``KWOKRebootRequired`` (True for 30 s: reboot, drain
  bounded at 1 minute).
- AWS (and the simulator, whose instances are EC2's): Karpenter's AWS
  provider's conditions, the kubelet's Ready False (fallback) or Unknown for
  30 minutes, and the EKS node monitoring agent's AcceleratedHardwareReady
  False for 10 minutes, StorageReady, NetworkingReady, KernelReady and
  ContainerRuntimeReady False for 30 minutes, all replacing the node with
  the NodeClaim's own terminationGracePeriod as the drain bound: Karpenter's
  AWS provider v1.14.1's set (its v1.15 one was not at hand), with Ready False
  as the v1.15 fallback and ``.*`` as the others' reason regex, which matches
  what v1.14.1's matched (docs/consolidation.md#node-repair).
"""

from __future__ import annotations

from karpy.disruption.repair import RepairAction, RepairPolicy

KWOK_UNHEALTHY_CONDITION = "KWOKUnhealthy"
KWOK_REBOOT_REQUIRED_CONDITION = "KWOKRebootRequired"
ANY_REASON = ".*"

KWOK_REPAIR_POLICIES: tuple[RepairPolicy, ...] = (
    RepairPolicy("Ready", "False", 10 * 60.0, termination_grace_period=0.0),
    RepairPolicy("Ready", "Unknown", 10 * 60.0, reason_regex=ANY_REASON, termination_grace_period=0.0),
    RepairPolicy(
        KWOK_UNHEALTHY_CONDITION, "True", 30.0, reason_regex=ANY_REASON, termination_grace_period=45.0
    ),
    RepairPolicy(
        KWOK_REBOOT_REQUIRED_CONDITION,
        "True",
        30.0,
        reason_regex=ANY_REASON,
        termination_grace_period=60.0,
        action=RepairAction.REBOOT,
    ),
)

_HALF_HOUR = 30 * 60.0
AWS_REPAIR_POLICIES: tuple[RepairPolicy, ...] = (
    RepairPolicy("Ready", "False", _HALF_HOUR),
    RepairPolicy("Ready", "Unknown", _HALF_HOUR, reason_regex=ANY_REASON),
    RepairPolicy("AcceleratedHardwareReady", "False", 10 * 60.0, reason_regex=ANY_REASON),
    RepairPolicy("StorageReady", "False", _HALF_HOUR, reason_regex=ANY_REASON),
    RepairPolicy("NetworkingReady", "False", _HALF_HOUR, reason_regex=ANY_REASON),
    RepairPolicy("KernelReady", "False", _HALF_HOUR, reason_regex=ANY_REASON),
    RepairPolicy("ContainerRuntimeReady", "False", _HALF_HOUR, reason_regex=ANY_REASON),
)

__all__ = [
    "AWS_REPAIR_POLICIES",
    "KWOK_REBOOT_REQUIRED_CONDITION",
    "KWOK_REPAIR_POLICIES",
    "KWOK_UNHEALTHY_CONDITION",
]
