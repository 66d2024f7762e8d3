"""The API server refuses the objects karpy refuses, with the same words, and accepts the valid bases.

Each object of ``tests/kube_validation_cases.py`` is sent as ``kubectl apply
--dry-run=server`` would send it (kubectl's own YAML reading included: a
plain ``on`` or ``y`` is a boolean there) and read by karpy; both must
refuse it and both answers must hold the case's words. A rule that changes
in a new Kubernetes version fails here, not in a user's cluster.
"""

from __future__ import annotations

import json
import random
import subprocess

import pytest
from tests.integration.conftest import ControlPlane
from tests.kube_validation_cases import BASES, CASES

from karpy.api.manifest import parse_manifests

pytestmark = pytest.mark.integration

NULL_KEY = "error converting YAML to JSON: unsupported map key of type: "


def _apply(plane: ControlPlane, manifest: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [plane.kubectl_path, "--kubeconfig", str(plane.kubeconfig), "apply", "--dry-run=server", "-f", "-"],
        input=manifest,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_api_server_accepts_the_valid_bases(control_plane: ControlPlane) -> None:
    for base in BASES:
        applied = _apply(control_plane, base)
        assert applied.returncode == 0, applied.stderr
        assert parse_manifests(base, "base.yaml").errors == []


def test_the_api_server_and_karpy_refuse_the_same_objects_with_the_same_words(
    control_plane: ControlPlane,
) -> None:
    disagreements: list[str] = []
    for case in CASES:
        applied = _apply(control_plane, case.manifest)
        karpy = parse_manifests(case.manifest, "case.yaml")
        if applied.returncode == 0 or case.words not in applied.stderr:
            disagreements.append(f"{case.id}: the API server said {applied.stderr.strip() or 'ok'!r}")
        if karpy.objects or not any(case.words in error for error in karpy.errors):
            disagreements.append(f"{case.id}: karpy said {karpy.errors!r}")
    assert disagreements == []


def test_every_error_karpy_gives_is_one_the_api_server_gives(control_plane: ControlPlane) -> None:
    # Not only the case's words: each of karpy's lines, without the file and object it names.
    disagreements: list[str] = []
    for case in CASES:
        applied = _apply(control_plane, case.manifest)
        for error in parse_manifests(case.manifest, "case.yaml").errors:
            said = _without_source(error)
            if said not in applied.stderr and not _admission(said, applied.stderr):
                disagreements.append(f"{case.id}: {said!r} not in {applied.stderr.strip()!r}")
    assert disagreements == []


def _without_source(error: str) -> str:
    """``case.yaml: Kind "name": path: message`` as ``path: message``, or a decoding error's own words.

    kubectl decodes an object's metadata itself and says so in other words
    around the decoder's message, and it says a null key with Go's %v of it:
    those are compared by the decoder's message, and by its start.
    """
    said = error.split('": ', 1)[1]
    if " cannot be handled as a " in said:
        said = said.split(": ", 1)[1]
    if said.startswith(NULL_KEY):
        return NULL_KEY
    return said


def _admission(said: str, answer: str) -> bool:
    """An admission plugin's refusal names no field; karpy's line names the field that caused it."""
    _, _, message = said.partition(": ")
    return message.startswith('pods "') and message in answer


def _random_word(chance: random.Random, longest: int) -> str:
    alphabet = "abcXYZ019-_. "
    return "".join(chance.choice(alphabet) for _ in range(chance.choice([0, 1, 2, 5, 20, longest])))


def _random_key(chance: random.Random) -> str:
    name = _random_word(chance, 64)
    form = chance.random()
    if form < 0.5:
        return name
    prefix = _random_word(chance, 20).lower() if form < 0.9 else "a" * 254
    return f"{prefix}/{name}" if chance.random() < 0.9 else f"{prefix}/{name}/x"


def _random_resources(chance: random.Random) -> dict[str, dict[str, str]]:
    names = ("cpu", "memory", "hugepages-2Mi", "example.com/foo", "ephemeral-storage")
    amounts = ("0", "1", "2", "500m", "1.5", "2Mi", "1Gi", "-1")
    return {
        kind: {name: chance.choice(amounts) for name in chance.sample(names, chance.randint(0, 3))}
        for kind in ("requests", "limits")
    }


def _random_toleration(chance: random.Random) -> dict[str, object]:
    toleration: dict[str, object] = {}
    for field, choices in (
        ("key", ["", "dedicated", "bad key"]),
        ("operator", ["", "Equal", "Exists", "Sometimes"]),
        ("value", ["", "x", "-bad-"]),
        ("effect", ["", "NoSchedule", "NoExecute", "Never"]),
    ):
        value = chance.choice(choices)
        if value:
            toleration[field] = value
    if chance.random() < 0.3:
        toleration["tolerationSeconds"] = 30
    return toleration


def _random_spread(chance: random.Random) -> dict[str, object]:
    spread: dict[str, object] = {
        "maxSkew": chance.choice([0, 1, 2]),
        "whenUnsatisfiable": chance.choice(["DoNotSchedule", "ScheduleAnyway", "Sometimes"]),
    }
    key = chance.choice(["", "topology.kubernetes.io/zone", "kubernetes.io/hostname"])
    if key:
        spread["topologyKey"] = key
    if chance.random() < 0.5:
        spread["minDomains"] = chance.choice([0, 1, 3])
    return spread


def _random_port(chance: random.Random, offset: int) -> dict[str, int]:
    port = {"containerPort": chance.choice([0, 8080 + offset, 70000, -1])}
    if chance.random() < 0.5:
        port["hostPort"] = chance.choice([0, 80 + offset, 70000, -1])
    return port


def _errors_of(answer: str) -> set[str]:
    lines = answer.strip().splitlines()
    if len(lines) == 1:  # one error is said on the first line
        return {lines[0].split(" is invalid: ", 1)[1]}
    return {line.removeprefix("* ") for line in lines[1:]}


@pytest.mark.parametrize("seed", range(12))
def test_random_labels_and_names_get_the_same_errors_from_both(
    control_plane: ControlPlane, seed: int
) -> None:
    # Not a list of examples: random label keys and values, and container names, in one pod,
    # whose every error the API server says (and karpy must say, in the same words).
    chance = random.Random(seed)
    labels = {_random_key(chance): _random_word(chance, 64) for _ in range(25)}
    names = {_random_word(chance, 64) or "c" for _ in range(10)}
    manifest = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "random", "namespace": "default", "labels": labels},
            "spec": {
                "nodeSelector": {_random_key(chance): _random_word(chance, 64) for _ in range(5)},
                "containers": [
                    {
                        "name": name,
                        "image": "registry.invalid/x:1",
                        "resources": _random_resources(chance),
                        "ports": [_random_port(chance, port) for port in range(chance.randint(0, 2))],
                    }
                    for name in sorted(names)
                ],
                "tolerations": [_random_toleration(chance) for _ in range(4)],
                "topologySpreadConstraints": [_random_spread(chance) for _ in range(3)],
            },
        }
    )
    applied = _apply(control_plane, manifest)
    karpy = {_without_source(error) for error in parse_manifests(manifest, "random.json").errors}
    api = _errors_of(applied.stderr) if applied.returncode else set()
    assert karpy == api


