"""The cloud provider protocol: the one seam between karpy and a cloud.

It mirrors Karpenter's CloudProvider interface, because that split is what
lets the same controllers drive AWS, kwok-style fake nodes and the simulator:

- ``create`` launches one instance for a NodeClaim, choosing among the
  instance types and offerings its requirements admit, and returns the
  NodeClaim hydrated with what was launched (providerID, labels for type,
  zone and capacity type, capacity, allocatable);
- ``delete`` terminates it, ``get`` and ``list`` find launched instances (for
  garbage collection of leaks);
- ``get_instance_types`` lists what a NodePool may launch, with offerings and
  their current availability;
- ``is_drifted`` reports provider-side drift (the node class changed), by
  the rule of :mod:`karpy.disruption.nodeclass_drift`;
- ``node_class_problem`` says whether the provider serves a node class and
  whether it is ready: ``None`` when NodePools using it can launch, else the
  reason and message a NodePool's ``NodeClassReady`` condition and its pods'
  FailedScheduling events carry (``karpy run`` serves no EC2NodeClass, say);
- ``repair_policies`` say which node conditions mean a node is broken and
  what repairs it (:class:`~karpy.disruption.repair.RepairPolicy`); ``reboot``
  reboots an instance in place (``supports_reboot``; else
  :class:`NodeRebootNotImplementedError`);
- ``mark_offering_unavailable`` takes an offering out of what
  ``get_instance_types`` reports as available for a while (a reclaimed spot
  instance says its pool is short), as an insufficient-capacity error does.

``create`` may finish in the background when the cloud is slow (a CreateFleet
call takes seconds on AWS): it then starts the launch, raises
:class:`LaunchInProgressError`, and once the launch is done posts a change of
kind :data:`LAUNCH_FINISHED` whose object is the NodeClaim's name, so the
NodeClaim lifecycle controller calls ``create`` again and gets the result. A
provider that launches at once (the simulator, kwok) never raises it.

Errors are typed so controllers can react without parsing messages: an
:class:`InsufficientCapacityError` names the offerings that failed, so they
are marked unavailable and the next pass falls back.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from karpy.api.instancetype import InstanceType
from karpy.api.nodeclaim import NodeClaim
from karpy.api.nodeclass import NodeClass
from karpy.api.nodeclass_hash import NodeClassHash
from karpy.api.nodepool import NodePool
from karpy.disruption.repair import RepairAction as RepairAction  # noqa: PLC0414 (re-exported)
from karpy.disruption.repair import RepairPolicy as RepairPolicy  # noqa: PLC0414 (re-exported)


class CloudProviderError(Exception):
    """Anything the cloud refused; the message is meant for humans."""


class InsufficientCapacityError(CloudProviderError):
    def __init__(self, message: str, offerings: tuple[tuple[str, str, str], ...] = ()) -> None:
        super().__init__(message)
        # (instance type, zone, capacity type) triples that had no capacity.
        self.offerings = offerings


class NodeClaimNotFoundError(CloudProviderError):
    """The instance behind a NodeClaim no longer exists (deleted, or never launched)."""


class NodeClassNotReadyError(CloudProviderError):
    """The NodePool's node class is missing or not resolved (no subnets, no AMI…)."""


class NodeRebootNotImplementedError(CloudProviderError):
    """The provider cannot reboot an instance in place (node repair replaces the node instead)."""


class NodeRebootFailedError(CloudProviderError):
    """The cloud refused the reboot for good (a missing permission): retrying would not help."""


class NodePoolNotEvaluatedError(CloudProviderError):
    """The NodeOverlays were not yet worked out for the NodePool: nothing is launched for it till then."""


class LaunchInProgressError(CloudProviderError):
    """``create`` started the launch and it runs in the background (see the module docstring)."""


# The kind of change a provider posts when a background launch finished; its object is the NodeClaim's name.
LAUNCH_FINISHED = "LaunchFinished"


@dataclass(frozen=True, slots=True)
class NodeClassProblem:
    """Why NodePools using a node class cannot launch: a condition reason and a message for humans."""

    reason: str
    message: str


# The reason of a node class of a kind the configured cloud provider does not launch.
REASON_NODECLASS_NOT_SERVED = "NodeClassNotServed"


class CloudProvider(Protocol):
    name: str

    def create(self, nodeclaim: NodeClaim) -> NodeClaim: ...

    def delete(self, nodeclaim: NodeClaim) -> None: ...

    def get(self, provider_id: str) -> NodeClaim: ...

    def list(self) -> builtins.list[NodeClaim]: ...

    def get_instance_types(self, nodepool: NodePool) -> builtins.list[InstanceType]: ...

    def is_drifted(self, nodeclaim: NodeClaim) -> str: ...

    def repair_policies(self) -> builtins.list[RepairPolicy]: ...

    # Whether ``reboot`` reboots in place; without it a reboot policy's node is replaced.
    supports_reboot: bool

    def reboot(self, nodeclaim: NodeClaim, operation_id: str) -> None:
        """Reboot the instance in place; the same ``operation_id`` again is the same reboot.

        Done once the cloud accepted it: the Node's new boot ID says it happened.
        """
        ...

    def node_class_problem(self, node_class: NodeClass) -> NodeClassProblem | None: ...

    def mark_offering_unavailable(self, instance_type: str, zone: str, capacity_type: str) -> None: ...


@runtime_checkable
class ReservationMarking(Protocol):
    """A provider that launches into capacity reservations (the AWS provider and the simulated cloud).

    An interruptible reservation whose capacity EC2 reclaims is marked used
    up, by id, so nothing more is launched into it until EC2 is read again;
    ``reservations_expiring_at`` says, per reservation id, when a Capacity
    Block is expiring (40 minutes before its end), so its nodes can go first.
    """

    def mark_reservation_unavailable(self, reservation_id: str) -> None: ...

    def reservations_expiring_at(self) -> dict[str, float]: ...


@runtime_checkable
class NodeClassHashing(Protocol):
    """A provider whose NodeClaims carry their node class' hash (every provider karpy ships).

    ``node_class_hash`` is the hash of a node class' static fields
    (:mod:`karpy.api.nodeclass_hash`) that ``create`` annotates NodeClaims
    with, ``None`` for a class the provider does not serve. Apart from
    :class:`CloudProvider` so that a test's stand-in cloud need not hash.
    """

    def node_class_hash(self, node_class: NodeClass) -> NodeClassHash | None: ...
