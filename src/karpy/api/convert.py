"""``karpy convert``: v1beta1 manifests rewritten as v1, for a cluster that serves only v1.

Karpenter v1.1 stopped serving v1beta1 and karpy's CRDs refuse it
(docs/crds.md), yet many guides and repositories still hold v1beta1
NodePools and EC2NodeClasses. This module turns a YAML stream into the same
stream with every ``karpenter.sh/v1beta1`` NodePool and
``karpenter.k8s.aws/v1beta1`` EC2NodeClass rewritten as v1, by the very
conversion karpy applies when it reads them (:func:`karpy.api.nodepool.convert_v1beta1`,
:func:`karpy.api.nodeclass.convert_v1beta1`), so what ``karpy convert``
writes is what ``karpy validate`` and ``karpy simulate`` would have used.

Choices, each for a user migrating manifests:

- Every other document (v1 objects, Deployments, kinds karpy does not know,
  ``List`` items that need nothing) is passed through unchanged in content:
  ``kubectl apply -f <(karpy convert old.yaml)`` applies the whole file. Only
  what is converted is checked: a file karpy cannot otherwise read is not a
  conversion problem.
- What each conversion changed is written as YAML comments above the object,
  so the notes travel with the converted file into review (the dropped
  ``kubelet`` block is quoted there, to be moved to the EC2NodeClass), and
  as ``note:`` lines on standard error, where a user piping the output
  straight into kubectl sees them.
- A v1beta1 object that does not convert (an unknown AMI family, a field of
  the wrong type) is left out of the output with an error line; the caller
  exits 2. Leaving it as written would only have the API server refuse it.
- Comments and formatting of the input are not kept (the YAML is re-dumped,
  keys in their written order); values are, strings that look like other
  types quoted as Kubernetes reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import yaml

from karpy.api._reader import FieldReader
from karpy.api.manifest import LoadResult, load_documents, parse_document
from karpy.api.nodeclass import EC2_GROUP, EC2_KIND
from karpy.api.nodeclass import convert_v1beta1 as convert_ec2nodeclass
from karpy.api.nodepool import API_VERSION_V1, API_VERSION_V1BETA1
from karpy.api.nodepool import convert_v1beta1 as convert_nodepool

# What is converted, by (apiVersion, kind): the v1 apiVersion and the converter.
_CONVERTERS = {
    (API_VERSION_V1BETA1, "NodePool"): (API_VERSION_V1, convert_nodepool),
    (f"{EC2_GROUP}/v1beta1", EC2_KIND): (f"{EC2_GROUP}/v1", convert_ec2nodeclass),
}


@dataclass(slots=True)
class ConvertedDocument:
    """One output document and the notes on what converting it changed (none if untouched)."""

    content: object
    notes: list[str] = field(default_factory=list)


@dataclass(slots=True)
class ConvertResult:
    documents: list[ConvertedDocument] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def notes(self) -> list[str]:
        return [note for document in self.documents for note in document.notes]


def convert_manifests(text: str, source: str) -> ConvertResult:
    """Every document of a YAML stream, v1beta1 NodePools and EC2NodeClasses as v1."""
    result = ConvertResult()
    # Read as every manifest is (karpy.api.manifest): the same bounds, and a syntax
    # error ends the stream where it stands with the same report.
    unreadable = LoadResult()
    for index, document in enumerate(load_documents(text, source, unreadable)):
        if document is None:
            continue
        converted = _convert(document, source, index, result)
        if converted is not None:
            result.documents.append(converted)
    result.errors.extend(unreadable.errors)
    return result


def _convert(document: object, source: str, index: int, result: ConvertResult) -> ConvertedDocument | None:
    if not isinstance(document, dict):
        return ConvertedDocument(document)
    if document.get("kind") == "List" and isinstance(document.get("items"), list):
        items = [_convert(item, source, index, result) for item in document["items"]]
        kept = [item for item in items if item is not None]
        content = {**document, "items": [item.content for item in kept]}
        return ConvertedDocument(content, [note for item in kept for note in item.notes])
    api_version, kind = document.get("apiVersion"), document.get("kind")
    converter = (
        _CONVERTERS.get((api_version, kind))
        if isinstance(api_version, str) and isinstance(kind, str)
        else None
    )
    if converter is None:
        return ConvertedDocument(document)
    # Read it as karpy reads it: the errors and notes a user gets from karpy validate.
    loaded = LoadResult()
    parse_document(document, source, index, loaded)
    if loaded.errors:
        result.errors.extend(loaded.errors)
        return None
    v1, convert = converter
    mapping = convert(FieldReader(document)).mapping
    mapping["apiVersion"] = v1
    return ConvertedDocument(mapping, loaded.notes)


def render_yaml(documents: list[ConvertedDocument]) -> str:
    """The documents as one YAML stream, each converted one under its notes as comments."""
    parts: list[str] = []
    for document in documents:
        comments = "".join(f"# {note}\n" for note in document.notes)
        body = yaml.safe_dump(document.content, sort_keys=False, allow_unicode=True, width=1 << 16)
        parts.append(comments + body)
    return "---\n".join(parts)
