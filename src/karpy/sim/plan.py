"""``karpy plan``: what applying NodePool and node class files to a cluster would change, and then do.

Two parts, as ``terraform plan`` has: the diff, and the consequence.

- :func:`diff_objects` compares the cluster's NodePools and node classes with
  the files' by their records (so a default the API server filled in is not a
  change): each object the files create or change, and each field of it that
  is set, changed or unset. Objects the files leave out are left as they are
  (``kubectl apply``), and :func:`left_as_they_are` names them for the report.
- :func:`plan_of` reads a simulation that started from the cluster and applied
  the files at its start (:mod:`karpy.sim.from_cluster`) and lays out what it
  recorded: which nodes became Drifted and why (the condition's reason), the
  disruptions in the order they began and the reason of the command that
  began each (the orchestrator's executed commands, typed), the NodeClaims
  launched, the pods evicted and where the pods made in their place went,
  the pods left pending, and the $/h of the running nodes before and after.
- :func:`observed_registration_delay` and :func:`observed_initialization_delay` are
  how long the cluster's own nodes took to register and then to initialize: the
  simulated cloud and kubelets bring replacements up as fast as the cluster does.

Nothing is computed again: times come from the recorder, reasons from the
Drifted condition and the disruption commands, the pending pods' reasons
from the provisioner's last pass.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from karpy.api.conditions import TRUE
from karpy.api.duration import format_duration
from karpy.api.nodeclaim import CONDITION_INITIALIZED, CONDITION_LAUNCHED, CONDITION_REGISTERED, NodeClaim
from karpy.api.nodeclass import EC2NodeClass, KWOKNodeClass
from karpy.api.nodepool import NodePool
from karpy.api.requirements import Requirement
from karpy.operator.reads import object_key, object_kind
from karpy.sim.recorder import NodeClaimRecord, PodRecord
from karpy.sim.report import clock_text
from karpy.sim.simulation import Simulation

PLAN_SCHEMA_VERSION = "karpy.dev/plan/v1alpha1"
# The kinds a plan diffs: what decides which nodes a pool makes.
PLANNED_KINDS = ("NodePool", "EC2NodeClass", "KWOKNodeClass")
# Record fields that are not what the user wrote: identity, status, conversion bookkeeping.
_NOT_SPEC = frozenset({"metadata", "status", "converted_from", "conversion_notes", "written_empty"})
ACTION_CREATE = "create"
ACTION_UPDATE = "update"


@dataclass(frozen=True, slots=True)
class FieldChange:
    """One field of an object: its value in the cluster and in the files (None: not set there)."""

    path: str
    before: str | None
    after: str | None


@dataclass(frozen=True, slots=True)
class ObjectChange:
    """An object the files create, or change (with the fields that differ)."""

    kind: str
    name: str
    action: str
    fields: tuple[FieldChange, ...] = ()


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def requirement_text(requirement: Requirement) -> str:
    """A requirement as a NodePool writes it: ``key In [a, b]``."""
    values = ", ".join(sorted(requirement.values))
    if requirement.greater_than is not None:
        text = f"{requirement.key} Gt {requirement.greater_than}"
    elif requirement.less_than is not None:
        text = f"{requirement.key} Lt {requirement.less_than}"
    elif requirement.complement:
        text = f"{requirement.key} NotIn [{values}]" if values else f"{requirement.key} Exists"
    else:
        text = f"{requirement.key} In [{values}]" if values else f"{requirement.key} DoesNotExist"
    return text + (f" minValues {requirement.min_values}" if requirement.min_values is not None else "")


def value_text(value: object) -> str:
    """A field's value, short and in the manifests' terms."""
    if isinstance(value, Requirement):
        return requirement_text(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        parts = [
            f"{_camel(f.name)}: {value_text(getattr(value, f.name))}"
            for f in dataclasses.fields(value)
            if f.compare and getattr(value, f.name) not in (None, "", (), {}, frozenset())
        ]
        return "{" + ", ".join(parts) + "}"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{key}: {value_text(item)}" for key, item in sorted(value.items())) + "}"
    if isinstance(value, tuple | list | frozenset | set):
        items = [value_text(item) for item in value]
        return "[" + ", ".join(sorted(items) if isinstance(value, frozenset | set) else items) + "]"
    return str(value)


def _field_diff(path: str, before: object, after: object, out: list[FieldChange]) -> None:
    if before == after:
        return
    if (
        dataclasses.is_dataclass(before)
        and not isinstance(before, type)
        and type(before) is type(after)
        and not isinstance(before, Requirement)
    ):
        for item in dataclasses.fields(before):
            if item.compare and item.name not in _NOT_SPEC:
                name = _camel(item.name)
                _field_diff(
                    f"{path}.{name}" if path else name,
                    getattr(before, item.name),
                    getattr(after, item.name),
                    out,
                )
        return
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        for key in sorted(set(before) | set(after)):
            old, new = before.get(key), after.get(key)
            if old != new:
                out.append(
                    FieldChange(
                        f"{path}[{key}]",
                        None if key not in before else value_text(old),
                        None if key not in after else value_text(new),
                    )
                )
        return
    if _is_requirements(before) and _is_requirements(after):
        # By key, as a pool's requirements are read: one line per key set, changed or unset.
        assert isinstance(before, tuple) and isinstance(after, tuple)
        old_by_key = {requirement.key: requirement for requirement in before}
        new_by_key = {requirement.key: requirement for requirement in after}
        for key in sorted(set(old_by_key) | set(new_by_key)):
            old_req, new_req = old_by_key.get(key), new_by_key.get(key)
            if old_req != new_req:
                out.append(
                    FieldChange(
                        f"{path}[{key}]",
                        None if old_req is None else requirement_text(old_req),
                        None if new_req is None else requirement_text(new_req),
                    )
                )
        return
    out.append(FieldChange(path, _scalar_text(path, before), _scalar_text(path, after)))


def _is_requirements(value: object) -> bool:
    return isinstance(value, tuple) and bool(value) and all(isinstance(item, Requirement) for item in value)


def _scalar_text(path: str, value: object) -> str | None:
    if value is None or value in ((), {}):
        return None
    if isinstance(value, float) and path.rsplit(".", 1)[-1] in _DURATION_FIELDS:
        return format_duration(value)
    return value_text(value)


# Fields held in seconds and written as Go durations.
_DURATION_FIELDS = frozenset(
    {"expireAfter", "terminationGracePeriod", "consolidateAfter", "duration", "nodeRegistrationDelay"}
)


# Metadata keys the controllers and kubectl write (the pool's hash, kubectl's last applied): not the user's.
_WRITTEN_BY_TOOLS = ("karpenter.sh/", "karpenter.k8s.aws/", "karpenter.kwok.sh/", "kubectl.kubernetes.io/")


def _users(values: Mapping[str, str]) -> dict[str, str]:
    return {key: value for key, value in values.items() if not key.startswith(_WRITTEN_BY_TOOLS)}


def diff_object(before: object, after: object) -> tuple[FieldChange, ...]:
    """The fields in which ``after`` (the files') differs from ``before`` (the cluster's), spec only."""
    changes: list[FieldChange] = []
    _field_diff("", before, after, changes)
    meta_before, meta_after = getattr(before, "metadata", None), getattr(after, "metadata", None)
    if meta_before is not None and meta_after is not None:
        for name in ("labels", "annotations"):
            _field_diff(
                f"metadata.{name}",
                _users(getattr(meta_before, name)),
                _users(getattr(meta_after, name)),
                changes,
            )
    return tuple(changes)


def diff_objects(cluster: Iterable[object], files: Iterable[object]) -> list[ObjectChange]:
    """What applying ``files`` to the cluster holding ``cluster`` changes, NodePools and node classes only."""
    held = {
        (object_kind(obj), object_key(obj)): obj
        for obj in cluster
        if isinstance(obj, NodePool | EC2NodeClass | KWOKNodeClass)
    }
    changes: list[ObjectChange] = []
    for obj in files:
        if not isinstance(obj, NodePool | EC2NodeClass | KWOKNodeClass):
            continue
        kind, name = object_kind(obj), object_key(obj)
        current = held.get((kind, name))
        if current is None:
            changes.append(ObjectChange(kind, name, ACTION_CREATE))
            continue
        fields = diff_object(current, obj)
        if fields:
            changes.append(ObjectChange(kind, name, ACTION_UPDATE, fields))
    return changes


def left_as_they_are(cluster: Iterable[object], files: Iterable[object]) -> list[tuple[str, str]]:
    """The cluster's NodePools and node classes the files do not hold, (kind, name): kept, not deleted.

    A plan is given the files that change; an object left out of them is one the user did not
    touch, as ``kubectl apply`` without ``--prune`` leaves it.
    """
    given = {
        (object_kind(obj), object_key(obj))
        for obj in files
        if isinstance(obj, NodePool | EC2NodeClass | KWOKNodeClass)
    }
    return sorted(
        (object_kind(obj), object_key(obj))
        for obj in cluster
        if isinstance(obj, NodePool | EC2NodeClass | KWOKNodeClass)
        and (object_kind(obj), object_key(obj)) not in given
    )


def _median_between(objects: Iterable[object], first: str, then: str) -> float | None:
    """The median time from condition ``first`` to ``then`` over the NodeClaims with both true."""
    delays = []
    for obj in objects:
        if not isinstance(obj, NodeClaim):
            continue
        since, until = obj.condition(first), obj.condition(then)
        if (
            since is not None
            and until is not None
            and since.status == TRUE
            and until.status == TRUE
            and since.last_transition_time
            and until.last_transition_time
        ):
            delays.append(max(0.0, until.last_transition_time - since.last_transition_time))
    return statistics.median(delays) if delays else None


def observed_registration_delay(objects: Iterable[object]) -> float | None:
    """How long the cluster's nodes took to register after launch (the median, seconds); None: none seen.

    The simulated cloud's own delay (30 s, an EC2 instance's boot) would time a kwok
    cluster's replacements, registered within a second or two, several times too slow:
    the cluster says what its nodes take.
    """
    return _median_between(objects, CONDITION_LAUNCHED, CONDITION_REGISTERED)


def observed_initialization_delay(objects: Iterable[object]) -> float | None:
    """How long the cluster's nodes took from registered to initialized (the median, seconds)."""
    return _median_between(objects, CONDITION_REGISTERED, CONDITION_INITIALIZED)


