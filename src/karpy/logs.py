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


# A failing call's first retry, in seconds; each failure in a row doubles it up to the cap.
RETRY_FIRST = 5.0
RETRY_CAP = 300.0


def doubled(first: float, times: int, cap: float) -> float:
    """``first`` seconds, doubled for each time in a row after the first, at most ``cap``: a backoff."""
    return min(cap, first * 2.0 ** (times - 1))


class FailureStreak:
    """A call that may fail for a while (an endpoint down): one warning per streak, backoff, no traceback.

    An endpoint that does not answer fails every call to it the same way, so
    a line per failure says nothing new after the first, and a traceback says
    nothing at all (the failure is the endpoint's, not karpy's). So the first
    failure of a streak is a warning naming what failed and when it is tried
    again, the next ones are debug lines, unless the failure changes (another
    error code or kind), which is worth a warning again, and the first
    success after a streak is an info line. :meth:`failed` returns the delay
    before the next try: ``first`` seconds, doubled per failure in a row up
    to ``cap`` (equal for a fixed delay). Every controller that calls a cloud
    on a timer logs its failures through one of these (node class status,
    prices, the interruption queue, garbage collection, the cleanups).
    """

    def __init__(self, logger: logging.Logger, first: float = RETRY_FIRST, cap: float = RETRY_CAP) -> None:
        self.logger = logger
        self.first = first
        self.cap = cap
        # Failures in a row, and the kind of the last one warned about.
        self.failures = 0
        self._warned: tuple[str, str] | None = None

    @property
    def failing(self) -> bool:
        return self.failures > 0

    def failed(self, what: str, error: object, extra: Mapping[str, object] | None = None) -> float:
        """Log ``what`` failed with ``error`` (see above); the seconds to wait before trying again."""
        self.failures += 1
        delay = doubled(self.first, self.failures, self.cap)
        kind = (what, str(getattr(error, "code", "") or getattr(error, "reason", "")) or type(error).__name__)
        if kind == self._warned:
            self.logger.debug(
                "%s (%d in a row): %s; retrying in %gs", what, self.failures, error, delay, extra=extra
            )
            return delay
        self._warned = kind
        self.logger.warning("%s: %s; retrying in %gs", what, error, delay, extra=extra)
        return delay

    def succeeded(self, recovered: str, extra: Mapping[str, object] | None = None) -> None:
        """End the streak, if there is one, with an info line: ``recovered``, after how many failures."""
        if self.failures:
            self.logger.info("%s after %d failures", recovered, self.failures, extra=extra)
        self.failures = 0
        self._warned = None


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
