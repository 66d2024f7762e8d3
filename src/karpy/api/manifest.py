"""From YAML text to typed objects, with errors a user can act on.

A user's manifests arrive as files holding one or many YAML documents, often
mixed with kinds karpy does not act on. Each document is parsed on its own:
a bad one yields one error line naming the file, the object and the field
(``nodepool.yaml: NodePool "default": spec.limits.cpu: must not be negative``)
and the good ones are kept, so one typo does not hide everything else.
Kinds that describe the cluster but do not affect node autoscaling
(Service, ConfigMap, …) are skipped with a note; kinds karpy has
never heard of are errors, because a misspelt kind is a mistake worth
catching before it reaches a cluster. For the same reason a field the kind
does not have (``consolidationPolcy``, ``requirments``) is an error, as the
API server's strict decoding makes it, and the object is not used
(:mod:`karpy.api.fields`): its intent is not what karpy would read.

The text comes from :mod:`karpy.api.text` (a file's bytes decoded as kubectl
decodes them). YAML that is valid but would make the loader recurse past
Python's limit or expand aliases without bound (a "billion laughs") is
refused by :class:`KubernetesYAMLLoader` with one line, like a syntax error,
and so is a key written twice in one mapping, which Kubernetes' decoder
refuses and PyYAML would quietly resolve to its last value, and a document
longer than :data:`MAX_DOCUMENT_CHARS` (the API server's limit on one request).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import cast

import yaml

from karpy.api._reader import FieldReader, ManifestError
from karpy.api.admission import LimitRange, RuntimeClass
from karpy.api.capacitybuffer import API_VERSION as CAPACITY_BUFFER_API_VERSION
from karpy.api.capacitybuffer import CapacityBuffer, NamedPodTemplate
from karpy.api.core import (
    CronJob,
    DaemonSet,
    Deployment,
    Job,
    Namespace,
    Node,
    PersistentVolume,
    PersistentVolumeClaim,
    Pod,
    PodDisruptionBudget,
    PriorityClass,
    ReplicaSet,
    StatefulSet,
)
from karpy.api.fields import did_you_mean, unknown_fields
from karpy.api.hpa import HorizontalPodAutoscaler
from karpy.api.kubevalidation import refusal
from karpy.api.nodeclaim import NodeClaim
from karpy.api.nodeclass import EC2_GROUP, KWOK_GROUP, EC2NodeClass, KWOKNodeClass
from karpy.api.nodeoverlay import API_VERSION as NODE_OVERLAY_API_VERSION
from karpy.api.nodeoverlay import NodeOverlay
from karpy.api.nodepool import API_VERSION_V1, API_VERSION_V1BETA1, GROUP, NodePool
from karpy.api.service import ReplicationController, Service
from karpy.api.storage import CSINode, StorageClass
from karpy.api.structural import manifest_errors

# Kinds a cluster's manifests commonly hold that have no bearing on node autoscaling.
IGNORED_KINDS = frozenset(
    {
        "ConfigMap",
        "Secret",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
        "Ingress",
        "NetworkPolicy",
        "CustomResourceDefinition",
    }
)

Parser = Callable[[FieldReader, str], object]

PARSERS: dict[tuple[str, str], Parser] = {
    (API_VERSION_V1, "NodePool"): NodePool.parse,
    (API_VERSION_V1BETA1, "NodePool"): NodePool.parse,
    (API_VERSION_V1, "NodeClaim"): lambda reader, _: NodeClaim.parse(reader),
    (f"{EC2_GROUP}/v1", "EC2NodeClass"): EC2NodeClass.parse,
    (f"{EC2_GROUP}/v1beta1", "EC2NodeClass"): EC2NodeClass.parse,
    (f"{KWOK_GROUP}/v1alpha1", "KWOKNodeClass"): lambda reader, _: KWOKNodeClass.parse(reader),
    ("v1", "Pod"): lambda reader, _: Pod.parse(reader),
    ("v1", "Node"): lambda reader, _: Node.parse(reader),
    ("apps/v1", "Deployment"): lambda reader, _: Deployment.parse(reader),
    ("apps/v1", "ReplicaSet"): lambda reader, _: ReplicaSet.parse(reader),
    ("apps/v1", "DaemonSet"): lambda reader, _: DaemonSet.parse(reader),
    ("apps/v1", "StatefulSet"): lambda reader, _: StatefulSet.parse(reader),
    ("batch/v1", "Job"): lambda reader, _: Job.parse(reader),
    ("batch/v1", "CronJob"): lambda reader, _: CronJob.parse(reader),
    ("scheduling.k8s.io/v1", "PriorityClass"): lambda reader, _: PriorityClass.parse(reader),
    ("v1", "Namespace"): lambda reader, _: Namespace.parse(reader),
    ("policy/v1", "PodDisruptionBudget"): lambda reader, _: PodDisruptionBudget.parse(reader),
    ("v1", "PersistentVolumeClaim"): lambda reader, _: PersistentVolumeClaim.parse(reader),
    ("v1", "PersistentVolume"): lambda reader, _: PersistentVolume.parse(reader),
    ("v1", "Service"): lambda reader, _: Service.parse(reader),
    ("v1", "ReplicationController"): lambda reader, _: ReplicationController.parse(reader),
    ("storage.k8s.io/v1", "StorageClass"): lambda reader, _: StorageClass.parse(reader),
    ("storage.k8s.io/v1", "CSINode"): lambda reader, _: CSINode.parse(reader),
    ("v1", "LimitRange"): lambda reader, _: LimitRange.parse(reader),
    ("node.k8s.io/v1", "RuntimeClass"): lambda reader, _: RuntimeClass.parse(reader),
    ("autoscaling/v2", "HorizontalPodAutoscaler"): lambda reader, _: HorizontalPodAutoscaler.parse(reader),
    (CAPACITY_BUFFER_API_VERSION, "CapacityBuffer"): lambda reader, _: CapacityBuffer.parse(reader),
    ("v1", "PodTemplate"): lambda reader, _: NamedPodTemplate.parse(reader),
    (NODE_OVERLAY_API_VERSION, "NodeOverlay"): lambda reader, _: NodeOverlay.parse(reader),
}
KNOWN_KINDS = frozenset(kind for _, kind in PARSERS)
# Karpenter's kinds before v1beta1 (v0.32), which guides still print, and what took their place.
RETIRED_KARPENTER_KINDS = {
    "Provisioner": f"NodePool ({API_VERSION_V1})",
    "Machine": f"NodeClaim ({API_VERSION_V1})",
    "AWSNodeTemplate": f"EC2NodeClass ({EC2_GROUP}/v1)",
}


# The deepest nesting of collections a document may have, counted through aliases.
# Kubernetes' decoders stop at 10,000 levels (go-yaml's "exceeded max depth", the
# JSON decoder's nesting limit); PyYAML composes recursively, two Python frames a
# level, and Python stops at 1,000 frames, so karpy's bound is lower. Real manifests
# nest a few dozen levels at most (a CRD's openAPIV3Schema is the deepest).
MAX_NESTING_DEPTH = 256
# The most nodes aliases may add to a document. go-yaml (under kubectl) lets aliases
# make up 99% of a document of up to 400,000 decoded nodes and a shrinking share of
# bigger ones ("document contains excessive aliasing"); a plain cap of the same size
# keeps a billion-laughs document to a few seconds of work for anything that walks
# the loaded data, and no manifest needs more.
MAX_ALIAS_NODES = 400_000
# The longest document, in characters: kube-apiserver refuses a request body over 3 MiB
# ("request entity too large"), and kubectl apply sends each document as one request
# (etcd then stores at most 1.5 MiB an object, so a document this long is at its edge).
MAX_DOCUMENT_CHARS = 3 * 1024 * 1024


class YAMLLimitError(yaml.composer.ComposerError):
    """A document nests too deep or its aliases expand too far; ``problem`` says which."""


@dataclass(slots=True)
class _NodeExtent:
    """A node with every alias in it expanded: how many nodes, how many levels of collections."""

    nodes: int
    depth: int
    anchor: str | None = None


class KubernetesYAMLComposer(
    yaml.composer.Composer, yaml.constructor.SafeConstructor, yaml.resolver.Resolver
):
    """YAML read as Kubernetes reads it, from the events of the parser it is mixed with.

    A timestamp stays the string it was written as: PyYAML turns an unquoted
    ``2024-05-01T10:00:00Z`` into a datetime (and fails outright on an
    impossible date); Kubernetes' YAML decoder keeps it a string. A key set
    twice in one mapping is an error, as it is there.

    A document nested deeper than :data:`MAX_NESTING_DEPTH` levels of
    collections, whose aliases add more than :data:`MAX_ALIAS_NODES` nodes, or
    with an alias inside its own anchor (a cycle, which go-yaml refuses too),
    is refused with :class:`YAMLLimitError` at the event where it crosses the
    line. The check watches the parser's events as the composer takes them,
    before the composer recurses into a collection: one pass, no recursion,
    and PyYAML never reaches Python's recursion limit (a ``RecursionError``
    raised deep inside PyYAML would leave the loader half way through a node).
    The extent of each anchored node is remembered, so an alias costs its
    expanded size in arithmetic, without anything being expanded.
    """

    def _start_bounds(self) -> None:
        self.document_start = 0  # where the document being read starts (a character's index)
        self._open: list[_NodeExtent] = []  # the collections being read, outermost first
        self._anchored: dict[str, _NodeExtent] = {}
        self._alias_nodes = 0

    def get_event(self) -> yaml.Event:
        event: yaml.Event = super().get_event()  # type: ignore[misc]  # from the parser mixed in
        if isinstance(event, yaml.DocumentStartEvent):
            self._open, self._anchored, self._alias_nodes = [], {}, 0
            self.document_start = event.start_mark.index if event.start_mark is not None else 0
        elif event.end_mark is not None and event.end_mark.index - self.document_start > MAX_DOCUMENT_CHARS:
            limit = MAX_DOCUMENT_CHARS // 1024**2
            raise self._limit(f"a document longer than {limit} MiB (the API server's request limit)", event)
        if isinstance(event, yaml.CollectionStartEvent):
            if len(self._open) >= MAX_NESTING_DEPTH:
                raise self._limit(f"nested deeper than {MAX_NESTING_DEPTH} levels", event)
            self._open.append(_NodeExtent(nodes=1, depth=1, anchor=event.anchor))
        elif isinstance(event, yaml.CollectionEndEvent):
            self._close(self._open.pop(), event)
        elif isinstance(event, yaml.ScalarEvent):
            self._close(_NodeExtent(nodes=1, depth=0, anchor=event.anchor), event)
        elif isinstance(event, yaml.AliasEvent):
            anchor = event.anchor or ""
            if any(extent.anchor == anchor for extent in self._open):
                raise self._limit(f"alias *{anchor} is inside its own anchor", event)
            target = self._anchored.get(anchor)
            if target is not None:  # an undefined alias is the composer's to report
                self._alias_nodes += target.nodes
                if self._alias_nodes > MAX_ALIAS_NODES:
                    raise self._limit(f"aliases add more than {MAX_ALIAS_NODES:,} nodes", event)
                self._close(_NodeExtent(target.nodes, target.depth), event)
        return event

    def _close(self, extent: _NodeExtent, event: yaml.Event) -> None:
        """``extent`` is complete: remember it if anchored and add it to the collection holding it."""
        if extent.anchor is not None:
            self._anchored[extent.anchor] = extent
        if len(self._open) + extent.depth > MAX_NESTING_DEPTH:
            raise self._limit(f"nested deeper than {MAX_NESTING_DEPTH} levels through aliases", event)
        if self._open:
            parent = self._open[-1]
            parent.nodes += extent.nodes
            parent.depth = max(parent.depth, extent.depth + 1)

    @staticmethod
    def _limit(problem: str, event: yaml.Event) -> YAMLLimitError:
        return YAMLLimitError(None, None, problem, cast(yaml.error.Mark, event.start_mark))

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[object, object]:
        """A mapping whose keys are each written once, as Kubernetes' YAML decoder requires.

        go-yaml refuses a key set twice in one mapping ("already set in map")
        where PyYAML keeps the last value, so a second ``resources:`` in a
        container would quietly replace the first. Keys a merge (``<<: *base``)
        brings in may be overridden, as in go-yaml: only the keys written in
        the mapping itself are compared.
        """
        seen: dict[tuple[type, object], yaml.Node] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node)
            first = seen.setdefault((type(key), key), key_node)
            if first is not key_node:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"key {key!r} already set in map (first at line {first.start_mark.line + 1})",
                    key_node.start_mark,
                )
        return super().construct_mapping(node, deep)


def _timestamp_as_string(loader: KubernetesYAMLComposer, node: yaml.Node) -> str:
    return loader.construct_yaml_str(node)


KubernetesYAMLComposer.add_constructor("tag:yaml.org,2002:timestamp", _timestamp_as_string)  # type: ignore[type-var]


class KubernetesYAMLLoader(KubernetesYAMLComposer, yaml.SafeLoader):
    """:class:`KubernetesYAMLComposer` on PyYAML's own parser, written in Python: the reference."""

    def __init__(self, stream: str) -> None:
        yaml.SafeLoader.__init__(self, stream)
        self._start_bounds()