@dataclass(frozen=True, slots=True)
class Eviction:
    """A pod evicted from a node going away, and where the pod made in its place went ("": nowhere yet)."""

    pod: str
    owner: str
    evicted_at: float
    replaced_by: str
    landed_on: str


@dataclass(frozen=True, slots=True)
class NodeDisruption:
    """A node the run disrupted: why it drifted (if it did), when its deletion began and ended, its pods."""

    nodeclaim: str
    node: str
    nodepool: str
    instance_type: str
    price_per_hour: float
    reason: str  # the disruption command's reason (Drifted, Underutilized...); "" if none began it
    drifted_at: float | None
    drift_reason: str
    drift_message: str
    disrupted_at: float  # its node tainted by the disruption command, else (expiry, a user) its deletion
    deleting_at: float
    deleted_at: float | None
    evictions: tuple[Eviction, ...]


@dataclass(frozen=True, slots=True)
class Launch:
    nodeclaim: str
    nodepool: str
    instance_type: str
    capacity_type: str
    zone: str
    price_per_hour: float
    created_at: float
    ready_at: float | None


@dataclass(slots=True)
class Plan:
    """The diff and the predicted consequence, times in seconds since the cluster was read."""

    changes: list[ObjectChange]
    start: float
    end: float
    steady: bool
    drifted: list[NodeClaimRecord] = field(default_factory=list)  # drifted and never disrupted
    disruptions: list[NodeDisruption] = field(default_factory=list)
    launches: list[Launch] = field(default_factory=list)
    pending: dict[str, str] = field(default_factory=dict)  # pod -> why, at the end
    price_before: float = 0.0
    price_after: float = 0.0
    left_as_they_are: list[tuple[str, str]] = field(default_factory=list)  # (kind, name), not in the files


