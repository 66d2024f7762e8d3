"""Reading a document the user wrote with every error found, not only the first.

A user fixing a Scenario sees all its problems at once, one line each, and
not one per run: its parser reads each field through :meth:`FieldErrors.read`,
which records the field's :class:`~karpy.api._reader.ManifestError` and gives
a default, so the parse goes on to the next field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from karpy.api._reader import FieldReader, ManifestError
from karpy.api.fields import ReadLog

T = TypeVar("T")


class FieldErrors:
    """Every error of one document: a field that cannot be read is recorded and the parse goes on.

    ``stopped`` tells the unknown-field check which mappings were left half
    read (see :meth:`karpy.api.fields.ReadLog.unknown_fields`).
    """

    def __init__(self, log: ReadLog | None = None) -> None:
        self.log = log
        self.found: list[ManifestError] = []
        self.stopped: list[tuple[str, str]] = []

    def add(self, error: ManifestError, stopped_in: str | None = None) -> None:
        """Record ``error``; ``stopped_in``: the path of the mapping whose read it ended."""
        self.found.append(error)
        if stopped_in is not None:
            self.stopped.append((stopped_in, error.path))

    def read(self, reader: FieldReader, read: Callable[[], T], default: T) -> T:
        """``read()`` (a read of ``reader``'s fields), or ``default`` with its error recorded.

        A field reported missing is likely the one misspelt beside it: the
        mapping's unknown keys are then left out, the error says it.
        """
        try:
            return read()
        except ManifestError as error:
            prefix = f"{reader.path}." if reader.path else ""
            key = error.path[len(prefix) :] if error.path.startswith(prefix) else ""
            missing = bool(key) and not any(mark in key for mark in ".[") and not reader.has(key)
            self.add(error, reader.path if missing else None)
            return default

    def items(self, reader: FieldReader, key: str, parse: Callable[[FieldReader], T]) -> list[T]:
        """Each item of the list under ``key`` that parses; the errors of the others recorded."""
        value = reader.raw(key)
        if value is None:
            return []
        if not isinstance(value, list):
            empty: tuple[T, ...] = ()
            return list(self.read(reader, lambda: reader.items(key, parse), empty))  # reports the type
        parsed: list[T] = []
        for index, item in enumerate(value):
            path = f"{reader.child_path(key)}[{index}]"
            try:
                parsed.append(parse(FieldReader.of(item, path, self.log)))
            except ManifestError as error:
                self.add(error, path)
        return parsed

    def raise_first(self) -> None:
        """Raise the first error recorded, for a caller that stops at one."""
        if self.found:
            raise self.found[0]
