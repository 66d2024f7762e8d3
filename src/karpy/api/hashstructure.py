"""Go's ``github.com/mitchellh/hashstructure/v2`` (``FormatV2``) over a description of Go values.

Karpenter's drift hashes (``karpenter.sh/nodepool-hash``, the node classes' hashes) are this
library's hash of its Go API structs. Matching them bit for bit lets a NodeClaim launched by
Karpenter be judged by karpy and the other way round, and lets Karpenter's own e2e specs read
karpy's annotations. Python has no Go types, so callers describe the value as Go would see it
after decoding the object's JSON: :class:`GoStruct` (type name, exported fields in declaration
order, ``hash:"ignore"`` fields kept only for ``IsZero``), :class:`GoMap` and :class:`GoSlice`
(each nil or not, as ``{}`` and ``[]`` decode to non-nil empties that hash differently from an
absent field), :class:`GoPointer`, :class:`GoInt` (sized), ``str`` and ``bool``.

The walk is the library's ``walker.visit``: FNV-1 64 (``fnv.New64``, not FNV-1a), numbers
written little-endian at their size (Go ``int`` as 64 bits, ``bool`` as one byte), strings
as their UTF-8 bytes, maps and sets XOR-ed then hardened, a struct's fields folded one by one
after its type name. ``time.Time`` (only ``timeAdded`` of a taint, which karpy refuses) is not
described. Pure; tested against Karpenter's own values in tests/data/nodepool-hash/.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

FNV64_OFFSET = 0xCBF29CE484222325
FNV64_PRIME = 0x100000001B3
MASK64 = (1 << 64) - 1


def fnv1_64(data: bytes) -> int:
    """Go's ``hash/fnv.New64()`` over ``data``."""
    value = FNV64_OFFSET
    for byte in data:
        value = ((value * FNV64_PRIME) & MASK64) ^ byte
    return value


@dataclass(frozen=True, slots=True)
class GoInt:
    """A Go integer of ``size`` bytes (``int`` and ``time.Duration`` are 8, signed)."""

    value: int
    size: int = 8
    signed: bool = True


@dataclass(frozen=True, slots=True)
class GoPointer:
    """A Go pointer: ``target`` None is nil, hashed as ``zero`` (the element type's zero value)."""

    target: GoValue | None
    zero: GoValue


@dataclass(frozen=True, slots=True)
class GoMap:
    entries: Mapping[str, GoValue] = field(default_factory=dict)
    nil: bool = False


@dataclass(frozen=True, slots=True)
class GoSlice:
    items: Sequence[GoValue] = ()
    nil: bool = False


@dataclass(frozen=True, slots=True)
class GoField:
    name: str
    value: GoValue
    # ``hash:"ignore"``: never hashed, but still part of its struct's IsZero.
    ignored: bool = False


@dataclass(frozen=True, slots=True)
class GoStruct:
    type_name: str
    fields: tuple[GoField, ...]


GoValue = str | bool | GoInt | GoPointer | GoMap | GoSlice | GoStruct


@dataclass(frozen=True, slots=True)
class HashOptions:
    zero_nil: bool = False
    ignore_zero_value: bool = False
    slices_as_sets: bool = False


def is_zero(value: GoValue) -> bool:
    """Go's ``reflect.Value.IsZero``: nil maps, slices and pointers, empty strings, all-zero structs."""
    if isinstance(value, str):
        return value == ""
    if isinstance(value, bool):
        return not value
    if isinstance(value, GoInt):
        return value.value == 0
    if isinstance(value, GoPointer):
        return value.target is None
    if isinstance(value, (GoMap, GoSlice)):
        return value.nil
    return all(is_zero(go_field.value) for go_field in value.fields)


def _ordered(first: int, second: int) -> int:
    return fnv1_64(first.to_bytes(8, "little") + second.to_bytes(8, "little"))


def _finish_unordered(value: int) -> int:
    return fnv1_64(value.to_bytes(8, "little"))


