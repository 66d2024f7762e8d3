"""The simulator's output: a ``kubectl get nodeclaims -w`` view and a summary, or JSON.

The JSON form (``--output json``) is documented in docs/simulate-output.md;
times in it are seconds since the start of the simulation, prices US dollars.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from karpy.api.duration import format_age
from karpy.api.meta import format_timestamp
from karpy.api.quantity import format_amount
from karpy.api.requirements import CAPACITY_TYPE_RESERVED
from karpy.operator.cluster import EVENT_WARNING
from karpy.operator.interruption import ACTIONABLE_KINDS
from karpy.sim.recorder import NodeClaimRecord
from karpy.sim.simulation import Simulation

SCHEMA_VERSION = "karpy.dev/simulate/v1alpha1"


def clock_text(seconds: float) -> str:
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}"


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _rounded_price(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def cost_of(simulation: Simulation) -> dict[str, float]:
    recorder = simulation.recorder
    total = 0.0
    peak = 0.0
    changes: list[tuple[float, float]] = []
    for record in recorder.nodeclaims.values():
        if record.launched_at is None:
            continue
        until = record.deleted_at if record.deleted_at is not None else recorder.end
        total += record.price_per_hour * max(0.0, until - record.launched_at) / 3600.0
        changes.append((record.launched_at, record.price_per_hour))
        if record.deleted_at is not None:
            changes.append((record.deleted_at, -record.price_per_hour))
    running = 0.0
    for _, delta in sorted(changes, key=lambda change: (change[0], change[1])):
        running += delta
        peak = max(peak, running)
    hours = (recorder.end - simulation.clock.start) / 3600.0
    return {
        "total": round(total, 6),
        "perHour": round(total / hours, 6) if hours > 0 else 0.0,
        "peakPerHour": round(peak, 6),
    }


def reservation_cost_of(simulation: Simulation) -> dict[str, float]:
    """What the run's capacity reservations bill, used or not: over the run, and per hour at its end.

    A node in a reservation is priced near zero (Karpenter's reserved offering);
    the reservation itself is paid at the on-demand price of its instances for
    as long as it lasts, so the bill of a run is its nodes plus this.
    """
    start, end = simulation.clock.start, simulation.recorder.end
    total = 0.0
    at_end = 0.0
    for since, until, per_hour in simulation.cloud.reservation_fees():
        total += per_hour * max(0.0, min(until, end) - max(since, start)) / 3600.0
        if since <= end < until or (until == end and since < end):
            at_end += per_hour
    return {"total": round(total, 6), "perHourAtEnd": round(at_end, 6)}


def result_json(simulation: Simulation, scenario_name: str, errors: list[str]) -> dict[str, Any]:
    start = simulation.clock.start
    recorder = simulation.recorder

    def since(moment: float | None) -> float | None:
        return None if moment is None else _rounded(moment - start)

    nodeclaims = [
        {
            "name": record.name,
            "node": record.node,
            "nodepool": record.nodepool,
            "instanceType": record.instance_type,
            "capacityType": record.capacity_type,
            "zone": record.zone,
            "pricePerHour": record.price_per_hour,
            "createdAt": since(record.created_at),
            "readyAt": since(record.ready_at),
            "deletedAt": since(record.deleted_at),
        }
        for record in sorted(recorder.nodeclaims.values(), key=lambda r: (r.created_at, r.name))
    ]
    live = {pod.key: pod for pod in simulation.cluster.pods()}
    unschedulable = simulation.provisioner.last.unschedulable
    pods = []
    for record in sorted(recorder.pods.values(), key=lambda record: (record.key, record.created_at)):
        pod = live.get(record.key)
        pod = pod if pod is not None and pod.metadata.uid == record.uid else None
        running = record.running_at
        pending_until = running if running is not None else (record.deleted_at or recorder.end)
        pods.append(
            {
                "namespace": record.namespace,
                "name": record.name,
                "node": record.node,
                "phase": pod.phase if pod is not None else "Deleted",
                "daemonSet": record.daemonset,
                "pendingSeconds": _rounded(pending_until - record.created_at),
                "createdAt": since(record.created_at),
                "runningAt": since(running),
                "deletedAt": since(record.deleted_at),
                "unschedulableReason": unschedulable.get(record.key, "")
                if pod is not None and not pod.node_name
                else "",
            }
        )
    events = [
        {
            "time": since(event.time),
            "type": event.type,
            "reason": event.reason,
            "object": f"{event.kind}/{event.namespace + '/' if event.namespace else ''}{event.name}",
            "message": event.message,
        }
        for event in simulation.cluster.events
    ]
    first = recorder.first_pending_at
    own = launched_in_run(simulation)
    return {
        "apiVersion": SCHEMA_VERSION,
        "scenario": scenario_name,
        "start": format_timestamp(start),
        "durationSeconds": _rounded(recorder.end - start),
        "steady": simulation.steady() and not refused_creations(simulation) and not simulation.refused,
        "errors": errors,
        "summary": {
            "nodeclaimsLaunched": sum(1 for r in own if r.launched_at is not None),
            # The NodeClaims a run from a cluster found (karpy simulate --from-cluster); 0 otherwise.
            "nodeclaimsAtStart": len(recorder.nodeclaims) - len(own),
            "instanceTypes": dict(sorted(Counter(r.instance_type for r in own if r.instance_type).items())),
            "firstPendingAt": since(first),
            "allRunningAt": since(recorder.all_running_at),
            "pendingToRunningSeconds": _rounded(recorder.all_running_at - first)
            if first is not None and recorder.all_running_at is not None
            else None,
            "reconciles": simulation.runtime.reconciles,
            "controllerErrors": list(simulation.runtime.errors),
        },
        "nodepools": nodepools_json(simulation, since),
        "nodeclaims": nodeclaims,
        "pods": pods,
        "events": events,
        "disruption": disruption_json(simulation),
        "interruptions": [
            {
                "time": since(record.at),
                "kind": record.kind,
                "messageKind": record.message_kind,
                "nodeclaim": record.nodeclaim,
                "node": record.node,
                "instanceType": record.instance_type,
                "zone": record.zone,
                "capacityType": record.capacity_type,
                "reclaimedAt": since(record.reclaimed_at),
                "recoveredAt": since(record.recovered_at),
                "recoveredAfterSeconds": _rounded(record.recovered_at - record.at)
                if record.recovered_at is not None
                else None,
            }
            for record in simulation.interruptions.records
        ],
        "cost": cost_of(simulation),
        **(
            {"capacityReservationCost": reservation_cost_of(simulation)}
            if simulation.cloud.settings.capacity_reservations
            else {}
        ),
    }


def nodepools_json(
    simulation: Simulation, since: Callable[[float | None], float | None]
) -> list[dict[str, Any]]:
    """Each NodePool's status at the end: what ``kubectl get nodepools -o wide`` shows of it."""
    return [
        {
            "name": pool.name,
            "nodes": pool.status.nodes or 0,
            "resources": {
                name: format_amount(name, amount) for name, amount in sorted(pool.status.resources.items())
            },
            "conditions": [
                {
                    "type": condition.type,
                    "status": condition.status,
                    "reason": condition.reason,
                    "message": condition.message,
                    "lastTransitionTime": since(condition.last_transition_time),
                }
                for condition in pool.status.conditions
            ],
        }
        for pool in sorted(simulation.cluster.nodepools(), key=lambda pool: pool.name)
    ]


def disruption_holds(simulation: Simulation) -> tuple[dict[str, str], dict[str, str]]:
    """Why each NodeClaim still there at the end is not disrupted, and why each other one
    that consolidation tried is not consolidated (NodeClaim name -> reason)."""
    blocked = {
        name: reason.message
        for name, reason in simulation.disruption.blocked.items()
        if simulation.cluster.nodeclaim(name) is not None
    }
    kept = {
        name: reason.message
        for name, reason in simulation.disruption.unconsolidatable.items()
        if simulation.cluster.nodeclaim(name) is not None and name not in blocked
    }
    return blocked, kept


def disruption_json(simulation: Simulation) -> dict[str, list[dict[str, Any]]]:
    """The ``disruption`` section: the summary's "not disrupted" and "not consolidated" lines."""
    given_up = simulation.disruption.savings_given_up
    records = simulation.recorder.nodeclaims

    def entries(holds: dict[str, str]) -> list[dict[str, Any]]:
        return [
            {
                "nodeclaim": name,
                "node": records[name].node if name in records else "",
                "reason": reason,
                "savingGivenUpPerHour": _rounded_price(given_up.get(name)),
            }
            for name, reason in sorted(holds.items())
        ]

    blocked, kept = disruption_holds(simulation)
    return {"notDisrupted": entries(blocked), "notConsolidated": entries(kept)}


def render_text(simulation: Simulation, scenario_name: str) -> str:
    recorder = simulation.recorder
    start = simulation.clock.start
    header = ("TIME", "NAME", "TYPE", "CAPACITY", "ZONE", "NODE", "READY", "AGE")
    lines: list[tuple[float, int, tuple[str, ...] | str]] = []
    for order, (moment, message) in enumerate(recorder.notes):
        lines.append((moment, order, f"{clock_text(moment - start)}  # {message}"))
    for order, (moment, message) in enumerate(
        first_refusals(simulation).values(), start=len(recorder.notes) + len(recorder.rows)
    ):
        lines.append((moment, order, f"{clock_text(moment - start)}  # Warning FailedCreate {message}"))
    for order, row in enumerate(recorder.rows, start=len(recorder.notes)):
        lines.append(
            (
                row.time,
                order,
                (
                    clock_text(row.time - start),
                    row.name,
                    row.instance_type,
                    row.capacity_type,
                    row.zone,
                    row.node,
                    "Deleted" if row.deleted else row.ready,
                    format_age(row.time - row.created),
                ),
            )
        )
    if recorder.first_pending_at is not None:
        moment = recorder.first_pending_at
        count = sum(
            1 for record in recorder.pods.values() if not record.daemonset and record.created_at == moment
        )
        lines.append((moment, 10**8, f"{clock_text(moment - start)}  # {count} pods pending"))
    if recorder.first_pending_at is not None and recorder.all_running_at is not None:
        moment = recorder.all_running_at
        lines.append((moment, 10**9, f"{clock_text(moment - start)}  # all pods running"))
    lines.sort(key=lambda line: (line[0], line[1]))
    rows = [line[2] for line in lines if isinstance(line[2], tuple)]
    widths = [max(len(column) for column in values) for values in zip(header, *rows, strict=False)]
    out = [f"karpy simulate: {scenario_name} (virtual time; a NodeClaim row is printed each time it changes)"]
    out.append("  ".join(title.ljust(width) for title, width in zip(header, widths, strict=True)).rstrip())
    for _, _, content in lines:
        if isinstance(content, tuple):
            out.append(
                "  ".join(value.ljust(width) for value, width in zip(content, widths, strict=True)).rstrip()
            )
        else:
            out.append(content)
    out.append("")
    out.extend(summary_lines(simulation))
    return "\n".join(out)


def first_refusals(simulation: Simulation) -> dict[tuple[str, str, str], tuple[float, str]]:
    """Each owner whose pods the API server refused (FailedCreate), by (kind, namespace, name).

    The value is when it was first refused, and that refusal.

    A pod the Priority admission plugin refuses never appears, so nothing
    else in the output would say why the workload has no pods.
    """
    first: dict[tuple[str, str, str], tuple[float, str]] = {}
    for event in simulation.cluster.events:
        if event.type == EVENT_WARNING and event.reason == "FailedCreate":
            owner = f"{event.kind} {event.namespace + '/' if event.namespace else ''}{event.name}"
            first.setdefault(
                (event.kind, event.namespace, event.name), (event.time, f"{owner}: {event.message}")
            )
    return first


def refused_creations(simulation: Simulation) -> dict[tuple[str, str, str], tuple[float, str]]:
    """The refusals of :func:`first_refusals` that still hold: the owner exists and has no pod."""
    owners_with_pods = {
        (owner.kind, pod.metadata.namespace, owner.name)
        for pod in simulation.cluster.pods()
        if (owner := pod.metadata.controller) is not None
    }
    return {
        key: refusal
        for key, refusal in first_refusals(simulation).items()
        if key not in owners_with_pods and simulation.cluster.get(key[0], f"{key[1]}/{key[2]}") is not None
    }


def interruption_lines(simulation: Simulation) -> list[str]:
    """The summary's interruptions: how many of each kind, and how soon the pods ran again after each."""
    records = simulation.interruptions.records
    if not records:
        return []
    kinds = Counter(record.kind for record in records)
    lines = [
        f"  interruptions        {len(records)}: "
        + ", ".join(f"{count} x {kind}" for kind, count in sorted(kinds.items()))
    ]
    for record in records:
        recovered = (
            f"pods running again after {record.recovered_at - record.at:.0f}s"
            if record.recovered_at is not None
            else "no replacement needed"
            if record.message_kind not in ACTIONABLE_KINDS
            else "pods not running again"
        )
        reclaimed = " (reclaimed before it was drained)" if record.reclaimed_at is not None else ""
        lines.append(f"    {record.node or record.nodeclaim}: {record.kind}, {recovered}{reclaimed}")
    return lines


def launched_in_run(simulation: Simulation) -> list[NodeClaimRecord]:
    """The run's own NodeClaims: not those a run from a cluster found there, created before its start."""
    start = simulation.clock.start
    return [record for record in simulation.recorder.nodeclaims.values() if record.created_at >= start]


def summary_lines(simulation: Simulation) -> list[str]:
    recorder = simulation.recorder
    launched = [record for record in recorder.nodeclaims.values() if record.launched_at is not None]
    new = [record for record in launched_in_run(simulation) if record.launched_at is not None]
    by_type = Counter(f"{record.instance_type} ({record.capacity_type})" for record in new)
    alive = [record for record in launched if record.deleted_at is None]
    cost = cost_of(simulation)
    lines = ["Summary"]
    lines.append(f"  simulated time       {format_age(recorder.end - simulation.clock.start)}")
    if len(recorder.nodeclaims) > len(launched_in_run(simulation)):
        lines.append(f"  nodes at the start   {len(recorder.nodeclaims) - len(launched_in_run(simulation))}")
    lines.append(
        f"  nodes launched       {len(new)}"
        + (
            ": " + ", ".join(f"{count} x {name}" for name, count in sorted(by_type.items()))
            if by_type
            else ""
        )
    )
    lines.append(f"  nodes at the end     {len(alive)}")
    peak = cost["peakPerHour"]
    lines.append(f"  price at peak        ${peak:.4f}/hour")
    lines.append(f"  cost of the run      ${cost['total']:.4f}")
    if simulation.cloud.settings.capacity_reservations:
        fees = reservation_cost_of(simulation)
        in_reservations = sum(1 for record in alive if record.capacity_type == CAPACITY_TYPE_RESERVED)
        held = sum(reservation.count for reservation in simulation.cloud.settings.capacity_reservations)
        lines.append(
            f"  capacity reservations ${fees['perHourAtEnd']:.4f}/hour, billed used or not"
            f" ({in_reservations} of {held} reserved instances in use at the end)"
        )
        lines.append(
            f"  price at peak with reservations ${peak + fees['perHourAtEnd']:.4f}/hour"
            f" (nodes ${peak:.4f} + reservations ${fees['perHourAtEnd']:.4f})"
        )
        lines.append(f"  cost of the run with reservations ${cost['total'] + fees['total']:.4f}")
    first, done = recorder.first_pending_at, recorder.all_running_at
    if first is not None and done is not None:
        lines.append(f"  first Pending pod -> all Running   {done - first:.0f}s")
    elif first is not None:
        lines.append("  first Pending pod -> all Running   not reached")
    completed = sum(1 for record in recorder.pods.values() if record.succeeded_at is not None)
    if completed:
        lines.append(f"  pods completed       {completed}")
    unschedulable = simulation.provisioner.last.unschedulable
    live = {pod.key for pod in simulation.cluster.pods() if not pod.node_name}
    stuck = {key: reason for key, reason in unschedulable.items() if key in live}
    if stuck:
        lines.append(f"  unschedulable pods   {len(stuck)}")
        for key, reason in sorted(stuck.items()):
            lines.append(f"    {key}: {reason}")
    blocked, kept = disruption_holds(simulation)
    given_up = simulation.disruption.savings_given_up
    for title, holds in (("not disrupted      ", blocked), ("not consolidated   ", kept)):
        if holds:
            lines.append(f"  {title}  {len(holds)}")
        for name, reason in sorted(holds.items()):
            saving = given_up.get(name)
            lines.append(f"    {name}: {reason}" + (f" (gives up ${saving:.4f}/h)" if saving else ""))
    refused = [*refused_creations(simulation).values(), *simulation.refused]
    if refused:
        lines.append(f"  not created          {len(refused)} (refused by the API server)")
        lines.extend(f"    {message}" for _, message in refused)
    lines.extend(interruption_lines(simulation))
    if simulation.runtime.errors:
        lines.append(f"  controller errors    {len(simulation.runtime.errors)}")
        lines.extend(f"    {error}" for error in simulation.runtime.errors[:10])
    if refused:
        # Nothing changes any more, but not as asked: what was refused is not there.
        lines.append("  steady at the end    no: what the API server refused (above) never runs")
    else:
        lines.append(f"  steady at the end    {'yes' if simulation.steady() else 'no'}")
    return lines
