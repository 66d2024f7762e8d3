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
from tests.crd_cases import BAD_OBJECTS, GOOD_OBJECTS

from karpy.api.manifest import parse_manifests

# The CRD refuses these; the loader reads them (docs/crds.md, "What they check").
OFFLINE_GAPS = frozenset(
    {
        "consolidate-after-missing",
        "kubelet-eviction-threshold",
        "kubelet-eviction-over-100",
        "reservation-owner-only",
        "reservation-id-and-tags",
        "reservation-id-malformed",
    }
)


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
