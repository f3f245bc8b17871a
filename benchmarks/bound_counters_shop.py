"""How many of the web-shop study's regressions a test that knows them could catch.

    python benchmarks/bound_counters_shop.py [--seeds 301-320] [--jobs N]

The targets of the counter check ask, on ``counter_shop.py``'s study, for every regression
whose effect exceeds the good runs' run-to-run variation to be caught in 18 of 20 seeds
with at most one false alarm on the 140 good and noisy-but-good runs. This script asks
how far a test gets that is told what the check is not: per regression, which counters
it changes (the generator's truth) and in which direction (the same seed without the
regression). Each such oracle is one statistic per run, computed alike on the good runs
(each against the other five), on the noisy run and on the regression's own run (against
all six), and it is given the threshold that flags at most one of the 140 good and noisy
runs for that regression (chosen with hindsight, per regression: more lenient than any
rule that must work without knowing the regression).

Scores per changed counter, from the runs' steady-state block means:
  * level: the counter's level (the median block, relative to the baseline's mean)
    against the good runs' levels, one-sided t with k - 1 df in the known direction;
  * the same on the residuals of a linear model fitted on the good runs (each left out of
    its own fit), either on the workload counters (``WORKLOAD`` of the evaluation: request
    rates and what the application asks per request) or on every counter the regression
    leaves alone (an oracle's predictors: they cannot carry the regression);
  * error: such a model's trimmed percentage error judged as the check judges its models'
    errors (within- and between-run variation).
An oracle's run statistic is the smallest p-value over the changed counters ("joint": the
mean of the changed counters' t statistics instead); "best" takes the smallest over every
score too. Any statistic computed alike on every run is a fair ranking here, since each
is given its own threshold. The detector's own run p-value (default rule) is given
the same per-regression hindsight threshold for comparison.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scipy import stats

from counter_shop import COUNTERS, REGRESSIONS, SAMPLES, generate_study, simulate_run
from eval_counters_shop import (
    WORKLOAD,
    evaluate_seed,
    held_out_t,
    linear_model,
    model_error_pvalues,
    steady_blocks,
)

SCORES = (
    "level",
    "level, joint",
    "workload level",
    "workload level, joint",
    "workload error",
    "unaffected level",
    "unaffected level, joint",
    "unaffected error",
)


def _directions(key: str, seed: int) -> np.ndarray:
    """+1 / -1 per changed counter: how the regression moves its mean over the run's
    middle (the same seed without it as the reference)."""
    columns = [COUNTERS.index(name) for name in REGRESSIONS[key].changed]
    middle = slice(SAMPLES // 5, SAMPLES - SAMPLES // 10)
    with_change = np.nanmean(simulate_run(seed, regression=key).values[middle, columns], axis=0)
    without = np.nanmean(simulate_run(seed).values[middle, columns], axis=0)
    return np.where(with_change >= without, 1.0, -1.0)


def _scores(
    baseline: list[np.ndarray], target: np.ndarray, key: str, direction: np.ndarray
) -> dict[str, float]:
    """The smallest p-value over the regression's changed counters, per score."""
    changed = [COUNTERS.index(name) for name in REGRESSIONS[key].changed]
    varying = np.ptp(np.vstack(baseline), axis=0) > 0
    predictor_sets = {
        "": [],
        "workload ": [
            j for j in (COUNTERS.index(n) for n in WORKLOAD) if j not in changed and varying[j]
        ],
        "unaffected ": [j for j in range(len(COUNTERS)) if j not in changed and varying[j]],
    }
    mean = np.abs(np.vstack(baseline)).mean(axis=0)[changed]
    k = len(baseline)
    result = {}
    for prefix, predictors in predictor_sets.items():
        fits = [
            linear_model(baseline[:i] + baseline[i + 1 :], run, changed, predictors)
            for i, run in enumerate(baseline)
        ]
        fits.append(linear_model(baseline, target, changed, predictors))  # the target last
        levels = np.array([np.median(y - p, axis=0) / mean for y, p in fits]) * direction
        t = held_out_t(levels)
        result[prefix + "level"] = float(np.min(stats.t.sf(t, k - 1)))
        # the changed counters together: their mean t (a rank, not a p-value)
        result[prefix + "level, joint"] = float(stats.t.sf(np.mean(t), k - 1))
        if not prefix:
            continue  # a model of the mean alone has no error beyond the noise
        result[prefix + "error"] = float(np.min(model_error_pvalues(fits, 0.1 * mean)))
    result["best"] = min(result.values())
    return result


def evaluate(seed: int) -> list[dict[str, object]]:
    """One row per run of the seed's study and regression: the oracles' p-values and the
    detector's own run p-value."""
    study = generate_study(seed)
    detector = {
        row["run"]: row["p-value"]["pvalue"]
        for row in evaluate_seed(seed, {}, ("p-value",))["rows"]
    }
    blocks = [steady_blocks(run) for run in study.good]
    everyone = list(range(len(blocks)))
    targets = [
        (run.label, "good", steady_blocks(run), [j for j in everyone if j != i])
        for i, run in enumerate(study.good)
    ]
    targets.append(("noisy good run", "noisy", steady_blocks(study.noisy_good), everyone))
    targets += [
        (key, "regression", steady_blocks(run), everyone) for key, run in study.regressions.items()
    ]
    rows = []
    for key in REGRESSIONS:
        direction = _directions(key, study.regression_seeds[key])
        for label, kind, target, baseline in targets:
            if kind == "regression" and label != key:
                continue
            pvalue = detector[label]
            rows.append(
                {"seed": seed, "regression": key, "run": label, "kind": kind}
                | _scores([blocks[i] for i in baseline], target, key, direction)
                | {"detector": 1.0 if pvalue is None else float(pvalue)}
            )
    return rows


def caught_with_hindsight(rows: list[dict[str, object]], key: str, score: str) -> int:
    """Regression runs below the largest threshold that flags at most one good or noisy
    run, for this regression's statistic."""
    null = sorted(
        float(r[score]) for r in rows if r["regression"] == key and r["kind"] != "regression"
    )
    cut = null[1] if len(null) > 1 else 1.0
    return sum(
        float(r[score]) < cut for r in rows if r["regression"] == key and r["kind"] == "regression"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="301-320", help="generator seeds, e.g. 301-320")
    parser.add_argument("--jobs", type=int, default=1, help="seeds evaluated in parallel")
    args = parser.parse_args(argv)
    first, _, last = args.seeds.partition("-")
    seeds = list(range(int(first), int(last or first) + 1))
    with multiprocessing.Pool(args.jobs) as pool:
        rows = [row for part in pool.map(evaluate, seeds) for row in part]
    columns = (*SCORES, "best", "detector")
    print(
        f"generator seeds {seeds[0]}-{seeds[-1]} ({len(seeds)}): regressions caught at a"
        " threshold that flags at most one of the good and noisy runs, per regression"
    )
    print()
    print("| regression | " + " | ".join(columns) + " |")
    print("| --- | " + " | ".join("---:" for _ in columns) + " |")
    for key in REGRESSIONS:
        cells = [str(caught_with_hindsight(rows, key, score)) for score in columns]
        print(f"| {key} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
