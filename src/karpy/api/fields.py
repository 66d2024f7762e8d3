"""Unknown fields are errors, as ``kubectl apply``'s strict decoding makes them.

A misspelt field name is the quietest mistake a manifest can hold:
``consolidationPolcy: WhenEmpty`` or a NodePool's ``requirments`` parse as
"not set", and the run goes on with the defaults (any architecture, any
consolidation), so the user sees arm64 nodes or a cpu limit ignored and not
why. The API server refuses such a manifest (``strict decoding error: unknown
field "spec.disruption.consolidationPolcy"``); karpy refuses it offline, with
the same words and, when exactly one known name is close
(:func:`difflib.get_close_matches`), a "did you mean".

**Which fields are known.** Parsers read only the fields karpy uses, so what
they read is not the set of valid fields (a Pod's ``image`` or
``livenessProbe`` are valid and unread). The truth is each kind's schema, held
as a compact *field tree*:

- ``0``: any value (a scalar, an int-or-string, a free-form part marked
  ``x-kubernetes-preserve-unknown-fields``, an object the schema leaves open);
- ``{"name": tree, ...}``: an object with exactly these fields;
- ``[tree]``: a list whose items are ``tree``;
- ``{"*": tree}``: a map with keys of the user's choosing and ``tree`` values;
- ``"resources"``: a ResourceList, a map from resource names to quantities;
- ``"@name"``: the definition ``name`` of the same document (PodSpec, ObjectMeta…).

Kubernetes' own kinds come from the OpenAPI document of the API server the
integration tests build (``scripts/gen_kube_fields.py`` writes
``data/kube-fields.json``, with the Kubernetes version); Karpenter's kinds from
the CRD schemas of :mod:`karpy.api.crds`, the same schemas ``karpy crds``
installs, and for v1beta1 from the fields Karpenter's v1beta1 API had. Every
kind is keyed by apiVersion and kind, so a kind whose parser is added later is
checked as soon as its schema is here. ``metadata`` is an ObjectMeta in every
kind; ``status`` is taken as written (users paste ``kubectl get -o yaml``
output, and karpy reads nothing there that a typo could hide).

**Resource names.** A ResourceList's keys are not fields, yet ``limits:
{cpus: 100}`` is the same mistake: the pool has no cpu limit. A key must be a
standard resource name (cpu, memory, ephemeral-storage, storage, pods, nodes,
``hugepages-<size>``) or qualified by a domain (``nvidia.com/gpu``), which is
the rule the API server applies to containers' resources ("must be a standard
resource type or fully qualified"); anything else is an error with a did-you-mean,
since a name no node offers limits or requests nothing. Extended resources
stay free: their names are the device plugins' to choose.

**Formats karpy defines itself** (the Scenario) have no schema apart from
their parser, so their parser's reads are the schema: a :class:`ReadLog`
given to the root :class:`~karpy.api._reader.FieldReader` records the keys
asked for at each mapping (asked, not found: ``has("until")`` makes ``until``
known), and the keys no one asked for are unknown. A new field is then added
in one place, the parser. A mapping read as a map (iterated) is free-form. A
parse that stops at an error leaves the mappings on the error's path half
read, so their unasked keys are not reported (the error is); the parsers read
depth first, so every other mapping visited was read to its end.

**What happens to an object with an unknown field.** ``kubectl apply`` refuses
the whole object; karpy's rule for bad input is that a bad object is reported
and skipped while the good objects of the run are still used. An unknown field
makes the object bad: each unknown field is an error line and the object is
not applied (``karpy validate`` exits 2). A field Karpenter has but karpy
does not implement would be left out of the schemas on purpose and refused the
same way, with an error that says it is unsupported rather than unknown
(``UNSUPPORTED_FIELDS``: the EC2NodeClass' newer launch settings).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Iterator, Mapping
from functools import cache
from importlib import resources
from typing import Any, TypeAlias

from karpy.api._reader import ManifestError
from karpy.api.crds import read_schemas
from karpy.api.quantity import HUGEPAGES_PREFIX

FieldTree: TypeAlias = "int | str | list[FieldTree] | dict[str, FieldTree]"

ANY: FieldTree = 0
RESOURCE_LIST = "resources"
MAP_VALUES = "*"
REFERENCE = "@"
OBJECT_META = "@meta.v1.ObjectMeta"

KUBE_FIELDS_FILE = "kube-fields.json"

STANDARD_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage", "storage", "pods", "nodes"})
# How alike (difflib's ratio) a known name must be to be offered as the one meant.
CLOSE_ENOUGH = 0.75


def tree_from_openapi(schema: Mapping[str, Any], *, bare_object_is_free_form: bool) -> FieldTree:
    """The field tree of an OpenAPI schema (a CRD's openAPIV3Schema, or a /openapi/v2 definition).

    ``$ref`` becomes a reference to the definition's short name. An object
    schema with neither properties nor additionalProperties means "anything"
    in Kubernetes' OpenAPI document (RawExtension, FieldsV1) but "no fields"
    in a CRD (the API server prunes every field a structural schema does not
    list); ``bare_object_is_free_form`` says which document this is.
    """
    if "$ref" in schema:
        return REFERENCE + short_definition_name(str(schema["$ref"]).rsplit("/", 1)[-1])
    if schema.get("x-kubernetes-preserve-unknown-fields") or schema.get("x-kubernetes-int-or-string"):
        return ANY
    kind = schema.get("type")
    if kind == "array":
        items = schema.get("items")
        return [tree_from_openapi(items, bare_object_is_free_form=bare_object_is_free_form)] if items else ANY
    if kind != "object" and "properties" not in schema and "additionalProperties" not in schema:
        return ANY
    properties = schema.get("properties")
    if properties:
        return {
            name: tree_from_openapi(field, bare_object_is_free_form=bare_object_is_free_form)
            for name, field in sorted(properties.items())
        }
    values = schema.get("additionalProperties")
    if isinstance(values, Mapping):
        if _is_quantity(values):
            return RESOURCE_LIST
        return {MAP_VALUES: tree_from_openapi(values, bare_object_is_free_form=bare_object_is_free_form)}
    if values is True or bare_object_is_free_form:
        return ANY
    return {}


def _is_quantity(schema: Mapping[str, Any]) -> bool:
    """A Quantity: a reference to Kubernetes' Quantity, or a CRD's int-or-string (only quantities are)."""
    reference = str(schema.get("$ref", ""))
    return reference.endswith(".api.resource.Quantity") or bool(schema.get("x-kubernetes-int-or-string"))


def short_definition_name(name: str) -> str:
    """``io.k8s.api.core.v1.PodSpec`` as ``core.v1.PodSpec``: the bundled file stays small."""
    for prefix in ("io.k8s.api.", "io.k8s.apimachinery.pkg.apis.", "io.k8s.apimachinery.pkg."):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def object_root(tree: FieldTree) -> FieldTree:
    """A kind's tree with ``metadata`` an ObjectMeta and ``status`` taken as written."""
    if not isinstance(tree, dict):
        return tree
    root = {**tree, "apiVersion": ANY, "kind": ANY, "metadata": OBJECT_META}
    if "status" in tree:
        root["status"] = ANY
    return root


@cache
def kube_fields() -> dict[str, Any]:
    """The bundled field trees of Kubernetes' own kinds (``data/kube-fields.json``)."""
    text = resources.files("karpy.api").joinpath("data", KUBE_FIELDS_FILE).read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def _definitions() -> Mapping[str, FieldTree]:
    definitions: Mapping[str, FieldTree] = kube_fields()["definitions"]
    return definitions


@cache
def kind_trees() -> dict[tuple[str, str], FieldTree]:
    """The field tree of every kind karpy reads from files, by (apiVersion, kind)."""
    trees: dict[tuple[str, str], FieldTree] = {}
    for key, tree in kube_fields()["kinds"].items():
        api_version, kind = key.rsplit("/", 1)
        trees[api_version, kind] = object_root(tree)
    for (api_version, kind), schema in read_schemas().items():
        trees[api_version, kind] = object_root(tree_from_openapi(schema, bare_object_is_free_form=False))
    return trees


# Fields Karpenter has and karpy does not implement, by (apiVersion, kind, path): refused like
# unknown ones (a pool that silently ignored them would not be what was asked for), but saying so.
_EC2_V1 = "karpenter.k8s.aws/v1"
UNSUPPORTED_FIELDS: dict[tuple[str, str, str], str] = {
    (_EC2_V1, "EC2NodeClass", f"spec.{name}"): f"spec.{name} ({what}) is not supported by karpy"
    for name, what in (
        ("placementGroupSelector", "launching into a placement group"),
        ("connectionTracking", "the network interfaces' connection tracking timeouts"),
        ("networkInterfaces", "the instances' network interfaces"),
        ("ipPrefixCount", "prefixes assigned to the primary network interface"),
        ("cpuOptions", "nested virtualization"),
    )
}


def unknown_fields(raw: Mapping[str, object], api_version: str, kind: str) -> list[ManifestError]:
    """One error per unknown field (or resource name) of a manifest; none for kinds without a schema."""
    tree = kind_trees().get((api_version, kind))
    if tree is None:
        return []
    return [
        ManifestError(error.path, f"{UNSUPPORTED_FIELDS[key]}; remove it")
        if (key := (api_version, kind, error.path)) in UNSUPPORTED_FIELDS
        else error
        for error in check(raw, tree)
    ]


def check(value: object, tree: FieldTree, path: str = "") -> Iterator[ManifestError]:
    """The unknown fields of ``value`` against ``tree``; values of the wrong type are left to the parsers."""
    while isinstance(tree, str) and tree.startswith(REFERENCE):
        tree = _definitions().get(tree[len(REFERENCE) :], ANY)
    if tree == RESOURCE_LIST:
        if isinstance(value, Mapping):
            for name in value:
                error = resource_name_error(str(name), _child(path, str(name)))
                if error is not None:
                    yield error
        return
    if isinstance(tree, list):
        if isinstance(value, list):
            for index, item in enumerate(value):
                yield from check(item, tree[0], f"{path}[{index}]")
        return
    if not isinstance(tree, dict) or not isinstance(value, Mapping):
        return
    if MAP_VALUES in tree:
        for key, item in value.items():
            yield from check(item, tree[MAP_VALUES], _child(path, str(key)))
        return
    for key, item in value.items():
        name = str(key)
        where = _child(path, name)
        if name in tree:
            yield from check(item, tree[name], where)
        else:
            yield unknown_field(where, name, tree)


def unknown_field(path: str, name: str, known: Iterable[str]) -> ManifestError:
    """The error for field ``name`` at ``path``, with the one close known name if there is one."""
    return ManifestError(path, f'unknown field "{path}"{did_you_mean(name, known)}')


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` (did you mean "x"?)`` when exactly one of ``known`` is close to ``name``, else empty."""
    close = difflib.get_close_matches(name, list(known), n=2, cutoff=CLOSE_ENOUGH)
    return f' (did you mean "{close[0]}"?)' if len(close) == 1 else ""


def resource_name_error(name: str, path: str) -> ManifestError | None:
    """An error unless ``name`` is a standard resource name or a qualified (extended) one."""
    if name in STANDARD_RESOURCES or name.startswith(HUGEPAGES_PREFIX) or "/" in name:
        return None
    return ManifestError(
        path,
        f'unknown resource name "{name}": must be a standard resource '
        f"({', '.join(sorted(STANDARD_RESOURCES))}, {HUGEPAGES_PREFIX}<size>) "
        f"or fully qualified (example.com/name){did_you_mean(name, STANDARD_RESOURCES)}",
    )


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class ReadLog:
    """The keys a parser asked each mapping for, to find the keys it never asked for."""

    __slots__ = ("_mappings",)

    def __init__(self) -> None:
        # id of the mapping -> (its path, the mapping, the keys asked for or None when free-form).
        # The mapping is held so that its id is not reused while the log lives.
        self._mappings: dict[int, tuple[str, Mapping[str, object], set[str] | None]] = {}

    def asked(self, data: Mapping[str, object], path: str, key: str) -> None:
        known = self._entry(data, path)
        if known is not None:
            known.add(key)

    def free_form(self, data: Mapping[str, object], path: str) -> None:
        self._entry(data, path)
        self._mappings[id(data)] = (path, data, None)

    def _entry(self, data: Mapping[str, object], path: str) -> set[str] | None:
        entry = self._mappings.get(id(data))
        if entry is None:
            entry = self._mappings[id(data)] = (path, data, set())
        return entry[2]

    def unknown_fields(self, stopped: Iterable[tuple[str, str]] = ()) -> list[ManifestError]:
        """The keys never asked for.

        ``stopped`` holds, for each read an error ended, where the read was (the
        path of the mapping it began at) and the error's path: the mappings from
        the one down to the other were left half read, so their unasked keys are
        not reported (the error is).
        """
        stops = list(stopped)
        errors: list[ManifestError] = []
        for path, data, known in self._mappings.values():
            if known is None or any(
                _on_path(scope, path) and _on_path(path, error_path) for scope, error_path in stops
            ):
                continue
            errors.extend(
                unknown_field(_child(path, str(key)), str(key), known) for key in data if key not in known
            )
        return errors


def _on_path(path: str, error_path: str) -> bool:
    """Whether the mapping at ``path`` holds the field at ``error_path`` (or is that field)."""
    return not path or error_path == path or error_path.startswith((f"{path}.", f"{path}["))
