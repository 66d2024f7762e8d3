"""karpy's file loader against Karpenter's CRD rules: what the API server refuses, karpy refuses offline.

``karpy validate`` and ``karpy simulate`` read manifests without an API server,
so the CRD's checks do not run; the parsers repeat the ones a user is likely to
trip on. Every bad object of tests/crd_cases.py (which
tests/integration/test_crds.py proves the API server refuses) must be refused
here too, except the gaps docs/crds.md lists, which are asserted to be still
open so that closing one updates the list; every good object must be read
without error.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.crd_cases import (
    BAD_OBJECTS,
    DERIVED_BAD,
    DERIVED_GOOD,
    FULL_OBJECTS,
    GOOD_OBJECTS,
    POOL,
    cel_rules,
    cel_witnesses,
    claim_spec,
    merged,
    requirement,
    template_labels,
)

from karpy.api.manifest import parse_manifests

# The CRD refuses these; the loader reads them (docs/crds.md, "What they check"). None is left.
OFFLINE_GAPS: frozenset[str] = frozenset()


def errors(manifest: dict[str, Any]) -> list[str]:
    return parse_manifests(json.dumps(manifest), "case.json").errors


@pytest.mark.parametrize(
    ("manifest", "expected"), [case[1:] for case in BAD_OBJECTS], ids=[case[0] for case in BAD_OBJECTS]
)
def test_the_loader_refuses_what_the_crd_refuses(
    request: pytest.FixtureRequest, manifest: dict[str, Any], expected: str
) -> None:
    case = request.node.callspec.id
    if case in OFFLINE_GAPS:
        assert errors(manifest) == [], (
            f"{case} is refused offline now: take it off OFFLINE_GAPS and docs/crds.md"
        )
    else:
        assert errors(manifest), f"{case} is read without error"


@pytest.mark.parametrize(
    "manifest", [case[1] for case in GOOD_OBJECTS], ids=[case[0] for case in GOOD_OBJECTS]
)
def test_the_loader_reads_every_good_object(manifest: dict[str, Any]) -> None:
    assert errors(manifest) == []


def test_every_gap_is_a_case() -> None:
    assert OFFLINE_GAPS.issubset(case[0] for case in BAD_OBJECTS)


# --- The property: derived from the CRD schemas, not listed ---------------------------------------


@pytest.mark.parametrize("manifest", FULL_OBJECTS, ids=lambda manifest: manifest["kind"])
def test_the_full_objects_derived_from_are_read(manifest: dict[str, Any]) -> None:
    assert errors(manifest) == []


@pytest.mark.parametrize(
    ("manifest", "field"), [case[1:] for case in DERIVED_BAD], ids=[case[0] for case in DERIVED_BAD]
)
def test_the_loader_refuses_each_object_that_breaks_a_schema_constraint(
    manifest: dict[str, Any], field: str
) -> None:
    found = errors(manifest)
    assert len(found) >= 1, f"read without error: {field}"
    assert all("\n" not in error and error.startswith("case.json: ") for error in found)


def test_the_loader_names_the_field_a_schema_constraint_refuses() -> None:
    # The error names the broken field (or, for a list or map that grew, the field holding it),
    # unless an earlier check of the parser's stopped at another field of the same object.
    unnamed = [
        name for name, manifest, field in DERIVED_BAD if not any(field in error for error in errors(manifest))
    ]
    assert len(unnamed) <= len(DERIVED_BAD) // 10, unnamed


@pytest.mark.parametrize(
    "manifest", [case[1] for case in DERIVED_GOOD], ids=[case[0] for case in DERIVED_GOOD]
)
def test_the_loader_reads_each_object_on_a_schema_bound(manifest: dict[str, Any]) -> None:
    assert errors(manifest) == []


def test_every_cel_rule_of_the_crds_has_a_case() -> None:
    missing = [
        (kind, path, message) for kind, path, message in cel_rules() if not cel_witnesses(kind, path, message)
    ]
    assert missing == []


def test_the_derivation_covers_every_kind_and_constraint() -> None:
    kinds = {name.split(":", 1)[0].rstrip("0123456789") for name, _, _ in DERIVED_BAD}
    assert kinds == {"NodePool", "NodeClaim", "EC2NodeClass", "KWOKNodeClass", "NodeOverlay"}
    constraints = {name.split(":")[2] for name, _, _ in DERIVED_BAD}
    assert constraints >= {"type", "enum", "pattern", "maxLength", "maxItems", "minItems", "maxProperties"}
    assert constraints >= {"minimum", "maximum", "required", "format"}


# --- What the CRD takes but the pool's nodes could not carry -----------------------------------
#
# The NodePool CRD leaves these to Karpenter's runtime validation; the NodeClaim or Node made
# from the pool would be refused by the API server (a label value over 63 characters, a key
# that is not a qualified name), so the loader refuses the pool, naming the field.
NODE_REFUSALS = [
    (
        "pool-name-64",
        merged(POOL, {"metadata": {"name": "a" * 64}}),
        "metadata.name: must be no more than 63",
    ),
    (
        "label-name-part-64",
        template_labels({"example.com/" + "a" * 64: "a"}),
        "the name part must be no more than 63 characters",
    ),
    (
        "label-prefix-not-dns",
        template_labels({"Example.com/team": "a"}),
        "spec.template.metadata.labels.Example.com/team: label key 'Example.com/team': prefix part",
    ),
    (
        "requirement-name-part-64",
        requirement("example.com/" + "a" * 64, "Exists"),
        "spec.template.spec.requirements[0].key: label key",
    ),
    (
        "taint-value-64",
        claim_spec({"taints": [{"key": "example.com/team", "value": "a" * 64, "effect": "NoSchedule"}]}),
        "spec.template.spec.taints[0].value: taint 'example.com/team': the value must be no more than 63",
    ),
    (
        "taint-key-name-part-64",
        claim_spec({"startupTaints": [{"key": "a" * 64, "effect": "NoSchedule"}]}),
        "spec.template.spec.startupTaints[0].key: taint key",
    ),
    (
        "taint-twice",
        claim_spec(
            {
                "taints": [{"key": "example.com/team", "effect": "NoSchedule"}],
                "startupTaints": [{"key": "example.com/team", "value": "b", "effect": "NoSchedule"}],
            }
        ),
        "spec.template.spec.startupTaints[0]: duplicate taint Key/Effect pair example.com/team=NoSchedule",
    ),
]


@pytest.mark.parametrize(
    ("manifest", "expected"), [case[1:] for case in NODE_REFUSALS], ids=[case[0] for case in NODE_REFUSALS]
)
def test_a_pool_whose_nodes_could_not_carry_its_labels_name_or_taints_is_refused(
    manifest: dict[str, Any], expected: str
) -> None:
    (error,) = errors(manifest)
    assert expected in error


@pytest.mark.parametrize("length", [63, 1])
def test_names_and_label_parts_of_up_to_63_characters_are_read(length: int) -> None:
    manifest = merged(
        template_labels({"example.com/" + "a" * length: "a" * length}), {"metadata": {"name": "a" * length}}
    )
    assert errors(manifest) == []
