"""EC2NodeClass selector terms as AWS queries, and AWS' answers as Karpenter's status: pure code.

The semantics are Karpenter's v1 ones:

- **Terms are ORed, a term's fields ANDed.** Each term becomes one describe
  query whose filters must all match; the results of all terms are merged,
  each resource once. A term that matches nothing does not make the class
  unready while another term matches: only an empty union does.
- **Tags**: each ``key: value`` is the filter ``tag:key = value``; the value
  ``*`` means "any value", the filter ``tag-key = key``. (AWS filters also
  treat ``*`` and ``?`` inside a value as wildcards; Karpenter passes values
  through unchanged, and so does karpy.)
- **Subnets** by ``id`` (``subnet-id``) or tags; **security groups** by ``id``
  (``group-id``), ``name`` (``group-name``) or tags.
- **AMIs** by ``id``, by ``name`` and/or tags (with ``owner``), or by
  ``alias`` (``family@version``). Ids from all terms go in one query with no
  owner restriction, as an id names one image anyway. A name term without an
  owner is restricted to the owners ``self`` and ``amazon``: otherwise a name
  pattern could pick up anyone's public image. A tags-only term without an
  owner is not restricted (tags are the account's own, public images carry
  none of them). An alias is read from SSM parameters, one per architecture,
  at the paths Karpenter reads, under a configurable prefix (a test endpoint
  like moto reserves the real ``/aws/service/...`` names; the default prefix is
  empty).
- **Which AMI wins**: images are grouped by their requirements (architecture,
  and for an alias the variant's); within a group a non-deprecated image beats
  a deprecated one, then the newest creation date wins, then the
  lexicographically greater name. So a deprecated image is used only while it
  is the only one left, as Karpenter does. Images of architectures Kubernetes
  has no name for (``i386``, ``x86_64_mac``) are dropped.
- **Subnets in status** are ordered by free addresses (most first), then id;
  security groups by id, as Karpenter orders them.

Everything here works on small records the client builds from AWS responses,
so it is tested with plain data and its answers do not depend on the SDK.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from karpy.api.nodeclass import SelectorTerm
from karpy.api.requirements import (
    AWS_LABEL_INSTANCE_ACCELERATOR_COUNT,
    AWS_LABEL_INSTANCE_GPU_COUNT,
    LABEL_ARCH,
    Operator,
    Requirement,
)

# A describe filter: its name and the values any of which may match.
Filter = tuple[str, tuple[str, ...]]

ANY_VALUE = "*"
LATEST = "latest"
# Owners a name term is restricted to when it names none (see the module docstring).
DEFAULT_NAME_OWNERS = ("self", "amazon")

# EC2's architecture names → Kubernetes' (kubernetes.io/arch); others are not schedulable.
KUBE_ARCHITECTURES = {"x86_64": "amd64", "arm64": "arm64"}

_PINNED_VERSION = re.compile(r"^v\d+(\.\d+)*$")


class AliasError(ValueError):
    """An ``alias`` term karpy cannot resolve (unknown family, malformed version)."""


@dataclass(frozen=True, slots=True)
class Subnet:
    id: str
    zone: str
    zone_id: str
    available_ips: int

    def to_status(self) -> dict[str, str]:
        return {"id": self.id, "zone": self.zone, "zoneID": self.zone_id}


@dataclass(frozen=True, slots=True)
class SecurityGroup:
    id: str
    name: str

    def to_status(self) -> dict[str, str]:
        return {"id": self.id, "name": self.name}


@dataclass(frozen=True, slots=True)
class Image:
    """One DescribeImages result; ``deprecated`` is whether its deprecation time has passed."""

    id: str
    name: str
    architecture: str
    creation_date: str  # ISO 8601 as EC2 writes it, so text order is time order
    deprecated: bool = False


@dataclass(frozen=True, slots=True)
class ImageQuery:
    """One DescribeImages call: ``owners`` empty means any owner."""

    filters: tuple[Filter, ...]
    owners: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AliasParameter:
    """An SSM parameter naming an alias' image, and the requirements that image serves."""

    name: str
    requirements: tuple[Requirement, ...]


