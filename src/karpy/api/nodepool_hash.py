"""Karpenter's ``karpenter.sh/nodepool-hash``: ``NodePool.Hash()`` of Karpenter v1.15, bit for bit.

Karpenter hashes ``spec.template`` as its Go type ``NodeClaimTemplate`` with hashstructure v2
(``FormatV2``, options ``SlicesAsSets``, ``IgnoreZeroValue``, ``ZeroNil``). This module lays a
:class:`~karpy.api.nodepool.NodeClaimTemplate` out as that Go value (:mod:`karpy.api.hashstructure`):
field names and order of ``NodeClaimTemplate``, ``ObjectMeta``, ``NodeClaimTemplateSpec``,
``core/v1.Taint``, ``NodeClassReference``, ``metav1.Duration`` and ``NillableDuration``, with
``requirements`` left out (``hash:"ignore"``: requirement drift compares labels instead) and
durations as Go's nanoseconds, so ``1h`` and ``60m`` hash alike and ``Never`` as no expiry at all.
Taints are a set (reordering them drifts nothing); an empty ``{}`` or ``[]`` written for labels,
annotations, taints or startup taints hashes differently from an absent one, as in Go.

Equal to Karpenter's own values for the manifests in tests/data/nodepool-hash/ (computed by
scripts/gen-hash-golden), so NodeClaims launched by either controller compare.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Protocol

from karpy.api.hashstructure import (
    GoField,
    GoInt,
    GoMap,
    GoPointer,
    GoSlice,
    GoStruct,
    GoValue,
    HashOptions,
    hash_value,
)
from karpy.api.taints import Taint


class _NodeClassReference(Hashable, Protocol):
    @property
    def group(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def name(self) -> str: ...


class HashedTemplate(Protocol):
    """What the hash reads of a :class:`~karpy.api.nodepool.NodeClaimTemplate` (named by its
    fields, not imported: the template's module calls this one)."""

    @property
    def labels(self) -> Mapping[str, str]: ...
    @property
    def annotations(self) -> Mapping[str, str]: ...
    @property
    def taints(self) -> tuple[Taint, ...]: ...
    @property
    def startup_taints(self) -> tuple[Taint, ...]: ...
    @property
    def requirements(self) -> Sequence[object]: ...
    @property
    def node_class_ref(self) -> _NodeClassReference: ...
    @property
    def expire_after(self) -> float | None: ...
    @property
    def termination_grace_period(self) -> float | None: ...
    @property
    def written_empty(self) -> frozenset[str]: ...


NODEPOOL_HASH_OPTIONS = HashOptions(zero_nil=True, ignore_zero_value=True, slices_as_sets=True)
NANOSECONDS = 1_000_000_000


def go_nanoseconds(seconds: float) -> int:
    """A duration in seconds as Go's ``time.Duration``, exact for whole seconds of any size."""
    whole = int(seconds)
    return whole * NANOSECONDS + round((seconds - whole) * NANOSECONDS)


def _string_map(entries: Mapping[str, str], written_empty: bool) -> GoMap:
    return GoMap(dict(entries), nil=not entries and not written_empty)


def _taint(taint: Taint) -> GoStruct:
    # core/v1.Taint. TimeAdded (*metav1.Time) is refused on templates: always nil, so
    # IgnoreZeroValue skips it and its zero value is never visited.
    time_zero = GoStruct("Time", ())
    return GoStruct(
        "Taint",
        (
            GoField("Key", taint.key),
            GoField("Value", taint.value),
            GoField("Effect", taint.effect),
            GoField("TimeAdded", GoPointer(None, time_zero)),
        ),
    )


def _taints(taints: Sequence[Taint], written_empty: bool) -> GoSlice:
    return GoSlice(tuple(_taint(taint) for taint in taints), nil=not taints and not written_empty)


def _metav1_duration(seconds: float | None) -> GoPointer:
    zero = GoStruct("Duration", (GoField("Duration", GoInt(0)),))
    if seconds is None:
        return GoPointer(None, zero)
    return GoPointer(GoStruct("Duration", (GoField("Duration", GoInt(go_nanoseconds(seconds))),)), zero)


def _nillable_duration(seconds: float | None) -> GoStruct:
    # Raw (hash:"ignore") holds the written text whenever the duration is set.
    duration = GoPointer(None if seconds is None else GoInt(go_nanoseconds(seconds)), GoInt(0))
    return GoStruct(
        "NillableDuration",
        (GoField("Duration", duration), GoField("Raw", GoSlice(nil=seconds is None), ignored=True)),
    )


def _node_class_reference(kind: str, name: str, group: str) -> GoStruct:
    fields = (GoField("Kind", kind), GoField("Name", name), GoField("Group", group))
    return GoStruct("NodeClassReference", fields)


def template_go_value(template: HashedTemplate) -> GoValue:
    """``spec.template`` as Karpenter's Go ``NodeClaimTemplate`` value."""
    empty = template.written_empty
    ref = template.node_class_ref
    ref_value = _node_class_reference(ref.kind, ref.name, ref.group)
    metadata = GoStruct(
        "ObjectMeta",
        (
            GoField("Labels", _string_map(template.labels, "labels" in empty)),
            GoField("Annotations", _string_map(template.annotations, "annotations" in empty)),
        ),
    )
    spec = GoStruct(
        "NodeClaimTemplateSpec",
        (
            GoField("Taints", _taints(template.taints, "taints" in empty)),
            GoField("StartupTaints", _taints(template.startup_taints, "startupTaints" in empty)),
            GoField("Requirements", GoSlice(nil=not template.requirements), ignored=True),
            GoField("NodeClassRef", GoPointer(ref_value, _node_class_reference("", "", ""))),
            GoField("TerminationGracePeriod", _metav1_duration(template.termination_grace_period)),
            GoField("ExpireAfter", _nillable_duration(template.expire_after)),
        ),
    )
    return GoStruct("NodeClaimTemplate", (GoField("ObjectMeta", metadata), GoField("Spec", spec)))


def nodepool_template_hash(template: HashedTemplate) -> str:
    """Karpenter's ``NodePool.Hash()`` of a NodePool with this template, as its decimal string.

    Memoized on what it hashes: drift compares every NodeClaim with its pool's hash on each
    pass, and the byte-wise FNV costs about a millisecond a template in Python.
    """
    key = (
        tuple(sorted(template.labels.items())),
        tuple(sorted(template.annotations.items())),
        template.taints,
        template.startup_taints,
        template.node_class_ref,
        template.expire_after,
        template.termination_grace_period,
        template.written_empty,
    )
    known = _HASHES.get(key)
    if known is None:
        if len(_HASHES) >= _HASHES_KEPT:
            _HASHES.clear()
        known = _HASHES[key] = str(hash_value(template_go_value(template), NODEPOOL_HASH_OPTIONS))
    return known


# Hashes by what they hash; cleared when full, as templates are few and rarely change.
_HASHES: dict[object, str] = {}
_HASHES_KEPT = 1024
