"""RFC 3339 date-times as records and verdicts write them."""

from __future__ import annotations

import re
from datetime import UTC, datetime

# Same pattern as $defs.rfc3339 in the schemas.
RFC3339 = re.compile(
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?"
    r"([Zz]|[+-][0-9]{2}:[0-9]{2})$"
)


def parse_rfc3339(text: str) -> datetime:
    """Parse an RFC 3339 date-time into an aware datetime; ValueError if it is not one."""
    if not RFC3339.match(text):
        raise ValueError(f"{text!r} is not an RFC 3339 date-time (e.g. 2024-05-01T02:00:00Z)")
    return datetime.fromisoformat(text.upper())


def parse_time_or_date(text: str) -> datetime:
    """An RFC 3339 date-time, or a date ``YYYY-MM-DD`` taken as midnight UTC; ValueError
    naming both forms otherwise (a time without its offset is refused: its zone is unknown)."""
    try:
        return parse_rfc3339(text)
    except ValueError:
        pass
    try:
        day = datetime.strptime(text, "%Y-%m-%d")
    except ValueError:
        raise ValueError(
            f"{text!r} is neither an RFC 3339 time with its offset (2024-05-01T02:00:00Z, "
            "2024-05-01T04:00:00+02:00) nor a date (2024-05-01, midnight UTC)"
        ) from None
    return day.replace(tzinfo=UTC)


def format_rfc3339(moment: datetime) -> str:
    """RFC 3339 text of a datetime; naive datetimes are taken as UTC, UTC is written ``Z``."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    text = moment.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text
