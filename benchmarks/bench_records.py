"""Per-document cost of record and verdict validation: quick check vs the full jsonschema pass.

    python benchmarks/bench_records.py
    python benchmarks/bench_records.py --repeats 9 --json out.json

For each kind of valid document and each entry point, in one run on the same documents:
  new         validate_record / parse_record / validate_verdict / parse_verdict as shipped:
              the compiled quick check, with the full pass only when it says no
  reference   the full pass alone (jsonschema plus the value checks), which every document
              went through before the quick check existed; parse adds the same orjson decode
              and model building as the new path
Timings of the two paths alternate and the best of --repeats is kept (the least disturbed by
other work on the machine); the ratio is reference / new. For parse, "decode" is orjson.loads
alone, a floor under both paths that no validation speed-up removes.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import orjson

from perfwatch.contract import codec, validation
from perfwatch.contract.codec import parse_record, parse_verdict
from perfwatch.contract.models import Record, Verdict
from perfwatch.contract.timestamps import format_rfc3339
from perfwatch.contract.validation import validate_record, validate_verdict


def typical_record(rng: np.random.Generator) -> dict[str, Any]:
    """20 metrics, half of them with unit and direction, and a few attributes."""
    values = rng.normal(100.0, 5.0, 20)
    metrics: dict[str, Any] = {}
    for index, value in enumerate(values):
        name = f"metric_{index}"
        if index % 2:
            metrics[name] = {"value": float(value), "unit": "ms", "direction": "lower_is_better"}
        else:
            metrics[name] = float(value)
    return {
        "schema": validation.RECORD_SCHEMA,
        "test": "suite/parser.large_file",
        "run_id": "ci-8812",
        "commit": "3f2a9c1d" * 5,
        "branch": "main",
        "timestamp": "2024-05-01T02:00:00.250+02:00",
        "attributes": {"os": "linux", "python": "3.11", "runner": "ci-3"},
        "metrics": metrics,
    }


def counters_record(rng: np.random.Generator, *, stamped: bool) -> dict[str, Any]:
    """A typical record with a 600 x 30 counter matrix, about one sample in 20 missing, and
    with ``stamped`` an RFC 3339 timestamp per observation."""
    doc = typical_record(rng)
    matrix = rng.gamma(2.0, 50.0, (600, 30))
    missing = rng.random((600, 30)) < 0.05
    doc["counters"] = {
        "names": [f"counter_{index}" for index in range(30)],
        "values": [
            [None if gap else float(cell) for cell, gap in zip(row, gaps, strict=True)]
            for row, gaps in zip(matrix, missing, strict=True)
        ],
        "role": "target",
    }
    if stamped:
        start = datetime(2024, 5, 1, tzinfo=UTC)
        doc["counters"]["timestamps"] = [
            format_rfc3339(start + timedelta(seconds=index)) for index in range(600)
        ]
    return doc


def profiles_record(rng: np.random.Generator) -> dict[str, Any]:
    """A typical record with 300 input profiles."""
    doc = typical_record(rng)
    sizes = rng.integers(1, 100_000, 300)
    doc["inputs"] = {
        "kind": "full_suite",
        "profiles": [
            {
                "input_id": f"input_{index}",
                "size": int(size),
                "wall_time_s": float(size) * 1e-6,
                "cpu_time_s": float(size) * 9e-7,
                "peak_memory_bytes": int(size) * 64,
                "statements": int(size) * 12,
                "function_calls": int(size),
                "loop_iterations": int(size) * 3,
                "conditionals": int(size) * 2,
            }
            for index, size in enumerate(sizes)
        ],
    }
    return doc


def change_point(index: int) -> dict[str, Any]:
    return {
        "index": index,
        "run_id": f"ci-{8800 + index}",
        "commit": "3f2a9c1d",
        "time": "2024-05-01T02:00:00Z",
        "forward_change_percent": 18.2,
        "magnitude": 0.182,
        "mean_before": 41.0,
        "stddev_before": 1.0,
        "mean_after": 48.5,
        "stddev_after": 1.2,
        "pvalue": 1e-9,
        "direction": "regression",
    }


def updated_verdict() -> dict[str, Any]:
    """A change point that moved: the verdict with the most evidence."""
    return {
        "schema": validation.VERDICT_SCHEMA,
        "verdict_id": "0123456789abcdef" * 2,
        "kind": "change_point.updated",
        "emitted_at": "2024-05-01T02:00:05Z",
        "series": {
            "test": "suite/parser.large_file",
            "metric": "metric_0",
            "attributes": {"os": "linux", "runner": "ci-3"},
        },
        "record_run_id": "ci-8813",
        "parameters": {"window_len": 50, "max_pvalue": 0.001, "min_magnitude": 0.0},
        "change_point": change_point(13),
        "previous": change_point(12),
    }


def reference_validate(name: str) -> Callable[[Any], list[validation.Problem]]:
    def validate(doc: Any) -> list[validation.Problem]:
        return validation._all_problems(doc, name, check_finite=True)

    return validate


def reference_parse_record(data: bytes) -> Record:
    doc = codec.loads(data)
    if validation._all_problems(doc, "record", check_finite=False):
        raise AssertionError("the benchmark documents are valid")
    return Record._build(doc)


def reference_parse_verdict(data: bytes) -> Verdict:
    doc = codec.loads(data)
    if validation._all_problems(doc, "verdict", check_finite=False):
        raise AssertionError("the benchmark documents are valid")
    return Verdict._build(doc)


def per_call_us(function: Callable[[Any], Any], argument: Any, budget_s: float) -> float:
    """Microseconds per call, from as many calls as fit in about budget_s."""
    calls = 1
    while True:
        started = time.perf_counter()
        for _ in range(calls):
            function(argument)
        elapsed = time.perf_counter() - started
        if elapsed >= budget_s:
            return elapsed / calls * 1e6
        calls *= 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--budget", type=float, default=0.2, help="seconds per timing")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    record_docs = {
        "typical record": typical_record(rng),
        "counters 600x30": counters_record(rng, stamped=False),
        "+ 600 timestamps": counters_record(rng, stamped=True),
        "300 profiles": profiles_record(rng),
    }
    cases: list[tuple[str, str, Callable[[Any], Any], Callable[[Any], Any], Any]] = []
    for label, doc in record_docs.items():
        cases.append((label, "validate", validate_record, reference_validate("record"), doc))
        data = orjson.dumps(doc)
        cases.append((label, "parse", parse_record, reference_parse_record, data))
    verdict = updated_verdict()
    cases.append(("verdict", "validate", validate_verdict, reference_validate("verdict"), verdict))
    data = orjson.dumps(verdict)
    cases.append(("verdict", "parse", parse_verdict, reference_parse_verdict, data))

    print(
        f"{'document':<16} {'entry':<9} {'new µs':>9} {'reference µs':>13} {'ratio':>7}"
        f" {'decode µs':>10}"
    )
    results = []
    for label, entry, new, reference, argument in cases:
        # Both paths must agree that the document is valid before their times mean anything.
        if entry == "validate" and (new(argument) or reference(argument)):
            raise AssertionError(f"{label} is not a valid document")
        new(argument), reference(argument)  # warm up: compile the validators
        new_us, reference_us = [], []
        for _ in range(args.repeats):
            new_us.append(per_call_us(new, argument, args.budget))
            reference_us.append(per_call_us(reference, argument, args.budget))
        best_new, best_reference = min(new_us), min(reference_us)
        ratio = best_reference / best_new
        decode_us = (
            min(per_call_us(orjson.loads, argument, args.budget) for _ in range(args.repeats))
            if entry == "parse"
            else None
        )
        decode_text = "" if decode_us is None else f"{decode_us:.1f}"
        print(
            f"{label:<16} {entry:<9} {best_new:>9.1f} {best_reference:>13.1f} {ratio:>6.1f}x"
            f" {decode_text:>10}"
        )
        results.append(
            {
                "document": label,
                "entry": entry,
                "new_us": best_new,
                "reference_us": best_reference,
                "ratio": ratio,
                "decode_us": decode_us,
            }
        )
    if args.json_path:
        with open(args.json_path, "w", encoding="utf-8") as out:
            json.dump({"repeats": args.repeats, "results": results}, out, indent=2)


if __name__ == "__main__":
    main()
