"""What an alerting consumer receives: flaps on noise and updates per finding, measured.

    python benchmarks/eval_verdict_lifecycle.py [--seeds 0:4] [--tune] [--json out.json]

A generated workload goes through the real processor (`Processor` over the
in-memory ports of `perfwatch.processor.memory`, a SQLite store): per seed,
noise-only series of three machine-noise families (Gaussian, heavy-tailed,
bimodal "slow host" runs), series whose level wanders slowly (AR(1), as a
host's thermal or neighbour load drifts: not independent noise, and
E-Divisive reports its wanderings as changes), changed series (steps of
3-10 %, a regression fixed 5-12 runs later, an improvement) and eight series
a single commit slows by 4-10 %, each with its own noise level drawn per series
(0.5-2 %). The verdicts topic is then read twice: the full stream, and what
`perfwatch forward` posts by default (`is_alert`).

Printed for each verdict policy, the "before" one (every detection confirmed
at once, the tolerances perfwatch had before findings had a lifecycle, every
verdict posted) measured in the same run:

- noise and wandering series: flaps (a finding detected, later retracted),
  alert messages and alerted flaps per 1 000 points;
- changed series: the share of true changes caught (a confirmed finding within
  3 runs), the runs from the change to its confirmation, updates per finding
  (and posted per confirmed finding), the smallest step caught, and the
  incident messages posted.

`--tune` also runs a grid of confirm_runs x confirm_max_pvalue; tune on one
seed range and report on another (docs/verdicts.md quotes both).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from perfwatch.adapters.verdict_feed import is_alert
from perfwatch.config import Config
from perfwatch.contract.timestamps import format_rfc3339
from perfwatch.contract.validation import RECORD_SCHEMA
from perfwatch.contract.verdicts import VerdictPolicy
from perfwatch.processor.memory import MemoryRecordTopic, MemoryVerdictSink, drain
from perfwatch.state import open_store

T0 = datetime(2024, 1, 1, 2, 0, tzinfo=UTC)
RUNS = 150
AlertRule = Callable[[dict[str, Any]], bool]
BEFORE = VerdictPolicy(
    confirm_runs=0,
    confirm_max_pvalue=1.0,
    change_rel_tolerance=0.25,
    change_abs_tolerance_pct=1.0,
    pvalue_decades=3.0,
)


@dataclass
class Series:
    name: str
    values: np.ndarray
    changes: list[tuple[int, float]] = field(default_factory=list)  # (run, step %)


def noise(rng: np.random.Generator, family: str, sigma: float) -> np.ndarray:
    if family == "gauss":
        return rng.normal(0, sigma, RUNS)
    if family == "heavy":  # Student t, 3 degrees of freedom: occasional big outliers
        return sigma * rng.standard_t(3, RUNS) / np.sqrt(3)
    if family == "bimodal":  # a fifth of the runs land on a slower host
        return rng.normal(0, sigma, RUNS) + (rng.random(RUNS) < 0.2) * 3 * sigma
    wander = np.zeros(RUNS)  # "ar1": a slowly wandering level
    for i in range(1, RUNS):
        wander[i] = 0.8 * wander[i - 1] + rng.normal(0, sigma * 0.6)
    return wander


def workload(seed: int) -> list[Series]:
    rng = np.random.default_rng(seed)
    series = []
    for family in ("gauss", "heavy", "bimodal", "ar1"):
        for i in range(5):
            sigma = rng.uniform(0.005, 0.02)
            group = "wander" if family == "ar1" else "noise"
            series.append(Series(f"{group}-{family}-{i}", 100 * (1 + noise(rng, family, sigma))))
    for i in range(12):
        family = ("gauss", "heavy", "bimodal")[i % 3]
        sigma = rng.uniform(0.005, 0.02)
        level = np.ones(RUNS)
        step = float(rng.uniform(3, 10))
        at = int(rng.integers(40, 110))
        kind = ("step", "fixed", "improvement")[i % 3]
        changes = [(at, step if kind != "improvement" else -step)]
        level[at:] *= 1 + changes[0][1] / 100
        if kind == "fixed":
            back = at + int(rng.integers(5, 13))
            level[back:] = 1.0
            changes.append((back, -step))
        values = 100 * level * (1 + noise(rng, family, sigma))
        series.append(Series(f"changed-{kind}-{i}", values, changes))
    # one commit that slows eight tests at once
    at = int(rng.integers(40, 110))
    for i in range(8):
        sigma = rng.uniform(0.005, 0.02)
        step = float(rng.uniform(4, 10))
        level = np.where(np.arange(RUNS) < at, 1.0, 1 + step / 100)
        values = 100 * level * (1 + noise(rng, "gauss", sigma))
        series.append(Series(f"changed-shared-{i}", values, [(at, step)]))
    return series


def records(series: list[Series]) -> Iterator[tuple[str, bytes]]:
    for run in range(RUNS):
        for s in series:
            yield (
                s.name,
                orjson.dumps(
                    {
                        "schema": RECORD_SCHEMA,
                        "test": s.name,
                        "run_id": f"{s.name}#{run}",
                        "commit": f"c{run:05d}",
                        "timestamp": format_rfc3339(T0 + timedelta(hours=run)),
                        "metrics": {
                            "latency_ms": {
                                "value": float(s.values[run]),
                                "direction": "lower_is_better",
                            }
                        },
                    }
                ),
            )


def verdict_stream(series: list[Series], policy: VerdictPolicy) -> list[dict[str, Any]]:
    """Every verdict the processor publishes for the workload, in order."""
    base = Config()
    config = base.model_copy(update={"verdicts": base.verdicts.model_copy(update=policy.__dict__)})
    return published(records(series), config)


def published(keyed_records: Iterable[tuple[str, bytes]], config: Config) -> list[dict[str, Any]]:
    """Every verdict one processor (SQLite store) publishes for the records, in order."""
    topic = MemoryRecordTopic(batch_size=50)
    for key, payload in keyed_records:
        topic.publish(payload, key=key)
    sink = MemoryVerdictSink()
    with (
        tempfile.TemporaryDirectory() as folder,
        open_store(f"sqlite:///{Path(folder) / 'state.db'}") as store,
    ):
        drain(config, store, topic, sink)
    return [orjson.loads(v.payload) for v in sink.verdicts]


def posted_before(verdict: dict[str, Any]) -> bool:
    """What `perfwatch forward` posted before findings had a lifecycle: every verdict
    (there were no incident verdicts)."""
    return not verdict["kind"].startswith("incident.")


def measure(
    series: list[Series], verdicts: list[dict[str, Any]], posted: AlertRule
) -> dict[str, Any]:
    by_test: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for verdict in verdicts:
        by_test[verdict["series"]["test"]].append(verdict)
    quiet: dict[str, list[int]] = {"noise": [0, 0, 0, 0], "wander": [0, 0, 0, 0]}
    findings = updates = alerted_findings = alert_updates = incident_messages = 0
    caught = total = 0
    delays: list[int] = []
    smallest: float | None = None
    missed: list[str] = []
    for s in series:
        # an incident verdict is listed under the series whose change caused it
        alerted = [v for v in by_test[s.name] if posted(v)]
        stream = [v for v in by_test[s.name] if not v["kind"].startswith("incident.")]
        confirmed = [v for v in stream if v.get("finding", {}).get("confirmed", True)]
        ids = {finding_key(v) for v in stream}
        alerted_ids = {finding_key(v) for v in confirmed}
        retracted = {finding_key(v) for v in stream if v["kind"].endswith(".retracted")}
        if not s.changes:  # points, flaps, alert messages, alerted flaps
            counts = quiet[s.name.partition("-")[0]]
            counts[0] += RUNS
            counts[1] += len(ids & retracted)
            counts[2] += len(alerted)
            counts[3] += len(alerted_ids & retracted)
            continue
        findings += len(ids)
        updates += sum(v["kind"].endswith(".updated") for v in stream)
        alerted_findings += len(alerted_ids)
        alert_updates += sum(v["kind"].endswith(".updated") for v in alerted)
        incident_messages += sum(v["kind"].startswith("incident.") for v in alerted)
        for at, step in s.changes:
            total += 1
            first_alert = next(
                (
                    v
                    for v in confirmed
                    if "change_point" in v and abs(int(v["change_point"]["index"]) - at) <= 3
                ),
                None,
            )
            if first_alert is None:
                missed.append(f"{s.name}@{at} ({step:+.1f}%)")
                continue
            caught += 1
            delays.append(int(first_alert["record_run_id"].rpartition("#")[2]) - at)
            smallest = abs(step) if smallest is None else min(smallest, abs(step))
    return {
        **{
            f"{group}_{name}_per_1000": 1000 * counts[i] / counts[0]
            for group, counts in quiet.items()
            for i, name in ((1, "flaps"), (2, "alerts"), (3, "alert_flaps"))
        },
        "updates_per_finding": updates / max(findings, 1),
        "alert_updates_per_alerted_finding": alert_updates / max(alerted_findings, 1),
        "incident_messages": incident_messages,
        "caught": caught,
        "changes": total,
        "median_runs_to_alert": float(np.median(delays)) if delays else None,
        "smallest_step_caught_pct": smallest,
        "missed": missed,
        "verdicts": len(verdicts),
        "alert_messages": sum(posted(v) for v in verdicts),
    }


def finding_key(verdict: dict[str, Any]) -> str:
    """A finding's id; verdicts of the before policy are grouped by their first run id."""
    finding = verdict.get("finding")
    if finding is not None:
        return str(finding["id"])
    evidence = verdict.get("previous") or verdict["change_point"]
    return str(evidence["run_id"])