def _visit(value: GoValue, options: HashOptions) -> int:
    while isinstance(value, GoPointer):
        # Without ZeroNil Go hashes a nil pointer as reflect.Zero(int): a 64-bit 0.
        nil_value = value.zero if options.zero_nil else GoInt(0)
        value = nil_value if value.target is None else value.target
    if isinstance(value, bool):
        return fnv1_64(b"\x01" if value else b"\x00")
    if isinstance(value, GoInt):
        return fnv1_64(value.value.to_bytes(value.size, "little", signed=value.signed))
    if isinstance(value, str):
        return fnv1_64(value.encode())
    if isinstance(value, GoMap):
        result = 0
        for key, item in value.entries.items():
            result ^= _ordered(_visit(key, options), _visit(item, options))
        return _finish_unordered(result)
    if isinstance(value, GoSlice):
        # Only a ``hash:"set"`` tag (unused by the types described here) hardens a set.
        result = 0
        for item in value.items:
            hashed = _visit(item, options)
            result = result ^ hashed if options.slices_as_sets else _ordered(result, hashed)
        return result
    result = _visit(value.type_name, options)
    for go_field in value.fields:
        if go_field.ignored or (options.ignore_zero_value and is_zero(go_field.value)):
            continue
        field_hash = _ordered(_visit(go_field.name, options), _visit(go_field.value, options))
        result = _finish_unordered(result ^ field_hash)
    return result


def hash_value(value: GoValue, options: HashOptions) -> int:
    """``hashstructure.Hash(value, hashstructure.FormatV2, options)`` with the FNV default hasher."""
    return _visit(value, options)


# -- Go types, to decode an object's JSON into the value Go would hash -------------------------


@dataclass(frozen=True, slots=True)
class GoStringType:
    """``string`` or a named string type (``InstanceStorePolicy``): hashed as its bytes."""


@dataclass(frozen=True, slots=True)
class GoIntType:
    size: int = 8


@dataclass(frozen=True, slots=True)
class GoBoolType:
    pass


@dataclass(frozen=True, slots=True)
class GoStringerType:
    """A value hashed through its ``String()`` (a ``hash:"string"`` field): ``render`` is that method."""

    render: Callable[[object], str]


@dataclass(frozen=True, slots=True)
class GoPointerType:
    elem: GoType


@dataclass(frozen=True, slots=True)
class GoMapType:
    """``map[string]V``."""

    value: GoType


@dataclass(frozen=True, slots=True)
class GoSliceType:
    elem: GoType


@dataclass(frozen=True, slots=True)
class GoFieldType:
    json_name: str
    go_name: str
    type: GoType


@dataclass(frozen=True, slots=True)
class GoStructType:
    """A struct's hashed fields in declaration order (``hash:"ignore"`` ones left out)."""

    name: str
    fields: tuple[GoFieldType, ...]


GoType = (
    GoStringType
    | GoIntType
    | GoBoolType
    | GoStringerType
    | GoPointerType
    | GoMapType
    | GoSliceType
    | GoStructType
)


def zero_value(go_type: GoType) -> GoValue:
    """Go's zero value of ``go_type``."""
    if isinstance(go_type, GoStringType | GoStringerType):
        return ""
    if isinstance(go_type, GoIntType):
        return GoInt(0, go_type.size)
    if isinstance(go_type, GoBoolType):
        return False
    if isinstance(go_type, GoPointerType):
        return GoPointer(None, zero_value(go_type.elem))
    if isinstance(go_type, GoMapType):
        return GoMap(nil=True)
    if isinstance(go_type, GoSliceType):
        return GoSlice(nil=True)
    return GoStruct(go_type.name, tuple(GoField(f.go_name, zero_value(f.type)) for f in go_type.fields))


def decode_json(data: object, go_type: GoType) -> GoValue:
    """What Go's ``encoding/json`` makes of ``data`` (already validated) for a value of ``go_type``.

    ``None`` (null or absent) is the zero value: a nil pointer, map or slice; ``{}`` and ``[]``
    are empty but not nil.
    """
    if data is None:
        return zero_value(go_type)
    if isinstance(go_type, GoPointerType):
        return GoPointer(decode_json(data, go_type.elem), zero_value(go_type.elem))
    if isinstance(go_type, GoStringType):
        return str(data)
    if isinstance(go_type, GoStringerType):
        return go_type.render(data)
    if isinstance(go_type, GoIntType):
        return GoInt(int(cast(int, data)), go_type.size)
    if isinstance(go_type, GoBoolType):
        return bool(data)
    if isinstance(go_type, GoMapType):
        entries = cast(Mapping[str, object], data)
        return GoMap({key: decode_json(value, go_type.value) for key, value in entries.items()})
    if isinstance(go_type, GoSliceType):
        return GoSlice(tuple(decode_json(item, go_type.elem) for item in cast(Sequence[object], data)))
    written = cast(Mapping[str, object], data)
    return GoStruct(
        go_type.name,
        tuple(GoField(f.go_name, decode_json(written.get(f.json_name), f.type)) for f in go_type.fields),
    )
