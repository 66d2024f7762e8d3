"""The pure parts of ``python -m benchmarks.side_by_side``: what is read off the cluster and /proc.

The benchmark runs Karpenter's kwok controller and ``karpy run`` on the same workloads
(benchmarks/side_by_side.py); everything it measures is computed here from plain data, so that
it is the same for both controllers and testable without a cluster:

- the API requests a controller made, from the API server's audit log (JSON lines, one event per
  request stage) filtered by the controller's user: each request counted once by its auditID;
- the fleet at a moment, from NodeClaim, Node and Pod objects (as the API returns them): its
  $/h from one price table (Karpenter's kwok types, src/karpy/cloud/data/karpenter-kwok.json, for
  both), and reserved CPU and memory utilisation as Karpenter's performance suite computes it
  (test/pkg/environment/common/monitor.go: per launched Node, the requests of its pods over its
  allocatable, averaged over the Nodes);
- a controller's resident memory and CPU time, from /proc/<pid>/status and /proc/<pid>/stat.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from karpy.api.quantity import parse_resource_list

LABEL_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_CAPACITY_TYPE = "karpenter.sh/capacity-type"
LABEL_NODEPOOL = "karpenter.sh/nodepool"

PriceKey = tuple[str, str, str]
"""(instance type, zone, capacity type)."""


@dataclass(frozen=True)
class RequestCounts:
    """The requests one user made, each counted once (a watch logs a start and an end event)."""

    total: int
    by_verb: Mapping[str, int]
    by_resource: Mapping[str, int]
    nodeclaims_created: int
    evictions: int
    pods_deleted: int
    user_agents: Mapping[str, int] = field(default_factory=dict)

    @property
    def watches(self) -> int:
        return self.by_verb.get("watch", 0)


def count_requests(lines: Iterable[str], user: str) -> RequestCounts:
    """Count the requests of ``user`` in audit-log ``lines`` (JSON, one event a line).

    Lines that are not JSON (a torn last line while the API server writes) are skipped.
    """
    seen: dict[str, dict[str, Any]] = {}
    for raw in lines:
        line = raw.strip()
        if not line:
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(event, dict) or event.get("user", {}).get("username") != user:
            continue
        audit_id = str(event.get("auditID", ""))
        if audit_id and audit_id not in seen:
            seen[audit_id] = event
    by_verb: Counter[str] = Counter()
    by_resource: Counter[str] = Counter()
    agents: Counter[str] = Counter()
    created_claims = evictions = deleted_pods = 0
    for event in seen.values():
        verb = str(event.get("verb", ""))
        ref = event.get("objectRef") or {}
        resource = str(ref.get("resource", ""))
        subresource = str(ref.get("subresource", ""))
        by_verb[verb] += 1
        by_resource[f"{resource}/{subresource}" if subresource else resource] += 1
        agents[str(event.get("userAgent", "")).split(" ")[0]] += 1
        if verb == "create" and resource == "nodeclaims" and not subresource:
            created_claims += 1
        if verb == "create" and resource == "pods" and subresource == "eviction":
            evictions += 1
        if verb == "delete" and resource == "pods" and not subresource:
            deleted_pods += 1
    return RequestCounts(
        total=len(seen),
        by_verb=dict(by_verb),
        by_resource=dict(by_resource),
        nodeclaims_created=created_claims,
        evictions=evictions,
        pods_deleted=deleted_pods,
        user_agents=dict(agents),
    )


def price_table(catalog: Mapping[str, Any]) -> dict[PriceKey, float]:
    """(type, zone, capacity type) -> $/h, from a karpy kwok catalog (karpenter-kwok.json)."""
    prices: dict[PriceKey, float] = {}
    for instance_type in catalog["instanceTypes"]:
        for offering in instance_type["offerings"]:
            key = (instance_type["name"], offering["zone"], offering["capacityType"])
            prices[key] = float(offering["price"])
    return prices


@dataclass(frozen=True)
class Fleet:
    """The launched capacity at one moment."""

    nodeclaims: int
    nodes: int
    cost_per_hour: float
    cpu_utilisation: float
    memory_utilisation: float
    unpriced: tuple[str, ...] = ()
    """NodeClaims whose (type, zone, capacity type) is not in the price table."""


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    labels: Mapping[str, str] = obj.get("metadata", {}).get("labels") or {}
    return labels


def _is_active(pod: Mapping[str, Any]) -> bool:
    return pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")


def pod_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """A pod's effective requests: the sum of its containers', at least each init container's."""
    spec = pod.get("spec", {})
    total: dict[str, int] = {}
    for container in spec.get("containers") or []:
        requests = parse_resource_list((container.get("resources") or {}).get("requests") or {})
        for name, amount in requests.items():
            total[name] = total.get(name, 0) + amount
    for container in spec.get("initContainers") or []:
        requests = parse_resource_list((container.get("resources") or {}).get("requests") or {})
        for name, amount in requests.items():
            total[name] = max(total.get(name, 0), amount)
    for name, amount in parse_resource_list(spec.get("overhead") or {}).items():
        total[name] = total.get(name, 0) + amount
    return total


