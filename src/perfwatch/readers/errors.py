"""The error every file reader raises: where in which file, and what is wrong."""

from __future__ import annotations

import codecs
from pathlib import Path
from typing import NoReturn


class SourceError(ValueError):
    """Bad input in a file, shown as ``FILE:LINE:COLUMN: problem`` (line and column 1-based,
    left out when unknown)."""

    def __init__(
        self,
        source: str | Path,
        message: str,
        *,
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        self.source = str(source)
        self.message = message
        self.line = line
        self.column = column
        location = [self.source]
        if line is not None:
            location.append(str(line))
            if column is not None:
                location.append(str(column))
        super().__init__(f"{':'.join(location)}: {message}")


UTF8_BOM = codecs.BOM_UTF8
UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


def read_source(path: str | Path) -> bytes:
    """The bytes of an input file as UTF-8, or a SourceError saying why it cannot be read.

    A leading UTF-8 byte-order mark, which Windows tools write, is dropped, and text
    that starts with a UTF-16 one (what Windows PowerShell 5 writes when it redirects
    a command's output, typeperf's for one) is converted: every format then reads such
    a file as it reads a UTF-8 one.
    """
    try:
        return as_utf8(Path(path).read_bytes(), path)
    except FileNotFoundError:
        raise SourceError(path, "no such file") from None
    except IsADirectoryError:
        raise SourceError(path, "is a directory, not a file") from None
    except OSError as error:
        raise SourceError(path, f"cannot be read: {error.strerror}") from None


def as_utf8(data: bytes, source: str | Path) -> bytes:
    """``data`` as ``read_source`` returns a file's bytes: without a UTF-8 byte-order
    mark, and converted from UTF-16 when it starts with one of its marks."""
    if not data.startswith(UTF16_BOMS):
        return data.removeprefix(UTF8_BOM)
    try:
        return data.decode("utf-16").encode()
    except UnicodeDecodeError as error:
        raise SourceError(
            source, f"not UTF-16 text after its byte-order mark (offset {error.start})"
        ) from None


def utf8_text(data: bytes, source: str | Path, problem: str = "not UTF-8 text") -> str:
    """``data`` decoded as UTF-8, or a SourceError at the first byte that is not UTF-8:
    its line, column and value, worded alike for every format. A NUL byte is valid UTF-8
    but no text has one: UTF-16 without its byte-order mark has one in every other byte,
    which a reader would otherwise report as rows of the wrong shape."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        _raise_at(data, error.start, f"{problem} (byte 0x{data[error.start]:02x})", source)
    nul = data.find(b"\0")
    if nul >= 0:
        _raise_at(data, nul, f"{problem} (a NUL byte: UTF-16 without a byte-order mark?)", source)
    return text


def _raise_at(data: bytes, offset: int, problem: str, source: str | Path) -> NoReturn:
    line_start = data.rfind(b"\n", 0, offset) + 1
    raise SourceError(
        source,
        f"{problem}; save it as UTF-8",
        line=data.count(b"\n", 0, offset) + 1,
        column=offset - line_start + 1,
    ) from None