@dataclass(frozen=True, slots=True)
class ResolvedAMI:
    id: str
    name: str
    requirements: tuple[Requirement, ...]
    deprecated: bool = False

    def to_status(self) -> dict[str, object]:
        # Karpenter's order: shorter keys first, then alphabetical.
        ordered = sorted(self.requirements, key=lambda req: (len(req.key), req.key))
        status: dict[str, object] = {
            "id": self.id,
            "name": self.name,
            "requirements": [part for req in ordered for part in req.to_node_selector_requirements()],
        }
        if self.deprecated:
            status["deprecated"] = True
        return status


def tag_filters(tags: Mapping[str, str]) -> tuple[Filter, ...]:
    return tuple(
        ("tag-key", (key,)) if value == ANY_VALUE else (f"tag:{key}", (value,))
        for key, value in sorted(tags.items())
    )


def subnet_filters(term: SelectorTerm) -> tuple[Filter, ...]:
    ids: tuple[Filter, ...] = (("subnet-id", (term.id,)),) if term.id else ()
    return ids + tag_filters(term.tags)


def security_group_filters(term: SelectorTerm) -> tuple[Filter, ...]:
    ids: tuple[Filter, ...] = (("group-id", (term.id,)),) if term.id else ()
    names: tuple[Filter, ...] = (("group-name", (term.name,)),) if term.name else ()
    return ids + names + tag_filters(term.tags)


def image_queries(terms: Iterable[SelectorTerm]) -> tuple[ImageQuery, ...]:
    """The DescribeImages calls for the non-alias terms: one for all ids, one per other term."""
    ids: list[str] = []
    queries: list[ImageQuery] = []
    for term in terms:
        if term.alias:
            continue
        if term.id:
            ids.append(term.id)
            continue
        owners: tuple[str, ...] = (term.owner,) if term.owner else ()
        filters = tag_filters(term.tags)
        if term.name:
            owners = owners or DEFAULT_NAME_OWNERS
            filters = (("name", (term.name,)), *filters)
        queries.append(ImageQuery(filters, owners))
    if ids:
        queries.insert(0, image_id_query(ids))
    return tuple(queries)


def image_id_query(image_ids: Iterable[str]) -> ImageQuery:
    """The one DescribeImages call for images named by id (any owner: an id names one image)."""
    return ImageQuery((("image-id", tuple(image_ids)),))


def _arch(kube_architecture: str) -> Requirement:
    return Requirement.from_operator(LABEL_ARCH, Operator.IN, (kube_architecture,))


def _no_accelerators() -> tuple[Requirement, ...]:
    # The standard variant of an EKS-optimized AMI has no GPU or Neuron drivers.
    return (
        Requirement.from_operator(AWS_LABEL_INSTANCE_GPU_COUNT, Operator.DOES_NOT_EXIST),
        Requirement.from_operator(AWS_LABEL_INSTANCE_ACCELERATOR_COUNT, Operator.DOES_NOT_EXIST),
    )


