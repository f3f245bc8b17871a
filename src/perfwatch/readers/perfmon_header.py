"""How a Windows perfmon counter log in CSV or TSV starts (typeperf, relog, perfmon):
its first header cell names the format, ``(PDH-CSV 4.0) (GMT Standard Time)(0)``.

Kept apart from the reader, which builds numpy samples, so recognising a file costs
no such import.
"""

from __future__ import annotations

PDH_MARKER = "(PDH-CSV"
PDH_TSV_MARKER = "(PDH-TSV"
PDH_MARKERS = (PDH_MARKER, PDH_TSV_MARKER)


def first_header_text(text: str) -> str:
    """The start of the first non-blank line, without a byte-order mark or opening quote."""
    return text.lstrip("\ufeff \t\r\n").lstrip('"')


def starts_like_perfmon(data: bytes) -> bool:
    """Whether a file's bytes begin with a perfmon CSV or TSV header."""
    head = data[:256].decode("utf-8", errors="replace")
    return first_header_text(head).startswith(PDH_MARKERS)
