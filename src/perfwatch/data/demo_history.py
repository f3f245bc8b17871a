"""A realistic nightly history for `perfwatch demo`, generated deterministically.

Four tests x three metrics x `runs` nightly runs with about 1.5 % noise, and
scripted events: step regressions, a short-lived regression fixed a few
nights later, an improvement; plus what real streams carry: a record that
arrives late, a record sent twice, and a handful of malformed messages of
every kind the processor dead-letters.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from perfwatch.contract.codec import MAX_DOCUMENT_BYTES
from perfwatch.contract.timestamps import format_rfc3339
from perfwatch.contract.validation import RECORD_SCHEMA

TESTS = ("api.checkout", "db.insert", "search.query", "render.page")
# metric -> (unit, direction, typical value)
METRICS = {
    "latency_ms": ("ms", "lower_is_better", 120.0),
    "throughput_rps": ("1/s", "higher_is_better", 850.0),
    "memory_mb": ("MB", "lower_is_better", 512.0),
}
NOISE = 0.015
FIRST_NIGHT = datetime(2024, 1, 1, 2, 0, tzinfo=UTC)
OVERSIZED_BYTES = 2 * 1024 * 1024  # above the processor's default 1 MiB record limit


@dataclass(frozen=True)
class ScriptedChange:
    """A change written into the history: the metric moves by `change` (a fraction)
    from run `start` until run `end` (exclusive; None = for good)."""

    test: str
    metric: str
    start: int
    change: float
    end: int | None
    description: str


@dataclass(frozen=True)
class DemoMessage:
    """One message to publish: `problem` names the dead-letter reason of a malformed one."""

    payload: bytes
    key: str
    label: str
    problem: str | None = None


@dataclass(frozen=True)
class DemoHistory:
    messages: list[DemoMessage]
    changes: list[ScriptedChange]
    runs: int
    late: str  # label of the record that arrives ten nights late
    duplicate: str  # label of the record sent twice

    @property
    def records(self) -> int:
        return sum(1 for m in self.messages if m.problem is None)


def scripted_changes(runs: int) -> list[ScriptedChange]:
    """The events, placed relative to the history's length (200 runs by default)."""

    def at(fraction: float) -> int:
        return int(runs * fraction)

    return [
        ScriptedChange(
            "render.page", "memory_mb", at(0.30), -0.20, None, "improvement: 20% less memory"
        ),
        ScriptedChange(
            "db.insert", "throughput_rps", at(0.40), -0.12, None, "regression: 12% lower throughput"
        ),
        ScriptedChange(
            "api.checkout", "latency_ms", at(0.60), 0.15, None, "regression: 15% slower"
        ),
        ScriptedChange(
            "search.query",
            "latency_ms",
            at(0.70),
            0.30,
            at(0.70) + 8,
            "short-lived regression: 30% slower for 8 nights, then fixed",
        ),
        ScriptedChange("db.insert", "latency_ms", at(0.85), 0.08, None, "regression: 8% slower"),
    ]


def _value(rng: random.Random, test: str, metric: str, run: int, changes: list[ScriptedChange]):
    base = METRICS[metric][2] * (1 + 0.1 * TESTS.index(test))
    for change in changes:
        active = run >= change.start and (change.end is None or run < change.end)
        if change.test == test and change.metric == metric and active:
            base *= 1 + change.change
    return round(base * (1 + rng.gauss(0.0, NOISE)), 3)


def _record(test: str, run: int, metrics: dict[str, float]) -> dict[str, Any]:
    commit = hashlib.sha1(f"night-{run}".encode()).hexdigest()[:12]
    return {
        "schema": RECORD_SCHEMA,
        "test": test,
        "run_id": f"{test}#night-{run:03d}",
        "commit": commit,
        "branch": "main",
        "timestamp": format_rfc3339(FIRST_NIGHT + timedelta(days=run)),
        "attributes": {"environment": "ci-linux"},
        "metrics": {
            name: {"value": value, "unit": METRICS[name][0], "direction": METRICS[name][1]}
            for name, value in metrics.items()
        },
    }


def _malformed(run: int) -> list[DemoMessage]:
    """One message of each bad kind, all in the first part of the history."""
    stamp = format_rfc3339(FIRST_NIGHT + timedelta(days=run))
    valid_head = f'{{"schema": "{RECORD_SCHEMA}", "test": "api.checkout", "run_id": "bad-{run}", '
    return [
        DemoMessage(
            b"\xff\xfe\x00garbage from a broken uploader",
            "api.checkout",
            "bytes that are not UTF-8",
            "undecodable",
        ),
        DemoMessage(
            b'{"schema": "perfwatch.record/v1", "test": "api.checkout",',
            "api.checkout",
            "a truncated JSON document",
            "invalid_json",
        ),
        DemoMessage(
            (valid_head + f'"timestamp": "{stamp}", "metrics": {{"latency_ms": NaN}}}}').encode(),
            "api.checkout",
            "a NaN metric value",
            "non_finite",
        ),
        DemoMessage(
            (
                valid_head + f'"timestamp": "{stamp}", "metrics": {{"latency_ms": "fast"}}}}'
            ).encode(),
            "api.checkout",
            "a metric value that is a string",
            "schema",
        ),
        DemoMessage(
            orjson.dumps(
                {
                    "schema": "perfwatch.record/v9",
                    "test": "api.checkout",
                    "run_id": f"bad-v9-{run}",
                    "timestamp": stamp,
                    "metrics": {"x": 1},
                }
            ),
            "api.checkout",
            "a record of an unknown schema version",
            "unknown_version",
        ),
        DemoMessage(
            orjson.dumps(
                {
                    "schema": RECORD_SCHEMA,
                    "test": "api.checkout",
                    "run_id": f"bad-big-{run}",
                    "timestamp": stamp,
                    "metrics": {"x": 1},
                    "attributes": {"log": "x" * min(OVERSIZED_BYTES, MAX_DOCUMENT_BYTES)},
                }
            ),
            "api.checkout",
            "a 2 MiB record",
            "oversized",
        ),
    ]


def demo_history(runs: int = 200, seed: int = 7) -> DemoHistory:
    """The messages in publication order, and the changes scripted into them."""
    if runs < 40:
        raise ValueError(f"runs must be at least 40 for the scripted events, got {runs}")
    rng = random.Random(seed)
    changes = scripted_changes(runs)
    late = ("api.checkout", int(runs * 0.5))  # arrives ten nights late
    duplicate = ("db.insert", int(runs * 0.25))  # sent again five nights later
    held: dict[int, list[DemoMessage]] = {}
    messages: list[DemoMessage] = []
    for run in range(runs):
        for test in TESTS:
            metrics = {m: _value(rng, test, m, run, changes) for m in METRICS}
            message = DemoMessage(
                orjson.dumps(_record(test, run, metrics)), test, f"{test} night {run}"
            )
            if (test, run) == late:
                held.setdefault(run + 10, []).append(message)
                continue
            messages.append(message)
            if (test, run) == duplicate:
                held.setdefault(run + 5, []).append(message)
        messages.extend(held.pop(run, []))
        if run == runs // 10:
            messages.extend(_malformed(run))
    for pending in held.values():
        messages.extend(pending)
    return DemoHistory(
        messages=messages,
        changes=changes,
        runs=runs,
        late=f"{late[0]} night {late[1]}",
        duplicate=f"{duplicate[0]} night {duplicate[1]}",
    )
