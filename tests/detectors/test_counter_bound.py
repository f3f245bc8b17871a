"""The oracle bound on the web-shop study (benchmarks/bound_counters_shop.py): each
regression's statistic is computed alike on the good, noisy and regression runs, and the
hindsight count flags at most one null run."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bound_counters_shop import SCORES, _directions, caught_with_hindsight, evaluate
from counter_shop import REGRESSIONS, generate_study


def test_directions_follow_the_mechanism() -> None:
    seed = generate_study(1).regression_seeds["memory"]
    directions = dict(zip(REGRESSIONS["memory"].changed, _directions("memory", seed), strict=True))
    assert directions[REGRESSIONS["memory"].main[0]] == 1.0
    assert directions[next(n for n in directions if n.endswith("Available MBytes"))] == -1.0


def test_every_regression_is_judged_on_its_own_run_and_every_null_run() -> None:
    rows = evaluate(1)
    for key in REGRESSIONS:
        mine = [r for r in rows if r["regression"] == key]
        assert [r["kind"] for r in mine].count("regression") == 1
        assert [r["kind"] for r in mine].count("good") == 6
        assert [r["kind"] for r in mine].count("noisy") == 1
        for row in mine:
            for score in (*SCORES, "best", "detector"):
                assert 0.0 <= float(row[score]) <= 1.0, (key, row["run"], score)
            assert row["best"] == min(row[s] for s in SCORES)


def test_hindsight_threshold_allows_one_null_run() -> None:
    rows = [
        {"regression": "r", "kind": "good", "best": 0.001},
        {"regression": "r", "kind": "good", "best": 0.01},
        {"regression": "r", "kind": "noisy", "best": 0.5},
        {"regression": "r", "kind": "regression", "best": 0.005},  # between: caught
        {"regression": "r", "kind": "regression", "best": 0.01},  # ties the cut: not
        {"regression": "other", "kind": "regression", "best": 0.0},
    ]
    assert caught_with_hindsight(rows, "r", "best") == 1
