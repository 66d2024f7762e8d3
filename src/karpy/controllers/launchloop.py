"""A guard against launching node after node for pods that never land on them.

Provisioning trusts its picture of the cluster: it launches a node it
believes the pending pods fit on. When that picture is wrong in a way it
cannot see (a DaemonSet pod bigger than its template says, a node that
registers smaller than its type or with a taint nobody declared, a scheduler
rule karpy does not model), the node comes up, the pods do not land on it,
consolidation removes it as empty, and the pods are pending again: the same
launch, for ever. Karpenter's users have met this loop for years
(kubernetes-sigs/karpenter#1749, aws/karpenter-provider-aws#6015); one such
run created 774 NodeClaims in 15 minutes.

Whatever the cause, this guard notices the loop from outside and breaks it.
A launch is *futile* for a workload (the pods' controller, so a pod
preempted off its node and recreated under a new name is still the same
demand; a pod without a controller is its own workload) when its NodeClaim
became initialized (the node was real and ready) and, when provisioning is
about to launch for that workload again, the node holds none of its pods
(it is gone, or the pods are elsewhere or pending) and never served one: a
pod of the workload that completed there (a Job's), or ran there for
:data:`SERVED_AFTER` before it went (a scale-down, then a scale-up), was
served. So was a launch whose pods ran anywhere: kube-scheduler spreads pods
by its own scoring, not as the plan packed them, so in a large scale-up a node
launched for some pods often gets others while those run on nodes launched
before it; consolidation then removes it, and without this the workload's
next pending pods (a scale-in's evictions) were held for 15 minutes. A
workload whose pods land, as with a scale-up, is never held.

A node is judged only once it has been up for :data:`SETTLE` and kube-scheduler
has refused a pod of the workload since it came up (a new Unschedulable message:
kube-scheduler's names the node count, so the first refusal that saw the node
differs from the ones before), or once it has been up for :data:`UNREFUSED_AFTER`
(kube-scheduler retries unschedulable pods every five minutes whatever happens).
In a large scale-up the pods planned for a node that has just initialized are
often still pending, not refused: kube-scheduler binds some 50 pods a second,
far fewer on a loaded machine. Judged on time alone, a pass that a bind
reopened moments after the first nodes came up held a workload spread over three
of them (seen with concurrent launches, where a pass's nodes all initialize
within a second or two), and a 1,000-pod scale-out on a loaded control plane,
where kube-scheduler had not reached the pods 20 s after the first nodes came
up, held 546 pods for 15 minutes.

After :data:`FUTILE_LAUNCHES` futile launches within :data:`WINDOW`, the
workload's pending pods are held: provisioning launches nothing for them for
:data:`HOLD` (doubling for each hold in a row, up to :data:`MAX_HOLD`), and
says why on each pod (a Warning Event, ``LaunchLoop``), in the log and in
``karpy_provisioning_launch_loops_total``. The pods still land on any room
that appears meanwhile; only new launches for them stop. The thresholds sit
far above what a workload that lands meets: three nodes that came up ready
and were then left without any of its pods, within half an hour, is not a
scale-up, nor a one-off race with another workload for the room.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from karpy.api.core import POD_RUNNING, Pod
from karpy.api.nodeclaim import NodeClaim
from karpy.logs import about, doubled
from karpy.operator.cluster import EVENT_WARNING, Clock, Cluster
from karpy.operator.metrics import Counter

log = logging.getLogger("karpy.provisioning")

# Futile launches for one workload within WINDOW seconds that make it held.
FUTILE_LAUNCHES = 3
WINDOW = 30 * 60.0
# How long a held workload gets no new launch: doubled for each hold in a row, at most MAX_HOLD.
HOLD = 15 * 60.0
MAX_HOLD = 4 * 3600.0
# A pod that ran this long on the node launched for it was served there, whatever became of it.
SERVED_AFTER = 5 * 60.0
# Seconds a node must have been up (its NodeClaim initialized) before its launch can be futile:
# kube-scheduler's binds of a large scale-up (about 50 a second) have reached it by then.
SETTLE = 20.0
# Seconds after which a node the workload's pods never landed on is judged even without a refusal
# seen since it came up: kube-scheduler retries its unschedulable pods at least this often.
UNREFUSED_AFTER = 5 * 60.0

EVENT_REASON = "LaunchLoop"


def workload_of(pod: Pod) -> str:
    """Whose demand a pod is: its controller's (kind and uid), or the pod's own key without one."""
    controller = pod.metadata.controller
    if controller is None:
        return f"Pod/{pod.key}"
    return f"{controller.kind}/{pod.metadata.namespace}/{controller.name}/{controller.uid}"


@dataclass(slots=True)
class _Launch:
    nodeclaim: str
    workload: str
    at: float
    node: str = ""  # set once the NodeClaim is initialized
    up_since: float = 0.0  # when it was seen initialized
    running_since: float | None = None  # when a pod of the workload was first seen running there
    served: bool = False


@dataclass(slots=True)
class _Hold:
    until: float
    holds: int  # holds in a row: the next one lasts twice as long
    reason: str


@dataclass(slots=True)
class LaunchLoopGuard:
    """Remembers the launches made for each workload and holds the workloads they keep failing."""

    cluster: Cluster
    clock: Clock
    loops: Counter | None = None
    futile_launches: int = FUTILE_LAUNCHES
    window: float = WINDOW
    hold: float = HOLD
    max_hold: float = MAX_HOLD
    settle: float = SETTLE
    unrefused_after: float = UNREFUSED_AFTER
    _launches: dict[str, list[_Launch]] = field(default_factory=dict)
    # The launches not initialized yet, by NodeClaim; the initialized ones, by Node; the
    # launches not served yet, by the key of a pod they were made for.
    _of_claim: dict[str, list[_Launch]] = field(default_factory=dict)
    _for_pod: dict[str, list[_Launch]] = field(default_factory=dict)
    _on_node: dict[str, list[_Launch]] = field(default_factory=dict)
    _held: dict[str, _Hold] = field(default_factory=dict)
    # When kube-scheduler last refused a pod of the workload (a new Unschedulable message).
    _refused: dict[str, float] = field(default_factory=dict)

    # The provisioner's watches call these with every change of a NodeClaim (or Node) and pod.

    def on_nodeclaim(self, old: object | None, new: object | None) -> None:
        """Learns which launches came up: a NodeClaim initialized, on its Node."""
        if not isinstance(new, NodeClaim) or not new.initialized or not new.status.node_name:
            return
        for launch in self._of_claim.pop(new.name, ()):
            launch.node = new.status.node_name
            launch.up_since = self.clock.now()
            self._on_node.setdefault(launch.node, []).append(launch)

    def on_pod(self, old: object | None, new: object | None) -> None:
        """Learns which launches served their workload: a pod of it completed there, or ran there a
        while, or a pod it was made for runs, wherever it landed."""
        if isinstance(new, Pod) and new.phase == POD_RUNNING and new.node_name and new.key in self._for_pod:
            for launch in self._for_pod.pop(new.key):
                launch.served = True
        if (
            isinstance(new, Pod)
            and new.unschedulable_reason
            and not (isinstance(old, Pod) and old.unschedulable_reason == new.unschedulable_reason)
        ):
            self._refused[workload_of(new)] = self.clock.now()
        pod = new if isinstance(new, Pod) else old
        if not isinstance(pod, Pod) or not pod.node_name or pod.node_name not in self._on_node:
            return
        workload = workload_of(pod)
        now = self.clock.now()
        for launch in self._on_node[pod.node_name]:
            if launch.workload != workload or launch.served:
                continue
            if isinstance(new, Pod) and new.is_terminal and not new.metadata.deleting:
                launch.served = True  # it ran to completion there
            elif not isinstance(new, Pod) or new.metadata.deleting or new.is_terminal:
                ran = launch.running_since is not None and now - launch.running_since >= SERVED_AFTER
                launch.served = ran
            elif new.phase == POD_RUNNING and launch.running_since is None:
                launch.running_since = now

    def record(self, nodeclaim: NodeClaim, pods: Sequence[Pod]) -> None:
        """A NodeClaim was created for ``pods``."""
        now = self.clock.now()
        launches: dict[str, _Launch] = {}
        for workload in dict.fromkeys(workload_of(pod) for pod in pods):
            launch = launches[workload] = _Launch(nodeclaim.name, workload, now)
            self._launches.setdefault(workload, []).append(launch)
            self._of_claim.setdefault(nodeclaim.name, []).append(launch)
        for pod in pods:
            self._for_pod.setdefault(pod.key, []).append(launches[workload_of(pod)])

    def admit(self, pods: list[Pod]) -> tuple[list[Pod], dict[str, str]]:
        """The pods provisioning may launch for now, and the held ones (by key) with why.

        A workload caught in a loop now is held here, and told why.
        """
        now = self.clock.now()
        self._forget(now)
        by_workload: dict[str, list[Pod]] = {}
        for pod in pods:
            by_workload.setdefault(workload_of(pod), []).append(pod)
        allowed: list[Pod] = []
        held: dict[str, str] = {}
        for workload, workload_pods in by_workload.items():
            hold = self._held.get(workload)
            if hold is None or hold.until <= now:
                futile = self._futile(workload, now)
                if len(futile) < self.futile_launches:
                    allowed.extend(workload_pods)
                    continue
                hold = self._hold(workload, workload_pods, futile, hold, now)
            held.update((pod.key, hold.reason) for pod in workload_pods)
        return allowed, held

    def release(self) -> None:
        """End every hold now (the next hold of a workload still lasts twice as long as its last).

        Called when a NodePool changes: what it launches may now take the pods.
        """
        now = self.clock.now()
        for hold in self._held.values():
            hold.until = min(hold.until, now)

    def next_release(self) -> float | None:
        """When the first hold in force ends (a pass then may launch for its pods again)."""
        now = self.clock.now()
        return min((hold.until for hold in self._held.values() if hold.until > now), default=None)

    def _futile(self, workload: str, now: float) -> list[_Launch]:
        """The workload's futile launches, up to as many as make a hold (a pass need not count on)."""
        futile: list[_Launch] = []
        refused = self._refused.get(workload)
        for launch in self._launches.get(workload, ()):
            if not launch.node or now - launch.up_since < self.settle:
                continue  # not up yet, or not for long enough to judge
            seen = refused is not None and refused >= launch.up_since
            if not seen and now - launch.up_since < self.unrefused_after:
                continue  # kube-scheduler has not tried the pods against it yet
            if not launch.served and not self._hosts(launch.node, workload):
                futile.append(launch)
                if len(futile) == self.futile_launches:
                    break
        return futile

    def _hosts(self, node_name: str, workload: str) -> bool:
        return any(
            not pod.is_terminal and not pod.metadata.deleting and workload_of(pod) == workload
            for pod in self.cluster.pods_on_node(node_name)
        )

    def _hold(
        self, workload: str, pods: list[Pod], futile: list[_Launch], previous: _Hold | None, now: float
    ) -> _Hold:
        holds = previous.holds + 1 if previous is not None else 1
        seconds = doubled(self.hold, holds, self.max_hold)
        claims = ", ".join(launch.nodeclaim for launch in futile)
        reason = (
            f"no node launched for it for {seconds / 60:g}m: the last {len(futile)} nodes launched"
            f" for its pods ({claims}) came up ready and kept none of them"
        )
        hold = self._held[workload] = _Hold(now + seconds, holds, reason)
        # The launches that made this hold are spent: after it, the count starts again.
        self._launches.pop(workload, None)
        message = (
            f"Launching stopped for this pod: {reason}. Another would fare no better; look for what"
            " the pod meets on a node that karpy does not see (admission defaults, DaemonSets,"
            " node taints, a node smaller than its instance type)"
        )
        log.warning(
            "%d pending pods of %s held for %gm: %d nodes launched for them (%s) came up ready"
            " and none kept them",
            len(pods),
            workload,
            seconds / 60,
            len(futile),
            claims,
            extra=about(pods[0], controller="provisioning"),
        )
        if self.loops is not None:
            self.loops.inc()
        for pod in pods:
            self.cluster.record_event(pod, EVENT_WARNING, EVENT_REASON, message)
        return hold

    def _forget(self, now: float) -> None:
        """Drop launches older than the window, and holds whose time and next window have passed."""
        for workload in list(self._launches):
            recent = [launch for launch in self._launches[workload] if launch.at > now - self.window]
            if recent:
                self._launches[workload] = recent
            else:
                del self._launches[workload]
        for index in (self._of_claim, self._on_node, self._for_pod):
            for key in list(index):
                kept = [launch for launch in index[key] if launch.at > now - self.window]
                if kept:
                    index[key] = kept
                else:
                    del index[key]
        for workload in [w for w, hold in self._held.items() if hold.until + self.window <= now]:
            del self._held[workload]
        # A refusal matters only after a launch came up: one of a workload without launches is old.
        for workload in [w for w in self._refused if w not in self._launches]:
            del self._refused[workload]
