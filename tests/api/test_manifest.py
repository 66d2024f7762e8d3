"""Loading YAML streams: good objects kept beside bad ones, one actionable line per problem."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from karpy.api.core import Node, Pod
from karpy.api.limits import dns1123_subdomain_problem
from karpy.api.manifest import LoadedObject, LoadResult, parse_manifests
from karpy.api.nodepool import NodePool

NODEPOOL = """\
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: {name}
spec:
  weight: {weight}
  template:
    spec:
      requirements: []
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
"""

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  containers: [{{name: app, resources: {{requests: {{cpu: 100m}}}}}}]
"""

NODE = """\
apiVersion: v1
kind: Node
metadata:
  name: {name}
"""


def stream(*documents: str) -> str:
    return "---\n".join(documents)


def names(result: LoadResult) -> list[str]:
    return [loaded.name for loaded in result.objects]


def test_valid_objects_are_kept_when_another_document_is_bad() -> None:
    result = parse_manifests(
        stream(
            NODEPOOL.format(name="good", weight=10),
            NODEPOOL.format(name="bad", weight=0),
            POD.format(name="web"),
        ),
        "nodepools.yaml",
    )
    assert result.errors == ['nodepools.yaml: NodePool "bad": spec.weight: must be between 1 and 100, got 0']
    assert names(result) == ["good", "web"]
    assert result.notes == []


def test_loaded_objects_record_source_version_kind_name_and_the_typed_object() -> None:
    result = parse_manifests(
        stream(NODEPOOL.format(name="default", weight=10), POD.format(name="web")), "in.yaml"
    )
    pool, pod = result.objects
    assert (pool.source, pool.api_version, pool.kind, pool.name) == (
        "in.yaml",
        "karpenter.sh/v1",
        "NodePool",
        "default",
    )
    assert isinstance(pool.obj, NodePool)
    assert pool.obj.weight == 10
    assert (pod.api_version, pod.kind) == ("v1", "Pod")
    assert isinstance(pod.obj, Pod)
    assert pod.obj.spec.requests == {"cpu": 100}


def test_empty_documents_are_skipped() -> None:
    result = parse_manifests("---\n---\n" + NODE.format(name="n1") + "---\n", "f.yaml")
    assert (names(result), result.errors, result.notes) == (["n1"], [], [])


@pytest.mark.parametrize(
    ("broken", "position", "problem"),
    [
        pytest.param(
            "apiVersion: v1\nkind: Node\nmetadata:\n  name: broken\n  labels: [unclosed\n",
            "11:1",
            "expected ',' or ']', but got '<document start>'",
            id="unclosed flow sequence",
        ),
        pytest.param(
            "apiVersion: v1\nkind: Node\nmetadata:\n name: x\n  bad: indent\n",
            "10:6",
            "mapping values are not allowed here",
            id="bad indentation",
        ),
        pytest.param(
            "apiVersion: v1\n\tkind: Node\n",
            "7:1",
            "found character '\\t' that cannot start any token",
            id="tab indentation",
        ),
    ],
)
def test_malformed_yaml_names_file_line_and_column_and_keeps_the_documents_before(
    broken: str, position: str, problem: str
) -> None:
    text = stream(NODE.format(name="before"), broken, NODE.format(name="after"))
    result = parse_manifests(text, "f.yaml")
    assert result.errors == [f"f.yaml:{position}: invalid YAML: {problem}"]
    # The stream stops at a syntax error: what follows cannot be trusted to be split right.
    assert names(result) == ["before"]


def test_a_value_an_explicit_tag_cannot_hold_is_invalid_yaml_not_a_crash() -> None:
    result = parse_manifests(stream(NODE.format(name="before"), "apiVersion: !!int abc\n"), "f.yaml")
    assert result.errors == ["f.yaml: invalid YAML: invalid literal for int() with base 10: 'abc'"]
    assert names(result) == ["before"]


def test_unquoted_timestamps_stay_strings_as_kubernetes_reads_them() -> None:
    result = parse_manifests(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n  creationTimestamp: 2024-05-01T10:00:00Z\n",
        "f.yaml",
    )
    assert result.errors == []
    (loaded,) = result.objects
    assert isinstance(loaded.obj, Node)
    assert loaded.obj.metadata.creation_timestamp == 1714557600.0


