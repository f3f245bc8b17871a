"""Time and memory of the clustered-counter check at the scale of a big system's counters.

    python benchmarks/bench_counters.py [--counters 1000] [--observations 600] [--runs 6]

For each size: ``runs`` good runs and one target of that many counters x observations,
checked as ``perfwatch compare --calibrate`` does it with default parameters: the
threshold calibrated by leaving each good run out in turn (``runs`` extra fits and
checks), then one fit on all of them and the check of the target. Times are the
process's CPU seconds (the wall time of the whole is printed too): on a shared machine
the wall time measures the other users' load as much as this code; run with
OPENBLAS_NUM_THREADS=1 to keep BLAS threads from spinning on a busy machine. Printed:
the time of each phase, the time to read the runs' perfmon files, the process's peak
resident memory, and where the time goes by step (filtering, redundancy removal,
clustering, model fits, prediction and errors, the KS statistics), from a profile of the
same work; the rest is the check's bookkeeping. The data: counters in groups driven by
shared latent factors (one group per ten counters), some nearly copies of another, some
noisy.

References, measured in the same run:

- with ``--reference SRC``: the same work by the perfwatch whose sources are under SRC
  (another checkout, e.g. ``git worktree add /tmp/perfwatch-main main``, SRC =
  ``/tmp/perfwatch-main/src``), in a process of its own, and the largest relative
  difference between its results and these (the calibration's errors, both checks' JSON);
- calibration as separate fits, one per left-out run, each preparing (steady state,
  blocks) its runs again: what the shared preparation saves;
- the paper's steps read literally (``CounterRegressionCheck.seed_literal()``: sample
  by sample, no deviations), calibrated and checked the same way;
- reading a perfmon file with every cell through the careful per-cell parser;
- the redundancy analysis done literally (refit a regression of every counter on the
  others after each removal, statsmodels OLS) on 40 counters, against the inverse-matrix
  downdates that fit uses.
"""

from __future__ import annotations

import argparse
import cProfile
import math
import os
import pstats
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import statsmodels.api as sm
from sklearn.base import clone

from perfwatch.detectors.counter_steps import (
    RedundancyStep,
    correlation_matrix,
    redundancy_analysis,
)
from perfwatch.detectors.counters import CounterRegressionCheck, CounterSamples
from perfwatch.readers.counter_csv import read_counter_runs
from perfwatch.readers.perfmon_csv import csv_rows, parse_sample


