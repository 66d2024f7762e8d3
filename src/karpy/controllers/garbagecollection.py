"""Garbage collection: instances no NodeClaim owns, and NodeClaims whose instance is gone.

A NodeClaim and its instance are created in two steps (the launch, then the
NodeClaim's status write), and deleted in two (the termination, then the
finalizer), so a process killed between the steps, or an instance terminated
behind karpy's back, leaves one without the other. Karpenter runs two
collectors for that, and this controller does both, through the
:class:`~karpy.cloud.provider.CloudProvider` protocol only, so it serves every
provider whose ``list`` reports the instances it launched with their creation
times (``karpy run`` registers it for kwok and AWS alike):

- **Leaked instances** (Karpenter's AWS ``instance.garbagecollection``): an
  instance ``cloud.list()`` reports that no NodeClaim owns, launched more
  than :data:`INSTANCE_GRACE` seconds ago, is deleted through
  ``cloud.delete``, and its Node, if one registered, is deleted with it so the
  scheduler stops placing pods there at once. karpy's termination finalizer
  is lifted from that Node too: such a Node was registered to a NodeClaim
  that is gone now (its finalizer stripped by hand, say), so no termination
  would ever lift it, and with the instance terminated there is nothing left
  to drain; the pods bound to it are garbage collected and replaced.
- **Ownership is the provider ID**, as Karpenter matches: a NodeClaim owns the
  instance its ``status.providerID`` names. Only a NodeClaim with no provider
  ID yet (its launch in flight, or its status write lost with the process
  that launched it) owns the instance carrying its name (``metadata.name``:
  the AWS provider reads it from the ``karpenter.sh/nodeclaim`` tag), which
  the AWS provider then adopts. An instance carrying the name of a NodeClaim
  whose provider ID names *another* instance is a **duplicate**: a
  CreateFleet that landed after its caller was killed and the restarted
  controller launched again, or a launch that EC2's eventually consistent
  DescribeInstances did not yet show when the restarted controller looked
  for it. It is collected like a leak, once past the same grace. A NodeClaim the
  cache cannot read (:class:`~karpy.api.nodeclaim.UnreadableNodeClaim`) still owns its
  instance by ID and by name: one field karpy cannot parse must not terminate a running node.
  Terminating instances are left to finish.
- **NodeClaims whose instance is gone** (Karpenter's
  ``nodeclaim.garbagecollection``): a registered NodeClaim (``Registered``
  true, launched more than :data:`LAUNCH_GRACE` seconds ago) whose provider
  ID ``cloud.list()`` does not report among its live instances, and for which
  ``cloud.get`` confirms :class:`~karpy.cloud.provider.NodeClaimNotFoundError`,
  is deleted, unless a Node with its provider ID is Ready: a kubelet still
  reporting says the machine runs whatever the cloud answers (Karpenter's
  rule, after the cloud node lifecycle controller's). The termination
  controller then drains and removes its Node as for any deletion. A NodeClaim
  not registered yet is the registration timeout's to end, not this one's. It
  is counted in ``karpenter_nodeclaims_disrupted_total`` with Karpenter's
  reason ``garbage_collected`` and recorded as a ``GarbageCollected`` event
  on the NodeClaim (Karpenter only logs it; the event tells ``kubectl get
  events`` readers why the NodeClaim went).

**Why a launch is never collected.** While a launch is in flight the
NodeClaim has no provider ID yet, and the instance carries its name, so it is
owned by name from the moment the cloud lists it. Once the provider ID is
written, that instance is owned by ID. And any instance is collected only once
it is older than :data:`INSTANCE_GRACE` (30 s, Karpenter's window), far longer
than the status write that follows a finished launch takes, so an instance the
cache does not yet see named by its NodeClaim is not taken for a duplicate.
The cloud is listed before the cluster is read, so a NodeClaim created
during the listing is seen by the ownership check rather than missed by it.

**Why a NodeClaim is not deleted for a listing that missed its instance.** A
cloud's list may trail (EC2's DescribeInstances is eventually consistent), so
a NodeClaim is collected only once registered (its instance has run a
kubelet), past :data:`LAUNCH_GRACE`, when a direct ``cloud.get`` of its
provider ID says the instance does not exist (any other answer keeps it), and
with no Ready Node: a NodeClaim whose instance is really gone goes on the
first pass that sees all that, as in Karpenter.

**When the cloud does not answer.** A failed listing is one warning per
streak of failures and retried with a growing delay
(:class:`~karpy.logs.FailureStreak`), not an error with a traceback every
second: an unreachable endpoint is the endpoint's failure, said once.

It runs once the first cluster objects are seen at start, then every
:data:`FIRST_INTERVAL` seconds for its first :data:`FIRST_PASSES` passes and
every :data:`INTERVAL` seconds after (Karpenter runs its instance collector
every 10 s for its first 20 passes and every 2 minutes after, and its
NodeClaim collector every 2 minutes; 30 s bounds how long a leaked instance is
paid for at about a minute, for one list call per pass).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from karpy.api.core import Node
from karpy.api.nodeclaim import CONDITION_LAUNCHED, CONDITION_REGISTERED, NodeClaim
from karpy.cloud.provider import CloudProvider, CloudProviderError, NodeClaimNotFoundError
from karpy.controllers.orchestration import reschedulable_pods
from karpy.controllers.termination import remove_node
from karpy.logs import FailureStreak, about
from karpy.operator.cluster import EVENT_NORMAL, Clock, Cluster, NotFoundError
from karpy.operator.karpenter_metrics import Metrics
from karpy.operator.runtime import Watch

log = logging.getLogger("karpy.garbagecollection")

PASS_KEY = "pass"
# Seconds between two passes, once the first FIRST_PASSES are done every FIRST_INTERVAL seconds.
INTERVAL = 30.0
FIRST_INTERVAL = 10.0
FIRST_PASSES = 20
# An instance no NodeClaim owns is collected once it is older than this (Karpenter's 30 s).
INSTANCE_GRACE = 30.0
# A registered NodeClaim whose instance is not listed is collected once it has been launched this long.
LAUNCH_GRACE = 10.0
# Karpenter's reason label for NodeClaims deleted because their instance is gone.
REASON_GARBAGE_COLLECTED = "garbage_collected"
EVENT_GARBAGE_COLLECTED = "GarbageCollected"
LISTING = "listing the cloud's instances for garbage collection"


class GarbageCollector:
    """Collects leaked and duplicate instances and orphaned NodeClaims; see the module docstring."""

    name = "garbagecollection"

    def __init__(
        self, cluster: Cluster, cloud: CloudProvider, clock: Clock, *, metrics: Metrics | None = None
    ) -> None:
        self.cluster = cluster
        self.cloud = cloud
        self.clock = clock
        self.metrics = metrics if metrics is not None else Metrics()
        self._started = False
        self.passes = 0
        self._listing = FailureStreak(log)

    def watches(self) -> list[Watch]:
        # The pass keeps itself going by requeueing; the first objects listed start it.
        return [Watch(kind, self._start) for kind in ("NodePool", "NodeClaim", "Node")]

    def _start(self, old: object | None, new: object | None) -> Iterable[str]:
        return () if self._started else [PASS_KEY]

    def reconcile(self, key: str) -> float | None:
        self._started = True
        try:
            listed = self.cloud.list()
        except CloudProviderError as error:
            return self._listing.failed(LISTING, error, extra=about(controller=self.name))
        self._listing.succeeded("the cloud's instances listed again", extra=about(controller=self.name))
        nodeclaims = list(self.cluster.nodeclaims())
        self._collect_instances(listed, nodeclaims)
        live = {instance.status.provider_id for instance in listed if not instance.metadata.deleting}
        self._collect_nodeclaims(live, nodeclaims)
        self.passes += 1
        return FIRST_INTERVAL if self.passes < FIRST_PASSES else INTERVAL

    # -- leaked and duplicate instances ------------------------------------------

    def _collect_instances(self, listed: list[NodeClaim], nodeclaims: list[NodeClaim]) -> None:
        owned_ids = {claim.status.provider_id for claim in nodeclaims if claim.status.provider_id}
        # Only a NodeClaim that has not recorded its instance yet owns one by name.
        launching = {claim.name for claim in nodeclaims if not claim.status.provider_id}
        recorded = {claim.name: claim.status.provider_id for claim in nodeclaims if claim.status.provider_id}
        # A NodeClaim karpy cannot read still owns its instance: it is not karpy's to collect.
        for unreadable in self.cluster.unreadable_nodeclaims():
            launching.add(unreadable.name)
            if unreadable.provider_id:
                owned_ids.add(unreadable.provider_id)
        now = self.clock.now()
        for instance in listed:
            created = instance.metadata.creation_timestamp
            if (
                instance.metadata.deleting
                or instance.status.provider_id in owned_ids
                or instance.name in launching
                or created is None
                or now - created <= INSTANCE_GRACE
            ):
                continue
            original = recorded.get(instance.name) if instance.name else None
            if original is not None:
                why = f"a duplicate for NodeClaim {instance.name}, whose instance is {original}"
            else:
                why = "no NodeClaim owns it"
            self._collect_instance(instance, why)

    def _collect_instance(self, instance: NodeClaim, why: str) -> None:
        provider_id = instance.status.provider_id
        try:
            self.cloud.delete(instance)
        except NodeClaimNotFoundError:
            return  # gone meanwhile
        except CloudProviderError as error:
            log.warning(
                "terminating instance %s (%s) failed: %s",
                provider_id,
                why,
                error,
                extra=about(controller=self.name, provider_id=provider_id),
            )
            return
        log.info(
            "terminated instance %s: %s",
            provider_id,
            why,
            extra=about(controller=self.name, provider_id=provider_id),
        )
        for node in self._nodes_of(provider_id):
            remove_node(self.cluster, node)
            log.info(
                "deleted node %s of the terminated instance %s",
                node.name,
                provider_id,
                extra=about(node, controller=self.name),
            )

    def _nodes_of(self, provider_id: str) -> list[Node]:
        # A Node already being deleted is included: karpy's finalizer on it is lifted all the same.
        return [node for node in self.cluster.nodes() if node.provider_id == provider_id]

    # -- NodeClaims whose instance is gone ----------------------------------------

    def _collect_nodeclaims(self, live_ids: set[str], nodeclaims: list[NodeClaim]) -> None:
        now = self.clock.now()
        for claim in nodeclaims:
            launched = claim.condition(CONDITION_LAUNCHED)
            provider_id = claim.status.provider_id
            if (
                not provider_id
                or claim.metadata.deleting
                or not claim.is_true(CONDITION_REGISTERED)
                or launched is None
                or now - launched.last_transition_time <= LAUNCH_GRACE
                or provider_id in live_ids
                or any(node.ready for node in self._nodes_of(provider_id))
                or self._instance_exists(provider_id)
            ):
                continue
            moving = reschedulable_pods(self.cluster, claim)
            try:
                self.cluster.delete(claim)
            except NotFoundError:
                continue
            message = f"its instance {provider_id} no longer exists"
            self.cluster.record_event(claim, EVENT_NORMAL, EVENT_GARBAGE_COLLECTED, message)
            self.metrics.nodeclaim_disrupted(claim, REASON_GARBAGE_COLLECTED)
            self.metrics.pods_disrupted(claim, REASON_GARBAGE_COLLECTED, moving)
            log.info(
                "deleted nodeclaim %s: %s", claim.name, message, extra=about(claim, controller=self.name)
            )

    def _instance_exists(self, provider_id: str) -> bool:
        """Whether the cloud has the instance, not terminating; an error but "not found" counts as yes."""
        try:
            found = self.cloud.get(provider_id)
        except NodeClaimNotFoundError:
            return False
        except CloudProviderError as error:
            log.debug("instance %s could not be looked up: %s", provider_id, error)
            return True
        return not found.metadata.deleting
