"""A manifest file's bytes as text, decoded the way kubectl decodes them.

kubectl reads a file through a byte-order-mark sniffer before its YAML
decoder: a UTF-8 mark is dropped, a UTF-16 mark (little- or big-endian)
switches the file to UTF-16, and anything else is taken as UTF-8. karpy
accepts the same files, so a manifest saved by a Windows editor as "Unicode"
(UTF-16 with a mark) works here as it does with kubectl.

Everything else is refused with one sentence saying what the file is, for the
loader to put after the file's name:

- a UTF-32 mark: kubectl has no UTF-32 reader either (its sniffer would take
  the mark for UTF-16 and feed NULs to the YAML decoder); saying "UTF-32" is
  more use than that;
- a NUL byte in what would be UTF-8: no YAML or JSON text holds one (YAML
  forbids the character), so the file is binary, or UTF-16/32 without the
  mark that says which;
- bytes that are not UTF-8: typically Latin-1 or Windows-1252 text. kubectl
  would quietly turn them into U+FFFD and apply the mangled names; refusing
  with the line and column of the first bad byte is the safer choice for a
  tool whose point is to check manifests before they reach a cluster.

Decoding is pure and total: every byte string gives text or one
:class:`TextDecodeError`, never a ``UnicodeDecodeError`` from deeper down.
"""

from __future__ import annotations

import codecs

# Longest mark first: the UTF-32 little-endian mark begins with the UTF-16 one.
_BYTE_ORDER_MARKS = (
    (codecs.BOM_UTF32_LE, "UTF-32LE"),
    (codecs.BOM_UTF32_BE, "UTF-32BE"),
    (codecs.BOM_UTF8, "UTF-8"),
    (codecs.BOM_UTF16_LE, "UTF-16LE"),
    (codecs.BOM_UTF16_BE, "UTF-16BE"),
)
_CODECS = {"UTF-8": "utf-8", "UTF-16LE": "utf-16-le", "UTF-16BE": "utf-16-be"}


class TextDecodeError(ValueError):
    """The bytes are not text karpy reads; the message says what they are instead."""


def _position(data: bytes, offset: int) -> str:
    """ "line L, column C" of byte ``offset``, counting characters of the valid UTF-8 before it."""
    line = data.count(b"\n", 0, offset) + 1
    line_start = data.rfind(b"\n", 0, offset) + 1
    column = len(data[line_start:offset].decode("utf-8", errors="replace")) + 1
    return f"line {line}, column {column}"


def decode_manifest_bytes(data: bytes) -> str:
    """The text of a manifest file: UTF-8, or UTF-16 with a byte-order mark (the mark dropped)."""
    mark, encoding = next(
        ((mark, encoding) for mark, encoding in _BYTE_ORDER_MARKS if data.startswith(mark)),
        (b"", "UTF-8"),
    )
    if encoding not in _CODECS:
        raise TextDecodeError(
            f"{encoding} text (by its byte-order mark); karpy, like kubectl, reads UTF-8 or UTF-16"
        )
    body = data[len(mark) :]
    nul = body.find(b"\x00") if encoding == "UTF-8" else -1
    if nul >= 0:
        raise TextDecodeError(f"binary data, not YAML or JSON text (a NUL byte at {_position(body, nul)})")
    try:
        return body.decode(_CODECS[encoding])
    except UnicodeDecodeError as error:
        if encoding == "UTF-8":
            raise TextDecodeError(
                f"not UTF-8 text: byte 0x{body[error.start]:02X} at {_position(body, error.start)}"
                " is not UTF-8 (Latin-1 or another 8-bit encoding?); save the file as UTF-8"
            ) from None
        raise TextDecodeError(
            f"not {encoding} text although its byte-order mark says so: {error.reason}"
            f" at byte {error.start + len(mark)}"
        ) from None