def alias_parameters(alias: str, prefix: str, kubernetes_version: str) -> tuple[AliasParameter, ...]:
    """The SSM parameters Karpenter reads for ``alias`` (``family@version``), under ``prefix``.

    Families: ``al2023`` and ``al2`` (the EKS-optimized AMIs' standard variant,
    x86_64 and arm64) and ``bottlerocket``; the version is ``latest`` or a
    pinned release (``v20240807``, ``v1.20.3``).
    """
    family, _, version = alias.partition("@")
    if not version:
        raise AliasError(f"alias {alias!r} must be family@version (for example al2023@latest)")
    if version != LATEST and not _PINNED_VERSION.match(version):
        raise AliasError(f"alias {alias!r}: version must be latest or a release such as v20240807")
    base = f"{prefix.rstrip('/')}/aws/service"
    k8s = kubernetes_version
    paths: list[tuple[str, str, tuple[Requirement, ...]]] = []
    if family == "al2023":
        for arch in ("x86_64", "arm64"):
            name = (
                "recommended"
                if version == LATEST
                else f"amazon-eks-node-al2023-{arch}-standard-{k8s}-{version}"
            )
            path = f"{base}/eks/optimized-ami/{k8s}/amazon-linux-2023/{arch}/standard/{name}/image_id"
            paths.append((path, arch, _no_accelerators()))
    elif family == "al2":
        for arch, directory, node in (
            ("x86_64", "amazon-linux-2", "amazon-eks-node"),
            ("arm64", "amazon-linux-2-arm64", "amazon-eks-arm64-node"),
        ):
            name = "recommended" if version == LATEST else f"{node}-{k8s}-{version}"
            paths.append(
                (f"{base}/eks/optimized-ami/{k8s}/{directory}/{name}/image_id", arch, _no_accelerators())
            )
    elif family == "bottlerocket":
        release = LATEST if version == LATEST else version.removeprefix("v")
        for arch in ("x86_64", "arm64"):
            paths.append((f"{base}/bottlerocket/aws-k8s-{k8s}/{arch}/{release}/image_id", arch, ()))
    else:
        raise AliasError(f"alias {alias!r}: karpy resolves the families al2023, al2 and bottlerocket")
    return tuple(
        AliasParameter(path, (_arch(KUBE_ARCHITECTURES[arch]), *extra)) for path, arch, extra in paths
    )


def image_requirements(image: Image) -> tuple[Requirement, ...] | None:
    """The requirements an image selected by id, name or tags serves; None for an unknown architecture."""
    kube = KUBE_ARCHITECTURES.get(image.architecture)
    return None if kube is None else (_arch(kube),)


def _preference(image: Image) -> tuple[bool, str, str]:
    return (not image.deprecated, image.creation_date, image.name)


def newest_amis(candidates: Iterable[tuple[Image, tuple[Requirement, ...]]]) -> tuple[ResolvedAMI, ...]:
    """The winning image per distinct requirements (module docstring), newest first."""
    best: dict[frozenset[Requirement], tuple[Image, tuple[Requirement, ...]]] = {}
    for image, requirements in candidates:
        group = frozenset(requirements)
        held = best.get(group)
        if held is None or _preference(image) > _preference(held[0]):
            best[group] = (image, requirements)
    winners = sorted(best.values(), key=lambda pair: (_preference(pair[0]), pair[0].id), reverse=True)
    return tuple(ResolvedAMI(image.id, image.name, reqs, image.deprecated) for image, reqs in winners)


def ordered_subnets(subnets: Iterable[Subnet]) -> tuple[Subnet, ...]:
    unique = {subnet.id: subnet for subnet in subnets}
    return tuple(sorted(unique.values(), key=lambda subnet: (-subnet.available_ips, subnet.id)))


def ordered_security_groups(groups: Iterable[SecurityGroup]) -> tuple[SecurityGroup, ...]:
    unique = {group.id: group for group in groups}
    return tuple(sorted(unique.values(), key=lambda group: group.id))


def describe_terms(field_name: str, terms: Iterable[SelectorTerm]) -> str:
    """The terms as a user wrote them, for a message: ``subnetSelectorTerms [{tags: {a: b}}]``."""
    shown = []
    for term in terms:
        parts = []
        if term.tags:
            parts.append("tags: {" + ", ".join(f"{k}: {v}" for k, v in sorted(term.tags.items())) + "}")
        parts.extend(
            f"{label}: {value}"
            for label, value in (
                ("id", term.id),
                ("name", term.name),
                ("alias", term.alias),
                ("owner", term.owner),
            )
            if value
        )
        shown.append("{" + ", ".join(parts) + "}")
    return f"{field_name} [{', '.join(shown)}]"
