"""The error every file reader raises: where in which file, and what is wrong."""

from __future__ import annotations

from pathlib import Path


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


UTF8_BOM = b"\xef\xbb\xbf"


def read_source(path: str | Path) -> bytes:
    """The bytes of an input file, or a SourceError saying why it cannot be read.

    A leading UTF-8 byte-order mark, which Windows tools write, is dropped: every
    format then reads such a file as it reads one without.
    """
    try:
        return Path(path).read_bytes().removeprefix(UTF8_BOM)
    except FileNotFoundError:
        raise SourceError(path, "no such file") from None
    except IsADirectoryError:
        raise SourceError(path, "is a directory, not a file") from None
    except OSError as error:
        raise SourceError(path, f"cannot be read: {error.strerror}") from None