def fleet(
    nodeclaims: Sequence[Mapping[str, Any]],
    nodes: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    prices: Mapping[PriceKey, float],
) -> Fleet:
    """The fleet's cost and reserved utilisation, as Karpenter's performance suite computes it.

    Cost: every NodeClaim not being deleted, at the price of its type, zone and capacity type.
    Utilisation: for each Node a NodePool launched (it has the nodepool label) with a non-zero
    allocatable, the requests of its active pods over that allocatable; the mean over those Nodes.
    """
    cost = 0.0
    unpriced: list[str] = []
    live_claims = [claim for claim in nodeclaims if not claim.get("metadata", {}).get("deletionTimestamp")]
    for claim in live_claims:
        labels = _labels(claim)
        key = (
            labels.get(LABEL_INSTANCE_TYPE, ""),
            labels.get(LABEL_ZONE, ""),
            labels.get(LABEL_CAPACITY_TYPE, ""),
        )
        if key in prices:
            cost += prices[key]
        else:
            unpriced.append(str(claim.get("metadata", {}).get("name", "")))
    requested: dict[str, dict[str, int]] = {}
    for pod in pods:
        node_name = pod.get("spec", {}).get("nodeName")
        if not node_name or not _is_active(pod):
            continue
        on_node = requested.setdefault(node_name, {})
        for name, amount in pod_requests(pod).items():
            on_node[name] = on_node.get(name, 0) + amount
    launched = [node for node in nodes if _labels(node).get(LABEL_NODEPOOL)]
    return Fleet(
        nodeclaims=len(live_claims),
        nodes=len(launched),
        cost_per_hour=cost,
        cpu_utilisation=_mean_utilisation(launched, requested, "cpu"),
        memory_utilisation=_mean_utilisation(launched, requested, "memory"),
        unpriced=tuple(unpriced),
    )


def _mean_utilisation(
    nodes: Sequence[Mapping[str, Any]], requested: Mapping[str, Mapping[str, int]], resource: str
) -> float:
    ratios: list[float] = []
    for node in nodes:
        allocatable = parse_resource_list(node.get("status", {}).get("allocatable") or {}).get(resource, 0)
        if allocatable <= 0:
            continue
        used = requested.get(node["metadata"]["name"], {}).get(resource, 0)
        ratios.append(used / allocatable)
    return sum(ratios) / len(ratios) if ratios else 0.0


def status_bytes(proc_status: str, field_name: str) -> int:
    """A size field of a /proc/<pid>/status text (``VmRSS``, ``VmHWM``: the peak), in bytes.

    0 when the field is absent (a process gone, or a kernel thread).
    """
    for line in proc_status.splitlines():
        if line.startswith(f"{field_name}:"):
            parts = line.split()
            return int(parts[1]) * 1024
    return 0


def cpu_ticks(proc_stat: str) -> int:
    """utime + stime of a /proc/<pid>/stat text, in clock ticks.

    The command name (field 2) is in parentheses and may hold spaces, so fields are counted
    from the last ``)``.
    """
    rest = proc_stat[proc_stat.rindex(")") + 2 :].split()
    # rest[0] is field 3 (state); utime and stime are fields 14 and 15.
    return int(rest[11]) + int(rest[12])


def ratio(karpy: float | None, karpenter: float | None) -> str:
    """karpy's figure over Karpenter's, for the table ("—" when either is missing or zero)."""
    if karpy is None or karpenter is None or karpenter == 0:
        return "—"
    return f"{karpy / karpenter:.2f}"
