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
    cel_rules,
    cel_witnesses,
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
    assert kinds == {"NodePool", "NodeClaim", "EC2NodeClass", "KWOKNodeClass"}
    constraints = {name.split(":")[2] for name, _, _ in DERIVED_BAD}
    assert constraints >= {"type", "enum", "pattern", "maxLength", "maxItems", "minItems", "maxProperties"}
    assert constraints >= {"minimum", "maximum", "required"}
