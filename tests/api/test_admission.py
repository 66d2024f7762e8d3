"""Pods sized as the LimitRanger and RuntimeClass admission plugins make them (karpy.api.admission)."""

from __future__ import annotations

import pytest
import yaml
from tests.support import parse_object

from karpy.api._reader import FieldReader
from karpy.api.admission import Admission, AdmissionRefusedError, LimitRange, RuntimeClass
from karpy.api.core import DaemonSet, Pod
from karpy.api.manifest import PARSERS
from karpy.api.quantity import ResourceAmounts
from karpy.api.taints import Toleration

GI = 1024**3
MI = 1024**2


def limit_range(items: str, name: str = "limits", namespace: str = "default") -> LimitRange:
    found = parse_object(
        f"""
apiVersion: v1
kind: LimitRange
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  limits: {items}
"""
    )
    assert isinstance(found, LimitRange)
    return found


def runtime_class(extra: str = "", name: str = "kata") -> RuntimeClass:
    found = parse_object(
        f"""
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {{name: {name}}}
handler: kata
{extra}
"""
    )
    assert isinstance(found, RuntimeClass)
    return found


def pod(spec: str, namespace: str = "default", *, as_stored: bool = False) -> Pod:
    text = f"""
apiVersion: v1
kind: Pod
metadata: {{name: p, namespace: {namespace}}}
spec:
{spec}
"""
    # as_stored: read as karpy run reads a server object, without the API server's validation,
    # which refuses some of these specs before admission would see them.
    found = (
        PARSERS[("v1", "Pod")](FieldReader(yaml.safe_load(text)), "v1") if as_stored else parse_object(text)
    )
    assert isinstance(found, Pod)
    return found


def admitted(spec: str, *objects: LimitRange | RuntimeClass, namespace: str = "default") -> ResourceAmounts:
    admission = Admission.of(
        [o for o in objects if isinstance(o, LimitRange)], [o for o in objects if isinstance(o, RuntimeClass)]
    )
    return admission.pod(pod(spec, namespace)).spec.requests


DEFAULTS = limit_range("[{type: Container, default: {cpu: '2', memory: 1Gi}}]")
DEFAULT_REQUESTS = limit_range("[{type: Container, defaultRequest: {cpu: 500m, memory: 256Mi}}]")


@pytest.mark.parametrize(
    ("spec", "objects", "requests"),
    [
        pytest.param(
            "  containers: [{name: a, resources: {limits: {memory: 1Gi}}}]",
            (DEFAULTS,),
            {"cpu": 2000, "memory": GI},
            id="a default limit is the request of a container that has neither (Karpenter's DaemonSet)",
        ),
        pytest.param(
            "  containers: [{name: a, resources: {requests: {memory: '4'}}}]",
            (DEFAULTS,),
            {"cpu": 2000, "memory": 4},
            id="a request of its own stays; the default fills the rest (Karpenter's Deployment)",
        ),
        pytest.param(
            "  containers: [{name: a, resources: {limits: {memory: 1Gi}}}]",
            (limit_range("[{type: Container, defaultRequest: {cpu: '2', memory: 1Gi}}]"),),
            {"cpu": 2000, "memory": GI},
            id="defaultRequest fills a missing request; a limit without request stays its own request",
        ),
        pytest.param(
            "  containers: [{name: a}]",
            (limit_range("[{type: Container, default: {cpu: '1'}, defaultRequest: {cpu: 100m}}]"),),
            {"cpu": 100},
            id="with both, the request is the default request",
        ),
        pytest.param(
            "  containers: [{name: a, resources: {limits: {cpu: '3'}}}]",
            (limit_range("[{type: Container, default: {cpu: '1'}, defaultRequest: {cpu: 100m}}]"),),
            {"cpu": 3000},
            id="a container's own limit is its request before any default request",
        ),
        pytest.param(
            "  containers: [{name: a}]",
            (limit_range("[{type: Container, max: {cpu: '4'}}]"),),
            {"cpu": 4000},
            id="a max stands for a missing default, and so for the request",
        ),
        pytest.param(
            "  containers: [{name: a}]",
            (limit_range("[{type: Container, min: {memory: 64Mi}}]"),),
            {"memory": 64 * MI},
            id="a min stands for a missing default request",
        ),
        pytest.param(
            "  containers: [{name: a}]",
            (
                limit_range(
                    "[{type: Pod, max: {cpu: '4'}}, {type: PersistentVolumeClaim, min: {storage: 1Gi}}]"
                ),
            ),
            {},
            id="Pod and PersistentVolumeClaim items default nothing",
        ),
        pytest.param(
            "  containers: [{name: a}]",
            (limit_range("[{type: Container, default: {cpu: '1'}}]", namespace="other"),),
            {},
            id="a LimitRange defaults only its own namespace",
        ),
        pytest.param(
            """\
  initContainers: [{name: init, resources: {requests: {cpu: '3'}}}, {name: side, restartPolicy: Always}]
  containers: [{name: a}, {name: b}]""",
            (DEFAULT_REQUESTS,),
            # App containers and the sidecar: 3 x 500m; the init container, before the sidecar: 3 CPUs.
            {"cpu": 3000, "memory": 3 * 256 * MI},
            id="init containers and sidecars are defaulted too, then summed as the scheduler sums",
        ),
        pytest.param(
            "  containers: [{name: a}]",
            (
                limit_range("[{type: Container, default: {cpu: '2'}}]", name="b"),
                limit_range("[{type: Container, default: {cpu: '1', memory: 1Gi}}]", name="a"),
            ),
            {"cpu": 1000, "memory": GI},
            id="several LimitRanges: the first by name sets what it names, the next fills the rest",
        ),
        pytest.param(
            "  containers: [{name: a}]",
            (
                limit_range(
                    "[{type: Container, default: {cpu: '1'}}, {type: Container, default: {cpu: '2'}}]"
                ),
            ),
            {"cpu": 2000},
            id="two Container items of one LimitRange: the later wins",
        ),
        pytest.param(
            "  runtimeClassName: kata\n  containers: [{name: a, resources: {requests: {cpu: '1'}}}]",
            (runtime_class("overhead: {podFixed: {cpu: 250m, memory: 120Mi}}"),),
            {"cpu": 1250, "memory": 120 * MI},
            id="a RuntimeClass's overhead is added to the pod",
        ),
        pytest.param(
            "  runtimeClassName: kata\n  containers: [{name: a}]",
            (runtime_class("overhead: {podFixed: {cpu: 250m}}"), DEFAULTS),
            {"cpu": 2250, "memory": GI},
            id="LimitRange defaults and RuntimeClass overhead together",
        ),
    ],
)
def test_admission_sizes_a_pod_as_the_api_server_creates_it(
    spec: str, objects: tuple[LimitRange | RuntimeClass, ...], requests: ResourceAmounts
) -> None:
    assert admitted(spec, *objects) == requests


