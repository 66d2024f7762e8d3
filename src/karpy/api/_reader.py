"""Typed reading of Kubernetes manifests with field paths in every error.

Users hand karpy plain YAML written for Karpenter and Kubernetes. When a field
is wrong, the one thing that makes the error actionable is *where* it is: the
object and the dotted field path (``spec.limits.cpu``). Every parser in
``karpy.api`` therefore reads through a :class:`FieldReader`, which carries the
path it stands at and raises :class:`ManifestError` with that path. The parsers
stay short (one line a field) and no parser has to format a message itself.
A reader given a :class:`KeyLog` (:class:`karpy.api.fields.ReadLog` is one)
also records which keys were asked for, so that a format its parser defines
(the Scenario) can refuse the keys no one asked for. The protocol keeps this
module, which every parser imports, below the field checks that implement it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Protocol, TypeVar

T = TypeVar("T")


class KeyLog(Protocol):
    """Where a :class:`FieldReader` records the keys its parser asked each mapping for."""

    def asked(self, data: Mapping[str, object], path: str, key: str) -> None:
        """``key`` of the mapping ``data`` at ``path`` was asked for."""

    def free_form(self, data: Mapping[str, object], path: str) -> None:
        """Every key of the mapping ``data`` at ``path`` was read (a map of names to values)."""


class ManifestError(ValueError):
    """A field of a manifest is missing, of the wrong type, or out of range.

    ``path`` is the dotted field path inside the object ("spec.limits.cpu");
    the loader adds the file and the object's kind and name around it.
    """

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.message = message


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


class FieldReader:
    """A view on one mapping of a manifest, at a known field path."""

    __slots__ = ("_data", "_log", "path")

    def __init__(self, data: Mapping[str, object], path: str = "", log: KeyLog | None = None) -> None:
        """``log``, when given, records the keys asked for here and in every reader below."""
        self._data = data
        self.path = path
        self._log = log

    @classmethod
    def of(cls, value: object, path: str = "", log: KeyLog | None = None) -> FieldReader:
        if not isinstance(value, Mapping):
            raise ManifestError(path, f"expected an object, got {_type_name(value)}")
        return cls(value, path, log)

    def _get(self, key: str) -> object:
        if self._log is not None:
            self._log.asked(self._data, self.path, key)
        return self._data.get(key)

    def _keys(self) -> Iterator[str]:
        if self._log is not None:
            self._log.free_form(self._data, self.path)
        return iter(self._data)

    def child_path(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def error(self, key: str, message: str) -> ManifestError:
        return ManifestError(self.child_path(key) if key else self.path, message)

    def has(self, key: str) -> bool:
        return self._get(key) is not None

    def raw(self, key: str) -> object:
        return self._get(key)

    def keys(self) -> Iterator[str]:
        return self._keys()

    def __iter__(self) -> Iterator[str]:
        return self._keys()

    def string(self, key: str, default: str = "") -> str:
        value = self._get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self.error(key, f"expected a string, got {_type_name(value)}")
        return value

    def required_str(self, key: str) -> str:
        value = self.string(key)
        if not value:
            raise self.error(key, "required")
        return value

    def integer(self, key: str, default: int | None = None) -> int | None:
        value = self._get(key)
        if value is None:
            return default
        if isinstance(value, float) and value.is_integer():
            # 2.0 reaches the API server as 2 (kubectl re-encodes YAML and JSON numbers).
            return int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"expected an integer, got {_type_name(value)}")
        return value

    def boolean(self, key: str, default: bool = False) -> bool:
        value = self._get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {_type_name(value)}")
        return value

    def scalar_str(self, key: str, default: str | None = None) -> str | None:
        """A string, number or boolean read as its string form (quantities, label values)."""
        value = self._get(key)
        if value is None:
            return default
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, str | int | float):
            return str(value)
        raise self.error(key, f"expected a string or number, got {_type_name(value)}")

    def obj(self, key: str) -> FieldReader:
        """The mapping under ``key``; an absent key reads as an empty mapping."""
        value = self._get(key)
        if value is None:
            return FieldReader({}, self.child_path(key), self._log)
        return FieldReader.of(value, self.child_path(key), self._log)

    def str_map(self, key: str) -> dict[str, str]:
        reader = self.obj(key)
        result: dict[str, str] = {}
        for name in reader:
            value = reader.scalar_str(name)
            result[str(name)] = value if value is not None else ""
        return result

    def str_list(self, key: str) -> tuple[str, ...]:
        value = self._get(key)
        if value is None:
            return ()
        if not isinstance(value, list):
            raise self.error(key, f"expected a list, got {_type_name(value)}")
        items: list[str] = []
        for index, item in enumerate(value):
            if isinstance(item, bool) or not isinstance(item, str | int | float):
                raise ManifestError(
                    f"{self.child_path(key)}[{index}]", f"expected a string, got {_type_name(item)}"
                )
            items.append(str(item))
        return tuple(items)

    def items(self, key: str, parse: Callable[[FieldReader], T]) -> tuple[T, ...]:
        """Parse each mapping of the list under ``key`` with ``parse``."""
        value = self._get(key)
        if value is None:
            return ()
        if not isinstance(value, list):
            raise self.error(key, f"expected a list, got {_type_name(value)}")
        return tuple(
            parse(FieldReader.of(item, f"{self.child_path(key)}[{index}]", self._log))
            for index, item in enumerate(value)
        )
