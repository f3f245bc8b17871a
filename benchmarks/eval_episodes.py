"""The dashboard's series status on regressions that were fixed, partly undone or kept.

    python benchmarks/eval_episodes.py [--seeds 60] [--first-seed 1000]

Each series: 120 nightly runs of a lower-is-better metric with real-machine
noise (Gaussian 1.5 %, heavy-tailed Student-t, or a bimodal runner mix), a
regression of a few % starting between runs 60 and 80 and lasting 5-15 runs,
after which the metric returns to its old level ("fixed"), returns halfway
("partial") or stays ("kept"). The change points are the default detector's;
the status is compared under three rules:

- latest: the direction of the latest change point (the dashboard before
  episodes; a fixed regression shows as "improvement"),
- noise only: a later improvement fixes a regression when the level after it
  is no worse than the old level by more than the noise (one stddev),
- dashboard: the noise and at most half the regression: the episode rule
  (contract.episodes) the dashboard and the verdicts share.

Printed: per noise family, size and outcome, the share of series whose
regression the detector found, and among those the share given the right status
("fixed" for fixed regressions, "regression" otherwise). docs/deploy.md quotes it.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from perfwatch.dashboard.analysis import episodes, status_of
from perfwatch.detectors.edivisive import classify_direction, detect_change_points

RUNS = 120
NOISE = 0.015
SIZES = (0.03, 0.05, 0.10, 0.20)
OUTCOMES = ("fixed", "partial", "kept")


def noise(rng: np.random.Generator, family: str) -> np.ndarray:
    if family == "gaussian":
        return rng.normal(0, NOISE, RUNS)
    if family == "heavy-tailed":
        return NOISE / np.sqrt(3) * rng.standard_t(3, RUNS)
    return rng.normal(0, NOISE * 0.7, RUNS) + 0.03 * (rng.random(RUNS) < 0.3)


def series(rng: np.random.Generator, family: str, size: float, outcome: str) -> np.ndarray:
    level = np.ones(RUNS)
    start = int(rng.integers(60, 81))
    stop = start + int(rng.integers(5, 16))
    level[start:] += size
    level[stop:] -= {"fixed": size, "partial": size / 2, "kept": 0.0}[outcome]
    return 100.0 * level * (1 + noise(rng, family))


def change_points(values: np.ndarray) -> list[dict[str, Any]]:
    return [
        {
            **cp.to_dict(),
            "run_id": str(cp.index),
            "direction": classify_direction(cp.forward_change_percent, "lower_is_better"),
        }
        for cp in detect_change_points(values)
    ]


def latest_rule(cps: Sequence[Mapping[str, Any]]) -> str:
    return str(cps[-1]["direction"]) if cps else "stable"


RULES = {
    "latest": latest_rule,
    "noise only": lambda cps: status_of(episodes(cps, fix_share=None))[0],
    "dashboard": lambda cps: status_of(episodes(cps))[0],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=60)
    parser.add_argument("--first-seed", type=int, default=1000)
    args = parser.parse_args()
    print(f"seeds {args.first_seed}..{args.first_seed + args.seeds - 1}, {RUNS} runs")
    print(
        f"{'noise':13} {'size':>5} {'outcome':8} {'found':>6}  "
        + "  ".join(f"{r:>10}" for r in RULES)
    )
    for family in ("gaussian", "heavy-tailed", "bimodal"):
        for size in SIZES:
            for outcome in OUTCOMES:
                right = dict.fromkeys(RULES, 0)
                found = 0
                for seed in range(args.first_seed, args.first_seed + args.seeds):
                    rng = np.random.default_rng([seed, SIZES.index(size), OUTCOMES.index(outcome)])
                    cps = change_points(series(rng, family, size, outcome))
                    if not any(cp["direction"] == "regression" for cp in cps):
                        continue
                    found += 1
                    wanted = "fixed" if outcome == "fixed" else "regression"
                    for name, rule in RULES.items():
                        right[name] += rule(cps) == wanted
                shares = [
                    f"{right[name] / found:10.0%}" if found else f"{'-':>10}" for name in RULES
                ]
                print(
                    f"{family:13} {size:5.0%} {outcome:8} {found / args.seeds:6.0%}  "
                    + "  ".join(shares)
                )


if __name__ == "__main__":
    main()
