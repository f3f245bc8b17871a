"""Whole-process wall time: `perfwatch analyze FILE` vs `otava analyze` on the same CSV file,
and how long `perfwatch --help` and `perfwatch analyze --help` take.

    python benchmarks/bench_cli_analyze.py                        # otava on PATH
    python benchmarks/bench_cli_analyze.py --otava /work/venv-otava/bin/otava
    PERFWATCH_OTAVA_BIN=... python benchmarks/bench_cli_analyze.py --repeats 9 --json out.json

Apache Otava pins old numpy/scipy, so it lives in a virtualenv of its own
(`python -m venv venv-otava && venv-otava/bin/pip install apache-otava==0.8.0`); only its
command is run here. perfwatch is the `perfwatch` script next to this interpreter.

Files: a generated Otava-style CSV (--runs x --metrics, default 2 000 x 100: noise and a
few steps per metric) and examples/nightly.csv (120 runs x 3 metrics: a first run on a
small history). Otava reads them through a generated otava.yaml (a csv test per file,
every metric listed, `--since` before the first run, since by default it keeps only the
last 365 days).

Each command runs once untimed first (so perfwatch's numba kernels are compiled and
cached, and both tools' byte code is written), then --repeats times, the commands
interleaved; medians are printed. Loading the numba kernels from their cache (importing
numba and scipy.special, then loading the three compiled functions) is part of every
perfwatch run today and goes away once the kernels are a compiled extension. To show
perfwatch without it, a third command runs the same `perfwatch analyze FILE` in a
process that first loads the kernels and reports how long that took; "without kernel
load" is that process's wall time less its own kernel load (median over the rounds).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

EXAMPLE_CSV = Path(__file__).resolve().parent.parent / "examples" / "nightly.csv"
OTAVA_SINCE = "2000-01-01"
# `perfwatch ARGS` after loading the kernels, whose load time goes to stderr's first line.
ANALYZE_AFTER_KERNEL_LOAD = """
import sys, time
import numpy as np
start = time.perf_counter()
from perfwatch.detectors.edivisive import EDivisiveParams, detect_change_points
detect_change_points(np.repeat([10.0, 12.0], 100) + np.tile([0.0, 0.1], 100), EDivisiveParams())
sys.stderr.write(f"{time.perf_counter() - start}\\n")
from perfwatch.cli.main import main
main(sys.argv[1:], prog_name="perfwatch")
"""


def write_history(path: Path, runs: int, metrics: int, seed: int) -> list[str]:
    """An Otava-style CSV of nightly-like runs ending yesterday; the metric names."""
    rng = np.random.default_rng(seed)
    names = [f"metric_{index:03d}" for index in range(metrics)]
    columns = []
    for index in range(metrics):
        level = 50.0 + 10.0 * index
        values = level * (1 + 0.02 * rng.standard_normal(runs))
        for start in rng.choice(np.arange(runs // 10, runs - runs // 10), 3, replace=False):
            values[start:] *= 1 + rng.choice([-1, 1]) * rng.uniform(0.05, 0.15)
        columns.append(values)
    first = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=runs + 24)
    with path.open("w") as out:
        out.write(",".join(["time", "commit", "version", *names]) + "\n")
        for run in range(runs):
            stamp = (first + timedelta(hours=run)).strftime("%Y-%m-%dT%H:%M:%SZ")
            cells = [stamp, f"{run * 2654435761 % 2**160:040x}", f"1.{run // 100}.{run % 100}"]
            cells += [f"{column[run]:.3f}" for column in columns]
            out.write(",".join(cells) + "\n")
    return names


def write_otava_config(path: Path, tests: dict[str, tuple[Path, list[str]]]) -> None:
    lines = ["tests:"]
    for name, (csv_file, metrics) in tests.items():
        lines += [
            f"  {name}:",
            "    type: csv",
            f"    file: {csv_file}",
            "    time_column: time",
            "    attributes: [commit, version]",
            f"    metrics: [{', '.join(metrics)}]",
        ]
    path.write_text("\n".join(lines) + "\n")


def timed_run(command: Sequence[str | Path]) -> tuple[float, str]:
    """Wall time of the whole process, and its stderr."""
    start = time.perf_counter()
    done = subprocess.run(
        [str(part) for part in command], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(map(str, command))} failed:\n{done.stderr.decode()}")
    return elapsed, done.stderr.decode()


def interleaved_runs(
    commands: dict[str, list[str | Path]], repeats: int
) -> dict[str, list[tuple[float, str]]]:
    for command in commands.values():
        timed_run(command)  # untimed: compile caches, byte code
    runs: dict[str, list[tuple[float, str]]] = {name: [] for name in commands}
    for _ in range(repeats):
        for name, command in commands.items():
            runs[name].append(timed_run(command))
    return runs


def otava_command(requested: str | None) -> str:
    command = requested or os.environ.get("PERFWATCH_OTAVA_BIN") or "otava"
    found = shutil.which(command)
    if found is None:
        sys.exit(
            f"no otava command {command!r}: give --otava PATH or PERFWATCH_OTAVA_BIN "
            "(pip install apache-otava==0.8.0 in a virtualenv of its own)"
        )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--otava", help="otava command [$PERFWATCH_OTAVA_BIN, else otava]")
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--metrics", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--help-repeats", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    args = parser.parse_args()

    otava = otava_command(args.otava)
    perfwatch = Path(sys.executable).parent / "perfwatch"
    if not perfwatch.exists():
        sys.exit(f"no perfwatch script next to {sys.executable}: pip install -e . first")

    with tempfile.TemporaryDirectory(prefix="bench-cli-analyze-") as folder:
        big = Path(folder) / "history.csv"
        big_metrics = write_history(big, args.runs, args.metrics, args.seed)
        example_metrics = EXAMPLE_CSV.read_text().splitlines()[0].split(",")[3:6]
        config = Path(folder) / "otava.yaml"
        write_otava_config(
            config, {"history": (big, big_metrics), "nightly": (EXAMPLE_CSV, example_metrics)}
        )
        otava_analyze = [otava, "analyze", "--config-file", config, "--since", OTAVA_SINCE]
        cases: dict[str, tuple[list[str | Path], str]] = {
            f"{args.runs} runs x {args.metrics} metrics": (["analyze", big], "history"),
            "examples/nightly.csv": (["analyze", EXAMPLE_CSV], "nightly"),
        }
        report: dict[str, dict[str, float]] = {}
        print(f"machine load average (1 min) at start: {os.getloadavg()[0]:.2f}\n")
        print(
            f"{'file':<26} {'perfwatch':>10} {'otava':>8} {'ratio':>6}   "
            f"{'kernel load':>11} {'without it':>10} {'ratio':>6}"
        )
        for label, (perfwatch_args, otava_test) in cases.items():
            runs = interleaved_runs(
                {
                    "perfwatch": [perfwatch, *perfwatch_args],
                    "after kernel load": [
                        sys.executable,
                        "-c",
                        ANALYZE_AFTER_KERNEL_LOAD,
                        *perfwatch_args,
                    ],
                    "otava": [*otava_analyze, otava_test],
                },
                args.repeats,
            )
            ours = statistics.median(wall for wall, _ in runs["perfwatch"])
            theirs = statistics.median(wall for wall, _ in runs["otava"])
            kernel_loads = [float(err.split()[0]) for _, err in runs["after kernel load"]]
            without = statistics.median(
                wall - load
                for (wall, _), load in zip(runs["after kernel load"], kernel_loads, strict=True)
            )
            kernel_load = statistics.median(kernel_loads)
            report[label] = {
                "perfwatch_s": ours,
                "otava_s": theirs,
                "ratio": theirs / ours,
                "kernel_load_s": kernel_load,
                "perfwatch_without_kernel_load_s": without,
                "ratio_without_kernel_load": theirs / without,
            }
            print(
                f"{label:<26} {ours:>9.3f}s {theirs:>7.3f}s {theirs / ours:>5.1f}x   "
                f"{kernel_load:>10.3f}s {without:>9.3f}s {theirs / without:>5.1f}x"
            )

    helps = interleaved_runs(
        {"--help": [perfwatch, "--help"], "analyze --help": [perfwatch, "analyze", "--help"]},
        args.help_repeats,
    )
    print()
    for name, runs in helps.items():
        times = [wall for wall, _ in runs]
        report[f"perfwatch {name}"] = {"median_s": statistics.median(times), "max_s": max(times)}
        median, longest = statistics.median(times), max(times)
        print(f"perfwatch {name:<16} median {median:.3f} s, max {longest:.3f} s")
    print(f"\nmachine load average (1 min) at end: {os.getloadavg()[0]:.2f}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