def test_the_limitrange_itself_is_defaulted_as_the_api_server_stores_it() -> None:
    (item,) = limit_range(
        "[{type: Container, max: {cpu: '4'}, min: {memory: 1Mi}, default: {memory: 1Gi}}]"
    ).limits
    assert item.default == {"cpu": 4000, "memory": GI}
    assert item.default_request == {"cpu": 4000, "memory": GI}


def test_an_unchanged_spec_is_the_same_object() -> None:
    plain = pod(
        "  containers: [{name: a, resources: {requests: {cpu: '1'}, limits: {cpu: '1', memory: 1Gi}}}]"
    )
    assert (
        Admission.of([limit_range("[{type: Container, default: {cpu: '2', memory: 2Gi}}]")], []).pod(plain)
        is plain
    )
    assert Admission().pod(plain) is plain


def test_a_runtime_class_adds_its_node_selector_and_tolerations() -> None:
    rc = runtime_class(
        "scheduling: {nodeSelector: {sandbox: 'true'}, tolerations: [{key: sandbox, operator: Exists}]}"
    )
    spec = Admission.of([], [rc]).pod(pod("  runtimeClassName: kata\n  containers: [{name: a}]")).spec
    assert spec.node_selector == {"sandbox": "true"}
    assert spec.tolerations == (Toleration(key="sandbox", operator="Exists"),)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "  runtimeClassName: gvisor\n  containers: [{name: a}]",
            'pod rejected: RuntimeClass "gvisor" not found',
        ),
        (
            "  runtimeClassName: kata\n  overhead: {cpu: 1}\n  containers: [{name: a}]",
            "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead",
        ),
        (
            "  overhead: {cpu: 1}\n  containers: [{name: a}]",
            "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead",
        ),
        (
            "  runtimeClassName: kata\n  nodeSelector: {sandbox: 'false'}\n  containers: [{name: a}]",
            "conflict: runtimeClass.scheduling.nodeSelector[sandbox] = true;"
            " pod.spec.nodeSelector[sandbox] = false",
        ),
    ],
)
def test_the_runtime_class_plugin_refuses_in_its_own_words(spec: str, message: str) -> None:
    rc = runtime_class("overhead: {podFixed: {cpu: 250m}}\nscheduling: {nodeSelector: {sandbox: 'true'}}")
    with pytest.raises(AdmissionRefusedError) as refused:
        Admission.of([], [rc]).pod(pod(spec, as_stored=True))
    assert str(refused.value) == f'pods "p" is forbidden: {message}'


def test_a_daemonset_is_sized_as_its_pods_and_left_out_when_they_would_be_refused() -> None:
    def daemonset(spec: str) -> DaemonSet:
        found = parse_object(
            f"""
apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: agent, namespace: default}}
spec:
  selector: {{matchLabels: {{app: agent}}}}
  template:
    metadata: {{labels: {{app: agent}}}}
    spec:
{spec}
"""
        )
        assert isinstance(found, DaemonSet)
        return found

    sized = daemonset("      containers: [{name: a, resources: {limits: {memory: 1Gi}}}]")
    refused = daemonset("      runtimeClassName: missing\n      containers: [{name: a}]")
    (admitted_set,) = Admission.of([DEFAULTS], []).daemonsets([sized, refused])
    assert admitted_set.template.spec.requests == {"cpu": 2000, "memory": GI}
    assert admitted_set.metadata == sized.metadata


def test_a_default_limit_below_a_containers_own_request_makes_the_pod_invalid() -> None:
    admission = Admission.of([DEFAULTS], [])
    with pytest.raises(AdmissionRefusedError) as refused:
        admission.pod(pod("  containers: [{name: a}, {name: b, resources: {requests: {cpu: '3'}}}]"))
    assert str(refused.value) == (
        'Pod "p" is invalid: spec.containers[1].resources.requests: Invalid value: "3":'
        " must be less than or equal to cpu limit of 2"
    )
