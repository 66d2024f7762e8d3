"""A manifest against its CRD's structural schema, offline, as the API server checks it.

``karpy validate`` promises to refuse what karpy's CRDs refuse. The parsers
read the values karpy uses and check what karpy needs of them; the CRD
schemas say more (a budget's ``nodes`` is a string, ``consolidateAfter``
matches Karpenter's duration pattern, at most 100 requirements, a label
value is a string of at most 63 characters...). Rather than repeat each of
those by hand in a parser, this module walks a manifest against the same
schema :mod:`karpy.api.crds` installs and applies the OpenAPI keywords the
API server applies: ``type`` (with ``x-kubernetes-int-or-string``), ``enum``,
``pattern``, ``minLength``/``maxLength``, ``minItems``/``maxItems``,
``minProperties``/``maxProperties``, ``minimum``/``maximum``, ``format``
(int32, int64, date-time) and ``required``. Its messages use the API server's words ("Unsupported value",
"should match", "Required value", "Too many") so that searching for one finds
the same answers.

As on the API server, a field written as ``null`` is absent (pruned before
defaulting), a required field the schema defaults is never missing, and
``status`` is not checked (it is not written through a create). The CEL rules
(``x-kubernetes-validations``) are not evaluated here: the parsers check each
of them, with the message the CRD takes from the parser's module.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from functools import cache
from typing import Any

from karpy.api._reader import ManifestError
from karpy.api.limits import INT32_MAX

Schema = Mapping[str, Any]

# The parts of an object the API server does not check against the kind's schema on create:
# metadata is an ObjectMeta (checked by the loader), status is reset by the status subresource.
UNCHECKED_ROOT_FIELDS = frozenset({"apiVersion", "kind", "metadata", "status"})


@cache
def _pattern(pattern: str) -> re.Pattern[str]:
    # Go's RE2 (the API server's) matches ASCII classes and is unanchored unless written anchored.
    return re.compile(pattern, re.ASCII)


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def _shown(value: object) -> str:
    """A value as the API server shows it in a message: strings quoted, the rest as written."""
    if isinstance(value, str):
        text = value if len(value) <= 80 else value[:77] + "..."
        return f'"{text}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, int | float):
        return str(value)
    return _type_name(value)


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _type_error(value: object, schema: Schema) -> str | None:
    """Why ``value`` is not of the schema's type, or None."""
    actual = _type_name(value)
    if schema.get("x-kubernetes-int-or-string"):
        return None if actual in ("integer", "string") else f"must be of type integer or string, got {actual}"
    expected = schema.get("type")
    if expected is None or actual == expected or (expected == "number" and actual == "integer"):
        return None
    written = "" if actual in ("object", "array", "null") else f" {_shown(value)}"
    return f"must be of type {expected}, got {actual}{written}"


def schema_errors(value: object, schema: Schema, path: str = "") -> Iterator[ManifestError]:
    """Every way ``value`` breaks ``schema`` (its structural keywords), each at its field path."""
    problem = _type_error(value, schema)
    if problem is not None:
        yield ManifestError(path, problem)
        return
    if isinstance(value, str):
        yield from _string_errors(value, schema, path)
    elif isinstance(value, bool):
        pass
    elif isinstance(value, int | float):
        yield from _number_errors(value, schema, path)
    elif isinstance(value, list):
        yield from _array_errors(value, schema, path)
    elif isinstance(value, Mapping):
        yield from _object_errors(value, schema, path)
    if "enum" in schema and value not in schema["enum"]:
        supported = ", ".join(_shown(option) for option in schema["enum"])
        yield ManifestError(path, f"Unsupported value: {_shown(value)}: supported values: {supported}")