def _evictions(
    claim: NodeClaimRecord, deleting_at: float, pods: list[PodRecord], taken: set[str]
) -> tuple[Eviction, ...]:
    evicted = sorted(
        (
            pod
            for pod in pods
            if pod.node == claim.node
            and claim.node
            and not pod.daemonset
            and pod.deleted_at is not None
            and pod.deleted_at >= deleting_at
            and pod.bound_at is not None
            and (claim.deleted_at is None or pod.bound_at <= claim.deleted_at)
        ),
        key=lambda pod: (pod.deleted_at or 0.0, pod.key),
    )
    out: list[Eviction] = []
    for pod in evicted:
        # The pod its owner made in its place: the first one made since the eviction began not yet told.
        successor = next(
            (
                other
                for other in sorted(pods, key=lambda other: (other.created_at, other.key))
                if pod.owner
                and other.owner == pod.owner
                and other.uid != pod.uid
                and other.created_at >= deleting_at
                and other.uid not in taken
            ),
            None,
        )
        if successor is not None:
            taken.add(successor.uid)
        out.append(
            Eviction(
                pod=pod.key,
                owner=pod.owner,
                evicted_at=pod.deleted_at or deleting_at,
                replaced_by=successor.key if successor is not None else "",
                landed_on=successor.node if successor is not None else "",
            )
        )
    return tuple(out)


