"""karpy's ``karpenter.sh/nodepool-hash`` against the values Karpenter's own ``NodePool.Hash()`` gives.

The golden values in tests/data/nodepool-hash/hashes.json are printed by Karpenter v1.15's Go
code for the manifests beside them (scripts/gen-hash-golden).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from karpy.api._reader import FieldReader
from karpy.api.hashstructure import GoInt, GoMap, GoSlice, HashOptions, fnv1_64, hash_value
from karpy.api.nodepool import NODEPOOL_HASH_VERSION, NodePool

DATA = Path(__file__).parent.parent / "data" / "nodepool-hash"
GOLDEN = json.loads((DATA / "hashes.json").read_text())
MANIFESTS = sorted(DATA.glob("*.yaml"))
# Karpenter hashes what the API server hands it, with expireAfter defaulted to 720h by the CRD;
# karpy applies that default as it reads, so a manifest without it hashes as the defaulted one.
DEFAULTED_LIKE = {"no-expire-after": "minimal-defaulted"}


def read(path: Path) -> NodePool:
    return NodePool.parse(FieldReader(yaml.safe_load(path.read_text())))


def test_the_golden_values_are_of_the_hash_version_karpy_stamps() -> None:
    assert GOLDEN["nodePoolHashVersion"] == NODEPOOL_HASH_VERSION
    assert {path.stem for path in MANIFESTS} == set(GOLDEN["hashes"])


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda path: path.stem)
def test_template_hash_is_karpenters(path: Path) -> None:
    expected = GOLDEN["hashes"][DEFAULTED_LIKE.get(path.stem, path.stem)]
    assert read(path).template_hash() == expected


def test_the_golden_values_tell_the_cases_apart() -> None:
    # Guards the data: each dimension the cases vary must change Karpenter's hash, or the
    # comparison above would prove nothing for it.
    hashes = GOLDEN["hashes"]
    base = hashes["minimal-defaulted"]
    changed = ("labels", "annotations", "taints", "startup-taints", "termination-grace-period", "expire-1h")
    for name in changed:
        assert hashes[name] != base, name
    assert hashes["empty-collections"] != base  # {} and [] are not absent to Go
    assert hashes["expire-never"] != base
    assert hashes["taints"] != hashes["taints-as-startup-taints"]
    assert hashes["termination-grace-period-0s"] != base
    for name in ("requirements-min-values", "pool-fields-outside-template", "empty-metadata"):
        assert hashes[name] == base, name
    assert hashes["taints"] == hashes["taints-reordered"]
    assert hashes["expire-1h"] == hashes["expire-60m"]


def test_fnv1_64_is_gos_fnv_new64() -> None:
    # Published FNV-1 (not FNV-1a) 64-bit test vectors.
    assert fnv1_64(b"") == 0xCBF29CE484222325
    assert fnv1_64(b"a") == 0xAF63BD4C8601B7BE
    assert fnv1_64(b"foobar") == 0x340D8765A4DDA9C2


def test_hash_options_change_what_go_would_change() -> None:
    ints = GoSlice((GoInt(1), GoInt(2)))
    reversed_ints = GoSlice((GoInt(2), GoInt(1)))
    ordered = HashOptions()
    as_sets = HashOptions(slices_as_sets=True)
    assert hash_value(ints, ordered) != hash_value(reversed_ints, ordered)
    assert hash_value(ints, as_sets) == hash_value(reversed_ints, as_sets)
    in_order, out_of_order = GoMap({"a": "1", "b": "2"}), GoMap({"b": "2", "a": "1"})
    assert hash_value(in_order, ordered) == hash_value(out_of_order, ordered)