# kubectl's YAML (go-yaml v2, under sigs.k8s.io/yaml) reads y, Y, n and N as booleans too, besides
# YAML 1.1's yes/no/on/off/true/false, which PyYAML reads as booleans already: ``app: y`` is a
# boolean, which a label refuses, not the string "y".
KubernetesYAMLLoader.bool_values = {**yaml.SafeLoader.bool_values, "y": True, "n": False}
KubernetesYAMLLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:y|Y|n|N)$"), list("yYnN")
)

_LOADER_TABLES = (
    "yaml_implicit_resolvers",
    "yaml_path_resolvers",
    "yaml_constructors",
    "yaml_multi_constructors",
    "bool_values",
)

if yaml.__with_libyaml__:

    class FastKubernetesYAMLLoader(KubernetesYAMLComposer, yaml._yaml.CParser):
        """:class:`KubernetesYAMLComposer` on libyaml's parser: the same events, six times as fast.

        A stream of many small documents spends most of its time in the parser.
        Where libyaml finds an error, :func:`load_documents` reads that document
        again with :class:`KubernetesYAMLLoader`, for PyYAML's words (libyaml
        words its errors its own way, and refuses nesting past 1,000 levels
        having scanned ahead that far, before karpy's own bound could say where).
        """

        def __init__(self, stream: str) -> None:
            yaml._yaml.CParser.__init__(self, stream)
            yaml.composer.Composer.__init__(self)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)
            self._start_bounds()
            # How scalars resolve and nodes construct is the reference loader's, whatever its
            # class was given (a tag, a boolean spelling): one table, read by both loaders.
            for table in _LOADER_TABLES:
                setattr(self, table, getattr(KubernetesYAMLLoader, table))