WORKLOADS = (
    ("apps/v1", "Deployment"),
    ("apps/v1", "ReplicaSet"),
    ("apps/v1", "StatefulSet"),
    ("apps/v1", "DaemonSet"),
    ("batch/v1", "Job"),
)


def _random_workload(chance: random.Random) -> dict[str, object]:
    api_version, kind = chance.choice(WORKLOADS)
    labels = {key: "web" for key in chance.sample(["app", "tier", "Bad Key"], chance.randint(0, 2))}
    spec: dict[str, object] = {
        "template": {
            "metadata": {"labels": labels},
            "spec": {
                "containers": [{"name": "c", "image": "registry.invalid/x:1"}] * chance.randint(0, 2),
                **(
                    {"restartPolicy": chance.choice(["Always", "OnFailure", "Never", "Sometimes"])}
                    if chance.random() < 0.7 or kind == "Job"
                    else {}
                ),
            },
        }
    }
    if kind not in ("DaemonSet", "Job"):
        spec["replicas"] = chance.choice([-1, 0, 3])
    if kind == "Job":
        spec["parallelism"] = chance.choice([-1, 1])
    selector = chance.random()
    if kind != "Job" and selector < 0.8:
        match = {
            key: chance.choice(["web", "other"])
            for key in chance.sample(["app", "tier"], chance.randint(0, 2))
        }
        spec["selector"] = {"matchLabels": match}
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": "w", "namespace": "default"},
        "spec": spec,
    }


@pytest.mark.parametrize("seed", range(20))
def test_random_workloads_get_the_same_errors_from_both(control_plane: ControlPlane, seed: int) -> None:
    manifest = json.dumps(_random_workload(random.Random(seed)))
    applied = _apply(control_plane, manifest)
    karpy = {_without_source(error) for error in parse_manifests(manifest, "workload.json").errors}
    api = _errors_of(applied.stderr) if applied.returncode else set()
    assert karpy == api, manifest
