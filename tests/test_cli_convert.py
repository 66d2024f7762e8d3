"""``karpy convert``: v1beta1 manifests as v1, notes on what changed, everything else unchanged.

What it writes must read back (``karpy validate``) as the very objects karpy
made of the v1beta1 input, with no notes left: the conversion is done once.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support import DATA, run_cli

from karpy.api.manifest import KubernetesYAMLLoader, parse_manifests
from karpy.sim.scenario import builtin_scenario_path

SEED = builtin_scenario_path().parent
SEED_V1 = DATA / "seed-v1"

# Every field the NodePool conversion rewrites: the v1beta1 policy with no
# consolidateAfter, expireAfter under disruption, a nodeClassRef with neither
# group nor kind, and a kubelet block.
EVERY_FIELD = """\
apiVersion: karpenter.sh/v1beta1
kind: NodePool
metadata: {name: old}
spec:
  template:
    metadata:
      labels: {team: a}
    spec:
      nodeClassRef: {name: default}
      kubelet: {maxPods: 110, systemReserved: {cpu: 100m}}
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
  disruption:
    consolidationPolicy: WhenUnderutilized
    expireAfter: 168h
    budgets: [{nodes: "20%"}]
  weight: 10
"""

EVERY_FIELD_V1 = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodePool",
    "metadata": {"name": "old"},
    "spec": {
        "template": {
            "metadata": {"labels": {"team": "a"}},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
                ],
                "expireAfter": "168h",
            },
        },
        "disruption": {
            "consolidationPolicy": "WhenEmptyOrUnderutilized",
            "budgets": [{"nodes": "20%"}],
            "consolidateAfter": "0s",
        },
        "weight": 10,
    },
}

OTHERS = """\
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  ports: [{port: 80}]
---
apiVersion: example.com/v1
kind: Widget
metadata: {name: w, creationTimestamp: 2024-05-01T10:00:00Z}
spec: {enabled: "yes", size: "1"}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: new}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
"""


def objects(text: str) -> dict[tuple[str, str], Any]:
    """What karpy reads from ``text``, by kind and name, failing the test on any error."""
    result = parse_manifests(text, "test.yaml")
    assert result.errors == []
    return {(item.kind, item.name): item.obj for item in result.objects}


def documents(text: str) -> list[Any]:
    """The YAML documents of ``text`` read as Kubernetes reads them (timestamps stay strings)."""
    return list(yaml.load_all(text, Loader=KubernetesYAMLLoader))


def unconverted(obj: Any) -> Any:
    """``obj`` as if it had been written as v1."""
    return dataclasses.replace(obj, converted_from="") if hasattr(obj, "converted_from") else obj


def convert(capsys: pytest.CaptureFixture[str], *paths: Path) -> tuple[int, str, str]:
    return run_cli(capsys, "convert", *(str(path) for path in paths))


def test_the_seed_manifests_convert_to_the_v1_seed_and_read_back_the_same(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    files = [SEED / "ec2nodeclass.yaml", SEED / "nodepool.yaml", SEED / "deployment.yaml"]
    code, out, err = convert(capsys, *files)
    assert code == 0, err
    before = objects("\n---\n".join(path.read_text() for path in files))
    after = objects(out)
    v1 = objects("\n---\n".join((SEED_V1 / path.name).read_text() for path in files))
    assert list(after) == list(before)
    for key, obj in after.items():
        assert obj == unconverted(before[key]) == v1[key], key
    assert all(getattr(obj, "converted_from", "") == "" for obj in after.values())
    # Read back by karpy validate: no notes, nothing to convert any more.
    converted = tmp_path / "converted.yaml"
    converted.write_text(out)
    code, validated, err = run_cli(capsys, "validate", "--strict", str(converted))
    assert code == 0, err
    assert "note: " not in validated and err == ""


def test_every_converted_nodepool_field_is_rewritten_and_noted(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    old = tmp_path / "old.yaml"
    old.write_text(EVERY_FIELD)
    code, out, err = convert(capsys, old)
    assert code == 0, err
    assert yaml.safe_load(out) == EVERY_FIELD_V1
    changes = [
        "converted from karpenter.sh/v1beta1 to v1",
        "spec.disruption.consolidationPolicy: WhenUnderutilized is WhenEmptyOrUnderutilized in v1",
        "spec.disruption.consolidateAfter: set to 0s",
        "spec.disruption.expireAfter: moved to spec.template.spec.expireAfter",
        "spec.template.spec.nodeClassRef.group: defaulted to karpenter.k8s.aws",
        "spec.template.spec.nodeClassRef.kind: defaulted to EC2NodeClass",
        "spec.template.spec.kubelet: dropped: v1 has kubelet settings on the EC2NodeClass;"
        ' move {"maxPods": 110, "systemReserved": {"cpu": "100m"}} to its spec.kubelet',
    ]
    notes = [line for line in err.splitlines() if line.startswith("note: ")]
    comments = [line for line in out.splitlines() if line.startswith("# ")]
    assert len(notes) == len(comments) == len(changes)
    for change, note, comment in zip(changes, notes, comments, strict=True):
        assert note.startswith(f'note: {old}: NodePool "old": {change}'), note
        assert comment == "# " + note.removeprefix("note: ")
    (pool_before,) = objects(EVERY_FIELD).values()
    (pool_after,) = objects(out).values()
    assert pool_after == unconverted(pool_before)


def test_a_consolidate_after_v1beta1_refused_with_when_underutilized_is_kept_and_noted(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    old = tmp_path / "old.yaml"
    old.write_text(EVERY_FIELD.replace("expireAfter: 168h", "consolidateAfter: 5m"))
    code, out, err = convert(capsys, old)
    assert code == 0, err
    assert yaml.safe_load(out)["spec"]["disruption"]["consolidateAfter"] == "5m"
    assert "spec.disruption.consolidateAfter: 5m with WhenUnderutilized was refused by v1beta1" in err
    (pool,) = objects(out).values()
    assert pool.disruption.consolidate_after == 300.0


def test_other_objects_pass_through_unchanged(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    others = tmp_path / "others.yaml"
    others.write_text(OTHERS)
    code, out, err = convert(capsys, others)
    assert code == 0, err
    assert err == ""
    assert "# " not in out
    assert documents(out) == documents(OTHERS)
    # Kubernetes reads a timestamp as a string: written back quoted, still a string.
    assert "creationTimestamp: '2024-05-01T10:00:00Z'" in out


def test_a_list_has_its_v1beta1_items_converted(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    items = [*documents(EVERY_FIELD), *documents(OTHERS)]
    listed = tmp_path / "list.yaml"
    listed.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    code, out, err = convert(capsys, listed)
    assert code == 0, err
    (converted,) = documents(out)
    assert converted["items"] == [EVERY_FIELD_V1, *documents(OTHERS)]
    assert out.startswith("# ") and "kubelet: dropped" in err


def test_an_object_that_does_not_convert_is_left_out_with_an_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    ubuntu = (SEED / "ec2nodeclass.yaml").read_text().replace("amiFamily: AL2", "amiFamily: Ubuntu")
    mixed = tmp_path / "mixed.yaml"
    mixed.write_text(ubuntu + "\n---\n" + (SEED / "nodepool.yaml").read_text())
    code, out, err = convert(capsys, mixed)
    assert code == 2
    [error] = [line for line in err.splitlines() if line.startswith("error: ")]
    assert 'EC2NodeClass "default"' in error
    assert "spec.amiFamily: Karpenter v1 has no Ubuntu AMI family" in error
    assert [doc["kind"] for doc in yaml.safe_load_all(out)] == ["NodePool"]


@pytest.mark.parametrize(
    ("name", "text", "fragment"),
    [
        ("missing.yaml", None, "no such file or directory"),
        ("broken.yaml", "kind: NodePool\nmetadata: [unclosed\n", "invalid YAML"),
        ("latin1.yaml", "caf\xe9", "not UTF-8 text"),
    ],
)
def test_unreadable_input_is_an_error(
    name: str, text: str | None, fragment: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / name
    if text is not None:
        path.write_bytes(text.encode("latin-1"))
    code, out, err = convert(capsys, path)
    assert code == 2
    assert out == ""
    [error] = [line for line in err.splitlines() if line.startswith("error: ")]
    assert name in error and fragment in error


def test_template_resource_requests_are_dropped_as_v1_has_none(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # v1beta1's template.spec.resources.requests is gone from v1's NodeClaim template: kept, the
    # converted NodePool would be refused by the v1 CRD and by karpy validate alike.
    old = tmp_path / "old.yaml"
    old.write_text(
        EVERY_FIELD.replace("      kubelet:", '      resources: {requests: {cpu: "1"}}\n      kubelet:')
    )
    code, out, err = convert(capsys, old)
    assert code == 0, err
    assert yaml.safe_load(out) == EVERY_FIELD_V1
    dropped = 'spec.template.spec.resources: dropped: v1 NodePools have no resource requests; {"requests": '
    assert dropped in err
    converted = tmp_path / "converted.yaml"
    converted.write_text(out)
    code, _, err = run_cli(capsys, "validate", str(converted))
    assert code == 0, err


def test_a_disruption_block_without_a_policy_converts_as_v1beta1s_default(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # v1beta1 defaulted the policy to WhenUnderutilized; v1 requires consolidateAfter in a written
    # disruption block, so "disruption: {}" would be refused by the v1 CRD.
    old = tmp_path / "old.yaml"
    old.write_text(EVERY_FIELD.replace("    consolidationPolicy: WhenUnderutilized\n", ""))
    code, out, err = convert(capsys, old)
    assert code == 0, err
    assert yaml.safe_load(out) == EVERY_FIELD_V1
    assert (
        "spec.disruption.consolidationPolicy: WhenUnderutilized (the v1beta1 default) is"
        " WhenEmptyOrUnderutilized in v1" in err
    )