else:  # PyYAML built without libyaml: its own parser alone
    FastKubernetesYAMLLoader = KubernetesYAMLLoader  # type: ignore[misc, assignment]

# Characters str.splitlines() breaks at, written as escapes so an error stays one line.
_LINE_BREAKS = {ord(char): repr(char)[1:-1] for char in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"}


def one_line(text: str) -> str:
    """``text`` with line breaks escaped: names and values in a message may hold them."""
    return text.translate(_LINE_BREAKS)


@dataclass(frozen=True, slots=True)
class LoadedObject:
    source: str
    api_version: str
    kind: str
    name: str
    obj: object


@dataclass(slots=True)
class LoadResult:
    objects: list[LoadedObject] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add_error(self, text: str) -> None:
        self.errors.append(one_line(text))

    def add_note(self, text: str) -> None:
        self.notes.append(one_line(text))

    def extend(self, other: LoadResult) -> None:
        self.objects.extend(other.objects)
        self.errors.extend(other.errors)
        self.notes.extend(other.notes)


def describe(kind: str, name: str) -> str:
    return f'{kind} "{name}"' if name else kind


def _unknown_kind_hint(kind: str, api_version: str) -> str:
    """What replaced a retired Karpenter kind, or the one known kind close to ``kind``."""
    replacement = RETIRED_KARPENTER_KINDS.get(kind)
    if replacement is not None and api_version.split("/", 1)[0] in (GROUP, EC2_GROUP):
        return f"; Karpenter v0.32 replaced it with {replacement}"
    return did_you_mean(kind, KNOWN_KINDS | IGNORED_KINDS)


def parse_document(raw: object, source: str, index: int, result: LoadResult) -> None:
    """Parse one YAML document (or a List's item) into ``result``."""
    where = f"{source} (document {index + 1})"
    if raw is None:
        return
    if not isinstance(raw, dict):
        result.add_error(f"{where}: expected a Kubernetes object (a mapping), got {type(raw).__name__}")
        return
    reader = FieldReader(raw)
    metadata = raw.get("metadata")
    name_value = metadata.get("name") if isinstance(metadata, dict) else None
    name = str(name_value) if name_value is not None else ""
    kind_value = raw.get("kind")
    api_version_value = raw.get("apiVersion")
    kind = kind_value if isinstance(kind_value, str) else ""
    api_version = api_version_value if isinstance(api_version_value, str) else ""
    label = describe(kind or "object", name)
    if not kind:
        result.add_error(f"{source}: {label}: kind: required")
        return
    if not api_version:
        result.add_error(f"{source}: {label}: apiVersion: required")
        return
    if kind == "List":
        items = raw.get("items")
        if not isinstance(items, list):
            result.add_error(f"{source}: List: items: expected a list")
            return
        for item in items:
            parse_document(item, source, index, result)
        return
    if kind in IGNORED_KINDS:
        result.add_note(f"{source}: {label}: skipped ({kind} does not affect node autoscaling)")
        return
    parser = PARSERS.get((api_version, kind))
    if parser is None:
        if kind in KNOWN_KINDS:
            versions = sorted(version for version, known in PARSERS if known == kind)
            served = " or ".join(versions)
            result.add_error(
                f"{source}: {label}: apiVersion: {kind} is not served as {api_version!r}; use {served}"
            )
        else:
            result.add_error(
                f"{source}: {label}: kind: unknown kind {kind!r} (apiVersion {api_version!r})"
                + _unknown_kind_hint(kind, api_version)
            )
        return
    unknown = unknown_fields(raw, api_version, kind)
    if unknown:
        for error in unknown:
            result.add_error(f"{source}: {label}: {error}")
        return
    obj: object = None
    parse_error: ManifestError | None = None
    try:
        obj = parser(reader, api_version)
    except ManifestError as error:
        parse_error = error
    # What the API server refuses, in its words, before what karpy's parser alone refuses.
    refused = refusal(raw, api_version, kind, parse_error)
    if refused:
        for problem in refused:
            result.add_error(f"{source}: {label}: {problem}")
        return
    # What the parser read may still break the CRD's schema (a budget's nodes written as an
    # integer, a duration of 1.5h): the API server would refuse the object, so karpy does.
    structural = manifest_errors(raw, api_version, kind)
    if structural:
        for problem in structural:
            result.add_error(f"{source}: {label}: {problem}")
        return
    if api_version in (API_VERSION_V1BETA1, f"{EC2_GROUP}/v1beta1"):
        result.add_note(f"{source}: {label}: converted from {api_version} to v1")
        if isinstance(obj, NodePool | EC2NodeClass):
            for change in obj.conversion_notes:
                result.add_note(f"{source}: {label}: {change}")
    result.objects.append(LoadedObject(source, api_version, kind, name, obj))


def load_documents(text: str, source: str, result: LoadResult) -> Iterator[object]:
    """The documents of a YAML stream as plain data; an error goes into ``result`` and ends the stream.

    A syntax error, or a document past the loader's bounds, stops the stream
    where it stands: what follows cannot be read reliably.
    """
    try:
        yield from _documents(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        position = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        kind = "document too complex" if isinstance(error, YAMLLimitError) else "invalid YAML"
        result.add_error(f"{source}{position}: {kind}: {problem}")
    except ValueError as error:  # a value an explicit tag cannot hold ("!!int abc")
        result.add_error(f"{source}: invalid YAML: {error}")


# What libyaml's parser raises: the syntax errors PyYAML's parser words its own way.
_PARSER_ERRORS = (yaml.reader.ReaderError, yaml.scanner.ScannerError, yaml.parser.ParserError)


def _documents(text: str) -> Iterator[object]:
    """The documents of ``text``, read by :class:`FastKubernetesYAMLLoader`.

    Where libyaml's parser finds an error, the stream is read again from the
    start of that document's line by :class:`KubernetesYAMLLoader`, so that
    the error (or the lack of one) is PyYAML's, in its words and at its
    position: libyaml speeds up what parses and changes nothing else.
    """
    loader = FastKubernetesYAMLLoader(text)
    try:
        while loader.check_data():  # type: ignore[no-untyped-call]  # untyped in the stubs
            yield loader.get_data()
        return
    except _PARSER_ERRORS:
        line_start = text.rfind("\n", 0, loader.document_start) + 1
    finally:
        loader.dispose()
    lines_before = text.count("\n", 0, line_start)
    again = KubernetesYAMLLoader(text[line_start:])
    try:
        while again.check_data():  # type: ignore[no-untyped-call]
            yield again.get_data()
    except yaml.MarkedYAMLError as error:
        for mark in (error.context_mark, error.problem_mark):
            if mark is not None:
                mark.line += lines_before
        raise
    finally:
        again.dispose()


def parse_manifests(text: str, source: str) -> LoadResult:
    """Every object in a YAML stream; a syntax error stops the stream where it stands."""
    result = LoadResult()
    for index, document in enumerate(load_documents(text, source, result)):
        parse_document(document, source, index, result)
    return result
