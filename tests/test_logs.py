"""Log lines: one JSON object per line naming the objects it is about, or text for a terminal."""

from __future__ import annotations

import contextlib
import io
import json
import logging
from collections.abc import Iterator

import pytest
from tests.support import make_pod

from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import NodeClaim, NodeClaimSpec
from karpy.api.nodepool import NodeClassRef
from karpy.logs import about, configure, named, parse_level


@contextlib.contextmanager
def configured(level: int, log_format: str) -> Iterator[io.StringIO]:
    """The root logger writing into a buffer, configured as ``karpy run`` does it.

    The previous handlers and level come back afterwards, so other tests' logging is untouched.
    """
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    stream = io.StringIO()
    try:
        configure(level, log_format, stream)
        yield stream
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved_handlers:
            root.addHandler(handler)
        root.setLevel(saved_level)


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """The root logger writing JSON into a buffer."""
    with configured(logging.INFO, "json") as stream:
        yield stream


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def nodeclaim(name: str) -> NodeClaim:
    return NodeClaim(
        metadata=ObjectMeta(name=name, labels={"karpenter.sh/nodepool": "default"}),
        spec=NodeClaimSpec(node_class_ref=NodeClassRef("karpenter.kwok.sh", "KWOKNodeClass", "default")),
    )


def test_a_line_names_its_objects_by_kind(captured: io.StringIO) -> None:
    claim = nodeclaim("default-x7k2p")
    pod = make_pod("web-0", namespace="shop")
    logging.getLogger("karpy.provisioning").info(
        "created nodeclaim %s",
        claim.name,
        extra=about(claim, pod, NodePool=named("default"), controller="provisioning"),
    )
    [line] = lines(captured)
    assert line["level"] == "INFO"
    assert line["logger"] == "karpy.provisioning"
    assert line["message"] == "created nodeclaim default-x7k2p"
    assert line["NodeClaim"] == {"name": "default-x7k2p"}
    assert line["Pod"] == {"namespace": "shop", "name": "web-0"}
    assert line["NodePool"] == {"name": "default"}
    assert line["controller"] == "provisioning"
    assert isinstance(line["time"], str) and line["time"].endswith("Z") and "T" in line["time"]


def test_lines_without_objects_and_levels_below_the_threshold(captured: io.StringIO) -> None:
    log = logging.getLogger("karpy.run")
    log.debug("not shown at info")
    log.warning("careful: %d%%", 50)
    log.error("broken")
    found = lines(captured)
    levels = [(line["level"], line["message"]) for line in found]
    assert levels == [("WARN", "careful: 50%"), ("ERROR", "broken")]
    assert set(found[0]) == {"level", "time", "logger", "message"}


def test_an_exception_adds_the_error_and_its_stack(captured: io.StringIO) -> None:
    try:
        raise ValueError("bad quantity")
    except ValueError:
        logging.getLogger("karpy.runtime").exception(
            "reconcile %s %s failed", "termination", "n1", extra=about(controller="termination", key="n1")
        )
    [line] = lines(captured)
    assert line["error"] == "bad quantity"
    assert "ValueError: bad quantity" in str(line["stacktrace"])
    assert line["controller"] == "termination"


def test_a_field_never_overwrites_the_line_itself(captured: io.StringIO) -> None:
    logging.getLogger("karpy").info("real message", extra=about(message="impostor", level="DEBUG"))
    [line] = lines(captured)
    assert line["message"] == "real message"
    assert line["level"] == "INFO"


def test_the_text_format_keeps_the_objects_readable() -> None:
    with configured(logging.DEBUG, "text") as stream:
        logging.getLogger("karpy.termination").info(
            "terminated nodeclaim %s",
            "n1",
            extra=about(nodeclaim("n1"), make_pod("p", namespace="ns"), controller="termination"),
        )
    text = stream.getvalue()
    expected = " INFO karpy.termination: terminated nodeclaim n1 NodeClaim=n1 Pod=ns/p controller=termination"
    assert expected in text


def test_log_levels_are_karpenters() -> None:
    assert parse_level("debug") == logging.DEBUG
    assert parse_level("INFO") == logging.INFO
    assert parse_level("error") == logging.ERROR
    assert parse_level("warn") == logging.WARNING
    with pytest.raises(ValueError, match="unknown log level 'loud'"):
        parse_level("loud")
    with pytest.raises(ValueError, match="unknown log format"):
        configure(logging.INFO, "xml")