def _string_errors(value: str, schema: Schema, path: str) -> Iterator[ManifestError]:
    longest = schema.get("maxLength")
    if longest is not None and len(value) > longest:
        yield ManifestError(path, f"Too long: may not be more than {longest} characters, got {len(value)}")
    shortest = schema.get("minLength")
    if shortest is not None and len(value) < shortest:
        yield ManifestError(path, f"should be at least {shortest} characters long, got {len(value)}")
    if schema.get("format") == "date-time" and not DATE_TIME.fullmatch(value):
        yield ManifestError(path, f"Invalid value: {_shown(value)}: must be a date-time (RFC 3339)")
    pattern = schema.get("pattern")
    if pattern is not None and not _pattern(pattern).search(value):
        yield ManifestError(path, f"Invalid value: {_shown(value)}: should match '{pattern}'")


# Integer formats the API server checks (a CEL type check: "must be of type integer with format int32").
INTEGER_FORMATS = {"int32": (-(INT32_MAX + 1), INT32_MAX), "int64": (-(2**63), 2**63 - 1)}
# RFC 3339, as the API server's date-time format takes it.
DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})", re.ASCII)


def _number_errors(value: float, schema: Schema, path: str) -> Iterator[ManifestError]:
    bounds = INTEGER_FORMATS.get(schema.get("format", ""))
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        yield ManifestError(
            path, f"Invalid value: {_shown(value)}: must be of type integer with format {schema['format']}"
        )
    least = schema.get("minimum")
    if least is not None and value < least:
        yield ManifestError(
            path, f"Invalid value: {_shown(value)}: should be greater than or equal to {least}"
        )
    most = schema.get("maximum")
    if most is not None and value > most:
        yield ManifestError(path, f"Invalid value: {_shown(value)}: should be less than or equal to {most}")


def _array_errors(value: list[object], schema: Schema, path: str) -> Iterator[ManifestError]:
    most = schema.get("maxItems")
    if most is not None and len(value) > most:
        yield ManifestError(path, f"Too many: {len(value)}: must have at most {most} items")
    least = schema.get("minItems")
    if least is not None and len(value) < least:
        yield ManifestError(path, f"Invalid value: {len(value)}: should have at least {least} items")
    items = schema.get("items")
    if isinstance(items, Mapping):
        for index, item in enumerate(value):
            yield from schema_errors(item, items, f"{path}[{index}]")


def _object_errors(value: Mapping[str, object], schema: Schema, path: str) -> Iterator[ManifestError]:
    if schema.get("x-kubernetes-preserve-unknown-fields") and "properties" not in schema:
        return
    present = {str(key): item for key, item in value.items() if item is not None}
    most = schema.get("maxProperties")
    if most is not None and len(present) > most:
        yield ManifestError(path, f"Too many: {len(present)}: must have at most {most} items")
    least = schema.get("minProperties")
    if least is not None and len(present) < least:
        yield ManifestError(path, f"Invalid value: {len(present)}: should have at least {least} properties")
    properties: Mapping[str, Schema] = schema.get("properties", {})
    for name in schema.get("required", ()):
        if name not in present and "default" not in properties.get(name, {}):
            yield ManifestError(_child(path, name), "Required value")
    values = schema.get("additionalProperties")
    for key, item in present.items():
        field = properties.get(key)
        if field is None and isinstance(values, Mapping):
            field = values
        if field is not None:  # an unknown field is the loader's to report (karpy.api.fields)
            yield from schema_errors(item, field, _child(path, key))


@cache
def served_schemas() -> dict[tuple[str, str], Schema]:
    """The schema of each kind and version karpy's CRDs store, by (apiVersion, kind).

    v1beta1 manifests are read and converted (the CRDs refuse them outright), so
    they are checked as the v1 objects they become, by the parsers.
    """
    from karpy.api.crds import V1BETA1, read_schemas

    return {key: schema for key, schema in read_schemas().items() if not key[0].endswith(f"/{V1BETA1}")}


def manifest_errors(raw: Mapping[str, object], api_version: str, kind: str) -> list[ManifestError]:
    """The structural errors of a whole object against its CRD's schema, but for metadata and status.

    None for a kind that has no CRD of karpy's (Kubernetes' own kinds).
    """
    schema = served_schemas().get((api_version, kind))
    if schema is None:
        return []
    checked = {key: item for key, item in raw.items() if str(key) not in UNCHECKED_ROOT_FIELDS}
    return list(schema_errors(checked, schema))
