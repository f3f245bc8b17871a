"""How soon a step is suspected (EarlyWarning) and detected (E-Divisive), and how often
stable runs are suspected.

    python benchmarks/eval_early_warning.py --seeds 1000:1060 [--log] [--json out.json]

Each series is a level (1 to 10 000) with noise of 0.5-4 % of it from one of the
families of ``perf_histories`` (Gaussian, lognormal, bimodal, Student t df 3, all of
unit variance), 60-200 stable runs, then a step of 1, 2, 3 or 5 noise standard
deviations either way and 30 runs more.  Runs arrive one at a time, as on a stream:

- suspected: at each run the detector is fitted on every run before the newest two and
  judges those two; the delay is the first run whose alarm fires (1 = the first
  changed run).  Three detectors in the same run: ``EarlyWarning()`` (fitted Student t
  tails), ``EarlyWarning(tails="normal")`` (Gaussian tails, the detector before tails
  were fitted) and a fixed rule, a run more than 3 MAD-scales from the median;
- detected: ``SeriesAnalyzer`` with default parameters gets one run per ``append``; the
  delay is the first run after which a change point lies within 5 runs of the step;
- CUSUM's limit: a two-sided CUSUM that knows the level, the noise and the step size
  (reference k = step / 2, limit h for one false alarm per 1 000 runs on Gaussian
  noise), started at the step;
- false suspicions: the same protocol over 300 stable runs after the history (no step),
  per 1 000 runs;
- one-run limit: the share of 5 sigma steps that any one-run rule knowing the noise's
  exact distribution flags on the first changed run while flagging 2 stable runs in
  1 000 (the target), from 4 million noise draws.

A cell's seeds draw its own series: (family, step, seed) seeds the generator.
docs/edivisive.md quotes the output.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from perf_histories import NOISE_FAMILIES, unit_noise
from perfwatch.detectors import EarlyWarning, SeriesAnalyzer

STEPS = (1.0, 2.0, 3.0, 5.0)
TARGET_FALSE_RATE = 0.002
AFTER = 30
STABLE_AFTER = 300
MATCH = 5
CUSUM_ARL0 = 1000.0


def series(family: str, step: float, seed: int) -> tuple[np.ndarray, int, float, float]:
    """(values, index of the first changed run, level, noise sd)."""
    rng = np.random.default_rng([NOISE_FAMILIES.index(family), int(step * 10), seed])
    n0 = int(rng.integers(60, 201))
    level = float(np.exp(rng.uniform(0.0, np.log(10_000.0))))
    sd = level * float(rng.uniform(0.005, 0.04))
    after = AFTER if step else STABLE_AFTER
    shift = np.where(np.arange(n0 + after) >= n0, step * float(rng.choice([-1.0, 1.0])), 0.0)
    return level + sd * (shift + unit_noise(rng, family, n0 + after)), n0, level, sd


class ThreeMad:
    """The simple baseline: a run more than 3 normal-consistent MADs from the median."""

    def fit(self, segment: np.ndarray) -> ThreeMad:
        self.center = float(np.median(segment))
        self.scale = 1.4826 * float(np.median(np.abs(segment - self.center)))
        return self

    def alarms(self, runs: np.ndarray) -> np.ndarray:
        return (np.abs(runs - self.center) > 3.0 * self.scale).astype(np.int8)


Detector = EarlyWarning | ThreeMad


def detectors(log: bool) -> dict[str, Detector]:
    return {
        "fitted tails": EarlyWarning(log=log),
        "Gaussian tails": EarlyWarning(tails="normal", log=log),
        "3 MAD": ThreeMad(),
    }


def one_run_limit(family: str, step: float = 5.0, rate: float = TARGET_FALSE_RATE) -> float:
    """The share of `step`-sigma steps either way beyond the noise's exact two-sided
    `rate` limits on their first run (the best any one-run rule can do)."""
    noise = unit_noise(np.random.default_rng([NOISE_FAMILIES.index(family), 99]), family, 4_000_000)
    low, high = np.quantile(noise, [rate / 2, 1 - rate / 2])
    return float((np.mean(noise + step > high) + np.mean(noise - step < low)) / 2)


def suspected_at(ew: Detector, values: np.ndarray, t: int) -> bool:
    """Whether run t raises a suspicion: fitted on the runs before t - 1, judging t - 1 and t."""
    return bool(ew.fit(values[: t - 1]).alarms(values[t - 1 : t + 1])[-1])


def suspected_delay(ew: Detector, values: np.ndarray, n0: int) -> int | None:
    for t in range(n0, values.shape[0]):
        if suspected_at(ew, values, t):
            return t - n0 + 1
    return None


def detected_delay(values: np.ndarray, n0: int) -> int | None:
    analyzer = SeriesAnalyzer()
    analyzer.append(values[:n0])
    for t in range(n0, values.shape[0]):
        if any(abs(cp.index - n0) <= MATCH for cp in analyzer.append(values[t : t + 1])):
            return t - n0 + 1
    return None


def cusum_limit(k: float) -> float:
    """h whose two-sided zero-start ARL0 is CUSUM_ARL0 (Siegmund's approximation)."""

    def arl0(h: float) -> float:
        b = h + 1.166
        one_side = (math.exp(2 * k * b) - 2 * k * b - 1) / (2 * k * k)
        return one_side / 2

    low, high = 0.0, 50.0
    for _ in range(100):
        mid = (low + high) / 2
        low, high = (mid, high) if arl0(mid) < CUSUM_ARL0 else (low, mid)
    return (low + high) / 2


def cusum_delay(z: np.ndarray, k: float, h: float) -> int | None:
    up = down = 0.0
    for i, zi in enumerate(z):
        up, down = max(0.0, up + zi - k), max(0.0, down - zi - k)
        if up > h or down > h:
            return i + 1
    return None


def summary(delays: list[int | None]) -> dict[str, float]:
    caught = np.array([d for d in delays if d is not None], dtype=float)
    # a series never flagged counts as later than any flagged one
    padded = np.concatenate([caught, np.full(len(delays) - caught.size, np.inf)])
    return {
        "median": float(np.median(padded)),
        "p90": float(np.quantile(padded, 0.9, method="higher")),
        "flagged_pct": 100.0 * caught.size / len(delays),
    }


def evaluate(seeds: range, log: bool) -> dict[str, dict[str, object]]:
    results: dict[str, dict[str, object]] = {}
    for family in NOISE_FAMILIES:
        row: dict[str, object] = {"one_run_limit_5": one_run_limit(family)}
        false: dict[str, float] = {}
        for name, ew in detectors(log).items():
            alarms = runs = 0
            for seed in seeds:
                values, n0, _, _ = series(family, 0.0, seed)
                for t in range(n0, values.shape[0]):
                    alarms += suspected_at(ew, values, t)
                runs += values.shape[0] - n0
            false[name] = 1000.0 * alarms / runs
        row["false_per_1000"] = false
        for step in STEPS:
            sus: dict[str, list[int | None]] = {name: [] for name in detectors(log)}
            det, cus = [], []
            k = step / 2
            h = cusum_limit(k)
            for seed in seeds:
                values, n0, level, sd = series(family, step, seed)
                for name, ew in detectors(log).items():
                    sus[name].append(suspected_delay(ew, values, n0))
                det.append(detected_delay(values, n0))
                cus.append(cusum_delay((values[n0:] - level) / sd, k, h))
            row[f"{step:g}"] = {
                "suspected": {name: summary(d) for name, d in sus.items()},
                "detected": summary(det),
                "cusum": summary(cus),
            }
        results[family] = row
        print(f"{family}: done", file=sys.stderr)
    return results


def fmt(s: dict[str, float]) -> str:
    def one(v: float) -> str:
        return "-" if math.isinf(v) else f"{v:g}"

    return f"{one(s['median'])} / {one(s['p90'])} ({s['flagged_pct']:.0f} %)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1000:1060", help="a:b, the seed range")
    parser.add_argument("--log", action="store_true", help="EarlyWarning(log=True)")
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args()
    a, b = (int(v) for v in args.seeds.split(":"))
    results = evaluate(range(a, b), args.log)
    names = list(detectors(args.log))
    print(f"seeds {a}:{b} ({b - a} series per cell), log={args.log}")
    print("median / 90th pct runs until flagged (% flagged within 30 runs)\n")
    print(
        "| noise | step | "
        + " | ".join(f"suspected, {name}" for name in names)
        + " | detected (E-Divisive) | CUSUM limit |"
    )
    print("|---|---:|" + "---|" * (len(names) + 2))
    for family, row in results.items():
        for step in STEPS:
            cell = row[f"{step:g}"]
            assert isinstance(cell, dict)
            suspected = " | ".join(fmt(cell["suspected"][name]) for name in names)
            print(
                f"| {family} | {step:g}σ | {suspected} | "
                f"{fmt(cell['detected'])} | {fmt(cell['cusum'])} |"
            )
    print(
        "\n| noise | false suspicions / 1 000 stable runs: "
        + " | ".join(names)
        + " | 5σ flagged on run 1 by the exact one-run rule at 2 / 1 000 |"
    )
    print("|---|" + "---:|" * (len(names) + 1))
    for family, row in results.items():
        false = row["false_per_1000"]
        assert isinstance(false, dict)
        rates = " | ".join(f"{false[name]:.2f}" for name in names)
        print(f"| {family} | {rates} | {row['one_run_limit_5']:.2f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
