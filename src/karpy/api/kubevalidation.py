"""kube-apiserver's validation of the Kubernetes objects karpy reads, in its words.

``kubectl apply`` sends a manifest to the API server, which first decodes it
into Go types (a label value ``true`` or ``1`` is not a string: "json: cannot
unmarshal bool into Go struct field ObjectMeta.metadata.labels of type
string"; a ``priority`` of 3000000000 does not fit its int32) and then
validates it (``spec.containers[1].name: Duplicate value: "c"``). An object
refused there never runs in a cluster, so it must not run in the simulator:
a what-if built on a Deployment that could never exist answers nothing.

:func:`refusal` takes a document as loaded (plain data), with what karpy's
parser made of it, and returns what the API server would answer, as
:class:`ManifestError` values whose path and message are the API server's:
a decoding error alone (the API server stops there), or every validation
error. Only the rules are taken from
Kubernetes (``pkg/apis/core/validation``, ``pkg/apis/apps/validation``,
``pkg/apis/batch/validation``, apimachinery's ``IsQualifiedName`` and
friends), not its code; ``tests/integration/test_kube_validation.py`` sends
the same objects to a real API server so the two cannot drift.

It is applied where manifests are read for ``karpy validate`` and ``karpy
simulate``. Objects ``karpy run`` reads from a cluster were admitted already,
so it is not applied there.

Two admission rules are checked with the object, since every pod of a
template breaking them would be refused (the PodOverhead rule: ``overhead``
needs a RuntimeClass that sets it). The Priority admission rule (a
``priorityClassName`` naming a class that exists) needs the other objects of
the run: :func:`missing_priority_class` says it, for the callers that know
which classes exist.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence

from karpy.api._reader import ManifestError
from karpy.api.admission import OVERHEAD_WITHOUT_RUNTIME_CLASS
from karpy.api.core import SYSTEM_PRIORITY_CLASSES, WHEN_UNSATISFIABLE, label_selector_matches
from karpy.api.limits import (
    DNS1123_LABEL_FMT,
    DNS1123_LABEL_MAX,
    DNS1123_SUBDOMAIN_FMT,
    DNS1123_SUBDOMAIN_MAX,
    INT32_MAX,
    LABEL_NAME_MAX,
    QUALIFIED_NAME_FMT,
)
from karpy.api.quantity import HUGEPAGES_PREFIX, Quantity, QuantityError
from karpy.api.taints import EFFECTS as TAINT_EFFECTS

# apimachinery's messages (k8s.io/apimachinery/pkg/util/validation); its formats are karpy.api.limits'.
_QUALIFIED_NAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
_LABEL_VALUE_FMT = f"({QUALIFIED_NAME_FMT})?"
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
_DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character"
)
_DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character"
)
_ANNOTATIONS_MAX_BYTES = 256 * 1024
_HIGHEST_USER_PRIORITY = 1_000_000_000
# What resource.ParseQuantity can read at all (its ErrFormatWrong says this pattern).
_QUANTITY_FORMAT = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")

POD_KINDS_PATHS: dict[tuple[str, str], str] = {
    ("v1", "Pod"): "spec",
    ("apps/v1", "Deployment"): "spec.template.spec",
    ("apps/v1", "ReplicaSet"): "spec.template.spec",
    ("apps/v1", "DaemonSet"): "spec.template.spec",
    ("apps/v1", "StatefulSet"): "spec.template.spec",
    ("batch/v1", "Job"): "spec.template.spec",
    ("batch/v1", "CronJob"): "spec.jobTemplate.spec.template.spec",
}
# The kinds whose objects this module validates: apimachinery's rules for every Kubernetes kind karpy reads.
KUBE_KINDS = frozenset(
    {
        *POD_KINDS_PATHS,
        ("v1", "Node"),
        ("v1", "Namespace"),
        ("v1", "PersistentVolumeClaim"),
        ("v1", "PersistentVolume"),
        ("policy/v1", "PodDisruptionBudget"),
        ("scheduling.k8s.io/v1", "PriorityClass"),
        ("autoscaling/v2", "HorizontalPodAutoscaler"),
    }
)
_CLUSTER_SCOPED = frozenset({"Node", "Namespace", "PersistentVolume", "PriorityClass"})
# The Go type holding a workload's spec, as the decoder names it.
_SPEC_TYPES = {
    "Deployment": "DeploymentSpec",
    "ReplicaSet": "ReplicaSetSpec",
    "StatefulSet": "StatefulSetSpec",
    "DaemonSet": "DaemonSetSpec",
    "Job": "JobSpec",
}
# Priority classes every cluster has (the API server creates them at start-up).
BUILTIN_PRIORITY_CLASSES = frozenset(SYSTEM_PRIORITY_CLASSES)
# The workloads whose pods must restart always; their selector must select the template's pods.
_SELECTOR_REQUIRED_KINDS = frozenset({"Deployment", "ReplicaSet", "DaemonSet", "StatefulSet"})
# The noun of "empty selector is invalid for ..." (a ReplicaSet's says deployment too).
_SELECTOR_NOUNS = {
    "Deployment": "deployment",
    "ReplicaSet": "deployment",
    "DaemonSet": "daemonset",
    "StatefulSet": "statefulset",
}
_QOS_RESOURCES = frozenset({"cpu", "memory"})
_POD_RESTART_POLICIES = ("Always", "OnFailure", "Never")
_TOLERATION_OPERATORS = ("Equal", "Exists")


class DecodeError(Exception):
    """The document cannot be decoded into the kind's Go types; the API server stops at the first."""