def _began(record: NodeClaimRecord) -> float:
    """When the node's disruption began: tainted by a command, else its deletion."""
    for moment in (record.disrupted_at, record.deleting_at, record.deleted_at):
        if moment is not None:
            return moment
    return 0.0


def plan_of(
    simulation: Simulation, changes: list[ObjectChange], left: Iterable[tuple[str, str]] = ()
) -> Plan:
    """The consequence of ``changes`` as ``simulation`` recorded it (from the cluster, files applied).

    ``left``: the cluster's objects the files leave out (:func:`left_as_they_are`), for the report.
    """
    recorder = simulation.recorder
    start = simulation.clock.start
    reasons = {
        name: command.reason
        for command in simulation.disruption.orchestrator.executed
        for name in command.candidates
    }
    records = list(recorder.nodeclaims.values())
    pods = list(recorder.pods.values())
    taken: set[str] = set()
    disruptions = []
    for claim in sorted(
        (r for r in records if r.deleting_at is not None or r.deleted_at is not None),
        key=lambda r: (_began(r), r.name),
    ):
        deleting_at = claim.deleting_at if claim.deleting_at is not None else claim.deleted_at
        assert deleting_at is not None
        disruptions.append(
            NodeDisruption(
                nodeclaim=claim.name,
                node=claim.node,
                nodepool=claim.nodepool,
                instance_type=claim.instance_type,
                price_per_hour=claim.price_per_hour,
                reason=reasons.get(claim.name, ""),
                drifted_at=claim.drifted_at,
                drift_reason=claim.drift_reason,
                drift_message=claim.drift_message,
                disrupted_at=_began(claim),
                deleting_at=deleting_at,
                deleted_at=claim.deleted_at,
                evictions=_evictions(claim, deleting_at, pods, taken),
            )
        )
    launches = [
        Launch(
            r.name,
            r.nodepool,
            r.instance_type,
            r.capacity_type,
            r.zone,
            r.price_per_hour,
            r.created_at,
            r.ready_at,
        )
        for r in sorted(records, key=lambda r: (r.created_at, r.name))
        if r.created_at >= start
    ]
    unschedulable = simulation.provisioner.last.unschedulable
    waiting = {pod.key for pod in simulation.cluster.pods() if not pod.node_name and not pod.is_terminal}
    at_start = [r for r in records if r.created_at < start and r.launched_at is not None]
    alive = [r for r in records if r.launched_at is not None and r.deleted_at is None]
    return Plan(
        changes=changes,
        start=start,
        end=recorder.end,
        steady=simulation.steady(),
        drifted=sorted(
            (
                r
                for r in records
                if r.drifted_at is not None and r.deleting_at is None and r.deleted_at is None
            ),
            key=lambda r: (r.drifted_at or 0.0, r.name),
        ),
        disruptions=disruptions,
        launches=launches,
        pending={key: unschedulable.get(key, "") for key in sorted(waiting)},
        price_before=sum(r.price_per_hour for r in at_start),
        price_after=sum(r.price_per_hour for r in alive),
        left_as_they_are=list(left),
    )


