"""The cluster's default topology spread constraints, given to the pods that declare none.

kube-scheduler's PodTopologySpread plugin gives every pod without
``topologySpreadConstraints`` of its own the profile's ``defaultConstraints``
(:mod:`karpy.api.schedulerconfig`), all or nothing: a pod that declares any
keeps only its own. Each default gets a label selector deduced for the pod
(kube-scheduler's ``helper.DefaultSelector``):

- the ``spec.selector`` of every Service in the pod's namespace that selects
  it, merged as equality matches (a key two Services set takes the last
  one's value; a Service without a selector selects nothing);
- then its controller's selector: a ReplicationController's labels
  overwrite those, a ReplicaSet's or StatefulSet's selector is added as
  expressions; any other controller (a Job, a DaemonSet) adds nothing.

A pod for which nothing is deduced is not defaulted (an empty selector would
count every pod of the namespace). This is what Karpenter v1.15 does with its
``--scheduler-config`` (``DefaultTopologySpreadInjector``), on the copies it
plans with, never written back; so does karpy, for provisioning and for the
simulations consolidation makes.

Pure: the caller says what the Services and controllers select
(:class:`SelectorSources`); the selector deduced for a pod is kept per
namespace, controller and labels, so a workload's pods deduce it once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from karpy.api.core import LabelSelector, Pod

# The controllers kube-scheduler deduces a selector from, by apiVersion and kind.
REPLICATION_CONTROLLER = ("v1", "ReplicationController")
REPLICA_SET = ("apps/v1", "ReplicaSet")
STATEFUL_SET = ("apps/v1", "StatefulSet")
SELECTOR_OWNERS = (REPLICATION_CONTROLLER, REPLICA_SET, STATEFUL_SET)


@dataclass(frozen=True, slots=True)
class SelectorSources:
    """What selects pods, as the deduction reads it.

    ``services`` gives a namespace's Services' selectors (None for a Service
    without one); ``owner`` a controller's selector by (apiVersion, kind,
    namespace, name), None when it is not to be had.
    """

    services: Callable[[str], Sequence[Mapping[str, str] | None]]
    owner: Callable[[str, str, str, str], LabelSelector | None]


@dataclass(slots=True)
class DefaultSpread:
    """Gives pods the default constraints; one per planning pass (its deductions are kept)."""

    constraints: Sequence[Mapping[str, object]]
    sources: SelectorSources
    _selectors: dict[tuple[str, str, frozenset[tuple[str, str]]], dict[str, object] | None] = field(
        default_factory=dict
    )
    _services: dict[str, Sequence[Mapping[str, str] | None]] = field(default_factory=dict)

    def apply(self, pods: Sequence[Pod]) -> list[Pod]:
        """``pods``, each that declares no constraints and has a deduced selector given the defaults."""
        if not self.constraints:
            return list(pods)
        result: list[Pod] = []
        for pod in pods:
            selector = None if pod.spec.topology_spread_constraints else self.selector(pod)
            if selector is None:
                result.append(pod)
                continue
            constraints = tuple({**constraint, "labelSelector": selector} for constraint in self.constraints)
            result.append(
                pod.with_changes(spec=dataclasses.replace(pod.spec, topology_spread_constraints=constraints))
            )
        return result

    def selector(self, pod: Pod) -> dict[str, object] | None:
        """The label selector deduced for ``pod`` (a LabelSelector as a manifest writes it), or None."""
        controller = pod.metadata.controller
        owner_uid = (controller.uid or f"{controller.kind}/{controller.name}") if controller else ""
        key = (pod.metadata.namespace, owner_uid, frozenset(pod.metadata.labels.items()))
        if key not in self._selectors:
            self._selectors[key] = self._deduce(pod)
        return self._selectors[key]

    def _deduce(self, pod: Pod) -> dict[str, object] | None:
        namespace = pod.metadata.namespace
        if namespace not in self._services:
            self._services[namespace] = self.sources.services(namespace)
        match_labels: dict[str, str] = {}
        for service_selector in self._services[namespace]:
            if service_selector is None:
                continue
            if all(pod.metadata.labels.get(key) == value for key, value in service_selector.items()):
                match_labels.update(service_selector)
        expressions: list[dict[str, object]] = []
        controller = pod.metadata.controller
        if controller is not None and (controller.api_version, controller.kind) in SELECTOR_OWNERS:
            owned = self.sources.owner(controller.api_version, controller.kind, namespace, controller.name)
            if owned is not None:
                if (controller.api_version, controller.kind) == REPLICATION_CONTROLLER:
                    match_labels.update(owned.match_labels)
                else:
                    expressions.extend(_as_expressions(owned))
        if not match_labels and not expressions:
            return None
        selector: dict[str, object] = {}
        if match_labels:
            selector["matchLabels"] = match_labels
        if expressions:
            selector["matchExpressions"] = expressions
        return selector


def _as_expressions(selector: LabelSelector) -> list[dict[str, object]]:
    """A selector as expressions alone: each matchLabels entry an ``In`` of one value."""
    expressions: list[dict[str, object]] = [
        {"key": key, "operator": "In", "values": [value]} for key, value in selector.match_labels.items()
    ]
    for key, operator, values in selector.match_expressions:
        expression: dict[str, object] = {"key": key, "operator": operator}
        if values:
            expression["values"] = list(values)
        expressions.append(expression)
    return expressions
