"""The selector semantics as pure code: terms to filters, and which AMI wins.

Deprecation and equal creation times cannot be staged on the test endpoint
(moto has no image deprecation), so the ranking is checked here on records
shaped as the client builds them.
"""

from __future__ import annotations

import pytest

from karpy.api.nodeclass import SelectorTerm
from karpy.api.requirements import LABEL_ARCH, Operator, Requirement
from karpy.cloud.aws.selectors import (
    AliasError,
    Image,
    ImageQuery,
    Subnet,
    alias_parameters,
    describe_terms,
    image_queries,
    image_requirements,
    newest_amis,
    ordered_subnets,
    security_group_filters,
    subnet_filters,
)

AMD64 = (Requirement.from_operator(LABEL_ARCH, Operator.IN, ("amd64",)),)
ARM64 = (Requirement.from_operator(LABEL_ARCH, Operator.IN, ("arm64",)),)


def test_a_star_tag_value_is_a_tag_key_filter_and_fields_of_a_term_are_anded() -> None:
    term = SelectorTerm(tags={"karpenter.sh/discovery": "*", "tier": "private"}, id="subnet-1")
    assert subnet_filters(term) == (
        ("subnet-id", ("subnet-1",)),
        ("tag-key", ("karpenter.sh/discovery",)),
        ("tag:tier", ("private",)),
    )
    assert security_group_filters(SelectorTerm(name="nodes", id="sg-1")) == (
        ("group-id", ("sg-1",)),
        ("group-name", ("nodes",)),
    )


def test_ids_share_one_query_and_a_name_without_owner_is_restricted_to_self_and_amazon() -> None:
    terms = (
        SelectorTerm(id="ami-1"),
        SelectorTerm(name="eks-*"),
        SelectorTerm(alias="al2023@latest"),
        SelectorTerm(tags={"team": "nodes"}),
        SelectorTerm(id="ami-2"),
        SelectorTerm(name="custom", owner="123456789012"),
    )
    assert image_queries(terms) == (
        ImageQuery((("image-id", ("ami-1", "ami-2")),)),
        ImageQuery((("name", ("eks-*",)),), ("self", "amazon")),
        ImageQuery((("tag:team", ("nodes",)),)),
        ImageQuery((("name", ("custom",)),), ("123456789012",)),
    )


def test_alias_paths_are_karpenters_under_the_prefix() -> None:
    latest = alias_parameters("al2023@latest", "/karpy-test/", "1.37")
    assert [p.name for p in latest] == [
        "/karpy-test/aws/service/eks/optimized-ami/1.37/amazon-linux-2023/x86_64/standard/recommended/image_id",
        "/karpy-test/aws/service/eks/optimized-ami/1.37/amazon-linux-2023/arm64/standard/recommended/image_id",
    ]
    assert latest[1].requirements[0] == ARM64[0]
    pinned = alias_parameters("al2023@v20260301", "", "1.37")
    assert pinned[0].name == (
        "/aws/service/eks/optimized-ami/1.37/amazon-linux-2023/x86_64/standard/"
        "amazon-eks-node-al2023-x86_64-standard-1.37-v20260301/image_id"
    )
    assert alias_parameters("al2@latest", "", "1.37")[1].name == (
        "/aws/service/eks/optimized-ami/1.37/amazon-linux-2-arm64/recommended/image_id"
    )
    assert alias_parameters("bottlerocket@v1.20.3", "", "1.37")[0].name == (
        "/aws/service/bottlerocket/aws-k8s-1.37/x86_64/1.20.3/image_id"
    )


@pytest.mark.parametrize("alias", ["al2023", "al2023@", "al2023@newest", "ubuntu@latest"])
def test_malformed_or_unknown_aliases_are_refused(alias: str) -> None:
    with pytest.raises(AliasError, match="alias"):
        alias_parameters(alias, "", "1.37")


def test_a_non_deprecated_image_beats_a_newer_deprecated_one_per_architecture() -> None:
    old = Image("ami-old", "node-v1", "x86_64", "2026-01-01T00:00:00.000Z")
    new_deprecated = Image("ami-new", "node-v2", "x86_64", "2026-02-01T00:00:00.000Z", deprecated=True)
    arm = Image("ami-arm", "node-v2-arm", "arm64", "2026-02-01T00:00:00.000Z", deprecated=True)
    winners = newest_amis([(old, AMD64), (new_deprecated, AMD64), (arm, ARM64)])
    assert [(ami.id, ami.deprecated) for ami in winners] == [("ami-old", False), ("ami-arm", True)]
    assert winners[1].to_status()["deprecated"] is True
    assert "deprecated" not in winners[0].to_status()


def test_the_newest_wins_and_equal_times_go_to_the_greater_name() -> None:
    older = Image("ami-a", "node-v1", "x86_64", "2026-01-01T00:00:00.000Z")
    newer = Image("ami-b", "node-v0", "x86_64", "2026-03-01T00:00:00.000Z")
    tie = Image("ami-c", "node-v9", "x86_64", "2026-03-01T00:00:00.000Z")
    assert [ami.id for ami in newest_amis([(older, AMD64), (newer, AMD64)])] == ["ami-b"]
    assert [ami.id for ami in newest_amis([(newer, AMD64), (tie, AMD64), (older, AMD64)])] == ["ami-c"]


def test_images_of_architectures_kubernetes_cannot_name_are_dropped() -> None:
    assert image_requirements(Image("ami-1", "x", "i386", "")) is None
    assert image_requirements(Image("ami-2", "y", "arm64", "")) == ARM64


def test_subnets_are_ordered_by_free_addresses_then_id_each_once() -> None:
    a = Subnet("subnet-a", "us-east-1a", "use1-az1", 10)
    b = Subnet("subnet-b", "us-east-1b", "use1-az2", 200)
    c = Subnet("subnet-c", "us-east-1c", "use1-az3", 200)
    assert ordered_subnets([a, c, b, a]) == (b, c, a)


def test_terms_are_described_as_the_user_wrote_them() -> None:
    terms = (SelectorTerm(tags={"b": "2", "a": "1"}), SelectorTerm(name="n", owner="self"))
    assert (
        describe_terms("amiSelectorTerms", terms)
        == "amiSelectorTerms [{tags: {a: 1, b: 2}}, {name: n, owner: self}]"
    )
