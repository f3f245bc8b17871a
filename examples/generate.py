"""Write the example nightly benchmark history: examples/nightly.csv and nightly.jsonl.

120 nightly runs of one benchmark, with three metrics and three known events:
  - throughput_ops_s improves by 12% from run 38 on (a faster hash map),
  - p99_latency_ms regresses by 18% from run 74 on (a lock added on the hot path),
  - peak_memory_mb jumps by 20% for runs 96-101 only (a leak, fixed six nights later).
Deterministic: the same seed always writes the same files.

    python examples/generate.py
"""

from __future__ import annotations

import csv
import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from perfwatch.contract.models import MetricValue, Record
from perfwatch.contract.timestamps import format_rfc3339
from perfwatch.readers.jsonl import write_records

SEED = 20240101
RUNS = 120
FIRST_RUN = datetime(2024, 1, 1, 2, 0, tzinfo=UTC)
HERE = Path(__file__).parent

# name -> (baseline, relative noise, unit, direction)
METRICS = {
    "throughput_ops_s": (12_500.0, 0.015, "ops/s", "higher_is_better"),
    "p99_latency_ms": (41.0, 0.025, "ms", "lower_is_better"),
    "peak_memory_mb": (512.0, 0.008, "MiB", "lower_is_better"),
}


def metric_values(rng: np.random.Generator) -> dict[str, np.ndarray]:
    run = np.arange(RUNS)
    level = {
        "throughput_ops_s": np.where(run >= 38, 1.12, 1.0),
        "p99_latency_ms": np.where(run >= 74, 1.18, 1.0),
        "peak_memory_mb": np.where((run >= 96) & (run <= 101), 1.20, 1.0),
    }
    return {
        name: np.round(base * level[name] * (1 + noise * rng.standard_normal(RUNS)), 2)
        for name, (base, noise, _, _) in METRICS.items()
    }


def write_examples(directory: Path) -> None:
    """Write nightly.csv and nightly.jsonl into ``directory``."""
    rng = np.random.default_rng(SEED)
    values = metric_values(rng)
    runners = rng.integers(1, 4, RUNS)
    runs = [
        {
            "time": FIRST_RUN + timedelta(days=i),
            "commit": hashlib.sha1(f"nightly-{i}".encode()).hexdigest(),
            "version": f"2.{3 + i // 30}.{i % 30}",
            "runner": f"ci-runner-{runners[i]}",
            **{name: float(values[name][i]) for name in METRICS},
        }
        for i in range(RUNS)
    ]
    with (directory / "nightly.csv").open("w", newline="") as stream:
        writer = csv.writer(stream, lineterminator="\n")
        writer.writerow(["time", "commit", "version", *METRICS, "runner"])
        for run in runs:
            writer.writerow(
                [
                    format_rfc3339(run["time"]),
                    run["commit"],
                    run["version"],
                    *(f"{run[name]:.2f}" for name in METRICS),
                    run["runner"],
                ]
            )
    records = [
        Record(
            test="nightly",
            run_id=f"nightly-{i + 1:04d}",
            timestamp=run["time"],
            commit=run["commit"],
            branch="main",
            attributes={"version": run["version"], "runner": run["runner"]},
            metrics={
                name: MetricValue(run[name], unit, direction)
                for name, (_, _, unit, direction) in METRICS.items()
            },
        )
        for i, run in enumerate(runs)
    ]
    with (directory / "nightly.jsonl").open("wb") as stream:
        write_records(records, stream)


if __name__ == "__main__":
    write_examples(HERE)
