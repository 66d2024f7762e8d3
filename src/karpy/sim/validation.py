"""Checks across objects: what no single manifest can tell about itself.

- A NodePool's ``nodeClassRef`` should name a node class among the inputs:
  launching against a missing class can only fail later, and far less
  clearly. But the files given are not always everything: ``karpy validate
  nodepool.yaml`` checks one file whose EC2NodeClass lives in the cluster
  or in another file. So a missing node class is what the caller makes it:
  a warning for ``karpy validate`` (an error with ``--strict``), and an
  error for ``karpy simulate``, whose simulated cluster holds nothing but
  the inputs, so the pool could never launch there. The simulator still
  applies such a pool, as an API server would: it launches nothing, its
  status says ``NodeClassReady=False``, and its pods' pending reasons name
  the missing class instead of "no NodePool exists".
- A NodePool's requirements must be satisfiable at all (no key whose
  requirements contradict each other) and by at least one instance type in
  the catalog the simulated cloud serves, enough of them to meet each
  ``minValues``; a pool that can never launch anything is almost always a
  typo in an instance type, a zone or an arch.
  These are errors whatever the caller: no cluster can make them right.
- A NodeOverlay must pass Karpenter's runtime validation (a restricted
  label in its requirements, say): one that does not changes nothing, and
  is an error whatever the caller.

- A pod's ``priorityClassName`` must name a PriorityClass among the inputs
  or one every cluster has: the Priority admission plugin refuses the pod
  otherwise (``pods "x" is forbidden: no PriorityClass with name foo was
  found``), and a workload's pods never appear. ``karpy validate`` makes it
  an error; ``karpy simulate`` applies the workload, as the API server
  would, and its controller's FailedCreate Warning says it.

Invalid NodePools are dropped with one error line each; everything else is
kept, NodePools with only a warning (or a missing class, when the caller
keeps those) included.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache, lru_cache

from karpy.api.core import (
    CronJob,
    DaemonSet,
    Deployment,
    Job,
    Pod,
    PodSpec,
    PriorityClass,
    ReplicaSet,
    StatefulSet,
)
from karpy.api.instancetype import InstanceType
from karpy.api.kubevalidation import missing_priority_class
from karpy.api.manifest import LoadedObject, LoadResult
from karpy.api.nodeclass import KWOK_KIND, EC2NodeClass, KWOKNodeClass
from karpy.api.nodeoverlay import NodeOverlay, runtime_problem
from karpy.api.nodepool import NodePool
from karpy.api.requirements import Operator, Requirement, Requirements
from karpy.cloud.aws_catalog import instance_type_from_entry, load_catalog
from karpy.cloud.kwok_catalog import load_kwok_catalog
from karpy.scheduling.solver import min_values_shortfall

_FIELD = "spec.template.spec"


@cache
def catalog_instance_types(karpenter_kwok: bool = False) -> tuple[InstanceType, ...]:
    """The AWS catalog's types, or Karpenter's kwok types (which a KWOKNodeClass may offer instead)."""
    if karpenter_kwok:
        return tuple(load_kwok_catalog().instance_types())
    catalog = load_catalog()
    return tuple(instance_type_from_entry(entry, catalog.region) for entry in catalog.entries)


def missing_node_class(nodepool: NodePool, node_classes: set[tuple[str, str, str]]) -> str | None:
    """The NodePool's ``nodeClassRef`` if it names none of ``node_classes``, as a message."""
    ref = nodepool.template.node_class_ref
    if (ref.group, ref.kind, ref.name) not in node_classes:
        return f'{_FIELD}.nodeClassRef: {ref.kind} "{ref.name}" ({ref.group}) not found'
    return None


def nodepool_problem(nodepool: NodePool) -> str | None:
    """Why the NodePool's requirements could never launch a node, or None.

    A KWOKNodeClass offers the AWS catalog or Karpenter's kwok types (its annotation or the
    process' default chooses, which the pool does not say): either one satisfying will do.
    """
    template = nodepool.template
    labels = tuple(sorted(template.labels.items()))
    problem = _requirements_problem(labels, template.requirements)
    kwok = template.node_class_ref.kind == KWOK_KIND
    if problem is not None and kwok and _requirements_problem(labels, template.requirements, True) is None:
        return None
    return problem


