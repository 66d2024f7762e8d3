"""karpy's CRDs against a real API server: installed, defaulted, validated, printed by kubectl.

The CRDs are applied once for the module with ``kubectl apply -f -`` (the output of
``karpy crds``) and deleted at the end, with the objects the tests made, since the
control plane is shared by the whole session. Each test checks what a user would
see: the seed manifests accepted unchanged, Karpenter's defaults filled in by the
API server, bad values refused by schema and CEL validation, a v1beta1 manifest
refused with a message that says how to convert it, and ``kubectl get``'s columns.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.crd_cases import (
    BAD_OBJECTS,
    DERIVED_BAD,
    DERIVED_GOOD,
    FULL_OBJECTS,
    GOOD_OBJECTS,
    RULE_OBJECT,
    claim_spec,
    merged,
    node_class,
)
from tests.integration.conftest import ControlPlane, install_crds

from karpy.api.manifest import parse_manifests
from karpy.api.requirements import LABEL_NODEPOOL, NORMALIZED_LABELS, WELL_KNOWN_LABELS

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SEED_V1 = REPO / "tests" / "data" / "seed-v1"
SEED_V1BETA1_NODEPOOL = REPO / "src" / "karpy" / "sim" / "scenarios" / "seed" / "nodepool.yaml"
EVERY_FIELD_V1 = REPO / "tests" / "data" / "realworld" / "nodepool-v1-every-field.yaml"

KWOK_NODE_CLASS = """\
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: it-crds}
"""

NODECLAIM = """\
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: it-crds-abcde
  labels:
    karpenter.sh/nodepool: default
    node.kubernetes.io/instance-type: c5.large
    karpenter.sh/capacity-type: spot
    topology.kubernetes.io/zone: us-east-1a
spec:
  requirements:
    - {key: node.kubernetes.io/instance-type, operator: In, values: [c5.large]}
  nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: it-crds}
  resources: {requests: {cpu: "1", memory: 1Gi}}
"""


def nodepool(name: str, spec_lines: str = "") -> str:
    return f"""\
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {name}}}
spec:
{spec_lines}  template:
    spec:
      requirements: []
      nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: it-crds}}