def _at(plan: Plan, moment: float | None) -> str:
    return "-" if moment is None else f"+{clock_text(moment - plan.start)}"


def render_plan_text(plan: Plan) -> str:
    """``terraform plan``-like text: the changes, then the timeline, then the totals."""
    out: list[str] = []
    if not plan.changes:
        out.append("No changes: the files' NodePools and node classes are the cluster's.")
    else:
        out.append("Changes to the cluster's NodePools and node classes:")
    for change in plan.changes:
        sign = "+" if change.action == ACTION_CREATE else "~"
        out.append(f"  {sign} {change.kind} {change.name} ({change.action})")
        for item in change.fields:
            if item.before is None:
                out.append(f"      + {item.path}: {item.after}")
            elif item.after is None:
                out.append(f"      - {item.path}: {item.before}")
            else:
                out.append(f"      ~ {item.path}: {item.before} -> {item.after}")
    if plan.left_as_they_are:
        out.append("Left as they are (in the cluster, not in the files; a plan never deletes):")
        out.extend(f"    {kind} {name}" for kind, name in plan.left_as_they_are)
    out.append("")
    out.append("Predicted consequence (virtual time since the cluster was read):")
    lines: list[tuple[float, int, str]] = []
    for order, disruption in enumerate(plan.disruptions):
        if disruption.drifted_at is not None:
            lines.append(
                (
                    disruption.drifted_at,
                    0,
                    f"  {_at(plan, disruption.drifted_at)}  drifted   {disruption.nodeclaim}"
                    f" ({disruption.node or 'no node'}):"
                    f" {disruption.drift_reason}: {disruption.drift_message}",
                )
            )
        why = disruption.reason or "deleted (no disruption command)"
        text = (
            f"  {_at(plan, disruption.disrupted_at)}  disrupt   {disruption.nodeclaim}"
            f" ({disruption.node or 'no node'}, {disruption.instance_type or '?'},"
            f" ${disruption.price_per_hour:.4f}/h): {why}; drained from {_at(plan, disruption.deleting_at)},"
            f" {len(disruption.evictions)} pods evicted, gone at {_at(plan, disruption.deleted_at)}"
        )
        lines.append((disruption.disrupted_at, 2 + order, text))
        for eviction in disruption.evictions:
            where = (
                f"{eviction.replaced_by} on {eviction.landed_on}"
                if eviction.landed_on
                else f"{eviction.replaced_by} pending"
                if eviction.replaced_by
                else "not made again (no owner)"
            )
            lines.append((disruption.disrupted_at, 2 + order, f"      {eviction.pod} -> {where}"))
    for record in plan.drifted:
        lines.append(
            (
                record.drifted_at or plan.start,
                0,
                f"  {_at(plan, record.drifted_at)}  drifted   {record.name} ({record.node or 'no node'}):"
                f" {record.drift_reason}: {record.drift_message} (not replaced within the run)",
            )
        )
    for launch in plan.launches:
        lines.append(
            (
                launch.created_at,
                10**6,  # after the disruption that launched it, at the same moment
                f"  {_at(plan, launch.created_at)}  launch    {launch.nodeclaim} ({launch.nodepool}:"
                f" {launch.instance_type or '?'} {launch.capacity_type} {launch.zone},"
                f" ${launch.price_per_hour:.4f}/h), ready at {_at(plan, launch.ready_at)}",
            )
        )
    lines.sort(key=lambda line: (line[0], line[1]))
    out.extend(line for _, _, line in lines)
    if not lines:
        out.append("  nothing: no node drifts, is disrupted or launched")
    out.append("")
    out.append("Summary")
    out.append(f"  nodes replaced or removed  {len(plan.disruptions)}")
    out.append(f"  nodes launched             {len(plan.launches)}")
    out.append(f"  pods evicted               {sum(len(d.evictions) for d in plan.disruptions)}")
    out.append(f"  pods pending at the end    {len(plan.pending)}")
    for key, reason in plan.pending.items():
        out.append(f"    {key}: {reason or 'waiting'}")
    out.append(f"  $/h before -> after        ${plan.price_before:.4f} -> ${plan.price_after:.4f}")
    out.append(
        f"  settled                    {'yes' if plan.steady else 'no'}, after"
        f" {format_duration(plan.end - plan.start)}"
    )
    return "\n".join(out)


