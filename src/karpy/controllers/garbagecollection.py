"""Garbage collection: instances no NodeClaim owns, and NodeClaims whose instance is gone.

A NodeClaim and its instance are created in two steps (the launch, then the
NodeClaim's status write), and deleted in two (the termination, then the
finalizer), so a process killed between the steps, or an instance terminated
behind karpy's back, leaves one without the other. Karpenter runs two
collectors for that, and this controller does both, through the
:class:`~karpy.cloud.provider.CloudProvider` protocol only, so it serves any
provider whose ``list`` reports the instances it launched:

- **Leaked instances** (Karpenter's AWS ``instance.garbagecollection``): an
  instance ``cloud.list()`` reports that no NodeClaim owns, launched more
  than :data:`INSTANCE_GRACE` seconds ago, is deleted through
  ``cloud.delete``, and its Node, if one registered, is deleted with it so the
  scheduler stops placing pods there at once. karpy's termination finalizer
  is lifted from that Node too: such a Node was registered to a NodeClaim
  that is gone now (its finalizer stripped by hand, say), so no termination
  would ever lift it, and with the instance terminated there is nothing left
  to drain; the pods bound to it are garbage collected and replaced. A NodeClaim the
  cache cannot read (:class:`~karpy.api.nodeclaim.UnreadableNodeClaim`) still owns its
  instance: one field karpy cannot parse must not terminate a running node. A NodeClaim owns an instance
  when it carries the instance's provider ID, or when its name is the one the
  provider gives the listed instance (``metadata.name``: the AWS provider
  reads it from the ``karpenter.sh/nodeclaim`` tag). Terminating ones are
  left to finish.
- **NodeClaims whose instance is gone** (Karpenter's
  ``nodeclaim.garbagecollection``): a launched NodeClaim (provider ID set,
  ``Launched`` true for more than :data:`LAUNCH_GRACE` seconds) whose
  instance ``cloud.list()`` does not report, and for which ``cloud.get``
  confirms :class:`~karpy.cloud.provider.NodeClaimNotFoundError`, is deleted:
  the termination controller then drains and removes its Node as for any
  deletion. It is counted in ``karpenter_nodeclaims_disrupted_total`` with
  Karpenter's reason ``garbage_collected`` and recorded as a ``GarbageCollected``
  event on the NodeClaim (Karpenter only logs it; the event tells
  ``kubectl get events`` readers why the NodeClaim went).

**Why a NodeClaim being launched never loses its instance.** While a launch
is in flight the NodeClaim has no provider ID yet, so the instance matches
no NodeClaim by ID. It is still safe: first, the NodeClaim exists before its
launch starts, and the instance carries its name, so it is owned by name from
the moment the cloud lists it. Second, even without the name, an instance is
collected only once it is older than :data:`INSTANCE_GRACE` (30 s, Karpenter's
window), far longer than the status write that follows a finished launch
takes. And when karpy is killed between the launch and that write, the
NodeClaim that survives in the cluster still names the instance, and the AWS
provider adopts an instance tagged with an existing NodeClaim's name instead
of launching a second one, so the restarted controller finds the instance
owned; an instance whose NodeClaim is gone too is a leak, and collected.
The cloud is listed before the cluster is read, so a NodeClaim created
during the listing is seen by the ownership check rather than missed by it.

**Why a NodeClaim is not deleted for a listing that missed its instance.** A
cloud's list may trail a launch (EC2's DescribeInstances is eventually
consistent), and a provider's own view may have a gap (the kwok provider
forgets a booting instance when it posts its Node, before the Node reaches
its cache). So a NodeClaim is collected only when its ``Launched`` condition
is older than :data:`LAUNCH_GRACE`, a direct ``cloud.get`` of its provider ID
says the instance does not exist (any other answer keeps it), and the same
was found by the previous pass too: a gap must last a whole
:data:`INTERVAL` to cost a NodeClaim, which no cache lag does, while a
NodeClaim whose instance is really gone goes within two passes.

It runs once the first cluster objects are seen at start, then every
:data:`INTERVAL` seconds (Karpenter runs its instance collector every 10 s for
its first 20 passes and every 2 minutes after, and its NodeClaim collector
every 2 minutes; 30 s bounds how long a leaked instance is paid for at about a
minute, for one list call per pass).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from karpy.api.core import Node
from karpy.api.nodeclaim import CONDITION_LAUNCHED, NodeClaim
from karpy.cloud.provider import CloudProvider, CloudProviderError, NodeClaimNotFoundError
from karpy.controllers.interfaces import EVENT_NORMAL, Clock, Cluster, NotFoundError
from karpy.controllers.karpenter_metrics import Metrics
from karpy.controllers.runtime import Watch
from karpy.controllers.termination import remove_node
from karpy.logs import about

log = logging.getLogger("karpy.garbagecollection")

PASS_KEY = "pass"
# Seconds between two passes.
INTERVAL = 30.0
# An instance no NodeClaim owns is collected once it is older than this (Karpenter's 30 s).
INSTANCE_GRACE = 30.0
# A NodeClaim whose instance is not listed is collected once it has been launched this long.
LAUNCH_GRACE = 10.0
# Karpenter's reason label for NodeClaims deleted because their instance is gone.
REASON_GARBAGE_COLLECTED = "garbage_collected"
EVENT_GARBAGE_COLLECTED = "GarbageCollected"


class GarbageCollector:
    """Collects leaked instances and orphaned NodeClaims; see the module docstring."""

    name = "garbagecollection"

    def __init__(
        self, cluster: Cluster, cloud: CloudProvider, clock: Clock, metrics: Metrics | None = None
    ) -> None:
        self.cluster = cluster
        self.cloud = cloud
        self.clock = clock
        self.metrics = metrics if metrics is not None else Metrics()
        self._started = False
        # NodeClaims the last pass found without an instance (collected if this pass finds it too).
        self._missing: set[str] = set()

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
            log.warning("listing the cloud's instances failed: %s", error, extra=about(controller=self.name))
            return INTERVAL
        nodeclaims = list(self.cluster.nodeclaims())
        self._collect_instances(listed, nodeclaims)
        self._collect_nodeclaims({instance.status.provider_id for instance in listed}, nodeclaims)
        return INTERVAL

    # -- leaked instances --------------------------------------------------------

    def _collect_instances(self, listed: list[NodeClaim], nodeclaims: list[NodeClaim]) -> None:
        owned_ids = {claim.status.provider_id for claim in nodeclaims if claim.status.provider_id}
        owner_names = {claim.name for claim in nodeclaims}
        # A NodeClaim karpy cannot read still owns its instance: it is not karpy's to collect.
        for unreadable in self.cluster.unreadable_nodeclaims():
            owner_names.add(unreadable.name)
            if unreadable.provider_id:
                owned_ids.add(unreadable.provider_id)
        now = self.clock.now()
        for instance in listed:
            created = instance.metadata.creation_timestamp
            if (
                instance.metadata.deleting
                or instance.status.provider_id in owned_ids
                or instance.name in owner_names
                or created is None
                or now - created <= INSTANCE_GRACE
            ):
                continue
            self._collect_instance(instance)

    def _collect_instance(self, instance: NodeClaim) -> None:
        provider_id = instance.status.provider_id
        try:
            self.cloud.delete(instance)
        except NodeClaimNotFoundError:
            return  # gone meanwhile
        except CloudProviderError as error:
            log.warning(
                "instance %s has no NodeClaim; terminating it failed: %s",
                provider_id,
                error,
                extra=about(controller=self.name, provider_id=provider_id),
            )
            return
        log.info(
            "terminated instance %s: no NodeClaim owns it",
            provider_id,
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

    def _collect_nodeclaims(self, listed_ids: set[str], nodeclaims: list[NodeClaim]) -> None:
        now = self.clock.now()
        missing_before, self._missing = self._missing, set()
        for claim in nodeclaims:
            launched = claim.condition(CONDITION_LAUNCHED)
            provider_id = claim.status.provider_id
            if (
                not provider_id
                or claim.metadata.deleting
                or launched is None
                or not launched.is_true
                or now - launched.last_transition_time <= LAUNCH_GRACE
                or provider_id in listed_ids
                or self._instance_exists(provider_id)
            ):
                continue
            self._missing.add(claim.name)
            if claim.name not in missing_before:
                continue  # confirmed by the next pass, or kept
            try:
                self.cluster.delete(claim)
            except NotFoundError:
                continue
            message = f"its instance {provider_id} no longer exists"
            self.cluster.record_event(claim, EVENT_NORMAL, EVENT_GARBAGE_COLLECTED, message)
            self.metrics.nodeclaim_disrupted(claim, REASON_GARBAGE_COLLECTED)
            log.info(
                "deleted nodeclaim %s: %s", claim.name, message, extra=about(claim, controller=self.name)
            )

    def _instance_exists(self, provider_id: str) -> bool:
        """Whether the cloud knows the instance; an error other than "not found" counts as yes."""
        try:
            self.cloud.get(provider_id)
        except NodeClaimNotFoundError:
            return False
        except CloudProviderError as error:
            log.debug("instance %s could not be looked up: %s", provider_id, error)
        return True