"""


def kubectl_failing(plane: ControlPlane, *args: str, stdin: str | None = None) -> str:
    """Run kubectl expecting it to fail; return its standard error."""
    result = subprocess.run(
        [plane.kubectl_path, "--kubeconfig", str(plane.kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0, f"kubectl {' '.join(args)} succeeded:\n{result.stdout}"
    return result.stderr


def header(table: str) -> list[str]:
    return table.splitlines()[0].split()


@pytest.fixture(scope="module")
def crds(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    names = install_crds(control_plane)
    yield control_plane
    for kind in ("nodeclaims", "nodepools", "ec2nodeclasses", "kwoknodeclasses"):
        control_plane.kubectl("delete", kind, "--all", "--ignore-not-found", "--wait=true")
    control_plane.kubectl("delete", "crd", *names, "--ignore-not-found", "--wait=true")


def test_seed_v1_manifests_are_accepted_and_defaulted(crds: ControlPlane) -> None:
    crds.kubectl("apply", "-f", str(SEED_V1 / "ec2nodeclass.yaml"), "-f", str(SEED_V1 / "nodepool.yaml"))

    assert header(crds.kubectl("get", "nodepools")) == ["NAME", "NODECLASS", "NODES", "READY", "AGE"]
    assert header(crds.kubectl("get", "nodepools", "-o", "wide")) == [
        *["NAME", "NODECLASS", "NODES", "READY", "AGE"],
        *["WEIGHT", "CPU", "MEMORY"],
    ]
    pool = json.loads(crds.kubectl("get", "nodepool", "default", "-o", "json"))
    assert pool["apiVersion"] == "karpenter.sh/v1"
    assert pool["spec"]["disruption"]["budgets"] == [{"nodes": "10%"}]
    assert pool["spec"]["disruption"]["consolidateAfter"] == "30s"  # as written
    node_class = json.loads(crds.kubectl("get", "ec2nodeclass", "default", "-o", "json"))
    assert node_class["spec"]["amiSelectorTerms"] == [{"alias": "al2@latest"}]
    assert node_class["spec"]["metadataOptions"]["httpTokens"] == "required"


def test_every_karpenter_field_is_accepted_and_a_misspelt_kubelet_or_metadata_option_refused(
    crds: ControlPlane,
) -> None:
    text = EVERY_FIELD_V1.read_text().replace("name: default", "name: it-crds-every-field")
    crds.kubectl("apply", "-f", "-", stdin=text)
    node_class = json.loads(crds.kubectl("get", "ec2nodeclass", "it-crds-every-field", "-o", "json"))
    assert node_class["spec"]["kubelet"]["maxPods"] == 20
    assert node_class["spec"]["metadataOptions"]["httpPutResponseHopLimit"] == 1
    for written, misspelt, field in [
        ("maxPods: 20", "maxPod: 20", "spec.kubelet.maxPod"),
        ("httpTokens: required", "httpToken: required", "spec.metadataOptions.httpToken"),
    ]:
        typo = text.replace(written, misspelt).replace("it-crds-every-field", "it-crds-typo")
        error = kubectl_failing(crds, "apply", "-f", "-", stdin=typo)
        assert f'unknown field "{field}"' in error, error


def test_a_minimal_nodepool_gets_every_karpenter_default(crds: ControlPlane) -> None:
    crds.kubectl("apply", "-f", "-", stdin=KWOK_NODE_CLASS + "---\n" + nodepool("it-crds-minimal"))
    spec = json.loads(crds.kubectl("get", "nodepool", "it-crds-minimal", "-o", "json"))["spec"]
    assert spec["disruption"] == {
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "consolidateAfter": "0s",
        "budgets": [{"nodes": "10%"}],
    }
    assert spec["template"]["spec"]["expireAfter"] == "720h"


def test_v1beta1_nodepool_is_rejected_with_how_to_convert(crds: ControlPlane) -> None:
    error = kubectl_failing(crds, "create", "-f", str(SEED_V1BETA1_NODEPOOL))
    assert "karpenter.sh/v1beta1 is not accepted" in error
    assert "karpy convert" in error
    assert "karpenter.sh/v1" in error


@pytest.mark.parametrize(
    ("spec_lines", "expected"),
    [
        ("  disruption: {consolidationPolicy: Sometimes, consolidateAfter: 0s}\n", "Sometimes"),
        ("  weight: 200\n", "spec.weight"),
        ('  disruption: {consolidateAfter: 0s, budgets: [{nodes: "110%"}]}\n', "budgets[0].nodes"),
        (
            '  disruption: {consolidateAfter: 0s, budgets: [{nodes: "1", schedule: "@daily"}]}\n',
            "'schedule' must be set with 'duration'",
        ),
    ],
    ids=["unknown-consolidation-policy", "weight-200", "budget-110-percent", "schedule-without-duration"],
)
def test_invalid_v1_nodepool_is_rejected(crds: ControlPlane, spec_lines: str, expected: str) -> None:
    error = kubectl_failing(crds, "create", "-f", "-", stdin=nodepool("it-crds-invalid", spec_lines))
    assert "is invalid" in error
    assert expected in error


@pytest.mark.parametrize("cpu", ['"-5"', "-5", '"-500m"'], ids=["string", "integer", "millicores"])
def test_a_negative_limit_is_rejected(crds: ControlPlane, cpu: str) -> None:
    manifest = nodepool("it-crds-negative", f"  limits: {{cpu: {cpu}, memory: 1Gi}}\n")
    error = kubectl_failing(crds, "create", "-f", "-", stdin=manifest)
    assert "is invalid" in error and "spec.limits.cpu" in error


def test_non_negative_limits_are_accepted(crds: ControlPlane) -> None:
    manifest = nodepool("it-crds-limits", '  limits: {cpu: 5, memory: "+1Gi", nvidia.com/gpu: "0"}\n')
    crds.kubectl("create", "-f", "-", stdin=manifest)
    crds.kubectl("delete", "nodepool", "it-crds-limits", "--wait=true")


def test_restricted_requirement_key_is_rejected_by_cel(crds: ControlPlane) -> None:
    manifest = nodepool("it-crds-hostname").replace(
        "requirements: []", "requirements: [{key: kubernetes.io/hostname, operator: Exists}]"
    )
    error = kubectl_failing(crds, "create", "-f", "-", stdin=manifest)
    assert 'label "kubernetes.io/hostname" is restricted' in error


def test_nodeclaim_columns_status_subresource_and_immutable_spec(crds: ControlPlane) -> None:
    crds.kubectl("apply", "-f", "-", stdin=KWOK_NODE_CLASS + "---\n" + NODECLAIM)
    table = crds.kubectl("get", "nodeclaims")
    assert header(table) == ["NAME", "TYPE", "CAPACITY", "ZONE", "NODE", "READY", "AGE"]
    assert table.splitlines()[1].split()[:4] == ["it-crds-abcde", "c5.large", "spot", "us-east-1a"]

    status = {
        "status": {
            "nodeName": "it-crds-node",
            "providerID": "kwok://it-crds-node",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Ready",
                    "lastTransitionTime": "2024-01-01T00:00:00Z",
                }
            ],
        }
    }
    crds.kubectl(
        "patch",
        "nodeclaim",
        "it-crds-abcde",
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(status),
    )
    row = crds.kubectl("get", "nodeclaims", "--no-headers").split()
    assert row[:6] == ["it-crds-abcde", "c5.large", "spot", "us-east-1a", "it-crds-node", "True"]
    wide = crds.kubectl("get", "nodeclaims", "-o", "wide")
    assert header(wide)[7:] == ["IMAGEID", "ID", "NODEPOOL", "NODECLASS", "DRIFTED"]

    error = kubectl_failing(
        crds, "patch", "nodeclaim", "it-crds-abcde", "--type=merge", "-p", '{"spec":{"expireAfter":"1h"}}'
    )
    assert "spec is immutable" in error


# --- Karpenter's validation rules, one bad object each -----------------------------------------
#
# Each case of tests/crd_cases.py is sent with ``kubectl create --dry-run=server``: the API server
# runs the whole admission chain (schema, CEL) and stores nothing, so the cases need no clean-up
# and one API server checks them all quickly.

DOCS_EXAMPLES = REPO / "tests" / "data" / "karpenter-docs"
REALWORLD = REPO / "tests" / "data" / "realworld"


def dry_run_create(plane: ControlPlane, manifest: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [plane.kubectl_path, "--kubeconfig", str(plane.kubeconfig), "create", "--dry-run=server", "-f", "-"],
        input=json.dumps(manifest),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("manifest", "expected"), [case[1:] for case in BAD_OBJECTS], ids=[case[0] for case in BAD_OBJECTS]
)
def test_karpenters_rule_refuses_the_bad_object_with_its_message(
    crds: ControlPlane, manifest: dict[str, Any], expected: str
) -> None:
    result = dry_run_create(crds, manifest)
    assert result.returncode != 0, f"accepted:\n{json.dumps(manifest, indent=1)}"
    assert "is invalid" in result.stderr or "unknown field" in result.stderr, result.stderr
    assert expected in result.stderr, result.stderr


@pytest.mark.parametrize(
    "manifest", [case[1] for case in GOOD_OBJECTS], ids=[case[0] for case in GOOD_OBJECTS]
)
def test_a_good_object_of_each_shape_is_accepted(crds: ControlPlane, manifest: dict[str, Any]) -> None:
    result = dry_run_create(crds, manifest)
    assert result.returncode == 0, result.stderr


def test_each_well_known_label_may_be_required_and_set(crds: ControlPlane) -> None:
    allowed = sorted((WELL_KNOWN_LABELS | set(NORMALIZED_LABELS)) - {LABEL_NODEPOOL})
    manifest = claim_spec({"requirements": [{"key": key, "operator": "Exists"} for key in allowed]})
    manifest = merged(manifest, {"spec": {"template": {"metadata": {"labels": dict.fromkeys(allowed, "a")}}}})
    result = dry_run_create(crds, manifest)
    assert result.returncode == 0, result.stderr


def karpenter_objects(path: Path) -> list[dict[str, Any]]:
    return [
        document
        for document in yaml.safe_load_all(path.read_text())
        if document and document.get("apiVersion") in ("karpenter.sh/v1", "karpenter.k8s.aws/v1")
    ]


@pytest.mark.parametrize(
    "path",
    [
        *sorted(DOCS_EXAMPLES.glob("*.yaml")),
        *(REALWORLD / name for name in ("nodepool-general-purpose.yaml", "nodepool-gpu-bottlerocket.yaml")),
        *(REALWORLD / name for name in ("nodepool-windows.yaml", "nodepools-capacity-spread.yaml")),
        SEED_V1 / "ec2nodeclass.yaml",
        SEED_V1 / "nodepool.yaml",
    ],
    ids=lambda path: path.name,
)
def test_karpenters_documented_examples_and_the_seed_are_accepted(crds: ControlPlane, path: Path) -> None:
    objects = karpenter_objects(path)
    assert objects
    for manifest in objects:
        # Renamed, as other tests of the module create objects named "default".
        result = dry_run_create(crds, merged(manifest, {"metadata": {"name": RULE_OBJECT}}))
        assert result.returncode == 0, f"{manifest['kind']} {manifest['metadata']['name']}:\n{result.stderr}"


def test_node_class_ref_group_and_kind_and_role_are_immutable(crds: ControlPlane) -> None:
    name = "it-crds-immutable"
    created = [
        merged(node_class({}), {"metadata": {"name": name}}),
        merged(claim_spec({"nodeClassRef": {"name": name}}), {"metadata": {"name": name}}),
    ]
    crds.kubectl("create", "-f", "-", stdin="\n---\n".join(json.dumps(item) for item in created))
    try:
        for patch, expected in [
            ({"group": "karpenter.kwok.sh"}, "nodeClassRef.group is immutable"),
            ({"kind": "KWOKNodeClass"}, "nodeClassRef.kind is immutable"),
        ]:
            body = {"spec": {"template": {"spec": {"nodeClassRef": patch}}}}
            error = kubectl_failing(crds, "patch", "nodepool", name, "--type=merge", "-p", json.dumps(body))
            assert expected in error, error
        crds.kubectl(
            "patch",
            "nodepool",
            name,
            "--type=merge",
            "-p",
            json.dumps({"spec": {"template": {"spec": {"nodeClassRef": {"name": "another"}}}}}),
        )
        error = kubectl_failing(
            crds, "patch", "ec2nodeclass", name, "--type=merge", "-p", '{"spec":{"role":"another-role"}}'
        )
        assert "immutable field changed" in error, error
        to_profile = {"spec": {"role": None, "instanceProfile": "KarpenterNodeInstanceProfile-it"}}
        error = kubectl_failing(
            crds, "patch", "ec2nodeclass", name, "--type=merge", "-p", json.dumps(to_profile)
        )
        assert "You must delete and recreate this node class" in error, error
    finally:
        crds.kubectl("delete", "nodepool,ec2nodeclass", name, "--ignore-not-found", "--wait=true")


# --- The property, on the API server: refused by the CRDs <=> refused by karpy validate --------
#
# Every object tests/crd_cases.py derives from the CRD schemas (a bad one per constraint, a good
# one per bound) and every full object they are derived from is sent in one server dry run, each
# under a name of its own so that the API server's answer can be told apart; karpy's loader must
# give the same verdict on each.


def server_verdicts(plane: ControlPlane, manifests: list[dict[str, Any]]) -> dict[str, str]:
    """The API server's refusal of each manifest by its new name (empty when accepted)."""
    named = [
        merged(manifest, {"metadata": {"name": f"it-derived-{index}"}})
        for index, manifest in enumerate(manifests)
    ]
    result = subprocess.run(
        [plane.kubectl_path, "--kubeconfig", str(plane.kubeconfig), "create", "--dry-run=server", "-f", "-"],
        input="\n---\n".join(json.dumps(manifest) for manifest in named),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    verdicts = {manifest["metadata"]["name"]: "" for manifest in named}
    accepted = {line.split("/", 1)[1].split()[0] for line in result.stdout.splitlines() if "/" in line}
    for line in result.stderr.splitlines():
        for name in verdicts:
            if f'"{name}"' in line:
                verdicts[name] = line
    for name, refusal in verdicts.items():
        assert (name in accepted) != bool(refusal), f"no verdict for {name}:\n{result.stderr[-2000:]}"
    return verdicts


def test_the_api_server_and_karpy_agree_on_every_derived_object(crds: ControlPlane) -> None:
    cases = [
        *((name, manifest, True) for name, manifest, _ in DERIVED_BAD),
        *((name, manifest, False) for name, manifest in DERIVED_GOOD),
        *((f"full-{manifest['kind']}", manifest, False) for manifest in FULL_OBJECTS),
    ]
    verdicts = server_verdicts(crds, [manifest for _, manifest, _ in cases])
    disagreements = []
    for index, (name, manifest, derived_refused) in enumerate(cases):
        server = verdicts[f"it-derived-{index}"]
        offline = parse_manifests(json.dumps(manifest), "case.json").errors
        if bool(server) != derived_refused or bool(server) != bool(offline):
            disagreements.append(f"{name}: API server {server or 'accepted'}; karpy {offline or 'accepted'}")
    assert disagreements == [], "\n".join(disagreements)
