"""karpy's rendering of the AWS provider's ``EC2NodeClass.Hash()`` against the provider's own values.

The golden values in tests/data/ec2nodeclass-hash/hashes.json are printed by
karpenter-provider-aws v1.15's Go code for the manifests beside them (scripts/gen-hash-golden).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from karpy.api.ec2nodeclass_go_hash import (
    KARPENTER_EC2NODECLASS_HASH_VERSION,
    ami_family_of,
    go_json_text,
    karpenter_ec2nodeclass_hash,
)

DATA = Path(__file__).parent.parent / "data" / "ec2nodeclass-hash"
GOLDEN = json.loads((DATA / "hashes.json").read_text())
MANIFESTS = sorted(DATA.glob("*.yaml"))


def spec_of(path: Path) -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load(path.read_text())["spec"]
    return spec


def test_the_golden_values_are_of_the_hash_version_karpy_renders() -> None:
    assert GOLDEN["ec2NodeClassHashVersion"] == KARPENTER_EC2NODECLASS_HASH_VERSION
    assert {path.stem for path in MANIFESTS} == set(GOLDEN["hashes"])


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda path: path.stem)
def test_hash_is_the_providers(path: Path) -> None:
    spec = spec_of(path)
    assert karpenter_ec2nodeclass_hash(spec, ami_family_of(spec)) == GOLDEN["hashes"][path.stem]


def test_the_golden_values_tell_the_cases_apart() -> None:
    hashes = GOLDEN["hashes"]
    base = hashes["defaulted"]
    same_as_base = ("selectors-changed", "ami-family-written", "kubelet-empty")
    # Selector terms are not hashed; amiFamily AL2023 is what the alias resolves to; an empty
    # kubelet is written "null" as an absent one is.
    assert all(hashes[name] == base for name in same_as_base)
    assert hashes["block-device-mappings"] == hashes["block-device-mappings-reordered"]
    assert hashes["volume-size-1024mi"] == hashes["volume-size-1gi"] != hashes["volume-size-2gi"]
    # Every other case differs from the base and from each other but for the pairs above.
    others = {name: value for name, value in hashes.items() if name not in same_as_base}
    assert len(set(others.values())) == len(others) - 2


def test_go_json_text_escapes_as_go_does() -> None:
    assert go_json_text({"b": 1, "a": "<&>"}) == '{"a":"\\u003c\\u0026\\u003e","b":1}'
