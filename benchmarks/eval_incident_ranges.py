"""Incidents by commit range against incidents by exact commit, measured.

    python benchmarks/eval_incident_ranges.py [--seeds 100:105] [--json out.json]

A generated history goes through the real processor (`Processor` over the
in-memory ports, a SQLite store). Per seed, commits c0..c159 land one an hour;
24 series run them on their own schedules: a third at every commit, a third at
every second commit, a third at every fourth (each from its own first
commit), every job some minutes off the hour (its own offset of up to 20
minutes either way, and up to 5 minutes more from run to run). Noise is per
series (0.5-2 %; the noise families of `perf_histories`: Gaussian, lognormal,
bimodal, Student t with 3 degrees of freedom). Three culprit commits slow five series each by
3-10 %: two of them neighbours (commits k and k+1, the hard case: the series
that skipped one of them cannot tell them apart), one alone. Six series see
no change.

Each confirmed finding is attributed to the culprits its commit range truly
holds (range after..last of the series' runs; several when it spans
neighbouring culprits: an ambiguous finding). Printed for the processor's
incidents (by range) and for the same confirmed findings grouped by the exact
commit of their first changed run (the rule before ranges):

- incidents per culprit: how many incidents hold the findings of one culprit
  (1 is the goal: one alert per change);
- wrong merges: incidents holding findings of different culprits with no
  ambiguous member to justify it;
- incidents of no culprit: incidents only of findings E-Divisive placed off
  the change (their range misses the culprit);
- incident messages posted (`is_alert`; for the exact-commit rule, counted as
  the same rule would post them: 1 + floor(log2 n) for an incident of n
  series, as no member is retracted in this workload).
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from eval_verdict_lifecycle import published
from perf_histories import NOISE_FAMILIES, unit_noise
from perfwatch.adapters.verdict_feed import is_alert
from perfwatch.config import Config
from perfwatch.contract.timestamps import format_rfc3339
from perfwatch.contract.validation import RECORD_SCHEMA

T0 = datetime(2024, 1, 1, 2, 0, tzinfo=UTC)
COMMITS = 160
SERIES_PER_CULPRIT = 5


@dataclass
class Series:
    name: str
    step: float  # % by which its culprit slows it (0: none)
    runs: list[int]  # the commits it ran, in order
    minutes: list[float]  # each run's offset from its commit's hour
    values: np.ndarray


def workload(seed: int) -> tuple[list[Series], list[int]]:
    """The series and the culprit commits."""
    rng = np.random.default_rng(seed)
    k = int(rng.integers(40, 70))
    culprits = [k, k + 1, int(rng.integers(95, 120))]
    slowed = list(range(3 * SERIES_PER_CULPRIT))
    rng.shuffle(slowed)  # which series each culprit slows
    steps: dict[int, tuple[int, float]] = {}
    for c, culprit in enumerate(culprits):
        for i in slowed[c * SERIES_PER_CULPRIT : (c + 1) * SERIES_PER_CULPRIT]:
            steps[i] = (culprit, float(rng.uniform(3, 10)))
    series = []
    for i in range(24):
        every = (1, 2, 4)[i % 3]
        start = int(rng.integers(0, every))
        runs = list(range(start, COMMITS, every))
        offset = rng.uniform(-20, 20)
        minutes = [offset + rng.uniform(-5, 5) for _ in runs]
        sigma = rng.uniform(0.005, 0.02)
        family = str(rng.choice(NOISE_FAMILIES))
        level = np.ones(len(runs))
        culprit, step = steps.get(i, (COMMITS, 0.0))
        level[np.asarray(runs) >= culprit] *= 1 + step / 100
        values = 100 * level * (1 + sigma * unit_noise(rng, family, len(runs)))
        series.append(Series(f"s{i:02d}-every{every}", step, runs, minutes, values))
    return series, culprits


def records(series: list[Series]) -> list[tuple[str, bytes]]:
    """Every run's record, in the order the runs happened."""
    out = []
    for s in series:
        for run, minutes, value in zip(s.runs, s.minutes, s.values, strict=True):
            when = T0 + timedelta(hours=run, minutes=minutes)
            document = {
                "schema": RECORD_SCHEMA,
                "test": s.name,
                "run_id": f"{s.name}#{run}",
                "commit": f"c{run:05d}",
                "timestamp": format_rfc3339(when),
                "metrics": {"latency_ms": {"value": float(value), "direction": "lower_is_better"}},
            }
            out.append((when, s.name, orjson.dumps(document)))
    return [(name, payload) for _, name, payload in sorted(out)]


