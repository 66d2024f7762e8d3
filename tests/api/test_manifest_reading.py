"""libyaml reads the documents (six times as fast); what they hold and what is refused is PyYAML's."""

from __future__ import annotations

import pytest
import yaml

from karpy.api.manifest import KubernetesYAMLLoader, LoadResult, load_documents, parse_manifests

SAMPLES = [
    "a: 1\nb: [x, 'y', n, on, off, yes, ~, 0x1F, 1e3, .inf, 2024-05-01T10:00:00Z, 010]\n",
    "---\nkind: Pod\n---\n\n---\n# only a comment\n---\n[1, {a: b}]\n",
    "base: &b {cpu: 1}\nuse: {<<: *b, memory: 2}\nlist: [*b, *b]\n",
    'text: |\n  line one\n  line two\nfolded: >\n  a\n  b\nquoted: "\\u00e9\\t"\n',
    "!!str 5: !!int '7'\nkey: é ü\n",
]
BROKEN = [
    "a: [unclosed\n",
    "a: 1\n b: 2\n",
    "\tkind: Pod\n",
    "a: *undefined\n",
    "kind: Pod\n---\nmetadata: {name: x\n---\nkind: Node\n",
    "a: 1\na: 2\n",
    "x: !!int abc\n",
    "[" * 2000 + "]" * 2000,
    "? [complex, key]\n: value\n",
    "é: ü\n\u2028: x\n",
]


@pytest.mark.parametrize("text", SAMPLES)
def test_documents_are_what_pyyamls_own_parser_makes(text: str) -> None:
    result = LoadResult()
    assert list(load_documents(text, "f.yaml", result)) == list(
        yaml.load_all(text, Loader=KubernetesYAMLLoader)
    )
    assert result.errors == []


@pytest.mark.parametrize("text", BROKEN)
def test_errors_are_pyyamls_words_at_its_position(text: str) -> None:
    fast = LoadResult()
    documents = list(load_documents(text, "f.yaml", fast))
    expected: list[object] = []
    try:
        for document in yaml.load_all(text, Loader=KubernetesYAMLLoader):
            expected.append(document)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        assert mark is not None
        assert len(fast.errors) == 1
        assert fast.errors[0].startswith(f"f.yaml:{mark.line + 1}:{mark.column + 1}: ")
        assert str(error.problem) in fast.errors[0]
    except ValueError as error:
        assert fast.errors == [f"f.yaml: invalid YAML: {error}"]
    assert documents == expected


def test_an_error_in_a_late_document_keeps_the_documents_before_it_and_its_line() -> None:
    node = "apiVersion: v1\nkind: Node\nmetadata: {{name: n{}}}\n"
    text = "---\n".join(node.format(index) for index in range(1000)) + "---\nkind: [broken\n"
    result = parse_manifests(text, "f.yaml")
    assert len(result.objects) == 1000
    lines = text.count("\n")
    assert result.errors == [
        f"f.yaml:{lines + 1}:1: invalid YAML: expected ',' or ']', but got '<stream end>'"
    ]
