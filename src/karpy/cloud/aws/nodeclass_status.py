"""The EC2NodeClass status controller: what each selector picks, kept in the class' status.

Karpenter's AWS provider resolves every EC2NodeClass against the account and
writes the result to its status: ``subnets`` (with zones), ``securityGroups``,
``amis``, ``instanceProfile`` and the conditions ``SubnetsReady``,
``SecurityGroupsReady``, ``AMIsReady``, ``InstanceProfileReady`` and
``Ready``. The launch path reads only that status, so a CreateFleet call never
waits on a DescribeSubnets, and ``kubectl get ec2nodeclass -o yaml`` shows
exactly what karpy launches into. This controller does the same with
:func:`~karpy.cloud.aws.resolution.resolve_node_class`:

- **When**: as soon as a class appears or its spec changes (a status-only
  change, which is what its own writes and the NodePool status controller's
  are, does not count), and every :data:`RESOLVE_INTERVAL` seconds after
  that, because what a selector matches changes without the class changing
  (a subnet tagged, a new AMI published under an alias). Five minutes is
  Karpenter's interval for its EC2NodeClass controller (``RequeueAfter:
  5 * time.Minute``); it keeps the calls per class at a dozen an hour while a
  new AMI or subnet is picked up well within the time anybody waits for it.
  A class with ``capacityReservationSelectorTerms`` is resolved every
  :data:`RESERVATION_INTERVAL` (Karpenter's minute for reservations), and at a
  reservation's end and the start of a Capacity Block's expiring window when
  sooner; each resolution sets the provider's count of instances left in
  each reservation to EC2's (:mod:`karpy.cloud.reservations`).
- **What is written**: the resolution, through ``update_status``, only when
  it differs from the stored status, and a condition's
  ``lastTransitionTime`` moves only when its status flips
  (:func:`karpy.api.conditions.set_condition`), so a periodic pass that finds
  the same answer writes nothing. ``Ready=False`` names each failing
  condition with its reason and message
  (:func:`~karpy.cloud.aws.resolution.ready_naming_causes`): that is what the
  NodePools using the class carry in ``NodeClassReady`` and their pending pods
  in their FailedScheduling events.
- **AWS errors**: one that retrying will not fix (access denied, say) is the
  failing condition's reason, by resolution. One that may pass (throttling,
  5xx, no answer) leaves the stored status as it is, so a healthy class does
  not turn unready for a blip and an unready one keeps saying why, and the
  class is resolved again in :data:`RETRY_INTERVAL` seconds. The first failure
  of a streak is a warning, the rest are debug lines, and the recovery is an
  info line (:class:`~karpy.logs.FailureStreak`, as every controller calling
  AWS on a timer logs), so an outage of an hour is two lines in the log, not 120.

Why it is safe to run all the time: resolution only reads, except for the
one idempotent write of an instance profile for a ``role`` (found again by
its stable name), and a status is written only when it changed.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable

from karpy.api.nodeclass import EC2_GROUP, EC2_KIND, EC2NodeClass, StatusCapacityReservation
from karpy.cloud.aws.client import AwsApiError, AwsClient
from karpy.cloud.aws.resolution import dependents, ready_naming_causes, resolve_node_class
from karpy.cloud.aws.settings import AwsSettings
from karpy.cloud.reservations import CAPACITY_BLOCK_EXPIRING_WINDOW, ReservationAvailability
from karpy.logs import FailureStreak, about
from karpy.operator.cluster import Clock, Cluster
from karpy.operator.readiness import log_ready_change
from karpy.operator.runtime import Watch

log = logging.getLogger("karpy.aws.nodeclass")

# Seconds between two resolutions of an unchanged class (Karpenter's interval).
RESOLVE_INTERVAL = 300.0
# Seconds between two resolutions of a class with capacity reservations (Karpenter polls them each minute).
RESERVATION_INTERVAL = 60.0
# Seconds until a resolution that AWS failed for a passing reason is tried again.
RETRY_INTERVAL = 30.0


def _spec_changed(old: EC2NodeClass, new: EC2NodeClass) -> bool:
    """Whether anything but the metadata and the status differs (what a resolution depends on)."""
    return dataclasses.replace(old, metadata=new.metadata, status=new.status) != new


class EC2NodeClassStatusController:
    """Resolves EC2NodeClasses and writes their status; see the module docstring. Keys are class names."""

    name = "ec2nodeclass.status"

    def __init__(
        self,
        cluster: Cluster,
        client: AwsClient,
        clock: Clock,
        *,
        settings: AwsSettings,
        reservations: ReservationAvailability | None = None,
    ) -> None:
        self.cluster = cluster
        # The provider's counts of instances left per reservation, set from what EC2 says here.
        self.reservations = reservations
        self.client = client
        self.settings = settings
        self.clock = clock
        # Classes whose last resolution AWS failed for a passing reason, each a streak being logged.
        self._failing: dict[str, FailureStreak] = {}

    def watches(self) -> list[Watch]:
        return [Watch(EC2_KIND, self._on_node_class)]

    def _on_node_class(self, old: object | None, new: object | None) -> Iterable[str]:
        if not isinstance(new, EC2NodeClass):
            if isinstance(old, EC2NodeClass):
                self._failing.pop(old.name, None)
            return ()
        if isinstance(old, EC2NodeClass) and not _spec_changed(old, new):
            return ()
        return [new.name]

    def reconcile(self, key: str) -> float | None:
        node_class = self.cluster.node_class(EC2_GROUP, EC2_KIND, key)
        if not isinstance(node_class, EC2NodeClass) or node_class.metadata.deleting:
            self._failing.pop(key, None)
            return None
        now = self.clock.now()
        try:
            resolution = resolve_node_class(node_class, self.client, self.settings.resolution(), now)
        except AwsApiError as error:
            self._failed(node_class, error)
            return RETRY_INTERVAL
        streak = self._failing.pop(key, None)
        if streak is not None:
            resolved = f"ec2nodeclass {key} resolved again"
            streak.succeeded(resolved, extra=about(node_class, controller=self.name))
        status = dataclasses.replace(
            resolution.node_class_status(),
            conditions=ready_naming_causes(
                resolution.conditions, now, dependents(self.settings.reserved_capacity)
            ),
        )
        if self.reservations is not None:
            self.reservations.sync(resolution.available_instances)
        if status != node_class.status:
            self.cluster.update_status(dataclasses.replace(node_class, status=status))
            log_ready_change(node_class, node_class.status.conditions, status.conditions, self.name)
        return self._next_resolution(node_class, resolution.capacity_reservations, now)

    def _next_resolution(
        self, node_class: EC2NodeClass, reservations: tuple[StatusCapacityReservation, ...], now: float
    ) -> float:
        """Seconds to the next resolution: Karpenter's minute with reservations, sooner for one ending."""
        if not node_class.capacity_reservation_selector_terms or not self.settings.reserved_capacity:
            return RESOLVE_INTERVAL
        moments = [
            moment
            for reservation in reservations
            if reservation.end_time is not None
            for moment in (reservation.end_time - CAPACITY_BLOCK_EXPIRING_WINDOW, reservation.end_time)
            if moment > now
        ]
        return max(1.0, min([RESERVATION_INTERVAL, *(moment - now for moment in moments)]))

    def _failed(self, node_class: EC2NodeClass, error: AwsApiError) -> None:
        streak = self._failing.setdefault(node_class.name, FailureStreak(log, RETRY_INTERVAL, RETRY_INTERVAL))
        streak.failed(
            f"ec2nodeclass {node_class.name} not resolved, its status is kept until AWS answers",
            error,
            extra=about(node_class, controller=self.name),
        )
