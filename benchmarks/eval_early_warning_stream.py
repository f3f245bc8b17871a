"""The early warning's delays through the stream: generated series go through the real
processor, and the verdicts it publishes are timed.

    python benchmarks/eval_early_warning_stream.py --seeds 2000:2030 [--json out.json]

The series are those of eval_early_warning.py (noise families of ``perf_histories``,
60-200 stable runs, then a step of 1, 2, 3 or 5 noise standard deviations either way and
30 runs more, or 300 stable runs more).  Each cell's series are published as separate
tests to one in-memory record topic and drained by one ``Processor`` (default
configuration, SQLite store).  Per series, counting the first changed run as 1:

- suspected: the first ``change_point.suspected`` on or after the change;
- detected / confirmed: the first ``change_point.detected`` / ``change_point.confirmed``
  whose change point lies within 5 runs of the step;
- false suspicions: ``change_point.suspected`` on the stable series' watched runs,
  per 1 000 runs.

Unlike the detector-level evaluation, the processor judges each run against the runs
since the last change point E-Divisive placed, and does not open a second suspicion while
one is open.  docs/edivisive.md quotes the output.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from eval_early_warning import MATCH, STEPS, fmt, series, summary
from eval_verdict_lifecycle import published
from perf_histories import NOISE_FAMILIES
from perfwatch.config import Config
from perfwatch.contract.timestamps import format_rfc3339
from perfwatch.contract.validation import RECORD_SCHEMA
from perfwatch.contract.verdicts import CONFIRMED, DETECTED, SUSPECTED

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def records(cell: dict[str, np.ndarray]) -> Iterator[tuple[str, bytes]]:
    """The cell's series as records, run by run, one test per series."""
    for run in range(max(v.shape[0] for v in cell.values())):
        for name, values in cell.items():
            if run < values.shape[0]:
                yield (
                    name,
                    orjson.dumps(
                        {
                            "schema": RECORD_SCHEMA,
                            "test": name,
                            "run_id": f"{name}#{run}",
                            "commit": f"c{run:05d}",
                            "timestamp": format_rfc3339(T0 + timedelta(hours=run)),
                            "metrics": {
                                "latency_ms": {
                                    "value": float(values[run]),
                                    "direction": "lower_is_better",
                                }
                            },
                        }
                    ),
                )


def run_of(verdict: dict[str, Any]) -> int:
    return int(verdict["record_run_id"].rpartition("#")[2])


def first_delays(
    verdicts: list[dict[str, Any]], changes: dict[str, int]
) -> dict[str, dict[str, int | None]]:
    """Per kind and series, the runs from the change to the first verdict of that kind
    (a change point within MATCH runs of it, for detections and confirmations)."""
    delays: dict[str, dict[str, int | None]] = {
        kind: dict.fromkeys(changes) for kind in (SUSPECTED, DETECTED, CONFIRMED)
    }
    for verdict in verdicts:
        kind, name = verdict["kind"], verdict["series"]["test"]
        if kind not in delays or delays[kind][name] is not None:
            continue
        n0, run = changes[name], run_of(verdict)
        if run < n0:
            continue
        if kind != SUSPECTED and abs(verdict["change_point"]["index"] - n0) > MATCH:
            continue
        delays[kind][name] = run - n0 + 1
    return delays


def evaluate(seeds: range) -> dict[str, dict[str, object]]:
    results: dict[str, dict[str, object]] = {}
    for family in NOISE_FAMILIES:
        row: dict[str, object] = {}
        stable = {f"s{seed}": series(family, 0.0, seed) for seed in seeds}
        verdicts = published(records({name: s[0] for name, s in stable.items()}), Config())
        false = sum(
            v["kind"] == SUSPECTED and run_of(v) >= stable[v["series"]["test"]][1] for v in verdicts
        )
        watched = sum(s[0].shape[0] - s[1] for s in stable.values())
        row["false_per_1000"] = 1000.0 * false / watched
        for step in STEPS:
            cell = {f"s{seed}": series(family, step, seed) for seed in seeds}
            delays = first_delays(
                published(records({name: s[0] for name, s in cell.items()}), Config()),
                {name: s[1] for name, s in cell.items()},
            )
            row[f"{step:g}"] = {
                kind.rpartition(".")[2]: summary(list(by_series.values()))
                for kind, by_series in delays.items()
            }
        results[family] = row
        print(f"{family}: done", file=sys.stderr)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="2000:2030", help="a:b, the seed range")
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args()
    a, b = (int(v) for v in args.seeds.split(":"))
    results = evaluate(range(a, b))
    print(f"seeds {a}:{b} ({b - a} series per cell), through the processor")
    print("median / 90th pct runs until published (% within 30 runs)\n")
    print("| noise | step | suspected | detected | confirmed |")
    print("|---|---:|---|---|---|")
    for family, row in results.items():
        for step in STEPS:
            cell = row[f"{step:g}"]
            assert isinstance(cell, dict)
            print(
                f"| {family} | {step:g}σ | {fmt(cell['suspected'])} | "
                f"{fmt(cell['detected'])} | {fmt(cell['confirmed'])} |"
            )
    print("\n| noise | false suspicions / 1 000 stable runs |\n|---|---:|")
    for family, row in results.items():
        print(f"| {family} | {row['false_per_1000']:.2f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