def evaluate(seeds: range, policy: VerdictPolicy, posted: AlertRule) -> dict[str, Any]:
    totals: dict[str, Any] = defaultdict(float)
    missed: list[str] = []
    smallest: list[float] = []
    delays: list[float] = []
    for seed in seeds:
        series = workload(seed)
        result = measure(series, verdict_stream(series, policy), posted)
        for name in (
            *(name for name in result if name.endswith("_per_1000")),
            "updates_per_finding",
            "alert_updates_per_alerted_finding",
        ):
            totals[name] += result[name] / len(seeds)
        for name in ("caught", "changes", "verdicts", "alert_messages", "incident_messages"):
            totals[name] += result[name]
        missed += [f"seed {seed}: {m}" for m in result["missed"]]
        if result["smallest_step_caught_pct"] is not None:
            smallest.append(result["smallest_step_caught_pct"])
        if result["median_runs_to_alert"] is not None:
            delays.append(result["median_runs_to_alert"])
    return {
        **{name: round(value, 3) for name, value in totals.items()},
        "smallest_step_caught_pct": round(min(smallest), 2) if smallest else None,
        "median_runs_to_alert": float(np.median(delays)) if delays else None,
        "missed": missed,
    }


def seed_range(text: str) -> range:
    start, _, stop = text.partition(":")
    return range(int(start), int(stop))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=seed_range, default=range(100, 104), help="START:STOP")
    parser.add_argument("--tune", action="store_true", help="Also run the tuning grid.")
    parser.add_argument("--json", type=Path, help="Write the results here too.")
    args = parser.parse_args()
    policies: dict[str, tuple[VerdictPolicy, AlertRule]] = {
        "before": (BEFORE, posted_before),
        "default": (VerdictPolicy(), is_alert),
    }
    if args.tune:
        for runs in (3, 5, 8):
            for pvalue in (1e-4, 1e-6):
                policies[f"K={runs},p<={pvalue:g}"] = (
                    VerdictPolicy(confirm_runs=runs, confirm_max_pvalue=pvalue),
                    is_alert,
                )
    results = {}
    print(f"seeds {args.seeds.start}:{args.seeds.stop}, {RUNS} runs per series")
    for name, (policy, posted) in policies.items():
        result = results[name] = evaluate(args.seeds, policy, posted)
        print(
            f"{name:>18}: per 1000 points noise/wander: flaps "
            f"{result['noise_flaps_per_1000']:.2f}/{result['wander_flaps_per_1000']:.2f}, "
            f"alerts {result['noise_alerts_per_1000']:.2f}/{result['wander_alerts_per_1000']:.2f}, "
            f"alerted flaps {result['noise_alert_flaps_per_1000']:.2f}/"
            f"{result['wander_alert_flaps_per_1000']:.2f}; "
            f"updates/finding {result['updates_per_finding']:.2f} "
            f"(alerted {result['alert_updates_per_alerted_finding']:.2f}); "
            f"caught {result['caught']:.0f}/{result['changes']:.0f}, "
            f"median runs to alert {result['median_runs_to_alert']}, "
            f"smallest {result['smallest_step_caught_pct']}%; "
            f"{result['verdicts']:.0f} verdicts, {result['alert_messages']:.0f} alert messages "
            f"({result['incident_messages']:.0f} incidents on changed series)"
        )
        for missed in result["missed"]:
            print(f"{'':>20}missed {missed}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
