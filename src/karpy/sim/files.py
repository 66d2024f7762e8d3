"""The files a run reads: regular files only, and not without bound.

``karpy simulate``, ``validate`` and ``convert`` take paths from the user;
what those paths name is checked before anything is opened:

- a directory stands for its manifest files, each checked as a named file;
- a regular file is read, through symbolic links, up to
  :data:`MAX_FILE_BYTES`; a bigger one is refused before it is read (a
  manifest that size is no manifest: the API server takes at most 3 MiB a
  request, and kubectl applies one object a request);
- anything else (a FIFO, a socket, a character or block device such as
  ``/dev/zero``) is refused without being opened: reading it could block
  for ever or never end;
- an operating system's refusal (no permission, a name too long, a
  symbolic link loop) is one sentence, never a traceback.

Every problem is an :class:`UnreadableFileError` whose message is the reason,
for the caller to put after the path.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

MAX_FILE_BYTES = 8 * 1024 * 1024
MIB = 1024 * 1024
NO_SUCH_FILE = "no such file or directory"

# What a stat's file type is called in a message.
_FILE_TYPES = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class UnreadableFileError(Exception):
    """A path karpy does not read; the message says why, to follow the path."""


def os_error_reason(error: OSError) -> str:
    """The operating system's reason, as one short phrase (a loop of links said in words)."""
    if error.errno == errno.ELOOP:
        return "symbolic link loop (too many levels of symbolic links)"
    reason = error.strerror or str(error)
    return reason[:1].lower() + reason[1:]


def _file_type(mode: int) -> str:
    return next((name for test, name in _FILE_TYPES if test(mode)), "not a regular file")


def _size(size: int) -> str:
    return f"{size / MIB:.1f} MiB" if size >= MIB else f"{size:,} bytes"


def path_kind(path: Path) -> str:
    """``"file"`` for a regular file, ``"directory"`` for a directory (symbolic links followed).

    Anything else raises :class:`UnreadableFileError`, without opening the path.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if os.path.islink(path):
            raise UnreadableFileError(f"symbolic link to nothing ({os.readlink(path)})") from None
        raise UnreadableFileError(NO_SUCH_FILE) from None
    except OSError as error:
        raise UnreadableFileError(os_error_reason(error)) from None
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISREG(mode):
        return "file"
    raise UnreadableFileError(f"{_file_type(mode)}, not a regular file: karpy reads only regular files")


def directory_entries(directory: Path) -> list[Path]:
    """The entries of ``directory``, sorted."""
    try:
        return sorted(directory.iterdir())
    except OSError as error:
        raise UnreadableFileError(f"cannot list the directory: {os_error_reason(error)}") from None


def read_regular_file(path: Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them.

    The file is opened without blocking and checked again once open, so a
    FIFO put in the place of a file after :func:`path_kind` looked is still
    refused, not waited on.
    """
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        raise UnreadableFileError(f"cannot read: {os_error_reason(error)}") from None
    with os.fdopen(descriptor, "rb") as file:
        status = os.fstat(file.fileno())
        if not stat.S_ISREG(status.st_mode):
            raise UnreadableFileError(
                f"{_file_type(status.st_mode)}, not a regular file: karpy reads only regular files"
            )
        if status.st_size > limit:
            raise UnreadableFileError(_too_big(status.st_size, limit))
        try:
            data = file.read(limit + 1)  # one byte more tells a file that grew past the limit
        except OSError as error:
            raise UnreadableFileError(f"cannot read: {os_error_reason(error)}") from None
    if len(data) > limit:
        raise UnreadableFileError(_too_big(len(data), limit))
    return data


def _too_big(size: int, limit: int) -> str:
    return (
        f"{_size(size)}, more than the {_size(limit)} karpy reads from one file"
        " (the API server takes at most 3 MiB a request); split it"
    )
