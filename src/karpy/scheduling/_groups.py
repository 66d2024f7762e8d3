"""Pods in placement order, as groups of alike pods, and what a pod's kind tells the solver.

Pods are placed by priority (``spec.priority``, highest first), then largest
first (CPU, then memory), then by name, so the plan does not depend on the
input order and, when capacity or a limit runs short, it is the
low-priority pods that stay pending. The solver takes them as groups of
alike pods (:func:`alike_groups`: a Deployment's replicas), which share one
parse of their constraints and one set of refusals. Safe because alike pods
(equal namespace, labels, spec and volumes' terms) get the same verdict
from a target for the same state of it.

The rest says, from a pod's constraints, what of its verdicts carries over
to other pods:

- :func:`topology_signature`: what decides a pod's topology verdicts; a
  target refused by topology that only tightens is out for every pod of the
  same signature, whatever it requests;
- :func:`hostname_limits`: how many of its own kind a node may hold before
  it is closed to the kind for good;
- :func:`constrains_only_resources`: pods whose placement matters only
  through their requests, which the final repacking may move between new
  NodeClaims.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from karpy.api.core import Pod
from karpy.api.requirements import LABEL_HOSTNAME, Requirements
from karpy.scheduling.constraints import PodConstraints, PodSelector


def _sort_key(pod: Pod) -> tuple[int, int, int, str]:
    """Placement order: higher priority first, then largest first (CPU, memory), then by key."""
    requests = pod.spec.requests
    return (-pod.spec.priority, -requests.get("cpu", 0), -requests.get("memory", 0), pod.key)


def constrains_only_resources(constraints: PodConstraints) -> bool:
    """A pod whose placement matters only through its requests (and its NodePool's requirements)."""
    return (
        len(constraints.node_alternatives) == 1
        and not constraints.preferred_node_terms
        and not constraints.all_spread()
        and not constraints.all_affinity()
        and not constraints.all_anti_affinity()
        and not constraints.host_ports
    )


def hostname_limits(constraints: PodConstraints) -> list[tuple[PodSelector, int]]:
    """The most pods of its own kind a node may hold by each hostname term that counts the pod.

    Required anti-affinity allows none besides, spread ``maxSkew`` (its
    minimum over hostnames is always 0: a new node is always possible).
    Counts on a node only grow while a plan is made, so a node that reaches
    one of these is closed to such pods for good.
    """
    pod = constraints.pod
    namespace, labels = pod.metadata.namespace, pod.metadata.labels
    limits = [
        (term.selects, 1)
        for term in constraints.all_anti_affinity()
        if term.topology_key == LABEL_HOSTNAME and term.selects.matches_labels(namespace, labels)
    ]
    limits += [
        (spread.selects, spread.max_skew)
        for spread in constraints.all_spread()
        if spread.topology_key == LABEL_HOSTNAME and spread.selects.matches_labels(namespace, labels)
    ]
    return limits


def topology_signature(constraints: PodConstraints) -> str:
    """What decides a pod's topology verdicts: who it is, its inter-pod terms, its node options."""
    pod = constraints.pod
    return repr(
        (
            pod.metadata.namespace,
            sorted(pod.metadata.labels.items()),
            constraints.all_spread(),
            constraints.all_affinity(),
            constraints.all_anti_affinity(),
            [str(option) for option in constraints.node_options()],
        )
    )


def alike_groups(pods: Sequence[Pod], volume_terms: Mapping[str, Sequence[Requirements]]) -> list[list[Pod]]:
    """``pods`` in placement order, as runs of pods that schedule alike (a Deployment's replicas).

    Pods are alike when namespace, labels, spec and their volumes' terms are
    equal. Groups go by priority, highest first, then largest first (CPU,
    then memory), then by a written-out signature, and pods within a group
    by key, so the plan does not depend on the input order. Comparing specs
    directly, after a cheap bucket by labels and requests, writes out
    (``repr``) one spec per group rather than one per pod, which for a large
    plan was a tenth of the solve.
    """
    buckets: dict[tuple[object, ...], list[tuple[Pod, list[Pod]]]] = {}
    for pod in pods:
        volumes = repr(volume_terms[pod.key]) if pod.key in volume_terms else ""
        bucket = (
            pod.metadata.namespace,
            frozenset(pod.metadata.labels.items()),
            tuple(sorted(pod.spec.requests.items())),
            volumes,
        )
        entries = buckets.setdefault(bucket, [])
        for first, members in entries:
            if first.spec == pod.spec:
                members.append(pod)
                break
        else:
            entries.append((pod, [pod]))
    groups = [members for entries in buckets.values() for _, members in entries]
    for members in groups:
        members.sort(key=lambda pod: pod.key)

    def order(members: list[Pod]) -> tuple[object, ...]:
        first = members[0]
        return (
            *_sort_key(first)[:3],
            first.metadata.namespace,
            repr(sorted(first.metadata.labels.items())),
            repr(first.spec),
            repr(volume_terms.get(first.key)),
            # Written out, two different specs can read alike (long value lists are cut
            # short): the first pod's key, unique to its group, keeps the order total.
            first.key,
        )

    groups.sort(key=order)
    return groups