def test_an_impossible_unquoted_date_is_a_field_error_not_a_crash() -> None:
    result = parse_manifests(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n  creationTimestamp: 2024-02-30T10:00:00Z\n",
        "f.yaml",
    )
    assert result.errors == [
        "f.yaml: Node \"n1\": metadata.creationTimestamp: invalid timestamp '2024-02-30T10:00:00Z'"
    ]


@pytest.mark.parametrize(
    ("document", "error"),
    [
        pytest.param(
            "apiVersion: example.com/v1\nkind: Frobnicator\nmetadata: {name: x}\n",
            "f.yaml: Frobnicator \"x\": kind: unknown kind 'Frobnicator' (apiVersion 'example.com/v1')",
            id="unknown kind",
        ),
        pytest.param(
            "apiVersion: karpenter.sh/v1\nkind: NodePol\nmetadata: {name: x}\n",
            "f.yaml: NodePol \"x\": kind: unknown kind 'NodePol' (apiVersion 'karpenter.sh/v1')"
            ' (did you mean "NodePool"?)',
            id="misspelt kind",
        ),
        pytest.param(
            "apiVersion: apps/v1\nkind: Deploymnet\nmetadata: {name: x}\n",
            "f.yaml: Deploymnet \"x\": kind: unknown kind 'Deploymnet' (apiVersion 'apps/v1')"
            ' (did you mean "Deployment"?)',
            id="misspelt workload kind",
        ),
        pytest.param(
            "apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {name: x}\n",
            "f.yaml: Provisioner \"x\": kind: unknown kind 'Provisioner' "
            "(apiVersion 'karpenter.sh/v1alpha5'); Karpenter v0.32 replaced it with "
            "NodePool (karpenter.sh/v1)",
            id="Karpenter's retired Provisioner",
        ),
        pytest.param(
            "apiVersion: karpenter.k8s.aws/v1alpha1\nkind: AWSNodeTemplate\nmetadata: {name: x}\n",
            "f.yaml: AWSNodeTemplate \"x\": kind: unknown kind 'AWSNodeTemplate' (apiVersion "
            "'karpenter.k8s.aws/v1alpha1'); Karpenter v0.32 replaced it with "
            "EC2NodeClass (karpenter.k8s.aws/v1)",
            id="Karpenter's retired AWSNodeTemplate",
        ),
        pytest.param(
            "apiVersion: karpenter.sh/v1alpha5\nkind: NodePool\nmetadata: {name: x}\n",
            "f.yaml: NodePool \"x\": apiVersion: NodePool is not served as 'karpenter.sh/v1alpha5'; "
            "use karpenter.sh/v1 or karpenter.sh/v1beta1",
            id="old NodePool version",
        ),
        pytest.param(
            "apiVersion: extensions/v1beta1\nkind: Deployment\nmetadata: {name: x}\n",
            "f.yaml: Deployment \"x\": apiVersion: Deployment is not served as 'extensions/v1beta1'; "
            "use apps/v1",
            id="old Deployment version",
        ),
        pytest.param(
            "apiVersion: karpenter.sh/v1beta1\nkind: NodeClaim\nmetadata: {name: x}\n",
            "f.yaml: NodeClaim \"x\": apiVersion: NodeClaim is not served as 'karpenter.sh/v1beta1'; "
            "use karpenter.sh/v1",
            id="v1beta1 NodeClaim",
        ),
        pytest.param(
            "apiVersion: karpenter.k8s.aws/v1alpha1\nkind: EC2NodeClass\nmetadata: {name: x}\n",
            'f.yaml: EC2NodeClass "x": apiVersion: '
            "EC2NodeClass is not served as 'karpenter.k8s.aws/v1alpha1'; "
            "use karpenter.k8s.aws/v1 or karpenter.k8s.aws/v1beta1",
            id="unserved EC2NodeClass version",
        ),
        pytest.param(
            "apiVersion: v1\nmetadata: {name: x}\n",
            'f.yaml: object "x": kind: required',
            id="no kind",
        ),
        pytest.param(
            "kind: Pod\nmetadata: {name: x}\n", 'f.yaml: Pod "x": apiVersion: required', id="no apiVersion"
        ),
        pytest.param(
            "apiVersion: v1\nkind: Pod\nspec: {containers: [{name: c}]}\n",
            "f.yaml: Pod: metadata.name: Required value: name or generateName is required",
            id="no name",
        ),
        pytest.param(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: null, generateName: web-}\n"
            "spec: {tolerations: [{value: x}], containers: [{name: c}]}\n",
            'f.yaml: Pod: spec.tolerations[0].operator: Invalid value: "": operator must be Exists when'
            ' `key` is empty, which means "match all values and all keys"',
            id="null name",
        ),
        pytest.param(
            "- apiVersion: v1\n- kind: Pod\n",
            "f.yaml (document 1): expected a Kubernetes object (a mapping), got list",
            id="a list document",
        ),
        pytest.param(
            "just some text\n",
            "f.yaml (document 1): expected a Kubernetes object (a mapping), got str",
            id="a scalar document",
        ),
    ],
)
def test_a_bad_document_is_one_error_naming_file_object_and_field(document: str, error: str) -> None:
    result = parse_manifests(document, "f.yaml")
    assert result.errors == [error]
    assert result.objects == []