def counters(seed: int, count: int, observations: int) -> CounterSamples:
    """``count`` counters driven by ``count // 10`` latent AR(1) factors."""
    rng = np.random.default_rng(seed)
    groups = max(1, count // 10)
    factors = np.empty((observations, groups))
    factors[0] = rng.normal(size=groups)
    for t in range(1, observations):
        factors[t] = 0.9 * factors[t - 1] + 0.44 * rng.normal(size=groups)
    structure = np.random.default_rng(0)  # the same counters in every run
    group = structure.integers(0, groups, count)
    loading = structure.uniform(0.5, 2.0, count)
    noise = structure.choice([0.05, 0.3, 1.0], count, p=[0.2, 0.5, 0.3])
    level = structure.uniform(10, 1000, count)
    values = level * (
        1 + 0.1 * (loading * factors[:, group] + noise * rng.normal(size=(observations, count)))
    )
    return CounterSamples(
        [f"\\\\bench\\Object({i // 50})\\Counter {i}" for i in range(count)], values
    )


def literal_redundancy(values: np.ndarray, threshold: float) -> list[int]:
    """The redundancy analysis loop of the clustered-counters paper (Shang et al.) as
    written: one OLS per remaining counter per removal."""
    present = list(range(values.shape[1]))
    removed = []
    while len(present) > 1:
        r2 = [
            sm.OLS(values[:, c], sm.add_constant(values[:, [o for o in present if o != c]]))
            .fit()
            .rsquared
            for c in present
        ]
        best = int(np.argmax(r2))
        if r2[best] <= threshold:
            return removed
        removed.append(present.pop(best))
    return removed


# step -> functions whose cumulative profiled time it is (none calls another's): functions
# of perfwatch's counter modules by name; "statsmodels.fit": the OLS each cluster reports
STEPS = {
    "filtering (missing, steady state, constant, run identities)": [
        "_drop_mostly_missing",
        "_prepare_run",
        "_drop_run_identities",
    ],
    "redundancy removal (correlations, identities, redundancy analysis)": [
        "_collapse_identities",
        "_remove_redundant",
    ],
    "clustering (distances, linkage, cut, lone counters)": [
        "cluster_counters",
        "merge_singletons",
        "_attach",
    ],
    "robust fits (outlier blocks screened per cluster)": ["_typical_rows"],
    "per-model fits, every run left out (stacked inverse Gram matrices)": ["_leave_one_run_out"],
    "per-model predictions (all candidates, full and decoupled)": ["predict"],
    "block errors and their statistics (trimmed mean, variance)": [
        "percentage_error_blocks",
        "error_statistics",
    ],
    "decision rule (tests per model and good run, tail, correction)": [
        "excess_error_tests",
        "_usual_errors",
        "tail_inflation",
        "deflate",
        "familywise",
    ],
    "reported model (OLS of each cluster's dependent)": ["_design", "statsmodels.fit"],
    "KS statistics (baseline spread, dependent's KS)": ["_spread", "ks_2samp"],
}


def run_check(
    baseline: list[CounterSamples], target: CounterSamples, check: CounterRegressionCheck
) -> dict[str, Any]:
    """Calibrate on the baseline, fit it and check the target as ``compare --calibrate``
    does (the calibration's runs read apart from the baseline's, so nothing prepared is
    shared): CPU seconds per phase, the wall time of all three; then the p-value check
    that ``compare`` runs by default (its fit leaves each baseline run out in turn), CPU
    seconds of its fit and check; and what they found ("result": the calibration's
    errors, the calibrated check's and the p-value check's JSON)."""
    wall = time.perf_counter()
    started = time.process_time()
    check.calibrate(baseline)
    calibrated = time.process_time()
    check.fit(baseline)
    fitted = time.process_time()
    result = check.check(target)
    done = time.process_time()
    wall = time.perf_counter() - wall
    default = clone(check).fit(baseline).check(target)
    default_done = time.process_time()
    return {
        "calibrate": calibrated - started,
        "fit": fitted - calibrated,
        "check": done - fitted,
        "total": done - started,
        "wall": wall,
        "default": default_done - done,
        "result": {
            "calibration": check.calibration_["largest_excess_errors"],
            "check": result.to_dict(),
            "pvalue": default.to_dict(),
        },
    }


def largest_difference(ours: object, theirs: object, where: str = "") -> tuple[float, str]:
    """The largest relative difference between two JSON documents' numbers, and where;
    (inf, where) at the first difference of anything else."""
    if isinstance(ours, dict) and isinstance(theirs, dict) and ours.keys() == theirs.keys():
        pairs = [(ours[k], theirs[k], f"{where}/{k}") for k in ours]
    elif isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        pairs = [(a, b, f"{where}[{i}]") for i, (a, b) in enumerate(zip(ours, theirs, strict=True))]
    elif isinstance(ours, float) and isinstance(theirs, float):
        return abs(ours - theirs) / max(abs(ours), abs(theirs), 1e-300), where
    else:
        return (0.0, where) if ours == theirs else (math.inf, where)
    return max((largest_difference(a, b, w) for a, b, w in pairs), default=(0.0, where))


def reference(source: Path, count: int, observations: int, runs: int) -> dict[str, Any]:
    """``run_check`` with default parameters by the perfwatch under ``source`` (the
    ``src`` directory of another checkout), in a process of its own."""
    with tempfile.TemporaryDirectory() as directory:
        output = Path(directory) / "reference.json"
        command = [sys.executable, __file__, "--counters", str(count)]
        command += ["--observations", str(observations), "--runs", str(runs)]
        subprocess.run(
            [*command, "--phases-to", str(output)],
            check=True,
            env={**os.environ, "PYTHONPATH": str(source)},
        )
        return orjson.loads(output.read_bytes())


def data(count: int, observations: int, runs: int) -> tuple[list[CounterSamples], CounterSamples]:
    baseline = [counters(seed, count, observations) for seed in range(1, runs + 1)]
    return baseline, counters(runs + 1, count, observations)


def separate_fits(baseline: list[CounterSamples], check: CounterRegressionCheck) -> float:
    """The calibration's leave-one-out as independent fits (nothing shared): CPU seconds."""
    started = time.process_time()
    for i, run in enumerate(baseline):
        clone(check).fit(baseline[:i] + baseline[i + 1 :]).check(run)
    return time.process_time() - started


def breakdown(profile: cProfile.Profile) -> dict[str, float]:
    """Cumulative profiled seconds per step (STEPS) and of the whole."""
    profiled = pstats.Stats(profile)
    by_name: dict[str, float] = {}
    for (filename, _, name), (_, _, _, cumulative, _) in profiled.stats.items():  # type: ignore[attr-defined]
        if "statsmodels" in filename and name == "fit":
            name = "statsmodels.fit"
        elif "numpy" in filename and name == "pinv":
            name = "numpy.pinv"
        elif "perfwatch/detectors/counter" not in filename and name != "ks_2samp":
            continue
        by_name[name] = by_name.get(name, 0.0) + cumulative
    steps = {step: sum(by_name.get(n, 0.0) for n in names) for step, names in STEPS.items()}
    steps["whole"] = profiled.total_tt  # type: ignore[attr-defined]
    return steps


def timed(action: Callable[[], object]) -> float:
    """CPU seconds of ``action``."""
    started = time.process_time()
    action()
    return time.process_time() - started


def write_perfmon(path: Path, samples: CounterSamples) -> None:
    """The run as typeperf writes it (its names are counter paths; every cell quoted)."""
    header = ["(PDH-CSV 4.0) (Coordinated Universal Time)(0)", *samples.names]
    lines = [",".join(f'"{cell}"' for cell in header)]
    for i, row in enumerate(samples.values.tolist()):
        lines.append(",".join(f'"{cell}"' for cell in [str(i), *map(repr, row)]))
    path.write_text("\n".join(lines) + "\n")


def reading(samples: CounterSamples) -> tuple[float, float]:
    """Seconds to read one perfmon file of the run, and to read it cell by cell with
    ``parse_sample`` (every cell through the careful parser: the reference)."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "run.csv"
        write_perfmon(path, samples)
        fast = timed(lambda: read_counter_runs(path))

        def careful() -> None:
            for line, row in csv_rows(path)[1:]:
                values = [parse_sample(path, line, c, cell) for c, cell in enumerate(row[1:], 2)]
                assert not any(map(math.isinf, values))

        return fast, timed(careful)


def measure(count: int, observations: int, runs: int, previous: Path | None) -> None:
    baseline, target = data(count, observations, runs)
    read_s, careful_s = reading(target)
    ours = run_check(baseline, target, CounterRegressionCheck())
    separate = separate_fits(baseline, CounterRegressionCheck())
    literal = run_check(baseline, target, CounterRegressionCheck.seed_literal())
    profile = cProfile.Profile(time.process_time)
    profile.runcall(run_check, baseline, target, CounterRegressionCheck())
    steps = breakdown(profile)

    print(
        f"\n{count} counters x {observations} samples, {runs} good runs + a target "
        f"(calibration: {runs} leave-one-out fits and checks)"
    )
    print(
        f"  calibrate {ours['calibrate']:.2f} s, fit {ours['fit']:.2f} s, "
        f"check {ours['check']:.2f} s: total {ours['total']:.2f} CPU s "
        f"({ours['wall']:.2f} s wall)"
    )
    print(
        f"  the p-value check compare runs by default (each baseline run left out of "
        f"the fit in turn), fit and check: {ours['default']:.2f} CPU s"
    )
    print(
        f"  calibration as separate fits: {separate:.2f} s "
        f"(shared preparation {separate / ours['calibrate']:.2f}x faster)"
    )
    print(
        f"  the paper's steps read literally, same work: {literal['total']:.2f} s "
        f"(calibrate {literal['calibrate']:.2f} s; ratio default / literal "
        f"{ours['total'] / literal['total']:.2f})"
    )
    print(
        f"  reading one run's perfmon CSV: {read_s:.2f} s ({runs + 1} files: "
        f"{(runs + 1) * read_s:.2f} s); every cell through the careful parser "
        f"{careful_s:.2f} s ({careful_s / read_s:.1f}x the reader)"
    )
    if previous is not None:
        theirs = reference(previous, count, observations, runs)
        difference, where = largest_difference(ours["result"], theirs["result"])
        print(
            f"  the implementation under {previous}, same work: calibrate "
            f"{theirs['calibrate']:.2f} s, fit {theirs['fit']:.2f} s, check "
            f"{theirs['check']:.2f} s: total {theirs['total']:.2f} CPU s (this one "
            f"{theirs['total'] / ours['total']:.2f}x faster); the default p-value check "
            f"{theirs['default']:.2f} CPU s (this one "
            f"{theirs['default'] / ours['default']:.2f}x faster); largest relative difference "
            f"in any reported number {difference:.1e} ({where or 'none'})"
        )
    whole = steps.pop("whole")
    print(f"  by step (profiled, {whole:.2f} CPU s under the profiler):")
    for step, seconds in steps.items():
        print(f"    {step:<68} {seconds:>7.2f} s {100 * seconds / whole:>5.1f}%")
    covered = sum(steps.values())
    print(f"    {'the rest':<68} {whole - covered:>7.2f} s {100 - 100 * covered / whole:>5.1f}%")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--counters", type=int, nargs="+", default=[1000])
    parser.add_argument("--observations", type=int, default=600)
    parser.add_argument("--runs", type=int, default=6, help="good runs (at least 2)")
    parser.add_argument(
        "--reference-counters",
        type=int,
        default=40,
        help="size of the literal redundancy analysis measured for reference (slow)",
    )
    parser.add_argument(
        "--reference",
        type=Path,
        help="the src directory of another perfwatch checkout (git worktree add "
        "/tmp/perfwatch-main main: /tmp/perfwatch-main/src) to time and compare in the same run",
    )
    parser.add_argument("--phases-to", type=Path, help=argparse.SUPPRESS)  # the reference's run
    args = parser.parse_args(argv)
    if args.phases_to is not None:
        baseline, target = data(args.counters[0], args.observations, args.runs)
        phases = run_check(baseline, target, CounterRegressionCheck())
        args.phases_to.write_bytes(orjson.dumps(phases))
        return 0
    for count in args.counters:
        measure(count, args.observations, args.runs, args.reference)
    resident = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\nprocess peak resident memory: {resident:.0f} MB")

    smallest = args.reference_counters
    values = counters(1, smallest, args.observations).values
    literal: list[int] = []
    literal_s = timed(lambda: literal.extend(literal_redundancy(values, 0.9)))
    steps: list[RedundancyStep] = []
    downdates_s = timed(lambda: steps.extend(redundancy_analysis(correlation_matrix(values), 0.9)))
    same = [step.index for step in steps] == literal
    print(
        f"redundancy analysis of {smallest} counters: refit per counter per removal "
        f"{literal_s:.2f} s, inverse downdates {downdates_s:.4f} s "
        f"({literal_s / downdates_s:.0f}x faster; same removals: {'yes' if same else 'NO'})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