def verdict_stream(series: list[Series]) -> list[dict[str, Any]]:
    return published(records(series), Config())


def commit_number(commit: str) -> int:
    return int(commit.removeprefix("c"))


def scores(
    groups: list[set[str]], truth: dict[str, set[int]], culprits: list[int]
) -> dict[str, Any]:
    """Incidents per culprit, wrong merges and incidents of no culprit (findings
    placed off the change) of a grouping of finding ids."""
    per_culprit = {c: sum(1 for g in groups if any(c in truth[f] for f in g)) for c in culprits}
    wrong = 0
    for group in groups:
        held = set().union(*(truth[f] for f in group))
        ambiguous = any(len(truth[f]) > 1 for f in group)
        wrong += len(held) > 1 and not ambiguous
    stray = sum(1 for g in groups if not any(truth[f] for f in g))
    return {"incidents_per_culprit": per_culprit, "wrong_merges": wrong, "stray_incidents": stray}


def evaluate(seed: int) -> dict[str, Any]:
    series, culprits = workload(seed)
    verdicts = verdict_stream(series)
    # the confirmed findings still standing, with the range they joined with
    last: dict[str, dict[str, Any]] = {}
    ranges: dict[str, dict[str, str]] = {}
    for v in verdicts:
        finding = v.get("finding")
        if finding is not None:
            last[finding["id"]] = v
            if "commit_range" in finding:
                ranges[finding["id"]] = finding["commit_range"]
    standing = {
        f: v
        for f, v in last.items()
        if v["finding"]["confirmed"] and v["kind"] != "change_point.retracted"
    }
    truth = {
        f: {
            c
            for c in culprits
            if commit_number(ranges[f].get("after", "c-1")) < c <= commit_number(ranges[f]["last"])
        }
        for f in standing
    }
    final: dict[str, set[str]] = {}
    for v in verdicts:
        if v["kind"].startswith("incident."):
            final[v["incident"]["id"]] = {m["finding_id"] for m in v["incident"]["members"]}
    by_range = [g for g in final.values() if g]
    by_commit: dict[str, set[str]] = defaultdict(set)
    for f in standing:
        by_commit[ranges[f]["last"]].add(f)
    exact = list(by_commit.values())
    posted = sum(1 for v in verdicts if v["kind"].startswith("incident.") and is_alert(v))
    steps = {s.name: s.step for s in series}
    caught = {standing[f]["series"]["test"] for f in standing if truth[f]}
    return {
        "seed": seed,
        "culprits": culprits,
        "confirmed": len(standing),
        "stray": sum(1 for f in standing if not truth[f]),
        "slowed": sum(1 for step in steps.values() if step),
        "caught_steps": sorted(steps[name] for name in caught),
        "missed_steps": sorted(s for name, s in steps.items() if s and name not in caught),
        "ambiguous": sum(1 for f in standing if len(truth[f]) > 1),
        "spanning": sum(1 for f in standing if ranges[f].get("after") and
                        commit_number(ranges[f]["last"]) - commit_number(ranges[f]["after"]) > 1),
        "range": {**scores(by_range, truth, culprits), "incidents": len(by_range),
                  "messages": posted},
        "exact": {**scores(exact, truth, culprits), "incidents": len(exact),
                  "messages": sum(1 + int(math.log2(len(g))) for g in exact)},
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="100:105", help="first:last (exclusive)")
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args()
    first, last = (int(x) for x in args.seeds.split(":"))
    results = []
    for seed in range(first, last):
        result = evaluate(seed)
        results.append(result)
        print(json.dumps(result))
    for rule in ("exact", "range"):
        per = [n for r in results for n in r[rule]["incidents_per_culprit"].values()]
        print(
            f"{rule:>5}: culprits {len(per)}, in one incident {sum(n == 1 for n in per)}, "
            f"incidents per culprit {np.mean(per):.2f} (max {max(per)}), "
            f"wrong merges {sum(r[rule]['wrong_merges'] for r in results)}, "
            f"incident messages {sum(r[rule]['messages'] for r in results)}"
        )
    totals = {
        k: sum(r[k] for r in results)
        for k in ("slowed", "confirmed", "stray", "ambiguous", "spanning")
    }
    print(f"findings: {totals}")
    caught = [step for r in results for step in r["caught_steps"]]
    missed = [round(step, 1) for r in results for step in r["missed_steps"]]
    print(f"smallest step caught {min(caught):.1f} %, missed steps {missed}")
    for rule in ("exact", "range"):
        stray = sum(r[rule]["stray_incidents"] for r in results)
        print(f"{rule:>5}: incidents of no culprit {stray}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