@lru_cache(maxsize=4096)
def _requirements_problem(
    labels: tuple[tuple[str, str], ...],
    written_requirements: tuple[Requirement, ...],
    karpenter_kwok: bool = False,
) -> str | None:
    """:func:`nodepool_problem` of a template's labels and requirements: many pools share them,
    and each answer reads the whole catalog."""
    requirements = Requirements.from_labels(dict(labels))
    for requirement in written_requirements:
        requirements.add(requirement)
    # DoesNotExist is an empty set of values too, but a satisfiable one: a node
    # without the label meets it. Only a key written without it can contradict itself.
    absent_allowed = {
        written.key for written in written_requirements if written.operator() == Operator.DOES_NOT_EXIST
    }
    for requirement in requirements:
        if requirement.is_empty() and requirement.key not in absent_allowed:
            return f"{_FIELD}.requirements: {requirement.key} can never be satisfied ({requirement})"
    satisfying = [
        instance_type
        for instance_type in catalog_instance_types(karpenter_kwok)
        if instance_type.requirements.intersects(requirements) is None
        and instance_type.available_offerings(requirements)
    ]
    if not satisfying:
        written = "; ".join(str(requirement) for requirement in written_requirements)
        return f"{_FIELD}.requirements: no instance type in the catalog satisfies them ({written})"
    shortfall = min_values_shortfall(requirements, satisfying)
    if shortfall is not None:
        return (
            f"{_FIELD}.requirements: the catalog's instance types that satisfy them do not meet"
            f" minValues ({shortfall})"
        )
    return None


def validate_references(
    loaded: LoadResult,
    existing_node_classes: Iterable[tuple[str, str, str]] = (),
    *,
    missing_node_class_is_error: bool = True,
    keep_pools_missing_a_node_class: bool = False,
) -> list[str]:
    """Drop NodePools that could never launch a node, with an error for each.

    A NodePool whose node class is not among the inputs (nor in
    ``existing_node_classes``) is dropped with an error when
    ``missing_node_class_is_error``; otherwise it is kept and the warning
    returned, one line per NodePool. With ``keep_pools_missing_a_node_class``
    such a pool is kept even when that is an error.
    """
    node_classes = set(existing_node_classes)
    for item in loaded.objects:
        if isinstance(item.obj, EC2NodeClass | KWOKNodeClass):
            node_classes.add((item.obj.group, item.obj.kind, item.obj.metadata.name))
    warnings: list[str] = []
    kept: list[LoadedObject] = []
    for item in loaded.objects:
        if isinstance(item.obj, NodePool):
            where = f'{item.source}: NodePool "{item.obj.name}"'
            missing = missing_node_class(item.obj, node_classes)
            if missing is not None and missing_node_class_is_error:
                # The one error such a pool gets: its requirements are not looked at.
                loaded.add_error(f"{where}: {missing}")
                if keep_pools_missing_a_node_class:
                    kept.append(item)
                continue
            if missing is not None:
                warnings.append(f"{where}: {missing} among the files given (it may exist in the cluster)")
            problem = nodepool_problem(item.obj)
            if problem is not None:
                loaded.add_error(f"{where}: {problem}")
                continue
        if isinstance(item.obj, NodeOverlay):
            # What Karpenter's runtime validation refuses (ValidationSucceeded=False, RuntimeValidation).
            problem = runtime_problem(item.obj)
            if problem is not None:
                loaded.add_error(f'{item.source}: NodeOverlay "{item.obj.name}": {problem}')
                continue
        kept.append(item)
    loaded.objects = kept
    return warnings


def pod_spec_of(obj: object) -> tuple[str, PodSpec] | None:
    """The field path and spec of the pods ``obj`` makes (itself, for a Pod), or None."""
    if isinstance(obj, Pod):
        return "spec", obj.spec
    if isinstance(obj, Deployment | ReplicaSet | StatefulSet | DaemonSet | Job):
        return "spec.template.spec", obj.template.spec
    if isinstance(obj, CronJob):
        return "spec.jobTemplate.spec.template.spec", obj.job_template.template.spec
    return None


def priority_class_names(loaded: Iterable[LoadedObject]) -> set[str]:
    return {item.obj.metadata.name for item in loaded if isinstance(item.obj, PriorityClass)}


def validate_priority_classes(loaded: LoadResult, existing: set[str], *, pods_only: bool = False) -> None:
    """Drop, with an error each, the objects whose pods name a PriorityClass not in ``existing``.

    The classes every cluster has (system-node-critical, system-cluster-critical) need not be there.
    ``pods_only``: only bare Pods, which the API server refuses themselves; a workload is
    accepted and only its pods are refused (the simulator shows that as FailedCreate).
    """
    kept: list[LoadedObject] = []
    for item in loaded.objects:
        pods = pod_spec_of(item.obj) if not pods_only or item.kind == "Pod" else None
        if pods is not None:
            path, spec = pods
            refusal = missing_priority_class(item.name, spec.priority_class_name, existing)
            if refusal is not None:
                loaded.add_error(
                    f'{item.source}: {item.kind} "{item.name}": {path}.priorityClassName: {refusal}'
                )
                continue
        kept.append(item)
    loaded.objects = kept
