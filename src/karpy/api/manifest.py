"""From YAML text to typed objects, with errors a user can act on.

A user's manifests arrive as files holding one or many YAML documents, often
mixed with kinds karpy does not act on. Each document is parsed on its own:
a bad one yields one error line naming the file, the object and the field
(``nodepool.yaml: NodePool "default": spec.limits.cpu: must not be negative``)
and the good ones are kept, so one typo does not hide everything else.
Kinds that describe the cluster but do not affect node autoscaling
(Namespace, Service, ConfigMap, …) are skipped with a note; kinds karpy has
never heard of are errors, because a misspelt kind is a mistake worth
catching before it reaches a cluster. For the same reason a field the kind
does not have (``consolidationPolcy``, ``requirments``) is an error, as the
API server's strict decoding makes it, and the object is not used
(:mod:`karpy.api.fields`): its intent is not what karpy would read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import yaml

from karpy.api._reader import FieldReader, ManifestError
from karpy.api.core import (
    DaemonSet,
    Deployment,
    Node,
    PersistentVolume,
    PersistentVolumeClaim,
    Pod,
    PodDisruptionBudget,
    ReplicaSet,
)
from karpy.api.fields import did_you_mean, unknown_fields
from karpy.api.nodeclaim import NodeClaim
from karpy.api.nodeclass import EC2_GROUP, KWOK_GROUP, EC2NodeClass, KWOKNodeClass
from karpy.api.nodepool import API_VERSION_V1, API_VERSION_V1BETA1, GROUP, NodePool

# Kinds a cluster's manifests commonly hold that have no bearing on node autoscaling.
IGNORED_KINDS = frozenset(
    {
        "Namespace",
        "Service",
        "ConfigMap",
        "Secret",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
        "Ingress",
        "NetworkPolicy",
        "HorizontalPodAutoscaler",
        "PriorityClass",
        "StorageClass",
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
    ("policy/v1", "PodDisruptionBudget"): lambda reader, _: PodDisruptionBudget.parse(reader),
    ("v1", "PersistentVolumeClaim"): lambda reader, _: PersistentVolumeClaim.parse(reader),
    ("v1", "PersistentVolume"): lambda reader, _: PersistentVolume.parse(reader),
}
KNOWN_KINDS = frozenset(kind for _, kind in PARSERS)
# Karpenter's kinds before v1beta1 (v0.32), which guides still print, and what took their place.
RETIRED_KARPENTER_KINDS = {
    "Provisioner": f"NodePool ({API_VERSION_V1})",
    "Machine": f"NodeClaim ({API_VERSION_V1})",
    "AWSNodeTemplate": f"EC2NodeClass ({EC2_GROUP}/v1)",
}


class KubernetesYAMLLoader(yaml.SafeLoader):
    """YAML read as Kubernetes reads it: a timestamp stays the string it was written as.

    PyYAML turns an unquoted ``2024-05-01T10:00:00Z`` into a datetime (and fails
    outright on an impossible date); Kubernetes' YAML decoder keeps it a string.
    """


def _timestamp_as_string(loader: KubernetesYAMLLoader, node: yaml.Node) -> str:
    return loader.construct_yaml_str(node)


KubernetesYAMLLoader.add_constructor("tag:yaml.org,2002:timestamp", _timestamp_as_string)

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
    try:
        obj = parser(reader, api_version)
    except ManifestError as error:
        result.add_error(f"{source}: {label}: {error}")
        return
    if api_version in (API_VERSION_V1BETA1, f"{EC2_GROUP}/v1beta1"):
        result.add_note(f"{source}: {label}: converted from {api_version} to v1")
        if isinstance(obj, NodePool | EC2NodeClass):
            for change in obj.conversion_notes:
                result.add_note(f"{source}: {label}: {change}")
    result.objects.append(LoadedObject(source, api_version, kind, name, obj))


def parse_manifests(text: str, source: str) -> LoadResult:
    """Every object in a YAML stream; a syntax error stops the stream where it stands."""
    result = LoadResult()
    documents = yaml.load_all(text, Loader=KubernetesYAMLLoader)
    index = 0
    while True:
        try:
            document = next(documents)
        except StopIteration:
            return result
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            position = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
            problem = getattr(error, "problem", None) or str(error).splitlines()[0]
            result.add_error(f"{source}{position}: invalid YAML: {problem}")
            return result
        except ValueError as error:  # a value an explicit tag cannot hold ("!!int abc")
            result.add_error(f"{source}: invalid YAML: {error}")
            return result
        parse_document(document, source, index, result)
        index += 1