def test_a_document_that_is_not_a_mapping_is_counted_from_the_start_of_the_stream() -> None:
    result = parse_manifests(stream(NODE.format(name="n1"), "", "[1, 2]\n"), "f.yaml")
    assert result.errors == ["f.yaml (document 3): expected a Kubernetes object (a mapping), got list"]
    assert names(result) == ["n1"]


@pytest.mark.parametrize(
    ("document", "note"),
    [
        ("apiVersion: v1\nkind: Secret\nmetadata: {name: web}\n", 'Secret "web": skipped (Secret'),
        ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\n", 'ConfigMap "cfg": skipped (ConfigMap'),
    ],
)
def test_kinds_that_do_not_affect_autoscaling_are_skipped_with_a_note(document: str, note: str) -> None:
    result = parse_manifests(document, "f.yaml")
    assert result.errors == []
    assert result.objects == []
    assert result.notes == [f"f.yaml: {note} does not affect node autoscaling)"]


def test_a_v1beta1_nodepool_loads_with_a_conversion_note() -> None:
    text = """\
apiVersion: karpenter.sh/v1beta1
kind: NodePool
metadata: {name: old}
spec:
  disruption: {consolidationPolicy: WhenUnderutilized}
  template:
    spec:
      nodeClassRef: {apiVersion: karpenter.k8s.aws/v1beta1, kind: EC2NodeClass, name: default}
"""
    result = parse_manifests(text, "f.yaml")
    assert result.errors == []
    assert result.notes == [
        'f.yaml: NodePool "old": converted from karpenter.sh/v1beta1 to v1',
        'f.yaml: NodePool "old": spec.disruption.consolidationPolicy: WhenUnderutilized is'
        " WhenEmptyOrUnderutilized in v1",
        'f.yaml: NodePool "old": spec.disruption.consolidateAfter: set to 0s:'
        " v1beta1 consolidated WhenUnderutilized nodes without waiting",
        'f.yaml: NodePool "old": spec.template.spec.nodeClassRef.apiVersion:'
        " karpenter.k8s.aws/v1beta1 became group: karpenter.k8s.aws",
    ]
    (loaded,) = result.objects
    assert loaded.api_version == "karpenter.sh/v1beta1"
    assert isinstance(loaded.obj, NodePool)
    assert loaded.obj.converted_from == "karpenter.sh/v1beta1"


def test_list_items_are_flattened_into_objects_errors_and_notes() -> None:
    items = [
        yaml.safe_load(NODE.format(name="n1")),
        yaml.safe_load(POD.format(name="p1")),
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "web"}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p2"}, "spec": {"priority": "high"}},
        None,
    ]
    result = parse_manifests(
        yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}), "list.yaml"
    )
    assert [(loaded.kind, loaded.name) for loaded in result.objects] == [("Node", "n1"), ("Pod", "p1")]
    assert result.notes == ['list.yaml: Secret "web": skipped (Secret does not affect node autoscaling)']
    assert result.errors == ['list.yaml: Pod "p2": spec.priority: expected an integer, got string']


def test_a_list_without_a_list_of_items_is_an_error() -> None:
    result = parse_manifests("apiVersion: v1\nkind: List\nitems: {a: b}\n", "f.yaml")
    assert result.errors == ["f.yaml: List: items: expected a list"]


def test_an_empty_stream_loads_nothing() -> None:
    assert parse_manifests("", "f.yaml") == LoadResult()


