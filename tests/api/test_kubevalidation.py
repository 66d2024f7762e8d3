"""karpy refuses the Kubernetes objects kube-apiserver refuses, with its words.

The table is shared with tests/integration/test_kube_validation.py, which
checks that a real API server refuses each object with the same words.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from tests.kube_validation_cases import BASES, CASES, RefusedCase, deployment, pod

from karpy.api.kubevalidation import qualified_name_errors, refusal
from karpy.api.manifest import KubernetesYAMLLoader, parse_manifests
from karpy.cli import main
from karpy.kube._resources import TYPES_BY_KIND
from karpy.kube.cluster import parse_record


@pytest.mark.parametrize("base", BASES)
def test_the_valid_bases_are_accepted(base: str) -> None:
    result = parse_manifests(base, "base.yaml")
    assert result.errors == []
    assert len(result.objects) == 1


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_an_object_the_api_server_refuses_is_refused_with_its_words(case: RefusedCase) -> None:
    result = parse_manifests(case.manifest, "bad.yaml")
    assert result.objects == []
    assert any(case.words in error for error in result.errors), result.errors
    assert all(len(error.splitlines()) == 1 for error in result.errors)


def test_every_validation_error_is_reported_not_only_the_first() -> None:
    manifest = deployment(
        spec="restartPolicy: Never",
        containers="[{name: c, image: a, resources: {requests: {cpu: '2'}, limits: {cpu: '1'}}}, {name: c}]",
    )
    errors = parse_manifests(manifest, "web.yaml").errors
    assert errors == [
        'web.yaml: Deployment "web": spec.template.spec.containers[0].resources.requests: Invalid value: '
        '"2": '
        "must be less than or equal to cpu limit of 1",
        'web.yaml: Deployment "web": spec.template.spec.containers[1].name: Duplicate value: "c"',
        'web.yaml: Deployment "web": spec.template.spec.restartPolicy: Unsupported value: "Never": '
        'supported values: "Always"',
    ]


def test_a_decoding_error_is_the_only_error() -> None:
    # The API server stops at a value it cannot decode: nothing is validated after it.
    manifest = deployment(labels="{app: web, live: yes}", containers="[{name: c}, {name: c}]")
    (error,) = parse_manifests(manifest, "web.yaml").errors
    assert error == (
        'web.yaml: Deployment "web": Deployment in version "v1" cannot be handled as a Deployment: '
        "json: cannot unmarshal bool into Go struct field ObjectMeta.spec.template.metadata.labels of "
        "type string"
    )


@pytest.mark.parametrize("word", ["y", "Y", "yes", "on", "On", "TRUE", "n", "N", "no", "off", "False"])
def test_yaml_reads_booleans_as_kubectl_does(word: str) -> None:
    loaded = yaml.load(f"value: {word}\nquoted: '{word}'\n", Loader=KubernetesYAMLLoader)
    assert isinstance(loaded["value"], bool)
    assert loaded["quoted"] == word


def test_words_that_are_not_booleans_stay_strings() -> None:
    loaded = yaml.load("a: yy\nb: nope\nc: onion\n", Loader=KubernetesYAMLLoader)
    assert loaded == {"a": "yy", "b": "nope", "c": "onion"}


@pytest.mark.parametrize(
    ("key", "valid"),
    [
        ("app", True),
        ("example.com/app", True),
        ("a" * 63, True),
        ("a" * 64, False),
        ("bad key", False),
        ("/app", False),
        ("app/", False),
        ("a/b/c", False),
        ("Example.com/app", False),
        ("-app", False),
        ("app.kubernetes.io/name", True),
    ],
)
def test_qualified_names(key: str, valid: bool) -> None:
    assert (qualified_name_errors(key) == []) is valid


def test_a_pod_read_from_a_cluster_is_not_validated_again() -> None:
    # karpy run reads objects the API server admitted already; its rules change between versions,
    # and a pod it let in must be scheduled, not refused.
    raw = yaml.safe_load(pod(spec="overhead: {cpu: 100m}"))
    assert refusal(raw, "v1", "Pod", None)  # refused when read from a file
    record = parse_record(TYPES_BY_KIND["Pod"], raw)
    assert record.spec.requests == {"cpu": 100}  # type: ignore[attr-defined]


def test_validate_and_simulate_refuse_the_object(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "web.yaml"
    path.write_text(deployment(containers="[{name: c, image: a}, {name: c, image: b}]"))
    assert main(["validate", str(path)]) == 2
    assert 'spec.template.spec.containers[1].name: Duplicate value: "c"' in capsys.readouterr().err
    assert main(["simulate", str(path)]) == 2
    captured = capsys.readouterr()
    assert 'Duplicate value: "c"' in captured.err
    assert "applied Deployment" not in captured.out
