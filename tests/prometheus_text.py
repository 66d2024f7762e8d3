"""A strict reader of the Prometheus text exposition format (0.0.4), for the tests.

It is written from the format's description, independently of
:mod:`karpy.operator.metrics`, so that a test reading metrics back checks
what a Prometheus server would read, not the writer against itself. It
rejects what Prometheus would reject: a sample before its family's TYPE line
(for typed families), a malformed label set, an unknown escape, a value that
is not a float, and the same series twice.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_TYPES = ("counter", "gauge", "histogram", "summary", "untyped")
_SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count", "")}

Labels = frozenset[tuple[str, str]]


class ExpositionError(ValueError):
    pass


@dataclass
class Exposition:
    help: dict[str, str] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    samples: dict[tuple[str, Labels], float] = field(default_factory=dict)

    def value(self, name: str, /, **labels: str) -> float:
        """The sample ``name`` with exactly ``labels``; KeyError if there is none."""
        return self.samples[(name, frozenset(labels.items()))]

    def series(self, name: str) -> dict[Labels, float]:
        return {labels: value for (sample, labels), value in self.samples.items() if sample == name}

    def find(self, name: str, /, **labels: str) -> list[float]:
        """Every sample ``name`` whose labels include ``labels``."""
        wanted = set(labels.items())
        return [value for found, value in self.series(name).items() if wanted <= found]


def _unescape(text: str, allowed: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\":
            if index + 1 >= len(text):
                raise ExpositionError(f"dangling backslash in {text!r}")
            escaped = text[index + 1]
            if escaped not in allowed:
                raise ExpositionError(f"unknown escape \\{escaped} in {text!r}")
            out.append({"n": "\n", "\\": "\\", '"': '"'}[escaped])
            index += 2
            continue
        out.append(char)
        index += 1
    return "".join(out)


def _labels(text: str, line: str) -> tuple[Labels, int]:
    """Parse ``{a="b",...}`` at the start of ``text``; return the labels and the characters used."""
    pairs: dict[str, str] = {}
    index = 1
    while True:
        if text[index] == "}":
            return frozenset(pairs.items()), index + 1
        match = _LABEL_NAME.match(text, index)
        if match is None:
            raise ExpositionError(f"bad label name in {line!r}")
        name = match.group()
        index = match.end()
        if text[index : index + 2] != '="':
            raise ExpositionError(f'expected =" after {name} in {line!r}')
        index += 2
        start = index
        while text[index] != '"':
            index += 2 if text[index] == "\\" else 1
        if name in pairs:
            raise ExpositionError(f"label {name} twice in {line!r}")
        pairs[name] = _unescape(text[start:index], 'n\\"')
        index += 1
        if text[index] == ",":
            index += 1
        elif text[index] != "}":
            raise ExpositionError(f"expected , or }} in {line!r}")


def _family_of(name: str, types: dict[str, str]) -> str | None:
    if name in types:
        return name
    for family, kind in types.items():
        for suffix in _SUFFIXES.get(kind, ()):
            if suffix and name == family + suffix:
                return family
    return None


def parse(text: str) -> Exposition:
    result = Exposition()
    if text and not text.endswith("\n"):
        raise ExpositionError("the exposition must end with a newline")
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] == "HELP":
                result.help[parts[2]] = _unescape(parts[3] if len(parts) > 3 else "", "n\\")
            elif len(parts) >= 4 and parts[1] == "TYPE":
                if parts[3] not in _TYPES:
                    raise ExpositionError(f"unknown type in {line!r}")
                if parts[2] in result.types:
                    raise ExpositionError(f"TYPE twice for {parts[2]}")
                result.types[parts[2]] = parts[3]
            continue
        match = _NAME.match(line)
        if match is None:
            raise ExpositionError(f"bad metric name in {line!r}")
        name = match.group()
        rest = line[match.end() :]
        labels: Labels = frozenset()
        if rest.startswith("{"):
            labels, used = _labels(rest, line)
            rest = rest[used:]
        fields = rest.split()
        if len(fields) not in (1, 2):
            raise ExpositionError(f"expected a value (and a timestamp) in {line!r}")
        try:
            value = float(fields[0])
        except ValueError:
            raise ExpositionError(f"bad value in {line!r}") from None
        if fields[0] not in ("+Inf", "-Inf", "NaN") and not math.isfinite(value):
            raise ExpositionError(f"bad value spelling in {line!r}")
        if _family_of(name, result.types) is None:
            raise ExpositionError(f"sample {name} before its TYPE line")
        key = (name, labels)
        if key in result.samples:
            raise ExpositionError(f"series twice: {line!r}")
        result.samples[key] = value
    return result
