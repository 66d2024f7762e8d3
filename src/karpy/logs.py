"""Log lines that say which object they are about: JSON for ``karpy run``, text for people.

A controller in a cluster is read through a log pipeline (Loki, CloudWatch,
Elasticsearch...), where a line is useful in proportion to what can be
filtered on. Karpenter writes one JSON object per line with the time, the
level, the logger, the message and the objects the line is about, keyed by
kind (``"NodeClaim": {"name": "default-x7k2p"}``, ``"Pod": {"namespace":
"default", "name": "web-0"}``), so "everything about this NodeClaim" is one
query. ``karpy run`` writes the same shape by default (``--log-format json``);
``--log-format text`` and ``karpy simulate`` write lines for a terminal.

**Saying what a line is about.** A log call passes :func:`about` as ``extra``::

    log.info("launched nodeclaim %s", claim.name, extra=about(claim, controller="nodeclaim.lifecycle"))

:func:`about` turns each object into a reference under its kind (name, plus
namespace for namespaced objects) and keeps keyword fields as they are; the
formatters put them on the line. Because the fields travel in one record
attribute, a call without them logs exactly as before, and a third-party
formatter sees an ordinary record.

**Levels.** ``LOG_LEVEL`` takes Karpenter's values, ``debug``, ``info`` and
``error`` (plus ``warn``); the JSON ``level`` field is upper case, as
Karpenter's logger writes it. The HTTP client's line per request is kept for
``debug``. Exceptions logged with ``log.exception`` add an
``error`` field (the exception's message) and a ``stacktrace``.
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TextIO

FIELDS_ATTRIBUTE = "karpy_fields"

LOG_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}
LOG_FORMATS = ("json", "text")
# The HTTP client under lightkube logs every request at INFO: thousands of lines an
# hour from the informers' watches alone. They are shown at debug level only.
CHATTY_LIBRARY_LOGGERS = ("httpx", "httpx2", "httpcore", "httpcore2")


def object_ref(obj: object) -> tuple[str, dict[str, str]] | None:
    """``(kind, {"namespace": ..., "name": ...})`` for a Kubernetes record, or None."""
    kind = getattr(obj, "kind", None)
    metadata = getattr(obj, "metadata", None)
    name = getattr(metadata, "name", None)
    if not isinstance(kind, str) or not isinstance(name, str):
        return None
    namespace = getattr(metadata, "namespace", "")
    ref = {"namespace": namespace, "name": name} if namespace else {"name": name}
    return kind, ref


def about(*objects: object, **fields: object) -> dict[str, object]:
    """The ``extra`` of a log call: references to ``objects`` under their kinds, and ``fields``."""
    collected: dict[str, object] = {}
    for obj in objects:
        ref = object_ref(obj)
        if ref is not None:
            collected[ref[0]] = ref[1]
    collected.update(fields)
    return {FIELDS_ATTRIBUTE: collected}


def named(name: str, namespace: str = "") -> dict[str, str]:
    """A reference to an object known only by name, for a keyword of :func:`about`."""
    return {"namespace": namespace, "name": name} if namespace else {"name": name}


def record_fields(record: logging.LogRecord) -> Mapping[str, object]:
    fields = getattr(record, FIELDS_ATTRIBUTE, None)
    return fields if isinstance(fields, Mapping) else {}


def _timestamp(created: float) -> str:
    moment = datetime.fromtimestamp(created, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _level_name(levelno: int) -> str:
    return "WARN" if levelno == logging.WARNING else logging.getLevelName(levelno)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: level, time, logger, message, then the line's fields."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "level": _level_name(record.levelno),
            "time": _timestamp(record.created),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record_fields(record).items():
            if key not in line:
                line[key] = value
        if record.exc_info and record.exc_info[1] is not None:
            line["error"] = str(record.exc_info[1]) or type(record.exc_info[1]).__name__
            line["stacktrace"] = "".join(traceback.format_exception(*record.exc_info)).rstrip()
        return json.dumps(line, default=str, ensure_ascii=False)


def _text_value(value: object) -> str:
    if isinstance(value, Mapping) and set(value) <= {"namespace", "name"} and "name" in value:
        namespace = value.get("namespace")
        return f"{namespace}/{value['name']}" if namespace else str(value["name"])
    if isinstance(value, str):
        return value
    return json.dumps(value, default=str)


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: message kind=name key=value``, for a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        parts = [
            _timestamp(record.created),
            _level_name(record.levelno),
            f"{record.name}:",
            record.getMessage(),
        ]
        parts.extend(f"{key}={_text_value(value)}" for key, value in record_fields(record).items())
        text = " ".join(parts)
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def parse_level(text: str) -> int:
    """A ``LOG_LEVEL`` value as a logging level; ValueError names the accepted values."""
    level = LOG_LEVELS.get(text.strip().lower())
    if level is None:
        raise ValueError(f"unknown log level {text!r} (expected debug, info, warn or error)")
    return level


def configure(level: int, log_format: str, stream: TextIO | None = None) -> logging.Handler:
    """Send every log record at ``level`` or above to ``stream`` (standard error) in ``log_format``.

    Replaces the root logger's handlers, so it can follow an earlier
    ``logging.basicConfig``; returns the handler installed.
    """
    if log_format not in LOG_FORMATS:
        raise ValueError(f"unknown log format {log_format!r} (expected json or text)")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level)
    for name in CHATTY_LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(level if level <= logging.DEBUG else logging.WARNING)
    return handler