def test_load_results_extend_in_order() -> None:
    first = parse_manifests(NODE.format(name="a"), "a.yaml")
    second = parse_manifests(stream(NODE.format(name="b"), "kind: Pod\n"), "b.yaml")
    first.extend(second)
    assert [loaded.source for loaded in first.objects] == ["a.yaml", "b.yaml"]
    assert first.errors == ["b.yaml: Pod: apiVersion: required"]


# --- one line per problem ------------------------------------------------------------

BAD_DOCUMENTS = [
    NODEPOOL.format(name="bad", weight=0),
    "apiVersion: v1\nkind: Node\nmetadata: {name: node}\nspec: {taints: [{key: k, effect: Bad}]}\n",
    "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
    "spec: {containers: [{name: c, resources: {requests: {cpu: '-1'}}}]}\n",
    "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: b}\nspec: {minAvailable: '200%'}\n",
    "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: np}\nspec: {template: {spec: {}}}\n",
]


@pytest.mark.parametrize("document", BAD_DOCUMENTS)
def test_every_error_is_one_line_starting_with_file_and_object(document: str) -> None:
    loaded = yaml.safe_load(document)
    result = parse_manifests(document, "dir/f.yaml")
    (error,) = result.errors
    assert len(error.splitlines()) == 1
    assert error.startswith(f'dir/f.yaml: {loaded["kind"]} "{loaded["metadata"]["name"]}": spec.')


@pytest.mark.parametrize(
    ("document", "error"),
    [
        pytest.param(
            'apiVersion: v1\nkind: Node\nmetadata: {name: "a\\nb"}\n'
            "spec: {taints: [{key: k, effect: Bad}]}\n",
            # The name is refused first (the API server allows no line break in it).
            'f.yaml: Node "a\\nb": metadata.name: Invalid value: "a\\nb": a lowercase RFC 1123 subdomain',
            id="line break in the name",
        ),
        pytest.param(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
            'spec: {containers: [{name: c, resources: {requests: {cpu: "1\\n2"}}}]}\n',
            # The API server's decoder refuses it without quoting it.
            'f.yaml: Pod "p": Pod in version "v1" cannot be handled as a Pod: quantities must match',
            id="line break in a value",
        ),
        pytest.param(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
            'spec: {containers: [{name: c, resources: {requests: {"a\\u2028b": 1x}}}]}\n',
            'f.yaml: Pod "p": spec.containers[0].resources.requests.a\\u2028b: ',
            id="line separator in a key",
        ),
        pytest.param(
            'apiVersion: v1\nkind: "Frob\\rnicator"\nmetadata: {name: x}\n',
            "f.yaml: Frob\\rnicator \"x\": kind: unknown kind 'Frob\\rnicator' (apiVersion 'v1')",
            id="carriage return in the kind",
        ),
    ],
)
def test_line_breaks_inside_an_error_are_escaped(document: str, error: str) -> None:
    (written,) = parse_manifests(document, "f.yaml").errors
    assert len(written.splitlines()) == 1
    assert written.startswith(error)


@given(st.text(min_size=1, max_size=30))
def test_any_object_name_still_gives_a_one_line_error_naming_it(name: str) -> None:
    document = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "spec": {"unschedulable": "yes"},
    }
    # As JSON, every string is quoted: a plain y or n would be a boolean to kubectl, and so to karpy.
    result = parse_manifests(json.dumps(document), "f.yaml")
    (error,) = result.errors
    assert len(error.splitlines()) == 1
    assert error.startswith("f.yaml: Node ")
    if dns1123_subdomain_problem(name) is None:
        assert error.endswith(": spec.unschedulable: expected true or false, got string")
    else:
        # A name the API server refuses is the error, said on one line too.
        assert ": metadata.name: " in error


def test_notes_are_one_line_too() -> None:
    result = parse_manifests('apiVersion: v1\nkind: ConfigMap\nmetadata: {name: "web\\nfront"}\n', "f.yaml")
    assert result.notes == [
        'f.yaml: ConfigMap "web\\nfront": skipped (ConfigMap does not affect node autoscaling)'
    ]


def test_loaded_object_keeps_the_name_as_written() -> None:
    (loaded,) = parse_manifests(NODE.format(name="n1"), "f.yaml").objects
    assert loaded == LoadedObject("f.yaml", "v1", "Node", "n1", loaded.obj)
