"""The cluster's kube-scheduler settings the provisioner must mirror: default topology spread.

kube-scheduler's PodTopologySpread plugin gives a pod that declares no
``topologySpreadConstraints`` of its own the profile's ``defaultConstraints``
(with ``defaultingType: List``), each with a label selector it deduces for
the pod from the Services and the controller that select it
(:mod:`karpy.scheduling.default_spread`). A provisioner that does not know
them plans nodes kube-scheduler then will not use. Karpenter v1.15 learns
them from its ``--scheduler-config`` flag (``SCHEDULER_CONFIG``), a YAML or
JSON document of its own shape::

    podTopologySpread:
      defaultConstraints:
        - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway}

karpy reads the same setting, with Karpenter's validation (which is
kube-scheduler's): unknown fields are refused, and each constraint needs a
positive ``maxSkew``, a ``topologyKey`` that is a qualified label name, a
known ``whenUnsatisfiable``, no ``labelSelector`` (it is deduced per pod) and
no ``matchLabelKeys`` (inert on default constraints), and no two share a key
and ``whenUnsatisfiable``. kube-scheduler's ``System`` defaulting (its
built-in ScheduleAnyway constraints, used when a profile sets no
``defaultingType: List``) has no spelling here, in Karpenter's as in karpy's:
the document states constraints, not a defaulting type.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from karpy.api.core import WHEN_UNSATISFIABLE

_CONSTRAINT_FIELDS = frozenset(
    {
        "maxSkew",
        "topologyKey",
        "whenUnsatisfiable",
        "labelSelector",
        "minDomains",
        "nodeAffinityPolicy",
        "nodeTaintsPolicy",
        "matchLabelKeys",
    }
)
# A qualified name: an optional DNS subdomain prefix and a name of at most 63 characters.
_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class SchedulerConfigError(ValueError):
    """A scheduler configuration kube-scheduler (and Karpenter) would refuse."""


@dataclass(frozen=True, slots=True)
class SchedulerConfiguration:
    """What karpy mirrors of the cluster's kube-scheduler: its default spread constraints."""

    # Each as a pod's topologySpreadConstraints entry reads, without labelSelector.
    default_constraints: tuple[Mapping[str, object], ...] = ()


def parse_scheduler_config(text: str) -> SchedulerConfiguration | None:
    """``SCHEDULER_CONFIG``'s document; None when empty (nothing mirrored)."""
    if not text.strip():
        return None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise SchedulerConfigError(f"decoding scheduler config, {error}") from None
    if document is None:
        return None
    if not isinstance(document, dict):
        raise SchedulerConfigError("decoding scheduler config, expected an object")
    _no_unknown(document, {"podTopologySpread"}, "")
    spread = document.get("podTopologySpread")
    if spread is None:
        return SchedulerConfiguration()
    if not isinstance(spread, dict):
        raise SchedulerConfigError("decoding scheduler config, podTopologySpread: expected an object")
    _no_unknown(spread, {"defaultConstraints"}, "podTopologySpread.")
    raw = spread.get("defaultConstraints") or []
    if not isinstance(raw, list):
        raise SchedulerConfigError(
            "decoding scheduler config, podTopologySpread.defaultConstraints: expected a list"
        )
    constraints: list[Mapping[str, object]] = []
    for index, item in enumerate(raw):
        path = f"podTopologySpread.defaultConstraints[{index}]"
        if not isinstance(item, dict):
            raise SchedulerConfigError(f"decoding scheduler config, {path}: expected an object")
        _no_unknown(item, _CONSTRAINT_FIELDS, f"{path}.")
        problem = _constraint_problem(item)
        if problem:
            raise SchedulerConfigError(f"validating scheduler config, {path}{problem}")
        for earlier_index, earlier in enumerate(constraints):
            if (earlier["topologyKey"], earlier["whenUnsatisfiable"]) == (
                item["topologyKey"],
                item["whenUnsatisfiable"],
            ):
                raise SchedulerConfigError(
                    f"validating scheduler config, {path} is a duplicate of [{earlier_index}],"
                    f" {{{item['topologyKey']}, {item['whenUnsatisfiable']}}}"
                )
        constraints.append(dict(item))
    return SchedulerConfiguration(tuple(constraints))


def render_scheduler_config(config: SchedulerConfiguration) -> str:
    """The document that parses back to ``config`` (JSON, which is YAML too)."""
    return json.dumps({"podTopologySpread": {"defaultConstraints": list(config.default_constraints)}})


def _no_unknown(document: Mapping[str, Any], known: set[str] | frozenset[str], path: str) -> None:
    for key in document:
        if key not in known:
            raise SchedulerConfigError(f'decoding scheduler config, unknown field "{path}{key}"')


def _constraint_problem(item: Mapping[str, Any]) -> str:
    """Karpenter's validateDefaultConstraint: the fragment after the constraint's path, or ""."""
    max_skew = item.get("maxSkew")
    if not isinstance(max_skew, int) or isinstance(max_skew, bool) or max_skew <= 0:
        return ".maxSkew must be greater than 0"
    key = item.get("topologyKey")
    if not key:
        return ".topologyKey must be set"
    if not isinstance(key, str) or not _qualified_name(key):
        return f".topologyKey {key!r} is not a valid label name"
    when = item.get("whenUnsatisfiable")
    if when not in WHEN_UNSATISFIABLE:
        return f".whenUnsatisfiable {when!r} must be one of 'DoNotSchedule' or 'ScheduleAnyway'"
    if item.get("labelSelector") is not None:
        return ".labelSelector must not be set, as selectors are deduced for each pod"
    if item.get("matchLabelKeys"):
        return ".matchLabelKeys must not be set, as it has no effect on default constraints"
    return ""


def _qualified_name(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _PREFIX.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_NAME.match(name))
