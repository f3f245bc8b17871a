"""A conditions uploader: checks configuration payloads and stores them by tag.

Shaped like the CMS conditions uploader: a payload names a tag and carries a
list of intervals of validity (IOVs), each starting at a run number ("since")
and holding the data valid from then on, and every IOV is checked before the
payload is stored. Two kinds of payload take different paths through the
checks: alignment payloads (many IOVs, six rigid-body constants each) and
calibration payloads (few IOVs, long per-channel arrays), so their work grows
with size at different rates.
"""

from __future__ import annotations

import json
import math
from typing import Any

HASH_LENGTH = 40
HEX_DIGITS = frozenset("0123456789abcdef")
TAG_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
ALIGNMENT_FIELDS = ("x", "y", "z", "alpha", "beta", "gamma")
POSITION_LIMIT_CM = 5.0
ANGLE_LIMIT_RAD = 0.05
GAIN_RANGE = (0.1, 10.0)


class PayloadError(ValueError):
    """The payload cannot be uploaded; the message lists every problem found."""


class Iov:
    """One interval of validity: where it starts and the conditions data valid from there."""

    def __init__(self, since: int, payload_hash: str, data: dict[str, Any]) -> None:
        self.since = since
        self.payload_hash = payload_hash
        self.data = data


class UploadRequest:
    def __init__(self, document: dict[str, Any]) -> None:
        self.tag = document["tag"]
        self.kind = document["kind"]
        self.comment = document.get("comment", "")
        self.iovs = [Iov(item["since"], item["hash"], item["data"]) for item in document["iovs"]]


def check_tag(tag: str) -> list[str]:
    problems = []
    if not tag:
        problems.append("empty tag")
    for position in range(len(tag)):
        if tag[position] not in TAG_CHARACTERS:
            problems.append(f"tag character {position} is not allowed")
    return problems


def check_hash(payload_hash: str) -> bool:
    if len(payload_hash) != HASH_LENGTH:
        return False
    valid = True
    for position in range(len(payload_hash)):
        if payload_hash[position] not in HEX_DIGITS:
            valid = False
    return valid


def check_order(iovs: list[Iov]) -> list[str]:
    problems = []
    for index in range(len(iovs)):
        if index > 0 and iovs[index].since <= iovs[index - 1].since:
            problems.append(f"IOV {index} does not start after IOV {index - 1}")
    return problems


def check_alignment(data: dict[str, Any]) -> list[str]:
    problems = []
    for field in ALIGNMENT_FIELDS:
        value = data.get(field)
        if not isinstance(value, float) or not math.isfinite(value):
            problems.append(f"{field} is not a finite number")
        elif field in ("x", "y", "z") and abs(value) > POSITION_LIMIT_CM:
            problems.append(f"{field} is outside +-{POSITION_LIMIT_CM} cm")
        elif field not in ("x", "y", "z") and abs(value) > ANGLE_LIMIT_RAD:
            problems.append(f"{field} is outside +-{ANGLE_LIMIT_RAD} rad")
    return problems


def check_calibration(data: dict[str, Any]) -> list[str]:
    problems = []
    gains = data.get("gains", [])
    low, high = GAIN_RANGE
    total = 0.0
    for channel in range(len(gains)):
        if not low <= gains[channel] <= high:
            problems.append(f"gain of channel {channel} is outside [{low}, {high}]")
        total += gains[channel]
    if gains and abs(total / len(gains) - 1.0) > 0.5:
        problems.append("mean gain is more than 0.5 away from 1")
    return problems


def validate(request: UploadRequest) -> list[str]:
    problems = check_tag(request.tag) + check_order(request.iovs)
    checks = check_alignment if request.kind == "alignment" else check_calibration
    for index in range(len(request.iovs)):
        if not check_hash(request.iovs[index].payload_hash):
            problems.append(f"IOV {index}: malformed payload hash")
        problems.extend(f"IOV {index}: {problem}" for problem in checks(request.iovs[index].data))
    return problems


def upload(text: str, store: dict[str, list[Iov]]) -> dict[str, Any]:
    """Check a JSON payload and add its IOVs to ``store``; PayloadError if it is bad."""
    request = UploadRequest(json.loads(text))
    problems = validate(request)
    if problems:
        raise PayloadError("; ".join(problems))
    store.setdefault(request.tag, []).extend(request.iovs)
    return {"tag": request.tag, "kind": request.kind, "iovs": len(request.iovs)}