def plan_json(plan: Plan) -> dict[str, Any]:
    """The plan as data (docs/simulate-from-cluster.md, "karpy plan"); times in seconds since the read."""

    def since(moment: float | None) -> float | None:
        return None if moment is None else round(moment - plan.start, 3)

    return {
        "apiVersion": PLAN_SCHEMA_VERSION,
        "changes": [
            {
                "kind": change.kind,
                "name": change.name,
                "action": change.action,
                "fields": [{"path": f.path, "before": f.before, "after": f.after} for f in change.fields],
            }
            for change in plan.changes
        ],
        "leftAsTheyAre": [{"kind": kind, "name": name} for kind, name in plan.left_as_they_are],
        "disruptions": [
            {
                "nodeclaim": d.nodeclaim,
                "node": d.node,
                "nodepool": d.nodepool,
                "instanceType": d.instance_type,
                "pricePerHour": d.price_per_hour,
                "reason": d.reason,
                "driftedAt": since(d.drifted_at),
                "driftReason": d.drift_reason,
                "driftMessage": d.drift_message,
                "disruptedAt": since(d.disrupted_at),
                "drainedFrom": since(d.deleting_at),
                "deletedAt": since(d.deleted_at),
                "evictions": [
                    {
                        "pod": e.pod,
                        "owner": e.owner,
                        "evictedAt": since(e.evicted_at),
                        "replacedBy": e.replaced_by,
                        "node": e.landed_on,
                    }
                    for e in d.evictions
                ],
            }
            for d in plan.disruptions
        ],
        "driftedNotReplaced": [
            {
                "nodeclaim": r.name,
                "node": r.node,
                "driftedAt": since(r.drifted_at),
                "driftReason": r.drift_reason,
            }
            for r in plan.drifted
        ],
        "launches": [
            {
                "nodeclaim": launch.nodeclaim,
                "nodepool": launch.nodepool,
                "instanceType": launch.instance_type,
                "capacityType": launch.capacity_type,
                "zone": launch.zone,
                "pricePerHour": launch.price_per_hour,
                "createdAt": since(launch.created_at),
                "readyAt": since(launch.ready_at),
            }
            for launch in plan.launches
        ],
        "pendingAtEnd": [{"pod": key, "reason": reason} for key, reason in plan.pending.items()],
        "pricePerHourBefore": round(plan.price_before, 6),
        "pricePerHourAfter": round(plan.price_after, 6),
        "steady": plan.steady,
        "durationSeconds": since(plan.end),
    }