# -- the words ----------------------------------------------------------------------------------


def _regex_error(message: str, fmt: str, *examples: str) -> str:
    shown = " or ".join(f"'{example}', " for example in examples)
    return f"{message} (e.g. {shown}regex used for validation is '{fmt}')"


def _go_value(value: object) -> str:
    """A value as field.Invalid shows it: strings quoted, numbers bare, maps as JSON."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)


def invalid(path: str, value: object, detail: str) -> ManifestError:
    return ManifestError(path, f"Invalid value: {_go_value(value)}: {detail}")


def required(path: str, detail: str = "") -> ManifestError:
    return ManifestError(path, f"Required value: {detail}" if detail else "Required value")


def unsupported(path: str, value: object, supported: Sequence[str]) -> ManifestError:
    listed = ", ".join(f'"{item}"' for item in supported)
    return ManifestError(path, f"Unsupported value: {_go_value(value)}: supported values: {listed}")


def duplicate(path: str, value: object) -> ManifestError:
    return ManifestError(path, f"Duplicate value: {_go_value(value)}")


def forbidden(path: str, detail: str) -> ManifestError:
    return ManifestError(path, f"Forbidden: {detail}")


def dns1123_label_errors(value: str) -> list[str]:
    errors = []
    if len(value) > DNS1123_LABEL_MAX:
        errors.append(f"must be no more than {DNS1123_LABEL_MAX} characters")
    if not re.fullmatch(DNS1123_LABEL_FMT, value):
        errors.append(_regex_error(_DNS1123_LABEL_MSG, DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return errors


def dns1123_subdomain_errors(value: str, *, unit: str = "characters") -> list[str]:
    """Why ``value`` is not a DNS-1123 subdomain; a label key's prefix counts its length in bytes."""
    errors = []
    if len(value) > DNS1123_SUBDOMAIN_MAX:
        errors.append(f"must be no more than {DNS1123_SUBDOMAIN_MAX} {unit}")
    if not re.fullmatch(DNS1123_SUBDOMAIN_FMT, value):
        errors.append(_regex_error(_DNS1123_SUBDOMAIN_MSG, DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errors


def qualified_name_errors(value: str) -> list[str]:
    """apimachinery's IsQualifiedName: ``[prefix/]name``, the syntax of label keys and annotation keys."""
    parts = value.split("/")
    errors: list[str] = []
    if len(parts) > 2:
        return [
            "a valid label key "
            + _regex_error(_QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            errors += [f"prefix part {error}" for error in dns1123_subdomain_errors(prefix, unit="bytes")]
    if not name:
        errors.append("name part must be non-empty")
    elif len(name.encode()) > LABEL_NAME_MAX:
        errors.append(f"name part must be no more than {LABEL_NAME_MAX} bytes")
    if not re.fullmatch(QUALIFIED_NAME_FMT, name):
        errors.append(
            "name part "
            + _regex_error(_QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
        )
    return errors


def label_value_errors(value: str) -> list[str]:
    errors = []
    if len(value.encode()) > LABEL_NAME_MAX:
        errors.append(f"must be no more than {LABEL_NAME_MAX} bytes")
    if not re.fullmatch(_LABEL_VALUE_FMT, value):
        errors.append(_regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errors


# -- decoding -----------------------------------------------------------------------------------


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, list):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return "string"


def _no_index(path: str) -> str:
    return re.sub(r"\[[^]]*\]", "", path)


def _cannot_unmarshal(what: str, go_type: str, path: str, target: str) -> DecodeError:
    return DecodeError(
        f"json: cannot unmarshal {what} into Go struct field {go_type}.{_no_index(path)} of type {target}"
    )


def _decode_string(value: object, go_type: str, path: str) -> None:
    if value is not None and not isinstance(value, str):
        raise _cannot_unmarshal(_json_type(value), go_type, path, "string")


def _decode_string_map(value: object, go_type: str, path: str) -> None:
    if isinstance(value, Mapping):
        for item in value.values():
            _decode_string(item, go_type, path)


def _decode_string_list(value: object, go_type: str, path: str) -> None:
    if isinstance(value, list):
        for item in value:
            _decode_string(item, go_type, path)


def _decode_int32(value: object, go_type: str, path: str) -> None:
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return  # a value of another type is the parsers' to report
    if isinstance(value, float) and not value.is_integer():
        raise _cannot_unmarshal(f"number {value!r}", go_type, path, "int32")
    if not -(INT32_MAX + 1) <= value <= INT32_MAX:
        raise _cannot_unmarshal(f"number {_go_number(value)}", go_type, path, "int32")


def _go_number(value: int | float) -> str:
    if isinstance(value, float):
        return f"{value:g}".replace("e+0", "e+").replace("e-0", "e-")
    return str(value)


def _mapping(value: object) -> Mapping[str, object]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _null_keys(value: object, path: str = "") -> Iterator[str]:
    """Where a mapping has a null key: YAML allows it, JSON (and so the API server) does not."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if key is None:
                yield path or "the top level"
            else:
                yield from _null_keys(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _null_keys(item, f"{path}[{index}]")


def _decode_meta(metadata: object, path: str) -> None:
    meta = _mapping(metadata)
    for key in ("labels", "annotations"):
        _decode_string_map(meta.get(key), "ObjectMeta", f"{path}.{key}")
    for key in ("name", "namespace", "generateName"):
        _decode_string(meta.get(key), "ObjectMeta", f"{path}.{key}")


def _decode_selector(selector: object, path: str) -> None:
    reader = _mapping(selector)
    _decode_string_map(reader.get("matchLabels"), "LabelSelector", f"{path}.matchLabels")
    for index, expression in enumerate(_list(reader.get("matchExpressions"))):
        where = f"{path}.matchExpressions[{index}]"
        for key in ("key", "operator"):
            _decode_string(_mapping(expression).get(key), "LabelSelectorRequirement", f"{where}.{key}")
        _decode_string_list(_mapping(expression).get("values"), "LabelSelectorRequirement", f"{where}.values")


def _decode_quantities(resources: object) -> None:
    """A ResourceList's values: a quantity the API server's decoder cannot read refuses the object."""
    for value in _mapping(resources).values():
        if isinstance(value, str) and not _QUANTITY_FORMAT.fullmatch(value):
            raise DecodeError(f"quantities must match the regular expression '{_QUANTITY_FORMAT.pattern}'")


def _decode_pod_spec(spec: Mapping[str, object], path: str) -> None:
    _decode_quantities(spec.get("overhead"))
    pod_resources = _mapping(spec.get("resources"))
    for key in ("requests", "limits"):
        _decode_quantities(pod_resources.get(key))
    _decode_string_map(spec.get("nodeSelector"), "PodSpec", f"{path}.nodeSelector")
    _decode_int32(spec.get("priority"), "PodSpec", f"{path}.priority")
    for key in ("priorityClassName", "restartPolicy", "schedulerName", "nodeName", "runtimeClassName"):
        _decode_string(spec.get(key), "PodSpec", f"{path}.{key}")
    for group in ("initContainers", "containers"):
        for index, container in enumerate(_list(spec.get(group))):
            where = f"{path}.{group}[{index}]"
            for key in ("name", "image"):
                _decode_string(_mapping(container).get(key), "Container", f"{where}.{key}")
            resources = _mapping(_mapping(container).get("resources"))
            for key in ("requests", "limits"):
                _decode_quantities(resources.get(key))
            for port_index, port in enumerate(_list(_mapping(container).get("ports"))):
                for key in ("containerPort", "hostPort"):
                    _decode_int32(
                        _mapping(port).get(key), "ContainerPort", f"{where}.ports[{port_index}].{key}"
                    )
    for index, toleration in enumerate(_list(spec.get("tolerations"))):
        for key in ("key", "operator", "value", "effect"):
            _decode_string(_mapping(toleration).get(key), "Toleration", f"{path}.tolerations[{index}].{key}")
    for index, constraint in enumerate(_list(spec.get("topologySpreadConstraints"))):
        where = f"{path}.topologySpreadConstraints[{index}]"
        for key in ("maxSkew", "minDomains"):
            _decode_int32(_mapping(constraint).get(key), "TopologySpreadConstraint", f"{where}.{key}")
        _decode_selector(_mapping(constraint).get("labelSelector"), f"{where}.labelSelector")
    affinity = _mapping(spec.get("affinity"))
    node_affinity = _mapping(affinity.get("nodeAffinity"))
    terms = _mapping(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")).get(
        "nodeSelectorTerms"
    )
    node_terms = [
        (
            f"{path}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}]",
            term,
        )
        for i, term in enumerate(_list(terms))
    ] + [
        (
            f"{path}.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[{i}].preference",
            _mapping(item).get("preference"),
        )
        for i, item in enumerate(_list(node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution")))
    ]
    for where, term in node_terms:
        for field_name in ("matchExpressions", "matchFields"):
            for index, expression in enumerate(_list(_mapping(term).get(field_name))):
                _decode_string_list(
                    _mapping(expression).get("values"),
                    "NodeSelectorRequirement",
                    f"{where}.{field_name}[{index}].values",
                )
    for kind in ("podAffinity", "podAntiAffinity"):
        section = _mapping(affinity.get(kind))
        base = f"{path}.affinity.{kind}"
        pod_terms = [
            (f"{base}.requiredDuringSchedulingIgnoredDuringExecution[{i}]", term)
            for i, term in enumerate(_list(section.get("requiredDuringSchedulingIgnoredDuringExecution")))
        ] + [
            (
                f"{base}.preferredDuringSchedulingIgnoredDuringExecution[{i}].podAffinityTerm",
                _mapping(item).get("podAffinityTerm"),
            )
            for i, item in enumerate(_list(section.get("preferredDuringSchedulingIgnoredDuringExecution")))
        ]
        for where, term in pod_terms:
            for key in ("labelSelector", "namespaceSelector"):
                _decode_selector(_mapping(term).get(key), f"{where}.{key}")


def _decode(raw: Mapping[str, object], kind: str, pod_spec_path: str | None) -> None:
    """Raise :class:`DecodeError` where the API server's decoder would refuse the document."""
    for where in _null_keys(raw):
        raise DecodeError(
            f"error converting YAML to JSON: unsupported map key of type: <nil> (a null key in {where})"
        )
    _decode_meta(raw.get("metadata"), "metadata")
    spec = _mapping(raw.get("spec"))
    spec_type = _SPEC_TYPES.get(kind)
    if spec_type is not None:
        for key in ("replicas", "parallelism", "completions", "backoffLimit", "minReadySeconds"):
            _decode_int32(spec.get(key), spec_type, f"spec.{key}")
        _decode_selector(spec.get("selector"), "spec.selector")
    if kind == "PodDisruptionBudget":
        _decode_selector(spec.get("selector"), "spec.selector")
    if kind == "PriorityClass":
        _decode_int32(raw.get("value"), "PriorityClass", "value")
    if pod_spec_path is None:
        return
    if pod_spec_path != "spec":
        template_path = pod_spec_path.removesuffix(".spec")
        _decode_meta(_mapping(_at(raw, template_path)).get("metadata"), f"{template_path}.metadata")
    _decode_pod_spec(_mapping(_at(raw, pod_spec_path)), pod_spec_path)


def _at(raw: Mapping[str, object], path: str) -> object:
    value: object = raw
    for key in path.split("."):
        value = _mapping(value).get(key)
    return value


# -- validation ---------------------------------------------------------------------------------


def _validate_labels(labels: object, path: str) -> Iterator[ManifestError]:
    for key, value in _mapping(labels).items():
        for error in qualified_name_errors(str(key)):
            yield invalid(path, str(key), error)
        text = value if isinstance(value, str) else ""
        for error in label_value_errors(text):
            yield invalid(path, text, error)


def _validate_annotations(annotations: object, path: str) -> Iterator[ManifestError]:
    size = 0
    for key, value in _mapping(annotations).items():
        for error in qualified_name_errors(str(key).lower()):
            yield invalid(path, str(key), error)
        size += len(str(key).encode()) + len(str(value or "").encode())
    if size > _ANNOTATIONS_MAX_BYTES:
        yield ManifestError(path, f"Too long: may not be more than {_ANNOTATIONS_MAX_BYTES} bytes")


def _validate_object_meta(raw: Mapping[str, object], kind: str) -> Iterator[ManifestError]:
    metadata = _mapping(raw.get("metadata"))
    name = metadata.get("name")
    if not name and not metadata.get("generateName"):
        yield required("metadata.name", "name or generateName is required")
    elif isinstance(name, str) and name:
        name_errors = dns1123_label_errors if kind == "Namespace" else dns1123_subdomain_errors
        for error in name_errors(name):
            yield invalid("metadata.name", name, error)
    namespace = metadata.get("namespace")
    if kind not in _CLUSTER_SCOPED and isinstance(namespace, str) and namespace:
        for error in dns1123_label_errors(namespace):
            yield invalid("metadata.namespace", namespace, error)
    yield from _validate_labels(metadata.get("labels"), "metadata.labels")
    yield from _validate_annotations(metadata.get("annotations"), "metadata.annotations")


def _quantity(value: object) -> Quantity | None:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    try:
        return Quantity.parse(value)
    except QuantityError:
        return None  # a malformed quantity is the parsers' to report


def _is_native(name: str) -> bool:
    return "/" not in name or "kubernetes.io/" in name


def _is_extended(name: str) -> bool:
    return not _is_native(name) and not name.startswith("requests.")


def _overcommit_allowed(name: str) -> bool:
    return _is_native(name) and not name.startswith(HUGEPAGES_PREFIX)


def _hugepage_size(name: str) -> Quantity | None:
    """The page size of a ``hugepages-<size>`` resource, or None."""
    if not name.startswith(HUGEPAGES_PREFIX):
        return None
    return _quantity(name[len(HUGEPAGES_PREFIX) :])


def _validate_resources(
    resources: Mapping[str, object], path: str, *, default_requests: bool
) -> Iterator[ManifestError]:
    """A container's requests and limits, as ValidateResourceRequirements checks them.

    A Pod's container gets its limits as the requests it does not set before
    it is validated; a template's does not (that defaulting is a Pod's only).
    """
    limits = {str(name): _quantity(value) for name, value in _mapping(resources.get("limits")).items()}
    requests = {str(name): _quantity(value) for name, value in _mapping(resources.get("requests")).items()}
    if default_requests:
        requests = {**limits, **requests}
    hugepages = cpu_or_memory = False
    for kind, amounts in (("limits", limits), ("requests", requests)):
        for name, quantity in amounts.items():
            hugepages |= name.startswith(HUGEPAGES_PREFIX)
            cpu_or_memory |= name in _QOS_RESOURCES
            if quantity is None:
                continue
            where = f"{path}.{kind}[{name}]"
            if quantity.is_negative:
                yield invalid(where, str(quantity), "must be greater than or equal to 0")
            if _is_extended(name) and quantity.milli() % 1000:
                yield invalid(where, str(quantity), "must be an integer")
            page = _hugepage_size(name)
            if (
                page is not None
                and not page.is_negative
                and not page.is_zero
                and (quantity.is_negative or quantity.ceil() % page.ceil())
            ):
                yield invalid(where, str(quantity), f"{quantity} is not positive integer multiple of {name}")
    for name, quantity in requests.items():
        if quantity is None:
            continue
        if name in limits:
            limit = limits[name]
            if limit is None:
                continue
            if quantity != limit and not _overcommit_allowed(name):
                yield invalid(f"{path}.requests", str(quantity), f"must be equal to {name} limit of {limit}")
            elif quantity > limit:
                yield invalid(
                    f"{path}.requests",
                    str(quantity),
                    f"must be less than or equal to {name} limit of {limit}",
                )
        elif not _overcommit_allowed(name):
            yield required(f"{path}.limits", "Limit must be set for non overcommitable resources")
    if hugepages and not cpu_or_memory:
        yield forbidden(path, "HugePages require cpu or memory")


def _validate_container(
    container: Mapping[str, object], path: str, *, default_requests: bool
) -> Iterator[ManifestError]:
    yield from _validate_resources(
        _mapping(container.get("resources")), f"{path}.resources", default_requests=default_requests
    )
    for index, port in enumerate(_list(container.get("ports"))):
        where = f"{path}.ports[{index}]"
        container_port = _mapping(port).get("containerPort")
        if isinstance(container_port, int) and not isinstance(container_port, bool):
            if container_port == 0:
                yield required(f"{where}.containerPort")
            elif not 1 <= container_port <= 65535:
                yield invalid(
                    f"{where}.containerPort", container_port, "must be between 1 and 65535, inclusive"
                )
        host_port = _mapping(port).get("hostPort")
        if isinstance(host_port, int) and not isinstance(host_port, bool) and not 0 <= host_port <= 65535:
            yield invalid(f"{where}.hostPort", host_port, "must be between 1 and 65535, inclusive")


def _validate_containers(spec: Mapping[str, object], path: str, *, is_pod: bool) -> Iterator[ManifestError]:
    containers = _list(spec.get("containers"))
    if not containers:
        yield required(f"{path}.containers")
    names: set[str] = set()
    # The containers' names are taken first: an init container is the duplicate of a container.
    for group in ("containers", "initContainers"):
        for index, item in enumerate(_list(spec.get(group))):
            container = _mapping(item)
            where = f"{path}.{group}[{index}]"
            name = container.get("name")
            if not name:
                yield required(f"{where}.name")
            elif isinstance(name, str):
                for error in dns1123_label_errors(name):
                    yield invalid(f"{where}.name", name, error)
                if name in names:
                    yield duplicate(f"{where}.name", name)
                names.add(name)
            yield from _validate_container(container, where, default_requests=is_pod)
    yield from _validate_host_ports(containers, path)


def _validate_host_ports(containers: list[object], path: str) -> Iterator[ManifestError]:
    """No two ports of the containers take the same host port (protocol, host IP and port)."""
    taken: set[str] = set()
    for index, container in enumerate(containers):
        for port_index, item in enumerate(_list(_mapping(container).get("ports"))):
            port = _mapping(item)
            host_port = port.get("hostPort")
            if not isinstance(host_port, int) or isinstance(host_port, bool) or host_port == 0:
                continue
            taken_as = f"{port.get('protocol') or 'TCP'}/{port.get('hostIP') or ''}/{host_port}"
            if taken_as in taken:
                yield duplicate(f"{path}.containers[{index}].ports[{port_index}].hostPort", taken_as)
            taken.add(taken_as)


def _validate_tolerations(spec: Mapping[str, object], path: str) -> Iterator[ManifestError]:
    for index, item in enumerate(_list(spec.get("tolerations"))):
        toleration = _mapping(item)
        where = f"{path}.tolerations[{index}]"
        key = toleration.get("key") or ""
        written_operator = toleration.get("operator") or ""
        operator = written_operator or "Equal"  # an empty operator means Equal
        value = toleration.get("value") or ""
        effect = toleration.get("effect") or ""
        if isinstance(key, str) and key:
            for error in qualified_name_errors(key):
                yield invalid(f"{where}.key", key, error)
        elif operator != "Exists":
            yield invalid(
                f"{where}.operator",
                written_operator,
                'operator must be Exists when `key` is empty, which means "match all values and all keys"',
            )
        if toleration.get("tolerationSeconds") is not None and effect != "NoExecute":
            yield invalid(
                f"{where}.effect", effect, "effect must be 'NoExecute' when `tolerationSeconds` is set"
            )
        if operator == "Equal" and isinstance(value, str):
            for error in label_value_errors(value):
                yield invalid(f"{where}.operator", value, error)
        elif operator == "Exists":
            if value:
                yield invalid(f"{where}.operator", value, "value must be empty when `operator` is 'Exists'")
        elif isinstance(operator, str):
            yield unsupported(f"{where}.operator", operator, _TOLERATION_OPERATORS)
        if effect and effect not in TAINT_EFFECTS:
            yield unsupported(f"{where}.effect", effect, TAINT_EFFECTS)


def _validate_spread(spec: Mapping[str, object], path: str) -> Iterator[ManifestError]:
    constraints = [_mapping(item) for item in _list(spec.get("topologySpreadConstraints"))]
    for index, constraint in enumerate(constraints):
        where = f"{path}.topologySpreadConstraints[{index}]"
        max_skew = constraint.get("maxSkew")
        if isinstance(max_skew, int) and not isinstance(max_skew, bool) and max_skew <= 0:
            yield invalid(f"{where}.maxSkew", max_skew, "must be greater than zero")
        if not constraint.get("topologyKey"):
            yield required(f"{where}.topologyKey", "can not be empty")
        when = constraint.get("whenUnsatisfiable")
        if when not in WHEN_UNSATISFIABLE:
            yield unsupported(f"{where}.whenUnsatisfiable", when or "", WHEN_UNSATISFIABLE)
        min_domains = constraint.get("minDomains")
        if isinstance(min_domains, int) and not isinstance(min_domains, bool):
            if min_domains <= 0:
                yield invalid(f"{where}.minDomains", min_domains, "must be greater than zero")
            if when != "DoNotSchedule":
                yield invalid(
                    f"{where}.minDomains",
                    min_domains,
                    f"can only use minDomains if whenUnsatisfiable=DoNotSchedule, not {when}",
                )
        # A pair said again later is the duplicate at its first place.
        pair = (constraint.get("topologyKey") or "", when or "")
        if any(
            (later.get("topologyKey") or "", later.get("whenUnsatisfiable") or "") == pair
            for later in constraints[index + 1 :]
        ):
            yield duplicate(f"{where}.{{topologyKey, whenUnsatisfiable}}", f"{{{pair[0]}, {pair[1]}}}")


def _validate_pod_spec(
    spec: Mapping[str, object], path: str, kind: str, name: str
) -> Iterator[ManifestError]:
    yield from _validate_containers(spec, path, is_pod=kind == "Pod")
    for key, value in _mapping(spec.get("nodeSelector")).items():
        for error in qualified_name_errors(str(key)):
            yield invalid(f"{path}.nodeSelector", str(key), error)
        for error in label_value_errors(value if isinstance(value, str) else ""):
            yield invalid(f"{path}.nodeSelector", value, error)
    yield from _validate_tolerations(spec, path)
    yield from _validate_spread(spec, path)
    # Any pod's rule, then the workload's own (both are said for a policy no pod has).
    restart = spec.get("restartPolicy")
    if restart not in (None, "", *_POD_RESTART_POLICIES):
        yield unsupported(f"{path}.restartPolicy", restart, _POD_RESTART_POLICIES)
    if kind in _SELECTOR_REQUIRED_KINDS and restart not in (None, "", "Always"):
        yield unsupported(f"{path}.restartPolicy", restart, ("Always",))
    if kind in ("Job", "CronJob") and restart in (None, "", "Always"):
        yield required(f"{path}.restartPolicy", 'valid values: "OnFailure", "Never"')
    elif kind in ("Job", "CronJob") and restart not in ("OnFailure", "Never"):
        yield unsupported(f"{path}.restartPolicy", restart, ("OnFailure", "Never"))
    if spec.get("overhead") and not spec.get("runtimeClassName"):
        # The PodOverhead admission rule: every pod of this spec is refused.
        yield ManifestError(
            f"{path}.overhead", f'pods "{name}" is forbidden: {OVERHEAD_WITHOUT_RUNTIME_CLASS}'
        )


def _selector_matches(selector: Mapping[str, object], labels: Mapping[str, object]) -> bool:
    expressions = (
        (str(expression.get("key")), expression.get("operator"), _list(expression.get("values")))
        for expression in map(_mapping, _list(selector.get("matchExpressions")))
    )
    return label_selector_matches(_mapping(selector.get("matchLabels")), expressions, labels)


_COUNTS = (
    "replicas",
    "minReadySeconds",
    "revisionHistoryLimit",
    "parallelism",
    "completions",
    "backoffLimit",
)


def _validate_counts(spec: Mapping[str, object], path: str) -> Iterator[ManifestError]:
    """A workload's counts, none of them negative."""
    for key in _COUNTS:
        value = spec.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value < 0:
            yield invalid(f"{path}.{key}", value, "must be greater than or equal to 0")


def _validate_disruption_budget(spec: Mapping[str, object]) -> Iterator[ManifestError]:
    for key in ("minAvailable", "maxUnavailable"):
        value = spec.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value < 0:
            yield invalid(f"spec.{key}", value, "must be greater than or equal to 0")
        elif (
            isinstance(value, str) and value.endswith("%") and value[:-1].isdigit() and int(value[:-1]) > 100
        ):
            yield invalid(f"spec.{key}", value, "must not be greater than 100%")


def _validate_priority_class(raw: Mapping[str, object]) -> Iterator[ManifestError]:
    value = raw.get("value")
    if isinstance(value, int) and not isinstance(value, bool) and value > _HIGHEST_USER_PRIORITY:
        yield forbidden(
            "value", f"maximum allowed value of a user defined priority is {_HIGHEST_USER_PRIORITY}"
        )
    name = _mapping(raw.get("metadata")).get("name")
    if isinstance(name, str) and name.startswith("system-") and name not in BUILTIN_PRIORITY_CLASSES:
        yield forbidden(
            "metadata.name",
            "priority class names with 'system-' prefix are reserved for system use only. "
            f"error: {name} is not a known system priority class",
        )


def _validate_workload(raw: Mapping[str, object], kind: str) -> Iterator[ManifestError]:
    spec = _mapping(raw.get("spec"))
    yield from _validate_counts(spec, "spec")
    template = _mapping(spec.get("template"))
    template_meta = _mapping(template.get("metadata"))
    if kind in _SELECTOR_REQUIRED_KINDS:
        selector = spec.get("selector")
        labels = _mapping(template_meta.get("labels"))
        if selector is None and kind != "DaemonSet":  # a DaemonSet's is only said not to match
            yield required("spec.selector")
        elif (
            selector is not None
            and not _mapping(selector).get("matchLabels")
            and not _mapping(selector).get("matchExpressions")
        ):
            # An empty selector would select every pod of the namespace.
            # Said as the Go struct is: its empty fields left out.
            written = {key: value for key, value in _mapping(selector).items() if value}
            yield invalid("spec.selector", written, f"empty selector is invalid for {_SELECTOR_NOUNS[kind]}")
        if selector is None or (_mapping(selector) and not _selector_matches(_mapping(selector), labels)):
            yield invalid(
                "spec.template.metadata.labels", dict(labels), "`selector` does not match template `labels`"
            )


def decoding_error(raw: Mapping[str, object], api_version: str, kind: str) -> ManifestError | None:
    """The API server's refusal to decode ``raw`` into its kind's Go types, or None."""
    if (api_version, kind) not in KUBE_KINDS:
        return None
    try:
        _decode(raw, kind, POD_KINDS_PATHS.get((api_version, kind)))
    except DecodeError as error:
        version = api_version.rsplit("/", 1)[-1]
        return ManifestError("", f'{kind} in version "{version}" cannot be handled as a {kind}: {error}')
    return None


def validation_errors(raw: Mapping[str, object], api_version: str, kind: str) -> list[ManifestError]:
    """The API server's validation errors of a decoded ``raw``; none for kinds outside :data:`KUBE_KINDS`."""
    if (api_version, kind) not in KUBE_KINDS:
        return []
    pod_spec_path = POD_KINDS_PATHS.get((api_version, kind))
    errors = list(_validate_object_meta(raw, kind))
    if kind == "Job" and not _mapping(raw.get("metadata")).get("labels"):
        # A Job without labels of its own gets its template's, and they are validated as its own.
        template_labels = _mapping(_mapping(_at(raw, "spec.template")).get("metadata")).get("labels")
        errors += _validate_labels(template_labels, "metadata.labels")
    if kind in _SPEC_TYPES:
        errors += _validate_workload(raw, kind)
    spec = _mapping(raw.get("spec"))
    if kind == "CronJob":
        errors += _validate_counts(
            _mapping(_mapping(spec.get("jobTemplate")).get("spec")), "spec.jobTemplate.spec"
        )
    if kind == "PodDisruptionBudget":
        errors += _validate_disruption_budget(spec)
    if kind == "PriorityClass":
        errors += _validate_priority_class(raw)
    if pod_spec_path is not None:
        if pod_spec_path != "spec":
            template_meta = f"{pod_spec_path.removesuffix('.spec')}.metadata"
            meta = _mapping(_at(raw, template_meta))
            # A template's labels are said at the template's path, without "metadata".
            template = template_meta.removesuffix(".metadata")
            errors += _validate_labels(meta.get("labels"), f"{template}.labels")
            errors += _validate_annotations(meta.get("annotations"), f"{template}.annotations")
        name = str(_mapping(raw.get("metadata")).get("name") or "")
        errors += _validate_pod_spec(_mapping(_at(raw, pod_spec_path)), pod_spec_path, kind, name)
    return errors


def refusal(
    raw: Mapping[str, object], api_version: str, kind: str, parse_error: ManifestError | None
) -> list[ManifestError]:
    """What to report of an object karpy's parser read (``parse_error`` if it failed): none if it is good.

    In the API server's order: a document that does not decode is refused
    for that alone, and so is one whose field karpy's parser found of the
    wrong type (its "expected an integer, got string" is a decoding error
    too); then every validation error; then whatever else karpy's parser
    refuses (a rule the API server does not have, or karpy's own limits).
    """
    decoding = decoding_error(raw, api_version, kind)
    if decoding is not None:
        return [decoding]
    if parse_error is not None and parse_error.message.startswith("expected "):
        return [parse_error]
    return validation_errors(raw, api_version, kind) or ([parse_error] if parse_error is not None else [])


def missing_priority_class(pod_name: str, class_name: str, existing: set[str] | frozenset[str]) -> str | None:
    """The Priority admission plugin's refusal of a pod naming a class that does not exist, or None."""
    if not class_name or class_name in existing or class_name in BUILTIN_PRIORITY_CLASSES:
        return None
    return f'pods "{pod_name}" is forbidden: no PriorityClass with name {class_name} was found'
