"""Pods in placement order, as groups of alike pods, and what a pod's kind tells the solver.

Pods are placed by priority (``spec.priority``, highest first), then largest
first (CPU, then memory), then by name, so the plan does not depend on the
input order and, when capacity or a limit runs short, it is the
low-priority pods that stay pending. The solver takes them as groups of
alike pods (:func:`alike_groups`: a Deployment's replicas), which share one
parse of their constraints and one set of refusals. Safe because alike pods
(equal namespace, spec and volumes' terms, and labels where a label counts)
get the same verdict from a target for the same state of it.

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

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from karpy.api.core import Pod, PodSpec
from karpy.api.quantity import ResourceAmounts
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


def labels_matter(pods: Sequence[Pod], bound: Iterable[Pod]) -> bool:
    """Whether a pod's labels can change where it may go, for ``pods`` placed among ``bound`` pods.

    Labels count only through inter-pod terms: a moving pod's own spread,
    affinity and anti-affinity (which count pods by label, its own kind
    included), and a bound pod's anti-affinity (which keeps pods it selects
    off its domain). A bound pod's affinity and spread constrain only that
    pod, which is placed already, so they do not count.
    """
    for pod in pods:
        spec = pod.spec
        if spec.pod_affinity or spec.pod_anti_affinity or spec.topology_spread_constraints:
            return True
    return any(pod.spec.pod_anti_affinity for pod in bound)


def placement_bucket(pod: Pod, *, by_labels: bool = True) -> tuple[object, ...]:
    """What alike pods share and is cheap to compare: namespace, labels (unless left out), requests.

    Pods in different buckets are never alike; within one, :func:`same_placement_spec` tells.
    """
    return (
        pod.metadata.namespace,
        frozenset(pod.metadata.labels.items()) if by_labels else None,
        tuple(sorted(pod.spec.requests.items())),
    )


def same_placement_spec(spec: PodSpec, other: PodSpec) -> bool:
    """Equal specs, but for the node a bound pod runs on: the pods a removal moves are
    placed afresh, and the node they leave says nothing of where they may go."""
    if spec == other:
        return True
    return spec.node_name != other.node_name and spec == dataclasses.replace(other, node_name=spec.node_name)


def alike_groups(
    pods: Sequence[Pod],
    volume_terms: Mapping[str, Sequence[Requirements]],
    *,
    by_labels: bool = True,
    volume_counts: Mapping[str, ResourceAmounts] | None = None,
) -> list[list[Pod]]:
    """``pods`` in placement order, as runs of pods that schedule alike (a Deployment's replicas).

    Pods are alike when namespace, labels, spec, their volumes' terms and how
    many volumes of each driver they attach (``volume_counts``) are
    equal (the node a bound pod runs on aside: a removal moves it afresh).
    Without ``by_labels``, labels are not compared, which is safe when no
    label can change a verdict (:func:`labels_matter`): the replicas of
    twenty Deployments of one pod shape are then one group, placed in bulk,
    not twenty (a consolidation trial moving sixty such pods took a third
    less time). The solver does so only when no pool has limits: a bin
    grows by how many pods of its group are left, and over 72 generic
    problems without limits one group gave the same plan 66 times and fewer
    nodes at the same price 6 times, but under binding limits it placed
    fewer pods in 12 of 30. Groups go by priority, highest first, then largest
    first (CPU, then memory), then by a written-out signature (with the
    labels of the group's first pod), and pods within a group by key, so the
    plan does not depend on the input order. Comparing specs directly, after
    a cheap bucket by labels and requests, writes out (``repr``) one spec per
    group rather than one per pod, which for a large plan was a tenth of the
    solve.
    """
    buckets: dict[tuple[object, ...], list[tuple[Pod, list[Pod]]]] = {}
    for pod in pods:
        volumes = repr(volume_terms[pod.key]) if pod.key in volume_terms else ""
        counts = volume_counts.get(pod.key) if volume_counts else None
        attached = repr(sorted(counts.items())) if counts else ""
        bucket = (*placement_bucket(pod, by_labels=by_labels), volumes, attached)
        entries = buckets.setdefault(bucket, [])
        for first, members in entries:
            if same_placement_spec(first.spec, pod.spec):
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
            repr(sorted((volume_counts or {}).get(first.key, {}).items())),
            # Written out, two different specs can read alike (long value lists are cut
            # short): the first pod's key, unique to its group, keeps the order total.
            first.key,
        )

    groups.sort(key=order)
    return groups
